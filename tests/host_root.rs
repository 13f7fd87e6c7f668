//! `--host-root DIR`: the host's `/` mounted into a container (a Kubernetes DaemonSet), read as
//! the live host through a mount. A constructed host root (a fixture sysroot without
//! gdrdoctor's metadata, plus the host's /etc/hostname, /var/log/kern.log and a containerd in
//! its procfs) must give the findings `--sysroot` gives on the same tree, except the source kind
//! and the live-only facts; symlinks must never leave DIR; the flag is exclusive with --sysroot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::host_root::{host_tree, HOSTNAME, RUNTIME_PID};
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::Path;
use std::process::Command;

const HEALTHY: &str = "hgx-h200x8-cx7x8-healthy";

/// The same fixture as a snapshot without live library facts (as `--static` on the host gives).
fn snapshot_tree(fixture_name: &str, dst: &Path) {
    copy_tree(&fixture(fixture_name), dst);
    std::fs::remove_file(dst.join("gdrdoctor/live.json")).unwrap();
}

fn report(args: &[&str]) -> (i32, Report, String) {
    // A host root is live: its counters would be judged against the last run's state file,
    // which the tests share. Each test that wants the state file names its own directory.
    let mut args = args.to_vec();
    if args[0] == "check" && !args.contains(&"--state-dir") {
        args.push("--no-state");
    }
    let (code, out, err) = run(&args);
    let r: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, r, err)
}

/// Findings that depend on the live-only facts of the process, which a host root and a
/// snapshot take from different places on purpose (`/dev/gdrdrv`: `lstat` through the host's
/// `/dev` mount, `gdrdoctor/dev-nodes.json` in a snapshot).
const LIVE_ONLY: &[&str] = &["mem.memlock", "gdrcopy.gdrdrv"];

