//! GPU pairs: how two GPUs reach each other (NVLink, a PCIe switch, the host bridge, across
//! sockets) and whether peer access works, from the PCI tree, NVML and the CUDA driver.
//!
//! What decides it (NCCL `src/graph/paths.cc` `ncclTopoCheckP2p()`, read for this module; the
//! knowledge files do not cover it): NCCL uses P2P between two GPUs over NVLink, or over PCIe
//! up to `NCCL_P2P_LEVEL` (PXB by default), and between NVLink-connected GPUs it refuses to run
//! when NVML's read/write P2P status is not `ok` (unless `NCCL_IGNORE_DISABLED_P2P=1`). NVLink
//! through NVSwitch needs the fabric manager on HGX boards. Pure functions of the node: the
//! checks and `topo` share them.

use super::context::Context;
use crate::model::{Node, NvmlGpu};
use crate::topo;
use serde::Serialize;

/// One unordered GPU pair.
/// Published in `topo --format json` (`gpu_pairs`): only `a` and `b` are required there, the
/// other members came later in v1 (`x-optional`, see `crate::schema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "gpu_pair")]
pub struct GpuPair {
    pub a: String,
    pub b: String,
    /// PCIe path by the PCI tree, nvidia-smi naming (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`).
    pub pcie: Option<String>,
    /// NVML common ancestor (`single`, `multiple`, `hostbridge`, `node`, `system`).
    pub nvml_ancestor: Option<String>,
    /// Active NVLinks from `a` straight to `b`.
    #[schemars(extend("x-optional" = true))]
    pub nvlinks_direct: usize,
    /// Active NVLinks of `a` and of `b` that end at an NVSwitch (the pair talks through the
    /// fabric: the smaller of the two counts).
    #[schemars(extend("x-optional" = true))]
    pub nvlinks_switch: usize,
    /// NVML P2P status per capability (`read`, `write`, `nvlink`, `atomics`, `prop`).
    #[schemars(extend("x-optional" = true))]
    pub p2p: std::collections::BTreeMap<String, String>,
    /// `cuDeviceCanAccessPeer` a -> b and b -> a.
    pub cuda_ab: Option<bool>,
    pub cuda_ba: Option<bool>,
    /// `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED` a -> b.
    pub native_atomic: Option<bool>,
}

impl GpuPair {
    /// NVLinks the pair can use (direct, else through the switch fabric).
    pub fn nvlinks(&self) -> usize {
        self.nvlinks_direct.max(self.nvlinks_switch)
    }
    /// The `nvidia-smi topo -m` style cell: `NV<n>` over NVLink, else the PCIe path.
    pub fn cell(&self) -> String {
        if self.nvlinks() > 0 {
            format!("NV{}", self.nvlinks())
        } else {
            self.pcie.clone().unwrap_or_else(|| "?".into())
        }
    }
    pub fn status(&self, cap: &str) -> Option<&str> {
        self.p2p.get(cap).map(String::as_str)
    }
    /// Peer access granted both ways by CUDA (`None`: not known).
    pub fn cuda_both(&self) -> Option<bool> {
        match (self.cuda_ab, self.cuda_ba) {
            (Some(x), Some(y)) => Some(x && y),
            _ => None,
        }
    }
}

fn active_to(g: &NvmlGpu) -> impl Iterator<Item = &crate::model::NvLink> {
    g.nvlinks.iter().filter(|l| l.active)
}

/// Active NVLinks of a GPU that end at an NVSwitch.
pub fn switch_links(g: &NvmlGpu) -> usize {
    active_to(g)
        .filter(|l| l.remote_type.as_deref() == Some("switch"))
        .count()
}

