//! `pcie.relaxed-ordering` and `pcie.nic-tlp` (issue 39 item 6): the NIC's PCI Express
//! settings that set GPUDirect RDMA's bandwidth without turning it off: Relaxed Ordering
//! against the CPU that needs it, MaxPayload against the bridges above the NIC and the GPUs it
//! reaches, and the tag fields (extended and 10-bit tags).

use super::trust::*;
use crate::gdr::Context;
use crate::model::{CpuVendor, Node, PciDevice};
use crate::pci::config::{ConfigSpace, PcieCap};
use crate::report::{Finding, Status};

/// The CPU generations whose root complex needs relaxed ordering for line-rate NIC DMA, as
/// named by a `model name` of `/proc/cpuinfo` (`None`: not one of them, or unknown).
///
/// - AMD EPYC (Naples, Rome, Milan, and the later Genoa and Turin): UCX turns relaxed ordering
///   on by default for them (openucx/ucx `ucs_cpu_prefer_relaxed_order`, PR #8062: 150 of 200
///   Gb/s without it);
/// - Intel Xeon 5th generation (Emerald Rapids, `Xeon(R) Platinum 85xx`, `Gold 65xx/55xx`,
///   `Silver 45xx`): UCX PR #10955, "BW ~16GB/s instead of >40GB/s" without it.
pub fn cpu_needs_relaxed_ordering(
    vendor: Option<CpuVendor>,
    model: Option<&str>,
) -> Option<String> {
    let m = model?;
    match vendor {
        Some(CpuVendor::Amd) if m.contains("EPYC") => Some(format!(
            "{m} (AMD EPYC: its root complex needs relaxed-ordered writes for line-rate NIC DMA)"
        )),
        Some(CpuVendor::Intel) if xeon_generation(m) == Some(5) => Some(format!(
            "{m} (Intel Xeon 5th generation, Emerald Rapids: without relaxed ordering NIC DMA takes a slower path)"
        )),
        _ => None,
    }
}

/// The Xeon Scalable generation of a model name (`Intel(R) Xeon(R) Platinum 8580` -> 5): the
/// second digit of the four-digit number after Platinum, Gold, Silver or Bronze.
pub fn xeon_generation(model: &str) -> Option<u32> {
    let mut words = model.split_whitespace();
    while let Some(w) = words.next() {
        if matches!(w, "Platinum" | "Gold" | "Silver" | "Bronze") {
            let num: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            if num.len() == 4 {
                return num.chars().nth(1)?.to_digit(10);
            }
            return None;
        }
    }
    None
}

/// Root ports below which Linux turns relaxed ordering off on purpose
/// (`quirk_relaxedordering_disable`, drivers/pci/quirks.c): Intel Xeon E5 v3/v4 (Haswell-EP,
/// Broadwell-EP) root ports 0x6f01-0x6f0e and 0x2f01-0x2f0e, AMD A1100 0x1a00-0x1a02.
fn ro_quirk(d: &PciDevice) -> bool {
    match (d.vendor_id.get(), d.device_id.get()) {
        (Some(0x8086), Some(id)) => {
            (0x6f01..=0x6f0e).contains(id) || (0x2f01..=0x2f0e).contains(id)
        }
        (Some(0x1022), Some(id)) => (0x1a00..=0x1a02).contains(id),
        _ => false,
    }
}

/// The bridges above `d`, nearest first.
fn ancestors<'a>(node: &'a Node, d: &'a PciDevice) -> Vec<&'a PciDevice> {
    ancestors_or_gap(node, d).0
}

/// The bridges above `d`, nearest first, and the first parent named in sysfs that is not among
/// the node's PCI functions (the walk stops there: the path above it is unknown).
fn ancestors_or_gap<'a>(node: &'a Node, d: &'a PciDevice) -> (Vec<&'a PciDevice>, Option<String>) {
    let pci = node.pci.get().map(Vec::as_slice).unwrap_or_default();
    let mut out: Vec<&PciDevice> = Vec::new();
    let mut cur = d.parent.clone();
    while let Some(b) = cur {
        let Some(p) = pci.iter().find(|x| x.bdf == b) else {
            return (out, Some(b));
        };
        if out.iter().any(|x| x.bdf == p.bdf) {
            break;
        }
        out.push(p);
        cur = p.parent.clone();
    }
    (out, None)
}

