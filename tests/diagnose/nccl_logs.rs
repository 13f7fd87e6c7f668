//! NCCL logs: the decisions NCCL logged, as it logged them, and damaged logs.

use super::*;

#[test]
fn gdrdma_channels_of_issue_707_are_all_gdr() {
    let l = log_of("nccl-707-a100-gdrdma-channels.log");
    // 13 lines, the last one cut mid-bracket: 12 connections.
    assert_eq!(l.connections.len(), 12);
    assert_eq!(l.unreadable.len(), 1, "{:?}", l.unreadable);
    let g = l.logged_gdr();
    assert!(!g.is_empty());
    assert!(g.iter().all(|x| x.gdr), "{g:?}");
    // Receive lines are local to the receiver: rank 0 (87000) receives through NET/IB/5.
    assert!(g.iter().any(|x| x.rank == 0
        && x.gpu.as_deref() == Some("87000")
        && x.nic_dev == 5
        && x.direction == Some(Direction::Receive)));
    assert!(g
        .iter()
        .any(|x| x.rank == 3 && x.nic_dev == 0 && x.direction == Some(Direction::Send)));
}

#[test]
fn sharp_plugin_channels_of_issue_1814_are_not_gdr() {
    let l = log_of("nccl-1814-ibext-channels.log");
    // 13 lines; the file ends with a newline, so its last line is whole.
    assert_eq!(l.connections.len(), 13);
    assert!(l.unreadable.is_empty());
    // Without the final newline the last `via NET/..` line may be a cut one: not trusted.
    let t = text("nccl-1814-ibext-channels.log");
    let p = paste::read(&[input("cut", t.trim_end().to_string())]);
    let cut = p.nccl_merged().unwrap();
    assert_eq!((cut.connections.len(), cut.unreadable.len()), (12, 1));
    for c in &l.connections {
        match &c.transport {
            Transport::Net { net, gdr, .. } => {
                assert_eq!(net, "IBext_v8");
                assert!(!gdr);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(l.logged_gdr().iter().all(|x| !x.gdr));
    let l = log_of("nccl-1814-status12-warn.log");
    let st: Vec<Option<u32>> = l.failures.iter().map(|f| f.status).collect();
    assert_eq!(st, vec![Some(12), Some(5)]);
    assert_eq!(l.failures[0].vendor_err, Some(129));
}

#[test]
fn no_module_lines_and_plain_net_channels_of_issue_899() {
    let l = log_of("nccl-899-no-module-channels.log");
    let off: Vec<&str> = l
        .nic_gdr
        .iter()
        .filter(|n| !n.enabled)
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(off, vec!["mlx5_1", "mlx5_2", "mlx5_3"]);
    assert_eq!(l.nic_gdr[0].reason.as_deref(), Some("no module"));
    assert_eq!(l.hosts.len(), 2);
    assert!(l.logged_gdr().iter().all(|x| !x.gdr));
    let r = run_on(&["nccl-899-no-module-channels.log"]);
    let fails: Vec<_> = statuses(&r, "nccl.gdr")
        .into_iter()
        .filter(|(_, s)| *s == Status::Fail)
        .collect();
    assert_eq!(fails.len(), 3, "{fails:?}");
    assert_eq!(r.summary.exit_code, 1);
}

#[test]
fn distance_lines_of_issue_383_and_1151() {
    let l = log_of("dle-383-gdr-level-phb.log");
    assert_eq!(
        l.env.get("NCCL_NET_GDR_LEVEL").map(String::as_str),
        Some("PHB")
    );
    let mut by_gpu: BTreeMap<&str, bool> = BTreeMap::new();
    for g in &l.gpu_gdr {
        by_gpu.insert(&g.gpu, g.enabled);
    }
    assert_eq!(
        by_gpu,
        BTreeMap::from([
            ("18000", false),
            ("3b000", false),
            ("86000", true),
            ("af000", true)
        ])
    );
    let r = run_on(&["dle-383-gdr-level-phb.log"]);
    let s = statuses(&r, "nccl.gdr");
    assert!(s.contains(&("gpu 86000", Status::Pass)), "{s:?}");
    assert!(s.contains(&("gpu 18000", Status::Warn)), "{s:?}");
    // With NCCL_NET_GDR_LEVEL=PHB and threshold 4 only the 2.6-2.7 numbering fits: 5 is SYS.
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.subject == "gpu 18000")
        .unwrap();
    assert!(f.evidence[0].observed.contains("SYS vs PHB"), "{f:?}");
    // Issue 1151 asked what "distance 7" means: SYS, in the 2.12-2.25 numbering against PXB.
    let r = run_on(&["nccl-1151-distance-7.txt"]);
    let f = r.findings.iter().find(|f| f.id == "nccl.gdr").unwrap();
    assert_eq!(f.status, Status::Warn);
    assert!(f.evidence[0].observed.contains("SYS vs PXB"), "{f:?}");
}

#[test]
fn intra_node_transports() {
    let l = log_of("nccl-1538-p2p-cumem.log");
    assert!(l.connections.iter().all(|c| c.transport
        == Transport::P2p {
            mode: "CUMEM".into(),
            read: false
        }));
    let l = log_of("nccl-1817-p2p-direct-pointer.log");
    assert!(l
        .connections
        .iter()
        .all(|c| matches!(&c.transport, Transport::P2p { mode, .. } if mode == "direct pointer")));
    let l = log_of("opensora-386-shm-cuda-oom.log");
    assert_eq!(l.connections.len(), 12);
    assert!(l
        .connections
        .iter()
        .all(|c| matches!(&c.transport, Transport::Shm { mode } if mode == "direct/direct")));
    assert!(!l.uses_net());
}

#[test]
fn failure_lines_map_to_their_findings() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "nccl-778-dmabuf-eopnotsupp.log",
            "nccl.dmabuf-mr",
            Some("Operation not supported"),
        ),
        (
            "opensora-386-shm-cuda-oom.log",
            "nccl.cuda-failure",
            Some("out of memory"),
        ),
        (
            "nccl-1283-ray-prefix-cuda-invalid.log",
            "nccl.cuda-failure",
            Some("invalid argument"),
        ),
        ("nccl-1235-remote-closed-oom.log", "nccl.remote-error", None),
        (
            "nccl-1235-remote-closed-oom.log",
            "nccl.cuda-failure",
            Some("out of memory"),
        ),
        (
            "nccl-928-ib-error4.log",
            "nccl.ib-completion",
            Some("status 4 (IBV_WC_LOC_PROT_ERR), vendor err 81"),
        ),
        (
            "nccl-1405-status12-vendor129.log",
            "nccl.ib-completion",
            Some("status 12 (IBV_WC_RETRY_EXC_ERR), vendor err 129"),
        ),
        ("llamafactory-6269-watchdog.log", "nccl.timeout", None),
        (
            "nccl-1029-cuda-init-error.log",
            "nccl.cuda-failure",
            Some("initialization error"),
        ),
    ];
    for (file, id, text) in cases {
        let r = run_on(&[file]);
        let f = r
            .findings
            .iter()
            .find(|f| f.id == *id)
            .unwrap_or_else(|| panic!("{file}: no {id}"));
        assert_eq!(f.status, Status::Fail, "{file}");
        if let Some(t) = text {
            assert!(f.message.contains(t), "{file}: {}", f.message);
        }
        assert!(f.remediation.is_some(), "{file}: {id} has no fix");
        assert!(
            gdrdoctor_checks::findings::page(id).is_some(),
            "{id} has no page"
        );
        assert_eq!(r.summary.exit_code, 1, "{file}");
    }
    // The ib-completion fix for status 4 points at ACS and the IOMMU.
    let r = run_on(&["nccl-928-ib-error4.log"]);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.ib-completion")
        .unwrap();
    assert!(f.remediation.as_deref().unwrap().contains("ACS"));
    // Both hosts' `error 4` lines: one finding each, named by its host, with its own lines
    // (it was one finding named after H100-2, holding H100-1's line too).
    let per_host: Vec<(&str, bool)> = r
        .findings
        .iter()
        .filter(|f| f.id == "nccl.ib-completion")
        .map(|f| {
            let own = f
                .evidence
                .iter()
                .all(|e| e.observed.starts_with(&format!("{}:", f.subject)));
            (f.subject.as_str(), own)
        })
        .collect();
    assert_eq!(
        per_host,
        [("H100-2", true), ("H100-1", true)],
        "{per_host:?}"
    );
    assert_eq!(
        log_of("nccl-1283-ray-prefix-cuda-invalid.log").hosts,
        vec!["n176-080-198"]
    );
    assert_eq!(
        log_of("nccl-1029-cuda-init-error.log").versions,
        vec!["2.18.3"]
    );
    let k: Vec<FailureKind> = log_of("llamafactory-6269-watchdog.log")
        .failures
        .iter()
        .map(|f| f.kind)
        .collect();
    assert!(
        k.iter().all(|x| *x == FailureKind::Timeout) && k.len() == 2,
        "{k:?}"
    );
}

