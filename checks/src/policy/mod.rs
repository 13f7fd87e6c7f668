//! Site policy: what a node *should* have (`gdrdoctor check --policy FILE`).
//!
//! The checks in [`crate::checks`] judge a node against what GPUDirect RDMA needs; a policy judges
//! it against what the site bought and configured: eight GPUs of one model, eight ports at 400
//! Gb/s, one firmware, one driver, a kernel command line. This module holds the policy's types
//! (deserialized by the binary from TOML, which attaches the line to every error raised here), the
//! evaluation (Node + report + policy -> `policy.*` findings, severity overrides, waivers) and
//! `policy init` (a commented policy written from a known-good node). No I/O: the binary reads the
//! file and the clock.

pub mod eval;
pub mod init;
pub mod types;

pub use eval::{apply, Context};
pub use types::*;

use crate::findings::def::{finding, FindingDef};

/// The schema id a policy file may declare (`schema = "gdrdoctor.policy/v1"`).
pub const POLICY_SCHEMA: &str = "gdrdoctor.policy/v1";

/// Where `check` looks for a policy when `--policy` is not given (live runs only).
pub const DEFAULT_PATH: &str = "/etc/gdrdoctor/policy.toml";

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

/// `open` or `proprietary`, as the policy and the report's inventory spell a driver flavor.
pub fn flavor_str(f: crate::model::Flavor) -> &'static str {
    match f {
        crate::model::Flavor::Open => "open",
        crate::model::Flavor::Proprietary => "proprietary",
    }
}

/// `*` (any run) and `?` (one character) wildcards; everything else literal.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn glob_matches_like_a_shell() {
        assert!(glob("mlx5_*", "mlx5_0"));
        assert!(glob("mlx5_*/1", "mlx5_12/1"));
        assert!(!glob("mlx5_*/1", "mlx5_12/2"));
        assert!(glob("mlx5_?", "mlx5_7"));
        assert!(!glob("mlx5_?", "mlx5_10"));
        assert!(glob("*", ""));
        assert!(!glob("a", ""));
        assert!(glob("0000:18:00.0", "0000:18:00.0"));
    }

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

    proptest! {
        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[a-z0-9_./]{0,12}", b in "[a-z0-9_./]{0,12}") {
            prop_assert_eq!(glob(&a, &b), a == b);
            prop_assert!(glob("*", &b));
            let star_prefix = format!("{a}*");
            let joined = format!("{a}{b}");
            prop_assert!(glob(&star_prefix, &joined));
        }
    }
}
