//! The stall classification of a poll of an area: the classes and rules of `probe --hang`
//! ([`crate::stall`]), with the evidence a user's job can give.

use super::layout::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The classes and the rules are those of `probe --hang`: one classification for both.
pub use crate::stall::Class;

/// Watch's words for a class: what it means in a user's job.
pub fn explain(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "blocks of the launch never started while every started block waits: the grid exceeds what the gpu can keep resident and the awaited write comes from a block that cannot be scheduled",
            Class::Ordering => "the kernel that writes the awaited value was launched but never started: stream/event ordering (or the legacy default stream, CUDA_LAUNCH_BLOCKING, lazy loading) queues it behind the waiter",
            Class::StaleRead => "memory already holds the awaited value but the waiter keeps seeing the old one: its load is hoisted or cached (missing volatile / ld.acquire)",
            Class::Silent => "the waiter stopped sending heartbeats: it spins in a loop without instrumentation (GDRDOCTOR_MARK_WAITING), or the kernel was killed or preempted",
            Class::SpinStall => "the waiter is alive and re-reads memory, but nobody writes the awaited value",
            Class::RemoteWait => "the waiter is alive and re-reads memory for a value a peer gpu should write over peer access (nvlink or pcie p2p); the peer's write never arrived",
    }
}

/// Watch's fix for a class, in the terms of progress.cuh.
pub fn fix(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "launch inter-block waits cooperatively (cudaLaunchCooperativeKernel refuses grids that cannot be resident) or keep grid <= occupancy x SMs",
            Class::Ordering => "put producer and consumer on independent non-blocking streams with no event edge from consumer to producer; avoid the legacy default stream and CUDA_LAUNCH_BLOCKING=1; load every kernel before the first launch (CUDA_MODULE_LOADING=EAGER)",
            Class::StaleRead => "poll with volatile or ld.acquire loads (GDRDOCTOR_WAIT, cuda::atomic_ref load(acquire)) and publish with st.release / __threadfence_system() before the flag",
            Class::Silent => "replace the loop with GDRDOCTOR_WAIT (heartbeats and the abort check), or attach cuda-gdb to see where the warp spins (docs/guides/hangs.md)",
            Class::SpinStall => "find who should write the awaited address (the site names it): a peer that never posts, a lost RDMA write, a doorbell that never reached the NIC",
            Class::RemoteWait => "look at the peer gpu the site names: its kernel finished without writing this address (a wrong offset, or a pointer from the wrong device or context), never started, or cannot reach this gpu (peer access not enabled; `gdrdoctor check --only gpu.p2p`)",
    }
}

/// Per-record observations across polls (host monotonic nanoseconds).
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    obs: HashMap<u32, Obs>,
}

#[derive(Debug, Clone, Copy)]
struct Obs {
    /// phase, iter, wait start, generation: a change of any is progress.
    key: (u32, u32, u64, u32),
    since: u64,
    beat: u64,
    beat_since: u64,
}

impl Tracker {
    pub fn observe(&mut self, recs: &[Record], now: u64) {
        for r in recs {
            let key = (r.phase, r.iter, r.wait_start_gt, r.gen);
            let o = self.obs.entry(r.index).or_insert(Obs {
                key,
                since: now,
                beat: r.beat_gt,
                beat_since: now,
            });
            if o.key != key {
                o.key = key;
                o.since = now;
            }
            if o.beat != r.beat_gt {
                o.beat = r.beat_gt;
                o.beat_since = now;
            }
        }
    }
    /// Host time since the record last changed, and since its heartbeat last changed.
    fn ages(&self, index: u32, now: u64) -> (u64, u64) {
        self.obs
            .get(&index)
            .map(|o| {
                (
                    now.saturating_sub(o.since),
                    now.saturating_sub(o.beat_since),
                )
            })
            .unwrap_or((0, 0))
    }
}

/// How device time (%globaltimer) maps to host realtime for one area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clock {
    pub offset_ns: i64,
    pub calibrated: bool,
    pub err_ns: u64,
}