/// Every GPU pair of the node, in PCI order.
pub fn pairs(node: &Node) -> Vec<GpuPair> {
    use std::collections::HashMap;
    let cx = Context::new(node);
    let nvml = node.live.nvml.get();
    let cuda = node.live.cuda.get();
    // Indexed once: the loop below is per GPU pair (262,144 on a 512-GPU node).
    let nvml_gpus: HashMap<&str, &crate::model::NvmlGpu> = nvml
        .map(|n| n.gpus.iter().rev().map(|g| (g.bdf.as_str(), g)).collect())
        .unwrap_or_default();
    let nvml_pairs: HashMap<(&str, &str), &crate::model::NvmlPair> = nvml
        .map(|n| {
            n.pairs
                .iter()
                .rev()
                .flat_map(|p| {
                    [
                        ((p.a.as_str(), p.b.as_str()), p),
                        ((p.b.as_str(), p.a.as_str()), p),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    let cuda_peers: HashMap<(&str, &str), &crate::model::CudaPeer> = cuda
        .map(|c| {
            c.peers
                .iter()
                .rev()
                .map(|p| ((p.a_bdf.as_str(), p.b_bdf.as_str()), p))
                .collect()
        })
        .unwrap_or_default();
    let gpu_nvml = |bdf: &str| nvml_gpus.get(bdf).copied();
    let mut out = Vec::new();
    for (i, ga) in cx.gpus.iter().enumerate() {
        for gb in cx.gpus.iter().skip(i + 1) {
            let (a, b) = (&ga.bdf, &gb.bdf);
            let p = topo::path(ga, gb);
            let pcie = p.unknown.is_none().then(|| p.smi.as_str().to_string());
            let na = gpu_nvml(a);
            let nb = gpu_nvml(b);
            let direct = na
                .map(|g| {
                    active_to(g)
                        .filter(|l| {
                            l.remote_type.as_deref() == Some("gpu")
                                && l.remote_bdf.as_deref() == Some(b.as_str())
                        })
                        .count()
                })
                .unwrap_or(0);
            let sw = match (na, nb) {
                (Some(x), Some(y)) => switch_links(x).min(switch_links(y)),
                _ => 0,
            };
            let np = nvml_pairs.get(&(a.as_str(), b.as_str())).copied();
            let peer = |x: &str, y: &str| cuda_peers.get(&(x, y)).copied();
            out.push(GpuPair {
                a: a.clone(),
                b: b.clone(),
                pcie,
                nvml_ancestor: np.and_then(|p| p.common_ancestor.clone()),
                nvlinks_direct: direct,
                nvlinks_switch: sw,
                p2p: np.map(|p| p.p2p.clone()).unwrap_or_default(),
                cuda_ab: peer(a, b).and_then(|p| p.can_access),
                cuda_ba: peer(b, a).and_then(|p| p.can_access),
                native_atomic: peer(a, b).and_then(|p| p.native_atomic),
            });
        }
    }
    out
}

/// Human text for an NVML P2P status.
pub fn explain_status(s: &str) -> &'static str {
    match s {
        "ok" => "supported",
        "chipset-not-supported" => "the chipset (root complex) does not support peer-to-peer between these ports",
        "gpu-not-supported" => "the GPU does not support this peer-to-peer capability",
        "ioh-topology-not-supported" => "the two GPUs are on different host bridges (IOH/socket): PCIe peer-to-peer cannot cross them",
        "disabled-by-regkey" => "peer-to-peer is disabled by a driver registry key (NVreg_RegistryDwords)",
        "not-supported" => "not supported between these gpus (over pcie: ACS redirection, a translating iommu or a virtual machine; over nvlink: the fabric is not up)",
        _ => "unknown",
    }
}

/// NVLink's one-direction rate per link in GB/s, and the generation's name. By the GPU's
/// architecture when CUDA reported it (NVML's version codes are not consistent across drivers:
/// `nvmlNvlinkVersion_t` says 6 for 4.0, some Hopper drivers answer 7), else by the code.
pub fn nvlink_rate(cc_major: Option<i32>, code: Option<u32>) -> (f64, &'static str) {
    match (cc_major, code) {
        (Some(7), _) => (25.0, "2.0 (Volta)"),
        (Some(8), _) => (25.0, "3.0 (Ampere)"),
        (Some(9), _) => (25.0, "4.0 (Hopper)"),
        (Some(10), _) => (50.0, "5.0 (Blackwell)"),
        (_, Some(1)) => (20.0, "1.0"),
        (_, Some(2..=3)) => (25.0, "2.x"),
        (_, Some(4..=5)) => (25.0, "3.x"),
        (_, Some(6)) => (25.0, "4.0"),
        (_, Some(7)) => (50.0, "5.0"),
        _ => (25.0, "unknown generation"),
    }
}

/// NVSwitches on the PCI bus (HGX boards).
pub fn nvswitches(node: &Node) -> usize {
    node.pci
        .get()
        .map(|p| p.iter().filter(|d| d.is_nvswitch()).count())
        .unwrap_or(0)
}
