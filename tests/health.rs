//! Issue 17 end to end: every planted defect gives its named finding, the healthy RoCE twin
//! passes, JSON and Prometheus carry the findings for alerting, `--interval` and the state file
//! behave, snapshots replay the kernel log and the counter baseline, and the real captures in
//! ../shared/realdata (read in place, skipped when absent) parse as the real tools printed them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::klog::{self, Event, XidAction};
use gdrdoctor_checks::model::Fact;
use gdrdoctor_checks::report::{Report, Status};
use gdrdoctor_checks::roce;
use std::path::PathBuf;

fn with_env(name: &str, env: &[(&str, &str)]) -> Report {
    let dir = fixture(name);
    let mut root = gdrdoctor::source::reader::Root::sysroot(&dir).unwrap();
    let m = gdrdoctor::source::meta::read(&root).unwrap();
    root.set_complete(true);
    let mut node = gdrdoctor::collect::collect(&root, m.as_ref());
    node.live = gdrdoctor::source::meta::read_live(&root);
    node.env = Fact::known(
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        "test",
    );
    gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default())
}

fn of<'a>(r: &'a Report, id: &str) -> Vec<&'a gdrdoctor_checks::report::Finding> {
    r.findings.iter().filter(|f| f.id == id).collect()
}

#[test]
fn the_roce_twin_passes_every_check() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-roce"));
    let bad: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.status != Status::Pass)
        // Issue 39's checks skip on any HGX snapshot: the job container's view (live, inside a
        // container) and the GPU-GPU PCIe paths (every pair is joined by NVLink).
        .filter(|f| {
            !(f.status == Status::Skip
                && (f.id.starts_with("container.") || f.id == "pcie.p2p-path"))
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    let g = find(&r, "roce.gid", "mlx5_0/1");
    assert_eq!(g.message, "NCCL uses GID 3 (10.0.0.1, RoCE v2, ens1np0)");
    assert!(g.evidence.iter().any(|e| e
        .observed
        .contains("auto: 0 -> 2 (10.0.0.1, family) -> 3 (10.0.0.1, RoCE v2)")));
    assert_eq!(
        find(&r, "roce.netdev", "mlx5_7/1").message,
        "ens8np0 up, IPv4 10.0.7.1"
    );
    assert_eq!(
        find(&r, "roce.mtu", "mlx5_0/1").message,
        "ens1np0 mtu 9000: RoCE MTU 4096"
    );
    let q = find(&r, "roce.qos", "mlx5_0/1");
    assert!(
        q.message.contains("priorities 0 1 2 3 4 5 6 7"),
        "{}",
        q.message
    );
    assert!(q
        .evidence
        .iter()
        .any(|e| e.observed.contains("np_cnp_sent 1520")));
    assert_eq!(of(&r, "roce.gid").len(), 8);
}

#[test]
fn a_v1_only_gid_table_fails_roce_gid_on_that_port_only() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-roce-v1-only"));
    let f = find(&r, "roce.gid", "mlx5_1/1");
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.message.starts_with(
            "NCCL uses GID 1 (10.0.1.1, IB/RoCE v1, ens2np0), RoCE v1 where v2 is asked for"
        ),
        "{}",
        f.message
    );
    assert!(f.message.contains("no RoCE v2 entry at all"));
    assert!(f
        .remediation
        .as_deref()
        .unwrap()
        .contains("NCCL_IB_ROCE_VERSION_NUM=1"));
    assert_eq!(r.summary.fail, 1);
    assert_eq!(r.summary.exit_code, 1);
    // ... and a fabric that really runs RoCE v1 says so.
    let r = with_env(
        "hgx-h200x8-cx7x8-roce-v1-only",
        &[("NCCL_IB_ROCE_VERSION_NUM", "1")],
    );
    assert_eq!(find(&r, "roce.gid", "mlx5_1/1").status, Status::Pass);
    // With v1 asked for, the healthy ports' walk stops on their v1 GID: 0 -> 2.
    assert!(find(&r, "roce.gid", "mlx5_0/1")
        .message
        .starts_with("NCCL uses GID 2 (10.0.0.1, IB/RoCE v1"));
}

