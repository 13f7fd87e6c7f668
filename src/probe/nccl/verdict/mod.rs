//! The verdict of `probe --nccl`, a pure function of the [`Record`]: the prediction is made
//! again from the view the record keeps, with the version of the library that ran and the
//! `NCCL_*` environment of its worker, and put beside what NCCL's files say.//!
//! The run's own finding and the node-wide ones are here; the transports against the
//! prediction in [`transports`], NCCL's topology dump against gdrdoctor's view in [`topology`].

#[cfg(test)]
mod tests;
mod topology;
mod transports;

use topology::topology;
use transports::transports;

use super::{Output, Record, Run, Sums};
use crate::probe::common::{self, WorkerRecord};
use crate::worker::protocol::WorkerError;
use gdrdoctor_checks::model::{NcclFacts, NcclLibrary};
use gdrdoctor_checks::nccl;
use gdrdoctor_checks::nccl::compare::{self, is_rdma};
use gdrdoctor_checks::nccl::env::NcclEnv;
use gdrdoctor_checks::nccl::rule::{decide, Config, System};
use gdrdoctor_checks::nccl::topo_dump::{self, Dump};
use gdrdoctor_checks::paste::nccl::{parse_file, NcclLog};
use gdrdoctor_checks::report::{Finding, Status};

/// NCCL's transports and GDR use against the prediction (the id `compare` uses).
pub const ID: &str = compare::ID;
/// The all-reduce itself.
pub const ID_RUN: &str = "probe.nccl-run";
/// NCCL's topology dump against gdrdoctor's view.
pub const ID_TOPO: &str = "probe.nccl-topology";

/// The subject of a run's node-wide findings.
fn subject(run: &Run) -> String {
    if run.params.label == "default" {
        "node".into()
    } else {
        format!("node/{}", run.params.label)
    }
}

/// Every finding of a record.
pub fn findings(r: &Record) -> Vec<Finding> {
    if let Some(why) = &r.skipped {
        return vec![Finding::new(ID, Status::Skip, "node", why.clone())];
    }
    let mut out = Vec::new();
    for (i, run) in r.runs.iter().enumerate() {
        out.extend(run_findings(r.view.as_ref(), run, i == 0));
    }
    if r.runs.is_empty() {
        out.push(Finding::new(
            ID_RUN,
            Status::Error,
            "node",
            "no nccl run in the record",
        ));
    }
    out
}

/// The rules and environment of one run: the version of the library it loaded
/// (`ncclGetVersion`), the `NCCL_*` variables its worker had.
pub fn config(run: &Run, o: &Output) -> Config {
    let facts = NcclFacts {
        libraries: vec![NcclLibrary {
            path: run.params.library.clone(),
            version: o.version.clone(),
            how: Some("ncclGetVersion in the probe's worker".into()),
            origin: "the library probe --nccl loaded".into(),
            error: (o.version.is_none()).then(|| "ncclGetVersion failed".into()),
        }],
        searched: Vec::new(),
        requested: None,
    };
    let rules = nccl::choose(Some(&facts), None);
    let env = NcclEnv::parse(
        Some(&o.env),
        "the environment of probe --nccl's worker",
        rules.version,
    );
    Config { rules, env }
}

/// `NAME=value` pairs, space separated.
fn env_text<'a>(vars: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let v: Vec<String> = vars.map(|(k, v)| format!("{k}={v}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

/// NCCL's WARN lines in the run's log, in order.
fn warnings(run: &Run) -> Vec<String> {
    run.files
        .log
        .as_deref()
        .map(|t| parse_file(t).warnings.into_iter().map(|w| w.text).collect())
        .unwrap_or_default()
}

/// The findings of a run without output: the worker's error (an NCCL that cannot be loaded is
/// `probe.nccl-run`; everything else `probe.cuda`), the health check, NCCL's WARN lines.
fn problem_findings(run: &Run) -> Vec<Finding> {
    let w: WorkerRecord<(), ()> = WorkerRecord {
        params: None,
        output: None,
        problem: run.problem.clone(),
        health: run.health.clone(),
    };
    let mut out = common::problem_findings(&w, |e| {
        match e {
        WorkerError::LibraryMissing { library, detail } if library.contains("nccl") => {
            Finding::new(
                ID_RUN,
                Status::Error,
                subject(run),
                format!("cannot load nccl: {detail}"),
            )
            .fix("pass --nccl-lib with the libnccl.so.2 your job loads; `gdrdoctor check --only nccl` lists the ones found on this node")
        }
        e => common::worker_error_finding("the nccl probe could not run", e),
    }
    });
    let warns = warnings(run);
    if let Some(f) = out.first_mut() {
        for w in warns.iter().rev().take(3).rev() {
            *f = f.clone().evidence("nccl WARN", w.clone());
        }
    }
    out
}

