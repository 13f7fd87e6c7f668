//! Health (issue 17): what breaks GDR on a node that used to work. RoCE addressing, error
//! counters and kernel events. Collected by `src/health/`, judged by `checks/src/checks/{roce,
//! counters,kernel}.rs` with the pure rules in `roce.rs`, `counters.rs` and `klog.rs`.

use super::fact::Fact;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// RoCE addressing, error counters and kernel events of one node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// One entry per RDMA port with link layer Ethernet: its GID table and netdevs.
    pub roce: Fact<Vec<RocePort>>,
    /// PCIe AER statistics (`aer_dev_*`) of GPUs, NICs and the bridges above them.
    pub aer: Fact<Vec<AerStats>>,
    /// Per RDMA port: `counters/*` and `hw_counters/*`.
    pub port_counters: Fact<Vec<PortCounters>>,
    /// An earlier reading of the same counters, to judge how much they grew: `--interval`, the
    /// state file of the last periodic run, or a snapshot's `gdrdoctor/counters-baseline.json`.
    pub baseline: Option<CounterBaseline>,
    /// Why there is no baseline (`state file from another boot: ignored`), when that is worth
    /// saying.
    pub baseline_note: Option<String>,
    /// Kernel log lines about Xids, IOMMU faults, mlx5 health and peer-memory module load
    /// failures (only the lines that matter).
    pub kernel_log: Fact<KernelLog>,
}

impl Health {
    pub fn absent(reason: &str) -> Self {
        Health {
            roce: Fact::absent("/sys/class/infiniband", reason),
            aer: Fact::absent("/sys/bus/pci/devices/*/aer_dev_*", reason),
            port_counters: Fact::absent("/sys/class/infiniband/*/ports/*/counters", reason),
            baseline: None,
            baseline_note: None,
            kernel_log: Fact::absent("kernel log", reason),
        }
    }
}

/// An RDMA port with link layer Ethernet (RoCE).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RocePort {
    pub device: String,
    pub port: u32,
    /// Entries in `ports/<p>/gids` (the table length, `gid_tbl_len`, that NCCL walks).
    pub gid_tbl_len: usize,
    /// The non-zero GIDs, with their type and netdev; every other index holds the zero GID.
    pub gids: Fact<Vec<GidEntry>>,
    /// The netdevs behind the port (`gid_attrs/ndevs/*`, else `device/net/*`); absent in a
    /// foreign capture that holds neither.
    pub netdevs: Fact<Vec<Netdev>>,
}

/// One populated GID table entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GidEntry {
    pub index: u32,
    /// As sysfs prints it: `0000:0000:0000:0000:0000:ffff:0a00:0001`.
    pub gid: String,
    /// `gid_attrs/types/<index>`: `RoCE v2`, `IB/RoCE v1`. A read failing with EINVAL has the
    /// reason `EINVAL` (what containers without the GID mapped return).
    pub kind: Fact<String>,
    /// `gid_attrs/ndevs/<index>`: the netdev whose address the GID carries.
    pub ndev: Option<String>,
}

/// A network interface behind a RoCE port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Netdev {
    pub name: String,
    /// `/sys/class/net/<if>/operstate`: `up`, `down`, `lowerlayerdown`, ...
    pub operstate: Fact<String>,
    pub mtu: Fact<u32>,
    /// `ecn/roce_np/enable/<prio>` (MOFED / DOCA-OFED mlx5): `None` where the driver exposes
    /// no ECN directory.
    pub ecn_np: Fact<Option<BTreeMap<u8, bool>>>,
    /// `ecn/roce_rp/enable/<prio>`.
    pub ecn_rp: Fact<Option<BTreeMap<u8, bool>>>,
}

