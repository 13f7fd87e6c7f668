//! The findings of `gdrdoctor probe`, one table per probe family in the order the probes run
//! (the binary's probe registry, `src/probe/mod.rs` `PROBES`, points each probe at its table).

use super::def::{finding, FindingDef};

/// Finding ids every probe may report.
pub static SHARED: &[FindingDef] = &[
    finding!(
        "probe.cuda",
        "the cuda driver can be loaded and sees the gpus the probes need"
    ),
    finding!(
        "probe.gpu-health",
        "the gpu is healthy in a fresh process after a probe worker was killed"
    ),
];

/// `probe --registration`.
pub static REGISTRATION: &[FindingDef] = &[
    finding!(
        "probe.dmabuf-export",
        "cuMemAlloc'd gpu memory exports as a dma-buf at 4 KiB to 1 GiB and at a 4 KiB offset"
    ),
    finding!(
        "probe.managed-memory",
        "managed memory is refused for export (use cudaMalloc for rdma buffers)"
    ),
    finding!(
        "probe.host-register",
        "pinned host memory registers with cuMemHostRegister (the host baseline)"
    ),
    finding!(
        "probe.verbs-registration",
        "gpu memory registers with the nic: ibv_reg_mr (peer memory) and ibv_reg_dmabuf_mr"
    ),
    finding!(
        "probe.nccl-dmabuf",
        "nccl's own dma-buf probe (ibv_reg_dmabuf_mr with fd -1) on each rdma device"
    ),
];

/// `probe --hang`.
pub static HANG: &[FindingDef] = &[
    finding!("probe.hang", "spin-wait protocols complete without a stall (and how fast); a stall says who waits on what"),
    finding!("probe.hang-inject", "each injected hang is detected, localised and classified, and the gpu recovers"),
];

/// `probe --p2p`.
pub static P2P: &[FindingDef] = &[finding!(
    "probe.p2p-bandwidth",
    "peer copy bandwidth and latency per gpu pair, against the link's theoretical rate"
)];

/// `probe --nccl`.
pub static NCCL: &[FindingDef] = &[
    finding!("probe.nccl-run", "nccl itself runs one all-reduce over the node's gpus, and its sums are right"),
    finding!("probe.nccl-topology", "nccl's topology dump agrees with gdrdoctor's view of the node (gpus, rdma devices, paths, nvlink, gdr support)"),
    finding!("probe.nccl", "nccl's transports and gdr use, per gpu pair and per gpu x nic x direction, agree with gdrdoctor's prediction"),
];

/// `probe --doorbell`.
pub static DOORBELL: &[FindingDef] = &[
    finding!("probe.doorbell-layout", "the gpu rings emulated mlx5 doorbells at the offsets the formula gives, and nowhere else"),
    finding!("probe.doorbell-latency", "gpu doorbell write to host visibility per store flavour, and whether the payload lands first"),
    finding!("probe.doorbell-mlx5", "a real mlx5 uar: doorbell address inside bar0 at a register offset, and mappable by the gpu"),
];

/// Every probe family's table: the shared ones first, then each probe's in the order they run.
pub static FAMILIES: &[&[FindingDef]] = &[SHARED, REGISTRATION, HANG, P2P, NCCL, DOORBELL];

/// Every probe finding, in the order of [`FAMILIES`].
pub fn all() -> impl Iterator<Item = &'static FindingDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}