impl Clock {
    pub fn of(h: &Header) -> Clock {
        Clock {
            offset_ns: if h.calibrated() { h.gt_offset_ns } else { 0 },
            calibrated: h.calibrated(),
            err_ns: h.gt_calib_err_ns,
        }
    }
    /// Host realtime of a device time, when it is believable: within 10 s of the area's life
    /// (an uncalibrated clock on a driver whose %globaltimer is not the epoch is not).
    pub fn host(&self, gt: u64, created_ns: u64, now_rt: u64) -> Option<u64> {
        if gt == 0 {
            return None;
        }
        let t = (gt as i128 + self.offset_ns as i128).clamp(0, u64::MAX as i128) as u64;
        let slack = 10_000_000_000u64;
        (t + slack >= created_ns && t <= now_rt + slack).then_some(t)
    }
    pub fn describe(&self) -> String {
        if self.calibrated {
            format!(
                "%globaltimer calibrated at init: offset {} ns, +/- {:.1} us",
                self.offset_ns,
                self.err_ns as f64 / 1e3
            )
        } else {
            "%globaltimer not calibrated (taken as CLOCK_REALTIME when plausible, else host-observed ages only)".into()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub stall_ns: u64,
}

/// One waiter the analysis reports (stalled, or slow at half the threshold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub record: u32,
    pub kernel: String,
    pub kernel_slot: u32,
    pub gen: u32,
    pub block: u32,
    pub warp: u32,
    pub sm: u32,
    pub site: u32,
    pub site_name: String,
    pub site_line: u32,
    pub phase: String,
    pub addr: String,
    pub cmp: String,
    pub expected: String,
    pub observed: String,
    /// The awaited word's value, read by watch (only words inside the area).
    pub memory: Option<String>,
    pub waited_ms: f64,
    pub heartbeat_age_ms: f64,
    /// `wait_start_gt`: identifies one wait (with the record).
    pub wait_start_gt: u64,
    pub class: Option<Class>,
    /// What the class rests on, beyond the waiter itself.
    pub why: String,
}

impl Waiter {
    pub fn site_label(&self) -> String {
        let mut s = format!("site {}", self.site);
        match (self.site_name.is_empty(), self.site_line) {
            (false, 0) => s.push_str(&format!(" ({})", self.site_name)),
            (false, l) => s.push_str(&format!(" ({}, line {l})", self.site_name)),
            (true, 0) => {}
            (true, l) => s.push_str(&format!(" (line {l})")),
        }
        s
    }
    /// `spin-stall: kernel ring block 1 warp 0 (SM 3) waits at site 4 (...) for *0x.. >= 5,
    /// sees 4, memory holds 4, for 1203 ms`
    pub fn text(&self) -> String {
        let mem = self
            .memory
            .as_ref()
            .map(|m| format!(", memory holds {m}"))
            .unwrap_or_default();
        format!(
            "{}: kernel {} block {} warp {} (SM {}) waits at {} for *{} {} {}, sees {}{mem}, for {:.0} ms",
            self.class.map(Class::as_str).unwrap_or("slow"),
            self.kernel,
            self.block,
            self.warp,
            self.sm,
            self.site_label(),
            self.addr,
            self.cmp,
            self.expected,
            self.observed,
            self.waited_ms
        )
    }
    pub fn evidence_line(&self) -> String {
        format!(
            "kernel {} (slot {}, launch {}) block {} warp {} sm {} {} {} addr {} {} {} observed {} memory {} waited {:.0} ms heartbeat {:.0} ms ago",
            self.kernel,
            self.kernel_slot,
            self.gen,
            self.block,
            self.warp,
            self.sm,
            self.site_label(),
            self.phase,
            self.addr,
            self.cmp,
            self.expected,
            self.observed,
            self.memory.as_deref().unwrap_or("?"),
            self.waited_ms,
            self.heartbeat_age_ms
        )
    }
}

/// Phase counts of the records in use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub not_started: usize,
    pub started: usize,
    pub waiting: usize,
    pub progress: usize,
    pub done: usize,
    pub aborted: usize,
    /// Records whose two reads never agreed (bounded retries): skipped this poll.
    pub unstable: usize,
    /// Waiting records whose wait start the area's clock cannot date (it falls outside the
    /// area's life): only the time watch itself saw them waiting counts.
    #[serde(default)]
    pub undated: usize,
}

