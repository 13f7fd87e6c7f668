//! One test per rule and version range; NCCL's source (NVIDIA/nccl at the tag named) is
//! the specification.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::nccl::env::NcclEnv;
use crate::nccl::version::{Chosen, PathKind, Version};
use std::collections::BTreeMap;
use PathKind::*;

/// `paths[g][n]`, NVLink between every GPU pair (`nvl`), cc 9.0, support everywhere.
fn sys(paths: &[&[PathKind]], nvl: bool) -> System {
    let ng = paths.len();
    let nn = paths.first().map(|r| r.len()).unwrap_or(0);
    System {
        gpus: (0..ng)
            .map(|g| Gpu {
                id: format!("GPU{g}"),
                cc: Some((9, 0)),
                cc_source: "test".into(),
                c2c: Some(false),
                c2c_source: "test".into(),
            })
            .collect(),
        nics: (0..nn)
            .map(|n| Nic {
                name: format!("mlx5_{n}"),
                ports: Some(vec![(1, true)]),
            })
            .collect(),
        paths: paths
            .iter()
            .map(|r| r.iter().map(|k| Some(*k)).collect())
            .collect(),
        path_hint: String::new(),
        smi: vec![vec![None; nn]; ng],
        nvlink: (0..ng)
            .map(|a| (0..ng).map(|b| Some(nvl && a != b)).collect())
            .collect(),
        nvlink_source: "test".into(),
        gpu_paths: vec![vec![Some(Pxb); ng]; ng],
        support: vec![
            vec![
                Support {
                    peermem: Some(true),
                    dmabuf: Some(true),
                    gpu: Some(true),
                    ..Default::default()
                };
                nn
            ];
            ng
        ],
        amd_two_gpus: false,
        cpu: None,
    }
}

fn run(s: &System, version: &str, env: &[(&str, &str)]) -> Decision {
    let v = Version::parse(version).unwrap();
    let m: BTreeMap<String, String> = env
        .iter()
        .map(|(k, x)| (k.to_string(), x.to_string()))
        .collect();
    decide(
        s,
        &Config {
            rules: Chosen {
                version: v,
                source: "test".into(),
                assumed: false,
            },
            env: NcclEnv::parse(Some(&m), "env", v),
        },
    )
}

/// The 8-GPU node of the brief: GPU3 has only PHB NICs, its NVLink peers have PIX NICs.
fn eight_gpus_gpu3_without_nic() -> System {
    let mut rows: Vec<Vec<PathKind>> = Vec::new();
    for g in 0..8 {
        let mut r = vec![Phb; 7];
        let own = match g {
            0..=2 => Some(g),
            4..=7 => Some(g - 1),
            _ => None,
        };
        if let Some(n) = own {
            r[n] = Pix;
        }
        rows.push(r);
    }
    let refs: Vec<&[PathKind]> = rows.iter().map(|r| r.as_slice()).collect();
    sys(&refs, true)
}

#[test]
fn pxn_serves_a_gpu_without_a_close_nic() {
    // src/graph/paths.cc v2.30.7-1 L812-840: GPU3's PHB path to mlx5_0 becomes PXN through
    // mlx5_0's local GPU (GPU0), and ncclTopoCheckGdr() judges GPU0's PIX (L515-520).
    let s = eight_gpus_gpu3_without_nic();
    let d = run(&s, "2.30.7", &[]);
    let v = d.pair(3, 0).unwrap();
    assert_eq!((v.path, v.via), (Some(Pxn), Some(0)));
    assert!(v.send.gdr && v.receive.gdr, "{v:?}");
    assert!(v
        .notes
        .iter()
        .any(|n| n.starts_with("PXN: NCCL sends through GPU0")));
    assert!(!v.send.reasons.iter().any(|r| r.contains("host memory")));
    // A GPU with its own PIX NIC keeps its own path to it.
    assert_eq!(d.pair(0, 0).unwrap().via, None);
}

