//! The verdict of `probe --p2p`: findings from the worker's record and the node's links, a pure
//! function (replayed from saved reports by the tests).

use super::{AllAtOnce, GpuLinks, P2pOutput, Record};
use crate::probe::common;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};

/// Findings from one p2p run: what went wrong around the worker, else [`findings`].
pub fn record_findings(node: &Node, r: &Record) -> Vec<Finding> {
    let mut out = common::problem_findings(r, |e| {
        common::worker_error_finding("the p2p probe could not run", e)
    });
    if let (Some(o), None) = (&r.output, &r.problem) {
        out.extend(findings(node, o));
    }
    out
}

/// A pair's theoretical one-direction rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// GB/s (1e9 bytes/s), one direction.
    pub gbps: f64,
    /// How it was derived: `18 x NVLink 4.0 (Hopper) at 26.56 GB/s per direction (NVML link
    /// speed)`, `PCIe Gen5 x16`.
    pub how: String,
    /// Over NVLink (else PCIe).
    pub nvlink: bool,
}

/// GB/s per PCIe lane after line encoding, by generation.
fn lane(gen: u32) -> f64 {
    match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        6 => 7.563,
        _ => 0.0,
    }
}

/// The narrower PCIe link of two (generation, width), as a rate.
fn pcie_rate(x: (u32, u32), y: (u32, u32), path: Option<&str>) -> Rate {
    let (g, w) = if lane(x.0) * f64::from(x.1) <= lane(y.0) * f64::from(y.1) {
        x
    } else {
        y
    };
    Rate {
        gbps: lane(g) * f64::from(w),
        how: match path {
            Some(p) => format!("PCIe Gen{g} x{w} ({p})"),
            None => format!("PCIe Gen{g} x{w}"),
        },
        nvlink: false,
    }
}

/// The theoretical rate from the links the worker carried (NVML in the worker): the pair's
/// NVLink count (direct links, else the smaller of the two GPUs' NVSwitch links) times the
/// per-link rate (NVML's link speed, else the generation's rate by architecture or version
/// code), else the narrower PCIe link. `None` when the worker carried no links for them.
pub fn carried(o: &P2pOutput, a: &str, b: &str) -> Option<Rate> {
    let la = o.links.iter().find(|l| l.bdf == a)?;
    let lb = o.links.iter().find(|l| l.bdf == b)?;
    let to = |x: &GpuLinks, y: &str| {
        x.nvlinks_to
            .iter()
            .filter(|t| t.0 == y)
            .map(|t| t.1)
            .sum::<usize>()
    };
    let direct = to(la, b).max(to(lb, a));
    let n = direct.max(la.nvlinks_switch.min(lb.nvlinks_switch));
    if n > 0 {
        let (table, name) = gdrdoctor_checks::gdr::p2p::nvlink_rate(la.cc_major, la.nvlink_version);
        let (per, src) = match la.nvlink_speed_mbps {
            Some(mbps) => (mbps as f64 / 1000.0, "NVML link speed"),
            None => (table, "the generation's rate: NVML gave no link speed"),
        };
        return Some(Rate {
            gbps: per * n as f64,
            how: format!(
                "{n} x NVLink {name} at {per:.2} GB/s per direction ({src}){}",
                if direct > 0 { "" } else { " through NVSwitch" }
            ),
            nvlink: true,
        });
    }
    Some(pcie_rate(
        (la.pcie_gen_max?, la.pcie_width_max?),
        (lb.pcie_gen_max?, lb.pcie_width_max?),
        None,
    ))
}