/// The PCI Express capability of `d`, or an `error` finding pushed to `out`.
fn pcie_of(
    id: &str,
    subject: &str,
    d: &PciDevice,
    what: &str,
    out: &mut Vec<Finding>,
) -> Option<(ConfigSpace, PcieCap)> {
    let cs = readable_or_error(id, subject, d, 256, what.to_string(), out)?;
    match cs.pcie.clone() {
        Some(p) => Some((cs, p)),
        None => {
            let why = absence_unknown(&cs, false).unwrap_or_else(|| "no PCIe capability".into());
            out.push(
                Finding::new(
                    id,
                    Status::Error,
                    subject,
                    format!("cannot read the {what}: no pci express capability found"),
                )
                .evidence(format!("{}/config", d.sysfs_path), why),
            );
            None
        }
    }
}

fn pm(b: bool) -> &'static str {
    if b {
        "+"
    } else {
        "-"
    }
}

pub fn relaxed_ordering(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.relaxed-ordering";
    let cx = Context::new(node);
    let vendor = node.cpu_vendor.get().copied();
    let model = node.cpu_model.get().map(String::as_str);
    let needs = cpu_needs_relaxed_ordering(vendor, model);
    let cpu_text = match (model, vendor) {
        (Some(m), _) => m.to_string(),
        (None, Some(v)) => format!("{v:?} (no model name)"),
        (None, None) => format!(
            "unknown ({})",
            node.cpu_model.reason().unwrap_or("not read")
        ),
    };
    let mut out = Vec::new();
    for f in cx.nic_functions() {
        let (nic, bdf, d) = (f.nic, f.bdf, f.dev);
        let Some((_, p)) = pcie_of(
            ID,
            bdf,
            d,
            &format!("pcie device control of {}", nic.name),
            &mut out,
        ) else {
            continue;
        };
        let at = format!("{}/config@0x{:x}", d.sysfs_path, p.offset + 8);
        let obs = format!(
            "DevCtl 0x{:04x}: RlxdOrd{}",
            p.devctl,
            pm(p.relaxed_ordering)
        );
        let above = ancestors(node, d);
        let root = above.last().copied();
        let finding = if p.relaxed_ordering {
            Finding::new(
                ID,
                Status::Pass,
                bdf,
                format!("{} has relaxed ordering enabled: mlx5 marks gpu-memory registrations relaxed-ordered when nccl asks (NCCL_IB_PCI_RELAXED_ORDERING, default 2)", nic.name),
            )
            .evidence(at, obs)
        } else if let Some(rp) = root.filter(|r| ro_quirk(r)) {
            Finding::new(
                ID,
                Status::Pass,
                bdf,
                format!("{} has relaxed ordering off, as linux sets it below root port {} (a root port that mishandles relaxed-ordered tlps)", nic.name, rp.bdf),
            )
            .evidence(at, obs)
            .evidence(format!("{}/vendor, device", rp.sysfs_path), format!("{:04x}:{:04x}", rp.vendor_id.get().copied().unwrap_or(0), rp.device_id.get().copied().unwrap_or(0)))
        } else {
            let (status, why) = match &needs {
                Some(cpu) => (
                    Status::Fail,
                    format!("this cpu needs it for full gpudirect rdma bandwidth: {cpu}"),
                ),
                // No cpu to judge by: it may be one that needs the bit (an EPYC). Not a warn,
                // which exits 0 (the sweep of 2026-12-07: /proc/cpuinfo removed turned the
                // EPYC node's fail into a warn).
                None if vendor.is_none() && model.is_none() => (
                    Status::Error,
                    format!("whether this cpu needs it cannot be told: the cpu is {cpu_text}"),
                ),
                None => (
                    Status::Warn,
                    "mlx5 does relaxed-ordered reads and writes for nccl's registrations only with this bit set; gpudirect rdma loses bandwidth on cpus and switches that reorder".to_string(),
                ),
            };
            Finding::new(
                ID,
                status,
                bdf,
                format!("{} has relaxed ordering disabled in device control: {why}", nic.name),
            )
            .expected(at, obs, "RlxdOrd+")
            .fix(format!("enable it until reboot with `setpci -s {bdf} CAP_EXP+8.w=0010:0010`; look for a BIOS option that clears it (\"PCIe Relaxed Ordering\"); on ConnectX, let the firmware honour it for every registration: `mlxconfig -d {bdf} set PCI_WR_ORDERING=1` (force_relax; takes effect after a firmware reset or reboot); keep NCCL_IB_PCI_RELAXED_ORDERING at its default 2"))
        };
        out.push(finding.evidence("/proc/cpuinfo", cpu_text.clone()));
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

pub fn nic_tlp(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.nic-tlp";
    let cx = Context::new(node);
    let pci = node.pci.get().map(Vec::as_slice).unwrap_or_default();
    let mut out = Vec::new();
    for f in cx.nic_functions() {
        let (nic, bdf, d) = (f.nic, f.bdf, f.dev);
        let Some((_, p)) = pcie_of(
            ID,
            bdf,
            d,
            &format!("pcie capability of {}", nic.name),
            &mut out,
        ) else {
            continue;
        };
        let at = format!("{}/config@0x{:x}", d.sysfs_path, p.offset);
        let (above, gap) = ancestors_or_gap(node, d);
        // The GPUs the NIC reaches below a bridge it shares with them (its peers' completers).
        let gpus: Vec<&PciDevice> = pci
            .iter()
            .filter(|g| g.is_nvidia_gpu())
            .filter(|g| {
                let ga = ancestors(node, g);
                ga.iter().any(|b| above.iter().any(|a| a.bdf == b.bdf))
            })
            .collect();
        let mut problems: Vec<(Status, String)> = Vec::new();
        let mut evidence: Vec<(String, String)> = vec![(
            at.clone(),
            format!(
                "MaxPayload {} of {} bytes; ExtTag{} (supported{}); 10BitTagReq{} (supported{}, completer{})",
                p.mps,
                p.mps_supported,
                pm(p.ext_tag),
                pm(p.ext_tag_supported),
                p.tag10_requester_enabled.map(pm).unwrap_or("?"),
                p.tag10_requester.map(pm).unwrap_or("?"),
                p.tag10_completer.map(pm).unwrap_or("?"),
            ),
        )];
        // MaxPayload: a TLP larger than a receiver's MPS is malformed. The NIC's writes cross
        // every bridge above it and land in host memory or, for GPUDirect, in a GPU.
        let mut path_min: Option<(u32, String)> = None;
        let mut unread = Vec::new();
        for b in above.iter().copied().chain(gpus.iter().copied()) {
            match readable(b, 256).ok().and_then(|cs| cs.pcie) {
                Some(bp) => {
                    evidence.push((
                        format!("{}/config", b.sysfs_path),
                        format!(
                            "{} MaxPayload {} bytes (supported {})",
                            b.bdf, bp.mps, bp.mps_supported
                        ),
                    ));
                    if path_min.as_ref().is_none_or(|(m, _)| bp.mps < *m) {
                        path_min = Some((bp.mps, b.bdf.clone()));
                    }
                    if p.tag10_requester_enabled == Some(true)
                        && b.is_nvidia_gpu()
                        && bp.tag10_completer == Some(false)
                    {
                        problems.push((
                            Status::Fail,
                            format!("{} sends 10-bit tags (DevCtl2 10BitTagReq+) but gpu {} is no 10-bit tag completer: its reads of that gpu's memory are requests the gpu may not accept", nic.name, b.bdf),
                        ));
                    }
                }
                None => unread.push(b.bdf.clone()),
            }
        }
        match &path_min {
            Some((m, who)) if p.mps > *m => problems.push((
                Status::Fail,
                format!("{} MaxPayload {} bytes is larger than {} bytes at {who} on its path: larger writes are malformed tlps there (aer MalfTLP) or the kernel's setting was overridden", nic.name, p.mps, m),
            )),
            Some((m, who)) if p.mps < *m && p.mps < p.mps_supported => problems.push((
                Status::Warn,
                format!("{} MaxPayload {} bytes is below its path's {} bytes (lowest at {who}) and its own {}: each write carries less data per tlp header", nic.name, p.mps, m, p.mps_supported),
            )),
            _ => {}
        }
        if p.ext_tag_supported && !p.ext_tag {
            problems.push((
                Status::Warn,
                format!("{} supports extended (8-bit) tags but has them off (DevCtl ExtTag-): at most 32 reads in flight, so reads of gpu memory across a switch lose bandwidth", nic.name),
            ));
        }
        if !unread.is_empty() {
            evidence.push((
                "config space".into(),
                format!("not readable for {}", unread.join(", ")),
            ));
        }
        let mut fin = if let Some(worst) = problems.iter().map(|(s, _)| *s).max() {
            let msg = problems
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            Finding::new(ID, worst, bdf, msg).fix(format!(
                "MaxPayload is set by the kernel from the whole hierarchy (`pci=pcie_bus_safe` for peer-to-peer, `pcie_bus_perf` is not for p2p); read it with `lspci -vvv -s {bdf}` and each bridge above it; extended tags: `setpci -s {bdf} CAP_EXP+8.w=0100:0100`; 10-bit tags: turn the requester off on the nic (`setpci -s {bdf} CAP_EXP+28.w=0000:1000`) unless every completer supports them"
            ))
        } else if let Some(b) = &gap {
            // A bridge on the path is missing from the node's PCI functions: its MaxPayload,
            // maybe the lowest, is unknown (the sweep of 2026-12-07: that bridge's link
            // removed turned the NIC's MaxPayload fail into a pass).
            Finding::new(
                ID,
                Status::Error,
                bdf,
                format!(
                    "cannot judge {}'s path: bridge {b} above it is not among the pci functions (/sys/bus/pci/devices/{b} missing: damaged sysfs?)",
                    nic.name
                ),
            )
        } else if !unread.is_empty() {
            // One hop unread is enough to leave the lowest MaxPayload unknown (the review of
            // 2026-12-07: a switch at 128 bytes, its config space cut to 64 bytes, and the NIC's
            // fail became a pass on the hops that were left).
            Finding::new(
                ID,
                Status::Error,
                bdf,
                format!(
                    "cannot judge {}'s path: the config space of {} above it cannot be read (its MaxPayload, maybe the lowest, is unknown)",
                    nic.name,
                    unread.join(", ")
                ),
            )
        } else {
            Finding::new(
                ID,
                Status::Pass,
                bdf,
                format!(
                    "{} MaxPayload {} bytes fits its path{}; extended tags {}",
                    nic.name,
                    p.mps,
                    path_min
                        .as_ref()
                        .map(|(m, _)| format!(" (lowest {m} bytes)"))
                        .unwrap_or_default(),
                    if p.ext_tag { "on" } else { "not supported" }
                ),
            )
        };
        for (s, o) in evidence {
            fin = fin.evidence(s, o);
        }
        out.push(fin);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::Fact;
    use crate::testing::*;

    /// A config space with a version-2 PCI Express capability at 0x40: DevCap, DevCtl,
    /// DevCap2, DevCtl2 as given.
    fn cfg(vendor: u16, device: u16, kind: u8, regs: (u32, u16, u32, u16)) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0..2].copy_from_slice(&vendor.to_le_bytes());
        c[2..4].copy_from_slice(&device.to_le_bytes());
        c[6] = 0x10;
        let bridge = kind != 0;
        c[0x0b] = if bridge { 0x06 } else { 0x02 };
        c[0x0a] = if bridge { 0x04 } else { 0x07 };
        c[0x0e] = u8::from(bridge);
        c[0x34] = 0x40;
        c[0x40] = 0x10;
        c[0x42..0x44].copy_from_slice(&(0x0002u16 | (u16::from(kind) << 4)).to_le_bytes());
        c[0x44..0x48].copy_from_slice(&regs.0.to_le_bytes());
        c[0x48..0x4a].copy_from_slice(&regs.1.to_le_bytes());
        c[0x64..0x68].copy_from_slice(&regs.2.to_le_bytes());
        c[0x68..0x6a].copy_from_slice(&regs.3.to_le_bytes());
        c
    }

    /// MPS code in DevCtl bits 7:5 (0 = 128, 1 = 256, 2 = 512), ExtTag on, maybe RO.
    fn devctl(mps: u16, ro: bool) -> u16 {
        (mps << 5) | 0x0100 | if ro { 0x10 } else { 0 } | (5 << 12)
    }

    fn node(nic_ctl: u16, bridge_mps: u16, nic_ctl2: u16, gpu_cap2: u32) -> Node {
        let mut n = switch_pair();
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut() {
                let bytes = match d.bdf.as_str() {
                    "0000:19:00.0" => cfg(0x15b3, 0x1021, 0, (0x22, nic_ctl, 3 << 16, nic_ctl2)),
                    "0000:18:00.0" => cfg(0x10de, 0x2335, 0, (0x21, devctl(1, true), gpu_cap2, 0)),
                    "0000:15:01.0" => {
                        cfg(0x10b5, 0x8796, 4, (0x22, devctl(bridge_mps, false), 0, 0))
                    }
                    "0000:16:00.0" => {
                        cfg(0x10b5, 0x8796, 5, (0x22, devctl(bridge_mps, false), 0, 0))
                    }
                    _ => cfg(0x10b5, 0x8796, 6, (0x22, devctl(bridge_mps, false), 0, 0)),
                };
                d.config = known(bytes);
            }
        }
        n
    }

    #[test]
    fn relaxed_ordering_off_fails_on_epyc_warns_elsewhere_passes_on() {
        let mut n = node(devctl(1, false), 1, 0, 1 << 16);
        n.cpu_vendor = known(CpuVendor::Amd);
        n.cpu_model = known("AMD EPYC 9654 96-Core Processor".into());
        let f = relaxed_ordering(&n);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(f[0].message.contains("AMD EPYC"), "{}", f[0].message);
        assert!(f[0]
            .remediation
            .as_deref()
            .unwrap()
            .contains("PCI_WR_ORDERING"));
        n.cpu_vendor = known(CpuVendor::Intel);
        n.cpu_model = known("Intel(R) Xeon(R) Platinum 8480+".into());
        assert_eq!(relaxed_ordering(&n)[0].status, Status::Warn);
        n.cpu_model = known("INTEL(R) XEON(R) PLATINUM 8580".into());
        assert_eq!(
            relaxed_ordering(&n)[0].status,
            Status::Warn,
            "case: not matched"
        );
        n.cpu_model = known("Intel(R) Xeon(R) Platinum 8580".into());
        assert_eq!(relaxed_ordering(&n)[0].status, Status::Fail);
        let on = node(devctl(1, true), 1, 0, 1 << 16);
        let f = relaxed_ordering(&on);
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0].has_evidence());
    }

    #[test]
    fn the_kernel_quirk_root_port_is_a_pass_and_unreadable_config_an_error() {
        let mut n = node(devctl(1, false), 1, 0, 1 << 16);
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == "0000:15:01.0") {
                d.vendor_id = known(0x8086);
                d.device_id = known(0x6f08);
            }
        }
        assert_eq!(relaxed_ordering(&n)[0].status, Status::Pass);
        let mut bare = switch_pair();
        if let Fact::Known { value: pci, .. } = &mut bare.pci {
            for d in pci.iter_mut() {
                d.config = known(vec![0u8; 64]);
            }
        }
        assert_eq!(relaxed_ordering(&bare)[0].status, Status::Error);
        assert_eq!(nic_tlp(&bare)[0].status, Status::Error);
        // One bridge of the path unread, the others fine: the lowest MaxPayload is unknown.
        let mut one = node(devctl(1, true), 1, 0, 1 << 16);
        if let Fact::Known { value: pci, .. } = &mut one.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == "0000:16:00.0") {
                d.config = known(vec![0u8; 64]);
            }
        }
        let f = nic_tlp(&one);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("0000:16:00.0"), "{}", f[0].message);
    }

    #[test]
    fn maxpayload_above_its_path_fails_below_warns_equal_passes() {
        let f = nic_tlp(&node(devctl(2, true), 1, 0, 1 << 16));
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(
            f[0].message
                .contains("MaxPayload 512 bytes is larger than 256"),
            "{}",
            f[0].message
        );
        let g = nic_tlp(&node(devctl(0, true), 1, 0, 1 << 16));
        assert_eq!(g[0].status, Status::Warn, "{g:?}");
        let h = nic_tlp(&node(devctl(1, true), 1, 0, 1 << 16));
        assert_eq!(h[0].status, Status::Pass, "{h:?}");
        assert!(h[0].evidence.len() >= 4, "{h:?}");
    }

    #[test]
    fn ten_bit_tags_toward_a_gpu_that_cannot_complete_them_fail() {
        let f = nic_tlp(&node(devctl(1, true), 1, 1 << 12, 0));
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(f[0].message.contains("10-bit tag"), "{}", f[0].message);
        let ok = nic_tlp(&node(devctl(1, true), 1, 1 << 12, 1 << 16));
        assert_eq!(ok[0].status, Status::Pass, "{ok:?}");
        let ext_off = nic_tlp(&node(devctl(1, true) & !0x0100, 1, 0, 1 << 16));
        assert_eq!(ext_off[0].status, Status::Warn);
    }

    #[test]
    fn xeon_generations_from_model_names() {
        assert_eq!(xeon_generation("Intel(R) Xeon(R) Platinum 8592+"), Some(5));
        assert_eq!(xeon_generation("Intel(R) Xeon(R) Gold 6430"), Some(4));
        assert_eq!(xeon_generation("Intel(R) Xeon(R) 6960P"), None);
        assert_eq!(xeon_generation("Gold"), None);
        assert!(cpu_needs_relaxed_ordering(Some(CpuVendor::Amd), Some("AMD Ryzen 9")).is_none());
    }
}
