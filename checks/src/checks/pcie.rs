//! `pcie.*`: the PCIe path between GPUs and NICs: ACS redirection, degraded links, MaxReadReq,
//! ATS, and BARs (ground truth §2.4 T08, §2.6 A01-A04, §2.3 G04).

use crate::gdr::Context;
use crate::model::{Fact, Node, PciDevice};
use crate::names;
use crate::parse;
use crate::pci::config::{self, ConfigSpace};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

const ACS_RR: u16 = 0x04;
const ACS_CR: u16 = 0x08;
const ACS_EC: u16 = 0x20;

fn acs_bits(ctl: u16) -> Vec<&'static str> {
    let mut v = Vec::new();
    for (bit, name) in [
        (0x01, "SrcValid"),
        (0x02, "TransBlk"),
        (0x04, "ReqRedir"),
        (0x08, "CmpltRedir"),
        (0x10, "UpstreamFwd"),
        (0x20, "EgressCtrl"),
        (0x40, "DirectTrans"),
    ] {
        if ctl & bit != 0 {
            v.push(name);
        }
    }
    v
}

/// Why config space cannot answer, or `None` when it can (`need` bytes).
fn config_gap(d: &PciDevice, need: usize) -> Option<String> {
    match &d.config {
        Fact::Absent { reason, source } => Some(format!("{source}: {reason}")),
        Fact::Known { value, source } if value.len() < need => {
            Some(if value.len() <= 64 {
                format!("{source}: only {} bytes readable: needs root to read config space beyond 64 bytes", value.len())
            } else {
                format!(
                    "{source}: {} bytes readable, extended config space (4096) needed",
                    value.len()
                )
            })
        }
        Fact::Known { .. } => None,
    }
}

pub fn acs_redirect(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.acs-redirect";
    let cx = Context::new(node);
    if cx.gpus.is_empty() || cx.nics.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no gpu-nic pair on this node",
        )];
    }
    // Every bridge that carries a peer-to-peer transfer of a pair NCCL would use GDR on.
    let mut bridges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut eligible = 0;
    for g in &cx.gpus {
        for (nic, ep) in &cx.nics {
            let Some(n) = ep else { continue };
            let p = crate::topo::path(g, n);
            if (p.nccl as u8) > cx.level.value {
                continue;
            }
            eligible += 1;
            for b in p.p2p_bridges {
                bridges
                    .entry(b)
                    .or_default()
                    .push(format!("{}|{}", g.bdf, nic.name));
            }
        }
    }
    if eligible == 0 {
        return vec![Finding::new(ID, Status::Skip, "node", format!("no gpu-nic pair is within NCCL_NET_GDR_LEVEL {}: acs on their paths does not decide gdr", cx.level.name))];
    }
    if bridges.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Pass,
            "node",
            "no pcie bridge between the gpus and nics that nccl pairs",
        )];
    }
    let mut out = Vec::new();
    for (bdf, pairs) in bridges {
        let Some(d) = cx.index.get(&bdf) else {
            continue;
        };
        let src = format!("{}/config", d.sysfs_path);
        let pairs_txt = if pairs.len() > 4 {
            format!("{} and {} more", pairs[..4].join(", "), pairs.len() - 4)
        } else {
            pairs.join(", ")
        };
        if let Some(gap) = config_gap(d, 4096) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &bdf,
                    "cannot read the acs control register",
                )
                .evidence(src, gap),
            );
            continue;
        }
        let Some(cs) = d.decoded() else {
            out.push(Finding::new(
                ID,
                Status::Error,
                &bdf,
                "config space not readable",
            ));
            continue;
        };
        let Some(acs) = cs.acs else {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &bdf,
                    "no acs capability: peer-to-peer is routed directly",
                )
                .evidence(src, "no ACS extended capability"),
            );
            continue;
        };
        let at = format!("{src}@0x{:x}", acs.offset + 6);
        let bad = acs.ctl & (ACS_RR | ACS_CR | ACS_EC);
        if bad == 0 {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &bdf,
                    format!(
                        "acs does not redirect peer-to-peer (ACSCtl 0x{:04x})",
                        acs.ctl
                    ),
                )
                .evidence(
                    at,
                    format!("ACSCtl 0x{:04x} {}", acs.ctl, acs_bits(acs.ctl).join(" ")),
                ),
            );
            continue;
        }
        let names = acs_bits(bad).join(" ");
        out.push(
            Finding::new(
                ID,
                Status::Fail,
                &bdf,
                format!("{} has acs {names} set: gpu-nic peer-to-peer through it is redirected to the root complex (slow, or IBV_WC_LOC_PROT_ERR / hangs with the iommu on)", names::device_name(d)),
            )
            .expected(at, format!("ACSCtl 0x{:04x} ({})", acs.ctl, acs_bits(acs.ctl).iter().map(|b| format!("{b}+")).collect::<Vec<_>>().join(" ")), "ReqRedir- CmpltRedir- EgressCtrl-")
            .evidence("affected gpu|nic pairs", pairs_txt)
            .fix(format!(
                "now (until reboot): `setpci -s {bdf} ECAP_ACS+0x6.w=0000`; for good: kernel parameter `pci=disable_acs_redir={bdf}` (clears ReqRedir/CmpltRedir/EgressCtrl; list every port separated by `;`), or disable ACS for the switch ports in the BIOS; with the IOMMU on, disabling ACS merges IOMMU groups (use passthrough, `iommu=pt`)"
            )),
        );
    }
    out
}

