//! The check registry: one line per check, in documentation order.
//!
//! A check is a pure function of the [`Node`](crate::model::Node) that returns findings. Adding
//! one touches: the function, one line in [`CHECKS`], its page `docs/checks/<id>.md`, and a
//! fixture-backed test. Ids are stable (`category.name`), never renumbered, never reused.

use crate::model::Node;
use crate::report::Finding;

pub mod counters;
pub mod driver;
pub mod gdr;
pub mod gpu;
pub mod iommu;
pub mod kernel;
pub mod kmod;
pub mod mem;
pub mod pcie;
pub mod rdma;
pub mod roce;
pub mod topo;

/// A registered check.
pub struct CheckDef {
    /// Stable id, `category.name`.
    pub id: &'static str,
    /// One lowercase line for `gdrdoctor list`.
    pub title: &'static str,
    pub run: fn(&Node) -> Vec<Finding>,
}

impl CheckDef {
    pub fn category(&self) -> &'static str {
        self.id.split_once('.').map(|(c, _)| c).unwrap_or(self.id)
    }
}

/// Every static check, in the order reports list them.
pub static CHECKS: &[CheckDef] = &[
    CheckDef {
        id: "gpu.present",
        title: "nvidia gpus are on the pci bus and bound to the nvidia driver",
        run: gpu::present,
    },
    CheckDef {
        id: "driver.nvidia",
        title: "the nvidia kernel driver is loaded; its version and flavor",
        run: driver::driver,
    },
    CheckDef {
        id: "driver.grdma-override",
        title: "the nvidia driver does not refuse gpudirect rdma mappings by registry override",
        run: driver::grdma_override,
    },
    CheckDef {
        id: "kmod.nvidia-peermem",
        title: "a peer-memory client (nvidia_peermem) serves ibv_reg_mr on gpu memory",
        run: kmod::nvidia_peermem,
    },
    CheckDef {
        id: "kmod.nv-peer-mem",
        title: "the deprecated nv_peer_mem module is not loaded",
        run: kmod::nv_peer_mem,
    },
    CheckDef {
        id: "kmod.dmabuf",
        title: "the dma-buf path is possible (open nvidia modules, kernel >= 5.12)",
        run: kmod::dmabuf,
    },
    CheckDef {
        id: "iommu.mode",
        title: "the iommu does not translate gpu and nic dma (off or passthrough)",
        run: iommu::mode,
    },
    CheckDef {
        id: "rdma.devices",
        title: "rdma devices are present",
        run: rdma::devices,
    },
    CheckDef {
        id: "rdma.ports",
        title: "rdma ports are active and their physical link is up",
        run: rdma::ports,
    },
    CheckDef {
        id: "rdma.firmware",
        title: "hcas of the same model run the same firmware",
        run: rdma::firmware,
    },
    CheckDef {
        id: "roce.gid",
        title: "each roce port has the gid nccl will pick: routable, the right family, roce v2",
        run: roce::gid,
    },
    CheckDef {
        id: "roce.netdev",
        title: "the netdev behind each roce port is up and carries an address",
        run: roce::netdev,
    },
    CheckDef {
        id: "roce.mtu",
        title: "the netdev mtu leaves room for a 4096-byte roce mtu",
        run: roce::mtu,
    },
    CheckDef {
        id: "roce.qos",
        title: "ecn congestion control is on for roce (mlx5, where sysfs exposes it)",
        run: roce::qos,
    },
    CheckDef {
        id: "mem.memlock",
        title: "the locked-memory limit is unlimited",
        run: mem::memlock,
    },
    CheckDef {
        id: "gpu.gdr-support",
        title: "cuda reports gpudirect rdma (and dma-buf) support for each gpu",
        run: gpu::gdr_support,
    },
    CheckDef {
        id: "gpu.persistence",
        title: "gpus run in persistence mode",
        run: gpu::persistence,
    },
    CheckDef {
        id: "gpu.row-remap",
        title: "no gpu has pending row remaps or retired pages",
        run: gpu::row_remap,
    },
    CheckDef {
        id: "gpu.nvlink",
        title: "every gpu has as many active nvlinks as its peers; where they go",
        run: gpu::nvlink,
    },
    CheckDef {
        id: "gpu.p2p",
        title: "gpu pairs joined by nvlink or a pcie switch have peer access (nvml and cuda)",
        run: gpu::p2p,
    },
    CheckDef {
        id: "gpu.bar1",
        title: "each gpu's bar1 aperture is large enough to map its memory for rdma",
        run: gpu::gpu_bar1,
    },
    CheckDef {
        id: "pcie.bars",
        title: "bars in sysfs and in config space agree for gpus and nics",
        run: pcie::bars,
    },
    CheckDef {
        id: "pcie.acs-redirect",
        title: "no bridge between paired gpus and nics redirects peer-to-peer (acs)",
        run: pcie::acs_redirect,
    },
    CheckDef {
        id: "pcie.ats",
        title: "ats on nics is consistent with the iommu and acs on their paths",
        run: pcie::ats,
    },
    CheckDef {
        id: "pcie.link",
        title: "nic, gpu and switch links run at their full width and speed",
        run: pcie::link,
    },
    CheckDef {
        id: "pcie.mrrs",
        title: "nics use a 4096-byte max read request",
        run: pcie::mrrs,
    },
    CheckDef {
        id: "topo.nic-distance",
        title: "every gpu has a nic within nccl's gdr distance (pix/pxb)",
        run: topo::nic_distance,
    },
    CheckDef {
        id: "topo.nic-numa",
        title: "nics sit on numa nodes that host gpus",
        run: topo::nic_numa,
    },
    CheckDef {
        id: "topo.rails",
        title: "every gpu has the same number of close nics",
        run: topo::rails,
    },
    CheckDef {
        id: "gdr.gpu",
        title: "per gpu: nccl would use gpudirect rdma with at least one nic, and why not",
        run: gdr::per_gpu,
    },
    CheckDef {
        id: "counters.aer",
        title: "no pcie errors on gpus, nics and the bridges between them (aer)",
        run: counters::aer,
    },
    CheckDef {
        id: "counters.ib-port",
        title: "rdma port link counters (link_downed, symbol_error, ...) do not grow",
        run: counters::ib_port,
    },
    CheckDef {
        id: "counters.rdma-transport",
        title: "rdma transport error counters (retransmissions, sequence errors) do not grow",
        run: counters::rdma_transport,
    },
    CheckDef {
        id: "counters.nvlink",
        title: "nvlink crc, replay and recovery counters do not grow (nvml)",
        run: counters::nvlink,
    },
    CheckDef {
        id: "counters.pcie-replay",
        title: "each gpu's pcie replay counter does not grow (nvml)",
        run: counters::pcie_replay,
    },
    CheckDef {
        id: "kernel.xid",
        title: "no nvidia xid since boot that asks to drain the node",
        run: kernel::xid,
    },
    CheckDef {
        id: "kernel.iommu-fault",
        title: "no iommu fault on a gpu or nic since boot (dmar, amd-vi)",
        run: kernel::iommu_fault,
    },
    CheckDef {
        id: "kernel.mlx5-health",
        title: "no mlx5 health or firmware-fatal event since boot",
        run: kernel::mlx5_health,
    },
];

