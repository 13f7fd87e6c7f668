//! One decoder per capability, as lspci's `ls-caps.c` and `ls-ecaps.c` have: PCI Express,
//! ACS, ATS, AER.

use super::reader::Reader;
use super::regs::*;
use super::space::*;

pub(super) fn decode_pcie(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<PcieCap> {
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
        ext_tag_supported: devcap & 0x20 != 0,
        tag10_completer: devcap2.map(|v| v & (1 << 16) != 0),
        tag10_requester: devcap2.map(|v| v & (1 << 17) != 0),
        tag10_requester_enabled: devctl2.map(|v| v & (1 << 12) != 0),
        lnkcap_speed_gts: lnkcap.and_then(|v| link_speed_gts(v & 0xf)),
        lnkcap_width: lnkcap.map(|v| ((v >> 4) & 0x3f) as u8),
        lnksta_speed_gts: lnksta.and_then(|v| link_speed_gts(u32::from(v & 0xf))),
        lnksta_width: lnksta.map(|v| ((v >> 4) & 0x3f) as u8),
        lnkcap2,
        devcap2,
        devctl2,
    })
}

pub(super) fn decode_acs(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<Acs> {
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

pub(super) fn decode_ats(r: Reader<'_>, pos: usize, notes: &mut Vec<String>) -> Option<Ats> {
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

pub(super) fn decode_aer(
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
