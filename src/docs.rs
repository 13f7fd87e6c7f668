//! The long-form check pages (`docs/checks/<id>.md`), embedded for `gdrdoctor explain`.

macro_rules! pages {
    ($($id:literal),* $(,)?) => {
        pub static PAGES: &[(&str, &str)] = &[
            $(($id, include_str!(concat!("../docs/checks/", $id, ".md"))),)*
        ];
    };
}

pages!(
    "gpu.present",
    "driver.nvidia",
    "driver.grdma-override",
    "kmod.nvidia-peermem",
    "kmod.nv-peer-mem",
    "kmod.dmabuf",
    "iommu.mode",
    "rdma.devices",
    "rdma.ports",
    "rdma.firmware",
    "mem.memlock",
    "gpu.gdr-support",
    "gpu.persistence",
    "gpu.row-remap",
    "gpu.nvlink",
    "gpu.p2p",
    "gpu.bar1",
    "pcie.bars",
    "pcie.acs-redirect",
    "pcie.ats",
    "pcie.link",
    "pcie.mrrs",
    "topo.nic-distance",
    "topo.nic-numa",
    "topo.rails",
    "gdr.gpu",
);

macro_rules! probe_pages {
    ($($id:literal),* $(,)?) => {
        /// Pages of the probe finding ids (`crate::probe::PROBE_IDS`).
        pub static PROBE_PAGES: &[(&str, &str)] = &[
            $(($id, include_str!(concat!("../docs/checks/", $id, ".md"))),)*
        ];
    };
}

probe_pages!(
    "probe.cuda",
    "probe.dmabuf-export",
    "probe.managed-memory",
    "probe.host-register",
    "probe.verbs-registration",
    "probe.nccl-dmabuf",
    "probe.gpu-health",
    "probe.hang",
    "probe.hang-inject",
    "probe.doorbell-layout",
    "probe.doorbell-latency",
    "probe.doorbell-mlx5",
    "probe.p2p-bandwidth",
);

macro_rules! policy_pages {
    ($($id:literal),* $(,)?) => {
        /// Pages of the policy finding ids (`gdrdoctor_checks::policy::POLICY_IDS`).
        pub static POLICY_PAGES: &[(&str, &str)] = &[
            $(($id, include_str!(concat!("../docs/checks/", $id, ".md"))),)*
        ];
    };
}

policy_pages!(
    "policy.gpu",
    "policy.rdma",
    "policy.ports",
    "policy.pcie",
    "policy.driver",
    "policy.firmware",
    "policy.peer-memory",
    "policy.iommu",
    "policy.gdr",
    "policy.kernel",
    "policy.cmdline",
    "policy.waiver",
);

pub fn page(id: &str) -> Option<&'static str> {
    PAGES
        .iter()
        .chain(PROBE_PAGES.iter())
        .chain(POLICY_PAGES.iter())
        .find(|(i, _)| *i == id)
        .map(|(_, p)| *p)
}
