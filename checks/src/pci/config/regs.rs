//! Register offsets, capability ids and their names, device/port types (PCI Express Base
//! Specification; positions cross-checked against pciutils' `lib/header.h`).

/// Offset of the first standard capability pointer (type 0 and type 1 headers).
pub(super) const CAP_PTR: usize = 0x34;

/// CardBus bridges keep the capability pointer elsewhere.
pub(super) const CB_CAP_PTR: usize = 0x14;

/// Status register bit: capability list present.
pub(super) const STATUS_CAP_LIST: u16 = 0x10;

/// First extended capability header.
pub(super) const EXT_START: usize = 0x100;

/// Size of a full PCIe config space.
pub(super) const EXT_END: usize = 0x1000;

/// Standard capabilities live in 0x40..0x100, 4-byte aligned: at most 48.
pub(super) const MAX_STD_CAPS: usize = 48;

/// Same bound as the Linux kernel: (4096 - 256) / 8 extended capabilities.
pub(super) const MAX_EXT_CAPS: usize = (EXT_END - EXT_START) / 8;

/// Standard capability ids used by the decoder.
pub const CAP_ID_PCIX: u8 = 0x07;

pub const CAP_ID_SSVID: u8 = 0x0d;

pub const CAP_ID_EXP: u8 = 0x10;

/// Extended capability ids used by the decoder.
pub const EXT_CAP_ID_AER: u16 = 0x0001;

pub const EXT_CAP_ID_ACS: u16 = 0x000d;

pub const EXT_CAP_ID_ATS: u16 = 0x000f;

/// PCIe device/port types (PCIe capability flags bits 7:4).
pub const PCIE_TYPE_ENDPOINT: u8 = 0x0;

pub const PCIE_TYPE_LEGACY_ENDPOINT: u8 = 0x1;

pub const PCIE_TYPE_ROOT_PORT: u8 = 0x4;

pub const PCIE_TYPE_UPSTREAM: u8 = 0x5;

pub const PCIE_TYPE_DOWNSTREAM: u8 = 0x6;

pub const PCIE_TYPE_PCIE_TO_PCI_BRIDGE: u8 = 0x7;

pub const PCIE_TYPE_PCI_TO_PCIE_BRIDGE: u8 = 0x8;

pub const PCIE_TYPE_RC_INTEGRATED_ENDPOINT: u8 = 0x9;

pub const PCIE_TYPE_RC_EVENT_COLLECTOR: u8 = 0xa;

pub(super) fn link_speed_gts(code: u32) -> Option<f64> {
    match code {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        _ => None,
    }
}

/// Name of a PCIe device/port type (PCIe capability flags bits 7:4).
pub fn pcie_type_name(device_type: u8) -> &'static str {
    match device_type {
        PCIE_TYPE_ENDPOINT => "Endpoint",
        PCIE_TYPE_LEGACY_ENDPOINT => "Legacy Endpoint",
        PCIE_TYPE_ROOT_PORT => "Root Port",
        PCIE_TYPE_UPSTREAM => "Upstream Port",
        PCIE_TYPE_DOWNSTREAM => "Downstream Port",
        PCIE_TYPE_PCIE_TO_PCI_BRIDGE => "PCI-PCI Bridge",
        PCIE_TYPE_PCI_TO_PCIE_BRIDGE => "PCI/PCI-X to PCIe Bridge",
        PCIE_TYPE_RC_INTEGRATED_ENDPOINT => "Root Complex Integrated Endpoint",
        PCIE_TYPE_RC_EVENT_COLLECTOR => "Root Complex Event Collector",
        _ => "Unknown",
    }
}

/// Name of a standard capability id.
pub fn cap_name(id: u8) -> &'static str {
    match id {
        0x00 => "Null",
        0x01 => "Power Management",
        0x02 => "AGP",
        0x03 => "Vital Product Data",
        0x04 => "Slot Identification",
        0x05 => "MSI",
        0x06 => "CompactPCI Hot Swap",
        0x07 => "PCI-X",
        0x08 => "HyperTransport",
        0x09 => "Vendor Specific",
        0x0a => "Debug Port",
        0x0b => "CompactPCI Central Resource Control",
        0x0c => "PCI Hot-Plug",
        0x0d => "Bridge Subsystem Vendor ID",
        0x0e => "AGP 8x",
        0x0f => "Secure Device",
        0x10 => "PCI Express",
        0x11 => "MSI-X",
        0x12 => "SATA HBA",
        0x13 => "Advanced Features",
        0x14 => "Enhanced Allocation",
        0x15 => "Flattening Portal Bridge",
        _ => "Unknown",
    }
}

/// Name of an extended capability id.
pub fn ext_cap_name(id: u16) -> &'static str {
    match id {
        0x0000 => "Null",
        0x0001 => "Advanced Error Reporting",
        0x0002 => "Virtual Channel",
        0x0003 => "Device Serial Number",
        0x0004 => "Power Budgeting",
        0x0005 => "Root Complex Link Declaration",
        0x0006 => "Root Complex Internal Link Control",
        0x0007 => "Root Complex Event Collector Endpoint Association",
        0x0008 => "Multi-Function Virtual Channel",
        0x0009 => "Virtual Channel (MFVC)",
        0x000a => "Root Complex Register Block",
        0x000b => "Vendor-Specific Extended",
        0x000c => "Configuration Access Correlation",
        0x000d => "Access Control Services",
        0x000e => "Alternative Routing-ID Interpretation",
        0x000f => "Address Translation Services",
        0x0010 => "Single Root I/O Virtualization",
        0x0011 => "Multi-Root I/O Virtualization",
        0x0012 => "Multicast",
        0x0013 => "Page Request Interface",
        0x0015 => "Resizable BAR",
        0x0016 => "Dynamic Power Allocation",
        0x0017 => "TLP Processing Hints",
        0x0018 => "Latency Tolerance Reporting",
        0x0019 => "Secondary PCI Express",
        0x001a => "Protocol Multiplexing",
        0x001b => "Process Address Space ID",
        0x001c => "LN Requester",
        0x001d => "Downstream Port Containment",
        0x001e => "L1 PM Substates",
        0x001f => "Precision Time Measurement",
        0x0020 => "PCI Express over M-PHY",
        0x0021 => "FRS Queueing",
        0x0022 => "Readiness Time Reporting",
        0x0023 => "Designated Vendor-Specific",
        0x0024 => "VF Resizable BAR",
        0x0025 => "Data Link Feature",
        0x0026 => "Physical Layer 16.0 GT/s",
        0x0027 => "Lane Margining at the Receiver",
        0x0028 => "Hierarchy ID",
        0x0029 => "Native PCIe Enclosure Management",
        0x002a => "Physical Layer 32.0 GT/s",
        0x002b => "Alternate Protocol",
        0x002c => "System Firmware Intermediary",
        0x002d => "Shadow Functions",
        0x002e => "Data Object Exchange",
        0x002f => "Device 3",
        0x0030 => "Integrity and Data Encryption",
        0x0031 => "Physical Layer 64.0 GT/s",
        0x0032 => "Flit Logging",
        0x0033 => "Flit Performance Measurement",
        0x0034 => "Flit Error Injection",
        _ => "Unknown",
    }
}
