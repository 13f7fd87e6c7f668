//! One device: what lspci printed against what `decode` says, field by field, one function per
//! part of the config space.

use super::bits::*;
use super::lspci_text::*;
use gdrdoctor_checks::pci::config::ConfigSpace;

/// What was compared, to make sure the comparison is not vacuous.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) devices: usize,
    pub(crate) ids: usize,
    pub(crate) cap_lists: usize,
    pub(crate) bars: usize,
    pub(crate) pcie: usize,
    pub(crate) links: usize,
    pub(crate) acs: usize,
    pub(crate) ats: usize,
    pub(crate) aer: usize,
    pub(crate) aer_any_set: usize,
    pub(crate) loops: usize,
    pub(crate) limited: usize,
    pub(crate) flags: usize,
}

pub(crate) struct Cmp<'a> {
    pub(crate) who: String,
    pub(crate) errs: &'a mut Vec<String>,
    pub(crate) stats: &'a mut Stats,
}

impl Cmp<'_> {
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, lspci: T, ours: T) {
        if lspci != ours {
            self.errs.push(format!(
                "{}: {what}: lspci says {lspci:?}, decode says {ours:?}",
                self.who
            ));
        }
    }

    fn fail(&mut self, msg: String) {
        self.errs.push(format!("{}: {msg}", self.who));
    }

    /// Every `Name+/-` in `text` that is in `table` must match `raw`.
    fn flags<T>(&mut self, what: &str, text: &str, table: &[(&str, T)], raw: T) -> usize
    where
        T: Copy + std::ops::BitAnd<Output = T> + PartialEq + Default,
    {
        let mut n = 0;
        for (name, bit) in table {
            if let Some(f) = flag(text, name) {
                n += 1;
                self.stats.flags += 1;
                self.eq(&format!("{what} {name}"), f, (raw & *bit) != T::default());
            }
        }
        n
    }
}

pub(crate) fn compare(
    cs: &ConfigSpace,
    ld: &LDev,
    who: &str,
    require_ids: bool,
    errs: &mut Vec<String>,
    stats: &mut Stats,
) {
    stats.devices += 1;
    let mut c = Cmp {
        who: who.to_string(),
        errs,
        stats,
    };

    compare_header(&mut c, cs, ld, require_ids);
    compare_bars(&mut c, cs, ld);
    compare_cap_lists(&mut c, cs, ld);
    compare_pcie(&mut c, cs, ld);
    compare_acs(&mut c, cs, ld);
    compare_ats(&mut c, cs, ld);
    compare_aer(&mut c, cs, ld);
}

/// Compare the header line: ids, class, revision, prog-if.
pub(crate) fn compare_header(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev, require_ids: bool) {
    // --- header line: `bb:dd.f Class name [cccc]: Vendor Device [vvvv:dddd] (rev rr) (prog-if pp ...)`
    let h = &ld.header;
    let ids = bracket_ids(h);
    if let Some((v, d)) = ids {
        c.stats.ids += 1;
        c.eq("vendor id", Some(v), cs.vendor_id);
        c.eq("device id", Some(d), cs.device_id);
        let class16 = h
            .split_once(" [")
            .and_then(|(_, r)| r.get(..4))
            .and_then(|s| u32::from_str_radix(s, 16).ok());
        c.eq("class", class16, cs.class.map(|x| x >> 8));
        let rev = hex_after(h, "(rev ").map(|r| r as u8);
        c.eq("revision", rev.unwrap_or(0), cs.revision.unwrap_or(0));
        let progif = hex_after(h, "(prog-if ").map(|p| p as u32);
        c.eq(
            "prog-if",
            progif.unwrap_or(0),
            cs.class.map_or(0, |x| x & 0xff),
        );
        if let Some((sv, sd)) = ld.subsystem.as_deref().and_then(bracket_ids) {
            c.eq("subsystem vendor", Some(sv), cs.subsystem_vendor_id);
            c.eq("subsystem id", Some(sd), cs.subsystem_id);
        }
    } else if require_ids {
        c.fail(format!("no [vendor:device] in lspci header {h:?}"));
    }
}

