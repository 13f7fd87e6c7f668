//! The verdict of `probe --nccl`, a pure function of the [`Record`]: the prediction is made
//! again from the view the record keeps, with the version of the library that ran and the
//! `NCCL_*` environment of its worker, and put beside what NCCL's files say.

use super::{Output, Record, Run, Sums};
use crate::probe::common::{self, WorkerRecord};
use crate::worker::protocol::WorkerError;
use gdrdoctor_checks::model::{NcclFacts, NcclLibrary};
use gdrdoctor_checks::nccl;
use gdrdoctor_checks::nccl::compare::{self, is_rdma, Observation, Observed};
use gdrdoctor_checks::nccl::env::NcclEnv;
use gdrdoctor_checks::nccl::rule::{decide, Config, Decision, System};
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

/// `probe.nccl`: the transports of the channel lines against the prediction.
fn transports(
    view: &System,
    d: &Decision,
    run: &Run,
    o: &Output,
    obs: &Observation,
) -> Vec<Finding> {
    let subject = subject(run);
    let net_only = run.params.label != "default";
    let mut out = Vec::new();
    if obs.channel_lines == 0 {
        if o.error.is_some() {
            return out; // the run finding says why
        }
        if o.ranks.len() < 2 {
            out.push(Finding::new(ID, Status::Skip, &subject, format!(
                "{} gpu in the communicator: nccl connects no gpu pair and uses no network inside the node, nothing to compare",
                o.ranks.len()
            )));
        } else {
            let missing = if run.files.log.is_none() {
                "nccl wrote no log file (NCCL_DEBUG_FILE)"
            } else {
                "nccl's log holds no channel line (`Channel .. via ..`)"
            };
            out.push(Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("{missing}: nothing to compare with the prediction"),
            ));
        }
        return out;
    }
    let why_run = |f: Finding| -> Finding {
        if net_only {
            f.evidence(
                "run",
                "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the probe's second run, which makes nccl connect the gpus of this node through the network",
            )
        } else {
            f
        }
    };
    if !net_only {
        let known = |g: &str| view.gpus.iter().any(|x| x.id == g);
        let pairs: Vec<_> = obs
            .pairs
            .iter()
            .filter(|p| known(&p.a) && known(&p.b))
            .cloned()
            .collect();
        out.extend(compare::compare_p2p(view, d, &pairs));
        for p in obs.pairs.iter().filter(|p| !(known(&p.a) && known(&p.b))) {
            out.push(
                Finding::new(ID, Status::Error, format!("{}|{}", p.a, p.b), format!(
                    "nccl used {} between gpus gdrdoctor does not see on this node: no prediction to compare",
                    p.transport
                ))
                .evidence("nccl (observed)", p.source.clone()),
            );
        }
    }
    let net: Vec<Observed> = obs.net.clone();
    out.extend(compare::compare(view, d, &net).into_iter().map(&why_run));
    if net_only && net.is_empty() {
        let rdma: Vec<&str> = d
            .verdicts
            .iter()
            .filter(|v| v.used)
            .filter_map(|v| view.nics.get(v.nic).map(|n| n.name.as_str()))
            .fold(Vec::new(), |mut acc, n| {
                if !acc.contains(&n) {
                    acc.push(n);
                }
                acc
            });
        let f = if !obs.sockets.is_empty() && !rdma.is_empty() {
            Finding::new(ID, Status::Fail, &subject, format!(
                "with p2p and shared memory off nccl connected the gpus over sockets, not the rdma devices gdrdoctor expects it to use ({})",
                rdma.join(", ")
            ))
            .fix("nccl found no usable rdma device: look for `NET/IB` lines in the log (`No device found`, `ibv_open_device failed`), NCCL_IB_DISABLE / NCCL_NET / NCCL_IB_HCA in the job's environment, and `gdrdoctor check --only rdma`")
            .evidence("nccl (observed)", obs.sockets.iter().take(3).cloned().collect::<Vec<_>>().join(" | "))
        } else if !obs.sockets.is_empty() {
            Finding::new(ID, Status::Pass, &subject, "nccl connected the gpus over sockets, and gdrdoctor expects it to use no rdma device here")
                .evidence("nccl (observed)", obs.sockets.iter().take(3).cloned().collect::<Vec<_>>().join(" | "))
        } else {
            Finding::new(ID, Status::Error, &subject, "nccl's log holds no network channel line although p2p and shared memory were off: nothing to compare")
        };
        out.push(why_run(f));
    }
    out
}

