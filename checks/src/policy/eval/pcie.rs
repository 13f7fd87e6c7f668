//! `policy.pcie`: PCIe link speed and width per device class (GPU, NIC, switch).

use super::context::{cannot, Context};
use crate::derive;
use crate::model::{Node, PciDevice};
use crate::parse;
use crate::policy::types::*;
use crate::report::{Finding, Status};
use std::collections::{BTreeMap, BTreeSet};

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
            let mut bad = Vec::new();
            let mut unknown = Vec::new();
            if let Some(LinkSpeed(s)) = rule.speed_gts {
                match speed {
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
            let observed = format!(
                "{} GT/s x{}",
                speed.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                width.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
            );
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
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "{} {class} link(s) at {} or better, as the policy expects",
                        devs.len(),
                        want.join(" ")
                    ),
                )
                .expected(
                    "/sys/bus/pci/devices/*/current_link_{speed,width}",
                    format!("{} {class} link(s) checked", devs.len()),
                    expected,
                ),
            );
        }
    }
    out
}
