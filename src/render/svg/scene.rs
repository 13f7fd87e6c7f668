//! The first step of a picture: the node, its topology verdicts and the findings of the check
//! registry become a [`Picture`], in steps: what is drawn ([`Parts::gather`]), the boxes and
//! their tree ([`Parts::sockets`]), their tones and hover texts ([`Parts::box_titles`]), the
//! GPU-NIC routes ([`Parts::routes`]), the NVLink fabric ([`Parts::fabric`]), the header and the
//! footer.

use super::labels::{
    degraded, finding_line, link_text, link_title, numa_text, pair_title, pair_word, short_bdf,
    short_name, worst,
};
use super::{Picture, RouteStyle, Swatch, HEADER_CHARS};
use crate::render::svg_layout::{self, Fabric, Item, Kind, Route, RouteKind};
use crate::render::topo::Topo;
use gdrdoctor_checks::model::{Node, PciDevice, RdmaDevice};
use gdrdoctor_checks::report::{Finding, GdrPair, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

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
    let parts = Parts::gather(node, t, findings);
    parts.sockets(&mut pic);
    parts.box_titles(&mut pic);
    parts.routes(&mut pic);
    parts.fabric(&mut pic);
    parts.header(&mut pic);
    parts.footer(&mut pic);
    pic
}

/// What the steps share: the devices drawn and what is known about each.
struct Parts<'a> {
    node: &'a Node,
    t: &'a Topo,
    pci: Vec<&'a PciDevice>,
    by_bdf: BTreeMap<&'a str, &'a PciDevice>,
    /// RDMA devices per PCI function.
    ibdevs: BTreeMap<String, Vec<&'a RdmaDevice>>,
    /// RDMA devices whose PCI function is not on the bus.
    unplaced: Vec<String>,
    ib_to_bdf: BTreeMap<String, String>,
    gpu_index: BTreeMap<&'a str, usize>,
    /// The bridges that are ports of a PCIe switch.
    switches: BTreeSet<String>,
    /// Mellanox network functions without an RDMA device.
    bare_nics: BTreeSet<&'a str>,
    /// The endpoints drawn and every bridge above them.
    drawn: BTreeSet<&'a str>,
    not_drawn: usize,
    /// Findings by element (PCI address), and the non-passing ones about the whole node.
    by_elem: BTreeMap<String, Vec<&'a Finding>>,
    node_level: Vec<&'a Finding>,
}

impl<'a> Parts<'a> {
    fn gather(node: &'a Node, t: &'a Topo, findings: &'a [Finding]) -> Parts<'a> {
        let pci: Vec<&PciDevice> = node
            .pci
            .get()
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let by_bdf: BTreeMap<&str, &PciDevice> = pci.iter().map(|d| (d.bdf.as_str(), *d)).collect();
        // RDMA devices per PCI function.
        let mut ibdevs: BTreeMap<String, Vec<&RdmaDevice>> = BTreeMap::new();
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
        let mut switches: BTreeSet<String> = t
            .gpus
            .iter()
            .flat_map(|g| g.switches.iter().cloned())
            .collect();
        {
            let idx = gdrdoctor_checks::topo::PciIndex::new(node);
            for b in ibdevs
                .keys()
                .map(String::as_str)
                .chain(bare_nics.iter().copied())
            {
                if let Some(e) = idx.endpoint(b, true) {
                    switches.extend(e.switches);
                }
            }
        }
        // Endpoints to draw, and every bridge above them.
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
        Parts {
            node,
            t,
            pci,
            by_bdf,
            ibdevs,
            unplaced,
            ib_to_bdf,
            gpu_index,
            switches,
            bare_nics,
            drawn,
            not_drawn,
            by_elem,
            node_level,
        }
    }

    /// The GPU-NIC pairs of a GPU.
    fn pairs_of(&self, g: &str) -> Vec<&'a GdrPair> {
        self.t.pairs.iter().filter(|p| p.gpu == g).collect()
    }

    fn gpu_label(&self, bdf: &str) -> String {
        self.gpu_index
            .get(bdf)
            .map(|i| format!("GPU{i}"))
            .unwrap_or_else(|| "GPU".into())
    }

