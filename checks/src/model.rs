//! The Node model: everything the collectors learned about one node, as plain data.
//!
//! Every field that comes from the system is a [`Fact`]: either a value with the path (or call) it
//! came from, or an absence with the reason it could not be read. A missing file is never a
//! default value: checks that need an absent fact report `error` or `skip`, never `pass`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One fact about the node, with its provenance.
///
/// Serialized as an internally tagged object (`{"state": "known", "value": .., "source": ..}`,
/// `{"state": "absent", "source": .., "reason": ..}`). Read by [`FactRepr`], not by serde's
/// derive for internally tagged enums, which buffers every fact's whole value (a snapshot's
/// `live.json`, a report) in an intermediate tree before reading it: one pass instead, with the
/// same rules (the `state` required and one of the two, each state's fields required, other
/// fields ignored). One difference, on purpose: a field of the other state that does not have
/// its type (an absent fact's `value` its type cannot hold, a known fact's `reason` that is
/// not a string) makes the fact damaged, where the derive ignored it. Objects only: the array
/// form serde also accepted for a derived enum is never written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Fact<T> {
    /// The value, and where it was read (`/proc/cmdline`, `getrlimit(RLIMIT_MEMLOCK)`, ...).
    Known { value: T, source: String },
    /// Could not be read: `source` says where we looked, `reason` why it failed.
    Absent { source: String, reason: String },
}

/// The wire form of a [`Fact`], read field by field in whatever order they come.
#[derive(Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
struct FactRepr<T> {
    state: FactState,
    /// Present (even as `null`, a known `None` of an optional value) or not.
    #[serde(default, deserialize_with = "present")]
    value: Option<T>,
    source: Option<String>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum FactState {
    Known,
    Absent,
}

fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Fact<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let r = FactRepr::<T>::deserialize(d)?;
        let source = r.source.ok_or_else(|| D::Error::missing_field("source"))?;
        match r.state {
            FactState::Known => Ok(Fact::Known {
                value: match r.value {
                    Some(v) => v,
                    // As the derive does: an optional value left out is `None`, anything
                    // else is a missing field.
                    None => T::deserialize(MissingValue(std::marker::PhantomData::<D::Error>))?,
                },
                source,
            }),
            FactState::Absent => Ok(Fact::Absent {
                source,
                reason: r.reason.ok_or_else(|| D::Error::missing_field("reason"))?,
            }),
        }
    }
}

/// A known fact's `value` that is not there: `None` to an `Option`, a missing field to any
/// other type (serde's rule for a derived struct's missing field).
struct MissingValue<E>(std::marker::PhantomData<E>);

impl<'de, E: serde::de::Error> serde::Deserializer<'de> for MissingValue<E> {
    type Error = E;
    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, E> {
        Err(E::missing_field("value"))
    }
    fn deserialize_option<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, E> {
        v.visit_none()
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<T> Fact<T> {
    pub fn known(value: T, source: impl Into<String>) -> Self {
        Fact::Known {
            value,
            source: source.into(),
        }
    }
    pub fn absent(source: impl Into<String>, reason: impl Into<String>) -> Self {
        Fact::Absent {
            source: source.into(),
            reason: reason.into(),
        }
    }
    pub fn get(&self) -> Option<&T> {
        match self {
            Fact::Known { value, .. } => Some(value),
            Fact::Absent { .. } => None,
        }
    }
    pub fn source(&self) -> &str {
        match self {
            Fact::Known { source, .. } | Fact::Absent { source, .. } => source,
        }
    }
    /// The reason the fact is absent, or `None` when it is known.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Fact::Known { .. } => None,
            Fact::Absent { reason, .. } => Some(reason),
        }
    }
    pub fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Fact<U> {
        match self {
            Fact::Known { value, source } => Fact::Known {
                value: f(value),
                source: source.clone(),
            },
            Fact::Absent { source, reason } => Fact::Absent {
                source: source.clone(),
                reason: reason.clone(),
            },
        }
    }
    /// Human text for evidence: the value via `show`, or `unknown (<reason>)`.
    pub fn describe(&self, show: impl FnOnce(&T) -> String) -> String {
        match self {
            Fact::Known { value, .. } => show(value),
            Fact::Absent { reason, .. } => format!("unknown ({reason})"),
        }
    }
}