/// The theoretical one-direction rate of a GPU pair's link: from the links the worker carried
/// ([`carried`]), else (reports of older versions) from the node's facts: NVLink links x
/// per-link rate by NVLink version, else the narrower GPU's PCIe link.
pub fn theoretical(node: &Node, o: &P2pOutput, a: &str, b: &str) -> Option<Rate> {
    if let Some(r) = carried(o, a, b) {
        return Some(r);
    }
    let pair = gdrdoctor_checks::gdr::p2p::pairs(node)
        .into_iter()
        .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))?;
    let nvml = node.live.nvml.get()?;
    let gpu = |bdf: &str| nvml.gpus.iter().find(|g| g.bdf == bdf);
    if pair.nvlinks() > 0 {
        let code = gpu(a).and_then(|g| {
            g.nvlinks
                .iter()
                .filter(|l| l.active)
                .find_map(|l| l.version)
        });
        let cc = node
            .live
            .cuda
            .get()
            .and_then(|c| c.devices.iter().find(|d| d.bdf == a))
            .map(|d| d.cc_major);
        let (per, name) = gdrdoctor_checks::gdr::p2p::nvlink_rate(cc, code);
        let n = pair.nvlinks();
        return Some(Rate {
            gbps: per * n as f64,
            how: format!("{n} x NVLink {name} at {per:.0} GB/s per direction"),
            nvlink: true,
        });
    }
    // The link's capability (an idle GPU drops its current generation to save power; a link
    // that trained narrower is pcie.link's finding).
    let rate = |bdf: &str| gpu(bdf).and_then(|g| Some((g.pcie_gen_max?, g.pcie_width_max?)));
    Some(pcie_rate(
        rate(a)?,
        rate(b)?,
        Some(&pair.pcie.unwrap_or_default()),
    ))
}

/// Below this fraction of NVLink's theoretical rate (signalling rate per direction x links) a
/// pair is slow. A healthy copy-engine copy reaches about 0.81 of it on H200 NV18 (387 GB/s of
/// 18 x 26.5625 GB/s, docs/checks/probe.p2p-bandwidth.md).
pub const NVLINK_SLOW_FRACTION: f64 = 0.7;

/// Below this fraction of the narrower PCIe link's rate (after line encoding) a pair is slow.
pub const PCIE_SLOW_FRACTION: f64 = 0.6;

/// In the all-at-once run, a pair below this fraction of the median pair is slow.
pub const CONCURRENT_SLOW_FRACTION: f64 = 0.5;

/// Findings from one worker's output (pure).
pub fn findings(node: &Node, o: &P2pOutput) -> Vec<Finding> {
    const ID: &str = "probe.p2p-bandwidth";
    let mut out = Vec::new();
    let reference = o
        .reference
        .as_ref()
        .and_then(|r| r.uni_gbps.map(|g| (g, r.latency_us)));
    if o.gpus.len() < 2 {
        let mut f = Finding::new(
            ID,
            Status::Skip,
            "node",
            format!(
                "{} gpu(s) visible to cuda: no pair to measure",
                o.gpus.len()
            ),
        );
        if let Some((g, l)) = reference {
            f = f.evidence(
                format!(
                    "reference: copies inside GPU{}",
                    o.reference.as_ref().map(|r| r.a).unwrap_or(0)
                ),
                format!("{g:.1} GB/s, {:.1} us per 4-byte copy", l.unwrap_or(0.0)),
            );
        }
        out.push(f);
        return out;
    }
    for p in &o.pairs {
        let subject = format!("{}|{}", p.a_bdf, p.b_bdf);
        let theo = theoretical(node, o, &p.a_bdf, &p.b_bdf);
        let mut f = match (&p.error, p.uni_gbps) {
            (Some(e), _) if !p.can_access => {
                // Across the CPU without NVLink that is the platform, not a fault (gpu.p2p agrees).
                let expected = gdrdoctor_checks::gdr::p2p::pairs(node)
                    .into_iter()
                    .find(|x| {
                        (x.a == p.a_bdf && x.b == p.b_bdf) || (x.a == p.b_bdf && x.b == p.a_bdf)
                    })
                    .is_some_and(|x| {
                        x.nvlinks() == 0 && !matches!(x.pcie.as_deref(), Some("PIX" | "PXB"))
                    });
                if expected {
                    Finding::new(ID, Status::Skip, &subject, format!("no peer access between GPU{} and GPU{} across the cpu without nvlink ({e}): nothing to measure, copies go through host memory", p.a, p.b))
                } else {
                    Finding::new(ID, Status::Warn, &subject, format!("no peer access between GPU{} and GPU{} ({e}): copies between them go through host memory", p.a, p.b))
                        .fix("see `gdrdoctor check --only gpu.p2p` for why peer access is off")
                }
            }
            (Some(e), _) => Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("peer copies failed: {e}"),
            ),
            (None, Some(u)) => {
                let worst = u.min(p.uni_back_gbps.unwrap_or(u));
                match &theo {
                    Some(Rate { gbps: t, how, nvlink }) if worst < slow(*nvlink) * t => Finding::new(ID, Status::Warn, &subject, format!(
                        "slow pair: {worst:.1} GB/s one way is {:.0}% of the link's {t:.0} GB/s ({how}), below {:.0}%", worst / t * 100.0, slow(*nvlink) * 100.0))
                        .fix("compare with the other pairs in this report; `nvidia-smi nvlink -s` / `-e` for down or erroring links, `check --only pcie.link,gpu.nvlink` for a downtrained link"),
                    Some(Rate { gbps: t, how, .. }) => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways; {:.0}% of the link's {t:.0} GB/s ({how}); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), worst / t * 100.0, p.latency_us.unwrap_or(0.0))),
                    None => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways (link rate unknown: no nvml facts); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), p.latency_us.unwrap_or(0.0))),
                }
            }
            (None, None) => Finding::new(ID, Status::Error, &subject, "no measurement"),
        };
        if let Some(Rate { gbps: t, how, .. }) = &theo {
            f = f.evidence("theoretical one-way rate", format!("{t:.0} GB/s ({how})"));
            if let Some(b) = p.bidi_gbps {
                f = f.evidence(
                    "both ways at once",
                    format!(
                        "{b:.1} GB/s, {:.0}% of 2 x {t:.0} GB/s",
                        b / (2.0 * t) * 100.0
                    ),
                );
            }
        }
        if let Some((g, _)) = reference {
            f = f.evidence(
                format!(
                    "reference: copies inside GPU{}",
                    o.reference.as_ref().map(|r| r.a).unwrap_or(0)
                ),
                format!("{g:.1} GB/s"),
            );
        }
        out.push(f);
    }
    if let Some(all) = &o.all_at_once {
        if o.gpus.len() >= 3 || all.error.is_some() {
            out.push(all_at_once_finding(o, all));
        }
    }
    out
}

