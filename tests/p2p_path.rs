//! `pcie.p2p-path` on the constructed PCIe-only fixtures (issue 39 item 2): the 8-GPU inference
//! server with ACS redirect on its switch ports fails exactly its same-switch pairs (the ones
//! NCCL uses P2P on) naming the bridges and the `setpci` fix, warns on the pairs NCCL keeps in
//! host memory, and passes every pair of the same server with ACS off; the AMD host's two GPUs
//! on GPP bridges (root ports, 1022:14ab) fail under NCCL's AMD default (SYS with two GPUs) and
//! the translating IOMMU; on HGX (NVLink everywhere) the check skips.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::nodes::fixture;
use common::*;
use gdrdoctor_checks::report::{Finding, Status};

const ID: &str = "pcie.p2p-path";

fn findings(s: &str) -> Vec<Finding> {
    report_for(&fixture(s))
        .findings
        .into_iter()
        .filter(|f| f.id == ID)
        .collect()
}

#[test]
fn pcie_only_server_with_acs_redirect_fails_the_same_switch_pairs_with_each_bridge() {
    let f = findings("pcie-h200nvlx8-acs-redirect");
    assert_eq!(f.len(), 28, "every pair of 8 gpus without nvlink");
    let failed: Vec<&str> = f
        .iter()
        .filter(|x| x.status == Status::Fail)
        .map(|x| x.subject.as_str())
        .collect();
    assert_eq!(
        failed,
        vec![
            "0000:18:00.0|0000:19:00.0",
            "0000:28:00.0|0000:29:00.0",
            "0000:98:00.0|0000:99:00.0",
            "0000:a8:00.0|0000:a9:00.0"
        ]
    );
    let p = f.iter().find(|x| x.subject == failed[0]).unwrap();
    // The fixture's driver refuses peer access on these pairs (NVML P2P status not-supported):
    // NCCL 2.12+ stays off p2p there, so the redirect costs p2p, not a hang.
    assert!(
        p.message
            .starts_with("no p2p between these gpus: acs on 0000:17:00.0"),
        "{}",
        p.message
    );
    assert!(p.message.contains("refuses peer access"), "{}", p.message);
    assert!(p.message.contains("ReqRedir CmpltRedir"), "{}", p.message);
    let fix = p.remediation.as_deref().unwrap();
    assert!(
        fix.contains("`setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000`, `setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000`"),
        "{fix}"
    );
    assert!(
        fix.contains("pci=disable_acs_redir=0000:17:00.0;0000:17:01.0"),
        "{fix}"
    );
    let ev: Vec<&str> = p.evidence.iter().map(|e| e.observed.as_str()).collect();
    assert!(
        ev.contains(&"ACSCtl 0x001d (SrcValid ReqRedir CmpltRedir UpstreamFwd)"),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| e.starts_with(
            "no p2p (host memory): PIX within NCCL_P2P_LEVEL PXB (NCCL 2.30's default), but nvmlDeviceGetP2PStatus read=not-supported"
        )),
        "{ev:?}"
    );
    assert!(ev.contains(&"no nvlink between them"), "{ev:?}");
    // Pairs on different switches: NCCL stays in host memory, the redirect still warns.
    assert!(f
        .iter()
        .filter(|x| !failed.contains(&x.subject.as_str()))
        .all(|x| x.status == Status::Warn && x.message.contains("nccl stays off p2p here")));
}

#[test]
fn the_same_server_with_acs_off_passes_every_pair() {
    let f = findings("pcie-h200nvlx8-healthy");
    assert_eq!(f.len(), 28);
    assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
    let p = f
        .iter()
        .find(|x| x.subject == "0000:18:00.0|0000:19:00.0")
        .unwrap();
    assert_eq!(p.message, "nccl uses pcie p2p (PIX), routed directly");
    assert!(p
        .evidence
        .iter()
        .any(|e| e.observed == "0000:17:00.0: ACSCtl 0x0000 (none)"));
    let far = f
        .iter()
        .find(|x| x.subject == "0000:18:00.0|0000:98:00.0")
        .unwrap();
    assert!(
        far.message
            .starts_with("nccl stages this pair through host memory (SYS"),
        "{}",
        far.message
    );
}

#[test]
fn amd_gpp_bridges_with_acs_and_a_translating_iommu_fail() {
    let f = findings("amd-genoa-h200nvlx2-gpp-acs");
    assert_eq!(f.len(), 1, "{f:#?}");
    let p = &f[0];
    assert_eq!(p.status, Status::Fail, "{p:#?}");
    assert!(
        p.message.contains("Genoa/Bergamo GPP Bridge"),
        "{}",
        p.message
    );
    assert!(p.message.contains("refuses peer access"), "{}", p.message);
    assert!(
        !p.remediation
            .as_deref()
            .unwrap_or("")
            .contains("NCCL_P2P_DISABLE"),
        "{p:#?}"
    );
    assert!(p
        .evidence
        .iter()
        .any(|e| e.observed.contains("on AMD CPUs with at most two GPUs")));
    assert!(p
        .remediation
        .as_deref()
        .unwrap()
        .contains("setpci -s 0000:15:01.0 ECAP_ACS+0x6.w=0000"));
    // The GPU-NIC check has nothing to say on a node without NICs, and says where to look.
    let acs = report_for(&fixture("amd-genoa-h200nvlx2-gpp-acs"))
        .findings
        .into_iter()
        .find(|f| f.id == "pcie.acs-redirect")
        .unwrap();
    assert_eq!(acs.status, Status::Skip);
    assert!(acs.message.contains("pcie.p2p-path"), "{}", acs.message);
}

#[test]
fn nvlink_pairs_are_not_judged_and_the_older_pcie_fixture_fails_too() {
    let f = findings("hgx-h200x8-cx7x8-healthy");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].status, Status::Skip, "{f:#?}");
    // The PCIe fixture with NICs (two GPUs and a NIC per switch, ACS on every port).
    let f = findings("pcie-h200x8-cx7x4-p2p-blocked");
    assert_eq!(f.iter().filter(|x| x.status == Status::Fail).count(), 4);
}

/// NCCL_P2P_LEVEL in the job's environment moves the pairs NCCL uses P2P on: with SYS the
/// cross-switch pairs of the ACS fixture fail too; with LOC none is used and nothing fails.
#[test]
fn nccl_p2p_level_decides_which_pairs_are_failed() {
    let at = fixture("pcie-h200nvlx8-acs-redirect");
    let src = gdrdoctor::source::Source::open(gdrdoctor::source::Location::Sysroot(&at)).unwrap();
    let base = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
    let with_level = |level: &str| {
        let mut n = base.clone();
        n.env = gdrdoctor_checks::model::Fact::known(
            [("NCCL_P2P_LEVEL".to_string(), level.to_string())]
                .into_iter()
                .collect(),
            "test environment",
        );
        gdrdoctor_checks::checks::pcie::p2p_path(&n)
    };
    let sys = with_level("SYS");
    assert!(sys.iter().all(|f| f.status == Status::Fail), "{sys:#?}");
    assert!(
        sys[0].evidence.iter().any(|e| e
            .observed
            .contains("within NCCL_P2P_LEVEL SYS (NCCL_P2P_LEVEL=SYS from test environment)")),
        "{:#?}",
        sys[0].evidence
    );
    let loc = with_level("LOC");
    assert!(loc.iter().all(|f| f.status == Status::Warn), "{loc:#?}");
}
