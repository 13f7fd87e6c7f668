//! `probe --p2p`: peer copy bandwidth and latency per GPU pair (what cuda-samples'
//! p2pBandwidthLatencyTest measures), beside the link's theoretical rate so a slow pair stands
//! out. Worker side copies with `cuMemcpyPeerAsync` after `cuCtxEnablePeerAccess` both ways;
//! the parent turns the numbers into findings. On a one-GPU node the worker measures the same
//! copies inside the GPU as a reference and the pairs are skipped.

use crate::live::cuda::{Context, DeviceBuffer, Driver, Stream};
use crate::probe::protocol::{self, WorkerError};
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

/// One side of a measured pair: a GPU's context, its two buffers and its stream.
struct Side<'a> {
    ordinal: i32,
    ctx: &'a Context,
    buf: [&'a DeviceBuffer; 2],
    stream: &'a Stream,
}

/// A GPU the worker measures.
struct Dev {
    ordinal: i32,
    ctx: Context,
    buf: [DeviceBuffer; 2],
    stream: Stream,
}

impl Dev {
    fn side(&self) -> Side<'_> {
        Side {
            ordinal: self.ordinal,
            ctx: &self.ctx,
            buf: [&self.buf[0], &self.buf[1]],
            stream: &self.stream,
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Time `reps` copies of `size` bytes from `src` to `dst` on `stream` (whose context is
/// current), after one untimed warm-up copy.
fn copies(
    dst: &DeviceBuffer,
    src: &DeviceBuffer,
    size: usize,
    reps: u32,
    stream: &Stream,
) -> Result<f64, String> {
    stream.copy_peer(dst, src, size).map_err(err)?;
    stream.synchronize().map_err(err)?;
    let t0 = Instant::now();
    for _ in 0..reps {
        stream.copy_peer(dst, src, size).map_err(err)?;
    }
    stream.synchronize().map_err(err)?;
    Ok(t0.elapsed().as_secs_f64())
}

fn measure(x: &Side, y: &Side, size: usize, reps: u32) -> Result<P2pPair, String> {
    let mut p = P2pPair {
        a: x.ordinal,
        b: y.ordinal,
        can_access: true,
        ..Default::default()
    };
    let bytes = size as f64 * f64::from(reps);
    x.ctx.make_current().map_err(err)?;
    let t = copies(y.buf[0], x.buf[0], size, reps, x.stream)?;
    p.uni_gbps = Some(bytes / t / 1e9);
    y.ctx.make_current().map_err(err)?;
    let t = copies(x.buf[1], y.buf[1], size, reps, y.stream)?;
    p.uni_back_gbps = Some(bytes / t / 1e9);
    // Both directions at once: enqueue both, then wait for both.
    let t0 = Instant::now();
    for _ in 0..reps {
        x.ctx.make_current().map_err(err)?;
        x.stream.copy_peer(y.buf[0], x.buf[0], size).map_err(err)?;
        y.ctx.make_current().map_err(err)?;
        y.stream.copy_peer(x.buf[1], y.buf[1], size).map_err(err)?;
    }
    x.stream.synchronize().map_err(err)?;
    y.stream.synchronize().map_err(err)?;
    p.bidi_gbps = Some(2.0 * bytes / t0.elapsed().as_secs_f64() / 1e9);
    // Back to x for the latency run.
    x.ctx.make_current().map_err(err)?;
    let n = 2000;
    let t = copies(y.buf[0], x.buf[0], 4, n, x.stream)?;
    p.latency_us = Some(t / f64::from(n) * 1e6);
    Ok(p)
}

/// What the p2p worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// The GPUs (CUDA ordinals) to measure; every GPU when `None`.
    pub gpus: Option<Vec<i32>>,
    /// Bytes per copy, in MiB.
    pub size_mib: usize,
    /// Copies per measurement.
    pub reps: u32,
}

/// The worker side of `probe --p2p`.
pub fn worker(p: Params) -> Result<P2pOutput, WorkerError> {
    let drv = Driver::init()?;
    let n = drv.device_count()?;
    let want: Vec<i32> = match p.gpus {
        None => (0..n).collect(),
        Some(list) => list.into_iter().filter(|x| (0..n).contains(x)).collect(),
    };
    let size_mib = p.size_mib.clamp(1, 4096);
    let reps = p.reps.clamp(1, 10_000);
    let size = size_mib << 20;
    let mut out = P2pOutput {
        size_bytes: size as u64,
        reps,
        ..Default::default()
    };
    let mut devs = Vec::new();
    for &o in &want {
        let d = drv.device(o)?;
        out.gpus.push((o, d.bdf().unwrap_or_default()));
        let ctx = d.primary_context()?;
        let buf = [ctx.alloc(size)?, ctx.alloc(size)?];
        for b in &buf {
            b.memset_d8(0x5a)?;
        }
        let stream = ctx.stream()?;
        devs.push(Dev {
            ordinal: o,
            ctx,
            buf,
            stream,
        });
    }
    if let Some(d0) = devs.first() {
        protocol::progress("probe --p2p: reference copies inside one gpu");
        // Inside one GPU: buf[0] -> buf[1] of the same context.
        let x = d0.side();
        let twin = Side {
            buf: [&d0.buf[1], &d0.buf[0]],
            ..d0.side()
        };
        match measure(&x, &twin, size, reps) {
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
            protocol::progress(&format!(
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
            let (dx, dy) = (x.ctx.device(), y.ctx.device());
            let ab = dx.can_access_peer(&dy).unwrap_or(false);
            let ba = dy.can_access_peer(&dx).unwrap_or(false);
            p.can_access = ab && ba;
            if !p.can_access {
                p.error = Some(format!(
                    "cuDeviceCanAccessPeer: {} (GPU{} -> GPU{}), {} (back)",
                    i32::from(ab),
                    x.ordinal,
                    y.ordinal,
                    i32::from(ba)
                ));
                out.pairs.push(p);
                continue;
            }
            let r = x
                .ctx
                .enable_peer_access(&y.ctx)
                .and_then(|()| y.ctx.enable_peer_access(&x.ctx))
                .map_err(err)
                .and_then(|()| measure(&x.side(), &y.side(), size, reps));
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
    // Everything is synchronised; the streams, buffers and contexts go with `devs`.
    drop(devs);
    Ok(out)
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
    gpus: Option<&[u32]>,
    size_mib: usize,
    reps: u32,
    deadline: Duration,
) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if let Some(f) = crate::probe::no_gpu(node) {
        out.push(f);
        return (out, None);
    }
    let params = Params {
        gpus: gpus
            .map(<[u32]>::to_vec)
            .map(|v| v.into_iter().map(|g| g as i32).collect()),
        size_mib,
        reps,
    };
    let Some(run) = crate::probe::start("p2p", &params, deadline, &mut out) else {
        return (out, None);
    };
    let result = run.value().cloned();
    if let Some(e) = crate::probe::worker_error(&run) {
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
                .map(|f| f.to_string())
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