/// `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal` of one PCI function: counter
/// name -> count since boot (`TOTAL_ERR_COR`, `TOTAL_ERR_NONFATAL`, `TOTAL_ERR_FATAL` and one
/// line per error type).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AerStats {
    pub bdf: String,
    /// What the device is to GDR: `gpu`, `nic`, `bridge`.
    pub role: String,
    pub correctable: Fact<BTreeMap<String, u64>>,
    pub nonfatal: Fact<BTreeMap<String, u64>>,
    pub fatal: Fact<BTreeMap<String, u64>>,
}

/// The error counters of one RDMA port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortCounters {
    pub device: String,
    pub port: u32,
    /// `ports/<p>/counters/*` (the IB PMA counters: `symbol_error`, `link_downed`, ...).
    pub counters: Fact<BTreeMap<String, u64>>,
    /// `ports/<p>/hw_counters/*` (driver counters: `out_of_sequence`, `packet_seq_err`, ...).
    pub hw_counters: Fact<BTreeMap<String, u64>>,
}

/// An earlier reading of the counters (keys as [`crate::counters::values`] builds them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterBaseline {
    pub values: BTreeMap<String, u64>,
    /// Milliseconds between that reading and this one.
    pub elapsed_ms: u64,
    /// Where it came from: `--interval 10s`, `state file /run/gdrdoctor/counters.json`.
    pub origin: String,
    /// Per key, milliseconds since that key was read, where it differs from `elapsed_ms`: the
    /// state file is a ledger in which each counters check moves only its own keys, so one
    /// family can be older than another (see [`CounterBaseline::elapsed_of`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ages_ms: BTreeMap<String, u64>,
}

impl CounterBaseline {
    /// Milliseconds between the baseline's reading of `key` and this one.
    pub fn elapsed_of(&self, key: &str) -> u64 {
        self.ages_ms.get(key).copied().unwrap_or(self.elapsed_ms)
    }

    /// The shortest and longest interval over the `keys` this baseline holds; `None` when it
    /// holds none of them (a first reading of those counters: there is no growth to judge).
    pub fn span_of<'a>(&self, keys: impl IntoIterator<Item = &'a str>) -> Option<(u64, u64)> {
        keys.into_iter()
            .filter(|k| self.values.contains_key(*k))
            .map(|k| self.elapsed_of(k))
            .fold(None, |acc, e| match acc {
                None => Some((e, e)),
                Some((lo, hi)) => Some((lo.min(e), hi.max(e))),
            })
    }
}

/// How much of this boot a kernel log covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogScope {
    /// From the start of this boot (the kmsg ring still holds record 0, or the boot line).
    ThisBoot,
    /// This boot only, but the start is gone (the ring buffer wrapped).
    ThisBootPartial,
    /// Boundaries unknown: lines may predate this boot.
    Unknown,
    /// Lines pasted into a bug report (`gdrdoctor diagnose`): what they show happened, but the
    /// absence of an event proves nothing (an excerpt, a `grep`).
    Excerpt,
}

impl LogScope {
    pub fn as_str(self) -> &'static str {
        match self {
            LogScope::ThisBoot => "this-boot",
            LogScope::ThisBootPartial => "this-boot-partial",
            LogScope::Unknown => "unknown",
            LogScope::Excerpt => "excerpt",
        }
    }
    pub fn parse(s: &str) -> Option<LogScope> {
        match s.trim() {
            "this-boot" => Some(LogScope::ThisBoot),
            "this-boot-partial" => Some(LogScope::ThisBootPartial),
            "unknown" => Some(LogScope::Unknown),
            "excerpt" => Some(LogScope::Excerpt),
            _ => None,
        }
    }
}

/// The kernel log lines gdrdoctor used (a snapshot stores exactly these).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelLog {
    /// Where they were read: `/dev/kmsg`, `journalctl -k -b 0`, `/var/log/kern.log`.
    pub origin: String,
    pub scope: LogScope,
    /// Lines looked at (all of them, not only the kept ones).
    pub scanned: usize,
    /// The lines about Xids, IOMMU faults, mlx5 health and peer-memory module load failures,
    /// oldest first.
    pub lines: Vec<String>,
}
