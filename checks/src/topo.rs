//! GPU-NIC topology, computed the way NCCL computes it (gdr-ground-truth §2.4, T01-T05).
//!
//! NCCL builds its PCI tree from the resolved sysfs path of each device, going up **two** path
//! components at a time (so a switch's downstream ports vanish and the device hangs off the
//! switch's upstream port), and stops at the first component that is not a PCI address: that is
//! the CPU, identified by the `numa_node` of the topmost device (NVIDIA/nccl `src/graph/xml.cc`
//! `ncclTopoGetXmlFromSys()`). Broadcom PEX Gen4/Gen5 switches that appear as two levels are
//! flattened into one (`src/graph/topo.cc` `ncclTopoFlattenBcmSwitches()`, `getBcmGen()`). The
//! path type between two devices is the worst hop on the way (`src/graph/paths.cc`
//! `ncclTopoSetPaths()`): device-switch = PIX, switch-switch = PXB, anything touching the CPU =
//! PHB, CPU-CPU = SYS. NICs are keyed by their PCI address with the function digit (ports) and,
//! with NCCL_IB_MERGE_VFS (default 1), the device digits (VFs) zeroed
//! (`src/transport/net_ib/init.cc` `ncclIbGetPciPath()`).
//!
//! nvidia-smi's `topo -m` splits NCCL's PHB into PHB (same host bridge) and NODE (another host
//! bridge on the same NUMA node); [`SmiType`] reports that view beside NCCL's.

use crate::model::{Fact, Node, PciDevice};
use crate::parse;
use serde::Serialize;
use std::collections::BTreeMap;

/// NCCL's path types, with NCCL's numeric values (2.29+: LOC0 NVL1 NVB2 C2C3 PIX4 PXB5 P2C6
/// PXN7 PHB8 SYS9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum PathType {
    Loc = 0,
    Pix = 4,
    Pxb = 5,
    P2c = 6,
    Phb = 8,
    Sys = 9,
}

impl PathType {
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::P2c => "P2C",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
        }
    }
}

/// NCCL's path-type names, indexed by value (`topoPathTypeStr`).
pub const NCCL_PATH_NAMES: [&str; 10] = [
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS",
];

/// `NCCL_NET_GDR_LEVEL` (and `NCCL_P2P_LEVEL`) parsing, as `ncclGetLevel()`: an exact path-type
/// name, else a leading digit in the legacy numbering 0..5 -> LOC, PIX, PXB, PHB, SYS, SYS
/// (larger numbers clamp to 5). Anything else is ignored (`None`).
pub fn parse_level(s: &str) -> Option<u8> {
    if let Some(i) = NCCL_PATH_NAMES.iter().position(|n| *n == s) {
        return Some(i as u8);
    }
    if s.as_bytes().first().is_some_and(|b| b.is_ascii_digit()) {
        const OLD: [u8; 6] = [0, 4, 5, 8, 9, 9];
        let n = strtol0(s).min(5) as usize;
        return Some(OLD[n]);
    }
    None
}

/// C's `strtol(s, NULL, 0)` on a string starting with a digit: `0x` hex, leading `0` octal,
/// else decimal; stops at the first invalid digit; saturates.
fn strtol0(s: &str) -> u64 {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    let mut v: u64 = 0;
    for c in digits.chars() {
        let Some(d) = c.to_digit(radix) else { break };
        v = v
            .saturating_mul(u64::from(radix))
            .saturating_add(u64::from(d));
    }
    v
}

pub fn level_name(level: u8) -> &'static str {
    NCCL_PATH_NAMES.get(level as usize).copied().unwrap_or("?")
}

/// nvidia-smi `topo -m` naming of the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SmiType {
    Pix,
    Pxb,
    Phb,
    Node,
    Sys,
}

impl SmiType {
    pub fn as_str(self) -> &'static str {
        match self {
            SmiType::Pix => "PIX",
            SmiType::Pxb => "PXB",
            SmiType::Phb => "PHB",
            SmiType::Node => "NODE",
            SmiType::Sys => "SYS",
        }
    }
}

/// A GPU or NIC placed in NCCL's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// The device's own PCI address.
    pub bdf: String,
    /// NCCL's key for it (NICs: ports and VFs folded).
    pub nccl_bdf: String,
    /// NCCL PCI-switch nodes above it, nearest first (after BCM flattening).
    pub switches: Vec<String>,
    /// NCCL's CPU node: the `numa_node` text of the topmost device (`-1` is one shared CPU);
    /// `?` when it cannot be read ([`Endpoint::cpu_unknown`] says why).
    pub cpu: String,
    /// Why the CPU is not known (the topmost device's `numa_node` unreadable or damaged, or a
    /// bridge of the path not in the listing), naming the file; `None` when it is.
    #[serde(skip)]
    pub cpu_unknown: Option<String>,
    pub numa_node: Option<i32>,
    /// The host bridge directory (`pci0000:15`).
    pub host_bridge: String,
    /// Every bridge in the sysfs path above the device, nearest first (root port last).
    pub bridges: Vec<String>,
}

