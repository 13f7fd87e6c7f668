//! Issue 18, "damaged evidence is never good news": the defects an adversary found, each held
//! by a test that failed before its fix. `-o` never replaces special files; node strings never
//! reach the terminal raw; tarball snapshots are capped, private and cleaned up on every way
//! out (errors and signals); damaged facts (a broken capability chain, a garbage vendor file,
//! a corrupt live.json, a missing hca_type, a file where a directory belongs) are never good
//! news; `topo` survives odd names and stays near-linear in GPU x NIC pairs; a selection that
//! selects nothing is a usage error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::model::{Fact, Node};
use gdrdoctor_checks::report::{Report, Status};
use gdrdoctor_checks::testing;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The binary under test: `GDRDOCTOR_TEST_BIN` runs these tests against another build (an
/// older gdrdoctor, to see them fail), else this package's.
fn gd() -> String {
    std::env::var("GDRDOCTOR_TEST_BIN").unwrap_or_else(|_| bin().to_string())
}

/// `common::run` with [`gd`].
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gd())
        .args(args)
        .env_remove("NO_COLOR")
        .env("GDRDOCTOR_STATE_DIR", test_state_dir())
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn healthy() -> PathBuf {
    fixture("hgx-h200x8-cx7x8-healthy")
}

/// A writable copy of a fixture.
fn copy(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture(name), t.path());
    t
}

fn json(dir: &Path) -> (i32, Report) {
    let (code, out, err) = run(&[
        "check",
        "--sysroot",
        &dir.display().to_string(),
        "--format",
        "json",
    ]);
    let r: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    (code, r)
}

fn status_of(r: &Report, id: &str, subject: &str) -> Option<Status> {
    r.findings
        .iter()
        .find(|f| f.id == id && f.subject == subject)
        .map(|f| f.status)
}

// ---------------------------------------------------------------------------------------------
// -o: special files are written in place, never replaced
// ---------------------------------------------------------------------------------------------

/// A character device that discards what is written: our own `null` (major 1, minor 3) when
/// root (never the system's /dev/null: the unfixed code would have replaced it), else
/// /dev/null itself (which a non-root rename cannot replace).
fn null_device(dir: &Path) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return PathBuf::from("/dev/null");
    }
    let p = dir.join("null");
    let c = std::ffi::CString::new(p.as_os_str().to_str().unwrap()).unwrap();
    // SAFETY: mknod with a valid path and plain integers.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod {}", p.display());
    p
}

#[test]
fn output_never_replaces_a_device_or_a_symlink_to_one() {
    let t = tempfile::tempdir().unwrap();
    let dev = null_device(t.path());
    let link = t.path().join("link-to-null");
    std::os::unix::fs::symlink(&dev, &link).unwrap();
    for target in [&dev, &link] {
        let (code, out, err) = run(&[
            "check",
            "--sysroot",
            &healthy().display().to_string(),
            "-o",
            &target.display().to_string(),
        ]);
        assert_eq!(code, 0, "-o {}: {err}", target.display());
        assert!(out.is_empty(), "{out}");
        assert!(
            std::fs::metadata(&dev)
                .unwrap()
                .file_type()
                .is_char_device(),
            "{} is no longer a device",
            dev.display()
        );
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    // Nothing left beside them either.
    let names: Vec<String> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn output_to_a_fifo_is_written_into_it() {
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("report.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader_path = fifo.clone();
    std::thread::spawn(move || {
        let text = std::fs::read_to_string(&reader_path).unwrap_or_default();
        let _ = tx.send(text);
    });
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        &healthy().display().to_string(),
        "--format",
        "json",
        "-o",
        &fifo.display().to_string(),
    ]);
    let got = rx.recv_timeout(Duration::from_secs(60));
    if got.is_err() {
        // The FIFO was replaced and nobody writes to it: release the reader.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    }
    assert_eq!(code, 0, "{err}");
    let text = got.expect("the report went into the FIFO");
    assert!(
        text.contains("\"schema\": \"gdrdoctor.report/v1\""),
        "{text}"
    );
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn output_dash_is_stdout_and_a_directory_is_refused() {
    let (code, out, _) = run(&[
        "check",
        "--sysroot",
        &healthy().display().to_string(),
        "--format",
        "json",
        "-o",
        "-",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("\"schema\""), "{out}");
    let t = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        &healthy().display().to_string(),
        "-o",
        &t.path().display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("is a directory"), "{err}");
}

/// Every command that takes `-o` goes through the one writer: topo (text and png), diagnose,
/// fleet and policy init leave a device a device and take `-` for stdout.
#[test]
fn every_dash_o_writes_a_device_in_place_and_dash_to_stdout() {
    let t = tempfile::tempdir().unwrap();
    let dev = null_device(t.path());
    let root = healthy().display().to_string();
    let report = t.path().join("r.json");
    let (_, out, _) = run(&["check", "--sysroot", &root, "--format", "json"]);
    std::fs::write(&report, out).unwrap();
    let paste = repo().join("fixtures/pastes/nccl-1435-topo-pxb-numa.txt");
    let report_s = report.display().to_string();
    let paste_s = paste.display().to_string();
    let cmds: [Vec<&str>; 5] = [
        vec!["topo", "--sysroot", &root],
        vec!["topo", "--sysroot", &root, "--format", "svg"],
        vec!["diagnose", &paste_s],
        vec!["fleet", &report_s],
        vec!["policy", "init", "--sysroot", &root],
    ];
    for args in &cmds {
        let mut a = args.clone();
        let d = dev.display().to_string();
        a.extend(["-o", d.as_str()]);
        let (code, out, err) = run(&a);
        assert!(matches!(code, 0 | 1 | 3), "{a:?}: {code} {err}");
        assert!(out.is_empty(), "{a:?}: {out}");
        assert!(
            std::fs::metadata(&dev)
                .unwrap()
                .file_type()
                .is_char_device(),
            "{a:?} replaced {}",
            dev.display()
        );
        let mut a = args.clone();
        a.extend(["-o", "-"]);
        let (code, out, err) = run(&a);
        assert!(matches!(code, 0 | 1 | 3), "{a:?}: {code} {err}");
        assert!(out.len() > 40, "{a:?}: `-o -` is stdout: {out:?} {err}");
        assert!(!t.path().join("-").exists(), "{a:?} wrote a file named -");
    }
}

// ---------------------------------------------------------------------------------------------
// Node strings never reach the terminal raw
// ---------------------------------------------------------------------------------------------

fn files_named(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            files_named(&e.path(), name, out);
        } else if t.is_file() && e.file_name() == name {
            out.push(e.path());
        }
    }
}

#[test]
fn escape_sequences_from_the_node_are_shown_not_obeyed() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let r = t.path();
    let mut fw = Vec::new();
    files_named(&r.join("sys/devices"), "fw_ver", &mut fw);
    assert!(!fw.is_empty());
    // Clear the screen, set the window title, a one-byte CSI and a bidi override.
    let evil = "28.43.1014\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}";
    for f in &fw {
        std::fs::write(f, format!("{evil}\n")).unwrap();
    }
    // An RDMA device whose name carries an escape sequence (the class link's name).
    let class = r.join("sys/class/infiniband");
    let target = std::fs::read_link(class.join("mlx5_0")).unwrap();
    std::fs::remove_file(class.join("mlx5_0")).unwrap();
    std::os::unix::fs::symlink(target, class.join("mlx5_\u{1b}[31m0")).unwrap();
    let root = r.display().to_string();
    let raw = |s: &str| s.contains('\u{1b}') || s.contains('\u{9b}') || s.contains('\u{202e}');
    for args in [
        vec!["check", "--sysroot", &root, "--color", "never"],
        vec!["check", "--sysroot", &root, "--color", "always", "-v"],
        vec!["check", "--sysroot", &root, "--format", "junit"],
        vec!["topo", "--sysroot", &root],
    ] {
        let (code, out, err) = run(&args);
        assert!(matches!(code, 0 | 1 | 3), "{args:?}: {code} {err}");
        if args.contains(&"always") {
            // Our own colour codes only: every node escape is shown as text.
            let stripped = out
                .replace("\u{1b}[0m", "")
                .replace("\u{1b}[32m", "")
                .replace("\u{1b}[1;33m", "")
                .replace("\u{1b}[1;31m", "")
                .replace("\u{1b}[1;35m", "")
                .replace("\u{1b}[2m", "");
            assert!(
                !stripped.contains("\u{1b}[2J") && !stripped.contains("\u{1b}]0"),
                "{args:?}"
            );
        } else {
            assert!(
                !raw(&out),
                "{args:?} printed raw control characters:\n{out}"
            );
        }
        assert!(!raw(&err), "{args:?}: {err}");
        assert!(
            out.contains("\\x1b[2J") || out.contains("\\x1b[31m"),
            "{args:?}: the escapes are shown as text:\n{out}"
        );
    }
    // The JSON keeps the data (serde escapes the controls).
    let (_, out, _) = run(&["check", "--sysroot", &root, "--format", "json"]);
    assert!(out.contains("\\u001b[2J"), "{out}");
}

