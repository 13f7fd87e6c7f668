//! NCCL across an allocation (`gdrdoctor preflight`, stage 2 and 3): one communicator over
//! every GPU of every node, this node's GPUs driven by one worker process ([`super::allocation_worker`])
//! as `probe --nccl` drives a node's: `ncclCommInitRank` per GPU in one group, one all-reduce
//! (sums checked, bus bandwidth), then the pairs' rounds (`ncclSend`/`ncclRecv` per rail, a
//! one-float all-reduce as the barrier before each round), with `NCCL_DEBUG=INFO` written into
//! a private directory that the parent reads after the worker ended (also after it was killed
//! at its deadline: a hung run still leaves its log).
//!
//! The node that makes NCCL's id (`ncclGetUniqueId`) says it on its progress line
//! (`nccl-id <hex>`) before it initialises: its parent passes it to rank 0, which starts the
//! other nodes with it. Every worker announces each step it enters (`step <name>`), so a node
//! killed at the deadline is known by where it stood.

use super::{read_capped, PrivateDir, BASE_ENV, LOG_CAP, LOG_FILE};
use crate::worker::runner::{self, RunFailure};
use gdrdoctor_checks::preflight::model::{NcclOutput, NodeRun, RunSpec};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The worker task's name.
pub const TASK: &str = "nccl-allocation";

pub use super::allocation_worker::Params;

/// Run this node's part of `spec` in a worker with a deadline (parent side; I/O). `on_id`
/// receives NCCL's id (hex) when this node makes it.
pub fn run(
    spec: &RunSpec,
    library: &str,
    deadline: Duration,
    on_id: &(dyn Fn(&str) + Sync),
) -> NodeRun {
    let mut env: BTreeMap<String, String> = BASE_ENV
        .iter()
        .filter(|(k, _)| !k.ends_with("_DUMP_FILE_RANK"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.extend(spec.env.clone());
    let mut out = NodeRun {
        first_rank: spec.first_rank,
        gpus: spec.gpus,
        ..Default::default()
    };
    let dir = match PrivateDir::create(&format!("preflight-{}", spec.label)) {
        Ok(d) => d,
        Err(e) => {
            out.problem = Some(format!(
                "cannot make a private directory for NCCL's log: {e}"
            ));
            return out;
        }
    };
    let log_path = dir.0.join(LOG_FILE);
    env.insert("NCCL_DEBUG_FILE".into(), log_path.display().to_string());
    let params = Params {
        spec: spec.clone(),
        library: library.to_string(),
        env,
    };
    let step: Mutex<Option<String>> = Mutex::new(None);
    let progress = |p: &str| {
        if let Some(id) = p.strip_prefix("nccl-id ") {
            on_id(id.trim());
        } else if let Some(s) = p.strip_prefix("step ") {
            *step.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.trim().to_string());
        }
    };
    let t0 = std::time::Instant::now();
    let ran = runner::run(TASK, &params, deadline, &progress);
    out.elapsed_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
    match ran {
        Err(e) => out.problem = Some(e.to_string()),
        Ok(w) => match w.output::<NcclOutput>() {
            Ok(o) => out.output = Some(o),
            Err(f) => {
                out.timed_out = matches!(f, RunFailure::TimedOut { .. });
                out.problem = Some(f.to_string());
            }
        },
    }
    out.step = step.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut errors = Vec::new();
    match read_capped(&log_path, LOG_CAP, &mut errors) {
        Some((t, cut)) => {
            out.log = Some(t);
            if cut {
                out.log_error = Some(format!(
                    "the log was longer than {LOG_CAP} bytes: only NCCL's decision lines are kept"
                ));
            }
        }
        None => {
            out.log_error = Some(if errors.is_empty() {
                format!("NCCL wrote no log at {}", log_path.display())
            } else {
                errors.join("; ")
            });
        }
    }
    out
}

/// The worker side, for the task table.
pub fn serve(
    v: serde_json::Value,
) -> Result<serde_json::Value, crate::worker::protocol::WorkerError> {
    crate::worker::protocol::serve(v, super::allocation_worker::worker)
}
