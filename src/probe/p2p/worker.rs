//! The worker side of `probe --p2p`: copies with `cuMemcpyPeerAsync` after
//! `cuCtxEnablePeerAccess` both ways, per GPU pair (both directions, then both at once, then
//! 4-byte copies for latency), then every ordered pair at once; on a one-GPU node the same
//! copies inside the GPU as a reference. NVML's link facts (NVLink count, version, speed; the
//! PCIe link) go into the output, so the verdict needs nothing else.

use super::{AllAtOnce, GpuLinks, P2pOutput, P2pPair, Params};
use crate::live::cuda::{Context, DeviceBuffer, Driver, Stream};
use crate::worker::protocol::{self, WorkerError};
use std::time::Instant;

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

/// NVML's link facts of the GPUs at `bdfs`, with their compute capability.
fn links(bdfs: &[(String, i32)]) -> Result<Vec<GpuLinks>, String> {
    let facts = crate::live::nvml::facts()?;
    let speeds = crate::live::nvml::nvlink_speeds().unwrap_or_default();
    let mut out = Vec::new();
    for (bdf, cc_major) in bdfs {
        let Some(g) = facts.gpus.iter().find(|g| &g.bdf == bdf) else {
            continue;
        };
        let active: Vec<&gdrdoctor_checks::model::NvLink> =
            g.nvlinks.iter().filter(|l| l.active).collect();
        let mut to: Vec<(String, usize)> = Vec::new();
        for l in &active {
            if l.remote_type.as_deref() != Some("gpu") {
                continue;
            }
            let Some(r) = &l.remote_bdf else { continue };
            match to.iter_mut().find(|x| &x.0 == r) {
                Some(x) => x.1 += 1,
                None => to.push((r.clone(), 1)),
            }
        }
        out.push(GpuLinks {
            bdf: bdf.clone(),
            cc_major: (*cc_major > 0).then_some(*cc_major),
            nvlinks_switch: gdrdoctor_checks::gdr::p2p::switch_links(g),
            nvlinks_to: to,
            nvlink_version: active.iter().find_map(|l| l.version),
            nvlink_speed_mbps: speeds.iter().find(|s| &s.0 == bdf).and_then(|s| s.1),
            pcie_gen_max: g.pcie_gen_max,
            pcie_width_max: g.pcie_width_max,
        });
    }
    Ok(out)
}

/// Every ordered pair of `devs` with peer access copies `reps` times at once, one stream per
/// pair; each pair's time runs until its own stream finished (polled), the total until the
/// last. Several sources write into the same destination buffer at once: the data is not
/// checked, only the time.
fn all_at_once(devs: &[Dev], access: &[(usize, usize)], size: usize, reps: u32) -> AllAtOnce {
    let mut out = AllAtOnce::default();
    let mut run = || -> Result<(), String> {
        let mut streams: Vec<(usize, usize, Stream)> = Vec::new();
        for &(i, j) in access {
            for (x, y) in [(i, j), (j, i)] {
                streams.push((x, y, devs[x].ctx.stream().map_err(err)?));
            }
        }
        // One warm-up copy on every stream.
        for (x, y, s) in &streams {
            devs[*x].ctx.make_current().map_err(err)?;
            s.copy_peer(&devs[*y].buf[1], &devs[*x].buf[0], size)
                .map_err(err)?;
        }
        for (x, _, s) in &streams {
            devs[*x].ctx.make_current().map_err(err)?;
            s.synchronize().map_err(err)?;
        }
        let t0 = Instant::now();
        for (x, y, s) in &streams {
            devs[*x].ctx.make_current().map_err(err)?;
            for _ in 0..reps {
                s.copy_peer(&devs[*y].buf[1], &devs[*x].buf[0], size)
                    .map_err(err)?;
            }
        }
        let mut done: Vec<Option<f64>> = vec![None; streams.len()];
        while done.iter().any(Option::is_none) {
            for (k, (_, _, s)) in streams.iter().enumerate() {
                if done[k].is_none() && s.query().map_err(err)? {
                    done[k] = Some(t0.elapsed().as_secs_f64());
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        let bytes = size as f64 * f64::from(reps);
        let last = done.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
        for ((x, y, _), t) in streams.iter().zip(&done) {
            let t = t.unwrap_or(last).max(1e-9);
            out.pairs
                .push((devs[*x].ordinal, devs[*y].ordinal, bytes / t / 1e9));
        }
        out.total_gbps = bytes * streams.len() as f64 / last.max(1e-9) / 1e9;
        Ok(())
    };
    let r = run();
    if let Err(e) = r {
        out.error = Some(e);
    }
    out
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
    let mut ccs = Vec::new();
    for &o in &want {
        let d = drv.device(o)?;
        out.gpus.push((o, d.bdf().unwrap_or_default()));
        ccs.push((d.bdf().unwrap_or_default(), d.compute_capability().0));
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
    match links(&ccs) {
        Ok(l) => out.links = l,
        Err(e) => out.links_error = Some(e),
    }
    let mut access = Vec::new();
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
                    access.push((i, j));
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
    if !access.is_empty() {
        protocol::progress("probe --p2p: every pair at once");
        out.all_at_once = Some(all_at_once(&devs, &access, size, reps));
    }
    // Everything is synchronised; the streams, buffers and contexts go with `devs`.
    drop(devs);
    Ok(out)
}
