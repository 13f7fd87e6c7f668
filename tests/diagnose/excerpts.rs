//! Excerpts and truncated values (issue 34 item 5) and facts of `nvidia-smi -q` and `ulimit`
//! (item 8): an excerpt says what it covers and no more; a value cut by the paste is unknown.

use super::*;

fn find_all<'a>(r: &'a DiagnoseReport, id: &str) -> Vec<&'a gdrdoctor_checks::report::Finding> {
    r.findings.iter().filter(|f| f.id == id).collect()
}

#[test]
fn an_lspci_s_excerpt_of_a_nic_is_not_a_node_without_gpus() {
    let r = run_on(&["constructed-lspci-s-nic-excerpt.txt"]);
    // `lspci -s <nic>` shows one function: "no nvidia gpu on the pci bus" was a fail, exit 1.
    let g = find_all(&r, "gpu.present");
    assert!(!g.is_empty());
    for f in &g {
        assert_eq!(f.status, Status::Skip, "{f:?}");
        assert!(f.message.contains("excerpt"), "{}", f.message);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.observed.contains("-s 0000:1a:00.0")),
            "{f:?}"
        );
    }
    // No node-wide statement of absence from the excerpt.
    for f in r.findings.iter().filter(|f| f.subject == "node") {
        assert!(
            !f.message.contains("on the pci bus") && !f.message.starts_with("no nvidia gpu"),
            "{f:?}"
        );
    }
    // The function it does show is read.
    let link: Vec<_> = find_all(&r, "pcie.link")
        .into_iter()
        .filter(|f| f.subject != "node")
        .collect();
    assert!(link.iter().all(|f| f.status != Status::Fail), "{link:?}");
    assert_eq!(r.summary.exit_code, 0, "{:?}", r.summary);
    let b = &r.blocks[0];
    assert!(b.summary.contains("an excerpt of the bus"), "{}", b.summary);
}

#[test]
fn an_lspci_grep_excerpt_says_what_it_covers() {
    let r = run_on(&["constructed-lspci-grep-gpus.txt"]);
    for f in r.findings.iter().filter(|f| f.subject == "node") {
        assert!(!f.message.contains("on the pci bus"), "{f:?}");
    }
    let b = &r.blocks[0];
    assert!(b.summary.contains("grep -i nvidia"), "{}", b.summary);
    // Without its command, a listing with no bridge at all is no whole bus either.
    let t = text("constructed-lspci-grep-gpus.txt").replace("$ lspci | grep -i nvidia\n", "");
    let p = paste::read(&[input("x", t)]);
    assert!(p.pci_excerpt().is_some(), "{:?}", p.lspci_excerpts);
}

#[test]
fn a_whole_lspci_is_not_an_excerpt() {
    let t = "$ sudo lspci -vvv\n00:00.0 Host bridge: Intel Corporation Sky Lake-E DMI3 Registers (rev 07)\n\tNUMA node: 0\n\n18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n\tNUMA node: 0\n";
    let p = paste::read(&[input("x", t.into())]);
    assert_eq!(p.lspci.len(), 2, "{:?}", p.blocks);
    assert_eq!(p.pci_excerpt(), None);
}

fn run_text(name: &str, t: &str) -> DiagnoseReport {
    diagnose(&[input(name, t.to_string())], &RunOptions::default())
}

#[test]
fn a_matrix_from_the_gpu0_row_without_header_is_read_with_what_it_shows() {
    let t = "GPU0     X      NV8     PXB     SYS     0-31,64-95      0               N/A\n\
             GPU1    NV8      X      SYS     PXB     32-63,96-127    1               N/A\n";
    let r = run_text("topo.txt", t);
    let b = &r.blocks[0];
    // It was refused whole ("the columns cannot be rebuilt"); the GPU x GPU part is there.
    assert_eq!(b.status, BlockStatus::Incomplete, "{b:?}");
    assert!(
        b.problems.iter().any(|p| p.contains("header line missing")),
        "{b:?}"
    );
    let m = &r.matrices[0].matrix;
    assert_eq!(m.nvlinks("GPU0", "GPU1"), Some(8));
    // No GPU x NIC verdict from columns nobody named.
    assert!(r.gdr.is_empty(), "{:?}", r.gdr);
}

