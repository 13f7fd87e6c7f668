//! `probe --p2p`: peer copy bandwidth and latency per GPU pair (what cuda-samples'
//! p2pBandwidthLatencyTest measures), beside the link's theoretical rate so a slow pair stands
//! out. Worker side copies with `cuMemcpyPeerAsync` after `cuCtxEnablePeerAccess` both ways;
//! the parent turns the numbers into findings. On a one-GPU node the worker measures the same
//! copies inside the GPU as a reference and the pairs are skipped.

use crate::live::cuda;
use cudarc::driver::sys;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// One direction (or both) between two GPUs, measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct P2pPair {
    pub a: i32,
    pub b: i32,
    pub a_bdf: String,
    pub b_bdf: String,
    /// `cuDeviceCanAccessPeer` a -> b and b -> a.
    pub can_access: bool,
    /// a -> b copies, GB/s (1e9 bytes/s).
    pub uni_gbps: Option<f64>,
    /// b -> a copies, GB/s.
    pub uni_back_gbps: Option<f64>,
    /// a -> b and b -> a at once, both directions together, GB/s.
    pub bidi_gbps: Option<f64>,
    /// 4-byte copies a -> b, back to back, host-timed, microseconds per copy.
    pub latency_us: Option<f64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct P2pOutput {
    pub gpus: Vec<(i32, String)>,
    pub size_bytes: u64,
    pub reps: u32,
    pub pairs: Vec<P2pPair>,
    /// Device-to-device copies inside GPU 0: the ceiling of a copy on this GPU.
    pub reference: Option<P2pPair>,
}

fn cu(call: &'static str, r: sys::CUresult) -> Result<(), String> {
    cuda::check(call, r).map_err(|e| e.to_string())
}

struct Dev {
    ordinal: i32,
    ctx: sys::CUcontext,
    buf: [sys::CUdeviceptr; 2],
    stream: sys::CUstream,
}

/// Time `reps` copies of `size` bytes from `src` (in `sctx`) to `dst` (in `dctx`) on `stream`.
fn copies(
    dst: (sys::CUdeviceptr, sys::CUcontext),
    src: (sys::CUdeviceptr, sys::CUcontext),
    size: usize,
    reps: u32,
    stream: sys::CUstream,
) -> Result<f64, String> {
    // SAFETY: buffers of at least `size` bytes in their contexts, peer access enabled.
    unsafe {
        cu(
            "cuMemcpyPeerAsync",
            sys::cuMemcpyPeerAsync(dst.0, dst.1, src.0, src.1, size, stream),
        )?;
        cu("cuStreamSynchronize", sys::cuStreamSynchronize(stream))?;
        let t0 = Instant::now();
        for _ in 0..reps {
            cu(
                "cuMemcpyPeerAsync",
                sys::cuMemcpyPeerAsync(dst.0, dst.1, src.0, src.1, size, stream),
            )?;
        }
        cu("cuStreamSynchronize", sys::cuStreamSynchronize(stream))?;
        Ok(t0.elapsed().as_secs_f64())
    }
}

fn measure(x: &Dev, y: &Dev, size: usize, reps: u32) -> Result<P2pPair, String> {
    let mut p = P2pPair {
        a: x.ordinal,
        b: y.ordinal,
        can_access: true,
        ..Default::default()
    };
    let bytes = size as f64 * f64::from(reps);
    // SAFETY: x's context owns x.stream.
    cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(x.ctx) })?;
    let t = copies((y.buf[0], y.ctx), (x.buf[0], x.ctx), size, reps, x.stream)?;
    p.uni_gbps = Some(bytes / t / 1e9);
    // SAFETY: y's context owns y.stream.
    cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(y.ctx) })?;
    let t = copies((x.buf[1], x.ctx), (y.buf[1], y.ctx), size, reps, y.stream)?;
    p.uni_back_gbps = Some(bytes / t / 1e9);
    // Both directions at once: enqueue both, then wait for both.
    let t0 = Instant::now();
    // SAFETY: as above; each stream in its own context.
    unsafe {
        for _ in 0..reps {
            cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(x.ctx))?;
            cu(
                "cuMemcpyPeerAsync",
                sys::cuMemcpyPeerAsync(y.buf[0], y.ctx, x.buf[0], x.ctx, size, x.stream),
            )?;
            cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(y.ctx))?;
            cu(
                "cuMemcpyPeerAsync",
                sys::cuMemcpyPeerAsync(x.buf[1], x.ctx, y.buf[1], y.ctx, size, y.stream),
            )?;
        }
        cu("cuStreamSynchronize", sys::cuStreamSynchronize(x.stream))?;
        cu("cuStreamSynchronize", sys::cuStreamSynchronize(y.stream))?;
    }
    p.bidi_gbps = Some(2.0 * bytes / t0.elapsed().as_secs_f64() / 1e9);
    // SAFETY: back to x for the latency run.
    cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(x.ctx) })?;
    let n = 2000;
    let t = copies((y.buf[0], y.ctx), (x.buf[0], x.ctx), 4, n, x.stream)?;
    p.latency_us = Some(t / f64::from(n) * 1e6);
    Ok(p)
}

