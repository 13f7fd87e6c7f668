//! The verdict of `probe --doorbell`: findings from the worker's record, a pure function
//! (replayed from saved reports by the tests).

use super::{DoorbellOutput, FlavourResult, LayoutResult, Mlx5Result, Record};
use crate::probe::common;
use gdrdoctor_checks::report::{Finding, Status};

/// Findings from one doorbell run: what went wrong around the worker, else [`findings`].
pub fn record_findings(r: &Record) -> Vec<Finding> {
    let mut out = common::problem_findings(r, |e| {
        common::worker_error_finding("the doorbell probe could not run", e)
    });
    if let (Some(d), None) = (&r.output, &r.problem) {
        out.extend(findings(d));
    }
    out
}

/// Store flavours whose memory-model semantics put the payload before the doorbell (a release
/// store, or a system fence before the store). `st.mmio.relaxed.sys` is relaxed: it needs a
/// fence of its own before it, as do the weak stores.
fn ordered(flavour: &str) -> bool {
    flavour.starts_with("st.release") || flavour.starts_with("__threadfence")
}

/// Findings from one worker's output (pure: the tests feed it constructed outputs).
pub fn findings(d: &DoorbellOutput) -> Vec<Finding> {
    let subject = if d.gpu.is_empty() {
        "gpu".to_string()
    } else {
        d.gpu.to_lowercase()
    };
    let mut out = vec![layout_finding(d, &subject), latency_finding(d, &subject)];
    // The real NIC.
    if d.mlx5.is_empty() {
        let why = d
            .mlx5_skipped
            .clone()
            .unwrap_or_else(|| "no mlx5 device".into());
        out.push(Finding::new(
            "probe.doorbell-mlx5",
            Status::Skip,
            "node",
            format!("no real doorbell checked: {why}"),
        ));
    }
    for r in &d.mlx5 {
        out.push(mlx5_finding(r));
    }
    out
}

/// `probe.doorbell-layout`: the GPU rang every layout's doorbell at the offset the mlx5
/// formula gives, and wrote nowhere else.
fn layout_finding(d: &DoorbellOutput, subject: &str) -> Finding {
    let bad: Vec<&LayoutResult> = d.layouts.iter().filter(|l| !l.ok).collect();
    let mut f = if d.layouts.is_empty() {
        Finding::new(
            "probe.doorbell-layout",
            Status::Error,
            subject,
            "the worker rang no layouts",
        )
    } else if bad.is_empty() && d.stray_writes.is_empty() {
        Finding::new(
            "probe.doorbell-layout",
            Status::Pass,
            subject,
            format!("the GPU rang {} doorbell layouts (4 KiB and 64 KiB pages, BlueFlame alternation, DBR-less) at the offsets the mlx5 formula gives, and wrote nowhere else", d.layouts.len()),
        )
    } else {
        Finding::new(
            "probe.doorbell-layout",
            Status::Fail,
            subject,
            format!(
                "{} of {} layouts missed their doorbell, {} stray writes in the emulated BAR: the GPU's address arithmetic differs from BAR0 + page_id * unit + offset",
                bad.len(),
                d.layouts.len(),
                d.stray_writes.len()
            ),
        )
        .fix("see docs/guides/doorbell.md: the unit is 4 KiB only when the HCA uses 4 KiB UARs; reg_addr - base_addr is taken modulo 4096 when page_id already names the 4 KiB UAR")
    };
    for l in &d.layouts {
        f = f.evidence(
            &l.name,
            format!(
                "BAR0 + 0x{:x}{} {}",
                l.expected_offset,
                l.alternate_offset
                    .map(|a| format!(" / 0x{a:x}"))
                    .unwrap_or_default(),
                if l.ok { "ok" } else { "MISSED" }
            ),
        );
    }
    if !d.stray_writes.is_empty() {
        let s: Vec<String> = d
            .stray_writes
            .iter()
            .take(8)
            .map(|w| format!("0x{w:x}"))
            .collect();
        f = f.evidence("stray writes at", s.join(", "));
    }
    f
}

