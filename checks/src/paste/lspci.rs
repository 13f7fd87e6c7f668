//! `lspci -vvv` (with `-nn`, and with the `-xxx`/`-xxxx` hex dump when present) and
//! `lspci -tv`.
//!
//! From the text: address, class (from `[0302]` with `-nn`, else from the class name, which
//! pci.ids maps one to one; lspci prints `(prog-if xx)` whenever the programming interface is
//! not 0), vendor and device (from `[10de:2330]`, else by looking the printed names up in the
//! embedded pci.ids: a unique exact match or nothing), NUMA node, bound driver, regions
//! (`Region 1: Memory at 3f000000000 (64-bit, prefetchable) [size=64G]`, which lspci takes
//! from sysfs `resource`), LnkCap/LnkSta speed and width, DevCtl MaxPayload/MaxReadReq/RlxdOrd,
//! ACSCap/ACSCtl and ATSCtl flags. The hex dump is raw config space: the node gets it and our
//! decoder (`crate::pci::config`) reads it like a sysfs `config` file.
//!
//! `lspci -tv` gives the tree: each device's parent bridge and host bridge, from which the
//! device's sysfs path (`/sys/devices/pci0000:e0/0000:e0:01.1/0000:e1:00.0`) follows exactly
//! as the kernel builds it, so NCCL's path types can be computed as for a live node.

use super::block::{status, Block, BlockStatus, RawBlock};
use super::clean::Line;
use super::line::bdf_token;
use serde::Serialize;
use std::collections::BTreeMap;

/// ACS capability or control flags as lspci prints them (`SrcValid+ TransBlk- ReqRedir+ ..`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AcsFlags {
    pub src_valid: bool,
    pub trans_blk: bool,
    pub req_redir: bool,
    pub cmplt_redir: bool,
    pub upstream_fwd: bool,
    pub egress_ctrl: bool,
    pub direct_trans: bool,
}

impl AcsFlags {
    fn parse(s: &str) -> Option<AcsFlags> {
        let f = |name: &str| -> Option<bool> {
            let p = s.find(name)?;
            match s[p + name.len()..].chars().next()? {
                '+' => Some(true),
                '-' => Some(false),
                _ => None,
            }
        };
        Some(AcsFlags {
            src_valid: f("SrcValid")?,
            trans_blk: f("TransBlk")?,
            req_redir: f("ReqRedir")?,
            cmplt_redir: f("CmpltRedir")?,
            upstream_fwd: f("UpstreamFwd")?,
            egress_ctrl: f("EgressCtrl")?,
            direct_trans: f("DirectTrans")?,
        })
    }
    /// Peer-to-peer requests or completions are redirected up to the root complex.
    pub fn redirects(&self) -> bool {
        self.req_redir || self.cmplt_redir || self.egress_ctrl
    }
}

/// `Region N: ..` or `Expansion ROM at ..`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Region {
    /// 0-5 BARs, 6 expansion ROM.
    pub index: usize,
    pub address: Option<u64>,
    pub size: Option<u64>,
    pub io: bool,
    pub mem64: bool,
    pub prefetchable: bool,
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LspciDevice {
    pub bdf: String,
    pub line: usize,
    pub class_name: String,
    pub description: String,
    /// `base << 16 | sub << 8 | prog-if`.
    pub class: Option<u32>,
    pub vendor_id: Option<u16>,
    pub device_id: Option<u16>,
    /// The ids came from the names (pci.ids), not from `-nn`.
    pub ids_from_names: bool,
    pub numa_node: Option<i32>,
    pub driver: Option<String>,
    pub regions: Vec<Region>,
    /// `Express (v2) Endpoint`, `Root Port`, `Upstream Port`, `Downstream Port`, ...
    pub express: Option<String>,
    pub lnkcap_speed: Option<String>,
    pub lnkcap_width: Option<u32>,
    pub lnksta_speed: Option<String>,
    pub lnksta_width: Option<u32>,
    pub lnksta_downgraded: bool,
    pub mps: Option<u32>,
    pub mrrs: Option<u32>,
    pub relaxed_ordering: Option<bool>,
    pub acs_cap: Option<AcsFlags>,
    pub acs_ctl: Option<AcsFlags>,
    pub ats_enabled: Option<bool>,
    /// `Capabilities: <access denied>`: lspci ran without root.
    pub access_denied: bool,
    /// Config space from the hex dump (contiguous from offset 0).
    #[serde(skip)]
    pub config: Vec<u8>,
    pub config_bytes: usize,
    /// Why this section holds more than one function's lines (a field lspci prints once per
    /// function, printed twice): the next function's header line was lost. Not used.
    #[serde(skip)]
    pub merged: Option<String>,
}

