//! `probe --hang`: run spin-wait protocols on the GPU, watch them from the host while they run,
//! and when one stalls say which block and warp, at which wait, on which address, expecting
//! which value and seeing which, for how long, and why. Design: knowledge/hang-probe.md §5.
//!
//! Worker side (this file's `worker`): owns the context, loads every kernel before the first
//! launch, puts the records in host-mapped memory, launches a scenario, and hands the records to
//! a detector thread that only reads mapped memory (never a CUDA call). On a stall the detector
//! classifies (most specific first: blocks never started, producer launch never started, stale
//! read, silent waiter, plain spin stall), the worker sets the abort flag, waits a short grace,
//! synchronizes (which flushes device printf) and moves on; a kernel that ignores the abort
//! makes the worker print what it has and `exit(3)`, and the parent kills it if needed and
//! checks the GPU's health in a fresh process.

use crate::live::cuda::{Context, DeviceBuffer, Driver, Event, KernelArg, Stream};
use crate::live::os;
use crate::live::shared::Region;
use crate::probe::kernels::{self, Kernels};
use crate::probe::protocol::{self, WorkerError};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------------------
// Shared layout (kernels/hang.cu)
// ---------------------------------------------------------------------------------------------

pub const PH_NOT_STARTED: u32 = 0;
pub const PH_STARTED: u32 = 1;
pub const PH_WAITING: u32 = 2;
pub const PH_PROGRESS: u32 = 3;
pub const PH_DONE: u32 = 4;
pub const PH_ABORTED: u32 = 5;

const L_ENQUEUED: u32 = 1;
const L_STARTED: u32 = 2;
const L_DONE: u32 = 3;

/// One waiting agent's record (64 bytes, device-written, host-read): `struct HangRecord` of
/// kernels/hang.cu, seen through the shared region's atomics.
#[derive(Clone, Copy)]
pub struct HangRecord<'a> {
    pub seq: &'a AtomicU32,
    /// phase:8 | cmp:8 | site:16
    pub phase_site: &'a AtomicU32,
    pub block: &'a AtomicU32,
    /// smid << 8 | warpid
    pub smid_warp: &'a AtomicU32,
    pub iter: &'a AtomicU64,
    pub addr: &'a AtomicU64,
    pub expected: &'a AtomicU64,
    pub observed: &'a AtomicU64,
    pub wait_start_gt: &'a AtomicU64,
    pub beat_gt: &'a AtomicU64,
}

/// `struct Control` of kernels/hang.cu (64 bytes).
#[derive(Clone, Copy)]
pub struct Control<'a> {
    pub abort: &'a AtomicU32,
    pub generation: &'a AtomicU32,
    pub hb_ns: &'a AtomicU64,
    pub print_ns: &'a AtomicU64,
    pub slow_ns: &'a AtomicU64,
}

/// `struct LaunchRecord` of kernels/hang.cu (64 bytes).
#[derive(Clone, Copy)]
pub struct LaunchRecord<'a> {
    pub state: &'a AtomicU32,
    pub launch_id: &'a AtomicU32,
    pub blocks_started: &'a AtomicU32,
    pub blocks_done: &'a AtomicU32,
    pub start_gt: &'a AtomicU64,
    pub end_gt: &'a AtomicU64,
    pub value: &'a AtomicU64,
}

impl<'a> HangRecord<'a> {
    fn at(m: Region<'a>, o: usize) -> HangRecord<'a> {
        HangRecord {
            seq: m.u32_at(o),
            phase_site: m.u32_at(o + 4),
            block: m.u32_at(o + 8),
            smid_warp: m.u32_at(o + 12),
            iter: m.u64_at(o + 16),
            addr: m.u64_at(o + 24),
            expected: m.u64_at(o + 32),
            observed: m.u64_at(o + 40),
            wait_start_gt: m.u64_at(o + 48),
            beat_gt: m.u64_at(o + 56),
        }
    }
}

impl<'a> Control<'a> {
    fn at(m: Region<'a>, o: usize) -> Control<'a> {
        Control {
            abort: m.u32_at(o),
            generation: m.u32_at(o + 4),
            hb_ns: m.u64_at(o + 8),
            print_ns: m.u64_at(o + 16),
            slow_ns: m.u64_at(o + 24),
        }
    }
}

impl<'a> LaunchRecord<'a> {
    fn at(m: Region<'a>, o: usize) -> LaunchRecord<'a> {
        LaunchRecord {
            state: m.u32_at(o),
            launch_id: m.u32_at(o + 4),
            blocks_started: m.u32_at(o + 8),
            blocks_done: m.u32_at(o + 12),
            start_gt: m.u64_at(o + 16),
            end_gt: m.u64_at(o + 24),
            value: m.u64_at(o + 32),
        }
    }
}

const MAX_LAUNCHES: usize = 8;
const MAX_FLAGS: usize = 8;
pub const MAX_REC: usize = 4096;
const OFF_CTRL: usize = 0;
const OFF_LAUNCH: usize = 64;
const OFF_FLAGS: usize = OFF_LAUNCH + 64 * MAX_LAUNCHES;
const OFF_CALIB: usize = OFF_FLAGS + 64 * MAX_FLAGS;
const OFF_RECS: usize = 4096;
const MAPPED_SIZE: usize = OFF_RECS + 64 * MAX_REC;

/// A consistent copy of a record (seqlock read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snap {
    pub phase: u32,
    pub cmp: u32,
    pub site: u32,
    pub block: u32,
    pub smid: u32,
    pub warp: u32,
    pub iter: u64,
    pub addr: u64,
    pub expected: u64,
    pub observed: u64,
    pub wait_start_gt: u64,
    pub beat_gt: u64,
}

impl HangRecord<'_> {
    pub fn snapshot(&self) -> Snap {
        for _ in 0..64 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ps = self.phase_site.load(Ordering::Relaxed);
            let sw = self.smid_warp.load(Ordering::Relaxed);
            let snap = Snap {
                phase: ps >> 24,
                cmp: (ps >> 16) & 0xff,
                site: ps & 0xffff,
                block: self.block.load(Ordering::Relaxed),
                smid: sw >> 8,
                warp: sw & 0xff,
                iter: self.iter.load(Ordering::Relaxed),
                addr: self.addr.load(Ordering::Relaxed),
                expected: self.expected.load(Ordering::Relaxed),
                observed: self.observed.load(Ordering::Relaxed),
                wait_start_gt: self.wait_start_gt.load(Ordering::Relaxed),
                beat_gt: self.beat_gt.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return snap;
            }
        }
        // A writer that never finishes its update: report what is there.
        let ps = self.phase_site.load(Ordering::Relaxed);
        Snap {
            phase: ps >> 24,
            site: ps & 0xffff,
            iter: self.iter.load(Ordering::Relaxed),
            ..Default::default()
        }
    }
}

