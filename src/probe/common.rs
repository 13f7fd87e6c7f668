//! What every probe does the same way. Parent side: refuse to run without a GPU, start a worker
//! with a progress line, check the GPU's health after a worker had to be stopped, and keep what
//! happened as a [`WorkerRecord`] (the report's `probe.<name>`). Verdict side (pure): the
//! findings for a run that went wrong ([`problem_findings`]) and for the health check
//! ([`health_finding`]).

use super::health;
use crate::worker::protocol::WorkerError;
use crate::worker::runner::{self, RunFailure, WorkerRun};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long the health check in a fresh process may take.
pub const HEALTH_DEADLINE: Duration = Duration::from_secs(30);

/// The finding every probe reports on a node where it cannot run (no NVIDIA GPU on the PCI
/// bus): `error`, so the run is incomplete (exit 3) unless `--allow-incomplete`. A CI preflight
/// must not pass a GPU node whose GPUs vanished.
pub fn no_gpu(node: &Node) -> Option<Finding> {
    gdrdoctor_checks::derive::gpus(node).is_empty().then(|| {
        Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            "no nvidia gpu on the pci bus: nothing to probe",
        )
        .fix("check `lspci -d 10de:` and `dmesg` for the gpus (fallen off the bus? Xid 79?) and that this is the node you meant; `--allow-incomplete` accepts a run on a node without gpus")
    })
}

/// Start the worker for `task` with a progress line on stderr.
pub fn start(
    task: &str,
    params: &impl Serialize,
    deadline: Duration,
) -> Result<WorkerRun, RunFailure> {
    let progress = runner::Progress::new(&format!("probe --{task}: starting the worker"));
    let run = runner::run(task, params, deadline, &|m| progress.update(m));
    progress.finish();
    run
}

/// Why a worker left no output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Problem {
    /// The worker could not be started.
    Start { message: String },
    /// The run failed: it hung, crashed, wrote garbage or nothing.
    Run { message: String },
    /// The worker reported an error instead of a result.
    Worker { error: WorkerError },
}

/// The health check in a fresh process after a worker was stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum HealthCheck {
    Healthy { ms: f64 },
    Unhealthy { error: String },
}

/// Run the health worker (parent side; I/O).
pub fn check_health() -> HealthCheck {
    match health::check(HEALTH_DEADLINE) {
        Ok(ms) => HealthCheck::Healthy { ms },
        Err(error) => HealthCheck::Unhealthy { error },
    }
}

/// What the report keeps of one worker run (`probe.<name>`): what was asked, the worker's
/// output (its fields at the top level, as the worker printed them), or the problem, and the
/// health check when the worker had to be stopped. The verdict is a pure function of it, so a
/// saved report replays to the same findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord<P, T> {
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
    #[serde(flatten)]
    pub output: Option<T>,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
}

fn none<T>() -> Option<T> {
    None
}

impl<P: Serialize, T: DeserializeOwned> WorkerRecord<P, T> {
    /// Run `task` with `params` (parent side; I/O). With `health_when_stopped`, a worker killed
    /// at its deadline or crashed is followed by the health check.
    pub fn run(task: &str, params: P, deadline: Duration, health_when_stopped: bool) -> Self {
        let mut r = WorkerRecord {
            params: None,
            output: None,
            problem: None,
            health: None,
        };
        match start(task, &params, deadline) {
            Err(e) => {
                r.problem = Some(Problem::Start {
                    message: e.to_string(),
                })
            }
            Ok(run) => {
                match run.output::<T>() {
                    Ok(o) => r.output = Some(o),
                    Err(RunFailure::Worker(error)) => r.problem = Some(Problem::Worker { error }),
                    Err(f) => {
                        r.problem = Some(Problem::Run {
                            message: f.to_string(),
                        })
                    }
                }
                if health_when_stopped && run.outcome.stopped() {
                    r.health = Some(check_health());
                }
            }
        }
        r.params = Some(params);
        r
    }
}

impl<P: Serialize, T: Serialize> WorkerRecord<P, T> {
    /// The record as the report keeps it.
    pub fn to_value(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }
}

/// `probe.gpu-health` from a health check after a stopped worker.
pub fn health_finding(h: &HealthCheck) -> Finding {
    match h {
        HealthCheck::Healthy { ms } => Finding::new(
            "probe.gpu-health",
            Status::Pass,
            "node",
            format!("gpus healthy in a fresh process {ms:.0} ms after the worker was stopped"),
        ),
        HealthCheck::Unhealthy { error } => Finding::new(
            "probe.gpu-health",
            Status::Fail,
            "node",
            format!("gpu not healthy after the worker was stopped: {error}"),
        )
        .fix("check `nvidia-smi` and `dmesg` for Xid errors; a GPU that stays hung needs `nvidia-smi -r` (reset) or a reboot"),
    }
}

