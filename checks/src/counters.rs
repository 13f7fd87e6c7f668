//! Error counters: what each one means, when it is bad, and how to judge it once (the value
//! since the counters were last cleared) or twice (its growth between two readings).
//!
//! A counter that only grows says little on its own: a link that took 14 receive errors in
//! three months of traffic is healthy. So a single reading is judged only against generous
//! cumulative thresholds (infiniband-diags' `ibcheckerrs` defaults, as `ibcheckerrors` prints
//! them: SymbolErrors 10, LinkRecovers 10, LinkDowned 10, RcvErrors 10, RcvRemotePhysErrors 100,
//! RcvSwRelayErrors 100, XmtDiscards 100, XmtConstraintErrors 100, RcvConstraintErrors 100,
//! LinkIntegrityErrors 10, ExcBufOverrunErrors 10, VL15Dropped 100), and growth between two
//! readings (`check --interval`, or the state file of the last periodic run) is what really
//! judges a link.
//!
//! Counter meanings: InfiniBand Architecture Specification vol. 1, PortCounters attribute
//! (16.1.3.5); infiniband-diags `IBswcountlimits.pm` (the per-counter advice of
//! `ibswportwatch`); Linux `Documentation/ABI/testing/sysfs-class-infiniband` and
//! `drivers/infiniband/hw/mlx5/counters.c` (hw_counters names); NVIDIA "Understanding mlx5
//! Linux counters and status parameters"; Linux
//! `Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats` (AER); NVML
//! `nvmlDeviceGetNvLinkErrorCounter` / `nvmlDeviceGetPcieReplayCounter`.

use crate::model::{CounterBaseline, Node};
use crate::report::Status;
use std::collections::BTreeMap;

/// How one counter is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Def {
    pub name: &'static str,
    pub meaning: &'static str,
    /// A single reading at or above this value gets this status (`None`: reported, not judged).
    pub cumulative: Option<(u64, Status)>,
    /// Growth by at least this much between two readings gets this status.
    pub growth: Option<(u64, Status)>,
    /// Width in bits of a counter that saturates (the IB PMA PortCounters: 4, 8 or 16 bits):
    /// at its maximum it cannot show new errors.
    pub bits: Option<u32>,
}

impl Def {
    const fn bits(mut self, b: u32) -> Def {
        self.bits = Some(b);
        self
    }
    /// The value a saturating counter stops at.
    pub fn max(&self) -> Option<u64> {
        self.bits.map(|b| (1u64 << b) - 1)
    }
}

const fn def(
    name: &'static str,
    meaning: &'static str,
    cumulative: Option<(u64, Status)>,
    growth: Option<(u64, Status)>,
) -> Def {
    Def {
        name,
        meaning,
        cumulative,
        growth,
        bits: None,
    }
}

use Status::{Fail, Warn};

