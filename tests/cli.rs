//! The binary end to end: exit-code contract, output formats, color policy, pipes, help.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::io::Read;
use std::process::{Command, Stdio};

fn healthy() -> String {
    fixture("hgx-h200x8-cx7x8-healthy").display().to_string()
}

/// A copy of the healthy fixture whose snapshot metadata lacks the memlock limit: one check
/// cannot be evaluated, nothing fails.
fn incomplete() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-healthy"), t.path());
    let p = t.path().join("gdrdoctor/meta.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    m["memlock"] = serde_json::Value::Null;
    std::fs::write(&p, m.to_string()).unwrap();
    t
}

#[test]
fn exit_code_0_when_healthy() {
    let (code, out, _) = run(&["check", "--sysroot", &healthy(), "--color", "never"]);
    assert_eq!(code, 0, "{out}");
    // InfiniBand only: the four roce.* checks skip; so do the five container.* checks (live,
    // inside a container only) and pcie.p2p-path (every GPU pair is joined by NVLink).
    assert!(
        out.contains(" pass, 0 warn, 0 fail, 10 skip, 0 error · exit code 0"),
        "{out}"
    );
    let roce = fixture("hgx-h200x8-cx7x8-roce").display().to_string();
    let (code, out, _) = run(&["check", "--sysroot", &roce, "--color", "never"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(" pass, 0 warn, 0 fail, 6 skip, 0 error · exit code 0"),
        "{out}"
    );
}

#[test]
fn exit_code_1_on_fail_and_on_warn_with_fail_on_warn() {
    let down = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    assert_eq!(run(&["check", "--sysroot", &down]).0, 1);
    let tr = fixture("hgx-h200x8-cx7x8-iommu-translated")
        .display()
        .to_string();
    assert_eq!(run(&["check", "--sysroot", &tr]).0, 0);
    assert_eq!(run(&["check", "--sysroot", &tr, "--fail-on", "warn"]).0, 1);
    // Skipping the failing checks makes the gate pass.
    assert_eq!(
        run(&["check", "--sysroot", &down, "--skip", "rdma.ports,gdr"]).0,
        0
    );
}

#[test]
fn exit_code_2_when_gdrdoctor_cannot_run() {
    let (code, _, err) = run(&["check", "--sysroot", "/nonexistent/sysroot"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/sysroot"), "{err}");
    let (code, _, err) = run(&["check", "--sysroot", &healthy(), "--only", "no.such-check"]);
    assert_eq!(code, 2);
    assert!(err.contains("no.such-check"), "{err}");
    assert_eq!(run(&["check", "--format", "yaml"]).0, 2);
    assert_eq!(run(&["frobnicate"]).0, 2);
    let (code, _, err) = run(&["explain", "nope.nothing"]);
    assert_eq!(code, 2);
    assert!(err.contains("gdrdoctor list"), "{err}");
}

#[test]
fn exit_code_3_when_incomplete_unless_allowed() {
    let t = incomplete();
    let p = t.path().display().to_string();
    let (code, out, _) = run(&["check", "--sysroot", &p, "--format", "json"]);
    assert_eq!(code, 3, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["error"], 1);
    assert_eq!(v["summary"]["exit_code"], 3);
    assert_eq!(run(&["check", "--sysroot", &p, "--allow-incomplete"]).0, 0);
}

#[test]
fn only_and_skip_take_ids_and_categories() {
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &healthy(),
        "--format",
        "json",
        "--only",
        "rdma,iommu.mode",
        "--skip",
        "rdma.firmware",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut ids: Vec<String> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    ids.dedup();
    assert_eq!(ids, vec!["iommu.mode", "rdma.devices", "rdma.ports"]);
}

#[test]
fn json_junit_prometheus_are_well_formed() {
    let (_, j, _) = run(&["check", "--sysroot", &healthy(), "--format", "json"]);
    let r: gdrdoctor_checks::report::Report = serde_json::from_str(&j).unwrap();
    assert_eq!(r.schema, "gdrdoctor.report/v1");
    assert_eq!(r.host.source, "sysroot");

    let down = fixture("hgx-h200x8-cx7x8-port-down").display().to_string();
    let (_, x, _) = run(&["check", "--sysroot", &down, "--format", "junit"]);
    assert!(x.starts_with("<?xml"), "{x}");
    let (_, dj, _) = run(&["check", "--sysroot", &down, "--format", "json"]);
    let dr: gdrdoctor_checks::report::Report = serde_json::from_str(&dj).unwrap();
    let n = dr.findings.len();
    assert!(
        x.contains(&format!("tests=\"{n}\"")) && x.contains("failures=\"1\""),
        "{x}"
    );
    assert!(x.contains("name=\"rdma.ports [mlx5_3/1]\""), "{x}");
    assert!(x.contains("classname=\"gdrdoctor.rdma\""));

    let (_, p, _) = run(&["check", "--sysroot", &down, "--format", "prometheus"]);
    assert!(
        p.contains(
            "gdrdoctor_check_status{command=\"check\",check=\"rdma.ports\",category=\"rdma\",status=\"fail\"} 1"
        ),
        "{p}"
    );
    assert!(p.contains(
        "gdrdoctor_check_status{command=\"check\",check=\"rdma.ports\",category=\"rdma\",status=\"pass\"} 0"
    ));
    assert!(p.contains(
        "gdrdoctor_check_findings{command=\"check\",check=\"rdma.ports\",status=\"pass\"} 7"
    ));
    assert!(p.contains("gdrdoctor_exit_code{command=\"check\"} 1"));
    for line in p.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
        assert!(name.chars().next().unwrap().is_ascii_alphabetic(), "{line}");
    }
}

#[test]
fn output_file_is_written_atomically() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("gdrdoctor.prom");
    let (code, stdout, _) = run(&[
        "check",
        "--sysroot",
        &healthy(),
        "--format",
        "prometheus",
        "-o",
        &out.display().to_string(),
    ]);
    assert_eq!(code, 0);
    assert!(stdout.is_empty());
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("gdrdoctor_build_info"));
    let leftovers: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    assert_eq!(leftovers.len(), 1, "temp file left behind");
}