/// The renderers that landed beside issue 18 take node strings too: `fleet`'s table prints
/// hostnames, messages and values from reports, `diagnose` prints pasted text and file names.
#[test]
fn fleet_and_diagnose_show_node_escapes_as_text() {
    let raw = |s: &str| s.contains('\u{1b}') || s.contains('\u{9b}') || s.contains('\u{202e}');
    let t = tempfile::tempdir().unwrap();
    let (code, out, err) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-port-down").display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 1, "{err}");
    let mut v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["host"]["hostname"] = "node\u{1b}[2J\u{1b}]0;owned\u{7}\u{202e}01".into();
    if let Some(fs) = v["findings"].as_array_mut() {
        for f in fs.iter_mut().filter(|f| f["status"] == "fail") {
            f["message"] = format!("{} \u{1b}[2J\u{9b}31m", f["message"].as_str().unwrap()).into();
        }
    }
    let report = t.path().join("r.json");
    std::fs::write(&report, serde_json::to_string(&v).unwrap()).unwrap();
    let (code, out, err) = run(&["fleet", &report.display().to_string()]);
    assert!(matches!(code, 0 | 1), "{code} {err}");
    assert!(!raw(&out), "fleet printed raw control characters:\n{out}");
    assert!(out.contains("\\x1b[2J"), "shown as text:\n{out}");

    // A pasted NCCL log with a bidi override, from a file whose name carries an escape.
    let paste = t.path().join("log\u{1b}[31m.txt");
    std::fs::write(
        &paste,
        "node01:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\u{202e}\n\
         node01:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\u{202e} ; OOB eth0:10.0.0.1<0>\n",
    )
    .unwrap();
    let (code, out, err) = run(&["diagnose", &paste.display().to_string(), "--color", "never"]);
    assert!(matches!(code, 0 | 1 | 3), "{code} {err}");
    assert!(
        !raw(&out),
        "diagnose printed raw control characters:\n{out}"
    );
    assert!(!raw(&err), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Tarball snapshots: capped, private, cleaned up on every way out
// ---------------------------------------------------------------------------------------------

/// A gzip-compressed tar of `dir` (symlinks kept).
fn tgz_of(dir: &Path) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    b.follow_symlinks(false);
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

/// A gzip-compressed tar holding the raw entries `(path, type, data)`.
fn tgz_with(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (path, kind, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        if *kind == tar::EntryType::Link || *kind == tar::EntryType::Symlink {
            h.set_link_name("sys").unwrap();
            h.set_size(0);
        }
        // Raw name bytes: `append_data` would refuse `..` itself.
        let name = h.as_old_mut().name.as_mut();
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// Run gdrdoctor with TMPDIR set to `tmp`.
fn run_tmp(tmp: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gd())
        .args(args)
        .env("TMPDIR", tmp)
        .env("GDRDOCTOR_STATE_DIR", test_state_dir())
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn tarball_snapshots_never_leave_their_unpacked_tree_behind() {
    let work = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let good = tgz_of(&healthy());
    let bad_meta = {
        let t = copy("hgx-h200x8-cx7x8-healthy");
        std::fs::write(t.path().join("gdrdoctor/meta.json"), "{not json").unwrap();
        tgz_of(t.path())
    };
    let big = vec![0u8; 5 << 20];
    let cases: Vec<(&str, Vec<u8>, i32, &str)> = vec![
        ("good", good.clone(), 0, ""),
        ("garbage", b"\x1f\x8b\x08garbage".to_vec(), 2, "--sysroot"),
        ("truncated", good[..good.len() / 2].to_vec(), 2, "--sysroot"),
        ("meta.json garbage", bad_meta, 2, "gdrdoctor/meta.json"),
        (
            "a file larger than any snapshot holds",
            tgz_with(&[("big", tar::EntryType::Regular, &big)]),
            2,
            "more than any file a snapshot holds",
        ),
        (
            "a hard link",
            tgz_with(&[("x", tar::EntryType::Link, b"")]),
            2,
            "only files, directories and symlinks",
        ),
        (
            "a device",
            tgz_with(&[("x", tar::EntryType::Char, b"")]),
            2,
            "only files, directories and symlinks",
        ),
        (
            "an escaping path",
            tgz_with(&[("../escaped", tar::EntryType::Regular, b"x")]),
            2,
            "--sysroot",
        ),
        (
            "an entry below a file",
            tgz_with(&[
                ("a", tar::EntryType::Regular, b"x"),
                ("a/escaped", tar::EntryType::Regular, b"y"),
            ]),
            2,
            "not a directory in the archive",
        ),
        (
            "an entry below a symlink",
            tgz_with(&[
                ("l", tar::EntryType::Symlink, b""),
                ("l/escaped", tar::EntryType::Regular, b"y"),
            ]),
            2,
            "not a directory in the archive",
        ),
    ];
    for (name, bytes, want, needle) in cases {
        let archive = work.path().join("snap.tar.gz");
        std::fs::write(&archive, &bytes).unwrap();
        let (code, _, err) = run_tmp(
            tmp.path(),
            &[
                "check",
                "--sysroot",
                archive.to_str().unwrap(),
                "--format",
                "json",
            ],
        );
        assert_eq!(code, want, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {needle:?} in {err}");
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new(), "{name}: {err}");
        assert!(!work.path().join("escaped").exists(), "{name}");
        assert!(!tmp.path().join("escaped").exists(), "{name}");
    }
    // `snapshot x.tar.gz` stages in a private tree too, and removes it.
    let out = work.path().join("again.tar.gz");
    let (code, _, err) = run_tmp(
        tmp.path(),
        &[
            "snapshot",
            out.to_str().unwrap(),
            "--sysroot",
            healthy().to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
    let (code, _, _) = run_tmp(
        tmp.path(),
        &[
            "snapshot",
            work.path().join("no/such/dir/x.tar.gz").to_str().unwrap(),
            "--sysroot",
            healthy().to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2);
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn unpacking_is_capped_in_bytes_and_entries() {
    use gdrdoctor::source::archive::{unpack_into, Limits};
    let files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("f{i}"), vec![b'x'; 1024]))
        .collect();
    let entries: Vec<(&str, tar::EntryType, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), tar::EntryType::Regular, d.as_slice()))
        .collect();
    let tgz = tgz_with(&entries);
    let ok = Limits {
        bytes: 1 << 20,
        entries: 100,
        file: 4096,
    };
    let d = tempfile::tempdir().unwrap();
    unpack_into(&tgz[..], d.path(), &ok).unwrap();
    assert_eq!(leftovers(d.path()).len(), 20);
    for (limits, needle) in [
        (
            Limits {
                bytes: 10 * 1024,
                ..ok
            },
            "bytes unpacked",
        ),
        (Limits { entries: 5, ..ok }, "more than 5 entries"),
        (Limits { file: 512, ..ok }, "more than any file"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let e = unpack_into(&tgz[..], d.path(), &limits).unwrap_err();
        assert!(e.contains(needle), "{e}");
    }
    // The limits a snapshot gets.
    assert_eq!(Limits::SNAPSHOT.bytes, 256 << 20);
    assert_eq!(Limits::SNAPSHOT.entries, 50_000);
}

/// Every limit is checked on the whole archive before anything is unpacked: 60,000 empty
/// entries (more than any snapshot holds) are refused after one read of the archive, with no
/// file written (they cost 21.5 s of unpacking before the refusal when the check ran entry by
/// entry during the unpacking).
#[test]
fn an_archive_over_the_limits_is_refused_before_anything_is_written() {
    use gdrdoctor::source::archive::{check_limits, Limits};
    let names: Vec<String> = (0..60_000).map(|i| format!("sys/f{i}")).collect();
    let entries: Vec<(&str, tar::EntryType, &[u8])> = names
        .iter()
        .map(|n| (n.as_str(), tar::EntryType::Regular, &b""[..]))
        .collect();
    let tgz = tgz_with(&entries);
    let e = check_limits(&tgz[..], &Limits::SNAPSHOT).unwrap_err();
    assert!(e.contains("more than 50000 entries"), "{e}");
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("many.tar.gz");
    std::fs::write(&archive, &tgz).unwrap();
    let t0 = std::time::Instant::now();
    let (code, _, err) = run_tmp(
        tmp.path(),
        &["check", "--sysroot", archive.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than 50000 entries"), "{err}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t0.elapsed()
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("gdrdoctor-"))
        .collect();
    assert!(left.is_empty(), "nothing unpacked: {left:?}");
}

/// A snapshot archive whose gzip checksum does not match its bytes (a bit flipped in transit
/// or on disk) is refused by every reader, naming the archive, as `gzip -t` refuses it: the
/// tar reader stops at the end-of-archive blocks, and the trailer used to go unread, so a
/// flipped bit inside a file was read as the node's state (the review of 2026-12-07 turned a
/// rising AER counter's fail into exit 0 that way).
#[test]
fn an_archive_whose_gzip_checksum_fails_is_refused() {
    use gdrdoctor::source::archive::{check_limits, tree_from, unpack_into, Limits};
    let good = std::fs::read(common::nodes::archive("hgx-h200x8-cx7x8-aer-rising")).unwrap();
    assert!(check_limits(&good[..], &Limits::SNAPSHOT).is_ok());
    // The trailer's CRC-32 (the 8th byte from the end): every byte of the tar decodes as
    // before, only the checksum disagrees.
    let mut bad = good.clone();
    let at = bad.len() - 8;
    bad[at] ^= 0x01;
    for e in [
        check_limits(&bad[..], &Limits::SNAPSHOT).unwrap_err(),
        tree_from(&bad[..], &Limits::SNAPSHOT)
            .map(|_| ())
            .unwrap_err(),
        unpack_into(
            &bad[..],
            tempfile::tempdir().unwrap().path(),
            &Limits::SNAPSHOT,
        )
        .unwrap_err(),
    ] {
        assert!(e.contains("damaged") && e.contains("checksum"), "{e}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("flipped.tar.gz");
    std::fs::write(&path, &bad).unwrap();
    let (code, out, err) = run_tmp(tmp.path(), &["check", "--sysroot", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("flipped.tar.gz") && err.contains("damaged"),
        "{err}"
    );
}

#[test]
fn the_unpack_directory_is_private_and_unpredictable() {
    let a = gdrdoctor::source::archive::TempTree::new("gdrdoctor-test-").unwrap();
    let b = gdrdoctor::source::archive::TempTree::new("gdrdoctor-test-").unwrap();
    assert_ne!(a.path(), b.path());
    let md = std::fs::metadata(a.path()).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o700);
    let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
    let suffix = name.strip_prefix("gdrdoctor-test-").unwrap();
    assert_eq!(suffix.len(), 16, "{name}");
    assert!(!name.contains(&std::process::id().to_string()), "{name}");
    let p = a.path().to_path_buf();
    // A directory of mode 000 inside (an archive can carry one) does not stop the cleanup.
    std::fs::create_dir_all(p.join("locked/inner")).unwrap();
    std::fs::write(p.join("locked/inner/f"), "x").unwrap();
    std::fs::set_permissions(p.join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
    drop(a);
    assert!(!p.exists());
}

#[test]
fn an_archive_is_read_without_writing_and_a_signal_still_ends_the_run() {
    let work = tempfile::tempdir().unwrap();
    let archive = work.path().join("snap.tar.gz");
    std::fs::write(&archive, tgz_of(&healthy())).unwrap();
    for (sig, code) in [
        (libc::SIGTERM, 143),
        (libc::SIGINT, 130),
        (libc::SIGHUP, 129),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        // The report goes into a FIFO nobody reads: the run waits there, the archive read.
        let fifo = work.path().join(format!("out-{sig}.fifo"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // At its default disposition whatever the harness inherited (a background job
        // ignores SIGINT; gdrdoctor rightly keeps an ignored signal ignored).
        let mut child = with_default_termination_signals(
            Command::new(gd())
                .args(["check", "--sysroot", archive.to_str().unwrap(), "-o"])
                .arg(&fifo)
                .env("TMPDIR", tmp.path())
                .env("GDRDOCTOR_STATE_DIR", test_state_dir())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
        .spawn()
        .unwrap();
        // Long enough to read and judge the archive (a few ms in memory) and block on the FIFO.
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run did not wait on the FIFO"
        );
        // The archive is read in memory: nothing was unpacked anywhere under TMPDIR.
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new(), "signal {sig}");
        // SAFETY: kill with our child's pid.
        unsafe { libc::kill(child.id() as i32, sig) };
        let t1 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t1.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("signal {sig} did not end the run");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Ended by the signal (nothing to clean up, so its default action), or by a handler
        // exiting with the shell's code for it.
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.signal() == Some(sig) || status.code() == Some(code),
            "signal {sig}: {status:?}"
        );
        assert_eq!(leftovers(tmp.path()), Vec::<String>::new(), "signal {sig}");
    }
}

// ---------------------------------------------------------------------------------------------
// Damaged facts are never good news
// ---------------------------------------------------------------------------------------------

#[test]
fn a_params_file_cut_short_is_an_error_not_the_driver_deciding() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let params = t.path().join("proc/driver/nvidia/params");
    // The override set to refuse gdr: a fail, as before.
    let full = std::fs::read_to_string(&params).unwrap().replace(
        "GrdmaPciTopoCheckOverride: 0",
        "GrdmaPciTopoCheckOverride: 2",
    );
    std::fs::write(&params, &full).unwrap();
    let (code, r) = json(t.path());
    assert_eq!(
        status_of(&r, "driver.grdma-override", "node"),
        Some(Status::Fail)
    );
    assert_eq!(code, 1);
    // Cut before the override's line, mid-line: not "the driver decides".
    let cut = &full[..full.find("GrdmaPciTopo").unwrap() + "GrdmaPci".len()];
    std::fs::write(&params, cut).unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "driver.grdma-override")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.message.contains("/proc/driver/nvidia/params"), "{f:?}");
    assert_eq!(code, 3);
    // Cut at a line's end but without its newline: the same.
    let cut = &full[..full.find("\nGrdmaPciTopo").unwrap()];
    std::fs::write(&params, cut).unwrap();
    let (_, r) = json(t.path());
    assert_eq!(
        status_of(&r, "driver.grdma-override", "node"),
        Some(Status::Error)
    );
}

#[test]
fn a_self_pointing_first_extended_capability_is_an_error_not_no_acs() {
    let t = copy("hgx-h200x8-cx7x8-acs-redirect");
    let (code, r) = json(t.path());
    assert_eq!(code, 1);
    assert_eq!(
        status_of(&r, "pcie.acs-redirect", "0000:37:00.0"),
        Some(Status::Fail)
    );
    // AER at 0x100 leads to ACS at 0x148: make 0x100 point to itself.
    let cfg = t
        .path()
        .join("sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:00.0/config");
    let mut b = std::fs::read(&cfg).unwrap();
    let h = u32::from_le_bytes(b[0x100..0x104].try_into().unwrap());
    let h = (h & 0x000f_ffff) | (0x100 << 20);
    b[0x100..0x104].copy_from_slice(&h.to_le_bytes());
    std::fs::write(&cfg, &b).unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "pcie.acs-redirect" && f.subject == "0000:37:00.0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.evidence
            .iter()
            .any(|e| e.observed.contains("broken at 0x100")),
        "{f:?}"
    );
    assert_eq!(code, 3, "an unreadable acs is incomplete, never healthy");
}

#[test]
fn a_failed_row_remap_query_on_an_h200_is_an_error_not_retired_pages() {
    let t = copy("hgx-h200x8-cx7x8-row-remap-pending");
    let live = t.path().join("gdrdoctor/live.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&live).unwrap()).unwrap();
    for g in v["nvml"]["value"]["gpus"].as_array_mut().unwrap() {
        if g["bdf"] == "0000:a8:00.0" {
            g["remapped_rows"] = serde_json::Value::Null;
            g["retired_pages_pending"] = serde_json::Value::Bool(false);
            g["errors"] = serde_json::json!(["nvmlDeviceGetRemappedRows: NVML error 999"]);
        }
    }
    std::fs::write(&live, v.to_string()).unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "gpu.row-remap" && f.subject == "0000:a8:00.0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.message.contains("NVML error 999"), "{f:?}");
    assert_eq!(code, 3);
}

#[test]
fn a_gpu_with_a_garbage_vendor_file_does_not_vanish() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let gpu = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";
    std::fs::write(t.path().join(gpu).join("vendor"), "0xzz\n").unwrap();
    let (code, r) = json(t.path());
    assert_eq!(
        status_of(&r, "gpu.present", "0000:18:00.0"),
        Some(Status::Error),
        "{:#?}",
        r.findings
            .iter()
            .filter(|f| f.id == "gpu.present")
            .collect::<Vec<_>>()
    );
    assert_ne!(code, 0);
    // Its class unreadable instead: the same.
    let t = copy("hgx-h200x8-cx7x8-healthy");
    std::fs::remove_file(t.path().join(gpu).join("class")).unwrap();
    let (code, r) = json(t.path());
    assert_eq!(
        status_of(&r, "gpu.present", "0000:18:00.0"),
        Some(Status::Error)
    );
    assert_ne!(code, 0);
}

#[test]
fn a_recorded_memlock_with_a_member_left_out_is_an_error_not_unlimited() {
    for memlock in [r#"{"hard": 65536}"#, "{}"] {
        let t = copy("hgx-h200x8-cx7x8-memlock-limited");
        let meta = t.path().join("gdrdoctor/meta.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
        v["memlock"] = serde_json::from_str(memlock).unwrap();
        std::fs::write(&meta, v.to_string()).unwrap();
        let (code, r) = json(t.path());
        let f = r.findings.iter().find(|f| f.id == "mem.memlock").unwrap();
        assert_eq!(f.status, Status::Error, "{memlock}: {f:?}");
        assert!(f.message.contains("gdrdoctor/meta.json"), "{f:?}");
        assert_eq!(code, 3, "{memlock}");
    }
    // null is unlimited, as the snapshot writes it: a pass.
    let t = copy("hgx-h200x8-cx7x8-memlock-limited");
    let meta = t.path().join("gdrdoctor/meta.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    v["memlock"] = serde_json::json!({"soft": null, "hard": null});
    std::fs::write(&meta, v.to_string()).unwrap();
    let (_, r) = json(t.path());
    assert_eq!(status_of(&r, "mem.memlock", "node"), Some(Status::Pass));
}

#[test]
fn a_corrupt_snapshot_record_is_an_error_not_a_skip() {
    for damage in ["garbage", "directory"] {
        let t = copy("hgx-h200x8-cx7x8-healthy");
        let live = t.path().join("gdrdoctor/live.json");
        std::fs::remove_file(&live).unwrap();
        if damage == "garbage" {
            std::fs::write(&live, "{\"nvml\": [1, 2").unwrap();
        } else {
            std::fs::create_dir(&live).unwrap();
        }
        let (code, r) = json(t.path());
        for id in ["gpu.persistence", "gpu.row-remap", "gpu.gdr-support"] {
            let f = r.findings.iter().find(|f| f.id == id).unwrap();
            assert_eq!(f.status, Status::Error, "{damage}: {f:?}");
            assert!(f.message.contains("cannot be used"), "{f:?}");
        }
        assert_eq!(code, 3, "{damage}");
    }
    // The kernel log and the counter baseline a snapshot keeps: the same.
    let t = copy("hgx-h200x8-cx7x8-nic-fw-fatal");
    std::fs::write(t.path().join("gdrdoctor/kernel-log.txt"), "28.43.1014\n").unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "kernel.mlx5-health")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert_ne!(code, 0);
    let t = copy("hgx-h200x8-cx7x8-aer-rising");
    std::fs::write(
        t.path().join("gdrdoctor/counters-baseline.json"),
        "{\"values\": [",
    )
    .unwrap();
    let (code, r) = json(t.path());
    assert!(
        r.findings
            .iter()
            .any(|f| f.id == "counters.aer" && f.status == Status::Error),
        "{:#?}",
        r.findings
            .iter()
            .filter(|f| f.id == "counters.aer")
            .collect::<Vec<_>>()
    );
    assert_ne!(code, 0);
    // Absent (an older snapshot): a skip, as before.
    let t = copy("hgx-h200x8-cx7x8-healthy");
    std::fs::remove_file(t.path().join("gdrdoctor/live.json")).unwrap();
    let (_, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "gpu.persistence")
        .unwrap();
    assert_eq!(f.status, Status::Skip, "{f:?}");
}

#[test]
fn damaged_port_state_files_are_errors_naming_the_file() {
    let port = "sys/class/infiniband/mlx5_0/ports/1";
    let check = |damage: &dyn Fn(&Path)| {
        let t = copy("hgx-h200x8-cx7x8-healthy");
        // The port's own directory (sys/class/infiniband/mlx5_0 is a link into sys/devices).
        let dir = std::fs::canonicalize(t.path().join(port)).unwrap();
        damage(&dir);
        let (code, r) = json(t.path());
        let f = r
            .findings
            .iter()
            .find(|f| f.id == "rdma.ports" && f.subject == "mlx5_0/1")
            .unwrap()
            .clone();
        (code, f)
    };
    for phys in ["5: Lin", "", "garbage"] {
        let (code, f) = check(&|d| std::fs::write(d.join("phys_state"), phys).unwrap());
        assert_eq!(f.status, Status::Error, "{phys:?}: {f:?}");
        assert!(
            f.evidence[0].source.ends_with("mlx5_0/ports/1/phys_state"),
            "{f:?}"
        );
        assert_eq!(code, 3);
    }
    // A directory where the file belongs (a read error): not a paste that did not show it.
    let (_, f) = check(&|d| {
        std::fs::remove_file(d.join("phys_state")).unwrap();
        std::fs::create_dir(d.join("phys_state")).unwrap();
    });
    assert_eq!(f.status, Status::Error, "{f:?}");
    // The state empty: not "port is  and no port is active".
    let (code, f) = check(&|d| std::fs::write(d.join("state"), "").unwrap());
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.evidence[0].source.ends_with("mlx5_0/ports/1/state"),
        "{f:?}"
    );
    assert_eq!(code, 3);
}

#[test]
fn a_missing_hca_type_does_not_hide_a_firmware_mismatch() {
    let t = copy("hgx-h200x8-cx7x8-mixed-fw");
    let mut hca = Vec::new();
    files_named(&t.path().join("sys/devices"), "hca_type", &mut hca);
    // mlx5_5 is one of the two on old firmware.
    let five = hca
        .iter()
        .find(|p| p.to_string_lossy().contains("infiniband/mlx5_5/"))
        .unwrap();
    std::fs::remove_file(five).unwrap();
    let (_, r) = json(t.path());
    let fw: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "rdma.firmware")
        .collect();
    assert_eq!(fw.len(), 1, "{fw:#?}");
    assert_eq!(fw[0].status, Status::Warn, "{fw:#?}");
    assert!(fw[0].evidence[0].observed.contains("mlx5_5"), "{fw:#?}");
}

#[test]
fn a_cut_hca_type_does_not_split_a_firmware_mismatch_and_a_cut_fw_ver_is_an_error() {
    let t = copy("hgx-h200x8-cx7x8-mixed-fw");
    for n in ["mlx5_5", "mlx5_6"] {
        let dir = std::fs::canonicalize(t.path().join("sys/class/infiniband").join(n)).unwrap();
        std::fs::write(dir.join("hca_type"), "MT41").unwrap();
    }
    let (code, r) = json(t.path());
    let fw: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "rdma.firmware")
        .collect();
    assert!(
        fw.iter()
            .any(|f| f.subject == "model MT4129" && f.status == Status::Warn),
        "{fw:#?}"
    );
    for n in ["mlx5_5", "mlx5_6"] {
        let f = fw.iter().find(|f| f.subject == n).unwrap();
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert_eq!(
            f.evidence[0].source,
            format!("/sys/class/infiniband/{n}/hca_type")
        );
    }
    assert!(!fw.iter().any(|f| f.status == Status::Pass), "{fw:#?}");
    assert_eq!(code, 3);
    // A cut fw_ver on a healthy node: an error naming the file, not a version of its own.
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let dir = std::fs::canonicalize(t.path().join("sys/class/infiniband/mlx5_3")).unwrap();
    std::fs::write(dir.join("fw_ver"), "28.4").unwrap();
    let (code, r) = json(t.path());
    let f = r.findings.iter().find(|f| f.id == "rdma.firmware").unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source == "/sys/class/infiniband/mlx5_3/fw_ver"),
        "{f:?}"
    );
    assert_eq!(code, 3);
}

#[test]
fn intel_iommu_on_without_a_unit_warns_and_a_file_for_a_directory_is_not_absence() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let cmdline = t.path().join("proc/cmdline");
    let c = std::fs::read_to_string(&cmdline).unwrap();
    std::fs::write(&cmdline, format!("{} intel_iommu=on\n", c.trim_end())).unwrap();
    let (_, r) = json(t.path());
    assert_eq!(status_of(&r, "iommu.mode", "node"), Some(Status::Warn));
    // /sys/class/iommu a file (ENOTDIR when listed): unknown, not "no unit registered".
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let class = t.path().join("sys/class/iommu");
    let _ = std::fs::remove_dir_all(&class);
    std::fs::write(&class, "").unwrap();
    let (code, r) = json(t.path());
    assert_eq!(status_of(&r, "iommu.mode", "node"), Some(Status::Error));
    assert_eq!(code, 3);
}

