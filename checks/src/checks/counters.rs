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

/// What became of an RDMA device that the counter baseline placed on a PCI function
/// (`rdma-at/<dev>/<bdf>`), judged by what is at that function now, not by its name (mlx5
/// names are handed out again: after one device goes, the next to register takes the lowest
/// free `mlx5_N`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// On its function now under this name: itself, or renumbered, renamed, bonded (RoCE
    /// LAG's `mlx5_bond_N`), or unbonded.
    Now(String),
    /// Its function still serves RDMA without a device here: RoCE LAG's second PF beside the
    /// bond, a VF whose device moved into a pod.
    Excused(String),
    /// Lost: why, the path that shows it, what is there, and the fix.
    Lost {
        why: String,
        path: String,
        seen: String,
        fix: String,
    },
}

/// The fate of every RDMA device the baseline placed: device -> (its function then, fate).
fn placed_fates(node: &Node) -> BTreeMap<String, (String, Fate)> {
    let mut out = BTreeMap::new();
    let Some(b) = node.health.baseline.as_ref() else {
        return out;
    };
    let under = format!("{}/", c::RDMA_AT);
    // bdf -> (device, node GUID or 1) as the baseline placed them.
    let mut was_at: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (k, v) in b
        .values
        .range(under.clone()..)
        .take_while(|(k, _)| k.starts_with(&under))
    {
        let Some((dev, bdf)) = k[under.len()..].split_once('/') else {
            continue;
        };
        if !dev.is_empty() && !bdf.is_empty() && !bdf.contains('/') {
            was_at.entry(bdf).or_default().push((dev, *v));
        }
    }
    if was_at.is_empty() {
        return out;
    }
    let devs = node.rdma.get().map(Vec::as_slice).unwrap_or_default();
    let mut now_at: BTreeMap<&str, Vec<&crate::model::RdmaDevice>> = BTreeMap::new();
    // Listed now without a readable function: not placeable, not lost either.
    let mut unplaceable: Vec<&str> = Vec::new();
    for d in devs {
        match d.pci_bdf.get() {
            Some(Some(bdf)) => now_at.entry(bdf.as_str()).or_default().push(d),
            _ => unplaceable.push(d.name.as_str()),
        }
    }
    let guid_of = |d: &crate::model::RdmaDevice| d.node_guid.get().and_then(|g| c::guid_value(g));
    // Devices on a function now that the baseline did not place there, by name.
    let fresh = |bdf: &str| -> Vec<&crate::model::RdmaDevice> {
        let was = was_at.get(bdf);
        let mut v: Vec<&crate::model::RdmaDevice> = now_at
            .get(bdf)
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|n| !was.is_some_and(|w| w.iter().any(|(x, _)| *x == n.name)))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        v
    };
    // A RoCE LAG bond formed on `sib` since: every device the baseline placed there is gone
    // from it, and a new bond device (its name says so) with an Ethernet port took their place.
    let bond_on = |sib: &str| -> Option<String> {
        let was = was_at.get(sib)?;
        let now = now_at.get(sib)?;
        if was.iter().any(|(d, _)| now.iter().any(|n| n.name == *d)) {
            return None;
        }
        fresh(sib)
            .into_iter()
            .find(|n| {
                // mlx5_bond_N, bnxt_re_bondN: a renumbered device is not a bond.
                n.name.contains("bond")
                    && n.ports.get().is_some_and(|ps| {
                        ps.iter()
                            .any(|p| p.link_layer.get().is_some_and(|l| l.trim() == "Ethernet"))
                    })
            })
            .map(|n| n.name.clone())
    };
    for (bdf, was) in &was_at {
        let now: Vec<&str> = now_at
            .get(bdf)
            .map(|v| v.iter().map(|d| d.name.as_str()).collect())
            .unwrap_or_default();
        let mut new_devs = fresh(bdf);
        let mut was = was.clone();
        was.sort_unstable();
        let mut missing: Vec<(&str, u64)> = Vec::new();
        for (d, guid) in was {
            if now.contains(&d) || unplaceable.contains(&d) {
                out.insert(d.to_string(), (bdf.to_string(), Fate::Now(d.to_string())));
            } else if let Some(i) = new_devs
                .iter()
                .position(|n| guid > 1 && guid_of(n) == Some(guid))
            {
                // Renamed (the same node GUID): renumbered, a new name, a bond on its PF.
                let n = new_devs.remove(i);
                out.insert(d.to_string(), (bdf.to_string(), Fate::Now(n.name.clone())));
            } else {
                missing.push((d, guid));
            }
        }
        if let ([(d, _)], [n]) = (missing.as_slice(), new_devs.as_slice()) {
            // One device gone, one new on its function: the same, renamed.
            out.insert(d.to_string(), (bdf.to_string(), Fate::Now(n.name.clone())));
            continue;
        }
        for (d, _) in missing {
            let fate = if !new_devs.is_empty() {
                let names: Vec<&str> = new_devs.iter().map(|n| n.name.as_str()).collect();
                Fate::Excused(format!(
                    "its PCI function {bdf} carries {} now, new since the baseline and not told apart from {d} (their node GUIDs differ or were not recorded)",
                    names.join(", ")
                ))
            } else if !now.is_empty() {
                Fate::Lost {
                    why: format!(
                        "its PCI function {bdf} still carries {} but no longer {d}",
                        now.join(", ")
                    ),
                    path: "/sys/class/infiniband".into(),
                    seen: format!("{} on {bdf}, {d} not listed", now.join(", ")),
                    fix: format!("one of the RDMA devices of {bdf} is gone while another stays (a PF's own device and its sub-function's): if a sub-function was deleted on purpose (a pod torn down) nothing is wrong (this is said once); otherwise `rdma dev`, `devlink port show`, `dmesg | grep -i {bdf}`"),
                }
            } else {
                function_fate(node, bdf, d, &bond_on)
            };
            out.insert(d.to_string(), (bdf.to_string(), fate));
        }
    }
    out
}

