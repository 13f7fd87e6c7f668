//! Differential test: `pci::config::decode` against the real `lspci`.
//!
//! For every dump we have (the hand-built `fixtures/configspace/*.hex` and the
//! real Haswell root port + ConnectX-3 Pro dump under `shared/realdata`), run
//! `lspci -F <dump> -vvv -nn`, parse its text and compare it field by field
//! with what `decode` says. Without `lspci` the comparisons skip with one printed line
//! (`GDRDOCTOR_TEST_REQUIRE_ALL=1` makes that a failure; `.ci/run` sets it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gdrdoctor_checks::pci::config::{decode, dump_bdf, parse_hex_dump, ConfigSpace};
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/configspace");
const REALDATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/realdata/pciutils-haswell-cx3pro-configspace"
);

// ---------------------------------------------------------------------------
// lspci availability
// ---------------------------------------------------------------------------

#[path = "../../tests/common/nodes.rs"]
mod nodes;
#[path = "../../tests/common/require.rs"]
mod require;

/// True when lspci can be run; otherwise a visible skip (a failure under
/// GDRDOCTOR_TEST_REQUIRE_ALL=1).
fn lspci_available() -> bool {
    match require::runs("lspci", &["--version"]) {
        Ok(()) => true,
        Err(e) => {
            require::skip(
                "config-space differential test against lspci",
                &e,
                "apt-get install pciutils (dnf install pciutils)",
            );
            false
        }
    }
}

fn run_lspci(dump: &Path, args: &[&str]) -> String {
    let out = Command::new("lspci")
        .arg("-F")
        .arg(dump)
        .args(args)
        .output()
        .expect("running lspci");
    assert!(
        out.status.success(),
        "lspci -F {} {:?} failed: {}",
        dump.display(),
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("lspci output is UTF-8")
}

// ---------------------------------------------------------------------------
// Parsing lspci -vvv text
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct LCap {
    offset: u16,
    version: Option<u8>,
    title: String,
    /// (label, text): a `\t\tLabel:` line plus its `\t\t\t` continuations.
    sections: Vec<(String, String)>,
}

impl LCap {
    fn section(&self, label: &str) -> Option<&str> {
        self.sections
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, t)| t.as_str())
    }
}

#[derive(Debug, Default)]
struct LDev {
    header: String,
    subsystem: Option<String>,
    regions: Vec<(u8, String)>,
    caps: Vec<LCap>,
    access_denied: bool,
    looped: Vec<u16>,
    broken: Vec<u16>,
}

fn is_hex_dump_line(line: &str) -> bool {
    match line.split_once(':') {
        Some((off, rest)) => {
            !off.is_empty()
                && off.len() <= 8
                && off.bytes().all(|b| b.is_ascii_hexdigit())
                && rest.starts_with(' ')
        }
        None => false,
    }
}

fn parse_lspci(text: &str) -> Vec<LDev> {
    let mut devs: Vec<LDev> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            if !is_hex_dump_line(line) {
                devs.push(LDev {
                    header: line.to_string(),
                    ..Default::default()
                });
            }
            continue;
        }
        let Some(dev) = devs.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix("\tCapabilities: ") {
            if rest.starts_with("<access denied>") {
                dev.access_denied = true;
                continue;
            }
            let close = rest.find(']').expect("capability line has ]");
            let inside = &rest[1..close];
            let title = rest[close + 1..].trim().to_string();
            let mut it = inside.split_whitespace();
            let offset = u16::from_str_radix(it.next().unwrap(), 16).unwrap();
            let version = it
                .next()
                .map(|v| v.trim_start_matches('v').parse::<u8>().unwrap());
            if title.starts_with("<chain looped>") {
                dev.looped.push(offset);
            } else if title.starts_with("<chain broken>") {
                dev.broken.push(offset);
            } else {
                dev.caps.push(LCap {
                    offset,
                    version,
                    title,
                    sections: Vec::new(),
                });
            }
        } else if let Some(rest) = line.strip_prefix("\tRegion ") {
            let (n, desc) = rest.split_once(':').unwrap();
            dev.regions
                .push((n.trim().parse().unwrap(), desc.trim().to_string()));
        } else if let Some(rest) = line.strip_prefix("\tSubsystem: ") {
            dev.subsystem = Some(rest.to_string());
        } else if line.starts_with("\t\t\t") {
            if let Some(sec) = dev.caps.last_mut().and_then(|c| c.sections.last_mut()) {
                sec.1.push(' ');
                sec.1.push_str(line.trim());
            }
        } else if let Some(rest) = line.strip_prefix("\t\t") {
            if let Some(cap) = dev.caps.last_mut() {
                let (label, body) = rest.split_once(':').unwrap_or((rest, ""));
                cap.sections
                    .push((label.trim().to_string(), body.trim().to_string()));
            }
        }
    }
    devs
}