fn pos(sys: &System, id: &str) -> Option<usize> {
    sys.gpus.iter().position(|g| g.id == id)
}

fn cell<T: Copy>(m: &[Vec<Option<T>>], a: usize, b: usize) -> Option<T> {
    m.get(a).and_then(|r| r.get(b)).copied().flatten()
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// `probe.nccl-topology`: NCCL's topology dump against gdrdoctor's view of the node, for the
/// communicator's GPUs and the RDMA devices: one `fail` per disagreement, else one `pass`
/// with both sides.
fn topology(
    view: &System,
    text: Option<&str>,
    dump: Option<&Dump>,
    o: &Output,
    nccl_rdma: &[&str],
    d: &Decision,
) -> Vec<Finding> {
    let dump = match (text, dump) {
        (None, _) => {
            return vec![Finding::new(ID_TOPO, Status::Error, "node", "nccl wrote no topology dump (NCCL_TOPO_DUMP_FILE): nothing to compare with gdrdoctor's view")]
        }
        (Some(_), None) => {
            return vec![Finding::new(ID_TOPO, Status::Error, "node", "nccl's topology dump holds no <system> element: nothing to compare with gdrdoctor's view")]
        }
        (Some(_), Some(x)) => x,
    };
    let ds = dump.system();
    let both = |f: Finding, nccl: String, ours: String| {
        f.evidence("nccl (NCCL_TOPO_DUMP_FILE)", nccl)
            .evidence("gdrdoctor", ours)
    };
    let mut out = Vec::new();
    // The communicator's GPUs, in both.
    let mut gpus: Vec<(String, usize, usize)> = Vec::new();
    for r in &o.ranks {
        match (pos(&ds, &r.bdf), pos(view, &r.bdf)) {
            (Some(a), Some(b)) => gpus.push((r.bdf.clone(), a, b)),
            (None, _) => out.push(Finding::new(ID_TOPO, Status::Fail, &r.bdf, format!(
                "nccl's topology dump has no gpu {} although rank {} runs on it",
                r.bdf, r.rank
            ))),
            (Some(_), None) => out.push(both(
                Finding::new(ID_TOPO, Status::Fail, &r.bdf, format!("nccl runs rank {} on gpu {}, which gdrdoctor does not see on this node", r.rank, r.bdf))
                    .fix("compare `lspci -d 10de:` with `nvidia-smi -L`; a gpu behind a bridge gdrdoctor cannot read shows in `gdrdoctor snapshot`"),
                "present".into(),
                "absent from the PCI tree".into(),
            )),
        }
    }
    // RDMA devices: those gdrdoctor expects NCCL to use, and those NCCL lists.
    let dump_net = |name: &str| dump.nets.iter().position(|n| n.name == name);
    let mut nics: Vec<(String, usize, usize)> = Vec::new();
    for (i, nic) in view.nics.iter().enumerate() {
        let used = d.verdicts.iter().any(|v| v.nic == i && v.used);
        match (dump_net(&nic.name), used) {
            (Some(k), _) => nics.push((nic.name.clone(), k, i)),
            (None, true) => out.push(
                Finding::new(ID_TOPO, Status::Fail, &nic.name, format!(
                    "gdrdoctor expects nccl to use {} (an ACTIVE port, not excluded by the environment), but nccl's topology does not list it",
                    nic.name
                ))
                .fix("look for `NET/IB` lines in nccl's log (`No device found`, a port nccl skipped) and NCCL_IB_HCA / NCCL_IB_DISABLE in the job's environment"),
            ),
            (None, false) => {}
        }
    }
    for name in nccl_rdma {
        if !view.nics.iter().any(|n| n.name == *name) {
            out.push(Finding::new(ID_TOPO, Status::Fail, *name, format!(
                "nccl uses the rdma device {name}, which gdrdoctor does not see on this node"
            )).fix("compare `ibv_devices` with `ls /sys/class/infiniband`; a device missing from sysfs cannot be judged"));
        }
    }
    // GPU pairs: NVLink, and the PCIe path where neither side has NVLink.
    for (x, (ga, da, va)) in gpus.iter().enumerate() {
        for (gb, db, vb) in gpus.iter().skip(x + 1).map(|g| (&g.0, g.1, g.2)) {
            let (n_nv, v_nv) = (cell(&ds.nvlink, *da, db), cell(&view.nvlink, *va, vb));
            if let (Some(a), Some(b)) = (n_nv, v_nv) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{ga}|{gb}"), format!(
                            "nccl {} nvlink between {ga} and {gb}, gdrdoctor {}",
                            if a { "sees" } else { "sees no" },
                            if b { "does" } else { "does not" }
                        ))
                        .fix("`nvidia-smi topo -m` and `nvidia-smi nvlink -s` show the links; on nvswitch systems the fabric manager must be running (`gdrdoctor check --only gpu.nvlink,gpu.p2p`)"),
                        format!("nvlink {}", yes_no(n_nv)),
                        format!("nvlink {} ({})", yes_no(v_nv), view.nvlink_source),
                    ));
                    continue;
                }
            }
            if n_nv == Some(true) || v_nv == Some(true) {
                continue;
            }
            let (np, vp) = (cell(&ds.gpu_paths, *da, db), cell(&view.gpu_paths, *va, vb));
            if let (Some(a), Some(b)) = (np, vp) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{ga}|{gb}"), format!(
                            "the pcie path between {ga} and {gb}: nccl says {a}, gdrdoctor says {b}"
                        ))
                        .fix("report it with the json report (it holds nccl's dump) and a `gdrdoctor snapshot`: gdrdoctor reads the pci tree differently from nccl here"),
                        a.as_str().into(),
                        b.as_str().into(),
                    ));
                }
            }
        }
    }
    // GPU x NIC: the path, and GDR support as NCCL wrote it.
    for (g, dg, vg) in &gpus {
        for (n, dn, vn) in &nics {
            let (np, vp) = (cell(&ds.paths, *dg, *dn), cell(&view.paths, *vg, *vn));
            if let (Some(a), Some(b)) = (np, vp) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{g}|{n}"), format!(
                            "the path between {g} and {n}: nccl says {a}, gdrdoctor says {b}"
                        ))
                        .fix("report it with the json report (it holds nccl's dump) and a `gdrdoctor snapshot`: the gdr verdict depends on this path"),
                        a.as_str().into(),
                        b.as_str().into(),
                    ));
                }
            }
        }
    }
    for (n, dn, vn) in &nics {
        let nccl_gdr = dump.nets.get(*dn).and_then(|x| x.gdr);
        let ours: Vec<&gdrdoctor_checks::nccl::rule::Support> =
            view.support.iter().filter_map(|row| row.get(*vn)).collect();
        let ours_gdr = if ours
            .iter()
            .any(|s| s.peermem == Some(true) || s.dmabuf == Some(true))
        {
            Some(true)
        } else if !ours.is_empty()
            && ours
                .iter()
                .all(|s| s.peermem == Some(false) && s.dmabuf == Some(false))
        {
            Some(false)
        } else {
            None
        };
        if let (Some(a), Some(b)) = (nccl_gdr, ours_gdr) {
            if a != b {
                out.push(both(
                    Finding::new(ID_TOPO, Status::Fail, n.as_str(), format!(
                        "nccl {} gpudirect rdma usable on {n}, gdrdoctor {}",
                        if a { "finds" } else { "does not find" },
                        if b { "does (a peer-memory client or dma-buf)" } else { "does not" }
                    ))
                    .fix("`gdrdoctor check --only kmod,driver,rdma` says what gdrdoctor read; nccl's log says `GPU Direct RDMA Enabled|Disabled for HCA` with its reason"),
                    format!("gdr=\"{}\" on <net name=\"{n}\">", u8::from(a)),
                    format!("peer memory or dma-buf: {}", yes_no(Some(b))),
                ));
            }
        }
    }
    if out.is_empty() {
        let nv = |sys: &System, list: &[(String, usize, usize)], dump_side: bool| -> String {
            let mut v = Vec::new();
            for (x, a) in list.iter().enumerate() {
                for b in list.iter().skip(x + 1) {
                    let (i, j) = if dump_side { (a.1, b.1) } else { (a.2, b.2) };
                    v.push(format!(
                        "{}|{} {}",
                        a.0,
                        b.0,
                        match cell(&sys.nvlink, i, j) {
                            Some(true) => "nvlink".to_string(),
                            _ => cell(&sys.gpu_paths, i, j)
                                .map(|k| k.as_str().to_string())
                                .unwrap_or_else(|| "?".into()),
                        }
                    ));
                }
            }
            v.join(", ")
        };
        let links: Vec<String> = dump
            .gpus
            .iter()
            .filter(|g| gpus.iter().any(|x| x.0 == g.busid))
            .map(|g| {
                let n: i64 = g.nvlinks.iter().map(|l| l.1).sum();
                format!("{} {n} nvlink(s)", g.busid)
            })
            .collect();
        let gpu_list = gpus
            .iter()
            .map(|g| g.0.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let nic_list = if nics.is_empty() {
            "none".to_string()
        } else {
            nics.iter()
                .map(|n| n.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(both(
            Finding::new(ID_TOPO, Status::Pass, "node", format!(
                "nccl's topology agrees with gdrdoctor's view: {} gpu(s), rdma devices used: {nic_list}",
                gpus.len()
            )),
            format!("gpus {gpu_list}; pairs: {}; {}", nv(&ds, &gpus, true), links.join(", ")),
            format!("gpus {gpu_list}; pairs: {} ({})", nv(view, &gpus, false), view.nvlink_source),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::probe::common::{HealthCheck, Problem};
    use crate::probe::nccl::{NcclFiles, Params, RankGpu};
    use gdrdoctor_checks::nccl::rule::{Gpu, Nic, Support};
    use gdrdoctor_checks::nccl::PathKind;
    use std::collections::BTreeMap;

    /// gdrdoctor's view of our two-GPU machine (2 x H200 SXM on NVSwitch, AMD host, no RDMA
    /// NIC; knowledge/gdr-ground-truth.md "Observed"): both GPUs on the root bus, NVLink from
    /// NVML.
    fn two_h200() -> System {
        let gpu = |id: &str| Gpu {
            id: id.into(),
            cc: Some((9, 0)),
            cc_source: "CUDA compute capability".into(),
            c2c: Some(false),
            c2c_source: "x86 CPU".into(),
        };
        System {
            gpus: vec![gpu("0000:00:06.0"), gpu("0000:00:07.0")],
            nvlink: vec![vec![None, Some(true)], vec![Some(true), None]],
            nvlink_source: "NVML NVLink state".into(),
            gpu_paths: vec![vec![Some(PathKind::Phb); 2]; 2],
            paths: vec![vec![], vec![]],
            smi: vec![vec![], vec![]],
            support: vec![vec![], vec![]],
            amd_two_gpus: true,
            ..Default::default()
        }
    }

    /// NCCL's dump of that machine, in the shape NCCL 2.28.9 wrote it there (the same
    /// knowledge entry; `ncclTopoDumpXmlRec()`, src/graph/xml.cc).
    const TWO_H200_DUMP: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="-1" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="17">
    <pci busid="0000:00:06.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="90" rank="0" gdr="1">
        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:00:07.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="90" rank="1" gdr="1">
        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
      </gpu>
    </pci>
    <nic>
      <net name="eth0" dev="0" speed="10000" port="0" latency="0.000000" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
</system>
"#;

    fn ranks(bdfs: &[&str]) -> Vec<RankGpu> {
        bdfs.iter()
            .enumerate()
            .map(|(i, b)| RankGpu {
                rank: i as u32,
                cuda: i as i32,
                bdf: b.to_string(),
            })
            .collect()
    }

    fn run(label: &str, env: &[(&str, &str)], log: &str, dump: &str, bdfs: &[&str]) -> Run {
        let mut e: BTreeMap<String, String> = super::super::BASE_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, v) in env {
            e.insert(k.to_string(), v.to_string());
        }
        Run {
            params: Params {
                label: label.into(),
                library: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
                gpus: None,
                count: 1 << 20,
                env: e.clone(),
            },
            output: Some(Output {
                version: Some("2.28.3".into()),
                version_code: Some(22803),
                ranks: ranks(bdfs),
                env: e,
                init_ms: Some(900.0),
                allreduce_ms: Some(40.0),
                sums: Some(Sums {
                    expected: 3.0,
                    checked: 8192,
                    wrong: 0,
                    first_wrong: None,
                }),
                error: None,
            }),
            problem: None,
            health: None,
            files: NcclFiles {
                log: Some(log.into()),
                topo_dump: Some(dump.into()),
                ..Default::default()
            },
        }
    }

    /// A single-process run of two ranks: NCCL prints `P2P/direct pointer` (both ranks in one
    /// process, src/transport/p2p.cc v2.28.9-1 L384-387).
    const P2P_LOG: &str = "\
gpu-node:900:910 [0] NCCL INFO NCCL version 2.28.3+cuda12.9
gpu-node:900:911 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
gpu-node:900:912 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer
gpu-node:900:911 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/direct pointer
";

    fn ids(f: &[Finding]) -> Vec<(&str, Status, &str)> {
        f.iter()
            .map(|f| (f.id.as_str(), f.status, f.subject.as_str()))
            .collect()
    }

    #[test]
    fn two_h200_agree_on_p2p_over_nvlink() {
        let r = Record {
            skipped: None,
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                P2P_LOG,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
        };
        let f = findings(&r);
        assert_eq!(
            ids(&f),
            vec![
                (ID_RUN, Status::Pass, "node"),
                (ID_TOPO, Status::Pass, "node"),
                (ID, Status::Pass, "0000:00:06.0|0000:00:07.0"),
            ],
            "{f:#?}"
        );
        assert!(f[0]
            .message
            .contains("nccl 2.28.3 ran one all-reduce over 2 gpu(s): all 8192 checked sums are 3"));
        assert!(f[0].evidence[1].observed.contains("NCCL_NVLS_ENABLE=0"));
        assert!(
            f[1].evidence[0]
                .observed
                .contains("0000:00:06.0 18 nvlink(s)"),
            "{:?}",
            f[1].evidence
        );
        assert!(f[1].evidence[1]
            .observed
            .contains("0000:00:06.0|0000:00:07.0 nvlink"));
        assert_eq!(f[2].message, "nccl and gdrdoctor agree: p2p");
        assert!(f[2].evidence[0]
            .observed
            .starts_with("P2P/direct pointer: log line 2"));
        assert!(f[2].evidence[1].source.contains("NCCL 2.28.3 rules"));
        assert!(f[2].evidence[1]
            .observed
            .contains("NVL within NCCL_P2P_LEVEL SYS"));
        // The record survives the report: the same findings after a JSON round trip.
        let v = serde_json::to_value(&r).unwrap();
        let back: Record = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        assert_eq!(findings(&back), f);
    }

    #[test]
    fn shared_memory_where_p2p_was_predicted_fails_and_the_environment_counts() {
        let shm = P2P_LOG
            .replace("P2P/direct pointer", "SHM/direct/direct")
            .replace("Channel 00/0", "Channel 00");
        let r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                &shm,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let p = f.iter().find(|f| f.id == ID).unwrap();
        assert_eq!(p.status, Status::Fail);
        assert_eq!(
            p.message,
            "nccl used SHM/direct/direct where gdrdoctor predicted p2p"
        );
        // With NCCL_P2P_DISABLE=1 in the worker's environment the prediction is no p2p: agree.
        let r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[("NCCL_P2P_DISABLE", "1")],
                &shm,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let p = f.iter().find(|f| f.id == ID).unwrap();
        assert_eq!(
            (p.status, p.message.as_str()),
            (Status::Pass, "nccl and gdrdoctor agree: no p2p")
        );
        assert!(
            f[0].evidence[1].observed.contains("NCCL_P2P_DISABLE=1"),
            "{:?}",
            f[0].evidence
        );
    }

    #[test]
    fn one_gpu_has_nothing_to_compare() {
        let r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                "gpu-node:1:2 [0] NCCL INFO NCCL version 2.28.3+cuda12.9\n",
                TWO_H200_DUMP,
                &["0000:00:06.0"],
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let s: Vec<(&str, Status)> = f.iter().map(|f| (f.id.as_str(), f.status)).collect();
        assert_eq!(
            s,
            vec![
                (ID_RUN, Status::Pass),
                (ID_TOPO, Status::Pass),
                (ID, Status::Skip)
            ]
        );
    }

    #[test]
    fn topology_disagreements_fail_one_each() {
        // gdrdoctor without NVLink facts for the pair would say PHB and no NVLink; NCCL's dump
        // says NVLink: one fail. A rank on a GPU gdrdoctor does not see: one fail.
        let mut v = two_h200();
        v.nvlink = vec![vec![None, Some(false)], vec![Some(false), None]];
        let r = Record {
            view: Some(v),
            runs: vec![run(
                "default",
                &[],
                P2P_LOG,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let t: Vec<&Finding> = f.iter().filter(|f| f.id == ID_TOPO).collect();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].status, Status::Fail);
        assert_eq!(
            t[0].message,
            "nccl sees nvlink between 0000:00:06.0 and 0000:00:07.0, gdrdoctor does not"
        );
        assert_eq!(t[0].evidence[0].observed, "nvlink yes");
        // No dump at all: an error, not a pass.
        let mut r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                P2P_LOG,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        r.runs[0].files.topo_dump = None;
        let f = findings(&r);
        assert_eq!(f[1].id, ID_TOPO);
        assert_eq!(f[1].status, Status::Error);
        r.runs[0].files.topo_dump = Some("<graphs/>".into());
        assert_eq!(findings(&r)[1].status, Status::Error);
    }

    /// An HGX-like node: GPU 0 and mlx5_0 under one switch (PIX), GPU 1 under another with no
    /// NIC, NVLink between the GPUs, peer memory loaded.
    fn hgx_two() -> (System, String) {
        let gpu = |id: &str| Gpu {
            id: id.into(),
            cc: Some((9, 0)),
            cc_source: "CUDA".into(),
            c2c: Some(false),
            c2c_source: "x86".into(),
        };
        let sup = Support {
            peermem: Some(true),
            dmabuf: Some(true),
            gpu: Some(true),
            ..Default::default()
        };
        let sys = System {
            gpus: vec![gpu("0000:18:00.0"), gpu("0000:28:00.0")],
            nics: vec![Nic {
                name: "mlx5_0".into(),
                ports: Some(vec![(1, true)]),
            }],
            paths: vec![vec![Some(PathKind::Pix)], vec![Some(PathKind::Sys)]],
            smi: vec![vec![None], vec![None]],
            nvlink: vec![vec![None, Some(true)], vec![Some(true), None]],
            nvlink_source: "NVML NVLink state".into(),
            gpu_paths: vec![vec![Some(PathKind::Sys); 2]; 2],
            support: vec![vec![sup.clone()], vec![sup]],
            amd_two_gpus: false,
            path_hint: String::new(),
        };
        let dump = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:16:00.0" class="0x060400">
      <pci busid="0000:18:00.0" class="0x030200"><gpu dev="0" sm="90" rank="0" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
      <pci busid="0000:19:00.0" class="0x020700"><nic><net name="mlx5_0" dev="0" port="1" gdr="1"/></nic></pci>
    </pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:26:00.0" class="0x060400">
      <pci busid="0000:28:00.0" class="0x030200"><gpu dev="1" sm="90" rank="1" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
    </pci>
  </cpu>
</system>"#;
        (sys, dump.into())
    }

    #[test]
    fn the_network_run_compares_gdr_per_gpu_and_direction() {
        // NCCL 2.28 with P2P off: no NVLink peer, so no PXN for GPU 1 (SYS to mlx5_0): its
        // sends and receives go without GDR; GPU 0 is PIX: GDR both ways. The shapes of the
        // lines are NCCL's (src/transport/net.cc v2.28.9-1 L313, L359; NVIDIA/nccl#1357 shows
        // `[send] via NET/IBext/1/GDRDMA` beside `via P2P/CUMEM` in one log).
        let (sys, dump) = hgx_two();
        let log = "\
n:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>
n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
n:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/0
n:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0
n:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
";
        let bdfs = ["0000:18:00.0", "0000:28:00.0"];
        let r = Record {
            view: Some(sys.clone()),
            runs: vec![run(
                "net-only",
                &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
                log,
                &dump,
                &bdfs,
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let cmp: Vec<(Status, &str)> = f
            .iter()
            .filter(|f| f.id == ID)
            .map(|f| (f.status, f.subject.as_str()))
            .collect();
        assert_eq!(
            cmp,
            vec![
                (Status::Pass, "0000:18:00.0|mlx5_0/send"),
                (Status::Pass, "0000:28:00.0|mlx5_0/receive"),
                (Status::Pass, "0000:28:00.0|mlx5_0/send"),
                (Status::Pass, "0000:18:00.0|mlx5_0/receive"),
            ],
            "{f:#?}"
        );
        let g1 = f
            .iter()
            .find(|f| f.subject == "0000:28:00.0|mlx5_0/send")
            .unwrap();
        assert!(g1.evidence.iter().any(|e| e.source == "run"));
        assert_eq!(f[0].subject, "node/net-only");
        // GDR where gdrdoctor predicted none: a fail with both sides.
        let bad = log.replace("[send] via NET/IB/0\n", "[send] via NET/IB/0/GDRDMA\n");
        let r = Record {
            view: Some(sys.clone()),
            runs: vec![run(
                "net-only",
                &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
                &bad,
                &dump,
                &bdfs,
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let g1 = f
            .iter()
            .find(|f| f.subject == "0000:28:00.0|mlx5_0/send")
            .unwrap();
        assert_eq!(g1.status, Status::Fail);
        assert_eq!(g1.message, "nccl used gdr where gdrdoctor predicted no gdr");
        // An IB plugin names its channels `NET/IBext_v8/0` and lists `NET/IB : Using`: the
        // same device.
        let plugin = log.replace("via NET/IB/", "via NET/IBext_v8/");
        let mut r = Record {
            view: Some(sys.clone()),
            runs: vec![run(
                "net-only",
                &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
                &plugin,
                &dump,
                &bdfs,
            )],
            ..Default::default()
        };
        r.runs[0].files.topo_dump = None; // the name comes from the log's list alone
        let f = findings(&r);
        assert_eq!(
            f.iter()
                .filter(|f| f.id == ID && f.status == Status::Pass)
                .count(),
            4,
            "{f:#?}"
        );
        // Sockets instead of the NIC gdrdoctor expected: fail.
        let sock = "n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n";
        let r = Record {
            view: Some(sys),
            runs: vec![run(
                "net-only",
                &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
                sock,
                &dump,
                &bdfs,
            )],
            ..Default::default()
        };
        let f = findings(&r);
        let last = f.last().unwrap();
        assert_eq!((last.id.as_str(), last.status), (ID, Status::Fail));
        assert!(last
            .message
            .contains("over sockets, not the rdma devices gdrdoctor expects it to use (mlx5_0)"));
    }

    #[test]
    fn topology_checks_paths_nics_and_gdr_support() {
        let (mut sys, dump) = hgx_two();
        let bdfs = ["0000:18:00.0", "0000:28:00.0"];
        sys.paths[0][0] = Some(PathKind::Pxb);
        sys.nics.push(Nic {
            name: "mlx5_1".into(),
            ports: Some(vec![(1, true)]),
        });
        for row in sys.paths.iter_mut() {
            row.push(Some(PathKind::Sys));
        }
        for row in sys.smi.iter_mut() {
            row.push(None);
        }
        for row in sys.support.iter_mut() {
            let mut s = row[0].clone();
            s.peermem = Some(false);
            s.dmabuf = Some(false);
            row[0] = s.clone();
            row.push(s);
        }
        let r = Record {
            view: Some(sys),
            runs: vec![run("default", &[], P2P_LOG, &dump, &bdfs)],
            ..Default::default()
        };
        let f = findings(&r);
        let t: Vec<(&str, Status)> = f
            .iter()
            .filter(|f| f.id == ID_TOPO)
            .map(|f| (f.subject.as_str(), f.status))
            .collect();
        assert_eq!(
            t,
            vec![
                ("mlx5_1", Status::Fail),
                ("0000:18:00.0|mlx5_0", Status::Fail),
                ("mlx5_0", Status::Fail),
            ],
            "{f:#?}"
        );
        let path = f
            .iter()
            .find(|f| f.subject == "0000:18:00.0|mlx5_0")
            .unwrap();
        assert_eq!(
            path.message,
            "the path between 0000:18:00.0 and mlx5_0: nccl says PIX, gdrdoctor says PXB"
        );
        let gdr = f
            .iter()
            .find(|f| f.id == ID_TOPO && f.subject == "mlx5_0")
            .unwrap();
        assert_eq!(
            gdr.message,
            "nccl finds gpudirect rdma usable on mlx5_0, gdrdoctor does not"
        );
    }

    #[test]
    fn nccl_failures_and_stopped_workers_are_errors_with_nccl_s_words() {
        let mut r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                "",
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        r.runs[0].files.log = Some("n:1:2 [0] misc/socket.cc:50 NCCL WARN Net : No interface found in the same subnet as remote address\n".into());
        if let Some(o) = r.runs[0].output.as_mut() {
            o.error = Some("ncclCommInitAll failed: unhandled system error (run with NCCL_DEBUG=INFO for details) (2)".into());
            o.sums = None;
        }
        let f = findings(&r);
        assert_eq!(f[0].id, ID_RUN);
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0]
            .message
            .starts_with("nccl 2.28.3 failed: ncclCommInitAll failed: unhandled system error"));
        assert_eq!(f[0].evidence[0].source, "nccl WARN");
        assert!(f[0].evidence[0].observed.contains("No interface found"));
        assert!(
            !f.iter().any(|f| f.id == ID),
            "no channel lines after a failed init: no comparison finding"
        );
        // Wrong sums fail.
        let mut r = Record {
            view: Some(two_h200()),
            runs: vec![run(
                "default",
                &[],
                P2P_LOG,
                TWO_H200_DUMP,
                &["0000:00:06.0", "0000:00:07.0"],
            )],
            ..Default::default()
        };
        if let Some(Output { sums: Some(s), .. }) = r.runs[0].output.as_mut() {
            s.wrong = 3;
            s.first_wrong = Some((1, 17, 2.0));
        }
        let f = findings(&r);
        assert_eq!(f[0].status, Status::Fail);
        assert!(f[0]
            .message
            .contains("3 of 8192 checked elements differ from 3 (first: rank 1, element 17 = 2)"));
        // A worker killed at its deadline: probe.cuda error, the health check, nccl's last WARN.
        let mut run = run("default", &[], "", TWO_H200_DUMP, &[]);
        run.output = None;
        run.problem = Some(Problem::Run {
            message: "worker `nccl` did not finish within its deadline (300.0 s) and was killed"
                .into(),
        });
        run.health = Some(HealthCheck::Healthy { ms: 250.0 });
        run.files.log = Some(
            "n:1:2 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with status=12\n"
                .into(),
        );
        let f = findings(&Record {
            view: Some(two_h200()),
            runs: vec![run],
            ..Default::default()
        });
        assert_eq!(
            ids(&f),
            vec![
                ("probe.cuda", Status::Error, "node"),
                ("probe.gpu-health", Status::Pass, "node")
            ]
        );
        assert!(f[0].evidence[0].observed.contains("status=12"));
        // NCCL that cannot be loaded.
        let mut run = super::tests::run("default", &[], "", TWO_H200_DUMP, &[]);
        run.output = None;
        run.problem = Some(Problem::Worker {
            error: WorkerError::LibraryMissing {
                library: "/opt/x/libnccl.so.2".into(),
                detail: "dlopen /opt/x/libnccl.so.2: cannot open shared object file".into(),
            },
        });
        let f = findings(&Record {
            view: None,
            runs: vec![run],
            ..Default::default()
        });
        assert_eq!(ids(&f), vec![(ID_RUN, Status::Error, "node")]);
        assert!(f[0]
            .remediation
            .as_deref()
            .unwrap_or("")
            .contains("--nccl-lib"));
    }

    #[test]
    fn no_nccl_on_the_node_skips_with_the_reason() {
        let r = Record {
            skipped: Some("no libnccl.so.2 found on this node (searched ...)".into()),
            ..Default::default()
        };
        let f = findings(&r);
        assert_eq!(ids(&f), vec![(ID, Status::Skip, "node")]);
        assert!(f[0].message.starts_with("no libnccl.so.2 found"));
    }
}
