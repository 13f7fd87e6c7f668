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

#[test]
fn nic_ordering_and_payload_pass_on_the_healthy_node() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    for id in ["pcie.relaxed-ordering", "pcie.nic-tlp"] {
        let fs: Vec<_> = r.findings.iter().filter(|f| f.id == id).collect();
        assert_eq!(fs.len(), 8, "{id}: one per nic");
        for f in fs {
            assert_eq!(f.status, Status::Pass, "{f:#?}");
        }
    }
    let f = find(&r, "pcie.nic-tlp", "0000:19:00.0");
    assert!(
        f.message.contains("MaxPayload 256 bytes fits"),
        "{}",
        f.message
    );
}

#[test]
fn relaxed_ordering_off_fails_on_an_epyc_host() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-epyc-ro-off"));
    let f = find(&r, "pcie.relaxed-ordering", "0000:19:00.0");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(f.message.contains("AMD EPYC 9654"), "{}", f.message);
    assert!(f
        .evidence
        .iter()
        .any(|e| e.observed.contains("RlxdOrd-") && e.expected.as_deref() == Some("RlxdOrd+")));
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.id == "pcie.relaxed-ordering" && f.status == Status::Fail)
            .count(),
        8
    );
}

#[test]
fn a_nic_maxpayload_above_its_path_fails_naming_the_bridge() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-nic-mps-over-path"));
    let f = find(&r, "pcie.nic-tlp", "0000:49:00.0");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(
        f.message
            .contains("MaxPayload 512 bytes is larger than 256 bytes"),
        "{}",
        f.message
    );
    assert_eq!(
        find(&r, "pcie.nic-tlp", "0000:19:00.0").status,
        Status::Pass
    );
}

#[test]
fn the_peermem_module_on_disk_matches_ib_core_on_the_healthy_node() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    let f = find(&r, "kmod.peermem-abi", "node");
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    assert!(
        f.message.contains("takes 2 symbols from ib_core"),
        "{}",
        f.message
    );
    // Read through the xz-compressed ib_core that modules.dep names.
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source.ends_with("updates/dkms/ib_core.ko.xz")
                && e.observed.contains("CRC 0x5a1c6e0b")),
        "{f:#?}"
    );
}

#[test]
fn a_mofed_upgrade_without_a_peermem_rebuild_is_told_before_the_reboot() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-peermem-abi-break"));
    let f = find(&r, "kmod.peermem-abi", "node");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(
        f.message
            .contains("disagrees about version of symbol ib_register_peer_memory_client"),
        "{}",
        f.message
    );
    assert!(f.message.contains("at the next boot"), "{}", f.message);
    assert!(f.message.contains("0x5a1c6e0b") && f.message.contains("0x77e0c411"));
    // Loaded now: the peer-memory check of the running node still passes.
    assert_eq!(find(&r, "kmod.nvidia-peermem", "node").status, Status::Pass);
}

/// The mutation campaign's find (CI of 942e6a1): without `/proc/sys/kernel/osrelease` the
/// module could not be found, the fail became a skip and the exit code 0. The release comes
/// from `/proc/version` as the host's does; with neither, the evidence is damaged: an error.
#[test]
fn a_missing_kernel_release_never_turns_the_abi_break_into_a_skip() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("node");
    copy_tree(&fixture("hgx-h200x8-cx7x8-peermem-abi-break"), &root);
    let release = std::fs::read_to_string(root.join("proc/sys/kernel/osrelease")).unwrap();
    std::fs::remove_file(root.join("proc/sys/kernel/osrelease")).unwrap();
    let r = report_for(&root);
    let f = find(&r, "kmod.peermem-abi", "node");
    assert_eq!(f.status, Status::Error, "{f:#?}");
    assert!(
        f.message.contains("kernel release is unreadable"),
        "{}",
        f.message
    );
    std::fs::write(
        root.join("proc/version"),
        format!(
            "Linux version {} (buildd@lcy02-amd64-059) (gcc 13.2.0) #1 SMP\n",
            release.trim()
        ),
    )
    .unwrap();
    let f = find(&report_for(&root), "kmod.peermem-abi", "node").clone();
    assert_eq!(f.status, Status::Fail, "{f:#?}");
}

/// A copy of fixture `name` with `damage` done to it, and its report.
fn damaged(name: &str, damage: impl FnOnce(&std::path::Path)) -> gdrdoctor_checks::report::Report {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("node");
    copy_tree(&fixture(name), &root);
    damage(&root);
    report_for(&root)
}

