//! What the readers conclude from other tools' text: a whole /proc/modules, lspci, ulimit,
//! listings run together, prefixed kernel log lines, two copies of a device, a failed command.

use super::*;

#[test]
fn foreign_capture_with_proc_modules_is_conclusive_about_peer_memory() {
    // The no-peermem fixture without gdrdoctor's metadata is a foreign capture: the peer-memory
    // files are "not in this capture", but its /proc/modules is the whole list of loaded modules.
    let t = tempfile::tempdir().unwrap();
    let src = fixture("hgx-h200x8-cx7x8-no-peermem");
    let status = std::process::Command::new("cp")
        .args([
            "-a",
            &format!("{}/.", src.display()),
            &t.path().display().to_string(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_dir_all(t.path().join("gdrdoctor")).unwrap();
    // (The constructed fixture lists nvidia_peermem among ib_core's users; a real list would not.)
    let modules = std::fs::read_to_string(t.path().join("proc/modules"))
        .unwrap()
        .replace("nvidia_peermem,", "");
    std::fs::write(t.path().join("proc/modules"), &modules).unwrap();
    assert!(!modules.contains("peer"));
    assert!(
        std::fs::read_to_string(t.path().join("proc/driver/nvidia/version"))
            .unwrap()
            .contains("x86_64 Kernel Module")
    );
    let rep = report_for(t.path());
    let f = find(&rep, "kmod.nvidia-peermem", "node");
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.message.contains("gpudirect rdma is impossible"),
        "{}",
        f.message
    );
    assert!(f
        .remediation
        .as_deref()
        .unwrap()
        .contains("modprobe nvidia-peermem"));
    assert!(
        f.evidence.iter().any(|e| e.source == "/proc/modules"),
        "{f:?}"
    );
    let g: Vec<_> = rep.findings.iter().filter(|f| f.id == "gdr.gpu").collect();
    assert!(!g.is_empty());
    assert!(g.iter().all(|f| f.status == Status::Fail), "{g:?}");
    assert!(
        g[0].message.contains("no peer-memory client"),
        "{}",
        g[0].message
    );
    let nv = find(&rep, "kmod.nv-peer-mem", "node");
    assert_eq!(nv.status, Status::Pass, "{nv:?}");
}

#[test]
fn acs_lines_from_lspci_grep() {
    let Some(rd) = realdata() else { return };
    let run_rd = |rel: &str| {
        let t = std::fs::read_to_string(rd.join(rel)).unwrap();
        diagnose(&[input(rel, t)], &RunOptions::default())
    };
    let acs = |r: &DiagnoseReport| {
        let v: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.id == "pcie.acs-redirect")
            .map(|f| (f.status, f.message.clone()))
            .collect();
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].clone()
    };
    // NVIDIA/nccl#523: `lspci -vvv | grep -i acsctl`, five ports with ReqRedir+ CmpltRedir+.
    let (s, m) = acs(&run_rd(
        "nccl-523-acs-enabled-excerpt/lspci-vvv-grep-acsctl.txt",
    ));
    assert_eq!(s, Status::Warn);
    assert!(m.contains("5 of 12"), "{m}");
    let (s, m) = acs(&run_rd(
        "nccl-629-acs-enabled-excerpt/lspci-vvv-grep-acsctl.txt",
    ));
    assert_eq!(s, Status::Warn);
    assert!(m.contains("4 of 15"), "{m}");
    // The stelline box: ACS off everywhere.
    let r = run_rd("stelline-asus-esc8000a-e12/13-sudo_lspci_-vvv_grep_ACSCtl.txt");
    assert_eq!(acs(&r).0, Status::Pass);
    assert_eq!(
        r.blocks.iter().filter(|b| b.kind == Kind::Lspci).count(),
        1,
        "one block of ACSCtl lines"
    );
}

#[test]
fn lspci_with_tree_places_devices_and_reads_links() {
    let Some(rd) = realdata() else { return };
    let dir = rd.join("stelline-asus-esc8000a-e12");
    let inputs: Vec<Input> = [
        "01-lspci_-tv.txt",
        "03-sudo_lspci_-vvv_-s_01_00.0.txt",
        "12-nvidia-smi_topo_-m.txt",
        "14-ibv_devinfo.txt",
    ]
    .iter()
    .map(|n| input(n, std::fs::read_to_string(dir.join(n)).unwrap()))
    .collect();
    let r = diagnose(&inputs, &RunOptions::default());
    let g = r
        .inventory
        .gpus
        .iter()
        .find(|g| g.bdf == "0000:01:00.0")
        .unwrap();
    assert_eq!(g.device_id, "26b1", "AD102GL by name in pci.ids");
    let p = r
        .inventory
        .pci
        .iter()
        .find(|p| p.bdf == "0000:01:00.0")
        .unwrap();
    assert_eq!(p.parent.as_deref(), Some("0000:00:01.1"), "from lspci -tv");
    // The idle GPU's 2.5 GT/s is not a degraded link (the check knows idle GPUs downshift).
    let l: Vec<_> = r.findings.iter().filter(|f| f.id == "pcie.link").collect();
    assert!(l.iter().all(|f| f.status == Status::Pass), "{l:?}");
    // Every port is down: GDR is off for every GPU, and that is a failure of the pasted facts.
    assert!(statuses(&r, "gdr.gpu")
        .iter()
        .all(|(_, s)| *s == Status::Fail));
    assert!(statuses(&r, "rdma.ports")
        .iter()
        .all(|(_, s)| *s == Status::Fail));
}

