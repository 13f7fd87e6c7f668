//! `gdrdoctor watch` against a job without a GPU: tests/watch_emu.c includes
//! kernels/include/gdrdoctor/progress.cuh (its host code, `GDRDOCTOR_PROGRESS_NO_CUDA`), creates
//! a real area in /dev/shm and writes records as the device side does. Every class, a healthy
//! job, the live mode, --abort, and damaged or foreign areas. The layout test compiles the
//! header with gcc and compares every offset with `gdrdoctor_checks::watch`.
//!
//! Needs `cc` (gcc), as tests/verbs.rs does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::watch as w;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn include_dir() -> PathBuf {
    repo().join("kernels/include")
}

/// Compile a C file of tests/ with the header; the executable's path.
fn build(name: &str, src: &Path) -> PathBuf {
    // Cargo's scratch directory for integration tests (under target/): nothing left in /tmp.
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(include_dir())
        .arg("-o")
        .arg(&exe)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("cc: {e}: this test needs gcc (apt-get install gcc)"));
    assert!(
        out.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Compile the C program `text` with the header and run it; its standard output.
fn build_and_run(name: &str, text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join(format!("{name}.c"));
    std::fs::write(&src, text).unwrap();
    let exe = build(name, &src);
    let out = Command::new(&exe).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn emu_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build("watch_emu", &repo().join("tests/watch_emu.c")))
}

