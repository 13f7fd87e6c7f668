//! The probe framework without a GPU: the worker runner's deadline, crash handling and result
//! protocol, and `gdrdoctor probe` on a node without GPUs or libcuda.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// Start `gdrdoctor __worker TASK` by hand with `request` on stdin; its exit status, reply line
/// and raw stdout lines.
fn worker(
    task: &str,
    request: &str,
    deadline_ms: u64,
) -> (String, Option<serde_json::Value>, Vec<String>, Duration) {
    let start = Instant::now();
    let mut child = Command::new(bin())
        .arg("__worker")
        .arg(task)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(request.as_bytes());
    }
    let deadline = Duration::from_millis(deadline_ms);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break format!("{s}");
        }
        if start.elapsed() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break "killed".into();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    let result = out
        .lines()
        .find_map(|l| l.strip_prefix("GDRDOCTOR-RESULT "))
        .map(|j| serde_json::from_str(j).unwrap());
    let raw = out
        .lines()
        .filter(|l| !l.starts_with("GDRDOCTOR-RESULT "))
        .map(str::to_string)
        .collect();
    (status, result, raw, start.elapsed())
}

fn request(task: &str, params: serde_json::Value) -> String {
    serde_json::json!({"protocol": 1, "task": task, "params": params}).to_string()
}

#[test]
fn worker_protocol_result_and_raw_lines() {
    let (st, r, _, _) = worker(
        "selftest-echo",
        &request("selftest-echo", serde_json::json!(["a", "b"])),
        10_000,
    );
    assert!(st.contains("exit status: 0"), "{st}");
    let r = r.unwrap();
    assert_eq!(
        (r["protocol"].as_u64(), r["task"].as_str()),
        (Some(1), Some("selftest-echo"))
    );
    assert_eq!(r["outcome"]["ok"]["params"], serde_json::json!(["a", "b"]));
    let (st, r, raw, _) = worker(
        "selftest-crash",
        &request("selftest-crash", serde_json::Value::Null),
        10_000,
    );
    assert!(st.contains("signal"), "{st}");
    assert!(r.is_none());
    assert_eq!(raw, vec!["a line of raw output before the crash"]);
    // Typed errors: unknown task, another protocol, a request that is not one, parameters of
    // the wrong shape.
    let bad = |task: &str, body: &str| {
        let (st, r, _, _) = worker(task, body, 10_000);
        assert!(!st.contains("exit status: 0"), "{st}");
        let e = r.unwrap()["outcome"]["err"].clone();
        assert_eq!(e["kind"], "bad-request", "{e}");
        e["detail"].as_str().unwrap().to_string()
    };
    assert!(bad(
        "no-such-task",
        &request("no-such-task", serde_json::Value::Null)
    )
    .contains("unknown worker task"));
    assert!(bad(
        "selftest-echo",
        r#"{"protocol": 999, "task": "selftest-echo"}"#
    )
    .contains("999"));
    assert!(bad("selftest-echo", "not json").contains("expected"));
    assert!(bad(
        "selftest-sleep",
        &request("selftest-sleep", serde_json::json!("soon"))
    )
    .contains("parameters"));
    // A request for another task than the one the worker was started for.
    assert!(bad(
        "selftest-echo",
        &request("selftest-sleep", serde_json::json!(1))
    )
    .contains("selftest-sleep"));
}

