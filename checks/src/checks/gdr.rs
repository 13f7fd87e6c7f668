//! `gdr.*`: the GDR verdict per GPU, from the per-pair decision in [`crate::gdr`].

use crate::gdr::{self, Context};
use crate::model::Node;
use crate::report::{Finding, Status};
use crate::topo;

pub fn per_gpu(node: &Node) -> Vec<Finding> {
    const ID: &str = "gdr.gpu";
    let cx = Context::new(node);
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
    for g in &cx.gpus {
        let mut pairs: Vec<_> = cx
            .nics
            .iter()
            .map(|(n, ep)| gdr::pair(node, &cx, g, n, ep.as_ref()))
            .collect();
        pairs.sort_by_key(|p| (!p.enabled, path_rank(&p.path)));
        let on: Vec<&crate::report::GdrPair> = pairs.iter().filter(|p| p.enabled).collect();
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
                    best.path,
                    best.mechanism.as_deref().unwrap_or("?")
                ),
            )
        } else if pairs.iter().all(|p| {
            p.reasons
                .iter()
                .any(|r| r.starts_with("cannot tell") || r.contains("is unknown"))
        }) {
            let best = &pairs[0];
            Finding::new(
                ID,
                Status::Error,
                &g.bdf,
                format!("cannot decide gdr for any nic: {}", best.reasons.join("; ")),
            )
        } else {
            let best = &pairs[0];
            Finding::new(ID, Status::Fail, &g.bdf, format!("gdr off for every nic; nearest {} ({}): {}", best.nic, best.path, best.reasons.join("; ")))
                .fix("fix the first reason above; `gdrdoctor topo` shows every pair and `gdrdoctor explain gdr.gpu` the decision chain")
        };
        for p in pairs.iter().take(4) {
            f = f.evidence(
                format!("{}|{}", p.gpu, p.nic),
                format!(
                    "{} {}{}",
                    p.path,
                    if p.enabled { "gdr" } else { "no gdr" },
                    if p.reasons.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", p.reasons.join("; "))
                    }
                ),
            );
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