/// Devices whose upstream link we judge: NICs, GPUs, and switch upstream ports on their paths.
/// Downstream and root ports report the link below them, which the device below already covers.
fn is_upstream_port(d: &PciDevice, cs: Option<&ConfigSpace>, depth: usize) -> bool {
    match cs.and_then(|c| c.pcie.as_ref()) {
        Some(p) => p.device_type == config::PCIE_TYPE_UPSTREAM,
        // Without config space: bridges alternate root port, upstream, downstream, upstream...
        None => d.is_bridge() && depth % 2 == 1,
    }
}

pub fn link(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.link";
    let cx = Context::new(node);
    let mut subjects: Vec<(String, &'static str)> = Vec::new();
    for g in &cx.gpus {
        subjects.push((g.bdf.clone(), "gpu"));
    }
    for (nic, _) in &cx.nics {
        if let Some(Some(b)) = nic.pci_bdf.get() {
            if !subjects.iter().any(|(s, _)| s == b) {
                subjects.push((b.clone(), "nic"));
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
            if is_upstream_port(bd, bd.decoded().as_ref(), depth)
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
        let (Some(cur_s), Some(max_s), Some(cur_w), Some(max_w)) = (cur_s, max_s, cur_w, max_w)
        else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &bdf,
                    format!("cannot read the link of this {kind}"),
                )
                .evidence(
                    format!("{}/current_link_speed", d.sysfs_path),
                    d.cur_link_speed.describe(|s| s.clone()),
                ),
            );
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
        let src = format!("{}/current_link_{{speed,width}}", d.sysfs_path);
        let name = names::device_name(d);
        let slow = cur_s + 0.01 < exp_s;
        let narrow = cur_w < exp_w;
        let f = if narrow {
            Finding::new(ID, Status::Warn, &bdf, format!("{kind} link runs at x{cur_w} of x{exp_w}: half or less of its bandwidth ({name})"))
                .expected(src, observed, expected)
                .fix("reseat the card or cable; check the slot's electrical width in the board manual (`dmidecode -t slot`) and the BIOS bifurcation setting; `lspci -vv -s <bdf>` shows LnkSta (downgraded)")
        } else if slow && kind == "gpu" {
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

pub fn mrrs(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.mrrs";
    let cx = Context::new(node);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (nic, _) in &cx.nics {
        let Some(Some(bdf)) = nic.pci_bdf.get() else {
            continue;
        };
        if seen.contains(bdf) {
            continue;
        }
        seen.push(bdf.clone());
        let Some(d) = cx.index.get(bdf) else { continue };
        let src = format!("{}/config", d.sysfs_path);
        if let Some(gap) = config_gap(d, 256) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!("cannot read the pcie device control of {}", nic.name),
                )
                .evidence(src, gap),
            );
            continue;
        }
        let Some(p) = d.decoded().and_then(|c| c.pcie) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!(
                        "{} has no pci express capability in its config space",
                        nic.name
                    ),
                )
                .evidence(src, "no PCIe capability"),
            );
            continue;
        };
        let at = format!("{src}@0x{:x}", p.offset + 8);
        let obs = format!(
            "MaxReadReq {} bytes, MaxPayload {} bytes, RlxdOrd{}",
            p.mrrs,
            p.mps,
            if p.relaxed_ordering { "+" } else { "-" }
        );
        if p.mrrs < 4096 {
            out.push(Finding::new(ID, Status::Warn, bdf, format!("{} reads at most {} bytes per pcie request: gpudirect rdma reads from gpu memory lose bandwidth", nic.name, p.mrrs))
                .expected(at, obs, "MaxReadReq 4096")
                .fix(format!("`setpci -s {bdf} CAP_EXP+8.w` shows DevCtl; set bits 14:12 to 5 (4096): `setpci -s {bdf} CAP_EXP+8.w=5000:7000` (until reboot); for good, the BIOS \"PCIe Max Read Request\" setting or a udev rule running that setpci at boot; NVIDIA's multi-node performance guide recommends 4096")));
        } else {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    bdf,
                    format!("{} MaxReadReq {} bytes", nic.name, p.mrrs),
                )
                .evidence(at, obs),
            );
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            ID,
            Status::Skip,
            "node",
            "no rdma nic on the pci bus",
        ));
    }
    out
}