/// `Name+` / `Name-` token in `text`.
fn flag(text: &str, name: &str) -> Option<bool> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .find_map(|t| match t.strip_prefix(name) {
            Some("+") => Some(true),
            Some("-") => Some(false),
            _ => None,
        })
}

/// Leading decimal number right after `key` in `text`.
fn num_after(text: &str, key: &str) -> Option<u64> {
    let i = text.find(key)? + key.len();
    let digits: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Leading hex number right after `key` in `text`.
fn hex_after(text: &str, key: &str) -> Option<u64> {
    let i = text.find(key)? + key.len();
    let digits: String = text[i..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u64::from_str_radix(&digits, 16).ok()
}

/// `Speed 8GT/s` -> Some(8.0); `Speed unknown` -> None.
fn speed(text: &str) -> Option<f64> {
    let i = text.find("Speed ")? + "Speed ".len();
    let rest = &text[i..];
    let end = rest.find("GT/s")?;
    rest[..end].parse().ok()
}

/// The last `[vvvv:dddd]` in an `lspci -nn` line.
fn bracket_ids(line: &str) -> Option<(u16, u16)> {
    line.rsplit('[').find_map(|part| {
        let inner = part.split(']').next()?;
        let (v, d) = inner.split_once(':')?;
        if v.len() != 4 || d.len() != 4 {
            return None;
        }
        Some((
            u16::from_str_radix(v, 16).ok()?,
            u16::from_str_radix(d, 16).ok()?,
        ))
    })
}

fn bdf_of(header: &str) -> String {
    header.split_whitespace().next().unwrap_or("").to_string()
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

/// Flag names lspci prints and the register bit each one shows.
type BitTable = &'static [(&'static str, u32)];

const UNCOR_BITS: &[(&str, u32)] = &[
    ("DLP", 0x10),
    ("SDES", 0x20),
    ("TLP", 0x1000),
    ("FCP", 0x2000),
    ("CmpltTO", 0x4000),
    ("CmpltAbrt", 0x8000),
    ("UnxCmplt", 0x1_0000),
    ("RxOF", 0x2_0000),
    ("MalfTLP", 0x4_0000),
    ("ECRC", 0x8_0000),
    ("UnsupReq", 0x10_0000),
    ("ACSViol", 0x20_0000),
    ("UncorrIntErr", 0x40_0000),
    ("BlockedTLP", 0x80_0000),
    ("AtomicOpBlocked", 0x100_0000),
    ("TLPBlockedErr", 0x200_0000),
    ("PoisonTLPBlocked", 0x400_0000),
    ("DMWrReqBlocked", 0x800_0000),
    ("IDECheck", 0x1000_0000),
    ("MisIDETLP", 0x2000_0000),
    ("PCRC_CHECK", 0x4000_0000),
    ("TLPXlatBlocked", 0x8000_0000),
];

const COR_BITS: &[(&str, u32)] = &[
    ("RxErr", 0x1),
    ("BadTLP", 0x40),
    ("BadDLLP", 0x80),
    ("Rollover", 0x100),
    ("Timeout", 0x1000),
    ("AdvNonFatalErr", 0x2000),
    ("NonFatalErr", 0x2000), // older pciutils name
    ("CorrIntErr", 0x4000),
    ("HeaderOF", 0x8000),
];

const AERCAP_BITS: &[(&str, u32)] = &[
    ("ECRCGenCap", 0x20),
    ("GenCap", 0x20),
    ("ECRCGenEn", 0x40),
    ("CGenEn", 0x40),
    ("ECRCChkCap", 0x80),
    ("ChkCap", 0x80),
    ("ECRCChkEn", 0x100),
    ("ChkEn", 0x100),
    ("MultHdrRecCap", 0x200),
    ("MultHdrRecEn", 0x400),
    ("TLPPfxPres", 0x800),
    ("HdrLogCap", 0x1000),
];

const ACS_BITS: &[(&str, u16)] = &[
    ("SrcValid", 0x01),
    ("TransBlk", 0x02),
    ("ReqRedir", 0x04),
    ("CmpltRedir", 0x08),
    ("UpstreamFwd", 0x10),
    ("EgressCtrl", 0x20),
    ("DirectTrans", 0x40),
];

const DEVCAP_BITS: &[(&str, u32)] = &[
    ("ExtTag", 0x20),
    ("AttnBtn", 0x1000),
    ("AttnInd", 0x2000),
    ("PwrInd", 0x4000),
    ("RBE", 0x8000),
    ("FLReset", 0x1000_0000),
];

const DEVCTL_BITS: &[(&str, u16)] = &[
    ("RlxdOrd", 0x10),
    ("ExtTag", 0x100),
    ("PhantFunc", 0x200),
    ("AuxPwr", 0x400),
    ("NoSnoop", 0x800),
];

const DEVSTA_BITS: &[(&str, u16)] = &[
    ("CorrErr", 0x1),
    ("NonFatalErr", 0x2),
    ("UncorrErr", 0x2),
    ("FatalErr", 0x4),
    ("UnsupReq", 0x8),
    ("UnsuppReq", 0x8),
    ("AuxPwr", 0x10),
    ("TransPend", 0x20),
];

const LNKCAP_BITS: &[(&str, u32)] = &[
    ("ClockPM", 0x4_0000),
    ("Surprise", 0x8_0000),
    ("LLActRep", 0x10_0000),
    ("BwNot", 0x20_0000),
    ("ASPMOptComp", 0x40_0000),
];

const LNKSTA_BITS: &[(&str, u16)] = &[
    ("TrErr", 0x400),
    ("Train", 0x800),
    ("SlotClk", 0x1000),
    ("DLActive", 0x2000),
    ("BWMgmt", 0x4000),
    ("ABWMgmt", 0x8000),
];

/// lspci capability titles -> ids (standard, extended), for the ones we know.
fn std_title_id(title: &str) -> Option<u16> {
    let known: &[(&str, u16)] = &[
        ("Power Management", 0x01),
        ("MSI-X", 0x11),
        ("MSI:", 0x05),
        ("Express", 0x10),
        ("Subsystem", 0x0d),
        ("Vendor Specific", 0x09),
        ("PCI-X", 0x07),
    ];
    known
        .iter()
        .find(|(t, _)| title.starts_with(t))
        .map(|(_, id)| *id)
}

fn ext_title_id(title: &str) -> Option<u16> {
    let known: &[(&str, u16)] = &[
        ("Advanced Error Reporting", 0x01),
        ("Virtual Channel", 0x02),
        ("Device Serial Number", 0x03),
        ("Root Complex Event Collector Endpoint Association", 0x07),
        ("Vendor Specific Information", 0x0b),
        ("Access Control Services", 0x0d),
        ("Alternative Routing-ID Interpretation", 0x0e),
        ("Address Translation Service", 0x0f),
        ("Latency Tolerance Reporting", 0x18),
        ("Secondary PCI Express", 0x19),
        ("#19", 0x19),
        ("Downstream Port Containment", 0x1d),
        ("L1 PM Substates", 0x1e),
    ];
    known
        .iter()
        .find(|(t, _)| title.starts_with(t))
        .map(|(_, id)| *id)
}

/// What was compared, to make sure the comparison is not vacuous.
#[derive(Debug, Default)]
struct Stats {
    devices: usize,
    ids: usize,
    cap_lists: usize,
    bars: usize,
    pcie: usize,
    links: usize,
    acs: usize,
    ats: usize,
    aer: usize,
    aer_any_set: usize,
    loops: usize,
    limited: usize,
    flags: usize,
}

struct Cmp<'a> {
    who: String,
    errs: &'a mut Vec<String>,
    stats: &'a mut Stats,
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

fn compare(
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
        }
    }

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

