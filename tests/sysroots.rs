//! Every fixture node (fixtures/nodes/<scenario>.tar.gz): the JSON report is compared with its golden
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

/// The archives as users point at them: `check --sysroot fixtures/nodes/X.tar.gz` (gdrdoctor
/// reads the archive in memory, `source::reader::memory`) prints the golden report, timestamp
/// aside, and exits with its exit code: every node, so the archive's reader and the directory's
/// (`golden_reports`) are held to the same answers.
#[test]
fn archives_read_directly_give_their_golden_reports() {
    let mut failures = Vec::new();
    for s in scenarios() {
        let archive = nodes::archive(&s);
        let (code, out, err) = run(&[
            "check",
            "--sysroot",
            &archive.display().to_string(),
            "--format",
            "json",
            "--no-state",
        ]);
        let mut got: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{s}: {e}: stdout {out:?}, stderr {err:?}"));
        assert!(
            got.as_object_mut()
                .and_then(|o| o.remove("timestamp"))
                .is_some(),
            "{s}: check stamps its report"
        );
        let path = repo().join("fixtures/golden").join(format!("{s}.json"));
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if got != want {
            failures.push(format!("{s}: the report differs from {}", path.display()));
        }
        if i64::from(code) != want["summary"]["exit_code"].as_i64().unwrap() {
            failures.push(format!("{s}: exit code {code}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// What the reader answers, path by path, from an archive in memory and from the directory it
/// unpacks to: every directory's entries, every file's bytes, every link's target, where each
/// link leads and what reading through it gives, and the errors of the paths that go wrong (a
/// missing file, a directory read as a file, a file used as a directory, a link loop).
#[test]
fn an_archive_in_memory_reads_as_its_directory_does() {
    use gdrdoctor::source::reader::{EntryKind, Root};
    fn walk(a: &Root, d: &Root, path: &str, depth: usize, n: &mut usize, diffs: &mut Vec<String>) {
        let (la, ld) = (a.read_dir(path), d.read_dir(path));
        if la != ld {
            diffs.push(format!("read_dir {path}: {la:?} != {ld:?}"));
            return;
        }
        let Ok(entries) = ld else { return };
        for e in entries {
            *n += 1;
            let p = if path == "/" {
                format!("/{}", e.name)
            } else {
                format!("{path}/{}", e.name)
            };
            // One question asked of both roots, the answers compared as printed.
            let mut same = |what: &str, ask: &dyn Fn(&Root) -> String| {
                let (x, y) = (ask(a), ask(d));
                if x != y {
                    diffs.push(format!("{what} {p}: {x} != {y}"));
                }
            };
            same("read", &|r| format!("{:?}", r.read(&p)));
            same("exists", &|r| format!("{:?}", r.exists(&p)));
            same("canonical", &|r| format!("{:?}", r.canonical(&p)));
            same("read_link", &|r| format!("{:?}", r.read_link(&p)));
            same("below", &|r| format!("{:?}", r.read(&format!("{p}/x"))));
            // Through a link: its listing (not walked further: sysfs links make cycles).
            if e.kind == EntryKind::Link {
                same("read_dir", &|r| format!("{:?}", r.read_dir(&p)));
            }
            if e.kind == EntryKind::Dir && depth < 24 {
                walk(a, d, &p, depth + 1, n, diffs);
            }
        }
    }
    for s in scenarios() {
        let archive = nodes::archive(&s);
        let tree = gdrdoctor::source::archive::read_tree(&archive).unwrap();
        let a = Root::archive(&archive, tree);
        let d = Root::sysroot(&fixture(&s)).unwrap();
        let (mut n, mut diffs) = (0usize, Vec::new());
        walk(&a, &d, "/", 0, &mut n, &mut diffs);
        assert!(n > 100, "{s}: only {n} entries walked");
        for p in [
            "/nowhere",
            "/sys/nowhere/deeper",
            "/sys",
            "/sys/..",
            "/../sys/bus",
        ] {
            let (x, y) = (format!("{:?}", a.read(p)), format!("{:?}", d.read(p)));
            if x != y {
                diffs.push(format!("read {p}: {x} != {y}"));
            }
        }
        assert!(
            diffs.is_empty(),
            "{s}: {} of {n} entries differ: {:#?}",
            diffs.len(),
            &diffs[..diffs.len().min(20)]
        );
    }
}

/// Issue 18's invariant on every fixture: a `pass` carries at least one evidence item with a
/// source and an observed value, and carries it itself (no check leans on the registry turning
/// an evidence-less pass into an error).
#[test]
fn every_pass_carries_its_evidence() {
    for s in scenarios() {
        let r = report_for(&fixture(&s));
        for f in &r.findings {
            assert!(
                f.status != Status::Pass || f.has_evidence(),
                "{s}: {} {} passes without evidence",
                f.id,
                f.subject
            );
            assert!(
                !f.message.contains("passed without evidence"),
                "{s}: {} {}: {}",
                f.id,
                f.subject,
                f.message
            );
        }
    }
}

#[test]
fn healthy_node_is_all_pass() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    // An InfiniBand node: the four RoCE checks do not apply (one skip each); everything else
    // passes (hgx-h200x8-cx7x8-roce is the RoCE twin where they pass too).
    let not_pass: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.status != Status::Pass)
        .filter(|f| {
            !(f.id.starts_with("roce.")
                && f.status == Status::Skip
                && f.message.contains("InfiniBand only"))
        })
        .filter(|f| !skips_on_every_hgx_snapshot(f))
        .collect();
    assert!(not_pass.is_empty(), "{not_pass:#?}");
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.status == Status::Skip && !skips_on_every_hgx_snapshot(f))
            .count(),
        4
    );
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
    // ... and the GPU paired with it loses its own NIC, for that reason; NCCL then sends
    // through an NVLink peer that has GDR to its NIC (PXN), so the GPU keeps GDR.
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "0000:48:00.0" && p.nic == "mlx5_3")
        .unwrap();
    assert!(!p.enabled);
    assert!(
        p.reasons[0].contains("mlx5_3 has no ACTIVE port"),
        "{:?}",
        p.reasons
    );
    let g = find(&r, "gdr.gpu", "0000:48:00.0");
    assert_eq!(g.status, Status::Pass, "{}", g.message);
    assert!(g.message.contains("via PXN"), "{}", g.message);
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

#[test]
fn healthy_pairs_match_the_hgx_layout() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    assert_eq!(r.gdr.len(), 64);
    let pair = |g: &str, n: &str| r.gdr.iter().find(|p| p.gpu == g && p.nic == n).unwrap();
    // Each GPU shares a switch with its NIC: PIX, GDR on (dma-buf, the open driver's path).
    let p = pair("0000:18:00.0", "mlx5_0");
    assert_eq!(
        (p.path.as_str(), p.enabled, p.mechanism.as_deref()),
        ("PIX", true, Some("dmabuf"))
    );
    // Another NIC on the same socket: NCCL PHB, nvidia-smi NODE. NCCL sends to it through
    // GPU 1, its local GPU, over NVLink (PXN, src/graph/paths.cc v2.30.7-1 L812-840).
    let p = pair("0000:18:00.0", "mlx5_1");
    assert_eq!(
        (
            p.path.as_str(),
            p.nvidia_smi.as_deref(),
            p.enabled,
            p.nccl_path.as_deref(),
            p.via.as_deref()
        ),
        ("PHB", Some("NODE"), true, Some("PXN"), Some("0000:28:00.0"))
    );
    // Across sockets: SYS, PXN too (NVSwitch connects every GPU).
    assert_eq!(pair("0000:18:00.0", "mlx5_7").path, "SYS");
    assert_eq!(
        pair("0000:18:00.0", "mlx5_7").nccl_path.as_deref(),
        Some("PXN")
    );
    assert_eq!(
        r.gdr
            .iter()
            .filter(|p| p.enabled && p.via.is_none())
            .count(),
        8
    );
    assert_eq!(r.gdr.iter().filter(|p| p.enabled).count(), 64);
    // The threshold and its source are on every pair.
    assert_eq!(p.threshold.as_deref(), Some("PXB"));
    assert!(p.threshold_source.as_deref().unwrap().contains("default"));
    // Config space decoded into the inventory (root capture: 4096 bytes).
    let dsp = r
        .inventory
        .pci
        .iter()
        .find(|p| p.bdf == "0000:17:00.0")
        .unwrap();
    assert_eq!(dsp.acs.as_ref().unwrap().ctl, "0x0000");
    assert_eq!(dsp.config_bytes, Some(4096));
    let nic = r
        .inventory
        .pci
        .iter()
        .find(|p| p.bdf == "0000:19:00.0")
        .unwrap();
    assert_eq!(nic.pcie.as_ref().unwrap().mrrs, 4096);
}

