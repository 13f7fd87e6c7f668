//! The rule's inputs (what a node, a paste or NCCL's dump tells about the machine: [`System`],
//! the rules and environment to apply: [`Config`]) and its answer ([`Decision`]).

use crate::nccl::env::NcclEnv;
use crate::nccl::version::{Chosen, PathKind};
use serde::{Deserialize, Serialize};

/// One GPU as the rule sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpu {
    /// How messages name it (`0000:18:00.0`, `GPU3`).
    pub id: String,
    /// CUDA compute capability (major, minor), and where it came from.
    pub cc: Option<(i32, i32)>,
    pub cc_source: String,
    /// Attached to its CPU over NVLink-C2C (Grace Hopper / Grace Blackwell), and how we know.
    pub c2c: Option<bool>,
    pub c2c_source: String,
}

/// One RDMA device (an `ibv` device, as NCCL lists them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Nic {
    pub name: String,
    /// (port number, ACTIVE); `None` when the ports are not known.
    pub ports: Option<Vec<(u32, bool)>>,
}

/// Whether NCCL can register this GPU's memory with this NIC (ground truth §1 steps 1-4),
/// as the caller could tell. `None` = unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Support {
    /// A peer-memory client (NCCL_PTR_CUDA).
    pub peermem: Option<bool>,
    /// dma-buf for this GPU and NIC (kernel, driver, libibverbs, NIC probe, CUDA attribute).
    pub dmabuf: Option<bool>,
    /// CUDA GPU_DIRECT_RDMA_SUPPORTED for the GPU.
    pub gpu: Option<bool>,
    /// NCCL's own NIC-level answer when a log shows it (`NET/IB : GPU Direct RDMA
    /// Enabled|Disabled for HCA n 'mlx5_0'`: a peer-memory client or dma-buf for the NIC,
    /// src/graph/topo.cc v2.30.7-1 L1651-1654; 2.7-2.12 print only `Disabled .. (no module)`,
    /// src/transport/net_ib.cc v2.12.12-1 L290). It wins over what the other facts suggest.
    pub nic_logged: Option<bool>,
    /// The reason text when both paths are off (`NIC-level GDR off ...`), when the GPU says
    /// no, and when support cannot be told (one line per missing fact).
    pub nic_off: String,
    /// Why there is no peer-memory client, when there is none (empty: the generic words).
    pub peermem_off: String,
    pub gpu_off: String,
    pub unknown: Vec<String>,
    /// Live facts assumed.
    pub assumptions: Vec<String>,
    /// Facts that were recorded but cannot be read (a snapshot's damaged `live.json`): what
    /// they held is not assumed, so a pair that would use GDR is undecided instead.
    pub damaged: Vec<String>,
}

impl Support {
    /// Everything assumed to work (a pasted matrix says nothing about drivers).
    pub fn assumed(why: &str) -> Support {
        Support {
            peermem: Some(true),
            dmabuf: None,
            gpu: None,
            assumptions: vec![why.to_string()],
            ..Default::default()
        }
    }
}

/// The machine: GPUs, NICs and how they connect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct System {
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    /// `[gpu][nic]`: the PCIe path type (PIX, PXB, PHB, SYS; `None`: unknown).
    pub paths: Vec<Vec<Option<PathKind>>>,
    /// Why a `None` path is unknown, with what would show it (a pasted matrix: `matrix cell not
    /// in the paste; paste `nvidia-smi topo -m``); empty: the NIC's PCI location is unknown.
    pub path_hint: String,
    /// `[gpu][nic]`: nvidia-smi's name of the same path (`NODE` is NCCL's PHB), for 2.4's
    /// NODE distance and for display.
    pub smi: Vec<Vec<Option<String>>>,
    /// `[gpu][gpu]`: an NVLink path between the two GPUs (direct or through NVSwitch).
    pub nvlink: Vec<Vec<Option<bool>>>,
    /// Where the NVLink facts came from (`NVML`, `NV# cells of the pasted matrix`, ...).
    pub nvlink_source: String,
    /// `[gpu][gpu]`: the PCIe path between two GPUs, for NCCL_P2P_LEVEL.
    pub gpu_paths: Vec<Vec<Option<PathKind>>>,
    /// `[gpu][nic]`.
    pub support: Vec<Vec<Support>>,
    /// NCCL's P2P default is SYS on AMD x86 CPUs with at most two GPUs (src/graph/paths.cc
    /// v2.30.7-1 L351-354).
    pub amd_two_gpus: bool,
    /// The CPU vendor, for NCCL 2.6-2.22's P2P default (SYS but on Intel and ARM CPUs);
    /// `None` when the evidence does not say.
    pub cpu: Option<crate::model::CpuVendor>,
}