/// Compare the BARs.
pub(crate) fn compare_bars(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- BARs
    for (n, desc) in &ld.regions {
        let upper_half_of_64 = cs.bars.iter().any(|b| b.mem64 && b.index + 1 == *n);
        if upper_half_of_64 {
            // lspci -F shows the upper dword of a 64-bit BAR as its own region
            // (it has no sysfs resource flags to tell it otherwise).
            continue;
        }
        let Some(b) = cs.bars.iter().find(|b| b.index == *n) else {
            c.fail(format!("lspci shows Region {n} ({desc}) that decode lacks"));
            continue;
        };
        c.stats.bars += 1;
        c.eq(&format!("BAR{n} io"), desc.starts_with("I/O ports"), b.io);
        let addr = if desc.contains("<unassigned>") {
            Some(0)
        } else {
            desc.split_whitespace()
                .nth(2)
                .and_then(|a| u64::from_str_radix(a, 16).ok())
        };
        c.eq(&format!("BAR{n} address"), addr, Some(b.address));
        if !b.io {
            c.eq(&format!("BAR{n} 64-bit"), desc.contains("(64-bit"), b.mem64);
            c.eq(
                &format!("BAR{n} prefetchable"),
                desc.contains(", prefetchable"),
                b.prefetchable,
            );
        }
    }
    for b in &cs.bars {
        if b.raw != 0 && !ld.regions.iter().any(|(n, _)| *n == b.index) {
            c.fail(format!(
                "decode has BAR{} raw {:#x} that lspci does not show",
                b.index, b.raw
            ));
        }
    }
}

/// Compare the capability lists, loops and truncation.
pub(crate) fn compare_cap_lists(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- capability lists, loops, truncation
    c.stats.cap_lists += 1;
    let l_std: Vec<u16> = ld
        .caps
        .iter()
        .filter(|x| x.offset < 0x100)
        .map(|x| x.offset)
        .collect();
    let o_std: Vec<u16> = cs.capabilities.iter().map(|x| x.offset).collect();
    c.eq("standard capability offsets", l_std, o_std);
    let l_ext: Vec<(u16, u8)> = ld
        .caps
        .iter()
        .filter(|x| x.offset >= 0x100)
        .map(|x| (x.offset, x.version.unwrap_or(255)))
        .collect();
    let o_ext: Vec<(u16, u8)> = cs
        .ext_capabilities
        .iter()
        .map(|x| (x.offset, x.version))
        .collect();
    c.eq("extended capability offsets/versions", l_ext, o_ext);
    for lc in &ld.caps {
        let (id, ours) = if lc.offset < 0x100 {
            (
                std_title_id(&lc.title),
                cs.capabilities.iter().find(|x| x.offset == lc.offset),
            )
        } else {
            (
                ext_title_id(&lc.title),
                cs.ext_capabilities.iter().find(|x| x.offset == lc.offset),
            )
        };
        if let (Some(id), Some(ours)) = (id, ours) {
            c.eq(
                &format!("id of capability [{:x}] {}", lc.offset, lc.title),
                id,
                ours.id,
            );
        }
    }
    for off in &ld.looped {
        c.stats.loops += 1;
        let needle = if *off >= 0x100 {
            format!("extended capability chain looped at 0x{off:03x}")
        } else {
            format!("capability chain looped at 0x{off:02x}")
        };
        if !cs.notes.iter().any(|n| n.contains(&needle)) {
            c.fail(format!(
                "lspci reports a loop at {off:#x}; decode notes {:?}",
                cs.notes
            ));
        }
    }
    let our_loops = cs.notes.iter().filter(|n| n.contains("looped at")).count();
    c.eq("number of looped chains", ld.looped.len(), our_loops);
    if ld.access_denied {
        c.stats.limited += 1;
        if !cs.limited || !cs.notes.iter().any(|n| n.contains("truncated at")) {
            c.fail(format!(
                "lspci: <access denied>; decode limited={} notes {:?}",
                cs.limited, cs.notes
            ));
        }
    }
}

