//! `pcie.p2p-path`: for every GPU pair that NVLink does not join, the PCIe path between the two
//! GPUs: the bridges that carry a peer-to-peer transfer (those below the pair's common
//! ancestor, the root ports included when the path crosses the root complex: AMD's "GPP
//! bridges" are root ports), their ACS redirect bits, the IOMMU, the P2P decision NCCL takes for
//! the pair (its path type against `NCCL_P2P_LEVEL`, PXB by default, SYS on AMD CPUs with at
//! most two GPUs: the rule's `GpuP2p`), and both GPUs' BAR1 with their Resizable BAR
//! capability.
//!
//! Why: on PCIe-only servers (inference boxes, L40S/H100 PCIe/H200 NVL) NCCL's all-reduce
//! writes straight into the peer GPU's BAR1 over the switch. A downstream port with ACS P2P
//! Request/Completion Redirect (or Egress Control) set sends every such write up to the root
//! complex; with a translating IOMMU the peer's BAR address is then an unmapped IOVA (IO page
//! faults, hangs in all-reduce), without one it crawls. `pcie.acs-redirect` judges the GPU-NIC
//! paths only; this check judges the GPU-GPU ones, with the same per-bridge fix.

use super::acs::{ACS_CR, ACS_RR};
use super::trust::{absence_unknown, misplaced, readable};
use crate::derive::{self, IommuMode};
use crate::gdr::Context;
use crate::model::{Node, PciDevice};
use crate::names;
use crate::parse;
use crate::report::{Finding, Status};
use crate::topo::{self, PathType};
use std::collections::BTreeMap;

const ID: &str = "pcie.p2p-path";

/// ACS Egress Control (0x20): with the egress control vector it also forces P2P upstream.
const ACS_EC: u16 = 0x20;

/// The Resizable BAR extended capability id.
const EXT_CAP_REBAR: u16 = 0x0015;

/// What one bridge's ACS says about peer-to-peer through it.
#[derive(Debug, Clone)]
enum Bridge {
    /// Routed directly: no redirect bits (or no ACS capability), with the evidence.
    Direct { source: String, observed: String },
    /// Redirects P2P to the root complex.
    Redirect {
        source: String,
        ctl: u16,
        name: String,
    },
    /// Cannot tell.
    Unknown { source: String, why: String },
}

fn bit_names(ctl: u16) -> String {
    let v = super::acs::acs_bits(ctl);
    if v.is_empty() {
        "none".into()
    } else {
        v.join(" ")
    }
}

/// One bridge's ACS, judged as `pcie.acs-redirect` judges it (damaged config space is never
/// "no ACS").
fn judge_bridge(node: &Node, cx: &Context<'_>, bdf: &str) -> Bridge {
    let Some(d) = cx.index.get(bdf) else {
        return Bridge::Unknown {
            source: "/sys/bus/pci/devices".into(),
            why: format!("{bdf} is on the path but not listed as a pci device"),
        };
    };
    let src = format!("{}/config", d.sysfs_path);
    let cs = match readable(d, 4096) {
        Ok(cs) => cs,
        Err(why) => return Bridge::Unknown { source: src, why },
    };
    if let Some(why) = misplaced(node, d) {
        return Bridge::Unknown {
            source: src,
            why: format!("the config space does not fit this bridge's place in the tree: {why}"),
        };
    }
    let Some(acs) = cs.acs else {
        if let Some(why) = absence_unknown(&cs, true) {
            return Bridge::Unknown {
                source: src,
                why: format!("its capability list is broken: {why}"),
            };
        }
        return Bridge::Direct {
            source: src,
            observed: format!(
                "{bdf}: no ACS extended capability ({} extended capabilities walked to the end)",
                cs.ext_capabilities.len()
            ),
        };
    };
    let at = format!("{src}@0x{:x}", acs.offset + 6);
    if acs.ctl & (ACS_RR | ACS_CR | ACS_EC) == 0 {
        Bridge::Direct {
            source: at,
            observed: format!("{bdf}: ACSCtl 0x{:04x} ({})", acs.ctl, bit_names(acs.ctl)),
        }
    } else {
        Bridge::Redirect {
            source: at,
            ctl: acs.ctl,
            name: names::device_name(d),
        }
    }
}

