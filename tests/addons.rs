//! The add-on checks of issue 39 on the constructed nodes (fixtures/gen.py): gdrcopy, the
//! NIC's PCI ordering settings, the peer-memory module's ABI, Fabric Manager. Each passes on
//! the healthy node and fails on its broken twin with the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::Status;

#[test]
fn gdrcopy_passes_on_the_healthy_node() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    let f = find(&r, "gdrcopy.gdrdrv", "node");
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    assert!(f.message.contains("gdrdrv 2.5 loaded"), "{}", f.message);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source.contains("dev-nodes.json") && e.observed.contains("mode 0666")),
        "{f:#?}"
    );
}

#[test]
fn gdrcopy_fails_on_a_root_only_node_the_job_asks_for() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-gdrdrv-root-only"));
    let f = find(&r, "gdrcopy.gdrdrv", "node");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(f.message.contains("mode 0600"), "{}", f.message);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.observed == "NCCL_GDRCOPY_ENABLE=1"),
        "{f:#?}"
    );
    assert!(f.remediation.as_deref().unwrap().contains("chmod 0666"));
    assert_eq!(r.summary.exit_code, 1);
}
