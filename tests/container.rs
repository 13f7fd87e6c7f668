//! `check --in-container` in a real container (issue 39 item 1): bubblewrap runs the built
//! binary in new mount (and user) namespaces with what container runtimes get wrong planted:
//! the RDMA device node missing (sysfs, as inside every container, says the kernel has
//! `uverbs0`), or present but refused by a device cgroup (EPERM, where a cgroup v1 devices
//! controller can be made), every capability dropped (`--cap-drop ALL`: no CAP_IPC_LOCK), a
//! 64 KiB memlock limit (`prlimit`), a 1 MiB `/dev/shm` (a tmpfs of that size) and
//! `NCCL_IB_DISABLE=1`; then a healthy one (the device node present and openable, capabilities
//! kept, memlock unlimited, a 2 GiB `/dev/shm`). The findings are asserted from the JSON report.
//! `--compare-host` compares the broken container with the host's own report.
//!
//! Needs `bwrap` (Debian: `apt-get install bubblewrap`) and `prlimit` (util-linux); skips
//! visibly without them (`GDRDOCTOR_TEST_REQUIRE_ALL=1` makes that a failure, as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::require::{runs, skip};
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::{Path, PathBuf};
use std::process::Command;

const GROUP: &str = "container (bubblewrap)";

fn tools() -> bool {
    for (p, args, pkg) in [
        ("bwrap", &["--version"][..], "apt-get install bubblewrap"),
        ("prlimit", &["--version"][..], "apt-get install util-linux"),
    ] {
        if let Err(e) = runs(p, args) {
            skip(GROUP, &e, pkg);
            return false;
        }
    }
    // bwrap may be installed where namespaces are not allowed (an unprivileged container).
    if let Err(e) = runs("bwrap", &["--dev-bind", "/", "/", "--", "true"]) {
        skip(
            GROUP,
            &format!("bwrap cannot create a sandbox here: {e}"),
            "run as root, or allow unprivileged user namespaces (kernel.unprivileged_userns_clone=1)",
        );
        return false;
    }
    true
}

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("container-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fake `/sys/class/infiniband_verbs`: the kernel has uverbs0 serving mlx5_0.
fn verbs_sysfs(d: &Path) -> PathBuf {
    let v = d.join("infiniband_verbs");
    std::fs::create_dir_all(v.join("uverbs0")).unwrap();
    std::fs::write(v.join("uverbs0/ibdev"), "mlx5_0\n").unwrap();
    v
}

/// A devices cgroup (v1) that refuses the uverbs major (231), or `None` where it cannot be made.
struct DenyCgroup(PathBuf);

impl DenyCgroup {
    fn new(tag: &str) -> Option<Self> {
        let base = Path::new("/sys/fs/cgroup/devices");
        if !base.join("devices.deny").exists() {
            return None;
        }
        let g = base.join(format!("gdrdoctor-test-{tag}-{}", std::process::id()));
        std::fs::create_dir(&g).ok()?;
        if std::fs::write(g.join("devices.deny"), "c 231:* rwm").is_err() {
            let _ = std::fs::remove_dir(&g);
            return None;
        }
        Some(DenyCgroup(g))
    }
}

impl Drop for DenyCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Run `gdrdoctor check --in-container ...` under `prlimit --memlock=<memlock>` and bwrap with
/// `sandbox` arguments (after `--dev-bind / / --dev /dev --tmpfs /sys/class`), in `cgroup`
/// when given; the JSON report and the exit code.
fn in_container(
    memlock: Option<&str>,
    sandbox: &[String],
    cgroup: Option<&DenyCgroup>,
    extra: &[&str],
) -> (Report, i32, String) {
    let mut argv: Vec<String> = Vec::new();
    if let Some(m) = memlock {
        argv.extend(["prlimit".to_string(), format!("--memlock={m}")]);
    }
    argv.extend([
        "bwrap".into(),
        "--dev-bind".into(),
        "/".into(),
        "/".into(),
        "--dev".into(),
        "/dev".into(),
        "--tmpfs".into(),
        "/sys/class".into(),
    ]);
    argv.extend(sandbox.iter().cloned());
    argv.extend(
        [
            "--",
            bin(),
            "check",
            "--in-container",
            "--static",
            "--no-state",
            "--no-policy",
            "--format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    argv.extend(extra.iter().map(|s| s.to_string()));
    let mut cmd = match cgroup {
        // The shell joins the cgroup, then becomes prlimit (and bwrap, and gdrdoctor).
        Some(g) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!(
                    "echo $$ > '{}/cgroup.procs' && exec \"$@\"",
                    g.0.display()
                ))
                .arg("sh")
                .args(&argv);
            c
        }
        None => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    let out = cmd
        .env_remove("NCCL_IB_DISABLE")
        .env("GDRDOCTOR_STATE_DIR", test_state_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a report ({e}): stdout {stdout}\nstderr {stderr}"));
    (report, out.status.code().unwrap_or(-1), stderr)
}

fn finding<'a>(r: &'a Report, id: &str, subject: &str) -> &'a gdrdoctor_checks::report::Finding {
    r.findings
        .iter()
        .find(|f| f.id == id && f.subject == subject)
        .unwrap_or_else(|| panic!("no {id} {subject} in {:#?}", r.findings))
}

fn s(x: &str) -> String {
    x.to_string()
}

/// The broken container: every defect planted at once, each found with its reason.
#[test]
fn a_broken_container_fails_each_planted_defect_with_its_reason() {
    if !tools() {
        return;
    }
    let d = scratch("broken");
    let verbs = verbs_sysfs(&d);
    // The image's own NCCL (older than the host's) and a net plugin, on its LD_LIBRARY_PATH.
    let lib = d.join("image-lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(
        lib.join("libnccl.so.2"),
        b"\x7fnot-elf\0NCCL version %s\0NCCL version 2.18.3+cuda12.2\0",
    )
    .unwrap();
    std::fs::write(lib.join("libnccl-net-ofi.so"), b"").unwrap();
    let sandbox = vec![
        s("--setenv"),
        s("LD_LIBRARY_PATH"),
        lib.display().to_string(),
        s("--setenv"),
        s("NCCL_NET_PLUGIN"),
        s("ofi"),
        s("--setenv"),
        s("NCCL_IB_HCA"),
        s("mlx5_0"),
        s("--bind"),
        verbs.display().to_string(),
        s("/sys/class/infiniband_verbs"),
        s("--size"),
        s("1048576"),
        s("--tmpfs"),
        s("/dev/shm"),
        s("--cap-drop"),
        s("ALL"),
        s("--setenv"),
        s("NCCL_IB_DISABLE"),
        s("1"),
    ];
    let (r, code, err) = in_container(Some("65536:65536"), &sandbox, None, &[]);
    assert_eq!(code, 1, "{err}");
    // uverbs0 exists in the kernel (sysfs) but not in the container's /dev.
    let dev = finding(&r, "container.devices", "/dev/infiniband");
    assert_eq!(dev.status, Status::Fail, "{dev:#?}");
    assert!(
        dev.message.contains("falls back to sockets"),
        "{}",
        dev.message
    );
    assert!(
        dev.evidence[0]
            .observed
            .contains("/dev/infiniband/uverbs0: missing (no such file)"),
        "{:#?}",
        dev.evidence
    );
    assert!(dev
        .evidence
        .iter()
        .any(|e| e.observed == "uverbs0 -> mlx5_0"));
    // --cap-drop ALL and a 64 KiB limit.
    let lock = finding(&r, "container.ipc-lock", "node");
    assert_eq!(lock.status, Status::Fail, "{lock:#?}");
    assert!(
        lock.message
            .contains("no CAP_IPC_LOCK and RLIMIT_MEMLOCK is 64 KiB"),
        "{}",
        lock.message
    );
    assert_eq!(
        lock.evidence[0].observed,
        "CapEff 0000000000000000: CAP_IPC_LOCK not set"
    );
    // A 1 MiB /dev/shm.
    let shm = finding(&r, "container.shm", "/dev/shm");
    assert_eq!(shm.status, Status::Fail, "{shm:#?}");
    assert!(
        shm.message.starts_with("/dev/shm is only 1 MiB"),
        "{}",
        shm.message
    );
    // NCCL_IB_DISABLE=1 in the container's environment.
    let nccl = finding(&r, "container.nccl", "node");
    assert_eq!(nccl.status, Status::Fail, "{nccl:#?}");
    assert!(
        nccl.message.contains("NCCL_IB_DISABLE=1"),
        "{}",
        nccl.message
    );
    // NCCL_IB_HCA names the HCA whose node is missing here.
    assert!(
        nccl.message
            .contains("NCCL_IB_HCA=mlx5_0: mlx5_0 not usable in this container (usable: none)"),
        "{}",
        nccl.message
    );
    // The loader finds the image's NCCL 2.18.3 and its plugin through LD_LIBRARY_PATH.
    let ev: Vec<&str> = nccl.evidence.iter().map(|e| e.observed.as_str()).collect();
    let want_lib = format!(
        "{}/libnccl.so.2 2.18.3 (LD_LIBRARY_PATH): NCCL's GDR rules of that version apply (gdr.gpu)",
        lib.display()
    );
    assert!(ev.contains(&want_lib.as_str()), "{ev:?}");
    let want_plugin = format!("{}/libnccl-net-ofi.so (LD_LIBRARY_PATH)", lib.display());
    assert!(ev.contains(&want_plugin.as_str()), "{ev:?}");
    // The memlock limit also shows in the host-level check, as the job would get it.
    assert_eq!(finding(&r, "mem.memlock", "node").status, Status::Warn);
}

/// The same RDMA device node present but not openable: refused by a device cgroup (EPERM)
/// where a v1 devices controller can be made, else by the kernel (no driver behind major 231
/// on this machine): never "present" is enough.
#[test]
fn a_device_node_that_is_there_but_cannot_be_opened_fails() {
    if !tools() {
        return;
    }
    let d = scratch("refused");
    let verbs = verbs_sysfs(&d);
    let node = d.join("uverbs0");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["c", "231", "192"])
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        skip(
            "container (device cgroup)",
            "mknod of a character device failed (not root)",
            "run the tests as root, as CI does",
        );
        return;
    }
    let sandbox = vec![
        s("--bind"),
        verbs.display().to_string(),
        s("/sys/class/infiniband_verbs"),
        s("--dev-bind"),
        node.display().to_string(),
        s("/dev/infiniband/uverbs0"),
    ];
    let cg = DenyCgroup::new("refused");
    let (r, _, err) = in_container(
        None,
        &sandbox,
        cg.as_ref(),
        &["--only", "container.devices"],
    );
    let dev = finding(&r, "container.devices", "/dev/infiniband");
    assert_eq!(dev.status, Status::Fail, "{dev:#?}\n{err}");
    let seen = &dev.evidence[0].observed;
    assert!(
        seen.contains("/dev/infiniband/uverbs0: present, open failed"),
        "{seen}"
    );
    if cg.is_some() {
        assert!(
            seen.contains("EPERM: the container's device cgroup denies it"),
            "{seen}"
        );
    }
}

