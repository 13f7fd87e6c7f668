//! The check registry: one line per check, in documentation order.
//!
//! A check is a pure function of the [`Node`](crate::model::Node) that returns findings. Adding
//! one touches: the function (in the file of its category), one `check!` line in [`CHECKS`],
//! its page `docs/checks/<id>.md` (embedded from the row, as every finding family's rows embed
//! theirs: [`crate::findings`]), and a fixture-backed test. Ids are stable (`category.name`), never renumbered, never reused.

use crate::findings::def::{finding, FindingDef};
use crate::model::Node;
use crate::report::Finding;
pub use needs::Needs;

pub mod container;
pub mod counters;
pub mod driver;
pub mod fabric;
pub mod gdr;
pub mod gdrcopy;
pub mod gpu;
pub mod iommu;
pub mod kernel;
pub mod kmod;
pub mod mem;
pub mod needs;
pub mod pcie;
pub mod peermem_abi;
pub mod rdma;
pub mod roce;
pub mod topo;

/// A registered check: a finding row (id, title, page) with the function that judges it.
pub struct CheckDef {
    /// Its id, title and page, as every finding family's row.
    pub def: FindingDef,
    pub run: fn(&Node) -> Vec<Finding>,
    /// What it reads that a paste may hold, and the command that shows it (`diagnose`).
    pub needs: Needs,
}

/// A check row reads as the finding row it is (`c.id`, `c.title`, `c.page`).
impl std::ops::Deref for CheckDef {
    type Target = FindingDef;
    fn deref(&self) -> &FindingDef {
        &self.def
    }
}

/// A registry row: the finding row (its page found from the id), the check, and its input as
/// a paste shows it.
macro_rules! check {
    ($id:literal, $title:literal, $run:path, $needs:expr) => {
        CheckDef {
            def: finding!($id, $title),
            run: $run,
            needs: $needs,
        }
    };
}

impl CheckDef {
    pub fn category(&self) -> &'static str {
        self.id.split_once('.').map(|(c, _)| c).unwrap_or(self.id)
    }
}