#[test]
fn init_lines_versions_env_and_devices() {
    let l = log_of("pytorch-130113-socket-gdr-disabled.log");
    assert_eq!(l.ranks.len(), 3);
    assert_eq!(l.rank_gpu(Some("node155"), 2).as_deref(), Some("41000"));
    // A socket interface's `GPU Direct RDMA Disabled` is no peer-memory answer.
    assert!(l.nic_gdr.is_empty());
    assert_eq!(l.no_rdma.len(), 6);
    assert_eq!(l.networks, vec!["Socket"]);
    let l = log_of("nccl-1866-2.27-cuda13-env.log");
    assert_eq!(
        l.version().map(|v| v.to_string()).as_deref(),
        Some("2.27.6")
    );
    assert_eq!(
        l.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("enp9s0np0")
    );
    assert_eq!(l.hosts.len(), 2);
    let l = log_of("nv_peer_memory-56-nccl-2.4-using.log");
    assert_eq!(l.versions, vec!["2.4.7+cuda10.0"]);
    let ib: Vec<&str> = l
        .net_devices
        .iter()
        .filter(|d| d.net == "IB")
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(ib, vec!["mlx5_0"]);
    let l = log_of("nccl-tests-245-ofi-dmabuf.log");
    assert_eq!(l.ranks.len(), 2);
    assert!(l.hosts.is_empty());
}

