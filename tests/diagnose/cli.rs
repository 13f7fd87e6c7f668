//! The command line: formats, exit codes, stdin, and `topo --nvidia-smi` as the same reader.

use super::*;

#[test]
fn cli_formats_exit_codes_and_stdin() {
    let f = pastes().join("nccl-928-ib-error4.log");
    let (code, out, _) = run(&["diagnose", &f.display().to_string(), "--format", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "gdrdoctor.diagnose/v1");
    assert_eq!(v["host"]["source"], "evidence");
    assert!(v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["kind"] == "nccl-log"));
    let (code, out, _) = run(&["diagnose", &f.display().to_string(), "--format", "markdown"]);
    assert_eq!(code, 1);
    assert!(out.starts_with("### gdrdoctor diagnose"), "{out}");
    assert!(out.contains("`nccl.ib-completion`"));
    assert!(out.contains("<details>"));
    // Table, from stdin.
    let out = std::process::Command::new(bin())
        .args(["diagnose", "-"])
        .stdin(std::fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("nccl.ib-completion") && s.contains("source evidence"),
        "{s}"
    );
    // Nothing recognisable, a missing file, an unknown --only: exit 2.
    let t = tempfile::tempdir().unwrap();
    let junk = t.path().join("junk.txt");
    std::fs::write(&junk, "hello\nworld\n").unwrap();
    let (code, _, err) = run(&["diagnose", &junk.display().to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("no command output"), "{err}");
    let (code, _, err) = run(&["diagnose", "/nonexistent/x.txt"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/x.txt"), "{err}");
    let (code, _, _) = run(&["diagnose", &f.display().to_string(), "--only", "nope"]);
    assert_eq!(code, 2);
    // --only narrows to a category.
    let (code, out, _) = run(&[
        "diagnose",
        &f.display().to_string(),
        "--only",
        "paste",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["id"] == "paste.blocks"));
    // An incomplete matrix is exit 3 unless allowed.
    let m = pastes().join("deepep-128-topo-10nic-cut.txt");
    let (code, _, _) = run(&["diagnose", &m.display().to_string()]);
    assert_eq!(code, 3);
    let (code, _, _) = run(&["diagnose", &m.display().to_string(), "--allow-incomplete"]);
    assert_eq!(code, 0);
}

#[test]
fn topo_nvidia_smi_is_the_diagnose_reader() {
    let m = pastes().join("nccl-2157-topo-18nic-cut.txt");
    let (code, out, _) = run(&[
        "topo",
        "--nvidia-smi",
        &m.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "gdrdoctor.topo-paste/v1");
    let close = v["close_nics"]["GPU0"].as_array().unwrap();
    assert_eq!(close.len(), 4);
    assert!(
        !v["problems"].as_array().unwrap().is_empty(),
        "the cut row is reported"
    );
    // A matrix alone: NCCL's rule allows GDR at PXB if peer memory or dma-buf and the ports
    // are in place, which the matrix does not show (`?`); SYS cells get no mark.
    let (code, out, _) = run(&["topo", "--nvidia-smi", &m.display().to_string()]);
    assert_eq!(code, 0);
    assert!(out.contains("PXB?") && !out.contains("PXB*"), "{out}");
    assert!(out.contains("Rules: NCCL 2.30.7 rules"), "{out}");
    // --nccl-version picks the rules (the TODO of the first merge).
    let (code, out, _) = run(&[
        "topo",
        "--nvidia-smi",
        &m.display().to_string(),
        "--nccl-version",
        "2.18.6",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nccl_rules"], "NCCL 2.18.6 rules (--nccl-version 2.18.6)");
}

#[test]
fn pastes_over_the_bound_are_refused_with_the_bound_named() {
    // One input over 64 MiB, and two that are over it together: exit 2, nothing read.
    let t = tempfile::tempdir().unwrap();
    let line = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA\n";
    let half: String = line.repeat((34 << 20) / line.len());
    let (a, b) = (t.path().join("a.log"), t.path().join("b.log"));
    std::fs::write(&a, &half).unwrap();
    std::fs::write(&b, &half).unwrap();
    let (code, out, err) = run(&[
        "diagnose",
        &a.display().to_string(),
        &b.display().to_string(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("more than 64 MiB"), "{err}");
    let big = t.path().join("big.log");
    std::fs::write(&big, half.repeat(2)).unwrap();
    let (code, _, err) = run(&["diagnose", &big.display().to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("larger than 64 MiB"), "{err}");
}

#[test]
fn node_reports_explain_the_odd_rank_by_its_host() {
    // The golden ACS-redirect report, renamed gpu-b: the host whose rank went without GDR.
    let t = tempfile::tempdir().unwrap();
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("fixtures/golden/hgx-h200x8-cx7x8-acs-redirect.json"))
            .unwrap(),
    )
    .unwrap();
    v["host"]["hostname"] = "gpu-b.cluster".into();
    let dir = t.path().join("reports");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("gpu-b.json"), v.to_string()).unwrap();
    let log = pastes().join("constructed-2host-rank-without-gdr.txt");
    let (code, out, err) = run(&[
        "diagnose",
        &log.display().to_string(),
        "--node-report",
        &dir.display().to_string(),
        "-f",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "nccl.ranks")
        .unwrap();
    let ev: Vec<&str> = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["observed"].as_str().unwrap())
        .collect();
    assert!(
        ev.iter()
            .any(|e| e.starts_with("why on gpu-b: fail pcie.acs-redirect")),
        "{ev:?}"
    );
    // A file that is no report is refused, naming it.
    let bad = t.path().join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    let (code, _, err) = run(&[
        "diagnose",
        &log.display().to_string(),
        "--node-report",
        &bad.display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.json") && err.contains("not a gdrdoctor check report"),
        "{err}"
    );
}