#[test]
fn acs_redirect_names_the_bridge_bits_pairs_and_both_fixes() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-acs-redirect"));
    let f = find(&r, "pcie.acs-redirect", "0000:37:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(f.message.contains("ReqRedir CmpltRedir"), "{}", f.message);
    assert!(
        f.evidence[0].observed.contains("0x001d"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence[0].source.ends_with("config@0x14e"),
        "{:?}",
        f.evidence
    );
    assert_eq!(f.evidence[1].observed, "0000:38:00.0|mlx5_2");
    let fix = f.remediation.as_deref().unwrap();
    assert!(fix.contains("setpci -s 0000:37:00.0 ECAP_ACS+0x6.w=0000"));
    assert!(fix.contains("pci=disable_acs_redir=0000:37:00.0"));
    // Only that port fails.
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.status == Status::Fail)
            .count(),
        1
    );
}

#[test]
fn nic_on_the_other_socket() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-nic-other-socket"));
    // GPU 3 has no close NIC, but NVLink peers with PIX NICs: PXN keeps GDR for it, and no
    // finding may say its traffic is staged through host memory.
    let g = find(&r, "gdr.gpu", "0000:48:00.0");
    assert_eq!(g.status, Status::Pass, "{}", g.message);
    assert!(g.message.contains("via PXN"), "{}", g.message);
    let d = find(&r, "topo.nic-distance", "0000:48:00.0");
    assert_eq!(d.status, Status::Warn);
    assert!(d.message.contains("pxn"), "{}", d.message);
    for f in r.findings.iter().filter(|f| f.subject == "0000:48:00.0") {
        assert!(!f.message.contains("host memory"), "{f:?}");
    }
    assert_eq!(find(&r, "topo.nic-numa", "node").status, Status::Warn);
    assert_eq!(find(&r, "topo.rails", "node").status, Status::Warn);
    // The moved NIC (now on socket 1, on a root port without a switch) is SYS from GPU 3.
    let moved = r
        .inventory
        .nics
        .iter()
        .find(|n| n.bdf.as_deref() == Some("0000:d6:00.0"))
        .unwrap();
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "0000:48:00.0" && p.nic == moved.ibdev)
        .unwrap();
    assert_eq!(p.path, "SYS");
}

