//! The worker side of `probe --nccl`: set NCCL's environment, prepare one send and one receive
//! buffer and a stream per GPU (CUDA through `live::cuda`), `dlopen` NCCL, make one
//! communicator per GPU (`ncclCommInitAll`), run one all-reduce (float32 sum, rank r sends
//! r + 1 everywhere), wait for it, read the sums back, and destroy the communicators. NCCL's
//! own failures are part of the output (with the log the parent reads, they are what the
//! verdict reports), not worker errors.

use super::{Output, Params, RankGpu, Sums};
use crate::live::cuda::{DeviceBuffer, Driver, Stream};
use crate::live::nccl::Nccl;
use crate::worker::protocol::{self, WorkerError};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Elements read back per GPU to check the sums.
const CHECKED: usize = 4096;

struct Gpu {
    send: DeviceBuffer,
    recv: DeviceBuffer,
    stream: Stream,
}

/// Every `NCCL_*` variable of this process.
fn nccl_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

pub fn worker(p: Params) -> Result<Output, WorkerError> {
    // NCCL reads its environment once, when it first initialises: set it before loading it.
    // The worker is single-threaded here.
    for (k, v) in &p.env {
        std::env::set_var(k, v);
    }
    let drv = Driver::init()?;
    let n = drv.device_count()?;
    let ordinals: Vec<i32> = match &p.gpus {
        None => (0..n).collect(),
        Some(list) => list
            .iter()
            .copied()
            .filter(|x| (0..n).contains(x))
            .collect(),
    };
    if ordinals.is_empty() {
        return Err(WorkerError::Failed {
            detail: format!(
                "no cuda device to run nccl on: {n} visible, asked for {:?}",
                p.gpus
            ),
        });
    }
    let count = p.count.clamp(1, 1 << 28);
    let mut out = Output {
        version: None,
        version_code: None,
        ranks: Vec::new(),
        env: BTreeMap::new(),
        init_ms: None,
        allreduce_ms: None,
        sums: None,
        error: None,
    };
    let mut gpus = Vec::new();
    for (rank, &o) in ordinals.iter().enumerate() {
        let d = drv.device(o)?;
        out.ranks.push(RankGpu {
            rank: rank as u32,
            cuda: o,
            bdf: d.bdf().unwrap_or_default(),
        });
        let ctx = d.primary_context()?;
        let send = ctx.alloc(count * 4)?;
        let recv = ctx.alloc(count * 4)?;
        send.memset_d32((rank as f32 + 1.0).to_bits())?;
        recv.memset_d32(0)?;
        let stream = ctx.stream()?;
        gpus.push(Gpu { send, recv, stream });
    }
    protocol::progress(&format!("probe --nccl: loading {}", p.library));
    let nccl = Nccl::load(Path::new(&p.library)).map_err(|detail| WorkerError::LibraryMissing {
        library: p.library.clone(),
        detail,
    })?;
    match nccl.version() {
        Ok(code) => {
            out.version_code = Some(code);
            out.version =
                gdrdoctor_checks::nccl::Version::from_code(i64::from(code)).map(|v| v.to_string());
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    protocol::progress(&format!(
        "probe --nccl ({}): ncclCommInitAll over {} gpu(s)",
        p.label,
        ordinals.len()
    ));
    let t0 = Instant::now();
    let comms = match nccl.init_all(&ordinals) {
        Ok(c) => c,
        Err(e) => {
            out.init_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
            out.error = Some(e.to_string());
            out.env = nccl_env();
            return Ok(out);
        }
    };
    out.init_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
    out.env = nccl_env();
    protocol::progress(&format!("probe --nccl ({}): all-reduce", p.label));
    let bufs: Vec<(&DeviceBuffer, &DeviceBuffer, &Stream)> =
        gpus.iter().map(|g| (&g.send, &g.recv, &g.stream)).collect();
    let t1 = Instant::now();
    let run = comms
        .all_reduce_sum_f32(&bufs, count)
        .map_err(|e| e.to_string());
    let run = run.and_then(|()| {
        for g in &gpus {
            g.stream
                .context()
                .make_current()
                .and_then(|()| g.stream.synchronize())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    match run {
        Err(e) => out.error = Some(e),
        Ok(()) => {
            out.allreduce_ms = Some(t1.elapsed().as_secs_f64() * 1e3);
            let n = ordinals.len() as f32;
            let expected = n * (n + 1.0) / 2.0;
            let mut sums = Sums {
                expected,
                checked: 0,
                wrong: 0,
                first_wrong: None,
            };
            let k = count.min(CHECKED);
            for (rank, g) in gpus.iter().enumerate() {
                let mut host = vec![0u8; k * 4];
                g.recv.copy_to_host(&mut host)?;
                for (i, w) in host.chunks_exact(4).enumerate() {
                    let v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    sums.checked += 1;
                    if v != expected {
                        sums.wrong += 1;
                        sums.first_wrong.get_or_insert((rank as u32, i, v));
                    }
                }
            }
            out.sums = Some(sums);
        }
    }
    // The communicators first (ncclCommDestroy), then the streams and buffers.
    drop(comms);
    drop(bufs);
    drop(gpus);
    Ok(out)
}
