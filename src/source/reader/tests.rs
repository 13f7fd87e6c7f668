#![allow(clippy::unwrap_used)]
use super::*;
use std::os::unix::fs::symlink;

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:06.0")).unwrap();
    std::fs::write(
        r.join("sys/devices/pci0000:00/0000:00:06.0/vendor"),
        "0x10de\n",
    )
    .unwrap();
    std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
    symlink(
        "../../../devices/pci0000:00/0000:00:06.0",
        r.join("sys/bus/pci/devices/0000:00:06.0"),
    )
    .unwrap();
    t
}

#[test]
fn relative_links_resolve_inside_the_root() {
    let t = tree();
    let root = Root::sysroot(t.path()).unwrap();
    assert_eq!(
        root.read_trimmed("/sys/bus/pci/devices/0000:00:06.0/vendor")
            .unwrap(),
        "0x10de"
    );
    assert_eq!(
        root.canonical("/sys/bus/pci/devices/0000:00:06.0").unwrap(),
        "/sys/devices/pci0000:00/0000:00:06.0"
    );
}

#[test]
fn escaping_links_stay_inside() {
    let t = tree();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "leak").unwrap();
    let r = t.path();
    // An absolute link to a real file outside the root, and a `..` chain.
    symlink(outside.path().join("secret"), r.join("abs")).unwrap();
    let depth = "../".repeat(30);
    symlink(
        format!("{depth}{}", outside.path().join("secret").display()),
        r.join("dots"),
    )
    .unwrap();
    let root = Root::sysroot(r).unwrap();
    for p in ["/abs", "/dots", "/../../../../etc/passwd"] {
        match root.read(p) {
            Ok(b) => assert_ne!(b, b"leak", "{p} escaped the root"),
            Err(e) => assert!(e.is_not_found(), "{p}: {e}"),
        }
    }
}

#[test]
fn files_in_resolved_directories_open_relative_to_them_and_links_stay_inside() {
    // More directories than descriptors kept open: past MAX_DIR_FDS files are opened by
    // their whole path, with the same answers.
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let n = MAX_DIR_FDS + 40;
    for i in 0..n {
        let d = r.join(format!("sys/devices/d{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a"), format!("{i}\n")).unwrap();
        std::fs::write(d.join("b"), format!("b{i}\n")).unwrap();
    }
    // A link where a file is expected, in a directory already resolved: the descriptor's
    // O_NOFOLLOW refuses it and the reader resolves it inside the root.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "leak").unwrap();
    symlink(outside.path().join("secret"), r.join("sys/devices/d0/out")).unwrap();
    symlink("/secret", r.join("sys/devices/d0/abs")).unwrap();
    std::fs::write(r.join("secret"), "inside").unwrap();
    symlink("b", r.join("sys/devices/d1/rel")).unwrap();
    let root = Root::sysroot(r).unwrap().recording();
    for pass in 0..2 {
        for i in 0..n {
            let a = root.read_trimmed(&format!("/sys/devices/d{i}/a")).unwrap();
            assert_eq!(a, i.to_string(), "pass {pass}");
            let b = root.read_trimmed(&format!("/sys/devices/d{i}/b")).unwrap();
            assert_eq!(b, format!("b{i}"), "pass {pass}");
        }
    }
    assert_eq!(root.read_trimmed("/sys/devices/d0/abs").unwrap(), "inside");
    let e = root.read("/sys/devices/d0/out").unwrap_err();
    assert!(
        e.is_not_found(),
        "an absolute link restarts at the root: {e}"
    );
    assert_eq!(root.read_trimmed("/sys/devices/d1/rel").unwrap(), "b1");
    let e = root.read("/sys/devices/d2/missing").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.path, "/sys/devices/d2/missing");
    // The recorder names the kernel paths of the files read through a descriptor.
    let rec = root.recorded();
    assert_eq!(
        rec.get(&format!("/sys/devices/d{}/a", n - 1)),
        Some(&Recorded::File(format!("{}\n", n - 1).into_bytes()))
    );
    assert_eq!(
        rec.get("/sys/devices/d1/b"),
        Some(&Recorded::File(b"b1\n".to_vec()))
    );
}

