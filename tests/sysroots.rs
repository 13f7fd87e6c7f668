//! Every constructed sysroot under fixtures/sysroots: the JSON report is compared with its golden
//! file (fixtures/golden/<scenario>.json; regenerate with GDRDOCTOR_UPDATE_GOLDEN=1 and review
//! the diff), and each planted defect is asserted explicitly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::{Report, Status};

#[test]
fn golden_reports() {
    let update = std::env::var("GDRDOCTOR_UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for s in scenarios() {
        let r = report_for(&fixture(&s));
        let got = serde_json::to_string_pretty(&r).unwrap() + "\n";
        let path = repo().join("fixtures/golden").join(format!("{s}.json"));
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with GDRDOCTOR_UPDATE_GOLDEN=1)",
                path.display()
            )
        });
        if want != got {
            failures.push(s.clone());
        }
        // The golden parses back into the strict v1 types (deny_unknown_fields).
        let _: Report = serde_json::from_str(&want).unwrap();
    }
    assert!(failures.is_empty(), "reports differ from fixtures/golden for {failures:?}; rerun with GDRDOCTOR_UPDATE_GOLDEN=1 and review");
}

#[test]
fn healthy_node_is_all_pass() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    let not_pass: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.status != Status::Pass)
        .collect();
    assert!(not_pass.is_empty(), "{not_pass:#?}");
    assert_eq!(r.summary.exit_code, 0);
    assert_eq!(r.inventory.gpus.len(), 8);
    assert_eq!(r.inventory.nics.len(), 8);
    assert_eq!(r.inventory.iommu.mode, "off");
    assert_eq!(r.inventory.driver.flavor.as_deref(), Some("open"));
    let g0 = &r.inventory.gpus[0];
    assert!(g0.name.contains("H200"), "{}", g0.name);
    assert_eq!(g0.link.cur_speed_gts, Some(32.0));
    assert!(g0
        .bars
        .iter()
        .any(|b| b.size == 256 << 30 && b.prefetchable && b.mem64));
    // Each NIC resolves to its PCI function through the class link.
    assert_eq!(r.inventory.nics[0].bdf.as_deref(), Some("0000:19:00.0"));
    assert_eq!(find(&r, "gpu.present", "0000:18:00.0").status, Status::Pass);
}

#[test]
fn no_peermem_and_proprietary_driver_means_no_gdr() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-no-peermem"));
    let pm = find(&r, "kmod.nvidia-peermem", "node");
    assert_eq!(pm.status, Status::Fail);
    assert!(pm.message.contains("impossible"), "{}", pm.message);
    assert!(pm
        .remediation
        .as_deref()
        .unwrap()
        .contains("modprobe nvidia-peermem"));
    let db = find(&r, "kmod.dmabuf", "node");
    assert_eq!(db.status, Status::Fail);
    assert!(db.message.contains("proprietary"), "{}", db.message);
    assert_eq!(r.summary.exit_code, 1);
}

#[test]
fn translated_iommu_is_a_warning_with_the_intel_fix() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-iommu-translated"));
    let f = find(&r, "iommu.mode", "node");
    assert_eq!(f.status, Status::Warn);
    assert!(f
        .remediation
        .as_deref()
        .unwrap()
        .contains("intel_iommu=on iommu=pt"));
    assert!(f.evidence.iter().any(|e| e.observed.contains("DMA-FQ")));
    assert_eq!(r.inventory.iommu.mode, "translated");
    assert_eq!(
        r.summary.exit_code, 0,
        "a warning alone does not fail the gate"
    );
}

#[test]
fn down_port_fails_its_device_only() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-port-down"));
    let f = find(&r, "rdma.ports", "mlx5_3/1");
    assert_eq!(f.status, Status::Fail);
    assert!(f.message.contains("DOWN"));
    assert!(f.remediation.as_deref().unwrap().contains("cable"));
    assert_eq!(find(&r, "rdma.ports", "mlx5_2/1").status, Status::Pass);
    assert_eq!(r.summary.fail, 1);
}

#[test]
fn mixed_firmware_names_both_versions() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-mixed-fw"));
    let f = find(&r, "rdma.firmware", "model MT4129");
    assert_eq!(f.status, Status::Warn);
    let ev = &f.evidence[0].observed;
    assert!(
        ev.contains("28.39.1002: mlx5_5 mlx5_6") && ev.contains("28.43.1014"),
        "{ev}"
    );
}

#[test]
fn limited_memlock_warns_with_the_value() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-memlock-limited"));
    let f = find(&r, "mem.memlock", "node");
    assert_eq!(f.status, Status::Warn);
    assert!(f.message.contains("64 KiB"), "{}", f.message);
}