#[test]
fn runner_kills_a_worker_past_its_deadline_and_reports_a_crash_or_garbage() {
    use gdrdoctor::worker::protocol::Request;
    use gdrdoctor::worker::runner::{run_with, Outcome, RunFailure};
    let exe = std::path::Path::new(bin());
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let on = |m: &str| {
        if !m.is_empty() {
            seen.lock().unwrap().push(m.to_string());
        }
    };
    let req = |task: &str, p: serde_json::Value| Request::new(task, &p).unwrap();
    // A worker that would sleep 30 s is killed at the 1.5 s deadline.
    let t0 = Instant::now();
    let r = run_with(
        exe,
        &req("selftest-sleep", serde_json::json!(30)),
        Duration::from_millis(1500),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let f = r.failure().unwrap();
    assert!(matches!(f, RunFailure::TimedOut { .. }), "{f:?}");
    assert!(
        f.to_string().contains("did not finish within its deadline"),
        "{f}"
    );
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["sleeping"],
        "progress lines reach the parent"
    );
    // A crash is a signal, with the raw output kept.
    let r = run_with(
        exe,
        &req("selftest-crash", serde_json::Value::Null),
        Duration::from_secs(10),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Signaled(6));
    assert_eq!(r.raw, vec!["a line of raw output before the crash"]);
    assert!(r.failure().unwrap().to_string().contains("signal 6"));
    // A result line that is not a reply is garbage, named as such, never data.
    let r = run_with(
        exe,
        &req("selftest-garbage", serde_json::Value::Null),
        Duration::from_secs(10),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0));
    let f = r.failure().unwrap();
    assert!(matches!(f, RunFailure::Garbage { .. }), "{f:?}");
    assert!(f.to_string().contains("unreadable result"), "{f}");
    assert!(r.output::<serde_json::Value>().is_err());
    // The reply is parsed; nothing else is taken for it; a reply of the wrong shape is an error.
    let r = run_with(
        exe,
        &req("selftest-echo", serde_json::json!(["x"])),
        Duration::from_secs(10),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert!(r.failure().is_none());
    assert_eq!(r.value().unwrap()["params"][0], "x");
    let shape = r.output::<Vec<u32>>().unwrap_err();
    assert!(matches!(shape, RunFailure::Garbage { .. }), "{shape:?}");
    // A worker error is typed.
    let r = run_with(
        exe,
        &req("no-such-task", serde_json::Value::Null),
        Duration::from_secs(10),
        &on,
    )
    .unwrap();
    assert!(r.failure().is_none());
    assert!(matches!(
        r.output::<serde_json::Value>(),
        Err(RunFailure::Worker(_))
    ));
}

/// Processes whose parent is `ppid` and whose command line holds `__worker`.
fn workers_of(ppid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let parent: Option<u32> = after.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if parent == Some(ppid) && String::from_utf8_lossy(&cmd).contains("__worker") {
            v.push(pid);
        }
    }
    v
}

/// Gone, or a zombie nobody reaped yet (dead all the same).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .map(|x| x.1.trim_start().starts_with('Z'))
            .unwrap_or(true),
    }
}