fn phase_name(p: u32) -> &'static str {
    match p {
        PH_NOT_STARTED => "NOT_STARTED",
        PH_STARTED => "STARTED",
        PH_WAITING => "WAITING",
        PH_PROGRESS => "PROGRESS",
        PH_DONE => "DONE",
        PH_ABORTED => "ABORTED",
        _ => "?",
    }
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Verdicts (shared with the parent)
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Blocks of the grid never started while every started one waits: the grid is larger than
    /// what can be resident, and the awaited write comes from a block that cannot run.
    ForwardProgress,
    /// The launch that would write the awaited word was enqueued but never started: stream or
    /// event ordering puts it behind the waiter.
    Ordering,
    /// Memory holds the expected value, the waiter never saw it: a hoisted or cached load
    /// (missing volatile/acquire).
    StaleRead,
    /// The waiter stopped publishing heartbeats: an uninstrumented loop, trapped, preempted.
    Silent,
    /// The waiter is alive and re-reading memory; the value just never arrives.
    SpinStall,
    /// The waiter spins on its own GPU's memory for a value a peer GPU should write over peer
    /// access, and the peer's write never came.
    RemoteWait,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::ForwardProgress => "forward-progress",
            Class::Ordering => "ordering",
            Class::StaleRead => "stale-read",
            Class::Silent => "silent",
            Class::SpinStall => "spin-stall",
            Class::RemoteWait => "remote-wait",
        }
    }
    pub fn explain(self) -> &'static str {
        match self {
            Class::ForwardProgress => "blocks of the grid never started while every started block waits: the grid exceeds what the GPU can keep resident and the awaited write comes from a block that cannot be scheduled",
            Class::Ordering => "the kernel that would write the awaited value was enqueued but never started: stream/event ordering (or the legacy default stream, CUDA_LAUNCH_BLOCKING, lazy loading) queues it behind the waiter",
            Class::StaleRead => "memory already holds the awaited value but the waiter keeps seeing the old one: its load is hoisted or cached (missing volatile / ld.acquire)",
            Class::Silent => "the waiter stopped sending heartbeats: it spins in a loop without instrumentation (or trapped, or was preempted)",
            Class::SpinStall => "the waiter is alive and re-reads memory, but nobody writes the awaited value",
            Class::RemoteWait => "the waiter is alive and re-reads its own gpu's memory for a value a peer gpu should write over peer access (nvlink or pcie p2p); the peer's write never arrived",
        }
    }
    pub fn fix(self) -> &'static str {
        match self {
            Class::ForwardProgress => "launch inter-block waits cooperatively (cudaLaunchCooperativeKernel refuses grids that cannot be resident) or keep grid <= occupancy x SMs",
            Class::Ordering => "put producer and consumer on independent non-blocking streams with no event edge from consumer to producer; avoid the legacy default stream and CUDA_LAUNCH_BLOCKING=1; load every kernel before the first launch (CUDA_MODULE_LOADING=EAGER)",
            Class::StaleRead => "poll with volatile or ld.acquire loads (cuda::atomic_ref load(acquire), NVSHMEM-style) and publish with st.release / __threadfence_system() before the flag",
            Class::Silent => "use instrumented waits with a periodic heartbeat and abort check; attach cuda-gdb to see where the warp spins (docs/guides/hangs.md)",
            Class::SpinStall => "find who should write the awaited address (the site names it): a peer that never posts, a lost RDMA write, a doorbell that never reached the NIC",
            Class::RemoteWait => "look at the peer gpu the verdict names: its kernel finished without writing this address (a wrong offset, or a pointer taken from the wrong device or context), never started, or cannot reach this gpu (peer access not enabled: cuCtxEnablePeerAccess; `gdrdoctor check --only gpu.p2p`)",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stalled {
    pub block: u32,
    pub warp: u32,
    pub sm: u32,
    pub site: u32,
    pub site_what: String,
    pub addr: String,
    pub expected: u64,
    pub observed: u64,
    /// What the host read at the address at verdict time (host-mapped flags only).
    pub memory: Option<u64>,
    pub waited_ms: f64,
    pub heartbeat_age_ms: f64,
    pub phase: String,
    /// The wait's comparison: `==` or `>=`.
    #[serde(default)]
    pub cmp: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub class: Class,
    /// Host time from the start of the stalled wait to the verdict.
    pub latency_ms: f64,
    pub threshold_ms: f64,
    pub poll_ms: f64,
    pub stalled: Vec<Stalled>,
    pub stalled_total: usize,
    pub never_started: usize,
    pub started: usize,
    pub capacity: Option<u32>,
    pub writer: Option<String>,
    /// For `remote-wait`: the peer GPU that should have written (ordinal and PCI address).
    #[serde(default)]
    pub peer: Option<String>,
    /// Host wall clock (ns since the epoch) of the verdict.
    pub at_realtime_ns: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScenarioResult {
    pub name: String,
    /// `protocol` (healthy), `inject`, or `control`.
    pub kind: String,
    pub expect: Option<Class>,
    pub description: String,
    pub completed: bool,
    pub elapsed_ms: f64,
    pub verdict: Option<Verdict>,
    pub warnings: Vec<String>,
    pub aborted_cleanly: Option<bool>,
    pub abort_ms: Option<f64>,
    pub escalated: bool,
    /// Protocol timing (`rtt_ns`, `items_per_s`, `wake_us`...).
    pub timing: std::collections::BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HangOutput {
    pub gpu: String,
    pub name: String,
    pub sms: i32,
    pub kernel_source: String,
    pub load_ms: f64,
    pub printf_fifo_bytes: u64,
    pub gt_offset_ns: i64,
    pub gt_calibration_rtt_ns: u64,
    pub scenarios: Vec<ScenarioResult>,
    pub bench: Option<Bench>,
    /// The peer GPU of the cross-GPU scenarios (`loopback` when it is this GPU), or why none.
    #[serde(default)]
    pub peer: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Bench {
    pub detect_threshold_ms: f64,
    pub detect_latency_ms: Vec<f64>,
    pub pingpong_rtt_ns_bare: Vec<f64>,
    pub pingpong_rtt_ns_instrumented: Vec<f64>,
    pub ring_items_per_s_bare: Vec<f64>,
    pub ring_items_per_s_instrumented: Vec<f64>,
    pub poll_ns_per_record: f64,
    pub records_polled: usize,
}

// ---------------------------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------------------------

/// What the hang worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    pub ordinal: i32,
    pub threshold: Duration,
    pub poll: Duration,
    pub grace: Duration,
    pub scenarios: Vec<String>,
    pub bench: usize,
    pub force_ptx: bool,
    /// The peer GPU (CUDA ordinal) of the cross-GPU scenarios; the same ordinal runs them in
    /// loopback on one GPU.
    pub peer: Option<i32>,
}

impl Options {
    /// The floors the detector needs: a stall threshold of at least 20 ms, a poll of 1 ms.
    pub fn normalized(mut self) -> Options {
        self.threshold = self.threshold.max(Duration::from_millis(20));
        self.poll = self.poll.max(Duration::from_millis(1));
        self
    }
}

/// Every scenario: (name, kind, expected class, description).
pub static SCENARIOS: &[(&str, &str, Option<Class>, &str)] = &[
    ("handoff", "protocol", None, "consumer kernel waits on a host-mapped flag that a producer kernel on another stream sets after 20 ms"),
    ("grid-barrier", "protocol", None, "every block of a grid as large as the GPU can keep resident waits for the last block's flag"),
    ("pingpong", "protocol", None, "two blocks bounce a counter through device memory, 20000 round trips, instrumented waits"),
    ("ring", "protocol", None, "a producer block and a consumer block stream 1,000,000 items through a 64-slot ring in device memory"),
    ("never-set", "inject", Some(Class::SpinStall), "a waiter on a flag nobody writes"),
    ("occupancy", "inject", Some(Class::ForwardProgress), "the grid-barrier protocol with 8 more blocks than can be resident"),
    ("ordering", "inject", Some(Class::Ordering), "the producer's stream waits on an event recorded after the consumer, on the consumer's stream"),
    ("stale-read", "inject", Some(Class::StaleRead), "the waiter loads the flag once (a hoisted load) and compares that register forever"),
    ("silent", "inject", Some(Class::Silent), "the waiter spins without heartbeats (it still honours abort)"),
    ("ignore-abort", "inject", Some(Class::Silent), "the waiter spins without heartbeats and never checks the abort flag: the worker must be killed"),
    ("remote-wait", "inject", Some(Class::RemoteWait), "a waiter spins on a flag in its own gpu's memory that a kernel on the peer gpu should set over peer access; the peer's kernel writes the neighbouring word instead"),
    ("control:occupancy", "control", None, "grid-barrier at exactly the resident capacity"),
    ("control:ordering", "control", None, "the same producer/consumer pair on independent streams"),
    ("control:stale-read", "control", None, "the hoisted-load kernel's neighbour with a correct acquire load, flag set after 20 ms"),
    ("control:silent", "control", None, "the heartbeat-less waiter with a producer that sets its flag after 20 ms"),
    ("control:ignore-abort", "control", None, "the abort-ignoring waiter with a producer that sets its flag after 20 ms"),
    ("control:remote-wait", "control", None, "the same pair: the peer gpu's kernel sets the flag over peer access after 20 ms"),
];

pub const DEFAULT_SCENARIOS: &[&str] = &["handoff", "grid-barrier", "pingpong", "ring"];
pub const INJECTIONS: &[&str] = &[
    "never-set",
    "occupancy",
    "ordering",
    "stale-read",
    "silent",
    "ignore-abort",
    "remote-wait",
];

/// The host-mapped region, as the detector sees it: shared memory, no CUDA handle in reach.
struct View<'a> {
    mem: Region<'a>,
    opts: Options,
    offset_ns: i64,
    /// The peer GPU, described for verdicts (`GPU1 0000:..`).
    peer_desc: Option<String>,
}

struct Gpu<'a> {
    view: View<'a>,
    ctx: Context,
    mapped_dev: u64,
    dev_mem: DeviceBuffer,
    streams: [Stream; 2],
    funcs: Kernels,
    sms: i32,
    /// Device memory of this GPU that the peer writes (remote flags), 4 KiB.
    remote: DeviceBuffer,
    peer: Result<Peer, String>,
}

/// The peer GPU of the cross-GPU scenarios.
struct Peer {
    /// The peer's context, module and stream; `None`: loopback, this GPU's own (stream 1).
    other: Option<PeerGpu>,
}

struct PeerGpu {
    ctx: Context,
    funcs: Kernels,
    stream: Stream,
}

impl Peer {
    fn loopback(&self) -> bool {
        self.other.is_none()
    }
}

impl<'a> std::ops::Deref for Gpu<'a> {
    type Target = View<'a>;
    fn deref(&self) -> &View<'a> {
        &self.view
    }
}