/// `__worker p2p ORDINALS SIZE_MIB REPS` (ORDINALS comma-separated, or `all`).
pub fn worker(args: &[String]) -> Result<serde_json::Value, String> {
    if let Some(p) = cuda::library_problem() {
        return Err(p);
    }
    cuda::init().map_err(|e| e.to_string())?;
    let n = cuda::device_count().map_err(|e| e.to_string())?;
    let want: Vec<i32> = match args.first().map(String::as_str) {
        None | Some("all") | Some("") => (0..n).collect(),
        Some(list) => list
            .split(',')
            .filter_map(|x| x.parse().ok())
            .filter(|x| *x < n)
            .collect(),
    };
    let size_mib: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64)
        .clamp(1, 4096);
    let reps: u32 = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20)
        .clamp(1, 10_000);
    let size = size_mib << 20;
    let mut out = P2pOutput {
        size_bytes: size as u64,
        reps,
        ..Default::default()
    };
    let mut devs = Vec::new();
    for &o in &want {
        let d = cuda::device(o).map_err(|e| e.to_string())?;
        out.gpus.push((o, cuda::pci_bus_id(d).unwrap_or_default()));
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        let mut buf = [0u64; 2];
        let mut stream: sys::CUstream = std::ptr::null_mut();
        // SAFETY: primary context, buffers and stream owned by the worker.
        unsafe {
            cu(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, d),
            )?;
            cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            for b in buf.iter_mut() {
                cu("cuMemAlloc", sys::cuMemAlloc_v2(b, size))?;
                cu("cuMemsetD8", sys::cuMemsetD8_v2(*b, 0x5a, size))?;
            }
            cu("cuStreamCreate", sys::cuStreamCreate(&mut stream, 1))?;
        }
        devs.push(Dev {
            ordinal: o,
            ctx,
            buf,
            stream,
        });
    }
    if let Some(d0) = devs.first() {
        crate::worker::progress("probe --p2p: reference copies inside one gpu");
        // Inside one GPU: buf[0] -> buf[1] of the same context.
        let twin = Dev {
            ordinal: d0.ordinal,
            ctx: d0.ctx,
            buf: [d0.buf[1], d0.buf[0]],
            stream: d0.stream,
        };
        match measure(d0, &twin, size, reps) {
            Ok(mut r) => {
                r.a_bdf = out.gpus[0].1.clone();
                r.b_bdf = r.a_bdf.clone();
                r.bidi_gbps = None; // one copy engine pair: not meaningful inside one GPU
                out.reference = Some(r);
            }
            Err(e) => {
                out.reference = Some(P2pPair {
                    error: Some(e),
                    ..Default::default()
                })
            }
        }
    }
    for i in 0..devs.len() {
        for j in i + 1..devs.len() {
            let (x, y) = (&devs[i], &devs[j]);
            crate::worker::progress(&format!(
                "probe --p2p: GPU{} <-> GPU{}",
                x.ordinal, y.ordinal
            ));
            let mut p = P2pPair {
                a: x.ordinal,
                b: y.ordinal,
                a_bdf: out.gpus[i].1.clone(),
                b_bdf: out.gpus[j].1.clone(),
                ..Default::default()
            };
            let (mut ab, mut ba) = (0i32, 0i32);
            let (dx, dy) = match (cuda::device(x.ordinal), cuda::device(y.ordinal)) {
                (Ok(a), Ok(b)) => (a, b),
                _ => continue,
            };
            // SAFETY: write one int each.
            unsafe {
                sys::cuDeviceCanAccessPeer(&mut ab, dx, dy);
                sys::cuDeviceCanAccessPeer(&mut ba, dy, dx);
            }
            p.can_access = ab != 0 && ba != 0;
            if !p.can_access {
                p.error = Some(format!(
                    "cuDeviceCanAccessPeer: {ab} (GPU{} -> GPU{}), {ba} (back)",
                    x.ordinal, y.ordinal
                ));
                out.pairs.push(p);
                continue;
            }
            let enable = |from: &Dev, to: &Dev| -> Result<(), String> {
                // SAFETY: contexts retained above.
                unsafe {
                    cu("cuCtxSetCurrent", sys::cuCtxSetCurrent(from.ctx))?;
                    let e = sys::cuCtxEnablePeerAccess(to.ctx, 0);
                    if e != sys::CUresult::CUDA_SUCCESS
                        && e != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                    {
                        cu("cuCtxEnablePeerAccess", e)?;
                    }
                }
                Ok(())
            };
            let r = enable(x, y)
                .and_then(|()| enable(y, x))
                .and_then(|()| measure(x, y, size, reps));
            match r {
                Ok(m) => {
                    p.uni_gbps = m.uni_gbps;
                    p.uni_back_gbps = m.uni_back_gbps;
                    p.bidi_gbps = m.bidi_gbps;
                    p.latency_us = m.latency_us;
                }
                Err(e) => p.error = Some(e),
            }
            out.pairs.push(p);
        }
    }
    // SAFETY: everything synchronised; free what we allocated.
    unsafe {
        for d in &devs {
            sys::cuCtxSetCurrent(d.ctx);
            sys::cuStreamDestroy_v2(d.stream);
            for b in d.buf {
                sys::cuMemFree_v2(b);
            }
        }
    }
    serde_json::to_value(&out).map_err(|e| e.to_string())
}