/// Every static check, in the order reports list them.
pub static CHECKS: &[CheckDef] = &[
    check!(
        "gpu.present",
        "nvidia gpus are on the pci bus and bound to the nvidia driver",
        gpu::present,
        needs::PCI_DEVICES
    ),
    check!(
        "driver.nvidia",
        "the nvidia kernel driver is loaded; its version and flavor",
        driver::driver,
        needs::DRIVER_AND_KERNEL
    ),
    check!(
        "driver.grdma-override",
        "the nvidia driver does not refuse gpudirect rdma mappings by registry override",
        driver::grdma_override,
        needs::DRIVER_PARAMS
    ),
    check!(
        "kmod.nvidia-peermem",
        "a peer-memory client (nvidia_peermem) serves ibv_reg_mr on gpu memory",
        kmod::nvidia_peermem,
        needs::PEER_MEMORY
    ),
    check!(
        "kmod.nv-peer-mem",
        "the deprecated nv_peer_mem module is not loaded",
        kmod::nv_peer_mem,
        needs::LEGACY_PEER_MEMORY
    ),
    check!(
        "kmod.dmabuf",
        "the dma-buf path is possible (open nvidia modules, kernel >= 5.12)",
        kmod::dmabuf,
        needs::DRIVER_AND_KERNEL
    ),
    check!(
        "iommu.mode",
        "the iommu does not translate gpu and nic dma (off or passthrough)",
        iommu::mode,
        needs::IOMMU_MODE
    ),
    check!(
        "rdma.devices",
        "rdma devices are present",
        rdma::devices,
        needs::RDMA_DEVICES
    ),
    check!(
        "rdma.ports",
        "rdma ports are active and their physical link is up",
        rdma::ports,
        needs::RDMA_DEVICES
    ),
    check!(
        "rdma.firmware",
        "hcas of the same model run the same firmware",
        rdma::firmware,
        needs::RDMA_DEVICES
    ),
    check!(
        "roce.gid",
        "each roce port has the gid nccl will pick: routable, the right family, roce v2",
        roce::gid,
        needs::ROCE
    ),
    check!(
        "roce.netdev",
        "the netdev behind each roce port is up and carries an address",
        roce::netdev,
        needs::ROCE
    ),
    check!(
        "roce.mtu",
        "the netdev mtu leaves room for a 4096-byte roce mtu",
        roce::mtu,
        needs::ROCE
    ),
    check!(
        "roce.qos",
        "ecn congestion control is on for roce (mlx5, where sysfs exposes it)",
        roce::qos,
        needs::ROCE
    ),
    check!(
        "mem.memlock",
        "the locked-memory limit is unlimited",
        mem::memlock,
        needs::MEMLOCK
    ),
    check!(
        "gpu.gdr-support",
        "cuda reports gpudirect rdma (and dma-buf) support for each gpu",
        gpu::gdr_support,
        needs::LIVE_GPU
    ),
    check!(
        "gpu.persistence",
        "gpus run in persistence mode",
        gpu::persistence,
        needs::LIVE_GPU
    ),
    check!(
        "gpu.row-remap",
        "no gpu has pending row remaps or retired pages",
        gpu::row_remap,
        needs::LIVE_GPU
    ),
    check!(
        "gpu.nvlink",
        "every gpu has as many active nvlinks as its peers; where they go",
        gpu::nvlink,
        needs::LIVE_GPU
    ),
    check!(
        "gpu.p2p",
        "gpu pairs joined by nvlink or a pcie switch have peer access (nvml and cuda)",
        gpu::p2p,
        needs::LIVE_GPU
    ),
    check!(
        "gpu.bar1",
        "each gpu's bar1 aperture is large enough to map its memory for rdma",
        gpu::gpu_bar1,
        needs::GPU_BAR1
    ),
    check!(
        "pcie.bars",
        "bars in sysfs and in config space agree for gpus and nics",
        pcie::bars,
        needs::CONFIG_SPACE
    ),
    check!(
        "pcie.acs-redirect",
        "no bridge between paired gpus and nics redirects peer-to-peer (acs)",
        pcie::acs_redirect,
        needs::PCI_TREE_ACS
    ),
    check!(
        "pcie.ats",
        "ats on nics is consistent with the iommu and acs on their paths",
        pcie::ats,
        needs::CONFIG_SPACE
    ),
    check!(
        "pcie.link",
        "nic, gpu and switch links run at their full width and speed",
        pcie::link,
        needs::CONFIG_SPACE
    ),
    check!(
        "pcie.mrrs",
        "nics use a 4096-byte max read request",
        pcie::mrrs,
        needs::CONFIG_SPACE
    ),
    check!(
        "topo.nic-distance",
        "every gpu has a nic within nccl's gdr distance (pix/pxb)",
        topo::nic_distance,
        needs::TOPOLOGY
    ),
    check!(
        "topo.nic-numa",
        "nics sit on numa nodes that host gpus",
        topo::nic_numa,
        needs::NIC_NUMA
    ),
    check!(
        "topo.rails",
        "every gpu has the same number of close nics",
        topo::rails,
        needs::TOPOLOGY
    ),
    check!(
        "gdr.gpu",
        "per gpu: nccl would use gpudirect rdma with at least one nic, and why not",
        gdr::per_gpu,
        needs::TOPOLOGY
    ),
    check!(
        "counters.aer",
        "no pcie errors on gpus, nics and the bridges between them (aer)",
        counters::aer,
        needs::COUNTERS
    ),
    check!(
        "counters.ib-port",
        "rdma port link counters (link_downed, symbol_error, ...) do not grow",
        counters::ib_port,
        needs::COUNTERS
    ),
    check!(
        "counters.rdma-transport",
        "rdma transport error counters (retransmissions, sequence errors) do not grow",
        counters::rdma_transport,
        needs::COUNTERS
    ),
    check!(
        "counters.nvlink",
        "nvlink crc, replay and recovery counters do not grow (nvml)",
        counters::nvlink,
        needs::COUNTERS
    ),
    check!(
        "counters.pcie-replay",
        "each gpu's pcie replay counter does not grow (nvml)",
        counters::pcie_replay,
        needs::COUNTERS
    ),
    check!(
        "kernel.xid",
        "no nvidia xid since boot that asks to drain the node",
        kernel::xid,
        needs::KERNEL_LOG
    ),
    check!(
        "kernel.iommu-fault",
        "no iommu fault on a gpu or nic since boot (dmar, amd-vi)",
        kernel::iommu_fault,
        needs::KERNEL_LOG
    ),
    check!(
        "kernel.mlx5-health",
        "no mlx5 health or firmware-fatal event since boot",
        kernel::mlx5_health,
        needs::KERNEL_LOG
    ),
    check!(
        "pcie.p2p-path",
        "gpu pairs without nvlink: no bridge between them redirects p2p (acs), nccl's p2p level",
        pcie::p2p_path,
        needs::PCI_TREE_ACS
    ),
    check!(
        "container.devices",
        "the job's container can open the rdma and gpu device nodes (device cgroup)",
        container::devices,
        needs::CONTAINER
    ),
    check!(
        "container.ipc-lock",
        "the job's container can pin memory for rdma: cap_ipc_lock or unlimited memlock",
        container::ipc_lock,
        needs::CONTAINER
    ),
    check!(
        "container.shm",
        "the job's container has a /dev/shm large enough for nccl",
        container::shm,
        needs::CONTAINER
    ),
    check!(
        "container.nccl",
        "the nccl and net plugin the job's loader finds; no nccl_* variable turns gdr off",
        container::nccl,
        needs::CONTAINER
    ),
    check!(
        "container.host-diff",
        "nothing the job's container sees is worse than the host's report (--compare-host)",
        container::host_diff,
        needs::CONTAINER
    ),
    check!(
        "gdrcopy.gdrdrv",
        "gdrcopy's gdrdrv is loaded with a /dev/gdrdrv every job can open (when used)",
        gdrcopy::gdrdrv,
        gdrcopy::NEEDS
    ),
    check!(
        "pcie.relaxed-ordering",
        "nics have relaxed ordering on where the cpu needs it for full gdr bandwidth",
        pcie::relaxed_ordering,
        needs::CONFIG_SPACE
    ),
    check!(
        "pcie.nic-tlp",
        "nic maxpayload fits its path; extended and 10-bit tags as its peers accept",
        pcie::nic_tlp,
        needs::CONFIG_SPACE
    ),
    check!(
        "kmod.peermem-abi",
        "the nvidia-peermem module on disk will load against this kernel's ib_core",
        peermem_abi::peermem_abi,
        peermem_abi::NEEDS
    ),
    check!(
        "driver.fabric-manager",
        "on nvswitch systems fabric manager is installed, enabled and of the driver's version",
        fabric::fabric_manager,
        fabric::NEEDS
    ),
    check!(
        "gpu.fabric-state",
        "each gpu has joined the nvlink fabric (nvml fabric state); nvls as nccl decides it",
        fabric::fabric_state,
        fabric::NEEDS
    ),
    check!(
        "kernel.peermem",
        "no peer-memory client error since boot (gpu memory freed while a nic had it registered)",
        kernel::peermem,
        needs::KERNEL_LOG
    ),
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
/// the whole report down, and a `pass` without evidence (no item with both a source and an
/// observed value) becomes an `error` naming the check: a pass on nothing is no pass.
pub fn run(node: &Node, sel: &Selection) -> Vec<Finding> {
    run_each(node, sel)
        .into_iter()
        .flat_map(|(_, f)| f)
        .collect()
}

/// [`run`], each check's findings beside its row, in table order.
pub fn run_each(node: &Node, sel: &Selection) -> Vec<(&'static CheckDef, Vec<Finding>)> {
    let _memo = crate::gdr::memo_scope(node);
    let defs: Vec<&'static CheckDef> = CHECKS.iter().filter(|d| sel.wants(d)).collect();
    let one = |def: &CheckDef| match std::panic::catch_unwind(|| (def.run)(node)) {
        Ok(f) => f
            .into_iter()
            .map(|f| require_evidence(def.id, f))
            .collect::<Vec<_>>(),
        Err(_) => vec![Finding::new(
            def.id,
            crate::report::Status::Error,
            "node",
            "internal error in this check; please report it with a `gdrdoctor snapshot`",
        )],
    };
    // The checks are pure functions of the node: a few threads, the findings kept in table
    // order (a live `check` waits for them).
    let threads = crate::cpus().clamp(1, 4);
    if threads < 2 || defs.len() < 16 {
        return defs.into_iter().map(|d| (d, one(d))).collect();
    }
    // Each thread takes the next check in the table (their costs differ by a hundredfold: the
    // AER and GDR checks of an 8-GPU node against a version check), the findings are put back
    // in table order.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Vec<Finding>)> = std::thread::scope(|s| {
        let take = || {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(d) = defs.get(i) else { break };
                mine.push((i, one(d)));
            }
            mine
        };
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(take)).collect();
        let mut out = take();
        for h in handles {
            // A thread cannot fail (every check runs under catch_unwind); should it anyway,
            // the checks it did not hand back run again below.
            if let Ok(part) = h.join() {
                out.extend(part);
            }
        }
        out
    });
    done.sort_by_key(|(i, _)| *i);
    let mut out = Vec::new();
    let mut at = 0;
    for (i, f) in done {
        while at < i {
            out.push((defs[at], one(defs[at])));
            at += 1;
        }
        out.push((defs[i], f));
        at = i + 1;
    }
    while at < defs.len() {
        out.push((defs[at], one(defs[at])));
        at += 1;
    }
    out
}

