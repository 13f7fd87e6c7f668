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

/// Config space that cannot be believed: the device's config space, decoded, does not belong
/// to the device sysfs lists (vendor or device id differ), or reads all-ones (the device does
/// not answer). `None` when the ids agree (or sysfs does not know them).
pub(crate) fn untrusted(d: &PciDevice, cs: &ConfigSpace) -> Option<String> {
    if cs.vendor_id == Some(0xffff) {
        return Some(
            "config space reads all-ones (vendor 0xffff): the device does not answer config reads"
                .to_string(),
        );
    }
    let pairs = [
        ("vendor", d.vendor_id.get(), cs.vendor_id),
        ("device", d.device_id.get(), cs.device_id),
    ];
    for (what, sysfs, config) in pairs {
        if let (Some(s), Some(c)) = (sysfs, config) {
            if *s != c {
                return Some(format!(
                    "config space {what} id 0x{c:04x} differs from sysfs {what} 0x{s:04x}: the config space is not this device's"
                ));
            }
        }
    }
    None
}

/// A bridge whose config space does not fit its place in the tree: its primary bus number
/// (0x18) is not the bus it sits on, or a function right below it is not on its secondary bus
/// (0x19). The ports of one switch have the same vendor and device ids, so [`untrusted`]
/// cannot tell their config spaces apart: a snapshot whose `config` files of an upstream and
/// a downstream port were swapped moved a set ACS redirect off the GPU-NIC path and the node
/// exited 0 (the mutation test, seed 692234378); two downstream ports swapped would move it
/// to another path. The bus numbers tell every such swap, and unlike the port type in the
/// PCIe capability (which Linux corrects for some ports that misstate it, leaving the raw
/// config as it is) they are what the kernel itself enumerated. `None` for a function that is
/// not a bridge, and where the bus numbers were never programmed (secondary bus 0).
fn misplaced(node: &Node, d: &PciDevice) -> Option<String> {
    let raw = d.config.get()?;
    if raw.len() < 0x1b || raw[0x0e] & 0x7f != 1 {
        return None;
    }
    let (pri, sec, sub) = (raw[0x18], raw[0x19], raw[0x1a]);
    if sec == 0 {
        return None;
    }
    let bus_of = |bdf: &str| {
        bdf.split(':')
            .nth(1)
            .and_then(|b| u8::from_str_radix(b, 16).ok())
    };
    let bus = bus_of(&d.bdf)?;
    if pri != bus {
        return Some(format!(
            "config space says primary bus {pri:02x}, but {} is on bus {bus:02x}: the config space is not this device's",
            d.bdf
        ));
    }
    let below = node.pci.get().into_iter().flatten();
    for e in below.filter(|e| e.parent.as_deref() == Some(d.bdf.as_str())) {
        if let Some(cb) = bus_of(&e.bdf).filter(|cb| *cb != sec) {
            return Some(format!(
                "config space says secondary bus {sec:02x} (subordinate {sub:02x}), but {} right below {} is on bus {cb:02x}: the config space is not this device's",
                e.bdf, d.bdf
            ));
        }
    }
    None
}

/// The decoded config space of `d` when `need` bytes of it are readable and it is this
/// device's; otherwise the reason (for the evidence of an `error`).
fn readable(d: &PciDevice, need: usize) -> Result<ConfigSpace, String> {
    if let Some(gap) = config_gap(d, need) {
        return Err(gap);
    }
    let cs = d
        .decoded()
        .ok_or_else(|| format!("{}/config: not readable", d.sysfs_path))?;
    match untrusted(d, &cs) {
        Some(why) => Err(why),
        None => Ok(cs),
    }
}