/// Compare every device of `dump` (an lspci -xxxx style file) with lspci.
fn compare_dump_file(dump: &Path, errs: &mut Vec<String>, stats: &mut Stats) {
    let text = std::fs::read_to_string(dump).unwrap();
    let ours = parse_hex_dump(&text);
    assert!(!ours.is_empty(), "{}: no devices parsed", dump.display());
    let lspci = parse_lspci(&run_lspci(dump, &["-vvv", "-nn"]));
    let name = dump.file_name().unwrap().to_string_lossy().to_string();
    if lspci.len() != ours.len() {
        errs.push(format!(
            "{name}: lspci shows {} devices, parse_hex_dump found {}",
            lspci.len(),
            ours.len()
        ));
    }
    for (header, bytes) in &ours {
        let bdf = dump_bdf(header);
        let Some(ld) = lspci.iter().find(|d| bdf_of(&d.header) == bdf) else {
            errs.push(format!("{name}: lspci does not show {bdf}"));
            continue;
        };
        let cs = decode(bytes);
        compare(&cs, ld, &format!("{name} {bdf}"), true, errs, stats);
    }

    // parse_hex_dump agrees with lspci's own reader: lspci -xxxx re-emits
    // what it read, and we must read back the same bytes.
    let back = parse_hex_dump(&run_lspci(dump, &["-xxxx"]));
    for (header, bytes) in &ours {
        let bdf = dump_bdf(header);
        match back.iter().find(|(h, _)| dump_bdf(h) == bdf) {
            Some((_, b)) if b == bytes => {}
            Some((_, b)) => errs.push(format!(
                "{name} {bdf}: lspci -xxxx re-emits {} bytes that differ from parse_hex_dump's {}",
                b.len(),
                bytes.len()
            )),
            None => errs.push(format!("{name} {bdf}: missing from lspci -xxxx")),
        }
    }
}