#[test]
fn nic_link_at_x8() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-nic-x8"));
    let f = find(&r, "pcie.link", "0000:a9:00.0");
    assert_eq!(f.status, Status::Warn);
    assert!(f.message.contains("x8 of x16"), "{}", f.message);
    // The only finding that is not a pass (the roce.* checks skip on InfiniBand).
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.status != Status::Pass)
            .filter(|f| !(f.id.starts_with("roce.") && f.status == Status::Skip))
            .filter(|f| !skips_on_every_hgx_snapshot(f))
            .count(),
        1
    );
}

#[test]
fn gpus_sharing_a_nic() {
    let r = report_for(&fixture("hgx-h200x8-cx7x4-shared-nics"));
    assert_eq!(r.gdr.len(), 32);
    assert_eq!(
        r.gdr
            .iter()
            .filter(|p| p.enabled && p.via.is_none())
            .count(),
        8,
        "each of the 8 GPUs pairs with its switch's NIC"
    );
    assert_eq!(
        r.gdr.iter().filter(|p| p.enabled).count(),
        32,
        "the other NICs through their local GPU (PXN)"
    );
    let f = find(&r, "topo.rails", "node");
    assert_eq!(f.status, Status::Pass);
    assert!(f.message.contains("up to 2 gpus"), "{}", f.message);
    assert_eq!(r.summary.exit_code, 0);
}

#[test]
fn unbalanced_rails_like_the_a800_capture() {
    let r = report_for(&fixture("hgx-h200x8-cx7x8-unbalanced"));
    let f = find(&r, "topo.rails", "node");
    assert_eq!(f.status, Status::Warn);
    assert!(f.message.starts_with("asymmetric rails"), "{}", f.message);
    assert!(
        f.remediation
            .as_deref()
            .unwrap()
            .contains("NVLink neighbour (PXN)"),
        "{f:?}"
    );
    // GPU 1 has no NIC of its own; PXN through GPU 0 serves it.
    assert_eq!(find(&r, "gdr.gpu", "0000:28:00.0").status, Status::Pass);
}