#[test]
fn an_xid_cut_at_the_end_of_the_paste_is_unknown_not_xid_7() {
    // `79` cut to `7`: it was "Xid 7 (not in gdrdoctor's table)", a warn, exit 0.
    let r = run_text(
        "xid.txt",
        "$ sudo dmesg | grep -i xid\n[ 1843.308145] NVRM: Xid (PCI:0000:44:00): 7",
    );
    let x = find_all(&r, "kernel.xid");
    assert_eq!(x.len(), 1, "{x:?}");
    assert_eq!(x[0].status, Status::Error, "{:?}", x[0]);
    assert!(x[0].message.contains("unknown"), "{}", x[0].message);
    assert!(!x[0].message.contains("Xid 7 ("), "{}", x[0].message);
    assert_ne!(r.summary.exit_code, 0);
    // The whole line is read as before.
    let r = run_text(
        "xid.txt",
        "[ 1843.308145] NVRM: Xid (PCI:0000:44:00): 79, pid=1234, GPU has fallen off the bus.\n",
    );
    assert_eq!(find_all(&r, "kernel.xid")[0].status, Status::Fail);
}

#[test]
fn a_cut_driver_version_is_no_driver_fact() {
    let r = run_text(
        "v.txt",
        "$ cat /proc/driver/nvidia/version\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  535.1",
    );
    assert_eq!(r.blocks[0].status, BlockStatus::Refused, "{:?}", r.blocks);
    for f in find_all(&r, "driver.nvidia") {
        assert!(!f.message.contains("535.1 "), "{f:?}");
        assert_ne!(f.status, Status::Pass, "{f:?}");
    }
}

#[test]
fn nvidia_smi_q_facts_are_judged_by_the_node_checks_rules() {
    let r = run_on(&["constructed-smi-q-hgx-fabric-link.txt"]);
    let st = |id: &str, subject: &str| {
        r.findings
            .iter()
            .find(|f| f.id == id && f.subject == subject)
            .map(|f| f.status)
    };
    // Before, every one of these was "live gpu facts: not in the pasted text".
    assert_eq!(st("gpu.persistence", "0000:18:00.0"), Some(Status::Warn));
    assert_eq!(st("gpu.persistence", "0000:2a:00.0"), Some(Status::Pass));
    assert_eq!(st("gpu.fabric-state", "0000:18:00.0"), Some(Status::Fail));
    assert_eq!(st("gpu.fabric-state", "0000:2a:00.0"), Some(Status::Pass));
    // An idle GPU lowers its link speed (pass); a link at x8 of x16 is downtrained (warn).
    assert_eq!(st("pcie.link", "0000:18:00.0"), Some(Status::Pass));
    assert_eq!(st("pcie.link", "0000:2a:00.0"), Some(Status::Warn));
    assert_eq!(st("gpu.bar1", "0000:18:00.0"), Some(Status::Pass));
    assert_eq!(st("gpu.row-remap", "0000:18:00.0"), Some(Status::Pass));
    let bar1 = r
        .findings
        .iter()
        .find(|f| f.id == "gpu.bar1" && f.subject == "0000:18:00.0")
        .unwrap();
    assert!(
        bar1.evidence
            .iter()
            .any(|e| e.source.contains("nvidia-smi -q")),
        "{bar1:?}"
    );
    assert_ne!(r.summary.exit_code, 0);
    let b = &r.blocks[0];
    assert!(
        b.summary.contains("ECC on now, off after the next reset"),
        "{}",
        b.summary
    );
    assert!(b.summary.contains("no NVLink-C2C"), "{}", b.summary);
}

#[test]
fn a_small_bar1_in_nvidia_smi_q_warns() {
    let t = text("constructed-smi-q-hgx-fabric-link.txt").replace(
        "Total                             : 131072 MiB",
        "Total                             : 256 MiB",
    );
    let r = run_text("q.txt", &t);
    let b: Vec<_> = find_all(&r, "gpu.bar1");
    assert!(!b.is_empty());
    assert!(b.iter().all(|f| f.status == Status::Warn), "{b:?}");
}

#[test]
fn fabric_state_n_a_is_not_a_fabric_failure() {
    // A100 systems print `State : N/A` even with Fabric Manager running.
    let t = text("constructed-smi-q-hgx-fabric-link.txt")
        .replace(": In Progress", ": N/A")
        .replace(": Completed", ": N/A")
        .replace(": Success", ": N/A");
    let r = run_text("q.txt", &t);
    for f in find_all(&r, "gpu.fabric-state") {
        assert_ne!(f.status, Status::Fail, "{f:?}");
        assert_ne!(f.status, Status::Pass, "{f:?}");
    }
}

