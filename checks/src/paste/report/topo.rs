//! The topology checks (`topo.nic-distance`, `gdr.gpu`, `topo.rails`) answered from the pasted
//! matrix and NCCL log.

use super::pairs::{effective, route};
use crate::paste::verdict::{Context, Gdr, PastePair};
use crate::paste::{Kind, Paste};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// `topo.nic-distance`, `topo.rails` and `gdr.gpu` from the matrices and the log, on the
/// verdicts of [`verdict::decide`].
pub(super) fn topo_findings(p: &Paste, pairs: &[PastePair], cx: &Context) -> Vec<Finding> {
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
        let from_matrix = p
            .blocks
            .iter()
            .any(|b| &b.id == blk && b.kind == Kind::TopoMatrix);
        let b = TopoBlock {
            blk,
            lab: &lab,
            many,
            threshold: &threshold,
            cx,
        };
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
                let (f, near) = b.nic_distance(g, &row, &listing, best);
                close.insert(g, near);
                out.push(f);
            }
            // gdr.gpu: what NCCL did when the log says, else the rule's prediction.
            out.push(b.gdr_gpu(g, &row, &listing, best, from_matrix));
        }
        if from_matrix && gpus.len() >= 2 {
            out.push(b.rails(&gpus, &close));
        }
    }
    out
}

/// One block's pairs as the topology findings cite it.
struct TopoBlock<'a> {
    blk: &'a str,
    /// The block's label.
    lab: &'a str,
    /// More than one block holds pairs: subjects name theirs.
    many: bool,
    /// The threshold and where it came from.
    threshold: &'a str,
    cx: &'a Context,
}

impl<'a> TopoBlock<'a> {
    fn subj(&self, g: &str) -> String {
        if self.many {
            format!("{}:{g}", self.blk)
        } else {
            g.to_string()
        }
    }

    /// `topo.nic-distance` of GPU `g` (its `row` of pairs, `listing`, the `best`), and its
    /// close NICs (`None`: unknown).
    fn nic_distance<'p>(
        &self,
        g: &str,
        row: &[&'p PastePair],
        listing: &str,
        best: Option<&PastePair>,
    ) -> (Finding, Option<Vec<&'p str>>) {
        let (cx, lab, threshold) = (self.cx, self.lab, self.threshold);
        let known: Vec<&&PastePair> = row.iter().filter(|x| x.by_distance.is_some()).collect();
        let near: Vec<&str> = row
            .iter()
            .filter(|x| x.by_distance == Some(true))
            .map(|x| x.nic.as_str())
            .collect();
        let pxn = row
            .iter()
            .find(|x| x.via.is_some() && effective(x).0 == Some(true));
        let close = if !near.is_empty() {
            Some(near.clone())
        } else if known.len() < row.len() {
            None
        } else {
            Some(Vec::new())
        };
        let f = if !near.is_empty() {
            Finding::new(
                "topo.nic-distance",
                Status::Pass,
                self.subj(g),
                format!(
                    "nics within {} (nccl's gdr distance): {}",
                    cx.level.name,
                    near.join(" ")
                ),
            )
            .evidence(lab, listing)
        } else if known.len() < row.len() {
            Finding::new(
                "topo.nic-distance",
                Status::Error,
                self.subj(g),
                "the matrix row is incomplete: no verdict on the nic distance",
            )
            .evidence(lab, listing)
            .fix(format!(
                "paste `nvidia-smi topo -m` again in a code block; {g} is cut or garbled"
            ))
        } else if let Some(x) = pxn {
            Finding::new("topo.nic-distance", Status::Warn, self.subj(g), format!(
                "no nic within {} of this gpu: the nearest, {}, is {}; nccl sends its traffic through {} over nvlink (pxn) and uses gdr there ({})",
                cx.level.name,
                best.map(|b| b.nic.as_str()).unwrap_or("?"),
                best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?"),
                x.via.as_deref().unwrap_or("?"),
                x.nic
            ))
            .expected(lab, listing, format!("a nic within {threshold}"))
            .fix("PXN keeps GDR but adds an NVLink hop and shares the peer's NIC; for a NIC of its own move one under this GPU's PCIe switch")
        } else if let Some(why) = best
            .into_iter()
            .chain(row.iter().copied())
            // The nearest NIC's own note first: another NIC's names another peer GPU (the
            // review of 2026-12-07: GPU4's note named GPU1, mlx5_0's peer, beside mlx5_2).
            .find_map(|x| x.unknown.iter().find(|u| u.contains("(PXN)")).cloned())
        {
            // Whether a peer GPU carries it over NVLink is undecided: the GDR table
            // says unknown, and so does this.
            Finding::new("topo.nic-distance", Status::Warn, self.subj(g), format!(
                "no nic within {} of this gpu: the nearest, {}, is {}; whether nccl reaches a nic over nvlink through a peer gpu (pxn) instead is undecided: {why}",
                cx.level.name,
                best.map(|b| b.nic.as_str()).unwrap_or("?"),
                best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?")
            ))
            .expected(lab, listing, format!("a nic at PIX or PXB ({threshold})"))
            .fix("paste what the verdict lacks (the commands `gdrdoctor diagnose` lists below) to decide PXN; for GDR without it, move a NIC under the same PCIe switch as this GPU")
        } else {
            Finding::new("topo.nic-distance", Status::Warn, self.subj(g), format!(
                "no nic within {} of this gpu: the nearest, {}, is {}; nccl turns gdr off for it by default and stages through host memory",
                cx.level.name,
                best.map(|b| b.nic.as_str()).unwrap_or("?"),
                best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?")
            ))
            .expected(lab, listing, format!("a nic at PIX or PXB ({threshold})"))
            .fix("move a NIC under the same PCIe switch as this GPU; or accept the host-memory path (`NCCL_NET_GDR_LEVEL=PHB`/`SYS` forces GDR through the CPU, often slower)")
        };
        (f, close)
    }

