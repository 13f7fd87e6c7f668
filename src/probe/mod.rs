//! `gdrdoctor probe`: live probes, each in a worker process, reported with the same findings,
//! renderers and exit codes as `check`.
//!
//! The registry [`PROBES`] is the only list of probes, as `CHECKS` is of checks: `gdrdoctor
//! probe`'s flags and help, the worker's task table, `gdrdoctor list`, `explain` and the replay
//! tests all come from it. A probe family is one folder `src/probe/<name>/`:
//!
//! - `mod.rs`: its options (`Args`, a `clap::Args`), its `plan` (validated from the command line
//!   before anything runs) and the plan's `execute` (parent side: workers, health checks) that
//!   keeps a record and judges it;
//! - `worker.rs`: the worker side (owns the CUDA context; CUDA only through `crate::live`);
//! - `verdict.rs`: the findings from the record, a pure function, replay-tested from saved
//!   reports.
//!
//! Shared pieces: [`args`] (options several probes take), [`common`] (no-GPU refusal, worker
//! start, health check, findings for a run that went wrong), [`kernels`] (NVRTC or carried PTX);
//! the typed, versioned parent-worker protocol and both sides of a worker are the layer below,
//! `crate::worker`, shared with the collectors. Dependencies point one way: this registry uses
//! the probe folders, the folders use the shared pieces, the shared pieces use neither (the
//! worker child gets the task table, [`worker_task`], from the lobby); see
//! docs/architecture.md.

pub mod args;
pub mod common;
pub mod doorbell;
pub mod hang;
pub mod health;
pub mod kernels;
pub mod nccl;
pub mod p2p;
pub mod plan;
pub mod registration;

pub use args::CommonArgs;
pub use plan::{Plan, PlanFn, Ran};

/// The plans a command line asks for, each with its registry row.
pub type Plans = Vec<(&'static ProbeDef, Box<dyn Plan>)>;

use crate::worker::protocol::{self, WorkerError};
use clap::{ArgMatches, Args, Command, FromArgMatches};
use gdrdoctor_checks::findings::probe as tables;
use gdrdoctor_checks::findings::FindingDef;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::Finding;

/// A registered probe family.
pub struct ProbeDef {
    /// The flag (`--<name>`), the worker task and the report's `probe.<name>` key.
    pub name: &'static str,
    /// The finding ids it reports besides the shared ones ([`tables::SHARED`]), with their
    /// titles and pages: its table in the pure crate.
    pub findings: &'static [FindingDef],
    /// `gdrdoctor probe --help` examples: `command  # what it does`.
    pub examples: &'static [&'static str],
    /// Its flag and options, added to `gdrdoctor probe`.
    pub args: fn(clap::Command) -> clap::Command,
    /// Its plan from the parsed command line.
    pub plan: PlanFn,
    /// Its worker (in `gdrdoctor __worker <name>`): typed parameters in, typed output out.
    pub worker: fn(serde_json::Value) -> Result<serde_json::Value, WorkerError>,
    /// Its verdict on a saved record (`probe.<name>` of a report): pure.
    pub replay: fn(&Node, &serde_json::Value) -> Result<Vec<Finding>, String>,
}

/// Every probe family, in the order they run and report.
pub static PROBES: &[ProbeDef] = &[
    ProbeDef {
        name: "registration",
        findings: tables::REGISTRATION,
        examples: &[
            "gdrdoctor probe --registration            # can GPU memory be exported and registered for RDMA?",
            "gdrdoctor probe --registration --gpu 0 --format json",
        ],
        args: registration::Args::augment_args,
        plan: registration::plan,
        worker: registration::serve,
        replay: registration::replay,
    },
    ProbeDef {
        name: "hang",
        findings: tables::HANG,
        examples: &[
            "gdrdoctor probe --hang                    # healthy spin-wait protocols, timed",
            "gdrdoctor probe --hang --inject all       # every injected fault must be caught and classified",
            "gdrdoctor probe --hang --inject never-set --hang-timeout 200",
            "gdrdoctor probe --hang --inject remote-wait --peer 1",
        ],
        args: hang::Args::augment_args,
        plan: hang::plan,
        worker: hang::serve,
        replay: hang::replay,
    },
    ProbeDef {
        name: "p2p",
        findings: tables::P2P,
        examples: &["gdrdoctor probe --p2p                     # peer bandwidth per gpu pair vs the link rate"],
        args: p2p::Args::augment_args,
        plan: p2p::plan,
        worker: p2p::serve,
        replay: p2p::replay,
    },
    ProbeDef {
        name: "nccl",
        findings: tables::NCCL,
        examples: &[
            "gdrdoctor probe --nccl                    # NCCL's own transports and GDR use, vs the prediction",
            "gdrdoctor probe --nccl --nccl-lib $VENV/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
        ],
        args: nccl::Args::augment_args,
        plan: nccl::plan,
        worker: nccl::serve,
        replay: nccl::replay,
    },
    ProbeDef {
        name: "doorbell",
        findings: tables::DOORBELL,
        examples: &[
            "gdrdoctor probe --doorbell                # doorbell offsets, GPU write path, store latency",
            "gdrdoctor probe --doorbell --lspci nic.txt --allow-mmio-write",
        ],
        args: doorbell::Args::augment_args,
        plan: doorbell::plan,
        worker: doorbell::serve,
        replay: doorbell::replay,
    },
];

