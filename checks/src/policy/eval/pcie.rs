//! `policy.pcie`: PCIe link speed and width per device class (GPU, NIC, switch).

use super::context::{cannot, Context};
use crate::checks::pcie::link::idle_gpu_downshift;
use crate::derive;
use crate::model::{Node, PciDevice};
use crate::parse;
use crate::policy::types::*;
use crate::report::{Finding, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The bridges on the paths from the root to every GPU and RDMA NIC.
fn bridges_above<'a>(node: &'a Node, endpoints: &[String]) -> Vec<&'a PciDevice> {
    let Some(pci) = node.pci.get() else {
        return vec![];
    };
    let by: BTreeMap<&str, &PciDevice> = pci.iter().map(|d| (d.bdf.as_str(), d)).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for e in endpoints {
        let mut cur = by.get(e.as_str()).and_then(|d| d.parent.as_deref());
        let mut hops = 0;
        while let Some(b) = cur {
            hops += 1;
            if hops > 64 {
                break;
            }
            let Some(d) = by.get(b) else { break };
            if d.is_bridge() && seen.insert(d.bdf.clone()) {
                out.push(*d);
            }
            cur = d.parent.as_deref();
        }
    }
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    out
}

/// A link an idle GPU lowered to save power (`pcie.link`'s rule,
/// [`idle_gpu_downshift`](crate::checks::pcie::link::idle_gpu_downshift)): the speed it runs
/// at now, and the speed the link can do, by which the policy judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleLink {
    pub current: f64,
    pub capability: f64,
    /// The idle GPU at the link's end.
    pub gpu: String,
}

/// Whether `d`'s link (a device of `class`, as [`pcie_classes`] names them) is a GPU's idle
/// downshift: the GPU's own link, or the link below the downstream or root port right above
/// that GPU (the same link, seen from its other end: it runs at the same current speed). A
/// switch's uplink, a NIC, or a link that is narrow as well is never one.
pub fn idle_link(node: &Node, class: &str, d: &PciDevice) -> Option<IdleLink> {
    let pci = node.pci.get()?;
    let find = |bdf: &str| pci.iter().find(|x| x.bdf == bdf);
    let gts = |x: &PciDevice| {
        x.cur_link_speed
            .get()
            .and_then(|s| parse::link_speed_gts(s))
    };
    match class {
        "gpu" => {
            let parent = d.parent.as_deref().and_then(find);
            let capability = idle_gpu_downshift(d, parent)?;
            Some(IdleLink {
                current: gts(d)?,
                capability,
                gpu: d.bdf.clone(),
            })
        }
        "switch" => {
            let current = gts(d)?;
            derive::gpus(node).into_iter().find_map(|g| {
                if g.parent.as_deref() != Some(d.bdf.as_str()) {
                    return None;
                }
                let capability = idle_gpu_downshift(g, Some(d))?;
                // Both ends of one link run at one speed: a port slower or faster than the
                // GPU below it is not that GPU's link.
                ((gts(g)? - current).abs() < 0.01).then(|| IdleLink {
                    current,
                    capability,
                    gpu: g.bdf.clone(),
                })
            })
        }
        _ => None,
    }
}

/// GPUs, RDMA NICs and the bridges above them, by class.
pub fn pcie_classes(node: &Node) -> Vec<(&'static str, Vec<&PciDevice>)> {
    let gpus = derive::gpus(node);
    let nic_bdfs: BTreeSet<String> = derive::rdma_pci(node).into_iter().collect();
    let nics: Vec<&PciDevice> = node
        .pci
        .get()
        .map(|p| p.iter().filter(|d| nic_bdfs.contains(&d.bdf)).collect())
        .unwrap_or_default();
    let ends: Vec<String> = gpus
        .iter()
        .chain(nics.iter())
        .map(|d| d.bdf.clone())
        .collect();
    let switches = bridges_above(node, &ends);
    vec![("gpu", gpus), ("nic", nics), ("switch", switches)]
}

