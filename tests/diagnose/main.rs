//! `gdrdoctor diagnose` on real pasted text (fixtures/pastes, ../shared/realdata) and on
//! damaged variants built from it: every logged GDR decision is read as NCCL logged it, every
//! matrix parses or is refused with a reason, and no damaged variant yields a cell the clean
//! paste does not have.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::paste::nccl::{Direction, FailureKind, Transport};
use gdrdoctor_checks::paste::report::{diagnose, DiagnoseReport};
use gdrdoctor_checks::paste::topo::Matrix;
use gdrdoctor_checks::paste::{self, BlockStatus, Input, Kind};
use gdrdoctor_checks::report::Status;
use gdrdoctor_checks::RunOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn pastes() -> PathBuf {
    repo().join("fixtures/pastes")
}

fn text(name: &str) -> String {
    std::fs::read_to_string(pastes().join(name)).unwrap()
}

fn input(name: &str, text: String) -> Input {
    Input {
        name: name.into(),
        text,
    }
}

fn run_on(names: &[&str]) -> DiagnoseReport {
    let inputs: Vec<Input> = names.iter().map(|n| input(n, text(n))).collect();
    diagnose(&inputs, &RunOptions::default())
}

fn log_of(name: &str) -> paste::nccl::NcclLog {
    let p = paste::read(&[input(name, text(name))]);
    p.nccl_merged().expect("an NCCL log block")
}

fn statuses<'a>(r: &'a DiagnoseReport, id: &str) -> Vec<(&'a str, Status)> {
    r.findings
        .iter()
        .filter(|f| f.id == id)
        .map(|f| (f.subject.as_str(), f.status))
        .collect()
}

// ---- NCCL logs: the decisions NCCL logged, as it logged them ----

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
        assert!(gdrdoctor::docs::page(id).is_some(), "{id} has no page");
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
    assert!(l.nic_gdr.iter().all(|n| n.name == "bond0" && !n.enabled));
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

fn realdata() -> Option<PathBuf> {
    let p = repo().join("../shared/realdata");
    p.is_dir().then_some(p)
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

// ---- matrices: real ones, and every damaged variant of them ----

fn matrix_files() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(pastes())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("topo"))
        .map(|n| (n.clone(), text(&n)))
        .collect();
    if let Some(rd) = realdata() {
        for rel in [
            "sglang-30401-hgx-h100/nvidia-smi-topo-m.txt",
            "llm-action-a800x8-4nic-topo/nvidia-smi-topo-m.txt",
            "oyanghd-a100x8-epyc7742-topo/nvidia-smi-topo-m.txt",
            "stelline-asus-esc8000a-e12/12-nvidia-smi_topo_-m.txt",
            "stelline-puget-threadripper-pro-wrx90/08-nvidia-smi_topo_-m.txt",
            "nccl-1737-h100-gdr-hang-excerpt/nvidia-smi-topo-m.TRUNCATED.txt",
            "blog-8gpu-pcie-switch-cx6-topo/nvidia-smi-topo-mp.host-a.txt",
            "blog-8gpu-pcie-switch-cx6-topo/nvidia-smi-topo-m.host-b.txt",
        ] {
            if let Ok(t) = std::fs::read_to_string(rd.join(rel)) {
                v.push((rel.to_string(), t));
            }
        }
    }
    v
}

/// Every cell (GPU x GPU and GPU x NIC) a matrix holds, by (row, column name).
fn cells(m: &Matrix) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for r in &m.rows {
        for (i, c) in r.cells.iter().enumerate() {
            if let Some(c) = c {
                let col = m.columns[i].clone();
                out.insert((r.label.clone(), col), c.clone());
            }
        }
    }
    out
}

fn first_matrix(t: &str) -> Option<Matrix> {
    let p = paste::read(&[input("x", t.to_string())]);
    p.matrices.into_iter().next().map(|x| x.1)
}

