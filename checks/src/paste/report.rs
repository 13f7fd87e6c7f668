//! `gdrdoctor diagnose`: pasted text in, the same checks and GDR verdicts out, as the versioned
//! `gdrdoctor.diagnose/v1` report (docs/report-format.md).
//!
//! The registry's checks run on the [`Node`](crate::model::Node) built from the paste. A check
//! that cannot be evaluated because its input is not in the paste is `skip` with the reason and
//! the command that shows it ("peer memory: not in the pasted text; run `lsmod | grep
//! peermem`"), never `pass`; when the input is in the paste but damaged it stays `error`. The
//! topology checks (`topo.nic-distance`, `topo.rails`, `gdr.gpu`) are answered from the pasted
//! matrix and NCCL log, through [`super::verdict::decide`].

use super::nccl::{Direction, LoggedGdr, NcclLog};
use super::node::{self, Provenance};
use super::verdict::{self, Context, Gdr, Logged, PastePair};
use super::{findings, BlockStatus, Input, Kind, Paste};
use crate::checks::Needs;
use crate::report::{self, Finding, Status};
use crate::RunOptions;
use serde::Serialize;
use std::collections::BTreeMap;

pub const SCHEMA: &str = "gdrdoctor.diagnose/v1";

/// The NCCL log as diagnose reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclSummary {
    pub block: String,
    pub versions: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    pub networks: Vec<String>,
    pub net_devices: Vec<super::nccl::NetDevice>,
    pub nic_gdr: Vec<super::nccl::NicGdr>,
    pub gpu_gdr: Vec<super::nccl::GpuGdr>,
    /// NCCL's decision per local GPU, NIC and direction, from its channel lines.
    pub logged_gdr: Vec<LoggedGdr>,
    /// How many connection lines used each transport (`NET/IB/GDRDMA`, `NET/IB`, `P2P/CUMEM`, ..).
    pub transports: BTreeMap<String, usize>,
}

/// A matrix with the block it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatrixView {
    pub block: String,
    #[serde(flatten)]
    pub matrix: super::topo::Matrix,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputInfo {
    pub name: String,
    pub lines: usize,
    pub bytes: usize,
}

/// The `gdrdoctor.diagnose/v1` report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiagnoseReport {
    pub schema: String,
    pub tool: report::Tool,
    pub host: report::Host,
    pub summary: report::Summary,
    pub inputs: Vec<InputInfo>,
    pub blocks: Vec<super::Block>,
    pub findings: Vec<Finding>,
    /// One verdict per GPU x NIC pair of each matrix (or per logged pair without a matrix).
    pub gdr: Vec<PastePair>,
    /// The GDR distance threshold the verdicts used, and where it came from.
    pub gdr_level: String,
    pub gdr_level_source: String,
    /// Whose rules the verdicts follow: `NCCL 2.19.3 rules (`NCCL version 2.19.3+cuda12.3` in
    /// b2 (...))`, `--nccl-version`, or the newest rules when the paste shows no version.
    pub nccl_rules: String,
    /// Node-wide remarks of the rule: the environment's effects (PXN disabled, ignored values),
    /// unknown NVLink-C2C.
    pub gdr_notes: Vec<String>,
    pub matrices: Vec<MatrixView>,
    pub nccl: Option<NcclSummary>,
    pub inventory: report::Inventory,
}

/// The words of a fact two pasted copies disagree on (`node::rdma_devices`).
pub const TWICE: &str = "(two nodes' outputs?)";
/// The words of a fact the pasted tool itself failed to read (`ibpanic: ... failed`).
pub const UNREADABLE: &str = "the tool could not read";