/// Rows cut from a pasted matrix: where the NIC's local GPU may be among the GPUs whose
/// path is unknown, PXN is undecided, not "off by distance" (it said off, and a GPU that
/// NCCL serves over PXN was reported as staging through host memory).
#[test]
fn pxn_is_undecided_when_the_local_gpu_may_be_unseen() {
    let mut s = eight_gpus_gpu3_without_nic();
    // GPU0 (mlx5_0's PIX GPU) and GPUs 4-7 lost their rows.
    for g in [0, 4, 5, 6, 7] {
        for n in 0..7 {
            s.paths[g][n] = None;
        }
    }
    for v in ["2.30.7", "2.17.1"] {
        let p = run(&s, v, &[]).pair(3, 0).unwrap().clone();
        assert!(!p.enabled() && p.via.is_none(), "{v}: {p:?}");
        assert!(
            p.undecided
                .iter()
                .any(|u| u.contains("GPU0") && u.contains("PXN")),
            "{v}: {p:?}"
        );
    }
    // A known PIX GPU is the local one whatever the unseen rows hold: decided.
    let mut s = eight_gpus_gpu3_without_nic();
    for g in [4, 5, 6, 7] {
        for n in 0..7 {
            s.paths[g][n] = None;
        }
    }
    let p = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
    assert_eq!(p.via, Some(0), "{p:?}");
}

#[test]
fn pxn_disable_and_old_versions() {
    let s = eight_gpus_gpu3_without_nic();
    // NCCL_PXN_DISABLE=1 (v2.30.7-1 L668-684, L819).
    let d = run(&s, "2.30.7", &[("NCCL_PXN_DISABLE", "1")]);
    let v = d.pair(3, 0).unwrap();
    assert!(!v.enabled() && v.via.is_none());
    assert!(v.send.reasons[0].contains("path PHB is beyond NCCL_NET_GDR_LEVEL PXB"));
    assert!(d
        .notes
        .iter()
        .any(|n| n.contains("NCCL_PXN_DISABLE=1 from env")));
    // No PXN before 2.12 (v2.11.4-1 has no PATH_PXN).
    assert!(!run(&s, "2.11.4", &[]).pair(3, 0).unwrap().enabled());
    // 2.12-2.17: any NVLink peer within PXB (v2.12.12-1 L526-545).
    assert_eq!(run(&s, "2.12.12", &[]).pair(3, 0).unwrap().via, Some(0));
    assert_eq!(run(&s, "2.17.1", &[]).pair(3, 1).unwrap().via, Some(1));
}

#[test]
fn pxn_needs_nvlink_and_says_when_unknown() {
    // (2) "is connected to us through NVLink" (v2.30.7-1 L832).
    let mut s = eight_gpus_gpu3_without_nic();
    for a in 0..8 {
        for b in 0..8 {
            s.nvlink[a][b] = Some(false);
        }
    }
    assert!(!run(&s, "2.30.7", &[]).pair(3, 0).unwrap().enabled());
    for a in 0..8 {
        for b in 0..8 {
            s.nvlink[a][b] = if a == b { Some(false) } else { None };
        }
    }
    let v = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
    assert!(!v.enabled());
    assert!(
        v.undecided[0].contains("cannot tell whether NCCL sends through GPU0"),
        "{v:?}"
    );
    // NCCL_P2P_DISABLE=1 diverts GPU pairs through the CPU: no NVLink peer, no PXN
    // (v2.30.7-1 L765-778).
    let s = eight_gpus_gpu3_without_nic();
    let d = run(&s, "2.30.7", &[("NCCL_P2P_DISABLE", "1")]);
    assert!(!d.pair(3, 0).unwrap().enabled());
}

#[test]
fn pxn_peer_must_have_gdr_from_2_30_3() {
    // v2.30.7-1 L826-830: ncclTopoCheckGdr(peer, read=1) must pass; v2.29.7-1 does not ask.
    let mut s = eight_gpus_gpu3_without_nic();
    s.support[0][0].gpu = Some(false);
    s.support[0][0].gpu_off = "GPU0 has no GDR".into();
    let new = run(&s, "2.30.7", &[]);
    assert!(!new.pair(3, 0).unwrap().enabled());
    let old = run(&s, "2.29.7", &[]);
    assert_eq!(old.pair(3, 0).unwrap().via, Some(0));
    assert!(old.pair(3, 0).unwrap().enabled());
    // The peer's GDR unknown (a paste without lsmod): undecided, not "off by distance".
    let mut s = eight_gpus_gpu3_without_nic();
    s.support[0][0].peermem = None;
    s.support[0][0].dmabuf = None;
    s.support[0][0].unknown = vec!["peer memory: not shown".into()];
    let v = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
    assert!(!v.enabled() && v.via.is_none());
    assert!(
        v.undecided.iter().any(|u| u
            .starts_with("cannot tell whether NCCL sends through GPU0 (PXN)")
            && u.contains("peer memory: not shown")),
        "{v:?}"
    );
}