#[test]
fn color_policy() {
    let warn = fixture("hgx-h200x8-cx7x8-iommu-translated")
        .display()
        .to_string();
    let (_, always, _) = run(&["check", "--sysroot", &warn, "--color", "always"]);
    assert!(always.contains("\x1b["), "--color always must color");
    let (_, never, _) = run(&["check", "--sysroot", &warn, "--color", "never"]);
    assert!(!never.contains('\x1b'));
    // auto: stdout is a pipe here, so no color; NO_COLOR and CLICOLOR_FORCE are honoured.
    let (_, auto, _) = run(&["check", "--sysroot", &warn]);
    assert!(!auto.contains('\x1b'));
    let forced = Command::new(bin())
        .args(["check", "--sysroot", &warn])
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&forced.stdout).contains("\x1b["));
    // the conventions: NO_COLOR wins over CLICOLOR_FORCE.
    let both = Command::new(bin())
        .args(["check", "--sysroot", &warn])
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&both.stdout).contains('\x1b'));
    let (_, json, _) = run(&[
        "check",
        "--sysroot",
        &warn,
        "--format",
        "json",
        "--color",
        "always",
    ]);
    assert!(!json.contains('\x1b'), "json never carries color");
}

#[test]
fn closed_pipe_is_not_a_panic() {
    let mut child = Command::new(bin())
        .args(["check", "--sysroot", &healthy(), "--color", "never", "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close our end, like `| head -c1`.
    let mut stdout = child.stdout.take().unwrap();
    let mut b = [0u8; 1];
    stdout.read_exact(&mut b).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
}

#[test]
fn help_teaches_and_list_explain_cover_every_check() {
    let (code, out, _) = run(&["check", "--help"]);
    assert_eq!(code, 0);
    for s in [
        "--sysroot",
        "--fail-on",
        "--allow-incomplete",
        "Exit codes",
        "Examples",
        "prometheus",
    ] {
        assert!(out.contains(s), "check --help lacks {s}");
    }
    let (_, list, _) = run(&["list"]);
    for c in gdrdoctor_checks::checks::CHECKS {
        assert!(list.contains(c.id), "list lacks {}", c.id);
        let (code, page, _) = run(&["explain", c.id]);
        assert_eq!(code, 0, "{}", c.id);
        assert!(
            page.starts_with(&format!("# {}", c.id)),
            "{}: {}",
            c.id,
            &page[..page.len().min(80)]
        );
    }
}

#[test]
fn topo_text_json_and_the_gpu_machine_snapshot() {
    let (code, out, _) = run(&["topo", "--sysroot", &healthy()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("GPU0 18:00.0") && out.contains("PIX*"),
        "{out}"
    );
    // Every GPU reaches every NIC with GDR: its own at PIX, the others through their local
    // GPU over NVLink (PXN, marked +).
    assert!(
        out.contains("64 of 64 pairs") && out.contains("NODE+"),
        "{out}"
    );
    assert!(out.contains("Rules: NCCL 2.30.7 rules"), "{out}");
    // The GPU x GPU block from the NVML facts the snapshot keeps (issue 15): 18 NVLinks to the
    // NVSwitch fabric per GPU, `NV18` as `nvidia-smi topo -m` prints it, not the PCIe path.
    let block: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.split_whitespace().take(2).eq(["GPU0", "GPU1"]))
        .collect();
    assert!(
        block.iter().any(|l| l.starts_with("GPU1 28:00.0")
            && l.split_whitespace().skip(2).collect::<Vec<_>>()
                == ["NV18", "X", "NV18", "NV18", "NV18", "NV18", "NV18", "NV18"]),
        "{out}"
    );
    let (_, j, _) = run(&["topo", "--sysroot", &healthy(), "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["gpu_pairs"].as_array().unwrap().len(), 28);
    assert_eq!(v["gpu_pairs"][0]["nvlinks_switch"], 18);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["pairs"].as_array().unwrap().len(), 64);
    assert_eq!(v["gdr_level"], "PXB");
    // Without PXN only the 8 own pairs, and the others say why.
    let out = Command::new(bin())
        .args(["topo", "--sysroot", &healthy()])
        .env("NCCL_PXN_DISABLE", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("8 of 64 pairs"), "{text}");
    assert!(text.contains("NCCL_PXN_DISABLE=1 from"), "{text}");
    // An older NCCL's rules: 2.12 has PXN; 2.11 has none, and (before 2.13) no dma-buf, and
    // (before 2.23) it does not see nvidia_peermem without MOFED's registry file, which this
    // node lacks: no pair at all.
    let (code, text, _) = run(&["topo", "--sysroot", &healthy(), "--nccl-version", "2.12.12"]);
    assert_eq!(code, 0);
    assert!(text.contains("0 of 64 pairs"), "{text}");
    let (code, text, _) = run(&[
        "topo",
        "--sysroot",
        &healthy(),
        "--nccl-version",
        "2.11.4",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.iter().filter(|p| p["enabled"] == true).count(), 0);
    // No PXN: a GPU's other NICs are off by distance, not carried by a peer.
    assert!(pairs.iter().all(|p| p["via"].is_null()), "{text}");
    let (code, _, err) = run(&["topo", "--sysroot", &healthy(), "--nccl-version", "banana"]);
    assert_eq!(code, 2);
    assert!(err.contains("not an NCCL 2.x version"), "{err}");
    // The captured H200 VM has one GPU and no RDMA device.
    let h200 = fixture("h200-vm-live").display().to_string();
    let (code, out, _) = run(&["topo", "--sysroot", &h200]);
    assert_eq!(code, 0);
    assert!(out.contains("1 gpu(s), 0 rdma device(s)"), "{out}");
    // NCCL_NET_GDR_LEVEL in the environment of the run is honoured.
    let out = Command::new(bin())
        .args(["topo", "--sysroot", &healthy(), "--format", "json"])
        .env("NCCL_NET_GDR_LEVEL", "SYS")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["gdr_level"], "SYS");
    assert_eq!(
        v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["enabled"] == true)
            .count(),
        64
    );
    // Evidence mode needs a matrix.
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("x.txt");
    std::fs::write(&f, "nothing").unwrap();
    let (code, _, err) = run(&["topo", "--nvidia-smi", &f.display().to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("GPU0"), "{err}");
}