/// Fold a NIC's PCI address like NCCL: function digit to 0, and (VF merge) device digits to 0.
pub fn nccl_nic_bdf(bdf: &str, merge_vfs: bool) -> String {
    let mut b: Vec<u8> = bdf.as_bytes().to_vec();
    let n = b.len();
    if n >= 4 {
        b[n - 1] = b'0';
        if merge_vfs {
            b[n - 3] = b'0';
            b[n - 4] = b'0';
        }
    }
    String::from_utf8(b).unwrap_or_else(|_| bdf.to_string())
}

fn path_components(p: &str) -> Vec<&str> {
    let comps: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    // Keep what follows /sys/devices (the PCI part); the walk needs only those.
    match comps.iter().position(|c| c.starts_with("pci")) {
        Some(i) => comps[i..].to_vec(),
        None => comps,
    }
}

/// `getBcmGen()`: 4 for a PEX Gen4 switch in base mode, 5 for a Gen5 at `level` (0 top, 1 sub).
fn bcm_gen(d: &PciDevice, level: u16) -> u8 {
    let (Some(&v), Some(&dev), Some(&sv), Some(&sd)) = (
        d.vendor_id.get(),
        d.device_id.get(),
        d.subsystem_vendor_id.get(),
        d.subsystem_device_id.get(),
    ) else {
        return 0;
    };
    if v == 0x1000 && dev == 0xc010 && sv == 0x1000 && (sd & 0xf000) == 0xa000 {
        4
    } else if v == 0x1000 && dev == 0xc030 && sv == 0x1000 && (sd & 0xf000) == level * 0x1000 {
        5
    } else {
        0
    }
}

/// Index of the node's PCI devices by address.
pub struct PciIndex<'a> {
    by_bdf: BTreeMap<&'a str, &'a PciDevice>,
}

impl<'a> PciIndex<'a> {
    pub fn new(node: &'a Node) -> Self {
        let by_bdf = node
            .pci
            .get()
            .map(|v| v.iter().map(|d| (d.bdf.as_str(), d)).collect())
            .unwrap_or_default();
        PciIndex { by_bdf }
    }
    pub fn get(&self, bdf: &str) -> Option<&'a PciDevice> {
        self.by_bdf.get(bdf).copied()
    }

    /// Place a device in NCCL's tree. `nic` folds the address first, as NCCL does for NICs.
    pub fn endpoint(&self, bdf: &str, nic: bool) -> Option<Endpoint> {
        let nccl_bdf = if nic {
            nccl_nic_bdf(bdf, true)
        } else {
            bdf.to_string()
        };
        // NCCL reads the folded device's path; fall back to the device itself if the folded
        // address does not exist (a VF whose PF is elsewhere).
        let dev = self.get(&nccl_bdf).or_else(|| self.get(bdf))?;
        let comps = path_components(&dev.sysfs_path);
        let idx = comps
            .iter()
            .rposition(|c| c.eq_ignore_ascii_case(&dev.bdf))?;
        let host_bridge = comps
            .first()
            .filter(|c| !parse::is_bdf(c))
            .map(|c| c.to_string())
            .unwrap_or_default();
        let bridges: Vec<String> = comps[..idx]
            .iter()
            .rev()
            .filter(|c| parse::is_bdf(c))
            .map(|c| c.to_lowercase())
            .collect();
        // NCCL's walk: from the device, up two components to the next PCI node, until a
        // component is not a PCI address (the CPU, keyed by the topmost device's numa_node).
        let mut switches = Vec::new();
        let mut cur = idx;
        let mut cur_dev = dev;
        let cpu;
        let mut cpu_unknown = None;
        loop {
            let p1 = cur.checked_sub(1).and_then(|i| comps.get(i));
            let p2 = cur.checked_sub(2).and_then(|i| comps.get(i));
            match (p1, p2) {
                (Some(a), Some(b)) if parse::is_bdf(a) && parse::is_bdf(b) => {
                    let b = b.to_lowercase();
                    cur -= 2;
                    match self.get(&b) {
                        Some(d) => cur_dev = d,
                        None => {
                            cpu_unknown = Some(format!(
                                "the bridge {b} is not in the pci listing: the cpu above it is unknown"
                            ));
                            switches.push(b);
                            cpu = "?".to_string();
                            break;
                        }
                    }
                    switches.push(b);
                }
                _ => {
                    cpu = match &cur_dev.numa_node {
                        Fact::Known { value, .. } => value.to_string(),
                        Fact::Absent { source, reason } => {
                            cpu_unknown = Some(format!(
                                "the numa node of {}, which says the cpu above it, cannot be read: {source}: {reason}",
                                cur_dev.bdf
                            ));
                            "?".into()
                        }
                    };
                    break;
                }
            }
        }
        // BCM flattening: a Gen4/Gen5 sub-switch directly below a top-level switch of the same
        // generation is merged into it.
        let mut flat: Vec<String> = Vec::new();
        for (i, s) in switches.iter().enumerate() {
            let sub = self.get(s).map(|d| bcm_gen(d, 1)).unwrap_or(0);
            let parent = switches
                .get(i + 1)
                .and_then(|p| self.get(p))
                .map(|d| bcm_gen(d, 0))
                .unwrap_or(0);
            if sub != 0 && sub == parent {
                continue;
            }
            flat.push(s.clone());
        }
        Some(Endpoint {
            bdf: bdf.to_string(),
            nccl_bdf,
            switches: flat,
            cpu,
            cpu_unknown,
            numa_node: dev.numa_node.get().copied(),
            host_bridge,
            bridges,
        })
    }
}