#[test]
fn nccl_net_gdr_level_from_the_environment_is_honoured() {
    use gdrdoctor_checks::model::Fact;
    let dir = fixture("hgx-h200x8-cx7x8-unbalanced");
    let mut root = gdrdoctor::source::reader::Root::sysroot(&dir).unwrap();
    let m = gdrdoctor::source::meta::read(&root).unwrap();
    root.set_complete(true);
    let mut node = gdrdoctor::collect::collect(&root, m.as_ref());
    // Without the live facts NVLink is unknown, and so is PXN: GPU 1 is undecided.
    let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
    let p = r.gdr.iter().find(|p| p.gpu == "0000:28:00.0").unwrap();
    assert!(!p.enabled && !p.undecided.is_empty(), "{p:?}");
    assert_eq!(find(&r, "gdr.gpu", "0000:28:00.0").status, Status::Error);
    node.live = gdrdoctor::source::meta::read_live(&root);
    for (val, enabled) in [
        ("SYS", true),
        ("PHB", true),
        ("PXB", false),
        ("3", true),
        ("2", false),
    ] {
        node.env = Fact::known(
            [
                ("NCCL_NET_GDR_LEVEL".to_string(), val.to_string()),
                ("NCCL_PXN_DISABLE".to_string(), "1".to_string()),
            ]
            .into(),
            "test",
        );
        let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
        let on = r.gdr.iter().any(|p| p.gpu == "0000:28:00.0" && p.enabled);
        assert_eq!(on, enabled, "NCCL_NET_GDR_LEVEL={val}");
        let p = r.gdr.iter().find(|p| p.gpu == "0000:28:00.0").unwrap();
        assert!(
            p.threshold_source
                .as_deref()
                .unwrap()
                .contains(&format!("NCCL_NET_GDR_LEVEL={val} from test")),
            "{p:?}"
        );
    }
    // With PXN (the default) GPU 1 sends through GPU 0, whose NICs are PIX: within PXB.
    node.env = Fact::known(
        [("NCCL_NET_GDR_LEVEL".to_string(), "PXB".to_string())].into(),
        "test",
    );
    let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
    assert!(r
        .gdr
        .iter()
        .any(|p| p.gpu == "0000:28:00.0" && p.enabled && p.via.as_deref() == Some("0000:18:00.0")));
    // ... but not with NCCL_NET_GDR_LEVEL=LOC: the peer's PIX is beyond it too.
    node.env = Fact::known(
        [("NCCL_NET_GDR_LEVEL".to_string(), "0".to_string())].into(),
        "test",
    );
    let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
    assert!(!r.gdr.iter().any(|p| p.enabled));
}

#[test]
fn non_root_capture_with_64_byte_config_spaces_never_passes_what_needs_root() {
    // What a non-root `gdrdoctor snapshot` holds: every config file cut to 64 bytes.
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-acs-redirect"), t.path());
    fn cut(dir: &std::path::Path) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                cut(&p);
            } else if ft.is_file() && p.file_name().is_some_and(|n| n == "config") {
                let b = std::fs::read(&p).unwrap();
                std::fs::write(&p, &b[..64]).unwrap();
            }
        }
    }
    cut(t.path());
    let r = report_for(t.path());
    for id in ["pcie.acs-redirect", "pcie.mrrs", "pcie.ats"] {
        let fs: Vec<_> = r.findings.iter().filter(|f| f.id == id).collect();
        assert!(!fs.is_empty(), "{id}");
        for f in fs {
            assert_eq!(f.status, Status::Error, "{id} {}: {}", f.subject, f.message);
            assert!(
                f.evidence.iter().any(|e| e.observed.contains("needs root")),
                "{f:?}"
            );
        }
    }
    // The ACS redirect that a root capture sees is not claimed as healthy.
    assert_ne!(
        find(&r, "pcie.acs-redirect", "0000:37:00.0").status,
        Status::Pass
    );
    assert_eq!(r.summary.exit_code, 3, "incomplete, not healthy");
}