/// Why the absence of a capability cannot be concluded: the list that holds it could not be
/// walked to its end. `extended`: the capability lives in the extended list (ACS, ATS), which
/// is reached only through a readable standard list (the PCI Express capability).
fn absence_unknown(cs: &ConfigSpace, extended: bool) -> Option<String> {
    cs.chain_breaks
        .iter()
        .find(|b| extended || !b.extended)
        .map(|b| b.to_string())
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
        let mut shown: Vec<String> = Vec::new();
        for g in &cx.gpus {
            for (nic, ep) in &cx.nics {
                let Some(n) = ep else { continue };
                let p = crate::topo::path(g, n);
                if (p.nccl as u8) <= cx.level.value {
                    shown.push(format!(
                        "{}|{} {} below {}",
                        g.bdf,
                        nic.name,
                        p.nccl.as_str(),
                        p.common.as_deref().unwrap_or("no common bridge")
                    ));
                }
            }
        }
        return vec![Finding::new(
            ID,
            Status::Pass,
            "node",
            "no pcie bridge between the gpus and nics that nccl pairs",
        )
        .evidence("/sys/bus/pci/devices (resolved paths)", shown.join("; "))];
    }
    let mut out = Vec::new();
    for (bdf, pairs) in bridges {
        let pairs_txt = if pairs.len() > 4 {
            format!("{} and {} more", pairs[..4].join(", "), pairs.len() - 4)
        } else {
            pairs.join(", ")
        };
        let Some(d) = cx.index.get(&bdf) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &bdf,
                    "a bridge on the gpu-nic path is not listed as a pci device: its acs cannot be read",
                )
                .evidence("/sys/bus/pci/devices", format!("{bdf} missing"))
                .evidence("affected gpu|nic pairs", pairs_txt),
            );
            continue;
        };
        let src = format!("{}/config", d.sysfs_path);
        let cs = match readable(d, 4096) {
            Ok(cs) => cs,
            Err(why) => {
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &bdf,
                        "cannot read the acs control register",
                    )
                    .evidence(src, why),
                );
                continue;
            }
        };
        if let Some(why) = misplaced(node, d) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &bdf,
                    "cannot read the acs control register: the config space does not fit this bridge's place in the tree",
                )
                .evidence(src, why)
                .evidence("affected gpu|nic pairs", pairs_txt)
                .fix(format!("`lspci -vvv -s {bdf}` (Express capability: Downstream Port / Upstream Port / Root Port) against `lspci -tv`; a live node that shows this has a broken switch firmware, a snapshot was damaged: take it again")),
            );
            continue;
        }
        let Some(acs) = cs.acs else {
            if let Some(why) = absence_unknown(&cs, true) {
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &bdf,
                        format!("cannot tell whether {bdf} has acs: its capability list is broken"),
                    )
                    .evidence(src, why)
                    .evidence("affected gpu|nic pairs", pairs_txt)
                    .fix(format!("`lspci -vvv -s {bdf}` shows the capability list as the kernel reads it; a list that loops or points into the header is a firmware or hardware fault (update the switch firmware), or the snapshot is damaged")),
                );
                continue;
            }
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &bdf,
                    "no acs capability: peer-to-peer is routed directly",
                )
                .evidence(
                    src,
                    format!(
                        "no ACS extended capability ({} extended capabilities walked to the end)",
                        cs.ext_capabilities.len()
                    ),
                ),
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
                    d.cur_link_speed.source(),
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
        let src = match d.link_from_config() {
            Some(reg) => reg.to_string(),
            None => format!("{}/current_link_{{speed,width}}", d.sysfs_path),
        };
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
        let cs = match readable(d, 256) {
            Ok(cs) => cs,
            Err(why) => {
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        bdf,
                        format!("cannot read the pcie device control of {}", nic.name),
                    )
                    .evidence(src, why),
                );
                continue;
            }
        };
        let Some(p) = cs.pcie.clone() else {
            let (msg, why) = match absence_unknown(&cs, false) {
                Some(b) => (
                    format!(
                        "cannot find the pci express capability of {}: its capability list is broken",
                        nic.name
                    ),
                    b,
                ),
                None => (
                    format!(
                        "{} has no pci express capability in its config space",
                        nic.name
                    ),
                    "no PCIe capability".to_string(),
                ),
            };
            out.push(Finding::new(ID, Status::Error, bdf, msg).evidence(src, why));
            continue;
        };
        let at = format!("{src}@0x{:x}", p.offset + 8);
        // DevCtl bits 14:12 (Max_Read_Request_Size) and 7:5 (Max_Payload_Size): 110b and 111b
        // are reserved encodings (PCIe Base Specification, Device Control Register).
        let mrrs_code = (p.devctl >> 12) & 0x7;
        let mps_code = (p.devctl >> 5) & 0x7;
        if mrrs_code >= 6 || mps_code >= 6 {
            let field = if mrrs_code >= 6 {
                format!("Max_Read_Request_Size encoding {mrrs_code:03b}b")
            } else {
                format!("Max_Payload_Size encoding {mps_code:03b}b")
            };
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!(
                        "{} device control holds a reserved {field}: the register read is not trustworthy",
                        nic.name
                    ),
                )
                .expected(
                    at,
                    format!("DevCtl 0x{:04x}", p.devctl),
                    "Max_Read_Request_Size and Max_Payload_Size encodings 000b-101b",
                )
                .fix(format!("`lspci -vvv -s {bdf}` shows DevCtl as the kernel reads it; a reserved value there is a device or firmware fault (reset the device or update its firmware), in a snapshot a damaged config file")),
            );
            continue;
        }
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
        let cs = match readable(d, 4096) {
            Ok(cs) => cs,
            Err(why) => {
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        bdf,
                        format!("cannot read the ats capability of {}", nic.name),
                    )
                    .evidence(src, why),
                );
                continue;
            }
        };
        let Some(a) = cs.ats.clone().filter(|a| a.enabled) else {
            if cs.ats.is_none() {
                if let Some(why) = absence_unknown(&cs, true) {
                    out.push(
                        Finding::new(
                            ID,
                            Status::Error,
                            bdf,
                            format!(
                                "cannot tell whether {} has ats: its capability list is broken",
                                nic.name
                            ),
                        )
                        .evidence(src, why),
                    );
                    continue;
                }
            }
            let obs = match &cs.ats {
                Some(a) => format!("ATSCtl 0x{:04x} Enable-", a.ctl),
                None => format!(
                    "no ATS extended capability ({} extended capabilities walked to the end)",
                    cs.ext_capabilities.len()
                ),
            };
            out.push(Finding::new(ID, Status::Pass, bdf, format!("ats off on {}: dma addresses are translated by the iommu (if any), not cached by the nic", nic.name))
                .evidence(src, obs));
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
        // Bridges whose ACS could not be read: a redirect there cannot be ruled out.
        let mut unknown: Vec<String> = Vec::new();
        if let Some(n) = ep {
            for g in &cx.gpus {
                let p = crate::topo::path(g, n);
                if (p.nccl as u8) > cx.level.value {
                    continue;
                }
                for b in p.p2p_bridges {
                    let acs = match cx.index.get(&b).map(|bd| readable(bd, 4096)) {
                        Some(Ok(c)) => match (&c.acs, absence_unknown(&c, true)) {
                            (Some(acs), _) => Some(acs.clone()),
                            (None, None) => None,
                            (None, Some(why)) => {
                                unknown.push(format!("{b}: {why}"));
                                None
                            }
                        },
                        Some(Err(why)) => {
                            unknown.push(format!("{b}: {why}"));
                            None
                        }
                        None => {
                            unknown.push(format!("{b}: not listed as a pci device"));
                            None
                        }
                    };
                    if let Some(acs) = acs {
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
        unknown.sort();
        unknown.dedup();
        if !blockers.is_empty() {
            out.push(Finding::new(ID, Status::Warn, bdf, format!("ats enabled on {}, but {} redirect peer-to-peer without DirectTrans: translated requests still go through the root complex", nic.name, blockers.join(", ")))
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl))
                .fix("for the ATS-in-VM recipe, keep ReqRedir/CmpltRedir but set ACS DirectTrans on those ports (follow the NVIDIA AI Enterprise / hypervisor guide); on bare metal prefer `iommu=pt` and clear ACS redirect (see pcie.acs-redirect)"));
        } else if !unknown.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!(
                        "ats enabled on {} with a translating iommu, and the acs of bridges on its gpu paths cannot be read",
                        nic.name
                    ),
                )
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl))
                .evidence("acs of the bridges", unknown.join("; ")),
            );
        } else {
            out.push(Finding::new(ID, Status::Pass, bdf, format!("ats enabled on {} with a translating iommu; no switch port on its gpu paths redirects translated requests", nic.name))
                .evidence(at, format!("ATSCtl 0x{:04x} Enable+", a.ctl)));
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
        let csrc = format!("{}/config", d.sysfs_path);
        if cs.vendor_id == Some(0xffff) {
            out.push(Finding::new(ID, Status::Fail, &d.bdf, "config space reads all ones: the device does not answer (fell off the bus?)")
                .evidence(csrc, "vendor 0xffff")
                .fix("check `dmesg` for `Xid 79` / `GPU has fallen off the bus` or AER errors; reboot or reseat"));
            continue;
        }
        if let Some(why) = untrusted(d, &cs) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot compare the bars: the config space is not this device's",
                )
                .evidence(csrc, why),
            );
            continue;
        }
        // Type 0 BAR registers end at 0x28, type 1 at 0x18: a shorter read cannot show them.
        if cs.len < 0x40 {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot compare the bars: the config space is cut short",
                )
                .expected(csrc, format!("{} bytes", cs.len), "at least 64 bytes"),
            );
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
        if shown.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "no memory bar to compare: sysfs resource lists none assigned (the kernel could not place them, or the file is damaged)",
                )
                .evidence(rsrc, format!("{} lines, no assigned memory bar in lines 0-5", res.len()))
                .fix("`dmesg | grep -i 'BAR\\|no space'` shows bars the kernel could not assign (enable \"Above 4G decoding\" in the BIOS for large GPU bars); `lspci -vv -s <bdf>` shows the regions"),
            );
            continue;
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

    /// A 4 KiB config space: ids, the capability list bit, a PCI Express capability of `kind`
    /// at 0x40 (DevCtl `devctl`), and the extended capabilities `ext` (offset, header, the
    /// dword after it) from 0x100.
    fn config(
        vendor: u16,
        device: u16,
        kind: u8,
        devctl: u16,
        ext: &[(usize, u32, u32)],
    ) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        let put16 =
            |c: &mut Vec<u8>, o: usize, v: u16| c[o..o + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |c: &mut Vec<u8>, o: usize, v: u32| c[o..o + 4].copy_from_slice(&v.to_le_bytes());
        put16(&mut c, 0x00, vendor);
        put16(&mut c, 0x02, device);
        put16(&mut c, 0x06, 0x0010);
        let bridge = kind != config::PCIE_TYPE_ENDPOINT;
        c[0x0b] = if bridge { 0x06 } else { 0x02 };
        c[0x0a] = if bridge { 0x04 } else { 0x07 };
        c[0x0e] = u8::from(bridge);
        c[0x34] = 0x40;
        c[0x40] = 0x10;
        put16(&mut c, 0x42, 0x0002 | (u16::from(kind) << 4));
        put16(&mut c, 0x48, devctl);
        for (off, header, next_dword) in ext {
            put32(&mut c, *off, *header);
            put32(&mut c, off + 4, *next_dword);
        }
        c
    }

    /// An extended capability header: id, version 1, next pointer.
    fn ext(id: u16, next: usize) -> u32 {
        u32::from(id) | (1 << 16) | ((next as u32) << 20)
    }

    fn set_config(n: &mut Node, bdf: &str, bytes: Vec<u8>) {
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == bdf) {
                d.config = known(bytes.clone());
            }
        }
    }

    /// switch_pair with both downstream ports (the bridges between its GPU and NIC) holding
    /// `dsp` (a function of the bridge's address).
    fn with_dsps(dsp: impl Fn() -> Vec<u8>) -> Node {
        let mut n = switch_pair();
        for b in ["0000:17:00.0", "0000:17:01.0"] {
            set_config(&mut n, b, dsp());
        }
        n
    }

    const DSP: u8 = config::PCIE_TYPE_DOWNSTREAM;
    const ACS: u16 = config::EXT_CAP_ID_ACS;
    const AER: u16 = config::EXT_CAP_ID_AER;

    #[test]
    fn a_config_space_that_does_not_fit_the_tree_is_not_judged() {
        // Bus numbers as the kernel enumerated them: primary, secondary, subordinate.
        let cfg = |t: u8, buses: [u8; 3]| {
            let mut v = config(0x10b5, 0x8796, t, 0, &[(0x100, ext(ACS, 0), 0x001d << 16)]);
            v[0x18..0x1b].copy_from_slice(&buses);
            v
        };
        let a = cfg(DSP, [0x17, 0x18, 0x18]);
        let b = cfg(DSP, [0x17, 0x19, 0x19]);
        let usp = cfg(config::PCIE_TYPE_UPSTREAM, [0x16, 0x17, 0x19]);
        let node = |x: &[u8], y: &[u8]| {
            let mut n = switch_pair();
            set_config(&mut n, "0000:17:00.0", x.to_vec());
            set_config(&mut n, "0000:17:01.0", y.to_vec());
            n
        };
        // In place: the redirect is judged (fails) on both downstream ports.
        let f = acs_redirect(&node(&a, &b));
        assert!(f.iter().all(|f| f.status == Status::Fail), "{f:?}");
        // The two downstream ports' config swapped (same ids, same type): nothing is judged.
        let f = acs_redirect(&node(&b, &a));
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|f| f.status == Status::Error), "{f:?}");
        assert!(
            f[0].evidence[0]
                .observed
                .contains("0000:18:00.0 right below 0000:17:00.0 is on bus 18"),
            "{f:?}"
        );
        // The upstream port's config on a downstream port.
        let f = acs_redirect(&node(&usp, &b));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].evidence[0]
                .observed
                .contains("primary bus 16, but 0000:17:00.0 is on bus 17"),
            "{f:?}"
        );
    }

    #[test]
    fn acs_is_judged_when_the_chain_is_sound() {
        let ok = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &[(0x100, ext(ACS, 0), 0)]));
        let f = acs_redirect(&ok);
        assert!(f.iter().all(|f| f.status == Status::Pass), "{f:?}");
        let redirect = with_dsps(|| {
            config(
                0x10b5,
                0x8796,
                DSP,
                0,
                &[(0x100, ext(ACS, 0), 0x001d << 16)],
            )
        });
        assert!(acs_redirect(&redirect)
            .iter()
            .all(|f| f.status == Status::Fail));
        // No ACS anywhere in a chain walked to its end: direct routing, a pass with evidence.
        let none = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &[(0x100, ext(AER, 0), 0)]));
        let f = acs_redirect(&none);
        assert!(
            f.iter()
                .all(|f| f.status == Status::Pass && f.has_evidence()),
            "{f:?}"
        );
    }

    #[test]
    fn a_broken_chain_is_an_error_naming_the_device_and_offset_never_no_acs() {
        // ACS with ReqRedir sits at 0x140, reached only if the chain from 0x100 holds.
        let acs_at_140 = (0x140, ext(ACS, 0), 0x001d << 16);
        type Chain = Vec<(usize, u32, u32)>;
        let cases: Vec<(&str, Chain, &str)> = vec![
            (
                "self-loop",
                vec![(0x100, ext(AER, 0x100), 0), acs_at_140],
                "0x100: next pointer points to itself",
            ),
            (
                "all-ones",
                vec![(0x100, 0xffff_ffff, 0xffff_ffff), acs_at_140],
                "0x100: all-ones header",
            ),
            (
                "below 0x100",
                vec![(0x100, ext(AER, 0x040), 0), acs_at_140],
                "next pointer 0x040 points below 0x100",
            ),
            (
                "loop",
                vec![
                    (0x100, ext(AER, 0x180), 0),
                    (0x180, ext(0x0b, 0x100), 0),
                    acs_at_140,
                ],
                "loops back to 0x100",
            ),
        ];
        for (name, chain, needle) in cases {
            let n = with_dsps(|| config(0x10b5, 0x8796, DSP, 0, &chain));
            let f = acs_redirect(&n);
            assert_eq!(f.len(), 2, "{name}: {f:?}");
            for x in &f {
                assert_eq!(x.status, Status::Error, "{name}: {x:?}");
                assert!(x.subject.starts_with("0000:17:0"), "{name}: {x:?}");
                assert!(
                    x.evidence.iter().any(|e| e.observed.contains(needle)),
                    "{name}: {needle} in {x:?}"
                );
            }
        }
        // A broken standard list hides the PCI Express capability, and with it the extended
        // list: not "no acs" either.
        let n = with_dsps(|| {
            let mut c = config(
                0x10b5,
                0x8796,
                DSP,
                0,
                &[(0x100, ext(ACS, 0), 0x001d << 16)],
            );
            c[0x40] = 0x01; // power management first ...
            c[0x41] = 0x20; // ... pointing into the header
            c
        });
        let f = acs_redirect(&n);
        assert!(f.iter().all(|x| x.status == Status::Error), "{f:?}");
        assert!(
            f[0].evidence[0]
                .observed
                .contains("capability list broken at 0x041"),
            "{f:?}"
        );
    }

    #[test]
    fn config_space_of_another_device_is_not_trusted() {
        // sysfs says 10b5:8796 (the bridge builder); config space says an Intel device.
        let n = with_dsps(|| config(0x8086, 0x2030, DSP, 0, &[(0x100, ext(ACS, 0), 0)]));
        let f = acs_redirect(&n);
        assert!(f.iter().all(|x| x.status == Status::Error), "{f:?}");
        assert!(
            f[0].evidence[0]
                .observed
                .contains("vendor id 0x8086 differs"),
            "{f:?}"
        );
        // All-ones: the device does not answer.
        let n = with_dsps(|| vec![0xff; 4096]);
        assert!(acs_redirect(&n).iter().all(|x| x.status == Status::Error));
    }

    #[test]
    fn mrrs_rejects_reserved_encodings_and_broken_chains() {
        let nic = |devctl: u16| {
            let mut n = switch_pair();
            set_config(
                &mut n,
                "0000:19:00.0",
                config(0x15b3, 0x1021, config::PCIE_TYPE_ENDPOINT, devctl, &[]),
            );
            n
        };
        // MaxReadReq 4096 (101b), MaxPayload 256 (001b): a pass.
        let f = mrrs(&nic(0x5000 | 0x0020));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        // 110b and 111b are reserved, in either field.
        for devctl in [0x6000u16, 0x7000, 0x5000 | (6 << 5), 0x5000 | (7 << 5)] {
            let f = mrrs(&nic(devctl));
            assert_eq!(f[0].status, Status::Error, "DevCtl {devctl:#06x}: {f:?}");
            assert!(f[0].message.contains("reserved"), "{f:?}");
        }
        // No PCI Express capability because the list is broken: not "has no capability".
        let mut n = switch_pair();
        let mut c = config(0x15b3, 0x1021, config::PCIE_TYPE_ENDPOINT, 0x5000, &[]);
        c[0x34] = 0x50;
        c[0x50] = 0x05;
        c[0x51] = 0x50; // MSI pointing to itself
        set_config(&mut n, "0000:19:00.0", c);
        let f = mrrs(&n);
        assert_eq!(f[0].status, Status::Error);
        assert!(
            f[0].evidence[0].observed.contains("points to itself"),
            "{f:?}"
        );
    }

    #[test]
    fn ats_absent_needs_a_whole_chain() {
        let mut n = switch_pair();
        set_config(
            &mut n,
            "0000:19:00.0",
            config(
                0x15b3,
                0x1021,
                config::PCIE_TYPE_ENDPOINT,
                0x5000,
                &[(0x100, ext(AER, 0x100), 0)],
            ),
        );
        let f = ats(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        let mut n = switch_pair();
        set_config(
            &mut n,
            "0000:19:00.0",
            config(
                0x15b3,
                0x1021,
                config::PCIE_TYPE_ENDPOINT,
                0x5000,
                &[(0x100, ext(AER, 0), 0)],
            ),
        );
        assert_eq!(ats(&n)[0].status, Status::Pass);
    }

    #[test]
    fn bars_never_pass_on_nothing() {
        use crate::model::Resource;
        let mut n = switch_pair();
        let gpu_cfg = {
            let mut c = config(0x10de, 0x2335, config::PCIE_TYPE_ENDPOINT, 0, &[]);
            c[0x0b] = 0x03;
            c[0x0a] = 0x02;
            c[0x10..0x14].copy_from_slice(&0x9000_0000u32.to_le_bytes());
            c
        };
        let bar0 = Resource {
            index: 0,
            start: 0x9000_0000,
            end: 0x90ff_ffff,
            flags: 0x40200,
        };
        let unset = |i| Resource {
            index: i,
            start: 0,
            end: 0,
            flags: 0,
        };
        let set = |n: &mut Node, cfg: Vec<u8>, res: Vec<Resource>| {
            if let Fact::Known { value: pci, .. } = &mut n.pci {
                for d in pci.iter_mut().filter(|d| d.bdf == "0000:18:00.0") {
                    d.config = known(cfg.clone());
                    d.resources = known(res.clone());
                }
            }
        };
        let full: Vec<Resource> = std::iter::once(bar0).chain((1..7).map(unset)).collect();
        set(&mut n, gpu_cfg.clone(), full.clone());
        let by = |n: &Node| {
            bars(n)
                .into_iter()
                .find(|f| f.subject == "0000:18:00.0")
                .map(|f| f.status)
        };
        assert_eq!(by(&n), Some(Status::Pass));
        // No assigned bar in sysfs: nothing was compared, so nothing passes.
        set(&mut n, gpu_cfg.clone(), (0..7).map(unset).collect());
        assert_eq!(by(&n), Some(Status::Error));
        // Config space cut short.
        set(&mut n, gpu_cfg[..0x20].to_vec(), full.clone());
        assert_eq!(by(&n), Some(Status::Error));
        // Another device's config space.
        let mut other = gpu_cfg.clone();
        other[0..2].copy_from_slice(&0x1234u16.to_le_bytes());
        set(&mut n, other, full);
        assert_eq!(by(&n), Some(Status::Error));
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
