//! The real captures in ../shared/realdata (skipped when the folder is absent): every sysroot
//! there runs through the whole pipeline without a panic, gives valid v1 JSON, and no check says
//! `pass` about something the capture does not contain.
//!
//! The captures store sysfs symlinks as plain files holding the link target; they are rebuilt as
//! links in a temporary copy (nothing is copied into the project).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::{Path, PathBuf};

fn realdata() -> Option<PathBuf> {
    let p = repo().join("../shared/realdata");
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("skipping: {} is absent", p.display());
        None
    }
}

/// Copy `src` to `dst`, turning files whose whole content is a relative path without a newline
/// (how the captures flattened symlinks) back into symlinks.
fn rehydrate(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            rehydrate(&e.path(), &to);
        } else if t.is_file() {
            let b = std::fs::read(e.path()).unwrap_or_default();
            let s = String::from_utf8_lossy(&b);
            if b.len() < 512 && s.starts_with("../") && !s.contains('\n') && !s.contains(' ') {
                std::os::unix::fs::symlink(s.as_ref(), &to).unwrap();
            } else {
                std::fs::write(&to, &b).unwrap();
            }
        }
    }
}

fn check_capture(name: &str, tree: &Path) -> Report {
    let rep = report_for(tree);
    let json = serde_json::to_string(&rep).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.schema, "gdrdoctor.report/v1");
    for f in rep.findings.iter().filter(|f| f.status == Status::Pass) {
        for e in &f.evidence {
            let src = &e.source;
            if src.starts_with('/') && !src.contains('*') && !src.contains('{') {
                assert!(
                    tree.join(src.trim_start_matches('/'))
                        .symlink_metadata()
                        .is_ok(),
                    "{name}: {} passes citing {src}, which the capture does not contain",
                    f.id
                );
            }
        }
    }
    rep
}

const SYSROOTS: &[&str] = &[
    "hwloc-sysfs-xeon4108-cx4-plx",
    "hwloc-sysfs-xeon-e5-2680-cx3-mlx4-mic",
    "hwloc-sysfs-power9-v100-procdrivernvidia",
    "hwloc-nvidia-dgx-gb10-proc-dmi",
];

#[test]
fn every_real_sysroot() {
    let Some(rd) = realdata() else { return };
    for name in SYSROOTS {
        let t = tempfile::tempdir().unwrap();
        rehydrate(&rd.join(name), t.path());
        let rep = check_capture(name, t.path());
        // None of these captures contains modules, memlock or the driver version file: those
        // checks must not pass.
        for id in ["kmod.nvidia-peermem", "kmod.nv-peer-mem", "mem.memlock"] {
            let f = find(&rep, id, "node");
            assert!(
                matches!(f.status, Status::Error | Status::Skip),
                "{name}: {id} is {:?}: {}",
                f.status,
                f.message
            );
        }
    }
}

#[test]
fn xeon4108_pci_tree_and_nics() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(&rd.join("hwloc-sysfs-xeon4108-cx4-plx"), t.path());
    let rep = check_capture("xeon4108", t.path());
    // Two ConnectX-4 functions (15b3:1013) under PLX switches, found by walking /sys/devices
    // (the capture has no /sys/bus/pci/devices links).
    let cx4: Vec<_> = rep
        .inventory
        .pci
        .iter()
        .filter(|p| p.vendor_id.as_deref() == Some("15b3"))
        .collect();
    assert_eq!(cx4.len(), 2, "{cx4:?}");
    assert!(cx4.iter().all(|p| p.parent.is_some()));
    assert!(rep.inventory.gpus.is_empty());
    // The capture has no /sys/class/infiniband: unknown, not "no rdma device".
    assert_eq!(find(&rep, "rdma.devices", "node").status, Status::Error);
}

#[test]
fn power9_gpus_without_vendor_files_are_unknown_not_absent() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(
        &rd.join("hwloc-sysfs-power9-v100-procdrivernvidia"),
        t.path(),
    );
    let rep = check_capture("power9", t.path());
    // Six display-class functions (the NVLink V100s) but no vendor files in the capture.
    let f = find(&rep, "gpu.present", "node");
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.message.starts_with("6 display-class"), "{}", f.message);
    // Kernel 4.14 is a definite fact of the capture: no dma-buf path.
    let d = find(&rep, "kmod.dmabuf", "node");
    assert_eq!(d.status, Status::Fail, "{d:?}");
    assert!(d.message.contains("4.14.0"), "{}", d.message);
}

#[test]
fn gb10_cmdline_says_translated() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(&rd.join("hwloc-nvidia-dgx-gb10-proc-dmi"), t.path());
    let rep = check_capture("gb10", t.path());
    let f = find(&rep, "iommu.mode", "node");
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(
        f.remediation
            .as_deref()
            .unwrap()
            .contains("iommu.passthrough=1"),
        "{f:?}"
    );
}

#[test]
fn gpud_h100_infiniband_class_tree() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(
        &rd.join("gpud-testdata/sys-class-infiniband-h100"),
        &t.path().join("sys/class/infiniband"),
    );
    let rep = check_capture("gpud-h100", t.path());
    let names: Vec<&str> = rep
        .inventory
        .nics
        .iter()
        .map(|n| n.ibdev.as_str())
        .collect();
    assert!(names.len() >= 8, "{names:?}");
    assert_eq!(find(&rep, "rdma.devices", "node").status, Status::Pass);
    // Every port finding names a device/port and carries the sysfs state.
    let ports: Vec<_> = rep
        .findings
        .iter()
        .filter(|f| f.id == "rdma.ports")
        .collect();
    assert!(ports.len() >= names.len());
    assert!(ports.iter().all(|f| f.subject.contains('/')));
}