/// Compare the PCI Express capability.
pub(crate) fn compare_pcie(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- PCI Express capability
    let l_exp = ld
        .caps
        .iter()
        .find(|x| x.offset < 0x100 && x.title.starts_with("Express"));
    match (l_exp, &cs.pcie) {
        (None, None) => {}
        (Some(_), None) => c.fail("lspci shows an Express capability, decode has none".into()),
        (None, Some(_)) => c.fail("decode has a PCIe capability, lspci shows none".into()),
        (Some(le), Some(p)) => {
            c.stats.pcie += 1;
            c.eq("PCIe cap offset", le.offset, p.offset);
            let t = le.title.trim_start_matches("Express ");
            let (ver, t) = match t.strip_prefix("(v") {
                Some(r) => {
                    let (v, rest) = r.split_once(") ").unwrap();
                    (v.parse::<u8>().ok(), rest)
                }
                None => (None, t),
            };
            c.eq("PCIe cap version", ver, Some(p.version));
            let types: &[(&str, u8)] = &[
                ("Legacy Endpoint", 1),
                ("Endpoint", 0),
                ("Root Port", 4),
                ("Upstream Port", 5),
                ("Downstream Port", 6),
                ("PCI-Express to PCI/PCI-X Bridge", 7),
                ("PCI/PCI-X to PCI-Express Bridge", 8),
                ("Root Complex Integrated Endpoint", 9),
                ("Root Complex Event Collector", 10),
            ];
            let ltype = types
                .iter()
                .find(|(n, _)| t.starts_with(n))
                .map(|(_, v)| *v);
            c.eq(&format!("device type ({t})"), ltype, Some(p.device_type));
            if let Some(slot) = flag(&t.replace(['(', ')'], " "), "Slot") {
                c.eq("slot implemented", slot, p.slot_implemented);
            }

            match le.section("DevCap") {
                Some(s) => {
                    c.eq(
                        "DevCap MaxPayload",
                        num_after(s, "MaxPayload "),
                        Some(u64::from(p.mps_supported)),
                    );
                    c.flags("DevCap", s, DEVCAP_BITS, p.devcap);
                }
                None => c.fail("lspci shows no DevCap".into()),
            }
            match le.section("DevCtl") {
                Some(s) => {
                    c.eq(
                        "DevCtl MaxPayload",
                        num_after(s, "MaxPayload "),
                        Some(u64::from(p.mps)),
                    );
                    c.eq(
                        "DevCtl MaxReadReq",
                        num_after(s, "MaxReadReq "),
                        Some(u64::from(p.mrrs)),
                    );
                    c.eq(
                        "DevCtl RlxdOrd",
                        flag(s, "RlxdOrd"),
                        Some(p.relaxed_ordering),
                    );
                    c.eq("DevCtl NoSnoop", flag(s, "NoSnoop"), Some(p.no_snoop));
                    c.eq("DevCtl ExtTag", flag(s, "ExtTag"), Some(p.ext_tag));
                    c.flags("DevCtl", s, DEVCTL_BITS, p.devctl);
                }
                None => c.fail("lspci shows no DevCtl".into()),
            }
            if let Some(s) = le.section("DevSta") {
                c.flags("DevSta", s, DEVSTA_BITS, p.devsta);
            }
            match (le.section("LnkCap"), p.lnkcap) {
                (None, None) => {}
                (Some(s), Some(raw)) => {
                    c.stats.links += 1;
                    c.eq("LnkCap Speed", speed(s), p.lnkcap_speed_gts);
                    c.eq(
                        "LnkCap Width",
                        num_after(s, "Width x"),
                        p.lnkcap_width.map(u64::from),
                    );
                    c.eq(
                        "LnkCap Port",
                        num_after(s, "Port #"),
                        Some(u64::from(raw >> 24)),
                    );
                    c.flags("LnkCap", s, LNKCAP_BITS, raw);
                }
                (l, o) => c.fail(format!(
                    "LnkCap presence: lspci {:?} decode {o:?}",
                    l.is_some()
                )),
            }
            match (le.section("LnkSta"), p.lnksta) {
                (None, None) => {}
                (Some(s), Some(raw)) => {
                    c.eq("LnkSta Speed", speed(s), p.lnksta_speed_gts);
                    c.eq(
                        "LnkSta Width",
                        num_after(s, "Width x"),
                        p.lnksta_width.map(u64::from),
                    );
                    c.flags("LnkSta", s, LNKSTA_BITS, raw);
                }
                (l, o) => c.fail(format!(
                    "LnkSta presence: lspci {:?} decode {o:?}",
                    l.is_some()
                )),
            }
            if let (Some(s), Some(raw)) = (le.section("LnkCtl"), p.lnkctl) {
                c.eq("LnkCtl CommClk", flag(s, "CommClk"), Some(raw & 0x40 != 0));
            }
            c.eq(
                "DevCap2 present",
                le.section("DevCap2").is_some(),
                p.devcap2.is_some(),
            );
            // The 10-bit tag bits (issue 39), where this lspci prints them (pciutils 3.7+).
            if let Some(s) = le.section("DevCap2") {
                if let Some(v) = flag(s, "10BitTagComp") {
                    c.eq("DevCap2 10BitTagComp", Some(v), p.tag10_completer);
                }
                if let Some(v) = flag(s, "10BitTagReq") {
                    c.eq("DevCap2 10BitTagReq", Some(v), p.tag10_requester);
                }
            }
            if let Some(s) = le.section("DevCtl2") {
                if let Some(v) = flag(s, "10BitTagReq") {
                    c.eq("DevCtl2 10BitTagReq", Some(v), p.tag10_requester_enabled);
                }
            }
            if let Some(s) = le.section("DevCap") {
                if let Some(v) = flag(s, "ExtTag") {
                    c.eq("DevCap ExtTag", v, p.ext_tag_supported);
                }
            }
        }
    }
}

