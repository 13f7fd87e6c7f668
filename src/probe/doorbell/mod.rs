//! `probe --doorbell`: the doorbell arithmetic and the GPU-to-NIC write path
//! (gdr-ground-truth §4): an emulated mlx5 doorbell page rung by the GPU (always), store-flavour
//! latency beside a ping-pong floor, and a real mlx5 UAR's doorbell address and GPU mapping
//! when there is one. [`worker`] runs in the worker process; [`verdict`] turns its [`Record`]
//! into findings.

pub mod verdict;
pub mod worker;

pub use verdict::findings;

use super::args::{self, CommonArgs};
use super::common::{self, WorkerRecord};
use super::plan::{Plan, Ran};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `--doorbell` and its options.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Check doorbell arithmetic and the GPU-to-NIC write path: an emulated mlx5 doorbell page
    /// rung by the GPU (always), store-flavour latency, and a real mlx5 UAR when there is one
    #[arg(long)]
    pub doorbell: bool,
    /// With --doorbell: rings per store flavour for the latency table
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub rings: u32,
    /// With --doorbell: a saved `lspci -vv -s <nic>` to cross-check the NIC's BAR0 against
    #[arg(long, value_name = "FILE")]
    pub lspci: Option<std::path::PathBuf>,
    /// With --doorbell: let the GPU write the real doorbell once (value 0, a dedicated UAR with
    /// no queue); without it nothing is written to the NIC
    #[arg(long)]
    pub allow_mmio_write: bool,
}

/// What `probe --doorbell` was asked to do (the worker's parameters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    pub ordinal: i32,
    pub rings: u32,
    /// A saved `lspci -vv` of the NIC, to cross-check BAR0.
    pub lspci: Option<std::path::PathBuf>,
    pub allow_mmio_write: bool,
    /// Use the PTX carried in the binary even when NVRTC is available.
    pub force_ptx: bool,
}

pub const FLAVOURS: [(&str, u32); 6] = [
    ("floor (ping-pong, no payload, st.volatile echo)", 5),
    ("st.global (weak, no fence)", 0),
    ("st.global.wt (write-through)", 1),
    ("st.release.sys", 2),
    ("st.mmio.relaxed.sys", 3),
    ("__threadfence_system + st.volatile", 4),
];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LayoutResult {
    pub name: String,
    pub expected_offset: u64,
    pub alternate_offset: Option<u64>,
    pub ok: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlavourResult {
    pub flavour: String,
    pub rings: usize,
    /// Token written by the host -> doorbell seen by the host, ns.
    pub rtt_p50_ns: f64,
    pub rtt_p99_ns: f64,
    /// Rings whose payload was not yet fully visible when the doorbell was.
    pub payload_late: usize,
    /// For st.mmio: whether the PTX had the instruction (else it ran st.release.sys).
    pub native: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mlx5Result {
    pub device: String,
    pub pci: Option<String>,
    pub uar_type: String,
    pub page_id: Option<u64>,
    pub reg_offset: Option<u64>,
    pub bar0_resource: Option<(u64, u64)>,
    pub bar0_config: Option<u64>,
    pub bar0_lspci: Option<(u64, u64)>,
    pub doorbell_phys: Option<u64>,
    pub issues: Vec<String>,
    pub gpu_map: Option<String>,
    pub gpu_map_ok: bool,
    /// Addresses the known mistakes would give for this UAR (where they differ from the right one).
    #[serde(default)]
    pub trap_addresses: Vec<String>,
    /// With --allow-mmio-write: what one GPU store to the doorbell did.
    pub mmio_write: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DoorbellOutput {
    pub gpu: String,
    pub kernel_source: String,
    pub st_mmio_native: bool,
    pub layouts: Vec<LayoutResult>,
    pub stray_writes: Vec<u64>,
    pub flavours: Vec<FlavourResult>,
    pub mlx5: Vec<Mlx5Result>,
    pub mlx5_skipped: Option<String>,
    pub page_size: u64,
}

/// What the report keeps of a doorbell run (`probe.doorbell`).
pub type Record = WorkerRecord<Options, DoorbellOutput>;

/// The validated plan.
#[derive(Debug, Clone)]
pub struct Doorbell {
    pub opts: Options,
    pub deadline: Duration,
}

/// Build the plan from the command line; `None` without `--doorbell`.
pub fn plan(m: &clap::ArgMatches, c: &CommonArgs) -> Result<Option<Box<dyn Plan>>, String> {
    let a: Args = args::own(m)?;
    if !a.doorbell {
        if a.lspci.is_some() || a.allow_mmio_write {
            return Err("--lspci and --allow-mmio-write need --doorbell".into());
        }
        return Ok(None);
    }
    Ok(Some(Box::new(Doorbell {
        opts: Options {
            ordinal: c.gpu.map(|g| g as i32).unwrap_or(0),
            rings: a.rings,
            lspci: a.lspci,
            allow_mmio_write: a.allow_mmio_write,
            force_ptx: c.ptx,
        },
        deadline: Duration::from_secs(c.timeout),
    })))
}

impl Plan for Doorbell {
    fn execute(&self, node: &Node) -> Ran {
        if let Some(f) = common::no_gpu(node) {
            return Ran::findings(vec![
                f,
                Finding::new(
                    "probe.doorbell-mlx5",
                    Status::Skip,
                    "node",
                    "no nvidia gpu on the pci bus: no GPU-initiated doorbells to check",
                ),
            ]);
        }
        if let Some(p) = &self.opts.lspci {
            if let Err(e) = std::fs::metadata(p) {
                return Ran::findings(vec![Finding::new(
                    "probe.doorbell-mlx5",
                    Status::Error,
                    "node",
                    format!("--lspci {}: {e}", p.display()),
                )]);
            }
        }
        let r = Record::run("doorbell", self.opts.clone(), self.deadline, true);
        Ran {
            findings: verdict::record_findings(&r),
            record: r.to_value(),
        }
    }
}

/// The worker side, for the registry.
pub fn serve(
    v: serde_json::Value,
) -> Result<serde_json::Value, crate::worker::protocol::WorkerError> {
    crate::worker::protocol::serve(v, worker::worker)
}

/// The verdict from a saved record, for the registry.
pub fn replay(_node: &Node, v: &serde_json::Value) -> Result<Vec<Finding>, String> {
    let r: Record = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(verdict::record_findings(&r))
}