#[test]
fn damaged_facts_make_an_on_pair_undecided_and_leave_an_off_one_off() {
    // Peer memory present, the GPU's attribute recorded but unreadable: not assumed on.
    let mut s = sys(&[&[Pix]], false);
    s.support[0][0].damaged = vec!["cannot tell CUDA's attribute: damaged: x".into()];
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(!v.enabled(), "{v:?}");
    assert!(
        v.undecided.iter().any(|u| u.contains("damaged: x")),
        "{v:?}"
    );
    // The same damage where the path is beyond the threshold: off, not undecided.
    let mut s = sys(&[&[Sys]], false);
    s.support[0][0].damaged = vec!["cannot tell CUDA's attribute: damaged: x".into()];
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(!v.enabled() && v.undecided.is_empty(), "{v:?}");
    // Without damage the same pair is on.
    let s = sys(&[&[Pix]], false);
    assert!(run(&s, "2.30.7", &[]).pair(0, 0).unwrap().enabled());
}

#[test]
fn a_no_wins_over_an_unknown_earlier_step() {
    // ncclTopoCheckGdr() (v2.30.7-1 L468-549): support, read gate, distance. Support
    // unknown but the path beyond the threshold: off either way, not undecided.
    let mut s = sys(&[&[Sys]], false);
    s.support[0][0].peermem = None;
    s.support[0][0].dmabuf = None;
    s.support[0][0].unknown = vec!["peer memory: not shown".into()];
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(!v.enabled() && v.undecided.is_empty(), "{v:?}");
    assert!(v.receive.reasons[0].contains("path SYS is beyond"), "{v:?}");
    assert_eq!(v.within, Some(false));
    // Within the threshold, the unknown support decides: undecided, with the reason.
    let mut s = sys(&[&[Pix]], false);
    s.support[0][0].peermem = None;
    s.support[0][0].dmabuf = None;
    s.support[0][0].unknown = vec!["peer memory: not shown".into()];
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(!v.enabled() && v.receive.undecided, "{v:?}");
    assert_eq!(v.undecided, vec!["peer memory: not shown".to_string()]);
    assert_eq!(v.within, Some(true));
    // NCCL's own NIC-level line wins over the other facts (src/graph/topo.cc v2.30.7-1
    // L1651-1654).
    s.support[0][0].nic_logged = Some(true);
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert_eq!(v.mechanism, Some(MECHANISM_LOGGED));
    s.support[0][0].peermem = Some(true);
    s.support[0][0].nic_logged = Some(false);
    s.support[0][0].nic_off = "NCCL logged Disabled".into();
    let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(!v.enabled());
    assert_eq!(v.receive.reasons, vec!["NCCL logged Disabled".to_string()]);
}

#[test]
fn read_gate_by_version_and_compute_capability() {
    // One GPU per PCIe NIC, no NVLink, two GPUs.
    let mut s = sys(&[&[Pix, Phb], &[Phb, Pix]], false);
    // <= 2.18: every GPU needs an NVLink peer for GDR sends (v2.18.6-1 L363-376).
    let d = run(&s, "2.18.6", &[]);
    let v = d.pair(0, 0).unwrap();
    assert!(!v.send.gdr && v.receive.gdr && v.enabled());
    assert!(
        v.send.reasons[0].starts_with("read gate: NCCL 2.18.6"),
        "{v:?}"
    );
    // From 2.19 only below compute capability 8.0 (v2.19.1-1 L365).
    let d = run(&s, "2.19.1", &[]);
    assert!(d.pair(0, 0).unwrap().send.gdr);
    s.gpus[0].cc = Some((7, 0));
    let d = run(&s, "2.30.7", &[]);
    assert!(!d.pair(0, 0).unwrap().send.gdr && d.pair(0, 0).unwrap().receive.gdr);
    // NCCL_NET_GDR_READ=1 lifts the gate, 0 turns sends off everywhere (L491-493).
    assert!(
        run(&s, "2.30.7", &[("NCCL_NET_GDR_READ", "1")])
            .pair(0, 0)
            .unwrap()
            .send
            .gdr
    );
    let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_READ", "0")]);
    assert!(!d.pair(1, 1).unwrap().send.gdr && d.pair(1, 1).unwrap().receive.gdr);
    // A single GPU counts as having NVLink from 2.6 (v2.6.4-1 L299) but not in 2.5.
    let one = sys(&[&[Pix]], false);
    assert!(run(&one, "2.18.6", &[]).pair(0, 0).unwrap().send.gdr);
    assert!(!run(&one, "2.5.7", &[]).pair(0, 0).unwrap().send.gdr);
    // Unknown compute capability without NVLink: undecided, not a guess.
    let mut u = sys(&[&[Pix]], false);
    u.gpus.push(u.gpus[0].clone());
    u.paths.push(vec![Some(Phb)]);
    u.smi.push(vec![None]);
    u.support.push(u.support[0].clone());
    u.nvlink = vec![vec![Some(false); 2]; 2];
    u.gpus[0].cc = None;
    let v = run(&u, "2.30.7", &[]).pair(0, 0).unwrap().clone();
    assert!(v.send.undecided && v.receive.gdr, "{v:?}");
}

