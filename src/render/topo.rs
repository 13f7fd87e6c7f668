//! `gdrdoctor topo`: the GPU x NIC matrix, like `nvidia-smi topo -m` but with NCCL's path type
//! and the GDR verdict per pair.

use super::grid::{self, Column, Fit, Grid, Text};
use gdrdoctor_checks::gdr;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::nccl::rule;
use gdrdoctor_checks::report::GdrPair;
use gdrdoctor_checks::topo;
use serde::Serialize;

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopoGpu {
    pub index: usize,
    #[schemars(regex(pattern = gdrdoctor_checks::report::BDF_PATTERN))]
    pub bdf: String,
    #[schemars(extend("x-required" = true))]
    pub numa_node: Option<i32>,
    #[schemars(extend("x-required" = true))]
    pub cpulist: Option<String>,
    /// The PCIe switches above the GPU, nearest first.
    #[schemars(inner(regex(pattern = gdrdoctor_checks::report::BDF_PATTERN)))]
    pub switches: Vec<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopoNic {
    pub ibdev: String,
    #[schemars(extend("x-required" = true))]
    pub bdf: Option<String>,
    /// NCCL's key: ports and VFs of one NIC fold into one PCI device.
    #[schemars(extend("x-required" = true))]
    pub nccl_bdf: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub numa_node: Option<i32>,
    /// Any port ACTIVE; null when the ports are unknown.
    #[schemars(extend("x-required" = true))]
    pub active: Option<bool>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Topo {
    pub schema: &'static str,
    /// NCCL_NET_GDR_LEVEL in effect, and where it came from.
    pub gdr_level: String,
    pub gdr_level_source: String,
    pub gpus: Vec<TopoGpu>,
    pub nics: Vec<TopoNic>,
    pub pairs: Vec<GdrPair>,
    /// Every GPU pair: NVLink, PCIe path, NVML P2P status and CUDA peer access.
    pub gpu_pairs: Vec<gdrdoctor_checks::gdr::p2p::GpuPair>,
    /// Whose rules the verdicts follow: `NCCL 2.28.9 rules (libnccl.so.2 2.28.9 at ...)`.
    #[schemars(extend("x-optional" = true))]
    pub nccl_rules: String,
    /// Node-wide remarks from the environment (PXN disabled, ignored values, ...).
    #[schemars(extend("x-optional" = true))]
    pub notes: Vec<String>,
    /// NCCL's P2P decision per GPU pair under NCCL_P2P_LEVEL / NCCL_P2P_DISABLE.
    #[schemars(extend("x-optional" = true))]
    pub gpu_p2p: Vec<TopoP2p>,
}

/// The published JSON Schema of `topo --format json` (docs/schema/gdrdoctor.topo.v1.schema.json),
/// derived from [`Topo`].
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<Topo>(
        "gdrdoctor.topo/v1",
        "`gdrdoctor topo --format json`: the GPU x NIC matrix of a node (live or --sysroot) with NCCL's GDR verdict per pair. `topo --nvidia-smi FILE` writes gdrdoctor.topo-paste/v1.",
        true,
    )
}

/// NCCL's P2P answer for one GPU pair.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct TopoP2p {
    pub a: String,
    pub b: String,
    /// NVL over NVLink, else the PCIe path; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub path: Option<String>,
    /// `None`: not known.
    #[schemars(extend("x-required" = true))]
    pub p2p: Option<bool>,
    #[schemars(extend("x-optional" = true))]
    pub reason: String,
}

fn p2p_of(sys: &rule::System, d: &rule::Decision) -> Vec<TopoP2p> {
    d.p2p
        .iter()
        .map(|p| TopoP2p {
            a: sys.gpus[p.a].id.clone(),
            b: sys.gpus[p.b].id.clone(),
            path: p.path.map(|k| k.as_str().to_string()),
            p2p: p.p2p,
            reason: p.reason.clone(),
        })
        .collect()
}

pub fn build(node: &Node) -> Topo {
    let (cx, sys, d) = gdr::decision(node);
    let gpus = cx
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| TopoGpu {
            index: i,
            bdf: g.bdf.clone(),
            numa_node: g.numa_node,
            cpulist: cx
                .index
                .get(&g.bdf)
                .and_then(|d| d.local_cpulist.get().cloned()),
            switches: g.switches.clone(),
        })
        .collect();
    let nics = cx
        .nics
        .iter()
        .map(|(n, ep)| TopoNic {
            ibdev: n.name.clone(),
            bdf: n.pci_bdf.get().cloned().flatten(),
            nccl_bdf: ep.as_ref().map(|e| e.nccl_bdf.clone()),
            numa_node: ep.as_ref().and_then(|e| e.numa_node),
            active: n
                .ports
                .get()
                .map(|p| p.iter().any(|p| p.state_name() == Some("ACTIVE"))),
        })
        .collect();
    Topo {
        schema: "gdrdoctor.topo/v1",
        gdr_level: d.threshold.clone(),
        gdr_level_source: d.threshold_source.clone(),
        gpus,
        nics,
        pairs: d
            .verdicts
            .iter()
            .map(|v| gdr::to_pair(&sys, &d, v))
            .collect(),
        gpu_pairs: gdrdoctor_checks::gdr::p2p::pairs(node),
        nccl_rules: d.rules.describe(),
        notes: d.notes.clone(),
        gpu_p2p: p2p_of(&sys, &d),
    }
}