pub(super) fn pcie(node: &Node, r: &PcieRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.pcie";
    if node.pci.get().is_none() {
        return vec![cannot(
            ID,
            "list the pci devices",
            node.pci.source(),
            node.pci.reason().unwrap_or("?"),
        )];
    }
    let mut out = Vec::new();
    for (class, devs) in pcie_classes(node) {
        let rule = match class {
            "gpu" => &r.gpu,
            "nic" => &r.nic,
            _ => &r.switch,
        };
        let Some(rule) = rule else { continue };
        if rule.speed_gts.is_none() && rule.width.is_none() {
            continue;
        }
        let mut want = Vec::new();
        if let Some(LinkSpeed(s)) = rule.speed_gts {
            want.push(format!("{s} GT/s"));
        }
        if let Some(LinkWidth(w)) = rule.width {
            want.push(format!("x{w}"));
        }
        let key = format!("pcie.{class}");
        let expected = cx.want(format!("at least {}", want.join(" ")), &key);
        if devs.is_empty() {
            out.push(Finding::new(
                ID,
                Status::Skip,
                "node",
                format!(
                    "no {class} link to compare: this node has no {}",
                    match class {
                        "switch" => "bridge above its gpus and nics",
                        "gpu" => "nvidia gpu",
                        _ => "rdma nic",
                    }
                ),
            ));
            continue;
        }
        let before = out.len();
        let mut errors = 0;
        let mut idles: Vec<String> = Vec::new();
        for d in &devs {
            let src = match d.link_from_config() {
                Some(reg) => reg.to_string(),
                None => format!("/sys/bus/pci/devices/{}/current_link_speed", d.bdf),
            };
            let speed = d
                .cur_link_speed
                .get()
                .and_then(|s| parse::link_speed_gts(s));
            let width = d.cur_link_width.get().copied();
            // An idle GPU's link is judged by the speed it can do (its width as it is).
            let idle = idle_link(node, class, d);
            let judged = idle.as_ref().map(|i| i.capability).or(speed);
            let mut bad = Vec::new();
            let mut unknown = Vec::new();
            if let Some(LinkSpeed(s)) = rule.speed_gts {
                match judged {
                    Some(v) if v + 1e-9 >= s => {}
                    Some(v) => bad.push(format!("{v} GT/s")),
                    None => unknown.push(format!(
                        "speed: {}",
                        d.cur_link_speed.describe(|s| s.clone())
                    )),
                }
            }
            if let Some(LinkWidth(w)) = rule.width {
                match width {
                    Some(v) if v >= w => {}
                    Some(v) => bad.push(format!("x{v}")),
                    None => unknown.push(format!(
                        "width: {}",
                        d.cur_link_width.describe(|w| w.to_string())
                    )),
                }
            }
            let mut observed = format!(
                "{} GT/s x{}",
                speed.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                width.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
            );
            if let Some(i) = &idle {
                idles.push(d.bdf.clone());
                let _ = write!(
                    observed,
                    " (idle gpu {}: its link can do {} GT/s, judged by that)",
                    i.gpu, i.capability
                );
            }
            if !bad.is_empty() {
                out.push(Finding::new(ID, Status::Fail, &d.bdf, format!("{class} link at {observed}, below the policy's {}", want.join(" ")))
                    .expected(&src, &observed, &expected)
                    .fix(format!("the link trained below the site's expectation: `lspci -s {} -vv | grep -E 'LnkCap|LnkSta'` shows it; reseat the device or its riser/cable, check the slot's bifurcation and speed settings in the BIOS, and see `gdrdoctor explain pcie.link`", d.bdf)));
            } else if !unknown.is_empty() {
                errors += 1;
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &d.bdf,
                        format!("cannot read the {class} link: {}", unknown.join(", ")),
                    )
                    .evidence(&src, observed),
                );
            }
        }
        if out.len() == before && errors == 0 {
            let idle_note = if idles.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} at a lower speed now: idle gpus lower their link speed to save power, so their speed is judged by what the link can do)",
                    idles.len()
                )
            };
            let mut fi = Finding::new(
                ID,
                Status::Pass,
                "node",
                format!(
                    "{} {class} link(s) at {} or better, as the policy expects{idle_note}",
                    devs.len(),
                    want.join(" ")
                ),
            )
            .expected(
                "/sys/bus/pci/devices/*/current_link_{speed,width}",
                format!("{} {class} link(s) checked", devs.len()),
                expected,
            );
            if !idles.is_empty() {
                fi = fi.evidence(
                    "pcie.link's rule: a gpu link at full width below its capability is idle",
                    idles.join(" "),
                );
            }
            out.push(fi);
        }
    }
    out
}
