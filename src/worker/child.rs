//! The child side of [`super::runner`]: `gdrdoctor __worker TASK`, with its [`Request`] on
//! stdin. Owns the CUDA context, prints one `GDRDOCTOR-RESULT <Reply>` line on stdout and exits.
//! A panic (a symbol missing from an old driver, say) becomes a reply with the panic text, not
//! a hung parent.
//!
//! First thing, before reading anything: ask the kernel to kill this process when the parent
//! goes, and check that the parent is still the one that started us.

use super::protocol::{self, Outcome, Request, WorkerError, PROTOCOL};
use super::runner::{PARENT_ENV, TEST_DELAY_ENV};
use crate::live::os;
use std::io::Read;

/// Exit code of a worker whose parent was already gone when it started.
pub const EXIT_ORPHANED: i32 = 125;

/// The largest request a worker reads (requests are a few hundred bytes).
const MAX_REQUEST: u64 = 1 << 20;

/// A table of tasks: `Some` answers a task it knows, `None` passes it on.
pub type Tasks = fn(&str, serde_json::Value) -> Option<Result<serde_json::Value, WorkerError>>;

/// `gdrdoctor __worker TASK`: serve one request with the first of `tables` that knows the task
/// (the caller's: the probes' and the collectors'), or a built-in self-test.
pub fn main(args: &[String], tables: &[Tasks]) -> i32 {
    crate::sys::trace::init();
    let code = serve_request(args, tables);
    crate::sys::trace::flush_to_parent();
    // `check`'s live-facts workers have answered (stdout flushed, stderr unbuffered): leave at
    // once, without the libraries' exit handlers (NVML's and libcuda's teardown), which the
    // parent would otherwise wait for. The probes' workers exit normally.
    if args
        .first()
        .is_some_and(|t| crate::worker::runner::leaves_after_output(t))
    {
        // Close stdout and stderr first: the parent has the whole answer at their end of file
        // and does not wait for the exit itself (the driver's teardown in the kernel).
        os::close_stdio();
        // Tests only: play a slow exit (the driver's teardown) to show nobody waits for it.
        if let Some(ms) = std::env::var("GDRDOCTOR_TEST_WORKER_LINGER_MS")
            .ok()
            .filter(|_| crate::live::stand_in::HONOURED)
            .and_then(|v| v.parse::<u64>().ok())
        {
            std::thread::sleep(std::time::Duration::from_millis(ms.min(10_000)));
        }
        os::exit_now(code);
    }
    code
}

fn serve_request(args: &[String], tables: &[Tasks]) -> i32 {
    if let Some(parent) = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    {
        if !os::die_with_parent(parent) {
            return EXIT_ORPHANED;
        }
    }
    let task = args.first().cloned().unwrap_or_default();
    // Before the request: a worker started ahead of it prepares while the parent decides.
    crate::live::prepare_worker(&task);
    let mut body = String::new();
    let req = match std::io::stdin()
        .take(MAX_REQUEST)
        .read_to_string(&mut body)
        .map_err(|e| format!("reading the request from stdin: {e}"))
        .and_then(|_| serde_json::from_str::<Request>(&body).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(detail) => {
            protocol::reply(&task, Outcome::Err(WorkerError::BadRequest { detail }));
            return 2;
        }
    };
    if req.protocol != PROTOCOL || req.task != task {
        let detail = format!(
            "a request for `{}` in protocol {}; this worker was started for `{task}` and speaks {PROTOCOL}",
            req.task, req.protocol
        );
        protocol::reply(&task, Outcome::Err(WorkerError::BadRequest { detail }));
        return 2;
    }
    if let Some(ms) = std::env::var(TEST_DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let r = std::panic::catch_unwind(|| {
        let _t = crate::sys::trace::span("worker.task");
        dispatch(tables, &req.task, req.params.clone())
    });
    let outcome = match r {
        Ok(Ok(v)) => Outcome::Ok(v),
        Ok(Err(e)) => Outcome::Err(e),
        Err(p) => {
            let message = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Outcome::Err(WorkerError::Panicked { message })
        }
    };
    let code = match outcome {
        Outcome::Ok(_) => 0,
        Outcome::Err(_) => 1,
    };
    protocol::reply(&task, outcome);
    code
}

/// The callers' tables first, then the built-in self-tests.
fn dispatch(
    tables: &[Tasks],
    task: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, WorkerError> {
    for t in tables {
        if let Some(r) = t(task, params.clone()) {
            return r;
        }
    }
    match task {
        // Self-tests of the runner (deadline, crash, garbage, result protocol); no GPU needed.
        "selftest-sleep" => protocol::serve(params, |secs: u64| {
            protocol::progress("sleeping");
            std::thread::sleep(std::time::Duration::from_secs(secs));
            Ok(serde_json::json!({"slept": secs}))
        }),
        "selftest-crash" => {
            println!("a line of raw output before the crash");
            std::process::abort();
        }
        "selftest-garbage" => {
            use std::io::Write;
            println!("{}{{\"protocol\": 1, \"task\"", protocol::RESULT_PREFIX);
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        "selftest-echo" => Ok(serde_json::json!({"params": params})),
        other => Err(WorkerError::BadRequest {
            detail: format!("unknown worker task `{other}`"),
        }),
    }
}
