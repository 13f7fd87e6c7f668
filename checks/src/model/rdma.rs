//! RDMA devices and their ports.

use super::fact::Fact;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RdmaDevice {
    pub name: String,
    /// The PCI function behind the device (`/sys/class/infiniband/<dev>/device` resolved).
    pub pci_bdf: Fact<Option<String>>,
    pub fw_ver: Fact<String>,
    pub hca_type: Fact<String>,
    pub board_id: Fact<String>,
    pub node_guid: Fact<String>,
    pub node_type: Fact<String>,
    pub ports: Fact<Vec<RdmaPort>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RdmaPort {
    pub port: u32,
    /// Raw sysfs text, e.g. `4: ACTIVE`.
    pub state: Fact<String>,
    /// Raw sysfs text, e.g. `5: LinkUp`.
    pub phys_state: Fact<String>,
    pub link_layer: Fact<String>,
    pub rate: Fact<String>,
    /// Number of non-zero GIDs in `ports/<p>/gids/*`.
    pub gid_count: Fact<usize>,
}

impl RdmaPort {
    /// The state name without its number (`ACTIVE`).
    pub fn state_name(&self) -> Option<&str> {
        self.state.get().map(|s| after_colon(s))
    }
    pub fn phys_state_name(&self) -> Option<&str> {
        self.phys_state.get().map(|s| after_colon(s))
    }
    /// The link layer when it is one NCCL can use and the kernel writes (`InfiniBand`,
    /// `Ethernet`: `link_layer_show()` in drivers/infiniband/core/sysfs.c). `None` when the file
    /// is unreadable, damaged or says `Unknown`: whether the port is RoCE is then undecided.
    pub fn link_layer_name(&self) -> Option<&str> {
        self.link_layer
            .get()
            .map(|s| s.trim())
            .filter(|s| matches!(*s, "InfiniBand" | "Ethernet"))
    }
}

/// `4: ACTIVE` -> `ACTIVE`; text without a colon is returned trimmed.
pub fn after_colon(s: &str) -> &str {
    match s.split_once(':') {
        Some((_, rest)) => rest.trim(),
        None => s.trim(),
    }
}