pub fn ats(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.ats";
    let cx = Context::new(node);
    let (mode, _) = crate::derive::iommu_mode(node);
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for (nic, ep) in &cx.nics {
        let Some(Some(bdf)) = nic.pci_bdf.get() else {
            continue;
        };
        if seen.contains(bdf) {
            continue;
        }
        seen.push(bdf.clone());
        let Some(d) = cx.index.get(bdf) else { continue };
        let src = format!("{}/config", d.sysfs_path);
        if let Some(gap) = config_gap(d, 4096) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!("cannot read the ats capability of {}", nic.name),
                )
                .evidence(src, gap),
            );
            continue;
        }
        let cs = d.decoded();
        let ats = cs.as_ref().and_then(|c| c.ats.clone());
        let Some(a) = ats.filter(|a| a.enabled) else {
            out.push(Finding::new(ID, Status::Pass, bdf, format!("ats off on {}: dma addresses are translated by the iommu (if any), not cached by the nic", nic.name))
                .evidence(src, "ATS capability absent or disabled"));
            continue;
        };
        let at = format!("{src}@0x{:x}", a.offset + 6);
        if mode == crate::derive::IommuMode::Unknown {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!(
                        "ats enabled on {}, and the iommu mode is unknown (see iommu.mode)",
                        nic.name
                    ),
                )
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl)),
            );
            continue;
        }
        if mode != crate::derive::IommuMode::Translated {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    bdf,
                    format!(
                        "ats enabled on {} while the iommu does not translate ({}): no effect",
                        nic.name,
                        mode.as_str()
                    ),
                )
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl)),
            );
            continue;
        }
        // Translated IOMMU + ATS: translated requests may bypass the root complex only where
        // the switch ports set ACS Direct Translated P2P alongside any redirect.
        let mut blockers = Vec::new();
        if let Some(n) = ep {
            for g in &cx.gpus {
                let p = crate::topo::path(g, n);
                if (p.nccl as u8) > cx.level.value {
                    continue;
                }
                for b in p.p2p_bridges {
                    if let Some(acs) = cx
                        .index
                        .get(&b)
                        .and_then(|bd| bd.decoded())
                        .and_then(|c| c.acs)
                    {
                        if acs.ctl & (ACS_RR | ACS_CR) != 0
                            && !acs.direct_trans
                            && !blockers.contains(&b)
                        {
                            blockers.push(b);
                        }
                    }
                }
            }
        }
        if blockers.is_empty() {
            out.push(Finding::new(ID, Status::Pass, bdf, format!("ats enabled on {} with a translating iommu; no switch port on its gpu paths redirects translated requests", nic.name))
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl)));
        } else {
            out.push(Finding::new(ID, Status::Warn, bdf, format!("ats enabled on {}, but {} redirect peer-to-peer without DirectTrans: translated requests still go through the root complex", nic.name, blockers.join(", ")))
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl))
                .fix("for the ATS-in-VM recipe, keep ReqRedir/CmpltRedir but set ACS DirectTrans on those ports (follow the NVIDIA AI Enterprise / hypervisor guide); on bare metal prefer `iommu=pt` and clear ACS redirect (see pcie.acs-redirect)"));
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            ID,
            Status::Skip,
            "node",
            "no rdma nic on the pci bus",
        ));
    }
    out
}