/// The fate of device `d`, placed on `bdf` by the baseline, when no RDMA device sits on
/// `bdf` now (see [`Fate`]). `bond_on` names a RoCE LAG bond formed on a sibling function.
fn function_fate(
    node: &Node,
    bdf: &str,
    d: &str,
    bond_on: &dyn Fn(&str) -> Option<String>,
) -> Fate {
    use super::rdma::FunctionNow as F;
    let path = format!("/sys/bus/pci/devices/{bdf}");
    let lost = |why: String, seen: String, fix: String| Fate::Lost {
        why,
        path: path.clone(),
        seen,
        fix,
    };
    match super::rdma::function_now(node, bdf) {
        F::Deviceless {
            driver,
            virtfn: true,
        } => Fate::Excused(format!(
            "its PCI function {bdf} (a VF) is bound to {driver} without an RDMA device here: its device moved into a pod's network namespace (RDMA exclusive netns mode)"
        )),
        F::Deviceless {
            driver,
            virtfn: false,
        } => {
            let card = bdf.rsplit_once('.').map(|(c, _)| c).unwrap_or(bdf);
            let bond = super::rdma::pfs_of_card(node, card)
                .into_iter()
                .filter(|s| s != bdf)
                .find_map(|s| bond_on(&s).map(|n| (s, n)));
            match bond {
                Some((sib, n)) => Fate::Excused(format!(
                    "its PCI function {bdf} is bound to {driver} without an RDMA device here, beside {n}, the RoCE device that replaced the one on {sib} of the same card: RoCE LAG's second port"
                )),
                None => lost(
                    format!("its PCI function {bdf} (a PF) is bound to {driver} without an RDMA device here, and no RoCE bond formed on its card: the RDMA driver failed on it, or its device was moved into a pod's network namespace"),
                    format!("driver {driver}, no RDMA device"),
                    format!("`dmesg | grep -i {bdf}` for the RDMA driver's error; `devlink dev info pci/{bdf}`; rebind the function (`echo {bdf} > /sys/bus/pci/drivers/{driver}/unbind; echo {bdf} > /sys/bus/pci/drivers/{driver}/bind`); if {d}'s PF was assigned to a pod on purpose (RDMA exclusive netns mode), nothing is wrong (this is said once)"),
                ),
            }
        }
        F::Bound(driver) => lost(
            format!("its PCI function {bdf} is bound to {driver} now, which serves no RDMA here"),
            format!("driver {driver}"),
            format!("if {bdf} was handed to {driver} on purpose (a VM, DPDK), nothing is wrong (this is said once); otherwise give it back (`echo {bdf} > /sys/bus/pci/drivers/{driver}/unbind`, then bind it to the NIC's driver) and read `dmesg | grep -i {bdf}`"),
        ),
        F::Unbound => lost(
            format!("its PCI function {bdf} has no driver bound now"),
            "no driver".into(),
            format!("bind it to the NIC's driver (`echo {bdf} > /sys/bus/pci/drivers_probe`) and read `dmesg | grep -i {bdf}` for why it is unbound (a failed probe, firmware in recovery: kernel.mlx5-health)"),
        ),
        F::DriverUnreadable(reason) => lost(
            format!("the driver of its PCI function {bdf} cannot be read ({reason}), so whether it still serves RDMA is unknown"),
            format!("driver: unknown ({reason})"),
            "run as root; a snapshot that lost the function's `driver` link needs a new capture".into(),
        ),
        F::Absent => lost(
            format!("its PCI function {bdf} is no longer on the PCI bus"),
            "not on the bus".into(),
            format!("the NIC fell off the bus or was hot-removed (a VF detached by the hypervisor): `dmesg | grep -i {bdf}` (AER, surprise down, mlx5 health), `lspci -s {bdf}`; drain the node, then reset or re-seat the NIC (in a VM, re-attach the VF)"),
        ),
        F::Unknown(reason) => lost(
            format!("the PCI functions or RDMA devices cannot be listed now ({reason}), so whether {bdf} still serves RDMA is unknown"),
            format!("unknown ({reason})"),
            "run as root; a snapshot that lost /sys/bus/pci/devices or /sys/class/infiniband needs a new capture".into(),
        ),
    }
}