#[test]
fn a_recipe_gid_index_is_judged_and_the_right_one_suggested() {
    let r = with_env("hgx-h200x8-cx7x8-roce", &[("NCCL_IB_GID_INDEX", "1")]);
    let f = find(&r, "roce.gid", "mlx5_3/1");
    assert_eq!(f.status, Status::Fail);
    assert!(f.message.contains("a link-local GID"), "{}", f.message);
    let fix = f.remediation.as_deref().unwrap();
    assert!(
        fix.contains(
            "unset NCCL_IB_GID_INDEX (NCCL >= 2.21 then picks GID 3) or set NCCL_IB_GID_INDEX=3"
        ),
        "{fix}"
    );
    assert!(f
        .evidence
        .iter()
        .any(|e| e.source == "environment" && e.observed.contains("NCCL_IB_GID_INDEX=1")));
    // An index past the table.
    let r = with_env("hgx-h200x8-cx7x8-roce", &[("NCCL_IB_GID_INDEX", "7")]);
    assert!(find(&r, "roce.gid", "mlx5_0/1")
        .message
        .contains("outside the GID table"));
}

#[test]
fn a_flapping_port_fails_on_growth_only() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-port-flapping"));
    let f = find(&r, "counters.ib-port", "mlx5_2/1");
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.message
            .starts_with("link_downed rose by 3 in 10.0 s (now 4)"),
        "{}",
        f.message
    );
    // The retrains are in the evidence too, with their growth.
    assert!(
        f.evidence
            .iter()
            .any(|e| e.observed == "link_error_recovery 6 (+3 in 10.0 s)"),
        "{:#?}",
        f.evidence
    );
    assert!(f
        .evidence
        .iter()
        .any(|e| e.observed.contains("--interval 10.0 s")));
    assert_eq!(
        find(&r, "counters.ib-port", "mlx5_3/1").message,
        "no link error counter grew in 10.0 s"
    );
    assert_eq!(r.summary.fail, 1);
    // Without the baseline the same totals (4, 6) are below ibcheckerrs' thresholds: one
    // reading cannot see the flap, and the evidence says how it was judged.
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-port-flapping"), t.path());
    std::fs::remove_file(t.path().join("gdrdoctor/counters-baseline.json")).unwrap();
    let r = report_for(t.path());
    let f = find(&r, "counters.ib-port", "mlx5_2/1");
    assert_eq!(f.status, Status::Pass);
    assert!(f
        .evidence
        .iter()
        .any(|e| e.observed.contains("one reading")));
}

#[test]
fn rising_aer_names_the_link() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-aer-rising"));
    let gpu = find(&r, "counters.aer", "0000:38:00.0");
    assert_eq!(gpu.status, Status::Fail);
    assert!(
        gpu.message
            .starts_with("gpu 2: TOTAL_ERR_NONFATAL rose by 1 in 10.0 s"),
        "{}",
        gpu.message
    );
    assert!(
        gpu.evidence.iter().any(|e| e.observed == "CmpltTO 1 (+1)"),
        "{:#?}",
        gpu.evidence
    );
    let dsp = find(&r, "counters.aer", "0000:37:00.0");
    assert_eq!(dsp.status, Status::Warn);
    assert!(
        dsp.message
            .starts_with("bridge above gpu 2 (0000:38:00.0): TOTAL_ERR_COR rose by 43"),
        "{}",
        dsp.message
    );
    assert!(dsp
        .evidence
        .iter()
        .any(|e| e.observed == "BadTLP 41 (+39), RxErr 4 (+4)"));
    assert!(dsp
        .remediation
        .as_deref()
        .unwrap()
        .contains("lspci -vvv -s 0000:37:00.0"));
    let rest = find(&r, "counters.aer", "node");
    assert_eq!(rest.status, Status::Pass);
    assert!(
        rest.message
            .contains("on 46 devices (7 gpus, 8 nics, 31 bridges"),
        "{}",
        rest.message
    );
}

#[test]
fn xid_79_drains_and_an_application_xid_does_not() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-xid-79"));
    let f = find(&r, "kernel.xid", "0000:48:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(f.message.starts_with("gpu 3 0000:48:00.0: Xid 79 (GPU has fallen off the bus; drain: reboot the node) since boot"), "{}", f.message);
    assert!(f.remediation.as_deref().unwrap().contains("reboot"));
    let app = find(&r, "kernel.xid", "0000:28:00.0");
    assert_eq!(app.status, Status::Pass);
    assert!(app.message.contains("Xid 13"), "{}", app.message);
    assert_eq!(r.summary.exit_code, 1);
}