#[test]
fn c2c_p2c_by_version() {
    // A Grace Hopper: the NIC on the GPU's own CPU is PHB over PCIe.
    let mut s = sys(&[&[Phb, Sys]], false);
    s.gpus[0].c2c = Some(true);
    // 2.25: no C2C rule, PHB is beyond PXB.
    assert!(!run(&s, "2.25.1", &[]).pair(0, 0).unwrap().enabled());
    // 2.26: NCCL_NET_GDR_C2C default 0 (v2.26.6-1 L381); set to 1 it counts as C2C (L433).
    assert!(!run(&s, "2.26.6", &[]).pair(0, 0).unwrap().enabled());
    assert!(run(&s, "2.26.6", &[("NCCL_NET_GDR_C2C", "1")])
        .pair(0, 0)
        .unwrap()
        .enabled());
    // 2.27-2.28: P2C path (v2.27.3-1 L670-680), default on, judged as C2C (L437-440), so
    // even NCCL_NET_GDR_LEVEL=PIX lets it through.
    let d = run(&s, "2.28.9", &[]);
    let v = d.pair(0, 0).unwrap();
    assert_eq!(v.path, Some(P2c));
    assert!(v.enabled() && !v.send.pci_mode);
    assert!(run(&s, "2.28.9", &[("NCCL_NET_GDR_LEVEL", "PIX")])
        .pair(0, 0)
        .unwrap()
        .enabled());
    assert!(!run(&s, "2.28.9", &[("NCCL_NET_GDR_C2C", "0")])
        .pair(0, 0)
        .unwrap()
        .enabled());
    // 2.29+: the threshold itself is P2C (v2.29.7-1 L460), so LEVEL=PIX now excludes it.
    assert!(run(&s, "2.30.7", &[]).pair(0, 0).unwrap().enabled());
    assert!(!run(&s, "2.30.7", &[("NCCL_NET_GDR_LEVEL", "PIX")])
        .pair(0, 0)
        .unwrap()
        .enabled());
    // The other Grace's NIC stays SYS.
    assert!(!run(&s, "2.30.7", &[]).pair(0, 1).unwrap().enabled());
    // A C2C GPU with a PCIe NIC under its switch: GDR in PCI mode (v2.30.7-1 L537-541).
    let mut p = sys(&[&[Pix]], false);
    p.gpus[0].c2c = Some(true);
    assert!(run(&p, "2.30.7", &[]).pair(0, 0).unwrap().send.pci_mode);
    // Unknown C2C is said once, not guessed.
    s.gpus[0].c2c = None;
    let d = run(&s, "2.30.7", &[]);
    assert!(!d.pair(0, 0).unwrap().enabled());
    assert!(d.notes.iter().any(|n| n.contains("NVLink-C2C is unknown")));
    // ... and the PHB pair is undecided, not off: on a Grace it would be P2C.
    assert!(d.pair(0, 0).unwrap().undecided[0].contains("(NVLink-C2C, P2C)"));
    // The SYS pair is off whatever the attachment.
    assert!(d.pair(0, 1).unwrap().undecided.is_empty());
    // With the C2C rule off (NCCL_NET_GDR_C2C=0) the PHB pair is off.
    let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_C2C", "0")]);
    assert!(d.pair(0, 0).unwrap().undecided.is_empty());
}