#[test]
fn a_host_root_reads_like_the_snapshot_of_the_same_tree() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    let snap = t.path().join("snap");
    host_tree(HEALTHY, &host, "unlimited");
    snapshot_tree(HEALTHY, &snap);
    let (hc, h, _) = report(&[
        "check",
        "--static",
        "--no-policy",
        "--nccl-version",
        "2.28.9",
        "-f",
        "json",
        "--host-root",
        host.to_str().unwrap(),
    ]);
    let (sc, s, _) = report(&[
        "check",
        "--static",
        "--no-policy",
        "--nccl-version",
        "2.28.9",
        "-f",
        "json",
        "--sysroot",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(h.host.source, "host-root");
    assert_eq!(s.host.source, "sysroot");
    // The host's name from its /etc/hostname (the container's /proc/sys/kernel/hostname is
    // the pod's), its kernel from its procfs.
    assert_eq!(h.host.hostname.as_deref(), Some(HOSTNAME));
    assert_eq!(h.host.kernel, s.host.kernel);
    assert_eq!(hc, sc, "exit codes");
    // No live library facts on either side, each saying why in its own words.
    let same = |t: &str| {
        t.replace("not queried (--static)", "<none>").replace(
            "live-only fact; not in this snapshot (gdrdoctor/live.json)",
            "<none>",
        )
    };
    let keep = |r: &Report| {
        let mut v = comparable(&r.findings);
        for f in &mut v {
            f.3 = same(&f.3);
            f.5 = f.5.iter().map(|e| same(e)).collect();
            // The host's kern.log holds the lines a snapshot kept, not the count it scanned.
            if f.0.starts_with("kernel.") {
                f.3.clear();
                f.5.clear();
            }
        }
        v.retain(|f| !LIVE_ONLY.contains(&f.0.as_str()));
        // The device nodes are the one thing a host root cannot see unless the host's /dev is
        // mounted there too (the tree here has none): said, not judged; the snapshot recorded them.
        v.retain(|f| f.0 != "gdrcopy.gdrdrv");
        v
    };
    let dev = h
        .findings
        .iter()
        .find(|f| f.id == "gdrcopy.gdrdrv")
        .expect("gdrcopy.gdrdrv in the host root's report");
    assert_eq!(dev.status, Status::Skip, "{dev:?}");
    assert!(
        dev.message.contains("the host's /dev is not visible"),
        "{dev:?}"
    );
    let (hk, sk) = (keep(&h), keep(&s));
    for (a, b) in hk.iter().zip(&sk) {
        assert_eq!(a, b);
    }
    assert_eq!(hk.len(), sk.len());
    assert!(h.findings.iter().any(|f| f.id == "rdma.ports"));
    // RLIMIT_MEMLOCK is containerd's (the pods inherit it), read through the host's procfs:
    // not pid 1's, not the shim's, not the container's own.
    let m = h.findings.iter().find(|f| f.id == "mem.memlock").unwrap();
    assert_eq!(m.status.to_string(), "pass", "{m:?}");
    assert!(
        m.evidence[0]
            .source
            .starts_with(&format!("/proc/{RUNTIME_PID}/limits (containerd")),
        "{:?}",
        m.evidence
    );
}

#[test]
fn the_container_runtimes_memlock_limit_is_judged_and_its_absence_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "65536");
    let args = |h: &Path| {
        vec![
            "check".to_string(),
            "--static".into(),
            "--no-policy".into(),
            "--only".into(),
            "mem".into(),
            "-f".into(),
            "json".into(),
            "--host-root".into(),
            h.display().to_string(),
        ]
    };
    let a = args(&host);
    let (_, r, _) = report(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let m = &r.findings[0];
    assert_eq!(m.status.to_string(), "warn", "{m:?}");
    assert!(m.message.contains("64 KiB"), "{}", m.message);
    // No runtime in the host's procfs: the limit is unknown, never the container's own.
    for pid in [RUNTIME_PID, "4242"] {
        std::fs::remove_dir_all(host.join("proc").join(pid)).unwrap();
    }
    let (code, r, _) = report(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let m = &r.findings[0];
    assert_eq!(m.status.to_string(), "error", "{m:?}");
    assert!(
        m.evidence[0]
            .observed
            .contains("no containerd, crio, dockerd, slurmd process"),
        "{:?}",
        m.evidence
    );
    assert_eq!(code, 3);
}

#[test]
fn absolute_symlinks_resolve_inside_the_host_root() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "unlimited");
    // /etc/hostname as an absolute link (as /etc/hostname -> /run/... on some images): it must
    // be read under DIR, never from the container's own /.
    std::fs::create_dir_all(host.join("run/host")).unwrap();
    std::fs::write(host.join("run/host/hostname"), "inside-the-host-root\n").unwrap();
    std::fs::remove_file(host.join("etc/hostname")).unwrap();
    std::os::unix::fs::symlink("/run/host/hostname", host.join("etc/hostname")).unwrap();
    // Every sysfs class link made absolute: /sys/class/infiniband/X -> /sys/devices/...
    let ib = host.join("sys/class/infiniband");
    let mut relinked = 0;
    for e in std::fs::read_dir(&ib).unwrap() {
        let p = e.unwrap().path();
        let target = std::fs::read_link(&p).unwrap();
        let abs = ib.join(&target);
        let canon = std::fs::canonicalize(&abs).unwrap();
        let inside = canon
            .strip_prefix(std::fs::canonicalize(&host).unwrap())
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(Path::new("/").join(inside), &p).unwrap();
        relinked += 1;
    }
    assert!(relinked >= 8);
    // And a link that points at the container's own files: it stays inside DIR (absent there).
    std::fs::write(t.path().join("secret"), "container-only\n").unwrap();
    std::fs::remove_file(host.join("proc/sys/kernel/osrelease")).ok();
    std::os::unix::fs::symlink(
        t.path().join("secret"),
        host.join("proc/sys/kernel/osrelease"),
    )
    .unwrap();
    let (_, r, err) = report(&[
        "check",
        "--static",
        "--no-policy",
        "-f",
        "json",
        "--host-root",
        host.to_str().unwrap(),
    ]);
    assert_eq!(r.host.hostname.as_deref(), Some("inside-the-host-root"));
    assert_ne!(r.host.kernel.as_deref(), Some("container-only"), "{err}");
    let ports = r.findings.iter().find(|f| f.id == "rdma.ports").unwrap();
    assert_eq!(ports.status.to_string(), "pass", "{ports:?}");
}

