//! Node + report + policy -> `policy.*` findings, then severity overrides and waivers, then the
//! summary and exit code again. Missing evidence is an `error` finding, never a pass.
//!
//! One file per family of expectations ([`gpu`], [`rdma`], [`pcie`], [`driver`], [`gdr`],
//! [`kernel`]), the overrides in [`waivers`], what they share in [`context`].

pub mod context;
pub mod driver;
pub mod gdr;
pub mod gpu;
pub mod kernel;
pub mod pcie;
pub mod rdma;
pub mod waivers;

pub use context::Context;
pub use pcie::{idle_link, pcie_classes, IdleLink};
pub use rdma::parse_rate;

use crate::model::Node;
use crate::policy::findings::FINDINGS;
use crate::policy::types::*;
use crate::report::{exit_code, Finding, GdrPair, Report, Status, Summary};

/// Evaluate the policy's expectations, append their findings, apply severity overrides and
/// waivers, and recompute the summary and exit code.
pub fn apply(
    report: &mut Report,
    node: &Node,
    policy: &Policy,
    cx: &Context,
    opts: &crate::RunOptions,
) {
    let extra = expectations(node, &report.gdr, policy, cx);
    report.findings.extend(extra);
    waivers::severity(&mut report.findings, policy, cx);
    let host = report.host.hostname.clone();
    let waived = waivers::waivers(&mut report.findings, policy, cx, host.as_deref());
    report.findings.extend(waived);
    let mut summary = Summary::count(&report.findings);
    summary.exit_code = exit_code(&report.findings, opts.fail_on, opts.allow_incomplete);
    report.summary = summary;
}

type Rule<'a> = Box<dyn Fn() -> Vec<Finding> + 'a>;

