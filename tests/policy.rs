//! Site policy end to end: `policy init` from the healthy 8-GPU fixture, then the defects an
//! operator plants in a healthy node (a GPU gone, a slow port, one odd firmware, a changed
//! command line), each caught with exit 1 by the `policy.*` finding that names it; severity
//! overrides, waivers (active and expired), and policy-file errors (exit 2, file:line).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::Path;

const HEALTHY: &str = "hgx-h200x8-cx7x8-healthy";

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// `gdrdoctor policy init --sysroot <healthy> -o <dir>/policy.toml`.
fn golden_policy(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("policy.toml");
    let (code, _, err) = run(&[
        "policy",
        "init",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "-o",
        &s(&out),
    ]);
    assert_eq!(code, 0, "{err}");
    out
}

/// A copy of the healthy fixture.
fn planted() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture(HEALTHY), t.path());
    t
}

fn check_json(sysroot: &Path, extra: &[&str]) -> (i32, Report, String) {
    let mut args = vec!["check", "--sysroot"];
    let root = s(sysroot);
    args.push(&root);
    args.extend_from_slice(&["--format", "json"]);
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    let r: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, r, err)
}

fn failing(r: &Report) -> Vec<(String, String, String)> {
    r.findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| (f.id.clone(), f.subject.clone(), f.message.clone()))
        .collect()
}

#[test]
fn the_golden_node_passes_its_own_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let text = std::fs::read_to_string(&p).unwrap();
    for want in [
        "schema = \"gdrdoctor.policy/v1\"",
        "count = 8",
        "model = \"H200 SXM 141GB\"",
        "rate_gbps = 400",
        "width = \"4X\"",
        "version = \"28.43.1014\"",
        "flavor = \"open\"",
        "version = \"580.159.04\"",
        "mode = \"off\"",
        "every_gpu = true",
        "release = \"6.8.0-49-generic\"",
        "allow_extra = false",
    ] {
        assert!(text.contains(want), "policy init lacks {want}:\n{text}");
    }
    let (code, r, err) = check_json(&fixture(HEALTHY), &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?} {err}", failing(&r));
    let ids: std::collections::BTreeSet<&str> = r
        .findings
        .iter()
        .filter(|f| f.id.starts_with("policy."))
        .map(|f| f.id.as_str())
        .collect();
    for id in [
        "policy.gpu",
        "policy.rdma",
        "policy.ports",
        "policy.pcie",
        "policy.driver",
        "policy.firmware",
        "policy.peer-memory",
        "policy.iommu",
        "policy.gdr",
        "policy.kernel",
        "policy.cmdline",
    ] {
        assert!(ids.contains(id), "{id} missing from {ids:?}");
    }
    // Every policy pass carries its evidence and the key of the policy that set it.
    for f in r.findings.iter().filter(|f| f.id.starts_with("policy.")) {
        assert_eq!(f.status, Status::Pass, "{f:#?}");
        assert!(
            f.evidence.iter().any(|e| e
                .expected
                .as_deref()
                .is_some_and(|x| x.contains("policy.toml"))
                || e.source.contains("policy.toml")),
            "{f:#?}"
        );
    }
    // The run is stamped; the golden report (built in-process) is not.
    let ts = r.timestamp.as_deref().unwrap();
    assert!(
        ts.len() == 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "{ts}"
    );
}

#[test]
fn a_gpu_gone_fails_the_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = planted();
    plant::plant(node.path(), plant::Defect::GpuGone);
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    let f = find(&r, "policy.gpu", "node");
    assert_eq!(f.status, Status::Fail);
    assert_eq!(
        f.message,
        "7 nvidia gpu(s) on the pci bus, the policy expects 8"
    );
    assert!(f.evidence[0].observed.contains("0000:38:00.0 0000:98:00.0"));
    assert!(f.remediation.as_deref().unwrap().contains("Xid 79"));
    // The GDR rule no longer counts 8 pairs either.
    let g = r
        .findings
        .iter()
        .find(|f| f.id == "policy.gdr" && f.status == Status::Fail)
        .unwrap();
    assert!(g.message.contains("7 gpu x nic pairs"), "{}", g.message);
}