/// pci.ids class names -> (base, sub).
const CLASSES: &[(&str, u32)] = &[
    ("Non-VGA unclassified device", 0x0000),
    ("SCSI storage controller", 0x0100),
    ("RAID bus controller", 0x0104),
    ("SATA controller", 0x0106),
    ("Serial Attached SCSI controller", 0x0107),
    ("Non-Volatile memory controller", 0x0108),
    ("Ethernet controller", 0x0200),
    ("Token ring network controller", 0x0201),
    ("Infiniband controller", 0x0207),
    ("Fabric controller", 0x0208),
    ("Network controller", 0x0280),
    ("VGA compatible controller", 0x0300),
    ("XGA compatible controller", 0x0301),
    ("3D controller", 0x0302),
    ("Display controller", 0x0380),
    ("Audio device", 0x0403),
    ("RAM memory", 0x0500),
    ("Memory controller", 0x0580),
    ("Host bridge", 0x0600),
    ("ISA bridge", 0x0601),
    ("PCI bridge", 0x0604),
    ("Bridge", 0x0680),
    ("IOMMU", 0x0806),
    ("System peripheral", 0x0880),
    ("Co-processor", 0x0b40),
    ("USB controller", 0x0c03),
    ("SMBus", 0x0c05),
    ("Encryption controller", 0x1080),
    ("Signal processing controller", 0x1180),
    ("Processing accelerators", 0x1200),
    ("Non-Essential Instrumentation", 0x1300),
    ("Unassigned class", 0xff00),
];

/// `16M` -> bytes.
fn size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (n, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(mul)
}

fn region(t: &str) -> Option<Region> {
    let (index, rest) = if let Some(r) = t.strip_prefix("Region ") {
        let (i, rest) = r.split_once(':')?;
        (i.trim().parse().ok()?, rest)
    } else if let Some(r) = t.strip_prefix("Expansion ROM at ") {
        (6, r)
    } else {
        return None;
    };
    let io = rest.contains("I/O ports");
    let addr_tok = rest
        .split_whitespace()
        .skip_while(|w| *w != "at")
        .nth(1)
        .or_else(|| {
            (index == 6)
                .then(|| rest.split_whitespace().next())
                .flatten()
        });
    let address = addr_tok.and_then(|a| u64::from_str_radix(a, 16).ok());
    let size = rest
        .split_once("[size=")
        .and_then(|(_, r)| r.split(']').next())
        .and_then(size);
    Some(Region {
        index,
        address,
        size,
        io,
        mem64: rest.contains("64-bit"),
        prefetchable: rest.contains(" prefetchable"),
        disabled: rest.contains("[disabled]"),
    })
}

/// `Speed 16GT/s (downgraded), Width x16` -> ("16 GT/s", 16, downgraded).
fn link(s: &str) -> (Option<String>, Option<u32>, bool) {
    let speed = s
        .split_once("Speed ")
        .and_then(|(_, r)| r.split([',', ' ']).next())
        .and_then(|v| v.strip_suffix("GT/s"))
        .filter(|v| v.parse::<f64>().is_ok())
        .map(|v| format!("{v} GT/s"));
    let width = s
        .split_once("Width x")
        .and_then(|(_, r)| r.split([',', ' ']).next())
        .and_then(|v| v.parse().ok());
    (speed, width, s.contains("downgraded"))
}

/// Look a vendor and device up in pci.ids by the names lspci printed.
fn ids_by_name(desc: &str) -> (Option<u16>, Option<u16>) {
    let desc = desc.trim();
    let mut hits: Vec<(u16, Option<u16>)> = Vec::new();
    for v in crate::names::vendors() {
        let Some(rest) = desc.strip_prefix(v.name()) else {
            continue;
        };
        let rest = rest.trim();
        if let Some(hex) = rest.strip_prefix("Device ") {
            hits.push((v.id(), u16::from_str_radix(hex.trim(), 16).ok()));
            continue;
        }
        let devs: Vec<u16> = v.devices().filter(|d| d.1 == rest).map(|d| d.0).collect();
        if devs.len() == 1 {
            hits.push((v.id(), Some(devs[0])));
        } else if (devs.is_empty() && rest.is_empty()) || devs.len() > 1 {
            // The vendor is certain; a name pci.ids gives several device ids (Broadcom's
            // "PEX890xx PCIe Gen 5 Switch") leaves only the device id unknown.
            hits.push((v.id(), None));
        }
    }
    match hits.as_slice() {
        [(v, d)] => (Some(*v), *d),
        _ => (None, None),
    }
}

