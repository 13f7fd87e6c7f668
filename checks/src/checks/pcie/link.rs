//! `pcie.link`: NIC, GPU and switch links run at their full width and speed.

use super::trust::*;
use crate::gdr::Context;
use crate::model::{Fact, Node, PciDevice};
use crate::names;
use crate::parse;
use crate::pci::config::{self, ConfigSpace};
use crate::report::{Finding, Status};

/// Devices whose upstream link we judge: NICs, GPUs, and switch upstream ports on their paths.
/// Downstream and root ports report the link below them, which the device below already covers.
fn is_upstream_port(d: &PciDevice, cs: Option<&ConfigSpace>, depth: usize) -> bool {
    match cs.and_then(|c| c.pcie.as_ref()) {
        Some(p) => p.device_type == config::PCIE_TYPE_UPSTREAM,
        // Without config space: bridges alternate root port, upstream, downstream, upstream...
        None => d.is_bridge() && depth % 2 == 1,
    }
}

/// A link's speed in GT/s, when it can be read.
fn gts(f: &Fact<String>) -> Option<f64> {
    f.get().and_then(|s| parse::link_speed_gts(s))
}

/// The idle downshift of a GPU's link: a GPU lowers its link speed to save power while it has
/// no work, at full width. When the link of GPU `d` (below `parent`, its downstream or root
/// port) runs at full width below the speed both ends can do, this is that speed (GT/s): what
/// the link runs at when the GPU works. `None` when the link is at its capability, narrow, or
/// cannot be read. Only for GPUs: a NIC or a switch link below its capability is a defect.
/// `pcie.link` passes such a link; `policy.pcie` and `policy init` judge it by this speed.
pub fn idle_gpu_downshift(d: &PciDevice, parent: Option<&PciDevice>) -> Option<f64> {
    let (cur_s, max_s) = (gts(&d.cur_link_speed)?, gts(&d.max_link_speed)?);
    let (cur_w, max_w) = (
        d.cur_link_width.get().copied()?,
        d.max_link_width.get().copied()?,
    );
    // What the link can do: the lower of the two ends (NCCL reads both, xml.cc).
    let exp_s = max_s.min(parent.and_then(|p| gts(&p.max_link_speed)).unwrap_or(max_s));
    let exp_w = max_w.min(
        parent
            .and_then(|p| p.max_link_width.get().copied())
            .unwrap_or(max_w),
    );
    (cur_s + 0.01 < exp_s && cur_w >= exp_w).then_some(exp_s)
}

