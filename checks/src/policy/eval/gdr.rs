//! `policy.gdr`: the GPU x NIC pairs with GPUDirect RDMA the site requires.

use super::context::{cannot, Context};
use crate::derive;
use crate::model::Node;
use crate::policy::types::*;
use crate::report::{Finding, GdrPair, Status};

fn path_rank(path: &str) -> u8 {
    PathName::parse(path).map(|p| p.rank).unwrap_or(u8::MAX)
}

pub(super) fn gdr_pairs(node: &Node, pairs: &[GdrPair], r: &GdrRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.gdr";
    let max = r.max_path.unwrap_or(PathName {
        name: "SYS",
        rank: 9,
    });
    let ok = |p: &GdrPair| p.enabled && path_rank(&p.path) <= max.rank;
    let within = if r.max_path.is_some() {
        format!(" at {} or closer", max.name)
    } else {
        String::new()
    };
    let mut out = Vec::new();
    if node.pci.get().is_none() {
        return vec![cannot(
            ID,
            "list the gpus",
            node.pci.source(),
            node.pci.reason().unwrap_or("?"),
        )];
    }
    if r.every_gpu == Some(true) {
        let gpus = derive::gpus(node);
        if gpus.is_empty() {
            out.push(Finding::new(
                ID,
                Status::Skip,
                "node",
                "no nvidia gpu: no gpu to pair (see policy.gpu)",
            ));
        }
        let mut bad = 0;
        for g in &gpus {
            let mine: Vec<&GdrPair> = pairs.iter().filter(|p| p.gpu == g.bdf).collect();
            if mine.iter().any(|p| ok(p)) {
                continue;
            }
            bad += 1;
            let nearest = mine.iter().min_by_key(|p| path_rank(&p.path));
            let why = match nearest {
                Some(p) if p.enabled => format!("nearest nic with gdr is {} at {}", p.nic, p.path),
                Some(p) => format!(
                    "nearest nic {} ({}): {}",
                    p.nic,
                    p.path,
                    if p.reasons.is_empty() {
                        "gdr off".to_string()
                    } else {
                        p.reasons.join("; ")
                    }
                ),
                None => "no rdma nic to pair with".into(),
            };
            out.push(Finding::new(ID, Status::Fail, &g.bdf, format!("no nic with gpudirect rdma{within}: {why}"))
                .expected("gdr verdicts (gdrdoctor topo)", why.clone(), cx.want(format!("a gdr nic{within}"), "gdr.every_gpu"))
                .fix("`gdrdoctor topo` shows the pair matrix and why each pair has no gdr; see `gdrdoctor explain gdr.gpu`"));
        }
        if bad == 0 && !gpus.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "every gpu ({}) has a nic with gpudirect rdma{within}",
                        gpus.len()
                    ),
                )
                .expected(
                    "gdr verdicts (gdrdoctor topo)",
                    format!("{} of {} gpus", gpus.len(), gpus.len()),
                    cx.want(format!("every gpu{within}"), "gdr.every_gpu"),
                ),
            );
        }
    }
    if let Some(n) = r.min_pairs {
        let have = pairs.iter().filter(|p| ok(p)).count();
        let f = if have >= n as usize {
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!(
                    "{have} gpu x nic pairs with gpudirect rdma{within} (policy: at least {n})"
                ),
            )
        } else {
            Finding::new(ID, Status::Fail, "node", format!("{have} gpu x nic pairs with gpudirect rdma{within}, the policy expects at least {n}"))
                .fix("`gdrdoctor topo` shows which pairs lost gdr and why; see `gdrdoctor explain gdr.gpu`")
        };
        out.push(f.expected(
            "gdr verdicts (gdrdoctor topo)",
            format!("{have} of {} pairs", pairs.len()),
            cx.want(format!(">= {n}"), "gdr.min_pairs"),
        ));
    }
    out
}