/// A running emulated job; killed and its area removed on drop.
struct Job {
    child: Child,
    path: PathBuf,
    pid: u32,
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn job(scenario: &str, run_ms: u64) -> Job {
    let mut child = Command::new(emu_exe())
        .args([scenario, &run_ms.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let path = PathBuf::from(
        line.trim()
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("emulator said {line:?}")),
    );
    let pid = child.id();
    Job { child, path, pid }
}

fn watch(args: &[&str]) -> (i32, Value, String) {
    let mut a = vec!["watch", "--format", "json"];
    a.extend_from_slice(args);
    let (code, out, err) = run(&a);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v, err)
}

fn findings<'a>(v: &'a Value, id: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

fn episodes(v: &Value) -> Vec<Value> {
    v["probe"]["watch"]["areas"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["episodes"].as_array().unwrap().clone())
        .collect()
}

fn abort_word(path: &Path) -> u32 {
    let b = std::fs::read(path).unwrap();
    u32::from_le_bytes(b[w::ABORT_OFFSET..w::ABORT_OFFSET + 4].try_into().unwrap())
}

#[test]
fn the_headers_layout_is_the_one_watch_reads() {
    // A C file generated from the Rust side's field list: offsetof/sizeof of each, printed.
    let mut c = String::from(
        "#define _GNU_SOURCE\n#define GDRDOCTOR_PROGRESS_NO_CUDA\n#include \"gdrdoctor/progress.cuh\"\n#include <stddef.h>\nint main(void) {\n",
    );
    for (name, _) in w::FIELDS {
        let (ty, field) = name.split_once('.').unwrap();
        c.push_str(&format!(
            "  printf(\"{name} %zu\\n\", offsetof({ty}, {field}));\n"
        ));
    }
    for (ty, _) in w::SIZES {
        c.push_str(&format!("  printf(\"{ty} %zu\\n\", sizeof({ty}));\n"));
    }
    for (name, value) in [
        ("GDRDOCTOR_PROGRESS_MAGIC", w::MAGIC),
        ("GDRDOCTOR_PROGRESS_VERSION", u64::from(w::VERSION)),
        ("GDRDOCTOR_CONTROL_OFFSET", w::CONTROL_OFFSET as u64),
        ("GDRDOCTOR_PH_WAITING", u64::from(w::PH_WAITING)),
        ("GDRDOCTOR_PH_ABORTED", u64::from(w::PH_ABORTED)),
        ("GDRDOCTOR_CMP_WIDE", u64::from(w::CMP_WIDE)),
        ("GDRDOCTOR_CMP_SIGNED", u64::from(w::CMP_SIGNED)),
        ("GDRDOCTOR_WRITER_PEER_GPU", u64::from(w::WRITER_PEER_GPU)),
        ("GDRDOCTOR_AREA_CALIBRATED", u64::from(w::FLAG_CALIBRATED)),
        ("GDRDOCTOR_AREA_CLOSED", u64::from(w::FLAG_CLOSED)),
    ] {
        c.push_str(&format!(
            "  printf(\"{name} %llu {value}\\n\", (unsigned long long)({name}));\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    let text = build_and_run("layout", &c);
    let mut n = 0;
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() == 3 {
            assert_eq!(parts[1], parts[2], "{}: header vs watch.rs", parts[0]);
        } else {
            let want = w::FIELDS
                .iter()
                .chain(w::SIZES.iter())
                .find(|(k, _)| *k == parts[0])
                .unwrap()
                .1;
            assert_eq!(parts[1].parse::<usize>().unwrap(), want, "{}", parts[0]);
        }
        n += 1;
    }
    assert_eq!(n, w::FIELDS.len() + w::SIZES.len() + 10);
}

#[test]
fn the_hang_probes_record_is_the_progress_record() {
    // One Rust definition of the 64-byte record (gdrdoctor_checks::progress_record), read by
    // watch and by probe --hang: every field's offset and width against progress.cuh's
    // gdrdoctor_record and against kernels/hang.cu's struct HangRecord (its text, compiled as C).
    use gdrdoctor_checks::progress_record as rec;
    let hang = std::fs::read_to_string(repo().join("kernels/hang.cu")).unwrap();
    let start = hang
        .find("struct HangRecord {")
        .expect("kernels/hang.cu defines struct HangRecord");
    let end = start + hang[start..].find("};").expect("the struct ends") + 2;
    let mut c = String::from(
        "#define _GNU_SOURCE\n#define GDRDOCTOR_PROGRESS_NO_CUDA\n#include \"gdrdoctor/progress.cuh\"\n#include <stddef.h>\n#include <stdio.h>\ntypedef unsigned int u32;\ntypedef unsigned long long u64;\n",
    );
    c.push_str(&hang[start..end]);
    c.push_str("\nint main(void) {\n");
    for ty in ["gdrdoctor_record", "struct HangRecord"] {
        for (field, _, _) in rec::FIELDS {
            c.push_str(&format!(
                "  printf(\"{ty}.{field} %zu %zu\\n\", offsetof({ty}, {field}), sizeof((({ty}*)0)->{field}));\n"
            ));
        }
        c.push_str(&format!("  printf(\"{ty} %zu\\n\", sizeof({ty}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    let text = build_and_run("record", &c);
    let mut lines = text.lines();
    for ty in ["gdrdoctor_record", "struct HangRecord"] {
        for (field, off, width) in rec::FIELDS {
            assert_eq!(
                lines.next(),
                Some(format!("{ty}.{field} {off} {width}").as_str()),
                "{ty}.{field} vs checks/src/progress_record.rs"
            );
        }
        assert_eq!(lines.next(), Some(format!("{ty} {}", rec::SIZE).as_str()));
    }
    assert_eq!(lines.next(), None);
}

#[test]
fn every_class_is_found_with_its_waiter() {
    // (scenario, class, site, addr or "", expected, observed, memory)
    let cases = [
        (
            "spin-stall",
            "spin-stall",
            4,
            "0xdead0",
            "1001",
            "1000",
            None,
        ),
        (
            "forward-progress",
            "forward-progress",
            5,
            "0xbeef0",
            "1",
            "0",
            None,
        ),
        ("ordering", "ordering", 1, "0xf1a90", "1", "0", None),
        ("stale-read", "stale-read", 2, "", "1", "0", Some("1")),
        ("silent", "silent", 3, "0x5110", "1", "0", None),
        ("remote-wait", "remote-wait", 7, "0x7e7e0", "1", "0", None),
    ];
    for (scenario, class, site, addr, expected, observed, memory) in cases {
        let j = job(scenario, 0);
        let pid = j.pid.to_string();
        let (code, v, err) = watch(&["--pid", &pid, "--once"]);
        assert_eq!(code, 1, "{scenario}: {v}\n{err}");
        let stalls = findings(&v, "watch.stall");
        assert!(
            stalls.iter().all(|f| f["status"] == "fail"),
            "{scenario}: {stalls:?}"
        );
        assert!(
            stalls[0]["message"].as_str().unwrap().starts_with(class),
            "{scenario}: {}",
            stalls[0]["message"]
        );
        let eps = episodes(&v);
        let e = &eps[0]["waiter"];
        assert_eq!(e["class"], class, "{scenario}");
        assert_eq!(e["site"], site, "{scenario}");
        if !addr.is_empty() {
            assert_eq!(e["addr"], addr, "{scenario}");
        }
        assert_eq!(e["expected"], expected, "{scenario}");
        assert_eq!(e["observed"], observed, "{scenario}");
        assert_eq!(e["memory"].as_str(), memory, "{scenario}");
        assert!(
            e["waited_ms"].as_f64().unwrap() >= 1000.0,
            "{scenario}: {e}"
        );
        if scenario == "forward-progress" {
            assert_eq!(eps.len(), 3, "three blocks wait");
            assert_eq!(e["kernel"], "barrier");
            assert!(
                stalls[0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("(+2 more waiters)"),
                "{}",
                stalls[0]["message"]
            );
        } else {
            assert_eq!(
                (e["kernel"].as_str(), e["block"].as_u64()),
                (Some("consumer"), Some(1))
            );
        }
        // The live line on stderr names the same stall.
        assert!(
            err.contains(&format!("STALL {class}: kernel")),
            "{scenario}: {err}"
        );
        // Watching wrote nothing into the job.
        assert_eq!(abort_word(&j.path), 0, "{scenario}");
        let area = &findings(&v, "watch.area")[0];
        assert_eq!(area["status"], "pass", "{scenario}: {area}");
    }
}

#[test]
fn a_healthy_job_passes_and_the_table_says_so() {
    let j = job("healthy", 0);
    let pid = j.pid.to_string();
    let (code, v, _) = watch(&["--pid", &pid, "--once", "--threshold", "200"]);
    assert_eq!(code, 0, "{v}");
    let s = findings(&v, "watch.stall");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["status"], "pass");
    assert!(s[0]["evidence"].as_array().unwrap().len() >= 2);
    let (code, out, _) = run(&["watch", "--pid", &pid, "--once", "--color", "never", "-q"]);
    assert_eq!(code, 0);
    assert!(out.contains("PASS") && out.contains("watch.stall"), "{out}");
}

#[test]
fn live_mode_reports_while_running_and_exits_with_the_job() {
    let j = job("spin-stall", 1500);
    let pid = j.pid.to_string();
    let t0 = Instant::now();
    let (code, v, err) = watch(&["--pid", &pid, "--threshold", "200", "--poll-ms", "5"]);
    let took = t0.elapsed();
    assert_eq!(code, 1, "{v}\n{err}");
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_secs(10),
        "watch returned after {took:?}"
    );
    assert!(err.contains("STALL spin-stall"), "{err}");
    let eps = episodes(&v);
    assert_eq!(eps.len(), 1, "{eps:?}");
    assert_eq!(eps[0]["outcome"], "job-ended");
    assert_eq!(v["probe"]["watch"]["areas"][0]["process"], "exited");
}

#[test]
fn abort_sets_the_flag_and_the_waiter_leaves() {
    let j = job("abortable", 0);
    let pid = j.pid.to_string();
    let (code, v, err) = watch(&["--pid", &pid, "--once", "--abort", "--grace", "3000"]);
    let a = findings(&v, "watch.abort");
    assert_eq!(a.len(), 1, "{v}");
    assert_eq!(a[0]["status"], "pass", "{a:?}\n{err}");
    assert_eq!(abort_word(&j.path), 1);
    assert_eq!(episodes(&v)[0]["outcome"], "aborted");
    // The stall itself is still a failure: the job was hung.
    assert_eq!(code, 1);
}

#[test]
fn abort_ignored_is_a_failure() {
    let j = job("ignore-abort", 0);
    let pid = j.pid.to_string();
    let (code, v, _) = watch(&["--pid", &pid, "--once", "--abort", "--grace", "200"]);
    assert_eq!(code, 1);
    let a = findings(&v, "watch.abort");
    assert_eq!(a[0]["status"], "fail", "{a:?}");
    assert!(a[0]["message"].as_str().unwrap().contains("still wait"));
}

#[test]
fn no_abort_without_a_stall() {
    let j = job("healthy", 0);
    let pid = j.pid.to_string();
    let (_, v, _) = watch(&["--pid", &pid, "--once", "--abort"]);
    assert_eq!(findings(&v, "watch.abort")[0]["status"], "skip");
    assert_eq!(abort_word(&j.path), 0);
}

/// A copy of a live area in a directory of our own, damaged by `damage`.
fn damaged(
    src: &Job,
    name_pid: u32,
    damage: impl Fn(&mut Vec<u8>),
) -> (tempfile::TempDir, PathBuf) {
    let mut b = std::fs::read(&src.path).unwrap();
    damage(&mut b);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("gdrdoctor-{name_pid}-0"));
    std::fs::write(&p, &b).unwrap();
    (dir, p)
}

#[test]
fn damaged_or_foreign_areas_are_errors_naming_the_file() {
    let j = job("spin-stall", 0);
    let h = w::parse_header(&std::fs::read(&j.path).unwrap(), u64::MAX).unwrap();
    let rec0 = h.record_offset as usize;
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage, u32)> = vec![
        ("bad magic", Box::new(|b: &mut Vec<u8>| b[0] = b'X'), j.pid),
        (
            "layout version 7",
            Box::new(|b: &mut Vec<u8>| b[8] = 7),
            j.pid,
        ),
        (
            "truncated",
            Box::new(|b: &mut Vec<u8>| b.truncate(8192)),
            j.pid,
        ),
        (
            "too short",
            Box::new(|b: &mut Vec<u8>| b.truncate(100)),
            j.pid,
        ),
        (
            "has phase 9",
            Box::new(move |b: &mut Vec<u8>| b[rec0 + 7] = 9),
            j.pid,
        ),
        (
            "the file name says pid 1",
            Box::new(|_: &mut Vec<u8>| {}),
            1,
        ),
        (
            "not declared",
            Box::new(move |b: &mut Vec<u8>| b[rec0 + 19] = 6),
            j.pid,
        ),
    ];
    for (want, damage, name_pid) in cases {
        let (dir, p) = damaged(&j, name_pid, damage);
        let (code, v, _) = watch(&[
            "--all",
            "--once",
            "-q",
            "--shm-dir",
            dir.path().to_str().unwrap(),
        ]);
        assert_eq!(code, 3, "{want}: {v}");
        let a = findings(&v, "watch.area");
        assert_eq!(a.len(), 1, "{want}: {v}");
        assert_eq!(a[0]["status"], "error", "{want}");
        let msg = a[0]["message"].as_str().unwrap();
        assert!(msg.contains(p.to_str().unwrap()), "{want}: {msg}");
        assert!(msg.contains(want), "{want}: {msg}");
        assert!(
            findings(&v, "watch.stall").is_empty(),
            "{want}: no verdict from a damaged area"
        );
    }
    // Random bytes, a symlink and a directory under an area's name.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gdrdoctor-11-0"), vec![0xa5u8; 5000]).unwrap();
    std::os::unix::fs::symlink(&j.path, dir.path().join("gdrdoctor-12-0")).unwrap();
    std::fs::create_dir(dir.path().join("gdrdoctor-13-0")).unwrap();
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let a = findings(&v, "watch.area");
    assert_eq!(a.len(), 3);
    assert!(a.iter().all(|f| f["status"] == "error"), "{a:?}");
}

#[test]
fn a_record_that_never_reads_consistently_is_not_healthy() {
    let j = job("spin-stall", 0);
    let h = w::parse_header(&std::fs::read(&j.path).unwrap(), u64::MAX).unwrap();
    // The waiter (consumer block 1 warp 0: record 2) caught in the middle of an update.
    let seq = h.record_offset as usize + 2 * w::RECORD_SIZE;
    let (dir, _) = damaged(&j, j.pid, |b| b[seq] |= 1);
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let s = findings(&v, "watch.stall");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["status"], "error");
    assert!(s[0]["message"]
        .as_str()
        .unwrap()
        .contains("1 record(s) never read consistently"));
}

/// A wait start the area's clock cannot place (an offset an hour off): `--once` sees the waiter
/// for a few milliseconds only, so it cannot call the job healthy; the same stall with the
/// area's own offset is a failure.
#[test]
fn an_undated_wait_is_not_healthy_under_once() {
    let j = job("spin-stall", 0);
    let (code, v, _) = watch(&["--pid", &j.pid.to_string(), "--once", "-q"]);
    assert_eq!(code, 1, "{v}");
    let (dir, _) = damaged(&j, j.pid, |b| {
        let off = 40;
        let t = i64::from_le_bytes(b[off..off + 8].try_into().unwrap()) + 3_600_000_000_000;
        b[off..off + 8].copy_from_slice(&t.to_le_bytes());
    });
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let s = findings(&v, "watch.stall");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["status"], "error");
    assert!(s[0]["message"]
        .as_str()
        .unwrap()
        .contains("1 waiting record(s) cannot be dated"));
}

#[test]
fn a_leftover_area_of_a_dead_job_is_a_warning_with_its_last_records() {
    let j = job("spin-stall", 0);
    // A pid that is not running: a child that already exited.
    let mut c = Command::new("true").spawn().unwrap();
    c.wait().unwrap();
    let dead = c.id();
    let (dir, _) = damaged(&j, dead, |b| b[16..20].copy_from_slice(&dead.to_le_bytes()));
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{v}");
    let a = findings(&v, "watch.area");
    assert_eq!(a[0]["status"], "warn", "{a:?}");
    assert!(a[0]["message"].as_str().unwrap().contains("not running"));
    let s = findings(&v, "watch.stall");
    assert_eq!(s[0]["status"], "warn", "{s:?}");
    assert!(s[0]["message"].as_str().unwrap().contains("last records"));
}

#[test]
fn no_area_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, v, _) = watch(&["--all", "--once", "--shm-dir", d]);
    assert_eq!(code, 0);
    assert_eq!(findings(&v, "watch.area")[0]["status"], "skip");
    // A pid that neither runs nor published an area: gdrdoctor cannot run.
    let (code, _, err) = run(&["watch", "--pid", "4194303", "--once", "--shm-dir", d]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no progress area for pid 4194303"), "{err}");
    // A running pid without an area, --once: an error finding (exit 3).
    let me = std::process::id().to_string();
    let (code, v, _) = watch(&["--pid", &me, "--once", "--shm-dir", d]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(findings(&v, "watch.area")[0]["status"], "error");
}

#[test]
fn the_help_teaches_and_explain_knows_the_ids() {
    let (code, out, _) = run(&["watch", "--help"]);
    assert_eq!(code, 0);
    for want in [
        "--pid",
        "--once",
        "--abort",
        "progress.cuh",
        "Examples:",
        "Exit codes",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    for f in w::FINDINGS {
        let id = f.id;
        let (code, out, _) = run(&["explain", id]);
        assert_eq!(code, 0, "{id}");
        assert!(out.contains(id));
    }
}

/// A job started with `EMU_LATE_MAGIC_MS`: its area exists with a zero magic (the job is inside
/// `gdrdoctor_progress_init`) until `late_ms` have passed. Returned as soon as the area exists.
fn job_initialising(scenario: &str, run_ms: u64, late_ms: u64) -> Job {
    let mut child = Command::new(emu_exe())
        .args([scenario, &run_ms.to_string()])
        .env("EMU_LATE_MAGIC_MS", late_ms.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let path = PathBuf::from(
        line.trim()
            .strip_prefix("INIT ")
            .unwrap_or_else(|| panic!("emulator said {line:?}")),
    );
    // Keep reading its stdout (READY, done) so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).is_ok_and(|n| n > 0) {}
    });
    let pid = child.id();
    Job { child, path, pid }
}

#[test]
fn watch_started_with_the_job_waits_for_its_area_to_be_initialised() {
    // `watch --pid $!` as a user types it: the area exists before its magic (written last).
    let j = job_initialising("spin-stall", 8000, 700);
    let t0 = Instant::now();
    let pid = j.pid.to_string();
    let (code, v, err) = watch(&["--pid", &pid, "--threshold", "300", "--duration", "3"]);
    assert_eq!(
        code, 1,
        "the stall is found once the area is ready: {v}\n{err}"
    );
    assert!(err.contains("still initialising"), "{err}");
    let eps = episodes(&v);
    assert_eq!(eps.len(), 1, "{v}");
    assert_eq!(eps[0]["waiter"]["class"], "spin-stall", "{v}");
    assert!(t0.elapsed() < Duration::from_secs(8));
    assert!(
        findings(&v, "watch.area")
            .iter()
            .all(|f| f["status"] != "error"),
        "an area that was initialising is not damaged: {v}"
    );
}

#[test]
fn once_on_an_area_still_initialising_says_so_and_is_not_healthy() {
    let j = job_initialising("healthy", 8000, 6000);
    let pid = j.pid.to_string();
    let (code, v, _) = watch(&["--pid", &pid, "--once", "-q"]);
    assert_eq!(code, 3, "{v}");
    let a = findings(&v, "watch.area");
    assert_eq!(a.len(), 1, "{v}");
    assert_eq!(a[0]["status"], "error");
    let msg = a[0]["message"].as_str().unwrap();
    assert!(msg.contains("still initialising"), "{msg}");
    assert!(
        !msg.contains("bad magic") && !msg.contains("damaged"),
        "{msg}"
    );
    assert!(a[0]["remediation"]
        .as_str()
        .unwrap()
        .contains("again in a moment"));
}

#[test]
fn an_area_claiming_more_records_than_watch_reads_is_refused_unread() {
    let j = job("spin-stall", 0);
    let h = w::parse_header(&std::fs::read(&j.path).unwrap(), u64::MAX).unwrap();
    let n = gdrdoctor::collect::watch::MAX_READ_RECORDS + 1;
    let size = u64::from(h.record_offset) + u64::from(n) * w::RECORD_SIZE as u64;
    let (dir, p) = damaged(&j, j.pid, |b: &mut Vec<u8>| {
        b[56..64].copy_from_slice(&size.to_le_bytes());
        b[112..116].copy_from_slice(&n.to_le_bytes());
        b[116..120].copy_from_slice(&n.to_le_bytes());
    });
    // Sparse: the records the header claims are there, as zeros, without costing disk.
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    let t0 = Instant::now();
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let msg = findings(&v, "watch.area")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains(&format!("claims {n} records")), "{msg}");
    assert!(findings(&v, "watch.stall").is_empty(), "{v}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "not read: {:?}",
        t0.elapsed()
    );
}

