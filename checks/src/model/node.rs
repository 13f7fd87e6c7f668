//! The node: every fact the collectors (or a paste) gathered, in one value.

use super::addons::Addons;
use super::fact::Fact;
use super::health::Health;
use super::host::{CpuVendor, HugePages, Iommu, Modules, NvidiaDriver, PeerMem, Rlimit};
use super::live::LiveFacts;
use super::pci::PciDevice;
use super::rdma::RdmaDevice;
use serde::Serialize;
use std::collections::BTreeMap;

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
    /// The job container's own view (device nodes, capabilities, /dev/shm, NCCL's plugins):
    /// live and inside a container only (`check --in-container`, or detected).
    pub container: Fact<super::container::ContainerView>,
    /// `/proc/cpuinfo`'s first `model name` (which CPU generation: relaxed ordering, issue 39).
    pub cpu_model: Fact<String>,
    /// gdrcopy, the peer-memory module on disk, Fabric Manager (issue 39).
    pub addons: Addons,
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
