//! The steps of NCCL's decision, in NCCL's order: the NICs it lists, the NVLink it may use,
//! P2C, PXN, then both directions of every pair ([`super::check`]), and the GPU pairs.

use super::check::{threshold, val, Check, Ctx};
use super::types::{Config, Decision, GpuP2p, System, Verdict};
use crate::nccl::env::NcclEnv;
use crate::nccl::version::{PathKind, Version};

/// NCCL's GDR decision for every GPU x NIC pair of `sys` under `cfg`.
pub fn decide(sys: &System, cfg: &Config) -> Decision {
    let v = cfg.rules.version;
    let env = &cfg.env;
    let ng = sys.gpus.len();
    let nn = sys.nics.len();
    let mut notes = env.notes.clone();
    // (1) The NICs NCCL lists: ACTIVE ports, NCCL_IB_HCA, NCCL_IB_DISABLE.
    let (nic_reason, nic_assume) = listed_nics(sys, env);
    let used: Vec<bool> = nic_reason.iter().map(Option::is_none).collect();
    // (2) NVLink that NCCL may use.
    let nvl = usable_nvlink(sys, env, v, &mut notes);
    let (level, level_name, level_source) = threshold(
        env,
        v,
        super::check::c2c_here(sys.gpus.iter().map(|g| g.c2c)),
    );
    let mut cx = Ctx {
        sys,
        v,
        env,
        path: (0..ng)
            .map(|g| (0..nn).map(|n| cell(&sys.paths, g, n)).collect())
            .collect(),
        via: vec![vec![None; nn]; ng],
        nvl,
        peer: Vec::new(),
        level,
        level_name: level_name.clone(),
        level_source: level_source.clone(),
    };
    cx.peer = (0..ng).map(|g| cx.nvlink_peer_of(g)).collect();
    let mut pairs = PairText {
        notes: vec![vec![Vec::new(); nn]; ng],
        undecided: vec![vec![Vec::new(); nn]; ng],
    };
    // (3) P2C.
    p2c(&mut cx, &used, &mut pairs, &mut notes);
    // The pairs' own paths, P2C counted, before PXN reroutes them.
    let own_paths = cx.path.clone();
    // (4) PXN.
    pxn(&mut cx, &used, &mut pairs, &mut notes);
    // (5) Both directions, per pair.
    let verdicts = verdicts(&cx, &used, &nic_reason, &nic_assume, &own_paths, &mut pairs);
    let p2p = gpu_pairs(sys, env, v);
    Decision {
        rules: cfg.rules.clone(),
        threshold: level_name,
        threshold_source: level_source,
        verdicts,
        p2p,
        notes,
    }
}

/// A cell of a GPU x NIC (or GPU x GPU) matrix of paths.
fn cell(m: &[Vec<Option<PathKind>>], a: usize, b: usize) -> Option<PathKind> {
    m.get(a).and_then(|r| r.get(b)).copied().flatten()
}

/// What the steps say about each pair before its verdict: notes, and why it is undecided.
struct PairText {
    notes: Vec<Vec<Vec<String>>>,
    undecided: Vec<Vec<Vec<String>>>,
}

/// (1) The NICs NCCL lists: ACTIVE ports, NCCL_IB_HCA, NCCL_IB_DISABLE. Per NIC, why NCCL
/// does not use it (`None`: it does), and what is assumed about it.
fn listed_nics(sys: &System, env: &NcclEnv) -> (Vec<Option<String>>, Vec<Vec<String>>) {
    let nn = sys.nics.len();
    let mut nic_reason: Vec<Option<String>> = vec![None; nn];
    let mut nic_assume: Vec<Vec<String>> = vec![Vec::new(); nn];
    for (i, nic) in sys.nics.iter().enumerate() {
        if env.ib_disable.value {
            nic_reason[i] = Some(format!(
                "{}: NCCL uses no RDMA device (it falls back to sockets), so no GDR",
                env.ib_disable.source
            ));
            continue;
        }
        match &nic.ports {
            None => nic_assume[i].push(format!("port state of {} unknown", nic.name)),
            Some(ports) => {
                let active: Vec<u32> = ports.iter().filter(|p| p.1).map(|p| p.0).collect();
                if active.is_empty() {
                    nic_reason[i] = Some(format!(
                        "{} has no ACTIVE port: NCCL does not use it",
                        nic.name
                    ));
                    continue;
                }
                if let Some(f) = &env.ib_hca {
                    if !active.iter().any(|p| f.value.allows(&nic.name, *p)) {
                        nic_reason[i] = Some(format!(
                            "{} is not used by NCCL: {} excludes its active port(s)",
                            nic.name, f.source
                        ));
                        continue;
                    }
                }
            }
        }
        if let (Some(f), None) = (&env.ib_hca, &nic.ports) {
            if !f.value.allows(&nic.name, 1) {
                nic_reason[i] = Some(format!(
                    "{} is not used by NCCL: {} excludes it",
                    nic.name, f.source
                ));
            }
        }
    }
    (nic_reason, nic_assume)
}

