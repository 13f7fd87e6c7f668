//! The decoder: the header, the BARs, and the walk of both capability lists, each capability
//! handed to its decoder ([`super::caps`]).

use super::caps::*;
use super::reader::Reader;
use super::regs::*;
use super::space::*;

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