#[test]
fn empty_grep_proves_no_peer_memory_module() {
    let r = run_on(&["nccl-988-lsmod-grep-empty-ibext.txt"]);
    let b: Vec<(Kind, BlockStatus)> = r
        .blocks
        .iter()
        .filter(|b| b.status != BlockStatus::Ignored)
        .map(|b| (b.kind, b.status))
        .collect();
    assert_eq!(
        b,
        vec![
            (Kind::Lsmod, BlockStatus::Parsed),
            (Kind::Lsmod, BlockStatus::Parsed),
            (Kind::NcclLog, BlockStatus::Parsed)
        ]
    );
    // nvidia_peermem and nv_peer_mem are proven absent; the log lists 8 IB devices, all
    // ACTIVE (NCCL lists only active ports); whether dma-buf works is not in the paste.
    let p = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nv-peer-mem")
        .unwrap();
    assert_eq!(p.status, Status::Pass, "{p:?}");
    assert!(
        p.evidence.iter().any(|e| e.source.starts_with("b2 ")),
        "{p:?}"
    );
    let pm = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    assert_ne!(pm.status, Status::Pass, "{pm:?}");
    assert_eq!(r.inventory.nics.len(), 8);
    assert!(r
        .inventory
        .nics
        .iter()
        .all(|n| n.ports.iter().all(|p| p.state.as_deref() == Some("ACTIVE"))));
}