/// A healthy container: the node opens (a character device that any kernel opens), the
/// capabilities are kept (with them CAP_IPC_LOCK, when the test runs with it) and /dev/shm is
/// 2 GiB.
#[test]
fn a_healthy_container_passes() {
    if !tools() {
        return;
    }
    let d = scratch("healthy");
    let verbs = verbs_sysfs(&d);
    let sandbox = vec![
        s("--bind"),
        verbs.display().to_string(),
        s("/sys/class/infiniband_verbs"),
        s("--dev-bind"),
        s("/dev/null"),
        s("/dev/infiniband/uverbs0"),
        s("--dev-bind"),
        s("/dev/null"),
        s("/dev/infiniband/rdma_cm"),
        s("--setenv"),
        s("NCCL_IB_HCA"),
        s("=mlx5_0:1"),
        s("--size"),
        format!("{}", 2u64 << 30),
        s("--tmpfs"),
        s("/dev/shm"),
    ];
    let (r, _, err) = in_container(None, &sandbox, None, &["--only", "container"]);
    let dev = finding(&r, "container.devices", "/dev/infiniband");
    assert_eq!(dev.status, Status::Pass, "{dev:#?}\n{err}");
    assert!(dev.evidence[0]
        .observed
        .contains("/dev/infiniband/uverbs0: present, opened O_RDWR"));
    let ipc_lock = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|x| u64::from_str_radix(x.trim(), 16).ok())
        })
        .is_some_and(|c| c & (1 << 14) != 0);
    if ipc_lock {
        assert_eq!(
            finding(&r, "container.ipc-lock", "node").status,
            Status::Pass
        );
    }
    let shm = finding(&r, "container.shm", "/dev/shm");
    assert_eq!(shm.status, Status::Pass, "{shm:#?}");
    assert_eq!(shm.message, "/dev/shm is 2 GiB");
    let nccl = finding(&r, "container.nccl", "node");
    assert_ne!(nccl.status, Status::Fail, "{nccl:#?}");
    assert!(!nccl.message.contains("NCCL_IB_HCA"), "{}", nccl.message);
    // Without --compare-host, the comparison says how to ask for it.
    assert_eq!(
        finding(&r, "container.host-diff", "node").status,
        Status::Skip
    );
}

