//! Is the GPU healthy? A fresh process creates a context on every device, allocates, clears
//! and synchronizes. Used after a probe worker had to be killed.

use crate::live::cuda::Driver;
use std::time::Instant;

pub fn worker() -> Result<serde_json::Value, String> {
    let t0 = Instant::now();
    let drv = Driver::init().map_err(|e| e.to_string())?;
    let n = drv.device_count().map_err(|e| e.to_string())?;
    let mut devs = Vec::new();
    for i in 0..n {
        let d = drv.device(i).map_err(|e| e.to_string())?;
        let r = d.primary_context().and_then(|ctx| {
            let buf = ctx.alloc(1 << 20)?;
            buf.memset_d8(0x5a)?;
            ctx.synchronize()
        });
        devs.push(serde_json::json!({"ordinal": i, "bdf": d.bdf().unwrap_or_default(), "ok": r.is_ok(), "error": r.err().map(|e| e.to_string())}));
    }
    let ok = devs.iter().all(|d| d["ok"] == true);
    Ok(serde_json::json!({"healthy": ok, "devices": devs, "ms": t0.elapsed().as_secs_f64() * 1e3}))
}

/// Parent side: run the health worker with a deadline; `Ok(ms)` when every GPU is healthy.
pub fn check(deadline: std::time::Duration) -> Result<f64, String> {
    let run = super::runner::run("health", &[], deadline, &|_| {})?;
    if let Some(f) = run.failure() {
        return Err(f);
    }
    let v = run.result.unwrap_or_default();
    if v["healthy"] == true {
        Ok(run.elapsed.as_secs_f64() * 1e3)
    } else {
        Err(format!("gpu health check failed: {}", v))
    }
}