/// (2) NVLink that NCCL may use: NCCL_P2P_LEVEL below NVL diverts GPU pairs through the CPU
/// (ncclTopoComputePaths(), v2.30.7-1 L765-778), which also ends PXN and the read gate's
/// NVLink peer.
fn usable_nvlink(
    sys: &System,
    env: &NcclEnv,
    v: Version,
    notes: &mut Vec<String>,
) -> Vec<Vec<Option<bool>>> {
    let ng = sys.gpus.len();
    let p2p_nvl_ok = env
        .p2p_level
        .as_ref()
        .is_none_or(|l| val(v, l.value) >= val(v, PathKind::Nvl));
    if !p2p_nvl_ok {
        if let Some(l) = &env.p2p_level {
            notes.push(format!(
                "{}: NCCL sends GPU-to-GPU traffic through the CPU, so no GPU counts as an NVLink peer (no PXN, and the read gate sees no NVLink)",
                l.source
            ));
        }
    }
    (0..ng)
        .map(|a| {
            (0..ng)
                .map(|b| {
                    let x = sys.nvlink.get(a).and_then(|r| r.get(b)).copied().flatten();
                    if p2p_nvl_ok {
                        x
                    } else {
                        Some(false)
                    }
                })
                .collect()
        })
        .collect()
}

