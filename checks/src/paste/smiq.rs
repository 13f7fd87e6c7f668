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
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SmiQ {
    pub driver_version: Option<String>,
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

pub fn parse(lines: &[Line]) -> SmiQ {
    let mut q = SmiQ::default();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for l in lines {
        let indent = l.text.len() - l.text.trim_start().len();
        let t = l.text.trim();
        if t.is_empty() {
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
        match (k, q.gpus.last_mut()) {
            ("Driver Version", _) if path.is_empty() => q.driver_version = Some(v.to_string()),
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
    let q = parse(&raw.lines);
    b.summary = format!(
        "driver {}, {} GPU section(s)",
        q.driver_version.as_deref().unwrap_or("?"),
        q.gpus.len()
    );
    b.status = status(&b.repairs, &b.problems);
    q
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
