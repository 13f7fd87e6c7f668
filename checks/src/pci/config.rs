//! PCI configuration-space decoder: a pure, defensive function of bytes.
//!
//! [`decode`] takes the raw bytes of one function's config space (as read from
//! `/sys/bus/pci/devices/*/config`, or pasted from `lspci -xxxx` and parsed by
//! [`parse_hex_dump`]) and returns a [`ConfigSpace`]. It never panics: every
//! read is bounds-checked, capability chains are walked with a visited set and
//! an entry limit, and anything odd (truncation, loops, broken pointers) is
//! recorded in [`ConfigSpace::notes`] instead.
//!
//! Lengths seen in practice:
//! * 64 bytes: a non-root reader of the sysfs `config` file (or `lspci -x`);
//!   only the standard header is there, capabilities cannot be read.
//! * 256 bytes: `lspci -xxx`, or a kernel/platform without extended config
//!   access; standard capabilities only.
//! * 4096 bytes: root reader on a PCIe system (`lspci -xxxx`); extended
//!   capabilities (ACS, ATS, AER, ...) too.
//!
//! Register layouts follow the PCI Express Base Specification; field positions
//! were cross-checked against pciutils' `lib/header.h` (no code taken from it).

use serde::Serialize;

/// Offset of the first standard capability pointer (type 0 and type 1 headers).
const CAP_PTR: usize = 0x34;
/// CardBus bridges keep the capability pointer elsewhere.
const CB_CAP_PTR: usize = 0x14;
/// Status register bit: capability list present.
const STATUS_CAP_LIST: u16 = 0x10;
/// First extended capability header.
const EXT_START: usize = 0x100;
/// Size of a full PCIe config space.
const EXT_END: usize = 0x1000;
/// Standard capabilities live in 0x40..0x100, 4-byte aligned: at most 48.
const MAX_STD_CAPS: usize = 48;
/// Same bound as the Linux kernel: (4096 - 256) / 8 extended capabilities.
const MAX_EXT_CAPS: usize = (EXT_END - EXT_START) / 8;

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

/// Bounds-checked little-endian reader; with `touched`, it also notes every byte it reads
/// (for [`touched`]).
#[derive(Clone, Copy)]
struct Reader<'a> {
    bytes: &'a [u8],
    touched: Option<&'a std::cell::RefCell<Vec<bool>>>,
}

impl<'a> Reader<'a> {
    fn get(self, off: usize, n: usize) -> Option<&'a [u8]> {
        let end = off.checked_add(n)?;
        let b = self.bytes.get(off..end)?;
        if let Some(t) = self.touched {
            if let Ok(mut t) = t.try_borrow_mut() {
                for x in t.get_mut(off..end).into_iter().flatten() {
                    *x = true;
                }
            }
        }
        Some(b)
    }

    fn len(self) -> usize {
        self.bytes.len()
    }

    fn u8(self, off: usize) -> Option<u8> {
        self.get(off, 1).and_then(|b| b.first().copied())
    }

    fn u16(self, off: usize) -> Option<u16> {
        let b: [u8; 2] = self.get(off, 2)?.try_into().ok()?;
        Some(u16::from_le_bytes(b))
    }

    fn u32(self, off: usize) -> Option<u32> {
        let b: [u8; 4] = self.get(off, 4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b))
    }
}

/// Decode one function's configuration space. Never panics.
pub fn decode(bytes: &[u8]) -> ConfigSpace {
    decode_with(Reader {
        bytes,
        touched: None,
    })
}

