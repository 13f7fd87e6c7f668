//! The worker side of `probe --registration` (owns the CUDA context).
//!
//! Per GPU: cuMemAlloc at 4 KiB, 64 KiB, 2 MiB, 1 GiB and a range at an offset that is not
//! 64 KiB aligned, each exported as a dma-buf (`cuMemGetHandleForAddressRange`); managed memory
//! (refused, which is the point); pinned host memory (`cuMemHostRegister`) as the host baseline;
//! and, with libibverbs and an RDMA device, `ibv_reg_mr` on the device pointer (peer-memory
//! path) and `ibv_reg_dmabuf_mr` on the fd (dma-buf path), plus NCCL's fd=-1 probe, the
//! memory_peers counters and NVML's BAR1 usage before and after. Ground truth §2.2 D01-D06,
//! §2.8 P01-P02, §2.10.

use super::{GpuResult, Params, Result_, Step, Timing, SIZES};
use crate::live::cuda::{self, Context, Driver, HostMemory};
use crate::live::{os, verbs};
use crate::worker::protocol::{self, WorkerError};
use std::time::Instant;

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Allocate, export, close and free each size `reps` times; medians and p90s.
fn repeat_timings(ctx: &Context, reps: usize) -> Vec<Timing> {
    let mut out = Vec::new();
    for &size in &SIZES {
        let (mut a, mut e, mut f) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let t0 = Instant::now();
            let Ok(buf) = ctx.alloc(size as usize) else {
                break;
            };
            a.push(t0.elapsed().as_secs_f64() * 1e6);
            let t0 = Instant::now();
            if let Ok(fd) = buf.export_dmabuf() {
                e.push(t0.elapsed().as_secs_f64() * 1e6);
                drop(fd);
            }
            let t0 = Instant::now();
            let _ = buf.free();
            f.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        out.push(Timing {
            bytes: size,
            runs: a.len(),
            alloc_us_median: pct(&mut a, 0.5),
            alloc_us_p90: pct(&mut a, 0.9),
            export_us_median: pct(&mut e, 0.5),
            export_us_p90: pct(&mut e, 0.9),
            free_us_median: pct(&mut f, 0.5),
        });
    }
    out
}

fn step(name: &str, bytes: u64, t0: Instant, r: Result<(), String>) -> Step {
    Step {
        step: name.to_string(),
        bytes,
        ok: r.is_ok(),
        us: t0.elapsed().as_secs_f64() * 1e6,
        error: r.err(),
        errno: None,
    }
}

/// A verbs call's step: its errno kept beside the message, for the verdict's cause and fix.
fn verbs_step(name: &str, bytes: u64, t0: Instant, r: Result<(), verbs::VerbsError>) -> Step {
    let errno = r.as_ref().err().map(|e| e.errno);
    Step {
        errno,
        ..step(
            name,
            bytes,
            t0,
            r.map_err(|e| format!("errno {}: {}", e.errno, e.message)),
        )
    }
}

/// The peer-memory counters, read through the reader (the live node's files, or the test-only
/// `GDRDOCTOR_LIVE_ROOT`).
fn memory_peers() -> Option<std::collections::BTreeMap<String, u64>> {
    const DIR: &str = "/sys/kernel/mm/memory_peers/nv_mem";
    let root = crate::source::reader::Root::live();
    let entries = root.read_dir(DIR).ok()?;
    let mut m = std::collections::BTreeMap::new();
    for e in entries {
        if e.name.starts_with("num_") {
            if let Some(v) = root
                .read_trimmed(&format!("{DIR}/{}", e.name))
                .ok()
                .and_then(|s| s.parse().ok())
            {
                m.insert(e.name, v);
            }
        }
    }
    Some(m)
}

fn bar1_used(bdf: &str) -> Option<u64> {
    let nvml = crate::live::nvml::open().ok()?;
    let n = nvml.device_count().ok()?;
    for i in 0..n {
        let d = nvml.device_by_index(i).ok()?;
        if cuda::normalize_bdf(&d.pci_info().ok()?.bus_id) == bdf {
            return d.bar1_memory_info().ok().map(|b| b.used);
        }
    }
    None
}