    /// The box of a drawn device, with its children.
    fn item(&self, d: &PciDevice, children: Vec<Item>) -> Item {
        let name = gdrdoctor_checks::names::device_name(d);
        let bus = short_bdf(&d.bdf).to_string();
        let (kind, lines) = if d.is_nvidia_gpu() {
            (
                Kind::Gpu,
                vec![
                    format!("{} {bus}", self.gpu_label(&d.bdf)),
                    short_name(&name),
                    link_text(d).unwrap_or_else(|| "link ?".into()),
                    self.gpu_summary(&d.bdf),
                ],
            )
        } else if let Some(rs) = self.ibdevs.get(&d.bdf) {
            (Kind::Nic, nic_lines(rs, &bus, &name))
        } else if self.bare_nics.contains(d.bdf.as_str()) {
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
            let role = if self.switches.contains(&d.bdf) {
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
    }

    /// A GPU box's last line: its GDR pairs in a few words.
    fn gpu_summary(&self, bdf: &str) -> String {
        let ps = self.pairs_of(bdf);
        let direct: Vec<&&GdrPair> = ps.iter().filter(|p| p.enabled && p.via.is_none()).collect();
        let pxn = ps.iter().filter(|p| p.enabled && p.via.is_some()).count();
        if ps.is_empty() {
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
        }
    }

    /// The device's box and the boxes below it.
    fn build(
        &self,
        d: &PciDevice,
        children: &BTreeMap<&str, Vec<&PciDevice>>,
        depth: usize,
    ) -> Item {
        let kids = if depth > 32 {
            Vec::new()
        } else {
            children
                .get(d.bdf.as_str())
                .map(|v| {
                    v.iter()
                        .map(|c| self.build(c, children, depth + 1))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.item(d, kids)
    }

    /// The tree of boxes: children per drawn device, roots per host bridge, host bridges per
    /// socket.
    fn sockets(&self, pic: &mut Picture) {
        let mut children: BTreeMap<&str, Vec<&PciDevice>> = BTreeMap::new();
        let mut roots: BTreeMap<&str, Vec<&PciDevice>> = BTreeMap::new();
        for d in self
            .pci
            .iter()
            .copied()
            .filter(|d| self.drawn.contains(d.bdf.as_str()))
        {
            match d.parent.as_deref().filter(|p| self.drawn.contains(p)) {
                Some(p) => children.entry(p).or_default().push(d),
                None => roots.entry(d.host_bridge.as_str()).or_default().push(d),
            }
        }
        // Socket of a host bridge: the numa_node of its first root device.
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
            let kids: Vec<Item> = rs.iter().map(|d| self.build(d, &children, 0)).collect();
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
    }

    /// Tones, titles and link tones of the PCI boxes.
    fn box_titles(&self, pic: &mut Picture) {
        for b in &self.drawn {
            let Some(d) = self.by_bdf.get(b) else {
                continue;
            };
            let fs = self.by_elem.get(*b).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(s) = worst(fs) {
                pic.tones.insert(b.to_string(), s);
            }
            let link: Vec<&Finding> = fs.iter().copied().filter(|f| f.id == "pcie.link").collect();
            if let Some(s) = worst(&link) {
                pic.edge_tones.insert(b.to_string(), s);
            }
            let title = self.box_title(b, d, fs);
            pic.titles.insert(b.to_string(), title);
            if degraded(d).is_some() || pic.edge_tones.contains_key(*b) {
                pic.edge_titles.insert(b.to_string(), link_title(d));
            }
        }
    }

    /// The hover text of a PCI box: what it is, its RDMA devices and ports, its findings, and a
    /// GPU's pairs.
    fn box_title(&self, b: &str, d: &PciDevice, fs: &[&Finding]) -> String {
        let mut title = format!("{} {}", d.bdf, gdrdoctor_checks::names::device_name(d));
        if let Some(i) = self.gpu_index.get(b) {
            title = format!("GPU{i} {title}");
        }
        if self.bare_nics.contains(b) {
            let _ = write!(
                title,
                "\nno RDMA device points at this function ({}): NCCL cannot use it; is mlx5_ib loaded?",
                match self.node.rdma.get() {
                    Some(_) => "/sys/class/infiniband".to_string(),
                    None => format!(
                        "/sys/class/infiniband: {}",
                        self.node.rdma.reason().unwrap_or("not readable")
                    ),
                }
            );
        }
        if let Some(rs) = self.ibdevs.get(b) {
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
            for p in self.pairs_of(b) {
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
                    let _ = write!(title, " via {}", self.gpu_label(v));
                }
            }
        }
        title
    }

    /// A route per GPU-NIC pair whose NIC is drawn.
    fn routes(&self, pic: &mut Picture) {
        for g in &self.t.gpus {
            let ps = self.pairs_of(&g.bdf);
            let gname = format!("GPU{} {}", g.index, short_bdf(&g.bdf));
            let has_gdr = ps.iter().any(|p| p.enabled);
            // The why-not line of a GPU without GDR: its nearest placed NIC.
            let nearest = if has_gdr {
                None
            } else {
                ps.iter()
                    .filter(|p| self.ib_to_bdf.contains_key(&p.nic))
                    .min_by_key(|p| gdrdoctor_checks::topo::parse_level(&p.path).unwrap_or(u8::MAX))
                    .map(|p| p.nic.clone())
            };
            for p in &ps {
                let Some(nb) = self.ib_to_bdf.get(&p.nic) else {
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
                            let style = if crate::render::topo::mark(p) == "*" {
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
                    let label = format!("{} {what}: {} {}", self.gpu_label(&g.bdf), p.nic, p.path);
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
        // Direct GDR pairs of one NIC and one GPU appear once even when a NIC has several
        // ibdevs.
        let mut seen = BTreeSet::new();
        pic.scene
            .routes
            .retain(|r| seen.insert((r.from.clone(), r.to.clone(), r.kind == RouteKind::Tree)));
    }

    /// The NVLink fabric: the GPUs NCCL's rule sees NVLink between (NVML, else assumed from
    /// NVSwitches on the PCI bus), plus any GPU a PXN verdict routes through.
    fn fabric(&self, pic: &mut Picture) {
        let t = self.t;
        let (_, sys, _) = gdrdoctor_checks::gdr::decision(self.node);
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
                            && (p.via.as_deref() == Some(&g.bdf)
                                || (p.gpu == g.bdf && p.via.is_some()))
                    })
            })
            .map(|(_, g)| g.bdf.clone())
            .collect();
        if nvl.is_empty() {
            return;
        }
        let switches = self.pci.iter().filter(|d| d.is_nvswitch()).count();
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

    /// Header: who, the verdict, the rules, then what is wrong with the whole node.
    fn header(&self, pic: &mut Picture) {
        let t = self.t;
        let on = t.pairs.iter().filter(|p| p.enabled).count();
        let mut header: Vec<(String, Option<Status>)> = vec![(
            format!(
                "gdrdoctor topo: {} ({}), {} GPU(s), {} RDMA device(s)",
                pic.host,
                match self.node.source {
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
        let mut node_level = self.node_level.clone();
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
    }

    /// Footer: legend and what is not drawn.
    fn footer(&self, pic: &mut Picture) {
        let t = self.t;
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
        if !self.unplaced.is_empty() {
            footer.push((
                format!(
                    "not drawn: {} (PCI location unknown)",
                    self.unplaced.join(", ")
                ),
                None,
            ));
        }
        if self.not_drawn > 0 {
            footer.push((
                format!(
                    "not drawn: {} other PCI function(s) (no GPU, RDMA NIC or NVSwitch below them)",
                    self.not_drawn
                ),
                None,
            ));
        }
        for (text, sw) in footer {
            pic.scene.footer.push(svg_layout::cut(&text, HEADER_CHARS));
            pic.footer_swatches.push(sw);
        }
    }
}

/// A NIC box's lines: its RDMA devices, the model, and its ports (or their count).
fn nic_lines(rs: &[&RdmaDevice], bus: &str, name: &str) -> Vec<String> {
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
    let mut lines = vec![format!("{} {bus}", names.join("+")), short_name(name)];
    if ports.len() <= 2 {
        lines.extend(ports);
    } else {
        lines.push(format!("{} ports", ports.len()));
    }
    lines
}