/// Where the node's facts came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Live,
    Sysroot,
    /// The host's `/` mounted into a container (`--host-root DIR`, a Kubernetes DaemonSet): the
    /// live host seen through a mount; the container's own process facts are not the host's.
    #[serde(rename = "host-root")]
    HostRoot,
    /// Pasted command output (`gdrdoctor diagnose`): facts cite the paste block they came from.
    Evidence,
}

/// Everything the collectors know about one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub source: SourceKind,
    /// `/` for live runs, the sysroot directory otherwise.
    pub root: String,
    pub hostname: Fact<String>,
    pub kernel_release: Fact<String>,
    /// `uname -m` (live) or the snapshot metadata.
    pub arch: Fact<String>,
    pub cpu_vendor: Fact<CpuVendor>,
    pub modules: Modules,
    pub cmdline: Fact<Vec<String>>,
    pub hugepages: Fact<HugePages>,
    pub memlock: Fact<Rlimit>,
    pub euid: Fact<u32>,
    /// GPU/NIC-relevant environment variables (`NCCL_*`, `NVSHMEM_*`, `CUDA_*`) the tool ran with.
    pub env: Fact<BTreeMap<String, String>>,
    pub iommu: Iommu,
    pub nvidia: NvidiaDriver,
    pub peermem: PeerMem,
    pub pci: Fact<Vec<PciDevice>>,
    pub rdma: Fact<Vec<RdmaDevice>>,
    /// What the live libraries say (NVML, the CUDA driver API, libibverbs), queried in a worker
    /// process; in a snapshot, `gdrdoctor/live.json`.
    pub live: LiveFacts,
    /// RoCE addressing, error counters and kernel events (issue 17).
    pub health: Health,
}

impl Node {
    /// The GPUs that the driver's own directory, NVML and CUDA list, by normalised BDF, with who
    /// lists each.
    pub fn gpus_listed_elsewhere(&self) -> BTreeMap<String, Vec<&'static str>> {
        let mut listed: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
        if let Some(m) = self.nvidia.gpus.get() {
            for b in m.keys() {
                listed
                    .entry(norm_bdf(b))
                    .or_default()
                    .push("/proc/driver/nvidia/gpus");
            }
        }
        if let Some(n) = self.live.nvml.get() {
            for g in &n.gpus {
                listed.entry(norm_bdf(&g.bdf)).or_default().push("nvml");
            }
        }
        if let Some(c) = self.live.cuda.get() {
            for g in &c.devices {
                listed.entry(norm_bdf(&g.bdf)).or_default().push("cuda");
            }
        }
        listed.remove("");
        listed
    }

    /// Functions that may be NVIDIA GPUs the bus scan does not count as such: ids that cannot be
    /// read (`PciDevice::identity_unreadable`), and GPUs listed elsewhere
    /// (`gpus_listed_elsewhere`) that the scan does not show as NVIDIA GPUs. A node-wide verdict
    /// over "all the GPUs" cannot pass while this is not empty.
    pub fn gpus_unaccounted(&self) -> Vec<String> {
        let pci = self.pci.get().map(Vec::as_slice).unwrap_or_default();
        let mut out: Vec<String> = pci
            .iter()
            .filter(|d| d.identity_unreadable())
            .map(|d| d.bdf.clone())
            .collect();
        for bdf in self.gpus_listed_elsewhere().into_keys() {
            if !out.contains(&bdf) && !pci.iter().any(|d| d.bdf == bdf && d.is_nvidia_gpu()) {
                out.push(bdf);
            }
        }
        out
    }
}

/// A PCI address as the bus scan writes it (`0000:18:00.0`), from any spelling the libraries
/// use (NVML writes `00000000:18:00.0`).
pub fn norm_bdf(b: &str) -> String {
    let b = b.trim().to_lowercase();
    match b.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 && dom.bytes().all(|c| c == b'0') => {
            format!("0000:{rest}")
        }
        _ => b,
    }
}