/// The sweep of 2026-12-07 (every file of the newest fixtures removed, then emptied) found four
/// defects read as health; each is an error now, never a pass or a warn that exits 0.
#[test]
fn lost_evidence_behind_the_newest_checks_is_an_error() {
    let dep = "lib/modules/6.8.0-49-generic/modules.dep";
    for (what, r) in [
        (
            "modules.dep removed",
            damaged("hgx-h200x8-cx7x8-peermem-abi-break", |r| {
                std::fs::remove_file(r.join(dep)).unwrap()
            }),
        ),
        (
            "modules.dep emptied",
            damaged("hgx-h200x8-cx7x8-peermem-abi-break", |r| {
                std::fs::write(r.join(dep), "").unwrap()
            }),
        ),
        // The review of 2026-12-07: both read as "no nvidia-peermem installed", a skip.
        (
            "modules.dep garbage",
            damaged("hgx-h200x8-cx7x8-peermem-abi-break", |r| {
                std::fs::write(r.join(dep), b"\xff\xfe garbage \x00\x01\n").unwrap()
            }),
        ),
        (
            "modules.dep a directory",
            damaged("hgx-h200x8-cx7x8-peermem-abi-break", |r| {
                std::fs::remove_file(r.join(dep)).unwrap();
                std::fs::create_dir(r.join(dep)).unwrap();
            }),
        ),
    ] {
        let f = find(&r, "kmod.peermem-abi", "node");
        assert_eq!(f.status, Status::Error, "{what}: {f:#?}");
    }
    let r = damaged("hgx-h200x8-cx7x8-epyc-ro-off", |r| {
        std::fs::remove_file(r.join("proc/cpuinfo")).unwrap()
    });
    let ro: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "pcie.relaxed-ordering" && f.status != Status::Pass)
        .collect();
    assert!(
        !ro.is_empty() && ro.iter().all(|f| f.status == Status::Error),
        "{ro:#?}"
    );
    let r = damaged("hgx-h200x8-cx7x8-nic-mps-over-path", |r| {
        std::fs::remove_file(r.join("sys/bus/pci/devices/0000:47:01.0")).unwrap()
    });
    let f = find(&r, "pcie.nic-tlp", "0000:49:00.0");
    assert_eq!(f.status, Status::Error, "{f:#?}");
    assert!(f.message.contains("0000:47:01.0"), "{}", f.message);
}

#[test]
fn fabric_manager_and_every_gpus_fabric_state_pass_on_the_healthy_node() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    let f = find(&r, "driver.fabric-manager", "node");
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    assert!(f.message.contains("580.159.04"), "{}", f.message);
    let states: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "gpu.fabric-state")
        .collect();
    assert_eq!(states.len(), 9, "8 gpus and the nvls line");
    assert!(
        states.iter().all(|f| f.status == Status::Pass),
        "{states:#?}"
    );
    assert!(find(&r, "gpu.fabric-state", "node")
        .message
        .contains("NVLS"));
}

#[test]
fn no_fabric_manager_fails_both_and_explains_802() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-no-fabricmanager"));
    let f = find(&r, "driver.fabric-manager", "node");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(
        f.message.contains("without fabric manager"),
        "{}",
        f.message
    );
    let g = find(&r, "gpu.fabric-state", "0000:18:00.0");
    assert_eq!(g.status, Status::Fail, "{g:#?}");
    assert!(g.message.contains("not-started") && g.message.contains("802"));
    assert!(g.evidence.iter().any(|e| e.source == "cuInit"));
}

#[test]
fn a_fabric_manager_of_another_version_fails_naming_both() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-fabricmanager-version"));
    let f = find(&r, "driver.fabric-manager", "node");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert!(
        f.message
            .contains("fabric manager 570.172.08 is not the driver's version 580.159.04"),
        "{}",
        f.message
    );
}

#[test]
fn pcie_only_and_grace_hopper_nodes_need_no_fabric_manager() {
    for s in ["pcie-h200x8-cx7x4-p2p-blocked", "gh200x2-cx7x2-c2c"] {
        let r = report_for(&fixture(s));
        assert_eq!(
            find(&r, "driver.fabric-manager", "node").status,
            Status::Skip,
            "{s}"
        );
    }
}