/// `probe.doorbell-latency`: how long a doorbell store takes to reach the host per store
/// flavour, and whether the payload was visible when the doorbell was.
fn latency_finding(d: &DoorbellOutput, subject: &str) -> Finding {
    if d.flavours.is_empty() {
        return Finding::new(
            "probe.doorbell-latency",
            Status::Error,
            subject,
            "no store flavour was measured",
        );
    }
    let floor = d.flavours.iter().find(|f| f.flavour.starts_with("floor"));
    let ordered_late: Vec<&FlavourResult> = d
        .flavours
        .iter()
        .filter(|f| f.payload_late > 0 && ordered(&f.flavour))
        .collect();
    let weak_late: Vec<&FlavourResult> = d
        .flavours
        .iter()
        .filter(|f| f.payload_late > 0 && !ordered_late.iter().any(|o| o.flavour == f.flavour))
        .collect();
    let best = d
        .flavours
        .iter()
        .filter(|f| f.payload_late == 0 && ordered(&f.flavour))
        .min_by(|a, b| a.rtt_p50_ns.total_cmp(&b.rtt_p50_ns));
    let rings = d.flavours.iter().map(|f| f.rings).min().unwrap_or(0);
    let summary = format!(
        "gpu doorbell write -> host sees it: {} ~{:.0} ns one way (round trip p50 {:.0} ns, floor ping-pong RTT/2 = {:.0} ns) over {rings} rings",
        best.map(|b| b.flavour.as_str()).unwrap_or("no ordered flavour"),
        best.map(|b| (b.rtt_p50_ns - floor.map(|f| f.rtt_p50_ns / 2.0).unwrap_or(0.0)).max(0.0)).unwrap_or(0.0),
        best.map(|b| b.rtt_p50_ns).unwrap_or(0.0),
        floor.map(|f| f.rtt_p50_ns / 2.0).unwrap_or(0.0),
    );
    let mut f = if !ordered_late.is_empty() {
        Finding::new(
            "probe.doorbell-latency",
            Status::Fail,
            subject,
            format!(
                "{}: the payload was not visible when the doorbell was, with a release/fenced store ({} rings)",
                ordered_late.iter().map(|f| f.flavour.as_str()).collect::<Vec<_>>().join(", "),
                ordered_late.iter().map(|f| f.payload_late).sum::<usize>()
            ),
        )
        .fix("the host-mapped path reorders release stores: check `dmesg` for PCIe errors and whether the GPU sits behind a switch with relaxed ordering forced on (see docs/guides/doorbell.md)")
    } else if !weak_late.is_empty() {
        Finding::new("probe.doorbell-latency", Status::Warn, subject, format!(
            "{summary}; weak stores let the doorbell overtake the payload in {} rings ({}): ring doorbells with st.release.sys, or a system fence before st.mmio",
            weak_late.iter().map(|f| f.payload_late).sum::<usize>(),
            weak_late.iter().map(|f| f.flavour.as_str()).collect::<Vec<_>>().join(", ")
        ))
        .fix("write the WQE, then ring the doorbell with st.release.sys (or st.mmio.relaxed.sys after a fence.sc.sys / __threadfence_system()), never a plain st.global")
    } else {
        Finding::new("probe.doorbell-latency", Status::Pass, subject, summary)
    };
    for fl in &d.flavours {
        f = f.evidence(
            &fl.flavour,
            format!(
                "p50 {:.0} ns, p99 {:.0} ns round trip{}{}{}",
                fl.rtt_p50_ns,
                fl.rtt_p99_ns,
                match floor {
                    Some(fl0) if !fl.flavour.starts_with("floor") => format!(
                        " (one way ~{:.0} ns)",
                        (fl.rtt_p50_ns - fl0.rtt_p50_ns / 2.0).max(0.0)
                    ),
                    _ => String::new(),
                },
                if fl.flavour.starts_with("floor") {
                    String::new()
                } else {
                    format!(", payload late in {}", fl.payload_late)
                },
                if fl.native {
                    ""
                } else {
                    " (no st.mmio in this PTX: ran st.release.sys)"
                }
            ),
        );
    }
    f
}

