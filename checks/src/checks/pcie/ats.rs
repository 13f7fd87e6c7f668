//! `pcie.ats`: ATS on NICs is consistent with the IOMMU and ACS on their paths.

use super::acs::{ACS_CR, ACS_RR};
use super::trust::*;
use crate::gdr::Context;
use crate::model::Node;
use crate::report::{Finding, Status};

pub fn ats(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.ats";
    let cx = Context::new(node);
    let (mode, _) = crate::derive::iommu_mode(node);
    let mut out = Vec::new();
    for f in cx.nic_functions() {
        let (nic, ep, bdf, d) = (f.nic, f.ep, f.bdf, f.dev);
        let src = format!("{}/config", d.sysfs_path);
        let what = format!("ats capability of {}", nic.name);
        let Some(cs) = readable_or_error(ID, bdf, d, 4096, what, &mut out) else {
            continue;
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