/// Everything `gdrdoctor probe` takes about probes: the shared options and the matches from
/// which each registered probe builds its plan (`cmd::probe` flattens it and knows no probe
/// option).
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub common: CommonArgs,
    pub matches: ArgMatches,
}

impl FromArgMatches for ProbeOptions {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(ProbeOptions {
            common: CommonArgs::from_arg_matches(m)?,
            matches: m.clone(),
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = ProbeOptions::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for ProbeOptions {
    fn augment_args(cmd: Command) -> Command {
        // Each probe's flag and options first, in registry order, then the shared ones.
        CommonArgs::augment_args(PROBES.iter().fold(cmd, |c, p| (p.args)(c)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The probes' worker tasks (`gdrdoctor __worker <name>`): every family's worker from the
/// registry, and the health check run after a killed worker.
pub fn worker_task(
    task: &str,
    params: serde_json::Value,
) -> Option<Result<serde_json::Value, WorkerError>> {
    if let Some(p) = find(task) {
        return Some((p.worker)(params));
    }
    match task {
        "health" => Some(protocol::serve(params, |()| health::worker())),
        nccl::allocation::TASK => Some(nccl::allocation::serve(params)),
        _ => None,
    }
}

pub fn find(name: &str) -> Option<&'static ProbeDef> {
    PROBES.iter().find(|p| p.name == name)
}

/// Every probe finding id, shared ones first, then each probe's in registry order.
pub fn finding_defs() -> impl Iterator<Item = &'static FindingDef> {
    tables::SHARED
        .iter()
        .chain(PROBES.iter().flat_map(|p| p.findings.iter()))
}

/// The plans the command line asks for, validated, in registry order; a usage error when it
/// asks for none or for something inconsistent.
pub fn plans(o: &ProbeOptions) -> Result<Plans, String> {
    let mut out = Vec::new();
    for p in PROBES {
        if let Some(plan) = (p.plan)(&o.matches, &o.common)? {
            out.push((p, plan));
        }
    }
    if out.is_empty() {
        return Err(format!(
            "choose a probe: {} (see `gdrdoctor probe --help`)",
            flag_list()
        ));
    }
    Ok(out)
}

/// Run the plans on the live node: the findings, and the records by probe name.
pub fn execute(
    plans: &Plans,
    node: &Node,
) -> (Vec<Finding>, serde_json::Map<String, serde_json::Value>) {
    let mut findings = Vec::new();
    let mut records = serde_json::Map::new();
    for (def, plan) in plans {
        let ran = plan.execute(node);
        findings.extend(ran.findings);
        if let Some(r) = ran.record {
            records.insert(def.name.to_string(), r);
        }
    }
    (findings, records)
}

/// The findings a report's `probe` object (records by probe name) gives, in registry order:
/// what `gdrdoctor probe` reported, re-derived from what it kept.
pub fn replay(node: &Node, probe: &serde_json::Value) -> Result<Vec<Finding>, String> {
    let mut out = Vec::new();
    for p in PROBES {
        if let Some(r) = probe.get(p.name) {
            out.extend((p.replay)(node, r).map_err(|e| format!("probe.{}: {e}", p.name))?);
        }
    }
    Ok(out)
}

/// `--registration, --hang, --p2p, --nccl or --doorbell`.
fn flag_list() -> String {
    let flags: Vec<String> = PROBES.iter().map(|p| format!("--{}", p.name)).collect();
    match flags.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => flags.join(""),
    }
}

/// `gdrdoctor probe --help`'s closing text: what probes are, and every probe's examples.
pub fn help_examples() -> String {
    let mut s = String::from(
        "Probes run on the live node only. The parent never creates a CUDA context: each probe runs in a \
worker process that the parent kills at the deadline, then a fresh process confirms the GPU is healthy. \
A probe that cannot run here (no GPU, no driver) is an error: exit 3 unless --allow-incomplete.\n\nExamples:\n",
    );
    for p in PROBES {
        for e in p.examples {
            s.push_str("  ");
            s.push_str(e);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_consistent() {
        let mut ids = std::collections::BTreeSet::new();
        for f in finding_defs() {
            assert!(ids.insert(f.id), "duplicate finding id {}", f.id);
            assert!(f.id.starts_with("probe."), "{}", f.id);
            assert!(f.page.contains(f.id), "{}: page does not name its id", f.id);
        }
        let mut names = std::collections::BTreeSet::new();
        for p in PROBES {
            assert!(names.insert(p.name), "duplicate probe {}", p.name);
            assert!(!p.examples.is_empty(), "{}: no example", p.name);
            assert!(
                p.examples
                    .iter()
                    .all(|e| e.contains(&format!("--{}", p.name))),
                "{}: an example without its flag",
                p.name
            );
        }
        assert_eq!(
            flag_list(),
            "--registration, --hang, --p2p, --nccl or --doorbell"
        );
    }

    #[test]
    fn each_probe_reports_its_table_in_the_order_of_the_pure_crate() {
        let ids = |t: &[FindingDef]| t.iter().map(|f| f.id).collect::<Vec<_>>();
        let ours: Vec<Vec<&str>> = std::iter::once(tables::SHARED)
            .chain(PROBES.iter().map(|p| p.findings))
            .map(ids)
            .collect();
        let theirs: Vec<Vec<&str>> = tables::FAMILIES.iter().map(|t| ids(t)).collect();
        assert_eq!(
            ours, theirs,
            "PROBES and findings::probe::FAMILIES in one order"
        );
    }
}