/// Damage a text the way terminals and trackers do.
fn damaged(t: &str) -> Vec<(&'static str, String, bool)> {
    // (name, text, whether every cell must survive)
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
    let header = lines
        .iter()
        .position(|l| gdrdoctor_checks::paste::topo::is_header(l.trim()));
    let mut v = vec![
        ("crlf", t.replace('\n', "\r\n"), true),
        (
            "ansi header",
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    if Some(i) == header {
                        format!("\u{1b}[4m{l}\u{1b}[0m")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        (
            "markdown quote",
            lines
                .iter()
                .map(|l| format!("> {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        (
            "code comment",
            lines
                .iter()
                .map(|l| format!("// {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        ("tabs to one space", t.replace('\t', " "), true),
        ("tabs lost", t.replace('\t', "").replace("    ", ""), true),
        ("wrap 80", wrap(80), true),
        ("wrap 120", wrap(120), true),
        (
            "rows cut at 60 columns",
            lines
                .iter()
                .map(|l| l.chars().take(60).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
        (
            "header lost",
            lines
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != header)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
        ("doubled (two nodes)", format!("{t}\n{t}"), true),
    ];
    // Glued cells: two spaces of padding lost between every pair of cells.
    v.push((
        "cells glued",
        t.replace("    PIX", "PIX").replace("    NODE", "NODE"),
        true,
    ));
    v
}

#[test]
fn every_real_matrix_parses_or_is_refused_with_a_reason() {
    let files = matrix_files();
    assert!(files.len() >= 9, "{}", files.len());
    for (name, t) in &files {
        let p = paste::read(&[input(name, t.clone())]);
        let blocks: Vec<_> = p
            .blocks
            .iter()
            .filter(|b| b.kind == Kind::TopoMatrix)
            .collect();
        assert!(!blocks.is_empty(), "{name}: no matrix block");
        for b in blocks {
            match b.status {
                BlockStatus::Refused | BlockStatus::Incomplete => {
                    assert!(
                        !b.problems.is_empty(),
                        "{name}: {:?} without a reason",
                        b.status
                    )
                }
                _ => {}
            }
        }
    }
}

#[test]
fn damaged_variants_never_change_a_cell() {
    for (name, t) in matrix_files() {
        let Some(clean) = first_matrix(&t) else {
            continue;
        };
        let want = cells(&clean);
        for (how, d, keep_all) in damaged(&t) {
            let Some(m) = first_matrix(&d) else {
                assert!(!keep_all, "{name} / {how}: the matrix was lost");
                continue;
            };
            let got = cells(&m);
            for (k, v) in &got {
                if let Some(w) = want.get(k) {
                    assert_eq!(v, w, "{name} / {how}: cell {k:?} changed");
                } else {
                    // A cell the clean paste does not hold may only appear from the symmetric
                    // row (the clean one has it there too).
                    let sym = (k.1.clone(), k.0.clone());
                    assert!(
                        want.get(&sym).is_some_and(|w| w == v),
                        "{name} / {how}: invented cell {k:?} = {v}"
                    );
                }
            }
            if keep_all {
                let lost: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
                assert!(lost.is_empty(), "{name} / {how}: cells lost: {lost:?}");
            }
        }
    }
}

#[test]
fn glued_and_wrapped_cells_are_repaired_not_lost() {
    let t = text("nccl-pr2150-topo-pxb-cut.txt");
    let clean = cells(&first_matrix(&t).unwrap());
    // Tabs lost between cells: PXBNODE, NODENODE.
    let glued = t
        .replace("PXB     NODE", "PXBNODE")
        .replace("NODE    NODE", "NODENODE");
    let m = first_matrix(&glued).unwrap();
    assert_eq!(cells(&m), clean);
    let p = paste::read(&[input("g", glued)]);
    assert!(p.blocks[0].repairs.iter().any(|r| r.contains("glued")));
    // A row wrapped onto the next line is joined.
    let t = text("nccl-933-topo-9nic-cut.txt");
    let clean = cells(&first_matrix(&t).unwrap());
    let wrapped = t.replace(
        "NODE    SYS     PIX     SYS     NODE    SYS     NODE    SYS     NODE    0-47",
        "NODE    SYS     PIX     SYS\nNODE    SYS     NODE    SYS     NODE    0-47",
    );
    assert_ne!(wrapped, t);
    assert_eq!(cells(&first_matrix(&wrapped).unwrap()), clean);
}

#[test]
fn two_matrices_are_two_blocks_with_their_own_pairs() {
    let a = text("nccl-1435-topo-pxb-numa.txt");
    let b = text("nccl-pr2150-topo-pxb-cut.txt");
    let r = diagnose(
        &[input("two.txt", format!("{a}\n\n{b}"))],
        &RunOptions::default(),
    );
    assert_eq!(r.matrices.len(), 2);
    let blocks: std::collections::BTreeSet<&str> = r.gdr.iter().map(|p| p.block.as_str()).collect();
    assert_eq!(blocks.len(), 2);
    // Subjects say which block they are about.
    assert!(r
        .findings
        .iter()
        .any(|f| f.id == "topo.nic-distance" && f.subject.starts_with("b1:")));
}

#[test]
fn real_matrices_give_the_expected_cells() {
    let m = first_matrix(&text("nccl-2157-topo-18nic-cut.txt")).unwrap();
    for n in ["NIC5", "NIC6", "NIC7", "NIC8"] {
        assert_eq!(m.cell("GPU0", n), Some("PXB"), "{n}");
    }
    assert_eq!(m.cell("GPU2", "NIC1"), Some("PXB"));
    assert_eq!(m.cell("GPU4", "NIC0"), Some("SYS"));
    assert_eq!(m.cell("GPU4", "NIC8"), None, "cut");
    assert_eq!(m.nvlinks("GPU0", "GPU7"), Some(12));
    let m = first_matrix(&text("deepep-60-topo-mp-14nic-cut.txt")).unwrap();
    assert_eq!(m.cell("GPU3", "NIC7"), Some("PIX"));
    assert_eq!(m.cell("GPU4", "NIC7"), None, "`SY` is cut, not read");
    let m = first_matrix(&text("sglang-13973-topo-nv18-cut.txt")).unwrap();
    assert_eq!(m.cell("GPU3", "NIC4"), Some("PIX"));
    assert_eq!(m.cell("GPU6", "NIC0"), None);
    let m = first_matrix(&text("club3090-1229-topo-tabs-no-nic.txt")).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1"]);
    assert_eq!(m.cell("GPU0", "GPU1"), Some("PHB"));
    assert!(m.pairs().is_empty());
}

/// A whole `lsmod` with nvidia_peermem.
fn lsmod_with_peermem() -> String {
    let mut lsmod = String::from("Module                  Size  Used by\n");
    for i in 0..30 {
        lsmod.push_str(&format!("mod{i:<20} 16384  0\n"));
    }
    lsmod.push_str("nvidia_peermem         16384  0\nnvidia              56598528  147 nvidia_uvm,nvidia_peermem\n");
    lsmod
}

/// Two GPUs, each PIX to its own NIC; `gpu_gpu` is the cell between them.
fn two_gpu_matrix(gpu_gpu: &str) -> String {
    format!(
        "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      {gpu_gpu}    PIX     SYS     0-31    0       N/A
GPU1    {gpu_gpu}     X      SYS     PIX     32-63   1       N/A
NIC0    PIX     SYS      X      SYS
NIC1    SYS     PIX     SYS      X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"
    )
}

/// Every logged pair whose prediction is decided agrees with what NCCL logged, per direction.
fn assert_logged_agree(r: &DiagnoseReport) {
    for p in &r.gdr {
        let Some(l) = &p.logged else { continue };
        if p.gdr == paste::verdict::Gdr::Unknown {
            continue;
        }
        for (what, logged, predicted) in
            [("send", l.send, p.send), ("receive", l.receive, p.receive)]
        {
            if let (Some(a), Some(b)) = (logged, predicted) {
                assert_eq!(
                    a, b,
                    "{} {} {what}: logged {a}, predicted {b}: {p:?}",
                    p.gpu, p.nic
                );
            }
        }
    }
    for f in r.findings.iter().filter(|f| f.id == "nccl.gdr") {
        assert!(
            !f.message.contains("where the paste predicts"),
            "{}: {}",
            f.subject,
            f.message
        );
    }
}

#[test]
fn matrix_with_lsmod_and_log_agrees_with_what_nccl_logged() {
    // A healthy node: NIC legend, every GPU PIX to its NIC, NVLink between the GPUs,
    // nvidia_peermem in a whole lsmod, ports ACTIVE (NCCL's `Using` line), and an NCCL 2.19
    // log whose channels use GDRDMA both ways: prediction and log agree per direction.
    let log = "n1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
n1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>
n1:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x2 - Init START
n1:1:3 [1] NCCL INFO comm 0x3 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 9b000 commId 0x2 - Init START
n1:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA
n1:1:2 [0] NCCL INFO Connected all rings
";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("NV18")),
            input("nccl.log", log.into()),
        ],
        &RunOptions::default(),
    );
    assert_eq!(
        r.nccl_rules.split(' ').nth(1),
        Some("2.19.3"),
        "{}",
        r.nccl_rules
    );
    let p0 = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU0" && p.nic == "mlx5_0")
        .unwrap();
    assert_eq!(p0.by_distance, Some(true));
    assert_eq!(p0.gdr, paste::verdict::Gdr::On);
    assert_eq!(p0.mechanism.as_deref(), Some("peermem"));
    let l = p0.logged.as_ref().unwrap();
    assert_eq!((l.send, l.receive), (Some(true), Some(true)));
    assert_logged_agree(&r);
    let s = statuses(&r, "nccl.gdr");
    assert!(s.contains(&("GPU0|mlx5_0", Status::Pass)), "{s:?}");
    assert!(s.contains(&("GPU1|mlx5_1", Status::Pass)), "{s:?}");
    let g = statuses(&r, "gdr.gpu");
    assert_eq!(g, vec![("GPU0", Status::Pass), ("GPU1", Status::Pass)]);
    assert_eq!(
        statuses(&r, "kmod.nvidia-peermem"),
        vec![("node", Status::Pass)]
    );
    // Every pass cites the block it read.
    for f in r.findings.iter().filter(|f| f.status == Status::Pass) {
        assert!(
            f.evidence.iter().any(|e| e.source.starts_with('b')),
            "{} passes without citing a block: {:?}",
            f.id,
            f.evidence
        );
    }
}

#[test]
fn the_read_gate_of_nccl_2_18_is_predicted_per_direction() {
    // NCCL 2.18 without NVLink between the GPUs: sends are staged through host memory, receives
    // use GDR (src/graph/paths.cc v2.18.6-1 ncclTopoCheckGdr(), read gate without an NVLink
    // peer); 2.18.6 prints nvmlDev in the channel brackets (src/transport/net.cc v2.18.3-1).
    let log = "n1:1:2 [0] NCCL INFO NCCL version 2.18.6+cuda12.2
n1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
n1:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0
n1:1:3 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1
";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("SYS ")),
            input("nccl.log", log.into()),
        ],
        &RunOptions::default(),
    );
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU1" && p.nic == "mlx5_1")
        .unwrap();
    assert_eq!((p.send, p.receive), (Some(false), Some(true)), "{p:?}");
    assert!(p.reasons[0].starts_with("read gate: NCCL 2.18.6"), "{p:?}");
    assert_logged_agree(&r);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.subject == "GPU1|mlx5_1")
        .unwrap();
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.message.contains("as nccl's read gate predicts"),
        "{}",
        f.message
    );
    assert_eq!(
        statuses(&r, "gdr.gpu"),
        vec![("GPU0", Status::Warn), ("GPU1", Status::Warn)]
    );
    // With NCCL 2.19 (the gate only for GPUs below compute capability 8.0) and H100s, the
    // same paste predicts GDR for sends: the log above then disagrees, and says so.
    let smiq = "==============NVSMI LOG==============\n\nDriver Version                            : 550.54.15\n\nAttached GPUs                             : 2\nGPU 00000000:1B:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\nGPU 00000000:9B:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("SYS ")),
            input("smiq.txt", smiq.into()),
            input(
                "nccl.log",
                log.replace("2.18.6+cuda12.2", "2.19.3+cuda12.3"),
            ),
        ],
        &RunOptions::default(),
    );
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU1" && p.nic == "mlx5_1")
        .unwrap();
    assert_eq!((p.send, p.receive), (Some(true), Some(true)), "{p:?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.subject == "GPU1|mlx5_1")
        .unwrap();
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source == "nccl rule" && e.observed.contains("gdr both ways")),
        "{f:?}"
    );
}

