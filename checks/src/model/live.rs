//! What only a live call can see, one library each: NVML, the CUDA driver, libibverbs, and
//! the NCCL libraries on the node (read from their files).

use super::fact::{Fact, DAMAGED};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Facts only a live call can see, one per library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveFacts {
    pub nvml: Fact<NvmlFacts>,
    pub cuda: Fact<CudaFacts>,
    pub verbs: Fact<VerbsFacts>,
    /// The NCCL libraries on the node and their versions (read from the files, nothing
    /// initialised), or `--nccl-version`.
    #[serde(default = "nccl_not_recorded")]
    pub nccl: Fact<NcclFacts>,
}

fn nccl_not_recorded() -> Fact<NcclFacts> {
    Fact::absent("libnccl.so.2", "not recorded in this snapshot")
}

/// The start of `live.cuda`'s source when the CUDA answers came from gdrdoctor's cache (CUDA
/// asked earlier in the same boot, same driver, same GPUs) rather than from CUDA in this run.
pub const CUDA_CACHE_SOURCE_PREFIX: &str = "cache ";

impl LiveFacts {
    /// The evidence source of a CUDA answer of `call`: the call, and the cache when the answer
    /// came from it.
    pub fn cuda_evidence(&self, call: &str) -> String {
        let s = self.cuda.source();
        if s.starts_with(CUDA_CACHE_SOURCE_PREFIX) {
            format!("{call} via {s}")
        } else {
            call.to_string()
        }
    }

    /// Every live fact absent because its record is damaged (`reason` names the file and what
    /// is wrong with it).
    pub fn damaged(reason: &str) -> Self {
        LiveFacts::absent(&format!("{DAMAGED}{reason}"))
    }