#[test]
fn live_facts_from_the_snapshot_feed_the_checks_and_the_verdict() {
    // Pending row remaps on GPU 5.
    let r = report_for(&fixture("hgx-h200x8-cx7x8-row-remap-pending"));
    let f = find(&r, "gpu.row-remap", "0000:a8:00.0");
    assert_eq!(f.status, Status::Fail);
    assert!(f.remediation.as_deref().unwrap().contains("nvidia-smi -r"));
    // The NICs refuse dma-buf and there is no peer-memory client: GDR off, and why.
    let r = report_for(&fixture("hgx-h200x8-cx7x8-nic-no-dmabuf"));
    assert_eq!(find(&r, "kmod.nvidia-peermem", "node").status, Status::Fail);
    let d = find(&r, "kmod.dmabuf", "node");
    assert!(d.message.contains("errno 95"), "{}", d.message);
    assert!(r.gdr.iter().all(|p| !p.enabled));
    // CUDA says the GPUs do not support GDR: the verdict follows NCCL (gpu.gdr=0).
    let r = report_for(&fixture("hgx-h200x8-cx7x8-gdr-attr-off"));
    assert_eq!(
        find(&r, "gpu.gdr-support", "0000:18:00.0").status,
        Status::Fail
    );
    assert_eq!(
        find(&r, "gpu.persistence", "0000:18:00.0").status,
        Status::Warn
    );
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "0000:18:00.0" && p.nic == "mlx5_0")
        .unwrap();
    assert!(!p.enabled);
    assert!(
        p.reasons
            .iter()
            .any(|x| x.contains("GPU_DIRECT_RDMA_SUPPORTED=0")),
        "{:?}",
        p.reasons
    );
    // Healthy: the live facts remove the assumptions from the verdict.
    let r = report_for(&fixture("hgx-h200x8-cx7x8-healthy"));
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "0000:18:00.0" && p.nic == "mlx5_0")
        .unwrap();
    assert!(p.enabled && p.assumptions.is_empty(), "{p:?}");
    // Without live.json the same verdict says what it assumes.
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-healthy"), t.path());
    std::fs::remove_file(t.path().join("gdrdoctor/live.json")).unwrap();
    let r = report_for(t.path());
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "0000:18:00.0" && p.nic == "mlx5_0")
        .unwrap();
    assert!(
        p.enabled
            && p.assumptions
                .iter()
                .any(|a| a.contains("GPU_DIRECT_RDMA_SUPPORTED")),
        "{p:?}"
    );
    assert_eq!(find(&r, "gpu.gdr-support", "node").status, Status::Skip);
}

/// Issue 7: GPU pairs from the constructed multi-GPU fixtures.
#[test]
fn gpu_pairs_nvlink_and_p2p_verdicts() {
    let status_of = |scenario: &str, id: &str| -> Vec<(String, String)> {
        let r = report_for(&fixture(scenario));
        r.findings
            .iter()
            .filter(|f| f.id == id)
            .map(|f| (f.subject.clone(), format!("{:?}", f.status).to_lowercase()))
            .collect()
    };
    // Healthy HGX: 28 pairs over NVSwitch, every GPU with 18 links.
    let p = status_of("hgx-h200x8-cx7x8-healthy", "gpu.p2p");
    assert_eq!(p.len(), 28);
    assert!(p.iter().all(|(_, s)| s == "pass"), "{p:?}");
    // Two links down on GPU 4 only.
    let n = status_of("hgx-h200x8-cx7x8-nvlink-down", "gpu.nvlink");
    let warned: Vec<&str> = n
        .iter()
        .filter(|(_, s)| s == "warn")
        .map(|(b, _)| b.as_str())
        .collect();
    assert_eq!(warned, vec!["0000:98:00.0"], "{n:?}");
    // No fabric manager: one node-level fail naming the cause.
    let r = report_for(&fixture("hgx-h200x8-cx7x8-no-fabricmanager"));
    let f: Vec<_> = r.findings.iter().filter(|f| f.id == "gpu.p2p").collect();
    assert_eq!(f.len(), 1);
    assert!(
        f[0].message.contains("SYSTEM_NOT_READY"),
        "{}",
        f[0].message
    );
    assert!(f[0]
        .remediation
        .as_deref()
        .unwrap_or("")
        .contains("nvidia-fabricmanager"));
    // PCIe-only with ACS: same-switch pairs warn, cross-switch pairs pass as "no p2p, expected".
    let p = status_of("pcie-h200x8-cx7x4-p2p-blocked", "gpu.p2p");
    let warns: Vec<&str> = p
        .iter()
        .filter(|(_, s)| s == "warn")
        .map(|(b, _)| b.as_str())
        .collect();
    assert_eq!(
        warns,
        vec![
            "0000:18:00.0|0000:19:00.0",
            "0000:28:00.0|0000:29:00.0",
            "0000:98:00.0|0000:99:00.0",
            "0000:a8:00.0|0000:a9:00.0"
        ]
    );
    assert_eq!(
        status_of("pcie-h200x8-cx7x4-p2p-blocked", "gpu.nvlink"),
        vec![("node".to_string(), "skip".to_string())]
    );
    // The real single-GPU capture: no pair, no NVLink.
    assert_eq!(
        status_of("h200-vm-live", "gpu.p2p"),
        vec![("node".to_string(), "skip".to_string())]
    );
}

