//! The data of `preflight`: what rank 0 asks each node to run with NCCL ([`RunSpec`]), what a
//! node's NCCL worker reports ([`NcclOutput`]), everything rank 0 gathered ([`Inputs`]), and
//! the answer (`gdrdoctor.preflight/v1`, [`Answer`]), the JSON contract
//! (docs/schema/gdrdoctor.preflight.v1.schema.json).

use crate::report::{Finding, Report};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "gdrdoctor.preflight/v1";

/// The steps of a node's NCCL run, in order: the worker says `step NAME [ROUND]` as it enters
/// each, so that a node killed at the deadline is known by where it stood.
pub const STEPS: &[&str] = &[
    "start",
    "cuda",
    "load",
    "unique-id",
    "init",
    "allreduce",
    "allreduce-wait",
    "round",
    "round-wait",
    "destroy",
    "done",
];

/// Where a step stands in [`STEPS`] (with its round): steps compare by it. An unknown step is
/// before every known one.
pub fn step_order(step: &str) -> (usize, u32) {
    let mut w = step.split_whitespace();
    let name = w.next().unwrap_or("");
    let round = w.next().and_then(|r| r.parse().ok()).unwrap_or(0);
    let idx = STEPS.iter().position(|s| *s == name).map_or(0, |i| i + 1);
    // `round-wait 2` is after `round 2` and before `round 3`.
    match name {
        "round" | "round-wait" => (STEPS.len() + 1, round * 2 + u32::from(name == "round-wait")),
        "destroy" | "done" => (STEPS.len() + 2 + idx, 0),
        _ => (idx, 0),
    }
}

/// What the node in a round's pair meets: the other node's allocation rank and its GPUs as NCCL
/// ranks `first_rank .. first_rank + gpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerNode {
    pub member: u32,
    pub first_rank: u32,
    pub gpus: u32,
}

/// A node's part in one round of pairs: its peer, or `None` when it rests (odd node count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairStep {
    pub round: u32,
    pub peer: Option<PeerNode>,
}

/// What rank 0 asks one node's NCCL worker to do (one communicator over every GPU of every node
/// of the run; this node's GPUs are NCCL ranks `first_rank .. first_rank + gpus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// `default` (as NCCL chooses) or `net-only` (P2P and shared memory off).
    pub label: String,
    /// The `NCCL_*` variables of this run (beside the debug settings the worker adds).
    pub env: BTreeMap<String, String>,
    pub nranks: u32,
    pub first_rank: u32,
    /// CUDA ordinals `0..gpus` of the node.
    pub gpus: u32,
    /// `ncclUniqueId` as hex (256 digits); `None`: this node makes it (`ncclGetUniqueId`) and
    /// says it before initialising.
    pub id: Option<String>,
    /// Float32 elements per GPU of the all-reduce.
    pub count: u64,
    /// Timed repetitions of the all-reduce and of each pair's exchange (after one warm-up).
    pub iterations: u32,
    /// Rounds of pairs (send/recv per rail between the two nodes), run after the all-reduce;
    /// every node runs every round (a rest is a barrier only).
    pub pairs: Vec<PairStep>,
    /// Bytes per rail and direction of a pair's exchange.
    pub pair_bytes: u64,
}

/// One GPU of the node as an NCCL rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRank {
    pub rank: u32,
    pub cuda: i32,
    /// `cuDeviceGetPCIBusId`, lower case (`0000:18:00.0`).
    pub bdf: String,
}

/// The all-reduce's sums as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sums {
    /// Every element must be this: the sum over ranks of rank + 1.
    pub expected: f64,
    pub checked: u64,
    pub wrong: u64,
    /// The first wrong one: (NCCL rank, element, value).
    pub first_wrong: Option<(u32, u64, f64)>,
}

/// The all-reduce on this node's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Collective {
    /// Bytes per GPU.
    pub bytes: u64,
    /// Median time of the timed all-reduces, enqueue to every stream's end.
    pub ms: f64,
    pub iterations: u32,
    /// Bus bandwidth as nccl-tests computes it: bytes / time x 2(n-1)/n, GB/s.
    pub busbw_gbs: f64,
    pub sums: Sums,
}