/// The worker side of `probe --registration`.
pub fn worker(p: Params) -> Result<Result_, WorkerError> {
    let drv = Driver::init()?;
    let mut out = Result_ {
        driver_version: drv.version()?,
        page_size: os::page_size(),
        ..Default::default()
    };
    let only: Option<i32> = p.gpu.filter(|g| *g >= 0);
    let reps = (p.repeat as usize).clamp(1, 1000);
    let v = match verbs::Verbs::load() {
        Ok(v) => Some(v),
        Err(e) => {
            out.verbs_skipped = Some(e.to_string());
            None
        }
    };
    if let Some(v) = &v {
        match v.devices() {
            Ok(d) if d.is_empty() => out.verbs_skipped = Some("libibverbs loaded, but there is no RDMA device (ibv_get_device_list returned none)".into()),
            Ok(d) => out.rdma_devices = d.into_iter().map(|d| d.name).collect(),
            Err(e) => out.verbs_skipped = Some(format!("ibv_get_device_list: {}", e.message)),
        }
    }
    let n = drv.device_count()?;
    for i in (0..n).filter(|i| only.is_none_or(|o| o == *i)) {
        protocol::progress(&format!("gpu {i}: allocating and exporting"));
        let d = drv.device(i)?;
        let mut g = GpuResult {
            ordinal: i,
            bdf: d.bdf().unwrap_or_default(),
            name: d.name(),
            ..Default::default()
        };
        g.bar1_used_before = bar1_used(&g.bdf);
        g.memory_peers_before = memory_peers();
        let ctx = d.primary_context()?;
        // (buffer, size, its dma-buf fd when the export worked)
        let mut keep = Vec::new();
        for &size in &SIZES {
            let t0 = Instant::now();
            let r = ctx.alloc(size as usize);
            let buf = match r {
                Ok(b) => {
                    g.steps.push(step("cuMemAlloc", size, t0, Ok(())));
                    b
                }
                Err(e) => {
                    g.steps
                        .push(step("cuMemAlloc", size, t0, Err(e.to_string())));
                    continue;
                }
            };
            let t0 = Instant::now();
            let fd = buf.export_dmabuf();
            g.steps.push(step(
                "dmabuf-export",
                size,
                t0,
                fd.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            ));
            keep.push((buf, size, fd.ok()));
        }
        // A range that starts 4 KiB into an allocation: page aligned, not 64 KiB aligned.
        if let Some((buf, _, _)) = keep.iter().find(|(_, s, _)| *s == 2 << 20) {
            let t0 = Instant::now();
            let r = buf.export_dmabuf_range(4096, 64 << 10);
            g.steps.push(step(
                "dmabuf-export-offset-4k",
                64 << 10,
                t0,
                r.map(drop).map_err(|e| e.to_string()),
            ));
        }
        // Managed memory: the driver refuses to export it (and peer memory cannot pin it).
        {
            let t0 = Instant::now();
            match ctx.alloc_managed(2 << 20) {
                Ok(m) => {
                    g.steps.push(step("cuMemAllocManaged", 2 << 20, t0, Ok(())));
                    let t0 = Instant::now();
                    let e = m.export_dmabuf();
                    g.steps.push(step(
                        "dmabuf-export-managed",
                        2 << 20,
                        t0,
                        e.map(drop).map_err(|e| e.to_string()),
                    ));
                }
                Err(e) => g
                    .steps
                    .push(step("cuMemAllocManaged", 2 << 20, t0, Err(e.to_string()))),
            }
        }
        // Pinned host memory, the host-memory baseline for registration.
        if let Some(mut host) = HostMemory::alloc(2 << 20, 1 << 21) {
            let size = host.len() as u64;
            let t0 = Instant::now();
            let r = ctx.register_host(&mut host);
            // Timed up to the registration; unregistering (the drop) comes after.
            let s = step(
                "cuMemHostRegister",
                size,
                t0,
                r.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            );
            g.steps.push(s);
            drop(r);
        }
        // Verbs: register GPU memory both ways on every RDMA device.
        if let Some(v) = &v {
            for dev in out.rdma_devices.clone() {
                protocol::progress(&format!("gpu {i}: registering with {dev}"));
                // A device that cannot be opened, or gives no protection domain, keeps its
                // errno (EACCES on /dev/infiniband/uverbs*...) and gets no dma-buf probe.
                let t0 = Instant::now();
                let vctx = match v.open(&dev) {
                    Ok(c) => c,
                    Err(e) => {
                        g.verbs
                            .push(verbs_step(&format!("ibv_open_device {dev}"), 0, t0, Err(e)));
                        out.nccl_dmabuf_probe.entry(dev.clone()).or_insert(None);
                        continue;
                    }
                };
                let t0 = Instant::now();
                let pd = match vctx.alloc_pd() {
                    Ok(pd) => pd,
                    Err(e) => {
                        g.verbs
                            .push(verbs_step(&format!("ibv_alloc_pd {dev}"), 0, t0, Err(e)));
                        out.nccl_dmabuf_probe.entry(dev.clone()).or_insert(None);
                        continue;
                    }
                };
                if out.nccl_dmabuf_probe.get(&dev).copied().flatten().is_none() {
                    out.nccl_dmabuf_probe
                        .insert(dev.clone(), Some(pd.dmabuf_probe().errno()));
                }
                let access = verbs::ACCESS_LOCAL_WRITE
                    | verbs::ACCESS_REMOTE_WRITE
                    | verbs::ACCESS_REMOTE_READ;
                for (buf, size, fd) in keep
                    .iter()
                    .filter(|(_, s, _)| *s == 4 << 10 || *s == 2 << 20)
                {
                    let (p, size) = (buf.device_ptr(), *size);
                    let t0 = Instant::now();
                    let r = pd.reg_mr(p, size as usize, access);
                    g.verbs.push(verbs_step(
                        &format!("ibv_reg_mr {dev}"),
                        size,
                        t0,
                        r.map(drop),
                    ));
                    if let Some(fd) = fd {
                        use std::os::fd::AsRawFd;
                        let t0 = Instant::now();
                        let r = pd.reg_dmabuf_mr(0, size as usize, p, fd.as_raw_fd(), access);
                        g.verbs.push(verbs_step(
                            &format!("ibv_reg_dmabuf_mr {dev}"),
                            size,
                            t0,
                            r.map(drop),
                        ));
                    }
                }
            }
        }
        if reps > 1 {
            protocol::progress(&format!(
                "gpu {i}: timing {reps} rounds of alloc/export/free"
            ));
            g.timing = repeat_timings(&ctx, reps);
        }
        g.bar1_used_after = bar1_used(&g.bdf);
        g.memory_peers_after = memory_peers();
        // Each fd is closed before its buffer is freed, all before the context goes.
        for (buf, _, fd) in keep {
            drop(fd);
            drop(buf);
        }
        drop(ctx);
        out.gpus.push(g);
    }
    Ok(out)
}
