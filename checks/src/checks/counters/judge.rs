//! What every `counters.*` check shares: judged counters into findings, the baseline's
//! rates, and what a baseline holds that is not there now (a lost counter, a subject gone).

use crate::counters::{self as c, Judged};
use crate::model::Node;
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

/// How the counters were judged, for evidence: the interval over the judged `keys` the
/// baseline holds (a ledger's families can differ in age), or why there is none.
pub(super) fn rates<'a>(node: &Node, keys: impl IntoIterator<Item = &'a str>) -> (String, String) {
    match &node.health.baseline {
        Some(b) => (
            "counter baseline".into(),
            match b.span_of(keys) {
                Some(span) => format!("growth over {} ({})", span_text(span), b.origin),
                None => format!(
                    "{} holds none of these counters: this reading records them, and growth is judged from the next run",
                    b.origin
                ),
            },
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

/// `10.0 s`, or `10.0 s to 5.0 min` when the keys were read at different times.
pub(super) fn span_text((lo, hi): (u64, u64)) -> String {
    if c::human_secs(lo) == c::human_secs(hi) {
        c::human_secs(lo)
    } else {
        format!("{} to {}", c::human_secs(lo), c::human_secs(hi))
    }
}

/// A baseline the snapshot holds but that cannot be read (see `model::DAMAGED`): the growth
/// that says "broken now" is unknown, so no counter passes on one reading. Every `pass` of the
/// check becomes an `error` saying so; what fails or warns on one reading stays.
pub(super) fn unless_baseline_damaged(node: &Node, findings: Vec<Finding>) -> Vec<Finding> {
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
pub(super) fn lost(
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
pub(super) fn with_lost(
    mut f: Finding,
    missing: &[String],
    source: &str,
    again: String,
) -> Finding {
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
pub(super) fn gone(
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
pub(super) fn gone_finding(
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

pub(super) fn worst(js: &[Judged]) -> Status {
    js.iter().map(|j| j.status).max().unwrap_or(Status::Pass)
}

/// A finding for one subject from its judged counters. `label` renames a counter for messages
/// (NVLink counters carry their link).
#[allow(clippy::too_many_arguments)]
pub(super) fn finding(
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
    let (rs, ro) = rates(node, js.iter().map(|j| j.reading.key.as_str()));
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
        // A rate needs an interval: a baseline that holds none of these counters (their
        // first reading) says nothing about growth, so the pass says what was recorded.
        let span = b.and_then(|b| b.span_of(js.iter().map(|j| j.reading.key.as_str())));
        let zero = js.iter().all(|j| j.def.is_none() || j.reading.value == 0);
        let msg = match (span, zero) {
            (Some(span), _) => format!("no {what} error counter grew in {}", span_text(span)),
            (None, true) => format!("{what} error counters are all zero"),
            (None, false) => {
                format!("{what} error counters are below their thresholds (cumulative)")
            }
        };
        let msg = if b.is_some() && span.is_none() {
            format!("{msg}; first reading of these counters: growth is judged from the next run")
        } else {
            msg
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

pub(super) fn plain(j: &Judged) -> String {
    j.reading.name.clone()
}
