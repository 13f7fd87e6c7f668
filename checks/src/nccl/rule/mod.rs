//! NCCL's GDR decision for every GPU x NIC pair: ONE pure function, [`decide`], of what a
//! node (or a pasted matrix, or NCCL's own topology dump) tells about the machine.
//!
//! It replays, per NCCL version, `ncclTopoComputePaths()` (the P2C and PXN rewrites of a GPU's
//! path to a NIC) and `ncclTopoCheckGdr()` (support, the read gate, the distance threshold) of
//! src/graph/paths.cc, and the send/receive setup of src/transport/net.cc, which ask the
//! question once per direction: `read=1` for sends (the NIC reads GPU memory), `read=0` for
//! receives. docs/topology.md has the rule table with the version ranges.
//!
//! What the rule cannot see and how it deals with it: link bandwidth (NCCL also takes PXN, and
//! picks its local GPU/NIC, by bandwidth; gdrdoctor uses path types only); the communicator's
//! GPU set (every GPU of the node is assumed to be in the job); unknown inputs make the answer
//! *undecided* (with the reason), never a guess.
//!
//! The parts: [`types`] (the inputs and the answer), [`check`] (`ncclTopoCheckGdr()` for one
//! pair and direction, and the threshold) and [`decide`] (the steps: the NICs NCCL lists,
//! the NVLink it may use, P2C, PXN, then both directions of every pair, and the GPU pairs).

pub mod check;
pub mod decide;
pub mod types;

pub use check::{c2c_here, threshold};
pub use decide::decide;
pub use types::*;

#[cfg(test)]
mod tests;