/// Every expectation the policy states, in the order of [`FINDINGS`]. A rule that panics
/// becomes one `error` finding.
pub fn expectations(node: &Node, gdr: &[GdrPair], p: &Policy, cx: &Context) -> Vec<Finding> {
    let mut rules: Vec<(&str, Rule)> = Vec::new();
    if let Some(r) = &p.gpu {
        rules.push(("policy.gpu", Box::new(move || gpu::gpu(node, r, cx))));
    }
    if let Some(r) = &p.rdma {
        if let Some(n) = r.count {
            rules.push((
                "policy.rdma",
                Box::new(move || rdma::rdma_count(node, n, cx)),
            ));
        }
        if !r.ports.0.is_empty() {
            rules.push((
                "policy.ports",
                Box::new(move || rdma::ports(node, &r.ports.0, cx)),
            ));
        }
        if let Some(fw) = &r.firmware {
            rules.push((
                "policy.firmware",
                Box::new(move || rdma::firmware(node, fw, cx)),
            ));
        }
    }
    if let Some(r) = &p.pcie {
        rules.push(("policy.pcie", Box::new(move || pcie::pcie(node, r, cx))));
    }
    if let Some(r) = &p.driver {
        rules.push((
            "policy.driver",
            Box::new(move || driver::driver(node, r, cx)),
        ));
    }
    if let Some(r) = &p.peer_memory {
        rules.push((
            "policy.peer-memory",
            Box::new(move || driver::peer_memory(node, r, cx)),
        ));
    }
    if let Some(r) = &p.iommu {
        rules.push(("policy.iommu", Box::new(move || driver::iommu(node, r, cx))));
    }
    if let Some(r) = &p.gdr {
        rules.push((
            "policy.gdr",
            Box::new(move || gdr::gdr_pairs(node, gdr, r, cx)),
        ));
    }
    if let Some(k) = &p.kernel {
        if k.release.is_some() || k.min_release.is_some() {
            rules.push((
                "policy.kernel",
                Box::new(move || kernel::kernel(node, k, cx)),
            ));
        }
        if let Some(c) = &k.cmdline {
            rules.push((
                "policy.cmdline",
                Box::new(move || kernel::cmdline(node, c, cx)),
            ));
        }
    }
    let order = |id: &str| FINDINGS.iter().position(|f| f.id == id);
    rules.sort_by_key(|(id, _)| order(id));
    let mut out = Vec::new();
    for (id, rule) in rules {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(rule)) {
            Ok(f) => out.extend(f),
            Err(_) => out.push(Finding::new(
                id,
                Status::Error,
                "node",
                "internal error in this policy rule; please report it with a `gdrdoctor snapshot` and the policy file",
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::Fact;
    use std::collections::BTreeSet;

    fn full_policy() -> Policy {
        let p = |s: &str| Version::parse(s).unwrap();
        Policy {
            gpu: Some(GpuRule {
                count: Some(8),
                model: Some(NonEmpty("H200".into())),
                device_id: None,
            }),
            rdma: Some(RdmaRule {
                count: Some(8),
                ports: OneOrMany(vec![PortRule {
                    state: Some(PortState::Active),
                    rate_gbps: Some(Rate(400.0)),
                    ..Default::default()
                }]),
                firmware: Some(FirmwareRule {
                    version: Some(p("28.43.1014")),
                    all_equal: Some(true),
                    ..Default::default()
                }),
            }),
            pcie: Some(PcieRule {
                gpu: Some(LinkRule {
                    speed_gts: Some(LinkSpeed(32.0)),
                    width: Some(LinkWidth(16)),
                }),
                ..Default::default()
            }),
            driver: Some(DriverRule {
                flavor: Some(DriverFlavor::Open),
                version: None,
                min_version: Some(p("570")),
            }),
            peer_memory: Some(PeerMemoryRule {
                mechanism: Mechanism::Either,
            }),
            iommu: Some(IommuRule {
                mode: OneOrMany(vec![IommuModeName::Off]),
            }),
            gdr: Some(GdrRule {
                every_gpu: Some(true),
                max_path: PathName::parse("PXB"),
                min_pairs: Some(8),
            }),
            kernel: Some(KernelRule {
                release: Some(NonEmpty("6.8.0".into())),
                min_release: None,
                cmdline: Some(CmdlineRule {
                    require: vec![CmdlineParam("iommu=pt".into())],
                    forbid: vec![],
                    ignore: vec![],
                    allow_extra: false,
                }),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_evidence_is_never_a_pass() {
        // Every fact unreadable: every rule says error (or fails what it can prove), none passes.
        let mut node = crate::testing::empty_node();
        node.pci = Fact::absent("/sys/bus/pci/devices", "permission denied");
        node.rdma = Fact::absent("/sys/class/infiniband", "permission denied");
        let cx = Context {
            path: "p.toml".into(),
            today: Date::from_unix(0),
        };
        let f = expectations(&node, &[], &full_policy(), &cx);
        let ids: BTreeSet<&str> = f.iter().map(|f| f.id.as_str()).collect();
        assert!(ids.len() >= 10, "{ids:?}");
        for x in &f {
            assert_ne!(x.status, Status::Pass, "{x:#?}");
            assert!(
                !x.evidence.is_empty() || x.status == Status::Error,
                "{x:#?}"
            );
        }
        assert!(f
            .iter()
            .any(|x| x.id == "policy.gpu" && x.status == Status::Error));
        assert!(f
            .iter()
            .any(|x| x.id == "policy.cmdline" && x.status == Status::Error));
    }

    #[test]
    fn an_empty_policy_adds_nothing_and_changes_nothing() {
        let node = crate::testing::empty_node();
        let mut r = crate::build_report(&node, &crate::RunOptions::default());
        let before = r.clone();
        let cx = Context {
            path: "p.toml".into(),
            today: Date::from_unix(0),
        };
        apply(
            &mut r,
            &node,
            &Policy::default(),
            &cx,
            &crate::RunOptions::default(),
        );
        assert_eq!(r, before);
    }
}