#[test]
fn a_gpu_the_driver_or_nvml_lost_fails_the_policy() {
    // Still on the PCI bus, but NVML no longer lists it (a GPU in a bad state after Xid 79).
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = planted();
    let live = node.path().join("gdrdoctor/live.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&live).unwrap()).unwrap();
    v.pointer_mut("/nvml/value/gpus")
        .and_then(|g| g.as_array_mut())
        .unwrap()
        .retain(|g| g["bdf"] != "0000:48:00.0");
    std::fs::write(&live, v.to_string()).unwrap();
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    let f = find(&r, "policy.gpu", "node");
    assert_eq!(
        f.message,
        "nvml sees 7 of the 8 gpus the policy expects (not 0000:48:00.0)"
    );
    assert!(f
        .evidence
        .iter()
        .any(|e| e.observed.starts_with("7 gpu(s)")));
}

#[test]
fn a_slow_port_among_fast_ones_fails_the_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = planted();
    plant::plant(node.path(), plant::Defect::SlowPort);
    // Without a policy the port is ACTIVE and passes.
    let (_, plain, _) = check_json(node.path(), &["--no-policy"]);
    assert_eq!(find(&plain, "rdma.ports", "mlx5_3/1").status, Status::Pass);
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    assert_eq!(
        failing(&r),
        vec![(
            "policy.ports".to_string(),
            "mlx5_3/1".to_string(),
            "rate 200 Gb/s, policy expects 400; width 2X, policy expects 4X".to_string()
        )]
    );
    let f = find(&r, "policy.ports", "mlx5_3/1");
    assert!(f
        .remediation
        .as_deref()
        .unwrap()
        .contains("mlxlink -d mlx5_3 -p 1 -m"));
    assert_eq!(find(&r, "policy.ports", "mlx5_2/1").status, Status::Pass);
}

#[test]
fn one_odd_firmware_fails_the_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = planted();
    plant::plant(node.path(), plant::Defect::OddFirmware);
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    let f = find(&r, "policy.firmware", "mlx5_5");
    assert_eq!(
        f.message,
        "firmware 28.39.1002, the policy expects 28.43.1014"
    );
    let all = find(&r, "policy.firmware", "node");
    assert_eq!(all.status, Status::Fail);
    assert!(
        all.message.ends_with("28.39.1002 on mlx5_5"),
        "{}",
        all.message
    );
    assert!(all
        .remediation
        .as_deref()
        .unwrap()
        .starts_with("bring mlx5_5 to"));
}

#[test]
fn a_changed_command_line_fails_the_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    for (cmdline, want) in [
        (
            "BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic root=UUID=0f1e ro splash pci=noats",
            "missing quiet, unexpected pci=noats",
        ),
        (
            "BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic root=UUID=0f1e ro quiet splash intel_iommu=on",
            "unexpected intel_iommu=on",
        ),
        (
            "BOOT_IMAGE=/boot/vmlinuz-6.9.0-1-generic root=UUID=0f1e ro quiet splash",
            "BOOT_IMAGE=/boot/vmlinuz-6.9.0-1-generic instead of BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic",
        ),
    ] {
        let node = planted();
        std::fs::write(node.path().join("proc/cmdline"), format!("{cmdline}\n")).unwrap();
        let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
        assert_eq!(code, 1, "{cmdline}");
        let f = find(&r, "policy.cmdline", "node");
        assert_eq!(f.status, Status::Fail);
        assert_eq!(
            f.message,
            format!("the kernel command line differs from the policy: {want}")
        );
    }
    // A different root= (per node) is not a difference.
    let node = planted();
    std::fs::write(
        node.path().join("proc/cmdline"),
        "BOOT_IMAGE=/boot/vmlinuz-6.8.0-49-generic root=UUID=9999 ro quiet splash\n",
    )
    .unwrap();
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?}", failing(&r));
}