#[test]
fn every_logged_decision_in_the_fixtures_agrees() {
    // Each real paste, alone and with the fixtures that come from the same issue.
    let mut runs: Vec<Vec<String>> = std::fs::read_dir(pastes())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log") || n.ends_with(".txt"))
        .map(|n| vec![n])
        .collect();
    runs.push(vec![
        "nccl-1814-ibext-channels.log".into(),
        "nccl-1814-status12-warn.log".into(),
    ]);
    for names in runs {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = run_on(&refs);
        assert_logged_agree(&r);
    }
    if let Some(rd) = realdata() {
        let dir = rd.join("nccl-1537-gdr-disabled-roce-excerpt");
        let inputs: Vec<Input> = ["env-and-lsmod.txt", "nccl-debug-excerpt.log"]
            .iter()
            .map(|n| input(n, std::fs::read_to_string(dir.join(n)).unwrap()))
            .collect();
        assert_logged_agree(&diagnose(&inputs, &RunOptions::default()));
    }
}

#[test]
fn what_a_paste_cannot_show_is_skip_with_the_command() {
    let r = run_on(&["nccl-pr2150-topo-pxb-cut.txt"]);
    let pm = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    assert_eq!(pm.status, Status::Skip);
    assert!(
        pm.message
            .contains("not in the pasted text; run `lsmod | grep"),
        "{}",
        pm.message
    );
    for f in &r.findings {
        assert_ne!(
            (f.id.as_str(), f.status),
            ("gpu.present", Status::Pass),
            "a pasted matrix is not a pci scan"
        );
        if f.status == Status::Pass {
            assert!(!f.evidence.is_empty(), "{} passes without evidence", f.id);
        }
    }
    // Distance known, peer memory not: gdr.gpu is skip, never pass.
    assert!(statuses(&r, "gdr.gpu")
        .iter()
        .filter(|(s, _)| *s != "GPU6" && *s != "GPU7")
        .all(|(_, s)| *s == Status::Skip));
}

