//! `nvidia-smi -q`: driver and CUDA versions, and per GPU its PCI address, product name,
//! persistence mode, PCIe generation and width, BAR1 and framebuffer sizes.
//!
//! The output is `Key : Value` lines nested by indentation (`PCI` > `GPU Link Info` >
//! `PCIe Generation` > `Max : 4`); the parser keeps the path of section names.

use super::block::{status, Block, RawBlock};
use super::clean::Line;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SmiGpu {
    /// `0000:18:00.0` (nvidia-smi prints an 8-digit domain).
    pub bdf: String,
    pub line: usize,
    pub product_name: Option<String>,
    pub persistence_mode: Option<bool>,
    pub pcie_gen_max: Option<u32>,
    pub pcie_gen_current: Option<u32>,
    pub width_max: Option<u32>,
    pub width_current: Option<u32>,
    pub bar1_total_mib: Option<u64>,
    pub fb_total_mib: Option<u64>,
    /// `Remapped Rows > Pending : Yes`.
    pub remap_pending: Option<bool>,
    /// `Remapped Rows > Correctable Error`, `Uncorrectable Error`, `Remapping Failure Occurred`.
    pub remap_correctable: Option<u32>,
    pub remap_uncorrectable: Option<u32>,
    pub remap_failure: Option<bool>,
    /// `Ecc Mode > Current` / `Pending` (`Enabled`/`Disabled`; `N/A`: none).
    pub ecc_current: Option<bool>,
    pub ecc_pending: Option<bool>,
    /// `Fabric > State` / `Status` as printed (`Completed`, `In Progress`, `Not Started`,
    /// `Not Supported`; `N/A` where the driver does not report it, as on A100 systems).
    pub fabric_state: Option<String>,
    pub fabric_status: Option<String>,
    pub clique_id: Option<u32>,
    pub cluster_uuid: Option<String>,
    /// `GPU C2C Mode` (driver 550+): `Enabled` only on a GPU joined to a Grace CPU by
    /// NVLink-C2C; `Disabled` or `N/A` elsewhere (every x86 node).
    pub c2c_mode: Option<String>,
    /// A section of a filtered output (`nvidia-smi -q | grep -A4 -i fabric`) with no
    /// `GPU 0000..` line: the GPU is the n-th nvidia-smi lists, its bus id not pasted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub anonymous: bool,
    /// The sections an anonymous GPU has shown (a second one starts the next GPU).
    #[serde(skip)]
    pub sections: Vec<String>,
    /// Why this section holds more than one GPU's lines (a field printed twice, a `Bus Id`
    /// other than its header's): a `GPU ...` header was lost. Its facts are not used.
    #[serde(skip)]
    pub merged: Option<String>,
    /// The fields seen so far, by their path (to find one printed twice).
    #[serde(skip)]
    seen: std::collections::BTreeSet<String>,
}

/// Sections and keys that appear once per GPU: in a filtered output without `GPU` lines, a
/// second one starts the next GPU.
const PER_GPU: [&str; 7] = [
    // `nvidia-smi -q | grep "Product Name"`: one line per GPU, the model of each.
    "Product Name",
    "Fabric",
    "Persistence Mode",
    "Ecc Mode",
    "ECC Mode",
    "Remapped Rows",
    "BAR1 Memory Usage",
];

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SmiQ {
    pub driver_version: Option<String>,
    /// The `Driver Version` line when its value is cut ([`super::kernel::driver_version_cut`]).
    pub driver_version_cut: Option<String>,
    pub cuda_version: Option<String>,
    pub attached_gpus: Option<u32>,
    pub gpus: Vec<SmiGpu>,
}

/// `00000000:18:00.0` -> `0000:18:00.0`.
pub fn bus_id(s: &str) -> Option<String> {
    let s = s.trim().to_ascii_lowercase();
    let (dom, rest) = s.rsplit_once(':').and_then(|(a, b)| {
        let (d, bus) = a.rsplit_once(':')?;
        Some((d.to_string(), format!("{bus}:{b}")))
    })?;
    let dom = u32::from_str_radix(&dom, 16).ok()?;
    let b = format!("{dom:04x}:{rest}");
    crate::parse::is_bdf(&b).then_some(b)
}