// ---------------------------------------------------------------------------------------------
// topo and the selection
// ---------------------------------------------------------------------------------------------

#[test]
fn an_unreadable_numa_node_makes_the_pairs_it_decides_unknown_not_sys() {
    // The switch above GPU0 and mlx5_0: their CPU cannot be read.
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let file = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/numa_node";
    std::fs::write(t.path().join(file), "zz\n").unwrap();
    let (_, r) = json(t.path());
    let pair = |g: &str, n: &str| r.gdr.iter().find(|p| p.gpu == g && p.nic == n).unwrap();
    // Under the shared switch: still PIX and GDR.
    assert_eq!(pair("0000:18:00.0", "mlx5_0").path, "PIX");
    // Across switches: PHB or SYS cannot be told, said with the file, never SYS.
    let p = pair("0000:18:00.0", "mlx5_1");
    assert_eq!(p.path, "?", "{p:?}");
    assert!(!p.enabled, "{p:?}");
    assert!(
        p.undecided.iter().any(|u| u.contains(&format!("/{file}"))),
        "{p:?}"
    );
    // A NIC's own numa_node empty: the node-level spread is not judged without it.
    let t = copy("hgx-h200x8-cx7x8-healthy");
    std::fs::write(
        t.path().join("sys/bus/pci/devices/0000:19:00.0/numa_node"),
        "",
    )
    .unwrap();
    let (code, r) = json(t.path());
    assert_eq!(status_of(&r, "topo.nic-numa", "node"), Some(Status::Error));
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "topo.nic-numa" && f.subject == "mlx5_0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.message
            .contains("/sys/bus/pci/devices/0000:19:00.0/numa_node"),
        "{f:?}"
    );
    assert_eq!(code, 3);
}

