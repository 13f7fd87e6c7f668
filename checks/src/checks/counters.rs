//! `counters.*`: error counters with what they mean and a threshold. One reading is judged
//! against generous cumulative thresholds; two readings (`check --interval`, the state file of
//! periodic runs, a snapshot's baseline) judge the growth, which is what says "broken now".
//! Definitions and thresholds: `crate::counters`.

use crate::counters::{self as c, Def, Judged};
use crate::model::Node;
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// How the counters were judged, for evidence.
fn rates(node: &Node) -> (String, String) {
    match &node.health.baseline {
        Some(b) => (
            "counter baseline".into(),
            format!("growth over {} ({})", c::human_secs(b.elapsed_ms), b.origin),
        ),
        None => (
            "counter baseline".into(),
            format!(
                "none: one reading, judged on cumulative thresholds; growth needs `gdrdoctor check --interval 10s` or periodic runs{}",
                node.health
                    .baseline_note
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
        ),
    }
}

/// A baseline the snapshot holds but that cannot be read (see `model::DAMAGED`): the growth
/// that says "broken now" is unknown, so no counter passes on one reading. Every `pass` of the
/// check becomes an `error` saying so; what fails or warns on one reading stays.
fn unless_baseline_damaged(node: &Node, findings: Vec<Finding>) -> Vec<Finding> {
    let Some(note) = node
        .health
        .baseline_note
        .as_deref()
        .filter(|n| node.health.baseline.is_none() && crate::model::is_damaged(n))
    else {
        return findings;
    };
    findings
        .into_iter()
        .map(|f| {
            if f.status != Status::Pass {
                return f;
            }
            Finding {
                status: Status::Error,
                message: format!(
                    "the snapshot's counter baseline cannot be read, so whether the counters grow is unknown ({})",
                    f.message
                ),
                ..f
            }
            .evidence("gdrdoctor/counters-baseline.json", note.to_string())
            .fix("take the snapshot again (`gdrdoctor snapshot`); a gdrdoctor/counters-baseline.json that does not parse was damaged after it was written")
        })
        .collect()
}

/// Judged counters the baseline holds under `under` (the key itself, or keys below
/// `under/`) that no reading has now, as the part of the key below `under` (the whole key's
/// last part when it is `under` itself). A counter does not vanish between two readings of a
/// healthy node within a boot, and the one lost may be the one that grew: a removed
/// `link_downed` must not hide a flapping link, a removed `aer_dev_nonfatal` a failing GPU.
fn lost(
    node: &Node,
    under: &str,
    now: &[c::Reading],
    judged: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(b) = node.health.baseline.as_ref() else {
        return Vec::new();
    };
    b.values
        .keys()
        .filter_map(|k| {
            let rest = if k == under {
                k.rsplit('/').next().unwrap_or(k.as_str())
            } else {
                k.strip_prefix(under)?.strip_prefix('/')?
            };
            Some((k, rest))
        })
        .filter(|(_, rest)| judged(rest))
        .filter(|(k, _)| !now.iter().any(|r| r.key == **k))
        .map(|(_, rest)| rest.to_string())
        .collect()
}

/// `f` with the counters [`lost`] found: an `error` (a known failure stays `fail`) naming them.
fn with_lost(mut f: Finding, missing: &[String], source: &str, again: String) -> Finding {
    if missing.is_empty() {
        return f;
    }
    let list = missing.join(", ");
    if f.status != Status::Fail {
        f.status = Status::Error;
        f.remediation = Some(again);
    }
    f.message = format!(
        "{}; {list} (in the counter baseline) cannot be read now: whether it grew is unknown",
        f.message
    );
    f.expected(
        source,
        format!("{list}: missing"),
        "every counter the baseline holds",
    )
}

/// Subjects the baseline holds judged counters for and that are gone now: the first `parts`
/// components of the keys below `prefix/` (`mlx5_3/1` for a port, a GPU's address) whose
/// counter (the key's last component) `judged` names and that `present` does not list. A port
/// or a GPU read by the last run does not vanish from a healthy node within a boot: a NIC fell
/// off the bus, a VF was hot-removed, a driver was unloaded. `lost` sees only what is missing
/// from a subject that is still there.
fn gone(
    node: &Node,
    prefix: &str,
    parts: usize,
    judged: impl Fn(&str) -> bool,
    present: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(b) = node.health.baseline.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for k in b.values.keys() {
        let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let comps: Vec<&str> = rest.split('/').collect();
        if comps.len() < parts || comps[..parts].iter().any(|c| c.is_empty()) {
            continue;
        }
        if !judged(comps.last().copied().unwrap_or_default()) {
            continue;
        }
        let sub = comps[..parts].join("/");
        if !present(&sub) && !out.contains(&sub) {
            out.push(sub);
        }
    }
    out
}

/// The finding for a subject [`gone`] found.
fn gone_finding(
    node: &Node,
    id: &str,
    sub: &str,
    what: &str,
    source: String,
    fix: &str,
) -> Finding {
    let origin = node
        .health
        .baseline
        .as_ref()
        .map(|b| b.origin.as_str())
        .unwrap_or("?");
    Finding::new(
        id,
        Status::Error,
        sub,
        format!("{sub} is in the counter baseline ({origin}) and gone now: its {what} errors are unknown"),
    )
    .expected(
        source,
        format!("{sub}: missing"),
        "every subject the counter baseline holds",
    )
    .fix(if origin.starts_with("the last run") {
        // This run's reading replaces the state file: the next periodic run no longer holds
        // the subject, and says nothing of it (a site that needs "eight NICs, always" writes
        // it in its policy).
        format!("{fix}; this is said once, by the first periodic run after the loss (its reading becomes the next run's baseline): a planned removal needs nothing more; a site policy keeps saying it on every run (`gdrdoctor policy init` on a healthy node writes `[gpu] count` and `[rdma] count`, and live runs read /etc/gdrdoctor/policy.toml)")
    } else {
        fix.to_string()
    })
}

fn worst(js: &[Judged]) -> Status {
    js.iter().map(|j| j.status).max().unwrap_or(Status::Pass)
}

/// A finding for one subject from its judged counters. `label` renames a counter for messages
/// (NVLink counters carry their link).
#[allow(clippy::too_many_arguments)]
fn finding(
    id: &str,
    subject: &str,
    what: &str,
    js: &[Judged],
    node: &Node,
    source: &str,
    fix: impl Fn(&[&Judged]) -> String,
    label: impl Fn(&Judged) -> String,
) -> Finding {
    let b = node.health.baseline.as_ref();
    let status = worst(js);
    let (rs, ro) = rates(node);
    if status == Status::Pass {
        let known: Vec<&Judged> = js.iter().filter(|j| j.def.is_some()).collect();
        // Many instances of the same counters (NVLink: 4 per link): totals per counter.
        let judged: Vec<String> = if known.len() > 16 {
            let mut sums: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
            for j in &known {
                let e = sums.entry(j.reading.name.as_str()).or_insert((0, 0));
                e.0 = e.0.saturating_add(j.reading.value);
                e.1 += 1;
            }
            sums.iter()
                .map(|(n, (v, k))| format!("{n} {v} (total over {k})"))
                .collect()
        } else {
            known
                .iter()
                .map(|j| format!("{} {}", label(j), c::observed(j, b)))
                .collect()
        };
        let msg = match b {
            Some(b) => format!(
                "no {what} error counter grew in {}",
                c::human_secs(b.elapsed_ms)
            ),
            None if js.iter().all(|j| j.def.is_none() || j.reading.value == 0) => {
                format!("{what} error counters are all zero")
            }
            None => format!("{what} error counters are below their thresholds (cumulative)"),
        };
        return Finding::new(id, Status::Pass, subject, msg)
            .evidence(source, judged.join(", "))
            .evidence(rs, ro);
    }
    let bad: Vec<&Judged> = js.iter().filter(|j| j.status == status).collect();
    // Every counter that is not clean goes into the evidence, the worst into the message.
    let flagged: Vec<&Judged> = js.iter().filter(|j| j.status != Status::Pass).collect();
    let mut parts: Vec<String> = Vec::new();
    for j in &bad {
        let why = j.why.clone().unwrap_or_default();
        let why = why.replacen(&j.reading.name, &label(j), 1);
        let meaning = j.def.map(|d| d.meaning).unwrap_or("");
        parts.push(format!("{why}: {meaning}"));
    }
    let mut f = Finding::new(id, status, subject, parts.join("; "));
    for j in &flagged {
        let expected = match (
            b,
            j.def.and_then(|d| d.growth),
            j.def.and_then(|d| d.cumulative),
        ) {
            (Some(_), Some(_), _) if j.growth.is_some() => "no growth".to_string(),
            (_, _, Some((t, _))) => format!("below {t} since the counters were cleared"),
            _ => "no growth".to_string(),
        };
        f = f.expected(
            j.reading.source.clone(),
            format!("{} {}", label(j), c::observed(j, b)),
            expected,
        );
    }
    f.evidence(rs, ro).fix(fix(&bad))
}

fn plain(j: &Judged) -> String {
    j.reading.name.clone()
}

// ------------------------------------------------------------------------------------------
// counters.aer

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

fn aer_findings(node: &Node) -> Vec<Finding> {
    const ID: &str = "counters.aer";
    let list = match node.health.aer.get() {
        Some(l) => l,
        None => {
            // A capture without the PCI tree cannot be judged; a live node must have one.
            let status = if node.source == crate::model::SourceKind::Sysroot {
                Status::Skip
            } else {
                Status::Error
            };
            return vec![Finding::new(
                ID,
                status,
                "node",
                "cannot list the gpus, nics and bridges",
            )
            .evidence(
                node.health.aer.source(),
                node.health.aer.describe(|_| String::new()),
            )];
        }
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
    let b = node.health.baseline.as_ref();
    let mut out = Vec::new();
    let mut clean: Vec<String> = Vec::new();
    let mut corrected: Vec<String> = Vec::new();
    let mut without: Vec<(String, String)> = Vec::new();
    let mut unreadable: Vec<Finding> = Vec::new();
    for a in list {
        let totals = readings.remove(&a.bdf).unwrap_or_default();
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
            unreadable.push(
                Finding::new(ID, Status::Error, &a.bdf, "cannot read the AER statistics").evidence(
                    f.source(),
                    format!("no {total} line: the file was cut short or is not the kernel's"),
                ),
            );
            continue;
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
            unreadable.push(with_lost(f, &missing, gone.source(), again));
            continue;
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
                unreadable.push(with_lost(f, &missing, &src, again));
            } else {
                without.push((a.bdf.clone(), reason));
            }
            continue;
        }
        let cor = totals
            .iter()
            .find(|r| r.name == "TOTAL_ERR_COR" && r.value > 0)
            .map(|r| r.value);
        let js = c::judge(totals, c::AER, b);
        if worst(&js) == Status::Pass && missing.is_empty() {
            clean.push(a.bdf.clone());
            if let Some(cor) = cor {
                let who = role(node, &a.bdf, &a.role);
                corrected.push(format!("{} ({who}) {cor}", a.bdf));
            }
            continue;
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
        out.push(f);
    }
    // A function the baseline read and that is not listed now: it fell off the bus, or its
    // sysfs entry is gone from a damaged snapshot; either way its errors are unknown.
    if let Some(b) = b {
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
        for bdf in gone {
            let path = format!("/sys/bus/pci/devices/{bdf}");
            unreadable.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    "in the counter baseline but not among the gpus, nics and the bridges between them now: it (or the device below it) fell off the bus, or its sysfs entry cannot be read; its errors are unknown",
                )
                .expected(&path, "not listed", "listed, as in the counter baseline")
                .fix(format!("`dmesg` says whether {bdf} was lost (Xid 79 \"fallen off the bus\", a surprise link down, a hot unplug); a device that is gone needs the node drained and reset; a snapshot that lost {path} needs a new capture")),
            );
        }
    }
    out.extend(unreadable);
    if !clean.is_empty() {
        let n = |r: &str| {
            list.iter()
                .filter(|a| a.role == r && clean.contains(&a.bdf))
                .count()
        };
        let (rs, ro) = rates(node);
        let mut f = Finding::new(
            ID,
            Status::Pass,
            "node",
            format!(
                "no uncorrectable PCIe error{} on {} devices ({} gpus, {} nics, {} bridges between them)",
                if b.is_some() { " and no growth" } else { "" },
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
        out.push(f);
    }
    if !without.is_empty() {
        let status = Status::Skip;
        out.push(
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
            ),
        );
    }
    out
}