fn header(t: &str, no: usize) -> Option<LspciDevice> {
    let first = t.split_whitespace().next()?;
    let bdf = bdf_token(first)?;
    let rest = t[first.len()..].trim();
    let (class_part, desc) = rest.split_once(": ")?;
    // `VGA compatible controller [0300]`
    let (class_name, class_nn) = match class_part.rsplit_once(" [") {
        Some((n, c)) if c.len() == 5 && c.ends_with(']') => {
            (n.trim().to_string(), u32::from_str_radix(&c[..4], 16).ok())
        }
        _ => (class_part.trim().to_string(), None),
    };
    // Strip `(rev a1)` and `(prog-if 00 [..])`.
    let mut d = desc.to_string();
    let mut progif = 0u32;
    if let Some(p) = d.find(" (prog-if ") {
        progif = d[p + 10..]
            .split([' ', ')'])
            .next()
            .and_then(|x| u32::from_str_radix(x, 16).ok())
            .unwrap_or(0);
        d.truncate(p);
    }
    if let Some(p) = d.find(" (rev ") {
        d.truncate(p);
    }
    // `-nn`: `... [10de:2330]` at the end.
    let (mut vendor_id, mut device_id, mut from_names) = (None, None, false);
    if let Some((name, ids)) = d.rsplit_once(" [") {
        if let Some((v, dv)) = ids.trim_end_matches(']').split_once(':') {
            if v.len() == 4 && dv.len() == 4 {
                vendor_id = u16::from_str_radix(v, 16).ok();
                device_id = u16::from_str_radix(dv, 16).ok();
                d = name.to_string();
            }
        }
    }
    if vendor_id.is_none() {
        let (v, dv) = ids_by_name(&d);
        vendor_id = v;
        device_id = dv;
        from_names = v.is_some();
    }
    let class = class_nn
        .or_else(|| CLASSES.iter().find(|(n, _)| *n == class_name).map(|x| x.1))
        .map(|c| (c << 8) | progif);
    Some(LspciDevice {
        bdf,
        line: no,
        class_name,
        description: d.trim().to_string(),
        class,
        vendor_id,
        device_id,
        ids_from_names: from_names,
        numa_node: None,
        driver: None,
        regions: Vec::new(),
        express: None,
        lnkcap_speed: None,
        lnkcap_width: None,
        lnksta_speed: None,
        lnksta_width: None,
        lnksta_downgraded: false,
        mps: None,
        mrrs: None,
        relaxed_ordering: None,
        acs_cap: None,
        acs_ctl: None,
        ats_enabled: None,
        access_denied: false,
        config: Vec::new(),
        config_bytes: 0,
        merged: None,
    })
}

/// `ACSCtl:` lines that belong to no device (`lspci -vvv | grep ACSCtl`), with their line.
pub fn orphan_acs(lines: &[Line]) -> Vec<(usize, AcsFlags)> {
    let mut out = Vec::new();
    let mut in_device = false;
    for l in lines {
        if !l.text.starts_with(char::is_whitespace) && header(&l.text, l.no).is_some() {
            in_device = true;
            continue;
        }
        let t = l.text.trim();
        if let Some(v) = t.strip_prefix("ACSCtl:") {
            if !in_device {
                if let Some(f) = AcsFlags::parse(v) {
                    out.push((l.no, f));
                }
            }
        }
    }
    out
}