/// `--compare-host`: the host's own report (gdrdoctor outside the sandbox) against the broken
/// container's: the differences, and which of them cost GDR.
#[test]
fn compare_host_names_what_the_container_lost() {
    if !tools() {
        return;
    }
    let d = scratch("compare");
    let host = d.join("host.json");
    let (code, _, err) = run(&[
        "check",
        "--static",
        "--no-state",
        "--no-policy",
        "--format",
        "json",
        "-o",
        host.to_str().unwrap(),
    ]);
    assert!(code != 2, "{err}");
    let sandbox = vec![
        s("--size"),
        s("1048576"),
        s("--tmpfs"),
        s("/dev/shm"),
        s("--cap-drop"),
        s("ALL"),
    ];
    let (r, code, err) = in_container(
        Some("65536:65536"),
        &sandbox,
        None,
        &["--compare-host", host.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    let diff: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "container.host-diff")
        .collect();
    let lock = diff
        .iter()
        .find(|f| f.subject == "container.ipc-lock node")
        .unwrap_or_else(|| panic!("{diff:#?}"));
    assert_eq!(lock.status, Status::Fail);
    assert!(
        lock.message.contains("(costs gpudirect rdma)"),
        "{}",
        lock.message
    );
    let shm = diff
        .iter()
        .find(|f| f.subject == "container.shm /dev/shm")
        .unwrap_or_else(|| panic!("{diff:#?}"));
    assert_eq!(shm.status, Status::Warn, "{shm:#?}");
    // The host's memlock limit, whatever it is here, is not a 64 KiB one: worse in the
    // container only if the host's was unlimited.
    let host_report: Report =
        serde_json::from_str(&std::fs::read_to_string(&host).unwrap()).unwrap();
    if host_report
        .findings
        .iter()
        .any(|f| f.id == "mem.memlock" && f.status == Status::Pass)
    {
        assert!(
            diff.iter().any(|f| f.subject == "mem.memlock node"),
            "{diff:#?}"
        );
    }
    // Summary counted again with the comparison's findings in it.
    assert_eq!(
        r.summary.fail,
        r.findings
            .iter()
            .filter(|f| f.status == Status::Fail)
            .count()
    );
    // A file that is not a report: exit 2, the path named.
    let bogus = d.join("bogus.json");
    std::fs::write(&bogus, "{}").unwrap();
    let (code, _, err) = run(&[
        "check",
        "--in-container",
        "--static",
        "--no-state",
        "--no-policy",
        "--compare-host",
        bogus.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bogus.json") && err.contains("not a gdrdoctor report"),
        "{err}"
    );
}

/// `--compare-host` on a run without a container view (a snapshot here; the live host without
/// --in-container is the same) is refused, naming why: "nothing is worse in this container"
/// would be a pass about a container nobody looked at.
#[test]
fn compare_host_without_a_container_view_is_refused_not_passed() {
    let d = tempfile::tempdir().unwrap();
    let host = d.path().join("host.json");
    let node = fixture("hgx-h200x8-cx7x8-healthy");
    let (code, out, _) = run(&[
        "check",
        "--sysroot",
        node.to_str().unwrap(),
        "-f",
        "json",
        "-o",
        host.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{out}");
    let (code, out, err) = run(&[
        "check",
        "--sysroot",
        node.to_str().unwrap(),
        "--only",
        "container",
        "--compare-host",
        host.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("no container view") && err.contains("--in-container"),
        "{err}"
    );
    assert!(!out.contains("PASS"), "{out}");
}
