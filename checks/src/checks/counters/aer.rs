//! `counters.aer`: PCIe AER statistics of the GPUs, NICs and the bridges between them.

use super::judge::{finding, lost, plain, rates, unless_baseline_damaged, with_lost, worst};
use crate::counters as c;
use crate::model::{AerStats, CounterBaseline, Node};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// `gpu`, `nic mlx5_3`, `bridge above gpu 0000:18:00.0 and nic mlx5_0`.
fn role(node: &Node, bdf: &str, role: &str) -> String {
    let ib = |b: &str| -> Option<String> {
        node.rdma.get()?.iter().find_map(|d| match d.pci_bdf.get() {
            Some(Some(x)) if x == b => Some(d.name.clone()),
            _ => None,
        })
    };
    match role {
        "gpu" => match crate::derive::gpus(node).iter().position(|g| g.bdf == bdf) {
            Some(i) => format!("gpu {i}"),
            None => "gpu".into(),
        },
        "nic" => match ib(bdf) {
            Some(n) => format!("nic {n}"),
            None => "nic".into(),
        },
        "bridge" => {
            let below: Vec<String> = node
                .pci
                .get()
                .map(|l| {
                    l.iter()
                        .filter(|d| d.bdf != bdf && d.sysfs_path.split('/').any(|c| c == bdf))
                        .filter_map(|d| {
                            if d.is_nvidia_gpu() {
                                Some(
                                    crate::derive::gpus(node)
                                        .iter()
                                        .position(|g| g.bdf == d.bdf)
                                        .map(|i| format!("gpu {i} ({})", d.bdf))
                                        .unwrap_or_else(|| format!("gpu {}", d.bdf)),
                                )
                            } else if d.is_network() && !d.is_virtfn {
                                Some(
                                    ib(&d.bdf)
                                        .map(|n| format!("nic {n}"))
                                        .unwrap_or_else(|| format!("nic {}", d.bdf)),
                                )
                            } else {
                                None
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            if below.is_empty() {
                "bridge".into()
            } else {
                format!("bridge above {}", below.join(" and "))
            }
        }
        r => r.to_string(),
    }
}

pub fn aer(node: &Node) -> Vec<Finding> {
    unless_baseline_damaged(node, aer_findings(node))
}

const ID: &str = "counters.aer";

fn aer_findings(node: &Node) -> Vec<Finding> {
    let list = match node.health.aer.get() {
        Some(l) => l,
        None => return vec![unlisted(node)],
    };
    if list.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no nvidia gpu and no rdma nic on the pci bus",
        )];
    }
    // Only the totals are judged: the error types behind them are listed from the files when a
    // total is not clean.
    let mut readings: BTreeMap<String, Vec<c::Reading>> =
        c::aer_readings_of(node, |n| c::find(c::AER, n).is_some())
            .into_iter()
            .collect();
    let mut out = Vec::new();
    let mut clean: Vec<String> = Vec::new();
    let mut corrected: Vec<String> = Vec::new();
    let mut without: Vec<(String, String)> = Vec::new();
    let mut unreadable: Vec<Finding> = Vec::new();
    for a in list {
        let totals = readings.remove(&a.bdf).unwrap_or_default();
        match device(node, a, totals) {
            Device::Unreadable(f) => unreadable.push(f),
            Device::Without(reason) => without.push((a.bdf.clone(), reason)),
            Device::Clean(cor) => {
                clean.push(a.bdf.clone());
                corrected.extend(cor);
            }
            Device::Judged(f) => out.push(f),
        }
    }
    if let Some(b) = node.health.baseline.as_ref() {
        unreadable.extend(gone_functions(node, list, b));
    }
    out.extend(unreadable);
    if !clean.is_empty() {
        out.push(clean_summary(node, list, &clean, &corrected));
    }
    if !without.is_empty() {
        out.push(without_statistics(&without));
    }
    out
}

/// A capture without the PCI tree cannot be judged; a live node must have one.
fn unlisted(node: &Node) -> Finding {
    let status = if node.source == crate::model::SourceKind::Sysroot {
        Status::Skip
    } else {
        Status::Error
    };
    Finding::new(ID, status, "node", "cannot list the gpus, nics and bridges").evidence(
        node.health.aer.source(),
        node.health.aer.describe(|_| String::new()),
    )
}

/// What one function's AER statistics say.
enum Device {
    /// They cannot be read, or were lost since the baseline: an error.
    Unreadable(Finding),
    /// The function has none (the reason).
    Without(String),
    /// Clean; the corrected errors since boot (`0000:18:00.0 (gpu 0) 3`), when there are any.
    Clean(Option<String>),
    /// Judged not clean.
    Judged(Finding),
}

/// One function's AER statistics (`totals`: its judged totals) judged.
fn device(node: &Node, a: &AerStats, totals: Vec<c::Reading>) -> Device {
    let b = node.health.baseline.as_ref();
    // The kernel ends every aer_dev_* file with its total: a file that parsed without one
    // was cut short or is not the kernel's, and its errors would go uncounted.
    let cut = [
        (&a.correctable, "TOTAL_ERR_COR"),
        (&a.nonfatal, "TOTAL_ERR_NONFATAL"),
        (&a.fatal, "TOTAL_ERR_FATAL"),
    ]
    .into_iter()
    .find(|(f, total)| {
        f.get()
            .is_some_and(|m| !m.is_empty() && !m.contains_key(*total))
    });
    if let Some((f, total)) = cut {
        return Device::Unreadable(
            Finding::new(ID, Status::Error, &a.bdf, "cannot read the AER statistics").evidence(
                f.source(),
                format!("no {total} line: the file was cut short or is not the kernel's"),
            ),
        );
    }
    let facts = [&a.correctable, &a.nonfatal, &a.fatal];
    let missing = lost(node, &format!("aer/{}", a.bdf), &totals, |rest| {
        c::find(c::AER, rest.rsplit('/').next().unwrap_or(rest)).is_some()
    });
    let again = format!(
        "read the function's AER statistics again (`cat {}`); a snapshot that lost one needs a new capture",
        a.correctable
            .source()
            .replace("aer_dev_correctable", "aer_dev_*")
    );
    // The kernel creates the three files together (one attribute group, shown when the
    // function has AER statistics): one that is there beside one that is not was lost, and
    // the lost one may hold the errors.
    let partial = facts
        .iter()
        .any(|f| f.get().is_some())
        .then(|| facts.iter().find(|f| f.get().is_none()))
        .flatten();
    if let Some(gone) = partial {
        let f = Finding::new(ID, Status::Error, &a.bdf, "cannot read the AER statistics")
            .evidence(
                gone.source(),
                format!(
                    "unknown ({}), while the other aer_dev_* files of the function are there: the kernel creates the three together",
                    gone.reason().unwrap_or("no statistics")
                ),
            )
            .fix(again.clone());
        return Device::Unreadable(with_lost(f, &missing, gone.source(), again));
    }
    if !facts.iter().any(|f| f.get().is_some_and(|m| !m.is_empty())) {
        let reason = [&a.correctable, &a.nonfatal, &a.fatal]
            .iter()
            .find_map(|f| f.reason())
            .unwrap_or("no statistics")
            .to_string();
        if reason.starts_with("permission") || !missing.is_empty() {
            let f = Finding::new(ID, Status::Error, &a.bdf, "cannot read the AER statistics")
                .evidence(a.correctable.source(), format!("unknown ({reason})"));
            let src = a.correctable.source().to_string();
            return Device::Unreadable(with_lost(f, &missing, &src, again));
        }
        return Device::Without(reason);
    }
    let cor = totals
        .iter()
        .find(|r| r.name == "TOTAL_ERR_COR" && r.value > 0)
        .map(|r| r.value);
    let js = c::judge(totals, c::AER, b);
    if worst(&js) == Status::Pass && missing.is_empty() {
        return Device::Clean(cor.map(|cor| {
            let who = role(node, &a.bdf, &a.role);
            format!("{} ({who}) {cor}", a.bdf)
        }));
    }
    let who = role(node, &a.bdf, &a.role);
    // The error types behind the totals (`BadTLP 3, RxErr 2`).
    let types: Vec<String> = c::aer_device_readings(a, |n| !n.starts_with("TOTAL_"))
        .into_iter()
        .filter(|r| r.value > 0)
        .map(|r| {
            let g = b
                .and_then(|b| b.values.get(&r.key))
                .filter(|v| r.value >= **v)
                .map(|v| format!(" (+{})", r.value - v))
                .unwrap_or_default();
            format!("{} {}{g}", r.name, r.value)
        })
        .collect();
    let mut f = finding(
        ID,
        &a.bdf,
        "PCIe",
        &js,
        node,
        &a.correctable
            .source()
            .replace("aer_dev_correctable", "aer_dev_*"),
        |_| aer_fix(&a.bdf, &who),
        plain,
    );
    f.message = format!("{who}: {}", f.message);
    let src = a.correctable.source().to_string();
    f = with_lost(f, &missing, &src, again);
    if !types.is_empty() {
        f = f.evidence(
            a.correctable
                .source()
                .replace("aer_dev_correctable", "aer_dev_*"),
            types.join(", "),
        );
    }
    Device::Judged(f)
}

/// A function the baseline read and that is not listed now: it fell off the bus, or its
/// sysfs entry is gone from a damaged snapshot; either way its errors are unknown.
fn gone_functions(node: &Node, list: &[AerStats], b: &CounterBaseline) -> Vec<Finding> {
    // Gone from the PCI bus listing, not only from the devices judged here: which NICs
    // are judged follows the RDMA listing (a LAG, a driver reload), and a function still
    // on the bus is not "fallen off".
    let on_bus = |bdf: &str| {
        node.pci
            .get()
            .is_some_and(|pci| pci.iter().any(|p| p.bdf == bdf))
    };
    let gone: std::collections::BTreeSet<&str> = b
        .values
        .keys()
        .filter_map(|k| k.strip_prefix("aer/")?.split('/').next())
        .filter(|bdf| !list.iter().any(|a| a.bdf == *bdf) && !on_bus(bdf))
        .collect();
    gone.into_iter()
        .map(|bdf| {
            let path = format!("/sys/bus/pci/devices/{bdf}");
            Finding::new(
                ID,
                Status::Error,
                bdf,
                "in the counter baseline but not among the gpus, nics and the bridges between them now: it (or the device below it) fell off the bus, or its sysfs entry cannot be read; its errors are unknown",
            )
            .expected(&path, "not listed", "listed, as in the counter baseline")
            .fix(format!("`dmesg` says whether {bdf} was lost (Xid 79 \"fallen off the bus\", a surprise link down, a hot unplug); a device that is gone needs the node drained and reset; a snapshot that lost {path} needs a new capture"))
        })
        .collect()
}

/// The one `pass` of the clean functions.
fn clean_summary(
    node: &Node,
    list: &[AerStats],
    clean: &[String],
    corrected: &[String],
) -> Finding {
    let b = node.health.baseline.as_ref();
    let n = |r: &str| {
        list.iter()
            .filter(|a| a.role == r && clean.contains(&a.bdf))
            .count()
    };
    // The keys of the clean functions the baseline could have read: growth is claimed only
    // over keys it did read.
    let prefixes: Vec<String> = clean.iter().map(|bdf| format!("aer/{bdf}/")).collect();
    let keys: Vec<&str> = b
        .map(|b| {
            b.values
                .keys()
                .filter(|k| prefixes.iter().any(|p| k.starts_with(p.as_str())))
                .map(String::as_str)
                .collect()
        })
        .unwrap_or_default();
    let grew = b.is_some_and(|b| b.span_of(keys.iter().copied()).is_some());
    let (rs, ro) = rates(node, keys.iter().copied());
    let mut f = Finding::new(
        ID,
        Status::Pass,
        "node",
        format!(
            "no uncorrectable PCIe error{} on {} devices ({} gpus, {} nics, {} bridges between them)",
            if grew { " and no growth" } else { "" },
            clean.len(),
            n("gpu"),
            n("nic"),
            n("bridge")
        ),
    )
    .evidence("/sys/bus/pci/devices/*/aer_dev_{correctable,nonfatal,fatal}", clean.join(" "))
    .evidence(rs, ro);
    if !corrected.is_empty() {
        f = f.evidence(
            "aer_dev_correctable TOTAL_ERR_COR since boot",
            corrected.join(", "),
        );
    }
    f
}

/// The one `skip` of the functions without AER statistics (address, reason).
fn without_statistics(without: &[(String, String)]) -> Finding {
    let status = Status::Skip;
    Finding::new(
        ID,
        status,
        "node",
        format!(
            "no AER statistics for {} device(s): {}",
            without.len(),
            without[0].1
        ),
    )
    .evidence(
        "aer_dev_*",
        without
            .iter()
            .map(|(b, _)| b.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn aer_fix(bdf: &str, who: &str) -> String {
    format!(
        "look at the link of {bdf} ({who}): `lspci -vvv -s {bdf}` (LnkSta speed/width, DevSta, UESta/CESta), the pcie.link check, and the same counters on the bridges above it; corrected errors that keep growing mean a marginal link (reseat the card, riser or cable; a BIOS/firmware update); uncorrectable ones lose transactions: drain the node and get the slot or card replaced if they recur"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::{CounterBaseline, Fact};
    use crate::testing::empty_node;
    #[test]
    fn a_fatal_aer_error_since_boot_fails_on_one_reading() {
        use crate::model::AerStats;
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        let m = |k: &str, v: u64| -> Fact<BTreeMap<String, u64>> {
            Fact::known([(k.to_string(), v)].into(), format!("/sys/x/{k}"))
        };
        n.health.aer = Fact::known(
            vec![AerStats {
                bdf: "0000:18:00.0".into(),
                role: "gpu".into(),
                correctable: m("TOTAL_ERR_COR", 7),
                nonfatal: m("TOTAL_ERR_NONFATAL", 0),
                fatal: m("TOTAL_ERR_FATAL", 1),
            }],
            "test",
        );
        let f = aer(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message.starts_with("gpu 0: TOTAL_ERR_FATAL is 1"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn an_aer_file_without_its_total_is_an_error_not_a_pass() {
        use crate::model::AerStats;
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        let m = |k: &str, v: u64| -> Fact<BTreeMap<String, u64>> {
            Fact::known([(k.to_string(), v)].into(), format!("/sys/x/{k}"))
        };
        let stats = |fatal| AerStats {
            bdf: "0000:18:00.0".into(),
            role: "gpu".into(),
            correctable: m("TOTAL_ERR_COR", 0),
            nonfatal: m("TOTAL_ERR_NONFATAL", 0),
            fatal,
        };
        n.health.aer = Fact::known(vec![stats(m("TOTAL_ERR_FATAL", 0))], "test");
        assert_eq!(aer(&n)[0].status, Status::Pass);
        // Cut short: the error types are there, the total is not.
        n.health.aer = Fact::known(vec![stats(m("Undefined", 0))], "test");
        let f = aer(&n);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].evidence[0]
                .observed
                .contains("no TOTAL_ERR_FATAL line"),
            "{f:?}"
        );
    }

    fn aer_node(stats: Vec<crate::model::AerStats>, baseline: &[(&str, u64)]) -> Node {
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        n.health.aer = Fact::known(stats, "test");
        n.health.baseline = Some(CounterBaseline {
            values: baseline.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            elapsed_ms: 10_000,
            origin: "--interval 10.0 s".into(),
            ages_ms: Default::default(),
        });
        n
    }

    fn aer_stats(files: [bool; 3]) -> crate::model::AerStats {
        let m = |on: bool, k: &str| -> Fact<BTreeMap<String, u64>> {
            let path = format!("/sys/bus/pci/devices/0000:18:00.0/{k}");
            if on {
                Fact::known([(format!("TOTAL_ERR_{k}"), 0)].into(), path)
            } else {
                Fact::absent(path, "not exposed")
            }
        };
        let mut a = crate::model::AerStats {
            bdf: "0000:18:00.0".into(),
            role: "gpu".into(),
            correctable: m(files[0], "aer_dev_correctable"),
            nonfatal: m(files[1], "aer_dev_nonfatal"),
            fatal: m(files[2], "aer_dev_fatal"),
        };
        // The totals under their real names.
        for (f, t) in [
            (&mut a.correctable, "TOTAL_ERR_COR"),
            (&mut a.nonfatal, "TOTAL_ERR_NONFATAL"),
            (&mut a.fatal, "TOTAL_ERR_FATAL"),
        ] {
            if let Fact::Known { value, .. } = f {
                *value = [(t.to_string(), 0)].into();
            }
        }
        a
    }

    const AER_BASE: [(&str, u64); 3] = [
        ("aer/0000:18:00.0/aer_dev_correctable/TOTAL_ERR_COR", 0),
        ("aer/0000:18:00.0/aer_dev_nonfatal/TOTAL_ERR_NONFATAL", 0),
        ("aer/0000:18:00.0/aer_dev_fatal/TOTAL_ERR_FATAL", 0),
    ];

    #[test]
    fn a_lost_aer_file_is_an_error_not_a_pass() {
        let f = aer(&aer_node(vec![aer_stats([true; 3])], &AER_BASE));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        // One of the three gone (the kernel creates them together), with or without a baseline.
        for base in [&AER_BASE[..], &[]] {
            let f = aer(&aer_node(vec![aer_stats([true, false, true])], base));
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!(f[0].status, Status::Error, "{f:?}");
            assert_eq!(f[0].subject, "0000:18:00.0");
            assert!(
                f[0].evidence[0].source.ends_with("aer_dev_nonfatal"),
                "{f:?}"
            );
        }
        // All three gone: a skip (no AER statistics here) unless the baseline read them.
        let f = aer(&aer_node(vec![aer_stats([false; 3])], &[]));
        assert_eq!(f[0].status, Status::Skip, "{f:?}");
        let f = aer(&aer_node(vec![aer_stats([false; 3])], &AER_BASE));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].message.contains("aer_dev_fatal/TOTAL_ERR_FATAL"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn a_function_the_baseline_read_and_that_is_gone_is_an_error() {
        let f = aer(&aer_node(vec![], &AER_BASE));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Skip, "no device listed at all: {f:?}");
        let mut other = aer_stats([true; 3]);
        other.bdf = "0000:19:00.0".into();
        // Still on the PCI bus, only not judged here now (the judged NICs follow the RDMA
        // listing): no claim.
        let n = aer_node(vec![other.clone()], &AER_BASE);
        let f = aer(&n);
        assert!(f.iter().all(|f| f.subject != "0000:18:00.0"), "{f:?}");
        // Gone from the bus listing too.
        let mut n = aer_node(vec![other], &AER_BASE);
        n.pci = Fact::known(Vec::new(), "test");
        let f = aer(&n);
        let gone = f.iter().find(|f| f.subject == "0000:18:00.0").unwrap();
        assert_eq!(gone.status, Status::Error, "{f:?}");
        assert!(
            gone.message.contains("fell off the bus"),
            "{}",
            gone.message
        );
    }
}
