//! The hang probe's protocol types: what the worker is asked ([`Options`]), what it answers
//! ([`HangOutput`], with a [`Verdict`] per stalled scenario), and the scenario catalogue.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The stall classes: one classification for this probe and `gdrdoctor watch`
/// (`gdrdoctor_checks::stall`).
pub use gdrdoctor_checks::stall::Class;

/// The probe's words for a class: what it means in the probe's own scenarios.
pub fn explain(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "blocks of the grid never started while every started block waits: the grid exceeds what the GPU can keep resident and the awaited write comes from a block that cannot be scheduled",
            Class::Ordering => "the kernel that would write the awaited value was enqueued but never started: stream/event ordering (or the legacy default stream, CUDA_LAUNCH_BLOCKING, lazy loading) queues it behind the waiter",
            Class::StaleRead => "memory already holds the awaited value but the waiter keeps seeing the old one: its load is hoisted or cached (missing volatile / ld.acquire)",
            Class::Silent => "the waiter stopped sending heartbeats: it spins in a loop without instrumentation (or trapped, or was preempted)",
            Class::SpinStall => "the waiter is alive and re-reads memory, but nobody writes the awaited value",
            Class::RemoteWait => "the waiter is alive and re-reads its own gpu's memory for a value a peer gpu should write over peer access (nvlink or pcie p2p); the peer's write never arrived",
    }
}

/// The probe's fix for a class.
pub fn fix(c: Class) -> &'static str {
    match c {
            Class::ForwardProgress => "launch inter-block waits cooperatively (cudaLaunchCooperativeKernel refuses grids that cannot be resident) or keep grid <= occupancy x SMs",
            Class::Ordering => "put producer and consumer on independent non-blocking streams with no event edge from consumer to producer; avoid the legacy default stream and CUDA_LAUNCH_BLOCKING=1; load every kernel before the first launch (CUDA_MODULE_LOADING=EAGER)",
            Class::StaleRead => "poll with volatile or ld.acquire loads (cuda::atomic_ref load(acquire), NVSHMEM-style) and publish with st.release / __threadfence_system() before the flag",
            Class::Silent => "use instrumented waits with a periodic heartbeat and abort check; attach cuda-gdb to see where the warp spins (docs/guides/hangs.md)",
            Class::SpinStall => "find who should write the awaited address (the site names it): a peer that never posts, a lost RDMA write, a doorbell that never reached the NIC",
            Class::RemoteWait => "look at the peer gpu the verdict names: its kernel finished without writing this address (a wrong offset, or a pointer taken from the wrong device or context), never started, or cannot reach this gpu (peer access not enabled: cuCtxEnablePeerAccess; `gdrdoctor check --only gpu.p2p`)",
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