#[test]
fn symlink_loops_are_errors_not_a_wrong_driver_or_a_lost_rdma_device() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let ib = t.path().join("sys/class/infiniband/mlx5_0");
    std::fs::remove_file(&ib).unwrap();
    std::os::unix::fs::symlink("mlx5_0", &ib).unwrap();
    let driver = t
        .path()
        .join("sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/driver");
    std::fs::remove_file(&driver).unwrap();
    std::os::unix::fs::symlink("driver", &driver).unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "gpu.present" && f.subject == "0000:18:00.0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.evidence[0].observed.contains("symlink loop"), "{f:?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "rdma.devices" && f.subject == "0000:19:00.0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.evidence[0].observed.contains("symlink loop"), "{f:?}");
    // Nothing is judged on what the loops hide: no warning, no failure.
    let judged: Vec<_> = r
        .findings
        .iter()
        .filter(|f| matches!(f.status, Status::Warn | Status::Fail))
        .collect();
    assert!(judged.is_empty(), "{judged:#?}");
    assert_eq!(code, 3);
}

#[test]
fn topo_survives_short_and_non_ascii_sysfs_names() {
    for name in ["x", "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}", "0000:"] {
        let t = copy("hgx-h200x8-cx7x8-healthy");
        let parent = t
            .path()
            .join("sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0");
        std::fs::rename(parent.join("0000:18:00.0"), parent.join(name)).unwrap();
        let link = t.path().join("sys/bus/pci/devices/0000:18:00.0");
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/{name}"),
            &link,
        )
        .unwrap();
        for fmt in ["text", "json"] {
            let (code, out, err) = run(&[
                "topo",
                "--sysroot",
                &t.path().display().to_string(),
                "--format",
                fmt,
            ]);
            assert_eq!(code, 0, "{name:?} {fmt}: {err}");
            assert!(!out.is_empty());
        }
        let (code, _, err) = run(&["check", "--sysroot", &t.path().display().to_string()]);
        assert!(matches!(code, 0 | 1 | 3), "{name:?}: {code} {err}");
    }
}