/// `probe.doorbell-mlx5`: a real NIC's UAR doorbell, its address and the GPU's mapping.
fn mlx5_finding(r: &Mlx5Result) -> Finding {
    let subject = r.device.clone();
    let mut f = if let Some(e) = &r.error {
        let f = Finding::new("probe.doorbell-mlx5", Status::Error, &subject, e.clone());
        if e.starts_with("mlx5dv_devx_alloc_uar") {
            f.fix("mlx5dv_devx_alloc_uar needs DEVX: a recent MLNX_OFED or upstream rdma-core with the mlx5_ib module; check `ibv_devinfo -v` and `dmesg`")
        } else if e.starts_with("BAR0") {
            f.fix("check that /sys/bus/pci/devices/<nic>/resource exists and is readable (`cat` it), and run as root (`sudo gdrdoctor probe --doorbell`); inside a container the host's sysfs must be visible")
        } else {
            f.fix("`ibv_devinfo -d <device>` must open it: check /dev/infiniband permissions and that mlx5_ib is loaded")
        }
    } else if !r.issues.is_empty() {
        Finding::new("probe.doorbell-mlx5", Status::Fail, &subject, format!("doorbell address check failed: {}", r.issues.join("; ")))
            .fix("compute the doorbell as BAR0 + page_id * unit + (reg_addr - base_addr) % 4096; see docs/guides/doorbell.md")
    } else if !r.gpu_map_ok {
        Finding::new(
            "probe.doorbell-mlx5",
            Status::Fail,
            &subject,
            format!("doorbell address correct but the GPU cannot map it: {}", r.gpu_map.clone().unwrap_or_default()),
        )
        .fix("add PeerMappingOverride=1 to the driver's registry (`options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` in /etc/modprobe.d, then reload the driver) or run with CAP_SYS_ADMIN")
    } else {
        Finding::new(
            "probe.doorbell-mlx5",
            Status::Pass,
            &subject,
            format!(
                "{} UAR doorbell at 0x{:x} inside BAR0, at a register offset, {}",
                r.uar_type,
                r.doorbell_phys.unwrap_or(0),
                r.gpu_map.clone().unwrap_or_default()
            ),
        )
    };
    if let Some(p) = &r.pci {
        f = f.evidence("pci", p.clone());
    }
    if let (Some(pid), Some(off)) = (r.page_id, r.reg_offset) {
        f = f.evidence(
            "page_id / reg_addr - base_addr",
            format!("{pid} / 0x{off:x}"),
        );
    }
    if let Some((b, s)) = r.bar0_resource {
        f = f.evidence("BAR0 (sysfs resource)", format!("0x{b:x} size 0x{s:x}"));
    }
    if let Some(b) = r.bar0_config {
        f = f.evidence("BAR0 (config space)", format!("0x{b:x}"));
    }
    if let Some((b, s)) = r.bar0_lspci {
        f = f.evidence("BAR0 (saved lspci -vv)", format!("0x{b:x} size 0x{s:x}"));
    }
    for t in &r.trap_addresses {
        f = f.evidence("a classic mistake would compute", t.clone());
    }
    if let Some(w) = &r.mmio_write {
        if w.contains("failed") && f.status == Status::Pass {
            f.status = Status::Fail;
            f.message = format!("doorbell address correct and mapped, but {w}");
            f = f.fix("check `dmesg` for Xid 13/31 (GPU MMU fault) and AER errors on the NIC; the NIC BAR may be behind an IOMMU or an ACS-redirecting switch");
        }
        f = f.evidence("--allow-mmio-write", w.clone());
    }
    f
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::probe::doorbell::{Mlx5Result, FLAVOURS};
    use gdrdoctor_checks::doorbell as db;

    fn sample() -> DoorbellOutput {
        DoorbellOutput {
            gpu: "0000:18:00.0".into(),
            layouts: db::emulated_layouts()
                .iter()
                .map(|(n, u, _)| LayoutResult {
                    name: n.to_string(),
                    expected_offset: u.doorbell_phys(),
                    alternate_offset: None,
                    ok: true,
                })
                .collect(),
            flavours: FLAVOURS
                .iter()
                .map(|(n, _)| FlavourResult {
                    flavour: n.to_string(),
                    rings: 10_000,
                    rtt_p50_ns: 1500.0,
                    rtt_p99_ns: 2000.0,
                    payload_late: 0,
                    native: true,
                })
                .collect(),
            mlx5_skipped: Some("no mlx5 RDMA device".into()),
            ..Default::default()
        }
    }

    fn status(f: &[Finding], id: &str) -> Status {
        f.iter().find(|x| x.id == id).map(|x| x.status).unwrap()
    }

    #[test]
    fn healthy_output_passes_and_skips_mlx5() {
        let f = findings(&sample());
        assert_eq!(status(&f, "probe.doorbell-layout"), Status::Pass);
        assert_eq!(status(&f, "probe.doorbell-latency"), Status::Pass);
        assert_eq!(status(&f, "probe.doorbell-mlx5"), Status::Skip);
    }

    #[test]
    fn missed_layout_stray_write_and_late_payload_are_caught() {
        let mut d = sample();
        d.layouts[3].ok = false;
        d.stray_writes.push(0x10800);
        let f = findings(&d);
        assert_eq!(status(&f, "probe.doorbell-layout"), Status::Fail);
        let mut d = sample();
        d.flavours[1].payload_late = 3; // st.global weak
        assert_eq!(
            status(&findings(&d), "probe.doorbell-latency"),
            Status::Warn
        );
        d.flavours[3].payload_late = 1; // st.release.sys
        assert_eq!(
            status(&findings(&d), "probe.doorbell-latency"),
            Status::Fail
        );
    }

    #[test]
    fn mlx5_results_map_to_statuses() {
        let mut d = sample();
        let ok = Mlx5Result {
            device: "mlx5_0".into(),
            uar_type: "NonCached".into(),
            doorbell_phys: Some(0x1000_0800),
            gpu_map_ok: true,
            gpu_map: Some("mapped".into()),
            ..Default::default()
        };
        d.mlx5 = vec![
            ok.clone(),
            Mlx5Result {
                device: "mlx5_1".into(),
                issues: vec!["outside-bar0: x".into()],
                ..ok.clone()
            },
            Mlx5Result {
                device: "mlx5_2".into(),
                gpu_map_ok: false,
                gpu_map: Some("CUDA_ERROR_NOT_PERMITTED".into()),
                ..ok.clone()
            },
            Mlx5Result {
                device: "mlx5_3".into(),
                error: Some("mlx5dv_devx_alloc_uar: EOPNOTSUPP".into()),
                ..ok
            },
        ];
        let f: Vec<(String, Status)> = findings(&d)
            .into_iter()
            .filter(|f| f.id == "probe.doorbell-mlx5")
            .map(|f| (f.subject, f.status))
            .collect();
        assert_eq!(
            f,
            vec![
                ("mlx5_0".into(), Status::Pass),
                ("mlx5_1".into(), Status::Fail),
                ("mlx5_2".into(), Status::Fail),
                ("mlx5_3".into(), Status::Error)
            ]
        );
        assert!(findings(&d)
            .iter()
            .find(|f| f.subject == "mlx5_2")
            .unwrap()
            .remediation
            .as_deref()
            .unwrap_or("")
            .contains("PeerMappingOverride"));
    }
}