/// The bytes [`decode`] reads from `bytes`, as sorted, merged ranges. A partial reader that
/// fetches them (and repeats with what it learnt until the set stops growing) gets a buffer
/// whose decode equals the decode of the whole config space: the decoder's path depends only
/// on the bytes it reads. In a VM every config-space dword read traps to the hypervisor; this
/// is what keeps `check` from reading all 4 KiB of every device.
pub fn touched(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let t = std::cell::RefCell::new(vec![false; bytes.len()]);
    decode_with(Reader {
        bytes,
        touched: Some(&t),
    });
    let t = t.into_inner();
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, _) in t.iter().enumerate().filter(|(_, x)| **x) {
        match out.last_mut() {
            Some(r) if r.end == i => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

fn decode_with(r: Reader<'_>) -> ConfigSpace {
    let bytes = r.bytes;
    let len = bytes.len();
    let header_byte = r.u8(0x0e);
    let header_type = header_byte.map(|h| h & 0x7f);
    let class = match (r.u8(0x09), r.u8(0x0a), r.u8(0x0b)) {
        (Some(pi), Some(sub), Some(base)) => {
            Some((u32::from(base) << 16) | (u32::from(sub) << 8) | u32::from(pi))
        }
        _ => None,
    };
    let type0 = header_type == Some(0);
    let type1 = header_type == Some(1);

    let mut cs = ConfigSpace {
        len,
        limited: len < 0x100,
        extended_readable: len >= EXT_END,
        vendor_id: r.u16(0x00),
        device_id: r.u16(0x02),
        command: r.u16(0x04),
        status: r.u16(0x06),
        revision: r.u8(0x08),
        class,
        header_type,
        multifunction: header_byte.is_some_and(|h| h & 0x80 != 0),
        subsystem_vendor_id: if type0 { r.u16(0x2c) } else { None },
        subsystem_id: if type0 { r.u16(0x2e) } else { None },
        primary_bus: if type1 { r.u8(0x18) } else { None },
        secondary_bus: if type1 { r.u8(0x19) } else { None },
        subordinate_bus: if type1 { r.u8(0x1a) } else { None },
        bars: Vec::new(),
        capabilities: Vec::new(),
        ext_capabilities: Vec::new(),
        pcie: None,
        acs: None,
        ats: None,
        aer: None,
        notes: Vec::new(),
        chain_breaks: Vec::new(),
    };

    if len < 0x40 {
        cs.notes.push(format!(
            "standard header truncated: only {len} of 64 bytes available"
        ));
    }
    if cs.vendor_id == Some(0xffff) {
        cs.notes
            .push("vendor id reads as 0xffff: device absent or config read failed".to_string());
    }
    if len < 0x100 {
        cs.notes.push(format!(
            "config space is only {len} bytes (an unprivileged read of sysfs config gives 64): \
             capabilities not readable"
        ));
    }

    decode_bars(r, &mut cs);
    walk_std_caps(r, &mut cs);

    let has_pcie_or_pcix = cs
        .capabilities
        .iter()
        .any(|c| c.id == u16::from(CAP_ID_EXP) || c.id == u16::from(CAP_ID_PCIX));
    if has_pcie_or_pcix {
        if len <= EXT_START {
            cs.notes
                .push(format!("extended config space not readable ({len} bytes)"));
        } else {
            if len < EXT_END {
                cs.notes.push(format!(
                    "extended config space partly readable ({len} of 4096 bytes)"
                ));
            }
            walk_ext_caps(r, &mut cs);
        }
    } else if r.u32(EXT_START).is_some_and(|h| h != 0 && h != 0xffff_ffff) {
        cs.notes.push(
            "no PCI Express/PCI-X capability: data above 0x100 ignored (as lspci and Linux do)"
                .to_string(),
        );
    }
    cs
}

fn decode_bars(r: Reader<'_>, cs: &mut ConfigSpace) {
    let slots: usize = match cs.header_type {
        Some(0) => 6,
        Some(1) => 2,
        _ => 0,
    };
    let mut i = 0usize;
    while i < slots {
        let off = 0x10 + 4 * i;
        let Some(raw) = r.u32(off) else {
            break;
        };
        let io = raw & 0x1 != 0;
        let mem64 = !io && (raw >> 1) & 0x3 == 0x2;
        let prefetchable = !io && raw & 0x8 != 0;
        let mut raw_hi = None;
        let mut address = if io {
            u64::from(raw & !0x3)
        } else {
            u64::from(raw & !0xf)
        };
        if mem64 {
            if i + 1 < slots {
                raw_hi = r.u32(off + 4);
                if let Some(hi) = raw_hi {
                    address |= u64::from(hi) << 32;
                }
            } else {
                cs.notes.push(format!(
                    "BAR{i} is 64-bit but is the last BAR slot: upper half missing"
                ));
            }
        }
        cs.bars.push(BarReg {
            index: u8::try_from(i).unwrap_or(u8::MAX),
            raw,
            raw_hi,
            io,
            mem64,
            prefetchable,
            address,
        });
        i += if mem64 { 2 } else { 1 };
    }
}

fn walk_std_caps(r: Reader<'_>, cs: &mut ConfigSpace) {
    let Some(status) = cs.status else {
        return;
    };
    if status & STATUS_CAP_LIST == 0 {
        return;
    }
    let ptr_off = if cs.header_type == Some(2) {
        CB_CAP_PTR
    } else {
        CAP_PTR
    };
    let Some(first) = r.u8(ptr_off) else {
        return;
    };
    let mut visited = [false; 64];
    let mut pos = usize::from(first & 0xfc);
    // Where the pointer to `pos` lives: the capability pointer, then each capability's next.
    let mut from = ptr_off;
    while pos != 0 {
        if pos < 0x40 {
            cs.notes.push(format!(
                "capability pointer 0x{pos:02x} points into the standard header: chain ignored from there"
            ));
            cs.broke(
                false,
                from,
                format!("next pointer 0x{pos:02x} points into the header (below 0x40)"),
            );
            break;
        }
        let (Some(id), Some(next)) = (r.u8(pos), r.u8(pos + 1)) else {
            cs.notes.push(format!(
                "capability chain truncated at 0x{pos:02x}: only {} bytes available",
                r.len()
            ));
            break;
        };
        match visited.get_mut(pos / 4) {
            Some(seen) if *seen => {
                cs.notes
                    .push(format!("capability chain looped at 0x{pos:02x}"));
                // `from` is the next-pointer byte of the capability that led here.
                let why = if from == pos + 1 {
                    "next pointer points to itself".to_string()
                } else {
                    format!("next pointer loops back to 0x{pos:02x}")
                };
                cs.broke(false, from, why);
                break;
            }
            Some(seen) => *seen = true,
            None => break,
        }
        if id == 0xff {
            cs.notes
                .push(format!("capability chain broken at 0x{pos:02x} (id 0xff)"));
            cs.broke(
                false,
                pos,
                "capability id 0xff: config read failed".to_string(),
            );
            break;
        }
        if cs.capabilities.len() >= MAX_STD_CAPS {
            cs.notes
                .push(format!("more than {MAX_STD_CAPS} capabilities: chain cut"));
            cs.broke(false, pos, format!("more than {MAX_STD_CAPS} capabilities"));
            break;
        }
        let offset = u16::try_from(pos).unwrap_or(u16::MAX);
        cs.capabilities.push(CapEntry {
            id: u16::from(id),
            offset,
            version: 0,
            name: cap_name(id),
        });
        if id == CAP_ID_EXP && cs.pcie.is_none() {
            cs.pcie = decode_pcie(r, pos, &mut cs.notes);
        }
        if id == CAP_ID_SSVID && cs.header_type == Some(1) && cs.subsystem_vendor_id.is_none() {
            // Bridges carry their subsystem ids in this capability.
            cs.subsystem_vendor_id = r.u16(pos + 4);
            cs.subsystem_id = r.u16(pos + 6);
        }
        from = pos + 1;
        pos = usize::from(next & 0xfc);
    }
}

impl ConfigSpace {
    fn broke(&mut self, extended: bool, offset: usize, reason: String) {
        self.chain_breaks.push(ChainBreak {
            extended,
            offset: u16::try_from(offset).unwrap_or(u16::MAX),
            reason,
        });
    }
}

fn link_speed_gts(code: u32) -> Option<f64> {
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

fn decode_pcie(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<PcieCap> {
    let regs = (
        r.u16(pos + 0x02),
        r.u32(pos + 0x04),
        r.u16(pos + 0x08),
        r.u16(pos + 0x0a),
    );
    let (Some(flags), Some(devcap), Some(devctl), Some(devsta)) = regs else {
        notes.push(format!(
            "PCI Express capability at 0x{pos:02x} truncated: device registers not readable"
        ));
        return None;
    };
    let version = (flags & 0xf) as u8;
    let device_type = ((flags >> 4) & 0xf) as u8;
    let has_link = !matches!(
        device_type,
        PCIE_TYPE_RC_INTEGRATED_ENDPOINT | PCIE_TYPE_RC_EVENT_COLLECTOR
    );
    let (lnkcap, lnkctl, lnksta) = if has_link {
        (r.u32(pos + 0x0c), r.u16(pos + 0x10), r.u16(pos + 0x12))
    } else {
        (None, None, None)
    };
    if has_link && (lnkcap.is_none() || lnksta.is_none()) {
        notes.push(format!(
            "PCI Express capability at 0x{pos:02x} truncated: link registers not readable"
        ));
    }
    let v2 = version >= 2;
    let devcap2 = if v2 { r.u32(pos + 0x24) } else { None };
    let devctl2 = if v2 { r.u16(pos + 0x28) } else { None };
    let lnkcap2 = if v2 && has_link {
        r.u32(pos + 0x2c)
    } else {
        None
    };
    Some(PcieCap {
        offset: u16::try_from(pos).unwrap_or(u16::MAX),
        version,
        device_type,
        device_type_name: pcie_type_name(device_type),
        slot_implemented: flags & 0x0100 != 0,
        devcap,
        devctl,
        devsta,
        lnkcap,
        lnkctl,
        lnksta,
        mps_supported: 128u32 << (devcap & 0x7),
        mps: 128u32 << ((devctl >> 5) & 0x7),
        mrrs: 128u32 << ((devctl >> 12) & 0x7),
        relaxed_ordering: devctl & 0x0010 != 0,
        no_snoop: devctl & 0x0800 != 0,
        ext_tag: devctl & 0x0100 != 0,
        lnkcap_speed_gts: lnkcap.and_then(|v| link_speed_gts(v & 0xf)),
        lnkcap_width: lnkcap.map(|v| ((v >> 4) & 0x3f) as u8),
        lnksta_speed_gts: lnksta.and_then(|v| link_speed_gts(u32::from(v & 0xf))),
        lnksta_width: lnksta.map(|v| ((v >> 4) & 0x3f) as u8),
        lnkcap2,
        devcap2,
        devctl2,
    })
}

fn walk_ext_caps(r: Reader<'_>, cs: &mut ConfigSpace) {
    let mut visited = [false; EXT_END / 4];
    let mut pos = EXT_START;
    // The header whose next pointer led to `pos` (None for the first, at 0x100).
    let mut from: Option<usize> = None;
    loop {
        let Some(header) = r.u32(pos) else {
            cs.notes.push(format!(
                "extended capability chain truncated at 0x{pos:03x}: only {} bytes available",
                r.len()
            ));
            break;
        };
        if header == 0 {
            break;
        }
        if header == 0xffff_ffff {
            if pos == EXT_START {
                cs.notes
                    .push("extended config space reads as all-ones (not accessible)".to_string());
            } else {
                cs.notes.push(format!(
                    "extended capability chain broken at 0x{pos:03x} (all-ones header)"
                ));
            }
            cs.broke(
                true,
                pos,
                "all-ones header: the config read failed".to_string(),
            );
            break;
        }
        match visited.get_mut(pos / 4) {
            Some(seen) if *seen => {
                cs.notes
                    .push(format!("extended capability chain looped at 0x{pos:03x}"));
                let at = from.unwrap_or(pos);
                let why = if at == pos {
                    "next pointer points to itself".to_string()
                } else {
                    format!("next pointer loops back to 0x{pos:03x}")
                };
                cs.broke(true, at, why);
                break;
            }
            Some(seen) => *seen = true,
            None => break,
        }
        if cs.ext_capabilities.len() >= MAX_EXT_CAPS {
            cs.notes.push(format!(
                "more than {MAX_EXT_CAPS} extended capabilities: chain cut"
            ));
            cs.broke(true, pos, format!("more than {MAX_EXT_CAPS} capabilities"));
            break;
        }
        let id = (header & 0xffff) as u16;
        let version = ((header >> 16) & 0xf) as u8;
        let next = ((header >> 20) & 0xffc) as usize;
        cs.ext_capabilities.push(CapEntry {
            id,
            offset: u16::try_from(pos).unwrap_or(u16::MAX),
            version,
            name: ext_cap_name(id),
        });
        match id {
            EXT_CAP_ID_ACS if cs.acs.is_none() => cs.acs = decode_acs(r, pos, &mut cs.notes),
            EXT_CAP_ID_ATS if cs.ats.is_none() => cs.ats = decode_ats(r, pos, &mut cs.notes),
            EXT_CAP_ID_AER if cs.aer.is_none() => {
                let dtype = cs.pcie.as_ref().map(|p| p.device_type);
                cs.aer = decode_aer(r, pos, dtype, &mut cs.notes);
            }
            _ => {}
        }
        if next == 0 {
            break;
        }
        if next < EXT_START {
            cs.notes.push(format!(
                "extended capability at 0x{pos:03x} points to 0x{next:03x}, below 0x100: chain cut"
            ));
            cs.broke(
                true,
                pos,
                format!("next pointer 0x{next:03x} points below 0x100"),
            );
            break;
        }
        from = Some(pos);
        pos = next;
    }
}

fn decode_acs(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<Acs> {
    let (Some(cap), Some(ctl)) = (r.u16(pos + 4), r.u16(pos + 6)) else {
        notes.push(format!("ACS capability at 0x{pos:03x} truncated"));
        return None;
    };
    Some(Acs {
        offset: u16::try_from(pos).unwrap_or(u16::MAX),
        cap,
        ctl,
        src_valid: ctl & 0x01 != 0,
        trans_blocking: ctl & 0x02 != 0,
        req_redir: ctl & 0x04 != 0,
        cmplt_redir: ctl & 0x08 != 0,
        upstream_fwd: ctl & 0x10 != 0,
        egress_ctl: ctl & 0x20 != 0,
        direct_trans: ctl & 0x40 != 0,
        egress_vector_size: (cap >> 8) as u8,
    })
}

fn decode_ats(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<Ats> {
    let (Some(cap), Some(ctl)) = (r.u16(pos + 4), r.u16(pos + 6)) else {
        notes.push(format!("ATS capability at 0x{pos:03x} truncated"));
        return None;
    };
    Some(Ats {
        offset: u16::try_from(pos).unwrap_or(u16::MAX),
        cap,
        ctl,
        enabled: ctl & 0x8000 != 0,
        invalidate_queue_depth: (cap & 0x1f) as u8,
        stu: (ctl & 0x1f) as u8,
        page_aligned: cap & 0x20 != 0,
    })
}

fn decode_aer(
    r: Reader<'_>,
    pos: usize,
    device_type: Option<u8>,
    notes: &mut Vec<String>,
) -> Option<Aer> {
    let regs = (
        r.u32(pos + 0x04),
        r.u32(pos + 0x08),
        r.u32(pos + 0x0c),
        r.u32(pos + 0x10),
        r.u32(pos + 0x14),
        r.u32(pos + 0x18),
    );
    let (Some(us), Some(um), Some(usev), Some(cst), Some(cm), Some(cc)) = regs else {
        notes.push(format!("AER capability at 0x{pos:03x} truncated"));
        return None;
    };
    let header_log = match (
        r.u32(pos + 0x1c),
        r.u32(pos + 0x20),
        r.u32(pos + 0x24),
        r.u32(pos + 0x28),
    ) {
        (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
        _ => None,
    };
    let is_root = matches!(
        device_type,
        Some(PCIE_TYPE_ROOT_PORT | PCIE_TYPE_RC_EVENT_COLLECTOR)
    );
    Some(Aer {
        offset: u16::try_from(pos).unwrap_or(u16::MAX),
        uncor_status: us,
        uncor_mask: um,
        uncor_severity: usev,
        cor_status: cst,
        cor_mask: cm,
        cap_ctl: cc,
        header_log,
        root_status: if is_root { r.u32(pos + 0x30) } else { None },
    })
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

/// Split `lspci -x`/`-xxx`/`-xxxx` output into devices.
///
/// Returns one `(header line, bytes)` pair per device. A device starts at a
/// line beginning with a bus address (`00:02.0 PCI bridge: ...`, optionally
/// with a domain, `0000:00:02.0 ...`); hex lines (`00: 86 80 04 2f ...`,
/// offsets up to `ff0:`) fill its bytes. Other lines (e.g. `lspci -vvv`
/// text interleaved with the hex) are ignored, as lspci's own `-F` reader
/// does. More lenient than lspci: leading whitespace and CRLF are accepted,
/// and hex lines without a preceding header form devices named `""` (a new
/// one at every `00:` line). Gaps are filled with 0xff; bytes at offsets of
/// 4096 and above are dropped. Never panics.
pub fn parse_hex_dump(text: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if is_bdf_header(line) {
            out.push((line.to_string(), Vec::new()));
            current = Some(out.len() - 1);
            continue;
        }
        let Some((offset, bytes)) = parse_hex_line(line) else {
            continue;
        };
        let start_unnamed = match current.and_then(|i| out.get(i)) {
            None => true,
            Some((name, data)) => name.is_empty() && offset == 0 && !data.is_empty(),
        };
        if start_unnamed {
            out.push((String::new(), Vec::new()));
            current = Some(out.len() - 1);
        }
        let Some((_, data)) = current.and_then(|i| out.get_mut(i)) else {
            continue;
        };
        for (k, b) in bytes.into_iter().enumerate() {
            let pos = offset.saturating_add(k);
            if pos >= EXT_END {
                break;
            }
            if data.len() <= pos {
                data.resize(pos + 1, 0xff);
            }
            if let Some(slot) = data.get_mut(pos) {
                *slot = b;
            }
        }
    }
    out
}

/// The bus address at the start of a [`parse_hex_dump`] header line.
pub fn dump_bdf(header: &str) -> &str {
    header.split_whitespace().next().unwrap_or("")
}

fn is_hex_run(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `[dddd:]bb:dd.f` followed by whitespace or the end of the line.
fn is_bdf_header(line: &str) -> bool {
    // The first whitespace-separated token; what follows is the description.
    let first = line.split_whitespace().next().unwrap_or("");
    let parts: Vec<&str> = first.split(':').collect();
    let (bus, devfn) = match parts.as_slice() {
        [bus, devfn] => (*bus, *devfn),
        [dom, bus, devfn] if is_hex_run(dom, 4, 6) => (*bus, *devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    is_hex_run(bus, 2, 2)
        && is_hex_run(dev, 2, 2)
        && func.len() == 1
        && func.bytes().all(|b| (b'0'..=b'7').contains(&b))
}

/// `off: hh hh ...` -> (offset, bytes). Stops at the first non-byte token
/// (tolerates trailing ASCII columns); None if the line is not a hex line.
fn parse_hex_line(line: &str) -> Option<(usize, Vec<u8>)> {
    let (off, rest) = line.split_once(':')?;
    if !is_hex_run(off, 2, 8) {
        return None;
    }
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let offset = usize::from_str_radix(off, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for tok in rest.split_whitespace() {
        if !is_hex_run(tok, 2, 2) {
            break;
        }
        bytes.push(u8::from_str_radix(tok, 16).ok()?);
    }
    if bytes.is_empty() {
        return None;
    }
    Some((offset, bytes))
}