#[test]
fn severity_overrides_and_waivers() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p.toml");
    // A warning made a failure.
    std::fs::write(&p, "[severity]\n\"rdma.firmware\" = \"fail\"\n").unwrap();
    let (code, r, _) = check_json(&fixture("hgx-h200x8-cx7x8-mixed-fw"), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    let f = r.findings.iter().find(|f| f.id == "rdma.firmware").unwrap();
    assert_eq!(f.status, Status::Fail);
    assert!(f
        .evidence
        .iter()
        .any(|e| e.observed == "warn made fail by severity.\"rdma.firmware\""));
    // Failures made warnings: the gate passes.
    std::fs::write(&p, "[severity]\nrdma = \"warn\"\n\"gdr.gpu\" = \"warn\"\n").unwrap();
    let down = fixture("hgx-h200x8-cx7x8-port-down");
    let (code, r, _) = check_json(&down, &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?}", failing(&r));
    // A waiver with a reason: both failures are waived until far in the future.
    std::fs::write(
        &p,
        "[[waiver]]\ncheck = \"rdma.ports\"\nsubject = \"mlx5_3/*\"\nreason = \"case 17: cable on order\"\nexpires = 2999-12-31\n\
         [[waiver]]\ncheck = \"gdr\"\nhosts = [\"hgx-*\"]\nreason = \"follows from case 17\"\nexpires = \"2999-12-31\"\n\
         [[waiver]]\ncheck = \"pcie.mrrs\"\nreason = \"unused\"\nexpires = 2999-12-31\n",
    )
    .unwrap();
    let (code, r, _) = check_json(&down, &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?}", failing(&r));
    let w = find(&r, "rdma.ports", "mlx5_3/1");
    assert_eq!(w.status, Status::Skip);
    assert!(
        w.message.starts_with("waived until 2999-12-31: "),
        "{}",
        w.message
    );
    assert!(w
        .evidence
        .iter()
        .any(|e| e.observed == "fail waived: case 17: cable on order"));
    let waivers: Vec<(Status, &str)> = r
        .findings
        .iter()
        .filter(|f| f.id == "policy.waiver")
        .map(|f| (f.status, f.message.as_str()))
        .collect();
    assert_eq!(waivers.len(), 3);
    assert_eq!(waivers[0].0, Status::Pass);
    assert!(waivers[0]
        .1
        .contains("1 finding(s) waived (case 17: cable on order)"));
    assert_eq!(waivers[2].0, Status::Skip, "{}", waivers[2].1);
    // Another host: the host-scoped waiver does not apply.
    std::fs::write(
        &p,
        "[[waiver]]\ncheck = \"rdma\"\nhosts = [\"other-*\"]\nreason = \"r\"\nexpires = 2999-12-31\n",
    )
    .unwrap();
    let (code, r, _) = check_json(&down, &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    assert_eq!(find(&r, "rdma.ports", "mlx5_3/1").status, Status::Fail);
    // An expired waiver waives nothing and says so.
    std::fs::write(
        &p,
        "[[waiver]]\ncheck = \"rdma.ports\"\nreason = \"case 3\"\nexpires = 2000-01-31\n",
    )
    .unwrap();
    let (code, r, _) = check_json(&down, &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    assert_eq!(find(&r, "rdma.ports", "mlx5_3/1").status, Status::Fail);
    let e = find(&r, "policy.waiver", "node");
    assert_eq!(e.status, Status::Warn);
    assert!(e.message.contains("expired on 2000-01-31"), "{}", e.message);
}

#[test]
fn policy_errors_name_the_file_and_line_and_exit_2() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("site.toml");
    for (text, want) in [
        (
            "[gpu]\ncount = 8\ncuont = 9\n",
            ":3:1: unknown field `cuont`",
        ),
        ("[rdma.ports]\nrate_gbps = \"fast\"\n", ":2:13: "),
        ("[iommu]\nmode = \"pt\"\n", ":2:8: unknown variant `pt`"),
        (
            "[[waiver]]\ncheck = \"rdma.ports\"\nexpires = 2026-01-01\n",
            "missing field `reason`",
        ),
        (
            "[severity]\n\"rdma.nope\" = \"warn\"\n",
            "unknown check id or category `rdma.nope`",
        ),
        (
            "[peer_memory]\nmechanism = \"gdrcopy\"\n",
            "unknown variant `gdrcopy`",
        ),
        (
            "schema = \"gdrdoctor.policy/v9\"\n",
            "unsupported policy schema",
        ),
    ] {
        std::fs::write(&p, text).unwrap();
        let (code, out, err) = run(&[
            "check",
            "--sysroot",
            &s(&fixture(HEALTHY)),
            "--policy",
            &s(&p),
        ]);
        assert_eq!(code, 2, "{text}: {out}");
        assert!(out.is_empty(), "no report when the policy is broken");
        assert!(err.contains(&s(&p)), "{err}");
        assert!(err.contains(want), "{text}: want {want} in {err}");
        let (code, _, verr) = run(&["policy", "validate", &s(&p)]);
        assert_eq!(code, 2);
        assert!(verr.contains(want), "{verr}");
    }
    // The message keeps its line breaks: the line itself and a caret under the column, each
    // on a line of its own (they were one line of `\n` escapes); a control character the file
    // holds is still escaped.
    std::fs::write(
        &p,
        "schema = \"gdrdoctor.policy/v1\"\n[gpu]\ncuont = 9 # \u{1b}[2J\u{1b}]0;pwned\u{7}\n",
    )
    .unwrap();
    for args in [
        vec!["policy", "validate", &s(&p)],
        vec![
            "check",
            "--sysroot",
            &s(&fixture(HEALTHY)),
            "--policy",
            &s(&p),
        ],
    ]
    .iter()
    .map(|a| a.iter().map(|x| x.to_string()).collect::<Vec<_>>())
    {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, err) = run(&a);
        assert_eq!(code, 2, "{err}");
        assert!(!err.contains("\\n"), "a literal \\n: {err}");
        assert!(
            err.lines().any(|l| l.trim_start().starts_with("3 | ")),
            "the line on a line of its own: {err}"
        );
        assert!(
            err.lines().any(|l| l.trim_end().ends_with('^')),
            "the caret on a line of its own: {err}"
        );
        assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    }
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "--policy",
        &s(&t.path().join("absent.toml")),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("absent.toml") && err.contains("No such file"),
        "{err}"
    );
    // validate accepts what init writes.
    let good = golden_policy(t.path());
    let (code, out, _) = run(&["policy", "validate", &s(&good)]);
    assert_eq!(code, 0);
    assert!(
        out.contains("valid policy: gpu, rdma, pcie, driver, peer_memory, iommu, gdr, kernel"),
        "{out}"
    );
}