/// `gpu.p2p` honours NCCL_P2P_DISABLE and NCCL_P2P_LEVEL (issue 12 item 4): peer access works
/// on every NVLink pair of the HGX fixture, but with P2P disabled NCCL stays off it (the rule's
/// P2P decision, src/graph/paths.cc ncclTopoCheckP2p()): warn, with NCCL's reason.
#[test]
fn gpu_p2p_honours_the_nccl_p2p_environment() {
    let at = fixture("hgx-h200x8-cx7x8-healthy");
    let src = gdrdoctor::source::Source::open(gdrdoctor::source::Location::Sysroot(&at)).unwrap();
    let base = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
    let with_env = |vars: &[(&str, &str)]| {
        let mut n = base.clone();
        n.env = gdrdoctor_checks::model::Fact::known(
            vars.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            "test environment",
        );
        gdrdoctor_checks::checks::gpu::p2p(&n)
    };
    let plain = with_env(&[]);
    assert_eq!(plain.len(), 28);
    assert!(plain.iter().all(|f| f.status == Status::Pass));
    assert!(
        plain
            .iter()
            .all(|f| !f.evidence.iter().any(|e| e.source.starts_with("nccl p2p"))),
        "without the variables nothing changes"
    );
    let off = with_env(&[("NCCL_P2P_DISABLE", "1")]);
    assert!(off.iter().all(|f| f.status == Status::Warn), "{off:#?}");
    assert!(
        off[0].message.ends_with("but NCCL_P2P_DISABLE=1 from test environment keeps nccl off p2p between these gpus: nccl stages their traffic through host memory (shm) instead"),
        "{}",
        off[0].message
    );
    assert!(off[0]
        .remediation
        .as_deref()
        .unwrap_or("")
        .starts_with("drop NCCL_P2P_DISABLE=1 from the job's environment (or set NCCL_P2P_LEVEL to NVL or higher)"));
    let ev = off[0]
        .evidence
        .iter()
        .find(|e| e.source.starts_with("nccl p2p (NCCL 2.30.7 rules"))
        .unwrap();
    assert_eq!(
        ev.observed,
        "no p2p: NVL beyond NCCL_P2P_LEVEL LOC (NCCL_P2P_DISABLE=1 from test environment)"
    );
    // NVLink is within any level that names a path (NVL is the closest after LOC).
    let pix = with_env(&[("NCCL_P2P_LEVEL", "PIX")]);
    assert!(pix.iter().all(|f| f.status == Status::Pass));
    assert!(pix[0]
        .evidence
        .iter()
        .any(|e| e.observed.starts_with("p2p: NVL within NCCL_P2P_LEVEL PIX")));
}

/// `probe --p2p`'s theoretical link rate from the fixtures' NVML facts (a report whose worker
/// carried no links, as reports of older versions).
#[test]
fn p2p_theoretical_rates() {
    let node = |s: &str| {
        let at = fixture(s);
        let src =
            gdrdoctor::source::Source::open(gdrdoctor::source::Location::Sysroot(&at)).unwrap();
        gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip)
    };
    let none = gdrdoctor::probe::p2p::P2pOutput::default();
    let hgx = node("hgx-h200x8-cx7x8-healthy");
    let r =
        gdrdoctor::probe::p2p::theoretical(&hgx, &none, "0000:18:00.0", "0000:c8:00.0").unwrap();
    assert_eq!(r.gbps, 450.0, "{}", r.how);
    assert!(r.how.contains("NVLink 4.0") && r.nvlink, "{}", r.how);
    let pcie = node("pcie-h200x8-cx7x4-p2p-blocked");
    let r =
        gdrdoctor::probe::p2p::theoretical(&pcie, &none, "0000:18:00.0", "0000:19:00.0").unwrap();
    assert!((r.gbps - 63.0).abs() < 0.1, "{r:?}");
    assert!(r.how.starts_with("PCIe Gen5 x16") && !r.nvlink, "{}", r.how);
}