/// A node with `n` PCIe switches, each holding one GPU and one NIC (`n` GPUs, `n` NICs, `n`
/// x `n` pairs), one PCI domain per switch, two sockets.
fn wide_node(n: usize) -> Node {
    let mut pci = Vec::new();
    let mut rdma = Vec::new();
    for i in 0..n {
        let d = format!("{i:04x}");
        let rp = format!("/sys/devices/pci{d}:00/{d}:00:01.0");
        let usp = format!("{rp}/{d}:01:00.0");
        let numa = (i % 2) as i32;
        pci.push(testing::bridge(&rp, numa));
        pci.push(testing::bridge(&usp, numa));
        pci.push(testing::bridge(&format!("{usp}/{d}:02:00.0"), numa));
        pci.push(testing::gpu(
            &format!("{usp}/{d}:02:00.0/{d}:03:00.0"),
            numa,
        ));
        pci.push(testing::bridge(&format!("{usp}/{d}:02:01.0"), numa));
        pci.push(testing::nic(
            &format!("{usp}/{d}:02:01.0/{d}:04:00.0"),
            numa,
        ));
        rdma.push(testing::rdma(
            &format!("mlx5_{i}"),
            &format!("{d}:04:00.0"),
            "4: ACTIVE",
        ));
    }
    let mut node = testing::with(testing::switch_pair(), pci, rdma);
    node.nvidia.gpus = Fact::known(Default::default(), "test");
    node
}

