//! The child side of `probe::runner`: `gdrdoctor __worker TASK [ARGS]`. Owns the CUDA context,
//! prints `GDRDOCTOR-RESULT <json>` on stdout and exits. A panic (a symbol missing from an old
//! driver, say) becomes a result with the panic text, not a hung parent.

use crate::probe::runner::{PROGRESS_PREFIX, RESULT_PREFIX};
use std::io::Write;

pub fn progress(msg: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{PROGRESS_PREFIX}{msg}");
}

fn emit(v: &serde_json::Value) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{RESULT_PREFIX}{v}");
    let _ = o.flush();
}

pub fn main(args: &[String]) -> i32 {
    let task = args.first().map(String::as_str).unwrap_or("");
    let rest = args.get(1..).unwrap_or(&[]).to_vec();
    let r = std::panic::catch_unwind(|| run(task, &rest));
    match r {
        Ok(Ok(v)) => {
            emit(&v);
            0
        }
        Ok(Err(e)) => {
            emit(&serde_json::json!({"error": e}));
            1
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            emit(&serde_json::json!({"error": format!("worker panicked: {msg}")}));
            1
        }
    }
}

fn run(task: &str, args: &[String]) -> Result<serde_json::Value, String> {
    match task {
        "live-facts" => serde_json::to_value(crate::live::gather()).map_err(|e| e.to_string()),
        "health" => crate::probe::health::worker(),
        "registration" => crate::probe::registration::worker(args),
        "hang" => crate::probe::hang::worker(args),
        "doorbell" => crate::probe::doorbell::worker(args),
        "p2p" => crate::probe::p2p::worker(args),
        // Self-tests of the runner (deadline, crash, result protocol); no GPU needed.
        "selftest-sleep" => {
            let secs: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(60);
            progress("sleeping");
            std::thread::sleep(std::time::Duration::from_secs(secs));
            Ok(serde_json::json!({"slept": secs}))
        }
        "selftest-crash" => {
            println!("a line of raw output before the crash");
            std::process::abort();
        }
        "selftest-echo" => Ok(serde_json::json!({"args": args})),
        other => Err(format!("unknown worker task `{other}`")),
    }
}
