//! `gdrdoctor topo --format svg|png`: the node's PCIe tree with its verdicts, drawn like
//! lstopo's I/O view (socket, host bridge, bridges and switches, GPUs, RDMA NICs, NVSwitches).
//!
//! Three steps: [`scene`] turns the node, its topology verdicts and the findings of the check
//! registry into a small [`Picture`] (labels, tones and hover texts per element); the pure
//! [`layout`](super::svg_layout::layout) places it; [`render`] writes SVG text. Nothing here
//! reads the system.
//!
//! What is drawn, and from what:
//! - every GPU, RDMA NIC and NVSwitch with the bridges above them (other PCI functions are
//!   counted, not drawn), grouped by host bridge and by NUMA node (the socket);
//! - a box's colour is the worst non-passing finding whose subject is that element (its PCI
//!   address, or its RDMA device name); hovering the box lists its findings. Findings about the
//!   whole node are listed in the header in their colour;
//! - a link's colour is that of the `pcie.link` finding of the device below it, and a link that
//!   runs below its capability (sysfs `current_link_*` < `max_link_*`) says so on the line;
//! - every GPU-NIC pair with GPUDirect RDMA on its own PCIe path is a solid line through the
//!   tree, labelled at the common ancestor with NCCL's path type; a pair NCCL serves through an
//!   NVLink peer (PXN) runs down to the NVLink bar, over to the peer and up its path (shown
//!   when the GPU is hovered); a GPU without any GDR gets a dashed line to its nearest NIC with
//!   the reason on hover, and hovering a GPU shows every other pair without GDR the same way.