/// Parse an `lspci -vvv` block (one or many devices).
pub fn parse(lines: &[Line]) -> Vec<LspciDevice> {
    let mut out: Vec<LspciDevice> = Vec::new();
    let mut section = String::new();
    let mut hex: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let flush_hex = |d: &mut LspciDevice, hex: &mut BTreeMap<usize, Vec<u8>>| {
        let mut bytes = Vec::new();
        for (off, row) in hex.iter() {
            if *off != bytes.len() || row.len() != 16 {
                break;
            }
            bytes.extend_from_slice(row);
        }
        d.config_bytes = bytes.len();
        // The hex dump's own ids (offsets 0-3) over whatever the names gave.
        if bytes.len() >= 4 {
            d.vendor_id = Some(u16::from_le_bytes([bytes[0], bytes[1]]));
            d.device_id = Some(u16::from_le_bytes([bytes[2], bytes[3]]));
        }
        d.config = bytes;
        hex.clear();
    };
    // The fields lspci prints once per function, seen in the current one.
    let mut once: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for l in lines {
        let t = l.text.trim();
        if !l.text.starts_with(char::is_whitespace) {
            if let Some(h) = header(&l.text, l.no) {
                if let Some(prev) = out.last_mut() {
                    flush_hex(prev, &mut hex);
                }
                out.push(h);
                section.clear();
                once.clear();
                continue;
            }
        }
        let Some(d) = out.last_mut() else { continue };
        // Hex dump: `00: 86 80 ..`, `100: 01 00 ..`.
        if let Some((off, bytes)) = t.split_once(':') {
            if off.len() >= 2
                && off.len() <= 3
                && off.bytes().all(|b| b.is_ascii_hexdigit())
                && !bytes.trim().is_empty()
            {
                let row: Option<Vec<u8>> = bytes
                    .split_whitespace()
                    .map(|b| {
                        if b.len() == 2 {
                            u8::from_str_radix(b, 16).ok()
                        } else {
                            None
                        }
                    })
                    .collect();
                if let (Ok(o), Some(r)) = (usize::from_str_radix(off, 16), row) {
                    hex.insert(o, r);
                    continue;
                }
            }
        }
        if let Some(r) = region(t) {
            d.regions.push(r);
            section.clear();
            continue;
        }
        // `Label:` starts a section; continuation lines belong to it.
        if let Some((k, v)) = t.split_once(':') {
            if !k.contains(' ')
                || k.starts_with("Capabilities")
                || k.starts_with("Kernel")
                || k.starts_with("NUMA")
                || k.starts_with("Region")
                || k.starts_with("Expansion")
            {
                section = k.to_string();
                let v = v.trim();
                let once_per_function = matches!(
                    k,
                    "LnkCap"
                        | "LnkSta"
                        | "DevCap"
                        | "DevCtl"
                        | "Kernel driver in use"
                        | "NUMA node"
                        | "ACSCap"
                        | "ACSCtl"
                );
                if once_per_function && !once.insert(k.to_string()) && d.merged.is_none() {
                    d.merged = Some(format!(
                        "{}: `{k}:` printed twice in its section (line {}): the next function's header line is missing",
                        d.bdf, l.no
                    ));
                }
                match k {
                    "NUMA node" => d.numa_node = v.parse().ok(),
                    "Kernel driver in use" => d.driver = Some(v.to_string()),
                    "Capabilities" => {
                        if v.contains("<access denied>") {
                            d.access_denied = true;
                        }
                        if let Some((_, e)) = v.split_once("] Express") {
                            d.express = Some(e.split(',').next().unwrap_or("").trim().to_string());
                        }
                    }
                    "LnkCap" => {
                        let (s, w, _) = link(v);
                        d.lnkcap_speed = s;
                        d.lnkcap_width = w;
                    }
                    "LnkSta" => {
                        let (s, w, dg) = link(v);
                        d.lnksta_speed = s;
                        d.lnksta_width = w;
                        d.lnksta_downgraded = dg;
                    }
                    "ACSCap" => d.acs_cap = AcsFlags::parse(v),
                    "ACSCtl" => d.acs_ctl = AcsFlags::parse(v),
                    "ATSCtl" => {
                        d.ats_enabled = if v.contains("Enable+") {
                            Some(true)
                        } else if v.contains("Enable-") {
                            Some(false)
                        } else {
                            None
                        }
                    }
                    _ => {}
                }
                if section == "DevCtl" {
                    devctl(d, v);
                }
                continue;
            }
        }
        if section == "DevCtl" {
            devctl(d, t);
        }
    }
    if let Some(prev) = out.last_mut() {
        flush_hex(prev, &mut hex);
    }
    out
}

fn devctl(d: &mut LspciDevice, v: &str) {
    if v.contains("RlxdOrd+") {
        d.relaxed_ordering = Some(true);
    } else if v.contains("RlxdOrd-") {
        d.relaxed_ordering = Some(false);
    }
    let bytes_after =
        |key: &str| -> Option<u32> { v.split_once(key)?.1.split_whitespace().next()?.parse().ok() };
    if let Some(x) = bytes_after("MaxPayload ") {
        d.mps = Some(x);
    }
    if let Some(x) = bytes_after("MaxReadReq ") {
        d.mrrs = Some(x);
    }
}