#[test]
fn grace_hopper_nic_on_its_own_grace_is_p2c() {
    let dir = fixture("gh200x2-cx7x2-c2c");
    let r = report_for(&dir);
    let pair = |g: &str, n: &str| r.gdr.iter().find(|p| p.gpu == g && p.nic == n).unwrap();
    // PCIe PHB (nvidia-smi NODE), but NCCL counts the GPU's own Grace as C2C + PCIe = P2C.
    let p = pair("0000:16:00.0", "mlx5_0");
    assert_eq!(
        (
            p.path.as_str(),
            p.nvidia_smi.as_deref(),
            p.nccl_path.as_deref(),
            p.enabled
        ),
        ("PHB", Some("NODE"), Some("P2C"), true)
    );
    assert!(p.notes[0].starts_with("P2C:"), "{:?}", p.notes);
    // The other Grace's NIC is SYS, and there is no NVLink for PXN.
    assert!(!pair("0000:16:00.0", "mlx5_1").enabled);
    assert_eq!(find(&r, "gdr.gpu", "0000:16:00.0").status, Status::Pass);
    // Older NCCLs: no C2C rule before 2.26, NCCL_NET_GDR_C2C off by default in 2.26.
    let mut root = gdrdoctor::source::reader::Root::sysroot(&dir).unwrap();
    let m = gdrdoctor::source::meta::read(&root).unwrap();
    root.set_complete(true);
    let mut node = gdrdoctor::collect::collect(&root, m.as_ref());
    node.live = gdrdoctor::source::meta::read_live(&root);
    for (v, on) in [
        ("2.25.1", false),
        ("2.26.6", false),
        ("2.27.3", true),
        ("2.28.9", true),
    ] {
        gdrdoctor::collect::apply_nccl_version(&mut node, Some(v));
        let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
        let p = r
            .gdr
            .iter()
            .find(|p| p.gpu == "0000:16:00.0" && p.nic == "mlx5_0")
            .unwrap();
        assert_eq!(p.enabled, on, "NCCL {v}: {p:?}");
        assert!(p
            .rules
            .as_deref()
            .unwrap()
            .contains(&format!("--nccl-version {v}")));
    }
}

/// nvidia_peermem loaded without MOFED's `/sys/kernel/mm/memory_peers/nv_mem` (the healthy
/// fixture): NCCL 2.23 and later see the module, older ones do not (ground truth K02). 2.21
/// still has dma-buf; 2.12 has neither, so GDR is off, where it used to say "via peermem".
#[test]
fn an_older_nccl_does_not_see_nvidia_peermem_without_the_registry_file() {
    let dir = fixture("hgx-h200x8-cx7x8-healthy");
    let mut root = gdrdoctor::source::reader::Root::sysroot(&dir).unwrap();
    let m = gdrdoctor::source::meta::read(&root).unwrap();
    root.set_complete(true);
    let mut node = gdrdoctor::collect::collect(&root, m.as_ref());
    node.live = gdrdoctor::source::meta::read_live(&root);
    for (v, on, mechanism, kmod) in [
        ("2.28.9", 64, Some("dmabuf"), Status::Pass),
        ("2.23.4", 64, Some("dmabuf"), Status::Pass),
        ("2.21.5", 64, Some("dmabuf"), Status::Pass),
        ("2.12.12", 0, None, Status::Warn),
    ] {
        gdrdoctor::collect::apply_nccl_version(&mut node, Some(v));
        let r = gdrdoctor_checks::build_report(&node, &gdrdoctor_checks::RunOptions::default());
        assert_eq!(r.gdr.len(), 64);
        assert_eq!(r.gdr.iter().filter(|p| p.enabled).count(), on, "NCCL {v}");
        let k = find(&r, "kmod.nvidia-peermem", "node");
        assert_eq!(k.status, kmod, "NCCL {v}: {k:?}");
        let sees = !v.starts_with("2.21") && !v.starts_with("2.12");
        assert_eq!(
            !k.message.contains("cannot see it"),
            sees,
            "NCCL {v}: {k:?}"
        );
        for p in &r.gdr {
            if let Some(m) = mechanism {
                assert_eq!(p.mechanism.as_deref(), Some(m), "NCCL {v}: {p:?}");
            } else {
                let why = p.reasons.join("; ");
                assert!(
                    why.contains("NCCL 2.12.12 looks only for /sys/kernel/mm/memory_peers/nv_mem"),
                    "{why}"
                );
            }
        }
        let g = find(&r, "gdr.gpu", "0000:18:00.0");
        assert_eq!(g.status == Status::Pass, on > 0, "NCCL {v}: {g:?}");
    }
}

