//! `ibv_devinfo [-v]`, `ibstat` and `ibstatus`: the RDMA devices, their firmware and ports.
//!
//! Port states are stored in the sysfs form the checks read (`4: ACTIVE`, `5: LinkUp`), which
//! carries the same number and name each tool prints (`PORT_ACTIVE (4)`, `State: Active`,
//! `phys_state: LINK_UP (5)`, `Physical state: LinkUp`).

use super::block::{status, Block, BlockStatus, RawBlock};
use super::clean::Line;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct IbPort {
    pub port: u32,
    /// `4: ACTIVE`
    pub state: Option<String>,
    /// `5: LinkUp`
    pub phys_state: Option<String>,
    pub link_layer: Option<String>,
    /// `200 Gb/sec` (ibstat) or `100 Gb/sec (4X EDR)` (ibstatus).
    pub rate: Option<String>,
    pub active_mtu: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct IbDevice {
    pub name: String,
    /// Line of the device's first line in its file.
    pub line: usize,
    pub fw_ver: Option<String>,
    /// `MT4129` (ibstat's CA type, or ibv_devinfo's vendor_part_id).
    pub hca_type: Option<String>,
    pub board_id: Option<String>,
    pub node_guid: Option<String>,
    pub transport: Option<String>,
    pub ports: Vec<IbPort>,
    /// The tool could not read this device (`ibpanic: ... stat of IB device 'X' failed: ...`):
    /// the line. Nothing else of it is known.
    pub failed: Option<String>,
    /// How many ports the tool said the device has (`phys_port_cnt:`, ibstat's `Number of
    /// ports:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_count: Option<u32>,
    /// The paste holds only part of this device (an excerpt cut before its port lines): why.
    /// Its ports are then unknown, not absent: a tool always lists a device's ports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// Mark every device whose port lines the paste does not hold: fewer ports than it said it
/// has, or none and no port count (the excerpt ends inside the device's header).
fn mark_cut(out: &mut [IbDevice]) {
    for d in out.iter_mut().filter(|d| d.failed.is_none()) {
        let n = d.ports.len() as u32;
        d.cut = match d.port_count {
            Some(c) if n < c && n == 0 => Some(format!(
                "the paste shows none of its {c} port(s) (an excerpt cut inside the device)"
            )),
            Some(c) if n < c => Some(format!(
                "the paste shows {n} of its {c} ports (an excerpt cut inside the device)"
            )),
            None if n == 0 => Some(
                "the paste ends inside the device, before its port count and ports (an excerpt)"
                    .to_string(),
            ),
            _ => None,
        };
    }
}

/// A device header with nothing under it before the same device again (a repeated header
/// line), or a port listed twice in one device (another device's header line lost): which
/// lines belong to which device cannot be told (the review of 2026-12-07: a repeated `CA
/// 'mlx5_10'` line left an empty first copy that hid the DOWN port of the second; a deleted one
/// gave mlx5_1 two `Port 1:` sections and another device's firmware). The device is kept once,
/// marked unreadable with the reason; nothing of it is judged. Two full copies of a device
/// (two hosts' outputs in one paste) are left to the reader of the node, which compares them.
fn mark_duplicates(out: &mut Vec<IbDevice>) {
    let empty = |d: &IbDevice| {
        d.ports.is_empty() && d.fw_ver.is_none() && d.hca_type.is_none() && d.failed.is_none()
    };
    let mut kept: Vec<IbDevice> = Vec::with_capacity(out.len());
    for d in out.drain(..) {
        let twin = kept
            .iter_mut()
            .rev()
            .find(|k| k.name == d.name)
            .filter(|k| empty(k) || empty(&d));
        match twin {
            Some(k) => {
                let why = format!(
                    "the paste shows {} twice (lines {} and {}), one copy with nothing under it: a header line was repeated, so its lines cannot be told apart",
                    d.name, k.line, d.line
                );
                k.failed = Some(why);
            }
            None => kept.push(d),
        }
    }
    for d in kept.iter_mut().filter(|d| d.failed.is_none()) {
        let mut seen = std::collections::BTreeSet::new();
        if let Some(p) = d.ports.iter().find(|p| !seen.insert(p.port)) {
            d.failed = Some(format!(
                "the paste shows port {} of {} twice: another device's header line was lost, so its ports cannot be told apart",
                p.port, d.name
            ));
        }
    }
    *out = kept;
}

/// Mark the device an `ibpanic:`/`ibwarn:` line names as unreadable (added when not listed
/// yet); whether the line was one.
fn note_failed(out: &mut Vec<IbDevice>, l: &Line) -> bool {
    let Some((name, line)) = failed_device(l.text.trim()) else {
        return false;
    };
    match out.iter_mut().find(|d| d.name == name) {
        Some(d) => d.failed = Some(line),
        None => out.push(IbDevice {
            name,
            line: l.no,
            failed: Some(line),
            ..IbDevice::default()
        }),
    }
    true
}

/// The device an `ibpanic:`/`ibwarn:` line says could not be read, and the line.
fn failed_device(t: &str) -> Option<(String, String)> {
    if !(t.starts_with("ibpanic:") || t.starts_with("ibwarn:")) {
        return None;
    }
    let r = &t[t.find("device '")? + "device '".len()..];
    let name = r.split('\'').next()?.to_string();
    (!name.is_empty()).then(|| (name, t.to_string()))
}

const STATES: [&str; 6] = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];
const PHYS: [&str; 8] = [
    "",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "Phy Test",
];

fn paren_num(v: &str) -> Option<usize> {
    let (_, r) = v.rsplit_once('(')?;
    r.trim_end_matches(')').trim().parse().ok()
}

/// `PORT_ACTIVE (4)`, `Active`, `4: ACTIVE` -> `4: ACTIVE`.
pub fn state_text(v: &str) -> Option<String> {
    let v = v.trim();
    if let Some((n, name)) = v.split_once(':') {
        if n.trim().parse::<usize>().is_ok() {
            return Some(format!("{}: {}", n.trim(), name.trim()));
        }
    }
    let n = paren_num(v).or_else(|| {
        let up = v.to_ascii_uppercase();
        let up = up.trim_start_matches("PORT_");
        match up {
            "DOWN" => Some(1),
            "INIT" | "INITIALIZING" | "INITIALIZE" => Some(2),
            "ARMED" => Some(3),
            "ACTIVE" => Some(4),
            "ACTIVE_DEFER" => Some(5),
            _ => None,
        }
    })?;
    STATES.get(n).map(|s| format!("{n}: {s}"))
}

/// `LINK_UP (5)`, `LinkUp`, `5: LinkUp` -> `5: LinkUp`.
pub fn phys_text(v: &str) -> Option<String> {
    let v = v.trim();
    if let Some((n, name)) = v.split_once(':') {
        if n.trim().parse::<usize>().is_ok() {
            return Some(format!("{}: {}", n.trim(), name.trim()));
        }
    }
    let n = paren_num(v).or_else(|| {
        let k: String = v
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        PHYS.iter()
            .position(|p| !p.is_empty() && p.to_ascii_lowercase().replace(' ', "") == k)
            .or(match k.as_str() {
                "linkup" => Some(5),
                _ => None,
            })
    })?;
    PHYS.get(n)
        .filter(|p| !p.is_empty())
        .map(|s| format!("{n}: {s}"))
}

fn kv(line: &str) -> Option<(String, String)> {
    let (k, v) = line.split_once(':')?;
    Some((k.trim().to_string(), v.trim().to_string()))
}

/// Parse `ibv_devinfo` (with or without `-v`).
pub fn parse_devinfo(lines: &[Line]) -> Vec<IbDevice> {
    let mut out: Vec<IbDevice> = Vec::new();
    for l in lines {
        if note_failed(&mut out, l) {
            continue;
        }
        let Some((k, v)) = kv(&l.text) else { continue };
        if k == "hca_id" {
            out.push(IbDevice {
                name: v,
                line: l.no,
                ..IbDevice::default()
            });
            continue;
        }
        let Some(d) = out.last_mut() else { continue };
        match k.as_str() {
            "transport" => d.transport = Some(v),
            "fw_ver" => d.fw_ver = Some(v),
            "node_guid" => d.node_guid = Some(v),
            "board_id" => d.board_id = Some(v),
            "vendor_part_id" => d.hca_type = Some(format!("MT{v}")),
            "phys_port_cnt" => d.port_count = v.trim().parse().ok(),
            "port" => {
                if let Ok(p) = v.parse() {
                    d.ports.push(IbPort {
                        port: p,
                        ..IbPort::default()
                    });
                }
            }
            _ => {
                let Some(p) = d.ports.last_mut() else {
                    continue;
                };
                match k.as_str() {
                    "state" => p.state = state_text(&v),
                    "phys_state" => p.phys_state = phys_text(&v),
                    "link_layer" => p.link_layer = Some(v),
                    "active_mtu" => p.active_mtu = Some(v),
                    _ => {}
                }
            }
        }
    }
    mark_cut(&mut out);
    mark_duplicates(&mut out);
    out
}

/// Parse `ibstat` (`CA 'mlx5_0'`) and `ibstatus` (`Infiniband device 'mlx5_0' port 1 status:`).
pub fn parse_ibstat(lines: &[Line]) -> Vec<IbDevice> {
    let mut out: Vec<IbDevice> = Vec::new();
    let quoted = |s: &str| -> Option<String> {
        let a = s.find('\'')?;
        let b = s[a + 1..].find('\'')?;
        Some(s[a + 1..a + 1 + b].to_string())
    };
    for l in lines {
        let t = l.text.trim();
        if note_failed(&mut out, l) {
            continue;
        }
        if t.starts_with("CA '") {
            if let Some(n) = quoted(t) {
                out.push(IbDevice {
                    name: n,
                    line: l.no,
                    ..IbDevice::default()
                });
            }
            continue;
        }
        if let Some(r) = t.strip_prefix("Infiniband device '") {
            let name = r.split('\'').next().unwrap_or("").to_string();
            let port = r
                .split_whitespace()
                .skip_while(|w| *w != "port")
                .nth(1)
                .and_then(|p| p.trim_end_matches(':').parse().ok());
            let idx = match out.iter().position(|d| d.name == name) {
                Some(i) => i,
                None => {
                    out.push(IbDevice {
                        name,
                        line: l.no,
                        ..IbDevice::default()
                    });
                    out.len() - 1
                }
            };
            if let Some(p) = port {
                out[idx].ports.push(IbPort {
                    port: p,
                    ..IbPort::default()
                });
            }
            continue;
        }
        if let Some(p) = t.strip_prefix("Port ").and_then(|r| r.strip_suffix(':')) {
            if let (Some(d), Ok(n)) = (out.last_mut(), p.trim().parse()) {
                d.ports.push(IbPort {
                    port: n,
                    ..IbPort::default()
                });
            }
            continue;
        }
        let Some((k, v)) = kv(t) else { continue };
        let Some(d) = out.last_mut() else { continue };
        match k.as_str() {
            "CA type" => d.hca_type = Some(v).filter(|x| !x.is_empty()),
            "Firmware version" => d.fw_ver = Some(v),
            "Node GUID" => d.node_guid = Some(v),
            "Number of ports" => d.port_count = v.trim().parse().ok(),
            _ => {
                let Some(p) = d.ports.last_mut() else {
                    continue;
                };
                match k.as_str() {
                    "State" | "state" => p.state = state_text(&v),
                    "Physical state" | "phys state" => p.phys_state = phys_text(&v),
                    "Link layer" | "link_layer" => p.link_layer = Some(v),
                    "Rate" => {
                        p.rate = Some(if v.bytes().all(|b| b.is_ascii_digit()) {
                            format!("{v} Gb/sec")
                        } else {
                            v
                        })
                    }
                    "rate" => p.rate = Some(v),
                    _ => {}
                }
            }
        }
    }
    mark_cut(&mut out);
    mark_duplicates(&mut out);
    out
}

/// An `ibv_devinfo` block: its devices.
pub fn devinfo_block(b: &mut Block, raw: &RawBlock) -> Vec<IbDevice> {
    devices_block(b, parse_devinfo(&raw.lines))
}

/// An `ibstat` / `ibstatus` block: its devices.
pub fn ibstat_block(b: &mut Block, raw: &RawBlock) -> Vec<IbDevice> {
    devices_block(b, parse_ibstat(&raw.lines))
}

fn devices_block(b: &mut Block, d: Vec<IbDevice>) -> Vec<IbDevice> {
    b.summary = format!(
        "{} RDMA device(s): {}",
        d.len(),
        d.iter()
            .map(|x| x.name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    for x in d.iter() {
        if let Some(why) = x.failed.as_ref().filter(|w| w.contains("twice")) {
            b.problems.push(why.clone());
        }
    }
    b.status = if d.is_empty() {
        BlockStatus::Refused
    } else {
        status(&b.repairs, &b.problems)
    };
    d
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    #[test]
    fn devinfo_states() {
        let t = "hca_id:\tmlx5_12\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t22.38.1900\n\tvendor_part_id:\t\t\t4125\n\tboard_id:\t\t\tMT_0000000436\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tactive_mtu:\t\t1024 (3)\n\t\t\tphys_state:\t\tDISABLED (3)\n\t\t\tlink_layer:\t\tEthernet\n";
        let d = parse_devinfo(&clean(t).lines);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].hca_type.as_deref(), Some("MT4125"));
        let p = &d[0].ports[0];
        assert_eq!(p.state.as_deref(), Some("1: DOWN"));
        assert_eq!(p.phys_state.as_deref(), Some("3: Disabled"));
        assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    }

    #[test]
    fn a_repeated_or_lost_header_leaves_the_device_unjudged() {
        let one = "CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n";
        let two = "CA 'mlx5_1'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Down\n";
        // mlx5_1's header repeated: one mlx5_1, unreadable, naming both lines.
        let t = format!("{one}{two}CA 'mlx5_1'\n");
        let d = parse_ibstat(&clean(&t).lines);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[1].failed.as_deref().is_some_and(|w| w.contains("twice")),
            "{d:?}"
        );
        assert!(d[0].failed.is_none());
        // mlx5_1's header lost: mlx5_0 shows two port 1 sections.
        let t = format!("{one}{}", two.replace("CA 'mlx5_1'\n", ""));
        let d = parse_ibstat(&clean(&t).lines);
        assert_eq!(d.len(), 1);
        assert!(
            d[0].failed.as_deref().is_some_and(|w| w.contains("port 1")),
            "{d:?}"
        );
        // ibv_devinfo: the same.
        let dev =
            "hca_id:\tmlx5_12\n\tphys_port_cnt:\t1\n\t\tport:\t1\n\t\t\tstate:\tPORT_DOWN (1)\n";
        let d = parse_devinfo(&clean(&format!("hca_id:\tmlx5_12\n{dev}")).lines);
        assert_eq!(d.len(), 1);
        assert!(d[0].failed.is_some(), "{d:?}");
    }

    #[test]
    fn ibstat_and_ibstatus() {
        let t = "CA 'mlx5_0'\n\tCA type: MT4129\n\tFirmware version: 28.39.1002\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: Ethernet\nInfiniband device 'mlx5_1' port 1 status:\n\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t 100 Gb/sec (4X EDR)\n\tlink_layer:\t Ethernet\n";
        let d = parse_ibstat(&clean(t).lines);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].ports[0].state.as_deref(), Some("4: ACTIVE"));
        assert_eq!(d[0].ports[0].phys_state.as_deref(), Some("5: LinkUp"));
        assert_eq!(d[0].ports[0].rate.as_deref(), Some("200 Gb/sec"));
        assert_eq!(d[1].ports[0].rate.as_deref(), Some("100 Gb/sec (4X EDR)"));
        assert_eq!(d[1].ports[0].state.as_deref(), Some("4: ACTIVE"));
    }

    #[test]
    fn unknown_state_words_are_not_guessed() {
        assert_eq!(state_text("WEIRD"), None);
        assert_eq!(phys_text("Unknown"), None);
        assert_eq!(state_text("Initializing").as_deref(), Some("2: INIT"));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let l = clean(&s).lines;
            for d in parse_devinfo(&l).into_iter().chain(parse_ibstat(&l)) {
                prop_assert!(s.contains(&d.name));
            }
        }
    }
}