fn first_num<T: std::str::FromStr>(v: &str) -> Option<T> {
    let d: String = v
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    d.parse().ok()
}

fn yes(v: &str) -> Option<bool> {
    match v {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn enabled(v: &str) -> Option<bool> {
    match v {
        "Enabled" => Some(true),
        "Disabled" => Some(false),
        _ => None,
    }
}

/// Fields `nvidia-smi -q` prints once per GPU at a given path (the ones gdrdoctor reads and the
/// GPU's identity).
const ONCE_PER_GPU: [&str; 20] = [
    "Product Name",
    "GPU UUID",
    "Serial Number",
    "Minor Number",
    "VBIOS Version",
    "Bus Id",
    "Persistence Mode",
    "Max",
    "Current",
    "Total",
    "State",
    "Status",
    "CliqueId",
    "ClusterUUID",
    "GPU C2C Mode",
    "Correctable Error",
    "Uncorrectable Error",
    "Pending",
    "Remapping Failure Occurred",
    "Attached GPUs",
];

pub fn parse(lines: &[Line]) -> SmiQ {
    let mut q = SmiQ::default();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for l in lines {
        let indent = l.text.len() - l.text.trim_start().len();
        let t = l.text.trim();
        if t.is_empty() {
            continue;
        }
        // `grep -A`'s separator between matches.
        if t == "--" {
            stack.clear();
            continue;
        }
        if let Some(b) = t.strip_prefix("GPU ").and_then(bus_id) {
            q.gpus.push(SmiGpu {
                bdf: b,
                line: l.no,
                ..SmiGpu::default()
            });
            stack.clear();
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let key = t.split(':').next().unwrap_or("").trim();
        if stack.is_empty() && PER_GPU.contains(&key) && q.gpus.iter().all(|g| g.anonymous) {
            let next = q
                .gpus
                .last()
                .is_none_or(|g| g.sections.iter().any(|x| x == key));
            if next {
                let n = q.gpus.len() + 1;
                q.gpus.push(SmiGpu {
                    bdf: format!("GPU #{n} of nvidia-smi's list (bus id not pasted)"),
                    line: l.no,
                    anonymous: true,
                    ..SmiGpu::default()
                });
            }
            if let Some(g) = q.gpus.last_mut() {
                g.sections.push(key.to_string());
            }
        }
        let Some((k, v)) = t.split_once(':') else {
            stack.push((indent, t.to_string()));
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if v.is_empty() {
            stack.push((indent, k.to_string()));
            continue;
        }
        let path: Vec<&str> = stack.iter().map(|(_, s)| s.as_str()).collect();
        if let Some(g) = q
            .gpus
            .last_mut()
            .filter(|g| !g.anonymous && g.merged.is_none())
        {
            // nvidia-smi prints every field once per GPU: a second one, or the PCI section's
            // bus id of another GPU, means the next GPU's header line is missing.
            let full = format!("{}/{k}", path.join("/"));
            // Only fields nvidia-smi prints once per GPU: lists (processes, supported clocks,
            // MIG devices) repeat theirs.
            let listed = path
                .iter()
                .any(|p| p.contains("Process") || p.contains("Clocks") || p.contains("MIG"));
            if ONCE_PER_GPU.contains(&k) && !listed && !g.seen.insert(full.clone()) {
                g.merged = Some(format!(
                    "`{full}` printed twice in the section of {} (line {}): the next GPU's `GPU ...` header line is missing",
                    g.bdf, l.no
                ));
            } else if k == "Bus Id" && bus_id(v).is_some_and(|b| b != g.bdf) {
                g.merged = Some(format!(
                    "the section of {} shows `Bus Id : {v}` (line {}): another GPU's lines, its `GPU ...` header line missing",
                    g.bdf, l.no
                ));
            }
        }
        match (k, q.gpus.last_mut()) {
            ("Driver Version", _) if path.is_empty() => {
                if super::kernel::driver_version_cut(v) {
                    q.driver_version_cut = Some(v.to_string());
                } else {
                    q.driver_version = Some(v.to_string());
                }
            }
            ("CUDA Version", _) if path.is_empty() => q.cuda_version = Some(v.to_string()),
            ("Attached GPUs", _) => q.attached_gpus = first_num(v),
            (_, Some(g)) => {
                let under = |s: &str| path.contains(&s);
                match k {
                    "Product Name" => g.product_name = Some(v.to_string()),
                    "Persistence Mode" => {
                        g.persistence_mode = match v {
                            "Enabled" => Some(true),
                            "Disabled" => Some(false),
                            _ => None,
                        }
                    }
                    "Max" if under("PCIe Generation") => g.pcie_gen_max = first_num(v),
                    "Current" if under("PCIe Generation") => g.pcie_gen_current = first_num(v),
                    "Max" if under("Link Width") => g.width_max = first_num(v),
                    "Current" if under("Link Width") => g.width_current = first_num(v),
                    "Total" if under("BAR1 Memory Usage") => g.bar1_total_mib = first_num(v),
                    "Total" if under("FB Memory Usage") => g.fb_total_mib = first_num(v),
                    "Current" if under("Ecc Mode") || under("ECC Mode") => {
                        g.ecc_current = enabled(v)
                    }
                    "Pending" if under("Ecc Mode") || under("ECC Mode") => {
                        g.ecc_pending = enabled(v)
                    }
                    "State" if under("Fabric") => g.fabric_state = Some(v.to_string()),
                    "Status" if under("Fabric") && !under("Health") => {
                        g.fabric_status = Some(v.to_string())
                    }
                    "CliqueId" if under("Fabric") => g.clique_id = first_num(v),
                    "ClusterUUID" if under("Fabric") => g.cluster_uuid = Some(v.to_string()),
                    "GPU C2C Mode" => g.c2c_mode = Some(v.to_string()),
                    "Correctable Error" if under("Remapped Rows") => {
                        g.remap_correctable = first_num(v)
                    }
                    "Uncorrectable Error" if under("Remapped Rows") => {
                        g.remap_uncorrectable = first_num(v)
                    }
                    "Remapping Failure Occurred" if under("Remapped Rows") => {
                        g.remap_failure = yes(v)
                    }
                    "Pending" if under("Remapped Rows") => {
                        g.remap_pending = match v {
                            "Yes" => Some(true),
                            "No" => Some(false),
                            _ => None,
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    q
}

/// An `nvidia-smi -q` block.
pub fn block(b: &mut Block, raw: &RawBlock) -> SmiQ {
    let mut q = parse(&raw.lines);
    // A section that holds two GPUs' lines: neither's facts can be trusted (the review of
    // 2026-12-07: one lost header turned a GPU's fabric state `in-progress` into the other's
    // `completed`, a pass, and pinned its x8 link on the wrong GPU).
    for g in q.gpus.iter().filter(|g| g.merged.is_some()) {
        if let Some(why) = &g.merged {
            b.problems.push(format!("{why}: not used"));
        }
    }
    q.gpus.retain(|g| g.merged.is_none());
    let mut notes = Vec::new();
    for g in &q.gpus {
        if let (Some(c), Some(p)) = (g.ecc_current, g.ecc_pending) {
            if c != p {
                notes.push(format!(
                    "{}: ECC {} now, {} after the next reset (pending)",
                    g.bdf,
                    if c { "on" } else { "off" },
                    if p { "on" } else { "off" }
                ));
            }
        }
    }
    let not_c2c: Vec<&SmiGpu> = q
        .gpus
        .iter()
        .filter(|g| g.c2c_mode.as_deref().is_some_and(|m| m != "Enabled"))
        .collect();
    if !not_c2c.is_empty() {
        notes.push(format!(
            "`GPU C2C Mode : {}` on {}: no NVLink-C2C to a Grace CPU (not C2C GPUs)",
            not_c2c[0].c2c_mode.as_deref().unwrap_or_default(),
            if not_c2c.len() == q.gpus.len() {
                "every GPU".to_string()
            } else {
                not_c2c
                    .iter()
                    .map(|g| g.bdf.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    }
    b.summary = format!(
        "driver {}, {} GPU section(s){}",
        q.driver_version.as_deref().unwrap_or("?"),
        q.gpus.len(),
        if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        }
    );
    if let Some(v) = &q.driver_version_cut {
        b.problems.push(format!(
            "`Driver Version : {v}` is cut (NVIDIA's versions read as 535.104.05 or 450.66): unknown, not used"
        ));
    }
    b.status = status(&b.repairs, &b.problems);
    q
}

/// The facts NVML would give, as `nvidia-smi -q` printed them (nvidia-smi is NVML's own
/// client: `Persistence Mode` is `nvmlDeviceGetPersistenceMode`, `BAR1 Memory Usage` is
/// `nvmlDeviceGetBAR1MemoryInfo`, `Fabric` is `nvmlDeviceGetGpuFabricInfo`, ...). What the
/// block does not print stays `None` (unknown), never a default; NVLinks are not in
/// `nvidia-smi -q` at all (`nvidia-smi nvlink -s`), so `nvlinks` is empty and says nothing.
pub fn nvml_facts(q: &SmiQ) -> crate::model::NvmlFacts {
    use crate::model::{GpuFabric, NvmlFacts, NvmlGpu, RemappedRows};
    let cuda = q.cuda_version.as_deref().and_then(|v| {
        let (a, b) = v.split_once('.')?;
        Some(a.trim().parse::<i32>().ok()? * 1000 + b.trim().parse::<i32>().ok()? * 10)
    });
    NvmlFacts {
        driver_version: q.driver_version.clone(),
        cuda_driver_version: cuda,
        nvml_version: None,
        pairs: Vec::new(),
        damaged: Default::default(),
        gpus: q
            .gpus
            .iter()
            .map(|g| {
                let mut errors = Vec::new();
                let fabric = match (g.fabric_state.as_deref(), g.fabric_status.as_deref()) {
                    (Some(st), status) if st != "N/A" => {
                        let state = match st {
                            "Completed" => "completed".to_string(),
                            "In Progress" => "in-progress".to_string(),
                            "Not Started" => "not-started".to_string(),
                            "Not Supported" => "not-supported".to_string(),
                            other => format!("unknown ({other})"),
                        };
                        Some(GpuFabric {
                            state,
                            status: match status {
                                Some("Success") => "success".to_string(),
                                Some(x) => x.to_string(),
                                None => "not shown".to_string(),
                            },
                            clique_id: g.clique_id.unwrap_or(0),
                            cluster_uuid: g.cluster_uuid.clone().unwrap_or_default(),
                            health_mask: None,
                            call: "nvidia-smi -q (Fabric)".into(),
                        })
                    }
                    (Some(_), _) => {
                        errors.push("nvmlDeviceGetGpuFabricInfo: nvidia-smi -q shows `Fabric State : N/A` (the driver does not report it for this GPU)".into());
                        None
                    }
                    (None, _) => {
                        errors.push("nvmlDeviceGetGpuFabricInfo: not in the pasted nvidia-smi -q (`nvidia-smi -q | grep -A4 -i fabric`)".into());
                        None
                    }
                };
                NvmlGpu {
                    bdf: g.bdf.clone(),
                    name: g.product_name.clone(),
                    memory_total: g.fb_total_mib.map(|m| m << 20),
                    bar1_total: g.bar1_total_mib.map(|m| m << 20),
                    pcie_gen_current: g.pcie_gen_current,
                    pcie_gen_max: g.pcie_gen_max,
                    pcie_width_current: g.width_current,
                    pcie_width_max: g.width_max,
                    persistence_mode: g.persistence_mode,
                    ecc_enabled: g.ecc_current,
                    // Only when every field the check reports is shown.
                    remapped_rows: match (
                        g.remap_pending,
                        g.remap_failure,
                        g.remap_correctable,
                        g.remap_uncorrectable,
                    ) {
                        (Some(pending), Some(failure), Some(c), Some(u)) => Some(RemappedRows {
                            correctable: c,
                            uncorrectable: u,
                            pending,
                            failure,
                        }),
                        _ => None,
                    },
                    fabric,
                    errors,
                    ..NvmlGpu::default()
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    #[test]
    fn reads_versions_and_gpu_sections() {
        let t = "==============NVSMI LOG==============\n\nTimestamp                                 : Sat Oct 10 17:02:53 2020\nDriver Version                            : 450.66\nCUDA Version                              : 11.0\n\nAttached GPUs                             : 1\nGPU 00000000:18:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n    Persistence Mode                      : Enabled\n    PCI\n        Bus                               : 0x18\n        GPU Link Info\n            PCIe Generation\n                Max                       : 5\n                Current                   : 5\n            Link Width\n                Max                       : 16x\n                Current                   : 16x\n    FB Memory Usage\n        Total                             : 81559 MiB\n    BAR1 Memory Usage\n        Total                             : 131072 MiB\n    Remapped Rows\n        Pending                           : No\n";
        let q = parse(&clean(t).lines);
        assert_eq!(q.driver_version.as_deref(), Some("450.66"));
        assert_eq!(q.cuda_version.as_deref(), Some("11.0"));
        let g = &q.gpus[0];
        assert_eq!(g.bdf, "0000:18:00.0");
        assert_eq!(g.persistence_mode, Some(true));
        assert_eq!((g.pcie_gen_max, g.width_current), (Some(5), Some(16)));
        assert_eq!(
            (g.fb_total_mib, g.bar1_total_mib),
            (Some(81559), Some(131072))
        );
        assert_eq!(g.remap_pending, Some(false));
    }

    #[test]
    fn a_lost_gpu_header_marks_the_merged_section() {
        let gpu = |b: &str, state: &str| {
            format!("GPU 00000000:{b}:00.0\n    Product Name                  : NVIDIA H100\n    PCI\n        Bus Id                    : 00000000:{b}:00.0\n    Fabric\n        State                     : {state}\n        Status                    : Success\n")
        };
        let t = format!(
            "Driver Version : 580.159.04\n{}{}",
            gpu("18", "In Progress"),
            gpu("2A", "Completed")
        );
        let q = parse(&clean(&t).lines);
        assert_eq!(q.gpus.len(), 2);
        assert!(q.gpus.iter().all(|g| g.merged.is_none()), "{q:?}");
        // The second header lost: the first section shows two Product Names and another Bus Id.
        let lost = t.replace("GPU 00000000:2A:00.0\n", "");
        let q = parse(&clean(&lost).lines);
        assert_eq!(q.gpus.len(), 1);
        assert!(
            q.gpus[0]
                .merged
                .as_deref()
                .is_some_and(|w| w.contains("twice")),
            "{q:?}"
        );
        // A list that repeats its fields (processes) is not a merge.
        let procs = format!("{}    Processes\n        Process ID : 1\n            Name : a\n        Process ID : 2\n            Name : b\n", gpu("18", "Completed"));
        let q = parse(&clean(&procs).lines);
        assert!(q.gpus[0].merged.is_none(), "{q:?}");
    }

    #[test]
    fn bus_ids() {
        assert_eq!(bus_id("00000000:18:00.0").as_deref(), Some("0000:18:00.0"));
        assert_eq!(bus_id("0000:01:00.0").as_deref(), Some("0000:01:00.0"));
        assert_eq!(bus_id("3E3F8E05:00:00.0"), None);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let _ = parse(&clean(&s).lines);
        }

        #[test]
        fn values_come_from_the_text(v in "[0-9]{3}\\.[0-9]{2,3}", name in "[A-Za-z0-9 ]{1,20}") {
            let t = format!("Driver Version : {v}\nGPU 00000000:18:00.0\n    Product Name : {name}\n");
            let q = parse(&clean(&t).lines);
            prop_assert_eq!(q.driver_version.as_deref(), Some(v.as_str()));
            if let Some(n) = q.gpus.first().and_then(|g| g.product_name.clone()) {
                prop_assert!(t.contains(&n));
            }
        }
    }
}