#[test]
fn entries_of_a_resolved_directory_are_looked_at_relative_to_it() {
    // Once a directory is resolved, the lstat and readlink of its entries go through its
    // descriptor: links to directories, a link target longer than the first readlinkat
    // buffer, escapes, missing entries and `..` must resolve as by whole paths.
    let t = tree();
    let r = t.path();
    let dev = r.join("sys/devices/pci0000:00/0000:00:06.0");
    std::fs::create_dir_all(r.join("sys/bus/pci/drivers/nvidia")).unwrap();
    std::fs::write(r.join("sys/bus/pci/drivers/nvidia/new_id"), "x\n").unwrap();
    symlink("../../../bus/pci/drivers/nvidia", dev.join("driver")).unwrap();
    std::fs::create_dir_all(dev.join("sub")).unwrap();
    std::fs::write(dev.join("sub/f"), "deep\n").unwrap();
    let long = format!("{}sub", "./".repeat(200));
    symlink(&long, dev.join("long")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("d")).unwrap();
    std::fs::write(outside.path().join("d/secret"), "leak").unwrap();
    symlink(outside.path().join("d"), dev.join("esc")).unwrap();
    let root = Root::sysroot(r).unwrap();
    let d = "/sys/bus/pci/devices/0000:00:06.0";
    assert_eq!(root.read_trimmed(&format!("{d}/vendor")).unwrap(), "0x10de");
    for pass in 0..2 {
        assert_eq!(
            root.canonical(&format!("{d}/driver")).unwrap(),
            "/sys/bus/pci/drivers/nvidia",
            "pass {pass}"
        );
        assert_eq!(
            root.read_link(&format!("{d}/driver")).unwrap(),
            "../../../bus/pci/drivers/nvidia"
        );
        assert_eq!(root.read_link(&format!("{d}/long")).unwrap(), long);
        assert_eq!(
            root.read_trimmed(&format!("{d}/long/f")).unwrap(),
            "deep",
            "pass {pass}"
        );
        assert_eq!(root.read_trimmed(&format!("{d}/sub/f")).unwrap(), "deep");
        assert_eq!(
            root.read_trimmed(&format!("{d}/driver/new_id")).unwrap(),
            "x"
        );
        assert!(root.exists(&format!("{d}/sub")).unwrap());
        assert!(!root.exists(&format!("{d}/nothing")).unwrap());
        assert!(root.read(&format!("{d}/esc/secret")).is_err(), "escaped");
        assert_eq!(
            root.canonical(&format!("{d}/sub/..")).unwrap(),
            "/sys/devices/pci0000:00/0000:00:06.0"
        );
    }
}

#[test]
fn files_of_every_size_read_whole_and_exactly() {
    let t = tree();
    let root = Root::sysroot(t.path()).unwrap();
    let dir = t.path().join("sys/devices/pci0000:00/0000:00:06.0");
    std::fs::create_dir_all(t.path().join("proc/driver")).unwrap();
    for len in [
        0usize, 1, 4095, 4096, 4097, 8191, 8192, 8193, 20_000, 100_003,
    ] {
        let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        for (host, kernel) in [
            (
                dir.join("blob"),
                "/sys/bus/pci/devices/0000:00:06.0/blob".to_string(),
            ),
            (
                t.path().join("proc/driver/blob"),
                "/proc/driver/blob".to_string(),
            ),
        ] {
            std::fs::write(&host, &body).unwrap();
            let got = root.read(&kernel).unwrap();
            assert_eq!(got.len(), len, "{kernel}");
            assert!(got == body, "{kernel}: {len} bytes read differ");
        }
    }
    // The limit holds across reads.
    let big = vec![b'x'; MAX_FILE as usize + 1];
    std::fs::write(dir.join("big"), &big).unwrap();
    let e = root
        .read("/sys/bus/pci/devices/0000:00:06.0/big")
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooLarge), "{e}");
    // A directory opens and does not read.
    let e = root.read("/sys/bus/pci/devices/0000:00:06.0").unwrap_err();
    assert!(e.to_string().contains("is a directory"), "{e}");
}

#[test]
fn link_loops_end_with_an_error() {
    let t = tempfile::tempdir().unwrap();
    symlink("b", t.path().join("a")).unwrap();
    symlink("a", t.path().join("b")).unwrap();
    symlink("self/x", t.path().join("self")).unwrap();
    let root = Root::sysroot(t.path()).unwrap();
    for p in ["/a", "/self/x"] {
        let e = root.read(p).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Loop, "{p}");
        assert_eq!(e.path, p);
    }
}

#[test]
fn errors_carry_the_path_and_recording_keeps_links() {
    let t = tree();
    let root = Root::sysroot(t.path()).unwrap().recording();
    let e = root.read("/proc/modules").unwrap_err();
    assert_eq!(e.to_string(), "/proc/modules: not found");
    root.read("/sys/bus/pci/devices/0000:00:06.0/vendor")
        .unwrap();
    let rec = root.recorded();
    assert_eq!(
        rec.get("/sys/bus/pci/devices/0000:00:06.0"),
        Some(&Recorded::Link(
            "../../../devices/pci0000:00/0000:00:06.0".into()
        ))
    );
    assert_eq!(
        rec.get("/sys/devices/pci0000:00/0000:00:06.0/vendor"),
        Some(&Recorded::File(b"0x10de\n".to_vec()))
    );
    assert!(!root.exists("/sys/nope").unwrap());
    assert!(root.exists("/sys/devices").unwrap());
}

#[test]
fn a_file_where_a_directory_belongs_is_not_a_missing_file() {
    let t = tree();
    // `/sys/module` as a file: what lies below it is unknown, not absent.
    std::fs::write(t.path().join("sys/module"), "x").unwrap();
    let mut root = Root::sysroot(t.path()).unwrap();
    root.set_complete(true);
    let e = root.read("/sys/module/nvidia_peermem/version").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotADirectory);
    assert!(!e.is_not_found(), "{e}");
    assert!(root.exists("/sys/module/nvidia_peermem").is_err());
    assert!(root.read("/sys/nope/x").unwrap_err().is_not_found());
}
