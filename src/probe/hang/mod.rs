//! `probe --hang`: run spin-wait protocols on the GPU, watch them from the host while they run,
//! and when one stalls say which block and warp, at which wait, on which address, expecting
//! which value and seeing which, for how long, and why. Design: knowledge/hang-probe.md §5.
//!
//! - [`worker`] (in the worker process) owns the context, loads every kernel before the first
//!   launch, puts the records in host-mapped memory ([`layout`]), launches a scenario and hands
//!   the records to the [`detector`] thread, which never calls CUDA. On a stall the worker sets
//!   the abort flag, waits a short grace, synchronizes (flushing device printf) and moves on; a
//!   kernel that ignores the abort makes the worker print what it has and `exit(3)`.
//! - The parent ([`Hang::execute`]) runs the abort-ignoring scenario in a worker of its own,
//!   kills a worker past its deadline, checks the GPU's health in a fresh process after an
//!   escalation, and keeps it all as a [`verdict::Record`].
//! - [`verdict`] turns the record into findings (pure; replayed from saved reports).

pub mod detector;
pub mod layout;
pub mod model;
pub mod verdict;
pub mod worker;

pub use model::{
    Bench, Class, HangOutput, Options, ScenarioResult, Stalled, Verdict, DEFAULT_SCENARIOS,
    INJECTIONS, SCENARIOS,
};

use super::args::{self, CommonArgs};
use super::common::{self, Problem};
use super::plan::{Plan, Ran};
use crate::worker::runner::RunFailure;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::Finding;
use std::time::Duration;
use verdict::{GroupRecord, Record};

/// `--hang` and its options.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Run spin-wait protocols on the GPU and watch them for stalls (healthy protocols by default)
    #[arg(long)]
    pub hang: bool,
    /// With --hang: inject faults, comma-separated (never-set, occupancy, ordering, stale-read,
    /// silent, ignore-abort, remote-wait) or `all`; each runs beside a healthy control
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub inject: Vec<String>,
    /// With --hang: a waiter without progress for this long is a stall (warning at half)
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub hang_timeout: u64,
    /// With --hang: how often the host detector polls the records
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub poll_ms: u64,
    /// With --hang: measure detection latency over N stalls, instrumentation overhead and host
    /// poll cost
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub bench: usize,
}

/// The validated plan.
#[derive(Debug, Clone)]
pub struct Hang {
    /// The worker's options; `peer` is filled in at run time from the node when a
    /// remote-wait scenario needs one and `--peer` did not name it.
    pub opts: Options,
    /// `--peer`, when given.
    pub peer: Option<u32>,
    pub deadline: Duration,
}

/// Build the plan from the command line; `None` without `--hang`.
pub fn plan(m: &clap::ArgMatches, c: &CommonArgs) -> Result<Option<Box<dyn Plan>>, String> {
    let a: Args = args::own(m)?;
    let mut scenarios: Vec<String> = DEFAULT_SCENARIOS.iter().map(|s| s.to_string()).collect();
    for i in &a.inject {
        let names: Vec<&str> = if i == "all" {
            INJECTIONS.to_vec()
        } else {
            vec![i.as_str()]
        };
        for n in names {
            if !INJECTIONS.contains(&n) {
                return Err(format!(
                    "unknown injection `{n}`; choose from {} or all",
                    INJECTIONS.join(", ")
                ));
            }
            for s in [n.to_string(), format!("control:{n}")] {
                if SCENARIOS.iter().any(|x| x.0 == s) && !scenarios.contains(&s) {
                    scenarios.push(s);
                }
            }
        }
    }
    if !a.hang {
        if !a.inject.is_empty() {
            return Err("--inject needs --hang".into());
        }
        return Ok(None);
    }
    Ok(Some(Box::new(Hang {
        opts: Options {
            ordinal: c.gpu.map(|g| g as i32).unwrap_or(0),
            threshold: Duration::from_millis(a.hang_timeout.max(20)),
            poll: Duration::from_millis(a.poll_ms.max(1)),
            grace: Duration::from_millis(300),
            scenarios,
            bench: a.bench,
            force_ptx: c.ptx,
            peer: None,
        },
        peer: c.peer,
        deadline: Duration::from_secs(c.timeout),
    })))
}