/// Facts only a live call can see, one per library.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveFacts {
    pub nvml: Fact<NvmlFacts>,
    pub cuda: Fact<CudaFacts>,
    pub verbs: Fact<VerbsFacts>,
    /// The NCCL libraries on the node and their versions (read from the files, nothing
    /// initialised), or `--nccl-version`.
    #[serde(default = "nccl_not_recorded")]
    pub nccl: Fact<crate::nccl::NcclFacts>,
}

fn nccl_not_recorded() -> Fact<crate::nccl::NcclFacts> {
    Fact::absent("libnccl.so.2", "not recorded in this snapshot")
}

/// The start of `live.cuda`'s source when the CUDA answers came from gdrdoctor's cache (CUDA
/// asked earlier in the same boot, same driver, same GPUs) rather than from CUDA in this run.
pub const CUDA_CACHE_SOURCE_PREFIX: &str = "cache ";

/// How the reason of an absent live fact starts when its record exists but cannot be used (a
/// corrupt or unreadable `gdrdoctor/live.json`). Unlike "not in this snapshot" (a `skip`),
/// damaged evidence is an `error`.
pub const DAMAGED: &str = "damaged: ";

/// Whether an absence reason says the evidence was there but damaged (see [`DAMAGED`]).
pub fn is_damaged(reason: &str) -> bool {
    reason.starts_with(DAMAGED)
}

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

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CudaFacts {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub driver_version: i32,
    pub devices: Vec<CudaDevice>,
    /// The library file that was loaded (from /proc/self/maps), to spot toolkit stubs.
    pub library: Option<String>,
    /// Every ordered GPU pair: `cuDeviceCanAccessPeer` and `cuDeviceGetP2PAttribute`.
    #[serde(default)]
    pub peers: Vec<CudaPeer>,
    /// GPUs CUDA was deliberately not started on (PCI address -> why: the compute mode says a
    /// job may hold it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_asked: BTreeMap<String, String>,
}

/// Peer access from `a` to `b` (CUDA ordinals; PCI addresses beside them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CudaPeer {
    pub a: i32,
    pub b: i32,
    pub a_bdf: String,
    pub b_bdf: String,
    /// `cuDeviceCanAccessPeer`.
    pub can_access: Option<bool>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK` (0 is best).
    pub performance_rank: Option<i32>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`.
    pub native_atomic: Option<bool>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CudaDevice {
    pub ordinal: i32,
    pub bdf: String,
    pub name: String,
    pub cc_major: i32,
    pub cc_minor: i32,
    pub multiprocessors: i32,
    /// Attribute values, `None` where the driver does not know the attribute.
    pub gpu_direct_rdma_supported: Option<i32>,
    pub gpu_direct_rdma_flush_writes_options: Option<i32>,
    pub gpu_direct_rdma_writes_ordering: Option<i32>,
    pub gpu_direct_rdma_with_cuda_vmm_supported: Option<i32>,
    pub dma_buf_supported: Option<i32>,
    pub host_register_supported: Option<i32>,
    pub can_use_host_pointer_for_registered_mem: Option<i32>,
    pub virtual_memory_management_supported: Option<i32>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuVendor {
    Intel,
    Amd,
    Arm,
    Power,
    Other,
}

/// Kernel modules, from `/proc/modules` and `/sys/module`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Modules {
    /// `/proc/modules`: loadable modules currently loaded, name -> users.
    pub proc_modules: Fact<BTreeMap<String, LoadedModule>>,
    /// Names under `/sys/module` (loaded modules and built-ins that have parameters or a version).
    pub sys_module: Fact<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedModule {
    pub state: String,
    pub used_by: Vec<String>,
}

/// Whether a module is present, and how we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleState {
    /// Listed in `/proc/modules`.
    Loaded,
    /// Only in `/sys/module` (built into the kernel, or `/proc/modules` unreadable).
    SysModule,
    NotLoaded,
    /// Neither source could be read.
    Unknown,
}

