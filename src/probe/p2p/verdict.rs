//! The verdict of `probe --p2p`: findings from the worker's record and the node's links, a pure
//! function (replayed from saved reports by the tests).

use super::{P2pOutput, Record};
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

/// The theoretical one-direction rate of a GPU pair's link, GB/s, and how it was derived:
/// NVLink links x per-link rate by NVLink version, else the narrower GPU's PCIe link.
pub fn theoretical(node: &Node, a: &str, b: &str) -> Option<(f64, String)> {
    let pair = gdrdoctor_checks::p2p::pairs(node)
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
        let (per, name) = gdrdoctor_checks::p2p::nvlink_rate(cc, code);
        let n = pair.nvlinks();
        return Some((
            per * n as f64,
            format!("{n} x NVLink {name} at {per:.0} GB/s per direction"),
        ));
    }
    let lane = |gen: u32| match gen {
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        6 => 7.563,
        _ => 0.0,
    };
    let rate =
        // The link's capability (an idle GPU drops its current generation to save power; a
        // link that trained narrower is pcie.link's finding).
        |bdf: &str| gpu(bdf).and_then(|g| Some((g.pcie_gen_max?, g.pcie_width_max?)));
    let (ga, wa) = rate(a)?;
    let (gb, wb) = rate(b)?;
    let (g, w) = if lane(ga) * f64::from(wa) <= lane(gb) * f64::from(wb) {
        (ga, wa)
    } else {
        (gb, wb)
    };
    Some((
        lane(g) * f64::from(w),
        format!("PCIe Gen{g} x{w} ({})", pair.pcie.unwrap_or_default()),
    ))
}

/// Below this fraction of the link's theoretical rate a pair is slow.
pub const SLOW_FRACTION: f64 = 0.6;

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
        let theo = theoretical(node, &p.a_bdf, &p.b_bdf);
        let mut f = match (&p.error, p.uni_gbps) {
            (Some(e), _) if !p.can_access => {
                // Across the CPU without NVLink that is the platform, not a fault (gpu.p2p agrees).
                let expected = gdrdoctor_checks::p2p::pairs(node)
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
                    Some((t, how)) if worst < SLOW_FRACTION * t => Finding::new(ID, Status::Warn, &subject, format!(
                        "slow pair: {worst:.1} GB/s one way is {:.0}% of the link's {t:.0} GB/s ({how})", worst / t * 100.0))
                        .fix("compare with the other pairs in this report; `nvidia-smi nvlink -s` / `-e` for down or erroring links, `check --only pcie.link,gpu.nvlink` for a downtrained link"),
                    Some((t, how)) => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways; {:.0}% of the link's {t:.0} GB/s ({how}); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), worst / t * 100.0, p.latency_us.unwrap_or(0.0))),
                    None => Finding::new(ID, Status::Pass, &subject, format!(
                        "{u:.1} GB/s GPU{}->GPU{}, {:.1} GB/s back, {:.1} GB/s both ways (link rate unknown: no nvml facts); {:.1} us per small copy",
                        p.a, p.b, p.uni_back_gbps.unwrap_or(0.0), p.bidi_gbps.unwrap_or(0.0), p.latency_us.unwrap_or(0.0))),
                }
            }
            (None, None) => Finding::new(ID, Status::Error, &subject, "no measurement"),
        };
        if let Some((t, how)) = &theo {
            f = f.evidence("theoretical one-way rate", format!("{t:.0} GB/s ({how})"));
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
    out
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