/// `gdrdoctor check` with a worker that takes a minute (the test hook), and that worker's pid.
/// The caller signals and waits for the parent.
#[allow(clippy::zombie_processes)]
fn parent_with_a_running_worker() -> (std::process::Child, u32) {
    let mut cmd = Command::new(bin());
    cmd.args(["check", "--format", "json"])
        .env("GDRDOCTOR_TEST_WORKER_DELAY_MS", "60000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // The termination signals at their defaults, whatever this test inherited (CI once ran
    // it in the background, SIGINT ignored: the parent kept running and exited 1).
    let mut child = with_default_termination_signals(&mut cmd).spawn().unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(&w) = workers_of(child.id()).first() {
            return (child, w);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no worker appeared");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_dead(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if dead(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Regression (issue 18 item 1): a signal to the parent used to leave the worker running under
/// PID 1 with no deadline.
#[test]
fn a_terminating_signal_to_the_parent_kills_its_worker_and_exits_128_plus_the_signal() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let (mut parent, w) = parent_with_a_running_worker();
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        unsafe { libc::kill(parent.id() as i32, sig) };
        let st = parent.wait().unwrap();
        assert_eq!(st.code(), Some(128 + sig), "signal {sig}: {st}");
        assert!(wait_dead(w), "signal {sig}: worker {w} outlived its parent");
    }
}

/// A parent that cannot forward anything (SIGKILL) still takes its worker with it: the worker
/// asked for the parent-death signal.
#[test]
fn a_killed_parent_takes_its_worker_with_it() {
    let (mut parent, w) = parent_with_a_running_worker();
    parent.kill().unwrap();
    parent.wait().unwrap();
    assert!(wait_dead(w), "worker {w} outlived its SIGKILLed parent");
}

/// A worker whose parent is not the one named in its environment leaves at once.
#[test]
fn a_worker_started_for_another_parent_exits_without_running() {
    let out = Command::new(bin())
        .args(["__worker", "selftest-sleep"])
        .env("GDRDOCTOR_WORKER_PARENT", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(out.stdout.is_empty());
}

/// A probe that cannot run here (no GPU on the bus, no driver) is an incomplete run: exit 3,
/// never 0, unless the user accepts it with --allow-incomplete (issue 11 item 7: a CI preflight
/// must not pass a GPU node whose GPUs vanished).
#[test]
fn probe_that_cannot_run_is_incomplete_unless_allowed() {
    let (code, out, err) = run(&["probe", "--registration", "--format", "json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let f = &v["findings"][0];
    assert_eq!(f["id"], "probe.cuda");
    match f["status"].as_str().unwrap() {
        // No GPU here, or a GPU without libcuda: incomplete.
        "error" => {
            assert_eq!(code, 3, "{f}");
            assert_eq!(v["summary"]["exit_code"], 3);
            assert!(
                f["remediation"].as_str().is_some_and(|r| !r.is_empty()),
                "{f}"
            );
            let (code, _, _) = run(&["probe", "--registration", "--allow-incomplete"]);
            assert_eq!(code, 0, "--allow-incomplete accepts it");
        }
        "pass" => {} // a GPU machine
        s => panic!("unexpected {s}: {f}"),
    }
    let (code, _, err) = run(&["probe"]);
    assert_eq!(code, 2);
    assert!(err.contains("--registration"), "{err}");
}

#[test]
fn check_queries_live_libraries_in_a_worker_and_static_skips_them() {
    let (_, out, _) = run(&[
        "check",
        "--format",
        "json",
        "--only",
        "gpu.gdr-support,gpu.persistence",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!v["findings"].as_array().unwrap().is_empty());
    let (_, out, _) = run(&[
        "check",
        "--static",
        "--format",
        "json",
        "--only",
        "gpu.gdr-support",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let st = v["findings"][0]["status"].as_str().unwrap().to_string();
    assert!(st == "skip", "--static never queries the libraries: {st}");
}

#[test]
fn doorbell_probe_without_a_gpu_skips_and_flags_are_validated() {
    let (code, out, err) = run(&["probe", "--doorbell", "--format", "json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let ids: Vec<(&str, &str)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    if ids.contains(&("probe.cuda", "error")) && ids.len() == 2 {
        // No GPU: both the CUDA side and the NIC side say why; the run is incomplete.
        assert_eq!(code, 3, "{ids:?}");
        assert!(ids.contains(&("probe.doorbell-mlx5", "skip")), "{ids:?}");
    } else if ids.iter().any(|(_, s)| *s == "error") {
        assert_eq!(code, 3, "{ids:?}");
    }
    // Flags that only make sense with --doorbell are usage errors without it.
    let (code, _, err) = run(&["probe", "--hang", "--allow-mmio-write"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--doorbell"), "{err}");
    let (code, _, err) = run(&["probe", "--registration", "--lspci", "nic.txt"]);
    assert_eq!(code, 2, "{err}");
    // And `probe` alone names all three probes.
    let (code, _, err) = run(&["probe"]);
    assert_eq!(code, 2);
    assert!(err.contains("--doorbell"), "{err}");
}

/// The H200 capture of `probe --doorbell`: its raw worker output, fed through today's finding
/// logic, gives the findings that were reported on the machine.
#[test]
fn h200_doorbell_capture_rederives_its_findings() {
    for name in ["h200-probe-doorbell.json", "h200-probe-doorbell-ptx.json"] {
        let path = repo().join("fixtures/reports").join(name);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let raw: gdrdoctor::probe::doorbell::DoorbellOutput =
            serde_json::from_value(report["probe"]["doorbell"].clone()).unwrap();
        assert!(raw.flavours.iter().all(|f| f.rings >= 10_000), "{name}");
        assert_eq!(raw.layouts.len(), 7, "{name}");
        let got = gdrdoctor::probe::doorbell::findings(&raw);
        let statuses: Vec<(String, String)> = got
            .iter()
            .map(|f| (f.id.clone(), format!("{:?}", f.status).to_lowercase()))
            .collect();
        let want: Vec<(String, String)> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["id"].as_str().unwrap().to_string(),
                    f["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(statuses, want, "{name}");
        // The carried PTX (NVRTC 12.0) has no st.mmio: the probe says it ran st.release.sys.
        if name.contains("ptx") {
            assert!(!raw.st_mmio_native);
            let ev = &got[1].evidence;
            assert!(
                ev.iter().any(|e| e.observed.contains("no st.mmio")),
                "{ev:?}"
            );
        }
    }
}

/// Every captured H200 probe report (fixtures/reports: registration, hang, hang with every
/// injection, doorbell with NVRTC and with the carried PTX, p2p) replays through today's
/// verdicts to exactly the findings the machine reported: ids, statuses, subjects, messages,
/// evidence and fixes. The node is the same VM's snapshot.
#[test]
fn h200_probe_captures_replay_to_their_findings() {
    let at = fixture("h200-vm-live");
    let src = gdrdoctor::source::Source::open(gdrdoctor::source::Location::Sysroot(&at)).unwrap();
    let node = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
    let mut seen = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(repo().join("fixtures/reports")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let probe = &report["probe"];
        let got = gdrdoctor::probe::replay(&node, probe)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let got = serde_json::to_value(&got).unwrap();
        let want = &report["findings"];
        assert!(!want.as_array().unwrap().is_empty(), "{}", path.display());
        if &got != want {
            let (g, w) = (got.as_array().unwrap(), want.as_array().unwrap());
            for (i, (a, b)) in g.iter().zip(w.iter()).enumerate() {
                assert_eq!(a, b, "{}: finding {i}", path.display());
            }
            assert_eq!(g.len(), w.len(), "{}: number of findings", path.display());
        }
        seen.extend(probe.as_object().unwrap().keys().cloned());
    }
    // Every registered probe has a capture to replay, except those whose first capture is
    // still to be taken on a GPU machine (remove the name when its report is in
    // fixtures/reports/). `nccl` was captured on one H200 (scripts/gpu-nccl.sh: the system
    // NCCL 2.28.3 and PyTorch's 2.28.9); a two-GPU capture is still to come (issue 15).
    const AWAITING_CAPTURE: &[&str] = &[];
    for p in gdrdoctor::probe::PROBES {
        if AWAITING_CAPTURE.contains(&p.name) {
            assert!(
                !seen.contains(p.name),
                "probe.{} has a capture now: take it off AWAITING_CAPTURE",
                p.name
            );
            continue;
        }
        assert!(seen.contains(p.name), "no capture replays probe.{}", p.name);
    }
}

/// A replay is exact, so it fails when a verdict changes: a doctored capture gives other findings.
#[test]
fn a_changed_record_changes_the_replayed_findings() {
    let node = gdrdoctor_checks::testing::empty_node();
    let path = repo().join("fixtures/reports/h200-probe-hang-inject-all.json");
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // The never-set injection's verdict is now the wrong class: the finding must fail.
    let s = report["probe"]["hang"]["hang"]["scenarios"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| s["name"] == "never-set")
        .unwrap();
    s["verdict"]["class"] = serde_json::json!("silent");
    let got = gdrdoctor::probe::replay(&node, &report["probe"]).unwrap();
    let f = got
        .iter()
        .find(|f| f.subject.ends_with("/never-set"))
        .unwrap();
    assert_eq!(f.status, gdrdoctor_checks::report::Status::Fail, "{f:?}");
    assert!(
        f.message
            .contains("classified as silent instead of spin-stall"),
        "{}",
        f.message
    );
    // A worker that was killed before it reported is an error naming what happened.
    let mut killed = report["probe"].clone();
    killed["hang"]["hang-escalation"] = serde_json::json!({
        "params": null, "printf": ["gdrdoctor-hang-scenario ignore-abort"],
        "worker_exit": "TimedOut", "health_check_ms": 300.0,
        "problem": {"kind": "run", "message": "worker `hang` did not finish within its deadline (300.0 s) and was killed"}
    });
    let got = gdrdoctor::probe::replay(&node, &killed).unwrap();
    assert!(got.iter().any(|f| f.id == "probe.hang"
        && f.status == gdrdoctor_checks::report::Status::Error
        && f.message.contains("stopped before it reported: TimedOut")));
}

/// `probe --nccl` without a GPU is incomplete like every probe, and its option needs its flag.
#[test]
fn nccl_probe_without_a_gpu_and_its_flags() {
    let (code, out, err) = run(&["probe", "--nccl", "--format", "json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let first = &v["findings"][0];
    if first["id"] == "probe.cuda" && first["status"] == "error" {
        assert_eq!(code, 3, "{first}");
    }
    let (code, _, err) = run(&["probe", "--p2p", "--nccl-lib", "/x/libnccl.so.2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--nccl-lib needs --nccl"), "{err}");
    let (code, _, err) = run(&["probe"]);
    assert_eq!(code, 2);
    assert!(err.contains("--p2p, --nccl or --doorbell"), "{err}");
}

/// With no NCCL on the node the probe skips and says where it looked; with one, it runs it.
#[test]
fn nccl_probe_chooses_the_loaders_first_library_or_skips() {
    let mut node = gdrdoctor_checks::testing::empty_node();
    node.live.nccl = gdrdoctor_checks::model::Fact::known(
        gdrdoctor_checks::model::NcclFacts {
            libraries: vec![],
            searched: vec!["LD_LIBRARY_PATH".into(), "/etc/ld.so.cache".into()],
            requested: None,
        },
        "test",
    );
    let why = gdrdoctor::probe::nccl::choose_library(&node, None).unwrap_err();
    assert!(
        why.starts_with(
            "no libnccl.so.2 found on this node (searched LD_LIBRARY_PATH, /etc/ld.so.cache)"
        ) && why.contains("--nccl-lib"),
        "{why}"
    );
    let given = std::path::Path::new("/opt/app/libnccl.so.2");
    assert_eq!(
        gdrdoctor::probe::nccl::choose_library(&node, Some(given)).unwrap(),
        "/opt/app/libnccl.so.2"
    );
    if let gdrdoctor_checks::model::Fact::Known { value, .. } = &mut node.live.nccl {
        for p in [
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
            "/opt/b/libnccl.so.2",
        ] {
            value.libraries.push(gdrdoctor_checks::model::NcclLibrary {
                path: p.into(),
                version: Some("2.28.3".into()),
                ..Default::default()
            });
        }
    }
    assert_eq!(
        gdrdoctor::probe::nccl::choose_library(&node, None).unwrap(),
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    );
}

/// The HGX fixture (8 H200 on NVSwitch, 8 ConnectX-7, each GPU with its NIC under one switch)
/// as gdrdoctor's view, and NCCL runs in the shapes NCCL 2.28 prints (src/transport/p2p.cc
/// v2.28.9-1 L386, net.cc L313/L359): a ring over P2P, then the network-only run with every
/// GPU on its own NIC with GDR both ways. Every pair and every GPU x NIC x direction agrees;
/// one line without /GDRDMA is the one failure.
#[test]
fn nccl_verdict_on_eight_gpus_and_eight_nics() {
    use gdrdoctor::probe::nccl::{self, NcclFiles, Output, Params, RankGpu, Record, Run, Sums};
    use gdrdoctor_checks::report::Status;
    let at = fixture("hgx-h200x8-cx7x8-healthy");
    let src = gdrdoctor::source::Source::open(gdrdoctor::source::Location::Sysroot(&at)).unwrap();
    let node = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
    let cx = gdrdoctor_checks::gdr::Context::new(&node);
    let view = gdrdoctor_checks::gdr::system(&node, &cx);
    assert_eq!((view.gpus.len(), view.nics.len()), (8, 8));
    let gpus: Vec<String> = view.gpus.iter().map(|g| g.id.clone()).collect();
    let ranks: Vec<RankGpu> = gpus
        .iter()
        .enumerate()
        .map(|(i, b)| RankGpu {
            rank: i as u32,
            cuda: i as i32,
            bdf: b.clone(),
        })
        .collect();
    // NCCL's dump of the same machine: GPU i and mlx5_i under switch i, four per socket.
    let nic_bdf = |i: usize| -> String {
        node.rdma
            .get()
            .and_then(|r| r.iter().find(|d| d.name == format!("mlx5_{i}")))
            .and_then(|d| d.pci_bdf.get().cloned().flatten())
            .unwrap()
    };
    let mut dump = String::from("<system version=\"1\">\n");
    for cpu in 0..2 {
        dump.push_str(&format!(
            "  <cpu numaid=\"{cpu}\" arch=\"x86_64\" vendor=\"GenuineIntel\">\n"
        ));
        for (i, gpu) in gpus.iter().enumerate().skip(cpu * 4).take(4) {
            dump.push_str(&format!(
                "    <pci busid=\"0000:f{i}:00.0\" class=\"0x060400\">\n      <pci busid=\"{}\" class=\"0x030200\"><gpu dev=\"{i}\" sm=\"90\" rank=\"{i}\" gdr=\"1\"><nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/></gpu></pci>\n      <pci busid=\"{}\" class=\"0x020700\"><nic><net name=\"mlx5_{i}\" dev=\"{i}\" port=\"1\" gdr=\"1\"/></nic></pci>\n    </pci>\n",
                gpu,
                nic_bdf(i)
            ));
        }
        dump.push_str("  </cpu>\n");
    }
    dump.push_str("</system>\n");
    let mut ring = String::new();
    let mut net = String::from("h:1:2 [0] NCCL INFO NET/IB : Using");
    for i in 0..8 {
        net.push_str(&format!(" [{i}]mlx5_{i}:1/IB"));
    }
    net.push_str(" [RO]; OOB eth0:10.0.0.1<0>\n");
    for i in 0..8 {
        let j = (i + 1) % 8;
        ring.push_str(&format!(
            "h:1:{i} [{i}] NCCL INFO Channel 00/0 : {i}[{i}] -> {j}[{j}] via P2P/direct pointer\n"
        ));
        net.push_str(&format!(
            "h:1:{i} [{i}] NCCL INFO Channel 00/0 : {i}[{i}] -> {j}[{j}] [send] via NET/IB/{i}/GDRDMA\n"
        ));
        net.push_str(&format!(
            "h:1:{j} [{j}] NCCL INFO Channel 00/0 : {i}[{i}] -> {j}[{j}] [receive] via NET/IB/{j}/GDRDMA\n"
        ));
    }
    let run = |label: &str, extra: &[(&str, &str)], log: &str, dump: Option<&str>| {
        let mut env: std::collections::BTreeMap<String, String> = nccl::BASE_ENV
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.insert("NCCL_DEBUG_FILE".into(), "/tmp/x/nccl-debug.log".into());
        Run {
            params: Params {
                label: label.into(),
                library: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
                gpus: None,
                count: nccl::COUNT,
                env: env.clone(),
            },
            output: Some(Output {
                version: Some("2.28.9".into()),
                version_code: Some(22809),
                ranks: ranks.clone(),
                env,
                init_ms: Some(2100.0),
                allreduce_ms: Some(80.0),
                sums: Some(Sums {
                    expected: 36.0,
                    checked: 8 * 4096,
                    wrong: 0,
                    first_wrong: None,
                }),
                error: None,
            }),
            problem: None,
            health: None,
            files: NcclFiles {
                log: Some(log.to_string()),
                topo_dump: dump.map(str::to_string),
                ..Default::default()
            },
        }
    };
    let record = |net_log: &str| Record {
        skipped: None,
        view: Some(view.clone()),
        runs: vec![
            run("default", &[], &ring, Some(&dump)),
            run("net-only", nccl::NET_ONLY_ENV, net_log, None),
        ],
    };
    let f = nccl::verdict::findings(&record(&net));
    let count = |id: &str, s: Status| f.iter().filter(|x| x.id == id && x.status == s).count();
    assert_eq!(count("probe.nccl-run", Status::Pass), 2, "{f:#?}");
    assert_eq!(count("probe.nccl-topology", Status::Pass), 1, "{f:#?}");
    assert_eq!(count("probe.nccl", Status::Pass), 8 + 16, "{f:#?}");
    assert_eq!(f.len(), 2 + 1 + 8 + 16, "{f:#?}");
    // The record is what the report keeps: it replays through the registry to the same
    // findings.
    let v = serde_json::json!({ "nccl": serde_json::to_value(record(&net)).unwrap() });
    let replayed = gdrdoctor::probe::replay(&gdrdoctor_checks::testing::empty_node(), &v).unwrap();
    assert_eq!(replayed, f);
    // GPU 5 received without GDR from its own PIX NIC: exactly one failure, with both sides.
    let bad = net.replace(
        "5[5] [receive] via NET/IB/5/GDRDMA",
        "5[5] [receive] via NET/IB/5",
    );
    let f = nccl::verdict::findings(&record(&bad));
    let fails: Vec<_> = f.iter().filter(|x| x.status == Status::Fail).collect();
    assert_eq!(fails.len(), 1, "{f:#?}");
    assert_eq!(fails[0].subject, format!("{}|mlx5_5/receive", gpus[5]));
    assert_eq!(
        fails[0].message,
        "nccl used no gdr where gdrdoctor predicted gdr"
    );
    assert!(fails[0]
        .evidence
        .iter()
        .any(|e| e.source.starts_with("gdrdoctor (NCCL 2.28.9 rules")
            && e.observed.starts_with("GDR (PIX")));
}

/// A stand-in `libnccl.so.2` built with gcc: NCCL's signatures (src/nccl.h.in v2.28.9-1) with
/// recorded calls, so the wrapper of `src/live/nccl.rs` is exercised without a GPU: symbols,
/// the version, `ncclCommInitAll`, NCCL's words for an error, and one `ncclCommDestroy` per
/// communicator when `Comms` drops.
const FAKE_NCCL: &str = r#"
#include <stddef.h>
static int destroyed = 0;
int fake_destroyed(void) { return destroyed; }
int ncclGetVersion(int *v) { *v = 22809; return 0; }
int ncclCommInitAll(void **comms, int n, const int *devs) {
  if (n == 3) return 2; /* ncclSystemError */
  for (int i = 0; i < n; i++) comms[i] = (void *)(size_t)(0x1000 + devs[i]);
  return 0;
}
int ncclCommDestroy(void *c) { (void)c; destroyed++; return 0; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c, void *st) { return 0; }
const char *ncclGetErrorString(int r) { return r == 2 ? "unhandled system error" : "unknown"; }
const char *ncclGetLastError(void *c) { (void)c; return "Net : No interface found"; }
"#;

#[test]
fn the_nccl_wrapper_against_a_stand_in_library() {
    use gdrdoctor::live::nccl::Nccl;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("fake.c");
    let lib = t.path().join("libnccl.so.2");
    std::fs::write(&src, FAKE_NCCL).unwrap();
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        require::skip(
            "nccl-stand-in",
            "gcc cannot build a shared library",
            "apt-get install gcc",
        );
        return;
    }
    let n = Nccl::load(&lib).unwrap();
    assert_eq!(n.version().unwrap(), 22809);
    let comms = n.init_all(&[0, 1]).unwrap();
    assert_eq!(comms.len(), 2);
    let e = n.init_all(&[0, 1, 2]).err().unwrap();
    assert_eq!(
        e.to_string(),
        "ncclCommInitAll failed: unhandled system error (2): Net : No interface found"
    );
    // SAFETY: the fake libnccl built above (FAKE_NCCL: plain C, no initialiser to run), already
    // loaded by `Nccl::load`: this takes one more reference to the same mapping.
    let raw = unsafe { libloading::Library::new(&lib) }.unwrap();
    let destroyed: libloading::Symbol<unsafe extern "C" fn() -> i32> =
        // SAFETY: the stand-in's own counter is `int fake_destroyed(void)`, the type named
        // here; the symbol does not outlive `raw`.
        unsafe { raw.get(b"fake_destroyed\0") }.unwrap();
    // SAFETY: a C function of no arguments that only reads a counter.
    assert_eq!(unsafe { destroyed() }, 0);
    drop(comms);
    assert_eq!(
        // SAFETY: as above.
        unsafe { destroyed() },
        2,
        "one ncclCommDestroy per communicator"
    );
    // Not NCCL at all, and no library at all: the errors name the file and the symbol.
    let e = Nccl::load(std::path::Path::new("/nonexistent/libnccl.so.2")).unwrap_err();
    assert!(e.starts_with("dlopen /nonexistent/libnccl.so.2:"), "{e}");
    std::fs::write(&src, "int not_nccl(void) { return 0; }\n").unwrap();
    let other = t.path().join("libother.so");
    let ok = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&other)
        .arg(&src)
        .status()
        .unwrap();
    assert!(ok.success());
    let e = Nccl::load(&other).unwrap_err();
    assert!(e.contains("ncclGetVersion"), "{e}");
}

/// A real NCCL log (shared/realdata/nccl-1537-gdr-disabled-roce-excerpt, NVIDIA/nccl#1537, read
/// in place): the NCCL log parser probe --nccl uses takes NCCL's device list from it as NCCL printed it, and finds
/// no channel line in an excerpt that has none.
#[test]
fn nccl_log_reader_on_a_real_log() {
    let Some(rd) = require::realdata(&repo()) else {
        return;
    };
    let p = rd.join("nccl-1537-gdr-disabled-roce-excerpt/nccl-debug-excerpt.log");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // The one NCCL log parser (`diagnose`'s), as probe --nccl reads NCCL_DEBUG_FILE.
    let log = gdrdoctor_checks::paste::nccl::parse_file(&text);
    let listed: Vec<(&str, u32, &str)> = log
        .net_devices
        .iter()
        .map(|d| (d.net.as_str(), d.index, d.name.as_str()))
        .collect();
    assert_eq!(listed, vec![("IB", 0, "mlx5_0"), ("IB", 1, "mlx5_1")]);
    assert!(log.connections.is_empty());
    assert!(log.warnings.is_empty());
}

/// `check`'s live-facts workers close their output after the reply and are not waited for
/// (their exit, the driver's teardown in the kernel, took ~57 ms after `cuInit` on an H200):
/// with a worker that takes 3 s to exit after its output, a live `check`'s answer is complete
/// at once. (gdrdoctor then reaps the worker before it exits, within a bound: tests/zombies.rs.)
#[test]
fn live_facts_workers_are_left_to_exit_after_their_output() {
    use gdrdoctor::worker::runner::leaves_after_output;
    assert!(leaves_after_output("live-nvml") && leaves_after_output("live-cuda"));
    assert!(!leaves_after_output("hang") && !leaves_after_output("selftest-echo"));
    let state = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let mut child = std::process::Command::new(bin())
        .args(["check", "--format", "json", "--no-cache", "--state-dir"])
        .arg(state.path())
        .env("GDRDOCTOR_TEST_WORKER_LINGER_MS", "3000")
        .env("GDRDOCTOR_TRACE", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let took = t0.elapsed();
    let _ = child.wait();
    assert!(
        err.contains("live.nvml-worker"),
        "a live-facts worker ran: {err}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "check's answer waited for its worker's exit: {took:?}\n{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(v["findings"].as_array().is_some_and(|f| !f.is_empty()));
}

/// A termination signal the parent was started ignoring (`nohup` ignores SIGHUP, a background
/// job SIGINT) stays ignored: the run goes on; one it was not told to ignore still ends it,
/// and its worker with it.
#[test]
fn an_inherited_ignored_signal_stays_ignored() {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    cmd.args(["check", "--format", "json"])
        .env("GDRDOCTOR_TEST_WORKER_DELAY_MS", "60000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut parent = cmd.spawn().unwrap();
    let t0 = Instant::now();
    let w = loop {
        if let Some(&w) = workers_of(parent.id()).first() {
            break w;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no worker appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    unsafe { libc::kill(parent.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        parent.try_wait().unwrap().is_none(),
        "an ignored SIGHUP ended the run"
    );
    assert!(!dead(w), "an ignored SIGHUP killed the worker");
    // SAFETY: as above.
    unsafe { libc::kill(parent.id() as i32, libc::SIGTERM) };
    let st = parent.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st}");
    assert!(wait_dead(w), "worker {w} outlived its parent");
}
