//! Is the GPU healthy? A fresh process creates a context on every device, allocates, clears
//! and synchronizes. Used after a probe worker had to be killed.

use crate::live::cuda;
use cudarc::driver::sys;
use std::time::Instant;

pub fn worker() -> Result<serde_json::Value, String> {
    let t0 = Instant::now();
    if let Some(p) = cuda::library_problem() {
        return Err(p);
    }
    cuda::init().map_err(|e| e.to_string())?;
    let n = cuda::device_count().map_err(|e| e.to_string())?;
    let mut devs = Vec::new();
    for i in 0..n {
        let d = cuda::device(i).map_err(|e| e.to_string())?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: plain driver calls on a device handle we got from cuDeviceGet; the buffer is
        // ours for the duration of the block.
        let r = unsafe {
            cuda::check(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, d),
            )
            .and_then(|_| cuda::check("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx)))
            .and_then(|_| {
                let mut p: sys::CUdeviceptr = 0;
                cuda::check("cuMemAlloc", sys::cuMemAlloc_v2(&mut p, 1 << 20))?;
                let r = cuda::check("cuMemsetD8", sys::cuMemsetD8_v2(p, 0x5a, 1 << 20))
                    .and_then(|_| cuda::check("cuCtxSynchronize", sys::cuCtxSynchronize()));
                let _ = sys::cuMemFree_v2(p);
                r
            })
        };
        devs.push(serde_json::json!({"ordinal": i, "bdf": cuda::pci_bus_id(d).unwrap_or_default(), "ok": r.is_ok(), "error": r.err().map(|e| e.to_string())}));
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