/// The PCI tree of `lspci -tv`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Tree {
    /// Device -> its parent bridge (`None` on a root bus).
    pub parent: BTreeMap<String, Option<String>>,
    /// Device -> host bridge directory (`pci0000:e0`).
    pub host_bridge: BTreeMap<String, String>,
    pub problems: Vec<String>,
}

impl Tree {
    /// The sysfs path the kernel gives the device: `/sys/devices/pci0000:e0/<bridges>/<bdf>`.
    pub fn sysfs_path(&self, bdf: &str) -> Option<String> {
        let hb = self.host_bridge.get(bdf)?;
        let mut chain = vec![bdf.to_string()];
        let mut cur = bdf.to_string();
        for _ in 0..64 {
            match self.parent.get(&cur)? {
                Some(p) => {
                    chain.push(p.clone());
                    cur = p.clone();
                }
                None => break,
            }
        }
        chain.reverse();
        Some(format!("/sys/devices/{hb}/{}", chain.join("/")))
    }
}

/// Parse `lspci -t[v]` output.
pub fn parse_tree(lines: &[Line]) -> Tree {
    let mut t = Tree::default();
    // Column -> (domain, bus, parent) of an open list of children.
    let mut cols: BTreeMap<usize, (String, String, Option<String>, String)> = BTreeMap::new();
    let mut single_domain: Option<(String, String)> = None;
    for l in lines {
        let s: Vec<char> = l.text.chars().collect();
        let mut i = 0;
        while i < s.len() {
            // A root: `[0000:e0]-` then children.
            if s[i] == '[' {
                let close = match s[i..].iter().position(|c| *c == ']') {
                    Some(p) => i + p,
                    None => break,
                };
                let inner: String = s[i + 1..close].iter().collect();
                let is_root = inner.len() == 7 && inner.as_bytes().get(4) == Some(&b':');
                if !is_root {
                    break;
                }
                let (dom, bus) = (
                    inner[..4].to_ascii_lowercase(),
                    inner[5..].to_ascii_lowercase(),
                );
                let hb = format!("pci{dom}:{bus}");
                let mut j = close + 1;
                while j < s.len() && s[j] == '-' {
                    j += 1;
                }
                let col = if j < s.len() && (s[j] == '+' || s[j] == '\\') {
                    j
                } else {
                    j.saturating_sub(2)
                };
                cols.insert(col, (dom, bus, None, hb));
                i = col;
                continue;
            }
            // A device marker `+-dd.f`, `\-dd.f`, `--dd.f` at a column with an open list.
            let marker =
                i + 1 < s.len() && (s[i] == '+' || s[i] == '\\' || s[i] == '-') && s[i + 1] == '-';
            if marker && i + 6 < s.len() + 1 {
                let dev: String = s[i + 2..(i + 6).min(s.len())].iter().collect();
                let ok = dev.len() == 4
                    && dev.as_bytes()[2] == b'.'
                    && dev[..2].bytes().all(|b| b.is_ascii_hexdigit())
                    && (b'0'..=b'7').contains(&dev.as_bytes()[3]);
                if ok {
                    // Bare `lspci -t` on one domain starts `-+-00.0` with no `[0000:00]`.
                    if cols.is_empty() && i <= 1 {
                        let (dom, bus) = single_domain
                            .get_or_insert(("0000".into(), "00".into()))
                            .clone();
                        let hb = format!("pci{dom}:{bus}");
                        cols.insert(i, (dom, bus, None, hb));
                    }
                    let Some((dom, bus, parent, hb)) = cols.get(&i).cloned() else {
                        t.problems.push(format!(
                            "line {}: device {dev} at a column with no bus: tree not read past it",
                            l.no
                        ));
                        break;
                    };
                    let bdf = format!("{dom}:{bus}:{}", dev.to_ascii_lowercase());
                    t.parent.insert(bdf.clone(), parent);
                    t.host_bridge.insert(bdf.clone(), hb.clone());
                    let mut j = i + 6;
                    // A bridge: `-[e1]--` or `-[c1-c2]--`.
                    if j + 1 < s.len() && s[j] == '-' && s[j + 1] == '[' {
                        let close = match s[j..].iter().position(|c| *c == ']') {
                            Some(p) => j + p,
                            None => break,
                        };
                        let range: String = s[j + 2..close].iter().collect();
                        let sec = range.split('-').next().unwrap_or("").to_ascii_lowercase();
                        j = close + 1;
                        while j < s.len() && s[j] == '-' {
                            j += 1;
                        }
                        let col = if j < s.len() && (s[j] == '+' || s[j] == '\\') {
                            j
                        } else {
                            j.saturating_sub(2)
                        };
                        if sec.len() == 2 && j < s.len() {
                            cols.insert(col, (dom, sec, Some(bdf), hb));
                            i = col;
                            continue;
                        }
                    }
                    break;
                }
            }
            i += 1;
        }
    }
    t
}