#[test]
fn topo_stays_near_linear_in_gpu_nic_pairs() {
    let time = |n: usize| {
        let node = wide_node(n);
        let t0 = Instant::now();
        let t = gdrdoctor::render::topo::build(&node);
        let text = gdrdoctor::render::topo::render_text(&t);
        let took = t0.elapsed();
        assert_eq!(t.pairs.len(), n * n);
        assert!(text.contains(&format!("GPU{}", n - 1)));
        eprintln!("topo {n} x {n}: {:.2} s", took.as_secs_f64());
        took
    };
    let small = time(128);
    let big = time(512);
    // 16 times the pairs. Quadratic in pairs (what it was) is 256 times; allow noise on a
    // loaded 2-core machine.
    let ratio = big.as_secs_f64() / small.as_secs_f64().max(0.05);
    assert!(ratio < 64.0, "512 x 512 took {ratio:.0} times 128 x 128");
    // Seconds in a release build; a debug build (cargo test) is about ten times slower.
    let bound = if cfg!(debug_assertions) { 180 } else { 20 };
    assert!(
        big < Duration::from_secs(bound),
        "512 x 512 took {:.1} s",
        big.as_secs_f64()
    );
}

#[test]
fn a_selection_that_selects_nothing_is_a_usage_error() {
    let root = healthy().display().to_string();
    for args in [
        vec!["--only", "pcie.mrrs", "--skip", "pcie.mrrs"],
        vec!["--only", "pcie", "--skip", "pcie"],
        vec![
            "--skip",
            "gpu,driver,kmod,iommu,rdma,roce,mem,pcie,topo,gdr,counters,kernel,container,gdrcopy",
        ],
    ] {
        let mut a = vec!["check", "--sysroot", &root];
        a.extend(args.iter());
        let (code, out, err) = run(&a);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(err.contains("selects no check"), "{err}");
    }
}

