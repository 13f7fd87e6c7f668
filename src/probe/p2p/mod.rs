//! `probe --p2p`: peer copy bandwidth and latency per GPU pair (what cuda-samples'
//! p2pBandwidthLatencyTest measures), beside the link's theoretical rate (NVLink generation,
//! link count and per-link rate from NVML, carried in the record) so a slow pair stands out,
//! and every pair copying at once (the fabric under load on 4- and 8-GPU nodes). [`worker`]
//! runs in the worker process; [`verdict`] turns its [`Record`] into findings.

pub mod verdict;
pub mod worker;

pub use verdict::{findings, theoretical, NVLINK_SLOW_FRACTION, PCIE_SLOW_FRACTION};

use super::args::{self, CommonArgs};
use super::common::{self, WorkerRecord};
use super::plan::{Plan, Ran};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::Finding;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `--p2p` and its options.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Peer copy bandwidth and latency for every GPU pair (both directions and both at once),
    /// against the link's theoretical rate; one GPU: a copy reference inside it
    #[arg(long)]
    pub p2p: bool,
    /// With --p2p: bytes per copy, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub p2p_size: usize,
}

/// What the p2p worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// The GPUs (CUDA ordinals) to measure; every GPU when `None`.
    pub gpus: Option<Vec<i32>>,
    /// Bytes per copy, in MiB.
    pub size_mib: usize,
    /// Copies per measurement.
    pub reps: u32,
}

/// One direction (or both) between two GPUs, measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct P2pPair {
    pub a: i32,
    pub b: i32,
    pub a_bdf: String,
    pub b_bdf: String,
    /// `cuDeviceCanAccessPeer` a -> b and b -> a.
    pub can_access: bool,
    /// a -> b copies, GB/s (1e9 bytes/s).
    pub uni_gbps: Option<f64>,
    /// b -> a copies, GB/s.
    pub uni_back_gbps: Option<f64>,
    /// a -> b and b -> a at once, both directions together, GB/s.
    pub bidi_gbps: Option<f64>,
    /// 4-byte copies a -> b, back to back, host-timed, microseconds per copy.
    pub latency_us: Option<f64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct P2pOutput {
    pub gpus: Vec<(i32, String)>,
    pub size_bytes: u64,
    pub reps: u32,
    pub pairs: Vec<P2pPair>,
    /// Device-to-device copies inside GPU 0: the ceiling of a copy on this GPU.
    pub reference: Option<P2pPair>,
    /// Every GPU's links as NVML reported them in the worker (the carried facts the
    /// theoretical rate comes from; absent in reports of older versions).
    #[serde(default)]
    pub links: Vec<GpuLinks>,
    /// Why the links could not be read (no NVML).
    #[serde(default)]
    pub links_error: Option<String>,
    /// Every ordered pair copying at once (two or more GPUs with peer access).
    #[serde(default)]
    pub all_at_once: Option<AllAtOnce>,
}

/// One GPU's links, from NVML and CUDA in the worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuLinks {
    pub bdf: String,
    /// CUDA compute capability, major: the NVLink generation by architecture.
    pub cc_major: Option<i32>,
    /// Active NVLinks that end at an NVSwitch.
    pub nvlinks_switch: usize,
    /// Active NVLinks straight to another GPU: (its PCI address, count).
    pub nvlinks_to: Vec<(String, usize)>,
    /// `nvmlDeviceGetNvLinkVersion` of the first active link (the raw code).
    pub nvlink_version: Option<u32>,
    /// NVML's common speed of the active links, MB/s (`NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON`).
    pub nvlink_speed_mbps: Option<u64>,
    /// The PCIe link's capability (NVML max generation and width).
    pub pcie_gen_max: Option<u32>,
    pub pcie_width_max: Option<u32>,
}

/// Every ordered GPU pair copying at the same time, one stream per pair.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllAtOnce {
    /// (from, to, GB/s): each pair's bytes over the time until its own stream finished.
    pub pairs: Vec<(i32, i32, f64)>,
    /// All bytes over the time until the last stream finished, GB/s.
    pub total_gbps: f64,
    pub error: Option<String>,
}

/// What the report keeps of a p2p run (`probe.p2p`).
pub type Record = WorkerRecord<Params, P2pOutput>;

/// The validated plan.
#[derive(Debug, Clone)]
pub struct P2p {
    pub params: Params,
    pub deadline: Duration,
}

/// Build the plan from the command line; `None` without `--p2p`.
pub fn plan(m: &clap::ArgMatches, c: &CommonArgs) -> Result<Option<Box<dyn Plan>>, String> {
    let a: Args = args::own(m)?;
    if !a.p2p {
        return Ok(None);
    }
    let gpus = match (c.gpu, c.peer) {
        (Some(a), Some(b)) if a == b => {
            return Err("--p2p with --gpu and --peer needs two different gpus".into())
        }
        (Some(a), Some(b)) => Some(vec![a as i32, b as i32]),
        (None, None) => None,
        _ => {
            return Err("--p2p measures every pair; give both --gpu and --peer for one pair".into())
        }
    };
    Ok(Some(Box::new(P2p {
        params: Params {
            gpus,
            size_mib: a.p2p_size,
            reps: c.repeat.max(20),
        },
        deadline: Duration::from_secs(c.timeout),
    })))
}

impl Plan for P2p {
    fn execute(&self, node: &Node) -> Ran {
        if let Some(f) = common::no_gpu(node) {
            return Ran::findings(vec![f]);
        }
        let r = Record::run("p2p", self.params.clone(), self.deadline, false);
        Ran {
            findings: verdict::record_findings(node, &r),
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
pub fn replay(node: &Node, v: &serde_json::Value) -> Result<Vec<Finding>, String> {
    let r: Record = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(verdict::record_findings(node, &r))
}