/// Compare ACS.
pub(crate) fn compare_acs(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- ACS
    let l_acs = ld
        .caps
        .iter()
        .find(|x| x.title.starts_with("Access Control Services"));
    match (l_acs, &cs.acs) {
        (None, None) => {}
        (Some(la), Some(a)) => {
            c.stats.acs += 1;
            c.eq("ACS offset", la.offset, a.offset);
            match (la.section("ACSCap"), la.section("ACSCtl")) {
                (Some(cap), Some(ctl)) => {
                    let n1 = c.flags("ACSCap", cap, ACS_BITS, a.cap);
                    let n2 = c.flags("ACSCtl", ctl, ACS_BITS, a.ctl);
                    c.eq("ACS flags compared", (n1, n2), (7, 7));
                    let bools = [
                        ("SrcValid", a.src_valid),
                        ("TransBlk", a.trans_blocking),
                        ("ReqRedir", a.req_redir),
                        ("CmpltRedir", a.cmplt_redir),
                        ("UpstreamFwd", a.upstream_fwd),
                        ("EgressCtrl", a.egress_ctl),
                        ("DirectTrans", a.direct_trans),
                    ];
                    for (name, ours) in bools {
                        c.eq(
                            &format!("ACSCtl {name} (field)"),
                            flag(ctl, name),
                            Some(ours),
                        );
                    }
                }
                _ => c.fail("lspci ACS without ACSCap/ACSCtl".into()),
            }
        }
        (l, o) => c.fail(format!(
            "ACS presence: lspci {} decode {}",
            l.is_some(),
            o.is_some()
        )),
    }
}