/// BAR1 of a GPU and whether it has the Resizable BAR capability, for the evidence; `small`
/// when the aperture is 256 MiB or less (the legacy size without Resizable BAR).
fn bar1_text(g: &PciDevice) -> (String, bool) {
    let bar = super::super::gpu::bar1(g);
    let rebar = match g.decoded() {
        Some(cs) if cs.ext_capabilities.iter().any(|c| c.id == EXT_CAP_REBAR) => {
            "Resizable BAR capability present"
        }
        Some(cs) if cs.extended_readable && absence_unknown(&cs, true).is_none() => {
            "no Resizable BAR capability"
        }
        _ => "Resizable BAR unknown (extended config space not read)",
    };
    match bar {
        Some(b) => (
            format!(
                "{}: BAR{} {}, {rebar}",
                g.bdf,
                b.index,
                parse::human_bytes(b.size())
            ),
            b.size() <= 256 << 20,
        ),
        None => (
            format!("{}: bar1 not found in resource, {rebar}", g.bdf),
            false,
        ),
    }
}

/// `pcie.p2p-path`: see the module documentation.
pub fn p2p_path(node: &Node) -> Vec<Finding> {
    let cx = Context::new(node);
    if cx.gpus.len() < 2 {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            format!(
                "{} nvidia gpu(s) placed in the pci tree: no gpu pair",
                cx.gpus.len()
            ),
        )];
    }
    let shared = crate::gdr::shared(node);
    let (sys, decision) = (&shared.system, &shared.decision);
    let (iommu, iommu_ev) = derive::iommu_mode(node);
    let iommu_text = format!("{} ({})", iommu.as_str(), iommu_ev.join("; "));
    let mut judged: BTreeMap<String, Bridge> = BTreeMap::new();
    let mut bar_cache: BTreeMap<String, Option<(String, bool)>> = BTreeMap::new();
    // Indexed once: the loop below is per GPU pair.
    let sys_index: std::collections::HashMap<&str, usize> = sys
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| (g.id.as_str(), i))
        .collect();
    let nccl_index: std::collections::HashMap<(usize, usize), &crate::nccl::rule::GpuP2p> =
        decision.p2p.iter().map(|q| ((q.a, q.b), q)).collect();
    // NVML's P2P read/write status per pair: NCCL 2.12 and later keep a PCIe pair whose status
    // is not `ok` off P2P (`ncclTopoCheckP2p`, v2.12.12-1 paths.cc L315-327: `*p2p = 0`).
    let nvml_p2p: BTreeMap<(String, String), (String, String)> = crate::gdr::p2p::pairs(node)
        .into_iter()
        .filter_map(|q| {
            let (r, w) = (
                q.status("read")?.to_string(),
                q.status("write")?.to_string(),
            );
            Some(((q.a.clone(), q.b.clone()), (r, w)))
        })
        .collect();
    let checks_nvml = decision.rules.version >= crate::nccl::Version::new(2, 12, 0);
    let mut out = Vec::new();
    let mut over_nvlink = Vec::new();
    for (i, a) in cx.gpus.iter().enumerate() {
        for b in cx.gpus.iter().skip(i + 1) {
            let subject = format!("{}|{}", a.bdf, b.bdf);
            // Whether NVLink joins the pair is in the GPUs' recorded live facts: damaged ones
            // leave it unknown, so the PCIe path is not judged as the pair's.
            if let Some(why) =
                derive::live_damage(node, &a.bdf).or_else(|| derive::live_damage(node, &b.bdf))
            {
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &subject,
                        format!("whether nvlink joins this pair is not known: {why}"),
                    )
                    .evidence(node.live.nvml.source(), why),
                );
                continue;
            }
            let ia = sys_index.get(a.bdf.as_str()).copied();
            let ib = sys_index.get(b.bdf.as_str()).copied();
            let nvlink = match (ia, ib) {
                (Some(x), Some(y)) => sys.nvlink.get(x).and_then(|r| r.get(y)).copied().flatten(),
                _ => None,
            };
            if nvlink == Some(true) {
                over_nvlink.push(subject);
                continue;
            }
            let p = topo::path(a, b);
            let nccl = match (ia, ib) {
                (Some(x), Some(y)) => nccl_index.get(&(x.min(y), x.max(y))).copied(),
                _ => None,
            };
            let by_level = nccl.and_then(|q| q.p2p);
            let mut nccl_uses = by_level;
            let mut nccl_text = match nccl {
                Some(q) => format!(
                    "{}: {}",
                    match q.p2p {
                        Some(true) => "p2p",
                        Some(false) => "no p2p (host memory)",
                        None => "unknown",
                    },
                    q.reason
                ),
                None => "no nccl p2p decision for this pair".into(),
            };
            let rw = nvml_p2p
                .get(&(a.bdf.clone(), b.bdf.clone()))
                .or_else(|| nvml_p2p.get(&(b.bdf.clone(), a.bdf.clone())));
            let mut refused = None;
            if let Some((r, w)) = rw {
                if r != "ok" || w != "ok" {
                    refused = Some(format!("read={r} write={w}"));
                }
                if checks_nvml && nccl_uses != Some(false) && (r != "ok" || w != "ok") {
                    nccl_uses = Some(false);
                    nccl_text = format!(
                        "no p2p (host memory): {}, but nvmlDeviceGetP2PStatus read={r} write={w}, and NCCL 2.12+ keeps a pair whose status is not ok off p2p (`P2P is disabled between connected GPUs`)",
                        nccl.map(|q| q.reason.as_str()).unwrap_or("no level decision")
                    );
                }
            }
            let mut redirect = Vec::new();
            let mut unknown = Vec::new();
            let mut direct = Vec::new();
            for br in &p.p2p_bridges {
                let j = judged
                    .entry(br.clone())
                    .or_insert_with(|| judge_bridge(node, &cx, br))
                    .clone();
                match j {
                    Bridge::Redirect { source, ctl, name } => {
                        redirect.push((br.clone(), source, ctl, name))
                    }
                    Bridge::Unknown { source, why } => unknown.push((br.clone(), source, why)),
                    Bridge::Direct { source, observed } => direct.push((source, observed)),
                }
            }
            let path_text = format!(
                "{} (nvidia-smi {}), {}",
                p.nccl.as_str(),
                p.smi.as_str(),
                match &p.common {
                    Some(c) => format!("common ancestor {c}"),
                    None => "no common pci ancestor: through the root complex".into(),
                }
            );
            let nvlink_note = match nvlink {
                Some(false) => "no nvlink between them".to_string(),
                _ => format!("nvlink unknown ({})", sys.nvlink_source),
            };
            let bars: Vec<(String, bool)> = [&a.bdf, &b.bdf]
                .into_iter()
                .filter_map(|g| {
                    if !bar_cache.contains_key(g) {
                        let t = cx.index.get(g).map(bar1_text);
                        bar_cache.insert(g.clone(), t);
                    }
                    bar_cache.get(g).cloned().flatten()
                })
                .collect();
            let through_rc = matches!(p.nccl, PathType::Phb | PathType::Sys);
            let mut f = if !redirect.is_empty() {
                let names: Vec<String> = redirect
                    .iter()
                    .map(|(bdf, _, ctl, name)| {
                        format!(
                            "{bdf} ({name}) {}",
                            bit_names(ctl & (ACS_RR | ACS_CR | ACS_EC))
                        )
                    })
                    .collect();
                let consequence = if iommu == IommuMode::Translated {
                    "with the iommu translating, the peer's bar address is an unmapped iova there: io page faults, nccl all-reduce hangs"
                } else {
                    "slow, and a hang where the root complex does not forward peer-to-peer"
                };
                let (status, msg) = match (nccl_uses, nvlink) {
                    (Some(true), Some(false)) => (
                        Status::Fail,
                        format!("nccl uses pcie p2p between these gpus ({}), but acs on {} redirects it to the root complex: {consequence}", p.nccl.as_str(), names.join(", ")),
                    ),
                    (Some(false), _) if refused.is_some() && by_level == Some(true) => (
                        Status::Fail,
                        format!("no p2p between these gpus: acs on {} redirects it to the root complex, and the driver refuses peer access (nvmlDeviceGetP2PStatus {}): nccl and cuda peer copies go through host memory (slower, no hang); clearing the redirect restores p2p", names.join(", "), refused.as_deref().unwrap_or("")),
                    ),
                    (Some(false), _) => (
                        Status::Warn,
                        format!("acs on {} redirects p2p between these gpus to the root complex; nccl stays off p2p here ({}), but cuda peer copies (cudaMemcpyPeer, custom all-reduce kernels such as vllm's) still take this path", names.join(", "), p.nccl.as_str()),
                    ),
                    _ => (
                        Status::Warn,
                        format!("if these gpus have no nvlink ({nvlink_note}), nccl may use pcie p2p between them ({}), and acs on {} redirects it to the root complex: {consequence}", p.nccl.as_str(), names.join(", ")),
                    ),
                };
                let mut f = Finding::new(ID, status, &subject, msg);
                for (_, source, ctl, _) in &redirect {
                    f = f.expected(
                        source.clone(),
                        format!("ACSCtl 0x{ctl:04x} ({})", bit_names(*ctl)),
                        "ReqRedir- CmpltRedir- EgressCtrl-",
                    );
                }
                let setpci: Vec<String> = redirect
                    .iter()
                    .map(|(bdf, _, _, _)| format!("`setpci -s {bdf} ECAP_ACS+0x6.w=0000`"))
                    .collect();
                let param: Vec<&str> = redirect.iter().map(|(bdf, _, _, _)| bdf.as_str()).collect();
                f.fix(format!(
                    "now (until reboot), per bridge: {}; for good: kernel parameter `pci=disable_acs_redir={}`, or disable ACS for these ports in the BIOS (on AMD: the GPP bridges' ACS follows the IOMMU: `iommu=pt` or AMD-Vi off); with the iommu on, disabling ACS merges iommu groups{}",
                    setpci.join(", "),
                    param.join(";"),
                    if nccl_uses == Some(true) {
                        ". Until fixed, `NCCL_P2P_DISABLE=1` avoids the hang at the cost of p2p bandwidth"
                    } else {
                        ""
                    }
                ))
            } else if !unknown.is_empty() {
                let mut f = Finding::new(
                    ID,
                    Status::Error,
                    &subject,
                    format!(
                        "cannot read acs of {} on the p2p path between these gpus",
                        unknown
                            .iter()
                            .map(|(b, _, _)| b.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                for (_, source, why) in &unknown {
                    f = f.evidence(source.clone(), why.clone());
                }
                f.fix("run `gdrdoctor check` as root (config space past 64 bytes needs CAP_SYS_ADMIN), or `lspci -vvv -s BDF` for each bridge")
            } else if iommu == IommuMode::Translated && nccl_uses == Some(true) {
                Finding::new(
                    ID,
                    Status::Warn,
                    &subject,
                    if through_rc {
                        format!("nccl uses p2p between these gpus through the root complex ({}) while the iommu translates dma: the driver must map the peer's bar in the iommu (NVreg DmaRemapPeerMmio), and p2p through the root complex is slow or unsupported on many cpus", p.nccl.as_str())
                    } else {
                        format!("nccl uses p2p between these gpus ({}) while the iommu translates dma: the gpus address each other by iova, which the switch does not route to the peer but sends up to the root complex to translate (slow; io page faults where the driver did not map the peer's bar, NVreg DmaRemapPeerMmio)", p.nccl.as_str())
                    },
                )
                .evidence("iommu", iommu_text.clone())
                .fix(super::super::iommu::cmdline_fix(node))
            } else {
                let small: Vec<&String> = bars.iter().filter(|(_, s)| *s).map(|(t, _)| t).collect();
                if nccl_uses == Some(true) && !small.is_empty() {
                    Finding::new(ID, Status::Warn, &subject, format!("nccl uses pcie p2p between these gpus ({}), routed directly, but bar1 is small ({}): peer mappings go through bar1", p.nccl.as_str(), small.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; ")))
                        .fix("enable Above 4G Decoding and Resizable BAR in the BIOS, then reboot (`nvidia-smi -q -d MEMORY` shows BAR1)")
                } else {
                    let how = match nccl_uses {
                        Some(true) => format!("nccl uses pcie p2p ({}), routed directly", p.nccl.as_str()),
                        Some(false) => format!("nccl stages this pair through host memory ({} beyond its p2p level); no bridge redirects p2p", p.nccl.as_str()),
                        None => format!("no bridge on the {} path redirects p2p", p.nccl.as_str()),
                    };
                    let mut f = Finding::new(ID, Status::Pass, &subject, how);
                    if direct.is_empty() {
                        f = f.evidence(
                            "/sys/bus/pci/devices (resolved paths)",
                            format!("no pcie bridge between the gpus: {path_text}"),
                        );
                    }
                    f
                }
            };
            for (source, observed) in direct {
                f = f.evidence(source, observed);
            }
            f = f
                .evidence("pcie path", path_text)
                .evidence(
                    format!("nccl p2p ({})", decision.rules.describe()),
                    nccl_text,
                )
                .evidence("nvlink", nvlink_note)
                .evidence("iommu", iommu_text.clone());
            for (t, _) in bars {
                f = f.evidence("bar1", t);
            }
            out.push(f);
        }
    }
    if out.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            format!(
                "every gpu pair is joined by nvlink ({} pairs): pcie does not carry their p2p",
                over_nvlink.len()
            ),
        )];
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{CpuVendor, Fact, IommuGroup};
    use crate::testing::*;

    const RP: &str = "/sys/devices/pci0000:15/0000:15:01.0";

    /// A 4 KiB config space of a bridge of PCIe `kind` with ACS control `acs` at 0x100, its
    /// bus numbers as the tree says.
    fn bridge_cfg(vendor: u16, device: u16, kind: u8, buses: [u8; 3], acs: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0..2].copy_from_slice(&vendor.to_le_bytes());
        c[2..4].copy_from_slice(&device.to_le_bytes());
        c[6] = 0x10;
        c[0x0a] = 0x04;
        c[0x0b] = 0x06;
        c[0x0e] = 1;
        c[0x18..0x1b].copy_from_slice(&buses);
        c[0x34] = 0x40;
        c[0x40] = 0x10;
        c[0x42..0x44].copy_from_slice(&(0x0002u16 | (u16::from(kind) << 4)).to_le_bytes());
        let hdr: u32 = 0x000d | (1 << 16);
        c[0x100..0x104].copy_from_slice(&hdr.to_le_bytes());
        c[0x104..0x106].copy_from_slice(&0x005fu16.to_le_bytes());
        c[0x106..0x108].copy_from_slice(&acs.to_le_bytes());
        c
    }

    fn set_config(n: &mut Node, bdf: &str, bytes: Vec<u8>) {
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == bdf) {
                d.config = known(bytes.clone());
            }
        }
    }

    /// Two GPUs below one switch (downstream ports 17:00.0 and 17:01.0, ACS control `acs`),
    /// two more below a second switch on another root port; no NVML (NVLink unknown) unless
    /// `nvlink_off`.
    fn pcie_box(acs: u16) -> Node {
        let usp = format!("{RP}/0000:16:00.0");
        let rp2 = "/sys/devices/pci0000:25/0000:25:01.0";
        let usp2 = format!("{rp2}/0000:26:00.0");
        let mut n = with(
            empty_node(),
            vec![
                bridge(RP, 0),
                bridge(&usp, 0),
                bridge(&format!("{usp}/0000:17:00.0"), 0),
                gpu(&format!("{usp}/0000:17:00.0/0000:18:00.0"), 0),
                bridge(&format!("{usp}/0000:17:01.0"), 0),
                gpu(&format!("{usp}/0000:17:01.0/0000:19:00.0"), 0),
                bridge(rp2, 0),
                bridge(&usp2, 0),
                bridge(&format!("{usp2}/0000:27:00.0"), 0),
                gpu(&format!("{usp2}/0000:27:00.0/0000:28:00.0"), 0),
            ],
            vec![],
        );
        set_config(
            &mut n,
            "0000:15:01.0",
            bridge_cfg(0x10b5, 0x8796, 4, [0x15, 0x16, 0x19], 0),
        );
        set_config(
            &mut n,
            "0000:16:00.0",
            bridge_cfg(0x10b5, 0x8796, 5, [0x16, 0x17, 0x19], 0),
        );
        set_config(
            &mut n,
            "0000:17:00.0",
            bridge_cfg(0x10b5, 0x8796, 6, [0x17, 0x18, 0x18], acs),
        );
        set_config(
            &mut n,
            "0000:17:01.0",
            bridge_cfg(0x10b5, 0x8796, 6, [0x17, 0x19, 0x19], acs),
        );
        set_config(
            &mut n,
            "0000:25:01.0",
            bridge_cfg(0x10b5, 0x8796, 4, [0x25, 0x26, 0x28], 0),
        );
        set_config(
            &mut n,
            "0000:26:00.0",
            bridge_cfg(0x10b5, 0x8796, 5, [0x26, 0x27, 0x28], 0),
        );
        set_config(
            &mut n,
            "0000:27:00.0",
            bridge_cfg(0x10b5, 0x8796, 6, [0x27, 0x28, 0x28], acs),
        );
        n.iommu.classes = known(Vec::new());
        n.iommu.groups = known(Vec::new());
        n
    }

    fn nvlink_off(n: &mut Node) {
        let gpus: Vec<String> = crate::derive::gpus(n)
            .iter()
            .map(|g| g.bdf.clone())
            .collect();
        n.live.nvml = known(crate::model::NvmlFacts {
            gpus: gpus
                .iter()
                .map(|b| crate::model::NvmlGpu {
                    bdf: b.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
    }

    fn by(f: &[Finding], s: &str) -> Finding {
        f.iter().find(|x| x.subject == s).cloned().unwrap()
    }

    #[test]
    fn acs_redirect_on_the_switch_fails_the_pair_nccl_uses_and_names_each_bridge() {
        let mut n = pcie_box(0x001d);
        nvlink_off(&mut n);
        let f = p2p_path(&n);
        assert_eq!(f.len(), 3, "{f:#?}");
        let same = by(&f, "0000:18:00.0|0000:19:00.0");
        assert_eq!(same.status, Status::Fail, "{same:#?}");
        assert!(
            same.message
                .contains("nccl uses pcie p2p between these gpus (PIX)"),
            "{}",
            same.message
        );
        assert!(same.message.contains("0000:17:00.0") && same.message.contains("0000:17:01.0"));
        let fix = same.remediation.clone().unwrap();
        assert!(
            fix.contains("setpci -s 0000:17:00.0 ECAP_ACS+0x6.w=0000"),
            "{fix}"
        );
        assert!(
            fix.contains("setpci -s 0000:17:01.0 ECAP_ACS+0x6.w=0000"),
            "{fix}"
        );
        assert!(
            fix.contains("pci=disable_acs_redir=0000:17:00.0;0000:17:01.0"),
            "{fix}"
        );
        assert!(
            same.evidence
                .iter()
                .any(|e| e.observed.starts_with("p2p: PIX within NCCL_P2P_LEVEL PXB")),
            "{:#?}",
            same.evidence
        );
        // Across the root complex: NCCL stays off p2p (PHB beyond PXB), the redirect warns.
        let far = by(&f, "0000:18:00.0|0000:28:00.0");
        assert_eq!(far.status, Status::Warn, "{far:#?}");
        assert!(
            far.message.contains("nccl stays off p2p here (PHB)"),
            "{}",
            far.message
        );
    }

    #[test]
    fn clean_acs_passes_with_the_bridges_read_and_unknown_nvlink_only_warns() {
        let mut n = pcie_box(0x0011);
        nvlink_off(&mut n);
        let f = p2p_path(&n);
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        // The same switch with a translating iommu: never a plain pass for a pair nccl uses.
        let mut t = n.clone();
        t.iommu.classes = known(vec!["dmar0".into()]);
        t.iommu.groups = known(vec![IommuGroup {
            id: "0".into(),
            kind: known("DMA-FQ".into()),
            devices: vec!["0000:18:00.0".into(), "0000:19:00.0".into()],
        }]);
        let same = by(&p2p_path(&t), "0000:18:00.0|0000:19:00.0");
        assert_eq!(same.status, Status::Warn, "{same:#?}");
        assert!(
            same.message.contains("address each other by iova"),
            "{}",
            same.message
        );
        let same = by(&f, "0000:18:00.0|0000:19:00.0");
        assert!(
            same.message
                .starts_with("nccl uses pcie p2p (PIX), routed directly"),
            "{}",
            same.message
        );
        assert!(
            same.evidence
                .iter()
                .any(|e| e.observed == "0000:17:00.0: ACSCtl 0x0011 (SrcValid UpstreamFwd)"),
            "{:#?}",
            same.evidence
        );
        // NVLink unknown (no NVML): a redirect is a warn, never a confident fail.
        let n = pcie_box(0x001d);
        let f = p2p_path(&n);
        let same = by(&f, "0000:18:00.0|0000:19:00.0");
        assert_eq!(same.status, Status::Warn, "{same:#?}");
        assert!(
            same.message.starts_with("if these gpus have no nvlink"),
            "{}",
            same.message
        );
    }

    #[test]
    fn unreadable_bridges_are_an_error_never_a_pass() {
        let mut n = pcie_box(0);
        nvlink_off(&mut n);
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == "0000:17:01.0") {
                d.config = Fact::absent("/sys/x/config", "permission denied");
            }
        }
        let f = p2p_path(&n);
        let same = by(&f, "0000:18:00.0|0000:19:00.0");
        assert_eq!(same.status, Status::Error, "{same:#?}");
        assert!(same.message.contains("0000:17:01.0"), "{}", same.message);
    }

    #[test]
    fn amd_gpp_root_ports_with_acs_and_two_gpus_fail_under_ncclss_amd_default() {
        // Two GPUs each on its own Genoa GPP bridge (root port), AMD CPU: NCCL's P2P level is
        // SYS for at most two GPUs on AMD, so it uses p2p across the root complex.
        let rp_a = "/sys/devices/pci0000:00/0000:00:01.1";
        let rp_b = "/sys/devices/pci0000:00/0000:00:03.1";
        let mut n = with(
            empty_node(),
            vec![
                pci(rp_a, 0x060400, 0x1022, 0x14ab, 0),
                gpu(&format!("{rp_a}/0000:01:00.0"), 0),
                pci(rp_b, 0x060400, 0x1022, 0x14ab, 0),
                gpu(&format!("{rp_b}/0000:02:00.0"), 0),
            ],
            vec![],
        );
        set_config(
            &mut n,
            "0000:00:01.1",
            bridge_cfg(0x1022, 0x14ab, 4, [0x00, 0x01, 0x01], 0x001d),
        );
        set_config(
            &mut n,
            "0000:00:03.1",
            bridge_cfg(0x1022, 0x14ab, 4, [0x00, 0x02, 0x02], 0x001d),
        );
        n.cpu_vendor = known(CpuVendor::Amd);
        n.iommu.classes = known(vec!["ivhd0".into()]);
        n.iommu.groups = known(vec![IommuGroup {
            id: "0".into(),
            kind: known("DMA-FQ".into()),
            devices: vec!["0000:01:00.0".into(), "0000:02:00.0".into()],
        }]);
        nvlink_off(&mut n);
        let f = p2p_path(&n);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(f[0].message.contains("GPP Bridge"), "{}", f[0].message);
        assert!(f[0].message.contains("io page faults"), "{}", f[0].message);
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.observed.contains("on AMD CPUs with at most two GPUs")),
            "{:#?}",
            f[0].evidence
        );
        // ACS cleared on the GPP bridges, the IOMMU still translating: p2p through the root
        // complex with translation is a warning with the iommu fix.
        set_config(
            &mut n,
            "0000:00:01.1",
            bridge_cfg(0x1022, 0x14ab, 4, [0x00, 0x01, 0x01], 0),
        );
        set_config(
            &mut n,
            "0000:00:03.1",
            bridge_cfg(0x1022, 0x14ab, 4, [0x00, 0x02, 0x02], 0),
        );
        let f = p2p_path(&n);
        assert_eq!(f[0].status, Status::Warn, "{f:#?}");
        assert!(f[0].remediation.clone().unwrap().contains("iommu=pt"));
    }

    #[test]
    fn one_gpu_or_all_nvlink_skips() {
        let n = switch_pair();
        assert_eq!(p2p_path(&n)[0].status, Status::Skip);
    }
}