    pub fn absent(reason: &str) -> Self {
        LiveFacts {
            nvml: Fact::absent("libnvidia-ml.so.1", reason),
            cuda: Fact::absent("libcuda.so.1", reason),
            verbs: Fact::absent("libibverbs.so.1", reason),
            nccl: Fact::absent("libnccl.so.2", reason),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlFacts {
    pub driver_version: Option<String>,
    /// `nvmlSystemGetCudaDriverVersion`, e.g. 13000.
    pub cuda_driver_version: Option<i32>,
    pub nvml_version: Option<String>,
    pub gpus: Vec<NvmlGpu>,
    /// Every GPU pair (a < b in NVML order): topology and P2P status.
    #[serde(default)]
    pub pairs: Vec<NvmlPair>,
    /// GPUs whose entries were set aside as damaged (PCI address -> why: listed more than
    /// once in the record, see [`NvmlFacts::set_aside_duplicates`]); never written.
    #[serde(skip)]
    pub damaged: BTreeMap<String, String>,
}

impl NvmlFacts {
    /// This GPU's entry.
    pub fn gpu(&self, bdf: &str) -> Option<&NvmlGpu> {
        self.gpus.iter().find(|g| g.bdf == bdf)
    }

    /// Why this GPU has no entry: the damage that set it aside, or NVML not listing it.
    pub fn why_missing(&self, bdf: &str) -> String {
        self.damaged
            .get(bdf)
            .cloned()
            .unwrap_or_else(|| "nvml does not list this gpu".to_string())
    }

    /// A record (`record`: the file, `gdrdoctor/live.json`) that lists one GPU more than once
    /// says two things of it, and which one holds is not known: every entry of such a GPU is
    /// set aside (as are its pairs), and [`NvmlFacts::damaged`] says why, so no check judges it
    /// on whichever entry comes first.
    pub fn set_aside_duplicates(&mut self, record: &str) {
        let dup = set_aside(&mut self.gpus, |g| &g.bdf, "nvml", record);
        self.pairs
            .retain(|p| !dup.contains_key(&p.a) && !dup.contains_key(&p.b));
        self.damaged.extend(dup);
    }
}

/// Take every entry of a PCI address listed more than once out of `list`; the addresses with
/// the reason (`damaged: <record>: <library> lists <bdf> N times`).
fn set_aside<T>(
    list: &mut Vec<T>,
    bdf: impl Fn(&T) -> &String,
    library: &str,
    record: &str,
) -> BTreeMap<String, String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for x in list.iter() {
        *count.entry(bdf(x).clone()).or_default() += 1;
    }
    count.retain(|_, n| *n > 1);
    list.retain(|x| !count.contains_key(bdf(x)));
    count
        .into_iter()
        .map(|(b, n)| {
            let why = format!(
                "{DAMAGED}{record}: {library}'s answer lists {b} {n} times: which entry holds is not known"
            );
            (b, why)
        })
        .collect()
}

/// One GPU pair as NVML sees it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlPair {
    pub a: String,
    pub b: String,
    /// `nvmlDeviceGetTopologyCommonAncestor`: `internal`, `single` (one PCIe switch), `multiple`
    /// (several switches), `hostbridge`, `node` (same NUMA node), `system` (across sockets).
    pub common_ancestor: Option<String>,
    /// `nvmlDeviceGetP2PStatus` per capability (`read`, `write`, `nvlink`, `atomics`, `prop`):
    /// `ok`, `chipset-not-supported`, `gpu-not-supported`, `ioh-topology-not-supported`,
    /// `disabled-by-regkey`, `not-supported`, `unknown`.
    pub p2p: BTreeMap<String, String>,
    #[serde(default)]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NvmlGpu {
    /// PCI address, lower case, 4-digit domain (`0000:00:06.0`).
    pub bdf: String,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub memory_total: Option<u64>,
    pub bar1_total: Option<u64>,
    pub bar1_used: Option<u64>,
    pub pcie_gen_current: Option<u32>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_width_current: Option<u32>,
    pub pcie_width_max: Option<u32>,
    pub persistence_mode: Option<bool>,
    pub ecc_enabled: Option<bool>,
    pub retired_pages_pending: Option<bool>,
    pub remapped_rows: Option<RemappedRows>,
    pub nvlinks: Vec<NvLink>,
    /// `nvmlDeviceGetPcieReplayCounter`: PCIe data-link replays of this GPU since the driver
    /// loaded.
    #[serde(default)]
    pub pcie_replay_counter: Option<u64>,
    /// `nvmlDeviceGetComputeMode`: `default`, `exclusive-process`, `exclusive-thread` or
    /// `prohibited`. gdrdoctor does not start CUDA on a GPU in one of the last three (a job may
    /// hold it).
    #[serde(default)]
    pub compute_mode: Option<String>,
    /// `nvmlDeviceGetCudaComputeCapability` (the same numbers CUDA reports, without CUDA).
    #[serde(default)]
    pub cc_major: Option<i32>,
    #[serde(default)]
    pub cc_minor: Option<i32>,
    /// Calls that failed, with NVML's error (`nvmlDeviceGetRemappedRows: Not Supported`).
    pub errors: Vec<String>,
    /// `nvmlDeviceGetGpuFabricInfoV` (or the older `nvmlDeviceGetGpuFabricInfo`): the GPU's
    /// place in an NVSwitch fabric, as Fabric Manager left it (issue 39). `None`: not asked
    /// (an older snapshot) or the call is missing (the reason is in `errors`).
    #[serde(default)]
    pub fabric: Option<GpuFabric>,
}

/// A GPU's NVLink fabric registration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GpuFabric {
    /// `not-supported`, `not-started`, `in-progress`, `completed` (`nvmlGpuFabricState_t`), or
    /// `unknown (N)`.
    pub state: String,
    /// The registration's result, an `nvmlReturn_t` name (`success`, `NVML_ERROR_...`).
    pub status: String,
    pub clique_id: u32,
    /// The fabric's cluster UUID, hex.
    pub cluster_uuid: String,
    /// `healthMask` (v2 and later), raw.
    #[serde(default)]
    pub health_mask: Option<u32>,
    /// Which call answered.
    pub call: String,
}

