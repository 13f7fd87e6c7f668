//! The host around the devices: CPU vendor, kernel modules, huge pages and limits, the
//! IOMMU, the NVIDIA driver and the peer-memory modules.

use super::fact::Fact;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// A resource limit in bytes; `None` (null in JSON) means unlimited.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[schemars(rename = "rlimit")]
pub struct Rlimit {
    /// The soft limit in bytes; null: unlimited.
    #[schemars(extend("x-required" = true))]
    pub soft: Option<u64>,
    /// The hard limit in bytes; null: unlimited.
    #[schemars(extend("x-required" = true))]
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