#[test]
fn host_root_and_sysroot_are_exclusive_and_a_bare_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    for sub in ["check", "topo", "snapshot"] {
        let mut args = vec![sub];
        if sub == "snapshot" {
            args.push("out");
        }
        args.extend(["--host-root", "/host", "--sysroot", "/x"]);
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{sub}: {err}");
        assert!(err.contains("cannot be used with"), "{sub}: {err}");
    }
    // Not a host's /: no procfs or sysfs under it. A usage error naming what to mount.
    let (code, _, err) = run(&["check", "--host-root", t.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("proc") && err.contains("mount the host's /"),
        "{err}"
    );
    let (code, _, err) = run(&["check", "--host-root", "/nonexistent/host"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--host-root") && err.contains("/nonexistent/host"),
        "{err}"
    );
    // probe runs work in its own view of the node: a clear usage error.
    let (code, _, err) = run(&["probe", "--host-root", "/host"]);
    assert_eq!(code, 2);
    assert!(err.contains("probe does not take --host-root"), "{err}");
    // And the help teaches what to mount and what is read.
    let (_, help, _) = run(&["check", "--help"]);
    assert!(
        help.contains("--host-root <DIR>") && help.contains("hostPath"),
        "{help}"
    );
}

#[test]
fn live_libraries_the_container_lacks_are_skipped_naming_the_library() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "unlimited");
    let empty = t.path().join("no-libs");
    std::fs::create_dir_all(&empty).unwrap();
    // The container has no NVIDIA or verbs libraries (the toolkit did not inject them).
    let out = Command::new(bin())
        .args(["check", "--no-policy", "-f", "json", "--host-root"])
        .arg(&host)
        .env("GDRDOCTOR_LIB_DIR", &empty)
        .env("GDRDOCTOR_STATE_DIR", test_state_dir())
        .output()
        .unwrap();
    let r: Report = serde_json::from_slice(&out.stdout).unwrap();
    let mut needing = 0;
    for f in &r.findings {
        if f.message.contains("libnvidia-ml.so.1") || f.message.contains("libcuda.so.1") {
            needing += 1;
            assert_eq!(f.status.to_string(), "skip", "{f:?}");
        }
    }
    assert!(needing >= 3, "{:#?}", r.findings);
    // Nothing is an error for want of the container's libraries; nothing fails either.
    assert_eq!(
        (r.summary.error, r.summary.fail),
        (0, 0),
        "{:#?}",
        r.findings
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_snapshot_of_a_host_root_checks_like_the_host_root() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree("hgx-h200x8-cx7x8-port-down", &host, "unlimited");
    let snap = t.path().join("snap");
    let (code, _, err) = run(&[
        "snapshot",
        snap.to_str().unwrap(),
        "--host-root",
        host.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // Not the host's process table: only what the checks read.
    assert!(!snap.join("proc").join(RUNTIME_PID).exists());
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("gdrdoctor/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["hostname"], HOSTNAME);
    assert_eq!(meta["memlock"]["soft"], serde_json::Value::Null);
    let (hc, h, _) = report(&[
        "check",
        "--static",
        "--no-policy",
        "-f",
        "json",
        "--host-root",
        host.to_str().unwrap(),
    ]);
    let (sc, s, _) = report(&[
        "check",
        "--static",
        "--no-policy",
        "-f",
        "json",
        "--sysroot",
        snap.to_str().unwrap(),
    ]);
    assert_eq!((hc, sc), (1, 1));
    let fails = |r: &Report| {
        r.findings
            .iter()
            .filter(|f| f.status.to_string() == "fail")
            .map(|f| (f.id.clone(), f.subject.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(fails(&h), fails(&s));
    assert!(fails(&h).iter().any(|(id, _)| id == "rdma.ports"));
}

#[test]
fn topo_reads_the_host_root() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "unlimited");
    let snap = t.path().join("snap");
    snapshot_tree(HEALTHY, &snap);
    let (c1, a, e1) = run(&["topo", "-f", "json", "--host-root", host.to_str().unwrap()]);
    let (c2, b, e2) = run(&["topo", "-f", "json", "--sysroot", snap.to_str().unwrap()]);
    assert_eq!((c1, c2), (0, 0), "{e1}{e2}");
    // The verdict per pair, whatever words each source uses for the facts it lacks.
    let pairs = |s: &str| {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["gpu"].to_string(),
                    p["nic"].to_string(),
                    p["path"].to_string(),
                    p["enabled"].to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(pairs(&a).len(), 64);
    assert_eq!(pairs(&a), pairs(&b));
    // The picture's header names the host and the kind of source.
    let (_, svg, _) = run(&["topo", "-f", "svg", "--host-root", host.to_str().unwrap()]);
    assert!(svg.contains(&format!("{HOSTNAME} (host root)")), "{svg}");
}

/// The host's counters through the mount are live: `--interval` reads them twice (the growth
/// is judged over the interval), and the state file of periodic runs works as on the host.
#[test]
fn interval_and_the_state_file_work_under_a_host_root() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    let state = t.path().join("state");
    host_tree(HEALTHY, &host, "unlimited");
    let base = [
        "check",
        "--static",
        "--no-policy",
        "--only",
        "counters",
        "-f",
        "json",
        "--state-dir",
        state.to_str().unwrap(),
        "--host-root",
        host.to_str().unwrap(),
    ];
    let growth = |r: &Report| {
        r.findings
            .iter()
            .flat_map(|f| f.evidence.iter())
            .any(|e| e.source.contains("growth over") || e.observed.contains("growth over"))
    };
    let mut a = base.to_vec();
    a.extend(["--interval", "1s"]);
    let (code, r, err) = report(&a);
    assert_ne!(code, 2, "{err}");
    assert!(
        growth(&r),
        "the counters were judged over the interval: {r:?}"
    );
    // Two periodic runs: the second judges the growth since the first, from the state file.
    let (c1, _, e1) = report(&base);
    assert_ne!(c1, 2, "{e1}");
    assert!(state.join("counters.json").is_file(), "{e1}");
    // A baseline younger than a second is not a rate's start (state::counters::MIN_AGE_MS).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (c2, r2, e2) = report(&base);
    assert_ne!(c2, 2, "{e2}");
    assert!(
        growth(&r2),
        "the second run used the first's counters: {r2:?}"
    );
}

/// `--interval` judges the node as it is after the interval, read as the first time: a NIC
/// that leaves the bus while gdrdoctor waits is a lost NIC named by its PCI function (not a
/// port whose counters could not be read again from the first reading's list), and the second
/// reading keeps what the command line asked of the first (`--nccl-version`).
#[test]
fn the_second_reading_of_an_interval_is_the_whole_node_as_it_is_then() {
    use gdrdoctor::collect::live::{Libraries, Options};
    use gdrdoctor::source::Location;
    use gdrdoctor::state::counters::{RateOptions, Rates};
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    host_tree(HEALTHY, &host, "unlimited");
    let read = || {
        gdrdoctor::collect::load_node_with(
            Location::HostRoot(&host),
            Libraries::Skip,
            &Options::default(),
        )
    };
    let (src, mut node) = read().unwrap();
    let opts = RateOptions {
        interval: Some(std::time::Duration::from_millis(1)),
        state_dir: None,
        families: gdrdoctor_checks::counters::families_of(|_| true),
    };
    // mlx5_3's function (0000:49:00.0) is hot-removed during the interval.
    let again = || {
        common::plant::remove_function(&host, "0000:49:00.0");
        read().map(|(_, n)| n)
    };
    // A second reading that fails fails the run, saying which reading.
    let mut n2 = node.clone();
    let e = Rates::start(
        src.origin,
        &mut n2,
        &opts,
        &|| Err("boom".to_string()),
        None,
    )
    .err()
    .unwrap();
    assert!(
        e.starts_with("--interval: reading the node again after") && e.ends_with("boom"),
        "{e}"
    );
    Rates::start(src.origin, &mut node, &opts, &again, None).unwrap();
    assert!(
        node.rdma
            .get()
            .is_some_and(|d| d.iter().all(|d| d.name != "mlx5_3")),
        "the second reading lists the RDMA devices of now"
    );
    let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
    let lost: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "counters.ib-port" && f.subject.starts_with("mlx5_3"))
        .collect();
    assert!(
        !lost.is_empty()
            && lost.iter().all(|f| f.status == Status::Error
                && f.message
                    .contains("0000:49:00.0 is no longer on the PCI bus")),
        "{lost:#?}"
    );
    let fail_on = gdrdoctor_checks::RunOptions::default().fail_on;
    assert_ne!(
        gdrdoctor_checks::report::exit_code(&r.findings, fail_on, false),
        0
    );
    // The command line: the second reading is made as the first was.
    let h = host.to_str().unwrap();
    let args = [
        "check",
        "--no-policy",
        "-f",
        "json",
        "--only",
        "gdr.gpu,counters",
        "--host-root",
        h,
        "--nccl-version",
        "2.11.4",
    ];
    let (code, r, err) = report(&[&args[..], &["--interval", "1s"]].concat());
    assert_ne!(code, 2, "{err}");
    let rules = r
        .findings
        .iter()
        .filter(|f| f.id == "gdr.gpu")
        .flat_map(|f| f.evidence.iter())
        .filter(|e| {
            e.observed.contains("--nccl-version 2.11.4")
                || e.source.contains("--nccl-version 2.11.4")
        })
        .count();
    assert!(
        rules > 0,
        "--nccl-version held for the second reading: {r:#?}"
    );
    // And what the container's libraries cannot see of the host is said, not judged, in the
    // second reading too (it was judged: every GPU "gdr off", libibverbs listing no device).
    let verdicts = |r: &Report| {
        r.findings
            .iter()
            .filter(|f| f.id == "gdr.gpu")
            .map(|f| (f.subject.clone(), f.status, f.message.clone()))
            .collect::<Vec<_>>()
    };
    let (_, once, _) = report(&args);
    assert_eq!(verdicts(&r), verdicts(&once));
    assert_eq!(verdicts(&r).len(), 8);
}