fn fixture_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .unwrap_or_else(|e| panic!("reading {FIXTURES}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "hex"))
        .collect();
    v.sort();
    v
}

fn load_fixture(file: &str, bdf: &str) -> ConfigSpace {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join(file)).unwrap();
    let devs = parse_hex_dump(&text);
    let (_, bytes) = devs
        .iter()
        .find(|(h, _)| dump_bdf(h) == bdf)
        .unwrap_or_else(|| panic!("{file}: no {bdf}"));
    decode(bytes)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn fixtures_match_lspci() {
    let files = fixture_files();
    assert!(
        files.len() >= 8,
        "expected >= 8 fixture dumps, found {files:?}"
    );
    if !lspci_available() {
        return;
    }
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    for f in &files {
        compare_dump_file(f, &mut errs, &mut stats);
    }
    eprintln!("fixtures vs lspci: {stats:?}");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
    // The comparison must actually have compared things.
    assert!(stats.devices >= 11, "{stats:?}");
    assert_eq!(stats.ids, stats.devices, "{stats:?}");
    assert!(stats.pcie >= 10, "{stats:?}");
    assert!(stats.links >= 8, "{stats:?}");
    assert!(stats.acs >= 3, "{stats:?}");
    assert!(stats.ats >= 2, "{stats:?}");
    assert!(stats.aer >= 7, "{stats:?}");
    assert!(stats.aer_any_set >= 8, "{stats:?}");
    assert!(stats.loops >= 4, "{stats:?}");
    assert!(stats.limited >= 1, "{stats:?}");
    assert!(stats.bars >= 8, "{stats:?}");
    assert!(stats.flags >= 500, "{stats:?}");
}

/// Header line + hex lines of a `lspci -vvv -xxxx` capture.
fn extract_hex(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with(char::is_whitespace) {
            continue;
        }
        if is_hex_dump_line(line) {
            out.push_str(line);
            out.push('\n');
        } else {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn realdata_matches_lspci() {
    if require::realdata(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).is_none() {
        return;
    }
    let file = Path::new(REALDATA).join("lspci-vvv-xxxx.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let devs = parse_hex_dump(&text);
    assert_eq!(
        devs.len(),
        2,
        "expected the root port and the ConnectX-3 Pro"
    );
    for (h, b) in &devs {
        assert_eq!(b.len(), 4096, "{h}");
    }

    // Facts stated by the capture's own lspci text, checked without lspci.
    let rp = decode(&devs[0].1);
    let acs = rp.acs.as_ref().expect("root port ACS");
    assert_eq!((acs.offset, acs.ctl), (0x110, 0x001f));
    assert!(
        acs.src_valid && acs.trans_blocking && acs.req_redir && acs.cmplt_redir && acs.upstream_fwd
    );
    assert!(!acs.egress_ctl && !acs.direct_trans);
    let p = rp.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type_name, p.lnksta_speed_gts, p.lnksta_width),
        ("Root Port", Some(8.0), Some(8))
    );
    let nic = decode(&devs[1].1);
    assert_eq!((nic.vendor_id, nic.device_id), (Some(0x15b3), Some(0x1007)));
    let p = nic.pcie.as_ref().unwrap();
    assert_eq!((p.mps_supported, p.mps, p.mrrs), (256, 256, 512));
    assert_eq!(nic.aer.as_ref().map(|a| a.offset), Some(0x154));
    assert!(nic.notes.is_empty(), "{:?}", nic.notes);

    // The -vvv text stored next to the hex (an older pciutils) is a second oracle.
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    let stored = parse_lspci(&text);
    assert_eq!(stored.len(), 2);
    for ((h, b), ld) in devs.iter().zip(&stored) {
        compare(
            &decode(b),
            ld,
            &format!("stored text {}", dump_bdf(h)),
            false,
            &mut errs,
            &mut stats,
        );
    }
    assert!(
        stats.pcie == 2 && stats.acs == 1 && stats.aer == 2,
        "{stats:?}"
    );

    if lspci_available() {
        let tmp =
            std::env::temp_dir().join(format!("gdrdoctor-realdata-{}.hex", std::process::id()));
        std::fs::write(&tmp, extract_hex(&text)).unwrap();
        let mut live = Stats::default();
        compare_dump_file(&tmp, &mut errs, &mut live);
        let _ = std::fs::remove_file(&tmp);
        eprintln!("realdata vs lspci: {live:?}");
        assert!(
            live.devices == 2 && live.pcie == 2 && live.acs == 1 && live.aer == 2,
            "{live:?}"
        );
    }
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

/// The fixtures decode to what they were built to contain (no lspci needed).
#[test]
fn fixtures_decode_as_designed() {
    // Switch downstream port: ACS ctl 0x001d, AER with errors logged.
    let dsp = load_fixture("switch-dsp-acs-aer.hex", "05:08.0");
    let p = dsp.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type, p.device_type_name, p.slot_implemented),
        (6, "Downstream Port", true)
    );
    assert_eq!((dsp.secondary_bus, dsp.subordinate_bus), (Some(6), Some(6)));
    let acs = dsp.acs.as_ref().unwrap();
    assert_eq!((acs.cap, acs.ctl), (0x005f, 0x001d));
    assert!(
        acs.src_valid
            && !acs.trans_blocking
            && acs.req_redir
            && acs.cmplt_redir
            && acs.upstream_fwd
    );
    assert!(!acs.egress_ctl && !acs.direct_trans);
    let aer = dsp.aer.as_ref().unwrap();
    assert_eq!(
        (aer.uncor_status, aer.uncor_mask, aer.cor_status),
        (0x0010_4000, 0x0010_0000, 0x2041)
    );
    assert_eq!(aer.root_status, None);
    let usp = load_fixture("switch-dsp-acs-aer.hex", "04:00.0");
    assert_eq!(usp.pcie.as_ref().unwrap().device_type_name, "Upstream Port");
    assert!(usp.acs.is_none());

    // ConnectX-7-like NIC.
    let nic = load_fixture("nic-cx7-endpoint.hex", "17:00.0");
    assert_eq!(
        (nic.vendor_id, nic.device_id, nic.class),
        (Some(0x15b3), Some(0x1021), Some(0x020000))
    );
    let p = nic.pcie.as_ref().unwrap();
    assert_eq!(
        (p.device_type_name, p.mps_supported, p.mps, p.mrrs),
        ("Endpoint", 512, 256, 512)
    );
    assert!(p.relaxed_ordering && p.no_snoop && p.ext_tag);
    assert_eq!((p.lnkcap_speed_gts, p.lnkcap_width), (Some(32.0), Some(16)));
    assert_eq!((p.lnksta_speed_gts, p.lnksta_width), (Some(16.0), Some(8)));
    let ats = nic.ats.as_ref().unwrap();
    assert!(ats.enabled && ats.page_aligned);
    assert_eq!((ats.invalidate_queue_depth, ats.stu), (0, 0));
    let bar0 = &nic.bars[0];
    assert!(bar0.mem64 && bar0.prefetchable && !bar0.io);
    assert_eq!(
        (bar0.index, bar0.raw_hi, bar0.address),
        (0, Some(0x2bff), 0x2bff_f400_0000)
    );
    assert_eq!(
        nic.bars.iter().map(|b| b.index).collect::<Vec<_>>(),
        [0, 2, 3, 4, 5]
    );
    assert!(nic.notes.is_empty(), "{:?}", nic.notes);

    // H200-like GPU.
    let gpu = load_fixture("gpu-h200-endpoint.hex", "18:00.0");
    let p = gpu.pcie.as_ref().unwrap();
    assert_eq!(
        (
            p.lnkcap_speed_gts,
            p.lnkcap_width,
            p.lnksta_speed_gts,
            p.lnksta_width
        ),
        (Some(32.0), Some(16), Some(32.0), Some(16))
    );
    assert_eq!((p.mps, p.mrrs), (256, 4096));
    assert!(!gpu.ats.as_ref().unwrap().enabled);
    assert_eq!(
        gpu.bars
            .iter()
            .map(|b| (b.index, b.address))
            .collect::<Vec<_>>(),
        [
            (0, 0x9100_0000),
            (1, 0x2a00_0000_0000),
            (3, 0x2a20_0200_0000),
            (5, 0)
        ]
    );

    // Root port: ACS present, everything off.
    let rp = load_fixture("rootport-acs-off.hex", "00:01.1");
    assert_eq!(rp.pcie.as_ref().unwrap().device_type_name, "Root Port");
    let acs = rp.acs.as_ref().unwrap();
    assert_eq!(acs.ctl, 0);
    assert!(
        !(acs.src_valid
            || acs.trans_blocking
            || acs.req_redir
            || acs.cmplt_redir
            || acs.upstream_fwd
            || acs.egress_ctl
            || acs.direct_trans)
    );
    assert!(rp.aer.as_ref().unwrap().root_status.is_some());

    // Loops.
    let l0 = load_fixture("looped-chain.hex", "3b:00.0");
    assert_eq!(
        l0.capabilities.iter().map(|c| c.offset).collect::<Vec<_>>(),
        [0x40, 0x50, 0x90]
    );
    assert_eq!(
        l0.ext_capabilities
            .iter()
            .map(|c| c.offset)
            .collect::<Vec<_>>(),
        [0x100, 0x140]
    );
    assert!(
        l0.notes
            .iter()
            .any(|n| n == "capability chain looped at 0x40"),
        "{:?}",
        l0.notes
    );
    assert!(
        l0.notes
            .iter()
            .any(|n| n == "extended capability chain looped at 0x100"),
        "{:?}",
        l0.notes
    );
    let l1 = load_fixture("looped-chain.hex", "3b:00.1");
    assert_eq!(l1.capabilities.len(), 2);
    assert_eq!(l1.ext_capabilities.len(), 1);

    // 64 bytes: header only.
    let t = load_fixture("truncated-64.hex", "41:00.0");
    assert!(t.limited && t.pcie.is_none() && t.capabilities.is_empty());
    assert_eq!(t.len, 64);
    assert_eq!(t.bars[0].address, 0x2c00_0000_0000);
    assert!(
        t.notes.iter().any(|n| n.contains("only 64 bytes")),
        "{:?}",
        t.notes
    );

    // 256 bytes: PCIe but no extended space (the ACS written at 0x100 is not in the dump).
    let s = load_fixture("short-256.hex", "c1:00.0");
    assert!(!s.limited && !s.extended_readable);
    assert!(s.ext_capabilities.is_empty() && s.acs.is_none());
    assert_eq!(s.pcie.as_ref().unwrap().lnksta_speed_gts, Some(2.5));
    assert!(
        s.notes
            .iter()
            .any(|n| n == "extended config space not readable (256 bytes)"),
        "{:?}",
        s.notes
    );

    // No-link devices.
    let rciep = load_fixture("rc-no-link.hex", "00:01.0");
    let p = rciep.pcie.as_ref().unwrap();
    assert_eq!(p.device_type_name, "Root Complex Integrated Endpoint");
    assert_eq!(
        (p.lnkcap, p.lnksta, p.lnkcap_speed_gts, p.lnkcap2),
        (None, None, None, None)
    );
    assert!(p.devcap2.is_some());
    let rcec = load_fixture("rc-no-link.hex", "00:02.0");
    assert_eq!(
        rcec.pcie.as_ref().unwrap().device_type_name,
        "Root Complex Event Collector"
    );
    assert_eq!(rcec.aer.as_ref().unwrap().uncor_status, 0x0004_0000);
}

/// The lspci text parser itself must see what it is meant to see (so that a
/// parser bug cannot make the differential test pass vacuously).
#[test]
fn lspci_text_parser_sanity() {
    let sample = "05:08.0 PCI bridge [0604]: Foo [1000:c030] (rev b0)\n\
\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n\
\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-\n\
\t\t\tRlxdOrd+ ExtTag- PhantFunc- AuxPwr- NoSnoop+\n\
\t\t\tMaxPayload 256 bytes, MaxReadReq 512 bytes\n\
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x8 (downgraded)\n\
\tCapabilities: [148 v1] Access Control Services\n\
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n\
\tCapabilities: [100 v1] <chain looped>\n";
    let devs = parse_lspci(sample);
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d.looped, [0x100]);
    assert_eq!(d.caps.len(), 2);
    let e = &d.caps[0];
    let ctl = e.section("DevCtl").unwrap();
    assert_eq!(
        (
            flag(ctl, "RlxdOrd"),
            flag(ctl, "ExtTag"),
            flag(ctl, "NoSnoop")
        ),
        (Some(true), Some(false), Some(true))
    );
    assert_eq!(
        (num_after(ctl, "MaxPayload "), num_after(ctl, "MaxReadReq ")),
        (Some(256), Some(512))
    );
    let sta = e.section("LnkSta").unwrap();
    assert_eq!(
        (speed(sta), num_after(sta, "Width x")),
        (Some(16.0), Some(8))
    );
    assert_eq!(flag("Speed unknown", "Speed"), None);
    assert_eq!(speed("Speed unknown, Width x0"), None);
    let acs = d.caps[1].section("ACSCtl").unwrap();
    assert_eq!(flag(acs, "TransBlk"), Some(false));
    assert_eq!(flag(acs, "CmpltRedir"), Some(true));
    assert_eq!(flag("AdvNonFatalErr+", "NonFatalErr"), None);
    assert_eq!((d.caps[1].offset, d.caps[1].version), (0x148, Some(1)));
}

