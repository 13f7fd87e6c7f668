//! `check` on a node and `check --sysroot` on its snapshot reach the same findings.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor::source::reader::Root;
use gdrdoctor_checks::RunOptions;

#[test]
fn live_node_round_trips_through_a_snapshot() {
    // Whatever machine runs the tests is a real node: collect it live, snapshot it, re-check.
    let live = gdrdoctor::collect::collect(&Root::live(), None);
    let live_r = gdrdoctor_checks::build_report(&live, &RunOptions::default());
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("snap");
    gdrdoctor::collect::snapshot::take(Root::live(), &out, Some(&live.live)).unwrap();
    let snap_r = report_for(&out);
    assert_eq!(comparable(&live_r.findings), comparable(&snap_r.findings));
    assert_eq!(live_r.summary, snap_r.summary);
}

#[test]
fn tar_gz_snapshot_round_trips_through_the_cli() {
    let t = tempfile::tempdir().unwrap();
    let tgz = t.path().join("node.tar.gz");
    let src = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    let (code, _, err) = run(&["snapshot", "--sysroot", &src, &tgz.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let (c1, a, _) = run(&["check", "--sysroot", &src, "--format", "json"]);
    let (c2, b, _) = run(&[
        "check",
        "--sysroot",
        &tgz.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(c1, c2);
    let a: gdrdoctor_checks::report::Report = serde_json::from_str(&a).unwrap();
    let b: gdrdoctor_checks::report::Report = serde_json::from_str(&b).unwrap();
    assert_eq!(comparable(&a.findings), comparable(&b.findings));
    assert_eq!(a.inventory, b.inventory);
}

#[test]
fn snapshot_holds_only_what_the_collectors_read() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("snap");
    let src = fixture("hgx-h200x8-cx7x8-healthy");
    gdrdoctor::collect::snapshot::take(Root::sysroot(&src).unwrap(), &out, None).unwrap();
    // The fixture has trees no collector reads (driver links are read, not followed); they must
    // not be copied.
    assert!(src.join("sys/bus/pci/drivers/nvidia").is_dir());
    assert!(!out.join("sys/bus/pci/drivers").exists());
    // Links stay links.
    let l = out.join("sys/bus/pci/devices/0000:18:00.0");
    assert!(l.symlink_metadata().unwrap().file_type().is_symlink());
    assert!(out.join("gdrdoctor/meta.json").exists());
    // Refuses to overwrite a non-empty directory.
    assert!(gdrdoctor::collect::snapshot::take(Root::sysroot(&src).unwrap(), &out, None).is_err());
}