#[test]
fn legacy_2_4_integer_level() {
    // v2.4.8-1 src/transport/net.cc L246-272: NET_GDR_LEVEL default PHB (2), GDR iff
    // distance < level; "PHB" is strtoll 0: no GDR at all.
    let s = sys(&[&[Pix, Pxb, Phb]], false);
    let d = run(&s, "2.4.8", &[]);
    let on: Vec<bool> = (0..3).map(|n| d.pair(0, n).unwrap().receive.gdr).collect();
    assert_eq!(on, vec![true, true, false]);
    let d = run(&s, "2.4.8", &[("NCCL_NET_GDR_LEVEL", "3")]);
    assert!(d.pair(0, 2).unwrap().receive.gdr);
    let d = run(&s, "2.4.8", &[("NCCL_NET_GDR_LEVEL", "PHB")]);
    assert!(!d.pair(0, 0).unwrap().receive.gdr);
    // No dma-buf before 2.13: only the peer-memory path counts.
    let mut s = sys(&[&[Pix]], false);
    s.support[0][0].peermem = Some(false);
    assert!(!run(&s, "2.12.12", &[]).pair(0, 0).unwrap().enabled());
    assert_eq!(
        run(&s, "2.13.4", &[]).pair(0, 0).unwrap().mechanism,
        Some("dmabuf")
    );
}

#[test]
fn gdr_level_names_and_integers_move_the_threshold() {
    // ncclGetLevel() (v2.30.7-1 L244-280) and the comparison distance > level (L528).
    let s = sys(&[&[Pix, Pxb, Phb, Sys]], false);
    for (val, want) in [
        ("PIX", [true, false, false, false]),
        ("PHB", [true, true, true, false]),
        ("5", [true, true, true, true]),
        ("1", [true, false, false, false]),
        ("pix", [true, true, false, false]),
    ] {
        let d = run(
            &s,
            "2.30.7",
            &[("NCCL_NET_GDR_LEVEL", val), ("NCCL_PXN_DISABLE", "1")],
        );
        let got: Vec<bool> = (0..4).map(|n| d.pair(0, n).unwrap().receive.gdr).collect();
        assert_eq!(got, want, "NCCL_NET_GDR_LEVEL={val}");
    }
    let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_LEVEL", "PHB")]);
    assert_eq!(d.threshold, "PHB");
    assert_eq!(d.threshold_source, "NCCL_NET_GDR_LEVEL=PHB from env");
}

#[test]
fn ib_hca_ib_disable_and_ports() {
    // src/transport/net_ib/init.cc v2.30.7-1 L317-369 and L291.
    let mut s = sys(&[&[Pix, Pix]], false);
    let d = run(&s, "2.30.7", &[("NCCL_IB_HCA", "^mlx5_0")]);
    let v = d.pair(0, 0).unwrap();
    assert!(!v.used && !v.enabled());
    assert!(v.send.reasons[0].contains("NCCL_IB_HCA=^mlx5_0 from env excludes"));
    assert!(d.pair(0, 1).unwrap().enabled());
    let d = run(&s, "2.30.7", &[("NCCL_IB_HCA", "mlx5_1:2")]);
    assert!(
        !d.pair(0, 1).unwrap().used,
        "port 2 is not the active port 1"
    );
    let d = run(&s, "2.30.7", &[("NCCL_IB_DISABLE", "1")]);
    assert!(d.verdicts.iter().all(|v| !v.used && !v.enabled()));
    s.nics[1].ports = Some(vec![(1, false)]);
    let d = run(&s, "2.30.7", &[]);
    assert!(d.pair(0, 1).unwrap().send.reasons[0].contains("no ACTIVE port"));
}

#[test]
fn p2p_level_for_gpu_pairs() {
    // ncclTopoCheckP2p(): default PXB, NCCL_P2P_LEVEL / NCCL_P2P_DISABLE (v2.30.7-1
    // L287-362).
    let mut s = sys(&[&[Pix], &[Pix]], false);
    s.gpu_paths = vec![vec![Some(Phb); 2]; 2];
    assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(false));
    assert_eq!(
        run(&s, "2.30.7", &[("NCCL_P2P_LEVEL", "SYS")]).p2p[0].p2p,
        Some(true)
    );
    s.nvlink = vec![vec![Some(false), Some(true)], vec![Some(true), Some(false)]];
    assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(true));
    assert_eq!(
        run(&s, "2.30.7", &[("NCCL_P2P_DISABLE", "1")]).p2p[0].p2p,
        Some(false)
    );
    s.amd_two_gpus = true;
    s.nvlink = vec![vec![Some(false); 2]; 2];
    assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(true));
}