/// `ports/<p>/counters/*`: the IB PMA PortCounters (RoCE ports expose them too; some stay 0).
/// Widths from Linux `drivers/infiniband/core/sysfs.c` (`PORT_PMA_ATTR(name, counter, width,
/// offset)`): these counters stop at their maximum instead of wrapping.
pub static IB_PORT: &[Def] = &[
    def(
        "link_downed",
        "the link went down and came back (a flap): every QP on it breaks",
        Some((10, Warn)),
        Some((1, Fail)),
    )
    .bits(8),
    def(
        "link_error_recovery",
        "the link retrained to recover from errors without going down",
        Some((10, Warn)),
        Some((1, Warn)),
    )
    .bits(8),
    def(
        "symbol_error",
        "symbol errors on the physical lanes: cable, transceiver or port",
        Some((10, Warn)),
        Some((1, Warn)),
    )
    .bits(16),
    def(
        "port_rcv_errors",
        "received packets with errors (bad CRC, malformed)",
        Some((10, Warn)),
        Some((1, Warn)),
    )
    .bits(16),
    def(
        "local_link_integrity_errors",
        "physical errors beyond the local link integrity threshold",
        Some((10, Warn)),
        Some((1, Warn)),
    )
    .bits(4),
    def(
        "excessive_buffer_overrun_errors",
        "receive buffer overruns: link-level flow control failed",
        Some((10, Warn)),
        Some((1, Warn)),
    )
    .bits(4),
    def(
        "port_rcv_remote_physical_errors",
        "packets the sender already marked bad: the fault is upstream",
        Some((100, Warn)),
        Some((1, Warn)),
    )
    .bits(16),
    def(
        "port_rcv_switch_relay_errors",
        "packets a switch could not relay",
        Some((100, Warn)),
        None,
    )
    .bits(16),
    def(
        "port_xmit_discards",
        "outbound packets dropped (port down, or stuck behind congestion)",
        Some((100, Warn)),
        Some((1, Warn)),
    )
    .bits(16),
    def(
        "port_xmit_constraint_errors",
        "outbound packets dropped by partition or raw-packet filtering",
        Some((100, Warn)),
        None,
    )
    .bits(8),
    def(
        "port_rcv_constraint_errors",
        "inbound packets dropped by partition or raw-packet filtering",
        Some((100, Warn)),
        None,
    )
    .bits(8),
    def(
        "VL15_dropped",
        "subnet management packets dropped",
        Some((100, Warn)),
        None,
    )
    .bits(16),
];

/// `ports/<p>/hw_counters/*` (mlx5 names): transport errors. Many come from applications
/// (a job killed mid-transfer), so a single reading is reported, not judged; growth is.
pub static RDMA_TRANSPORT: &[Def] = &[
    def("out_of_sequence", "packets arrived out of order: one was lost and the sender must retransmit", None, Some((1, Warn))),
    def("packet_seq_err", "NAK-sequence errors received: the peer saw a gap and asked for a retransmission", None, Some((1, Warn))),
    def("local_ack_timeout_err", "transport retry timeouts: ACKs never came back (a lossy or stalled path)", None, Some((1, Warn))),
    def("implied_nak_seq_err", "read responses or atomics implied a lost packet", None, Some((1, Warn))),
    def("rnr_nak_retry_err", "receiver-not-ready retries exhausted: a QP went to the error state", None, Some((1, Warn))),
    def("req_cqe_error", "requester work completions with an error", None, Some((1, Warn))),
    def("resp_cqe_error", "responder work completions with an error", None, Some((1, Warn))),
    def("req_remote_access_errors", "a remote peer refused an RDMA access (rkey or memory region gone, e.g. GPU memory freed while registered)", None, Some((1, Warn))),
    def("resp_remote_access_errors", "this port refused a remote RDMA access (invalid rkey or range)", None, Some((1, Warn))),
    def("req_remote_invalid_request", "the remote side rejected a request as invalid", None, Some((1, Warn))),
    def("resp_local_length_error", "an incoming message did not fit the posted receive buffer", None, Some((1, Warn))),
    def("rx_icrc_encapsulated", "RoCE packets with a bad ICRC", None, Some((1, Warn))),
    def("duplicate_request", "requests received twice: the peer retransmitted after a loss", None, Some((1, Warn))),
];

/// The RoCE congestion counters of `hw_counters/` shown as evidence of DCQCN at work (not judged).
pub const CNP: &[&str] = &[
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "rp_cnp_handled",
    "rp_cnp_ignored",
];

/// Whether a port's counter file is one a check reads: the judged ones ([`IB_PORT`],
/// [`RDMA_TRANSPORT`]) and [`CNP`]. The collector reads these and lists the rest (a port has
/// forty-odd counter files: on an 8-NIC node, 320 files read for 150 that are used).
pub fn port_counter_used(name: &str) -> bool {
    find(IB_PORT, name).is_some() || find(RDMA_TRANSPORT, name).is_some() || CNP.contains(&name)
}