/// The value of a command-line option (`-s 18:00.0`, `-s18:00.0`, `-d 10de:`), if given.
fn option_value(words: &[&str], opt: char) -> Option<String> {
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let Some(flags) = w.strip_prefix('-').filter(|f| !f.starts_with('-')) else {
            continue;
        };
        if let Some(at) = flags.find(opt) {
            let rest = &flags[at + opt.len_utf8()..];
            return Some(if rest.is_empty() {
                it.next().map(|x| x.to_string()).unwrap_or_default()
            } else {
                rest.to_string()
            });
        }
    }
    None
}

/// What an `lspci` block covers when it is not the whole bus, in words (`None`: it may be the
/// whole bus). `lspci -s BDF` shows the functions it names, `lspci -d VENDOR:DEVICE` those of
/// one vendor or device, `lspci | grep ...` the lines its filter kept: none of them shows what
/// the rest of the bus holds, so "no NIC on this node" cannot follow from one. A block without
/// its command and without a single bridge (every bare-metal bus has host bridges and root
/// ports, class 0x06) is no whole bus either.
pub fn excerpt(command: Option<&str>, devs: &[LspciDevice]) -> Option<String> {
    match command {
        Some(c) => {
            let (head, filter) = match c.split_once('|') {
                Some((h, f)) => (h, Some(f.trim())),
                None => (c, None),
            };
            let words: Vec<&str> = head.split_whitespace().collect();
            if let Some(s) = option_value(&words, 's') {
                return Some(format!(
                    "`{c}` shows only the function(s) at {}",
                    if s.is_empty() { "the named address" } else { &s }
                ));
            }
            if let Some(d) = option_value(&words, 'd') {
                return Some(format!(
                    "`{c}` shows only the functions of vendor:device {}",
                    if d.is_empty() { "the named ids" } else { &d }
                ));
            }
            filter.map(|f| format!("`{c}` shows only the lines `{f}` kept"))
        }
        // A whole bus starts at function 0 of device 0 of bus 0 (the host bridge on x86, the
        // first root port on arm64); a bridge elsewhere does not make a listing whole (the
        // review of 2026-12-07: a root port and its NIC read as "no nvidia gpu on the bus").
        None => (!devs.is_empty() && !devs.iter().any(|d| d.bdf.ends_with(":00:00.0"))).then(
            || {
                format!(
                    "no command shown and no function at 00:00.0 among its {} function(s): not the whole bus (an excerpt, or a virtual machine's passed-through devices)",
                    devs.len()
                )
            },
        ),
    }
}