/// `probe.nccl-run`: did the all-reduce run, and are its sums right.
fn run_finding(run: &Run, o: &Output) -> Finding {
    let subject = subject(run);
    let version = o.version.as_deref().unwrap_or("(version unknown)");
    let n = o.ranks.len();
    let mut f = match (&o.error, &o.sums) {
        (Some(e), _) => {
            let mut f = Finding::new(ID_RUN, Status::Error, &subject, format!("nccl {version} failed: {e}"))
                .fix("read nccl's WARN lines in the evidence (the whole log is in the json report under probe.nccl.runs[].files.log); `gdrdoctor check` for what the node itself lacks (peer memory, memlock, ports)");
            let warns = warnings(run);
            for w in warns.iter().rev().take(3).rev() {
                f = f.evidence("nccl WARN", w.clone());
            }
            f
        }
        (None, Some(Sums {
            expected,
            checked,
            wrong,
            first_wrong,
        })) if *wrong > 0 || *checked == 0 => {
            let first = first_wrong
                .map(|(r, i, v)| format!(" (first: rank {r}, element {i} = {v})"))
                .unwrap_or_default();
            Finding::new(
                ID_RUN,
                Status::Fail,
                &subject,
                format!(
                    "nccl {version}'s all-reduce over {n} gpu(s) returned wrong sums: {wrong} of {checked} checked elements differ from {expected}{first}"
                ),
            )
            .fix("data is corrupted on the way between gpus: check `dmesg` for Xid errors, `nvidia-smi -q -d ECC`, `gdrdoctor probe --p2p` for the links; rerun to see whether the same gpu is wrong")
        }
        (None, Some(s)) => Finding::new(
            ID_RUN,
            Status::Pass,
            &subject,
            format!(
                "nccl {version} ran one all-reduce over {n} gpu(s): all {} checked sums are {}; init {:.0} ms, all-reduce {:.1} ms (channel set-up included)",
                s.checked,
                s.expected,
                o.init_ms.unwrap_or(0.0),
                o.allreduce_ms.unwrap_or(0.0)
            ),
        ),
        (None, None) => Finding::new(
            ID_RUN,
            Status::Error,
            &subject,
            format!("nccl {version} ran but the worker reported no sums"),
        ),
    };
    f = f.evidence("library", format!("{} ({version})", run.params.library));
    let mine = &run.params.env;
    f = f.evidence(
        "environment set by the probe",
        env_text(mine.iter().filter(|(k, _)| !k.ends_with("_FILE"))),
    );
    f.evidence(
        "other NCCL_* variables in effect",
        env_text(o.env.iter().filter(|(k, _)| !mine.contains_key(*k))),
    )
}

/// The device name of NCCL's net index: the `NET/<net> : Using [n]name` list of the log (a
/// plugin's channel lines say `NET/IBext_v8/0` where its list says `NET/IB : Using`: the same
/// device), else the one `<net>` of the dump with that index (RDMA nets sit on a PCI device,
/// socket nets may not).
fn nic_namer<'a>(
    log: &'a NcclLog,
    dump: Option<&'a Dump>,
) -> impl Fn(&str, u32) -> Option<String> + 'a {
    move |net: &str, dev: u32| {
        log.net_device(None, net, dev)
            .filter(|d| is_rdma(&d.net) == is_rdma(net))
            .map(|d| d.name.clone())
            .or_else(|| {
                let d = dump?;
                let hits: Vec<&str> = d
                    .nets
                    .iter()
                    .filter(|n| n.dev == Some(i64::from(dev)))
                    .filter(|n| n.busid.is_some() == is_rdma(net))
                    .map(|n| n.name.as_str())
                    .collect();
                (hits.len() == 1).then(|| hits[0].to_string())
            })
    }
}

/// The RDMA devices NCCL's log lists (`NET/IB : Using [0]mlx5_0:1/IB ..`), each once.
fn rdma_listed(log: &NcclLog) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for d in log.net_devices.iter().filter(|d| is_rdma(&d.net)) {
        if !out.contains(&d.name.as_str()) {
            out.push(&d.name);
        }
    }
    out
}

fn run_findings(view: Option<&System>, run: &Run, first: bool) -> Vec<Finding> {
    let Some(o) = &run.output else {
        return problem_findings(run);
    };
    let mut out = vec![run_finding(run, o)];
    let Some(view) = view else {
        out.push(Finding::new(
            ID,
            Status::Error,
            subject(run),
            "no view of the node in the record: nothing to predict from",
        ));
        return out;
    };
    let text = run.files.log.as_deref().unwrap_or("");
    let dump = run.files.topo_dump.as_deref().and_then(topo_dump::parse);
    let log = parse_file(text);
    let namer = nic_namer(&log, dump.as_ref());
    let gpu = |r: u32| o.ranks.iter().find(|x| x.rank == r).map(|x| x.bdf.clone());
    let obs = compare::observe(&log, &gpu, &namer);
    let cfg = config(run, o);
    let d = decide(view, &cfg);
    if first {
        out.extend(topology(
            view,
            run.files.topo_dump.as_deref(),
            dump.as_ref(),
            o,
            &rdma_listed(&log),
            &d,
        ));
    }
    out.extend(transports(view, &d, run, o, &obs));
    out
}