/// `aer_dev_*`: errors since boot (the kernel never clears them).
pub static AER: &[Def] = &[
    def("TOTAL_ERR_FATAL", "fatal uncorrectable PCIe errors: the link was reset, transactions in flight were lost", Some((1, Fail)), Some((1, Fail))),
    def("TOTAL_ERR_NONFATAL", "non-fatal uncorrectable PCIe errors (completion timeouts, unsupported requests, poisoned TLPs): transactions were lost", Some((1, Warn)), Some((1, Fail))),
    def("TOTAL_ERR_COR", "corrected PCIe errors (bad TLPs/DLLPs, receiver errors, replay timeouts): the link retries, bandwidth drops", None, Some((1, Warn))),
];

/// NVML NVLink error counters (since the driver loaded).
pub static NVLINK: &[Def] = &[
    def(
        "recovery",
        "the NVLink went through recovery (retrained): traffic on it stalled",
        Some((1, Warn)),
        Some((1, Fail)),
    ),
    def(
        "replay",
        "NVLink data-link replays (a flit was resent)",
        None,
        Some((1, Warn)),
    ),
    def(
        "crc_flit",
        "NVLink flow-control flits with a CRC error",
        None,
        Some((1, Warn)),
    ),
    def(
        "crc_data",
        "NVLink data flits with a CRC error",
        None,
        Some((1, Warn)),
    ),
];

/// NVML PCIe replay counter of a GPU (since the driver loaded).
pub static PCIE_REPLAY: &[Def] = &[def(
    "replay",
    "PCIe data-link replays of the GPU's link (a TLP was resent after an error)",
    None,
    Some((1, Warn)),
)];

pub fn find(defs: &'static [Def], name: &str) -> Option<&'static Def> {
    defs.iter().find(|d| d.name == name)
}

/// One counter read now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The key in [`values`] (`ib/mlx5_0/1/link_downed`).
    pub key: String,
    pub name: String,
    pub value: u64,
    /// Where it was read (`/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed`).
    pub source: String,
}

/// A counter and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub reading: Reading,
    pub def: Option<&'static Def>,
    /// Growth since the baseline; `None` without a baseline, or when the counter went down
    /// (cleared or reset since).
    pub growth: Option<u64>,
    /// The counter is lower than in the baseline.
    pub reset: bool,
    pub status: Status,
    /// Why: `rose by 3 in 10.0 s`, `36905 since the counters were last cleared (threshold 10)`.
    pub why: Option<String>,
}

