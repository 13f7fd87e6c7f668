//! `probe --registration`: can this GPU's memory be exported and registered for RDMA, and how
//! fast? Per GPU: cuMemAlloc at 4 KiB, 64 KiB, 2 MiB and 1 GiB, each exported as a dma-buf, a
//! range at a 4 KiB offset, managed memory (refused, which is the point), pinned host memory as
//! the baseline, and with libibverbs and an RDMA device `ibv_reg_mr` (peer memory) and
//! `ibv_reg_dmabuf_mr` (dma-buf), NCCL's fd=-1 probe, the memory_peers counters and NVML's BAR1
//! usage before and after. Ground truth §2.2 D01-D06, §2.8 P01-P02, §2.10.
//!
//! [`worker`] runs in the worker process; [`verdict`] turns its [`Record`] into findings.

pub mod verdict;
pub mod worker;

use super::args::{self, CommonArgs};
use super::common::{self, WorkerRecord};
use super::plan::{Plan, Ran};
use gdrdoctor_checks::model::Node;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `--registration`.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Allocate, export (dma-buf) and register GPU memory, timing each step
    #[arg(long)]
    pub registration: bool,
}

/// What the registration worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Only this GPU (CUDA ordinal); every GPU when `None`.
    pub gpu: Option<i32>,
    /// Rounds of alloc/export/free for the medians (1: no repeated timing).
    pub repeat: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step: String,
    pub bytes: u64,
    pub ok: bool,
    pub us: f64,
    pub error: Option<String>,
    /// The errno of a failed verbs call (absent for CUDA steps and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuResult {
    pub ordinal: i32,
    pub bdf: String,
    pub name: String,
    pub steps: Vec<Step>,
    pub bar1_used_before: Option<u64>,
    pub bar1_used_after: Option<u64>,
    pub verbs: Vec<Step>,
    /// Repeated measurements (`--repeat`): per size, median and p90 of alloc and export.
    pub timing: Vec<Timing>,
    pub memory_peers_before: Option<std::collections::BTreeMap<String, u64>>,
    pub memory_peers_after: Option<std::collections::BTreeMap<String, u64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Result_ {
    pub driver_version: i32,
    pub page_size: u64,
    pub gpus: Vec<GpuResult>,
    /// libibverbs state: why the verbs part did not run, when it did not.
    pub verbs_skipped: Option<String>,
    pub rdma_devices: Vec<String>,
    /// NCCL's dma-buf probe per RDMA device: errno of ibv_reg_dmabuf_mr(fd=-1).
    pub nccl_dmabuf_probe: std::collections::BTreeMap<String, Option<i32>>,
}

pub const SIZES: [u64; 4] = [4 << 10, 64 << 10, 2 << 20, 1 << 30];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub bytes: u64,
    pub runs: usize,
    pub alloc_us_median: f64,
    pub alloc_us_p90: f64,
    pub export_us_median: f64,
    pub export_us_p90: f64,
    pub free_us_median: f64,
}

/// What the report keeps of a registration run (`probe.registration`).
pub type Record = WorkerRecord<Params, Result_>;

/// The validated plan: which GPU, how many rounds.
#[derive(Debug, Clone)]
pub struct Registration {
    pub params: Params,
    pub deadline: Duration,
}

/// Build the plan from the command line; `None` without `--registration`.
pub fn plan(m: &clap::ArgMatches, c: &CommonArgs) -> Result<Option<Box<dyn Plan>>, String> {
    let a: Args = args::own(m)?;
    if !a.registration {
        return Ok(None);
    }
    Ok(Some(Box::new(Registration {
        params: Params {
            gpu: c.gpu.map(|g| g as i32),
            repeat: c.repeat,
        },
        deadline: Duration::from_secs(c.timeout),
    })))
}

impl Plan for Registration {
    fn execute(&self, node: &Node) -> Ran {
        if let Some(f) = common::no_gpu(node) {
            return Ran::findings(vec![f]);
        }
        let r = Record::run("registration", self.params.clone(), self.deadline, true);
        Ran {
            findings: verdict::findings(&r),
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
pub fn replay(
    _node: &Node,
    v: &serde_json::Value,
) -> Result<Vec<gdrdoctor_checks::report::Finding>, String> {
    let r: Record = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(verdict::findings(&r))
}