#[test]
fn no_policy_wins_and_the_environment_names_one() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p.toml");
    std::fs::write(&p, "[gpu]\ncount = 9\n").unwrap();
    let out = std::process::Command::new(bin())
        .args(["check", "--sysroot", &s(&fixture(HEALTHY)), "-f", "oneline"])
        .env("GDRDOCTOR_POLICY", &p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "FAIL policy.gpu: 8 nvidia gpu(s) on the pci bus, the policy expects 9\n"
    );
    let out = std::process::Command::new(bin())
        .args([
            "check",
            "--sysroot",
            &s(&fixture(HEALTHY)),
            "--no-policy",
            "-f",
            "oneline",
        ])
        .env("GDRDOCTOR_POLICY", &p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn policy_init_refuses_to_overwrite() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let (code, _, err) = run(&[
        "policy",
        "init",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "-o",
        &s(&p),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--force"), "{err}");
    let (code, _, _) = run(&[
        "policy",
        "init",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "-o",
        &s(&p),
        "--force",
    ]);
    assert_eq!(code, 0);
}

#[test]
fn every_fixture_passes_a_policy_written_from_itself() {
    // Whatever the node, `policy init` writes what it shows: the node passes its own policy
    // (its other findings aside).
    let t = tempfile::tempdir().unwrap();
    for sc in scenarios() {
        let p = t.path().join(format!("{sc}.toml"));
        let (code, _, err) = run(&[
            "policy",
            "init",
            "--sysroot",
            &s(&fixture(&sc)),
            "-o",
            &s(&p),
        ]);
        assert_eq!(code, 0, "{sc}: {err}");
        let (_, r, _) = check_json(&fixture(&sc), &["--policy", &s(&p)]);
        let bad: Vec<_> = r
            .findings
            .iter()
            .filter(|f| {
                f.id.starts_with("policy.") && !matches!(f.status, Status::Pass | Status::Skip)
            })
            .collect();
        assert!(bad.is_empty(), "{sc}: {bad:#?}");
    }
}

/// A policy that parses but cannot mean what its author wants is refused (exit 2, naming the
/// file and the rule): a port rule that expects nothing (it passed every port, "as the policy
/// expects", whatever the port read), `max_path` alone, an empty list of IOMMU modes (it
/// failed every node), a waiver for `hosts = []`, and a policy that says nothing at all (an
/// empty or truncated file). A file that is not a few MiB of text is not read whole.
#[test]
fn a_policy_that_cannot_mean_anything_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let head = "schema = \"gdrdoctor.policy/v1\"\n";
    for (name, body, says) in [
        ("ports", "[[rdma.ports]]\ndevices = [\"mlx5_3\"]\n", "rdma.ports[0]: the rule expects nothing"),
        ("maxpath", "[gdr]\nmax_path = \"PIX\"\n", "gdr: max_path alone checks nothing"),
        ("iommu", "[iommu]\nmode = []\n", "iommu.mode: an empty list accepts no mode"),
        (
            "hosts",
            "[gpu]\ncount = 8\n[[waiver]]\ncheck = \"pcie\"\nhosts = []\nreason = \"x\"\nexpires = \"2099-01-01\"\n",
            "`hosts = []` names no host",
        ),
        ("empty", "", "the policy says nothing"),
    ] {
        let p = t.path().join(format!("{name}.toml"));
        std::fs::write(&p, format!("{head}{body}")).unwrap();
        let (code, _, err) = run(&[
            "check",
            "--sysroot",
            &s(&fixture(HEALTHY)),
            "--policy",
            &s(&p),
        ]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(&s(&p)) && err.contains(says), "{name}: {err}");
    }
    // /dev/zero is not read to the end.
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "--policy",
        "/dev/zero",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than 4 MiB"), "{err}");
}

/// `policy init` on a hostile snapshot: a line break in a firmware string or the hostname,
/// which the written policy quotes in comments, must not start a line of TOML (a planted key).
#[test]
fn policy_init_comments_carry_no_line_break_from_the_node() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-mixed-fw"), t.path());
    std::fs::write(
        t.path().join("sys/class/infiniband/mlx5_5/fw_ver"),
        "28.39.1002\n[waiver]\nINJECTED = 1\n",
    )
    .unwrap();
    let meta = t.path().join("gdrdoctor/meta.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta).unwrap()).unwrap();
    m["hostname"] = serde_json::Value::from("golden\n[severity]\nINJECTED_HOST = \"fail\"");
    std::fs::write(&meta, serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, out, err) = run(&["policy", "init", "--sysroot", &s(t.path()), "-o", "-"]);
    assert_eq!(code, 0, "{err}");
    for line in out.lines() {
        assert!(
            !line.trim_start().starts_with("INJECTED") && line.trim() != "[waiver]",
            "a line the node wrote: {line}\n{out}"
        );
    }
    assert!(
        out.contains("INJECTED"),
        "the text is still shown, escaped: {out}"
    );
}

/// The GPUs of the healthy fixture.
const GPUS: [&str; 8] = [
    "0000:18:00.0",
    "0000:28:00.0",
    "0000:38:00.0",
    "0000:48:00.0",
    "0000:98:00.0",
    "0000:a8:00.0",
    "0000:b8:00.0",
    "0000:c8:00.0",
];

/// Set a device's current link (sysfs `current_link_speed`/`_width` and LnkSta in its config
/// space, which gdrdoctor reads first): `speed` is LnkSta's code (1 = 2.5 GT/s).
fn set_link(root: &Path, bdf: &str, speed: (u16, &str), width: u16) {
    let dir = std::fs::canonicalize(root.join("sys/bus/pci/devices").join(bdf)).unwrap();
    std::fs::write(dir.join("current_link_speed"), format!("{}\n", speed.1)).unwrap();
    std::fs::write(dir.join("current_link_width"), format!("{width}\n")).unwrap();
    let mut c = std::fs::read(dir.join("config")).unwrap();
    let mut at = usize::from(c[0x34] & 0xfc);
    let mut hops = 0;
    while at != 0 && c[at] != 0x10 {
        at = usize::from(c[at + 1] & 0xfc);
        hops += 1;
        assert!(hops < 48, "{bdf}: no PCI Express capability");
    }
    assert_ne!(at, 0, "{bdf}: no PCI Express capability");
    let o = at + 0x12;
    let sta = u16::from_le_bytes([c[o], c[o + 1]]);
    let sta = (sta & !0x03ff) | (width << 4) | speed.0;
    c[o..o + 2].copy_from_slice(&sta.to_le_bytes());
    std::fs::write(dir.join("config"), c).unwrap();
}

/// The port right above a device (its downstream or root port).
fn port_above(root: &Path, bdf: &str) -> String {
    let dir = std::fs::canonicalize(root.join("sys/bus/pci/devices").join(bdf)).unwrap();
    dir.parent()
        .and_then(|p| p.file_name())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

const GEN1: (u16, &str) = (1, "2.5 GT/s PCIe");

/// The healthy node with every GPU idle: each GPU's link, and so the port above it (the same
/// link), at 2.5 GT/s x16 to save power.
fn idle_node() -> tempfile::TempDir {
    let node = planted();
    for g in GPUS {
        set_link(node.path(), g, GEN1, 16);
        let p = port_above(node.path(), g);
        set_link(node.path(), &p, GEN1, 16);
    }
    node
}

fn policy_pcie_failing(r: &Report) -> Vec<(String, String)> {
    r.findings
        .iter()
        .filter(|f| f.id == "policy.pcie" && f.status == Status::Fail)
        .map(|f| (f.subject.clone(), f.message.clone()))
        .collect()
}

#[test]
fn idle_gpus_at_a_lower_link_speed_pass_the_golden_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = idle_node();
    // pcie.link passes them: idle gpus lower their link speed.
    let (code, plain, err) = check_json(node.path(), &["--no-policy"]);
    assert_eq!(code, 0, "{:#?} {err}", failing(&plain));
    let l = find(&plain, "pcie.link", "0000:18:00.0");
    assert!(l.message.contains("idle gpus lower"), "{}", l.message);
    // So does the policy: judged by what the links can do, at their full width.
    let (code, r, err) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?} {err}", failing(&r));
    assert!(policy_pcie_failing(&r).is_empty());
    let passes: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.id == "policy.pcie" && f.status == Status::Pass)
        .map(|f| f.message.as_str())
        .collect();
    assert!(
        passes
            .iter()
            .any(|m| m.starts_with("8 gpu link(s) at 32 GT/s x16 or better")
                && m.contains("8 at a lower speed now: idle gpus")),
        "{passes:#?}"
    );
}