#[test]
fn an_iommu_fault_names_the_nic() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-iommu-fault-nic"));
    let f = find(&r, "kernel.iommu-fault", "0000:39:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.message
            .starts_with("3 DMAR faults on nic mlx5_2 (0000:39:00.0)"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("DMA Write NO_PASID at 0x208000200000"),
        "{}",
        f.message
    );
    assert_eq!(find(&r, "iommu.mode", "node").status, Status::Warn);
}

#[test]
fn an_mlx5_firmware_fatal_names_the_nic() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-nic-fw-fatal"));
    let f = find(&r, "kernel.mlx5-health", "0000:b9:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.message
            .starts_with("nic mlx5_6 (0000:b9:00.0): health counter stopped"),
        "{}",
        f.message
    );
    assert!(f.message.contains("health recovery failed"));
}

#[test]
fn json_and_prometheus_carry_the_findings_for_alerting() {
    let dir = fixture("hgx-h200x8-cx7x8-xid-79").display().to_string();
    let (code, out, _) = run(&["check", "--sysroot", &dir, "--format", "json"]);
    assert_eq!(code, 1);
    let r: Report = serde_json::from_str(&out).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "kernel.xid" && f.status == Status::Fail)
        .unwrap();
    assert_eq!(f.subject, "0000:48:00.0");
    assert_eq!(f.docs, "docs/checks/kernel.xid.md");
    let (code, out, _) = run(&["check", "--sysroot", &dir, "--format", "prometheus"]);
    assert_eq!(code, 1);
    assert!(
        out.contains(
            "gdrdoctor_check_status{command=\"check\",check=\"kernel.xid\",category=\"kernel\",status=\"fail\"} 1"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "gdrdoctor_check_findings{command=\"check\",check=\"kernel.xid\",status=\"fail\"} 1"
        ),
        "{out}"
    );
    let flap = fixture("hgx-h200x8-cx7x8-port-flapping")
        .display()
        .to_string();
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &flap,
        "--format",
        "prometheus",
        "--only",
        "counters",
    ]);
    assert!(out.contains("gdrdoctor_check_status{command=\"check\",check=\"counters.ib-port\",category=\"counters\",status=\"fail\"} 1"), "{out}");
}

#[test]
fn snapshots_replay_the_kernel_log_and_the_baseline() {
    for s in ["hgx-h200x8-cx7x8-xid-79", "hgx-h200x8-cx7x8-port-flapping"] {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("snap");
        let src = fixture(s).display().to_string();
        let (code, _, err) = run(&["snapshot", "--sysroot", &src, &out.display().to_string()]);
        assert_eq!(code, 0, "{err}");
        assert!(out.join("gdrdoctor/kernel-log.txt").is_file());
        let a = report_for(&fixture(s));
        let b = report_for(&out);
        assert_eq!(comparable(&a.findings), comparable(&b.findings), "{s}");
    }
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("snap");
    let src = fixture("hgx-h200x8-cx7x8-port-flapping")
        .display()
        .to_string();
    run(&["snapshot", "--sysroot", &src, &out.display().to_string()]);
    assert!(out.join("gdrdoctor/counters-baseline.json").is_file());
}

