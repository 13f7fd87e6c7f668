//! The GDR verdict per GPU x NIC pair, following NCCL's decision chain (gdr-ground-truth §1):
//! NIC support (peer-memory client, or dma-buf), GPU support (a live CUDA attribute), the NIC
//! port being ACTIVE, and the path type against `NCCL_NET_GDR_LEVEL` (`ncclTopoCheckGdr()`).

use crate::derive::{self, PathAnswer};
use crate::model::{Fact, Node, RdmaDevice};
use crate::report::GdrPair;
use crate::topo::{self, Endpoint, PathType, PciIndex};

/// The distance threshold and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    pub value: u8,
    /// How to call the threshold to a user: NCCL's name, except that the default P2C is shown
    /// as PXB (they accept the same paths unless a C2C CPU is involved).
    pub name: &'static str,
    pub source: String,
}

/// `NCCL_NET_GDR_LEVEL` if set (and valid), else P2C when `NCCL_NET_GDR_C2C` is not 0 (the
/// default since NCCL 2.27/2.29), else PXB. On PCIe-only systems P2C and PXB accept the same
/// paths (P2C only occurs through a C2C CPU).
pub fn level(node: &Node) -> Level {
    let env = node.env.get();
    if let Some(v) = env.and_then(|e| e.get("NCCL_NET_GDR_LEVEL")) {
        if let Some(l) = topo::parse_level(v) {
            return Level {
                value: l,
                name: topo::level_name(l),
                source: format!("NCCL_NET_GDR_LEVEL={v}"),
            };
        }
    }
    let c2c = env
        .and_then(|e| e.get("NCCL_NET_GDR_C2C"))
        .map(|v| v.trim() != "0")
        .unwrap_or(true);
    if c2c {
        Level {
            value: PathType::P2c as u8,
            name: "PXB",
            source: "NCCL's default: PXB, or P2C through a C2C CPU".into(),
        }
    } else {
        Level {
            value: PathType::Pxb as u8,
            name: "PXB",
            source: "NCCL's default with NCCL_NET_GDR_C2C=0".into(),
        }
    }
}

/// Everything the verdicts need, computed once.
pub struct Context<'a> {
    pub index: PciIndex<'a>,
    pub gpus: Vec<Endpoint>,
    pub nics: Vec<(&'a RdmaDevice, Option<Endpoint>)>,
    pub level: Level,
    pub peermem: PathAnswer,
    pub dmabuf: PathAnswer,
}