#[test]
fn an_area_owned_by_another_user_than_the_job_is_not_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP an_area_owned_by_another_user_than_the_job_is_not_read: needs root to chown a copy");
        return;
    }
    let j = job("spin-stall", 0);
    let (dir, p) = damaged(&j, j.pid, |_: &mut Vec<u8>| {});
    std::os::unix::fs::chown(&p, Some(54321), None).unwrap();
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let msg = findings(&v, "watch.area")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("owned by uid 54321"), "{msg}");
    assert!(
        findings(&v, "watch.stall").is_empty(),
        "a planted area reports no stall: {v}"
    );
}

/// A sparse 1 GiB file planted under a running job's area name by another user (here: a file
/// of zeros, which reads as an area still being initialised) is refused for its owner before
/// a byte of it is read: at once, naming both uids, not waited for as "initialising" (it was
/// read first, then waited on).
#[test]
fn a_planted_sparse_area_of_another_user_is_refused_before_it_is_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP a_planted_sparse_area_of_another_user_is_refused_before_it_is_read: needs root to chown the file");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir
        .path()
        .join(format!("gdrdoctor-{}-0", std::process::id()));
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    std::os::unix::fs::chown(&p, Some(54321), None).unwrap();
    let t0 = Instant::now();
    let (code, v, _) = watch(&[
        "--all",
        "--once",
        "-q",
        "--shm-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{v}");
    let msg = findings(&v, "watch.area")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("owned by uid 54321"), "{msg}");
    assert!(findings(&v, "watch.stall").is_empty(), "{v}");
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "refused at once, not waited for: {:?}",
        t0.elapsed()
    );
}
