//! `kernel.*`: what the kernel log says happened since boot: NVIDIA Xids (classified: drain the
//! node, investigate, or an application's own fault), IOMMU faults naming the device whose DMA
//! was refused, mlx5 health / firmware-fatal events, and the peer-memory client's free-callback
//! errors. Parsing and the Xid table:
//! `crate::klog`.

use crate::klog::{self, Event, XidAction};
use crate::model::{Fact, KernelLog, LogScope, Node, SourceKind};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// The log, or the finding that replaces every other one.
fn log<'a>(id: &str, node: &'a Node) -> Result<(&'a KernelLog, String), Vec<Finding>> {
    match &node.health.kernel_log {
        Fact::Known { value, source } => Ok((value, source.clone())),
        Fact::Absent { source, reason } => {
            let f = if crate::model::is_damaged(reason) {
                // The snapshot holds a kernel log that cannot be read: never a skip.
                Finding::new(id, Status::Error, "node", format!("the recorded kernel log cannot be used: {reason}"))
                    .fix("take the snapshot again (`gdrdoctor snapshot`); a gdrdoctor/kernel-log.txt without its header was damaged after it was written")
            } else if matches!(node.source, SourceKind::Sysroot | SourceKind::HostRoot) {
                // Under --host-root the host's log is often out of the container's reach
                // (journald files, /dev/kmsg behind the device cgroup): skip with what was tried.
                Finding::new(id, Status::Skip, "node", format!("no kernel log: {reason}"))
            } else {
                Finding::new(id, Status::Error, "node", "cannot read the kernel log")
                    .fix("run as root (or with CAP_SYSLOG; `sysctl kernel.dmesg_restrict=0` lets everyone read /dev/kmsg), or make the journal readable (`usermod -aG systemd-journal,adm <user>`)")
            };
            Err(vec![
                f.evidence(source.clone(), format!("unknown ({reason})"))
            ])
        }
    }
}

/// `since boot` / `... (the ring buffer lost the start of this boot)` / `(may predate this boot)`.
fn span(l: &KernelLog) -> &'static str {
    match l.scope {
        LogScope::ThisBoot => "since boot",
        LogScope::ThisBootPartial => "in the part of this boot the log still holds",
        LogScope::Unknown => "in a log that may also hold earlier boots",
        LogScope::Excerpt => "in the pasted kernel log lines",
    }
}

/// No event found: `pass` with what was read, except in pasted lines, where absence proves
/// nothing (`skip`: the paste may be an excerpt or a `grep`).
fn none_found(id: &str, l: &KernelLog, src: String, what: String, observed: String) -> Finding {
    if l.scope == LogScope::Excerpt {
        Finding::new(
            id,
            Status::Skip,
            "node",
            format!(
                "{what} in the {} pasted kernel log line(s); a paste is an excerpt, not proof of none: paste the whole `sudo dmesg`",
                l.scanned
            ),
        )
        .evidence(src, observed)
    } else {
        Finding::new(
            id,
            Status::Pass,
            "node",
            format!("{what} {} ({} kernel log lines read)", span(l), l.scanned),
        )
        .evidence(src, observed)
    }
}

/// Lines for evidence: at most 4, with how many more.
fn lines(ls: &[&str]) -> String {
    let mut s = ls
        .iter()
        .take(4)
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join(" | ");
    if ls.len() > 4 {
        s.push_str(&format!(" | ... {} more", ls.len() - 4));
    }
    s
}

fn when(line: &str) -> String {
    klog::timestamp(line)
        .map(|t| format!(" (first at {t})"))
        .unwrap_or_default()
}

/// A drain finding in a log that may predate this boot is only a warning.
fn scoped(status: Status, l: &KernelLog) -> Status {
    if status == Status::Fail && l.scope == LogScope::Unknown {
        Status::Warn
    } else {
        status
    }
}