fn aer_fix(bdf: &str, who: &str) -> String {
    format!(
        "look at the link of {bdf} ({who}): `lspci -vvv -s {bdf}` (LnkSta speed/width, DevSta, UESta/CESta), the pcie.link check, and the same counters on the bridges above it; corrected errors that keep growing mean a marginal link (reseat the card, riser or cable; a BIOS/firmware update); uncorrectable ones lose transactions: drain the node and get the slot or card replaced if they recur"
    )
}

// ------------------------------------------------------------------------------------------
// counters.ib-port and counters.rdma-transport

/// One port check: `hw` judges `hw_counters/` (driver counters, keys `hw/...`), else
/// `counters/` (the IB PMA counters, keys `ib/...`).
fn port_check(
    id: &str,
    node: &Node,
    defs: &'static [Def],
    pick: fn(&crate::model::PortCounters) -> &crate::model::Fact<BTreeMap<String, u64>>,
    hw: bool,
    what: &str,
    fix: fn(&str, &[&Judged]) -> String,
) -> Vec<Finding> {
    let list = match node.health.port_counters.get() {
        Some(l) => l,
        None => {
            return vec![
                Finding::new(id, Status::Error, "node", "cannot list the rdma ports").evidence(
                    node.health.port_counters.source(),
                    node.health.port_counters.describe(|_| String::new()),
                ),
            ]
        }
    };
    let kind = if hw { "hw" } else { "ib" };
    // Ports the baseline read and that are not listed now (after the ports' own findings).
    let lost_ports = gone(
        node,
        kind,
        2,
        |n| c::find(defs, n).is_some(),
        |sub| {
            list.iter()
                .any(|p| sub.split_once('/') == Some((p.device.as_str(), &p.port.to_string())))
        },
    );
    if list.is_empty() && lost_ports.is_empty() {
        return vec![Finding::new(id, Status::Skip, "node", "no rdma port")];
    }
    let mut by: BTreeMap<String, Vec<c::Reading>> =
        c::port_readings_of(node, |n| c::find(defs, n).is_some())
            .into_iter()
            .map(|(s, a, b)| (s, if hw { b } else { a }))
            .collect();
    let b = node.health.baseline.as_ref();
    let mut out = Vec::new();
    for p in list {
        let sub = format!("{}/{}", p.device, p.port);
        let fact = pick(p);
        let rs: Vec<c::Reading> = by.remove(&sub).unwrap_or_default();
        let missing = lost(node, &format!("{kind}/{sub}"), &rs, |n| {
            c::find(defs, n).is_some()
        });
        let again = format!(
            "read the port's counters again (`ls {}`); a snapshot with a lost counter file needs a new capture",
            fact.source()
        );
        if let Some(reason) = fact.reason() {
            let status = if reason.starts_with("permission") || crate::model::is_damaged(reason) {
                Status::Error
            } else {
                Status::Skip
            };
            let f = Finding::new(id, status, &sub, format!("no {what} counters: {reason}"))
                .evidence(fact.source(), format!("unknown ({reason})"));
            out.push(with_lost(f, &missing, fact.source(), again));
            continue;
        }
        if rs.is_empty() {
            let f = Finding::new(
                id,
                Status::Skip,
                &sub,
                format!("none of the {what} counters gdrdoctor judges is exposed here"),
            )
            .evidence(fact.source(), "no known counter file");
            out.push(with_lost(f, &missing, fact.source(), again));
            continue;
        }
        let js = c::judge(rs, defs, b);
        let dev = p.device.clone();
        let f = finding(
            id,
            &sub,
            what,
            &js,
            node,
            fact.source(),
            |bad| fix(&dev, bad),
            plain,
        );
        out.push(with_lost(f, &missing, fact.source(), again));
    }
    let mut lost_devs: Vec<&str> = lost_ports
        .iter()
        .filter_map(|s| s.split_once('/').map(|(d, _)| d))
        .collect();
    lost_devs.sort_unstable();
    lost_devs.dedup();
    let ports_of = |d: &str| -> Vec<&String> {
        lost_ports
            .iter()
            .filter(|s| s.split_once('/').is_some_and(|(x, _)| x == d))
            .collect()
    };
    // A device whose PCI function the baseline recorded is judged by what is at that function
    // now: still serving RDMA (renamed, bonded, moved into a pod) is not a loss; gone from the
    // bus, handed to vfio-pci, unbound, or the same device without the port, is.
    use super::rdma::FunctionNow;
    let mut excused: Vec<(&str, String)> = Vec::new();
    let mut lost_at: Vec<(&str, String)> = Vec::new();
    let mut unplaced: Vec<&str> = Vec::new();
    for d in &lost_devs {
        let Some(bdf) = b.and_then(|b| c::baseline_function(b, d)) else {
            unplaced.push(d);
            continue;
        };
        match super::rdma::function_now(node, bdf) {
            FunctionNow::Device(now) if now != *d => excused.push((
                d,
                format!("its PCI function {bdf} (in the counter baseline) is {now} now: renamed (RoCE LAG makes mlx5_bond_N)"),
            )),
            FunctionNow::Device(_) => lost_at.push((
                d,
                format!("{d} is still on its PCI function {bdf}, without this port"),
            )),
            FunctionNow::Deviceless(drv) => excused.push((
                d,
                format!("its PCI function {bdf} (in the counter baseline) is bound to {drv} without an RDMA device here: RoCE LAG's second port, or its device moved into a pod's network namespace"),
            )),
            FunctionNow::Unserving(Some(drv)) => lost_at.push((
                d,
                format!("its PCI function {bdf} is bound to {drv} now, which serves no RDMA here"),
            )),
            FunctionNow::Unserving(None) => lost_at.push((
                d,
                format!("its PCI function {bdf} has no driver bound now (or its driver link cannot be read)"),
            )),
            FunctionNow::Absent => lost_at.push((
                d,
                format!("its PCI function {bdf} is no longer on the PCI bus"),
            )),
            FunctionNow::Unknown => lost_at.push((
                d,
                format!("the PCI functions cannot be listed now, so whether {bdf} still serves RDMA is unknown"),
            )),
        }
    }
    for (d, why) in &excused {
        let ports: Vec<&str> = ports_of(d).into_iter().map(String::as_str).collect();
        out.push(
            Finding::new(
                id,
                Status::Skip,
                ports.join(" "),
                format!(
                    "{} in the counter baseline and not listed now; {why}: not judged as lost",
                    ports.join(", ")
                ),
            )
            .evidence(
                "/sys/class/infiniband",
                format!("{}: not listed; {why}", ports.join(", ")),
            ),
        );
    }
    // A baseline without the devices' functions: what can stand in for a vanished device
    // without anything lost is counted, a device the baseline does not know (a rename, RoCE
    // LAG's mlx5_bond_0) and an RDMA function without a device here (LAG's second PF, a VF or
    // PF whose device moved into a pod), less those the placed devices above took. As many of
    // them as devices gone: not judged.
    let mut unjudged: Vec<&str> = Vec::new();
    if !unplaced.is_empty() {
        let mut new_devs: Vec<&str> = list
            .iter()
            .map(|p| p.device.as_str())
            .filter(|d| {
                b.is_some_and(|b| {
                    let under = format!("{kind}/{d}/");
                    !b.values.keys().any(|k| k.starts_with(&under))
                })
            })
            .collect();
        new_devs.sort_unstable();
        new_devs.dedup();
        let stand_ins = (new_devs.len() + super::rdma::deviceless_functions(node))
            .saturating_sub(excused.len());
        if unplaced.len() <= stand_ins {
            let ports: Vec<&str> = unplaced
                .iter()
                .flat_map(|d| ports_of(d))
                .map(String::as_str)
                .collect();
            out.push(
                Finding::new(
                    id,
                    Status::Skip,
                    unplaced.join(" "),
                    format!(
                        "{} in the counter baseline and not listed now, beside {stand_ins} device(s) the baseline does not know or rdma function(s) without a device here (a rename, RoCE LAG's mlx5_bond_N, a device moved into a pod's netns): not judged as lost (the baseline does not say which PCI function they were on)",
                        ports.join(", "),
                    ),
                )
                .evidence("/sys/class/infiniband", format!("{}: not listed", ports.join(", "))),
            );
            unjudged = std::mem::take(&mut unplaced);
        }
    }
    for sub in &lost_ports {
        let dev = sub.split_once('/').map(|(d, _)| d).unwrap_or(sub.as_str());
        if excused.iter().any(|(d, _)| *d == dev) || unjudged.contains(&dev) {
            continue;
        }
        let mut f = gone_finding(
            node,
            id,
            sub,
            what,
            format!("/sys/class/infiniband/{}", sub.replace('/', "/ports/")),
            "the RDMA port was read by the run the baseline comes from and is not among the ports listed now: a NIC that fell off the bus (`dmesg | grep -i mlx5`, `lspci -d 15b3:`), a VF hot-removed by the hypervisor, mlx5_ib unloaded, or the device renamed (RoCE LAG makes mlx5_bond_N); `ibv_devinfo -l` lists what is there",
        );
        if let Some((_, why)) = lost_at.iter().find(|(d, _)| *d == dev) {
            f.message = format!("{}: {why}", f.message);
        }
        out.push(f);
    }
    out
}

