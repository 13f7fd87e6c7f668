//! PCI functions as sysfs shows them, and their BARs.

use super::fact::Fact;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciDevice {
    /// Domain:bus:device.function, lower case (`0000:00:06.0`).
    pub bdf: String,
    /// The resolved sysfs directory (`/sys/devices/pci0000:00/0000:00:06.0`).
    pub sysfs_path: String,
    /// The upstream device in the resolved path (a bridge or switch port), `None` below a root.
    pub parent: Option<String>,
    /// The host bridge directory (`pci0000:00`).
    pub host_bridge: String,
    pub vendor_id: Fact<u16>,
    pub device_id: Fact<u16>,
    pub subsystem_vendor_id: Fact<u16>,
    pub subsystem_device_id: Fact<u16>,
    pub class: Fact<u32>,
    pub numa_node: Fact<i32>,
    pub local_cpulist: Fact<String>,
    pub cur_link_speed: Fact<String>,
    pub cur_link_width: Fact<u32>,
    pub max_link_speed: Fact<String>,
    pub max_link_width: Fact<u32>,
    pub resources: Fact<Vec<Resource>>,
    /// Name of the bound driver, `None` when unbound.
    pub driver: Fact<Option<String>>,
    /// IOMMU group number, `None` when the device has no group.
    pub iommu_group: Fact<Option<String>>,
    /// Raw config space (64 bytes for non-root readers, 256 or 4096 for root).
    #[serde(skip)]
    pub config: Fact<Vec<u8>>,
    /// SR-IOV virtual function (has a `physfn` link).
    pub is_virtfn: bool,
}

impl PciDevice {
    pub fn class_code(&self) -> Option<u32> {
        self.class.get().copied()
    }
    pub fn is_nvidia_gpu(&self) -> bool {
        self.vendor_id.get() == Some(&0x10de)
            && self.class_code().is_some_and(|c| (c >> 16) == 0x03)
    }
    /// An NVSwitch (NVIDIA, class 0x0680 "other bridge"), as HGX boards expose them.
    pub fn is_nvswitch(&self) -> bool {
        self.vendor_id.get() == Some(&0x10de)
            && self.class_code().is_some_and(|c| (c >> 8) == 0x0680)
    }
    /// A function that may be an NVIDIA GPU but whose vendor or class cannot be read: a
    /// display-class function of unknown vendor, or one whose ids are both damaged, or an NVIDIA
    /// function of damaged class. A capture that lacks the files says nothing (not suspect).
    pub fn identity_unreadable(&self) -> bool {
        let damaged = |r: Option<&str>| r.is_some_and(|r| !r.starts_with("not in this capture"));
        let display = self.class_code().is_some_and(|c| (c >> 16) == 0x03);
        let nvidia = self.vendor_id.get() == Some(&0x10de);
        (display && self.vendor_id.get().is_none())
            || (damaged(self.vendor_id.reason()) && damaged(self.class.reason()))
            || (nvidia && damaged(self.class.reason()))
    }
    pub fn is_bridge(&self) -> bool {
        self.class_code().is_some_and(|c| (c >> 8) == 0x0604)
    }
    /// The decoded config space, when it was read.
    pub fn decoded(&self) -> Option<crate::pci::config::ConfigSpace> {
        self.config.get().map(|b| crate::pci::config::decode(b))
    }
    /// Where the current link speed and width were read when that was not their sysfs files:
    /// the config space register (`.../config [LnkSta]`, see `pci::attrs`).
    pub fn link_from_config(&self) -> Option<&str> {
        let s = self.cur_link_speed.source();
        (!s.ends_with("/current_link_speed")).then_some(s)
    }
    pub fn is_network(&self) -> bool {
        self.class_code().is_some_and(|c| (c >> 16) == 0x02)
    }
}

/// One line of sysfs `resource`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resource {
    /// Line number: 0-5 BARs, 6 expansion ROM, 7+ bridge windows / SR-IOV BARs.
    pub index: usize,
    pub start: u64,
    pub end: u64,
    pub flags: u64,
}

impl Resource {
    pub const IORESOURCE_IO: u64 = 0x100;
    pub const IORESOURCE_MEM: u64 = 0x200;
    pub const IORESOURCE_PREFETCH: u64 = 0x2000;
    pub const IORESOURCE_MEM_64: u64 = 0x0010_0000;
    pub fn is_set(&self) -> bool {
        !(self.start == 0 && self.end == 0) && self.end >= self.start
    }
    pub fn size(&self) -> u64 {
        if self.is_set() {
            self.end.wrapping_sub(self.start).wrapping_add(1)
        } else {
            0
        }
    }
    pub fn is_io(&self) -> bool {
        self.flags & Self::IORESOURCE_IO != 0
    }
    pub fn is_mem(&self) -> bool {
        self.flags & Self::IORESOURCE_MEM != 0
    }
    pub fn prefetchable(&self) -> bool {
        self.flags & Self::IORESOURCE_PREFETCH != 0
    }
    pub fn mem64(&self) -> bool {
        self.flags & Self::IORESOURCE_MEM_64 != 0
    }
}