/// `gpu 3`, `nic mlx5_2`, or nothing, for a PCI address.
fn who(node: &Node, bdf: &str) -> Option<String> {
    let gpus = crate::derive::gpus(node);
    if let Some(i) = gpus.iter().position(|g| g.bdf == bdf) {
        return Some(format!("gpu {i}"));
    }
    node.rdma.get()?.iter().find_map(|d| match d.pci_bdf.get() {
        Some(Some(b)) if b == bdf => Some(format!("nic {}", d.name)),
        _ => None,
    })
}

/// `gpu (driver nvidia)` or `nic (driver mlx5_core)` when the kernel line is that driver's
/// message about the device `dev` (`nvidia 0000:07:00.0: ...`, the kernel's `dev_printk`
/// prefix: driver name, a space, the device name, a colon).
fn gdr_driver_prefix(line: &str, dev: &str) -> Option<String> {
    let at = line.find(&format!(" {dev}:"))?;
    let driver = line[..at].rsplit([' ', ']', ':']).next()?;
    match driver {
        "nvidia" => Some("gpu (driver nvidia)".to_string()),
        "mlx5_core" | "mlx4_core" | "bnxt_en" | "bnxt_re" | "irdma" | "ice" => {
            Some(format!("nic (driver {driver})"))
        }
        _ => None,
    }
}

pub fn xid(node: &Node) -> Vec<Finding> {
    const ID: &str = "kernel.xid";
    let (l, src) = match log(ID, node) {
        Ok(x) => x,
        Err(v) => return v,
    };
    // GPU -> (xid, detail, line) in log order.
    let mut by: BTreeMap<String, Vec<(u32, String, &str)>> = BTreeMap::new();
    let mut fell: BTreeMap<String, &str> = BTreeMap::new();
    let mut cut: BTreeMap<String, (String, &str)> = BTreeMap::new();
    for line in &l.lines {
        match klog::parse_line(line) {
            Some(Event::Xid { gpu, xid, detail }) => {
                by.entry(gpu).or_default().push((xid, detail, line))
            }
            Some(Event::XidCut { gpu, shown }) => {
                cut.entry(gpu).or_insert((shown, line));
            }
            Some(Event::FellOffBus { gpu }) => {
                fell.entry(gpu).or_insert(line);
            }
            _ => {}
        }
    }
    // Drivers that print only "has fallen off the bus": count it as Xid 79.
    for (gpu, line) in fell {
        let v = by.entry(gpu).or_default();
        if !v.iter().any(|(x, _, _)| *x == 79) {
            v.push((79, "GPU has fallen off the bus".into(), line));
        }
    }
    // An Xid line cut after its number: which Xid is unknown (an error, never "no Xid").
    let mut out: Vec<Finding> = cut
        .into_iter()
        .map(|(gpu, (shown, line))| {
            Finding::new(
                ID,
                Status::Error,
                &gpu,
                format!("{gpu}: an Xid line ends right after its number `{shown}` (the driver always writes more after it): the line is cut, the Xid unknown ({shown} or a longer number)"),
            )
            .evidence(src.clone(), line.trim().to_string())
            .fix("paste the whole line (`sudo dmesg | grep -i xid`, inside a ``` code block)")
        })
        .collect();
    if by.is_empty() {
        if out.is_empty() {
            out.push(none_found(
                ID,
                l,
                src,
                "no Xid".into(),
                format!("{} lines, none with `NVRM: Xid`", l.scanned),
            ));
        }
        return out;
    }
    for (gpu, evs) in by {
        let mut counts: BTreeMap<u32, (usize, XidAction, &str)> = BTreeMap::new();
        for (x, d, line) in &evs {
            let a = klog::action(*x, d);
            let e = counts.entry(*x).or_insert((0, a, line));
            e.0 += 1;
            if a > e.1 {
                e.1 = a;
            }
        }
        let worst = counts
            .values()
            .map(|c| c.1)
            .max()
            .unwrap_or(XidAction::Investigate);
        let status = scoped(
            match worst {
                XidAction::DrainReboot | XidAction::DrainResetGpu => Status::Fail,
                XidAction::Investigate => Status::Warn,
                XidAction::Application => Status::Pass,
            },
            l,
        );
        let summary: Vec<String> = counts
            .iter()
            .map(|(x, (n, a, _))| {
                let info = klog::xid_info(*x);
                let times = if *n > 1 {
                    format!(" x{n}")
                } else {
                    String::new()
                };
                format!("Xid {x}{times} ({}; {})", info.meaning, a.as_str())
            })
            .collect();
        let name = who(node, &gpu).map(|w| format!("{w} ")).unwrap_or_default();
        let first_bad = counts
            .iter()
            .filter(|(_, c)| c.1 == worst)
            .map(|(x, c)| (*x, c.2))
            .next();
        let mut msg = format!("{name}{gpu}: {} {}", summary.join(", "), span(l));
        if let Some((_, line)) = first_bad {
            msg.push_str(&when(line));
        }
        if l.scope == LogScope::Unknown && worst.is_drain() {
            msg.push_str("; the log may predate this boot: confirm with `dmesg`");
        }
        let ls: Vec<&str> = evs.iter().map(|(_, _, line)| *line).collect();
        let mut f = Finding::new(ID, status, &gpu, msg).expected(
            src.clone(),
            lines(&ls),
            "no Xid that asks to drain the node",
        );
        if status != Status::Pass {
            let fix = first_bad.map(|(x, _)| klog::xid_info(x).fix).unwrap_or(
                "look the Xid up in NVIDIA's catalog (docs.nvidia.com/deploy/xid-errors)",
            );
            f = f.fix(fix.to_string());
        }
        out.push(f);
    }
    out
}