#[test]
fn interval_needs_the_live_node_and_a_valid_duration() {
    let dir = fixture("hgx-h200x8-cx7x8-healthy").display().to_string();
    let (code, _, err) = run(&["check", "--sysroot", &dir, "--interval", "1s"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--interval reads the live counters twice"),
        "{err}"
    );
    let (code, _, err) = run(&["check", "--interval", "2d"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown unit"), "{err}");
    let (code, out, _) = run(&["check", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--interval") && out.contains("GDRDOCTOR_STATE_DIR"),
        "{out}"
    );
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = std::process::Command::new(bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn live_interval_reads_twice_and_the_state_file_is_kept_per_boot() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("state");
    let d = dir.display().to_string();
    let t0 = std::time::Instant::now();
    let (code, out, err) = run_env(
        &[
            "check",
            "--static",
            "--only",
            "counters",
            "--interval",
            "1s",
            "--format",
            "json",
        ],
        &[("GDRDOCTOR_STATE_DIR", &d)],
    );
    assert!(t0.elapsed() >= std::time::Duration::from_secs(1));
    assert!(code == 0 || code == 3 || code == 1, "{code}: {err}");
    let _: Report = serde_json::from_str(&out).unwrap();
    // The run recorded its counters for the next one, tied to this boot.
    let state = std::fs::read_to_string(dir.join("counters.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(v["schema"], "gdrdoctor.counters-state/v2");
    if let Ok(boot) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        assert_eq!(v["boot_id"], boot.trim());
    }
    // A corrupt file is ignored and rewritten.
    std::fs::write(dir.join("counters.json"), b"\0garbage").unwrap();
    let (code, _, err) = run_env(
        &["check", "--static", "--only", "counters"],
        &[("GDRDOCTOR_STATE_DIR", &d)],
    );
    assert_ne!(code, 2, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("counters.json")).unwrap()).unwrap();
    assert_eq!(v["schema"], "gdrdoctor.counters-state/v2");
    // --no-state neither reads nor writes.
    let other = t.path().join("none");
    let o = other.display().to_string();
    run_env(
        &["check", "--static", "--only", "counters", "--no-state"],
        &[("GDRDOCTOR_STATE_DIR", &o)],
    );
    assert!(!other.exists());
    // A sysroot run never touches the state.
    let fx = fixture("hgx-h200x8-cx7x8-healthy").display().to_string();
    run_env(
        &["check", "--sysroot", &fx, "--only", "counters"],
        &[("GDRDOCTOR_STATE_DIR", &o)],
    );
    assert!(!other.exists());
}

// ---------------------------------------------------------------------------------------------
// Real captures, read in place.

fn realdata(rel: &str) -> Option<PathBuf> {
    Some(require::realdata(&repo())?.join(rel))
}

#[test]
fn real_cx6dx_gid_table_gives_nccl_index_3() {
    let Some(p) = realdata("notes-cx6dx-roce-bond-ibv_devinfo-vv") else {
        return;
    };
    let text: String = std::fs::read_dir(&p)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let gids = roce::parse_ibv_devinfo_gids(&text);
    assert_eq!(gids.len(), 4, "{gids:?}");
    let entries: Vec<roce::Entry> = gids
        .iter()
        .map(|(i, g, t)| roce::Entry {
            index: *i,
            gid: *g,
            kind: roce::TypeRead::Text(t.clone()),
        })
        .collect();
    // gid_tbl_len 255 in the same capture.
    let c = roce::nccl_gid_index(255, &entries, &roce::gid_env(&Default::default()), None);
    assert_eq!(c.index, Some(3));
    assert_eq!(roce::display(&entries[3].gid), "27.105.179.3");
    // NCCL before 2.21 would have used GID 0: link-local, RoCE v1.
    let old = roce::nccl_gid_index(
        255,
        &entries,
        &roce::gid_env(&Default::default()),
        roce::NcclVersion::parse("2.20.5"),
    );
    assert_eq!(old.index, Some(0));
}

#[test]
fn real_xid_119_is_a_drain() {
    let Some(p) = realdata("gpud-testdata/misc/dmesg-with-xid-119.log") else {
        return;
    };
    let text = std::fs::read_to_string(&p).unwrap();
    let ev = klog::events(&text);
    let xids: Vec<_> = ev
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Xid { gpu, xid, .. } => Some((gpu.clone(), *xid)),
            _ => None,
        })
        .collect();
    // Five GSP timeouts on the same GPU within six minutes.
    assert_eq!(xids, vec![("0000:9b:00.0".to_string(), 119); 5]);
    assert_eq!(klog::action(119, ""), XidAction::DrainResetGpu);
    // The same file as a foreign capture's /var/log/dmesg.
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("var/log")).unwrap();
    std::fs::copy(&p, t.path().join("var/log/dmesg")).unwrap();
    let r = report_for(t.path());
    let f = find(&r, "kernel.xid", "0000:9b:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(
        f.message.contains("Xid 119 x5 (GSP RPC timeout"),
        "{}",
        f.message
    );
    assert!(f.evidence[0].source.starts_with("/var/log/dmesg"));
}

#[test]
fn real_amd_vi_faults_name_the_gpu() {
    let Some(p) = realdata("cuda-samples-48-amd-vi-io-page-fault/dmesg-excerpt.txt") else {
        return;
    };
    let text = std::fs::read_to_string(&p).unwrap();
    let ev = klog::events(&text);
    assert_eq!(
        ev.len(),
        text.lines().filter(|l| l.contains("IO_PAGE_FAULT")).count()
    );
    assert!(ev.iter().all(|(_, e)| matches!(e, Event::IommuFault { device, unit: "AMD-Vi", .. } if device == "0000:07:00.0")));
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("var/log")).unwrap();
    std::fs::copy(&p, t.path().join("var/log/kern.log")).unwrap();
    let r = report_for(t.path());
    let f = find(&r, "kernel.iommu-fault", "0000:07:00.0");
    // Syslog text without a boot banner: it may predate this boot, so a warning.
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.message
            .starts_with("9 AMD-Vi faults on gpu (driver nvidia) (0000:07:00.0)"),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("IO_PAGE_FAULT at 0x80000040 flags=0x0020"),
        "{}",
        f.message
    );
}

