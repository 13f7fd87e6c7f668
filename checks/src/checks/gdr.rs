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