#[test]
fn p2p_default_follows_the_version_and_the_cpu() {
    use crate::model::CpuVendor::*;
    // Eight GPUs whose pair crosses the host bridge (PHB), no NVLink.
    let mut s = sys(&[&[Pix], &[Pix]], false);
    s.gpu_paths = vec![vec![Some(Phb); 2]; 2];
    let p2p = |s: &System, v: &str| run(s, v, &[]).p2p[0].clone();
    // 2.23+: PXB but on AMD with at most two GPUs (v2.23.4-1 paths.cc L277-282).
    s.cpu = Some(Amd);
    assert_eq!(p2p(&s, "2.23.4").p2p, Some(false));
    // 2.9-2.22: SYS but on Intel and ARM (v2.22.3-1 L281-300): P2P through the root complex
    // on AMD, for any number of GPUs.
    for v in ["2.22.3", "2.21.5", "2.18.5", "2.9.6"] {
        let d = p2p(&s, v);
        assert_eq!(d.p2p, Some(true), "{v} on AMD: {}", d.reason);
        assert!(d.reason.contains("AMD"), "{}", d.reason);
    }
    s.cpu = Some(Intel);
    assert_eq!(p2p(&s, "2.21.5").p2p, Some(false));
    s.cpu = Some(Arm);
    assert_eq!(p2p(&s, "2.21.5").p2p, Some(false));
    s.cpu = Some(Power);
    assert_eq!(p2p(&s, "2.21.5").p2p, Some(true));
    // 2.6-2.8: PHB on Intel CPUs other than Broadwell (v2.8.4-1 L268-288).
    s.cpu = Some(Intel);
    assert_eq!(p2p(&s, "2.8.4").p2p, Some(true));
    s.gpu_paths = vec![vec![Some(Sys); 2]; 2];
    assert_eq!(p2p(&s, "2.8.4").p2p, Some(false));
    // Not known: said so.
    s.cpu = None;
    s.gpu_paths = vec![vec![Some(Phb); 2]; 2];
    assert!(p2p(&s, "2.21.5").reason.contains("not known"));
}

proptest::proptest! {
    #[test]
    fn never_panics(paths in proptest::collection::vec(proptest::collection::vec(0usize..4, 0..4), 0..4),
                    minor in 4u32..32, nvl in proptest::bool::ANY) {
        let kinds = [Pix, Pxb, Phb, Sys];
        let n = paths.first().map(|r| r.len()).unwrap_or(0);
        let rows: Vec<Vec<PathKind>> = paths.iter().map(|r| (0..n).map(|i| kinds[*r.get(i).unwrap_or(&0)]).collect()).collect();
        let refs: Vec<&[PathKind]> = rows.iter().map(|r| r.as_slice()).collect();
        let s = sys(&refs, nvl);
        let _ = run(&s, &format!("2.{minor}.0"), &[("NCCL_IB_HCA", "^=mlx5_1:1")]);
    }
}

#[test]
fn the_c2c_part_of_the_threshold_is_said_only_where_a_gpu_could_use_it() {
    // 2.29+: the default threshold is P2C (PXB over PCIe, plus a NIC on the GPU's own
    // C2C-attached CPU); 2.26-2.28: PXB, with NCCL_NET_GDR_C2C letting that NIC through.
    let mut s = sys(&[&[Pix, Phb]], false);
    for (version, none_here) in [
        (
            "2.30.7",
            "P2C, which is PXB here: no GPU on this node is C2C-attached",
        ),
        (
            "2.27.3",
            "changes nothing here: no GPU on this node is C2C-attached",
        ),
    ] {
        let d = run(&s, version, &[]);
        assert_eq!(d.threshold, "PXB");
        assert!(
            d.threshold_source.contains(none_here),
            "{version}: {}",
            d.threshold_source
        );
        // Said once (the review of 2026-12-07: "NCCL 2.27's default (NCCL 2.27's default ...").
        assert_eq!(
            d.threshold_source.matches("'s default").count(),
            1,
            "{}",
            d.threshold_source
        );
        s.gpus[0].c2c = Some(true);
        let d = run(&s, version, &[]);
        assert_eq!(
            d.threshold_source.matches("'s default").count(),
            1,
            "{}",
            d.threshold_source
        );
        assert!(
            d.threshold_source.contains("GPU's own C2C-attached CPU"),
            "{}",
            d.threshold_source
        );
        s.gpus[0].c2c = None;
        let d = run(&s, version, &[]);
        assert!(
            d.threshold_source.contains("GPU's own C2C-attached CPU"),
            "{}",
            d.threshold_source
        );
        s.gpus[0].c2c = Some(false);
    }
    assert_eq!(c2c_here([]), None);
    assert_eq!(c2c_here([Some(false), None]), None);
    assert_eq!(c2c_here([None, Some(true)]), Some(true));
    assert_eq!(c2c_here([Some(false), Some(false)]), Some(false));
}
