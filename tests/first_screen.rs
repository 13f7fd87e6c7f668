//! The first screen of a failing 8-GPU node: findings alike but for the device they name are one
//! table row and one detail block naming every subject (src/render/fold.rs); `-v` and every
//! other format keep one finding per subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor::render::{table, Style};
use gdrdoctor_checks::report::{Report, Status};

fn report(node: &str) -> Report {
    let root = fixture(node);
    let (_, out, err) = run(&[
        "check",
        "--sysroot",
        root.to_str().unwrap(),
        "--format",
        "json",
    ]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{node}: {e}\n{err}"))
}

fn plain(verbose: bool) -> Style {
    Style {
        color: false,
        verbose,
        warn_is_failure: false,
    }
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[test]
fn eight_gpus_failing_for_one_cause_are_one_row_and_one_block() {
    let rep = report("hgx-h200x8-cx7x8-no-peermem");
    let gpus: Vec<&str> = rep
        .findings
        .iter()
        .filter(|f| f.id == "gdr.gpu" && f.status == Status::Fail)
        .map(|f| f.subject.as_str())
        .collect();
    assert_eq!(gpus.len(), 8, "the report keeps one finding per GPU");
    let t = table::render_width(&rep, &plain(false), 120);
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with(" FAIL    gdr.gpu"))
        .collect();
    assert_eq!(rows.len(), 1, "{t}");
    assert!(
        rows[0].contains("8 subjects") && rows[0].contains("8 fail alike"),
        "{t}"
    );
    assert_eq!(count(&t, "fail[gdr.gpu]"), 1, "{t}");
    // The block names every GPU (wrapped lines joined).
    let block: String = t[t.find("fail[gdr.gpu]").unwrap()..]
        .split("   = evidence")
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for g in &gpus {
        assert!(block.contains(g), "{g} missing from {block}");
    }
    assert!(block.contains("and 7 more alike"), "{block}");
    // The GPU summary gives the reason once; the other GPUs point at it.
    assert_eq!(count(&t, "as for 0000:18:00.0"), 7, "{t}");
    // The root cause keeps its own block and its fix.
    assert!(t.contains("fail[kmod.nvidia-peermem]") && t.contains("modprobe nvidia-peermem"));
    // -v: one block per finding, no folding anywhere.
    let v = table::render_width(&rep, &plain(true), 120);
    assert_eq!(count(&v, "fail[gdr.gpu]"), 8);
    assert!(!v.contains("alike") && !v.contains("as for "), "{v}");
    // What folding saves on this node (403 lines before it).
    let lines = t.lines().count();
    assert!(lines < 200, "{lines} lines:\n{t}");
}

#[test]
fn findings_that_differ_in_more_than_a_device_name_stay_apart() {
    let mut rep = report("hgx-h200x8-cx7x8-no-peermem");
    // One GPU's reason differs in a word, not a device name: its own row and block.
    let f = rep
        .findings
        .iter_mut()
        .filter(|f| f.id == "gdr.gpu")
        .nth(3)
        .unwrap();
    f.message = f.message.replace("PIX", "PXB");
    let odd = f.subject.clone();
    let t = table::render_width(&rep, &plain(false), 120);
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with(" FAIL    gdr.gpu"))
        .collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(rows[0].contains("7 subjects"), "{t}");
    assert!(rows[1].contains(&odd), "{t}");
    assert_eq!(count(&t, "fail[gdr.gpu]"), 2, "{t}");
    // A different status never folds: a warn among fails.
    let mut rep = report("hgx-h200x8-cx7x8-no-peermem");
    let f = rep
        .findings
        .iter_mut()
        .filter(|f| f.id == "gdr.gpu")
        .nth(1)
        .unwrap();
    f.status = Status::Warn;
    let t = table::render_width(&rep, &plain(false), 120);
    assert_eq!(count(&t, "fail[gdr.gpu]"), 1, "{t}");
    assert_eq!(count(&t, "warn[gdr.gpu]"), 1, "{t}");
}

#[test]
fn a_folded_block_keeps_every_fix_that_names_its_own_devices() {
    let rep = report("pcie-h200x8-cx7x4-p2p-blocked");
    let bridges: Vec<&str> = rep
        .findings
        .iter()
        .filter(|f| f.id == "pcie.acs-redirect" && f.status == Status::Fail)
        .map(|f| f.subject.as_str())
        .collect();
    assert!(
        bridges.len() > 1,
        "the fixture has several redirecting bridges"
    );
    let t = table::render_width(&rep, &plain(false), 120);
    let joined = t.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(count(&t, "fail[pcie.acs-redirect]"), 1, "{t}");
    // One block, and each bridge's own command in it (the review of 2026-12-07: the folded
    // block gave the first bridge's fix only).
    for b in &bridges {
        assert!(
            joined.contains(&format!(
                "= help: for {b}: now (until reboot): `setpci -s {b} "
            )),
            "{b}'s fix missing:\n{t}"
        );
    }
    // Evidence alike but for its source's device is one line naming the others.
    assert!(joined.contains("; alike: "), "{t}");
    // One fix for all: no `for <subjects>`.
    let rep = report("hgx-h200x8-cx7x8-no-peermem");
    let t = table::render_width(&rep, &plain(false), 120);
    assert!(t.contains("   = help: fix the first reason above"), "{t}");
}

/// Checks that skip for one reason are one row naming every check (the snapshot of the
/// one-GPU VM without a NIC: six checks skip for "no rdma device"); a skip with a reason of its
/// own keeps its row, and `-v` gives one row per check.
#[test]
fn checks_skipped_for_one_reason_are_one_row_naming_each() {
    let rep = report("h200-vm-live");
    let same: Vec<&str> = rep
        .findings
        .iter()
        .filter(|f| f.status == Status::Skip && f.message == "no rdma device")
        .map(|f| f.id.as_str())
        .collect();
    assert!(same.len() >= 3, "{same:?}");
    let t = table::render_width(&rep, &plain(false), 200);
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.ends_with(": no rdma device"))
        .collect();
    assert_eq!(rows.len(), 1, "{t}");
    assert!(
        rows[0].starts_with(&format!(" SKIP    {} checks ", same.len())),
        "{t}"
    );
    assert!(
        rows[0].contains(&format!("{}: no rdma device", same.join(", "))),
        "{t}"
    );
    for id in &same {
        assert_eq!(count(&t, id), 1, "{id} once:\n{t}");
    }
    // A skip whose reason no other check shares stays a row of its own.
    assert!(t.lines().any(|l| l.starts_with(" SKIP    gpu.p2p ")), "{t}");
    // Not a pass, a warn or a fail: those keep their ids in the check column.
    assert!(
        !t.lines()
            .any(|l| !l.starts_with(" SKIP") && l.contains(" checks  ")),
        "{t}"
    );
    let v = table::render_width(&rep, &plain(true), 200);
    for id in &same {
        assert!(
            v.lines().any(|l| l.starts_with(&format!(" SKIP    {id} ")) && l.ends_with("no rdma device")),
            "{id} has its own row with -v:\n{v}"
        );
    }
    assert!(!v.contains(" checks  "), "{v}");
}