use super::svg_layout::{self, Fabric, Item, Kind, Layout, Route, RouteKind, Scene, Text};
use super::topo::Topo;
use crate::sys::escape::{xml_attr as attr, xml_text as text};
use gdrdoctor_checks::model::{Node, PciDevice};
use gdrdoctor_checks::report::{Finding, GdrPair, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The scene and what the serialiser needs besides geometry.
#[derive(Debug, Clone, Default)]
pub struct Picture {
    pub scene: Scene,
    /// Worst non-passing status per element id.
    pub tones: BTreeMap<String, Status>,
    /// Hover text per element id (boxes) and per route id.
    pub titles: BTreeMap<String, String>,
    /// Tone of the link above an element (its `pcie.link` finding), by the element's id.
    pub edge_tones: BTreeMap<String, Status>,
    /// Hover text of the link above an element.
    pub edge_titles: BTreeMap<String, String>,
    /// Tone per header line (findings about the whole node), by index.
    pub header_tones: Vec<Option<Status>>,
    /// Full text of header lines that were cut.
    pub header_titles: Vec<String>,
    /// A legend swatch per footer line, by index.
    pub footer_swatches: Vec<Option<Swatch>>,
    /// Route style per route id.
    pub route_styles: BTreeMap<String, RouteStyle>,
    /// Host name, for the document title.
    pub host: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteStyle {
    /// GDR on the GPU's own path.
    Gdr,
    /// GDR for one direction only, or undecided in one.
    Partial,
    /// GDR through an NVLink peer (PXN).
    Pxn,
    NoGdr,
    Undecided,
}

impl RouteStyle {
    fn class(self) -> &'static str {
        match self {
            RouteStyle::Gdr => "gdr",
            RouteStyle::Partial => "gdr partial",
            RouteStyle::Pxn => "pxn",
            RouteStyle::NoGdr => "nogdr",
            RouteStyle::Undecided => "undecided",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    Route(RouteStyle),
    Tone(Status),
}

const HEADER_CHARS: usize = 130;

/// `0000:18:00.0` -> `18:00.0` (domain 0 only).
fn short_bdf(bdf: &str) -> &str {
    bdf.strip_prefix("0000:").unwrap_or(bdf)
}

/// The name users know: the part in brackets of a pci.ids name (`H200 SXM 141GB`,
/// `ConnectX-7`), else the whole name.
fn short_name(name: &str) -> String {
    match (name.find('['), name.rfind(']')) {
        (Some(a), Some(b)) if b > a + 1 => name[a + 1..b].to_string(),
        _ => name.to_string(),
    }
}

fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

fn fmt_gts(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// `x16 32 GT/s`, from sysfs.
fn link_text(d: &PciDevice) -> Option<String> {
    let w = d.cur_link_width.get()?;
    let s = d.cur_link_speed.get().and_then(|s| gts(s))?;
    Some(format!("x{w} {} GT/s", fmt_gts(s)))
}

/// A link below its capability: `x8 of x16`, `16 of 32 GT/s`, or both.
fn degraded(d: &PciDevice) -> Option<String> {
    let (cw, mw) = (d.cur_link_width.get(), d.max_link_width.get());
    let (cs, ms) = (
        d.cur_link_speed.get().and_then(|s| gts(s)),
        d.max_link_speed.get().and_then(|s| gts(s)),
    );
    let narrow = matches!((cw, mw), (Some(c), Some(m)) if c < m);
    let slow = matches!((cs, ms), (Some(c), Some(m)) if c < m);
    match (narrow, slow) {
        (true, true) => Some(format!(
            "x{}/{} GT of x{}/{}",
            cw.copied().unwrap_or(0),
            fmt_gts(cs.unwrap_or(0.0)),
            mw.copied().unwrap_or(0),
            fmt_gts(ms.unwrap_or(0.0))
        )),
        (true, false) => Some(format!(
            "x{} of x{}",
            cw.copied().unwrap_or(0),
            mw.copied().unwrap_or(0)
        )),
        (false, true) => Some(format!(
            "{} of {} GT/s",
            fmt_gts(cs.unwrap_or(0.0)),
            fmt_gts(ms.unwrap_or(0.0))
        )),
        (false, false) => None,
    }
}

fn link_title(d: &PciDevice) -> String {
    format!(
        "link above {}: {} x{} (capable of {} x{})",
        short_bdf(&d.bdf),
        d.cur_link_speed
            .get()
            .cloned()
            .unwrap_or_else(|| "?".into()),
        d.cur_link_width
            .get()
            .map(|w| w.to_string())
            .unwrap_or_else(|| "?".into()),
        d.max_link_speed
            .get()
            .cloned()
            .unwrap_or_else(|| "?".into()),
        d.max_link_width
            .get()
            .map(|w| w.to_string())
            .unwrap_or_else(|| "?".into()),
    )
}

fn finding_line(f: &Finding) -> String {
    format!("{} {} ({}): {}", f.status, f.id, f.subject, f.message)
}

/// The mark of a pair as a word for labels.
fn pair_word(p: &GdrPair) -> String {
    let path = p.nccl_path.clone().unwrap_or_else(|| p.path.clone());
    match super::topo::mark(p) {
        "r" => format!("{path} recv only"),
        "s" => format!("{path} send only"),
        "?" if p.enabled => format!("{path} ?"),
        _ => path,
    }
}

fn pair_title(p: &GdrPair, gpu_name: &str) -> String {
    let mut t = String::new();
    let verdict = if p.enabled {
        match &p.via {
            Some(v) => format!(
                "GDR through NVLink peer {} (PXN); own PCIe path {}",
                short_bdf(v),
                p.path
            ),
            None => format!(
                "GDR, path {}{}",
                p.nccl_path.as_deref().unwrap_or(&p.path),
                p.mechanism
                    .as_deref()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default()
            ),
        }
    } else if !p.undecided.is_empty() {
        format!("undecided, path {}", p.path)
    } else {
        format!("no GDR, path {}", p.path)
    };
    let dir = |d: Option<bool>| match d {
        Some(true) => "yes",
        Some(false) => "no",
        None => "undecided",
    };
    let _ = write!(
        t,
        "{gpu_name} -> {}: {verdict}; send {}, receive {}",
        p.nic,
        dir(p.send),
        dir(p.receive)
    );
    for r in p.reasons.iter().chain(p.undecided.iter()) {
        let _ = write!(t, "\n- {r}");
    }
    for n in &p.notes {
        let _ = write!(t, "\nnote: {n}");
    }
    for a in &p.assumptions {
        let _ = write!(t, "\nassumed: {a}");
    }
    if let (Some(th), Some(src)) = (&p.threshold, &p.threshold_source) {
        let _ = write!(t, "\nthreshold {th} ({src})");
    }
    t
}

fn worst(fs: &[&Finding]) -> Option<Status> {
    let rank = |s: Status| match s {
        Status::Fail => 4,
        Status::Error => 3,
        Status::Warn => 2,
        Status::Skip => 1,
        Status::Pass => 0,
    };
    fs.iter()
        .map(|f| f.status)
        .filter(|s| matches!(s, Status::Fail | Status::Error | Status::Warn))
        .max_by_key(|s| rank(*s))
}

/// Build the picture of a node. `findings` are the check registry's findings on the same node
/// (`checks::run`), `t` its topology verdicts (`topo::build`).
pub fn scene(node: &Node, t: &Topo, findings: &[Finding]) -> Picture {
    let mut pic = Picture {
        host: node
            .hostname
            .get()
            .cloned()
            .unwrap_or_else(|| "unknown host".into()),
        ..Default::default()
    };
    let pci: Vec<&PciDevice> = node
        .pci
        .get()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let by_bdf: BTreeMap<&str, &PciDevice> = pci.iter().map(|d| (d.bdf.as_str(), *d)).collect();
    // RDMA devices per PCI function.
    let mut ibdevs: BTreeMap<String, Vec<&gdrdoctor_checks::model::RdmaDevice>> = BTreeMap::new();
    let mut unplaced = Vec::new();
    for r in node
        .rdma
        .get()
        .map(|v| v.iter().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        match r.pci_bdf.get() {
            Some(Some(b)) if by_bdf.contains_key(b.as_str()) => {
                ibdevs.entry(b.clone()).or_default().push(r)
            }
            _ => unplaced.push(r.name.clone()),
        }
    }
    let ib_to_bdf: BTreeMap<String, String> = ibdevs
        .iter()
        .flat_map(|(b, v)| v.iter().map(move |r| (r.name.clone(), b.clone())))
        .collect();
    let gpu_index: BTreeMap<&str, usize> =
        t.gpus.iter().map(|g| (g.bdf.as_str(), g.index)).collect();
    let switches: BTreeSet<&str> = t
        .gpus
        .iter()
        .flat_map(|g| g.switches.iter().map(String::as_str))
        .collect();
    let mut switches: BTreeSet<String> = switches.iter().map(|s| s.to_string()).collect();
    {
        let idx = gdrdoctor_checks::topo::PciIndex::new(node);
        for b in ibdevs.keys() {
            if let Some(e) = idx.endpoint(b, true) {
                switches.extend(e.switches);
            }
        }
    }
    // Endpoints to draw, and every bridge above them.
    // Mellanox network functions without an RDMA device (mlx5_ib not loaded, or a capture
    // without /sys/class/infiniband) are drawn too: a NIC NCCL cannot use is worth seeing.
    let bare_nics: BTreeSet<&str> = pci
        .iter()
        .filter(|d| {
            d.is_network()
                && d.vendor_id.get() == Some(&0x15b3)
                && !d.is_virtfn
                && !ibdevs.contains_key(&d.bdf)
        })
        .map(|d| d.bdf.as_str())
        .collect();
    {
        let idx = gdrdoctor_checks::topo::PciIndex::new(node);
        for b in &bare_nics {
            if let Some(e) = idx.endpoint(b, true) {
                switches.extend(e.switches);
            }
        }
    }
    let endpoints: Vec<&PciDevice> = pci
        .iter()
        .copied()
        .filter(|d| {
            d.is_nvidia_gpu()
                || d.is_nvswitch()
                || ibdevs.contains_key(&d.bdf)
                || bare_nics.contains(d.bdf.as_str())
        })
        .collect();
    let mut drawn: BTreeSet<&str> = BTreeSet::new();
    for e in &endpoints {
        let mut cur = Some(*e);
        let mut guard = 0;
        while let Some(d) = cur {
            if !drawn.insert(d.bdf.as_str()) || guard > 64 {
                break;
            }
            guard += 1;
            cur = d.parent.as_deref().and_then(|p| by_bdf.get(p).copied());
        }
    }
    let not_drawn = pci.len() - drawn.len();

    // Findings by element.
    let mut by_elem: BTreeMap<String, Vec<&Finding>> = BTreeMap::new();
    let mut node_level: Vec<&Finding> = Vec::new();
    for f in findings {
        let subj = f.subject.as_str();
        let base = subj.split('/').next().unwrap_or(subj);
        if drawn.contains(subj) {
            by_elem.entry(subj.to_string()).or_default().push(f);
        } else if let Some(b) = ib_to_bdf.get(base) {
            by_elem.entry(b.clone()).or_default().push(f);
        } else if f.status != Status::Pass && f.status != Status::Skip {
            node_level.push(f);
        }
    }

    // Pairs per GPU.
    let pairs_of = |g: &str| -> Vec<&GdrPair> { t.pairs.iter().filter(|p| p.gpu == g).collect() };
    let gpu_label = |bdf: &str| -> String {
        gpu_index
            .get(bdf)
            .map(|i| format!("GPU{i}"))
            .unwrap_or_else(|| "GPU".into())
    };

    // Boxes.
    let make_item = |d: &PciDevice, children: Vec<Item>| -> Item {
        let name = gdrdoctor_checks::names::device_name(d);
        let bus = short_bdf(&d.bdf).to_string();
        let (kind, lines) = if d.is_nvidia_gpu() {
            let ps = pairs_of(&d.bdf);
            let direct: Vec<&&GdrPair> =
                ps.iter().filter(|p| p.enabled && p.via.is_none()).collect();
            let pxn = ps.iter().filter(|p| p.enabled && p.via.is_some()).count();
            let summary = if ps.is_empty() {
                "no NIC to pair".to_string()
            } else if direct.is_empty() && pxn == 0 {
                if ps.iter().any(|p| !p.undecided.is_empty()) {
                    "GDR undecided".to_string()
                } else {
                    "no GDR".to_string()
                }
            } else {
                let mut s = match direct.first() {
                    Some(p) => format!("GDR {} {}", p.nic, pair_word(p)),
                    None => "GDR".to_string(),
                };
                if direct.len() > 1 {
                    let _ = write!(s, " +{}", direct.len() - 1);
                }
                if pxn > 0 {
                    let _ = write!(s, " +{pxn} PXN");
                }
                s
            };
            (
                Kind::Gpu,
                vec![
                    format!("{} {bus}", gpu_label(&d.bdf)),
                    short_name(&name),
                    link_text(d).unwrap_or_else(|| "link ?".into()),
                    summary,
                ],
            )
        } else if let Some(rs) = ibdevs.get(&d.bdf) {
            let names: Vec<&str> = rs.iter().map(|r| r.name.as_str()).collect();
            let mut ports = Vec::new();
            for r in rs {
                match r.ports.get() {
                    Some(ps) => {
                        for p in ps {
                            let rate = p
                                .rate
                                .get()
                                .map(|r| {
                                    let mut it = r.split_whitespace();
                                    let n = it.next().unwrap_or("?");
                                    let extra = r
                                        .find('(')
                                        .map(|i| r[i + 1..].trim_end_matches(')').to_string())
                                        .unwrap_or_default();
                                    format!("{n}G {extra}").trim().to_string()
                                })
                                .unwrap_or_else(|| "?".into());
                            ports.push(format!(
                                "p{} {} {rate}",
                                p.port,
                                p.state_name().unwrap_or("?")
                            ));
                        }
                    }
                    None => ports.push("ports ?".into()),
                }
            }
            let mut lines = vec![format!("{} {bus}", names.join("+")), short_name(&name)];
            if ports.len() <= 2 {
                lines.extend(ports);
            } else {
                lines.push(format!("{} ports", ports.len()));
            }
            (Kind::Nic, lines)
        } else if bare_nics.contains(d.bdf.as_str()) {
            (
                Kind::Nic,
                vec![
                    format!("NIC {bus}"),
                    short_name(&name),
                    "no rdma device".to_string(),
                ],
            )
        } else if d.is_nvswitch() {
            (
                Kind::NvSwitch,
                vec![format!("NVSwitch {bus}"), short_name(&name)],
            )
        } else if d.is_bridge() {
            let role = if switches.contains(&d.bdf) {
                "switch"
            } else if d.parent.is_none() {
                "root port"
            } else {
                "port"
            };
            (
                if role == "switch" {
                    Kind::Switch
                } else {
                    Kind::Bridge
                },
                vec![format!("{bus} {role}"), short_name(&name)],
            )
        } else {
            (Kind::Device, vec![bus.clone(), short_name(&name)])
        };
        Item {
            id: d.bdf.clone(),
            kind,
            lines,
            edge_label: degraded(d),
            children,
        }
    };

    // Children per drawn device, roots per host bridge, host bridges per socket.
    let mut children: BTreeMap<&str, Vec<&PciDevice>> = BTreeMap::new();
    let mut roots: BTreeMap<&str, Vec<&PciDevice>> = BTreeMap::new();
    for d in pci
        .iter()
        .copied()
        .filter(|d| drawn.contains(d.bdf.as_str()))
    {
        match d.parent.as_deref().filter(|p| drawn.contains(p)) {
            Some(p) => children.entry(p).or_default().push(d),
            None => roots.entry(d.host_bridge.as_str()).or_default().push(d),
        }
    }
    fn build(
        d: &PciDevice,
        children: &BTreeMap<&str, Vec<&PciDevice>>,
        make: &dyn Fn(&PciDevice, Vec<Item>) -> Item,
        depth: usize,
    ) -> Item {
        let kids = if depth > 32 {
            Vec::new()
        } else {
            children
                .get(d.bdf.as_str())
                .map(|v| {
                    v.iter()
                        .map(|c| build(c, children, make, depth + 1))
                        .collect()
                })
                .unwrap_or_default()
        };
        make(d, kids)
    }
    // Socket of a host bridge: the numa_node of its first root device.
    let numa_text = |d: &PciDevice| -> String {
        match d.numa_node.get() {
            Some(-1) => "-1".into(),
            Some(n) => n.to_string(),
            None => "?".into(),
        }
    };
    let mut sockets: BTreeMap<(i64, String), Vec<Item>> = BTreeMap::new();
    let mut cpus: BTreeMap<String, String> = BTreeMap::new();
    for (hb, rs) in &roots {
        let numa = rs
            .first()
            .map(|d| numa_text(d))
            .unwrap_or_else(|| "?".into());
        for d in rs {
            if let Some(c) = d.local_cpulist.get() {
                cpus.entry(numa.clone()).or_insert_with(|| c.clone());
            }
        }
        let kids: Vec<Item> = rs
            .iter()
            .map(|d| build(d, &children, &make_item, 0))
            .collect();
        let hb_name = if hb.is_empty() { "host bridge ?" } else { hb };
        let key = (numa.parse::<i64>().unwrap_or(i64::MAX), numa.clone());
        sockets.entry(key).or_default().push(Item {
            id: format!("hb:{hb}"),
            kind: Kind::HostBridge,
            lines: vec![hb_name.to_string()],
            edge_label: None,
            children: kids,
        });
        pic.titles.insert(
            format!("hb:{hb}"),
            format!("host bridge {hb_name} (NUMA node {numa})"),
        );
    }
    for ((_, numa), hbs) in sockets {
        let id = format!("socket:{numa}");
        let (l1, title) = match numa.as_str() {
            "-1" => (
                "NUMA: none".to_string(),
                "numa_node -1: the kernel has no NUMA information; NCCL sees one CPU for the whole machine".to_string(),
            ),
            "?" => ("NUMA ?".to_string(), "numa_node could not be read".to_string()),
            n => (format!("NUMA node {n}"), format!("socket / NUMA node {n}")),
        };
        let l2 = cpus
            .get(&numa)
            .map(|c| format!("CPUs {c}"))
            .unwrap_or_else(|| "CPUs ?".into());
        pic.titles.insert(id.clone(), format!("{title}; {l2}"));
        pic.scene.sockets.push(Item {
            id,
            kind: Kind::Socket,
            lines: vec![l1, l2],
            edge_label: None,
            children: hbs,
        });
    }

    // Tones, titles and link tones of the PCI boxes.
    for b in &drawn {
        let Some(d) = by_bdf.get(b) else { continue };
        let fs = by_elem.get(*b).map(Vec::as_slice).unwrap_or(&[]);
        if let Some(s) = worst(fs) {
            pic.tones.insert(b.to_string(), s);
        }
        let link: Vec<&Finding> = fs.iter().copied().filter(|f| f.id == "pcie.link").collect();
        if let Some(s) = worst(&link) {
            pic.edge_tones.insert(b.to_string(), s);
        }
        let mut title = format!("{} {}", d.bdf, gdrdoctor_checks::names::device_name(d));
        if let Some(i) = gpu_index.get(b) {
            title = format!("GPU{i} {title}");
        }
        if bare_nics.contains(b) {
            let _ = write!(
                title,
                "\nno RDMA device points at this function ({}): NCCL cannot use it; is mlx5_ib loaded?",
                match node.rdma.get() {
                    Some(_) => "/sys/class/infiniband".to_string(),
                    None => format!(
                        "/sys/class/infiniband: {}",
                        node.rdma.reason().unwrap_or("not readable")
                    ),
                }
            );
        }
        if let Some(rs) = ibdevs.get(*b) {
            for r in rs {
                let _ = write!(
                    title,
                    "\n{} fw {} {}",
                    r.name,
                    r.fw_ver.get().cloned().unwrap_or_else(|| "?".into()),
                    r.hca_type.get().cloned().unwrap_or_default()
                );
                if let Some(ps) = r.ports.get() {
                    for p in ps {
                        let _ = write!(
                            title,
                            "\n  port {}: {} / {}, {}, {}",
                            p.port,
                            p.state.get().cloned().unwrap_or_else(|| "?".into()),
                            p.phys_state.get().cloned().unwrap_or_else(|| "?".into()),
                            p.link_layer.get().cloned().unwrap_or_else(|| "?".into()),
                            p.rate.get().cloned().unwrap_or_else(|| "?".into())
                        );
                    }
                }
            }
        }
        let _ = write!(title, "\nNUMA node {}", numa_text(d));
        if let Some(l) = link_text(d) {
            let _ = write!(title, ", link {l}");
        }
        let bad: Vec<&&Finding> = fs.iter().filter(|f| f.status != Status::Pass).collect();
        for f in &bad {
            let _ = write!(title, "\n{}", finding_line(f));
            if let Some(r) = &f.remediation {
                let _ = write!(title, "\n  fix: {r}");
            }
        }
        let passes = fs.len() - bad.len();
        if passes > 0 {
            let ids: BTreeSet<&str> = fs
                .iter()
                .filter(|f| f.status == Status::Pass)
                .map(|f| f.id.as_str())
                .collect();
            let _ = write!(
                title,
                "\n{passes} passing finding(s): {}",
                ids.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        if d.is_nvidia_gpu() {
            for p in pairs_of(b) {
                let _ = write!(
                    title,
                    "\n{}{}",
                    p.nic,
                    if p.enabled {
                        format!(": GDR ({})", pair_word(p))
                    } else {
                        format!(": no GDR ({})", p.path)
                    }
                );
                if let Some(v) = &p.via {
                    let _ = write!(title, " via {}", gpu_label(v));
                }
            }
        }
        pic.titles.insert(b.to_string(), title);
        if degraded(d).is_some() || pic.edge_tones.contains_key(*b) {
            pic.edge_titles.insert(b.to_string(), link_title(d));
        }
    }

    // Routes.
    for g in &t.gpus {
        let ps = pairs_of(&g.bdf);
        let gname = format!("GPU{} {}", g.index, short_bdf(&g.bdf));
        let has_gdr = ps.iter().any(|p| p.enabled);
        // The why-not line of a GPU without GDR: its nearest placed NIC.
        let nearest = if has_gdr {
            None
        } else {
            ps.iter()
                .filter(|p| ib_to_bdf.contains_key(&p.nic))
                .min_by_key(|p| gdrdoctor_checks::topo::parse_level(&p.path).unwrap_or(u8::MAX))
                .map(|p| p.nic.clone())
        };
        for p in &ps {
            let Some(nb) = ib_to_bdf.get(&p.nic) else {
                continue;
            };
            let id = format!("pair:{}:{}", g.bdf, p.nic);
            let (kind, style, shown, label, via) = if p.enabled {
                match &p.via {
                    Some(v) => (
                        RouteKind::Fabric,
                        RouteStyle::Pxn,
                        false,
                        "PXN".to_string(),
                        Some(v.clone()),
                    ),
                    None => {
                        let style = if super::topo::mark(p) == "*" {
                            RouteStyle::Gdr
                        } else {
                            RouteStyle::Partial
                        };
                        (RouteKind::Tree, style, true, pair_word(p), None)
                    }
                }
            } else {
                let und = !p.undecided.is_empty();
                let style = if und {
                    RouteStyle::Undecided
                } else {
                    RouteStyle::NoGdr
                };
                let what = if und { "undecided" } else { "no GDR" };
                let label = format!("{} {what}: {} {}", gpu_label(&g.bdf), p.nic, p.path);
                (
                    RouteKind::Lane,
                    style,
                    nearest.as_deref() == Some(p.nic.as_str()),
                    label,
                    None,
                )
            };
            pic.titles.insert(id.clone(), pair_title(p, &gname));
            pic.route_styles.insert(id.clone(), style);
            pic.scene.routes.push(Route {
                id,
                from: g.bdf.clone(),
                to: nb.clone(),
                via,
                kind,
                label,
                shown,
                group: g.bdf.clone(),
            });
        }
    }
    // Direct GDR pairs of one NIC and one GPU appear once even when a NIC has several ibdevs.
    let mut seen = BTreeSet::new();
    pic.scene
        .routes
        .retain(|r| seen.insert((r.from.clone(), r.to.clone(), r.kind == RouteKind::Tree)));

    // The NVLink fabric: the GPUs NCCL's rule sees NVLink between (NVML, else assumed from
    // NVSwitches on the PCI bus), plus any GPU a PXN verdict routes through.
    let (_, sys, _) = gdrdoctor_checks::gdr::decision(node);
    let nvl: Vec<String> = t
        .gpus
        .iter()
        .enumerate()
        .filter(|(i, g)| {
            sys.nvlink
                .get(*i)
                .is_some_and(|row| row.contains(&Some(true)))
                || t.pairs.iter().any(|p| {
                    p.enabled
                        && (p.via.as_deref() == Some(&g.bdf) || (p.gpu == g.bdf && p.via.is_some()))
                })
        })
        .map(|(_, g)| g.bdf.clone())
        .collect();
    if !nvl.is_empty() {
        let switches = pci.iter().filter(|d| d.is_nvswitch()).count();
        let links: BTreeSet<usize> = t
            .gpu_pairs
            .iter()
            .map(|p| p.nvlinks())
            .filter(|n| *n > 0)
            .collect();
        let mut label = format!("NVLink between {} GPUs", nvl.len());
        if let Some(n) = links.iter().next_back() {
            let _ = write!(label, ", {n} links per GPU");
        }
        if switches > 0 {
            let _ = write!(label, ", {switches} NVSwitch(es) on the PCI bus");
        }
        if sys.nvlink_source.starts_with("assumed") {
            label.push_str(", assumed (NVML not queried)");
        }
        if t.pairs.iter().any(|p| p.enabled && p.via.is_some()) {
            label.push_str(" (PXN routes run here: hover a GPU)");
        }
        pic.scene.fabric = Some(Fabric {
            label,
            members: nvl,
        });
    }

    // Header: who, the verdict, the rules, then what is wrong with the whole node.
    let on = t.pairs.iter().filter(|p| p.enabled).count();
    let mut header: Vec<(String, Option<Status>)> = vec![(
        format!(
            "gdrdoctor topo: {} ({}), {} GPU(s), {} RDMA device(s)",
            pic.host,
            match node.source {
                gdrdoctor_checks::model::SourceKind::Live => "live".to_string(),
                gdrdoctor_checks::model::SourceKind::Sysroot => "snapshot".to_string(),
                gdrdoctor_checks::model::SourceKind::HostRoot => "host root".to_string(),
                gdrdoctor_checks::model::SourceKind::Evidence => "pasted evidence".to_string(),
            },
            t.gpus.len(),
            t.nics.len()
        ),
        None,
    )];
    if !t.pairs.is_empty() {
        header.push((
            format!(
                "GDR on {on} of {} GPU-NIC pairs; threshold {} ({})",
                t.pairs.len(),
                t.gdr_level,
                t.gdr_level_source
            ),
            None,
        ));
        header.push((format!("rules: {}", t.nccl_rules), None));
    }
    for n in &t.notes {
        header.push((format!("note: {n}"), None));
    }
    node_level.sort_by_key(|f| {
        std::cmp::Reverse(match f.status {
            Status::Fail => 3,
            Status::Error => 2,
            _ => 1,
        })
    });
    let more = node_level.len().saturating_sub(10);
    for f in node_level.iter().take(10) {
        header.push((finding_line(f), Some(f.status)));
    }
    if more > 0 {
        header.push((
            format!("... and {more} more findings about the node: `gdrdoctor check`"),
            None,
        ));
    }
    for (text, tone) in header {
        pic.scene.header.push(svg_layout::cut(&text, HEADER_CHARS));
        pic.header_titles.push(text);
        pic.header_tones.push(tone);
    }

    // Footer: legend and what is not drawn.
    let mut footer: Vec<(String, Option<Swatch>)> = Vec::new();
    if t.gpus.is_empty() || t.nics.is_empty() {
        footer.push((
            format!(
                "{} gpu(s), {} rdma device(s): no gpu-nic pair to draw",
                t.gpus.len(),
                t.nics.len()
            ),
            None,
        ));
    } else {
        footer.push((
            "     GDR on the GPU's own PCIe path (label: NCCL's path type at the common switch)"
                .into(),
            Some(Swatch::Route(RouteStyle::Gdr)),
        ));
        if pic.route_styles.values().any(|s| *s == RouteStyle::Partial) {
            footer.push((
                "     GDR in one direction only, or undecided in one (hover the line)".into(),
                Some(Swatch::Route(RouteStyle::Partial)),
            ));
        }
        if pic.route_styles.values().any(|s| *s == RouteStyle::Pxn) {
            footer.push((
                "     GDR through an NVLink peer (PXN): hover a GPU to see its routes".into(),
                Some(Swatch::Route(RouteStyle::Pxn)),
            ));
        }
        if pic.route_styles.values().any(|s| *s == RouteStyle::NoGdr) {
            footer.push(("     no GDR: the GPU's nearest NIC; hover the line for why, hover a GPU for every pair".into(), Some(Swatch::Route(RouteStyle::NoGdr))));
        }
        if pic
            .route_styles
            .values()
            .any(|s| *s == RouteStyle::Undecided)
        {
            footer.push((
                "     undecided: an input NCCL uses is not known here (hover the line)".into(),
                Some(Swatch::Route(RouteStyle::Undecided)),
            ));
        }
    }
    for s in [Status::Warn, Status::Fail, Status::Error] {
        if pic
            .tones
            .values()
            .chain(pic.edge_tones.values())
            .any(|t| *t == s)
            || pic.header_tones.contains(&Some(s))
        {
            footer.push((
                format!(
                    "     {s}: a finding about that element (hover it for the finding and the fix)"
                ),
                Some(Swatch::Tone(s)),
            ));
        }
    }
    if !unplaced.is_empty() {
        footer.push((
            format!("not drawn: {} (PCI location unknown)", unplaced.join(", ")),
            None,
        ));
    }
    if not_drawn > 0 {
        footer.push((format!("not drawn: {not_drawn} other PCI function(s) (no GPU, RDMA NIC or NVSwitch below them)"), None));
    }
    for (text, sw) in footer {
        pic.scene.footer.push(svg_layout::cut(&text, HEADER_CHARS));
        pic.footer_swatches.push(sw);
    }
    pic
}

fn n(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

fn path_d(pts: &[(f64, f64)]) -> String {
    let mut d = String::new();
    for (i, (x, y)) in pts.iter().enumerate() {
        let _ = write!(d, "{}{} {}", if i == 0 { "M" } else { " L" }, n(*x), n(*y));
    }
    d
}

fn text_el(o: &mut String, t: &Text, class: &str) {
    // Labels on lines sit on a white ground, so that a line crossing them does not hide them.
    if matches!(class, "routelabel" | "anc" | "edgelabel" | "fabriclabel") {
        let _ = write!(
            o,
            "<rect class=\"labelbg\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" fill-opacity=\"0.9\"/>",
            n(t.rect.x - 1.0),
            n(t.rect.y + 1.0),
            n(t.rect.w + 2.0),
            n(t.rect.h - 1.0)
        );
    }
    let _ = write!(
        o,
        "<text class=\"{class}\" x=\"{}\" y=\"{}\"{} xml:space=\"preserve\">{}</text>",
        n(t.x),
        n(t.y),
        if t.size != svg_layout::FONT {
            format!(" font-size=\"{}\"", n(t.size))
        } else {
            String::new()
        },
        text(&t.text)
    );
}

fn tone_class(s: Option<&Status>) -> &'static str {
    match s {
        Some(Status::Warn) => " warn",
        Some(Status::Fail) => " fail",
        Some(Status::Error) => " error",
        _ => "",
    }
}

const STYLE: &str = "\
.bg{fill:#ffffff}\
text{fill:#1d2330}\
.hdr{fill:#1d2330}.hdr.warn{fill:#9a5b00}.hdr.fail{fill:#b42318}.hdr.error{fill:#6b2fa3}\
.socket>rect.container{fill:#f3f5f9;stroke:#9aa5b8;stroke-width:1}\
.item>rect.box{fill:#ffffff;stroke:#6b7689;stroke-width:1}\
.socket>rect.box{fill:#dfe5ee}\
.hostbridge>rect.box{fill:#f7f7f7}\
.bridge>rect.box,.switch>rect.box{fill:#eef1f5}\
.gpu>rect.box{fill:#e6f2e4}\
.nic>rect.box{fill:#e3edf8}\
.nvswitch>rect.box{fill:#efe6f5}\
.item.warn>rect.box{fill:#fff1d6;stroke:#d98b00;stroke-width:3}\
.item.fail>rect.box{fill:#fde3e1;stroke:#d92d20;stroke-width:3}\
.item.error>rect.box{fill:#f1e6fa;stroke:#7f3fbf;stroke-width:3}\
.edge path{fill:none;stroke:#8a94a6;stroke-width:1.5}\
.edge.warn path{stroke:#d98b00;stroke-width:4}.edge.fail path{stroke:#d92d20;stroke-width:4}.edge.error path{stroke:#7f3fbf;stroke-width:4}\
.edge text{fill:#9a5b00}\
.route path{fill:none;stroke-linejoin:round}\
.route path.hit{stroke:transparent;stroke-width:9}\
.route.gdr path.line{stroke:#16a34a;stroke-width:2.5}\
.route.partial path.line{stroke:#16a34a;stroke-dasharray:8 3 2 3}\
.route.pxn path.line{stroke:#0e7490;stroke-width:2.5;stroke-dasharray:2 3}\
.route.nogdr path.line{stroke:#d92d20;stroke-width:1.6;stroke-dasharray:6 4}\
.route.undecided path.line{stroke:#7a8494;stroke-width:1.6;stroke-dasharray:6 4}\
.route.nogdr text{fill:#b42318}.route.undecided text{fill:#525b6b}\
.anc{fill:#15803d;font-weight:bold}\
.fabric path{fill:none;stroke:#0e7490;stroke-width:3}\
.fabric text{fill:#0e7490}\
.hover{visibility:hidden}.gpu:hover .hover{visibility:visible}\
.gpu:hover>rect.box{stroke:#0e7490;stroke-width:3}\
";

/// SVG text of a laid-out picture. `interactive`: include the routes revealed by hovering a
/// GPU (the PNG, a static image, leaves them out).
pub fn render(pic: &Picture, l: &Layout, interactive: bool) -> String {
    let mut o = String::new();
    let (w, h) = (n(l.width), n(l.height));
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
font-family=\"DejaVu Sans Mono, Liberation Mono, Menlo, Consolas, monospace\" font-size=\"{}\" \
data-generator=\"gdrdoctor topo\">",
        n(svg_layout::FONT)
    );
    let _ = writeln!(o, "<title>gdrdoctor topo: {}</title>", text(&pic.host));
    let _ = writeln!(o, "<style>{STYLE}</style>");
    let _ = writeln!(
        o,
        "<rect class=\"bg\" x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\"/>"
    );
    // Header.
    let _ = writeln!(o, "<g class=\"header\">");
    for (i, t) in l.header.iter().enumerate() {
        let tone = tone_class(pic.header_tones.get(i).and_then(|x| x.as_ref()));
        let full = pic.header_titles.get(i).map(String::as_str).unwrap_or("");
        let _ = write!(
            o,
            "<g class=\"hdrline{tone}\"><title>{}</title>",
            text(full)
        );
        text_el(&mut o, t, &format!("hdr{tone}"));
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Socket containers.
    let _ = writeln!(o, "<g class=\"containers\">");
    for it in l.items.iter().filter(|i| i.container.is_some()) {
        if let Some(c) = it.container {
            let _ = writeln!(
                o,
                "<g class=\"socket-area\" data-id=\"{}\"><rect class=\"container\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"8\" fill=\"#f3f5f9\" stroke=\"#9aa5b8\"/></g>",
                attr(&it.id),
                n(c.x),
                n(c.y),
                n(c.w),
                n(c.h)
            );
        }
    }
    let _ = writeln!(o, "</g>");
    // Edges.
    let _ = writeln!(o, "<g class=\"edges\">");
    for e in &l.edges {
        let tone = tone_class(pic.edge_tones.get(&e.child));
        let _ = write!(
            o,
            "<g class=\"edge{tone}\" data-child=\"{}\">",
            attr(&e.child)
        );
        if let Some(t) = pic.edge_titles.get(&e.child) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let _ = write!(o, "<path d=\"{}\"/>", path_d(&e.points));
        if let Some(t) = &e.label {
            text_el(&mut o, t, "edgelabel");
        }
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Static routes and labels.
    let route_el = |o: &mut String, r: &svg_layout::PlacedRoute, hover: bool| {
        let style = pic
            .route_styles
            .get(&r.id)
            .copied()
            .unwrap_or(RouteStyle::Gdr);
        let _ = write!(
            o,
            "<g class=\"route {}{}\" data-id=\"{}\">",
            style.class(),
            if hover { " hover" } else { "" },
            attr(&r.id)
        );
        if let Some(t) = pic.titles.get(&r.id) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let d = path_d(&r.points);
        if interactive {
            // A wide invisible stroke, so that the hover text is easy to reach.
            let _ = write!(o, "<path class=\"hit\" d=\"{d}\"/>");
        }
        let _ = write!(o, "<path class=\"line\" d=\"{d}\"/>");
        if let Some(t) = &r.label {
            text_el(o, t, "routelabel");
        }
        let _ = writeln!(o, "</g>");
    };
    // Fabric.
    if let Some(f) = &l.fabric {
        let _ = write!(
            o,
            "<g class=\"fabric\"><title>{}</title>",
            text(&f.label.text)
        );
        let _ = write!(o, "<path d=\"{}\"/>", path_d(&f.bar));
        for s in &f.stubs {
            let _ = write!(o, "<path d=\"{}\"/>", path_d(s));
        }
        text_el(&mut o, &f.label, "fabriclabel");
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "<g class=\"routes\">");
    for r in l.routes.iter().filter(|r| r.shown) {
        route_el(&mut o, r, false);
    }
    for (anc, t) in &l.ancestor_labels {
        let _ = write!(o, "<g class=\"anclabel\" data-id=\"{}\">", attr(anc));
        text_el(&mut o, t, "anc");
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Boxes (GPUs last, so that their hover routes are drawn on top of everything).
    let _ = writeln!(o, "<g class=\"items\">");
    let mut order: Vec<&svg_layout::PlacedItem> = l.items.iter().collect();
    order.sort_by_key(|i| i.kind == Kind::Gpu);
    for it in order {
        let tone = tone_class(pic.tones.get(&it.id));
        let _ = write!(
            o,
            "<g class=\"item {}{tone}\" data-id=\"{}\">",
            it.kind.as_str(),
            attr(&it.id)
        );
        if let Some(t) = pic.titles.get(&it.id) {
            let _ = write!(o, "<title>{}</title>", text(t));
        }
        let r = it.rect;
        let _ = write!(
            o,
            "<rect class=\"box\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"3\"/>",
            n(r.x),
            n(r.y),
            n(r.w),
            n(r.h)
        );
        for (i, t) in it.lines.iter().enumerate() {
            text_el(&mut o, t, if i == 0 { "name" } else { "line" });
        }
        if interactive && it.kind == Kind::Gpu {
            for hr in l.routes.iter().filter(|x| !x.shown && x.group == it.id) {
                route_el(&mut o, hr, true);
            }
        }
        let _ = writeln!(o, "</g>");
    }
    let _ = writeln!(o, "</g>");
    // Footer with legend swatches.
    let _ = writeln!(o, "<g class=\"footer\">");
    for (i, t) in l.footer.iter().enumerate() {
        match pic.footer_swatches.get(i).copied().flatten() {
            Some(Swatch::Route(s)) => {
                let y = t.y - 4.0;
                let _ = write!(
                    o,
                    "<g class=\"route {} legend\"><path class=\"line\" d=\"M{} {} L{} {}\"/></g>",
                    s.class(),
                    n(t.x + 2.0),
                    n(y),
                    n(t.x + 28.0),
                    n(y)
                );
            }
            Some(Swatch::Tone(s)) => {
                let _ = write!(
                    o,
                    "<g class=\"item legend{}\"><rect class=\"box\" x=\"{}\" y=\"{}\" width=\"24\" height=\"10\"/></g>",
                    tone_class(Some(&s)),
                    n(t.x + 3.0),
                    n(t.y - 10.0)
                );
            }
            None => {}
        }
        text_el(&mut o, t, "foot");
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "</g>");
    let _ = writeln!(o, "</svg>");
    o
}

/// The node's picture as SVG (interactive: hover a GPU for its PXN and no-GDR routes).
pub fn svg(node: &Node, findings: &[Finding]) -> String {
    let t = super::topo::build(node);
    let pic = scene(node, &t, findings);
    let l = svg_layout::layout(&pic.scene);
    render(&pic, &l, true)
}

/// The static SVG the PNG is rasterised from: without the routes revealed by hovering, and
/// without the room they take.
pub fn svg_static(node: &Node, findings: &[Finding]) -> String {
    let t = super::topo::build(node);
    let mut pic = scene(node, &t, findings);
    pic.scene.routes.retain(|r| r.shown);
    let l = svg_layout::layout(&pic.scene);
    render(&pic, &l, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_people_know() {
        assert_eq!(
            short_name("NVIDIA GH100 [H200 SXM 141GB]"),
            "H200 SXM 141GB"
        );
        assert_eq!(
            short_name("Mellanox MT2910 Family [ConnectX-7]"),
            "ConnectX-7"
        );
        assert_eq!(short_name("8086:352a"), "8086:352a");
        assert_eq!(short_name("odd ] name ["), "odd ] name [");
        assert_eq!(short_bdf("0000:18:00.0"), "18:00.0");
        assert_eq!(short_bdf("0001:18:00.0"), "0001:18:00.0");
    }

    #[test]
    fn escaping() {
        assert_eq!(n(1.25), "1.3");
        assert_eq!(n(2.0), "2");
        assert_eq!(path_d(&[(0.0, 1.0), (2.5, 3.0)]), "M0 1 L2.5 3");
    }
}