/// The baseline with each placed device's port keys (`ib/`, `hw/`) under the name its
/// function carries now, and without those of devices lost or excused (their own findings say
/// so): growth is judged per function, so renumbered devices are not compared with each
/// other's counters, and a name handed to another function does not hide a loss. `None`
/// when nothing moved.
fn by_function(
    b: &crate::model::CounterBaseline,
    fates: &BTreeMap<String, (String, Fate)>,
) -> Option<(crate::model::CounterBaseline, Vec<String>)> {
    if fates
        .iter()
        .all(|(d, (_, f))| matches!(f, Fate::Now(n) if n == d))
    {
        return None;
    }
    // Names a placed device carries now that it did not carry then.
    let taken: Vec<&str> = fates
        .iter()
        .filter_map(|(d, (_, f))| match f {
            Fate::Now(n) if n != d => Some(n.as_str()),
            _ => None,
        })
        .collect();
    let mut displaced: Vec<String> = Vec::new();
    let mut values = BTreeMap::new();
    let mut unplaced = Vec::new();
    for (k, v) in &b.values {
        match port_key(k).map(|(fam, d, tail)| (fam, fates.get(d), tail)) {
            Some((fam, Some((_, Fate::Now(n))), tail)) => {
                values.insert(format!("{fam}/{n}/{tail}"), *v);
            }
            Some((_, Some(_), _)) => {}
            _ => unplaced.push((k, *v)),
        }
    }
    // A device the baseline could not place whose name a placed device carries now: which
    // function it was on is unknown, and its readings are not the placed device's. Said as
    // gone (`displaced`), its keys left out.
    for (k, v) in unplaced {
        match port_key(k).map(|(_, d, _)| d) {
            Some(d) if taken.contains(&d) => {
                if !displaced.iter().any(|x| x == d) {
                    displaced.push(d.to_string());
                }
            }
            _ => {
                values.insert(k.clone(), v);
            }
        }
    }
    Some((
        crate::model::CounterBaseline {
            values,
            elapsed_ms: b.elapsed_ms,
            origin: b.origin.clone(),
        },
        displaced,
    ))
}

/// A port counter key (`ib/<dev>/<rest>`, `hw/<dev>/<rest>`) split into its family, device
/// and the rest.
fn port_key(k: &str) -> Option<(&str, &str, &str)> {
    let (fam, rest) = k.split_once('/')?;
    if !matches!(fam, "ib" | "hw") {
        return None;
    }
    let (d, tail) = rest.split_once('/')?;
    Some((fam, d, tail))
}