/// BARs as the kernel placed them (sysfs `resource`) against the BAR registers in config space.
pub fn bars(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.bars";
    let cx = Context::new(node);
    let mut devs: Vec<&PciDevice> = cx
        .gpus
        .iter()
        .filter_map(|g| cx.index.get(&g.bdf))
        .collect();
    for (nic, _) in &cx.nics {
        if let Some(Some(b)) = nic.pci_bdf.get() {
            if let Some(d) = cx.index.get(b) {
                if !devs.iter().any(|x| x.bdf == d.bdf) {
                    devs.push(d);
                }
            }
        }
    }
    if devs.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no gpu or nic on the pci bus",
        )];
    }
    let mut out = Vec::new();
    for d in devs {
        let rsrc = format!("{}/resource", d.sysfs_path);
        let (Some(res), Some(cs)) = (d.resources.get(), d.decoded()) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot read the bars (sysfs resource or config space missing)",
                )
                .evidence(rsrc, d.resources.describe(|_| "read".into()))
                .evidence(
                    format!("{}/config", d.sysfs_path),
                    d.config.describe(|b| format!("{} bytes", b.len())),
                ),
            );
            continue;
        };
        if d.is_virtfn {
            out.push(Finding::new(ID, Status::Pass, &d.bdf, "sr-iov virtual function: its bars are set by the physical function's sr-iov capability (the vf's bar registers read 0 by design)")
                .evidence(format!("{}/physfn", d.sysfs_path), "present"));
            continue;
        }
        if cs.vendor_id == Some(0xffff) {
            out.push(Finding::new(ID, Status::Fail, &d.bdf, "config space reads all ones: the device does not answer (fell off the bus?)")
                .evidence(format!("{}/config", d.sysfs_path), "vendor 0xffff")
                .fix("check `dmesg` for `Xid 79` / `GPU has fallen off the bus` or AER errors; reboot or reseat"));
            continue;
        }
        let mut mismatches = Vec::new();
        let mut shown = Vec::new();
        for b in cs.bars.iter().filter(|b| !b.io) {
            let Some(r) = res.iter().find(|r| r.index == b.index as usize) else {
                continue;
            };
            if !r.is_set() {
                continue;
            }
            shown.push(format!(
                "BAR{} 0x{:x} {} {}{}",
                b.index,
                r.start,
                parse::human_bytes(r.size()),
                if r.mem64() { "64-bit" } else { "32-bit" },
                if r.prefetchable() {
                    " prefetchable"
                } else {
                    ""
                }
            ));
            if b.address != r.start || b.mem64 != r.mem64() || b.prefetchable != r.prefetchable() {
                mismatches.push(format!(
                    "BAR{}: sysfs 0x{:x}{}{}, config 0x{:x}{}{}",
                    b.index,
                    r.start,
                    if r.mem64() { " 64-bit" } else { "" },
                    if r.prefetchable() { " pref" } else { "" },
                    b.address,
                    if b.mem64 { " 64-bit" } else { "" },
                    if b.prefetchable { " pref" } else { "" }
                ));
            }
        }
        if mismatches.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &d.bdf,
                    format!("{} bars agree between sysfs and config space", shown.len()),
                )
                .evidence(rsrc, shown.join("; ")),
            );
        } else {
            out.push(Finding::new(ID, Status::Warn, &d.bdf, format!("{} bar(s) differ between sysfs and config space: the device was reset or reprogrammed behind the kernel", mismatches.len()))
                .expected(rsrc, mismatches.join("; "), "identical addresses and flags")
                .fix("a device reset (FLR, hot reset, firmware update) cleared or moved its BARs; rebind the driver or reboot; `lspci -vv -s <bdf>` shows `Region N: ... [virtual]` for BARs the device no longer decodes"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    fn set_link(n: &mut Node, bdf: &str, cur: (&str, u32), max: (&str, u32)) {
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == bdf) {
                d.cur_link_speed = known(cur.0.into());
                d.cur_link_width = known(cur.1);
                d.max_link_speed = known(max.0.into());
                d.max_link_width = known(max.1);
            }
        }
    }

    #[test]
    fn a_narrow_nic_link_warns_an_idle_gpu_speed_passes_unknown_is_an_error() {
        let mut n = switch_pair();
        set_link(
            &mut n,
            "0000:18:00.0",
            ("2.5 GT/s PCIe", 16),
            ("32.0 GT/s PCIe", 16),
        );
        set_link(
            &mut n,
            "0000:19:00.0",
            ("32.0 GT/s PCIe", 8),
            ("32.0 GT/s PCIe", 16),
        );
        let f = link(&n);
        let by = |b: &str| f.iter().find(|f| f.subject == b).map(|f| f.status);
        assert_eq!(
            by("0000:18:00.0"),
            Some(Status::Pass),
            "idle gpus lower their speed"
        );
        assert_eq!(by("0000:19:00.0"), Some(Status::Warn), "x8 of x16");
        // The switch's upstream port has no link facts: said so, not passed.
        assert_eq!(by("0000:16:00.0"), Some(Status::Error));
    }

    #[test]
    fn acs_and_bars_without_config_space_are_never_a_pass() {
        let n = switch_pair();
        for f in acs_redirect(&n).into_iter().chain(bars(&n)) {
            assert_ne!(f.status, Status::Pass, "{f:?}");
        }
        let lonely = with(empty_node(), vec![bridge(ROOT_PORT, 0)], vec![]);
        assert_eq!(acs_redirect(&lonely)[0].status, Status::Skip);
    }
}