/// `diagnose --format markdown` is pasted back into an issue thread: pasted HTML and Markdown
/// must be shown there, never rendered (an image with a handler, a link, a table break).
#[test]
fn pasted_html_and_markdown_are_shown_not_rendered() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("x.txt");
    // An RDMA device name is quoted in subjects, messages and the block's summary.
    std::fs::write(
        &f,
        "hca_id:\t<img_src=x_onerror=alert(1)>[x](javascript:alert(1))**bold**\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tphys_state:\t\tPOLLING (2)\n",
    )
    .unwrap();
    let (code, out, err) = run_tmp(
        t.path(),
        &["diagnose", f.to_str().unwrap(), "--format", "markdown"],
    );
    assert_eq!(code, 1, "{err}");
    for line in out.lines() {
        // Outside code spans, no raw tag, no link, no emphasis from the paste.
        let mut outside = String::new();
        let mut in_code = false;
        let mut run = 0;
        for c in line.chars() {
            if c == '`' {
                run += 1;
                continue;
            }
            if run > 0 && !line.contains(&"`".repeat(run + 1)) {
                in_code = !in_code;
            }
            run = 0;
            if !in_code {
                outside.push(c);
            }
        }
        assert!(!outside.contains("<img"), "{line}");
        assert!(!outside.contains("<img_src"), "{line}");
        // An escaped bracket (`\]`) ends no link text.
        let unescaped = outside.replace("\\]", "").replace("\\*", "");
        assert!(!unescaped.contains("](javascript"), "{line}");
        assert!(!unescaped.contains("**bold**"), "{line}");
    }
    assert!(out.contains("onerror"), "the text is still shown: {out}");
    assert!(out.contains("&lt;img"), "{out}");
}

