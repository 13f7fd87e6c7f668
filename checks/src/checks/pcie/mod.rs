//! `pcie.*`: the PCIe path between GPUs and NICs: ACS redirection, degraded links, MaxReadReq,
//! ATS, and BARs (ground truth §2.4 T08, §2.6 A01-A04, §2.3 G04).
//!
//! One file per check; [`trust`] says whether a device's config space can be trusted.

pub mod acs;
pub mod ats;
pub mod bars;
pub mod link;
pub mod mrrs;
pub mod ordering;
pub mod p2p_path;
pub mod trust;

pub use acs::acs_redirect;
pub use ats::ats;
pub use bars::bars;
pub use link::link;
pub use mrrs::mrrs;
pub use ordering::{nic_tlp, relaxed_ordering};
pub use p2p_path::p2p_path;

#[cfg(test)]
mod tests;