#[test]
fn a_slow_link_that_is_no_idle_downshift_still_fails_the_policy() {
    let t = tempfile::tempdir().unwrap();
    let p = golden_policy(t.path());
    let node = idle_node();
    // One GPU narrow as well (x8 at 2.5 GT/s): no power saving does that.
    set_link(node.path(), "0000:48:00.0", GEN1, 8);
    // A NIC's link at 2.5 GT/s (both ends): NICs do not downshift.
    set_link(node.path(), "0000:19:00.0", GEN1, 16);
    let nic_port = port_above(node.path(), "0000:19:00.0");
    set_link(node.path(), &nic_port, GEN1, 16);
    // A switch's uplink trained at Gen1 (both ends): not the link of an idle GPU.
    let down = port_above(node.path(), "0000:98:00.0");
    let up = port_above(node.path(), &down);
    let root_port = port_above(node.path(), &up);
    set_link(node.path(), &up, GEN1, 16);
    set_link(node.path(), &root_port, GEN1, 16);
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    let bad = policy_pcie_failing(&r);
    let subjects: Vec<&str> = bad.iter().map(|(s, _)| s.as_str()).collect();
    // The narrow GPU and the port above it (the same link), the NIC, the uplink.
    let down48 = port_above(node.path(), "0000:48:00.0");
    let mut want = vec![
        "0000:48:00.0",
        down48.as_str(),
        "0000:19:00.0",
        nic_port.as_str(),
        up.as_str(),
        root_port.as_str(),
    ];
    want.sort();
    let mut got = subjects.clone();
    got.sort();
    assert_eq!(got, want, "{bad:#?}");
    let gpu = &bad.iter().find(|(s, _)| s == "0000:48:00.0").unwrap().1;
    assert_eq!(
        gpu, "gpu link at 2.5 GT/s x8, below the policy's 32 GT/s x16",
        "{bad:#?}"
    );
}