/// A NIC whose Link Capabilities 2 is zero (no Supported Link Speeds Vector) still has its
/// link judged: its maximum speed is Link Capabilities' Max Link Speed field, and with that
/// field reserved too, its width alone still tells an x8 link of x16. Before, `pcie.link` said
/// "cannot read the link" and the x8 NIC went unreported.
#[test]
fn a_nic_without_link_capabilities_2_is_still_judged() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-nic-x8"), t.path());
    let cfg = std::fs::read_link(t.path().join("sys/bus/pci/devices/0000:a9:00.0"))
        .map(|l| t.path().join("sys/bus/pci/devices").join(l).join("config"))
        .unwrap();
    let mut b = std::fs::read(&cfg).unwrap();
    // The PCI Express capability, from the capability pointer.
    let mut pos = usize::from(b[0x34]);
    while b[pos] != 0x10 {
        pos = usize::from(b[pos + 1]);
    }
    let finding = |b: &[u8]| {
        std::fs::write(&cfg, b).unwrap();
        let r = report_for(t.path());
        r.findings
            .into_iter()
            .find(|f| f.id == "pcie.link" && f.subject == "0000:a9:00.0")
            .unwrap()
    };
    b[pos + 0x2c..pos + 0x30].copy_from_slice(&[0, 0, 0, 0]);
    let f = finding(&b);
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.message.contains("x8 of x16"), "{}", f.message);
    // The Max Link Speed field reserved as well: the width still tells.
    b[pos + 0x0c] &= 0xf0;
    let f = finding(&b);
    assert_eq!(f.status, Status::Warn, "{f:?}");
    assert!(f.message.contains("x8 of x16"), "{}", f.message);
}

/// Issue 39's checks that skip on every HGX snapshot: the job container's view (live, inside a
/// container only) and the GPU-GPU PCIe paths (every pair is joined by NVLink).
fn skips_on_every_hgx_snapshot(f: &gdrdoctor_checks::report::Finding) -> bool {
    f.status == Status::Skip && (f.id.starts_with("container.") || f.id == "pcie.p2p-path")
}

/// A Grace Hopper node: NCCL 2.26+ counts the PHB NIC on the GPU's own C2C-attached CPU as P2C,
/// within its default threshold. `topo.nic-distance` and `topo.rails` agree with `gdr.gpu`'s
/// verdict (they warned "nccl turns gdr off" beside a gdr.gpu pass, and `--fail-on warn` failed
/// a healthy GH200); with NCCL 2.23 (no P2C) all three say the NIC is too far.
#[test]
fn a_grace_gpu_nic_counted_as_p2c_is_close_in_every_topo_check() {
    let root = fixture("gh200x2-cx7x2-c2c");
    let statuses = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--sysroot",
            root.to_str().unwrap(),
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let (_, out, err) = run(&args);
        let r: gdrdoctor_checks::report::Report =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{err}"));
        let of = |id: &str| -> Vec<String> {
            r.findings
                .iter()
                .filter(|f| f.id == id)
                .map(|f| f.status.to_string())
                .collect()
        };
        (of("topo.nic-distance"), of("topo.rails"), of("gdr.gpu"))
    };
    for v in [&[][..], &["--nccl-version", "2.27.3"][..]] {
        let (dist, rails, gdr) = statuses(v);
        assert_eq!(gdr, ["pass", "pass"], "{v:?}");
        assert_eq!(dist, ["pass", "pass"], "{v:?}");
        assert_eq!(rails, ["pass"], "{v:?}");
    }
    let (dist, _, gdr) = statuses(&["--nccl-version", "2.23.4"]);
    assert_eq!(gdr, ["fail", "fail"]);
    assert_eq!(dist, ["warn", "warn"]);
    let (code, _, _) = run(&[
        "check",
        "--sysroot",
        root.to_str().unwrap(),
        "--fail-on",
        "warn",
    ]);
    assert_eq!(code, 0, "a healthy GH200 fails --fail-on warn");
}