fn slow(nvlink: bool) -> f64 {
    if nvlink {
        NVLINK_SLOW_FRACTION
    } else {
        PCIE_SLOW_FRACTION
    }
}

/// Every pair at once: each pair against the median pair under the same load (with two GPUs
/// this is the pair's both-ways number, already in its finding).
fn all_at_once_finding(o: &P2pOutput, all: &AllAtOnce) -> Finding {
    const ID: &str = "probe.p2p-bandwidth";
    const SUBJECT: &str = "node/all-pairs";
    if let Some(e) = &all.error {
        return Finding::new(
            ID,
            Status::Error,
            SUBJECT,
            format!("copies between every pair at once failed: {e}"),
        );
    }
    let mut rates: Vec<f64> = all.pairs.iter().map(|p| p.2).collect();
    rates.sort_by(f64::total_cmp);
    let Some(median) = rates.get(rates.len() / 2).copied() else {
        return Finding::new(
            ID,
            Status::Error,
            SUBJECT,
            "copies between every pair at once: no pair measured",
        );
    };
    let slow: Vec<String> = all
        .pairs
        .iter()
        .filter(|p| p.2 < CONCURRENT_SLOW_FRACTION * median)
        .map(|p| format!("GPU{}->GPU{} {:.1} GB/s", p.0, p.1, p.2))
        .collect();
    let min = rates.first().copied().unwrap_or(0.0);
    let max = rates.last().copied().unwrap_or(0.0);
    let summary = format!(
        "{} ordered pairs of {} gpus copying at once: {:.1} GB/s in all, {min:.1}-{max:.1} GB/s per pair (median {median:.1})",
        all.pairs.len(),
        o.gpus.len(),
        all.total_gbps
    );
    let f = if slow.is_empty() {
        Finding::new(ID, Status::Pass, SUBJECT, summary)
    } else {
        Finding::new(
            ID,
            Status::Warn,
            SUBJECT,
            format!(
                "slow under load: {} below {:.0}% of the median pair; {summary}",
                slow.join(", "),
                CONCURRENT_SLOW_FRACTION * 100.0
            ),
        )
        .fix("the pairs named share something the others do not: a PCIe switch uplink, a down NVLink, an NVSwitch plane (`nvidia-smi nvlink -s`, `gdrdoctor check --only gpu.nvlink,pcie.link`)")
    };
    f.evidence(
        "per pair (GB/s)",
        all.pairs
            .iter()
            .map(|p| format!("{}->{} {:.1}", p.0, p.1, p.2))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::probe::p2p::P2pPair;

    #[test]
    fn one_gpu_skips_with_the_reference() {
        let node = gdrdoctor_checks::testing::empty_node();
        let o = P2pOutput {
            gpus: vec![(0, "0000:00:06.0".into())],
            reference: Some(P2pPair {
                uni_gbps: Some(1800.0),
                latency_us: Some(2.0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let f = findings(&node, &o);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Skip);
        assert!(f[0].evidence[0].observed.contains("1800.0 GB/s"));
    }

    /// An H200 SXM as NVML reports it on our two-GPU machine: 18 active links to the NVSwitch
    /// fabric, version code 6 (NVLink 4.0), 26562 MB/s per link.
    fn h200(bdf: &str, speed: Option<u64>) -> GpuLinks {
        GpuLinks {
            bdf: bdf.into(),
            cc_major: Some(9),
            nvlinks_switch: 18,
            nvlinks_to: vec![],
            nvlink_version: Some(6),
            nvlink_speed_mbps: speed,
            pcie_gen_max: Some(5),
            pcie_width_max: Some(16),
        }
    }

    fn pair(a: i32, b: i32, uni: f64) -> P2pPair {
        P2pPair {
            a,
            b,
            a_bdf: format!("0000:00:0{}.0", 6 + a),
            b_bdf: format!("0000:00:0{}.0", 6 + b),
            can_access: true,
            uni_gbps: Some(uni),
            uni_back_gbps: Some(uni),
            bidi_gbps: Some(2.0 * uni - 10.0),
            latency_us: Some(2.4),
            error: None,
        }
    }

    #[test]
    fn the_carried_links_give_the_rate_and_the_fraction() {
        // Issue 15: 387 GB/s each way, 764 both ways on NV18. 18 x 26.562 GB/s = 478.1 GB/s:
        // 81%, a pass; the rate no longer depends on the node's facts.
        let node = gdrdoctor_checks::testing::empty_node();
        let mut o = P2pOutput {
            gpus: vec![(0, "0000:00:06.0".into()), (1, "0000:00:07.0".into())],
            pairs: vec![pair(0, 1, 387.0)],
            links: vec![
                h200("0000:00:06.0", Some(26562)),
                h200("0000:00:07.0", Some(26562)),
            ],
            ..Default::default()
        };
        let r = theoretical(&node, &o, "0000:00:06.0", "0000:00:07.0").unwrap();
        assert!((r.gbps - 478.116).abs() < 0.01, "{r:?}");
        assert!(r.nvlink);
        assert_eq!(
            r.how,
            "18 x NVLink 4.0 (Hopper) at 26.56 GB/s per direction (NVML link speed) through NVSwitch"
        );
        let f = findings(&node, &o);
        assert_eq!(
            f.len(),
            1,
            "two gpus: the all-at-once run is the pair's both-ways number"
        );
        assert_eq!(f[0].status, Status::Pass, "{:?}", f[0]);
        assert!(
            f[0].message.contains("81% of the link's 478 GB/s"),
            "{}",
            f[0].message
        );
        assert_eq!(f[0].evidence[1].observed, "764.0 GB/s, 80% of 2 x 478 GB/s");
        // Below 70% of the link: slow.
        o.pairs = vec![pair(0, 1, 330.0)];
        let f = findings(&node, &o);
        assert_eq!(f[0].status, Status::Warn);
        assert!(
            f[0].message.contains("69% of the link's 478 GB/s"),
            "{}",
            f[0].message
        );
        assert!(f[0].message.ends_with("below 70%"), "{}", f[0].message);
        // No link speed from NVML: the generation's 25 GB/s per link, said so.
        o.links = vec![h200("0000:00:06.0", None), h200("0000:00:07.0", None)];
        let r = theoretical(&node, &o, "0000:00:06.0", "0000:00:07.0").unwrap();
        assert_eq!(r.gbps, 450.0);
        assert!(r.how.contains("NVML gave no link speed"), "{}", r.how);
        // Direct links count for the pair itself; PCIe when there is no NVLink.
        let mut a = h200("0000:00:06.0", Some(25000));
        a.nvlinks_switch = 0;
        a.nvlinks_to = vec![("0000:00:07.0".into(), 4)];
        let mut b = h200("0000:00:07.0", Some(25000));
        b.nvlinks_switch = 0;
        o.links = vec![a.clone(), b.clone()];
        let r = theoretical(&node, &o, "0000:00:06.0", "0000:00:07.0").unwrap();
        assert_eq!((r.gbps, r.nvlink), (100.0, true));
        a.nvlinks_to.clear();
        b.pcie_gen_max = Some(4);
        o.links = vec![a, b];
        let r = theoretical(&node, &o, "0000:00:06.0", "0000:00:07.0").unwrap();
        assert_eq!((r.how.as_str(), r.nvlink), ("PCIe Gen4 x16", false));
        assert!((r.gbps - 31.504).abs() < 0.001);
        // A report without carried links and a node without NVML: no rate, said so.
        o.links.clear();
        o.pairs = vec![pair(0, 1, 387.0)];
        let f = findings(&node, &o);
        assert!(
            f[0].message.contains("link rate unknown"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn every_pair_at_once_is_judged_against_the_median_pair() {
        // Four GPUs: 12 ordered pairs at once, one of them at a third of the others.
        let node = gdrdoctor_checks::testing::empty_node();
        let mut pairs = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                if a != b {
                    pairs.push((a, b, if (a, b) == (2, 3) { 40.0 } else { 120.0 }));
                }
            }
        }
        let o = P2pOutput {
            gpus: (0..4)
                .map(|i| (i, format!("0000:00:0{}.0", 6 + i)))
                .collect(),
            all_at_once: Some(AllAtOnce {
                pairs: pairs.clone(),
                total_gbps: 1350.0,
                error: None,
            }),
            ..Default::default()
        };
        let f = findings(&node, &o);
        let all = f.iter().find(|f| f.subject == "node/all-pairs").unwrap();
        assert_eq!(all.status, Status::Warn);
        assert!(all.message.starts_with("slow under load: GPU2->GPU3 40.0 GB/s below 50% of the median pair; 12 ordered pairs of 4 gpus copying at once: 1350.0 GB/s in all, 40.0-120.0 GB/s per pair (median 120.0)"), "{}", all.message);
        let even: Vec<(i32, i32, f64)> = pairs.iter().map(|p| (p.0, p.1, 120.0)).collect();
        let o = P2pOutput {
            all_at_once: Some(AllAtOnce {
                pairs: even,
                total_gbps: 1440.0,
                error: None,
            }),
            ..o
        };
        let f = findings(&node, &o);
        let all = f.iter().find(|f| f.subject == "node/all-pairs").unwrap();
        assert_eq!(all.status, Status::Pass);
    }

    #[test]
    fn pairs_map_to_statuses() {
        let node = gdrdoctor_checks::testing::empty_node();
        let ok = P2pPair {
            a: 0,
            b: 1,
            a_bdf: "a".into(),
            b_bdf: "b".into(),
            can_access: true,
            uni_gbps: Some(380.0),
            uni_back_gbps: Some(381.0),
            bidi_gbps: Some(700.0),
            latency_us: Some(2.5),
            error: None,
        };
        let o = P2pOutput {
            gpus: vec![(0, "a".into()), (1, "b".into()), (2, "c".into())],
            pairs: vec![
                ok.clone(),
                P2pPair {
                    b: 2,
                    b_bdf: "c".into(),
                    can_access: false,
                    uni_gbps: None,
                    error: Some("cuDeviceCanAccessPeer: 0".into()),
                    ..ok.clone()
                },
                P2pPair {
                    a: 1,
                    a_bdf: "b".into(),
                    b: 2,
                    b_bdf: "c".into(),
                    uni_gbps: None,
                    error: Some("cuMemcpyPeerAsync: CUDA_ERROR_ILLEGAL_ADDRESS".into()),
                    ..ok
                },
            ],
            ..Default::default()
        };
        let s: Vec<Status> = findings(&node, &o).iter().map(|f| f.status).collect();
        assert_eq!(s, vec![Status::Pass, Status::Warn, Status::Error]);
    }
}