impl<'a> Context<'a> {
    pub fn new(node: &'a Node) -> Self {
        let index = PciIndex::new(node);
        let gpus = derive::gpus(node)
            .iter()
            .filter_map(|g| index.endpoint(&g.bdf, false))
            .collect();
        let nics = node
            .rdma
            .get()
            .map(|r| {
                r.iter()
                    .map(|d| {
                        let ep = match d.pci_bdf.get() {
                            Some(Some(b)) => index.endpoint(b, true),
                            _ => None,
                        };
                        (d, ep)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Context {
            index,
            gpus,
            nics,
            level: level(node),
            peermem: derive::peermem_path(node),
            dmabuf: derive::dmabuf_path(node),
        }
    }
}

fn has_active_port(d: &RdmaDevice) -> Option<bool> {
    d.ports
        .get()
        .map(|p| p.iter().any(|p| p.state_name() == Some("ACTIVE")))
}

/// The verdict for every GPU x RDMA device pair.
pub fn verdicts(node: &Node) -> Vec<GdrPair> {
    let cx = Context::new(node);
    let mut out = Vec::new();
    for g in &cx.gpus {
        for (nic, ep) in &cx.nics {
            out.push(pair(node, &cx, g, nic, ep.as_ref()));
        }
    }
    out
}

pub fn pair(
    node: &Node,
    cx: &Context<'_>,
    g: &Endpoint,
    nic: &RdmaDevice,
    ep: Option<&Endpoint>,
) -> GdrPair {
    let mut reasons = Vec::new();
    let mut assumptions = Vec::new();
    let mut enabled = true;
    let (path, smi) = match ep {
        Some(n) => {
            let p = topo::path(g, n);
            (Some(p.nccl), Some(p.smi))
        }
        None => (None, None),
    };
    // (1)+(3) NIC support: NCCL_PTR_CUDA from the peer-memory files, or dma-buf.
    let mechanism = match (cx.dmabuf.available, cx.peermem.available) {
        (Some(true), _) => Some("dmabuf"),
        (_, Some(true)) => Some("peermem"),
        _ => None,
    };
    match (cx.peermem.available, cx.dmabuf.available) {
        (Some(false), Some(false)) => {
            enabled = false;
            reasons.push(format!(
                "NIC-level GDR off (NCCL: \"GPU Direct RDMA Disabled for HCA\"): no peer-memory client, and no dma-buf path: {}",
                cx.dmabuf.reasons.join("; ")
            ));
        }
        (Some(true), _) | (_, Some(true)) => {}
        _ => {
            enabled = false;
            reasons.push(format!(
                "cannot tell whether the NIC supports GDR: {}",
                cx.peermem
                    .reasons
                    .iter()
                    .chain(cx.dmabuf.reasons.iter())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    let mut mechanism = mechanism;
    // NCCL's per-device dma-buf probe (D02) and the GPU's own dma-buf attribute (D03).
    if mechanism == Some("dmabuf") {
        let cuda_dev = node
            .live
            .cuda
            .get()
            .and_then(|c| c.devices.iter().find(|d| d.bdf == g.bdf));
        let probe = node
            .live
            .verbs
            .get()
            .and_then(|v| v.dmabuf_probe.get(&nic.name).copied().flatten());
        let gpu_no = cuda_dev.is_some_and(|d| d.dma_buf_supported == Some(0));
        let nic_no = matches!(probe, Some(95) | Some(93));
        if gpu_no || nic_no {
            mechanism = if cx.peermem.available == Some(true) {
                Some("peermem")
            } else {
                None
            };
            if mechanism.is_none() {
                enabled = false;
                reasons.push(if nic_no {
                    format!("dma-buf refused by {} (ibv_reg_dmabuf_mr probe errno {}) and no peer-memory client", nic.name, probe.unwrap_or(0))
                } else {
                    "CUDA reports DMA_BUF_SUPPORTED=0 on this gpu and there is no peer-memory client".into()
                });
            }
        }
        if cuda_dev.is_none() {
            assumptions.push(
                "dma-buf: CUDA DMA_BUF_SUPPORTED on this gpu (live fact, not known here)".into(),
            );
        }
        if probe.is_none() {
            assumptions.push(format!(
                "dma-buf: NCCL's ibv_reg_dmabuf_mr probe on {} (live fact, not known here)",
                nic.name
            ));
        }
    }
    // (4) GPU support: a CUDA attribute, live only.
    match node
        .live
        .cuda
        .get()
        .and_then(|c| c.devices.iter().find(|d| d.bdf == g.bdf))
    {
        Some(d) if d.gpu_direct_rdma_supported == Some(0) => {
            enabled = false;
            reasons.push(
                "CUDA reports GPU_DIRECT_RDMA_SUPPORTED=0 for this gpu: NCCL turns GDR off for it"
                    .into(),
            );
        }
        Some(d) if d.gpu_direct_rdma_supported == Some(1) => {}
        _ => assumptions
            .push("gpu: CUDA GPU_DIRECT_RDMA_SUPPORTED=1 (live fact, not known here)".into()),
    }
    // NCCL only uses ACTIVE ports.
    match has_active_port(nic) {
        Some(false) => {
            enabled = false;
            reasons.push(format!(
                "{} has no ACTIVE port: NCCL does not use it",
                nic.name
            ));
        }
        None => assumptions.push(format!("port state of {} unknown", nic.name)),
        Some(true) => {}
    }
    // (5) Distance against the level.
    match path {
        Some(p) if (p as u8) > cx.level.value => {
            enabled = false;
            reasons.push(format!(
                "path {} is beyond NCCL_NET_GDR_LEVEL {} ({}): NCCL silently stages through host memory",
                p.as_str(),
                cx.level.name,
                cx.level.source
            ));
        }
        Some(_) => {}
        None => {
            enabled = false;
            reasons.push(format!("the PCI location of {} is unknown", nic.name));
        }
    }
    GdrPair {
        gpu: g.bdf.clone(),
        nic: nic.name.clone(),
        path: path
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "?".into()),
        nvidia_smi: smi.map(|s| s.as_str().to_string()),
        enabled,
        mechanism: if enabled {
            mechanism.map(str::to_string)
        } else {
            None
        },
        reasons,
        assumptions,
    }
}

/// The NUMA node of a fact, for messages.
pub fn numa_text(n: &Fact<i32>) -> String {
    n.get().map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}
