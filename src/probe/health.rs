//! Is the GPU healthy? A fresh process creates a context on every device, allocates, clears
//! and synchronizes. Used after a probe worker had to be killed.

use crate::live::cuda::Driver;
use crate::worker::protocol::WorkerError;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One GPU's health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceHealth {
    pub ordinal: i32,
    pub bdf: String,
    pub ok: bool,
    pub error: Option<String>,
}

/// The health worker's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub healthy: bool,
    pub devices: Vec<DeviceHealth>,
    pub ms: f64,
}

pub fn worker() -> Result<Health, WorkerError> {
    let t0 = Instant::now();
    let drv = Driver::init()?;
    let n = drv.device_count()?;
    let mut devices = Vec::new();
    for i in 0..n {
        let d = drv.device(i)?;
        let r = d.primary_context().and_then(|ctx| {
            let buf = ctx.alloc(1 << 20)?;
            buf.memset_d8(0x5a)?;
            ctx.synchronize()
        });
        devices.push(DeviceHealth {
            ordinal: i,
            bdf: d.bdf().unwrap_or_default(),
            ok: r.is_ok(),
            error: r.err().map(|e| e.to_string()),
        });
    }
    Ok(Health {
        healthy: devices.iter().all(|d| d.ok),
        devices,
        ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}

/// Parent side: run the health worker with a deadline; `Ok(ms)` when every GPU is healthy.
pub fn check(deadline: std::time::Duration) -> Result<f64, String> {
    let run =
        crate::worker::runner::run("health", &(), deadline, &|_| {}).map_err(|e| e.to_string())?;
    let h: Health = run.output().map_err(|e| e.to_string())?;
    if h.healthy {
        Ok(run.elapsed.as_secs_f64() * 1e3)
    } else {
        Err(format!(
            "gpu health check failed: {}",
            serde_json::to_string(&h).unwrap_or_default()
        ))
    }
}
