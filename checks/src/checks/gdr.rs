//! `gdr.*`: the GDR verdict per GPU, from NCCL's per-pair decision ([`crate::gdr::decision`]).

use crate::gdr;
use crate::model::Node;
use crate::report::{Finding, GdrPair, Status};
use crate::topo;

/// How a pair is used, for messages: `PIX`, `PHB via PXN through 0000:18:00.0`, `P2C`.
pub fn route(p: &GdrPair) -> String {
    match (&p.via, p.nccl_path.as_deref()) {
        (Some(v), _) => format!("{} to it, sends through {v} via PXN", p.path),
        (None, Some(n)) if n != p.path => format!("{} counted as {n}", p.path),
        _ => p.path.clone(),
    }
}

/// `gdr`, `no gdr`, `gdr for receives only`, for evidence lines.
pub fn state(p: &GdrPair) -> &'static str {
    match (p.enabled, p.send, p.receive) {
        (false, _, _) if !p.undecided.is_empty() => "undecided",
        (false, _, _) => "no gdr",
        (true, Some(false), _) => "gdr for receives only",
        (true, _, Some(false)) => "gdr for sends only",
        (true, None, _) => "gdr for receives, sends undecided",
        (true, _, None) => "gdr for sends, receives undecided",
        (true, _, _) => "gdr",
    }
}

pub fn per_gpu(node: &Node) -> Vec<Finding> {
    const ID: &str = "gdr.gpu";
    let cx = gdr::Context::new(node);
    let shared = gdr::shared(node);
    let d = &shared.decision;
    if cx.gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    if cx.nics.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no rdma device (see rdma.devices)",
        )];
    }
    let mut out = Vec::new();
    for (gi, g) in cx.gpus.iter().enumerate() {
        // `shared.pairs` is `d.verdicts` as the report's pairs, in the same order.
        let mut pairs: Vec<GdrPair> = d
            .verdicts
            .iter()
            .zip(&shared.pairs)
            .filter(|(v, _)| v.gpu == gi)
            .map(|(_, p)| p.clone())
            .collect();
        let full = |p: &GdrPair| p.send == Some(true) && p.receive == Some(true);
        pairs.sort_by_key(|p| {
            (
                !(p.enabled && full(p)),
                !p.enabled,
                p.via.is_some(),
                path_rank(&p.path),
            )
        });
        let on: Vec<&GdrPair> = pairs.iter().filter(|p| p.enabled && full(p)).collect();
        let partial: Vec<&GdrPair> = pairs.iter().filter(|p| p.enabled && !full(p)).collect();
        let undecided: Vec<&GdrPair> = pairs.iter().filter(|p| !p.undecided.is_empty()).collect();
        let assumptions = pairs
            .first()
            .map(|p| p.assumptions.clone())
            .unwrap_or_default();
        let mut f = if let Some(best) = on.first() {
            Finding::new(
                ID,
                Status::Pass,
                &g.bdf,
                format!(
                    "gdr on with {} nic(s): {} ({}, {})",
                    on.len(),
                    on.iter()
                        .map(|p| p.nic.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    route(best),
                    best.mechanism.as_deref().unwrap_or("?")
                ),
            )
        } else if let Some(best) = partial.first() {
            let why = best
                .reasons
                .first()
                .cloned()
                .unwrap_or_else(|| "one direction is off".into());
            Finding::new(
                ID,
                Status::Warn,
                &g.bdf,
                format!(
                    "{} with {} nic(s): {} ({}): {why}",
                    state(best),
                    partial.len(),
                    partial
                        .iter()
                        .map(|p| p.nic.as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    route(best)
                ),
            )
            .fix("to have NCCL use GDR for sends too, run the job with NCCL_NET_GDR_READ=1 (measure: NCCL keeps sends off GDR on such GPUs because host-staged sends were faster there)")
        } else if !undecided.is_empty() {
            Finding::new(
                ID,
                Status::Error,
                &g.bdf,
                format!(
                    "cannot decide gdr for {} of {} nic(s): {}",
                    undecided.len(),
                    pairs.len(),
                    undecided[0].undecided.join("; ")
                ),
            )
        } else {
            let best = &pairs[0];
            Finding::new(ID, Status::Fail, &g.bdf, format!("gdr off for every nic; nearest {} ({}): {}", best.nic, best.path, best.reasons.join("; ")))
                .fix("fix the first reason above; `gdrdoctor topo` shows every pair and `gdrdoctor explain gdr.gpu` the decision chain")
        };
        for p in pairs.iter().take(4) {
            let why: Vec<String> = p
                .reasons
                .iter()
                .chain(p.undecided.iter())
                .chain(p.notes.iter())
                .cloned()
                .collect();
            f = f.evidence(
                format!("{}|{}", p.gpu, p.nic),
                format!(
                    "{} {}{}",
                    route(p),
                    state(p),
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", why.join("; "))
                    }
                ),
            );
        }
        f = f
            .evidence("nccl threshold", d.threshold_text())
            .evidence("nccl rules", d.rules.describe());
        for n in &d.notes {
            f = f.evidence("nccl environment", n.clone());
        }
        for a in assumptions {
            f = f.evidence("assumption", a);
        }
        out.push(f);
    }
    out
}

fn path_rank(p: &str) -> u8 {
    topo::parse_level(p).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Fact;
    use crate::testing::*;

    #[test]
    fn a_close_nic_with_a_gdr_path_passes_naming_the_mechanism() {
        let f = per_gpu(&switch_pair());
        assert_eq!(f[0].status, Status::Pass, "{:?}", f[0]);
        assert!(
            f[0].message.contains("mlx5_0 (PIX, dmabuf)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn no_peer_memory_and_no_dma_buf_turns_gdr_off_with_the_reason() {
        let mut n = switch_pair();
        n.peermem.nvidia_peermem_version = known(None);
        n.nvidia.version_file = known(Some(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
                .into(),
        ));
        let f = per_gpu(&n);
        assert_eq!(f[0].status, Status::Fail, "{:?}", f[0]);
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.observed.contains("no peer-memory client")),
            "{:?}",
            f[0].evidence
        );
    }

    #[test]
    fn no_gpu_or_no_nic_skips() {
        let mut n = switch_pair();
        n.rdma = known(Vec::new());
        assert_eq!(per_gpu(&n)[0].status, Status::Skip);
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            pci.retain(|d| !d.is_nvidia_gpu());
        }
        assert_eq!(per_gpu(&n)[0].status, Status::Skip);
    }
}