/// The invariant every check's `pass` is held to (see [`run`]).
fn require_evidence(id: &str, f: Finding) -> Finding {
    if f.status != crate::report::Status::Pass || f.has_evidence() {
        return f;
    }
    Finding {
        status: crate::report::Status::Error,
        message: format!(
            "internal error: {id} passed without evidence ({}); a pass must name what it read: please report it with a `gdrdoctor snapshot`",
            f.message
        ),
        ..f
    }
}

impl Selection {
    /// Whether the selection runs at least one check (`--only X --skip X` runs none: a usage
    /// error, not an empty report that exits 0).
    pub fn selects_any(&self) -> bool {
        CHECKS.iter().any(|d| self.wants(d))
    }
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
        assert!(s.selects_any());
        let none = Selection {
            only: vec!["pcie.mrrs".into()],
            skip: vec!["pcie".into()],
        };
        assert!(!none.selects_any());
    }

    #[test]
    fn a_pass_without_evidence_becomes_an_error_naming_the_check() {
        use crate::report::Status;
        let bare = Finding::new("gpu.persistence", Status::Pass, "0000:18:00.0", "on");
        let f = require_evidence("gpu.persistence", bare.clone());
        assert_eq!(f.status, Status::Error);
        assert!(f.message.contains("gpu.persistence"), "{}", f.message);
        assert_eq!(f.subject, "0000:18:00.0");
        // An evidence item without an observed value is no evidence either.
        let empty = bare.clone().evidence("/sys/x", " ");
        assert_eq!(require_evidence("x.y", empty).status, Status::Error);
        let ok = bare.evidence("nvmlDeviceGetPersistenceMode", "Enabled");
        assert_eq!(require_evidence("x.y", ok).status, Status::Pass);
        // Other statuses are left alone.
        let warn = Finding::new("x.y", Status::Warn, "node", "w");
        assert_eq!(require_evidence("x.y", warn).status, Status::Warn);
    }
}