/// The cell mark of a pair: `*` GDR, `+` GDR with sends through an NVLink peer (PXN), `r` GDR
/// for receives only, `?` undecided, nothing for no GDR.
pub fn mark(p: &GdrPair) -> &'static str {
    match (p.enabled, p.via.is_some(), p.send, p.receive) {
        (true, true, _, _) => "+",
        (true, false, Some(true), Some(true)) => "*",
        (true, false, Some(false), _) => "r",
        (true, false, _, Some(false)) => "s",
        (true, false, _, _) => "?",
        (false, _, _, _) if !p.undecided.is_empty() => "?",
        _ => "",
    }
}

fn legend(o: &mut String, max: usize, pairs: &[GdrPair], level: &str, source: &str, rules: &str) {
    let on = pairs.iter().filter(|p| p.enabled).count();
    say(
        o,
        max,
        &format!(
            "* = NCCL uses GPUDirect RDMA for this pair ({on} of {} pairs); threshold {} ({})",
            pairs.len(),
            clean(level),
            clean(source)
        ),
    );
    if pairs.iter().any(|p| p.via.is_some() && p.enabled) {
        say(
            o,
            max,
            "+ = GDR with sends through an NVLink peer GPU (PXN): the peer's proxy posts to the NIC",
        );
    }
    if pairs.iter().any(|p| mark(p) == "s") {
        say(o, max, "s = GDR for sends only");
    }
    if pairs.iter().any(|p| mark(p) == "r") {
        say(
            o,
            max,
            "r = GDR for receives only: the read gate keeps sends staged through host memory (NCCL_NET_GDR_READ=1 lifts it)",
        );
    }
    if pairs.iter().any(|p| mark(p) == "?") {
        say(
            o,
            max,
            "? = undecided (for one direction or both): an input NCCL uses is not known here",
        );
    }
    say(o, max, &format!("Rules: {}", clean(rules)));
}

/// One line of prose under the matrices, wrapped at spaces to `max` columns (continuation lines
/// indented by two).
fn say(o: &mut String, max: usize, text: &str) {
    o.push_str(&super::wrap::hanging("", 0, 2, text, max));
}

/// Node text for the terminal ([`super::sanitize::text`]).
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    super::sanitize::text(s)
}

/// The row label's address: `18:00.0` for `0000:18:00.0`; anything that is not a PCI address
/// (a damaged sysfs name, short or not ASCII) as it is, escaped.
fn short_bdf(bdf: &str) -> std::borrow::Cow<'_, str> {
    if gdrdoctor_checks::parse::is_bdf(bdf) {
        std::borrow::Cow::Borrowed(bdf.get(5..).unwrap_or(bdf))
    } else {
        clean(bdf)
    }
}

/// The GPU x GPU block: `NV<n>` or the PCIe path, `!` where peer access is missing.
fn render_gpu_pairs(t: &Topo, width: usize, o: &mut String) {
    let max = width.saturating_sub(1);
    if t.gpus.len() < 2 {
        return;
    }
    // Indexed once: one lookup per cell, not a scan of every pair.
    let by_pair: std::collections::HashMap<(&str, &str), &gdrdoctor_checks::gdr::p2p::GpuPair> = t
        .gpu_pairs
        .iter()
        .rev()
        .flat_map(|p| {
            [
                ((p.a.as_str(), p.b.as_str()), p),
                ((p.b.as_str(), p.a.as_str()), p),
            ]
        })
        .collect();
    let cell = |a: &str, b: &str| -> String {
        if a == b {
            return "X".into();
        }
        match by_pair.get(&(a, b)) {
            Some(p) => {
                let no_peer = p.cuda_both() == Some(false)
                    || (p.cuda_both().is_none()
                        && (p.status("read").is_some_and(|s| s != "ok")
                            || p.status("write").is_some_and(|s| s != "ok")));
                format!("{}{}", p.cell(), if no_peer { "!" } else { "" })
            }
            None => "?".into(),
        }
    };
    o.push('\n');
    let mut columns = vec![Column::new("", Fit::Keep)];
    columns.extend(
        t.gpus
            .iter()
            .map(|g| Column::new(&format!("GPU{}", g.index), Fit::Keep)),
    );
    let rows: Vec<Vec<Text>> = t
        .gpus
        .iter()
        .map(|a| {
            let mut row: Vec<Text> = vec![format!("GPU{} {}", a.index, short_bdf(&a.bdf)).into()];
            row.extend(t.gpus.iter().map(|b| Text::from(cell(&a.bdf, &b.bdf))));
            row
        })
        .collect();
    o.push_str(&matrix(columns, &rows, width));
    o.push('\n');
    say(
        o,
        max,
        "GPU pairs: NV<n> = n NVLinks (direct or through NVSwitch), else the PCIe path; ! = no peer access",
    );
    let blocked = t
        .gpu_pairs
        .iter()
        .filter(|p| p.cuda_both() == Some(false))
        .count();
    if blocked > 0 {
        say(
            o,
            max,
            &format!(
                "{blocked} of {} GPU pairs have no peer access: see `gdrdoctor check --only gpu.p2p`",
                t.gpu_pairs.len()
            ),
        );
    }
}