/// What one poll of one area shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub stalled: Vec<Waiter>,
    pub slow: Vec<Waiter>,
    pub counts: Counts,
    /// The longest current wait (ms), stalled or not.
    pub longest_wait_ms: f64,
}

/// An area as one poll read it: everything the classification needs.
pub struct View<'a> {
    pub header: &'a Header,
    pub sites: &'a BTreeMap<u32, Site>,
    pub kernels: &'a [Kernel],
    pub words: &'a [u8],
    /// Every record in use, indexed by record number (`None`: unstable this poll).
    pub records: &'a [Option<Record>],
}

impl View<'_> {
    fn kernel_records(&self, k: &Kernel) -> impl Iterator<Item = &Record> {
        let r = k.records();
        self.records
            .get(r.start.min(self.records.len())..r.end.min(self.records.len()))
            .unwrap_or(&[])
            .iter()
            .flatten()
    }

    /// Blocks of launch `gen` of kernel `k`: (grid, never started, every started block waits).
    pub fn launch_blocks(&self, k: &Kernel, gen: u32) -> (u32, usize, usize, bool) {
        let grid = if k.grid_blocks == 0 {
            k.max_blocks
        } else {
            k.grid_blocks.min(k.max_blocks)
        };
        let mut started: BTreeSet<u32> = BTreeSet::new();
        let mut waiting: BTreeSet<u32> = BTreeSet::new();
        for r in self.kernel_records(k) {
            if r.gen == gen && r.phase != PH_NOT_STARTED && r.block < grid {
                started.insert(r.block);
                if r.phase == PH_WAITING {
                    waiting.insert(r.block);
                }
            }
        }
        let never = (grid as usize).saturating_sub(started.len());
        (
            grid,
            never,
            started.len(),
            !started.is_empty() && started == waiting,
        )
    }

    /// The writer kernel of a site: (never started, description).
    pub fn writer_state(&self, k: &Kernel) -> (bool, String) {
        let Some(newest) = k.newest_gen() else {
            return (
                false,
                format!("kernel {} (slot {}): never launched", k.name, k.slot),
            );
        };
        let mut started = false;
        let mut waiting = false;
        let mut running = false;
        let mut done = false;
        for r in self.kernel_records(k) {
            if r.phase == PH_WAITING {
                waiting = true;
            }
            if r.gen == newest && r.phase != PH_NOT_STARTED {
                started = true;
                match r.phase {
                    PH_DONE | PH_ABORTED => done = true,
                    _ => running = true,
                }
            }
        }
        let state = if !started {
            "never started"
        } else if running {
            "running"
        } else if done {
            "finished"
        } else {
            "?"
        };
        (
            !started && !waiting,
            format!(
                "kernel {} (slot {}): {} launch(es) handed out, the newest (launch {newest}) {state}",
                k.name, k.slot, k.enqueued
            ),
        )
    }
}