/// One rail of a pair: this node's GPU (NCCL `rank`) sends `bytes` to the peer's GPU of the
/// same index and receives as many from it, both at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RailOutput {
    /// The GPU's index on the node (its CUDA ordinal).
    pub rail: u32,
    pub rank: u32,
    pub peer_rank: u32,
    pub bytes: u64,
    /// Median time of this rail's part of the timed exchanges (every rail of the pair runs at
    /// once, each timed by its own GPU's stream).
    pub ms: f64,
    /// bytes / time, one direction, GB/s.
    pub busbw_gbs: f64,
    /// Received bytes that were not the peer's pattern (4-byte words).
    pub wrong: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundOutput {
    pub round: u32,
    pub peer: u32,
    pub rails: Vec<RailOutput>,
}

/// What a node's NCCL worker reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclOutput {
    /// `ncclGetVersion` (`2.28.9`).
    pub version: Option<String>,
    pub ranks: Vec<LocalRank>,
    pub init_ms: Option<f64>,
    pub allreduce: Option<Collective>,
    pub rounds: Vec<RoundOutput>,
    /// The NCCL (or CUDA) call that failed, in its words.
    pub error: Option<String>,
    /// The step the worker stood at when it stopped (`done` after a clean run).
    pub step: String,
}

/// One node's part of one NCCL run, as rank 0 received it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeRun {
    /// The node's allocation rank.
    pub member: u32,
    pub first_rank: u32,
    pub gpus: u32,
    pub output: Option<NcclOutput>,
    /// What went wrong with the worker itself (killed at its deadline, crashed, not started),
    /// or with the node (its connection lost), in words.
    pub problem: Option<String>,
    #[serde(default)]
    pub timed_out: bool,
    /// It was never asked to run (the node that makes NCCL's id failed first).
    #[serde(default)]
    pub not_started: bool,
    /// The last step the node's worker announced.
    pub step: Option<String>,
    /// NCCL's own log (NCCL_DEBUG=INFO) on that node, capped.
    pub log: Option<String>,
    /// Why there is no log, or why it is incomplete.
    pub log_error: Option<String>,
    /// When rank 0 had this node's result, from the run's start (rank 0's clock).
    pub arrival_ms: Option<f64>,
    /// How long the node's worker ran (the node's own clock: a duration, comparable across
    /// nodes without synchronised clocks).
    #[serde(default)]
    pub elapsed_ms: Option<f64>,
}

/// One NCCL run across the allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunInput {
    pub label: String,
    pub env: BTreeMap<String, String>,
    pub nranks: u32,
    pub nodes: Vec<NodeRun>,
    /// Why the run did not happen at all.
    pub not_run: Option<String>,
    pub ms: Option<f64>,
    /// Each node's worker deadline.
    #[serde(default)]
    pub deadline_ms: Option<f64>,
}

/// How the allocation was started and reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Allocation {
    /// `slurm`, `openmpi`, `pmi`, `torchrun`, `kubernetes`, `flags`.
    #[schemars(extend("enum" = ["slurm", "openmpi", "pmi", "torchrun", "kubernetes", "flags"]))]
    pub engine: String,
    #[schemars(extend("x-required" = true))]
    pub job: Option<String>,
    pub world: u32,
    pub rendezvous: String,
    /// The join deadline.
    pub timeout_s: f64,
}

/// One rank of the allocation as rank 0 saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub rank: u32,
    /// The node's name: what the rank said it is, or what the engine expected at that rank.
    pub node: Option<String>,
    /// When it joined, from rank 0's start.
    pub joined_ms: Option<f64>,
    /// Its connection was lost after it joined (with why).
    pub lost: Option<String>,
    /// Its `check` report.
    pub report: Option<Report>,
    /// Why there is no report (refused: too big, malformed; the check could not run).
    pub report_error: Option<String>,
    pub check_ms: Option<f64>,
    /// GPUs this node brings to NCCL (CUDA ordinals 0..gpus).
    #[serde(default)]
    pub gpus: u32,
}

