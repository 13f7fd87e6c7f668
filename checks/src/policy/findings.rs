//! The policy's finding family (`policy.*`), and what its `severity` and `waiver` tables may
//! name.

use crate::findings::def::{finding, FindingDef};

/// The findings a policy produces, with one line each for `gdrdoctor list` and their pages.
pub static FINDINGS: &[FindingDef] = &[
    finding!("policy.gpu", "the gpu count and model the site expects"),
    finding!("policy.rdma", "the rdma device count the site expects"),
    finding!(
        "policy.ports",
        "rdma ports: state, link layer, rate and width the site expects"
    ),
    finding!(
        "policy.pcie",
        "pcie link speed and width per device class (gpu, nic, switch)"
    ),
    finding!("policy.driver", "the nvidia driver flavor and version"),
    finding!(
        "policy.firmware",
        "nic firmware: an exact version, a minimum, or all equal"
    ),
    finding!(
        "policy.peer-memory",
        "the peer-memory mechanism the site requires (peermem, dma-buf, either)"
    ),
    finding!("policy.iommu", "the iommu mode the site requires"),
    finding!(
        "policy.gdr",
        "the gpu x nic pairs with gpudirect rdma the site requires"
    ),
    finding!("policy.kernel", "the kernel release the site expects"),
    finding!(
        "policy.cmdline",
        "the kernel command line: required, forbidden and unexpected parameters"
    ),
    finding!(
        "policy.waiver",
        "waivers: each carries a reason and an expiry date; expired ones stop waiving"
    ),
];

/// A check id or category `severity` and `waiver` may name: a registered check, a policy id,
/// or a category of either.
pub fn known_check(s: &str) -> bool {
    crate::checks::CHECKS
        .iter()
        .any(|c| c.id == s || c.category() == s)
        || FINDINGS.iter().any(|f| f.id == s || s == "policy")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_policy_id_is_well_formed() {
        for f in FINDINGS {
            let (id, title) = (&f.id, &f.title);
            assert!(id.starts_with("policy."), "{id}");
            assert_eq!(*title, title.to_lowercase());
            assert!(!title.ends_with('.'));
            assert!(known_check(id));
        }
        assert!(known_check("pcie.mrrs") && known_check("pcie") && known_check("policy"));
        assert!(!known_check("pcie.nope"));
    }
}