impl<'a> View<'a> {
    fn ctl(&self) -> Control<'a> {
        Control::at(self.mem, OFF_CTRL)
    }
    fn launch(&self, i: usize) -> LaunchRecord<'a> {
        LaunchRecord::at(self.mem, OFF_LAUNCH + 64 * i)
    }
    fn flag(&self, i: usize) -> &'a AtomicU64 {
        self.mem.u64_at(OFF_FLAGS + 64 * i)
    }
    fn rec(&self, i: usize) -> HangRecord<'a> {
        HangRecord::at(self.mem, OFF_RECS + 64 * i)
    }
    fn reset(&self) {
        // Zero the mapped region between scenarios (no kernel is running).
        self.mem.zero();
        let c = self.ctl();
        let t = self.opts.threshold.as_nanos() as u64;
        c.hb_ns.store(1_000_000, Ordering::Relaxed);
        // printf: a line once a wait is older than a quarter of the threshold, then at most one
        // per waiter per half threshold.
        c.slow_ns.store(t / 4, Ordering::Relaxed);
        c.print_ns.store(t / 2, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    fn nlaunches(plan: &Plan) -> usize {
        plan.steps
            .iter()
            .filter(|s| matches!(s, Step::Launch(_)))
            .count()
    }

    fn all_done(&self, n: usize) -> bool {
        (0..n).all(|i| self.launch(i).state.load(Ordering::Acquire) == L_DONE)
    }

    /// Map a %globaltimer value to host realtime.
    fn gt_to_host(&self, gt: u64) -> u64 {
        (gt as i64 + self.offset_ns) as u64
    }
}

impl Gpu<'_> {
    fn flag_dev(&self, i: usize) -> u64 {
        self.mapped_dev + (OFF_FLAGS + 64 * i) as u64
    }
    fn dev(&self, off: usize) -> u64 {
        self.mapped_dev + off as u64
    }
}

/// A kernel argument.
type Arg = KernelArg;

struct Launch {
    func: &'static str,
    grid: u32,
    block: u32,
    stream: usize,
    rec_base: usize,
    args: Vec<Arg>,
    cooperative: bool,
    /// Launched on the peer GPU (its context, module and stream).
    on_peer: bool,
}

enum Step {
    Launch(Launch),
    Record(usize),
    Wait(usize),
}

struct Site {
    id: u32,
    what: String,
    flag: Option<usize>,
    writer: Option<usize>,
}