#[test]
fn real_peermem_callback_lines_are_kernel_peermem_events() {
    for rel in [
        "gpud-testdata/misc/kmsg.2.peermem.log",
        "gpud-testdata/misc/dmesg.peermem.log.0",
    ] {
        let Some(p) = realdata(rel) else { return };
        let text = std::fs::read_to_string(&p).unwrap();
        // Every line is the free callback's `invalid context` (kernel.peermem), none an Xid,
        // IOMMU fault or load failure.
        let ev = klog::events(&text);
        let callbacks = text
            .lines()
            .filter(|l| l.contains("nv_get_p2p_free_callback"))
            .count();
        assert_eq!((ev.len(), callbacks), (7, 7), "{rel}");
        assert!(
            ev.iter().all(|(_, e)| matches!(
                e,
                klog::Event::PeerMemCallback {
                    kind: klog::PeerMemKind::InvalidContext,
                    ..
                }
            )),
            "{rel}: {ev:?}"
        );
        let (_, out, _) = run(&["diagnose", p.to_str().unwrap(), "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let f: Vec<&serde_json::Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"] == "kernel.peermem")
            .collect();
        assert_eq!(f.len(), 1, "{rel}");
        assert_eq!(f[0]["status"], "warn", "{rel}");
        let first = text.lines().next().unwrap();
        assert!(
            klog::message(first).starts_with("nvidia-peermem nv_get_p2p_free_callback"),
            "{rel}: {}",
            klog::message(first)
        );
    }
}

#[test]
fn real_saturated_port_counters_warn() {
    let Some(p) = realdata("gpud-testdata/sys-class-infiniband-h100") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    copy_tree(&p, &t.path().join("sys/class/infiniband"));
    let r = report_for(t.path());
    let f = find(&r, "counters.ib-port", "mlx5_1/1");
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.message
            .contains("link_downed is saturated at 255 (an 8-bit counter)"),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("excessive_buffer_overrun_errors is saturated at 15"),
        "{}",
        f.message
    );
    // The RoCE bond's GID table is not in this capture: skipped, not failed.
    assert_eq!(find(&r, "roce.gid", "mlx5_bond_0/1").status, Status::Skip);
    assert_eq!(
        find(&r, "roce.netdev", "mlx5_bond_0/1").status,
        Status::Skip
    );
}

#[test]
fn a_counter_file_that_is_not_a_number_is_an_error_and_unused_ones_are_not_read() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-healthy"), t.path());
    let dir = t
        .path()
        .join("sys/class/infiniband/mlx5_0/ports/1/counters");
    // Resolve the class link to the device's real directory inside the copy.
    let dir = std::fs::canonicalize(&dir).unwrap();
    // A counter no check judges, garbled: never read, so no harm.
    std::fs::write(dir.join("port_xmit_data"), "garbage\n").unwrap();
    let r = report_for(t.path());
    assert_eq!(
        find(&r, "counters.ib-port", "mlx5_0/1").status,
        Status::Pass
    );
    // A judged one garbled: the port is not judged on the rest.
    std::fs::write(dir.join("symbol_error"), "12 errors\n").unwrap();
    let r = report_for(t.path());
    let f = find(&r, "counters.ib-port", "mlx5_0/1");
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(
        f.message.contains("damaged") && f.message.contains("symbol_error"),
        "{}",
        f.message
    );
}
