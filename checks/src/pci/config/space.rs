//! The decoded config space ([`ConfigSpace`]): header, BARs, the capabilities found, the
//! decoded PCIe, ACS, ATS and AER capabilities, and where a capability list broke.

use serde::Serialize;

/// Decoded configuration space of one PCI function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigSpace {
    /// Number of bytes that were available.
    pub len: usize,
    /// `len < 256`: the capability area could not be read.
    pub limited: bool,
    /// `len >= 4096`: the extended capability area was available.
    pub extended_readable: bool,
    pub vendor_id: Option<u16>,
    pub device_id: Option<u16>,
    pub command: Option<u16>,
    pub status: Option<u16>,
    pub revision: Option<u8>,
    /// 24-bit class code (base class, subclass, prog-if), e.g. 0x060400.
    pub class: Option<u32>,
    /// Header layout (low 7 bits of 0x0e): 0 normal, 1 PCI bridge, 2 CardBus.
    pub header_type: Option<u8>,
    pub multifunction: bool,
    /// Subsystem vendor id: type 0 at 0x2c; type-1 bridges from the Bridge
    /// Subsystem Vendor ID capability (0x0d), as lspci does.
    pub subsystem_vendor_id: Option<u16>,
    /// Subsystem id: type 0 at 0x2e; bridges as above.
    pub subsystem_id: Option<u16>,
    /// Type-1 bridges: primary bus number (0x18).
    pub primary_bus: Option<u8>,
    /// Type-1 bridges: secondary bus number (0x19).
    pub secondary_bus: Option<u8>,
    /// Type-1 bridges: subordinate bus number (0x1a).
    pub subordinate_bus: Option<u8>,
    /// Every BAR slot of the header (type 0: 6, type 1: 2), unassigned ones
    /// included (raw 0); a 64-bit BAR takes two slots and is one entry.
    pub bars: Vec<BarReg>,
    pub capabilities: Vec<CapEntry>,
    pub ext_capabilities: Vec<CapEntry>,
    pub pcie: Option<PcieCap>,
    pub acs: Option<Acs>,
    pub ats: Option<Ats>,
    pub aer: Option<Aer>,
    /// Human-readable notes about truncation, loops and broken chains.
    pub notes: Vec<String>,
    /// Where a capability list could not be walked to its end (a loop, a pointer into the
    /// header, an all-ones header from a failed read, more entries than fit): every capability
    /// after that point is unknown, so "capability absent" cannot be concluded. Empty for a
    /// chain that ends properly (next pointer 0); a short read is [`ConfigSpace::limited`] or
    /// a note, not a break.
    pub chain_breaks: Vec<ChainBreak>,
}

/// A capability list that could not be walked to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainBreak {
    /// `true` for the extended list (0x100..0x1000), `false` for the standard one.
    pub extended: bool,
    /// The register that could not be trusted: the pointer or header at this offset.
    pub offset: u16,
    /// What is wrong there, lowercase (`points to itself`, `all-ones header: config read failed`).
    pub reason: String,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = if self.extended {
            "extended capability list"
        } else {
            "capability list"
        };
        write!(f, "{list} broken at 0x{:03x}: {}", self.offset, self.reason)
    }
}

impl ConfigSpace {
    /// The first place a capability list could not be walked, if any.
    pub fn chain_break(&self) -> Option<&ChainBreak> {
        self.chain_breaks.first()
    }
}

impl ConfigSpace {
    pub(super) fn broke(&mut self, extended: bool, offset: usize, reason: String) {
        self.chain_breaks.push(ChainBreak {
            extended,
            offset: u16::try_from(offset).unwrap_or(u16::MAX),
            reason,
        });
    }
}

/// One Base Address Register.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarReg {
    /// BAR slot number (0..=5).
    pub index: u8,
    /// Raw low dword.
    pub raw: u32,
    /// Raw upper dword of a 64-bit memory BAR (None if 32-bit or unreadable).
    pub raw_hi: Option<u32>,
    pub io: bool,
    pub mem64: bool,
    pub prefetchable: bool,
    /// Base address with flag bits masked; upper half included when 64-bit.
    pub address: u64,
}