struct Plan {
    steps: Vec<Step>,
    sites: Vec<Site>,
    /// (launch index, first record, record count)
    ranges: Vec<(usize, usize, usize)>,
    capacity: Option<u32>,
    notes: Vec<String>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Gpu<'_> {
    fn enqueue(&self, plan: &Plan, events: &mut Vec<Event>) -> Result<(), String> {
        let mut li = 0usize;
        for s in &plan.steps {
            match s {
                Step::Launch(l) => {
                    let lr = self.launch(li);
                    lr.launch_id.store(li as u32, Ordering::Relaxed);
                    lr.state.store(L_ENQUEUED, Ordering::Release);
                    let peer = if l.on_peer {
                        Some(self.peer.as_ref().map_err(|e| e.clone())?)
                    } else {
                        None
                    };
                    let other = peer.and_then(|p| p.other.as_ref());
                    let module = match other {
                        Some(o) => &o.funcs,
                        None => &self.funcs,
                    };
                    let f = module.get(l.func)?;
                    let mut args = vec![
                        Arg::U64(self.dev(OFF_CTRL)),
                        Arg::U64(self.dev(OFF_RECS + 64 * l.rec_base)),
                        Arg::U64(self.dev(OFF_LAUNCH + 64 * li)),
                    ];
                    args.extend(l.args.iter().copied());
                    let stream = match (other, peer) {
                        (Some(o), _) => &o.stream,
                        // Loopback: the peer's kernel runs on this GPU's second stream.
                        (None, Some(_)) => &self.streams[1],
                        (None, None) => &self.streams[l.stream],
                    };
                    if let Some(o) = other {
                        o.ctx.make_current().map_err(err)?;
                    }
                    let r = if l.cooperative {
                        f.launch_cooperative(l.grid, l.block, stream, &args)
                    } else {
                        f.launch(l.grid, l.block, stream, &args)
                    };
                    if other.is_some() {
                        // Back to this GPU's context.
                        self.ctx.make_current().map_err(err)?;
                    }
                    r.map_err(err)?;
                    li += 1;
                }
                Step::Record(st) => {
                    let e = self.ctx.event().map_err(err)?;
                    e.record(&self.streams[*st]).map_err(err)?;
                    events.push(e);
                }
                Step::Wait(st) => {
                    let e = events.last().ok_or("wait without a recorded event")?;
                    self.streams[*st].wait_event(e).map_err(err)?;
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), String> {
        for s in &self.streams {
            // Every launch on the stream has finished (checked by the caller).
            s.synchronize().map_err(err)?;
        }
        if let Ok(Peer { other: Some(o) }) = &self.peer {
            o.stream.synchronize().map_err(err)?;
        }
        Ok(())
    }
}

/// The detector: polls the records (mapped memory only), returns when every launch finished
/// or a waiter stalled. Runs on its own thread; never calls CUDA.
struct Watch {
    t_change: Vec<Instant>,
    last: Vec<(u32, u64)>,
    t_beat: Vec<Instant>,
    last_beat: Vec<u64>,
}

enum Outcome {
    Completed,
    Hang(Verdict),
}

fn detect(g: &View, plan: &Plan, warnings: &mut Vec<String>) -> Outcome {
    let n = View::nlaunches(plan);
    let total: usize = plan.ranges.iter().map(|r| r.2).sum();
    let start = Instant::now();
    let mut w = Watch {
        t_change: vec![start; total],
        last: vec![(u32::MAX, 0); total],
        t_beat: vec![start; total],
        last_beat: vec![0; total],
    };
    let threshold = g.opts.threshold;
    let mut warned = false;
    loop {
        if g.all_done(n) {
            return Outcome::Completed;
        }
        let now = Instant::now();
        let mut stalled: Vec<(usize, usize, Snap)> = Vec::new();
        let mut slow: Vec<(usize, Snap)> = Vec::new();
        let mut k = 0usize;
        for (ri, &(_, base, count)) in plan.ranges.iter().enumerate() {
            for j in 0..count {
                let s = g.rec(base + j).snapshot();
                if (s.phase, s.iter) != w.last[k] {
                    w.last[k] = (s.phase, s.iter);
                    w.t_change[k] = now;
                }
                if s.beat_gt != w.last_beat[k] {
                    w.last_beat[k] = s.beat_gt;
                    w.t_beat[k] = now;
                }
                if s.phase == PH_WAITING {
                    // The stall clock starts when the wait began on the device (its
                    // %globaltimer, mapped to host time), not when the host first noticed: a
                    // wait is published lazily, after 1024 polls.
                    let host_age = now - w.t_change[k];
                    let dev_age = if s.wait_start_gt > 0 {
                        Duration::from_nanos(
                            realtime_ns().saturating_sub(g.gt_to_host(s.wait_start_gt)),
                        )
                    } else {
                        host_age
                    };
                    let age = dev_age.max(host_age);
                    if age >= threshold {
                        stalled.push((ri, k, s));
                    } else if age >= threshold / 2 {
                        slow.push((k, s));
                    }
                }
                k += 1;
            }
        }
        if !slow.is_empty() && !warned && stalled.is_empty() {
            warned = true;
            let (_, s) = slow[0];
            warnings.push(format!(
                "{} waiter(s) slow for {} ms (half the threshold); first: block {} site {} waits for {} at 0x{:x}, sees {}",
                slow.len(),
                threshold.as_millis() / 2,
                s.block,
                s.site,
                s.expected,
                s.addr,
                s.observed
            ));
        }
        if !stalled.is_empty() {
            return Outcome::Hang(classify(g, plan, &w, &stalled, now));
        }
        std::thread::sleep(g.opts.poll);
    }
}

fn classify(
    g: &View,
    plan: &Plan,
    w: &Watch,
    stalled: &[(usize, usize, Snap)],
    now: Instant,
) -> Verdict {
    let at = realtime_ns();
    let threshold = g.opts.threshold;
    let (ri, _, primary) = stalled[0];
    let (lid, base, count) = plan.ranges[ri];
    let snaps: Vec<Snap> = (0..count).map(|j| g.rec(base + j).snapshot()).collect();
    let never_started = snaps.iter().filter(|s| s.phase == PH_NOT_STARTED).count();
    let started = count - never_started;
    let all_started_wait = snaps
        .iter()
        .filter(|s| s.phase != PH_NOT_STARTED)
        .all(|s| s.phase == PH_WAITING);
    let site = plan.sites.iter().find(|s| s.id == primary.site);
    let writer_state = site
        .and_then(|s| s.writer)
        .map(|l| g.launch(l).state.load(Ordering::Acquire));
    let memory = |s: &Snap| -> Option<u64> {
        plan.sites
            .iter()
            .find(|x| x.id == s.site)
            .and_then(|x| x.flag)
            .map(|f| g.flag(f).load(Ordering::Acquire))
    };
    // The heartbeat age of the primary record (host clock).
    let mut k0 = 0;
    for r in &plan.ranges[..ri] {
        k0 += r.2;
    }
    let beat_age = stalled
        .iter()
        .find(|(r, _, _)| *r == ri)
        .map(|(_, k, _)| now - w.t_beat[*k])
        .unwrap_or_default();
    let _ = k0;
    let mem = memory(&primary);
    let writer_on_peer = site
        .and_then(|s| s.writer)
        .and_then(|l| {
            plan.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Launch(x) => Some(x),
                    _ => None,
                })
                .nth(l)
        })
        .is_some_and(|x| x.on_peer);
    let class = if never_started > 0 && all_started_wait {
        Class::ForwardProgress
    } else if writer_on_peer {
        Class::RemoteWait
    } else if writer_state == Some(L_ENQUEUED) {
        Class::Ordering
    } else if mem.is_some_and(|m| m == primary.expected) && primary.observed != primary.expected {
        Class::StaleRead
    } else if beat_age >= threshold {
        Class::Silent
    } else {
        Class::SpinStall
    };
    let _ = lid;
    let describe = |(_, k, s): &(usize, usize, Snap)| -> Stalled {
        let waited = at.saturating_sub(g.gt_to_host(s.wait_start_gt)) as f64 / 1e6;
        Stalled {
            block: s.block,
            warp: s.warp,
            sm: s.smid,
            site: s.site,
            site_what: plan
                .sites
                .iter()
                .find(|x| x.id == s.site)
                .map(|x| x.what.clone())
                .unwrap_or_default(),
            addr: format!("0x{:x}", s.addr),
            expected: s.expected,
            observed: s.observed,
            memory: memory(s),
            waited_ms: waited,
            heartbeat_age_ms: (now - w.t_beat[*k]).as_secs_f64() * 1e3,
            phase: phase_name(s.phase).into(),
            cmp: if s.cmp == 1 { ">=" } else { "==" }.into(),
        }
    };
    let list: Vec<Stalled> = stalled.iter().take(16).map(describe).collect();
    let latency_ms = list.first().map(|s| s.waited_ms).unwrap_or(0.0);
    Verdict {
        class,
        latency_ms,
        threshold_ms: threshold.as_secs_f64() * 1e3,
        poll_ms: g.opts.poll.as_secs_f64() * 1e3,
        stalled_total: stalled.len(),
        stalled: list,
        never_started,
        started,
        capacity: plan.capacity,
        writer: site.and_then(|s| s.writer).map(|l| {
            format!(
                "launch {l} ({})",
                match g.launch(l).state.load(Ordering::Acquire) {
                    L_ENQUEUED => "enqueued, never started",
                    L_STARTED => "running",
                    L_DONE => "finished",
                    _ => "?",
                }
            )
        }),
        peer: if writer_on_peer {
            g.peer_desc.clone()
        } else {
            None
        },
        at_realtime_ns: at,
    }
}

fn marker(text: &str) {
    // Device printf goes through C stdio; put our markers there too so lines stay in order.
    os::c_stdout_line(&format!("gdrdoctor-hang-scenario {text}"));
}

fn plan_for(g: &Gpu, name: &str) -> Result<Plan, String> {
    let flag = |i| Arg::U64(g.flag_dev(i));
    let wait = |site: u32, fl: usize, flavour: u32, stream: usize, rec: usize| {
        Step::Launch(Launch {
            func: "hp_wait_flag",
            grid: 1,
            block: 32,
            stream,
            rec_base: rec,
            args: vec![flag(fl), Arg::U64(1), Arg::U32(site), Arg::U32(flavour)],
            cooperative: false,
            on_peer: false,
        })
    };
    let set = |fl: usize, delay_ms: u64, stream: usize, rec: usize| {
        Step::Launch(Launch {
            func: "hp_set_flag",
            grid: 1,
            block: 32,
            stream,
            rec_base: rec,
            args: vec![flag(fl), Arg::U64(1), Arg::U64(delay_ms * 1_000_000)],
            cooperative: false,
            on_peer: false,
        })
    };
    let site = |id: u32, what: &str, fl: usize, writer: Option<usize>| Site {
        id,
        what: what.into(),
        flag: Some(fl),
        writer,
    };
    let capacity = || -> Result<u32, String> {
        let n = g
            .funcs
            .get("hp_last_block_sets")?
            .max_active_blocks_per_sm(1024)
            .map_err(err)?;
        Ok((n.max(1) as u32) * g.sms.max(1) as u32)
    };
    let barrier = |grid: u32, cooperative: bool| {
        Step::Launch(Launch {
            func: "hp_last_block_sets",
            grid,
            block: 1024,
            stream: 0,
            rec_base: 0,
            args: vec![flag(0), Arg::U64(1), Arg::U32(5)],
            cooperative,
            on_peer: false,
        })
    };
    let pair = |cons_flavour: u32, delay: u64, fl: usize| Plan {
        steps: vec![wait(1, fl, cons_flavour, 0, 0), set(fl, delay, 1, 1)],
        sites: vec![site(1, "flag set by hp_set_flag on stream 1", fl, Some(1))],
        ranges: vec![(0, 0, 1), (1, 1, 1)],
        capacity: None,
        notes: vec![],
    };
    Ok(match name {
        "handoff" | "control:ordering" => pair(0, 20, 0),
        "never-set" => Plan {
            steps: vec![wait(1, 1, 0, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes", 1, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "ordering" => Plan {
            steps: vec![wait(1, 2, 0, 0, 0), Step::Record(0), Step::Wait(1), set(2, 0, 1, 1)],
            sites: vec![site(1, "flag set by hp_set_flag on stream 1, which waits for an event recorded after this waiter", 2, Some(1))],
            ranges: vec![(0, 0, 1), (1, 1, 1)],
            capacity: None,
            notes: vec![],
        },
        "stale-read" => pair(1, 20, 3),
        "control:stale-read" => pair(0, 20, 3),
        "silent" => Plan {
            steps: vec![wait(1, 4, 2, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes (waiter without heartbeats)", 4, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "control:silent" => pair(2, 20, 4),
        "ignore-abort" => Plan {
            steps: vec![wait(1, 5, 3, 0, 0)],
            sites: vec![site(1, "flag that no kernel writes (waiter ignores abort)", 5, None)],
            ranges: vec![(0, 0, 1)],
            capacity: None,
            notes: vec![],
        },
        "control:ignore-abort" => pair(3, 20, 5),
        "remote-wait" | "control:remote-wait" => {
            let peer = g.peer.as_ref().map_err(|e| format!("no peer gpu: {e}"))?;
            // 4 KiB of this GPU's memory, owned by the worker; nothing runs.
            g.remote.memset_d8(0).map_err(err)?;
            let remote = g.remote.device_ptr();
            let target = if name == "remote-wait" { remote + 64 } else { remote };
            let desc = g.peer_desc.clone().unwrap_or_else(|| "the peer gpu".into());
            let mut notes = vec![format!("peer: {desc}")];
            if peer.loopback() {
                notes.push("loopback: the peer is this gpu (one gpu available), so the flag is written by a second kernel of the same gpu; the peer-access path itself is not exercised".into());
            }
            Plan {
                steps: vec![
                    Step::Launch(Launch {
                        func: "hp_wait_flag",
                        grid: 1,
                        block: 32,
                        stream: 0,
                        rec_base: 0,
                        args: vec![Arg::U64(remote), Arg::U64(1), Arg::U32(7), Arg::U32(0)],
                        cooperative: false,
                        on_peer: false,
                    }),
                    Step::Launch(Launch {
                        func: "hp_set_flag",
                        grid: 1,
                        block: 32,
                        stream: 1,
                        rec_base: 1,
                        args: vec![Arg::U64(target), Arg::U64(1), Arg::U64(20_000_000)],
                        cooperative: false,
                        on_peer: true,
                    }),
                ],
                // No host-readable copy of the flag: it lives in device memory.
                sites: vec![Site { id: 7, what: format!("flag in this gpu's memory that {desc} writes over peer access"), flag: None, writer: Some(1) }],
                ranges: vec![(0, 0, 1), (1, 1, 1)],
                capacity: None,
                notes,
            }
        }
        "grid-barrier" | "control:occupancy" | "occupancy" => {
            let cap = capacity()?;
            let extra = if name == "occupancy" { 8 } else { 0 };
            let grid = cap + extra;
            if grid as usize > MAX_REC {
                return Err(format!("grid {grid} exceeds the {MAX_REC} records of the probe"));
            }
            let mut notes = vec![format!("resident capacity {cap} blocks of 1024 threads ({} SMs)", g.sms)];
            if name == "occupancy" {
                // The cooperative launch of the same grid must be refused (knowledge/hang-probe.md §2.6).
                let mut p = Plan { steps: vec![barrier(grid, true)], sites: vec![], ranges: vec![], capacity: Some(cap), notes: vec![] };
                let mut ev = Vec::new();
                match g.enqueue(&p, &mut ev) {
                    Err(e) => notes.push(format!("cooperative launch of {grid} blocks refused: {e}")),
                    Ok(()) => {
                        notes.push(format!("cooperative launch of {grid} blocks was accepted (unexpected)"));
                        let _ = g.sync();
                    }
                }
                p.steps.clear();
                g.reset();
            }
            Plan {
                steps: vec![barrier(grid, false)],
                sites: vec![Site { id: 5, what: format!("flag set by the last block ({}) of the same grid", grid - 1), flag: Some(0), writer: Some(0) }],
                ranges: vec![(0, 0, grid as usize)],
                capacity: Some(cap),
                notes,
            }
        }
        other => return Err(format!("unknown scenario {other}")),
    })
}

fn run_scenario(g: &Gpu, name: &str) -> Result<ScenarioResult, String> {
    let meta = SCENARIOS
        .iter()
        .find(|s| s.0 == name)
        .ok_or_else(|| format!("unknown scenario {name}"))?;
    let mut r = ScenarioResult {
        name: name.into(),
        kind: meta.1.into(),
        expect: meta.2,
        description: meta.3.into(),
        ..Default::default()
    };
    g.reset();
    marker(name);
    protocol::progress(&format!("probe --hang: {name}"));
    if name == "pingpong" || name == "ring" {
        return protocol_timing(g, name, r);
    }
    let plan = plan_for(g, name)?;
    r.notes = plan.notes.clone();
    let t0 = Instant::now();
    let mut events = Vec::new();
    g.enqueue(&plan, &mut events)?;
    let mut warnings = Vec::new();
    let view: &View = g;
    let outcome = std::thread::scope(|s| s.spawn(|| detect(view, &plan, &mut warnings)).join());
    let outcome = outcome.map_err(|_| "detector thread panicked".to_string())?;
    r.warnings = warnings;
    let n = View::nlaunches(&plan);
    match outcome {
        Outcome::Completed => {
            r.completed = true;
            r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
            g.sync()?;
            // Wake-up time needs both %globaltimer readings from one GPU.
            let cross_gpu = plan
                .steps
                .iter()
                .any(|s| matches!(s, Step::Launch(l) if l.on_peer))
                && g.peer.as_ref().is_ok_and(|p| !p.loopback());
            if plan.sites.iter().any(|s| s.writer == Some(1)) && n >= 2 && !cross_gpu {
                let consumer_end = g.launch(0).end_gt.load(Ordering::Acquire);
                let producer_end = g.launch(1).end_gt.load(Ordering::Acquire);
                if consumer_end >= producer_end && producer_end > 0 {
                    r.timing
                        .insert("wake_us".into(), (consumer_end - producer_end) as f64 / 1e3);
                }
            }
        }
        Outcome::Hang(v) => {
            r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
            r.verdict = Some(v);
            // Cooperative abort, then a short grace.
            let ta = Instant::now();
            g.ctl().abort.store(1, Ordering::Release);
            while ta.elapsed() < g.opts.grace && !g.all_done(n) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if g.all_done(n) {
                r.abort_ms = Some(ta.elapsed().as_secs_f64() * 1e3);
                r.aborted_cleanly = Some(true);
                g.sync()?; // flushes device printf
            } else {
                r.aborted_cleanly = Some(false);
                r.escalated = true;
            }
        }
    }
    // Nothing waits on the events any more: they go with `events`.
    drop(events);
    Ok(r)
}

/// Ping-pong round trip and ring throughput, one run each (instrumented, as the protocol).
fn protocol_timing(g: &Gpu, name: &str, mut r: ScenarioResult) -> Result<ScenarioResult, String> {
    let t0 = Instant::now();
    if name == "pingpong" {
        let rtt = pingpong(g, 20_000, true)?;
        r.timing.insert("rtt_ns".into(), rtt);
    } else {
        let ips = ring(g, 1_000_000, true)?;
        r.timing.insert("items_per_s".into(), ips);
    }
    r.completed = true;
    r.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(r)
}

fn run_protocol(
    g: &Gpu,
    func: &'static str,
    args: Vec<Arg>,
    deadline: Duration,
) -> Result<(u64, u64, u64), String> {
    g.reset();
    let plan = Plan {
        steps: vec![Step::Launch(Launch {
            func,
            grid: 2,
            block: 32,
            stream: 0,
            rec_base: 0,
            args,
            cooperative: false,
            on_peer: false,
        })],
        sites: vec![],
        ranges: vec![],
        capacity: None,
        notes: vec![],
    };
    let mut ev = Vec::new();
    // Clear the device words the protocol uses.
    g.dev_mem.memset_d8(0).map_err(err)?;
    g.enqueue(&plan, &mut ev)?;
    let t0 = Instant::now();
    // Bare (uninstrumented) protocols do not write the launch record's state: wait on the stream.
    loop {
        if g.streams[0].query().map_err(err)? {
            break;
        }
        if t0.elapsed() > deadline {
            g.ctl().abort.store(1, Ordering::Release);
            return Err(format!(
                "{func} did not finish within {} s",
                deadline.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let lr = g.launch(0);
    Ok((
        lr.start_gt.load(Ordering::Acquire),
        lr.end_gt.load(Ordering::Acquire),
        lr.value.load(Ordering::Acquire),
    ))
}

fn pingpong(g: &Gpu, n: u32, instrumented: bool) -> Result<f64, String> {
    let (s, e, _) = run_protocol(
        g,
        "hp_pingpong",
        vec![
            Arg::U64(g.dev_mem.device_ptr()),
            Arg::U64(g.dev_mem.device_ptr() + 128),
            Arg::U32(n),
            Arg::U32(instrumented as u32),
        ],
        Duration::from_secs(30),
    )?;
    Ok(e.saturating_sub(s) as f64 / f64::from(n))
}

fn ring(g: &Gpu, n: u32, instrumented: bool) -> Result<f64, String> {
    let (s, e, _) = run_protocol(
        g,
        "hp_ring",
        vec![
            Arg::U64(g.dev_mem.device_ptr() + 256),
            Arg::U64(g.dev_mem.device_ptr() + 384),
            Arg::U64(g.dev_mem.device_ptr() + 512),
            Arg::U32(64),
            Arg::U32(n),
            Arg::U32(instrumented as u32),
        ],
        Duration::from_secs(60),
    )?;
    let secs = e.saturating_sub(s) as f64 / 1e9;
    Ok(if secs > 0.0 { f64::from(n) / secs } else { 0.0 })
}

/// Globaltimer <-> host realtime: the host writes a request, the kernel answers with
/// %globaltimer; the round trip with the smallest time wins.
fn calibrate(g: &Gpu) -> Result<(i64, u64), String> {
    g.reset();
    let rounds: u32 = 200;
    g.funcs
        .get("hp_clock")?
        .launch(
            1,
            32,
            &g.streams[0],
            &[
                Arg::U64(g.dev(OFF_CTRL)),
                Arg::U64(g.dev(OFF_CALIB)),
                Arg::U64(g.dev(OFF_CALIB + 64)),
                Arg::U32(rounds),
            ],
        )
        .map_err(err)?;
    let (reqa, respa) = (g.mem.u64_at(OFF_CALIB), g.mem.u64_at(OFF_CALIB + 64));
    let mut best = (0i64, u64::MAX);
    for i in 1..=u64::from(rounds) {
        let before = respa.load(Ordering::Acquire);
        let t0 = realtime_ns();
        reqa.store(i, Ordering::Release);
        let start = Instant::now();
        let gt = loop {
            let v = respa.load(Ordering::Acquire);
            if v != before {
                break v;
            }
            if start.elapsed() > Duration::from_secs(5) {
                g.ctl().abort.store(1, Ordering::Release);
                return Err("clock calibration kernel did not answer".into());
            }
            std::hint::spin_loop();
        };
        let t1 = realtime_ns();
        let rtt = t1.saturating_sub(t0);
        if rtt < best.1 {
            best = (((t0 + t1) / 2) as i64 - gt as i64, rtt);
        }
    }
    // The kernel has answered every round.
    g.streams[0].synchronize().map_err(err)?;
    Ok(best)
}

/// Retain the peer GPU's context, load the kernels there, and let it write this GPU's memory
/// (`cuCtxEnablePeerAccess` from the peer's context). Leaves `own` current.
fn setup_peer(drv: &Driver, p: i32, own: &Context, force_ptx: bool) -> Result<PeerGpu, String> {
    let dp = drv.device(p).map_err(err)?;
    let da = own.device();
    if !dp.can_access_peer(&da).map_err(err)? {
        return Err(format!("cuDeviceCanAccessPeer(GPU{p} -> GPU{}) = 0: the peer cannot write this gpu's memory (see `gdrdoctor check --only gpu.p2p`)", da.ordinal()));
    }
    let ctx = dp.primary_context().map_err(err)?;
    let r = (|| -> Result<PeerGpu, String> {
        let funcs = kernels::load(&ctx, &kernels::HANG, &["hp_set_flag"], force_ptx)?;
        let stream = ctx.stream().map_err(err)?;
        ctx.enable_peer_access(own).map_err(err)?;
        Ok(PeerGpu {
            ctx: ctx.clone(),
            funcs,
            stream,
        })
    })();
    // Back to our context whatever happened (on failure the peer's context is released with
    // the last handle to it).
    let _ = own.make_current();
    r
}

/// The worker side of `probe --hang`. On an escalation (a kernel that ignores the abort) it
/// prints its reply itself and exits 3 without releasing the context.
pub fn worker(opts: Options) -> Result<HangOutput, WorkerError> {
    let opts = opts.normalized();
    let drv = Driver::init()?;
    let d = drv.device(opts.ordinal)?;
    let mut out = HangOutput {
        gpu: d.bdf().unwrap_or_default(),
        name: d.name(),
        ..Default::default()
    };
    out.sms = d
        .attribute(crate::live::cuda::Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .unwrap_or(1);
    // The primary context of our device; never released on a hang path (exit instead).
    let ctx = d.primary_context()?;
    // printf FIFO before the first launch.
    let fifo: usize = 16 << 20;
    ctx.set_printf_fifo(fifo)?;
    out.printf_fifo_bytes = fifo as u64;
    let names = [
        "hp_wait_flag",
        "hp_set_flag",
        "hp_last_block_sets",
        "hp_pingpong",
        "hp_ring",
        "hp_clock",
    ];
    let funcs = kernels::load(&ctx, &kernels::HANG, &names, opts.force_ptx)?;
    out.kernel_source = funcs.source.clone();
    out.load_ms = funcs.load_ms;
    // Allocations and streams owned by the worker for its lifetime.
    let mapped = ctx.alloc_mapped_host(MAPPED_SIZE)?;
    let dev_mem = ctx.alloc(4096)?;
    let remote = ctx.alloc(4096)?;
    let streams = [ctx.stream()?, ctx.stream()?];
    let count = drv.device_count().unwrap_or(0);
    let peer = match opts.peer {
        None => Err("no peer gpu requested".to_string()),
        Some(p) if p == opts.ordinal => Ok(Peer { other: None }),
        Some(p) if p >= count => Err(format!(
            "GPU{p} is not visible to cuda here ({count} device(s); CUDA_VISIBLE_DEVICES?)"
        )),
        Some(p) => setup_peer(&drv, p, &ctx, opts.force_ptx).map(|o| Peer { other: Some(o) }),
    };
    let peer_desc = opts.peer.map(|p| {
        let bdf = drv
            .device(p)
            .ok()
            .and_then(|d| d.bdf().ok())
            .unwrap_or_default();
        if p == opts.ordinal {
            format!("GPU{p} {bdf} (loopback)")
        } else {
            format!("GPU{p} {bdf}")
        }
    });
    out.peer = match (&peer, &peer_desc) {
        (Ok(_), d) => d.clone(),
        (Err(e), _) if opts.peer.is_some() => Some(format!("peer setup failed: {e}")),
        _ => None,
    };
    let mut g = Gpu {
        view: View {
            mem: mapped.region(),
            opts: opts.clone(),
            offset_ns: 0,
            peer_desc,
        },
        ctx: ctx.clone(),
        mapped_dev: mapped.device_ptr(),
        dev_mem,
        streams,
        funcs,
        sms: out.sms,
        remote,
        peer,
    };
    let (off, rtt) = calibrate(&g)?;
    g.view.offset_ns = off;
    out.gt_offset_ns = off;
    out.gt_calibration_rtt_ns = rtt;
    let list: Vec<String> = if opts.scenarios.is_empty() {
        DEFAULT_SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        opts.scenarios.clone()
    };
    for name in &list {
        let r = match run_scenario(&g, name) {
            Ok(r) => r,
            Err(e) => ScenarioResult {
                name: name.clone(),
                kind: "error".into(),
                notes: vec![e],
                ..Default::default()
            },
        };
        let escalated = r.escalated;
        out.scenarios.push(r);
        if escalated {
            // The kernel ignores the abort: the context cannot be released. Report and leave
            // without running destructors (knowledge/hang-probe.md §2.5).
            protocol::reply("hang", protocol::Outcome::Ok(protocol::output(&out)?));
            marker("escalate");
            std::process::exit(3);
        }
    }
    if opts.bench > 0 {
        // A bench failure is reported as such, and keeps the scenario results.
        match bench(&g, opts.bench) {
            Ok(b) => out.bench = Some(b),
            Err(e) => out.scenarios.push(ScenarioResult {
                name: "bench".into(),
                kind: "error".into(),
                notes: vec![format!("the benchmark failed: {e}")],
                ..Default::default()
            }),
        }
    }
    // Every kernel finished: the streams, buffers, module and contexts go with `g`, then the
    // mapped region (the detector's view of it went with `g`).
    drop(g);
    drop(mapped);
    Ok(out)
}

/// Rounds of the overhead measurement (each: ping-pong and ring, bare and instrumented).
const BENCH_ROUNDS: usize = 11;

fn bench(g: &Gpu, n: usize) -> Result<Bench, String> {
    let mut b = Bench {
        detect_threshold_ms: g.opts.threshold.as_secs_f64() * 1e3,
        ..Default::default()
    };
    for i in 0..n {
        protocol::progress(&format!("bench: detection latency {}/{n}", i + 1));
        let r = run_scenario(g, "never-set")?;
        if let Some(v) = r.verdict {
            b.detect_latency_ms.push(v.latency_ms);
        }
        if r.escalated {
            return Err("never-set did not abort cleanly".into());
        }
    }
    // Bare and instrumented interleaved, BENCH_ROUNDS times: the medians compare runs that saw
    // the same clocks and the same neighbours.
    for i in 0..BENCH_ROUNDS {
        protocol::progress(&format!(
            "bench: ping-pong and ring {}/{BENCH_ROUNDS}",
            i + 1
        ));
        b.pingpong_rtt_ns_bare.push(pingpong(g, 20_000, false)?);
        b.pingpong_rtt_ns_instrumented
            .push(pingpong(g, 20_000, true)?);
        b.ring_items_per_s_bare.push(ring(g, 1_000_000, false)?);
        b.ring_items_per_s_instrumented
            .push(ring(g, 1_000_000, true)?);
    }
    // Host poll cost: snapshot every record, 100 times.
    g.reset();
    let t0 = Instant::now();
    let mut sink = 0u64;
    for _ in 0..100 {
        for i in 0..MAX_REC {
            sink = sink.wrapping_add(g.rec(i).snapshot().iter);
        }
    }
    b.poll_ns_per_record = t0.elapsed().as_nanos() as f64 / (100.0 * MAX_REC as f64);
    b.records_polled = MAX_REC;
    std::hint::black_box(sink);
    Ok(b)
}

#[cfg(test)]
mod tests {
    //! The detector and classifier without a GPU: a heap buffer stands in for the host-mapped
    //! region, and the test writes records the way the kernels do.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_arguments)]
    use super::*;

    struct Fake {
        buf: crate::live::shared::HeapRegion,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                buf: crate::live::shared::HeapRegion::new(MAPPED_SIZE),
            }
        }
        fn view(&mut self, threshold_ms: u64) -> View<'_> {
            View {
                mem: self.buf.region(),
                opts: Options {
                    ordinal: 0,
                    threshold: Duration::from_millis(threshold_ms),
                    poll: Duration::from_millis(2),
                    grace: Duration::from_millis(50),
                    scenarios: vec![],
                    bench: 0,
                    force_ptx: false,
                    peer: None,
                },
                offset_ns: 0,
                peer_desc: Some("GPU1 0000:28:00.0".into()),
            }
        }
    }

    fn set_rec(
        v: &View,
        i: usize,
        phase: u32,
        site: u32,
        flag_addr: u64,
        expected: u64,
        observed: u64,
        ws: u64,
    ) {
        let r = v.rec(i);
        let s = r.seq.load(Ordering::Relaxed);
        r.seq.store(s + 1, Ordering::Relaxed);
        r.phase_site.store((phase << 24) | site, Ordering::Relaxed);
        r.block.store(i as u32, Ordering::Relaxed);
        r.addr.store(flag_addr, Ordering::Relaxed);
        r.expected.store(expected, Ordering::Relaxed);
        r.observed.store(observed, Ordering::Relaxed);
        r.wait_start_gt.store(ws, Ordering::Relaxed);
        r.beat_gt.store(ws, Ordering::Relaxed);
        r.seq.store(s + 2, Ordering::Release);
    }

    fn plan(sites: Vec<Site>, ranges: Vec<(usize, usize, usize)>, launches: usize) -> Plan {
        let steps = (0..launches)
            .map(|_| {
                Step::Launch(Launch {
                    func: "x",
                    grid: 1,
                    block: 1,
                    stream: 0,
                    rec_base: 0,
                    args: vec![],
                    cooperative: false,
                    on_peer: false,
                })
            })
            .collect();
        Plan {
            steps,
            sites,
            ranges,
            capacity: Some(4),
            notes: vec![],
        }
    }

    fn run(v: &View, p: &Plan, beat: bool) -> Outcome {
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            if beat {
                // A live waiter: heartbeats every millisecond.
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        v.rec(0).beat_gt.store(realtime_ns(), Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
            let mut w = Vec::new();
            let o = detect(v, p, &mut w);
            stop.store(true, Ordering::Relaxed);
            o
        })
    }

    fn class(o: Outcome) -> (Class, Verdict) {
        match o {
            Outcome::Hang(v) => (v.class, v),
            Outcome::Completed => panic!("expected a hang"),
        }
    }

    #[test]
    fn spin_stall_with_live_heartbeats_and_exact_details() {
        let mut f = Fake::new();
        let v = f.view(60);
        let flag = 0x1000;
        set_rec(&v, 0, PH_WAITING, 1, flag, 1, 0, realtime_ns());
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag nobody writes".into(),
                flag: Some(1),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        );
        let t0 = Instant::now();
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::SpinStall);
        let waited = t0.elapsed().as_secs_f64() * 1e3;
        assert!(
            (60.0..60.0 + 3.0 * 2.0 + 20.0).contains(&waited),
            "{waited}"
        );
        let s = &verdict.stalled[0];
        assert_eq!(
            (s.block, s.site, s.expected, s.observed, s.memory),
            (0, 1, 1, 0, Some(0))
        );
        assert_eq!(s.addr, "0x1000");
        assert!(verdict.latency_ms >= 60.0, "{}", verdict.latency_ms);
    }

    #[test]
    fn stale_read_when_memory_already_holds_the_value() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        v.flag(2).store(1, Ordering::Release);
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(2),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        );
        assert_eq!(class(run(&v, &p, true)).0, Class::StaleRead);
    }

    #[test]
    fn silent_when_heartbeats_stop() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(1),
                writer: None,
            }],
            vec![(0, 0, 1)],
            1,
        );
        assert_eq!(class(run(&v, &p, false)).0, Class::Silent);
    }