/// The path between two endpoints: NCCL's type, nvidia-smi's type, and the bridges that carry a
/// peer-to-peer transfer between them (those below their common ancestor, where ACS decides
/// whether the switch may route the transfer directly).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Path {
    pub nccl: PathType,
    pub smi: SmiType,
    pub p2p_bridges: Vec<String>,
    /// The common PCI ancestor (a switch port) when there is one.
    pub common: Option<String>,
    /// Why the type is not known, naming the file: no switch is shared and the CPU of one end
    /// cannot be read, so PHB (one CPU) cannot be told from SYS (two). `nccl` then says SYS,
    /// which no caller may take as known.
    #[serde(skip)]
    pub unknown: Option<String>,
}

pub fn path(a: &Endpoint, b: &Endpoint) -> Path {
    let shared = a
        .switches
        .iter()
        .enumerate()
        .find_map(|(ia, s)| b.switches.iter().position(|t| t == s).map(|ib| (ia, ib)));
    let nccl = match shared {
        Some((0, 0)) => PathType::Pix,
        Some(_) => PathType::Pxb,
        None if a.cpu == b.cpu && a.cpu != "?" => PathType::Phb,
        None => PathType::Sys,
    };
    let unknown = match shared {
        Some(_) => None,
        None => a.cpu_unknown.clone().or_else(|| b.cpu_unknown.clone()),
    };
    let smi = match nccl {
        PathType::Pix => SmiType::Pix,
        PathType::Pxb => SmiType::Pxb,
        PathType::Phb | PathType::P2c | PathType::Loc if a.host_bridge == b.host_bridge => {
            SmiType::Phb
        }
        PathType::Phb | PathType::P2c | PathType::Loc => SmiType::Node,
        PathType::Sys => SmiType::Sys,
    };
    // The raw common ancestor in the sysfs tree; bridges strictly below it on either side.
    let common = a.bridges.iter().find(|x| b.bridges.contains(x)).cloned();
    let below = |e: &Endpoint| -> Vec<String> {
        e.bridges
            .iter()
            .take_while(|x| Some(*x) != common.as_ref())
            .cloned()
            .collect()
    };
    let mut p2p = below(a);
    for x in below(b) {
        if !p2p.contains(&x) {
            p2p.push(x);
        }
    }
    Path {
        nccl,
        smi,
        p2p_bridges: p2p,
        common,
        unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_like_nccl() {
        assert_eq!(parse_level("PIX"), Some(4));
        assert_eq!(parse_level("SYS"), Some(9));
        assert_eq!(parse_level("PHB"), Some(8));
        assert_eq!(parse_level("0"), Some(0));
        assert_eq!(parse_level("2"), Some(5));
        assert_eq!(parse_level("3"), Some(8));
        assert_eq!(parse_level("5"), Some(9));
        assert_eq!(parse_level("99"), Some(9));
        // strtol(.., 0): hex and octal like NCCL
        assert_eq!(parse_level("0x2"), Some(5));
        assert_eq!(parse_level("08"), Some(0));
        assert_eq!(parse_level("010"), Some(9));
        assert_eq!(parse_level("2abc"), Some(5));
        assert_eq!(parse_level("pix"), None);
        assert_eq!(parse_level(""), None);
    }

    #[test]
    fn nic_folding() {
        assert_eq!(nccl_nic_bdf("0000:19:00.1", true), "0000:19:00.0");
        assert_eq!(nccl_nic_bdf("0000:19:03.4", true), "0000:19:00.0");
        assert_eq!(nccl_nic_bdf("0000:19:03.4", false), "0000:19:03.0");
    }
}

#[cfg(test)]
mod tree_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::Fact;
    use crate::testing::*;

    const RP: &str = "/sys/devices/pci0000:15/0000:15:01.0";

    #[test]
    fn an_unreadable_numa_node_above_an_endpoint_makes_its_cross_switch_paths_unknown_not_sys() {
        // GPU under switch 16:00 (host bridge 15), NIC under switch 26:00 (host bridge 25).
        const RP2: &str = "/sys/devices/pci0000:25/0000:25:01.0";
        let mut n = with(
            empty_node(),
            vec![
                bridge(RP, 0),
                bridge(&format!("{RP}/0000:16:00.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:00.0"), 0),
                gpu(&format!("{RP}/0000:16:00.0/0000:17:00.0/0000:18:00.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:01.0"), 0),
                nic(&format!("{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0"), 0),
                bridge(RP2, 0),
                bridge(&format!("{RP2}/0000:26:00.0"), 0),
                bridge(&format!("{RP2}/0000:26:00.0/0000:27:01.0"), 0),
                nic(&format!("{RP2}/0000:26:00.0/0000:27:01.0/0000:29:00.0"), 0),
            ],
            vec![
                rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE"),
                rdma("mlx5_1", "0000:29:00.0", "4: ACTIVE"),
            ],
        );
        let file = format!("{RP}/0000:16:00.0/numa_node");
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.bdf == "0000:16:00.0") {
                d.numa_node = Fact::absent(file.clone(), "unrecognised content \"zz\"");
            }
        }
        let idx = PciIndex::new(&n);
        let g = idx.endpoint("0000:18:00.0", false).unwrap();
        let near = idx.endpoint("0000:19:00.0", true).unwrap();
        let far = idx.endpoint("0000:29:00.0", true).unwrap();
        // Under the same switch: PIX, whatever the cpu.
        let p = path(&g, &near);
        assert_eq!((p.nccl, p.unknown.as_deref()), (PathType::Pix, None));
        // Across switches: PHB or SYS depends on the cpu, which cannot be read.
        let p = path(&g, &far);
        let why = p.unknown.unwrap_or_default();
        assert!(why.contains(&file), "{why}");
        // The rule does not take it as SYS: the pair is undecided, its reason names the file.
        let sys = crate::gdr::system(&n, &crate::gdr::Context::new(&n));
        assert_eq!(sys.paths[0][0].map(|k| k.as_str()), Some("PIX"));
        assert_eq!(sys.paths[0][1], None, "{:?}", sys.paths);
        assert!(sys.path_hint.contains(&file), "{}", sys.path_hint);
    }

    #[test]
    fn one_switch_is_pix_two_levels_are_pxb() {
        // RP -> USP1 16:00 -> DSP 17:00 -> GPU 18:00
        //                  -> DSP 17:01 -> USP2 19:00 -> DSP 1a:00 -> NIC 1b:00
        let n = with(
            empty_node(),
            vec![
                bridge(RP, 0),
                bridge(&format!("{RP}/0000:16:00.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:00.0"), 0),
                gpu(&format!("{RP}/0000:16:00.0/0000:17:00.0/0000:18:00.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:01.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0"), 0),
                bridge(
                    &format!("{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0/0000:1a:00.0"),
                    0,
                ),
                nic(
                    &format!(
                        "{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0"
                    ),
                    0,
                ),
            ],
            vec![],
        );
        let idx = PciIndex::new(&n);
        let g = idx.endpoint("0000:18:00.0", false).unwrap();
        let nic = idx.endpoint("0000:1b:00.0", true).unwrap();
        assert_eq!(g.switches, vec!["0000:16:00.0"]);
        assert_eq!(nic.switches, vec!["0000:19:00.0", "0000:16:00.0"]);
        let p = path(&g, &nic);
        assert_eq!((p.nccl, p.smi), (PathType::Pxb, SmiType::Pxb));
        assert_eq!(p.common.as_deref(), Some("0000:16:00.0"));
        assert_eq!(
            p.p2p_bridges,
            vec![
                "0000:17:00.0",
                "0000:1a:00.0",
                "0000:19:00.0",
                "0000:17:01.0"
            ]
        );
    }

    #[test]
    fn bcm_gen5_two_level_switch_flattens_to_pix() {
        let mut top = bridge(&format!("{RP}/0000:16:00.0"), 0);
        let mut sub = bridge(&format!("{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0"), 0);
        for (d, sd) in [(&mut top, 0x0000u16), (&mut sub, 0x1000u16)] {
            let d: &mut crate::model::PciDevice = d;
            d.vendor_id = Fact::known(0x1000, "t");
            d.device_id = Fact::known(0xc030, "t");
            d.subsystem_vendor_id = Fact::known(0x1000, "t");
            d.subsystem_device_id = Fact::known(sd, "t");
        }
        let n = with(
            empty_node(),
            vec![
                bridge(RP, 0),
                top,
                bridge(&format!("{RP}/0000:16:00.0/0000:17:00.0"), 0),
                gpu(&format!("{RP}/0000:16:00.0/0000:17:00.0/0000:18:00.0"), 0),
                bridge(&format!("{RP}/0000:16:00.0/0000:17:01.0"), 0),
                sub,
                bridge(
                    &format!("{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0/0000:1a:00.0"),
                    0,
                ),
                nic(
                    &format!(
                        "{RP}/0000:16:00.0/0000:17:01.0/0000:19:00.0/0000:1a:00.0/0000:1b:00.0"
                    ),
                    0,
                ),
            ],
            vec![],
        );
        let idx = PciIndex::new(&n);
        let nic = idx.endpoint("0000:1b:00.0", true).unwrap();
        assert_eq!(
            nic.switches,
            vec!["0000:16:00.0"],
            "the Gen5 sub-switch merges into its parent"
        );
        let g = idx.endpoint("0000:18:00.0", false).unwrap();
        assert_eq!(path(&g, &nic).nccl, PathType::Pix);
    }

    #[test]
    fn root_ports_host_bridges_and_sockets() {
        // GPU under a root port of pci0000:15 (numa 0); NIC A under another root port of the
        // same host bridge; NIC B under pci0000:35 (numa 0); NIC C under pci0000:95 (numa 1).
        let n = with(
            empty_node(),
            vec![
                bridge(RP, 0),
                gpu(&format!("{RP}/0000:16:00.0"), 0),
                bridge("/sys/devices/pci0000:15/0000:15:02.0", 0),
                nic("/sys/devices/pci0000:15/0000:15:02.0/0000:17:00.0", 0),
                bridge("/sys/devices/pci0000:35/0000:35:01.0", 0),
                nic("/sys/devices/pci0000:35/0000:35:01.0/0000:36:00.1", 0),
                nic("/sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0", 0),
                bridge("/sys/devices/pci0000:95/0000:95:01.0", 1),
                nic("/sys/devices/pci0000:95/0000:95:01.0/0000:96:00.0", 1),
            ],
            vec![],
        );
        let idx = PciIndex::new(&n);
        let g = idx.endpoint("0000:16:00.0", false).unwrap();
        assert!(g.switches.is_empty());
        assert_eq!(g.cpu, "0");
        let a = idx.endpoint("0000:17:00.0", true).unwrap();
        let b = idx.endpoint("0000:36:00.1", true).unwrap();
        let c = idx.endpoint("0000:96:00.0", true).unwrap();
        assert_eq!(b.nccl_bdf, "0000:36:00.0", "port 1 folds onto function 0");
        assert_eq!(
            (path(&g, &a).nccl, path(&g, &a).smi),
            (PathType::Phb, SmiType::Phb)
        );
        assert_eq!(
            (path(&g, &b).nccl, path(&g, &b).smi),
            (PathType::Phb, SmiType::Node)
        );
        assert_eq!(
            (path(&g, &c).nccl, path(&g, &c).smi),
            (PathType::Sys, SmiType::Sys)
        );
        // The ACS-relevant bridges of a PHB path are every bridge on both sides.
        assert_eq!(
            path(&g, &a).p2p_bridges,
            vec!["0000:15:01.0", "0000:15:02.0"]
        );
    }

    #[test]
    fn numa_minus_one_is_one_cpu() {
        let n = with(
            empty_node(),
            vec![
                gpu("/sys/devices/pci0000:00/0000:00:06.0", -1),
                nic("/sys/devices/pci0000:80/0000:80:01.0", -1),
            ],
            vec![],
        );
        let idx = PciIndex::new(&n);
        let p = path(
            &idx.endpoint("0000:00:06.0", false).unwrap(),
            &idx.endpoint("0000:80:01.0", true).unwrap(),
        );
        // NCCL cannot see the socket: PHB (a SYS path may hide behind numa_node -1).
        assert_eq!((p.nccl, p.smi), (PathType::Phb, SmiType::Node));
    }
}