/// An `lspci -vvv` block: its functions, the `ACSCtl:` lines of no function (line, flags), and
/// what the block covers when it is an excerpt of the bus ([`excerpt`]).
pub fn block(
    b: &mut Block,
    raw: &RawBlock,
) -> (Vec<LspciDevice>, Vec<(usize, AcsFlags)>, Option<String>) {
    let mut d = parse(&raw.lines);
    // A section holding two functions' lines: none of its facts can be pinned on a function
    // (the review of 2026-12-07: a lost header put a CX-7's full-width LnkSta on the degraded
    // CX-6 above it, a pass).
    for x in d.iter() {
        if let Some(why) = &x.merged {
            b.problems.push(format!("{why}: not used"));
        }
    }
    d.retain(|x| x.merged.is_none());
    let orphans = orphan_acs(&raw.lines);
    let hex = d.iter().filter(|x| x.config_bytes > 0).count();
    let part = excerpt(raw.command.as_deref(), &d);
    b.summary = format!(
        "{} PCI function(s){}{}{}",
        d.len(),
        if orphans.is_empty() {
            String::new()
        } else {
            format!(", {} ACSCtl line(s) of unnamed functions", orphans.len())
        },
        if hex > 0 {
            format!(", {hex} with a config-space hex dump")
        } else {
            String::new()
        },
        match &part {
            Some(w) => format!(" (an excerpt of the bus: {w})"),
            None => String::new(),
        }
    );
    if d.iter().any(|x| x.access_denied) {
        b.problems.push(
            "lspci ran without root (`Capabilities: <access denied>`): capabilities are missing"
                .into(),
        );
    }
    // Unknown ids matter where a verdict needs them: a GPU, a NIC, an accelerator, or a
    // function whose class is unknown too. A bridge or a memory controller pci.ids does not
    // name (a PMC-Sierra switch's "Device 4128" under a vendor name pci.ids gives twice) is
    // still read by its class: it does not make the paste "partly unreadable" (the review of
    // 2026-12-07: 49 such switch ports turned a whole HGX lspci into exit 3).
    let ids_matter = |x: &LspciDevice| {
        x.class
            .is_none_or(|c| matches!(c >> 16, 0x02 | 0x03 | 0x12 | 0x00 | 0xff))
    };
    for x in d.iter().filter(|x| x.vendor_id.is_none() && ids_matter(x)) {
        b.problems.push(format!(
            "{}: vendor and device not found by name in pci.ids (paste `lspci -nn`)",
            x.bdf
        ));
    }
    if d.is_empty() && orphans.is_empty() {
        b.status = BlockStatus::Refused;
    } else {
        b.status = status(&b.repairs, &b.problems);
    }
    (d, orphans, part)
}