/// One entry of a capability list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapEntry {
    pub id: u16,
    pub offset: u16,
    /// Extended capabilities: version (header bits 19:16). Standard: 0.
    pub version: u8,
    pub name: &'static str,
}

/// PCI Express capability (standard capability id 0x10).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PcieCap {
    pub offset: u16,
    /// Capability version (flags bits 3:0).
    pub version: u8,
    /// Device/port type (flags bits 7:4), see the `PCIE_TYPE_*` constants.
    pub device_type: u8,
    pub device_type_name: &'static str,
    /// Slot implemented (flags bit 8; meaningful for downstream ports).
    pub slot_implemented: bool,
    pub devcap: u32,
    pub devctl: u16,
    pub devsta: u16,
    /// Link registers; None for devices without a link (RCiEP, RC event
    /// collector) or when truncated.
    pub lnkcap: Option<u32>,
    pub lnkctl: Option<u16>,
    pub lnksta: Option<u16>,
    /// Max_Payload_Size supported (DevCap), bytes.
    pub mps_supported: u32,
    /// Max_Payload_Size programmed (DevCtl), bytes.
    pub mps: u32,
    /// Max_Read_Request_Size (DevCtl), bytes.
    pub mrrs: u32,
    /// DevCtl: Enable Relaxed Ordering.
    pub relaxed_ordering: bool,
    /// DevCtl: Enable No Snoop.
    pub no_snoop: bool,
    /// DevCtl: Extended Tag Field Enable.
    pub ext_tag: bool,
    /// Device Capabilities bit 5, Extended Tag Field Supported (8-bit tags).
    pub ext_tag_supported: bool,
    /// Device Capabilities 2 bit 16, 10-Bit Tag Completer Supported (`None`: no DevCap2).
    pub tag10_completer: Option<bool>,
    /// Device Capabilities 2 bit 17, 10-Bit Tag Requester Supported.
    pub tag10_requester: Option<bool>,
    /// Device Control 2 bit 12, 10-Bit Tag Requester Enable.
    pub tag10_requester_enabled: Option<bool>,
    pub lnkcap_speed_gts: Option<f64>,
    pub lnkcap_width: Option<u8>,
    pub lnksta_speed_gts: Option<f64>,
    pub lnksta_width: Option<u8>,
    /// Version-2 registers (None for v1 capabilities or when truncated).
    pub lnkcap2: Option<u32>,
    pub devcap2: Option<u32>,
    pub devctl2: Option<u16>,
}

/// Access Control Services extended capability (id 0x000d).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Acs {
    pub offset: u16,
    pub cap: u16,
    pub ctl: u16,
    /// Control bit 0x01.
    pub src_valid: bool,
    /// Control bit 0x02.
    pub trans_blocking: bool,
    /// Control bit 0x04.
    pub req_redir: bool,
    /// Control bit 0x08.
    pub cmplt_redir: bool,
    /// Control bit 0x10.
    pub upstream_fwd: bool,
    /// Control bit 0x20.
    pub egress_ctl: bool,
    /// Control bit 0x40.
    pub direct_trans: bool,
    /// Capability bits 15:8.
    pub egress_vector_size: u8,
}

/// Address Translation Services extended capability (id 0x000f).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ats {
    pub offset: u16,
    pub cap: u16,
    pub ctl: u16,
    /// Control bit 15.
    pub enabled: bool,
    /// Capability bits 4:0; 0 means 32.
    pub invalidate_queue_depth: u8,
    /// Smallest Translation Unit (control bits 4:0).
    pub stu: u8,
    /// Capability bit 5: Page Aligned Request.
    pub page_aligned: bool,
}

/// Advanced Error Reporting extended capability (id 0x0001).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aer {
    pub offset: u16,
    pub uncor_status: u32,
    pub uncor_mask: u32,
    pub uncor_severity: u32,
    pub cor_status: u32,
    pub cor_mask: u32,
    pub cap_ctl: u32,
    /// TLP header log (4 dwords), when readable.
    pub header_log: Option<[u32; 4]>,
    /// Root Error Status (root ports and RC event collectors only).
    pub root_status: Option<u32>,
}