    #[test]
    fn ordering_when_the_writer_launch_never_started() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        v.launch(1).state.store(L_ENQUEUED, Ordering::Release);
        let p = plan(
            vec![Site {
                id: 1,
                what: "flag".into(),
                flag: Some(1),
                writer: Some(1),
            }],
            vec![(0, 0, 1), (1, 1, 1)],
            2,
        );
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::Ordering);
        assert!(verdict.writer.unwrap().contains("never started"));
    }

    #[test]
    fn remote_wait_names_the_peer_whose_write_never_came() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 0, PH_WAITING, 7, 0, 1, 0, realtime_ns());
        // The peer's kernel ran to the end without writing the awaited word.
        v.launch(1).state.store(L_DONE, Ordering::Release);
        let mut p = plan(
            vec![Site {
                id: 7,
                what: "flag in this gpu's memory".into(),
                flag: None,
                writer: Some(1),
            }],
            vec![(0, 0, 1), (1, 1, 1)],
            2,
        );
        if let Step::Launch(l) = &mut p.steps[1] {
            l.on_peer = true;
        }
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::RemoteWait);
        assert_eq!(verdict.peer.as_deref(), Some("GPU1 0000:28:00.0"));
        assert!(verdict.writer.unwrap().contains("finished"));
        // The same plan with the writer on this GPU is a plain spin stall, not remote-wait.
        if let Step::Launch(l) = &mut p.steps[1] {
            l.on_peer = false;
        }
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::SpinStall);
        assert!(verdict.peer.is_none());
    }

    #[test]
    fn forward_progress_when_blocks_never_started() {
        let mut f = Fake::new();
        let v = f.view(40);
        for i in 0..4 {
            set_rec(&v, i, PH_WAITING, 5, 0, 1, 0, realtime_ns());
        }
        // records 4 and 5 stay NOT_STARTED (zeroed)
        let p = plan(
            vec![Site {
                id: 5,
                what: "last block's flag".into(),
                flag: Some(0),
                writer: Some(0),
            }],
            vec![(0, 0, 6)],
            1,
        );
        let (c, verdict) = class(run(&v, &p, true));
        assert_eq!(c, Class::ForwardProgress);
        assert_eq!(
            (verdict.never_started, verdict.started, verdict.capacity),
            (2, 4, Some(4))
        );
    }

    #[test]
    fn completion_is_not_a_hang_and_progress_resets_the_clock() {
        let mut f = Fake::new();
        let v = f.view(80);
        set_rec(&v, 0, PH_WAITING, 1, 0, 1, 0, realtime_ns());
        let p = plan(vec![], vec![(0, 0, 1)], 1);
        let o = std::thread::scope(|s| {
            s.spawn(|| {
                // Progress at 40 ms (a new wait begins), completion at 100 ms: never 80 ms idle.
                std::thread::sleep(Duration::from_millis(40));
                set_rec(&v, 0, PH_WAITING, 1, 0, 2, 1, realtime_ns());
                v.rec(0).iter.store(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(60));
                v.launch(0).state.store(L_DONE, Ordering::Release);
            });
            let mut w = Vec::new();
            detect(&v, &p, &mut w)
        });
        assert!(matches!(o, Outcome::Completed));
    }

    #[test]
    fn seqlock_snapshot_is_consistent() {
        let mut f = Fake::new();
        let v = f.view(40);
        set_rec(&v, 3, PH_WAITING, 7, 0xabc, 9, 8, 123);
        let s = v.rec(3).snapshot();
        assert_eq!(
            (
                s.phase,
                s.site,
                s.addr,
                s.expected,
                s.observed,
                s.wait_start_gt
            ),
            (PH_WAITING, 7, 0xabc, 9, 8, 123)
        );
        // An update in flight (odd seq) is not returned as consistent data.
        v.rec(3).seq.store(7, Ordering::Release);
        let s = v.rec(3).snapshot();
        assert_eq!(s.addr, 0, "odd seq never yields a torn record");
    }

    #[test]
    fn options_round_trip_through_the_protocol_and_keep_their_floors() {
        let o = Options {
            ordinal: 1,
            threshold: Duration::from_millis(250),
            poll: Duration::from_millis(5),
            grace: Duration::from_millis(300),
            scenarios: vec!["never-set".into(), "ring".into()],
            bench: 3,
            force_ptx: true,
            peer: Some(2),
        };
        let req = crate::probe::protocol::Request::new("hang", &o).unwrap();
        let back: Options = crate::probe::protocol::params(req.params).unwrap();
        assert_eq!(back, o);
        let tiny = Options {
            threshold: Duration::from_millis(1),
            poll: Duration::ZERO,
            ..o
        }
        .normalized();
        assert_eq!(
            (tiny.threshold, tiny.poll),
            (Duration::from_millis(20), Duration::from_millis(1))
        );
    }
}