pub fn iommu_fault(node: &Node) -> Vec<Finding> {
    const ID: &str = "kernel.iommu-fault";
    let (l, src) = match log(ID, node) {
        Ok(x) => x,
        Err(v) => return v,
    };
    let mut by: BTreeMap<String, Vec<(&'static str, String, &str)>> = BTreeMap::new();
    for line in &l.lines {
        if let Some(Event::IommuFault {
            device,
            unit,
            detail,
        }) = klog::parse_line(line)
        {
            by.entry(device).or_default().push((unit, detail, line));
        }
    }
    if by.is_empty() {
        return vec![none_found(
            ID,
            l,
            src,
            "no IOMMU fault".into(),
            format!(
                "{} lines, none with `DMAR: [DMA` or `AMD-Vi: Event logged`",
                l.scanned
            ),
        )];
    }
    let mut out = Vec::new();
    for (dev, evs) in by {
        // The node's own lists first; else the driver that printed the line (`nvidia
        // 0000:07:00.0: AMD-Vi: ...`): a paste of the log alone still names a GPU or a NIC.
        let name = who(node, &dev).or_else(|| {
            evs.iter()
                .find_map(|(_, _, line)| gdr_driver_prefix(line, &dev))
        });
        let gdr_device = name.is_some();
        let status = scoped(
            if gdr_device {
                Status::Fail
            } else {
                Status::Warn
            },
            l,
        );
        let (unit, detail, first) = &evs[0];
        let ls: Vec<&str> = evs.iter().map(|(_, _, line)| *line).collect();
        let label = name
            .map(|n| format!("{n} ({dev})"))
            .unwrap_or_else(|| dev.clone());
        let msg = format!(
            "{} {unit} fault{} on {label} {}{}: the IOMMU refused the device's DMA ({detail}){}",
            evs.len(),
            if evs.len() > 1 { "s" } else { "" },
            span(l),
            when(first),
            if gdr_device {
                "; with GPUDirect RDMA this is peer traffic to an address the IOMMU does not map, and the transfer fails or hangs"
            } else {
                ""
            }
        );
        out.push(
            Finding::new(ID, status, &dev, msg)
                .expected(src.clone(), lines(&ls), "no IOMMU fault")
                .fix("see iommu.mode: for GPUDirect RDMA on bare metal put the IOMMU in passthrough (`iommu=pt`, with `intel_iommu=on` or `amd_iommu=on` as needed) or turn it off; with a translating IOMMU keep DmaRemapPeerMmio=1 and use dma-buf so peer MMIO is mapped; faults during a job that was killed can be stale: compare the time with the job"),
        );
    }
    out
}

pub fn mlx5_health(node: &Node) -> Vec<Finding> {
    const ID: &str = "kernel.mlx5-health";
    let (l, src) = match log(ID, node) {
        Ok(x) => x,
        Err(v) => return v,
    };
    let mut by: BTreeMap<String, Vec<(klog::Mlx5Kind, String, &str)>> = BTreeMap::new();
    for line in &l.lines {
        if let Some(Event::Mlx5 {
            device,
            kind,
            detail,
        }) = klog::parse_line(line)
        {
            by.entry(device).or_default().push((kind, detail, line));
        }
    }
    if by.is_empty() {
        return vec![none_found(
            ID,
            l,
            src,
            "no mlx5 health or firmware-fatal event".into(),
            format!("{} lines, none from mlx5_core health", l.scanned),
        )];
    }
    let mut out = Vec::new();
    for (dev, evs) in by {
        let fatal = evs.iter().any(|(k, _, _)| k.is_fatal());
        let status = scoped(if fatal { Status::Fail } else { Status::Warn }, l);
        let mut kinds: Vec<klog::Mlx5Kind> = evs.iter().map(|(k, _, _)| *k).collect();
        kinds.sort();
        kinds.dedup();
        let what: Vec<String> = kinds.iter().map(|k| k.describe()).collect();
        let first = evs
            .iter()
            .find(|(k, _, _)| k.is_fatal() == fatal)
            .map(|(_, _, l)| *l)
            .unwrap_or(evs[0].2);
        let label = who(node, &dev)
            .map(|n| format!("{n} ({dev})"))
            .unwrap_or_else(|| dev.clone());
        let msg = format!(
            "{label}: {} {}{}{}",
            what.join(", "),
            span(l),
            when(first),
            if fatal {
                ": the NIC's firmware or PCIe link failed; RDMA on it stopped (and a recovery, if any, reset every QP)"
            } else {
                ": the NIC was reset or stalled; jobs using it lost their connections"
            }
        );
        let ls: Vec<&str> = evs.iter().map(|(_, _, line)| *line).collect();
        out.push(
            Finding::new(ID, status, &dev, msg)
                .expected(src.clone(), lines(&ls), "no mlx5 health event")
                .fix("drain the node's jobs from this NIC; collect `devlink health show` and `devlink health dump show pci/<bdf> reporter fw_fatal`, then reset it (`mlxfwreset -d <bdf> reset`) or reboot; check its PCIe link (counters.aer) and firmware (rdma.firmware); if it recurs, update the firmware or replace the card"),
        );
    }
    out
}

/// `kernel.peermem`: the peer-memory client's free callback complaining (`nvidia-peermem
/// nv_get_p2p_free_callback ... invalid context`, `nv_get_p2p_free_callback -- invalid
/// page_table`): GPU memory was freed while a NIC still had it registered.
pub fn peermem(node: &Node) -> Vec<Finding> {
    const ID: &str = "kernel.peermem";
    let (l, src) = match log(ID, node) {
        Ok(x) => x,
        Err(v) => return v,
    };
    let mut by: BTreeMap<klog::PeerMemKind, Vec<&str>> = BTreeMap::new();
    for line in &l.lines {
        if let Some(Event::PeerMemCallback { kind, .. }) = klog::parse_line(line) {
            by.entry(kind).or_default().push(line);
        }
    }
    if by.is_empty() {
        return vec![none_found(
            ID,
            l,
            src,
            "no peer-memory callback error".into(),
            format!("{} lines, none from nv_get_p2p_free_callback", l.scanned),
        )];
    }
    let mut out = Vec::new();
    for (kind, ls) in by {
        let last = ls
            .last()
            .and_then(|x| klog::timestamp(x))
            .map(|t| format!(", last at {t}"))
            .unwrap_or_default();
        let (msg, fix) = match kind {
            klog::PeerMemKind::InvalidContext => (
                format!(
                    "the peer-memory client's free callback found an invalid context {} time(s) {}{}{last}: GPU memory was freed while an RDMA NIC still had it registered through nvidia-peermem; seen when a job frees or exits before deregistering, and reported alongside unstable training jobs",
                    ls.len(),
                    span(l),
                    when(ls[0])
                ),
                "compare the times with the jobs that ran then: a job should deregister its memory regions (`ibv_dereg_mr`) before freeing the GPU buffers; move GPUDirect RDMA to dma-buf (NVIDIA open kernel modules, kernel >= 5.12, NCCL >= 2.13), which does not go through nvidia-peermem; if it recurs with no job running, update the NVIDIA driver",
            ),
            klog::PeerMemKind::InvalidPages => {
                // A driver bug fixed in R510 printed it; on a newer driver it is the race
                // between the invalidation and the MR's teardown.
                let branch = crate::derive::nvidia_driver(node)
                    .and_then(|(v, _)| v.split('.').next().and_then(|m| m.parse::<u32>().ok()));
                let (cause, fix) = if branch.is_none_or(|b| b < 510) {
                    (
                        "a known NVIDIA driver bug when GPU memory is freed while registered (fixed in R510, and in R470 from mid-2021), or a race between the invalidation and the memory region's teardown",
                        "update the NVIDIA driver (R510 or later; R470 releases from mid-2021 on) and rebuild the peer-memory module against it, or move to dma-buf (open kernel modules, kernel >= 5.12); until then, compare the times with the jobs that freed GPU memory while it was registered",
                    )
                } else {
                    (
                        "GPU memory was freed while a NIC had it registered and the invalidation met the memory region's teardown (the older driver bug behind this line was fixed in R510; this driver is newer)",
                        "compare the times with the jobs that ran then: a job should deregister its memory regions (`ibv_dereg_mr`) before freeing the GPU buffers; move GPUDirect RDMA to dma-buf (open kernel modules, kernel >= 5.12, NCCL >= 2.13), which does not go through the peer-memory client",
                    )
                };
                (
                    format!(
                        "the peer-memory client's free callback found released pages {} time(s) {}{}{last}: {cause}; the NIC may have kept a stale mapping of GPU memory",
                        ls.len(),
                        span(l),
                        when(ls[0])
                    ),
                    fix,
                )
            }
        };
        out.push(
            Finding::new(ID, Status::Warn, "node", msg)
                .expected(src.clone(), lines(&ls), "no peer-memory callback error")
                .fix(fix),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::empty_node;

    fn with_log(lines: &[&str], scope: LogScope) -> Node {
        let mut n = empty_node();
        n.health.kernel_log = Fact::known(
            KernelLog {
                origin: "/dev/kmsg".into(),
                scope,
                scanned: 1000,
                lines: lines.iter().map(|s| s.to_string()).collect(),
            },
            "/dev/kmsg",
        );
        n
    }

    #[test]
    fn xid_79_fails_and_app_xids_pass() {
        let n = with_log(
            &[
                "[  100.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python, Graphics Exception",
                "[  200.000000] NVRM: Xid (PCI:0000:48:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            ],
            LogScope::ThisBoot,
        );
        let f = xid(&n);
        assert_eq!(f.len(), 2);
        let g0 = f.iter().find(|f| f.subject == "0000:18:00.0").unwrap();
        assert_eq!(g0.status, Status::Pass);
        let g3 = f.iter().find(|f| f.subject == "0000:48:00.0").unwrap();
        assert_eq!(g3.status, Status::Fail);
        assert!(
            g3.message
                .contains("Xid 79 (GPU has fallen off the bus; drain: reboot the node)"),
            "{}",
            g3.message
        );
        assert!(
            g3.message.contains("first at 200.000 s after boot"),
            "{}",
            g3.message
        );
        assert!(g3.remediation.as_deref().unwrap().contains("reboot"));
    }

    #[test]
    fn a_pasted_excerpt_judges_what_it_shows_and_proves_no_absence() {
        let n = with_log(
            &["[ 1843.3] NVRM: Xid (PCI:0000:48:00): 79, pid=1, GPU has fallen off the bus."],
            LogScope::Excerpt,
        );
        assert_eq!(xid(&n)[0].status, Status::Fail);
        let f = iommu_fault(&n);
        assert_eq!(f[0].status, Status::Skip);
        assert!(
            f[0].message.contains("not proof of none"),
            "{}",
            f[0].message
        );
        assert_eq!(mlx5_health(&n)[0].status, Status::Skip);
    }

    #[test]
    fn an_old_log_downgrades_drain_to_warn() {
        let n = with_log(
            &["Sep 1 00:00:00 h kernel: NVRM: Xid (PCI:0000:48:00): 79, x"],
            LogScope::Unknown,
        );
        assert_eq!(xid(&n)[0].status, Status::Warn);
    }

    #[test]
    fn a_missing_log_is_an_error_live_and_a_skip_in_a_sysroot() {
        let mut n = empty_node();
        n.source = SourceKind::Live;
        n.health.kernel_log = Fact::absent("/dev/kmsg", "permission denied");
        assert_eq!(xid(&n)[0].status, Status::Error);
        n.source = SourceKind::Sysroot;
        assert_eq!(iommu_fault(&n)[0].status, Status::Skip);
        // There but damaged (no header, unreadable): an error, never a skip.
        n.health.kernel_log = Fact::absent(
            "/gdrdoctor/kernel-log.txt",
            format!("{}no `# scope:` header", crate::model::DAMAGED),
        );
        for f in [xid(&n), iommu_fault(&n), mlx5_health(&n)] {
            assert_eq!(f[0].status, Status::Error, "{f:?}");
        }
    }

    #[test]
    fn a_fault_the_nvidia_driver_printed_is_a_gpus_even_in_a_log_alone() {
        // realdata cuda-samples-48: the node is not in the paste, the driver prefix names it.
        let n = with_log(
            &[
                "Sep 21 09:59:59 runtime kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0003 address=0x80000040 flags=0x0020]",
                "Sep 21 09:59:59 runtime kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0003 address=0x9e139068 flags=0x0020]",
                "Sep 21 09:59:59 runtime kernel: igb 0000:02:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0004 address=0x1000 flags=0x0020]",
            ],
            LogScope::ThisBoot,
        );
        let f = iommu_fault(&n);
        assert_eq!(f.len(), 2, "{f:?}");
        let gpu = f.iter().find(|x| x.subject == "0000:07:00.0").unwrap();
        assert_eq!(gpu.status, Status::Fail, "{gpu:?}");
        assert!(
            gpu.message.contains("gpu (driver nvidia)"),
            "{}",
            gpu.message
        );
        // Another driver's device: not one GDR uses, a warning as before.
        let other = f.iter().find(|x| x.subject == "0000:02:00.0").unwrap();
        assert_eq!(other.status, Status::Warn);
        assert_eq!(
            gdr_driver_prefix("[ 12.3] mlx5_core 0000:39:00.0: AMD-Vi: x", "0000:39:00.0"),
            Some("nic (driver mlx5_core)".into())
        );
        assert_eq!(
            gdr_driver_prefix("xnvidia 0000:07:00.0: y", "0000:07:00.0"),
            None
        );
    }

    #[test]
    fn faults_and_health_events_group_by_device() {
        let n = with_log(
            &[
                "DMAR: [DMA Write NO_PASID] Request device [39:00.0] fault addr 0x2c000000000 [fault reason 0x05] PTE Write access is not set",
                "DMAR: [DMA Write NO_PASID] Request device [39:00.0] fault addr 0x2c000001000 [fault reason 0x05] PTE Write access is not set",
                "mlx5_core 0000:39:00.0: poll_health:800:(pid 0): Fatal error 1 detected",
                "mlx5_core 0000:39:00.0: mlx5_health_try_recover:326:(pid 1): health recovery succeeded",
            ],
            LogScope::ThisBoot,
        );
        let f = iommu_fault(&n);
        assert_eq!(f.len(), 1);
        // Not a known GPU or NIC on this test node: a warning.
        assert_eq!(f[0].status, Status::Warn);
        assert!(
            f[0].message.starts_with("2 DMAR faults on 0000:39:00.0"),
            "{}",
            f[0].message
        );
        let m = mlx5_health(&n);
        assert_eq!(m[0].status, Status::Fail);
        assert!(
            m[0].message
                .contains("fatal error 1 (PCI communication lost)"),
            "{}",
            m[0].message
        );
    }

    #[test]
    fn peermem_callback_errors_warn_with_their_times_and_fix() {
        let n = with_log(
            &[
                "[25033.266922] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
                "[25033.280589] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
                "[25040.000000] nv_mem nv_get_p2p_free_callback:144 nv_get_p2p_free_callback -- invalid page_table",
                "[25050.000000] nvidia_peermem: loading out-of-tree module taints kernel.",
            ],
            LogScope::ThisBoot,
        );
        let f = peermem(&n);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|x| x.status == Status::Warn));
        assert!(
            f[0].message.contains("invalid context 2 time(s)"),
            "{}",
            f[0].message
        );
        assert!(
            f[0].message.contains("first at 25033.267 s after boot")
                && f[0].message.contains("last at 25033.281 s after boot"),
            "{}",
            f[0].message
        );
        assert!(f[0]
            .remediation
            .as_deref()
            .unwrap()
            .contains("ibv_dereg_mr"));
        assert!(f[1].message.contains("fixed in R510"), "{}", f[1].message);
        // No driver version known: the update is the first fix; on an R580 node it is not.
        assert!(f[1]
            .remediation
            .as_deref()
            .unwrap()
            .starts_with("update the NVIDIA driver"));
        let mut n = with_log(
            &["[1.0] nvidia-peermem nv_get_p2p_free_callback:150 ERROR nv_get_p2p_free_callback -- invalid dma_mapping"],
            LogScope::ThisBoot,
        );
        n.nvidia.version_file = Fact::known(
            Some("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build".into()),
            "/proc/driver/nvidia/version",
        );
        let f = peermem(&n);
        assert_eq!(f.len(), 1);
        let fix = f[0].remediation.as_deref().unwrap();
        assert!(!fix.contains("R510"), "{fix}");
        assert!(fix.contains("ibv_dereg_mr"), "{fix}");
        // None: a pass that says what was read; none in a paste: a skip.
        let n = with_log(
            &["[1.0] nvidia_peermem: loading out-of-tree module taints kernel."],
            LogScope::ThisBoot,
        );
        let f = peermem(&n);
        assert_eq!((f.len(), f[0].status), (1, Status::Pass));
        let n = with_log(&["[1.0] something"], LogScope::Excerpt);
        assert_eq!(peermem(&n)[0].status, Status::Skip);
        // A load failure is kmod.nvidia-peermem's, not this check's.
        let n = with_log(
            &["[1.0] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)"],
            LogScope::ThisBoot,
        );
        assert_eq!(peermem(&n)[0].status, Status::Pass);
    }
}