#[test]
fn policy_init_on_an_idle_node_writes_what_the_links_can_do() {
    let t = tempfile::tempdir().unwrap();
    let node = idle_node();
    let p = t.path().join("idle.toml");
    let (code, _, err) = run(&["policy", "init", "--sysroot", &s(node.path()), "-o", &s(&p)]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&p).unwrap();
    // The same speeds as the busy golden node's, with the reason in a comment.
    let golden = std::fs::read_to_string(golden_policy(t.path())).unwrap();
    let section = |t: &str, name: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.starts_with(&format!("[pcie.{name}]")))
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter(|l| l.starts_with("speed_gts") || l.starts_with("width"))
            .map(str::to_string)
            .collect()
    };
    for class in ["gpu", "nic", "switch"] {
        assert_eq!(
            section(&text, class),
            section(&golden, class),
            "[pcie.{class}]:\n{text}"
        );
    }
    assert!(text.contains("speed_gts = 32"), "{text}");
    assert!(!text.contains("speed_gts = 2.5"), "{text}");
    assert!(
        text.contains("# note: 8 link(s) of idle gpus ran at a lower speed to save power (2.5 GT/s of 32 GT/s): speed_gts is what those links can do, not the idle speed"),
        "{text}"
    );
    // The idle node passes it; a switch uplink that really trained at Gen1 does not.
    let (code, r, err) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 0, "{:#?} {err}", failing(&r));
    let down = port_above(node.path(), "0000:18:00.0");
    let up = port_above(node.path(), &down);
    set_link(node.path(), &up, GEN1, 16);
    let (code, r, _) = check_json(node.path(), &["--policy", &s(&p)]);
    assert_eq!(code, 1);
    assert_eq!(
        policy_pcie_failing(&r),
        vec![(
            up.clone(),
            "switch link at 2.5 GT/s x16, below the policy's 32 GT/s x16".to_string()
        )]
    );
}
