//! The counter baseline is a ledger (issue 36, item 1): a run that does not judge a counter does
//! not move its baseline, concurrent runs judge one after the other against a consistent
//! reading, and a reading younger than a second is neither judged by nor replaced. Played on a
//! constructed host root (`--host-root`: read as the live host, so the state directory is used),
//! whose counter files the test changes between runs as a flapping link would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::host_root::host_tree;
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::{Path, PathBuf};

const HEALTHY: &str = "hgx-h200x8-cx7x8-healthy";

struct Node {
    _t: tempfile::TempDir,
    host: PathBuf,
    state: PathBuf,
}

fn node() -> Node {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "unlimited");
    let state = t.path().join("state");
    Node { _t: t, host, state }
}

/// The `link_downed` file of mlx5_0 port 1 in the host tree.
fn link_downed(host: &Path) -> PathBuf {
    let sys = host.join("sys/devices");
    let mut stack = vec![sys];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.ends_with("infiniband/mlx5_0/ports/1/counters/link_downed") {
                return p;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    panic!("no link_downed of mlx5_0 in the fixture");
}

fn flap(host: &Path, times: u64) {
    let p = link_downed(host);
    let now: u64 = std::fs::read_to_string(&p).unwrap().trim().parse().unwrap();
    std::fs::write(&p, format!("{}\n", now + times)).unwrap();
}

fn check(n: &Node, only: &str) -> std::process::Command {
    let mut c = std::process::Command::new(bin());
    c.args([
        "check",
        "--static",
        "--no-policy",
        "--nccl-version",
        "2.28.9",
        "-f",
        "json",
        "--only",
        only,
        "--host-root",
    ])
    .arg(&n.host)
    .arg("--state-dir")
    .arg(&n.state);
    c
}

fn judged(out: &std::process::Output) -> (Status, String) {
    let r: Report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let f: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "counters.ib-port" && f.status != Status::Pass)
        .collect();
    match f.first() {
        Some(f) => (f.status, f.message.clone()),
        None => (Status::Pass, String::new()),
    }
}

fn ledger_bytes(n: &Node) -> Vec<u8> {
    std::fs::read(n.state.join("counters.json")).unwrap()
}

/// A second between runs: a reading younger than that is not judged by.
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(1100));
}

#[test]
fn a_run_that_judges_no_counters_does_not_swallow_a_flap() {
    let n = node();
    let first = check(&n, "counters").output().unwrap();
    assert_eq!(judged(&first).0, Status::Pass, "{first:?}");
    let recorded = ledger_bytes(&n);
    tick();
    flap(&n.host, 5);
    // An operator's ad-hoc run of other checks in between: the ledger is not read or moved.
    for only in ["kmod", "pcie"] {
        let other = check(&n, only).output().unwrap();
        assert!(other.status.code().is_some());
        assert_eq!(ledger_bytes(&n), recorded, "--only {only} moved the ledger");
    }
    // `--skip counters` is the same.
    let mut skip = check(&n, "kmod");
    skip.args(["--skip", "counters"]);
    skip.output().unwrap();
    assert_eq!(ledger_bytes(&n), recorded);
    tick();
    let next = check(&n, "counters").output().unwrap();
    let (status, msg) = judged(&next);
    assert_ne!(status, Status::Pass, "the flap was swallowed");
    assert!(msg.contains("rose by 5"), "{msg}");
}

#[test]
fn another_family_run_keeps_the_ib_reading_and_its_age() {
    let n = node();
    check(&n, "counters").output().unwrap();
    tick();
    flap(&n.host, 2);
    // Only the AER check runs: it moves the aer family, not ib.
    check(&n, "counters.aer").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ledger_bytes(&n)).unwrap();
    assert_eq!(v["schema"], "gdrdoctor.counters-state/v2");
    assert!(v["families"]["aer"]["previous"].is_object(), "{v}");
    assert!(v["families"]["ib"]["previous"].is_null(), "{v}");
    tick();
    let (status, msg) = judged(&check(&n, "counters").output().unwrap());
    assert_ne!(status, Status::Pass);
    assert!(msg.contains("rose by 2"), "{msg}");
}

#[test]
fn ten_concurrent_runs_give_one_verdict() {
    let n = node();
    check(&n, "counters").output().unwrap();
    tick();
    flap(&n.host, 3);
    // Hold the ledger while the ten start, as a long run would: they all start before any of
    // them reads, whatever the machine's load, and must then read, judge and record in turn.
    let held = hold_lock(&n.state);
    let children: Vec<_> = (0..10)
        .map(|_| {
            check(&n, "counters")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let t0 = std::time::Instant::now();
    while !pids.iter().all(|p| waits_on_lock(*p)) {
        assert!(
            t0.elapsed().as_secs() < 120,
            "the runs never asked for the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(held);
    // Read every child's output at once (a report fills a pipe).
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait_with_output().unwrap()))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let codes: Vec<_> = outs.iter().map(|o| o.status.code()).collect();
    let verdicts: Vec<_> = outs.iter().map(judged).collect();
    // Each judged against the same earlier reading: every run sees the 3 downs.
    for (v, o) in verdicts.iter().zip(&outs) {
        assert_ne!(
            v.0,
            Status::Pass,
            "{verdicts:?} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(v.1.contains("rose by 3"), "{}", v.1);
    }
    assert!(
        codes.windows(2).all(|w| w[0] == w[1]),
        "exit codes {codes:?}"
    );
    // And the next run, a second later, judges against the reading they recorded: no growth.
    tick();
    let (status, _) = judged(&check(&n, "counters").output().unwrap());
    assert_eq!(status, Status::Pass);
}

/// Take the ledger's lock as a run does (`flock` on `counters.lock`).
fn hold_lock(state: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(state.join("counters.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor the test owns.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    f
}

/// Whether process `pid` has the ledger's lock file open (it is waiting for it).
fn waits_on_lock(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().ends_with("counters.lock"))
            })
        })
        .unwrap_or(false)
}

#[test]
fn a_run_right_after_another_is_not_judged_over_a_fraction_of_a_second() {
    let n = node();
    check(&n, "counters").output().unwrap();
    // At once: the only reading is too recent; the pass says so instead of "no growth in 0.1 s".
    let out = check(&n, "counters").output().unwrap();
    let r: Report = serde_json::from_slice(&out.stdout).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "counters.ib-port")
        .unwrap();
    let text = serde_json::to_string(f).unwrap();
    assert!(!f.message.contains("grew in 0."), "{}", f.message);
    assert!(text.contains("too recent"), "{text}");
}

#[test]
fn a_state_directory_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let n = node();
    std::fs::create_dir_all(&n.state).unwrap();
    std::fs::set_permissions(&n.state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = check(&n, "counters").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    assert!(!n.state.join("counters.json").exists());
}