/// The ports (`dev/port`) the baseline holds judged `kind` counters for.
fn baseline_ports(
    b: &crate::model::CounterBaseline,
    kind: &str,
    d: &str,
    judged: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let under = format!("{kind}/{d}/");
    let mut v: Vec<String> = b
        .values
        .range(under.clone()..)
        .take_while(|(k, _)| k.starts_with(&under))
        .filter_map(|(k, _)| {
            let (port, counter) = k[under.len()..].split_once('/')?;
            judged(counter.rsplit('/').next()?).then(|| format!("{d}/{port}"))
        })
        .collect();
    v.dedup();
    v
}

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
    let judged = |n: &str| c::find(defs, n).is_some();
    let port_source = |sub: &str| format!("/sys/class/infiniband/{}", sub.replace('/', "/ports/"));
    // Devices the baseline placed on a PCI function are followed by function, and the
    // baseline's port keys re-keyed to the names their functions carry now; what a placed
    // device lost, or what excuses it, is said per device.
    let fates = placed_fates(node);
    let mut placed_out = Vec::new();
    if let Some(b) = node.health.baseline.as_ref() {
        for (d, (was_on, fate)) in &fates {
            let ports = baseline_ports(b, kind, d, &judged);
            if ports.is_empty() {
                continue;
            }
            match fate {
                Fate::Now(_) => {}
                Fate::Excused(why) => placed_out.push(
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
                ),
                Fate::Lost {
                    why,
                    path,
                    seen,
                    fix,
                } => {
                    // Its name listed again on another function: say so, or the report shows
                    // the name passing beside its own loss.
                    let reused = node
                        .rdma
                        .get()
                        .and_then(|v| v.iter().find(|x| x.name == *d))
                        .and_then(|x| x.pci_bdf.get().cloned().flatten())
                        .filter(|now_on| now_on != was_on)
                        .map(|now_on| format!(" (the name {d} is carried now by the device on {now_on}: mlx5 hands a freed name to the next device that registers)"))
                        .unwrap_or_default();
                    for sub in &ports {
                        let mut f = gone_finding(node, id, sub, what, port_source(sub), fix)
                            .expected(
                                path.as_str(),
                                seen.as_str(),
                                "an RDMA device on the function, as in the counter baseline",
                            );
                        f.message = format!("{}: {why}{reused}", f.message);
                        placed_out.push(f);
                    }
                }
            }
        }
    }
    let remapped;
    let node = match node
        .health
        .baseline
        .as_ref()
        .and_then(|b| by_function(b, &fates).map(|r| (b, r)))
    {
        Some((orig, (b, displaced))) => {
            for u in displaced {
                let now_on = fates
                    .iter()
                    .find(|(_, (_, f))| matches!(f, Fate::Now(n) if *n == u))
                    .map(|(d, (bdf, _))| format!("{d}'s function {bdf}"))
                    .unwrap_or_default();
                for sub in baseline_ports(orig, kind, &u, &judged) {
                    let mut f = gone_finding(node, id, &sub, what, port_source(&sub), "the baseline does not say which PCI function this device was on (its address was unreadable then), and another device carries its name now: `ibv_devinfo -l`, `rdma dev`, `dmesg | grep -i mlx5` for a NIC that fell off the bus or failed");
                    f.message = format!("{}: its name is carried now by {now_on}", f.message);
                    placed_out.push(f);
                }
            }
            let mut n = node.clone();
            n.health.baseline = Some(b);
            remapped = n;
            &remapped
        }
        None => node,
    };
    // Ports the baseline read and that are not listed now (after the ports' own findings).
    let lost_ports = gone(node, kind, 2, judged, |sub| {
        list.iter()
            .any(|p| sub.split_once('/') == Some((p.device.as_str(), &p.port.to_string())))
    });
    if list.is_empty() && lost_ports.is_empty() && placed_out.is_empty() {
        return vec![Finding::new(id, Status::Skip, "node", "no rdma port")];
    }
    let mut by: BTreeMap<String, Vec<c::Reading>> = c::port_readings_of(node, judged)
        .into_iter()
        .map(|(s, a, b)| (s, if hw { b } else { a }))
        .collect();
    let b = node.health.baseline.as_ref();
    let mut out = Vec::new();
    for p in list {
        let sub = format!("{}/{}", p.device, p.port);
        let fact = pick(p);
        let rs: Vec<c::Reading> = by.remove(&sub).unwrap_or_default();
        let missing = lost(node, &format!("{kind}/{sub}"), &rs, judged);
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
    // A port gone from a device that is still on its function: lost, whatever stands in.
    let followed = |dev: &str| {
        fates
            .values()
            .find(|(_, f)| matches!(f, Fate::Now(n) if n == dev))
            .map(|(bdf, _)| bdf.as_str())
    };
    let mut unplaced_ports: Vec<&String> = Vec::new();
    for sub in &lost_ports {
        let dev = sub.split_once('/').map(|(d, _)| d).unwrap_or(sub.as_str());
        match followed(dev) {
            Some(bdf) => {
                let mut f = gone_finding(
                    node,
                    id,
                    sub,
                    what,
                    port_source(sub),
                    &format!("the port is gone from a device that is still there: `rdma link show {dev}`, `dmesg | grep -i {bdf}`; a port removed on purpose needs nothing more (this is said once)"),
                );
                f.message = format!(
                    "{}: {dev} is still on its PCI function {bdf}, without this port",
                    f.message
                );
                out.push(f);
            }
            None => unplaced_ports.push(sub),
        }
    }
    // A baseline that does not place its devices (written before the rdma-at keys): what can
    // stand in for a vanished device without anything lost is counted, a device the baseline
    // does not know (a rename, RoCE LAG's mlx5_bond_0) and an RDMA function without a device
    // here (LAG's second PF, a VF or PF whose device moved into a pod), less those the placed
    // devices above took. As many of them as devices gone: not judged.
    let mut unplaced: Vec<&str> = unplaced_ports
        .iter()
        .filter_map(|s| s.split_once('/').map(|(d, _)| d))
        .collect();
    unplaced.sort_unstable();
    unplaced.dedup();
    let excused = fates
        .values()
        .filter(|(_, f)| matches!(f, Fate::Excused(_)))
        .count();
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
    // Functions a placed device was on are judged above: never a stand-in here.
    let deviceless = super::rdma::deviceless_functions(node)
        .into_iter()
        .filter(|f| !fates.values().any(|(bdf, _)| bdf == f))
        .count();
    let stand_ins = (new_devs.len() + deviceless).saturating_sub(excused);
    if !unplaced.is_empty() && unplaced.len() <= stand_ins {
        let ports: Vec<&str> = unplaced_ports.iter().map(|s| s.as_str()).collect();
        out.push(
            Finding::new(
                id,
                Status::Skip,
                ports.join(" "),
                format!(
                    "{} in the counter baseline and not listed now, beside {stand_ins} device(s) the baseline does not know or rdma function(s) without a device here (a rename, RoCE LAG's mlx5_bond_N, a device moved into a pod's netns): not judged as lost (this baseline does not say which PCI function they were on)",
                    ports.join(", "),
                ),
            )
            .evidence(
                "/sys/class/infiniband",
                format!("{}: not listed", ports.join(", ")),
            ),
        );
    } else {
        for sub in unplaced_ports {
            out.push(gone_finding(
                node,
                id,
                sub,
                what,
                port_source(sub),
                "the RDMA port was read by the run the baseline comes from and is not among the ports listed now: a NIC that fell off the bus (`dmesg | grep -i mlx5`, `lspci -d 15b3:`), a VF hot-removed by the hypervisor, mlx5_ib unloaded, or the device renamed (RoCE LAG makes mlx5_bond_N); `ibv_devinfo -l` lists what is there",
            ));
        }
    }
    out.extend(placed_out);
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

    /// `n` with every RDMA port on Ethernet (RoCE).
    fn roce(mut n: Node) -> Node {
        let mut devs = n.rdma.get().cloned().unwrap_or_default();
        for d in devs.iter_mut() {
            let mut ports = d.ports.get().cloned().unwrap_or_default();
            for p in ports.iter_mut() {
                p.link_layer = Fact::known("Ethernet".to_string(), "test");
            }
            d.ports = Fact::known(ports, "test");
        }
        n.rdma = Fact::known(devs, "test");
        n
    }

    /// `n` with `bdf`'s driver set to `driver`.
    fn bound_to(mut n: Node, bdf: &str, driver: Option<&str>) -> Node {
        let mut pci = n.pci.get().cloned().unwrap_or_default();
        for p in pci.iter_mut().filter(|p| p.bdf == bdf) {
            p.driver = Fact::known(driver.map(str::to_string), "test");
        }
        n.pci = Fact::known(pci, "test");
        n
    }

    /// The errors of `counters.ib-port` on `n`, (subject, message); every one with evidence.
    fn errors_of(n: &Node) -> Vec<(String, String)> {
        ib_port(n)
            .into_iter()
            .filter(|f| f.status == Status::Error)
            .inspect(|f| assert!(f.has_evidence() && f.remediation.is_some(), "{f:?}"))
            .map(|f| (f.subject, f.message))
            .collect()
    }

    /// Its skips' messages; none of its findings an error.
    fn skips_of(n: &Node) -> Vec<String> {
        let f = ib_port(n);
        assert!(f.iter().all(|f| f.status != Status::Error), "{f:?}");
        f.iter()
            .filter(|f| f.status == Status::Skip)
            .map(|f| f.message.clone())
            .collect()
    }

    /// With the devices' PCI functions in the baseline, a device gone is judged by what is at
    /// its function now, not by its name or by counting stand-ins.
    #[test]
    fn a_device_gone_is_judged_by_its_pci_function_when_the_baseline_placed_it() {
        let (pf0, pf1, vf) = ("0000:49:00.0", "0000:49:00.1", "0000:49:00.2");
        let other = "0000:4a:00.0";
        let one = |e: Vec<(String, String)>, sub: &str, says: &str| {
            assert_eq!(e.len(), 1, "{e:?}");
            assert_eq!(e[0].0, sub, "{e:?}");
            assert!(e[0].1.contains(says), "{e:?}");
        };
        // SR-IOV enabled since (a VF device, mlx5_2) while PF1 fell off the bus. Counted, one
        // stand-in for one device gone: not judged (the gap placing closes).
        let sriov = stand_in_node(
            &[(pf0, false, true), (vf, true, true)],
            &[("mlx5_0", pf0), ("mlx5_2", vf)],
            &["mlx5_0", "mlx5_1"],
        );
        assert_eq!(skips_of(&sriov).len(), 1);
        let sriov = placed(sriov, &[("mlx5_0", pf0), ("mlx5_1", pf1)]);
        one(
            errors_of(&sriov),
            "mlx5_1/1",
            "0000:49:00.1 is no longer on the PCI bus",
        );
        // The other order: PF1 lost first, then the VF's device took the free name mlx5_1.
        // By name nothing is missing; by function PF1 is.
        let reused = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_0", pf0), ("mlx5_1", vf)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        );
        one(
            errors_of(&reused),
            "mlx5_1/1",
            "0000:49:00.1 is no longer on the PCI bus",
        );
        one(
            errors_of(&reused),
            "mlx5_1/1",
            "the name mlx5_1 is carried now by the device on 0000:49:00.2",
        );
        // Renumbered: A (mlx5_0) fell off the bus, B and C registered again as mlx5_0 and
        // mlx5_1. The loss is A's, named by its baseline name and function; B and C are
        // followed to their new names and judged against their own readings.
        let (a, b2, c2) = ("0000:17:00.0", "0000:27:00.0", "0000:37:00.0");
        let mut renumbered = placed(
            stand_in_node(
                &[(b2, false, true), (c2, false, true)],
                &[("mlx5_0", b2), ("mlx5_1", c2)],
                &["mlx5_0", "mlx5_1", "mlx5_2"],
            ),
            &[("mlx5_0", a), ("mlx5_1", b2), ("mlx5_2", c2)],
        );
        one(
            errors_of(&renumbered),
            "mlx5_0/1",
            "0000:17:00.0 is no longer on the PCI bus",
        );
        // B's link flapped before: its reading, now under mlx5_0, is B's, not A's.
        if let Some(b) = renumbered.health.baseline.as_mut() {
            b.values.insert("ib/mlx5_1/1/link_downed".into(), 5);
        }
        let mut hc = renumbered
            .health
            .port_counters
            .get()
            .cloned()
            .unwrap_or_default();
        hc[0].counters = Fact::known(
            [("link_downed".to_string(), 5)].into(),
            "/sys/class/infiniband/mlx5_0/ports/1/counters",
        );
        renumbered.health.port_counters = Fact::known(hc, "/sys/class/infiniband");
        let f = ib_port(&renumbered);
        let b_now = f.iter().find(|f| f.subject == "mlx5_0/1").unwrap();
        assert_eq!(b_now.status, Status::Pass, "{b_now:?}");
        // Two devices on one function (a PF and its sub-function): the PF's device gone, the
        // sub-function's left. Not a rename.
        let sf = placed(
            stand_in_node(
                &[(pf0, false, true)],
                &[("mlx5_5", pf0)],
                &["mlx5_0", "mlx5_5"],
            ),
            &[("mlx5_0", pf0), ("mlx5_5", pf0)],
        );
        one(
            errors_of(&sf),
            "mlx5_0/1",
            "still carries mlx5_5 but no longer mlx5_0",
        );
        // A PF bound to mlx5_core without a device, no bond on its card, its VF still
        // serving: the RDMA driver failed on it. An error, not "a pod".
        let pf_failed = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_2", vf)],
                &["mlx5_0", "mlx5_2"],
            ),
            &[("mlx5_0", pf0), ("mlx5_2", vf)],
        );
        one(
            errors_of(&pf_failed),
            "mlx5_0/1",
            "no RoCE bond formed on its card",
        );
        // The dual-port card's PF1 without a device and no LAG: the same.
        let no_lag = placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_0", pf0)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        );
        one(errors_of(&no_lag), "mlx5_1/1", "no RoCE bond formed");
        // RoCE LAG formed since: mlx5_0 is followed to the bond, PF1 is LAG's second port.
        let lag = roce(placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_bond_0", pf0)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        ));
        let s = skips_of(&lag);
        assert!(
            s.len() == 1 && s[0].contains("beside mlx5_bond_0") && s[0].contains("LAG"),
            "{s:?}"
        );
        // Not a bond: InfiniBand (no RoCE LAG there), a sub-function new beside PF0's own
        // device, or PF0 only renumbered. PF1 without a device is an error in each.
        let ib = roce(lag.clone());
        let mut ib_only = ib.clone();
        let mut devs = ib_only.rdma.get().cloned().unwrap_or_default();
        for d in devs.iter_mut() {
            d.ports = Fact::known(
                vec![crate::testing::rdma("x", pf0, "4: ACTIVE")
                    .ports
                    .get()
                    .cloned()
                    .unwrap_or_default()[0]
                    .clone()],
                "test",
            );
        }
        ib_only.rdma = Fact::known(devs, "test");
        one(errors_of(&ib_only), "mlx5_1/1", "no RoCE bond formed");
        let sf_beside = roce(placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_0", pf0), ("mlx5_2", pf0)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        ));
        one(errors_of(&sf_beside), "mlx5_1/1", "no RoCE bond formed");
        let renumbered_pf0 = roce(placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_0", pf0)],
                &["mlx5_1", "mlx5_2"],
            ),
            &[("mlx5_1", pf0), ("mlx5_2", pf1)],
        ));
        let e = errors_of(&renumbered_pf0);
        assert!(
            e.iter()
                .any(|(s, m)| s == "mlx5_2/1" && m.contains("no RoCE bond formed")),
            "{e:?}"
        );
        // ... and undone: the bond's function carries mlx5_0 again, PF1 was not placed.
        let unbond = placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true)],
                &[("mlx5_0", pf0), ("mlx5_1", pf1)],
                &["mlx5_bond_0"],
            ),
            &[("mlx5_bond_0", pf0)],
        );
        assert!(skips_of(&unbond).is_empty());
        // A rename, and a VF's device moved into a pod.
        let renamed = placed(
            stand_in_node(&[(pf0, false, true)], &[("ib0", pf0)], &["mlx5_0"]),
            &[("mlx5_0", pf0)],
        );
        assert!(skips_of(&renamed).is_empty());
        assert!(ib_port(&renamed).iter().all(|f| f.status == Status::Pass));
        let pod = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_0", pf0)],
                &["mlx5_0", "mlx5_9"],
            ),
            &[("mlx5_0", pf0), ("mlx5_9", vf)],
        );
        let s = skips_of(&pod);
        assert!(
            s.iter().any(|m| m.contains(vf) && m.contains("pod")),
            "{s:?}"
        );
        // That VF handed to vfio-pci, or left without a driver.
        let vfio = bound_to(pod.clone(), vf, Some("vfio-pci"));
        one(errors_of(&vfio), "mlx5_9/1", "bound to vfio-pci now");
        let unbound = bound_to(pod.clone(), vf, None);
        one(errors_of(&unbound), "mlx5_9/1", "has no driver bound now");
        // Its driver link unreadable: unknown, an error that says so.
        let mut unreadable = pod.clone();
        let mut pci = unreadable.pci.get().cloned().unwrap_or_default();
        pci[1].driver = Fact::absent(
            "/sys/bus/pci/devices/0000:49:00.2/driver",
            "permission denied",
        );
        unreadable.pci = Fact::known(pci, "test");
        one(
            errors_of(&unreadable),
            "mlx5_9/1",
            "cannot be read (permission denied)",
        );
        // The same device on the same function without the port the baseline read: lost,
        // whatever stands in elsewhere (a VF without a device here).
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
        one(errors_of(&port2), "mlx5_0/2", "without this port");
        // The PCI functions unreadable now: a placed device gone is an error, not excused.
        let mut blind = placed(
            stand_in_node(&[(other, false, true)], &[("ib0", other)], &["mlx5_0"]),
            &[("mlx5_0", pf0)],
        );
        blind.pci = Fact::absent("/sys/bus/pci/devices", "permission denied");
        one(errors_of(&blind), "mlx5_0/1", "cannot be listed");
        // A baseline that places one device and not another (its address was unreadable
        // then): the placed one by function, the other by the count.
        let mixed = placed(
            stand_in_node(
                &[(pf0, false, true), (vf, true, true)],
                &[("mlx5_2", vf)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0)],
        );
        let e = errors_of(&mixed);
        assert!(
            e.iter()
                .any(|(s, m)| s == "mlx5_0/1" && m.contains("no RoCE bond formed")),
            "{e:?}"
        );
        // The transport counters (hw_counters/) follow the same rule.
        let mut hw = sriov.clone();
        let mut ports = hw.health.port_counters.get().cloned().unwrap_or_default();
        for p in ports.iter_mut() {
            p.hw_counters = Fact::known(
                [("out_of_sequence".to_string(), 0)].into(),
                format!("/sys/class/infiniband/{}/ports/1/hw_counters", p.device),
            );
        }
        hw.health.port_counters = Fact::known(ports, "/sys/class/infiniband");
        if let Some(b) = hw.health.baseline.as_mut() {
            for d in ["mlx5_0", "mlx5_1"] {
                b.values.insert(format!("hw/{d}/1/out_of_sequence"), 0);
            }
        }
        let e: Vec<(Status, String)> = rdma_transport(&hw)
            .into_iter()
            .filter(|f| f.status == Status::Error)
            .map(|f| (f.status, f.subject))
            .collect();
        assert_eq!(e, [(Status::Error, "mlx5_1/1".to_string())]);
    }

    /// `n` with `dev`'s `link_downed` reading `v` now.
    fn link_downed_now(n: &mut Node, dev: &str, v: u64) {
        let mut hc = n.health.port_counters.get().cloned().unwrap_or_default();
        for p in hc.iter_mut().filter(|p| p.device == dev) {
            p.counters = Fact::known(
                [("link_downed".to_string(), v)].into(),
                format!("/sys/class/infiniband/{dev}/ports/1/counters"),
            );
        }
        n.health.port_counters = Fact::known(hc, "/sys/class/infiniband");
    }

    /// Holes the review of the function-following rule found, closed: devices paired by node
    /// GUID on a shared function, a device whose function is unreadable now still judged, a
    /// name taken from a device the baseline could not place, placed functions never counted
    /// as stand-ins for unplaced devices.
    #[test]
    fn following_devices_by_function_neither_hides_nor_invents() {
        let (pf0, pf1, b) = ("0000:49:00.0", "0000:49:00.1", "0000:4a:00.0");
        let fails = |n: &Node| -> Vec<String> {
            ib_port(n)
                .into_iter()
                .filter(|f| matches!(f.status, Status::Fail | Status::Error))
                .map(|f| format!("{:?} {} {}", f.status, f.subject, f.message))
                .collect()
        };
        // A PF's device (5 link downs) and its sub-function's (0) on one function, both
        // renamed (mlx5_0 -> mlx5_2, mlx5_10 -> mlx5_11). By name order the readings would
        // swap (a false "rose by 5"); by node GUID each keeps its own.
        let mut two = placed(
            stand_in_node(
                &[(pf0, false, true)],
                &[("mlx5_2", pf0), ("mlx5_11", pf0)],
                &["mlx5_0", "mlx5_10"],
            ),
            &[],
        );
        if let Some(bl) = two.health.baseline.as_mut() {
            bl.values.insert("ib/mlx5_0/1/link_downed".into(), 5);
            bl.values
                .insert(format!("{}/mlx5_0/{pf0}", c::RDMA_AT), 0x1111);
            bl.values
                .insert(format!("{}/mlx5_10/{pf0}", c::RDMA_AT), 0x2222);
        }
        let mut devs = two.rdma.get().cloned().unwrap_or_default();
        for d in devs.iter_mut() {
            let g = if d.name == "mlx5_2" {
                "0000:0000:0000:1111"
            } else {
                "0000:0000:0000:2222"
            };
            d.node_guid = Fact::known(g.to_string(), "test");
        }
        two.rdma = Fact::known(devs, "test");
        link_downed_now(&mut two, "mlx5_2", 5);
        assert!(fails(&two).is_empty(), "{:?}", fails(&two));
        // The same growth on the PF is still seen.
        let mut grew = two.clone();
        link_downed_now(&mut grew, "mlx5_2", 9);
        let f = fails(&grew);
        assert!(f.len() == 1 && f[0].starts_with("Fail mlx5_2/1"), "{f:?}");
        // Without GUIDs the two cannot be told apart: not judged, never a false fail.
        let mut blind = two.clone();
        if let Some(bl) = blind.health.baseline.as_mut() {
            bl.values.insert(format!("{}/mlx5_0/{pf0}", c::RDMA_AT), 1);
            bl.values.insert(format!("{}/mlx5_10/{pf0}", c::RDMA_AT), 1);
        }
        assert!(fails(&blind).is_empty(), "{:?}", fails(&blind));
        assert!(skips_of(&blind)
            .iter()
            .any(|m| m.contains("not told apart")));
        // Listed under its own name, its function unreadable now: still judged on its growth.
        let mut unreadable = placed(
            stand_in_node(&[(pf0, false, true)], &[("mlx5_0", pf0)], &["mlx5_0"]),
            &[("mlx5_0", pf0)],
        );
        let mut devs = unreadable.rdma.get().cloned().unwrap_or_default();
        devs[0].pci_bdf = Fact::absent("/sys/class/infiniband/mlx5_0/device", "permission denied");
        unreadable.rdma = Fact::known(devs, "test");
        link_downed_now(&mut unreadable, "mlx5_0", 4);
        let f = fails(&unreadable);
        assert!(f.len() == 1 && f[0].starts_with("Fail mlx5_0/1"), "{f:?}");
        // A placed device renamed into the name of one the baseline could not place (its
        // address unreadable then), which is gone: the unplaced one is an error.
        let mixed = placed(
            stand_in_node(
                &[(pf0, false, true)],
                &[("mlx5_1", pf0)],
                &["mlx5_0", "mlx5_1"],
            ),
            &[("mlx5_0", pf0)],
        );
        let e = errors_of(&mixed);
        assert!(
            e.iter()
                .any(|(s, m)| s == "mlx5_1/1" && m.contains("carried now by mlx5_0's function")),
            "{e:?}"
        );
        // PF1 judged lost (no device, no bond) does not also stand in for an unplaced mlx5_7.
        let double = placed(
            stand_in_node(
                &[(pf0, false, true), (pf1, false, true), (b, false, false)],
                &[("mlx5_0", pf0)],
                &["mlx5_0", "mlx5_1", "mlx5_7"],
            ),
            &[("mlx5_0", pf0), ("mlx5_1", pf1)],
        );
        let e = errors_of(&double);
        assert!(e.iter().any(|(s, _)| s == "mlx5_7/1"), "{e:?}");
        assert!(e.iter().any(|(s, _)| s == "mlx5_1/1"), "{e:?}");
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
        // The test device's node GUID reads 0: the key holds 1.
        assert_eq!(v.get("rdma-at/mlx5_0/0000:49:00.0"), Some(&1));
        assert_eq!(
            c::guid_value("b8ce:f603:00a1:2b3c"),
            Some(0xb8ce_f603_00a1_2b3c)
        );
        assert_eq!(c::guid_value("0000:0000:0000:0000"), None);
        assert_eq!(c::guid_value("garbage"), None);
        let b = CounterBaseline {
            values: v,
            elapsed_ms: 1,
            origin: "test".into(),
        };
        let mut next = n.clone();
        next.health.baseline = Some(b);
        let fates = placed_fates(&next);
        assert_eq!(
            fates.into_iter().collect::<Vec<_>>(),
            [(
                "mlx5_0".to_string(),
                ("0000:49:00.0".to_string(), Fate::Now("mlx5_0".into()))
            )]
        );
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
