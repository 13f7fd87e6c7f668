//! `pcie.acs-redirect`: no bridge between paired GPUs and NICs redirects peer-to-peer.

use super::trust::*;
use crate::gdr::Context;
use crate::model::Node;
use crate::names;
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

pub(super) const ACS_RR: u16 = 0x04;

pub(super) const ACS_CR: u16 = 0x08;

const ACS_EC: u16 = 0x20;

/// The names of the ACS Control bits set in `ctl`, as lspci prints them (`SrcValid`,
/// `ReqRedir`, ..), lowest bit first.
pub(super) fn acs_bits(ctl: u16) -> Vec<&'static str> {
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

pub fn acs_redirect(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.acs-redirect";
    let cx = Context::new(node);
    if cx.gpus.is_empty() || cx.nics.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no gpu-nic pair on this node (gpu-gpu paths: pcie.p2p-path)",
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