/// Turn a registry check's finding into what a paste can say. `needs`: what the check reads,
/// as its row says. `rdma_unplaced`: the paste shows RDMA devices but not their PCI addresses,
/// so checks that pair NICs with PCI functions cannot be answered (their "no rdma nic on the
/// pci bus" would be a claim the paste does not make).
fn adapt(f: Finding, needs: &Needs, p: &Paste, prov: &Provenance, rdma_unplaced: bool) -> Finding {
    let mut f = f;
    let pairs_nics = [
        "pcie.ats",
        "pcie.mrrs",
        "pcie.acs-redirect",
        "topo.nic-numa",
    ];
    if rdma_unplaced
        && pairs_nics.contains(&f.id.as_str())
        && f.status != Status::Fail
        && f.status != Status::Warn
    {
        let was = f.message.clone();
        f.status = Status::Skip;
        f.message = "the pci addresses of the rdma devices: not in the pasted text; run `ls -l /sys/class/infiniband/`".into();
        f.evidence = vec![report::Evidence {
            source: "check".into(),
            observed: was,
            expected: None,
        }];
        f.remediation = None;
        return f;
    }
    for e in &mut f.evidence {
        if let Some((path, lab)) = prov
            .iter()
            .filter(|(path, _)| e.source.starts_with(path.as_str()))
            .max_by_key(|(path, _)| path.len())
        {
            e.source = format!("{lab} (as {})", e.source.replacen(path.as_str(), path, 1));
        }
    }
    if !matches!(f.status, Status::Error | Status::Skip) {
        return f;
    }
    // Two copies of a device that disagree: an error the paste itself shows, not a missing
    // paste (the node's own node.rs says so in the fact).
    let shown = |t: &str| t.contains(TWICE) || t.contains(UNREADABLE);
    if f.status == Status::Error
        && (shown(&f.message) || f.evidence.iter().any(|e| shown(&e.observed)))
    {
        return f;
    }
    let (kinds, what, cmd) = (needs.kinds, needs.what, needs.command);
    let blocks: Vec<&super::Block> = p
        .blocks
        .iter()
        .filter(|b| kinds.contains(&b.kind))
        .collect();
    // Damaged input stays an error; an input that is there and whole keeps the check's answer.
    if blocks
        .iter()
        .any(|b| matches!(b.status, BlockStatus::Incomplete | BlockStatus::Refused))
    {
        return f;
    }
    if !blocks.is_empty() && f.status == Status::Skip {
        return f;
    }
    let was = f.message.clone();
    f.status = Status::Skip;
    let on_node = if cmd.starts_with("gdrdoctor") {
        " on the node"
    } else {
        ""
    };
    f.message = if blocks.is_empty() {
        format!("{what}: not in the pasted text; run `{cmd}`{on_node}")
    } else {
        format!(
            "{what}: the pasted {} does not show it; run `{cmd}`{on_node}",
            blocks
                .iter()
                .map(|b| b.kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    f.evidence.insert(
        0,
        report::Evidence {
            source: "check".into(),
            observed: was,
            expected: None,
        },
    );
    f.remediation = None;
    f
}

/// NCCL bus id (`1c000`) -> PCI address.
pub fn bus_id_bdf(b: &str) -> Option<String> {
    let v = u64::from_str_radix(b.trim(), 16).ok()?;
    let s = format!("{v:09x}");
    if s.len() != 9 {
        return None;
    }
    let bdf = format!("{}:{}:{}.{}", &s[0..4], &s[4..6], &s[6..8], &s[8..9]);
    crate::parse::is_bdf(&bdf).then_some(bdf)
}

/// The matrix label (`GPU3`) of a GPU NCCL logged, by nvmlDev (nvidia-smi numbers GPUs as NVML
/// does) or by PCI address against the GPUs `nvidia-smi -q` / `lspci` list in bus order.
fn gpu_label(l: &LoggedGdr, log: &NcclLog, p: &Paste) -> Option<String> {
    let v = log.version();
    let rank_nvml = log
        .ranks
        .iter()
        .find(|r| r.rank == l.rank && r.origin.host == l.host)
        .and_then(|r| r.nvml_dev);
    let dev = l.gpu.as_deref()?;
    // The bracket of a channel line is the bus id up to 2.18.1 and nvmlDev from 2.18.3
    // (src/transport/net.cc v2.18.1-1 / v2.18.3-1 `myInfo->busId` / `myInfo->nvmlDev`); without
    // a version, a one- or two-digit number is an nvmlDev (bus ids print as `1c000`).
    let nvml_bracket = match v {
        Some(v) => v >= super::nccl::Version::new(2, 18, 3),
        None => dev.len() <= 2 && dev.bytes().all(|b| b.is_ascii_digit()),
    };
    let nvml = if nvml_bracket {
        dev.parse::<u32>().ok()
    } else {
        None
    };
    if let Some(n) = nvml.or(rank_nvml) {
        return Some(format!("GPU{n}"));
    }
    let bdf = bus_id_bdf(dev)?;
    let mut gpus: Vec<String> = p
        .smiq
        .iter()
        .flat_map(|(_, q)| q.gpus.iter().map(|g| g.bdf.clone()))
        .collect();
    if gpus.is_empty() {
        gpus = p
            .lspci
            .iter()
            .filter(|(_, d)| {
                d.vendor_id == Some(0x10de) && d.class.is_some_and(|c| c >> 16 == 0x03)
            })
            .map(|(_, d)| d.bdf.clone())
            .collect();
    }
    gpus.sort();
    gpus.dedup();
    gpus.iter()
        .position(|g| *g == bdf)
        .map(|i| format!("GPU{i}"))
}

fn logged_for(gpu: &str, nic: &str, entries: &[(String, &LoggedGdr)]) -> Option<Logged> {
    let mine: Vec<&&LoggedGdr> = entries
        .iter()
        .filter(|(g, l)| g == gpu && l.nic.as_deref() == Some(nic))
        .map(|(_, l)| l)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let dir = |d: Option<Direction>| -> Option<bool> {
        let v: Vec<bool> = mine
            .iter()
            .filter(|l| l.direction == d)
            .map(|l| l.gdr)
            .collect();
        if v.is_empty() {
            None
        } else {
            Some(v.iter().any(|x| *x))
        }
    };
    Some(Logged {
        send: dir(Some(Direction::Send)),
        receive: dir(Some(Direction::Receive)),
        undirected: dir(None),
        proxy: mine.iter().find_map(|l| l.proxy),
        line: mine.iter().map(|l| l.line).min().unwrap_or(0),
    })
}

/// Every pair's verdict, through [`verdict::decide`]: one decision per pasted matrix (a node),
/// or, without a matrix, one over the GPU x NIC pairs NCCL logged. The log is matched with the
/// first matrix's node. Also the first decision (for its threshold, rules and notes).
fn pairs(
    p: &Paste,
    cx: &Context,
    log: Option<&NcclLog>,
) -> (Vec<PastePair>, Option<crate::nccl::rule::Decision>) {
    let entries: Vec<(String, LoggedGdr)> = match log {
        Some(l) => l
            .logged_gdr()
            .into_iter()
            .filter_map(|e| gpu_label(&e, l, p).map(|g| (g, e)))
            .collect(),
        None => Vec::new(),
    };
    let refs: Vec<(String, &LoggedGdr)> = entries.iter().map(|(g, e)| (g.clone(), e)).collect();
    let mut out = Vec::new();
    let mut first = None;
    for (bi, m) in &p.matrices {
        let block = p.blocks.get(*bi).map(|b| b.id.clone()).unwrap_or_default();
        let sys = verdict::system(cx, p, *bi, m);
        let (d, mut v) = verdict::decide(cx, &block, &sys);
        if first.is_none() {
            for pair in &mut v {
                pair.logged = logged_for(&pair.gpu, &pair.nic, &refs);
            }
            first = Some(d);
        }
        out.extend(v);
    }
    if p.matrices.is_empty() {
        // No matrix: the pairs NCCL logged, their paths unknown.
        let block = p
            .nccl
            .first()
            .and_then(|(i, _)| p.blocks.get(*i))
            .map(|b| b.id.clone())
            .unwrap_or_default();
        let mut gpus: Vec<String> = Vec::new();
        let mut nics: Vec<String> = Vec::new();
        let mut seen: Vec<(String, String)> = Vec::new();
        for (g, e) in &refs {
            let Some(nic) = e.nic.clone() else { continue };
            if !gpus.contains(g) {
                gpus.push(g.clone());
            }
            if !nics.contains(&nic) {
                nics.push(nic.clone());
            }
            if !seen.contains(&(g.clone(), nic.clone())) {
                seen.push((g.clone(), nic));
            }
        }
        if !seen.is_empty() {
            let sys = verdict::system_of_pairs(cx, &gpus, &nics);
            let (d, v) = verdict::decide(cx, &block, &sys);
            for mut pair in v {
                if !seen.contains(&(pair.gpu.clone(), pair.nic.clone())) {
                    continue;
                }
                pair.logged = logged_for(&pair.gpu, &pair.nic, &refs);
                out.push(pair);
            }
            first = Some(d);
        }
    }
    (out, first)
}

/// `route` of a pair for messages: `PIX`, `NODE to it, sends through GPU1 via PXN`.
fn route(x: &PastePair) -> String {
    match (&x.via, x.nccl_path.as_deref()) {
        (Some(v), _) => format!("{} to it, sends through {v} via PXN", x.nvidia_smi),
        (None, Some(n)) => format!("{} counted as {n}", x.nvidia_smi),
        _ => x.nvidia_smi.clone(),
    }
}

/// What NCCL did for a pair when the log says, else what the rule predicts: (send, receive).
fn effective(x: &PastePair) -> (Option<bool>, Option<bool>) {
    match &x.logged {
        Some(l) if l.any().is_some() => match (l.send, l.receive, l.undirected) {
            (None, None, u) => (u, u),
            (s, r, _) => (s, r),
        },
        _ if x.gdr == Gdr::On => (x.send, x.receive),
        _ => (None, None),
    }
}

/// `topo.nic-distance`, `topo.rails` and `gdr.gpu` from the matrices and the log, on the
/// verdicts of [`verdict::decide`].
fn topo_findings(p: &Paste, pairs: &[PastePair], cx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    let blocks: Vec<String> = {
        let mut b: Vec<String> = pairs.iter().map(|x| x.block.clone()).collect();
        b.dedup();
        b
    };
    let many = blocks.len() > 1;
    let threshold = format!("{} ({})", cx.level.name, cx.level.source);
    for blk in &blocks {
        let mine: Vec<&PastePair> = pairs.iter().filter(|x| &x.block == blk).collect();
        let mut gpus: Vec<&str> = mine.iter().map(|x| x.gpu.as_str()).collect();
        gpus.dedup();
        let lab = p
            .blocks
            .iter()
            .find(|b| &b.id == blk)
            .map(|b| b.label())
            .unwrap_or_else(|| blk.clone());
        let subj = |g: &str| {
            if many {
                format!("{blk}:{g}")
            } else {
                g.to_string()
            }
        };
        let from_matrix = p
            .blocks
            .iter()
            .any(|b| &b.id == blk && b.kind == Kind::TopoMatrix);
        let mut close: BTreeMap<&str, Option<Vec<&str>>> = BTreeMap::new();
        for g in &gpus {
            let row: Vec<&PastePair> = mine.iter().copied().filter(|x| x.gpu == *g).collect();
            let listing = row
                .iter()
                .map(|x| format!("{} {}", x.nic, x.nvidia_smi))
                .collect::<Vec<_>>()
                .join(", ");
            let best = row
                .iter()
                .filter(|x| x.path != "?")
                .min_by_key(|x| {
                    crate::nccl::PathKind::from_name(&x.path)
                        .and_then(|k| crate::nccl::version::NEWEST.value(k))
                        .unwrap_or(u8::MAX)
                })
                .copied();
            if from_matrix {
                let known: Vec<&&PastePair> =
                    row.iter().filter(|x| x.by_distance.is_some()).collect();
                let near: Vec<&str> = row
                    .iter()
                    .filter(|x| x.by_distance == Some(true))
                    .map(|x| x.nic.as_str())
                    .collect();
                let pxn = row
                    .iter()
                    .find(|x| x.via.is_some() && effective(x).0 == Some(true));
                let f = if !near.is_empty() {
                    close.insert(g, Some(near.clone()));
                    Finding::new(
                        "topo.nic-distance",
                        Status::Pass,
                        subj(g),
                        format!(
                            "nics within {} (nccl's gdr distance): {}",
                            cx.level.name,
                            near.join(" ")
                        ),
                    )
                    .evidence(lab.clone(), listing.clone())
                } else if known.len() < row.len() {
                    close.insert(g, None);
                    Finding::new(
                        "topo.nic-distance",
                        Status::Error,
                        subj(g),
                        "the matrix row is incomplete: no verdict on the nic distance",
                    )
                    .evidence(lab.clone(), listing.clone())
                    .fix(format!(
                        "paste `nvidia-smi topo -m` again in a code block; {g} is cut or garbled"
                    ))
                } else if let Some(x) = pxn {
                    close.insert(g, Some(Vec::new()));
                    Finding::new("topo.nic-distance", Status::Warn, subj(g), format!(
                        "no nic within {} of this gpu: the nearest, {}, is {}; nccl sends its traffic through {} over nvlink (pxn) and uses gdr there ({})",
                        cx.level.name,
                        best.map(|b| b.nic.as_str()).unwrap_or("?"),
                        best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?"),
                        x.via.as_deref().unwrap_or("?"),
                        x.nic
                    ))
                    .expected(lab.clone(), listing.clone(), format!("a nic within {threshold}"))
                    .fix("PXN keeps GDR but adds an NVLink hop and shares the peer's NIC; for a NIC of its own move one under this GPU's PCIe switch")
                } else if let Some(why) = row
                    .iter()
                    .find_map(|x| x.unknown.iter().find(|u| u.contains("(PXN)")).cloned())
                {
                    // Whether a peer GPU carries it over NVLink is undecided: the GDR table
                    // says unknown, and so does this.
                    close.insert(g, Some(Vec::new()));
                    Finding::new("topo.nic-distance", Status::Warn, subj(g), format!(
                        "no nic within {} of this gpu: the nearest, {}, is {}; whether nccl reaches a nic over nvlink through a peer gpu (pxn) instead is undecided: {why}",
                        cx.level.name,
                        best.map(|b| b.nic.as_str()).unwrap_or("?"),
                        best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?")
                    ))
                    .expected(lab.clone(), listing.clone(), format!("a nic at PIX or PXB ({threshold})"))
                    .fix("paste what the verdict lacks (the commands `gdrdoctor diagnose` lists below) to decide PXN; for GDR without it, move a NIC under the same PCIe switch as this GPU")
                } else {
                    close.insert(g, Some(Vec::new()));
                    Finding::new("topo.nic-distance", Status::Warn, subj(g), format!(
                        "no nic within {} of this gpu: the nearest, {}, is {}; nccl turns gdr off for it by default and stages through host memory",
                        cx.level.name,
                        best.map(|b| b.nic.as_str()).unwrap_or("?"),
                        best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?")
                    ))
                    .expected(lab.clone(), listing.clone(), format!("a nic at PIX or PXB ({threshold})"))
                    .fix("move a NIC under the same PCIe switch as this GPU; or accept the host-memory path (`NCCL_NET_GDR_LEVEL=PHB`/`SYS` forces GDR through the CPU, often slower)")
                };
                out.push(f);
            }
            // gdr.gpu: what NCCL did when the log says, else the rule's prediction.
            let both: Vec<&PastePair> = row
                .iter()
                .filter(|x| effective(x) == (Some(true), Some(true)))
                .copied()
                .collect();
            let partial: Vec<&PastePair> = row
                .iter()
                .filter(|x| {
                    let e = effective(x);
                    (e.0 == Some(true) || e.1 == Some(true)) && e != (Some(true), Some(true))
                })
                .copied()
                .collect();
            let logged_any = row.iter().any(|x| x.logged.is_some());
            let how = |xs: &[&PastePair]| {
                if xs.iter().any(|x| x.logged.is_some()) {
                    "nccl logged gdrdma"
                } else {
                    "predicted"
                }
            };
            let f = if let Some(first) = both.first() {
                let mut f = Finding::new(
                    "gdr.gpu",
                    Status::Pass,
                    subj(g),
                    format!(
                        "gdr on with {} ({}; {})",
                        both.iter()
                            .map(|x| x.nic.as_str())
                            .collect::<Vec<_>>()
                            .join(" "),
                        how(&both),
                        route(first)
                    ),
                )
                .evidence(lab.clone(), listing.clone());
                for n in &first.notes {
                    f = f.evidence("nccl rule", n.clone());
                }
                f
            } else if let Some(first) = partial.first() {
                let (s, _) = effective(first);
                let why = if s == Some(false) {
                    first
                        .reasons
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "nccl logged no gdrdma for sends".into())
                } else {
                    "one direction is off".into()
                };
                Finding::new(
                    "gdr.gpu",
                    Status::Warn,
                    subj(g),
                    format!(
                        "gdr for {} only with {} ({}; {}): {why}",
                        if s == Some(true) { "sends" } else { "receives" },
                        partial
                            .iter()
                            .map(|x| x.nic.as_str())
                            .collect::<Vec<_>>()
                            .join(" "),
                        how(&partial),
                        route(first)
                    ),
                )
                .evidence(lab.clone(), listing.clone())
                .fix("to have NCCL use GDR for sends too, run the job with NCCL_NET_GDR_READ=1 (measure: NCCL keeps sends off GDR on such GPUs because host-staged sends were faster there)")
            } else if logged_any || row.iter().all(|x| x.gdr == Gdr::Off) {
                let why = best
                    .map(|b| {
                        if b.reasons.is_empty() {
                            if b.logged.is_some() {
                                "nccl logged no gdrdma".to_string()
                            } else {
                                b.unknown.join("; ")
                            }
                        } else {
                            b.reasons.join("; ")
                        }
                    })
                    .unwrap_or_default();
                Finding::new(
                    "gdr.gpu",
                    Status::Fail,
                    subj(g),
                    format!(
                        "gdr off for every nic; nearest {} ({}): {why}",
                        best.map(|b| b.nic.as_str()).unwrap_or("?"),
                        best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?")
                    ),
                )
                .evidence(lab.clone(), listing.clone())
                .fix("fix the first reason above; `gdrdoctor explain gdr.gpu` gives NCCL's decision chain")
            } else if row.iter().any(|x| x.by_distance.is_none()) && from_matrix {
                Finding::new(
                    "gdr.gpu",
                    Status::Error,
                    subj(g),
                    "cannot decide gdr: the gpu's matrix row is incomplete",
                )
                .evidence(lab.clone(), listing.clone())
            } else {
                let open: Vec<&PastePair> = row
                    .iter()
                    .copied()
                    .filter(|x| x.gdr == Gdr::Unknown)
                    .collect();
                let mut unk: Vec<String> = open.iter().flat_map(|x| x.unknown.clone()).collect();
                unk.sort();
                unk.dedup();
                let mut f = Finding::new(
                    "gdr.gpu",
                    Status::Skip,
                    subj(g),
                    format!(
                        "nccl's rule allows gdr with {} if what the paste does not show is in place; whether nccl uses it is not in the pasted text",
                        open.iter()
                            .map(|x| x.nic.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                )
                .evidence(lab.clone(), listing.clone());
                for u in unk {
                    f = f.evidence("not in the paste", u);
                }
                f
            };
            out.push(f);
        }
        if from_matrix && gpus.len() >= 2 {
            let known: Vec<(&&str, &Vec<&str>)> = close
                .iter()
                .filter_map(|(g, v)| v.as_ref().map(|v| (g, v)))
                .collect();
            if known.len() < gpus.len() {
                out.push(
                    Finding::new(
                        "topo.rails",
                        Status::Error,
                        if many { blk.clone() } else { "node".into() },
                        "some gpu rows are incomplete: no verdict on the rails",
                    )
                    .evidence(
                        lab.clone(),
                        format!("{} of {} gpu rows readable", known.len(), gpus.len()),
                    ),
                );
                continue;
            }
            let counts: Vec<usize> = known.iter().map(|(_, v)| v.len()).collect();
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            let listing = known
                .iter()
                .map(|(g, v)| {
                    format!(
                        "{g}: {}",
                        if v.is_empty() {
                            "none".into()
                        } else {
                            v.join(" ")
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let subject = if many { blk.clone() } else { "node".into() };
            let f = if max == 0 {
                Finding::new(
                    "topo.rails",
                    Status::Skip,
                    subject,
                    format!(
                        "no gpu has a nic within {}: see topo.nic-distance",
                        cx.level.name
                    ),
                )
                .evidence(lab.clone(), listing)
            } else if min == 0 {
                let none: Vec<&str> = known
                    .iter()
                    .filter(|(_, v)| v.is_empty())
                    .map(|(g, _)| **g)
                    .collect();
                Finding::new("topo.rails", Status::Warn, subject, format!("asymmetric rails: {} have no close nic while others have up to {max}", none.join(", ")))
                    .expected(lab.clone(), listing, "the same number of close nics for every gpu")
                    .fix("rebalance NICs across the PCIe switches so every GPU has one under its switch (the HGX rail layout); until then NCCL sends the NIC-less GPUs' traffic through host memory or a neighbour (PXN)")
            } else if min != max {
                Finding::new(
                    "topo.rails",
                    Status::Warn,
                    subject,
                    format!("uneven rails: gpus have between {min} and {max} close nics"),
                )
                .expected(
                    lab.clone(),
                    listing,
                    "the same number of close nics for every gpu",
                )
                .fix("rebalance NICs across the PCIe switches")
            } else {
                Finding::new(
                    "topo.rails",
                    Status::Pass,
                    subject,
                    format!("every gpu has {min} close nic(s)"),
                )
                .evidence(lab.clone(), listing)
            };
            out.push(f);
        }
    }
    out
}

fn nccl_summary(p: &Paste, log: &NcclLog) -> NcclSummary {
    let mut transports = BTreeMap::new();
    for c in &log.connections {
        let k = match &c.transport {
            super::nccl::Transport::Net { net, gdr, .. } => {
                format!("NET/{net}{}", if *gdr { "/GDRDMA" } else { "" })
            }
            super::nccl::Transport::P2p { mode, read } => {
                format!("P2P/{mode}{}", if *read { "/read" } else { "" })
            }
            super::nccl::Transport::Shm { mode } => format!("SHM/{mode}"),
            super::nccl::Transport::Other { text } => text.clone(),
        };
        *transports.entry(k).or_insert(0) += 1;
    }
    NcclSummary {
        block: p
            .nccl
            .first()
            .and_then(|(i, _)| p.blocks.get(*i))
            .map(|b| b.id.clone())
            .unwrap_or_default(),
        versions: log.versions.clone(),
        env: log.env.clone(),
        hosts: log.hosts.clone(),
        networks: log.networks.clone(),
        net_devices: log.net_devices.clone(),
        nic_gdr: log.nic_gdr.clone(),
        gpu_gdr: log.gpu_gdr.clone(),
        logged_gdr: log.logged_gdr(),
        transports,
    }
}

/// Whether anything in the inputs was recognised.
pub fn recognised(p: &Paste) -> bool {
    p.blocks.iter().any(|b| b.status != BlockStatus::Ignored)
}

/// Run diagnose on pasted inputs.
pub fn diagnose(inputs: &[Input], opts: &RunOptions) -> DiagnoseReport {
    let p = super::read(inputs);
    diagnose_paste(&p, inputs, opts, &Assume::default())
}

/// What the verdicts take from outside the paste.
#[derive(Debug, Clone, Default)]
pub struct Assume {
    /// `--nccl-version`: its rules, whatever the log says.
    pub nccl_version: Option<String>,
    /// `NCCL_*` variables of the environment gdrdoctor runs in: they overlay the paste's (to
    /// ask "what if", as `--sysroot` does), and the verdicts name them as the source.
    pub env: BTreeMap<String, String>,
}

/// Whether the paste shows a peer-memory client loaded (the files or the module list), whatever
/// NCCL's version makes of it.
fn peermem_loaded(node: &crate::model::Node, cx: &Context) -> Option<bool> {
    use crate::model::Fact;
    if cx.peermem.available == Some(true) {
        return Some(true);
    }
    if matches!(
        node.peermem.nvidia_peermem_version,
        Fact::Known { value: Some(_), .. }
    ) {
        return Some(true);
    }
    match crate::derive::peer_module_loaded(node) {
        Some((l, _)) if !l.is_empty() => Some(true),
        _ => cx.peermem.available,
    }
}

pub fn diagnose_paste(
    p: &Paste,
    inputs: &[Input],
    opts: &RunOptions,
    assume: &Assume,
) -> DiagnoseReport {
    let (mut node, prov) = node::build(p);
    if !assume.env.is_empty() {
        node.env = match &node.env {
            crate::model::Fact::Known { value, source } => {
                let mut e = value.clone();
                e.extend(assume.env.clone());
                crate::model::Fact::known(e, format!("{source} + the environment of this run"))
            }
            crate::model::Fact::Absent { .. } => {
                crate::model::Fact::known(assume.env.clone(), "the environment of this run")
            }
        };
    }
    let log = p.nccl_merged();
    let log_label = p.nccl.first().map(|(i, _)| p.label(*i)).unwrap_or_default();
    let cx = Context::new(&node, p, log.as_ref(), assume.nccl_version.as_deref());
    let (gdr, decision) = pairs(p, &cx, log.as_ref());
    let replaced = ["topo.nic-distance", "topo.rails", "gdr.gpu"];
    let has_topo = !gdr.is_empty();
    let rdma_unplaced = node.rdma.get().is_some_and(|r| {
        !r.is_empty() && r.iter().all(|d| !matches!(d.pci_bdf.get(), Some(Some(_))))
    });
    let mut fs: Vec<Finding> = findings::blocks(p);
    for (def, found) in crate::checks::run_each(&node, &opts.selection) {
        for f in found {
            if has_topo && replaced.contains(&f.id.as_str()) {
                continue;
            }
            fs.push(adapt(f, &def.needs, p, &prov, rdma_unplaced));
        }
    }
    let wants = |id: &str| {
        (opts.selection.only.is_empty()
            || opts
                .selection
                .only
                .iter()
                .any(|o| o == id || id.split('.').next() == Some(o.as_str())))
            && !opts
                .selection
                .skip
                .iter()
                .any(|o| o == id || id.split('.').next() == Some(o.as_str()))
    };
    if has_topo {
        fs.extend(
            topo_findings(p, &gdr, &cx)
                .into_iter()
                .filter(|f| wants(&f.id)),
        );
    }
    fs.extend(
        findings::nccl_gdr(
            &gdr,
            log.as_ref(),
            &log_label,
            peermem_loaded(&node, &cx),
            &cx.config.rules,
        )
        .into_iter()
        .chain(findings::nccl_failures(p))
        .filter(|f| wants(&f.id)),
    );
    // ACS from lspci text where the check could not pair GPUs with NICs.
    if wants("pcie.acs-redirect") {
        if let Some(a) = findings::acs_text(p) {
            let undecided = fs
                .iter()
                .filter(|f| f.id == "pcie.acs-redirect")
                .all(|f| matches!(f.status, Status::Skip | Status::Error));
            if undecided {
                fs.retain(|f| f.id != "pcie.acs-redirect");
                fs.push(a);
            }
        }
    }
    fs.retain(|f| f.id != "paste.blocks" || wants("paste.blocks"));
    // A peer-memory client that NCCL's own log shows it did not use is no pass.
    if let Some(l) = log
        .as_ref()
        .filter(|l| l.nic_gdr.iter().any(|n| !n.enabled))
    {
        for f in fs
            .iter_mut()
            .filter(|f| f.id == "kmod.nvidia-peermem" && f.status == Status::Pass)
        {
            let off: Vec<&str> = l
                .nic_gdr
                .iter()
                .filter(|n| !n.enabled)
                .map(|n| n.name.as_str())
                .collect();
            f.status = Status::Warn;
            f.message = format!(
                "a peer-memory client is loaded, but NCCL's log shows GDR disabled for {} at the nic level: that NCCL did not use it (`nccl.gdr` says why)",
                off.join(", ")
            );
            for n in l.nic_gdr.iter().filter(|n| !n.enabled) {
                f.evidence.push(report::Evidence {
                    source: format!("{log_label} line {}", n.origin.line),
                    observed: format!("GPU Direct RDMA Disabled for HCA {} '{}'", n.index, n.name),
                    expected: None,
                });
            }
        }
    }
    let mut summary = report::Summary::count(&fs);
    summary.exit_code = report::exit_code(&fs, opts.fail_on, opts.allow_incomplete);
    DiagnoseReport {
        schema: SCHEMA.to_string(),
        tool: report::Tool {
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        host: report::Host {
            hostname: node.hostname.get().cloned(),
            kernel: node.kernel_release.get().cloned(),
            source: "evidence".into(),
        },
        summary,
        inputs: inputs
            .iter()
            .map(|i| InputInfo {
                name: i.name.clone(),
                lines: i.text.lines().count(),
                bytes: i.text.len(),
            })
            .collect(),
        blocks: p.blocks.clone(),
        findings: fs,
        gdr,
        gdr_level: cx.level.name.to_string(),
        gdr_level_source: cx.level.source.clone(),
        nccl_rules: cx.config.rules.describe(),
        gdr_notes: match &decision {
            Some(d) => d.notes.clone(),
            None => cx.config.env.notes.clone(),
        },
        matrices: p
            .matrices
            .iter()
            .map(|(i, m)| MatrixView {
                block: p.blocks.get(*i).map(|b| b.id.clone()).unwrap_or_default(),
                matrix: m.clone(),
            })
            .collect(),
        nccl: log.as_ref().map(|l| nccl_summary(p, l)),
        inventory: crate::inventory::build(&node),
    }
}

impl DiagnoseReport {
    /// The same findings as a `gdrdoctor.report/v1` shape, for the renderers that take one.
    pub fn as_report(&self) -> report::Report {
        report::Report {
            schema: report::SCHEMA.to_string(),
            tool: self.tool.clone(),
            timestamp: None,
            host: self.host.clone(),
            summary: self.summary.clone(),
            inventory: self.inventory.clone(),
            findings: self.findings.clone(),
            gdr: Vec::new(),
            probe: None,
        }
    }
}
