//! Collectors of what breaks GDR on a node that used to work (issue 17): RoCE addressing
//! (`roce`), error counters (`counters`), the kernel log (`kernel_log`). The counter baselines
//! that turn counters into rates are state (`crate::state::counters`). I/O only; the rules are
//! in the pure crate (`roce.rs`, `counters.rs`, `klog.rs`).

pub mod counters;
pub mod kernel_log;
pub mod roce;

use crate::state::{self, counters as baseline};

use crate::source::reader::{ReadError, Root};
use gdrdoctor_checks::model::{Fact, Health, PciDevice, RdmaDevice};

pub(crate) const NOT_CAPTURED: &str = "not in this capture";

/// Everything issue 17's checks read, for `collect::collect`.
pub fn collect(root: &Root, pci: &Fact<Vec<PciDevice>>, rdma: &Fact<Vec<RdmaDevice>>) -> Health {
    collect_with(
        root,
        pci,
        rdma,
        collect_rdma_side(root, rdma),
        kernel_log::collect(root),
    )
}

/// The half of [`collect`] that needs only the RDMA list: RoCE addressing and the ports'
/// counters (`collect::node` reads it while the PCI functions are still being read).
pub struct RdmaSide {
    pub roce: Fact<Vec<gdrdoctor_checks::model::RocePort>>,
    pub port_counters: Fact<Vec<gdrdoctor_checks::model::PortCounters>>,
}

pub fn collect_rdma_side(root: &Root, rdma: &Fact<Vec<RdmaDevice>>) -> RdmaSide {
    RdmaSide {
        roce: roce::collect(root, rdma),
        port_counters: counters::collect_ports(root, rdma),
    }
}

/// [`collect`] from its parts read elsewhere: the RDMA side and the kernel log (which needs
/// neither list); the AER files are read here.
pub fn collect_with(
    root: &Root,
    pci: &Fact<Vec<PciDevice>>,
    rdma: &Fact<Vec<RdmaDevice>>,
    side: RdmaSide,
    kernel_log: Fact<gdrdoctor_checks::model::KernelLog>,
) -> Health {
    let (baseline, baseline_note) = if root.is_live() {
        (None, None)
    } else {
        match baseline::snapshot_baseline_checked(root) {
            Ok(b) => (b, None),
            Err(why) => (None, Some(why)),
        }
    };
    Health {
        roce: side.roce,
        aer: counters::collect_aer(root, pci, rdma),
        port_counters: side.port_counters,
        baseline,
        baseline_note,
        kernel_log,
    }
}

/// A read error's reason, with "not found" turned into `missing` for a complete root and
/// "not in this capture" for a foreign one.
pub(crate) fn reason(root: &Root, e: &ReadError, missing: &str) -> String {
    if e.is_not_found() {
        if root.is_complete() {
            missing.to_string()
        } else {
            NOT_CAPTURED.to_string()
        }
    } else {
        e.reason()
    }
}

/// Whether `snapshot` on a live node takes the state file of the last periodic run as its
/// counter baseline. The `snapshot` command turns it on; library callers (tests comparing a
/// live collection with its snapshot) keep one reading on both sides.
pub static SNAPSHOT_USES_STATE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Files a snapshot adds for issue 17 (kernel path -> content): the kernel log lines the checks
/// used (`gdrdoctor/kernel-log.txt`) and the counter baseline they compared against
/// (`gdrdoctor/counters-baseline.json`), so that `--sysroot` replays both. On a live node
/// without a baseline, the state file of the last periodic run is used when it is valid (see
/// [`SNAPSHOT_USES_STATE`]).
pub fn snapshot_files(
    live: bool,
    node: &mut gdrdoctor_checks::model::Node,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if let Fact::Known { value, .. } = &node.health.kernel_log {
        out.push((
            kernel_log::SNAPSHOT_PATH.to_string(),
            kernel_log::render(value).into_bytes(),
        ));
    }
    if live
        && node.health.baseline.is_none()
        && SNAPSHOT_USES_STATE.load(std::sync::atomic::Ordering::Relaxed)
    {
        let dir = state::default_dir();
        if let Ok(Some(b)) = baseline::load(
            &dir,
            state::boot_id().as_deref(),
            crate::sys::clock::now_ms(),
        ) {
            node.health.baseline = Some(b);
        }
    }
    if let Some(b) = &node.health.baseline {
        if let Ok(j) = serde_json::to_vec_pretty(b) {
            out.push((baseline::SNAPSHOT_BASELINE.to_string(), j));
        }
    }
    out
}