/// `snapshot X.tar.gz` never overwrites an existing file unless `--force`, and a symbolic link
/// planted at X is never followed: without `--force` refused, with it the link itself is
/// replaced and its target is untouched. A directory snapshot into a symlink is refused.
#[test]
fn a_snapshot_never_overwrites_or_follows_what_is_at_its_path() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture("h200-vm-live");
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = t.path().join("snap.tar.gz");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    let args = |force: bool| {
        let mut a = vec![
            "snapshot".to_string(),
            "--sysroot".into(),
            src.display().to_string(),
            out.display().to_string(),
        ];
        if force {
            a.push("--force".into());
        }
        a
    };
    let a = args(false);
    let (code, _, err) = run_tmp(t.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("exists; pass --force"), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let a = args(true);
    let (code, _, err) = run_tmp(t.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious",
        "the link's target is untouched"
    );
    assert!(std::fs::symlink_metadata(&out)
        .unwrap()
        .file_type()
        .is_file());
    // An existing archive without --force: refused, kept.
    let before = std::fs::read(&out).unwrap();
    let a = args(false);
    let (code, _, _) = run_tmp(t.path(), &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 2);
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // A directory snapshot into a symbolic link to a directory: refused, nothing written there.
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let dir_out = t.path().join("snapdir");
    std::os::unix::fs::symlink(&elsewhere, &dir_out).unwrap();
    let (code, _, err) = run_tmp(
        t.path(),
        &[
            "snapshot",
            "--sysroot",
            &src.display().to_string(),
            &dir_out.display().to_string(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// Files the user named, named back (the review of 2026-12-07): a snapshot's metadata of
/// another schema is refused naming the snapshot's file (it was read as v1); a damaged one
/// names the sysroot, not a host path; an output into a missing directory names that directory
/// (it named a temporary file); a node report of another schema is refused by `diagnose`.
#[test]
fn foreign_schemas_are_refused_and_errors_name_the_users_files() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("node");
    copy_tree(&common::nodes::fixture("hgx-h200x8-cx7x8-healthy"), &root);
    let meta = root.join("gdrdoctor/meta.json");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(
        &meta,
        text.replace("gdrdoctor.snapshot/v1", "gdrdoctor.snapshot/v2"),
    )
    .unwrap();
    let (code, _, err) = run(&["check", "--sysroot", root.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}/gdrdoctor/meta.json", root.display()))
            && err.contains("gdrdoctor.snapshot/v2"),
        "{err}"
    );
    std::fs::write(&meta, "").unwrap();
    let (code, _, err) = run(&["check", "--sysroot", root.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}/gdrdoctor/meta.json", root.display())),
        "{err}"
    );
    let good = common::nodes::fixture("hgx-h200x8-cx7x8-healthy");
    let out = t.path().join("no/such/dir/r.json");
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        good.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("r.json") && err.contains("does not exist") && !err.contains(".tmp."),
        "{err}"
    );
    let report = t.path().join("r.json");
    let (code, _, _) = run(&[
        "check",
        "--sysroot",
        good.to_str().unwrap(),
        "-f",
        "json",
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1);
    let r = std::fs::read_to_string(&report).unwrap();
    std::fs::write(
        &report,
        r.replace("gdrdoctor.report/v1", "gdrdoctor.report/v9"),
    )
    .unwrap();
    let paste = t.path().join("p.txt");
    std::fs::write(
        &paste,
        "[ 1.0] NVRM: loading NVIDIA UNIX Open Kernel Module  580.159.04\n",
    )
    .unwrap();
    let (code, _, err) = run(&[
        "diagnose",
        paste.to_str().unwrap(),
        "--node-report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("gdrdoctor.report/v9"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// live.json: one GPU listed twice, or not answered
// ---------------------------------------------------------------------------------------------

#[test]
fn a_gpu_listed_twice_in_live_json_is_an_error_for_its_live_checks() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let live = t.path().join("gdrdoctor/live.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&live).unwrap()).unwrap();
    // A second entry for the first GPU that contradicts the first one.
    let mut x = v["nvml"]["value"]["gpus"][0].clone();
    x["persistence_mode"] = serde_json::Value::Bool(false);
    x["remapped_rows"]["pending"] = serde_json::Value::Bool(true);
    v["nvml"]["value"]["gpus"].as_array_mut().unwrap().push(x);
    let mut y = v["cuda"]["value"]["devices"][0].clone();
    y["gpu_direct_rdma_supported"] = serde_json::json!(0);
    v["cuda"]["value"]["devices"]
        .as_array_mut()
        .unwrap()
        .push(y);
    std::fs::write(&live, v.to_string()).unwrap();
    let (code, r) = json(t.path());
    for id in [
        "gpu.persistence",
        "gpu.row-remap",
        "gpu.nvlink",
        "gpu.gdr-support",
        "gdr.gpu",
        "counters.nvlink",
    ] {
        let f = r
            .findings
            .iter()
            .find(|f| f.id == id && f.subject == "0000:18:00.0")
            .unwrap_or_else(|| panic!("{id}"));
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert!(f.message.contains("live.json"), "{f:?}");
    }
    assert_eq!(code, 3);
}

#[test]
fn a_gpu_cudas_record_lacks_without_a_reason_is_an_error_not_an_assumption() {
    let t = copy("hgx-h200x8-cx7x8-healthy");
    let live = t.path().join("gdrdoctor/live.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&live).unwrap()).unwrap();
    v["cuda"]["value"]["devices"]
        .as_array_mut()
        .unwrap()
        .retain(|d| d["bdf"] != "0000:18:00.0");
    std::fs::write(&live, v.to_string()).unwrap();
    let (code, r) = json(t.path());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "gpu.gdr-support" && f.subject == "0000:18:00.0")
        .unwrap();
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.message
            .contains("live.json has no CUDA answer for this gpu"),
        "{f:?}"
    );
    assert_eq!(
        status_of(&r, "gdr.gpu", "0000:18:00.0"),
        Some(Status::Error)
    );
    assert_eq!(code, 3);
}
