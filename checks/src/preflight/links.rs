//! What a rail's links allow: the NIC port's rate and the PCIe links of its GPU and its NIC,
//! each as bytes per second of one direction, from a node's `check` report (its inventory).
//! A pair of nodes is held to the slower end.

use crate::report::Report;
use serde::{Deserialize, Serialize};

/// One link's rate, one direction, and what it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRate {
    /// GB/s (10^9 bytes per second), one direction.
    pub gbs: f64,
    /// `mlx5_0 port 1: 400 Gb/sec (4X NDR)`, `gpu 0000:18:00.0 pcie 32 GT/s x16`.
    pub what: String,
}

/// `400 Gb/sec (4X NDR)` (sysfs `rate`, ibv_devinfo) -> 50 GB/s.
pub fn port_rate_gbs(rate: &str) -> Option<f64> {
    let t = rate.trim();
    let num: String = t
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v: f64 = num.parse().ok()?;
    let unit = t[num.len()..].trim_start().to_ascii_lowercase();
    let gbit = if unit.starts_with("gb") {
        v
    } else if unit.starts_with("mb") {
        v / 1000.0
    } else if unit.starts_with("tb") {
        v * 1000.0
    } else {
        return None;
    };
    (gbit.is_finite() && gbit > 0.0).then_some(gbit / 8.0)
}

/// A PCIe link's data rate, one direction: GT/s per lane x lanes x the encoding's efficiency
/// (8b/10b up to 5 GT/s, 128b/130b from 8 GT/s, FLIT mode at 64 GT/s), in GB/s.
pub fn pcie_gbs(speed_gts: f64, width: u32) -> Option<f64> {
    if !(speed_gts.is_finite() && speed_gts > 0.0) || width == 0 {
        return None;
    }
    let eff = if speed_gts <= 5.0 {
        0.8
    } else if speed_gts < 64.0 {
        128.0 / 130.0
    } else {
        242.0 / 256.0
    };
    Some(speed_gts * f64::from(width) * eff / 8.0)
}

/// The rates of one rail's end on a node: its GPU's PCIe link, its NIC's PCIe link and the
/// NIC's port. A link the report does not know is left out (and named in `unknown`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub links: Vec<LinkRate>,
    pub unknown: Vec<String>,
}

impl End {
    /// The slowest link of this end.
    pub fn limit(&self) -> Option<&LinkRate> {
        self.links.iter().min_by(|a, b| {
            a.gbs
                .partial_cmp(&b.gbs)
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    }
}

/// The links of the rail (GPU `gpu_bdf`, NIC `nic`) on the node of `report`.
pub fn end(report: &Report, gpu_bdf: &str, nic: &str) -> End {
    let inv = &report.inventory;
    let mut e = End::default();
    match inv
        .gpus
        .iter()
        .find(|g| g.bdf.eq_ignore_ascii_case(gpu_bdf))
    {
        Some(g) => match g
            .link
            .cur_speed_gts
            .zip(g.link.cur_width)
            .and_then(|(s, w)| pcie_gbs(s, w).map(|r| (s, w, r)))
        {
            Some((s, w, r)) => e.links.push(LinkRate {
                gbs: r,
                what: format!("gpu {gpu_bdf} pcie {s} GT/s x{w}"),
            }),
            None => e.unknown.push(format!("gpu {gpu_bdf} pcie link")),
        },
        None => e.unknown.push(format!("gpu {gpu_bdf}")),
    }
    match inv.nics.iter().find(|n| n.ibdev == nic) {
        Some(n) => {
            let pcie = n.bdf.as_deref().and_then(|b| {
                let p = inv.pci.iter().find(|p| p.bdf.eq_ignore_ascii_case(b))?;
                let pc = p.pcie.as_ref()?;
                let (s, w) = (pc.lnksta_speed_gts?, pc.lnksta_width?);
                pcie_gbs(s, u32::from(w)).map(|r| (b.to_string(), s, w, r))
            });
            match pcie {
                Some((b, s, w, r)) => e.links.push(LinkRate {
                    gbs: r,
                    what: format!("{nic} ({b}) pcie {s} GT/s x{w}"),
                }),
                None => e.unknown.push(format!("{nic} pcie link")),
            }
            let port = n
                .ports
                .iter()
                .find(|p| p.state.as_deref() == Some("ACTIVE"))
                .or_else(|| n.ports.first());
            match port.and_then(|p| {
                let rate = p.rate.as_deref()?;
                port_rate_gbs(rate).map(|r| (p.port, rate.to_string(), r))
            }) {
                Some((p, rate, r)) => e.links.push(LinkRate {
                    gbs: r,
                    what: format!("{nic} port {p} {rate}"),
                }),
                None => e.unknown.push(format!("{nic} port rate")),
            }
        }
        None => e.unknown.push(format!("nic {nic}")),
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_rates_and_pcie_links() {
        assert_eq!(port_rate_gbs("400 Gb/sec (4X NDR)"), Some(50.0));
        assert_eq!(port_rate_gbs("200 Gb/sec (4X HDR)"), Some(25.0));
        assert_eq!(port_rate_gbs("2.5 Gb/sec (1X SDR)"), Some(0.3125));
        assert_eq!(port_rate_gbs("fast"), None);
        assert_eq!(port_rate_gbs(""), None);
        assert_eq!(port_rate_gbs("0 Gb/sec"), None);
        let g5 = pcie_gbs(32.0, 16).unwrap_or(0.0);
        assert!((g5 - 63.015).abs() < 0.01, "{g5}");
        let g1 = pcie_gbs(2.5, 1).unwrap_or(0.0);
        assert!((g1 - 0.25).abs() < 1e-9);
        assert_eq!(pcie_gbs(16.0, 0), None);
        assert_eq!(pcie_gbs(f64::NAN, 16), None);
    }
}
