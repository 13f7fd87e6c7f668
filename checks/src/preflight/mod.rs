//! `gdrdoctor preflight`: the allocation's judgement, pure.
//!
//! One process per node of a job's allocation reports to rank 0; rank 0 gathers what every
//! node said and did (its `check` report, NCCL's runs across the allocation, the node pairs'
//! bandwidth) into [`model::Inputs`] and [`judge::answer`] turns them into the
//! `gdrdoctor.preflight/v1` answer: per node and per (node, GPU, NIC) what the node's facts
//! predicted beside what NCCL did, the pairs' bandwidth against what the slower end's links
//! allow ([`links`]), and the nodes to take out with the reason from that node's facts.
//!
//! Nothing here does I/O: the binary's rendezvous (`src/collect/allocation/`), its NCCL
//! workers (`src/probe/nccl/allocation*.rs`) and its renderers (`src/render/preflight.rs`)
//! fill and print these types. The pair schedule ([`schedule`]) is here too, so that the
//! workers and the judgement agree on who met whom in which round.

pub mod judge;
pub mod links;
pub mod model;
pub mod schedule;

use crate::findings::def::{finding, FindingDef};

/// The finding rows `preflight` reports (id, title, page), in the order the answer lists them.
pub static FINDINGS: &[FindingDef] = &[
    finding!(
        "preflight.rendezvous",
        "every rank of the allocation joined rank 0 in time, authenticated with the job's secret"
    ),
    finding!(
        "preflight.node",
        "each node's own check passed, and no node differs from the majority"
    ),
    finding!(
        "preflight.nccl-run",
        "nccl initialised one communicator over every gpu of every node and its sums are right"
    ),
    finding!(
        "preflight.nccl-gdr",
        "nccl used gpudirect rdma on every gpu's nic, as the node's facts predict"
    ),
    finding!(
        "preflight.pairs",
        "every node pair reaches the bandwidth the slower end's links allow, rail by rail"
    ),
];