/// A connection refused at the rendezvous: a stranger, a replay, a duplicate rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Refusal {
    pub peer: String,
    pub reason: String,
}

/// A field where a node holds a minority value (the fleet roll-up's drift).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OddField {
    pub member: u32,
    pub field: String,
    pub value: String,
    pub majority: String,
}

/// The site's bandwidth thresholds for pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Thresholds {
    /// A rail below this fraction of what the slower end's links allow fails (0: off).
    pub min_fraction: f64,
    /// A rail below this fraction of the median of every measured rail fails (0: off).
    pub min_relative: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_fraction: 0.6,
            min_relative: 0.5,
        }
    }
}

/// How long a stage took at rank 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Stage {
    pub name: String,
    pub ms: f64,
}

/// Everything rank 0 gathered.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    pub allocation: Allocation,
    pub members: Vec<Member>,
    pub refused: Vec<Refusal>,
    pub drift: Vec<OddField>,
    pub runs: Vec<RunInput>,
    pub thresholds: Thresholds,
    pub stages: Vec<Stage>,
    pub fail_on: crate::report::FailOn,
    pub allow_incomplete: bool,
}

// ---- the answer -------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Tool {
    pub version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Summary {
    pub nodes: u32,
    pub joined: u32,
    pub take_out: u32,
    pub pass: u32,
    pub warn: u32,
    pub fail: u32,
    pub skip: u32,
    pub error: u32,
    #[schemars(extend("enum" = [0, 1, 3]))]
    pub exit_code: i32,
}

/// One node (allocation rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "node")]
pub struct NodeRow {
    pub rank: u32,
    #[schemars(extend("x-required" = true))]
    pub node: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub host: Option<String>,
    /// `joined`, `never-joined`, `lost`, `no-report`.
    #[schemars(extend("enum" = ["joined", "never-joined", "lost", "no-report"]))]
    pub state: String,
    /// The node's `check` exit code and counts.
    #[schemars(extend("x-required" = true))]
    pub check_exit: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub check: Option<crate::report::Summary>,
    /// Failing and erroring check ids.
    pub failing: Vec<String>,
    /// Fields where it differs from the majority.
    pub drift: Vec<String>,
    pub gpus: u32,
    pub take_out: bool,
    /// `take-out`: named under `take_out`; `shared-failure`: NCCL failed on it as on every
    /// other node where it ran (a cause the allocation shares, named in the findings, not
    /// this node's); `not-evaluated`: NCCL never ran on it (it was never started), so nothing
    /// says whether GPUDirect RDMA works there; `ok`: none of these.
    #[schemars(extend("enum" = ["ok", "take-out", "shared-failure", "not-evaluated"]))]
    pub verdict: String,
}

/// What the node's facts predict for one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "prediction")]
pub struct Prediction {
    /// The nearest NIC (NCCL's path type, the smallest wins).
    #[schemars(extend("x-required" = true))]
    pub nic: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub path: Option<String>,
    /// GDR with that NIC (null: undecided).
    #[schemars(extend("x-required" = true))]
    pub gdr: Option<bool>,
    #[schemars(extend("x-required" = true))]
    pub mechanism: Option<String>,
    pub reasons: Vec<String>,
}

/// What NCCL did with one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "observed")]
pub struct Observed {
    /// The run the connection lines come from (`net-only`, else `default`).
    pub run: String,
    #[schemars(extend("x-required" = true))]
    pub nic: Option<String>,
    /// As NCCL printed it: `NET/IB/0/GDRDMA`.
    pub transport: String,
    pub gdr: bool,
    /// Transports per peer NCCL rank (`P2P/CUMEM`, `NET/IB/0/GDRDMA`).
    pub peers: BTreeMap<String, String>,
}

/// One (node, GPU, NIC): what `topo` predicted beside what NCCL did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "rail")]
pub struct RailRow {
    pub rank: u32,
    #[schemars(extend("x-required" = true))]
    pub node: Option<String>,
    /// The GPU's index on the node (CUDA ordinal) and its address.
    pub gpu: u32,
    pub bdf: String,
    #[schemars(extend("x-required" = true))]
    pub nccl_rank: Option<u32>,
    pub predicted: Prediction,
    #[schemars(extend("x-required" = true))]
    pub observed: Option<Observed>,
    /// `null` when nothing was observed.
    #[schemars(extend("x-required" = true))]
    pub agree: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "run_node")]