pub fn link(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.link";
    let cx = Context::new(node);
    let mut subjects: Vec<(String, &'static str)> = Vec::new();
    for g in &cx.gpus {
        subjects.push((g.bdf.clone(), "gpu"));
    }
    // A GPU whose place in the tree is not known (a paste without `lspci -tv`) still has its
    // own link: judged against its own capability.
    for g in crate::derive::gpus(node) {
        if !subjects.iter().any(|(s, _)| *s == g.bdf) {
            subjects.push((g.bdf.clone(), "gpu"));
        }
    }
    for f in cx.nic_functions() {
        if !subjects.iter().any(|(s, _)| s == f.bdf) {
            subjects.push((f.bdf.clone(), "nic"));
        }
    }
    // Where the RDMA devices are not known at all (a pasted lspci without ibv_devinfo), an
    // InfiniBand controller or a Mellanox/NVIDIA network function still has its own link.
    if node.rdma.get().is_none() {
        for d in node.pci.get().into_iter().flatten() {
            let class = d.class_code().unwrap_or(0);
            let nic =
                class >> 8 == 0x0207 || (class >> 16 == 0x02 && d.vendor_id.get() == Some(&0x15b3));
            if nic && !d.is_virtfn && !subjects.iter().any(|(s, _)| *s == d.bdf) {
                subjects.push((d.bdf.clone(), "nic"));
            }
        }
    }
    let endpoints: Vec<(String, &'static str)> = subjects.clone();
    for (bdf, _) in &endpoints {
        let Some(d) = cx.index.get(bdf) else { continue };
        let comps: Vec<&str> = d
            .sysfs_path
            .split('/')
            .filter(|c| parse::is_bdf(c))
            .collect();
        for (depth, b) in comps.iter().enumerate().take(comps.len().saturating_sub(1)) {
            let b = b.to_lowercase();
            let Some(bd) = cx.index.get(&b) else { continue };
            if is_upstream_port(bd, readable(bd, 0).ok().as_ref(), depth)
                && !subjects.iter().any(|(s, _)| *s == b)
            {
                subjects.push((b, "switch"));
            }
        }
    }
    if subjects.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no gpu or nic on the pci bus",
        )];
    }
    let mut out = Vec::new();
    for (bdf, kind) in subjects {
        let Some(d) = cx.index.get(&bdf) else {
            continue;
        };
        let parent = d.parent.as_deref().and_then(|p| cx.index.get(p));
        let speed = |f: &Fact<String>| f.get().and_then(|s| parse::link_speed_gts(s));
        let (cur_s, max_s, cur_w, max_w) = (
            speed(&d.cur_link_speed),
            speed(&d.max_link_speed),
            d.cur_link_width.get().copied(),
            d.max_link_width.get().copied(),
        );
        let name = names::device_name(d);
        // A narrow link is told even when a speed cannot be read: the width alone halves the
        // bandwidth (an x8 NIC must not go unreported because its Link Capabilities 2 is 0).
        if let (Some(cw), Some(mw), true) = (cur_w, max_w, cur_s.is_none() || max_s.is_none()) {
            let pw = parent
                .and_then(|p| p.max_link_width.get().copied())
                .unwrap_or(mw);
            let exp_w = mw.min(pw);
            if cw < exp_w {
                let speed_of =
                    |f: &Fact<String>| format!("{} ({})", f.describe(|s| s.clone()), f.source());
                out.push(
                    Finding::new(ID, Status::Warn, &bdf, format!("{kind} link runs at x{cw} of x{exp_w}: half or less of its bandwidth ({name}); its speed cannot be read"))
                        .expected(d.cur_link_width.source(), format!("x{cw}"), format!("x{exp_w}"))
                        .evidence("current speed", speed_of(&d.cur_link_speed))
                        .evidence("maximum speed", speed_of(&d.max_link_speed))
                        .fix("reseat the card or cable; check the slot's electrical width in the board manual (`dmidecode -t slot`) and the BIOS bifurcation setting; `lspci -vv -s <bdf>` shows LnkSta (downgraded)"),
                );
                continue;
            }
        }
        let (Some(cur_s), Some(max_s), Some(cur_w), Some(max_w)) = (cur_s, max_s, cur_w, max_w)
        else {
            // Name each value that cannot be read, with where it was read from (the register,
            // or the sysfs file the register's absence sent the reader to).
            let mut missing = Vec::new();
            let mut f = Finding::new(ID, Status::Error, &bdf, String::new());
            let text = |x: &Fact<String>| x.describe(|s| s.clone());
            let num = |x: &Fact<u32>| x.describe(|w| format!("x{w}"));
            for (what, ok, source, seen) in [
                (
                    "current speed",
                    cur_s.is_some(),
                    d.cur_link_speed.source(),
                    text(&d.cur_link_speed),
                ),
                (
                    "maximum speed",
                    max_s.is_some(),
                    d.max_link_speed.source(),
                    text(&d.max_link_speed),
                ),
                (
                    "current width",
                    cur_w.is_some(),
                    d.cur_link_width.source(),
                    num(&d.cur_link_width),
                ),
                (
                    "maximum width",
                    max_w.is_some(),
                    d.max_link_width.source(),
                    num(&d.max_link_width),
                ),
            ] {
                if !ok {
                    missing.push(what);
                    f = f.evidence(source, seen);
                }
            }
            f.message = format!(
                "cannot read the link of this {kind}: its {} cannot be read",
                missing.join(", ")
            );
            out.push(f);
            continue;
        };
        // What the link can do: the lower of the two ends (NCCL reads both, xml.cc).
        let p_s = parent
            .and_then(|p| speed(&p.max_link_speed))
            .unwrap_or(max_s);
        let p_w = parent
            .and_then(|p| p.max_link_width.get().copied())
            .unwrap_or(max_w);
        let (exp_s, exp_w) = (max_s.min(p_s), max_w.min(p_w));
        let observed = format!("{cur_s} GT/s x{cur_w}");
        let expected = format!("{exp_s} GT/s x{exp_w}");
        let src = match d.link_from_config() {
            Some(reg) => reg.to_string(),
            None => format!("{}/current_link_{{speed,width}}", d.sysfs_path),
        };
        let slow = cur_s + 0.01 < exp_s;
        let narrow = cur_w < exp_w;
        let f = if narrow {
            Finding::new(ID, Status::Warn, &bdf, format!("{kind} link runs at x{cur_w} of x{exp_w}: half or less of its bandwidth ({name})"))
                .expected(src, observed, expected)
                .fix("reseat the card or cable; check the slot's electrical width in the board manual (`dmidecode -t slot`) and the BIOS bifurcation setting; `lspci -vv -s <bdf>` shows LnkSta (downgraded)")
        } else if slow && kind == "gpu" && idle_gpu_downshift(d, parent).is_some() {
            Finding::new(ID, Status::Pass, &bdf, format!("gpu link x{cur_w} at {cur_s} GT/s of {exp_s}: idle gpus lower their link speed to save power; width is full"))
                .evidence(src, observed)
        } else if slow {
            Finding::new(ID, Status::Warn, &bdf, format!("{kind} link trained at {cur_s} GT/s of {exp_s} GT/s ({name})"))
                .expected(src, observed, expected)
                .fix("check the BIOS PCIe speed setting for the slot and reseat; a link that trains low after a reset may need `setpci` retraining or a cold boot; AER errors (`lspci -vv`) point at signal problems")
        } else {
            Finding::new(
                ID,
                Status::Pass,
                &bdf,
                format!("{kind} link at {cur_s} GT/s x{cur_w}, its full capability"),
            )
            .evidence(src, observed)
        };
        out.push(f);
    }
    out
}
