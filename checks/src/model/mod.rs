//! The Node model: everything the collectors learned about one node, as plain data.
//!
//! Every field that comes from the system is a [`Fact`]: either a value with the path (or call) it
//! came from, or an absence with the reason it could not be read. A missing file is never a
//! default value: checks that need an absent fact report `error` or `skip`, never `pass`.
//!
//! One file per part of the node: [`fact`] (the `Fact` and its wire form), [`node`] (the
//! `Node` itself), [`host`] (CPU, kernel modules, limits, IOMMU, NVIDIA driver, peer memory),
//! [`pci`], [`rdma`], [`live`] (what NVML, CUDA, libibverbs and the NCCL files say) and
//! [`health`] (RoCE addressing, error counters, the kernel log). The files import only
//! [`fact`] and each other downwards; nothing here imports the rest of the crate but the
//! config-space decoder.

pub mod addons;
pub mod container;
pub mod fact;
pub mod health;
pub mod host;
pub mod live;
pub mod node;
pub mod pci;
pub mod rdma;

pub use addons::*;
pub use container::*;
pub use fact::*;
pub use health::*;
pub use host::*;
pub use live::*;
pub use node::*;
pub use pci::*;
pub use rdma::*;