#[test]
fn gpu_c2c_mode_n_a_is_said_to_be_no_c2c() {
    let t = text("constructed-smi-q-hgx-fabric-link.txt");
    let p = paste::read(&[input("q", t)]);
    let (node, _) = paste::node::build(&p);
    let cx = paste::verdict::Context::new(&node, &p, None, None);
    let (ok, src) = cx.c2c_mode.clone().unwrap();
    assert!(!ok);
    assert!(src.contains("GPU C2C Mode : N/A"), "{src}");
}

#[test]
fn ulimit_a_is_read_for_its_locked_memory_line_only() {
    let a = "$ ulimit -a\nreal-time non-blocking time  (microseconds, -R) unlimited\ncore file size              (blocks, -c) 0\nmax locked memory           (kbytes, -l) 8192\nopen files                          (-n) 1048576\n";
    let p = paste::read(&[input("u", a.into())]);
    // It was four blocks, the first refused ("no locked-memory limit"), an error.
    assert_eq!(p.blocks.len(), 1, "{:?}", p.blocks);
    assert_eq!(p.ulimit.len(), 1);
    assert_eq!(p.ulimit[0].1.soft, Some(8192 * 1024));
    // `ulimit -l -n`: the labelled output holds the memlock line (read), not -n's number.
    let p = paste::read(&[input(
        "u",
        "$ ulimit -l -n\nmax locked memory           (kbytes, -l) 64\nopen files                          (-n) 1024\n".into(),
    )]);
    assert_eq!(p.ulimit.len(), 1, "{:?}", p.blocks);
    assert_eq!(p.ulimit[0].1.soft, Some(64 * 1024));
    // Lines of other limits only: no memlock, and no error either.
    let r = run_text(
        "u",
        "$ ulimit -a\nopen files                          (-n) 1048576\npipe size                (512 bytes, -p) 8\n",
    );
    assert!(
        r.blocks.iter().all(|b| b.status == BlockStatus::Ignored),
        "{:?}",
        r.blocks
    );
    assert!(find_all(&r, "mem.memlock")
        .iter()
        .all(|f| f.status == Status::Skip));
}

#[test]
fn an_ibv_devinfo_cut_inside_a_port_or_a_value_gives_no_verdict_on_it() {
    // Cut inside the port's state (`PORT_ACT`), at the paste's end.
    let t = "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACT";
    let p = paste::read(&[input("i", t.into())]);
    let d = &p.ib[0].1;
    assert!(d.ports.iter().all(|pt| pt.state.is_none()), "{:?}", d.ports);
    let r = run_text("i", t);
    for f in find_all(&r, "rdma.ports") {
        assert!(matches!(f.status, Status::Skip | Status::Error), "{f:?}");
    }
    // Cut inside the firmware version: no firmware verdict.
    let t = "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.3";
    let r = run_text("i", t);
    for f in find_all(&r, "rdma.firmware") {
        assert!(matches!(f.status, Status::Skip | Status::Error), "{f:?}");
    }
    for f in find_all(&r, "rdma.ports") {
        assert!(!f.message.contains("no ports"), "{f:?}");
        assert_ne!(f.status, Status::Fail, "{f:?}");
    }
}

#[test]
fn a_kernel_release_cut_in_the_boot_banner_is_unknown() {
    let p = paste::read(&[input(
        "d",
        "$ sudo dmesg\n[    0.000000] Linux version 5.1".into(),
    )]);
    let (node, _) = paste::node::build(&p);
    assert!(
        node.kernel_release.get().is_none(),
        "{:?}",
        node.kernel_release
    );
    let p = paste::read(&[input(
        "d",
        "$ sudo dmesg\n[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02) (gcc 11.4.0)\n".into(),
    )]);
    let (node, _) = paste::node::build(&p);
    assert_eq!(
        node.kernel_release.get().map(String::as_str),
        Some("5.15.0-91-generic")
    );
}