    /// `gdr.gpu` of GPU `g`: what NCCL did when the log says, else the rule's prediction.
    fn gdr_gpu(
        &self,
        g: &str,
        row: &[&PastePair],
        listing: &str,
        best: Option<&PastePair>,
        from_matrix: bool,
    ) -> Finding {
        let lab = self.lab;
        let both: Vec<&PastePair> = row
            .iter()
            // GDR in every direction the log or the rule decides (a direction the log does
            // not show and the rule cannot decide is not "off").
            .filter(|x| {
                let e = effective(x);
                (e.0 == Some(true) || e.1 == Some(true)) && e.0 != Some(false) && e.1 != Some(false)
            })
            .copied()
            .collect();
        let partial: Vec<&PastePair> = row
            .iter()
            .filter(|x| {
                let e = effective(x);
                (e.0 == Some(true) || e.1 == Some(true))
                    && (e.0 == Some(false) || e.1 == Some(false))
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
                self.subj(g),
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
            .evidence(lab, listing);
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
                    self.subj(g),
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
                .evidence(lab, listing)
                .fix("to have NCCL use GDR for sends too, run the job with NCCL_NET_GDR_READ=1 (measure: NCCL keeps sends off GDR on such GPUs because host-staged sends were faster there)")
        } else if logged_any || row.iter().all(|x| x.gdr == Gdr::Off) {
            // Without a matrix there is no nearest NIC: the NIC NCCL logged stands for it.
            let best = best.or_else(|| row.iter().copied().find(|x| x.logged.is_some()));
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
                    self.subj(g),
                    match best {
                        Some(b) if b.nvidia_smi == "?" => format!(
                            "gdr off for every nic; {}, path not in the paste: {}",
                            b.nic,
                            if why.is_empty() { "nccl logged no gdrdma" } else { why.as_str() }
                        ),
                        Some(b) => format!(
                            "gdr off for every nic; nearest {} ({}): {}",
                            b.nic,
                            b.nvidia_smi,
                            if why.is_empty() { "the paste does not say why" } else { why.as_str() }
                        ),
                        None => "gdr off for every nic; the paste does not say why".to_string(),
                    },
                )
                .evidence(lab, listing)
                .fix("fix the first reason above; `gdrdoctor explain gdr.gpu` gives NCCL's decision chain")
        } else if row.iter().any(|x| x.by_distance.is_none()) && from_matrix {
            Finding::new(
                "gdr.gpu",
                Status::Error,
                self.subj(g),
                "cannot decide gdr: the gpu's matrix row is incomplete",
            )
            .evidence(lab, listing)
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
                    self.subj(g),
                    format!(
                        "nccl's rule allows gdr with {} if what the paste does not show is in place; whether nccl uses it is not in the pasted text",
                        open.iter()
                            .map(|x| x.nic.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                )
                .evidence(lab, listing);
            for u in unk {
                f = f.evidence("not in the paste", u);
            }
            f
        };
        f
    }

    /// `topo.rails`: whether every GPU of the block has as many close NICs (`close`).
    fn rails(&self, gpus: &[&str], close: &BTreeMap<&str, Option<Vec<&str>>>) -> Finding {
        let (cx, lab, many, blk) = (self.cx, self.lab, self.many, self.blk);
        let known: Vec<(&&str, &Vec<&str>)> = close
            .iter()
            .filter_map(|(g, v)| v.as_ref().map(|v| (g, v)))
            .collect();
        if known.len() < gpus.len() {
            return Finding::new(
                "topo.rails",
                Status::Error,
                if many { blk.to_string() } else { "node".into() },
                "some gpu rows are incomplete: no verdict on the rails",
            )
            .evidence(
                lab,
                format!("{} of {} gpu rows readable", known.len(), gpus.len()),
            );
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
        let subject = if many { blk.to_string() } else { "node".into() };
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
            .evidence(lab, listing)
        } else if min == 0 {
            let none: Vec<&str> = known
                .iter()
                .filter(|(_, v)| v.is_empty())
                .map(|(g, _)| **g)
                .collect();
            Finding::new("topo.rails", Status::Warn, subject, format!("asymmetric rails: {} have no close nic while others have up to {max}", none.join(", ")))
            .expected(lab, listing, "the same number of close nics for every gpu")
            .fix("rebalance NICs across the PCIe switches so every GPU has one under its switch (the HGX rail layout); until then NCCL sends the NIC-less GPUs' traffic through host memory or a neighbour (PXN)")
        } else if min != max {
            Finding::new(
                "topo.rails",
                Status::Warn,
                subject,
                format!("uneven rails: gpus have between {min} and {max} close nics"),
            )
            .expected(lab, listing, "the same number of close nics for every gpu")
            .fix("rebalance NICs across the PCIe switches")
        } else {
            Finding::new(
                "topo.rails",
                Status::Pass,
                subject,
                format!("every gpu has {min} close nic(s)"),
            )
            .evidence(lab, listing)
        };
        f
    }
}