/// An `lspci -tv` block: the tree.
pub fn tree_block(b: &mut Block, raw: &RawBlock) -> Tree {
    let t = parse_tree(&raw.lines);
    b.summary = format!("PCI tree of {} function(s)", t.parent.len());
    b.problems.extend(t.problems.iter().cloned());
    b.status = if t.parent.is_empty() {
        BlockStatus::Refused
    } else {
        status(&b.repairs, &b.problems)
    };
    t
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    const GPU: &str = "01:00.0 VGA compatible controller: NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1) (prog-if 00 [VGA controller])
        Subsystem: NVIDIA Corporation AD102GL [RTX 6000 Ada Generation]
        NUMA node: 0
        Region 0: Memory at f8000000 (32-bit, non-prefetchable) [size=16M]
        Region 1: Memory at 3f000000000 (64-bit, prefetchable) [size=64G]
        Region 5: I/O ports at 2000 [size=128]
        Expansion ROM at f9000000 [virtual] [disabled] [size=512K]
        Capabilities: [78] Express (v2) Legacy Endpoint, MSI 00
                DevCtl: CorrErr+ NonFatalErr+ FatalErr+ UnsupReq-
                        RlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-
                        MaxPayload 256 bytes, MaxReadReq 512 bytes
                LnkCap: Port #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
                LnkSta: Speed 2.5GT/s (downgraded), Width x16
        Capabilities: [2a0 v1] Access Control Services
                ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
                ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
        Kernel driver in use: nvidia
";

    #[test]
    fn reads_the_fields_that_matter() {
        let d = parse(&clean(GPU).lines);
        assert_eq!(d.len(), 1);
        let g = &d[0];
        assert_eq!(g.bdf, "0000:01:00.0");
        assert_eq!(g.class, Some(0x030000));
        assert_eq!((g.vendor_id, g.device_id), (Some(0x10de), Some(0x26b1)));
        assert!(g.ids_from_names);
        assert_eq!(g.numa_node, Some(0));
        assert_eq!(g.driver.as_deref(), Some("nvidia"));
        assert_eq!(g.regions.len(), 4);
        assert_eq!(g.regions[1].size, Some(64 << 30));
        assert!(g.regions[1].prefetchable && g.regions[1].mem64);
        assert!(!g.regions[0].prefetchable);
        assert!(g.regions[2].io);
        assert_eq!(g.regions[3].index, 6);
        assert_eq!(
            (g.mps, g.mrrs, g.relaxed_ordering),
            (Some(256), Some(512), Some(true))
        );
        assert_eq!(g.lnkcap_speed.as_deref(), Some("16 GT/s"));
        assert_eq!(
            (g.lnksta_speed.as_deref(), g.lnksta_width),
            (Some("2.5 GT/s"), Some(16))
        );
        assert!(g.lnksta_downgraded);
        assert!(g.acs_ctl.unwrap().redirects());
        assert!(!g.acs_ctl.unwrap().trans_blk);
        assert_eq!(g.express.as_deref(), Some("(v2) Legacy Endpoint"));
    }

    #[test]
    fn nn_ids_and_hex_dump() {
        let t = "00:02.0 PCI bridge [0604]: Intel Corporation Haswell-E PCI Express Root Port 2 [8086:2f04] (rev 02) (prog-if 00 [Normal decode])\n\tNUMA node: 1\n00: 86 80 04 2f 07 00 10 00 02 00 04 06 10 00 81 00\n10: 00 00 00 00 00 00 00 00 00 03 03 00 f0 00 00 20\n30: 00 00 00 00 40 00 00 00 00 00 00 00 0b 01 10 00\n";
        let d = parse(&clean(t).lines);
        assert_eq!(
            (d[0].vendor_id, d[0].device_id, d[0].class),
            (Some(0x8086), Some(0x2f04), Some(0x060400))
        );
        assert!(!d[0].ids_from_names);
        // 0x20 row missing: only the contiguous 32 bytes from 0 are config space.
        assert_eq!(d[0].config_bytes, 32);
        assert_eq!(d[0].config[0..2], [0x86, 0x80]);
    }

    #[test]
    fn a_lost_header_merges_two_functions_and_neither_is_used() {
        let second = GPU.replace("01:00.0", "02:00.0");
        let both = format!("{GPU}{second}");
        assert!(parse(&clean(&both).lines)
            .iter()
            .all(|d| d.merged.is_none()));
        let lost: String = both
            .lines()
            .filter(|l| !l.starts_with("02:00.0"))
            .map(|l| format!("{l}\n"))
            .collect();
        let d = parse(&clean(&lost).lines);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].merged
                .as_deref()
                .is_some_and(|w| w.contains("printed twice")),
            "{:?}",
            d[0].merged
        );
    }

    #[test]
    fn ids_from_the_hex_dump_and_a_vendor_whose_device_name_is_ambiguous() {
        // Named only by vendor (pci.ids has no name for 4128): the vendor is known.
        let t = "81:00.0 PCI bridge: PMC-Sierra Inc. Device 4128 (prog-if 00 [Normal decode])\n\tNUMA node: 1\n00: f8 11 28 41 07 00 10 00 02 00 04 06 10 00 81 00\n";
        let d = parse(&clean(t).lines);
        assert_eq!(
            (d[0].vendor_id, d[0].device_id),
            (Some(0x11f8), Some(0x4128))
        );
    }

    #[test]
    fn tree_gives_parents_and_sysfs_paths() {
        let t = "-+-[0000:e0]-+-00.0  Advanced Micro Devices, Inc. [AMD] Device 14a4\n |           +-01.1-[e1]----00.0  NVIDIA Corporation AD102GL [RTX 6000 Ada Generation]\n |           \\-03.1-[e2-e4]--+-00.0  Switch\n |                           \\-00.1  Mellanox\n \\-[0000:00]-+-00.0  Root\n             \\-01.1-[01]--+-00.0  NVIDIA\n                          \\-00.1  NVIDIA Audio\n";
        let tr = parse_tree(&clean(t).lines);
        assert!(tr.problems.is_empty(), "{:?}", tr.problems);
        assert_eq!(
            tr.sysfs_path("0000:e1:00.0").as_deref(),
            Some("/sys/devices/pci0000:e0/0000:e0:01.1/0000:e1:00.0")
        );
        assert_eq!(
            tr.sysfs_path("0000:e2:00.1").as_deref(),
            Some("/sys/devices/pci0000:e0/0000:e0:03.1/0000:e2:00.1")
        );
        assert_eq!(
            tr.sysfs_path("0000:01:00.1").as_deref(),
            Some("/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.1")
        );
        assert_eq!(tr.parent.get("0000:00:00.0"), Some(&None));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let l = clean(&s).lines;
            for d in parse(&l) {
                prop_assert!(d.config.len() % 16 == 0);
            }
            let _ = parse_tree(&l);
        }

        #[test]
        fn never_panics_on_tree_like_text(rows in proptest::collection::vec("[ |+\\\\\\-\\[\\]0-9a-f:.]{0,40}", 0..10)) {
            let t = parse_tree(&clean(&rows.join("\n")).lines);
            for b in t.parent.keys() {
                prop_assert!(crate::parse::is_bdf(b));
            }
        }
    }
}
