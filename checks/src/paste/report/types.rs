//! The `gdrdoctor.diagnose/v1` report and its parts.

use crate::paste::nccl::LoggedGdr;
use crate::paste::verdict::PastePair;
use crate::report::{self, Finding};
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
    pub net_devices: Vec<crate::paste::nccl::NetDevice>,
    pub nic_gdr: Vec<crate::paste::nccl::NicGdr>,
    pub gpu_gdr: Vec<crate::paste::nccl::GpuGdr>,
    /// NCCL's decision per local GPU, NIC and direction, from its channel lines.
    pub logged_gdr: Vec<LoggedGdr>,
    /// How many connection lines used each transport (`NET/IB/GDRDMA`, `NET/IB`, `P2P/CUMEM`, ..).
    pub transports: BTreeMap<String, usize>,
    /// The job view: every rank with its host, process, GPU, NICs, GDR (NCCL's word) and the
    /// transport to each peer.
    pub ranks: Vec<super::job::RankView>,
    /// Logged decisions no pasted pair can take (a multi-host log whose hosts differ, a GPU
    /// neither by bus id nor by nvmlDev), with why.
    pub unplaced: Vec<super::pairs::Unplaced>,
    /// The runs of a block that held several, side by side (the verdicts follow the last).
    pub runs: Vec<super::job::RunView>,
    /// Lines read without NCCL's prefix (lower confidence).
    pub unprefixed_lines: usize,
}

/// A matrix with the block it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MatrixView {
    pub block: String,
    #[serde(flatten)]
    pub matrix: crate::paste::topo::Matrix,
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
    pub blocks: Vec<crate::paste::Block>,
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