/// The findings of a run without output: `probe.cuda` errors (a worker error worded by
/// `worker_error`), then the health check. Empty when the record has output and no problem.
pub fn problem_findings<P, T>(
    r: &WorkerRecord<P, T>,
    worker_error: impl Fn(&WorkerError) -> Finding,
) -> Vec<Finding> {
    let mut out = Vec::new();
    match &r.problem {
        None => return out,
        Some(Problem::Start { message }) | Some(Problem::Run { message }) => out.push(
            Finding::new("probe.cuda", Status::Error, "node", message.clone()),
        ),
        Some(Problem::Worker { error }) => out.push(worker_error(error)),
    }
    if let Some(h) = &r.health {
        out.push(health_finding(h));
    }
    out
}

/// A worker error as a `probe.cuda` error, with `context` before it.
pub fn worker_error_finding(context: &str, e: &WorkerError) -> Finding {
    Finding::new(
        "probe.cuda",
        Status::Error,
        "node",
        format!("{context}: {e}"),
    )
}

/// Human text for a CUDA error name, with the usual cause.
pub fn explain_cuda(err: &str) -> &'static str {
    if err.contains("CUDA_ERROR_NOT_SUPPORTED") {
        "the driver cannot export this memory as dma-buf: proprietary kernel modules, a driver older than R515, or a platform without dma-buf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=0)"
    } else if err.contains("CUDA_ERROR_INVALID_VALUE") {
        "the range is not exportable: managed (cudaMallocManaged) or host memory, or a range not aligned to the host page size"
    } else if err.contains("CUDA_ERROR_OUT_OF_MEMORY") {
        "the gpu is out of memory (other processes? `nvidia-smi`)"
    } else if err.contains("CUDA_ERROR_STUB_LIBRARY") {
        "the toolkit's stub libcuda.so was loaded instead of the driver's: remove .../lib64/stubs from LD_LIBRARY_PATH"
    } else if err.contains("CUDA_ERROR_NO_DEVICE") {
        "no cuda-capable device is visible (CUDA_VISIBLE_DEVICES? driver not loaded?)"
    } else if err.contains("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED") {
        "the host range is already registered"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Out {
        n: u32,
    }

    #[test]
    fn records_keep_the_output_at_the_top_level_and_round_trip() {
        let r: WorkerRecord<u32, Out> = WorkerRecord {
            params: Some(3),
            output: Some(Out { n: 7 }),
            problem: None,
            health: None,
        };
        let v = r.to_value().unwrap();
        assert_eq!(v, serde_json::json!({"params": 3, "n": 7}));
        assert_eq!(
            serde_json::from_value::<WorkerRecord<u32, Out>>(v).unwrap(),
            r
        );
        // A bare output (what reports captured before the record existed) reads back too.
        let old: WorkerRecord<u32, Out> =
            serde_json::from_value(serde_json::json!({"n": 1})).unwrap();
        assert_eq!((old.params, old.output), (None, Some(Out { n: 1 })));
    }

    #[test]
    fn a_stopped_worker_is_an_error_then_the_health_check() {
        let r: WorkerRecord<(), Out> = WorkerRecord {
            params: None,
            output: None,
            problem: Some(Problem::Run {
                message: "worker `x` did not finish within its deadline (5.0 s) and was killed"
                    .into(),
            }),
            health: Some(HealthCheck::Unhealthy {
                error: "cuInit failed".into(),
            }),
        };
        let f = problem_findings(&r, |e| worker_error_finding("x", e));
        let got: Vec<(&str, Status)> = f.iter().map(|f| (f.id.as_str(), f.status)).collect();
        assert_eq!(
            got,
            vec![
                ("probe.cuda", Status::Error),
                ("probe.gpu-health", Status::Fail)
            ]
        );
        assert!(f[0].message.contains("deadline"));
        let e = WorkerRecord::<(), Out> {
            problem: Some(Problem::Worker {
                error: WorkerError::LibraryMissing {
                    library: "libcuda.so.1".into(),
                    detail: "libcuda.so.1 not loadable".into(),
                },
            }),
            health: None,
            ..r
        };
        let f = problem_findings(&e, |e| worker_error_finding("the x probe could not run", e));
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].message,
            "the x probe could not run: libcuda.so.1 not loadable"
        );
    }
}