impl Plan for Hang {
    fn execute(&self, node: &Node) -> Ran {
        if let Some(f) = common::no_gpu(node) {
            return Ran::findings(vec![f]);
        }
        let opts = &self.opts;
        // The cross-GPU scenarios need a peer: --peer, else another GPU, else this one
        // (loopback, said so in the report).
        let n_gpus = gdrdoctor_checks::derive::gpus(node).len() as i32;
        let peer = if opts.scenarios.iter().any(|s| s.ends_with("remote-wait")) {
            Some(self.peer.map(|p| p as i32).unwrap_or(if n_gpus >= 2 {
                if opts.ordinal == 0 {
                    1
                } else {
                    0
                }
            } else {
                opts.ordinal
            }))
        } else {
            None
        };
        // The abort-ignoring injection ends its worker: run it (and its control) in a worker
        // of its own, last.
        let (normal, last): (Vec<String>, Vec<String>) = opts
            .scenarios
            .iter()
            .cloned()
            .partition(|s| s != "ignore-abort");
        let mut record = Record::default();
        for (i, group) in [normal, last].into_iter().enumerate() {
            if group.is_empty() && !(i == 0 && opts.bench > 0) {
                continue;
            }
            let mut o = opts.clone();
            o.scenarios = group;
            o.peer = peer.filter(|_| o.scenarios.iter().any(|s| s.ends_with("remote-wait")));
            if i == 1 {
                o.bench = 0;
            }
            let g = run_group(o, self.deadline);
            if i == 0 {
                record.main = Some(g);
            } else {
                record.escalation = Some(g);
            }
        }
        Ran {
            findings: verdict::findings(&record),
            record: serde_json::to_value(&record).ok(),
        }
    }
}

/// One worker run (parent side; I/O): the worker, then the health check after an escalation or
/// a stopped worker.
fn run_group(o: Options, deadline: Duration) -> GroupRecord {
    let mut g = GroupRecord {
        params: Some(o.clone()),
        ..Default::default()
    };
    let run = match common::start("hang", &o, deadline) {
        Ok(r) => r,
        Err(e) => {
            g.problem = Some(Problem::Start {
                message: e.to_string(),
            });
            return g;
        }
    };
    if let Some(error) = run.worker_error() {
        g.problem = Some(Problem::Worker {
            error: error.clone(),
        });
        return g;
    }
    // The output counts even from a worker that was killed after it printed it (escalation).
    g.output = run
        .value()
        .and_then(|v| serde_json::from_value::<HangOutput>(v.clone()).ok());
    g.printf = run.raw.clone();
    g.worker_exit = format!("{:?}", run.outcome);
    g.problem = match run.failure() {
        Some(f) => Some(Problem::Run {
            message: f.to_string(),
        }),
        None if g.output.is_none() => Some(Problem::Run {
            message: RunFailure::Garbage {
                task: "hang".into(),
                detail: "the result does not have the `hang` shape".into(),
            }
            .to_string(),
        }),
        None => None,
    };
    if g.escalated() || g.stopped() {
        let verdict_at = g.output.as_ref().and_then(|p| {
            p.scenarios
                .iter()
                .find_map(|s| s.verdict.as_ref().map(|v| v.at_realtime_ns))
        });
        match common::check_health() {
            common::HealthCheck::Healthy { ms } => {
                let now = layout::realtime_ns();
                g.verdict_to_healthy_ms = verdict_at.map(|t| now.saturating_sub(t) as f64 / 1e6);
                g.health_check_ms = Some(ms);
            }
            common::HealthCheck::Unhealthy { error } => g.health_error = Some(error),
        }
    }
    g
}

/// The worker side, for the registry.
pub fn serve(
    v: serde_json::Value,
) -> Result<serde_json::Value, crate::worker::protocol::WorkerError> {
    crate::worker::protocol::serve(v, worker::worker)
}

/// The verdict from a saved record, for the registry.
pub fn replay(_node: &Node, v: &serde_json::Value) -> Result<Vec<Finding>, String> {
    let r: Record = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(verdict::findings(&r))
}