/// (3) P2C: a GPU's PHB NIC on its own C2C-attached CPU (v2.27.3-1 L670-680; from 2.29 only
/// the GPU's closest NICs, v2.29.7-1 L712-727).
fn p2c(cx: &mut Ctx<'_>, used: &[bool], pairs: &mut PairText, notes: &mut Vec<String>) {
    let (v, env) = (cx.v, cx.env);
    let (ng, nn) = (cx.sys.gpus.len(), cx.sys.nics.len());
    let mut c2c_unknown: Vec<usize> = Vec::new();
    // GDR for a NIC on the GPU's own C2C CPU is on (2.26 with NCCL_NET_GDR_C2C=1, 2.27+ by
    // default): an unknown C2C attachment leaves such a pair undecided, not off.
    let c2c_gdr = env.gdr_c2c.as_ref().is_some_and(|s| s.value);
    if v.has_p2c() || c2c_gdr {
        #[allow(clippy::needless_range_loop)]
        for g in 0..ng {
            let best = (0..nn)
                .filter(|n| used[*n])
                .filter_map(|n| cx.path[g][n])
                .min_by_key(|k| val(v, *k));
            let closest = !v.p2c_local_nets_only() || best == Some(PathKind::Phb);
            for n in (0..nn).filter(|n| used[*n]) {
                if cx.path[g][n] != Some(PathKind::Phb) {
                    continue;
                }
                match cx.c2c(g) {
                    Some(true) if v.has_p2c() && closest => {
                        cx.path[g][n] = Some(PathKind::P2c);
                        pairs.notes[g][n].push(format!(
                            "P2C: {} reaches its own CPU over NVLink-C2C ({}) and the NIC hangs off that CPU: NCCL counts the pair as P2C, not PHB",
                            cx.gpu_name(g),
                            cx.sys.gpus[g].c2c_source
                        ));
                    }
                    None => {
                        if !c2c_unknown.contains(&g) {
                            c2c_unknown.push(g);
                        }
                        if c2c_gdr && closest {
                            pairs.undecided[g][n].push(format!(
                                "cannot tell whether NCCL {v} uses GDR with {} through {}'s own CPU (NVLink-C2C, P2C): whether {} reaches its CPU over NVLink-C2C is unknown ({})",
                                cx.sys.nics[n].name,
                                cx.gpu_name(g),
                                cx.gpu_name(g),
                                cx.sys.gpus[g].c2c_source
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if !c2c_unknown.is_empty() {
        notes.push(format!(
            "whether {} reach their CPU over NVLink-C2C is unknown ({}): on a Grace system NCCL {v} counts a NIC on the GPU's own CPU as P2C and uses GDR with it",
            c2c_unknown
                .iter()
                .map(|g| cx.gpu_name(*g))
                .collect::<Vec<_>>()
                .join(", "),
            cx.sys.gpus[c2c_unknown[0]].c2c_source
        ));
    }
}

/// (4) PXN (v2.12+): send through an NVLink peer that is close to the NIC.
fn pxn(cx: &mut Ctx<'_>, used: &[bool], pairs: &mut PairText, notes: &mut Vec<String>) {
    let (v, env) = (cx.v, cx.env);
    let (ng, nn) = (cx.sys.gpus.len(), cx.sys.nics.len());
    let pxn_on = v.has_pxn() && !env.pxn_disable.value;
    if v.has_pxn() && env.pxn_disable.value {
        notes.push(format!(
            "{}: NCCL sends no GPU's traffic through an NVLink peer",
            env.pxn_disable.source
        ));
    }
    if pxn_on && env.p2p_pxn_level.user && env.p2p_pxn_level.value == 0 {
        notes.push(format!(
            "{}: point-to-point operations (send/recv) do not use PXN; collectives still do",
            env.p2p_pxn_level.source
        ));
    }
    if pxn_on {
        let pxn_c2c = env.pxn_c2c.as_ref().map(|s| s.value).unwrap_or(false);
        let peer_ok = |cx: &Ctx<'_>, p: usize, n: usize| -> bool {
            let Some(pp) = cx.path[p][n] else {
                return false;
            };
            if v.has_p2c() && pxn_c2c {
                if v.pxn_spares_p2c() {
                    val(v, pp) <= val(v, PathKind::P2c)
                } else {
                    val(v, pp) <= val(v, PathKind::Pxb) || pp == PathKind::P2c
                }
            } else {
                val(v, pp) <= val(v, PathKind::Pxb)
            }
        };
        let own_wants = |own: PathKind| -> bool {
            if v.pxn_spares_p2c() {
                val(v, own) > val(v, PathKind::Pxn)
            } else {
                val(v, own) > val(v, PathKind::Pxb)
            }
        };
        // Each GPU's closest used NIC (2.12-2.17 prefer a PXN peer whose own NIC it is),
        // computed once, not per candidate peer.
        let own_nic: Vec<Option<usize>> = (0..ng)
            .map(|p| {
                (0..nn)
                    .filter(|m| used[*m])
                    .filter_map(|m| cx.path[p][m].map(|k| (val(v, k), m)))
                    .min()
                    .map(|x| x.1)
            })
            .collect();
        for n in (0..nn).filter(|n| used[*n]) {
            // The NIC's local GPU: the closest GPU, first in PCI order (NCCL: by bandwidth,
            // then its channel-to-NIC assignment; ncclTopoGetLocalGpu(), src/graph/topo.cc
            // v2.30.7-1 L2110-2135).
            let local = (0..ng)
                .filter_map(|g| cx.path[g][n].map(|k| (val(v, k), g)))
                .min()
                .map(|x| x.1);
            // GPUs whose path to the NIC is unknown (rows cut from a pasted matrix): one of
            // them may be the NIC's local GPU (or, before 2.18, another PXN peer), unless a
            // known one is already as close as a GPU gets (PIX).
            let unseen: Vec<usize> = (0..ng).filter(|p| cx.path[*p][n].is_none()).collect();
            let local_certain = local
                .and_then(|p| cx.path[p][n])
                .is_some_and(|k| k == PathKind::Pix);
            for g in 0..ng {
                let Some(own) = cx.path[g][n] else { continue };
                if !own_wants(own) {
                    continue;
                }
                let candidates: Vec<usize> = if v.pxn_local_gpu_only() {
                    local.filter(|p| *p != g).into_iter().collect()
                } else {
                    (0..ng).filter(|p| *p != g).collect()
                };
                let mut chosen = None;
                let mut unknown_peer = None;
                let mut unknown_gdr: Option<(usize, Vec<String>)> = None;
                for p in candidates {
                    if !peer_ok(cx, p, n) {
                        continue;
                    }
                    if v.pxn_peer_needs_gdr() {
                        match cx.check(p, n, true) {
                            Check::On { .. } => {}
                            Check::Unknown(why) => {
                                // PXN would carry this pair if the peer had GDR: undecided.
                                if cx.nvl[p][g] != Some(false) && unknown_gdr.is_none() {
                                    unknown_gdr = Some((p, why));
                                }
                                continue;
                            }
                            Check::Off(_) => continue,
                        }
                    }
                    match cx.nvl[p][g] {
                        Some(true) => {
                            chosen = Some(p);
                            // 2.12-2.17 prefer a peer whose own NIC this is: its closest.
                            if v.pxn_local_gpu_only() || own_nic[p] == Some(n) {
                                break;
                            }
                        }
                        None => unknown_peer = unknown_peer.or(Some(p)),
                        Some(false) => {}
                    }
                }
                let unseen_peers: Vec<usize> = unseen
                    .iter()
                    .copied()
                    .filter(|p| *p != g && cx.nvl[*p][g] != Some(false))
                    .collect();
                if chosen.is_none()
                    && !unseen_peers.is_empty()
                    && (!v.pxn_local_gpu_only() || !local_certain)
                {
                    pairs.undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through another GPU (PXN): the paths of {} to {} are not known, and {}",
                        unseen_peers
                            .iter()
                            .map(|p| cx.gpu_name(*p))
                            .collect::<Vec<_>>()
                            .join(", "),
                        cx.sys.nics[n].name,
                        if v.pxn_local_gpu_only() {
                            "the NIC's local GPU may be among them"
                        } else {
                            "a PXN peer may be among them"
                        }
                    ));
                }
                match (chosen, unknown_peer) {
                    (Some(p), _) => {
                        cx.via[g][n] = Some(p);
                        cx.path[g][n] = Some(PathKind::Pxn);
                        pairs.notes[g][n].push(format!(
                            "PXN: NCCL sends through {} (NVLink peer, {} to {}), whose proxy posts to the NIC; own path {own}",
                            cx.gpu_name(p),
                            cx.path[p][n].map(|k| k.as_str()).unwrap_or("?"),
                            cx.sys.nics[n].name
                        ));
                    }
                    (None, Some(p)) => pairs.undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through {} (PXN): NVLink between {} and {} is unknown ({})",
                        cx.gpu_name(p),
                        cx.gpu_name(g),
                        cx.gpu_name(p),
                        cx.sys.nvlink_source
                    )),
                    _ => {}
                }
                // From 2.30.3 the peer must have GDR itself (v2.30.7-1 L826-830).
                if let (None, Some((p, why))) = (chosen, unknown_gdr) {
                    pairs.undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through {} (PXN): NCCL {v} takes a PXN peer only with GDR to the NIC, and that is unknown: {}",
                        cx.gpu_name(p),
                        why.join("; ")
                    ));
                }
            }
        }
    }
}

/// (5) Both directions of every pair: `ncclTopoCheckGdr()` with `read=1` for sends and
/// `read=0` for receives.
fn verdicts(
    cx: &Ctx<'_>,
    used: &[bool],
    nic_reason: &[Option<String>],
    nic_assume: &[Vec<String>],
    own_paths: &[Vec<Option<PathKind>>],
    pairs: &mut PairText,
) -> Vec<Verdict> {
    let (sys, env) = (cx.sys, cx.env);
    let (ng, nn) = (sys.gpus.len(), sys.nics.len());
    let mut verdicts = Vec::new();
    #[allow(clippy::needless_range_loop)]
    for g in 0..ng {
        for n in 0..nn {
            let mut vd = Verdict {
                gpu: g,
                nic: n,
                pcie: cell(&sys.paths, g, n),
                path: cx.path[g][n],
                via: cx.via[g][n],
                within: own_paths[g][n].map(|k| cx.distance(g, n, g, k).is_ok()),
                used: used[n],
                notes: std::mem::take(&mut pairs.notes[g][n]),
                undecided: std::mem::take(&mut pairs.undecided[g][n]),
                assumptions: nic_assume[n].clone(),
                ..Default::default()
            };
            if let Some(s) = cx.support(g, n) {
                vd.assumptions.extend(s.assumptions.iter().cloned());
            }
            if let Some(r) = &nic_reason[n] {
                vd.send.reasons.push(r.clone());
                vd.receive.reasons.push(r.clone());
                verdicts.push(vd);
                continue;
            }
            for (read, dir) in [(true, &mut vd.send), (false, &mut vd.receive)] {
                match cx.check(g, n, read) {
                    Check::On { pci_mode } => {
                        dir.gdr = true;
                        dir.pci_mode = pci_mode;
                    }
                    Check::Off(r) => dir.reasons.push(r),
                    Check::Unknown(rs) => {
                        dir.undecided = true;
                        for r in rs {
                            dir.reasons.push(r.clone());
                            if !vd.undecided.contains(&r) {
                                vd.undecided.push(r);
                            }
                        }
                    }
                }
            }
            if vd.enabled() {
                vd.mechanism = cx.mechanism(g, n).ok();
                // Pair-level undecided PXN no longer matters when GDR is on anyway.
                if vd.send.gdr && vd.receive.gdr {
                    vd.undecided.clear();
                }
            }
            if vd.via.is_some() && vd.receive.gdr {
                vd.notes.push(format!(
                    "receives do not use PXN (net.cc recvSetup): the NIC writes into this GPU's memory over its own {} path, with GDR because NCCL judges the pair by the peer's distance",
                    vd.pcie.map(|k| k.as_str()).unwrap_or("?")
                ));
            }
            if vd.send.gdr && env.gdr_read.user && env.gdr_read.value > 0 {
                vd.notes.push(format!(
                    "{}: sends use GDR without the read gate",
                    env.gdr_read.source
                ));
            }
            verdicts.push(vd);
        }
    }
    verdicts
}

/// NCCL_P2P_LEVEL's default and where it comes from (`src/graph/paths.cc`
/// `ncclTopoCheckP2p`): from 2.23 PXB, SYS on AMD x86 CPUs with at most two GPUs (v2.23.4-1
/// L277-282); 2.9-2.22 SYS, PXB on Intel and ARM CPUs (and Zhaoxin, which gdrdoctor counts as
/// another x86 vendor) (v2.22.3-1 L281-300); 2.6-2.8 SYS, PXB on ARM and Broadwell, PHB on
/// other Intel CPUs (v2.8.4-1 L268-288). `None` for 2.6-2.22 when the CPU is not known.
fn p2p_default(sys: &System, v: Version) -> Option<(PathKind, String)> {
    use crate::model::CpuVendor;
    let vv = format!("NCCL {}.{}'s default", v.major, v.minor);
    if v >= Version::new(2, 23, 0) {
        return Some(if sys.amd_two_gpus {
            (
                PathKind::Sys,
                format!("{vv} on AMD CPUs with at most two GPUs"),
            )
        } else {
            (PathKind::Pxb, vv)
        });
    }
    let cpu = sys.cpu.as_ref()?;
    Some(match cpu {
        CpuVendor::Arm => (PathKind::Pxb, format!("{vv} on ARM CPUs")),
        CpuVendor::Intel if v >= Version::new(2, 9, 0) => {
            (PathKind::Pxb, format!("{vv} on Intel CPUs"))
        }
        CpuVendor::Intel => (
            PathKind::Phb,
            format!("{vv} on Intel CPUs other than Broadwell (PXB there)"),
        ),
        CpuVendor::Amd => (
            PathKind::Sys,
            format!("{vv} on AMD CPUs (2.23 lowered it to PXB for more than two GPUs)"),
        ),
        CpuVendor::Power | CpuVendor::Other => (
            PathKind::Sys,
            format!("{vv} on CPUs other than Intel and ARM"),
        ),
    })
}

/// GPU pairs: NCCL_P2P_LEVEL (its default by version and CPU, [`p2p_default`]).
fn gpu_pairs(sys: &System, env: &NcclEnv, v: Version) -> Vec<GpuP2p> {
    let ng = sys.gpus.len();
    let (p2p_lvl, p2p_src) = match &env.p2p_level {
        Some(s) => (s.value, s.source.clone()),
        None => match p2p_default(sys, v) {
            Some(d) => d,
            // Not known: PXB, the lower of the defaults, said as such.
            None => (
                PathKind::Pxb,
                format!(
                    "NCCL {}.{}'s default on Intel and ARM CPUs (SYS on others; this CPU is not known)",
                    v.major, v.minor
                ),
            ),
        },
    };
    let mut p2p = Vec::new();
    if !v.legacy() {
        for a in 0..ng {
            for b in (a + 1)..ng {
                let nv = sys.nvlink.get(a).and_then(|r| r.get(b)).copied().flatten();
                let path = match nv {
                    Some(true) => Some(PathKind::Nvl),
                    _ => cell(&sys.gpu_paths, a, b),
                };
                let (ok, reason) = match (path, nv) {
                    (Some(k), Some(_)) | (Some(k @ PathKind::Nvl), None) => {
                        let ok = val(v, k) <= val(v, p2p_lvl);
                        (
                            Some(ok),
                            format!(
                                "{k} {} NCCL_P2P_LEVEL {} ({p2p_src})",
                                if ok { "within" } else { "beyond" },
                                p2p_lvl
                            ),
                        )
                    }
                    (Some(k), None) if val(v, k) > val(v, p2p_lvl) => (
                        Some(false),
                        format!("{k} beyond NCCL_P2P_LEVEL {p2p_lvl} ({p2p_src}), unless NVLink connects them (not known)"),
                    ),
                    _ => (
                        None,
                        format!("path unknown ({})", sys.nvlink_source),
                    ),
                };
                p2p.push(GpuP2p {
                    a,
                    b,
                    path,
                    p2p: ok,
                    reason,
                });
            }
        }
    }
    p2p
}