pub struct RunNode {
    pub rank: u32,
    #[schemars(extend("x-required" = true))]
    pub node: Option<String>,
    /// `ok`, `nccl-error`, `timed-out`, `failed`, `sums-wrong`, `not-run`.
    #[schemars(extend("enum" = ["ok", "nccl-error", "timed-out", "failed", "sums-wrong", "not-run"]))]
    pub status: String,
    #[schemars(extend("x-required" = true))]
    pub step: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub error: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub init_ms: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub allreduce_busbw_gbs: Option<f64>,
    pub nccl_warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "run")]
pub struct RunRow {
    #[schemars(extend("enum" = ["default", "net-only"]))]
    pub label: String,
    pub env: BTreeMap<String, String>,
    pub nranks: u32,
    #[schemars(extend("x-required" = true))]
    pub version: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub ms: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub not_run: Option<String>,
    pub nodes: Vec<RunNode>,
}

/// One rail of one pair of nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "pair")]
pub struct PairRow {
    pub round: u32,
    /// Allocation ranks and names of the two nodes.
    pub a: u32,
    pub b: u32,
    #[schemars(extend("x-required" = true))]
    pub a_node: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub b_node: Option<String>,
    pub rail: u32,
    #[schemars(extend("x-required" = true))]
    pub busbw_gbs: Option<f64>,
    /// What the slower end's links allow, and which link that is.
    #[schemars(extend("x-required" = true))]
    pub allowed_gbs: Option<f64>,
    #[schemars(extend("x-required" = true))]
    pub limited_by: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub fraction: Option<f64>,
    pub wrong: u64,
    /// `pass`, `fail`, `error`.
    #[schemars(extend("enum" = ["pass", "fail", "error"]))]
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct TakeOut {
    pub rank: u32,
    #[schemars(extend("x-required" = true))]
    pub node: Option<String>,
    pub reasons: Vec<String>,
}

/// `gdrdoctor.preflight/v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub schema: String,
    pub tool: Tool,
    #[schemars(extend("x-required" = true), extend("format" = "date-time"))]
    pub timestamp: Option<String>,
    pub allocation: Allocation,
    pub summary: Summary,
    pub stages: Vec<Stage>,
    pub thresholds: Thresholds,
    pub nodes: Vec<NodeRow>,
    pub rails: Vec<RailRow>,
    pub nccl: Vec<RunRow>,
    pub pairs: Vec<PairRow>,
    pub take_out: Vec<TakeOut>,
    pub refused: Vec<Refusal>,
    pub findings: Vec<Finding>,
}

/// The published JSON Schema of the answer (docs/schema/gdrdoctor.preflight.v1.schema.json),
/// derived from [`Answer`]; findings and the nodes' check summaries refer to the report schema
/// beside it.
pub fn json_schema() -> serde_json::Value {
    crate::schema::published_referring::<Answer>(
        SCHEMA,
        "`gdrdoctor preflight --format json` at rank 0: the allocation's answer (docs/guides/preflight.md). findings and the nodes' check summaries are those of gdrdoctor.report/v1, referred to in gdrdoctor.report.v1.schema.json beside this file (no $id here, so that the reference resolves against this file's location). v1 only grows: objects take members they do not know, and consumers must ignore fields they do not know.",
        crate::report::SCHEMA,
        &["finding", "evidence", "summary"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_ordered_with_their_rounds() {
        let order = [
            "bogus",
            "start",
            "cuda",
            "load",
            "unique-id",
            "init",
            "allreduce",
            "allreduce-wait",
            "round 0",
            "round-wait 0",
            "round 1",
            "round-wait 1",
            "round 12",
            "destroy",
            "done",
        ];
        for w in order.windows(2) {
            assert!(step_order(w[0]) < step_order(w[1]), "{} < {}", w[0], w[1]);
        }
    }
}