/// The theoretical one-direction rate of a GPU pair's link, GB/s, and how it was derived:
/// NVLink links x per-link rate by NVLink version, else the narrower GPU's PCIe link.
pub fn theoretical(node: &Node, a: &str, b: &str) -> Option<(f64, String)> {
    let pair = gdrdoctor_checks::p2p::pairs(node)
        .into_iter()
        .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))?;
    let nvml = node.live.nvml.get()?;
    let gpu = |bdf: &str| nvml.gpus.iter().find(|g| g.bdf == bdf);
    if pair.nvlinks() > 0 {
        let code = gpu(a).and_then(|g| {
            g.nvlinks
                .iter()
                .filter(|l| l.active)
                .find_map(|l| l.version)
        });
        let cc = node
            .live
            .cuda
            .get()
            .and_then(|c| c.devices.iter().find(|d| d.bdf == a))
            .map(|d| d.cc_major);
        let (per, name) = gdrdoctor_checks::p2p::nvlink_rate(cc, code);
        let n = pair.nvlinks();
        return Some((
            per * n as f64,
            format!("{n} x NVLink {name} at {per:.0} GB/s per direction"),
        ));
    }
    let lane = |gen: u32| match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        6 => 7.563,
        _ => 0.0,
    };
    let rate =
        // The link's capability (an idle GPU drops its current generation to save power; a
        // link that trained narrower is pcie.link's finding).
        |bdf: &str| gpu(bdf).and_then(|g| Some((g.pcie_gen_max?, g.pcie_width_max?)));
    let (ga, wa) = rate(a)?;
    let (gb, wb) = rate(b)?;
    let (g, w) = if lane(ga) * f64::from(wa) <= lane(gb) * f64::from(wb) {
        (ga, wa)
    } else {
        (gb, wb)
    };
    Some((
        lane(g) * f64::from(w),
        format!("PCIe Gen{g} x{w} ({})", pair.pcie.unwrap_or_default()),
    ))
}

/// Below this fraction of the link's theoretical rate a pair is slow.
pub const SLOW_FRACTION: f64 = 0.6;

