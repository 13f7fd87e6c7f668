//! The real captures in ../shared/realdata (skipped when the folder is absent): every sysroot
//! there runs through the whole pipeline without a panic, gives valid v1 JSON, and no check says
//! `pass` about something the capture does not contain.
//!
//! The captures store sysfs symlinks as plain files holding the link target; they are rebuilt as
//! links in a temporary copy (nothing is copied into the project).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::report::{Report, Status};
use std::path::{Path, PathBuf};

fn realdata() -> Option<PathBuf> {
    require::realdata(&repo())
}

/// Copy `src` to `dst`, turning files whose whole content is a relative path without a newline
/// (how the captures flattened symlinks) back into symlinks.
fn rehydrate(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            rehydrate(&e.path(), &to);
        } else if t.is_file() {
            let b = std::fs::read(e.path()).unwrap_or_default();
            let s = String::from_utf8_lossy(&b);
            if b.len() < 512 && s.starts_with("../") && !s.contains('\n') && !s.contains(' ') {
                std::os::unix::fs::symlink(s.as_ref(), &to).unwrap();
            } else {
                std::fs::write(&to, &b).unwrap();
            }
        }
    }
}

fn check_capture(name: &str, tree: &Path) -> Report {
    let rep = report_for(tree);
    let json = serde_json::to_string(&rep).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back.schema, "gdrdoctor.report/v1");
    for f in rep.findings.iter().filter(|f| f.status == Status::Pass) {
        for e in &f.evidence {
            let src = &e.source;
            if src.starts_with('/') && !src.contains('*') && !src.contains('{') {
                assert!(
                    tree.join(src.trim_start_matches('/'))
                        .symlink_metadata()
                        .is_ok(),
                    "{name}: {} passes citing {src}, which the capture does not contain",
                    f.id
                );
            }
        }
    }
    rep
}

const SYSROOTS: &[&str] = &[
    "hwloc-sysfs-xeon4108-cx4-plx",
    "hwloc-sysfs-xeon-e5-2680-cx3-mlx4-mic",
    "hwloc-sysfs-power9-v100-procdrivernvidia",
    "hwloc-nvidia-dgx-gb10-proc-dmi",
];

#[test]
fn every_real_sysroot() {
    let Some(rd) = realdata() else { return };
    for name in SYSROOTS {
        let t = tempfile::tempdir().unwrap();
        rehydrate(&rd.join(name), t.path());
        let rep = check_capture(name, t.path());
        // None of these captures contains modules, memlock or the driver version file: those
        // checks must not pass.
        for id in ["kmod.nvidia-peermem", "kmod.nv-peer-mem", "mem.memlock"] {
            let f = find(&rep, id, "node");
            assert!(
                matches!(f.status, Status::Error | Status::Skip),
                "{name}: {id} is {:?}: {}",
                f.status,
                f.message
            );
        }
    }
}

#[test]
fn xeon4108_pci_tree_and_nics() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(&rd.join("hwloc-sysfs-xeon4108-cx4-plx"), t.path());
    let rep = check_capture("xeon4108", t.path());
    // Two ConnectX-4 functions (15b3:1013) under PLX switches, found by walking /sys/devices
    // (the capture has no /sys/bus/pci/devices links).
    let cx4: Vec<_> = rep
        .inventory
        .pci
        .iter()
        .filter(|p| p.vendor_id.as_deref() == Some("15b3"))
        .collect();
    assert_eq!(cx4.len(), 2, "{cx4:?}");
    assert!(cx4.iter().all(|p| p.parent.is_some()));
    assert!(rep.inventory.gpus.is_empty());
    // The capture has no /sys/class/infiniband: unknown, not "no rdma device".
    assert_eq!(find(&rep, "rdma.devices", "node").status, Status::Error);
}

#[test]
fn power9_gpus_without_vendor_files_are_unknown_not_absent() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(
        &rd.join("hwloc-sysfs-power9-v100-procdrivernvidia"),
        t.path(),
    );
    let rep = check_capture("power9", t.path());
    // Six display-class functions (the NVLink V100s) but no vendor files in the capture.
    let f = find(&rep, "gpu.present", "node");
    assert_eq!(f.status, Status::Error, "{f:?}");
    assert!(f.message.starts_with("6 display-class"), "{}", f.message);
    // Kernel 4.14 is a definite fact of the capture: no dma-buf path.
    let d = find(&rep, "kmod.dmabuf", "node");
    assert_eq!(d.status, Status::Fail, "{d:?}");
    assert!(d.message.contains("4.14.0"), "{}", d.message);
}

