//! What a check reads that a paste may hold (`gdrdoctor diagnose`), one value per input several
//! checks share: each `check!` row of `CHECKS` states its own.

use crate::paste::kind::Kind::{self, *};

/// The input of a check as a paste shows it: the kinds of block that hold it, what it is (in
/// words), and the command that shows it. A check whose input is not in the paste is `skip`
/// with these words: "peer memory: not in the pasted text; run `lsmod | grep ...`".
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub kinds: &'static [Kind],
    pub what: &'static str,
    pub command: &'static str,
}

pub const PCI_DEVICES: Needs = Needs {
    kinds: &[Lspci],
    what: "pci devices",
    command: "sudo lspci -vvv",
};
pub const NIC_NUMA: Needs = Needs {
    kinds: &[Lspci],
    what: "the nics' numa nodes",
    command: "sudo lspci -vvv",
};
pub const DRIVER_AND_KERNEL: Needs = Needs {
    kinds: &[NvidiaVersion, Dmesg, Uname],
    what: "nvidia driver flavor and kernel",
    command: "cat /proc/driver/nvidia/version; uname -r",
};
pub const DRIVER_PARAMS: Needs = Needs {
    kinds: &[],
    what: "nvidia driver parameters",
    command: "cat /proc/driver/nvidia/params",
};
pub const PEER_MEMORY: Needs = Needs {
    kinds: &[Lsmod, ProcModules],
    what: "peer memory",
    command: "lsmod | grep -E 'peermem|peer_mem'",
};
pub const LEGACY_PEER_MEMORY: Needs = Needs {
    kinds: &[Lsmod, ProcModules],
    what: "the legacy nv_peer_mem module",
    command: "lsmod | grep -E 'peermem|peer_mem'",
};
pub const IOMMU_MODE: Needs = Needs {
    kinds: &[Cmdline, Dmesg],
    what: "the iommu mode",
    command: "cat /proc/cmdline; ls /sys/class/iommu",
};
pub const RDMA_DEVICES: Needs = Needs {
    kinds: &[IbvDevinfo, Ibstat],
    what: "rdma devices and ports",
    command: "ibv_devinfo -v",
};
pub const ROCE: Needs = Needs {
    kinds: &[],
    what: "the RoCE GID tables, netdevs and QoS",
    command: "gdrdoctor check",
};
pub const MEMLOCK: Needs = Needs {
    kinds: &[Ulimit],
    what: "the locked-memory limit",
    command: "ulimit -l",
};
pub const LIVE_GPU: Needs = Needs {
    kinds: &[],
    what: "live gpu facts (cuda, nvml)",
    command: "gdrdoctor check",
};
pub const GPU_BAR1: Needs = Needs {
    kinds: &[Lspci],
    what: "gpu bar1 size",
    command: "sudo lspci -vvv -d 10de:",
};
pub const CONFIG_SPACE: Needs = Needs {
    kinds: &[Lspci],
    what: "pci config space",
    command: "sudo lspci -vvvxxxx",
};
pub const PCI_TREE_ACS: Needs = Needs {
    kinds: &[LspciTree],
    what: "the pci tree with acs control",
    command: "sudo lspci -vvvxxxx; lspci -tv",
};
pub const TOPOLOGY: Needs = Needs {
    kinds: &[TopoMatrix],
    what: "the gpu-nic topology",
    command: "nvidia-smi topo -m",
};
pub const COUNTERS: Needs = Needs {
    kinds: &[],
    what: "error counters (judged on two readings)",
    command: "gdrdoctor check --interval 10s",
};
pub const KERNEL_LOG: Needs = Needs {
    kinds: &[Dmesg],
    what: "the kernel log",
    command: "sudo dmesg",
};
pub const CONTAINER: Needs = Needs {
    kinds: &[],
    what: "the job container's own view (device nodes, capabilities, /dev/shm)",
    command: "gdrdoctor check --in-container (inside the job's container)",
};