/// Classify the waiters of one poll. `now_rt`: host realtime; `now_mono`: the tracker's clock.
pub fn analyse(
    v: &View,
    tracker: &Tracker,
    clock: &Clock,
    now_rt: u64,
    now_mono: u64,
    t: Thresholds,
) -> Analysis {
    let mut a = Analysis::default();
    for slot in v.records {
        let Some(r) = slot else {
            a.counts.unstable += 1;
            continue;
        };
        match r.phase {
            PH_NOT_STARTED => a.counts.not_started += 1,
            PH_STARTED => a.counts.started += 1,
            PH_WAITING => a.counts.waiting += 1,
            PH_PROGRESS => a.counts.progress += 1,
            PH_DONE => a.counts.done += 1,
            _ => a.counts.aborted += 1,
        }
        if r.phase != PH_WAITING || record_problem(r, v.kernels).is_some() {
            continue;
        }
        let (host_age, host_beat_age) = tracker.ages(r.index, now_mono);
        let dated = clock.host(r.wait_start_gt, v.header.created_ns, now_rt);
        if dated.is_none() {
            a.counts.undated += 1;
        }
        let dev_age = dated.map(|s| now_rt.saturating_sub(s)).unwrap_or(0);
        let dev_beat_age = clock
            .host(r.beat_gt, v.header.created_ns, now_rt)
            .map(|s| now_rt.saturating_sub(s))
            .unwrap_or(0);
        let waited = host_age.max(dev_age);
        let beat_age = host_beat_age.max(dev_beat_age);
        a.longest_wait_ms = a.longest_wait_ms.max(waited as f64 / 1e6);
        if waited < t.stall_ns / 2 {
            continue;
        }
        let Some(k) = v.kernels.get(r.kernel as usize) else {
            continue;
        };
        let site = v.sites.get(&r.site);
        let memory = memory_at(v.header, v.words, r);
        let mut w = Waiter {
            record: r.index,
            kernel: k.name.clone(),
            kernel_slot: k.slot,
            gen: r.gen,
            block: r.block,
            warp: r.warp,
            sm: r.sm,
            site: r.site,
            site_name: site.map(|s| s.name.clone()).unwrap_or_default(),
            site_line: site.map(|s| s.line).unwrap_or(0),
            phase: phase_name(r.phase).into(),
            addr: format!("0x{:x}", r.addr),
            cmp: cmp_str(r.cmp).into(),
            expected: r.show(r.expected),
            observed: r.show(r.observed),
            memory: memory.map(|m| r.show(m)),
            waited_ms: waited as f64 / 1e6,
            heartbeat_age_ms: beat_age as f64 / 1e6,
            wait_start_gt: r.wait_start_gt,
            class: None,
            why: String::new(),
        };
        if waited < t.stall_ns {
            a.slow.push(w);
            continue;
        }
        let (class, why) = classify(v, k, r, site, memory, beat_age, t);
        w.class = Some(class);
        w.why = why;
        a.stalled.push(w);
    }
    a
}

/// The signs of one stalled waiter, from what the area shows, and its class
/// ([`crate::stall::classify`], the rules of probe --hang) with what it rests on.
fn classify(
    v: &View,
    k: &Kernel,
    r: &Record,
    site: Option<&Site>,
    memory: Option<u64>,
    beat_age: u64,
    t: Thresholds,
) -> (Class, String) {
    let (grid, never, started, all_wait) = v.launch_blocks(k, r.gen);
    let peer = site.filter(|s| s.writer_kind == WRITER_PEER_GPU);
    let writer = site
        .filter(|s| s.writer_kernel >= 0)
        .and_then(|s| v.kernels.get(s.writer_kernel as usize))
        .map(|wk| v.writer_state(wk));
    let stale = memory.filter(|m| r.satisfied_by(*m) && !r.satisfied_by(r.observed));
    let signs = crate::stall::Signs {
        never_started: never,
        all_started_wait: all_wait,
        writer_on_peer: peer.is_some(),
        writer_never_started: writer.as_ref().is_some_and(|w| w.0),
        memory_satisfies: stale.is_some(),
        heartbeat_stale: beat_age >= t.stall_ns,
    };
    let class = crate::stall::classify(&signs);
    let why = match class {
        Class::ForwardProgress => format!("launch {} of kernel {}: {never} of {grid} blocks never started, every one of the {started} started blocks waits", r.gen, k.name),
        Class::RemoteWait => {
            let s = peer.map(|s| (s.id, s.writer_device)).unwrap_or((r.site, -1));
            let dev = if s.1 >= 0 {
                format!("gpu {}", s.1)
            } else {
                "a peer gpu".into()
            };
            format!("site {} is written by {dev} over peer access", s.0)
        }
        Class::Ordering => format!(
            "writer {}",
            writer.map(|w| w.1).unwrap_or_default()
        ),
        Class::StaleRead => format!(
            "memory holds {} (satisfies {} {}), the waiter last saw {}",
            r.show(stale.unwrap_or_default()),
            cmp_str(r.cmp),
            r.show(r.expected),
            r.show(r.observed)
        ),
        Class::Silent => format!("no heartbeat for {:.0} ms", beat_age as f64 / 1e6),
        Class::SpinStall => writer
            .map(|w| format!("writer {}", w.1))
            .or_else(|| {
                site.filter(|s| s.writer_kind != WRITER_UNKNOWN)
                    .map(|s| format!("writer: {}", writer_name(s.writer_kind)))
            })
            .unwrap_or_else(|| "heartbeats arrive, the value does not".into()),
    };
    (class, why)
}