/// Seconds as people read them (`10.0 s`, `5 min`, `2.0 h`).
pub fn human_secs(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Judge readings against their definitions and, when there is one, the baseline.
pub fn judge(
    readings: Vec<Reading>,
    defs: &'static [Def],
    baseline: Option<&CounterBaseline>,
) -> Vec<Judged> {
    readings
        .into_iter()
        .map(|r| {
            let d = find(defs, &r.name);
            let before = baseline.and_then(|b| b.values.get(&r.key).copied());
            let reset = before.is_some_and(|b| r.value < b);
            let growth = before.filter(|b| r.value >= *b).map(|b| r.value - b);
            let mut status = Status::Pass;
            let mut why = None;
            if let (Some(d), Some(g), Some(b)) = (d, growth, baseline) {
                if let Some((min, s)) = d.growth {
                    if g >= min {
                        status = s;
                        why = Some(format!(
                            "{} rose by {g} in {} (now {})",
                            r.name,
                            human_secs(b.elapsed_of(&r.key)),
                            r.value
                        ));
                    }
                }
            }
            // A saturated counter cannot grow: judge its total whatever the baseline says.
            if let Some(max) = d.and_then(Def::max).filter(|m| r.value >= *m) {
                let (_, s) = d.and_then(|d| d.cumulative).unwrap_or((0, Status::Warn));
                if s > status {
                    status = s;
                }
                let bits = d.and_then(|d| d.bits).unwrap_or(0);
                why = Some(format!(
                    "{} is saturated at {max} ({} {bits}-bit counter): it cannot count further errors until cleared",
                    r.name,
                    if bits == 8 { "an" } else { "a" }
                ));
                return Judged {
                    reading: r,
                    def: d,
                    growth,
                    reset,
                    status,
                    why,
                };
            }
            // Without a usable baseline, the cumulative threshold.
            if growth.is_none() {
                if let Some((min, s)) = d.and_then(|d| d.cumulative) {
                    if r.value >= min {
                        status = s;
                        why = Some(format!(
                            "{} is {} since the counters were last cleared (threshold {min})",
                            r.name, r.value
                        ));
                    }
                }
            }
            Judged {
                reading: r,
                def: d,
                growth,
                reset,
                status,
                why,
            }
        })
        .collect()
}

/// `12 (+3 in 10.0 s)` for evidence.
pub fn observed(j: &Judged, baseline: Option<&CounterBaseline>) -> String {
    match (j.growth, baseline) {
        (Some(g), Some(b)) => format!(
            "{} (+{g} in {})",
            j.reading.value,
            human_secs(b.elapsed_of(&j.reading.key))
        ),
        _ if j.reset => format!(
            "{} (lower than the baseline: cleared or reset since)",
            j.reading.value
        ),
        _ => j.reading.value.to_string(),
    }
}

/// Every counter gdrdoctor reads on this node, by key: `aer/<bdf>/<file>/<name>`,
/// `ib/<dev>/<port>/<name>`, `hw/<dev>/<port>/<name>`, `nvlink/<bdf>/<link>/<name>`,
/// `pcie-replay/<bdf>`; and `rdma-at/<dev>/<bdf>` = its node GUID (or 1), the PCI function of each RDMA device
/// (not a counter: the next run follows devices by function). The state file and
/// `--interval` compare these.
pub fn values(node: &Node) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in aer_readings(node).into_iter().flat_map(|(_, v)| v) {
        m.insert(r.key, r.value);
    }
    for r in port_readings(node)
        .into_iter()
        .flat_map(|(_, a, b)| a.into_iter().chain(b))
    {
        m.insert(r.key, r.value);
    }
    for r in gpu_readings(node)
        .into_iter()
        .flat_map(|(_, a, b)| a.into_iter().chain(b))
    {
        m.insert(r.key, r.value);
    }
    // Where each RDMA device sits (`rdma-at/<dev>/<bdf>`, value its node GUID or 1): not a counter, but what
    // tells a device renamed or moved into a pod since (its function still serves RDMA) from
    // one lost (its function gone from the bus) when the next run judges this reading.
    if let Some(devs) = node.rdma.get() {
        for d in devs {
            if let Some(Some(bdf)) = d.pci_bdf.get() {
                let guid = d.node_guid.get().and_then(|g| guid_value(g)).unwrap_or(1);
                m.insert(format!("{RDMA_AT}/{}/{bdf}", d.name), guid);
            }
        }
    }
    m
}

/// A node GUID (`b8ce:f603:00a1:2b3c`) as a number, the value of an `rdma-at` key: what tells
/// two devices on one function apart (a PF's and its sub-function's) when both are renamed.
/// `None` for an unreadable or zero GUID (the key then holds 1).
pub fn guid_value(text: &str) -> Option<u64> {
    let hex: String = text.trim().chars().filter(|c| *c != ':').collect();
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(&hex, 16).ok().filter(|v| *v > 1)
}

/// The key family of [`values`] that records each RDMA device's PCI function.
pub const RDMA_AT: &str = "rdma-at";

