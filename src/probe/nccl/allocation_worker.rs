//! The worker side of NCCL across an allocation ([`super::allocation`]): this node's GPUs as
//! NCCL ranks `first_rank ..`, CUDA through `live::cuda`, NCCL through `live::nccl`. NCCL's own
//! failures are part of the output (with the log the parent reads, they are what the verdict
//! reports), not worker errors; every step is announced before it is entered.

use crate::collect::allocation::wire;
use crate::live::cuda::{Context, DeviceBuffer, Driver, Stream};
use crate::live::nccl::{Comms, Exchange, Nccl, UniqueId};
use crate::worker::protocol::{self, WorkerError};
use gdrdoctor_checks::preflight::model::RunSpec;
use gdrdoctor_checks::preflight::model::{
    Collective, LocalRank, NcclOutput, RailOutput, RoundOutput, Sums,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the worker is asked (the parent, [`super::allocation`], sends it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub spec: RunSpec,
    /// The libnccl.so.2 to load.
    pub library: String,
    /// Every variable set before NCCL loads: the run's, and NCCL's debug settings.
    pub env: BTreeMap<String, String>,
}

/// Elements read back per GPU to check the sums and the pairs' data.
const CHECKED: usize = 4096;

struct Gpu {
    ctx: Context,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    one_send: DeviceBuffer,
    one_recv: DeviceBuffer,
    stream: Stream,
}

fn enter(out: &mut NcclOutput, step: &str) {
    out.step = step.to_string();
    protocol::progress(&format!("step {step}"));
}

/// How a waiting worker polls: spinning (yielding) for the first 2 ms, so that a transfer of a
/// millisecond or two is timed to within microseconds; then sleeping, twice as long each time
/// up to 2 ms, so that many ranks waiting on one machine (or a long collective) do not take
/// the CPU from the ones doing the work.
struct Nap(Duration);

impl Default for Nap {
    fn default() -> Self {
        Nap(Duration::from_micros(50))
    }
}

impl Nap {
    fn wait(&mut self, since: Instant) {
        if since.elapsed() < Duration::from_millis(2) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.0);
            self.0 = (self.0 * 2).min(Duration::from_millis(2));
        }
    }
}

/// Wait for every stream, polling NCCL's asynchronous error as PyTorch's watchdog does: a
/// peer that went away is reported there while the stream may never finish.
fn sync_all(gpus: &[Gpu], comms: &Comms<'_>) -> Result<(), String> {
    let t = Instant::now();
    let mut nap = Nap::default();
    loop {
        if let Some(e) = comms.async_error() {
            return Err(e.to_string());
        }
        let mut all = true;
        for g in gpus {
            let done = g
                .ctx
                .make_current()
                .and_then(|()| g.stream.query())
                .map_err(|e| e.to_string())?;
            if !done {
                all = false;
                break;
            }
        }
        if all {
            return Ok(());
        }
        nap.wait(t);
    }
}

/// Wait for every stream as [`sync_all`] does, and say when each one finished (seconds from
/// `t0`): the rails of a pair run at once, each on its GPU's stream, and each is timed by its
/// own stream.
fn sync_each(gpus: &[Gpu], comms: &Comms<'_>, t0: Instant) -> Result<Vec<f64>, String> {
    let mut done: Vec<Option<f64>> = vec![None; gpus.len()];
    let mut nap = Nap::default();
    loop {
        if let Some(e) = comms.async_error() {
            return Err(e.to_string());
        }
        for (i, g) in gpus.iter().enumerate() {
            if done[i].is_some() {
                continue;
            }
            let finished = g
                .ctx
                .make_current()
                .and_then(|()| g.stream.query())
                .map_err(|e| e.to_string())?;
            if finished {
                done[i] = Some(t0.elapsed().as_secs_f64());
            }
        }
        if done.iter().all(Option::is_some) {
            return Ok(done.into_iter().map(|d| d.unwrap_or(0.0)).collect());
        }
        nap.wait(t0);
    }
}

/// The median of the timed repetitions: one repetition stalled by the host (a descheduled
/// process, a page fault) does not make a healthy rail look slow.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Words of `buf` (its first `n` floats) that are not `want`.
fn wrong_words(
    buf: &DeviceBuffer,
    n: usize,
    want: f32,
) -> Result<(u64, Option<(u64, f32)>), WorkerError> {
    let mut host = vec![0u8; n * 4];
    buf.copy_to_host(&mut host)?;
    let mut wrong = 0u64;
    let mut first = None;
    for (i, w) in host.chunks_exact(4).enumerate() {
        let v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        if v != want {
            wrong += 1;
            first.get_or_insert((i as u64, v));
        }
    }
    Ok((wrong, first))
}

