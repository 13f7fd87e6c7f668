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

/// The port states `state_show()` writes (drivers/infiniband/core/sysfs.c), by number.
pub const PORT_STATES: [&str; 6] = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];

/// The physical states `phys_state_show()` writes (`ib_port_phys_state_str()`, include/rdma/
/// ib_verbs.h), by number; 0 is none. Older kernels wrote `Phy Test`, newer `PhyTest`;
/// `ibv_devinfo` writes the same names in capitals with underscores (`LINK_UP`).
pub const PHYS_STATES: [&str; 8] = [
    "",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "PhyTest",
];

/// The name of a port state as the kernel writes it (`4: ACTIVE` -> `ACTIVE`; the name is
/// [`PORT_STATES`]'s, [`PHYS_STATES`]'s for the physical state), or why the text
/// is not that (cut, empty, a number and a name that disagree, a name the kernel never writes).
pub fn port_state_value(s: &str) -> Result<&'static str, String> {
    kernel_value(s, &PORT_STATES, 0)
}

/// The name of a physical state as the kernel writes it (`5: LinkUp` -> `LinkUp`), or why not.
pub fn phys_state_value(s: &str) -> Result<&'static str, String> {
    kernel_value(s, &PHYS_STATES, 1)
}

fn kernel_value(s: &str, names: &[&'static str], first: usize) -> Result<&'static str, String> {
    let norm = |t: &str| -> String {
        t.chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let Some((n, name)) = s.split_once(':') else {
        return Err(format!("{s:?} is not `N: NAME` as the kernel writes it"));
    };
    let name = name.trim();
    let known = n
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (first..names.len()).contains(n))
        .and_then(|n| names.get(n).copied());
    match known {
        Some(k) if norm(k) == norm(name) && !name.is_empty() => Ok(k),
        Some(k) => Err(format!(
            "{s:?} is not `N: NAME` as the kernel writes it ({} is {k})",
            n.trim()
        )),
        None => Err(format!(
            "{s:?} is not `N: NAME` as the kernel writes it (no state numbered {:?})",
            n.trim()
        )),
    }
}

impl RdmaPort {
    /// The state name without its number (`ACTIVE`); `None` when the state is unreadable or
    /// not what the kernel writes ([`port_state_value`] says why).
    pub fn state_name(&self) -> Option<&str> {
        self.state.get().and_then(|s| port_state_value(s).ok())
    }
    /// The physical state's name (`LinkUp`); `None` when unreadable or damaged.
    pub fn phys_state_name(&self) -> Option<&str> {
        self.phys_state.get().and_then(|s| phys_state_value(s).ok())
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