impl GpuFabric {
    /// `nvmlGpuFabricState_t` as [`GpuFabric::state`] writes it.
    pub fn state_name(code: u8) -> String {
        match code {
            0 => "not-supported".into(),
            1 => "not-started".into(),
            2 => "in-progress".into(),
            3 => "completed".into(),
            n => format!("unknown ({n})"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NvLink {
    pub link: u32,
    pub active: bool,
    pub remote_bdf: Option<String>,
    /// `nvmlDeviceGetNvLinkRemoteDeviceType`: `gpu`, `switch`, `ibmnpu`, `unknown`.
    #[serde(default)]
    pub remote_type: Option<String>,
    /// `nvmlDeviceGetNvLinkVersion`, the raw `nvmlNvlinkVersion_t` code: 1 = 1.0, 2 = 2.0,
    /// 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0 (H100/H200), 7 = 5.0 (B200).
    #[serde(default)]
    pub version: Option<u32>,
    /// `nvmlDeviceGetNvLinkErrorCounter`: data-link replays, recoveries (link retrains), and
    /// CRC errors in flits and in data; since the driver loaded. `None` where not supported.
    #[serde(default)]
    pub replay_errors: Option<u64>,
    #[serde(default)]
    pub recovery_errors: Option<u64>,
    #[serde(default)]
    pub crc_flit_errors: Option<u64>,
    #[serde(default)]
    pub crc_data_errors: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaFacts {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    pub devices: Vec<CudaDevice>,
    /// The library file that was loaded (from /proc/self/maps), to spot toolkit stubs.
    #[schemars(extend("x-required" = true))]
    pub library: Option<String>,
    /// Every ordered GPU pair: `cuDeviceCanAccessPeer` and `cuDeviceGetP2PAttribute`.
    #[serde(default)]
    pub peers: Vec<CudaPeer>,
    /// GPUs CUDA was deliberately not started on (PCI address -> why: the compute mode says a
    /// job may hold it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_asked: BTreeMap<String, String>,
    /// GPUs whose entries were set aside as damaged (PCI address -> why: listed more than
    /// once in the record, see [`CudaFacts::set_aside_duplicates`]); never written.
    #[serde(skip)]
    #[schemars(skip)]
    pub damaged: BTreeMap<String, String>,
}

impl CudaFacts {
    /// This GPU's device.
    pub fn device(&self, bdf: &str) -> Option<&CudaDevice> {
        self.devices.iter().find(|d| d.bdf == bdf)
    }

    /// [`NvmlFacts::set_aside_duplicates`] for CUDA's devices (and their peer pairs).
    pub fn set_aside_duplicates(&mut self, record: &str) {
        let dup = set_aside(&mut self.devices, |d| &d.bdf, "cuda", record);
        self.peers
            .retain(|p| !dup.contains_key(&p.a_bdf) && !dup.contains_key(&p.b_bdf));
        self.damaged.extend(dup);
    }
}

/// Peer access from `a` to `b` (CUDA ordinals; PCI addresses beside them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaPeer {
    pub a: i32,
    pub b: i32,
    pub a_bdf: String,
    pub b_bdf: String,
    /// `cuDeviceCanAccessPeer`.
    #[schemars(extend("x-required" = true))]
    pub can_access: Option<bool>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK` (0 is best).
    #[schemars(extend("x-required" = true))]
    pub performance_rank: Option<i32>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`.
    #[schemars(extend("x-required" = true))]
    pub native_atomic: Option<bool>,
    #[schemars(extend("x-required" = true))]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaDevice {
    pub ordinal: i32,
    pub bdf: String,
    pub name: String,
    pub cc_major: i32,
    pub cc_minor: i32,
    pub multiprocessors: i32,
    /// Attribute values, `None` where the driver does not know the attribute.
    #[schemars(extend("x-required" = true))]
    pub gpu_direct_rdma_supported: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub gpu_direct_rdma_flush_writes_options: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub gpu_direct_rdma_writes_ordering: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub gpu_direct_rdma_with_cuda_vmm_supported: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub dma_buf_supported: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub host_register_supported: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub can_use_host_pointer_for_registered_mem: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub virtual_memory_management_supported: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub total_memory: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VerbsFacts {
    /// `ibv_reg_dmabuf_mr@IBVERBS_1.12` exported (rdma-core >= 34).
    pub has_reg_dmabuf_mr: bool,
    /// Devices `ibv_get_device_list` returned (or the errno it failed with).
    pub devices: Vec<String>,
    pub list_errno: Option<i32>,
    /// NCCL's dma-buf probe per device: `ibv_reg_dmabuf_mr(fd=-1)` errno; 95/93 mean unsupported.
    pub dmabuf_probe: BTreeMap<String, Option<i32>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NcclLibrary {
    /// The file as found (symlinks not resolved), e.g. `/usr/lib/x86_64-linux-gnu/libnccl.so.2`.
    pub path: String,
    /// `2.28.9`, when it could be read.
    pub version: Option<String>,
    /// How the version was read: `version string in the file`, `file name`, `ncclGetVersion`.
    pub how: Option<String>,
    /// Where it was found: `loader path (LD_LIBRARY_PATH)`, `ld.so.cache`, `python wheel
    /// (nvidia-nccl)`, ...
    pub origin: String,
    /// Why the version could not be read.
    #[serde(default)]
    pub error: Option<String>,
}

/// What gdrdoctor knows about NCCL on the node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NcclFacts {
    /// Every NCCL found, in the order a process would load it: the loader's search (
    /// `LD_LIBRARY_PATH`, `ld.so.cache`, the default directories), then Python environments.
    pub libraries: Vec<NcclLibrary>,
    /// Where gdrdoctor looked, for a "not found" message.
    #[serde(default)]
    pub searched: Vec<String>,
    /// `--nccl-version`, when given: it wins over what was found.
    #[serde(default)]
    pub requested: Option<String>,
}
