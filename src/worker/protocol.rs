//! The parent-worker protocol, version [`PROTOCOL`]. The parent starts `gdrdoctor __worker
//! TASK`, writes one [`Request`] as JSON on the worker's stdin and closes it; the worker prints
//! exactly one line `GDRDOCTOR-RESULT <Reply as JSON>` on stdout and exits. Every other stdout
//! line is raw output (device `printf`), kept in order; lines `GDRDOCTOR-PROGRESS <text>` on
//! stderr drive the progress display. A task's parameters and output are serde types of the
//! probe that owns the task; the error taxonomy is [`WorkerError`].
//!
//! This module is a leaf: the probes, the runner (parent side) and the worker (child side) use
//! it, and it uses none of them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// The protocol version. A reply of another version is a protocol error, never read as data.
pub const PROTOCOL: u32 = 1;

pub const RESULT_PREFIX: &str = "GDRDOCTOR-RESULT ";
pub const PROGRESS_PREFIX: &str = "GDRDOCTOR-PROGRESS ";

/// What the parent asks a worker to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub protocol: u32,
    /// The task: a probe's name (`registration`, `hang`, ...) or a built-in (`live-nvml`,
    /// `live-cuda`, `health`, `selftest-*`).
    pub task: String,
    /// The task's parameters (its own serde type).
    #[serde(default)]
    pub params: serde_json::Value,
}

impl Request {
    pub fn new(task: &str, params: &impl Serialize) -> Result<Request, String> {
        Ok(Request {
            protocol: PROTOCOL,
            task: task.to_string(),
            params: serde_json::to_value(params)
                .map_err(|e| format!("worker request for `{task}`: {e}"))?,
        })
    }
}

/// What a worker answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    pub protocol: u32,
    pub task: String,
    pub outcome: Outcome,
}

/// The task's output (its own serde type), or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Ok(serde_json::Value),
    Err(WorkerError),
}

/// Why a worker could not do its task. The text (`Display`) is what the findings say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WorkerError {
    /// A library the task needs cannot be loaded (libcuda, NVML, libibverbs).
    LibraryMissing { library: String, detail: String },
    /// A driver call failed.
    Cuda {
        call: String,
        code: i32,
        name: String,
    },
    /// The request could not be understood: unknown task, parameters of the wrong shape, or
    /// another protocol version.
    BadRequest { detail: String },
    /// The worker panicked (a symbol missing from an old driver, say).
    Panicked { message: String },
    /// Anything else, in words.
    Failed { detail: String },
}

impl std::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerError::LibraryMissing { detail, .. } => f.write_str(detail),
            WorkerError::Cuda { call, code, name } => write!(f, "{call} failed: {name} ({code})"),
            WorkerError::BadRequest { detail } => write!(f, "bad worker request: {detail}"),
            WorkerError::Panicked { message } => write!(f, "worker panicked: {message}"),
            WorkerError::Failed { detail } => f.write_str(detail),
        }
    }
}

impl std::error::Error for WorkerError {}

impl From<crate::live::cuda::CuError> for WorkerError {
    fn from(e: crate::live::cuda::CuError) -> WorkerError {
        WorkerError::Cuda {
            call: e.call.to_string(),
            code: e.code,
            name: e.name,
        }
    }
}

impl From<crate::live::cuda::InitError> for WorkerError {
    fn from(e: crate::live::cuda::InitError) -> WorkerError {
        match e {
            crate::live::cuda::InitError::LibraryMissing(detail) => WorkerError::LibraryMissing {
                library: "libcuda.so.1".into(),
                detail,
            },
            crate::live::cuda::InitError::Init(e) => e.into(),
        }
    }
}

impl From<String> for WorkerError {
    fn from(detail: String) -> WorkerError {
        WorkerError::Failed { detail }
    }
}

impl From<&str> for WorkerError {
    fn from(detail: &str) -> WorkerError {
        WorkerError::Failed {
            detail: detail.to_string(),
        }
    }
}

/// Decode a task's parameters (a worker-side helper).
pub fn params<P: DeserializeOwned>(v: serde_json::Value) -> Result<P, WorkerError> {
    serde_json::from_value(v).map_err(|e| WorkerError::BadRequest {
        detail: format!("parameters: {e}"),
    })
}

/// Encode a task's output (a worker-side helper).
pub fn output<O: Serialize>(o: &O) -> Result<serde_json::Value, WorkerError> {
    serde_json::to_value(o).map_err(|e| WorkerError::Failed {
        detail: format!("cannot encode the result: {e}"),
    })
}

/// A task's worker side, typed: decode the parameters, run, encode the output.
pub fn serve<P: DeserializeOwned, O: Serialize>(
    v: serde_json::Value,
    f: impl FnOnce(P) -> Result<O, WorkerError>,
) -> Result<serde_json::Value, WorkerError> {
    output(&f(params(v)?)?)
}

/// Worker side: a progress line for the parent's display.
pub fn progress(msg: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{PROGRESS_PREFIX}{msg}");
}

/// Worker side: print the reply line (flushed: the worker may exit right after).
pub fn reply(task: &str, outcome: Outcome) {
    let r = Reply {
        protocol: PROTOCOL,
        task: task.to_string(),
        outcome,
    };
    let line = serde_json::to_string(&r).unwrap_or_else(|e| {
        format!(
            r#"{{"protocol":{PROTOCOL},"task":{},"outcome":{{"err":{{"kind":"failed","detail":"cannot encode the reply: {}"}}}}}}"#,
            serde_json::Value::String(task.to_string()),
            e.to_string().replace(['"', '\\'], "'")
        )
    });
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{RESULT_PREFIX}{line}");
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn replies_and_errors_round_trip_with_their_text() {
        let e = WorkerError::Cuda {
            call: "cuInit".into(),
            code: 100,
            name: "CUDA_ERROR_NO_DEVICE".into(),
        };
        assert_eq!(e.to_string(), "cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
        let r = Reply {
            protocol: PROTOCOL,
            task: "hang".into(),
            outcome: Outcome::Err(e),
        };
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.contains(r#""kind":"cuda""#), "{j}");
        assert_eq!(serde_json::from_str::<Reply>(&j).unwrap(), r);
        let ok = Reply {
            protocol: PROTOCOL,
            task: "p2p".into(),
            outcome: Outcome::Ok(serde_json::json!({"pairs": []})),
        };
        let j = serde_json::to_string(&ok).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&j).unwrap(), ok);
        // Unknown fields are a protocol error, not silently dropped.
        assert!(serde_json::from_str::<Reply>(
            r#"{"protocol":1,"task":"x","outcome":{"ok":1},"extra":2}"#
        )
        .is_err());
    }

    #[test]
    fn typed_tasks_reject_parameters_of_the_wrong_shape() {
        #[derive(Deserialize)]
        struct P {
            #[allow(dead_code)]
            n: u32,
        }
        let r = serve(serde_json::json!({"n": "x"}), |_: P| Ok(1));
        assert!(matches!(r, Err(WorkerError::BadRequest { .. })), "{r:?}");
        let r = serve(serde_json::json!({"n": 3}), |p: P| Ok(p.n * 2));
        assert_eq!(r.unwrap(), serde_json::json!(6));
    }
}