#[test]
fn rdma_and_module_pastes_fill_the_model() {
    let r = run_on(&["mooncake-1999-ibstat.txt"]);
    let ports = statuses(&r, "rdma.ports");
    assert!(ports.contains(&("mlx5_0/1", Status::Pass)), "{ports:?}");
    assert!(ports
        .iter()
        .any(|(s, st)| *s == "mlx5_10/1" && *st != Status::Pass));
    let r = run_on(&["deepep-60-ibv_devinfo-excerpt.txt"]);
    let n = r
        .inventory
        .nics
        .iter()
        .find(|n| n.ibdev == "mlx5_12")
        .unwrap();
    assert_eq!(n.ports[0].state.as_deref(), Some("DOWN"));
    let r = run_on(&["rdma-core-847-ibstat-mlx4.txt"]);
    let n = &r.inventory.nics[0];
    assert_eq!(n.ibdev, "mlx4_0");
    assert_eq!(n.ports.len(), 2);
    let r = run_on(&["nccl-1866-legend-ibstatus.txt"]);
    assert!(r.matrices.is_empty(), "a legend alone is not a matrix");
    assert_eq!(r.inventory.nics.len(), 2);
    let r = run_on(&["gpud-39-lsmod-peermem.txt"]);
    assert_eq!(
        statuses(&r, "kmod.nvidia-peermem"),
        vec![("node", Status::Pass)]
    );
    // A pasted dmesg feeds the node's kernel log: issue 17's kernel.xid judges it (the
    // three-line "fallen off the bus" report is Xid 79 for 0000:b3:00.0).
    let r = run_on(&["nvsentinel-155-fallen-off-bus.txt"]);
    assert_eq!(
        statuses(&r, "kernel.xid"),
        vec![("0000:b3:00.0", Status::Fail)]
    );
    // No IOMMU line in the excerpt: not proof of none.
    assert_eq!(
        statuses(&r, "kernel.iommu-fault"),
        vec![("node", Status::Skip)]
    );
    assert_eq!(
        r.inventory.driver.nvidia_version.as_deref(),
        Some("570.158.01")
    );
    assert_eq!(r.inventory.driver.flavor.as_deref(), Some("open"));
    // nv_peer_mem could not load: kmod.nvidia-peermem says why there is no peer-memory client.
    let r = run_on(&["nv_peer_memory-8-disagrees-symbol.txt"]);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.message.contains("nv_peer_mem could not load"),
        "{}",
        f.message
    );
    assert!(
        f.evidence.iter().any(|e| e.source.starts_with("b1 ")
            && e.observed.contains("Unknown symbol nvidia_p2p_put_pages")),
        "{f:?}"
    );
}

#[test]
fn nvidia_smi_q_gives_driver_and_gpus() {
    let p = paste::read(&[input("q", text("nvidia-docker-954-smi-q.txt"))]);
    let (_, q) = &p.smiq[0];
    assert_eq!(q.driver_version.as_deref(), Some("396.54"));
    assert_eq!(q.gpus[0].bdf, "0000:01:00.0");
    assert_eq!(q.gpus[0].persistence_mode, Some(false));
}

// ---- the command line ----

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

// ---- item 5: a whole /proc/modules is conclusive ----

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