impl Modules {
    pub fn state(&self, name: &str) -> ModuleState {
        let in_proc = self.proc_modules.get().map(|m| m.contains_key(name));
        let in_sys = self.sys_module.get().map(|m| m.iter().any(|n| n == name));
        match (in_proc, in_sys) {
            (Some(true), _) => ModuleState::Loaded,
            (_, Some(true)) => ModuleState::SysModule,
            (Some(false), _) | (_, Some(false)) => ModuleState::NotLoaded,
            (None, None) => ModuleState::Unknown,
        }
    }
    pub fn present(&self, name: &str) -> Option<bool> {
        match self.state(name) {
            ModuleState::Loaded | ModuleState::SysModule => Some(true),
            ModuleState::NotLoaded => Some(false),
            ModuleState::Unknown => None,
        }
    }
    /// The path a check should cite as evidence for a module's presence.
    pub fn source(&self) -> String {
        match (&self.proc_modules, &self.sys_module) {
            (Fact::Known { .. }, Fact::Known { .. }) => "/proc/modules, /sys/module".into(),
            (Fact::Known { .. }, _) => "/proc/modules".into(),
            (_, Fact::Known { .. }) => "/sys/module".into(),
            _ => "/proc/modules, /sys/module (both unreadable)".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HugePages {
    pub total: u64,
    pub free: u64,
    pub size_kib: u64,
}

/// A resource limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Rlimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Iommu {
    /// Entries of `/sys/class/iommu` (dmar0, ivhd0, smmu3.0x...).
    pub classes: Fact<Vec<String>>,
    /// `/sys/kernel/iommu_groups/*`.
    pub groups: Fact<Vec<IommuGroup>>,
    /// The last line of the kernel log saying `iommu: Default domain type: ...`, if the node
    /// has it in a readable place. Live-only; absent in most snapshots.
    pub default_domain: Fact<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IommuGroup {
    pub id: String,
    /// `identity`, `DMA`, `DMA-FQ`, `unmanaged`, `blocked`; absent on kernels before 5.11.
    pub kind: Fact<String>,
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Open,
    Proprietary,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvidiaDriver {
    /// `/proc/driver/nvidia/version`: `None` inside `Known` means the file does not exist
    /// (driver not loaded).
    pub version_file: Fact<Option<String>>,
    /// `/proc/driver/nvidia/params`, key -> value (quotes kept as written).
    pub params: Fact<BTreeMap<String, String>>,
    /// `/proc/driver/nvidia/gpus/*/information`, one map per GPU directory name (its BDF).
    pub gpus: Fact<BTreeMap<String, BTreeMap<String, String>>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerMem {
    /// Contents of the three files NCCL tests (`access(F_OK)`), `None` when the file does not exist.
    pub nv_mem_version: Fact<Option<String>>,
    pub nv_mem_nc_version: Fact<Option<String>>,
    pub nvidia_peermem_version: Fact<Option<String>>,
    /// `/sys/module/nv_peer_mem` exists (legacy Mellanox module).
    pub nv_peer_mem: Fact<bool>,
    /// Entries of `/sys/kernel/mm/memory_peers`; `None` when the directory does not exist.
    pub memory_peers: Fact<Option<Vec<String>>>,
    /// `/sys/module/nvidia_peermem/parameters/*`.
    pub nvidia_peermem_params: Fact<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciDevice {
    /// Domain:bus:device.function, lower case (`0000:00:06.0`).
    pub bdf: String,
    /// The resolved sysfs directory (`/sys/devices/pci0000:00/0000:00:06.0`).
    pub sysfs_path: String,
    /// The upstream device in the resolved path (a bridge or switch port), `None` below a root.
    pub parent: Option<String>,
    /// The host bridge directory (`pci0000:00`).
    pub host_bridge: String,
    pub vendor_id: Fact<u16>,
    pub device_id: Fact<u16>,
    pub subsystem_vendor_id: Fact<u16>,
    pub subsystem_device_id: Fact<u16>,
    pub class: Fact<u32>,
    pub numa_node: Fact<i32>,
    pub local_cpulist: Fact<String>,
    pub cur_link_speed: Fact<String>,
    pub cur_link_width: Fact<u32>,
    pub max_link_speed: Fact<String>,
    pub max_link_width: Fact<u32>,
    pub resources: Fact<Vec<Resource>>,
    /// Name of the bound driver, `None` when unbound.
    pub driver: Fact<Option<String>>,
    /// IOMMU group number, `None` when the device has no group.
    pub iommu_group: Fact<Option<String>>,
    /// Raw config space (64 bytes for non-root readers, 256 or 4096 for root).
    #[serde(skip)]
    pub config: Fact<Vec<u8>>,
    /// SR-IOV virtual function (has a `physfn` link).
    pub is_virtfn: bool,
}

impl PciDevice {
    pub fn class_code(&self) -> Option<u32> {
        self.class.get().copied()
    }
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor_id.get() == Some(&0x10de)
            && self.class_code().is_some_and(|c| (c >> 16) == 0x03)
    }
    /// An NVSwitch (NVIDIA, class 0x0680 "other bridge"), as HGX boards expose them.
    pub fn is_nvswitch(&self) -> bool {
        self.vendor_id.get() == Some(&0x10de)
            && self.class_code().is_some_and(|c| (c >> 8) == 0x0680)
    }
    /// A function that may be an NVIDIA GPU but whose vendor or class cannot be read: a
    /// display-class function of unknown vendor, or one whose ids are both damaged, or an NVIDIA
    /// function of damaged class. A capture that lacks the files says nothing (not suspect).
    pub fn identity_unreadable(&self) -> bool {
        let damaged = |r: Option<&str>| r.is_some_and(|r| !r.starts_with("not in this capture"));
        let display = self.class_code().is_some_and(|c| (c >> 16) == 0x03);
        let nvidia = self.vendor_id.get() == Some(&0x10de);
        (display && self.vendor_id.get().is_none())
            || (damaged(self.vendor_id.reason()) && damaged(self.class.reason()))
            || (nvidia && damaged(self.class.reason()))
    }
    pub fn is_bridge(&self) -> bool {
        self.class_code().is_some_and(|c| (c >> 8) == 0x0604)
    }
    /// The decoded config space, when it was read.
    pub fn decoded(&self) -> Option<crate::pci::config::ConfigSpace> {
        self.config.get().map(|b| crate::pci::config::decode(b))
    }
    /// Where the current link speed and width were read when that was not their sysfs files:
    /// the config space register (`.../config [LnkSta]`, see `pci::attrs`).
    pub fn link_from_config(&self) -> Option<&str> {
        let s = self.cur_link_speed.source();
        (!s.ends_with("/current_link_speed")).then_some(s)
    }
    pub fn is_network(&self) -> bool {
        self.class_code().is_some_and(|c| (c >> 16) == 0x02)
    }
}

/// One line of sysfs `resource`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resource {
    /// Line number: 0-5 BARs, 6 expansion ROM, 7+ bridge windows / SR-IOV BARs.
    pub index: usize,
    pub start: u64,
    pub end: u64,
    pub flags: u64,
}

impl Resource {
    pub const IORESOURCE_IO: u64 = 0x100;
    pub const IORESOURCE_MEM: u64 = 0x200;
    pub const IORESOURCE_PREFETCH: u64 = 0x2000;
    pub const IORESOURCE_MEM_64: u64 = 0x0010_0000;
    pub fn is_set(&self) -> bool {
        !(self.start == 0 && self.end == 0) && self.end >= self.start
    }
    pub fn size(&self) -> u64 {
        if self.is_set() {
            self.end.wrapping_sub(self.start).wrapping_add(1)
        } else {
            0
        }
    }
    pub fn is_io(&self) -> bool {
        self.flags & Self::IORESOURCE_IO != 0
    }
    pub fn is_mem(&self) -> bool {
        self.flags & Self::IORESOURCE_MEM != 0
    }
    pub fn prefetchable(&self) -> bool {
        self.flags & Self::IORESOURCE_PREFETCH != 0
    }
    pub fn mem64(&self) -> bool {
        self.flags & Self::IORESOURCE_MEM_64 != 0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RdmaDevice {
    pub name: String,
    /// The PCI function behind the device (`/sys/class/infiniband/<dev>/device` resolved).
    pub pci_bdf: Fact<Option<String>>,
    pub fw_ver: Fact<String>,
    pub hca_type: Fact<String>,
    pub board_id: Fact<String>,
    pub node_guid: Fact<String>,
    pub node_type: Fact<String>,
    pub ports: Fact<Vec<RdmaPort>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RdmaPort {
    pub port: u32,
    /// Raw sysfs text, e.g. `4: ACTIVE`.
    pub state: Fact<String>,
    /// Raw sysfs text, e.g. `5: LinkUp`.
    pub phys_state: Fact<String>,
    pub link_layer: Fact<String>,
    pub rate: Fact<String>,
    /// Number of non-zero GIDs in `ports/<p>/gids/*`.
    pub gid_count: Fact<usize>,
}

impl RdmaPort {
    /// The state name without its number (`ACTIVE`).
    pub fn state_name(&self) -> Option<&str> {
        self.state.get().map(|s| crate::parse::after_colon(s))
    }
    pub fn phys_state_name(&self) -> Option<&str> {
        self.phys_state.get().map(|s| crate::parse::after_colon(s))
    }
    /// The link layer when it is one NCCL can use and the kernel writes (`InfiniBand`,
    /// `Ethernet`: `link_layer_show()` in drivers/infiniband/core/sysfs.c). `None` when the file
    /// is unreadable, damaged or says `Unknown`: whether the port is RoCE is then undecided.
    pub fn link_layer_name(&self) -> Option<&str> {
        self.link_layer
            .get()
            .map(|s| s.trim())
            .filter(|s| matches!(*s, "InfiniBand" | "Ethernet"))
    }
}

// ---------------------------------------------------------------------------------------------
// Health (issue 17): what breaks GDR on a node that used to work. RoCE addressing, error
// counters and kernel events. Collected by `src/health/`, judged by `checks/src/checks/{roce,
// counters,kernel}.rs` with the pure rules in `roce.rs`, `counters.rs` and `klog.rs`.
// ---------------------------------------------------------------------------------------------

/// RoCE addressing, error counters and kernel events of one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// One entry per RDMA port with link layer Ethernet: its GID table and netdevs.
    pub roce: Fact<Vec<RocePort>>,
    /// PCIe AER statistics (`aer_dev_*`) of GPUs, NICs and the bridges above them.
    pub aer: Fact<Vec<AerStats>>,
    /// Per RDMA port: `counters/*` and `hw_counters/*`.
    pub port_counters: Fact<Vec<PortCounters>>,
    /// An earlier reading of the same counters, to judge how much they grew: `--interval`, the
    /// state file of the last periodic run, or a snapshot's `gdrdoctor/counters-baseline.json`.
    pub baseline: Option<CounterBaseline>,
    /// Why there is no baseline (`state file from another boot: ignored`), when that is worth
    /// saying.
    pub baseline_note: Option<String>,
    /// Kernel log lines about Xids, IOMMU faults, mlx5 health and peer-memory module load
    /// failures (only the lines that matter).
    pub kernel_log: Fact<KernelLog>,
}

impl Health {
    pub fn absent(reason: &str) -> Self {
        Health {
            roce: Fact::absent("/sys/class/infiniband", reason),
            aer: Fact::absent("/sys/bus/pci/devices/*/aer_dev_*", reason),
            port_counters: Fact::absent("/sys/class/infiniband/*/ports/*/counters", reason),
            baseline: None,
            baseline_note: None,
            kernel_log: Fact::absent("kernel log", reason),
        }
    }
}

/// An RDMA port with link layer Ethernet (RoCE).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RocePort {
    pub device: String,
    pub port: u32,
    /// Entries in `ports/<p>/gids` (the table length, `gid_tbl_len`, that NCCL walks).
    pub gid_tbl_len: usize,
    /// The non-zero GIDs, with their type and netdev; every other index holds the zero GID.
    pub gids: Fact<Vec<GidEntry>>,
    /// The netdevs behind the port (`gid_attrs/ndevs/*`, else `device/net/*`); absent in a
    /// foreign capture that holds neither.
    pub netdevs: Fact<Vec<Netdev>>,
}

/// One populated GID table entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GidEntry {
    pub index: u32,
    /// As sysfs prints it: `0000:0000:0000:0000:0000:ffff:0a00:0001`.
    pub gid: String,
    /// `gid_attrs/types/<index>`: `RoCE v2`, `IB/RoCE v1`. A read failing with EINVAL has the
    /// reason `EINVAL` (what containers without the GID mapped return).
    pub kind: Fact<String>,
    /// `gid_attrs/ndevs/<index>`: the netdev whose address the GID carries.
    pub ndev: Option<String>,
}

/// A network interface behind a RoCE port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Netdev {
    pub name: String,
    /// `/sys/class/net/<if>/operstate`: `up`, `down`, `lowerlayerdown`, ...
    pub operstate: Fact<String>,
    pub mtu: Fact<u32>,
    /// `ecn/roce_np/enable/<prio>` (MOFED / DOCA-OFED mlx5): `None` where the driver exposes
    /// no ECN directory.
    pub ecn_np: Fact<Option<BTreeMap<u8, bool>>>,
    /// `ecn/roce_rp/enable/<prio>`.
    pub ecn_rp: Fact<Option<BTreeMap<u8, bool>>>,
}

/// `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` of one PCI function: counter
/// name -> count since boot (`TOTAL_ERR_COR`, `TOTAL_ERR_NONFATAL`, `TOTAL_ERR_FATAL` and one
/// line per error type).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AerStats {
    pub bdf: String,
    /// What the device is to GDR: `gpu`, `nic`, `bridge`.
    pub role: String,
    pub correctable: Fact<BTreeMap<String, u64>>,
    pub nonfatal: Fact<BTreeMap<String, u64>>,
    pub fatal: Fact<BTreeMap<String, u64>>,
}

/// The error counters of one RDMA port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortCounters {
    pub device: String,
    pub port: u32,
    /// `ports/<p>/counters/*` (the IB PMA counters: `symbol_error`, `link_downed`, ...).
    pub counters: Fact<BTreeMap<String, u64>>,
    /// `ports/<p>/hw_counters/*` (driver counters: `out_of_sequence`, `packet_seq_err`, ...).
    pub hw_counters: Fact<BTreeMap<String, u64>>,
}

/// An earlier reading of the counters (keys as [`crate::counters::values`] builds them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterBaseline {
    pub values: BTreeMap<String, u64>,
    /// Milliseconds between that reading and this one.
    pub elapsed_ms: u64,
    /// Where it came from: `--interval 10s`, `state file /run/gdrdoctor/counters.json`.
    pub origin: String,
}

