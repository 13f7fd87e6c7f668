//! The probe framework without a GPU: the worker runner's deadline, crash handling and result
//! protocol, and `gdrdoctor probe` on a node without GPUs or libcuda.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn worker(
    task: &str,
    args: &[&str],
    deadline_ms: u64,
) -> (String, Option<serde_json::Value>, Vec<String>, Duration) {
    // Run the runner through a tiny in-process call of the library, with the real binary as
    // the worker (current_exe in tests is the test harness, so spawn the binary directly).
    let start = Instant::now();
    let mut child = Command::new(bin())
        .arg("__worker")
        .arg(task)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
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

#[test]
fn worker_protocol_result_and_raw_lines() {
    let (st, r, _, _) = worker("selftest-echo", &["a", "b"], 10_000);
    assert!(st.contains("exit status: 0"), "{st}");
    assert_eq!(r.unwrap()["args"], serde_json::json!(["a", "b"]));
    let (st, r, raw, _) = worker("selftest-crash", &[], 10_000);
    assert!(st.contains("signal"), "{st}");
    assert!(r.is_none());
    assert_eq!(raw, vec!["a line of raw output before the crash"]);
    let (_, r, _, _) = worker("no-such-task", &[], 10_000);
    assert!(r.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("unknown worker task"));
}

#[test]
fn runner_kills_a_worker_past_its_deadline_and_reports_a_crash() {
    use gdrdoctor::probe::runner::{run_with, Outcome};
    let exe = std::path::Path::new(bin());
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let on = |m: &str| {
        if !m.is_empty() {
            seen.lock().unwrap().push(m.to_string());
        }
    };
    // A worker that would sleep 30 s is killed at the 1.5 s deadline.
    let t0 = Instant::now();
    let r = run_with(
        exe,
        "selftest-sleep",
        &["30".into()],
        Duration::from_millis(1500),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::TimedOut);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(r
        .failure()
        .unwrap()
        .contains("did not finish within its deadline"));
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["sleeping"],
        "progress lines reach the parent"
    );
    // A crash is a signal, with the raw output kept.
    let r = run_with(exe, "selftest-crash", &[], Duration::from_secs(10), &on).unwrap();
    assert_eq!(r.outcome, Outcome::Signaled(6));
    assert_eq!(r.raw, vec!["a line of raw output before the crash"]);
    assert!(r.failure().unwrap().contains("signal 6"));
    // The result line is parsed; nothing else is taken for it.
    let r = run_with(
        exe,
        "selftest-echo",
        &["x".into()],
        Duration::from_secs(10),
        &on,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Exited(0));
    assert_eq!(r.result.as_ref().unwrap()["args"][0], "x");
    assert!(r.failure().is_none());
}

#[test]
fn probe_without_a_gpu_is_a_clean_skip_or_error() {
    let (code, out, err) = run(&["probe", "--registration", "--format", "json"]);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let f = &v["findings"][0];
    assert_eq!(f["id"], "probe.cuda");
    // No GPU here: skip (exit 0); a node with GPUs but no libcuda: error (exit 3).
    match f["status"].as_str().unwrap() {
        "skip" => assert_eq!(code, 0),
        "error" => assert_eq!(code, 3),
        "pass" => {} // a GPU machine
        s => panic!("unexpected {s}"),
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
    if ids.contains(&("probe.cuda", "skip")) {
        // No GPU: both the CUDA side and the NIC side say why, and the run is not a failure.
        assert_eq!(code, 0, "{ids:?}");
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