#[test]
fn gb10_cmdline_says_translated() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(&rd.join("hwloc-nvidia-dgx-gb10-proc-dmi"), t.path());
    let rep = check_capture("gb10", t.path());
    let f = find(&rep, "iommu.mode", "node");
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(
        f.remediation
            .as_deref()
            .unwrap()
            .contains("iommu.passthrough=1"),
        "{f:?}"
    );
}

#[test]
fn gpud_h100_infiniband_class_tree() {
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(
        &rd.join("gpud-testdata/sys-class-infiniband-h100"),
        &t.path().join("sys/class/infiniband"),
    );
    let rep = check_capture("gpud-h100", t.path());
    let names: Vec<&str> = rep
        .inventory
        .nics
        .iter()
        .map(|n| n.ibdev.as_str())
        .collect();
    assert!(names.len() >= 8, "{names:?}");
    assert_eq!(find(&rep, "rdma.devices", "node").status, Status::Pass);
    // Every port finding names a device/port and carries the sysfs state.
    let ports: Vec<_> = rep
        .findings
        .iter()
        .filter(|f| f.id == "rdma.ports")
        .collect();
    assert!(ports.len() >= names.len());
    assert!(ports.iter().all(|f| f.subject.contains('/')));
}

/// `gdrdoctor topo --nvidia-smi` on every pasted matrix: what the real tool said, read back.
fn smi(rel: &str) -> Option<serde_json::Value> {
    let rd = realdata()?;
    let p = rd.join(rel);
    let (code, out, err) = run(&[
        "topo",
        "--nvidia-smi",
        &p.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{rel}: {err}");
    Some(serde_json::from_str(&out).unwrap())
}

fn close(v: &serde_json::Value, gpu: &str) -> Vec<String> {
    v["close_nics"][gpu]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn smi_matrices_give_the_distance_verdicts_the_real_tool_implies() {
    // HGX H100 (sglang #30401): each GPU PIX to its own mlx5 NIC: balanced rails.
    let Some(v) = smi("sglang-30401-hgx-h100/nvidia-smi-topo-m.txt") else {
        return;
    };
    for i in 0..8 {
        assert_eq!(close(&v, &format!("GPU{i}")), vec![format!("mlx5_{i}")]);
    }
    assert!(v["rails"].as_str().unwrap().starts_with("balanced"));
    // A800 (llm-action): GPU7 has two PIX NICs, GPU0/2/4/5/6 none.
    let v = smi("llm-action-a800x8-4nic-topo/nvidia-smi-topo-m.txt").unwrap();
    assert_eq!(close(&v, "GPU7"), vec!["mlx5_2", "mlx5_3"]);
    for g in ["GPU0", "GPU2", "GPU4", "GPU5", "GPU6"] {
        assert!(close(&v, g).is_empty(), "{g}");
    }
    assert!(v["rails"].as_str().unwrap().starts_with("asymmetric"));
    // DGX-A100-like EPYC (oyanghd): two NICs per GPU at PXB, the storage NICs SYS to all.
    let v = smi("oyanghd-a100x8-epyc7742-topo/nvidia-smi-topo-m.txt").unwrap();
    assert_eq!(close(&v, "GPU0").len(), 2);
    assert!(v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["nic"] == "NIC8")
        .all(|p| p["path"] == "SYS"));
    // RTX 6000 Ada box (stelline): NICs at NODE/SYS only: GDR off for every GPU.
    let v = smi("stelline-asus-esc8000a-e12/12-nvidia-smi_topo_-m.txt").unwrap();
    assert!(v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["gdr_by_distance"] == false));
    // A matrix cut short by a terminal: no panic, missing rows are unknown, not "no GDR".
    let v = smi("nccl-1737-h100-gdr-hang-excerpt/nvidia-smi-topo-m.TRUNCATED.txt").unwrap();
    assert!(v["close_nics"].get("GPU7").is_none());
    assert!(
        close(&v, "GPU1").is_empty(),
        "GPU1 has no PIX NIC in that issue"
    );
    // The copy whose NIC columns were cut off: parses, reports no NIC columns.
    let v =
        smi("llm-action-a800x8-4nic-topo/nvidia-smi-topo-m.terminal-truncated-copy.txt").unwrap();
    assert!(v["pairs"].as_array().unwrap().is_empty());
}

#[test]
fn xeon4108_plx_switch_paths_by_hand() {
    // Read by hand from sys/devices: ConnectX-4 0000:1a:00.0 sits below PLX downstream port
    // 19:04.0 of the switch whose upstream port is 18:00.0 (root port 17:00.0); a NEC vector
    // engine 1b:00.0 sits below 19:08.0 of the same switch; the second ConnectX-4 3e:00.0 is
    // behind another PLX switch (3b:00.0) under another host bridge (pci0000:3a); all NUMA 0.
    // So NIC-VE is PIX (one switch), NIC-NIC is PHB for NCCL and NODE for nvidia-smi.
    use gdrdoctor_checks::topo::{path, PathType, PciIndex, SmiType};
    let Some(rd) = realdata() else { return };
    let t = tempfile::tempdir().unwrap();
    rehydrate(&rd.join("hwloc-sysfs-xeon4108-cx4-plx"), t.path());
    let root = gdrdoctor::source::reader::Root::sysroot(t.path()).unwrap();
    let node = gdrdoctor::collect::collect(&root, None);
    let idx = PciIndex::new(&node);
    let nic1 = idx.endpoint("0000:1a:00.0", true).unwrap();
    let nic2 = idx.endpoint("0000:3e:00.0", true).unwrap();
    let ve = idx.endpoint("0000:1b:00.0", false).unwrap();
    assert_eq!(nic1.switches, vec!["0000:18:00.0"]);
    assert_eq!(nic2.switches, vec!["0000:3b:00.0"]);
    assert_eq!(nic1.cpu, "0");
    let p = path(&nic1, &ve);
    assert_eq!(p.nccl, PathType::Pix);
    assert_eq!(p.p2p_bridges, vec!["0000:19:04.0", "0000:19:08.0"]);
    let q = path(&nic1, &nic2);
    assert_eq!((q.nccl, q.smi), (PathType::Phb, SmiType::Node));
}

/// A capture without the PCI bus (the DGX Spark's /proc and DMI only) says so: the bus is not
/// in the capture, which is not a node without GPUs (it failed `gpu.present`).
#[test]
fn a_capture_without_the_pci_bus_is_not_a_node_without_gpus() {
    let Some(rd) = realdata() else { return };
    let r = report_for(&rd.join("hwloc-nvidia-dgx-gb10-proc-dmi"));
    let g = find(&r, "gpu.present", "node");
    assert_eq!(g.status, Status::Error, "{g:?}");
}

/// RDMA devices whose ports cannot be read (the mlx4 capture): RoCE or not is unknown, an
/// error per device, never "no RoCE here (InfiniBand only)".
#[test]
fn unreadable_ports_are_not_infiniband_only() {
    let Some(rd) = realdata() else { return };
    let r = report_for(&rd.join("hwloc-sysfs-xeon-e5-2680-cx3-mlx4-mic"));
    let roce: Vec<_> = r.findings.iter().filter(|f| f.id == "roce.gid").collect();
    assert!(!roce.is_empty());
    assert!(
        roce.iter()
            .all(|f| f.status == Status::Error && !f.message.contains("InfiniBand only")),
        "{roce:?}"
    );
}

/// A matrix alone (the A800 node, no lsmod): whether PXN carries GPU0 is undecided in the GDR
/// table, so `topo.nic-distance` must not say NCCL stages it through host memory.
#[test]
fn nic_distance_agrees_with_an_undecided_pxn() {
    let Some(rd) = realdata() else { return };
    let t = std::fs::read_to_string(rd.join("llm-action-a800x8-4nic-topo/nvidia-smi-topo-m.txt"))
        .unwrap();
    let r = gdrdoctor_checks::paste::report::diagnose(
        &[gdrdoctor_checks::paste::Input {
            name: "m.txt".into(),
            text: t,
        }],
        &gdrdoctor_checks::RunOptions::default(),
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "topo.nic-distance" && f.subject == "GPU0")
        .unwrap();
    assert!(
        f.message.contains("(pxn) instead is undecided"),
        "{}",
        f.message
    );
    assert!(
        !f.message.contains("stages through host memory"),
        "{}",
        f.message
    );
    // The peer GPU the note names is the one the per-pair table names for the nearest NIC
    // (the first NIC's note named GPU1, mlx5_0's peer, for GPU4, whose nearest is mlx5_2).
    for g in ["GPU4", "GPU5", "GPU6"] {
        let f = r
            .findings
            .iter()
            .find(|f| f.id == "topo.nic-distance" && f.subject == g)
            .unwrap();
        assert!(!f.message.contains("through GPU1"), "{g}: {}", f.message);
    }
}

/// ibstat that ended with `ibpanic: ... stat of IB device 'mlx5_8' failed`: the listing is not
/// whole, and the device it could not read is an error, never a clean pass (it exited 0).
#[test]
fn an_ibstat_that_panicked_is_not_a_whole_listing() {
    let Some(rd) = realdata() else { return };
    let p = rd.join("gpud-testdata/ibstat/ibstat.39.0.a100.failed.ibpanic.exit-255.0");
    let t = std::fs::read_to_string(p).unwrap();
    let r = gdrdoctor_checks::paste::report::diagnose(
        &[gdrdoctor_checks::paste::Input {
            name: "ibstat.txt".into(),
            text: t,
        }],
        &gdrdoctor_checks::RunOptions::default(),
    );
    let e = r
        .findings
        .iter()
        .find(|f| f.id == "rdma.ports" && f.subject == "mlx5_8")
        .unwrap();
    assert_eq!(e.status, Status::Error, "{e:?}");
    assert!(
        e.evidence.iter().any(|x| x.observed.contains("ibpanic")),
        "{e:?}"
    );
    assert_eq!(r.summary.exit_code, 3);
}

/// The H200 x2 VM on NVSwitch (realdata, 2026-11-30): no Fabric Manager in the guest (the
/// switches stay with the host), `cuInit` worked and 18 NVLinks per GPU were up. It is not a
/// node without Fabric Manager: `driver.fabric-manager` passes, citing what showed the fabric up.
#[test]
fn a_vm_on_nvswitch_without_its_own_fabric_manager_is_not_failed() {
    let Some(rd) = realdata() else { return };
    let snap = rd.join("h200x2-nvswitch-2026-11-30/snap.tar.gz");
    let s = snap.to_string_lossy().to_string();
    let (_, out, err) = run(&[
        "check",
        "--sysroot",
        &s,
        "--only",
        "driver.fabric-manager",
        "-f",
        "json",
    ]);
    let r: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let f = find(&r, "driver.fabric-manager", "node");
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    assert!(f.message.contains("managed outside"), "{}", f.message);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.observed.contains("cuInit succeeded")),
        "{:#?}",
        f.evidence
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e.observed.contains("18 nvlinks active to nvswitch")),
        "{:#?}",
        f.evidence
    );
}

/// A whole real HGX H100 `lspci -vvv` (gpud's testdata): its 49 switch ports pci.ids names
/// ambiguously ("PEX890xx", PMC-Sierra "Device 4128") are still read by their class, so the
/// paste is not "partly unreadable" (it was: exit 3 and advice to paste it again).
#[test]
fn a_whole_real_lspci_with_unnamed_switch_ports_is_read() {
    let Some(rd) = realdata() else { return };
    let p = rd.join("gpud-hgx-h100-lspci-vvv/lspci-vvv.txt");
    let (code, out, err) = run(&["diagnose", p.to_str().unwrap(), "-f", "json"]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    let findings = r["findings"].as_array().unwrap();
    let errors: Vec<_> = findings.iter().filter(|f| f["status"] == "error").collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_ne!(code, 3);
    assert!(findings
        .iter()
        .any(|f| f["id"] == "gpu.present" && f["status"] == "pass"));
}