/// Which counters check judges which key families of [`values`]: the state file is a ledger,
/// and a run moves only the families of the checks it ran (a `--only kmod` run between two
/// periodic runs must not swallow a link flap). `rdma-at` is read by both RDMA checks (to
/// follow a device renamed or moved since).
pub const FAMILIES: &[(&str, &[&str])] = &[
    ("counters.aer", &["aer/"]),
    ("counters.ib-port", &["ib/", "rdma-at/"]),
    ("counters.rdma-transport", &["hw/", "rdma-at/"]),
    ("counters.nvlink", &["nvlink/"]),
    ("counters.pcie-replay", &["pcie-replay/"]),
];

/// The key prefixes of the counters checks `selected` says run.
pub fn families_of(selected: impl Fn(&str) -> bool) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = FAMILIES
        .iter()
        .filter(|(id, _)| selected(id))
        .flat_map(|(_, p)| p.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether `key` belongs to one of the `families` ([`families_of`]).
pub fn in_families(key: &str, families: &[&str]) -> bool {
    families.iter().any(|p| key.starts_with(p))
}

/// AER readings per PCI function (bdf, readings of all three files).
pub fn aer_readings(node: &Node) -> Vec<(String, Vec<Reading>)> {
    aer_readings_of(node, |_| true)
}

/// [`aer_readings`] of the counters `keep` names only (a check builds the readings it judges,
/// not the forty-odd error types of every function).
pub fn aer_readings_of(node: &Node, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<Reading>)> {
    let Some(list) = node.health.aer.get() else {
        return vec![];
    };
    list.iter()
        .map(|a| (a.bdf.clone(), aer_device_readings(a, &keep)))
        .collect()
}

/// One function's AER readings of the counters `keep` names.
pub fn aer_device_readings(
    a: &crate::model::AerStats,
    keep: impl Fn(&str) -> bool,
) -> Vec<Reading> {
    let mut v = Vec::new();
    for (file, fact) in [
        ("aer_dev_correctable", &a.correctable),
        ("aer_dev_nonfatal", &a.nonfatal),
        ("aer_dev_fatal", &a.fatal),
    ] {
        if let Some(map) = fact.get() {
            for (name, value) in map.iter().filter(|(n, _)| keep(n)) {
                v.push(Reading {
                    key: format!("aer/{}/{file}/{name}", a.bdf),
                    name: name.clone(),
                    value: *value,
                    source: fact.source().to_string(),
                });
            }
        }
    }
    v
}

/// Port counter readings: (`dev/port`, counters/, hw_counters/).
pub fn port_readings(node: &Node) -> Vec<(String, Vec<Reading>, Vec<Reading>)> {
    port_readings_of(node, |_| true)
}

/// [`port_readings`] of the counters `keep` names only.
pub fn port_readings_of(
    node: &Node,
    keep: impl Fn(&str) -> bool,
) -> Vec<(String, Vec<Reading>, Vec<Reading>)> {
    let Some(list) = node.health.port_counters.get() else {
        return vec![];
    };
    list.iter()
        .map(|p| {
            let subject = format!("{}/{}", p.device, p.port);
            let read =
                |prefix: &str, fact: &crate::model::Fact<BTreeMap<String, u64>>| -> Vec<Reading> {
                    fact.get()
                        .map(|m| {
                            m.iter()
                                .filter(|(name, _)| keep(name))
                                .map(|(name, value)| Reading {
                                    key: format!("{prefix}/{subject}/{name}"),
                                    name: name.clone(),
                                    value: *value,
                                    source: format!("{}/{name}", fact.source()),
                                })
                                .collect()
                        })
                        .unwrap_or_default()
                };
            (
                subject.clone(),
                read("ib", &p.counters),
                read("hw", &p.hw_counters),
            )
        })
        .collect()
}

/// NVML readings per GPU: (bdf, NVLink counters with `link<N>` prefixed names, PCIe replay).
pub fn gpu_readings(node: &Node) -> Vec<(String, Vec<Reading>, Vec<Reading>)> {
    gpu_readings_of(node, true)
}

/// [`gpu_readings`], the NVLink counters left empty unless `nvlink` (the PCIe replay check
/// judges one counter per GPU, not the seventy-two of eighteen links).
pub fn gpu_readings_of(node: &Node, nvlink: bool) -> Vec<(String, Vec<Reading>, Vec<Reading>)> {
    let Some(nvml) = node.live.nvml.get() else {
        return vec![];
    };
    nvml.gpus
        .iter()
        .map(|g| {
            let mut links = Vec::new();
            for l in g.nvlinks.iter().filter(|l| nvlink && l.active) {
                for (name, v) in [
                    ("recovery", l.recovery_errors),
                    ("replay", l.replay_errors),
                    ("crc_flit", l.crc_flit_errors),
                    ("crc_data", l.crc_data_errors),
                ] {
                    if let Some(value) = v {
                        links.push(Reading {
                            key: format!("nvlink/{}/{}/{name}", g.bdf, l.link),
                            name: name.to_string(),
                            value,
                            source: format!("nvmlDeviceGetNvLinkErrorCounter(link {})", l.link),
                        });
                    }
                }
            }
            let replay = g
                .pcie_replay_counter
                .map(|value| Reading {
                    key: format!("pcie-replay/{}", g.bdf),
                    name: "replay".into(),
                    value,
                    source: "nvmlDeviceGetPcieReplayCounter".into(),
                })
                .into_iter()
                .collect();
            (g.bdf.clone(), links, replay)
        })
        .collect()
}

/// Parse an `aer_dev_*` file (`RxErr 0` lines; `TOTAL_ERR_COR 0`). `None` when no line parses.
pub fn parse_aer(text: &str) -> Option<BTreeMap<String, u64>> {
    let m: BTreeMap<String, u64> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            it.next().is_none().then(|| (k.to_string(), v))
        })
        .collect();
    (!m.is_empty()).then_some(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_collector_reads_the_port_counters_a_check_uses_and_no_other() {
        for d in IB_PORT.iter().chain(RDMA_TRANSPORT) {
            assert!(port_counter_used(d.name), "{}", d.name);
        }
        for n in CNP {
            assert!(port_counter_used(n), "{n}");
        }
        // Traffic counters: nothing judges them.
        for n in [
            "port_xmit_data",
            "port_rcv_packets",
            "unicast_xmit_packets",
            "",
        ] {
            assert!(!port_counter_used(n), "{n}");
        }
    }

    #[test]
    fn a_check_builds_only_the_readings_it_judges() {
        use crate::model::{AerStats, Fact};
        let m: BTreeMap<String, u64> =
            [("TOTAL_ERR_COR".to_string(), 3), ("RxErr".to_string(), 3)].into();
        let a = AerStats {
            bdf: "0000:18:00.0".into(),
            role: "gpu".into(),
            correctable: Fact::known(m, "/sys/bus/pci/devices/0000:18:00.0/aer_dev_correctable"),
            nonfatal: Fact::absent("x", "absent"),
            fatal: Fact::absent("y", "absent"),
        };
        let all = aer_device_readings(&a, |_| true);
        let totals = aer_device_readings(&a, |n| find(AER, n).is_some());
        assert_eq!(all.len(), 2);
        assert_eq!(totals.len(), 1);
        assert_eq!(
            totals[0].key,
            "aer/0000:18:00.0/aer_dev_correctable/TOTAL_ERR_COR"
        );
        assert_eq!(totals[0].value, 3);
    }

    fn r(name: &str, value: u64) -> Reading {
        Reading {
            key: format!("ib/mlx5_0/1/{name}"),
            name: name.into(),
            value,
            source: "test".into(),
        }
    }

    fn base(kv: &[(&str, u64)]) -> CounterBaseline {
        CounterBaseline {
            values: kv
                .iter()
                .map(|(k, v)| (format!("ib/mlx5_0/1/{k}"), *v))
                .collect(),
            elapsed_ms: 10_000,
            origin: "test".into(),
            ages_ms: Default::default(),
        }
    }

    #[test]
    fn a_single_reading_uses_the_ibcheckerrs_thresholds() {
        let j = judge(
            vec![r("symbol_error", 9), r("port_rcv_errors", 14)],
            IB_PORT,
            None,
        );
        assert_eq!(j[0].status, Status::Pass);
        assert_eq!(j[1].status, Status::Warn);
        assert!(j[1].why.as_deref().unwrap().contains("threshold 10"));
    }

    #[test]
    fn growth_judges_when_there_is_a_baseline() {
        let b = base(&[("link_downed", 2), ("symbol_error", 50)]);
        let j = judge(
            vec![r("link_downed", 5), r("symbol_error", 50)],
            IB_PORT,
            Some(&b),
        );
        assert_eq!(j[0].status, Status::Fail);
        assert_eq!(j[0].growth, Some(3));
        assert!(j[0].why.as_deref().unwrap().contains("rose by 3 in 10.0 s"));
        // 50 cumulative but no growth: the rate says healthy.
        assert_eq!(j[1].status, Status::Pass);
        assert_eq!(observed(&j[0], Some(&b)), "5 (+3 in 10.0 s)");
    }

    #[test]
    fn a_reset_counter_falls_back_to_the_cumulative_rule() {
        let b = base(&[("link_downed", 40)]);
        let j = judge(vec![r("link_downed", 12)], IB_PORT, Some(&b));
        assert!(j[0].reset);
        assert_eq!(j[0].growth, None);
        assert_eq!(j[0].status, Status::Warn);
    }

    #[test]
    fn saturated_counters_are_judged_even_without_growth() {
        // realdata gpud-testdata: link_downed 255 (8 bits), excessive_buffer_overrun_errors 15 (4 bits).
        let b = base(&[
            ("link_downed", 255),
            ("excessive_buffer_overrun_errors", 15),
        ]);
        let j = judge(
            vec![
                r("link_downed", 255),
                r("excessive_buffer_overrun_errors", 15),
                r("symbol_error", 65534),
            ],
            IB_PORT,
            Some(&b),
        );
        assert_eq!(j[0].status, Status::Warn);
        assert!(j[0]
            .why
            .as_deref()
            .unwrap()
            .contains("saturated at 255 (an 8-bit counter)"));
        assert_eq!(j[1].status, Status::Warn);
        assert!(j[1].why.as_deref().unwrap().contains("saturated at 15"));
        // Below its 16-bit maximum: the cumulative threshold.
        assert!(j[2].why.as_deref().unwrap().contains("threshold 10"));
    }

    #[test]
    fn unknown_counters_are_reported_not_judged() {
        let j = judge(vec![r("port_rcv_data", 1 << 40)], IB_PORT, None);
        assert_eq!(j[0].status, Status::Pass);
        assert!(j[0].def.is_none());
    }

    #[test]
    fn aer_files_parse() {
        let t = "RxErr 0\nBadTLP 3\nBadDLLP 0\nTOTAL_ERR_COR 3\n";
        let m = parse_aer(t).unwrap();
        assert_eq!(m["BadTLP"], 3);
        assert_eq!(m["TOTAL_ERR_COR"], 3);
        assert!(parse_aer("garbage").is_none());
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_secs(10_000), "10.0 s");
        assert_eq!(human_secs(300_000), "5 min");
        assert_eq!(human_secs(3 * 3_600_000), "3.0 h");
    }

    proptest! {
        #[test]
        fn aer_parser_never_panics(s in "(?s).{0,200}") {
            let _ = parse_aer(&s);
        }

        #[test]
        fn growth_is_never_negative(now in any::<u64>(), before in any::<u64>()) {
            let b = base(&[("link_downed", before)]);
            let j = judge(vec![r("link_downed", now)], IB_PORT, Some(&b));
            prop_assert_eq!(j[0].growth.is_some(), now >= before);
            prop_assert_eq!(j[0].reset, now < before);
        }
    }
}