/// The text at the fixed width of a pipe ([`crate::sys::term::DEFAULT_WIDTH`]).
pub fn render_text(t: &Topo) -> String {
    render_text_width(t, crate::sys::term::DEFAULT_WIDTH)
}

/// A matrix: the row labels, then one column per head, every cell kept whole. Two spaces
/// between columns, one where two do not fit the width.
fn matrix(columns: Vec<Column>, rows: &[Vec<Text>], width: usize) -> String {
    let g = Grid::new(columns).indent(0);
    grid::fit(&g, rows, width).unwrap_or_else(|| grid::force(&g.gap(1), rows, width))
}

/// The GPU x NIC matrix, the legend, the notes and the GPU x GPU block, in `width` columns.
pub fn render_text_width(t: &Topo, width: usize) -> String {
    let max = width.saturating_sub(1);
    let mut o = String::new();
    if t.gpus.is_empty() || t.nics.is_empty() {
        say(
            &mut o,
            max,
            &format!(
                "{} gpu(s), {} rdma device(s): no gpu-nic pair to show",
                t.gpus.len(),
                t.nics.len()
            ),
        );
        render_gpu_pairs(t, width, &mut o);
        return trim_lines(&o);
    }
    let names: Vec<std::borrow::Cow<'_, str>> = t.nics.iter().map(|n| clean(&n.ibdev)).collect();
    // Indexed once: every lookup below is per GPU x NIC cell (262,144 on a 512 x 512 node).
    let mut by_pair: std::collections::HashMap<(&str, &str), &GdrPair> =
        std::collections::HashMap::with_capacity(t.pairs.len());
    let mut by_gpu: std::collections::HashMap<&str, Vec<&GdrPair>> =
        std::collections::HashMap::with_capacity(t.gpus.len());
    for p in &t.pairs {
        by_pair.entry((p.gpu.as_str(), p.nic.as_str())).or_insert(p);
        by_gpu.entry(p.gpu.as_str()).or_default().push(p);
    }
    let no_pairs: Vec<&GdrPair> = Vec::new();
    let pairs_of = |g: &str| by_gpu.get(g).unwrap_or(&no_pairs);
    let mut rows: Vec<Vec<Text>> = Vec::with_capacity(t.gpus.len() + 3);
    for g in &t.gpus {
        let mut row: Vec<Text> = vec![format!("GPU{} {}", g.index, short_bdf(&g.bdf)).into()];
        for n in &t.nics {
            let cell = match by_pair.get(&(g.bdf.as_str(), n.ibdev.as_str())) {
                Some(p) => clean(&format!(
                    "{}{}",
                    p.nvidia_smi.as_deref().unwrap_or(&p.path),
                    mark(p)
                ))
                .into_owned(),
                None => "?".into(),
            };
            row.push(cell.into());
        }
        row.push(
            g.numa_node
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into())
                .into(),
        );
        row.push(
            clean(g.cpulist.as_deref().unwrap_or("?"))
                .into_owned()
                .into(),
        );
        rows.push(row);
    }
    // A blank row, then the NICs' NUMA nodes and port states under their columns.
    rows.push(Vec::new());
    let mut numa: Vec<Text> = vec!["NIC NUMA".into()];
    numa.extend(t.nics.iter().map(|n| {
        Text::from(
            n.numa_node
                .map(|x| x.to_string())
                .unwrap_or_else(|| "?".into()),
        )
    }));
    rows.push(numa);
    let mut port: Vec<Text> = vec!["NIC port".into()];
    port.extend(t.nics.iter().map(|n| {
        Text::from(match n.active {
            Some(true) => "active",
            Some(false) => "down",
            None => "?",
        })
    }));
    rows.push(port);
    let head = |nic_names: &[String], cpu: &str| {
        let mut c = vec![Column::new("", Fit::Keep)];
        c.extend(nic_names.iter().map(|n| Column::new(n, Fit::Keep)));
        c.push(Column::new("NUMA", Fit::Keep));
        c.push(Column::new(cpu, Fit::Words));
        c
    };
    let full: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let g = Grid::new(head(&full, "CPU affinity")).indent(0);
    match grid::fit(&g, &rows, width) {
        Some(table) => o.push_str(&table),
        None => {
            // Too wide for the terminal: the NICs go by number, as in `nvidia-smi topo -m`,
            // with a legend of their names.
            let short: Vec<String> = (0..names.len()).map(|i| format!("NIC{i}")).collect();
            o.push_str(&matrix(head(&short, "CPUs"), &rows, width));
            o.push('\n');
            let legend: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("NIC{i}={n}"))
                .collect();
            say(&mut o, max, &format!("NICs: {}", legend.join(" ")));
        }
    }
    o.push('\n');
    legend(
        &mut o,
        max,
        &t.pairs,
        &t.gdr_level,
        &t.gdr_level_source,
        &t.nccl_rules,
    );
    for n in &t.notes {
        say(&mut o, max, &format!("Note: {}", clean(n)));
    }
    say(
        &mut o,
        max,
        "Path names as nvidia-smi topo -m: PIX one PCIe switch, PXB several switches, PHB through the host bridge, NODE across host bridges of one NUMA node (NCCL calls it PHB), SYS across sockets.",
    );
    // NIC folding: several ibdevs on one NCCL NIC.
    let mut keys: Vec<(&str, Vec<&str>)> = Vec::new();
    for n in &t.nics {
        if let Some(k) = &n.nccl_bdf {
            match keys.iter_mut().find(|(x, _)| x == k) {
                Some((_, v)) => v.push(&n.ibdev),
                None => keys.push((k, vec![&n.ibdev])),
            }
        }
    }
    for (k, v) in keys.iter().filter(|(_, v)| v.len() > 1) {
        say(
            &mut o,
            max,
            &format!(
                "NCCL folds {} into one NIC ({}: ports or VFs of one device)",
                clean(&v.join(", ")),
                clean(k)
            ),
        );
    }
    // Why not, for each GPU without GDR.
    for g in &t.gpus {
        let pairs = pairs_of(&g.bdf);
        if pairs.iter().any(|p| p.enabled) {
            continue;
        }
        if let Some(best) = pairs
            .iter()
            .min_by_key(|p| topo::parse_level(&p.path).unwrap_or(u8::MAX))
        {
            let undecided = pairs.iter().find(|p| !p.undecided.is_empty());
            match undecided {
                Some(u) => {
                    say(
                        &mut o,
                        max,
                        &format!(
                            "GPU{} is undecided: {}",
                            g.index,
                            clean(&u.undecided.join("; "))
                        ),
                    );
                }
                None => {
                    say(
                        &mut o,
                        max,
                        &format!(
                            "GPU{} has no GDR: nearest {} ({}): {}",
                            g.index,
                            clean(&best.nic),
                            clean(&best.path),
                            clean(&best.reasons.join("; "))
                        ),
                    );
                }
            }
        }
    }
    // PXN and the read gate, per GPU that has them.
    let index_of: std::collections::HashMap<&str, usize> = t
        .gpus
        .iter()
        .rev()
        .map(|x| (x.bdf.as_str(), x.index))
        .collect();
    for g in &t.gpus {
        let pairs = pairs_of(&g.bdf);
        if pairs
            .iter()
            .any(|p| p.enabled && p.via.is_none() && p.send != Some(false))
        {
            continue;
        }
        if let Some(p) = pairs.iter().find(|p| p.enabled && p.via.is_some()) {
            let peer = p
                .via
                .as_deref()
                .and_then(|v| index_of.get(v))
                .map(|i| format!("GPU{i}"))
                .unwrap_or_else(|| clean(p.via.as_deref().unwrap_or_default()).into_owned());
            say(
&mut o,
max,
&format!("GPU{} has GDR through {peer} via PXN: its own path to {} is {}; NCCL sends through {peer} over NVLink",
                g.index,
                clean(&p.nic),
                clean(&p.path)
            ),
);
        } else if let Some(p) = pairs.iter().find(|p| p.enabled && p.send == Some(false)) {
            say(
                &mut o,
                max,
                &format!(
                    "GPU{} has GDR for receives only ({}): {}",
                    g.index,
                    clean(&p.nic),
                    clean(&p.reasons.join("; "))
                ),
            );
        }
    }
    render_gpu_pairs(t, width, &mut o);
    trim_lines(&o)
}

fn trim_lines(s: &str) -> String {
    s.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}