/// Compare ATS.
pub(crate) fn compare_ats(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- ATS
    let l_ats = ld
        .caps
        .iter()
        .find(|x| x.title.starts_with("Address Translation Service"));
    match (l_ats, &cs.ats) {
        (None, None) => {}
        (Some(la), Some(a)) => {
            c.stats.ats += 1;
            c.eq("ATS offset", la.offset, a.offset);
            let cap = la.section("ATSCap").unwrap_or("");
            let ctl = la.section("ATSCtl").unwrap_or("");
            c.eq(
                "ATS Invalidate Queue Depth",
                hex_after(cap, "Invalidate Queue Depth:"),
                Some(u64::from(a.invalidate_queue_depth)),
            );
            c.eq("ATS Enable", flag(ctl, "Enable"), Some(a.enabled));
            c.eq(
                "ATS Smallest Translation Unit",
                hex_after(ctl, "Smallest Translation Unit:"),
                Some(u64::from(a.stu)),
            );
        }
        (l, o) => c.fail(format!(
            "ATS presence: lspci {} decode {}",
            l.is_some(),
            o.is_some()
        )),
    }
}

/// Compare AER.
pub(crate) fn compare_aer(c: &mut Cmp<'_>, cs: &ConfigSpace, ld: &LDev) {
    // --- AER
    let l_aer = ld
        .caps
        .iter()
        .find(|x| x.title.starts_with("Advanced Error Reporting"));
    match (l_aer, &cs.aer) {
        (None, None) => {}
        (Some(la), Some(a)) => {
            c.stats.aer += 1;
            c.eq("AER offset", la.offset, a.offset);
            let regs: [(&str, BitTable, u32); 5] = [
                ("UESta", UNCOR_BITS, a.uncor_status),
                ("UEMsk", UNCOR_BITS, a.uncor_mask),
                ("UESvrt", UNCOR_BITS, a.uncor_severity),
                ("CESta", COR_BITS, a.cor_status),
                ("CEMsk", COR_BITS, a.cor_mask),
            ];
            for (label, table, raw) in regs {
                match la.section(label) {
                    Some(s) => {
                        let n = c.flags(label, s, table, raw);
                        if n < 6 {
                            c.fail(format!("only {n} {label} flags recognised in {s:?}"));
                        }
                        // "any bit set" over the bits lspci names.
                        let lspci_any = s.split_whitespace().any(|t| t.ends_with('+'));
                        let mask = table
                            .iter()
                            .filter(|(n, _)| flag(s, n).is_some())
                            .fold(0, |m, (_, b)| m | b);
                        c.eq(&format!("{label} any set"), lspci_any, raw & mask != 0);
                        if lspci_any {
                            c.stats.aer_any_set += 1;
                        }
                    }
                    None => c.fail(format!("lspci AER without {label}")),
                }
            }
            if let Some(s) = la.section("AERCap") {
                c.eq(
                    "AERCap First Error Pointer",
                    hex_after(s, "First Error Pointer:"),
                    Some(u64::from(a.cap_ctl & 0x1f)),
                );
                c.flags("AERCap", s, AERCAP_BITS, a.cap_ctl);
            }
            if let (Some(s), Some(log)) = (la.section("HeaderLog"), a.header_log) {
                let l: Vec<u32> = s
                    .split_whitespace()
                    .map(|w| u32::from_str_radix(w, 16).unwrap())
                    .collect();
                c.eq("AER HeaderLog", l, log.to_vec());
            }
            c.eq(
                "AER RootSta present",
                la.section("RootSta").is_some(),
                a.root_status.is_some(),
            );
        }
        (l, o) => c.fail(format!(
            "AER presence: lspci {} decode {}",
            l.is_some(),
            o.is_some()
        )),
    }
}
