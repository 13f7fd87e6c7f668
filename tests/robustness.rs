//! Hostile and broken inputs: truncated, empty, garbage and missing files, link loops, links
//! escaping the root. Nothing panics, nothing outside the root is read, every unreadable input
//! becomes an `error` or `skip`, never a `pass`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::Status;
use std::os::unix::fs::symlink;
use std::path::Path;

const SECRET: &str = "GDRDOCTOR-OUTSIDE-THE-ROOT-7f3a";

fn base() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-healthy"), t.path());
    t
}

fn put(root: &Path, rel: &str, data: &[u8]) {
    let p = root.join(rel);
    let _ = std::fs::remove_file(&p);
    std::fs::write(p, data).unwrap();
}

fn relink(root: &Path, rel: &str, target: &str) {
    let p = root.join(rel);
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_dir_all(&p);
    symlink(target, p).unwrap();
}

const GPU: &str = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";

#[test]
fn garbage_everywhere_never_panics_and_never_passes_blind() {
    let garbage: &[&[u8]] = &[
        b"",
        b"\x00\xff\xfe\x80garbage\n",
        b"0x",
        b"-1",
        &[0xffu8; 5000],
    ];
    for (i, g) in garbage.iter().enumerate() {
        let t = base();
        let r = t.path();
        for f in [
            "proc/cmdline",
            "proc/modules",
            "proc/meminfo",
            "proc/cpuinfo",
            "proc/sys/kernel/osrelease",
            "proc/driver/nvidia/version",
            "proc/driver/nvidia/params",
            "gdrdoctor/meta.json",
        ] {
            put(r, f, g);
        }
        for f in [
            "vendor",
            "class",
            "resource",
            "config",
            "current_link_speed",
            "max_link_width",
            "numa_node",
        ] {
            put(r, &format!("{GPU}/{f}"), g);
        }
        // meta.json garbage is a usage error for the CLI (exit 2); in-process, skip meta.
        std::fs::remove_file(r.join("gdrdoctor/meta.json")).unwrap();
        let rep = report_for(r);
        let json = serde_json::to_string(&rep).unwrap();
        assert!(json.contains("\"schema\""), "case {i}");
        // The driver version is garbage: nothing about the driver may pass.
        let drv = find(&rep, "driver.nvidia", "node");
        assert_ne!(drv.status, Status::Pass, "case {i}: {drv:?}");
        assert_ne!(
            find(&rep, "kmod.dmabuf", "node").status,
            Status::Pass,
            "case {i}"
        );
    }
}

#[test]
fn truncated_and_missing_files() {
    let t = base();
    let r = t.path();
    put(r, &format!("{GPU}/config"), &[0x10, 0xde]);
    std::fs::remove_file(r.join(format!("{GPU}/resource"))).unwrap();
    std::fs::remove_file(r.join("proc/modules")).unwrap();
    std::fs::remove_dir_all(r.join("sys/class/infiniband")).unwrap();
    let rep = report_for(r);
    // The GPU is still found from its ids; BARs are simply unknown.
    assert!(rep
        .inventory
        .gpus
        .iter()
        .any(|g| g.bdf == "0000:18:00.0" && g.bars.is_empty()));
    // /sys/module still answers for the modules.
    assert_eq!(
        find(&rep, "kmod.nvidia-peermem", "node").status,
        Status::Pass
    );
}

#[test]
fn link_loops_and_escapes() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("version"), SECRET).unwrap();
    std::fs::create_dir_all(outside.path().join("devdir")).unwrap();
    std::fs::write(outside.path().join("devdir/vendor"), SECRET).unwrap();
    let t = base();
    let r = t.path();
    // An absolute link to a real file outside, and a deep `..` chain to it.
    relink(
        r,
        "proc/driver/nvidia/version",
        &outside.path().join("version").display().to_string(),
    );
    let dots = format!(
        "{}{}",
        "../".repeat(40),
        outside.path().join("devdir").display()
    );
    relink(r, "sys/bus/pci/devices/0000:18:00.0", &dots);
    // Loops: a self loop, a two-link cycle, and a directory loop below a device.
    relink(r, "sys/class/infiniband/mlx5_0", "mlx5_0");
    relink(r, "sys/class/infiniband/mlx5_1", "../infiniband/mlx5_9");
    relink(r, "sys/class/infiniband/mlx5_9", "mlx5_1");
    relink(r, &format!("{GPU}/driver"), "driver");
    let start = std::time::Instant::now();
    let rep = report_for(r);
    assert!(start.elapsed().as_secs() < 10, "link loops must not hang");
    let json = serde_json::to_string(&rep).unwrap();
    assert!(!json.contains(SECRET), "read outside the root: {json}");
    // The escaping version link resolves inside the root (chroot semantics): not found there.
    assert_ne!(find(&rep, "driver.nvidia", "node").status, Status::Pass);
    // Looping class links are reported, not followed forever.
    assert!(rep
        .inventory
        .nics
        .iter()
        .all(|n| n.ibdev != "mlx5_0" || n.ports.is_empty()));
    // And through the CLI too.
    let (code, out, err) = run(&[
        "check",
        "--sysroot",
        &r.display().to_string(),
        "--format",
        "json",
    ]);
    assert!(matches!(code, 0 | 1 | 3), "{code} {err}");
    assert!(!out.contains(SECRET) && !err.contains(SECRET));
}

#[test]
fn unreadable_sysroot_is_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("not-a-dir");
    std::fs::write(&f, "x").unwrap();
    let (code, _, err) = run(&["check", "--sysroot", &f.display().to_string()]);
    assert_eq!(code, 2, "{err}");
    let t2 = base();
    put(t2.path(), "gdrdoctor/meta.json", b"{not json");
    let (code, _, err) = run(&["check", "--sysroot", &t2.path().display().to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("gdrdoctor/meta.json"), "{err}");
}