fn link_fix(dev: &str, bad: &[&Judged]) -> String {
    let flap = bad.iter().any(|j| j.reading.name == "link_downed");
    format!(
        "{}check the cable, transceiver and switch port of {dev}: `mlxlink -d {dev} -m -c -e` (signal, BER, FEC), the switch side's port counters; reseat or replace the cable; clear the counters after fixing (`perfquery -x -R` on InfiniBand) so the next reading starts from zero",
        if flap { "the link is flapping: every QP on it breaks and NCCL jobs using this rail fail; drain them, then " } else { "" }
    )
}

fn transport_fix(dev: &str, _bad: &[&Judged]) -> String {
    format!(
        "packets on {dev} are being lost or refused: on RoCE check PFC/ECN (roce.qos, `mlnx_qos -i <if>`) and the switch's buffer drops; on InfiniBand the link counters (counters.ib-port) and the switch; access errors usually come from an application freeing or deregistering memory (GPU memory included) while peers still use it"
    )
}

pub fn ib_port(node: &Node) -> Vec<Finding> {
    let f = port_check(
        "counters.ib-port",
        node,
        c::IB_PORT,
        |p| &p.counters,
        false,
        "link",
        link_fix,
    );
    unless_baseline_damaged(node, f)
}

pub fn rdma_transport(node: &Node) -> Vec<Finding> {
    let f = port_check(
        "counters.rdma-transport",
        node,
        c::RDMA_TRANSPORT,
        |p| &p.hw_counters,
        true,
        "transport",
        transport_fix,
    );
    unless_baseline_damaged(node, f)
}