/// `ulimit -Hl` shows the hard limit; the kernel enforces the soft one. A paste of both is
/// judged on the soft limit (it passed on the hard `unlimited` while the soft limit was 64 KiB),
/// and a paste of the hard limit alone does not answer the check.
#[test]
fn the_soft_locked_memory_limit_is_the_one_judged() {
    let both = "$ ulimit -Hl\nunlimited\n$ ulimit -Sl\n64\n";
    let r = diagnose(&[input("ul.txt", both.into())], &RunOptions::default());
    let m = r.findings.iter().find(|f| f.id == "mem.memlock").unwrap();
    assert_eq!(m.status, Status::Warn, "{m:?}");
    assert!(m.message.contains("64 KiB"), "{}", m.message);
    let hard = "$ ulimit -Hl\nunlimited\n";
    let r = diagnose(&[input("ul.txt", hard.into())], &RunOptions::default());
    let m = r.findings.iter().find(|f| f.id == "mem.memlock").unwrap();
    assert_eq!(m.status, Status::Skip, "{m:?}");
}

/// An lsmod listing pasted with an ibv_devinfo right after it, no blank line between: the
/// `hca_id:` line opens the second block (the listing swallowed the first device and its
/// PORT_DOWN, and the paste exited 0).
#[test]
fn a_listing_does_not_swallow_the_next_tools_output() {
    let t = "$ lsmod\nModule                  Size  Used by\nnvidia_peermem         16384  0\nmlx5_ib               405504  0\nhca_id: mlx5_0\n        transport:                      InfiniBand (0)\n        fw_ver:                         28.42.1000\n        phys_port_cnt:                  1\n                port:   1\n                        state:                  PORT_DOWN (1)\n                        link_layer:             Ethernet\n\nhca_id: mlx5_1\n        transport:                      InfiniBand (0)\n        fw_ver:                         28.42.1000\n        phys_port_cnt:                  1\n                port:   1\n                        state:                  PORT_ACTIVE (4)\n                        link_layer:             Ethernet\n";
    let r = diagnose(&[input("p.txt", t.into())], &RunOptions::default());
    let ports: Vec<_> = r.findings.iter().filter(|f| f.id == "rdma.ports").collect();
    assert!(
        ports
            .iter()
            .any(|f| f.subject.starts_with("mlx5_0") && f.status == Status::Fail),
        "{ports:?}"
    );
    assert_eq!(r.summary.exit_code, 1);
}

/// Xid 79 behind the prefixes launchers and collectors add (kubectl --timestamps, srun -l, a
/// syslog level, dmesg -x, dmesg --time-format iso, a journal with ISO times) is read: it was
/// dropped, and a paste with it passed.
#[test]
fn a_prefixed_kernel_log_line_is_still_a_kernel_log_line() {
    let xid = "NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.";
    for prefix in [
        "2024-05-01T12:00:00.123456789Z [ 8613.402113] ",
        "0: [ 8613.402113] ",
        "<4>[ 8613.402113] ",
        "kern  :warn  : [ 8613.402113] ",
        "2024-05-01T12:00:00,123456+00:00 ",
        "2024-05-01T12:00:00+0000 gpu-01 kernel: ",
    ] {
        let r = diagnose(
            &[input("k.txt", format!("{prefix}{xid}\n"))],
            &RunOptions::default(),
        );
        let x = r.findings.iter().find(|f| f.id == "kernel.xid").unwrap();
        assert_eq!(x.status, Status::Fail, "{prefix:?}: {x:?}");
        assert!(x.message.contains("Xid 79"), "{prefix:?}: {}", x.message);
    }
}

/// Two nodes' ibv_devinfo in one paste: where the copies of a device disagree, neither wins
/// (the first copy did, and a down port on the second node passed).
#[test]
fn two_copies_of_a_device_that_disagree_are_an_error() {
    let dev = |state: &str| {
        format!("hca_id: mlx5_1\n        transport:                      InfiniBand (0)\n        fw_ver:                         28.42.1000\n        phys_port_cnt:                  1\n                port:   1\n                        state:                  {state}\n                        link_layer:             InfiniBand\n\n")
    };
    for (a, b) in [
        ("PORT_ACTIVE (4)", "PORT_DOWN (1)"),
        ("PORT_DOWN (1)", "PORT_ACTIVE (4)"),
    ] {
        let t = format!("{}{}", dev(a), dev(b));
        let r = diagnose(&[input("p.txt", t)], &RunOptions::default());
        let p = r
            .findings
            .iter()
            .find(|f| f.id == "rdma.ports" && f.subject == "mlx5_1/1")
            .unwrap();
        assert_eq!(p.status, Status::Error, "{p:?}");
        assert!(
            p.evidence.iter().any(|e| e.observed.contains("twice")),
            "{p:?}"
        );
        assert_ne!(r.summary.exit_code, 0);
    }
}

/// `lsmod: command not found` is no module list: it said nvidia_peermem was not loaded (fail)
/// and nv_peer_mem was not either (pass).
#[test]
fn a_failed_command_is_no_evidence() {
    let t = "$ lsmod | grep peermem\n-bash: lsmod: command not found\n";
    let r = diagnose(&[input("p.txt", t.into())], &RunOptions::default());
    for id in ["kmod.nvidia-peermem", "kmod.nv-peer-mem"] {
        let f = r.findings.iter().find(|f| f.id == id).unwrap();
        assert!(matches!(f.status, Status::Error | Status::Skip), "{f:?}");
    }
    let b = r.findings.iter().find(|f| f.id == "paste.blocks").unwrap();
    assert!(
        b.evidence
            .iter()
            .any(|e| e.observed.contains("command not found")),
        "{b:?}"
    );
}