/// Which checks to run: `--only`/`--skip` take ids or categories.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub only: Vec<String>,
    pub skip: Vec<String>,
}

impl Selection {
    fn matches(pat: &str, def: &CheckDef) -> bool {
        pat == def.id || pat == def.category()
    }
    pub fn wants(&self, def: &CheckDef) -> bool {
        (self.only.is_empty() || self.only.iter().any(|p| Self::matches(p, def)))
            && !self.skip.iter().any(|p| Self::matches(p, def))
    }
    /// Patterns that match no registered check or category (a usage error).
    pub fn unknown_patterns(&self) -> Vec<String> {
        self.only
            .iter()
            .chain(self.skip.iter())
            .filter(|p| !CHECKS.iter().any(|d| Self::matches(p, d)))
            .cloned()
            .collect()
    }
}

/// Run the selected checks. A check that panics becomes one `error` finding instead of taking
/// the whole report down.
pub fn run(node: &Node, sel: &Selection) -> Vec<Finding> {
    let mut out = Vec::new();
    for def in CHECKS.iter().filter(|d| sel.wants(d)) {
        match std::panic::catch_unwind(|| (def.run)(node)) {
            Ok(f) => out.extend(f),
            Err(_) => out.push(Finding::new(
                def.id,
                crate::report::Status::Error,
                "node",
                "internal error in this check; please report it with a `gdrdoctor snapshot`",
            )),
        }
    }
    out
}

pub fn find(id: &str) -> Option<&'static CheckDef> {
    CHECKS.iter().find(|d| d.id == id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for d in CHECKS {
            assert!(seen.insert(d.id), "duplicate id {}", d.id);
            let (cat, name) = d.id.split_once('.').expect("id has a category");
            assert!(!cat.is_empty() && !name.is_empty(), "{}", d.id);
            assert!(
                d.id.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'),
                "{} must be lowercase kebab",
                d.id
            );
            assert!(
                d.title.len() <= 90 && !d.title.ends_with('.'),
                "{}",
                d.title
            );
            assert_eq!(d.title, d.title.to_lowercase(), "{} title lowercase", d.id);
        }
    }

    #[test]
    fn selection_by_id_and_category() {
        let s = Selection {
            only: vec!["rdma".into()],
            skip: vec!["rdma.firmware".into()],
        };
        let ids: Vec<_> = CHECKS.iter().filter(|d| s.wants(d)).map(|d| d.id).collect();
        assert_eq!(ids, vec!["rdma.devices", "rdma.ports"]);
        let bad = Selection {
            only: vec!["nope".into()],
            skip: vec![],
        };
        assert_eq!(bad.unknown_patterns(), vec!["nope".to_string()]);
    }
}