// ------------------------------------------------------------------------------------------
// counters.nvlink and counters.pcie-replay (NVML, live)

fn gpu_check(id: &str, node: &Node, defs: &'static [Def], nvlink: bool) -> Vec<Finding> {
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(id, Status::Skip, "node", "no nvidia gpu")];
    }
    if node.live.nvml.get().is_none() {
        return vec![super::gpu::absent(id, node, &node.live.nvml)];
    }
    let mut by: BTreeMap<String, (Vec<c::Reading>, Vec<c::Reading>)> =
        c::gpu_readings_of(node, nvlink)
            .into_iter()
            .map(|(g, a, b)| (g, (a, b)))
            .collect();
    let mut out = Vec::new();
    for g in gpus.iter().copied() {
        let Some((links, replay)) = by.remove(&g.bdf) else {
            out.push(Finding::new(
                id,
                Status::Error,
                &g.bdf,
                "nvml does not list this gpu",
            ));
            continue;
        };
        let rs = if nvlink { links } else { replay };
        // Counters the baseline holds that NVML does not give now; a link NVML reports as
        // down is gpu.nvlink's finding, not a lost counter.
        let down: Vec<String> = node
            .live
            .nvml
            .get()
            .and_then(|n| n.gpus.iter().find(|x| x.bdf == g.bdf))
            .map(|x| {
                x.nvlinks
                    .iter()
                    .filter(|l| !l.active)
                    .map(|l| l.link.to_string())
                    .collect()
            })
            .unwrap_or_default();
        let (under, source) = if nvlink {
            (
                format!("nvlink/{}", g.bdf),
                "nvmlDeviceGetNvLinkErrorCounter",
            )
        } else {
            (
                format!("pcie-replay/{}", g.bdf),
                "nvmlDeviceGetPcieReplayCounter",
            )
        };
        let missing: Vec<String> = lost(node, &under, &rs, |rest| match rest.split_once('/') {
            Some((link, name)) => c::find(defs, name).is_some() && !down.iter().any(|d| d == link),
            None => !nvlink,
        })
        .into_iter()
        .map(|m| match m.split_once('/') {
            Some((link, name)) => format!("link {link} {name}"),
            None => "replay".into(),
        })
        .collect();
        let again = format!(
            "read the counters again (`nvidia-smi -q -i {}`); NVML that stops answering a counter it gave within the same boot points at the driver (`dmesg` for Xid errors); a snapshot that lost it needs a new capture",
            g.bdf
        );
        // Links NVML reports down now whose counters the baseline read: they went down since.
        // gpu.nvlink compares GPUs with each other, so the same link lost on every GPU (one
        // failed NVSwitch) would be seen by nobody.
        let went_down: Vec<&String> = if nvlink {
            down.iter()
                .filter(|l| {
                    node.health.baseline.as_ref().is_some_and(|b| {
                        let p = format!("{under}/{l}/");
                        b.values.keys().any(|k| k.starts_with(&p))
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let down_since = |mut f: Finding| -> Finding {
            if went_down.is_empty() {
                return f;
            }
            let list = went_down
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            if matches!(f.status, Status::Pass | Status::Skip) {
                f.status = Status::Warn;
                f.remediation = Some(format!("`nvidia-smi nvlink -s -i {}` shows the link states; a link that went down needs the GPU (and on NVSwitch systems the fabric manager's view, `nvidia-smi -q | grep -i fabric`) checked: `dmesg` for Xid 74/79, then a GPU reset and `dcgmi diag -r 2`", g.bdf));
            }
            f.message = format!(
                "{}; link(s) {list} went down since the counter baseline (active and counted then)",
                f.message
            );
            f.expected(
                source,
                format!("link(s) {list}: down"),
                "active, as in the counter baseline",
            )
        };
        if rs.is_empty() {
            let why = if nvlink {
                "nvml reports no nvlink error counters for this gpu (no active nvlink, or nvmlDeviceGetNvLinkErrorCounter is not supported here)"
            } else {
                "nvml reports no pcie replay counter for this gpu"
            };
            let f = down_since(Finding::new(id, Status::Skip, &g.bdf, why));
            out.push(with_lost(f, &missing, source, again));
            continue;
        }
        let js = c::judge(rs, defs, node.health.baseline.as_ref());
        let bdf = g.bdf.clone();
        let (what, label): (&str, fn(&Judged) -> String) = if nvlink {
            ("nvlink", |j: &Judged| {
                let link = j.reading.key.rsplit('/').nth(1).unwrap_or("?");
                format!("link {link} {}", j.reading.name)
            })
        } else {
            ("pcie replay", |j: &Judged| {
                format!("pcie {}", j.reading.name)
            })
        };
        let f = finding(
            id,
            &g.bdf,
            what,
            &js,
            node,
            source,
            |_| {
                if nvlink {
                    format!("read the link errors (`nvidia-smi nvlink -e -i {bdf}`, `nvidia-smi nvlink -s`); links that keep retraining need the GPU (and on NVSwitch systems the fabric) reset and then `dcgmi diag -r 2`; recurring errors on one link: reseat or RMA the board")
                } else {
                    format!("the GPU's PCIe link replays TLPs: check `lspci -vvv -s {bdf}` and counters.aer on the bridges above it; reseat the GPU or riser; a BIOS update can change the link equalisation")
                }
            },
            label,
        );
        out.push(with_lost(down_since(f), &missing, source, again));
    }
    let (prefix, source) = if nvlink {
        ("nvlink", "nvmlDeviceGetNvLinkErrorCounter")
    } else {
        ("pcie-replay", "nvmlDeviceGetPcieReplayCounter")
    };
    for sub in gone(
        node,
        prefix,
        1,
        |n| !nvlink || c::find(defs, n).is_some(),
        |b| gpus.iter().any(|g| g.bdf == b),
    ) {
        out.push(gone_finding(
            node,
            id,
            &sub,
            if nvlink { "nvlink" } else { "pcie replay" },
            format!("/sys/bus/pci/devices/{sub} ({source})"),
            "the GPU was read by the run the baseline comes from and is not among the GPUs on the PCI bus now: it fell off the bus (`dmesg` for Xid 79, `nvidia-smi`) or was hot-removed (a VM's GPU detached by the hypervisor); drain the node and reset or re-seat the GPU",
        ));
    }
    out
}

pub fn nvlink(node: &Node) -> Vec<Finding> {
    unless_baseline_damaged(node, gpu_check("counters.nvlink", node, c::NVLINK, true))
}

pub fn pcie_replay(node: &Node) -> Vec<Finding> {
    unless_baseline_damaged(
        node,
        gpu_check("counters.pcie-replay", node, c::PCIE_REPLAY, false),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::{CounterBaseline, Fact, PortCounters};
    use crate::testing::empty_node;

    fn node_with(link_downed: u64, baseline: Option<u64>) -> Node {
        let mut n = empty_node();
        let m: BTreeMap<String, u64> = [
            ("link_downed".to_string(), link_downed),
            ("symbol_error".to_string(), 0),
        ]
        .into();
        n.health.port_counters = Fact::known(
            vec![PortCounters {
                device: "mlx5_0".into(),
                port: 1,
                counters: Fact::known(m, "/sys/class/infiniband/mlx5_0/ports/1/counters"),
                hw_counters: Fact::absent(
                    "/sys/class/infiniband/mlx5_0/ports/1/hw_counters",
                    "not exposed by this driver",
                ),
            }],
            "test",
        );
        n.health.baseline = baseline.map(|v| CounterBaseline {
            values: [("ib/mlx5_0/1/link_downed".to_string(), v)].into(),
            elapsed_ms: 10_000,
            origin: "--interval 10.0 s".into(),
        });
        n
    }

    #[test]
    fn a_damaged_baseline_never_lets_one_reading_pass() {
        let mut n = node_with(0, None);
        assert_eq!(ib_port(&n)[0].status, Status::Pass);
        n.health.baseline_note = Some(format!(
            "{}/gdrdoctor/counters-baseline.json: expected value",
            crate::model::DAMAGED
        ));
        let f = ib_port(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("cannot be read"), "{}", f[0].message);
        // What warns or fails on one reading stays as it is.
        let plain = ib_port(&node_with(1_000_000, None))[0].status;
        assert_ne!(plain, Status::Pass);
        let mut n = node_with(1_000_000, None);
        n.health.baseline_note = Some(format!("{}x", crate::model::DAMAGED));
        assert_eq!(ib_port(&n)[0].status, plain);
        // A note that is not damage (a stale state file) changes nothing.
        let mut n = node_with(0, None);
        n.health.baseline_note = Some("state file from another boot: ignored".into());
        assert_eq!(ib_port(&n)[0].status, Status::Pass);
    }

    #[test]
    fn a_flapping_port_fails_with_the_growth() {
        let f = ib_port(&node_with(5, Some(2)));
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message.contains("link_downed rose by 3 in 10.0 s"),
            "{}",
            f[0].message
        );
        assert!(f[0].remediation.as_deref().unwrap().contains("flapping"));
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.observed == "link_downed 5 (+3 in 10.0 s)"));
    }

    #[test]
    fn one_reading_passes_below_the_threshold_and_says_so() {
        let f = ib_port(&node_with(2, None));
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.observed.contains("one reading")));
        let f = ib_port(&node_with(12, None));
        assert_eq!(f[0].status, Status::Warn);
        assert!(f[0].message.contains("threshold 10"), "{}", f[0].message);
    }

    fn gpu_node(recovery_now: u64, replay_now: u64) -> Node {
        use crate::model::{NvLink, NvmlFacts, NvmlGpu};
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        n.live.nvml = Fact::known(
            NvmlFacts {
                gpus: vec![NvmlGpu {
                    bdf: "0000:18:00.0".into(),
                    nvlinks: vec![NvLink {
                        link: 3,
                        active: true,
                        recovery_errors: Some(recovery_now),
                        replay_errors: Some(0),
                        ..Default::default()
                    }],
                    pcie_replay_counter: Some(replay_now),
                    ..Default::default()
                }],
                ..Default::default()
            },
            "NVML",
        );
        n.health.baseline = Some(CounterBaseline {
            values: [
                ("nvlink/0000:18:00.0/3/recovery".to_string(), 0),
                ("pcie-replay/0000:18:00.0".to_string(), 100),
            ]
            .into(),
            elapsed_ms: 60_000,
            origin: "the last run".into(),
        });
        n
    }

    #[test]
    fn nvlink_recovery_growth_fails_and_names_the_link() {
        let f = nvlink(&gpu_node(2, 100));
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message
                .starts_with("link 3 recovery rose by 2 in 60.0 s"),
            "{}",
            f[0].message
        );
        assert_eq!(nvlink(&gpu_node(0, 100))[0].status, Status::Pass);
    }

    #[test]
    fn pcie_replay_growth_warns() {
        let f = pcie_replay(&gpu_node(0, 130));
        assert_eq!(f[0].status, Status::Warn);
        assert!(
            f[0].message.starts_with("pcie replay rose by 30"),
            "{}",
            f[0].message
        );
        // A driver reload resets it: lower than the baseline is judged alone (not judged).
        assert_eq!(pcie_replay(&gpu_node(0, 5))[0].status, Status::Pass);
    }

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

    #[test]
    fn damaged_port_counters_are_an_error() {
        let mut n = node_with(0, None);
        if let Some(l) = match &mut n.health.port_counters {
            Fact::Known { value, .. } => Some(value),
            Fact::Absent { .. } => None,
        } {
            l[0].counters = Fact::absent(
                "/sys/class/infiniband/mlx5_0/ports/1/counters",
                format!("{}link_downed holds \"x\"", crate::model::DAMAGED),
            );
        }
        let f = ib_port(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
    }

    #[test]
    fn a_counter_the_baseline_holds_and_nvml_lost_is_an_error() {
        // Both counters there: judged as before.
        assert_eq!(pcie_replay(&gpu_node(0, 100))[0].status, Status::Pass);
        let lose = |f: &dyn Fn(&mut crate::model::NvmlGpu)| {
            let mut n = gpu_node(0, 100);
            if let Fact::Known { value, .. } = &mut n.live.nvml {
                f(&mut value.gpus[0]);
            }
            n
        };
        let n = lose(&|g| g.pcie_replay_counter = None);
        let f = pcie_replay(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].message.contains("replay (in the counter baseline)"),
            "{}",
            f[0].message
        );
        // Without a baseline the same NVML answer is a skip, as before.
        let mut plain = n.clone();
        plain.health.baseline = None;
        assert_eq!(pcie_replay(&plain)[0].status, Status::Skip);
        // An active link whose recovery counter NVML stopped giving.
        let f = nvlink(&lose(&|g| g.nvlinks[0].recovery_errors = None));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("link 3 recovery"), "{}", f[0].message);
        // A link gone from NVML's list.
        let f = nvlink(&lose(&|g| g.nvlinks.clear()));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        // A link NVML reports as down is not a lost counter, but it went down since the
        // baseline: a warning (gpu.nvlink cannot see it when every GPU lost the same link).
        let f = nvlink(&lose(&|g| g.nvlinks[0].active = false));
        assert_eq!(f[0].status, Status::Warn, "{f:?}");
        assert!(
            f[0].message.contains("link(s) 3 went down"),
            "{}",
            f[0].message
        );
        // A known failure stays a failure, and still names what was lost.
        let mut n = gpu_node(2, 100);
        if let Fact::Known { value, .. } = &mut n.live.nvml {
            value.gpus[0].nvlinks.push(crate::model::NvLink {
                link: 4,
                active: true,
                ..Default::default()
            });
        }
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("nvlink/0000:18:00.0/4/replay".into(), 0);
        }
        let f = nvlink(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(f[0].message.contains("link 4 replay"), "{}", f[0].message);
    }

    #[test]
    fn a_port_the_baseline_read_and_that_is_gone_is_an_error() {
        let mut n = node_with(0, Some(0));
        assert!(ib_port(&n).iter().all(|f| f.status == Status::Pass));
        // mlx5_1 port 1 was read by the last run; it is not listed now (a VF hot-removed, a
        // NIC fallen off the bus): every other port passes, the lost one is an error.
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("ib/mlx5_1/1/link_downed".into(), 0);
            // A counter no check judges says nothing about the port.
            b.values.insert("ib/mlx5_2/1/port_rcv_data".into(), 7);
        }
        let f = ib_port(&n);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].status, Status::Pass);
        assert_eq!(
            (f[1].status, f[1].subject.as_str()),
            (Status::Error, "mlx5_1/1")
        );
        assert!(f[1].message.contains("gone now"), "{}", f[1].message);
        assert!(f[1].has_evidence());
        assert!(
            f[1].evidence[0].source.ends_with("mlx5_1/ports/1"),
            "{:?}",
            f[1].evidence
        );
        // Without a baseline nothing remembers it.
        n.health.baseline = None;
        assert_eq!(ib_port(&n).len(), 1);
        // Another port of the same device is not this one.
        let mut n = node_with(0, Some(0));
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("ib/mlx5_0/2/symbol_error".into(), 0);
        }
        let f = ib_port(&n);
        assert_eq!(
            f.last().map(|f| (f.status, f.subject.as_str())),
            Some((Status::Error, "mlx5_0/2"))
        );
    }

    /// A port counter reading of `dev` port 1.
    fn port_of(dev: &str) -> PortCounters {
        PortCounters {
            device: dev.into(),
            port: 1,
            counters: Fact::known(
                [("link_downed".to_string(), 0)].into(),
                format!("/sys/class/infiniband/{dev}/ports/1/counters"),
            ),
            hw_counters: Fact::absent("hw_counters", "not exposed by this driver"),
        }
    }

    /// A node of mlx5 functions (`(address, is a VF, bound to mlx5_core)`), RDMA devices
    /// (`(name, address)`) with their port counters, and a baseline of `link_downed` for
    /// each of `before`'s devices.
    fn stand_in_node(fns: &[(&str, bool, bool)], devs: &[(&str, &str)], before: &[&str]) -> Node {
        use crate::testing::{nic, rdma, with};
        let pci = fns
            .iter()
            .map(|(bdf, vf, bound)| {
                let mut p = nic(&format!("/sys/devices/pci0000:45/0000:45:01.0/{bdf}"), 0);
                p.is_virtfn = *vf;
                p.driver = Fact::known(bound.then(|| "mlx5_core".to_string()), "test");
                p
            })
            .collect();
        let rd = devs.iter().map(|(n, b)| rdma(n, b, "4: ACTIVE")).collect();
        let mut n = with(empty_node(), pci, rd);
        n.health.port_counters = Fact::known(
            devs.iter().map(|(d, _)| port_of(d)).collect(),
            "/sys/class/infiniband",
        );
        n.health.baseline = Some(CounterBaseline {
            values: before
                .iter()
                .map(|d| (format!("ib/{d}/1/link_downed"), 0))
                .collect(),
            elapsed_ms: 300_000,
            origin: "the last run (test, 5 min ago)".into(),
        });
        n
    }

    /// `n`'s baseline with the PCI function of each `(device, address)` (as every reading
    /// since the `rdma-at` keys records).
    fn placed(mut n: Node, at: &[(&str, &str)]) -> Node {
        if let Some(b) = n.health.baseline.as_mut() {
            for (d, bdf) in at {
                b.values.insert(format!("{}/{d}/{bdf}", c::RDMA_AT), 1);
            }
        }
        n
    }

    /// With the devices' PCI functions in the baseline, a device gone is judged by what is at
    /// its function now, not by counting stand-ins: SR-IOV enabled (new VF devices) or VFs
    /// moved into pods no longer excuse a PF that fell off the bus in the same interval.
    #[test]
    fn a_device_gone_is_judged_by_its_pci_function_when_the_baseline_placed_it() {
        let (pf0, pf1, vf) = ("0000:49:00.0", "0000:49:00.1", "0000:49:00.2");
        let error_of = |n: &Node, dev: &str| -> String {
            let f = ib_port(n);
            let e: Vec<&Finding> = f.iter().filter(|f| f.status == Status::Error).collect();
            assert_eq!(e.len(), 1, "{f:?}");
            assert_eq!(e[0].subject, format!("{dev}/1"));
            assert!(e[0].has_evidence());
            e[0].message.clone()
        };
        let skips = |n: &Node| -> Vec<String> {
            let f = ib_port(n);
            assert!(f.iter().all(|f| f.status != Status::Error), "{f:?}");
            f.iter()
                .filter(|f| f.status == Status::Skip)
                .map(|f| f.message.clone())
                .collect()
        };
        // A VF created since (SR-IOV enabled: its device mlx5_2 is new) while PF1 fell off
        // the bus. Counted, one stand-in for one device gone: not judged (the gap this closes).
        let sriov = stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0), ("mlx5_2", vf)],
            &["mlx5_0", "mlx5_1"],
        );
        assert_eq!(skips(&sriov).len(), 1);
        let sriov = placed(sriov, &[("mlx5_0", pf0), ("mlx5_1", pf1)]);
        let m = error_of(&sriov, "mlx5_1");
        assert!(
            m.contains("0000:49:00.1 is no longer on the PCI bus"),
            "{m}"
        );
        // A VF whose device is in a pod (bound to mlx5_core, no device here) beside the same
        // loss: the VF stood in when counted; placed, the PF is lost.
        let pod = stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_1"],
        );
        assert_eq!(skips(&pod).len(), 1);
        let pod = placed(pod, &[("mlx5_0", pf0), ("mlx5_1", pf1)]);
        assert!(error_of(&pod, "mlx5_1").contains("no longer on the PCI bus"));
        // The device the pod took is itself placed: its function still serves RDMA.
        let pod_only = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_0", pf0)],
                &["mlx5_0", "mlx5_9"],
            ),
            &[("mlx5_0", pf0), ("mlx5_9", vf)],
        );
        let s = skips(&pod_only);
        assert!(
            s.iter()
                .any(|m| m.contains("0000:49:00.2") && m.contains("pod")),
            "{s:?}"
        );
        // RoCE LAG formed since: both placed devices are excused, each with its reason.
        let lag = placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_bond_0", pf0)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        );
        let s = skips(&lag);
        assert!(s.iter().any(|m| m.contains("is mlx5_bond_0 now")), "{s:?}");
        assert!(s.iter().any(|m| m.contains("0000:49:00.1")), "{s:?}");
        // A rename, placed.
        let renamed = placed(
            stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]),
            &[("mlx5_0", pf0)],
        );
        assert!(skips(&renamed).iter().any(|m| m.contains("is ib0 now")));
        // Its VF handed to vfio-pci (unbound from mlx5_core).
        let vfio = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, false)],
                &[("mlx5_0", pf0)],
                &["mlx5_0", "mlx5_9"],
            ),
            &[("mlx5_0", pf0), ("mlx5_9", vf)],
        );
        assert!(error_of(&vfio, "mlx5_9").contains("0000:49:00.2 has no driver bound"));
        // The same device on the same function without the port the baseline read: lost,
        // whatever stands in elsewhere.
        let mut port2 = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_0", pf0)],
                &["mlx5_0"],
            ),
            &[("mlx5_0", pf0)],
        );
        if let Some(b) = port2.health.baseline.as_mut() {
            b.values.insert("ib/mlx5_0/2/link_downed".into(), 0);
        }
        let f = ib_port(&port2);
        let e: Vec<&Finding> = f.iter().filter(|f| f.status == Status::Error).collect();
        assert_eq!(e.len(), 1, "{f:?}");
        assert_eq!(e[0].subject, "mlx5_0/2");
        assert!(
            e[0].message.contains("without this port"),
            "{}",
            e[0].message
        );
        // The PCI functions unreadable now: a placed device gone is an error, not excused.
        let mut blind = placed(
            stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]),
            &[("mlx5_0", pf0)],
        );
        blind.pci = Fact::absent("/sys/bus/pci/devices", "permission denied");
        assert!(error_of(&blind, "mlx5_0").contains("cannot be listed"));
    }

    /// The reading a run records places every RDMA device on its function.
    #[test]
    fn the_recorded_reading_places_each_rdma_device() {
        let n = stand_in_node(
            &[("0000:49:00.0", false, true)],
            &[("mlx5_0", "0000:49:00.0")],
            &[],
        );
        let v = c::values(&n);
        assert_eq!(v.get("rdma-at/mlx5_0/0000:49:00.0"), Some(&1));
        let b = CounterBaseline {
            values: v,
            elapsed_ms: 1,
            origin: "test".into(),
        };
        assert_eq!(c::baseline_function(&b, "mlx5_0"), Some("0000:49:00.0"));
        assert_eq!(c::baseline_function(&b, "mlx5_"), None);
        assert_eq!(c::baseline_function(&b, "mlx5_1"), None);
    }

    fn verdicts_of(n: &Node) -> Vec<(Status, String)> {
        ib_port(n)
            .into_iter()
            .map(|f| (f.status, f.subject))
            .collect()
    }

    /// What stands in for a vanished device without anything lost: a device the baseline does
    /// not know (a rename, RoCE LAG's bond) and an RDMA function without a device here (LAG's
    /// second PF, a VF or PF whose device moved into a pod). As many devices gone as stand-ins
    /// is a skip; one more is an error for each.
    #[test]
    fn a_device_gone_beside_as_many_stand_ins_is_not_judged() {
        let (pf0, pf1, vf) = ("0000:49:00.0", "0000:49:00.1", "0000:49:00.2");
        let skip = |n: &Node, what: &str| {
            let v = verdicts_of(n);
            assert!(
                v.iter().all(|(s, _)| *s != Status::Error)
                    && v.iter().any(|(s, _)| *s == Status::Skip),
                "{what}: {v:?}"
            );
        };
        // RoCE LAG formed since: mlx5_0 and mlx5_1 became mlx5_bond_0 on PF0; PF1 has none.
        let lag = stand_in_node(
            &[(pf0, false, true), (pf1, false, true)],
            &[("mlx5_bond_0", pf0)],
            &["mlx5_0", "mlx5_1"],
        );
        skip(&lag, "LAG");
        // A VF's device moved into a pod.
        let pod = stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_9"],
        );
        skip(&pod, "pod");
        // A rename.
        let renamed = stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]);
        skip(&renamed, "rename");
        // The same VF handed to vfio-pci (unbound here: not serving RDMA) stands in for
        // nothing: the device the baseline read is lost.
        let vfio = stand_in_node(
            &[(pf0, false, true), (vf, true, false)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_9"],
        );
        assert_eq!(
            verdicts_of(&vfio),
            [
                (Status::Pass, "mlx5_0/1".to_string()),
                (Status::Error, "mlx5_9/1".to_string())
            ]
        );
        // Two gone, one VF without a device: both errors.
        let two = stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0)],
            &["mlx5_0", "mlx5_8", "mlx5_9"],
        );
        let errors: Vec<String> = verdicts_of(&two)
            .into_iter()
            .filter(|(s, _)| *s == Status::Error)
            .map(|(_, d)| d)
            .collect();
        assert_eq!(errors, ["mlx5_8/1", "mlx5_9/1"]);
        // Every port gone (the only VF of a VM hot-removed): an error, not "no rdma port".
        let none = stand_in_node(&[], &[], &["mlx5_0"]);
        assert_eq!(
            verdicts_of(&none),
            [(Status::Error, "mlx5_0/1".to_string())]
        );
        let mut never = none.clone();
        never.health.baseline = None;
        assert_eq!(verdicts_of(&never), [(Status::Skip, "node".to_string())]);
    }

    #[test]
    fn a_gpu_the_baseline_read_and_that_is_gone_is_an_error() {
        let mut n = gpu_node(0, 100);
        assert!(pcie_replay(&n).iter().all(|f| f.status == Status::Pass));
        if let Some(b) = n.health.baseline.as_mut() {
            b.values.insert("pcie-replay/0000:28:00.0".into(), 0);
            b.values.insert("nvlink/0000:28:00.0/0/recovery".into(), 0);
        }
        for f in [pcie_replay(&n), nvlink(&n)] {
            let gone: Vec<_> = f.iter().filter(|f| f.subject == "0000:28:00.0").collect();
            assert_eq!(gone.len(), 1, "{f:?}");
            assert_eq!(gone[0].status, Status::Error);
            assert!(gone[0].message.contains("gone now"), "{}", gone[0].message);
        }
    }

    fn aer_node(stats: Vec<crate::model::AerStats>, baseline: &[(&str, u64)]) -> Node {
        let g = crate::testing::gpu("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0", 0);
        let mut n = crate::testing::with(empty_node(), vec![g], vec![]);
        n.health.aer = Fact::known(stats, "test");
        n.health.baseline = Some(CounterBaseline {
            values: baseline.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            elapsed_ms: 10_000,
            origin: "--interval 10.0 s".into(),
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

    #[test]
    fn port_counters_all_lost_since_the_baseline_are_an_error() {
        let mut n = node_with(0, Some(0));
        if let Fact::Known { value, .. } = &mut n.health.port_counters {
            value[0].counters = Fact::known(
                [("symbol_error".to_string(), 0)].into(),
                "/sys/class/infiniband/mlx5_0/ports/1/counters",
            );
        }
        let f = ib_port(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        // The counters directory gone as a whole.
        if let Fact::Known { value, .. } = &mut n.health.port_counters {
            value[0].counters =
                Fact::absent("/sys/class/infiniband/mlx5_0/ports/1/counters", "not found");
        }
        let f = ib_port(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("link_downed"), "{}", f[0].message);
        n.health.baseline = None;
        assert_eq!(ib_port(&n)[0].status, Status::Skip);
    }

    #[test]
    fn hw_counters_not_exposed_is_a_skip() {
        let f = rdma_transport(&node_with(0, None));
        assert_eq!(f[0].status, Status::Skip);
    }
}