#[test]
fn issue_1537_peermem_loaded_but_nccl_says_disabled() {
    let Some(rd) = realdata() else { return };
    let dir = rd.join("nccl-1537-gdr-disabled-roce-excerpt");
    let inputs: Vec<Input> = ["env-and-lsmod.txt", "nccl-debug-excerpt.log"]
        .iter()
        .map(|n| input(n, std::fs::read_to_string(dir.join(n)).unwrap()))
        .collect();
    let r = diagnose(&inputs, &RunOptions::default());
    let g: Vec<_> = r.findings.iter().filter(|f| f.id == "nccl.gdr").collect();
    assert_eq!(g.len(), 2);
    assert!(g.iter().all(
        |f| f.status == Status::Fail && f.message.contains("although nvidia_peermem is loaded")
    ));
    let pm = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    // Loaded, but NCCL's own log shows it did not use it: no pass.
    assert_eq!(pm.status, Status::Warn);
    assert!(pm.message.contains("did not use it"), "{}", pm.message);
    // NCCL's version is not in the paste: the message says what an older one does, and the
    // fix is not to load a module that is loaded.
    assert!(
        g[0].message.contains("a NCCL older than 2.23"),
        "{}",
        g[0].message
    );
    let fix = g[0].remediation.as_deref().unwrap_or_default();
    assert!(fix.starts_with("upgrade NCCL to 2.23"), "{fix}");
    // With the version given: 2.25 finds the module itself, so that NCCL could not see /sys.
    let r = gdrdoctor_checks::paste::report::diagnose_paste(
        &paste::read(&inputs),
        &inputs,
        &RunOptions::default(),
        &gdrdoctor_checks::paste::report::Assume {
            nccl_version: Some("2.25.1".into()),
            ..Default::default()
        },
    );
    let g: Vec<_> = r.findings.iter().filter(|f| f.id == "nccl.gdr").collect();
    assert!(
        g[0].message.contains("NCCL 2.25.1") && g[0].message.contains("could not read the file"),
        "{}",
        g[0].message
    );
    // The pasted environment sets NCCL_NET_GDR_LEVEL=SYS: the threshold follows it.
    assert_eq!(r.gdr_level, "SYS");
}

#[test]
fn damaged_logs_never_change_a_logged_decision() {
    let logs: Vec<String> = std::fs::read_dir(pastes())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(logs.len() >= 15);
    let key = |l: &paste::nccl::NcclLog| -> std::collections::BTreeSet<String> {
        l.connections
            .iter()
            .map(|c| {
                format!(
                    "{:?} {} {} {} {:?} {:?}",
                    c.origin.host, c.channel, c.from_rank, c.to_rank, c.direction, c.transport
                )
            })
            .collect()
    };
    for name in logs {
        let t = text(&name);
        let clean = paste::nccl::parse(&t);
        let want = key(&clean);
        let lines: Vec<&str> = t.lines().collect();
        let wrap = |w: usize| -> String {
            lines
                .iter()
                .flat_map(|l| {
                    let c: Vec<char> = l.chars().collect();
                    c.chunks(w)
                        .map(|x| x.iter().collect::<String>())
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let variants = [
            ("crlf", t.replace('\n', "\r\n"), true),
            (
                "quote",
                lines
                    .iter()
                    .map(|l| format!("> {l}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                true,
            ),
            (
                "ansi",
                lines
                    .iter()
                    .map(|l| format!("\u{1b}[32m{l}\u{1b}[0m"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                true,
            ),
            ("wrap 80", wrap(80), false),
            ("wrap 120", wrap(120), false),
        ];
        for (how, d, same) in variants {
            let got = key(&paste::nccl::parse(&d));
            for g in &got {
                assert!(
                    want.contains(g),
                    "{name} / {how}: decision {g} not in the clean log"
                );
            }
            if same {
                assert_eq!(got, want, "{name} / {how}");
                assert_eq!(
                    paste::nccl::parse(&d).failures.len(),
                    clean.failures.len(),
                    "{name} / {how}"
                );
            }
        }
    }
}