/// Findings from one worker's output (pure).
pub fn findings(node: &Node, o: &P2pOutput) -> Vec<Finding> {
    const ID: &str = "probe.p2p-bandwidth";
    let mut out = Vec::new();
    let reference = o
        .reference
        .as_ref()
        .and_then(|r| r.uni_gbps.map(|g| (g, r.latency_us)));
    if o.gpus.len() < 2 {
        let mut f = Finding::new(
            ID,
            Status::Skip,
            "node",
            format!(
                "{} gpu(s) visible to cuda: no pair to measure",
                o.gpus.len()
            ),
        );
        if let Some((g, l)) = reference {
            f = f.evidence(
                format!(
                    "reference: copies inside GPU{}",
                    o.reference.as_ref().map(|r| r.a).unwrap_or(0)
                ),
                format!("{g:.1} GB/s, {:.1} us per 4-byte copy", l.unwrap_or(0.0)),
            );
        }
        out.push(f);
        return out;
    }
    for p in &o.pairs {
        let subject = format!("{}|{}", p.a_bdf, p.b_bdf);
        let theo = theoretical(node, &p.a_bdf, &p.b_bdf);
        let mut f = match (&p.error, p.uni_gbps) {
            (Some(e), _) if !p.can_access => {
                // Across the CPU without NVLink that is the platform, not a fault (gpu.p2p agrees).
                let expected = gdrdoctor_checks::p2p::pairs(node)
                    .into_iter()
                    .find(|x| {
                        (x.a == p.a_bdf && x.b == p.b_bdf) || (x.a == p.b_bdf && x.b == p.a_bdf)
                    })
                    .is_some_and(|x| {
                        x.nvlinks() == 0 && !matches!(x.pcie.as_deref(), Some("PIX" | "PXB"))
                    });
                if expected {
                    Finding::new(ID, Status::Skip, &subject, format!("no peer access between GPU{} and GPU{} across the cpu without nvlink ({e}): nothing to measure, copies go through host memory", p.a, p.b))
                } else {
                    Finding::new(ID, Status::Warn, &subject, format!("no peer access between GPU{} and GPU{} ({e}): copies between them go through host memory", p.a, p.b))
                        .fix("see `gdrdoctor check --only gpu.p2p` for why peer access is off")
                }
            }
            (Some(e), _) => Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("peer copies failed: {e}"),
            ),
            (None, Some(u)) => {
                let worst = u.min(p.uni_back_gbps.unwrap_or(u));
                match &theo {
                    Some((t, how)) if worst < SLOW_FRACTION * t => Finding::new(ID, Status::Warn, &subject, format!(
                        "slow pair: {worst:.1} GB/s one way is {:.0}% of the link's {t:.0} GB/s ({how})", worst / t * 100.0))
                        .fix("compare with the other pairs in this report; `nvidia-smi nvlink -s` / `-e` for down or erroring links, `check --only pcie.link,gpu.nvlink` for a downtrained link"),
                    Some((t, how)) => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways; {:.0}% of the link's {t:.0} GB/s ({how}); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), worst / t * 100.0, p.latency_us.unwrap_or(0.0))),
                    None => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways (link rate unknown: no nvml facts); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), p.latency_us.unwrap_or(0.0))),
                }
            }
            (None, None) => Finding::new(ID, Status::Error, &subject, "no measurement"),
        };
        if let Some((t, how)) = &theo {
            f = f.evidence("theoretical one-way rate", format!("{t:.0} GB/s ({how})"));
        }
        if let Some((g, _)) = reference {
            f = f.evidence(
                format!(
                    "reference: copies inside GPU{}",
                    o.reference.as_ref().map(|r| r.a).unwrap_or(0)
                ),
                format!("{g:.1} GB/s"),
            );
        }
        out.push(f);
    }
    out
}

/// Run the worker and report.
pub fn run(
    node: &Node,
    gpus: Option<&str>,
    size_mib: usize,
    reps: u32,
    deadline: Duration,
) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if let Some(f) = crate::probe::no_gpu(node) {
        out.push(f);
        return (out, None);
    }
    let args = vec![
        gpus.unwrap_or("all").to_string(),
        size_mib.to_string(),
        reps.to_string(),
    ];
    let Some(run) = crate::probe::start("p2p", &args, deadline, &mut out) else {
        return (out, None);
    };
    let result = run.result.clone();
    if let Some(e) = crate::probe::worker_error(result.as_ref()) {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            format!("the p2p probe could not run: {e}"),
        ));
        return (out, result);
    }
    match result
        .as_ref()
        .and_then(|v| serde_json::from_value::<P2pOutput>(v.clone()).ok())
    {
        Some(o) => out.extend(findings(node, &o)),
        None => out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            run.failure()
                .unwrap_or_else(|| "the p2p worker printed no result".into()),
        )),
    }
    (out, result)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn one_gpu_skips_with_the_reference() {
        let node = gdrdoctor_checks::testing::empty_node();
        let o = P2pOutput {
            gpus: vec![(0, "0000:00:06.0".into())],
            reference: Some(P2pPair {
                uni_gbps: Some(1800.0),
                latency_us: Some(2.0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let f = findings(&node, &o);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Skip);
        assert!(f[0].evidence[0].observed.contains("1800.0 GB/s"));
    }

    #[test]
    fn pairs_map_to_statuses() {
        let node = gdrdoctor_checks::testing::empty_node();
        let ok = P2pPair {
            a: 0,
            b: 1,
            a_bdf: "a".into(),
            b_bdf: "b".into(),
            can_access: true,
            uni_gbps: Some(380.0),
            uni_back_gbps: Some(381.0),
            bidi_gbps: Some(700.0),
            latency_us: Some(2.5),
            error: None,
        };
        let o = P2pOutput {
            gpus: vec![(0, "a".into()), (1, "b".into()), (2, "c".into())],
            pairs: vec![
                ok.clone(),
                P2pPair {
                    b: 2,
                    b_bdf: "c".into(),
                    can_access: false,
                    uni_gbps: None,
                    error: Some("cuDeviceCanAccessPeer: 0".into()),
                    ..ok.clone()
                },
                P2pPair {
                    a: 1,
                    a_bdf: "b".into(),
                    b: 2,
                    b_bdf: "c".into(),
                    uni_gbps: None,
                    error: Some("cuMemcpyPeerAsync: CUDA_ERROR_ILLEGAL_ADDRESS".into()),
                    ..ok
                },
            ],
            ..Default::default()
        };
        let s: Vec<Status> = findings(&node, &o).iter().map(|f| f.status).collect();
        assert_eq!(s, vec![Status::Pass, Status::Warn, Status::Error]);
    }
}