pub fn worker(p: Params) -> Result<NcclOutput, WorkerError> {
    let mut out = NcclOutput::default();
    enter(&mut out, "start");
    // NCCL reads its environment once, when it first initialises: set it before loading it.
    // The worker is single-threaded here.
    for (k, v) in &p.env {
        std::env::set_var(k, v);
    }
    let spec = &p.spec;
    enter(&mut out, "cuda");
    let drv = Driver::init()?;
    let n = drv.device_count()?;
    let want = i32::try_from(spec.gpus).unwrap_or(i32::MAX);
    if want > n || want == 0 {
        return Err(WorkerError::Failed {
            detail: format!(
                "NCCL's layout gives this node {} GPU(s); CUDA sees {n} (CUDA_VISIBLE_DEVICES?)",
                spec.gpus
            ),
        });
    }
    let count = usize::try_from(spec.count).unwrap_or(1).clamp(1, 1 << 28);
    let pair_count = usize::try_from(spec.pair_bytes / 4)
        .unwrap_or(1)
        .clamp(1, 1 << 28);
    // The pairs' buffers only when this run has pairs (64 MiB per GPU by default).
    let words = if spec.pairs.iter().any(|p| p.peer.is_some()) {
        count.max(pair_count)
    } else {
        count
    };
    let mut gpus = Vec::new();
    for i in 0..want {
        let rank = spec.first_rank + i as u32;
        let d = drv.device(i)?;
        out.ranks.push(LocalRank {
            rank,
            cuda: i,
            bdf: d.bdf().unwrap_or_default().to_ascii_lowercase(),
        });
        let ctx = d.primary_context()?;
        let send = ctx.alloc(words * 4)?;
        let recv = ctx.alloc(words * 4)?;
        send.memset_d32((rank as f32 + 1.0).to_bits())?;
        recv.memset_d32(0)?;
        let one_send = ctx.alloc(4)?;
        let one_recv = ctx.alloc(4)?;
        one_send.memset_d32(1.0f32.to_bits())?;
        let stream = ctx.stream()?;
        gpus.push(Gpu {
            ctx,
            send,
            recv,
            one_send,
            one_recv,
            stream,
        });
    }
    enter(&mut out, "load");
    let nccl = Nccl::load(Path::new(&p.library)).map_err(|detail| WorkerError::LibraryMissing {
        library: p.library.clone(),
        detail,
    })?;
    match nccl.version() {
        Ok(code) => {
            out.version =
                gdrdoctor_checks::nccl::Version::from_code(i64::from(code)).map(|v| v.to_string())
        }
        Err(e) => {
            out.error = Some(e.to_string());
            return Ok(out);
        }
    }
    let id = match &spec.id {
        None => {
            enter(&mut out, "unique-id");
            match nccl.unique_id() {
                Ok(id) => {
                    protocol::progress(&format!("nccl-id {}", wire::hex(&id.0)));
                    id
                }
                Err(e) => {
                    out.error = Some(e.to_string());
                    return Ok(out);
                }
            }
        }
        Some(h) => {
            let b = wire::unhex(h).filter(|b| b.len() == 128).ok_or_else(|| {
                WorkerError::BadRequest {
                    detail: "the NCCL id is not 128 bytes of hex".into(),
                }
            })?;
            let mut id = UniqueId([0u8; 128]);
            id.0.copy_from_slice(&b);
            id
        }
    };
    enter(&mut out, "init");
    let t0 = Instant::now();
    let ctxs: Vec<(u32, &Context)> = gpus
        .iter()
        .zip(&out.ranks)
        .map(|(g, r)| (r.rank, &g.ctx))
        .collect();
    let comms = match nccl.init_ranks(&id, spec.nranks, &ctxs) {
        Ok(c) => c,
        Err(e) => {
            out.init_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
            out.error = Some(e.to_string());
            return Ok(out);
        }
    };
    out.init_ms = Some(t0.elapsed().as_secs_f64() * 1e3);

    // The all-reduce: one warm-up (it connects the channels), then the timed ones.
    enter(&mut out, "allreduce");
    let bufs: Vec<(&DeviceBuffer, &DeviceBuffer, &Stream)> =
        gpus.iter().map(|g| (&g.send, &g.recv, &g.stream)).collect();
    let iters = spec.iterations.clamp(1, 1000);
    let mut timed: Vec<f64> = Vec::new();
    for it in 0..=iters {
        let t = Instant::now();
        if let Err(e) = comms.all_reduce_sum_f32(&bufs, count) {
            out.error = Some(e.to_string());
            return Ok(out);
        }
        if it == 0 {
            enter(&mut out, "allreduce-wait");
        }
        if let Err(e) = sync_all(&gpus, &comms) {
            out.error = Some(e);
            return Ok(out);
        }
        if it > 0 {
            timed.push(t.elapsed().as_secs_f64());
        }
    }
    let nr = spec.nranks.max(1) as f64;
    let expected = nr * (nr + 1.0) / 2.0;
    let mut sums = Sums {
        expected,
        checked: 0,
        wrong: 0,
        first_wrong: None,
    };
    for (g, r) in gpus.iter().zip(&out.ranks) {
        let k = count.min(CHECKED);
        let (wrong, first) = wrong_words(&g.recv, k, expected as f32)?;
        sums.checked += k as u64;
        sums.wrong += wrong;
        if let (None, Some((i, v))) = (sums.first_wrong, first) {
            sums.first_wrong = Some((r.rank, i, f64::from(v)));
        }
    }
    let ms = median(&mut timed) * 1e3;
    let bytes = (count * 4) as u64;
    let algbw = if ms > 0.0 {
        bytes as f64 / (ms / 1e3) / 1e9
    } else {
        0.0
    };
    out.allreduce = Some(Collective {
        bytes,
        ms,
        iterations: iters,
        busbw_gbs: algbw * 2.0 * (nr - 1.0) / nr,
        sums,
    });

    // The pairs: a one-float all-reduce as the barrier, then every rail of the pair at once.
    let ones: Vec<(&DeviceBuffer, &DeviceBuffer, &Stream)> = gpus
        .iter()
        .map(|g| (&g.one_send, &g.one_recv, &g.stream))
        .collect();
    // Every rank takes part in every barrier: 1 before the round, then 1 before each timed
    // exchange (a resting node too).
    let barrier = || -> Result<(), String> {
        comms
            .all_reduce_sum_f32(&ones, 1)
            .map_err(|e| e.to_string())?;
        sync_all(&gpus, &comms)
    };
    for ps in &spec.pairs {
        enter(&mut out, &format!("round {}", ps.round));
        if let Err(e) = barrier() {
            out.error = Some(e);
            return Ok(out);
        }
        let Some(peer) = &ps.peer else {
            enter(&mut out, &format!("round-wait {}", ps.round));
            for _ in 0..iters {
                if let Err(e) = barrier() {
                    out.error = Some(e);
                    return Ok(out);
                }
            }
            continue;
        };
        let rails = spec.gpus.min(peer.gpus) as usize;
        for g in gpus.iter().take(rails) {
            g.recv.memset_d32(0)?;
        }
        let ops: Vec<Exchange<'_>> = gpus
            .iter()
            .take(rails)
            .enumerate()
            .map(|(i, g)| Exchange {
                comm: i,
                send: &g.send,
                recv: &g.recv,
                count: pair_count,
                peer: peer.first_rank + i as u32,
                stream: &g.stream,
            })
            .collect();
        let mut timed: Vec<Vec<f64>> = vec![Vec::new(); rails];
        for it in 0..=iters {
            // Both ends start each exchange together: a slow rail must not make the next
            // exchange of the fast ones start late on one end.
            if it > 0 {
                if let Err(e) = barrier() {
                    out.error = Some(e);
                    return Ok(out);
                }
            }
            let t = Instant::now();
            if let Err(e) = comms.exchange_f32(&ops) {
                out.error = Some(e.to_string());
                return Ok(out);
            }
            if it == 0 {
                enter(&mut out, &format!("round-wait {}", ps.round));
            }
            match sync_each(&gpus[..rails], &comms, t) {
                Err(e) => {
                    out.error = Some(e);
                    return Ok(out);
                }
                Ok(each) if it > 0 => {
                    for (acc, s) in timed.iter_mut().zip(each) {
                        acc.push(s);
                    }
                }
                Ok(_) => {}
            }
        }
        let bytes = (pair_count * 4) as u64;
        let mut rails_out = Vec::new();
        for (i, g) in gpus.iter().take(rails).enumerate() {
            let ms = timed.get_mut(i).map_or(0.0, |t| median(t)) * 1e3;
            let peer_rank = peer.first_rank + i as u32;
            let (wrong, _) = wrong_words(&g.recv, pair_count.min(CHECKED), peer_rank as f32 + 1.0)?;
            rails_out.push(RailOutput {
                rail: i as u32,
                rank: spec.first_rank + i as u32,
                peer_rank,
                bytes,
                ms,
                busbw_gbs: if ms > 0.0 {
                    bytes as f64 / (ms / 1e3) / 1e9
                } else {
                    0.0
                },
                wrong,
            });
        }
        out.rounds.push(RoundOutput {
            round: ps.round,
            peer: peer.member,
            rails: rails_out,
        });
    }
    enter(&mut out, "destroy");
    drop(bufs);
    drop(ones);
    drop(comms);
    drop(gpus);
    enter(&mut out, "done");
    Ok(out)
}