/// Every binary `config` file of the fixture nodes (the H200 captured with `gdrdoctor
/// snapshot`, and the constructed HGX switch ports, GPUs and NICs), written as an `lspci -xxxx`
/// dump and compared with `lspci -F` field by field.
#[test]
fn sysroot_config_files_match_lspci() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(&p, out);
            } else if ft.is_file() && p.file_name().is_some_and(|n| n == "config") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for n in nodes::names() {
        walk(&nodes::fixture(&n), &mut files);
    }
    files.sort();
    assert!(
        files.len() >= 40,
        "expected the sysroot config files, found {}",
        files.len()
    );
    if !lspci_available() {
        return;
    }
    // One dump per distinct config space (the constructed scenarios repeat devices).
    let mut seen = std::collections::BTreeSet::new();
    let tmp =
        std::env::temp_dir().join(format!("gdrdoctor-sysroot-configs-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut errs = Vec::new();
    let mut stats = Stats::default();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        if !seen.insert(bytes.clone()) {
            continue;
        }
        let bdf = f
            .parent()
            .and_then(|p| p.file_name())
            .unwrap()
            .to_string_lossy()
            .to_string();
        let short = bdf.get(5..).unwrap_or(&bdf).to_string();
        let mut text = format!("{short} Device from {}\n", f.display());
        for (i, chunk) in bytes.chunks(16).enumerate() {
            text.push_str(&format!("{:02x}:", i * 16));
            for b in chunk {
                text.push_str(&format!(" {b:02x}"));
            }
            text.push('\n');
        }
        let dump = tmp.join(format!("{}.hex", seen.len()));
        std::fs::write(&dump, text).unwrap();
        compare_dump_file(&dump, &mut errs, &mut stats);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("sysroot configs vs lspci: {stats:?}");
    assert!(
        errs.is_empty(),
        "{} mismatches:\n{}",
        errs.len(),
        errs.join("\n")
    );
    assert!(stats.devices >= 8, "{stats:?}");
    assert!(
        stats.acs >= 2,
        "ACS of the switch ports compared: {stats:?}"
    );
    assert!(stats.links >= 4, "{stats:?}");
}
