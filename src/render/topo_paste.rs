//! `gdrdoctor topo --nvidia-smi FILE`: a pasted matrix shown as the topo view
//! (`gdrdoctor.topo-paste/v1`): NCCL's verdict per pair, the close NICs per GPU, the rails.

use gdrdoctor_checks::paste::{report::DiagnoseReport, verdict::Gdr};
use serde::Serialize;
use std::collections::BTreeMap;

/// A GPU as the matrix names it.
const GPU_PATTERN: &str = "^GPU[0-9]+$";

/// One pair of `topo --nvidia-smi --format json`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopoPastePair {
    #[schemars(regex(pattern = GPU_PATTERN))]
    pub gpu: String,
    /// The RDMA device (by the NIC legend), else the matrix column.
    pub nic: String,
    /// The cell as nvidia-smi printed it (`?` when the paste does not hold a trustworthy value).
    #[schemars(regex(pattern = r"^(PIX|PXB|PHB|NODE|SYS|SOC|P2C|C2C|X|NV[0-9]+|\?)$"))]
    pub path: String,
    /// The pair's own path is within NCCL's GDR threshold; null when the cell is unknown.
    #[schemars(extend("x-required" = true))]
    pub gdr_by_distance: Option<bool>,
    /// NCCL's verdict: `on`, `off`, or `unknown` when the paste lacks what it needs (a matrix
    /// alone never shows peer memory or port states).
    #[schemars(with = "String", extend("enum" = ["on", "off", "unknown"]))]
    pub gdr: Gdr,
    /// GDR for sends, when decided; null: undecided.
    #[schemars(extend("x-required" = true))]
    pub send: Option<bool>,
    /// GDR for receives, when decided; null: undecided.
    #[schemars(extend("x-required" = true))]
    pub receive: Option<bool>,
    /// The NVLink peer that carries this GPU's sends to the NIC (PXN).
    #[schemars(extend("x-required" = true), regex(pattern = GPU_PATTERN))]
    pub via: Option<String>,
    /// Why GDR is off.
    pub reasons: Vec<String>,
    /// What the verdict needs that the paste does not show.
    pub unknown: Vec<String>,
}

/// `gdrdoctor topo --nvidia-smi FILE --format json` (`gdrdoctor.topo-paste/v1`).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopoPaste {
    pub schema: &'static str,
    #[schemars(extend("const" = "evidence"))]
    pub source: &'static str,
    /// The matrix block and where it is: `b1 (nvidia-smi topo -m, topo.txt:1-20)`.
    #[schemars(regex(pattern = r"^b[1-9][0-9]* \(nvidia-smi topo -m, .*:[0-9]+-[0-9]+\)$"))]
    pub block: String,
    /// The GDR distance threshold (NCCL's name, or 2.4-2.5's integer).
    pub gdr_level: String,
    /// Where the threshold came from.
    pub gdr_level_source: String,
    /// Whose rules the verdicts follow, and why.
    pub nccl_rules: String,
    /// Node-wide remarks of the rule (environment effects, ignored values).
    pub notes: Vec<String>,
    pub pairs: Vec<TopoPastePair>,
    /// Per GPU whose row is readable: the NICs within the GDR distance.
    #[schemars(extend("propertyNames" = {"pattern": GPU_PATTERN}))]
    pub close_nics: BTreeMap<String, Vec<String>>,
    /// One line on the rails (balanced, uneven, asymmetric, none).
    pub rails: String,
    /// What in the matrix was repaired.
    pub repairs: Vec<String>,
    /// What in the matrix cannot be trusted (those cells have no verdict).
    pub problems: Vec<String>,
}

/// The published JSON Schema of `topo --nvidia-smi FILE --format json`
/// (docs/schema/gdrdoctor.topo-paste.v1.schema.json), derived from [`TopoPaste`].
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<TopoPaste>(
        "gdrdoctor.topo-paste/v1",
        "`gdrdoctor topo --nvidia-smi FILE --format json`: NCCL's rule on a pasted `nvidia-smi topo -m` (the first matrix of the file), the matrix view of `gdrdoctor diagnose` (docs/report-format.md).",
        true,
    )
}

pub fn build(r: &DiagnoseReport) -> Option<TopoPaste> {
    let first = r.matrices.first()?;
    let block = r.blocks.iter().find(|b| b.id == first.block)?;
    let pairs: Vec<TopoPastePair> = r
        .gdr
        .iter()
        .filter(|p| p.block == first.block)
        .map(|p| TopoPastePair {
            gpu: p.gpu.clone(),
            nic: p.nic.clone(),
            path: p.nvidia_smi.clone(),
            gdr_by_distance: p.by_distance,
            gdr: p.gdr,
            send: p.send,
            receive: p.receive,
            via: p.via.clone(),
            reasons: p.reasons.clone(),
            unknown: p.unknown.clone(),
        })
        .collect();
    let mut close: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in first.matrix.gpus() {
        let row: Vec<&TopoPastePair> = pairs.iter().filter(|p| &p.gpu == g).collect();
        let readable = !row.is_empty()
            && (row.iter().all(|p| p.gdr_by_distance.is_some())
                || row.iter().any(|p| p.gdr_by_distance == Some(true)));
        if readable {
            close.insert(
                g.clone(),
                row.iter()
                    .filter(|p| p.gdr_by_distance == Some(true))
                    .map(|p| p.nic.clone())
                    .collect(),
            );
        }
    }
    let counts: Vec<usize> = close.values().map(Vec::len).collect();
    let (min, max) = (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    );
    let within = format!("within {}", r.gdr_level);
    let rails = if first.matrix.nics().is_empty() {
        "no NIC columns in the matrix".to_string()
    } else if close.is_empty() {
        "no GPU row is readable".to_string()
    } else if max == 0 {
        format!(
            "no GPU has a NIC {within}: NCCL uses GPUDirect RDMA from none of them on its own path"
        )
    } else if min == 0 {
        let none: Vec<&str> = close
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(g, _)| g.as_str())
            .collect();
        format!(
            "asymmetric rails: {} have no NIC {within} while others have up to {max}",
            none.join(", ")
        )
    } else if min != max {
        format!("uneven rails: GPUs have between {min} and {max} close NICs")
    } else {
        format!("balanced: every GPU has {min} close NIC(s)")
    };
    Some(TopoPaste {
        schema: "gdrdoctor.topo-paste/v1",
        source: "evidence",
        block: block.label(),
        gdr_level: r.gdr_level.clone(),
        gdr_level_source: r.gdr_level_source.clone(),
        nccl_rules: r.nccl_rules.clone(),
        notes: r.gdr_notes.clone(),
        pairs,
        close_nics: close,
        rails,
        repairs: block.repairs.clone(),
        problems: block.problems.clone(),
    })
}

/// The text view: the GPU x NIC verdicts, the rails, what was repaired and what is not trusted.
pub fn text(r: &DiagnoseReport, t: &TopoPaste, width: usize) -> String {
    use super::wrap::hanging;
    let max = width.saturating_sub(1);
    let mut o = super::paste_md::gdr_view(r, width);
    o.push_str(&hanging("", 0, 2, &format!("rails: {}", t.rails), max));
    for x in &t.repairs {
        o.push_str(&hanging("", 0, 2, &format!("repaired: {x}"), max));
    }
    for x in &t.problems {
        o.push_str(&hanging("", 0, 2, &format!("not trusted: {x}"), max));
    }
    o.push_str(&hanging("", 0, 2, "A matrix alone does not show peer memory, dma-buf or port states; `gdrdoctor diagnose` reads the other pastes (lsmod, ibv_devinfo, NCCL logs) too.", max));
    o
}
