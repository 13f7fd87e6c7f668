//! `counters.*`: error counters with what they mean and a threshold. One reading is judged
//! against generous cumulative thresholds; two readings (`check --interval`, the state file of
//! periodic runs, a snapshot's baseline) judge the growth, which is what says "broken now".
//! Definitions and thresholds: `crate::counters`.
//!
//! One file per family: [`aer`] (PCIe AER), [`ports`] (the RDMA ports' link and transport
//! counters, with [`fate`]: devices followed by PCI function), [`gpu`] (NVML's NVLink and PCIe
//! replay counters); what they share in [`judge`].

pub mod aer;
pub mod fate;
pub mod gpu;
pub mod judge;
pub mod ports;

pub use aer::aer;
pub use gpu::{nvlink, pcie_replay};
pub use ports::{ib_port, rdma_transport};