#[test]
fn without_rdma_devices_a_pasted_nic_is_not_no_nic() {
    // A whole lspci (a host bridge and a ConnectX-7), no ibv_devinfo: which functions are RDMA
    // NICs is not shown. It was "no rdma nic on the pci bus", "no gpu or nic on the pci bus".
    let t = "$ sudo lspci -vvv\n00:00.0 Host bridge: Intel Corporation Sky Lake-E DMI3 Registers (rev 07)\n\tNUMA node: 0\n\n1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n\tNUMA node: 0\n\tKernel driver in use: mlx5_core\n";
    let r = run_text("l", t);
    for f in r.findings.iter().filter(|f| f.subject == "node") {
        assert!(!f.message.contains("no rdma nic"), "{f:?}");
        assert!(!f.message.contains("no gpu or nic"), "{f:?}");
    }
    assert!(find_all(&r, "pcie.ats")
        .iter()
        .any(|f| f.message.contains("which pci functions are rdma nics")));
}

#[test]
fn the_fabric_grep_gdrdoctor_asks_for_is_read() {
    // `nvidia-smi -q | grep -A4 -i fabric` (what driver.fabric-manager's skip asks for) has no
    // `GPU 0000..` lines: each `Fabric` section is the next GPU nvidia-smi lists. It was
    // "not in the pasted text", exit 0, with a GPU In Progress in it.
    let t = "$ nvidia-smi -q | grep -A4 -i fabric\n    Fabric\n        State                             : In Progress\n        Status                            : N/A\n        CliqueId                          : N/A\n        ClusterUUID                       : N/A\n--\n    Fabric\n        State                             : Completed\n        Status                            : Success\n        CliqueId                          : 1\n        ClusterUUID                       : 5a7e0f2c-0000-0000-0000-000000000000\n";
    let r = run_text("f", t);
    let f = find_all(&r, "gpu.fabric-state");
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].status, Status::Fail, "{:?}", f[0]);
    assert!(f[0].subject.contains("GPU #1") && f[0].subject.contains("bus id not pasted"));
    assert_eq!(f[1].status, Status::Pass);
    assert_ne!(r.summary.exit_code, 0);
}

#[test]
fn a_pasted_gpu_link_is_judged_without_the_tree() {
    // lspci of a GPU without `lspci -tv`: the GPU is not placed in a tree, but its own link is
    // in the paste. It was "no gpu or nic on the pci bus".
    let t = "$ sudo lspci -vvv\n00:00.0 Host bridge: Intel Corporation Sky Lake-E DMI3 Registers (rev 07)\n\tNUMA node: 0\n\n18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n\tNUMA node: 0\n\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n\t\tLnkSta:\tSpeed 32GT/s (ok), Width x8 (downgraded)\n\tKernel driver in use: nvidia\n";
    let r = run_text("l", t);
    let f = find_all(&r, "pcie.link");
    assert!(
        f.iter()
            .any(|f| f.subject == "0000:18:00.0" && f.status == Status::Warn),
        "{f:?}"
    );
}

#[test]
fn a_pasted_nic_link_downtrained_is_told_without_rdma_devices() {
    // The blog capture of a ConnectX-6 at x8 of x16 (realdata SOURCES.md): lspci of the NIC
    // alone, no ibv_devinfo. It was skip ("no gpu or nic on the pci bus").
    let Some(root) = realdata() else { return };
    let path = root.join("blog-cx6-degraded-x8-link/lspci-vvv-31_00.0-excerpt.txt");
    let r = run_text("l", &std::fs::read_to_string(path).unwrap());
    let f = find_all(&r, "pcie.link");
    assert!(
        f.iter().any(|f| f.subject == "0000:31:00.0"
            && f.status == Status::Warn
            && f.message.contains("x8 of x16")),
        "{f:?}"
    );
}

#[test]
fn ibv_devinfo_of_one_device_is_not_the_device_list() {
    let one = "$ ibv_devinfo -d mlx5_0\nhca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tInfiniBand\n";
    let r = run_text("i", one);
    let d = find_all(&r, "rdma.devices");
    assert!(d.iter().all(|f| f.status == Status::Skip), "{d:?}");
    assert!(
        d[0].message.contains("limited to some devices"),
        "{:?}",
        d[0]
    );
    // The whole list (no -d) is the node's list.
    let r = run_text("i", &one.replace(" -d mlx5_0", ""));
    assert_eq!(find_all(&r, "rdma.devices")[0].status, Status::Pass);
}
