//! The GDR verdict for a pasted GPU x NIC pair. [`decide`] is the only place `diagnose` decides
//! GDR: it applies today's rule (`crate::gdr::level` for the threshold, `crate::derive` for the
//! peer-memory and dma-buf paths, NCCL's `distance <= level` on the nvidia-smi path type)
//! without restating it, and [`PairEvidence`] records everything a fuller rule needs (NCCL
//! version and environment from the log, NVLink peers and their paths for PXN, the GPU model
//! for the read gate), so that a rule that takes those into account replaces the body of
//! [`decide`] and nothing else.

use super::nccl::Version;
use crate::derive::{self, PathAnswer};
use crate::gdr::{self, Level};
use crate::model::Node;
use crate::topo;
use serde::Serialize;
use std::collections::BTreeMap;

/// NCCL's path type for an nvidia-smi cell (`NODE` is NCCL's `PHB`).
pub fn nccl_path(smi: &str) -> Option<&'static str> {
    Some(match smi {
        "PIX" => "PIX",
        "PXB" => "PXB",
        "P2C" => "P2C",
        "PHB" | "NODE" => "PHB",
        "SYS" | "SOC" => "SYS",
        _ => return None,
    })
}

/// What the paste tells about one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairEvidence {
    /// The matrix block (`b2`), or the NCCL log block when there is no matrix.
    pub block: String,
    /// `GPU0`
    pub gpu: String,
    /// `mlx5_0` (the legend's name), or the column (`NIC0`) without a legend.
    pub nic: String,
    /// The nvidia-smi cell (`PIX`); `None` when the paste has no trustworthy cell.
    pub smi_path: Option<String>,
    /// GPUs joined to this one by NVLink (`NV18`), and their own path to this NIC (PXN).
    pub nvlink_peers: Vec<(String, u32, Option<String>)>,
    /// The GPU's product name (nvidia-smi -q / lspci), for the read gate (pre-Ampere GPUs).
    pub gpu_model: Option<String>,
}

/// Facts shared by every pair.
#[derive(Debug, Clone)]
pub struct Context {
    pub level: Level,
    /// `NCCL_NET_GDR_LEVEL` and friends came from the paste (else NCCL's defaults are assumed).
    pub env_known: bool,
    pub nccl_version: Option<Version>,
    pub peermem: PathAnswer,
    pub dmabuf: PathAnswer,
    /// NIC name -> whether a port is ACTIVE (`None`: unknown).
    pub port_active: BTreeMap<String, Option<bool>>,
    /// NIC name -> NCCL's own NIC-level answer (`GPU Direct RDMA Enabled|Disabled for HCA`).
    pub nic_logged: BTreeMap<String, (bool, String)>,
    /// Whether the node's RDMA devices are known at all (ibv_devinfo, ibstat or NCCL's list).
    pub rdma_known: bool,
}

impl Context {
    pub fn new(
        node: &Node,
        nccl_version: Option<Version>,
        nic_logged: BTreeMap<String, (bool, String)>,
    ) -> Context {
        let mut port_active = BTreeMap::new();
        if let Some(r) = node.rdma.get() {
            for d in r {
                port_active.insert(
                    d.name.clone(),
                    d.ports
                        .get()
                        .map(|p| p.iter().any(|p| p.state_name() == Some("ACTIVE"))),
                );
            }
        }
        Context {
            level: gdr::level(node),
            env_known: node.env.get().is_some(),
            nccl_version,
            peermem: derive::peermem_path(node),
            dmabuf: derive::dmabuf_path(node),
            port_active,
            nic_logged,
            rdma_known: node.rdma.get().is_some(),
        }
    }
}

/// `on`, `off`, or `unknown` (the paste lacks something the decision needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gdr {
    On,
    Off,
    Unknown,
}

/// The verdict for one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PastePair {
    pub block: String,
    pub gpu: String,
    pub nic: String,
    /// The cell as nvidia-smi printed it, `?` when unknown.
    pub nvidia_smi: String,
    /// NCCL's path type, `?` when unknown.
    pub path: String,
    /// Within the GDR threshold (`None`: the cell is not in the paste).
    pub by_distance: Option<bool>,
    pub gdr: Gdr,
    /// `peermem` or `dmabuf` when known.
    pub mechanism: Option<String>,
    /// Why GDR is off.
    pub reasons: Vec<String>,
    /// What the paste does not show that the verdict needs, with the command that shows it.
    pub unknown: Vec<String>,
    /// What the verdict assumes (live-only facts).
    pub assumptions: Vec<String>,
    /// What NCCL itself logged for this pair, when the paste has an NCCL log that covers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logged: Option<Logged>,
    /// The evidence the verdict was made from (for the lead's next rule: version, NVLink, model).
    pub evidence: PairEvidence,
}

/// NCCL's own decision for a pair, per direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Logged {
    pub send: Option<bool>,
    pub receive: Option<bool>,
    /// Channels without a direction tag (`Ring 00 : 3 -> 4 via NET/IB/0/GDRDMA`, 2.4).
    pub undirected: Option<bool>,
    /// PXN: the proxy rank when NCCL sent through another GPU.
    pub proxy: Option<u32>,
    /// First log line.
    pub line: usize,
}

impl Logged {
    /// GDR in any direction.
    pub fn any(&self) -> Option<bool> {
        [self.send, self.receive, self.undirected]
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| a || b)
    }
}