/// How much of this boot a kernel log covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogScope {
    /// From the start of this boot (the kmsg ring still holds record 0, or the boot line).
    ThisBoot,
    /// This boot only, but the start is gone (the ring buffer wrapped).
    ThisBootPartial,
    /// Boundaries unknown: lines may predate this boot.
    Unknown,
    /// Lines pasted into a bug report (`gdrdoctor diagnose`): what they show happened, but the
    /// absence of an event proves nothing (an excerpt, a `grep`).
    Excerpt,
}

impl LogScope {
    pub fn as_str(self) -> &'static str {
        match self {
            LogScope::ThisBoot => "this-boot",
            LogScope::ThisBootPartial => "this-boot-partial",
            LogScope::Unknown => "unknown",
            LogScope::Excerpt => "excerpt",
        }
    }
    pub fn parse(s: &str) -> Option<LogScope> {
        match s.trim() {
            "this-boot" => Some(LogScope::ThisBoot),
            "this-boot-partial" => Some(LogScope::ThisBootPartial),
            "unknown" => Some(LogScope::Unknown),
            "excerpt" => Some(LogScope::Excerpt),
            _ => None,
        }
    }
}

/// The kernel log lines gdrdoctor used (a snapshot stores exactly these).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelLog {
    /// Where they were read: `/dev/kmsg`, `journalctl -k -b 0`, `/var/log/kern.log`.
    pub origin: String,
    pub scope: LogScope,
    /// Lines looked at (all of them, not only the kept ones).
    pub scanned: usize,
    /// The lines about Xids, IOMMU faults, mlx5 health and peer-memory module load failures,
    /// oldest first.
    pub lines: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    /// serde's derive for the same internally tagged shape: the reference [`Fact`]'s own
    /// `Deserialize` replaced (it buffered every value).
    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "state", rename_all = "lowercase")]
    enum Derived<T> {
        Known { value: T, source: String },
        Absent { source: String, reason: String },
    }

    impl<T> From<Derived<T>> for Fact<T> {
        fn from(d: Derived<T>) -> Self {
            match d {
                Derived::Known { value, source } => Fact::Known { value, source },
                Derived::Absent { source, reason } => Fact::Absent { source, reason },
            }
        }
    }

    /// One field of a fact object: left out, or one of a few values (right and wrong types).
    fn field(values: &'static [&'static str]) -> impl Strategy<Value = Option<&'static str>> {
        prop_oneof![Just(None), proptest::sample::select(values).prop_map(Some)]
    }

    /// A fact object as JSON text, its fields in any order, with or without a stray one.
    fn object() -> impl Strategy<Value = String> {
        (
            field(&["\"known\"", "\"absent\"", "\"other\"", "1", "null"]),
            field(&["null", "7", "\"x\"", "[1]", "{\"a\":1}", "-1", "4294967296"]),
            field(&["\"/sys/x\"", "null", "3"]),
            field(&["\"gone\"", "null", "3"]),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(|(state, value, source, reason, extra, order)| {
                let mut kv: Vec<String> = [
                    ("state", state),
                    ("value", value),
                    ("source", source),
                    ("reason", reason),
                    ("extra", extra.then_some("{\"deep\":[1,2]}")),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| format!("\"{k}\":{v}")))
                .collect();
                // A permutation from the seed.
                let mut o = order;
                for i in (1..kv.len()).rev() {
                    kv.swap(i, (o % (i as u64 + 1)) as usize);
                    o /= i as u64 + 1;
                }
                format!("{{{}}}", kv.join(","))
            })
    }

    fn same_as_derived<T>(text: &str)
    where
        T: for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let ours = serde_json::from_str::<Fact<T>>(text).ok();
        let theirs = serde_json::from_str::<Derived<T>>(text)
            .ok()
            .map(Fact::from);
        // One difference, on purpose: a fact carrying a field of the other state (`value` in
        // an absent fact, `reason` in a known one) that does not have that field's type is
        // refused (inconsistent evidence is damaged); the derive ignored the field.
        if ours.is_none() && theirs.is_some() {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let wrong = match theirs {
                Some(Fact::Absent { .. }) => v
                    .get("value")
                    .is_some_and(|x| serde_json::from_value::<T>(x.clone()).is_err()),
                _ => v
                    .get("reason")
                    .is_some_and(|x| serde_json::from_value::<Option<String>>(x.clone()).is_err()),
            };
            assert!(wrong, "{text}");
            return;
        }
        assert_eq!(ours, theirs, "{text}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The one-pass reader accepts exactly what serde's internally tagged derive accepts,
        /// and reads the same fact from it, whatever the order of the fields.
        #[test]
        fn reads_what_the_derive_reads(text in object()) {
            same_as_derived::<u32>(&text);
            same_as_derived::<Option<u32>>(&text);
            same_as_derived::<String>(&text);
            same_as_derived::<Vec<u8>>(&text);
            same_as_derived::<serde_json::Value>(&text);
        }

        #[test]
        fn round_trips(v in proptest::option::of(any::<u32>()), s in ".{0,8}", known in any::<bool>()) {
            let f: Fact<Option<u32>> = if known { Fact::known(v, s) } else { Fact::absent(s, "r") };
            let text = serde_json::to_string(&f).unwrap();
            prop_assert_eq!(serde_json::from_str::<Fact<Option<u32>>>(&text).unwrap(), f);
        }
    }

    #[test]
    fn a_known_null_or_left_out_option_is_none_and_a_missing_value_is_an_error() {
        let f: Fact<Option<u32>> =
            serde_json::from_str(r#"{"value":null,"source":"s","state":"known"}"#).unwrap();
        assert_eq!(f, Fact::known(None, "s"));
        let f: Fact<Option<u32>> =
            serde_json::from_str(r#"{"state":"known","source":"s"}"#).unwrap();
        assert_eq!(f, Fact::known(None, "s"));
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"known","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `value`"), "{e}");
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"absent","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `reason`"), "{e}");
        let e = serde_json::from_str::<Fact<u32>>(r#"{"state":"maybe","source":"s"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `maybe`"), "{e}");
    }
}