/// The verdict for one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Direction {
    pub gdr: bool,
    /// Why not (empty when `gdr`).
    pub reasons: Vec<String>,
    /// NCCL would map with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (`/GDRDMA(PCI)`).
    pub pci_mode: bool,
    /// The answer depends on an unknown input (the reason is in `reasons`).
    pub undecided: bool,
}

/// The verdict for one GPU x NIC pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub gpu: usize,
    pub nic: usize,
    /// The PCIe path of the pair itself.
    pub pcie: Option<PathKind>,
    /// NCCL's path after its rewrites: `P2C` (the GPU's own Grace), `PXN` (through `via`).
    pub path: Option<PathKind>,
    /// The NVLink peer GPU that proxies sends to this NIC (PXN).
    pub via: Option<usize>,
    /// The pair's own path (P2C counted, PXN not) is within the threshold: NCCL's distance
    /// step alone. `None`: the path is unknown.
    pub within: Option<bool>,
    pub send: Direction,
    pub receive: Direction,
    /// `dmabuf` or `peermem` when some direction uses GDR.
    pub mechanism: Option<&'static str>,
    /// NCCL lists this NIC (an ACTIVE port, not excluded by NCCL_IB_HCA, IB not disabled).
    pub used: bool,
    /// The answer depends on something unknown (the reasons).
    pub undecided: Vec<String>,
    /// How the answer came about, beyond the reasons (PXN, P2C, forced reads, ...).
    pub notes: Vec<String>,
    pub assumptions: Vec<String>,
}

impl Verdict {
    /// GDR in at least one direction.
    pub fn enabled(&self) -> bool {
        self.send.gdr || self.receive.gdr
    }
}

/// NCCL's P2P decision for one GPU pair (`ncclTopoCheckP2p()`, distance part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuP2p {
    pub a: usize,
    pub b: usize,
    /// NVL over NVLink, else the PCIe path.
    pub path: Option<PathKind>,
    pub p2p: Option<bool>,
    pub reason: String,
}

/// Everything [`decide`] concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub rules: Chosen,
    /// The threshold as NCCL holds it (`PXB`, `P2C`, `PHB`...).
    pub threshold: String,
    /// Where it came from (`NCCL_NET_GDR_LEVEL=PHB from environment`, `NCCL 2.30's default`).
    pub threshold_source: String,
    pub verdicts: Vec<Verdict>,
    pub p2p: Vec<GpuP2p>,
    /// Node-wide remarks: ignored variables, PXN disabled, NCCL_P2P_PXN_LEVEL=0, ...
    pub notes: Vec<String>,
}

impl Decision {
    pub fn pair(&self, g: usize, n: usize) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.gpu == g && v.nic == n)
    }
    /// `PXB (NCCL's default...)`, for messages.
    pub fn threshold_text(&self) -> String {
        format!("{} ({})", self.threshold, self.threshold_source)
    }
}

/// The rules and the environment to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rules: Chosen,
    pub env: NcclEnv,
}

/// [`Verdict::mechanism`] when NCCL's log says the NIC supports GDR but nothing shows whether
/// through a peer-memory client or dma-buf.
pub const MECHANISM_LOGGED: &str = "peermem or dmabuf";