/// Decide one pair. The only GDR decision of `diagnose`.
pub fn decide(cx: &Context, e: &PairEvidence) -> PastePair {
    let mut reasons = Vec::new();
    let mut unknown = Vec::new();
    let mut assumptions = Vec::new();
    let mut off = false;
    let mut unk = false;
    // (3)+(4) distance against the level, as ncclTopoCheckGdr: distance <= level.
    let path = e.smi_path.as_deref().and_then(nccl_path);
    let by_distance = path
        .and_then(topo::parse_level)
        .map(|v| v <= cx.level.value);
    match (path, by_distance) {
        (Some(p), Some(false)) => {
            off = true;
            reasons.push(format!(
                "path {} ({p} for NCCL) is beyond NCCL_NET_GDR_LEVEL {} ({}): NCCL stages through host memory",
                e.smi_path.as_deref().unwrap_or("?"),
                cx.level.name,
                cx.level.source
            ));
        }
        (Some(_), Some(true)) => {}
        _ => {
            unk = true;
            unknown.push(format!(
                "matrix cell {} x {}: not in the paste (`nvidia-smi topo -m`)",
                e.gpu, e.nic
            ));
        }
    }
    if !cx.env_known {
        assumptions
            .push("NCCL_NET_GDR_LEVEL unset (no NCCL log or environment in the paste)".into());
    }
    // (1) NIC support: NCCL's own line wins; else the peer-memory and dma-buf paths.
    let mut mechanism = None;
    match cx.nic_logged.get(&e.nic) {
        Some((false, line)) => {
            off = true;
            reasons.push(format!(
                "NCCL logged `{line}`: no peer-memory client and no dma-buf for this NIC"
            ));
        }
        Some((true, _)) => {}
        None => match (cx.peermem.available, cx.dmabuf.available) {
            (Some(false), Some(false)) => {
                off = true;
                reasons.push(format!(
                    "no peer-memory client and no dma-buf path: {}",
                    cx.peermem
                        .reasons
                        .iter()
                        .chain(cx.dmabuf.reasons.iter())
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            (_, Some(true)) => mechanism = Some("dmabuf".to_string()),
            (Some(true), _) => mechanism = Some("peermem".to_string()),
            (pm, db) => {
                unk = true;
                if pm.is_none() {
                    unknown.push(
                        "peer memory: not in the pasted text; run `lsmod | grep peermem`".into(),
                    );
                }
                if db.is_none() {
                    unknown.push("dma-buf: not in the pasted text; run `cat /proc/driver/nvidia/version; uname -r`".into());
                }
            }
        },
    }
    // NCCL uses only ACTIVE ports.
    match cx.port_active.get(&e.nic) {
        Some(Some(false)) => {
            off = true;
            reasons.push(format!(
                "{} has no ACTIVE port: NCCL does not use it",
                e.nic
            ));
        }
        Some(Some(true)) => {}
        _ => {
            unk = true;
            unknown.push(if cx.rdma_known {
                format!("port state of {}: not in the pasted ibv_devinfo/ibstat; run `ibv_devinfo -d {}`", e.nic, e.nic)
            } else {
                "port states: not in the pasted text; run `ibv_devinfo`".to_string()
            });
        }
    }
    // (2) GPU support: a CUDA attribute, live only.
    assumptions.push("gpu: CUDA GPU_DIRECT_RDMA_SUPPORTED=1 (a live fact no paste shows)".into());
    let gdr = if off {
        Gdr::Off
    } else if unk {
        Gdr::Unknown
    } else {
        Gdr::On
    };
    PastePair {
        block: e.block.clone(),
        gpu: e.gpu.clone(),
        nic: e.nic.clone(),
        nvidia_smi: e.smi_path.clone().unwrap_or_else(|| "?".into()),
        path: path.unwrap_or("?").to_string(),
        by_distance,
        gdr,
        mechanism: if gdr == Gdr::Off { None } else { mechanism },
        reasons,
        unknown,
        assumptions,
        logged: None,
        evidence: e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::empty_node;

    fn ev(path: Option<&str>) -> PairEvidence {
        PairEvidence {
            block: "b1".into(),
            gpu: "GPU0".into(),
            nic: "mlx5_0".into(),
            smi_path: path.map(str::to_string),
            nvlink_peers: vec![],
            gpu_model: None,
        }
    }

    #[test]
    fn distance_alone_gives_off_or_unknown_never_on() {
        let n = empty_node();
        let cx = Context::new(&n, None, BTreeMap::new());
        let p = decide(&cx, &ev(Some("PIX")));
        assert_eq!((p.by_distance, p.gdr), (Some(true), Gdr::Unknown));
        assert!(p.unknown.iter().any(|u| u.contains("lsmod | grep peermem")));
        let p = decide(&cx, &ev(Some("NODE")));
        assert_eq!(
            (p.path.as_str(), p.by_distance, p.gdr),
            ("PHB", Some(false), Gdr::Off)
        );
        let p = decide(&cx, &ev(None));
        assert_eq!((p.by_distance, p.gdr), (None, Gdr::Unknown));
    }

    #[test]
    fn logged_nic_disabled_is_off_and_env_level_is_honoured() {
        let mut n = empty_node();
        n.env = crate::model::Fact::known(
            [("NCCL_NET_GDR_LEVEL".to_string(), "SYS".to_string())].into(),
            "b2",
        );
        let mut logged = BTreeMap::new();
        logged.insert(
            "mlx5_0".to_string(),
            (
                false,
                "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'".to_string(),
            ),
        );
        let cx = Context::new(&n, None, logged);
        let p = decide(&cx, &ev(Some("SYS")));
        assert_eq!(p.by_distance, Some(true));
        assert_eq!(p.gdr, Gdr::Off);
        assert!(p.reasons[0].contains("Disabled for HCA"));
    }
}
