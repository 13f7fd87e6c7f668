//! Severity overrides and waivers (`policy.waiver`), applied to every finding of the report.

use super::context::Context;
use crate::policy::glob::glob;
use crate::policy::types::*;
use crate::report::{Evidence, Finding, Status};

/// Severity overrides: the most specific entry (id before category) decides.
pub(super) fn severity(findings: &mut [Finding], p: &Policy, cx: &Context) {
    if p.severity.is_empty() {
        return;
    }
    for f in findings.iter_mut() {
        if !matches!(f.status, Status::Warn | Status::Fail) {
            continue;
        }
        let Some((r, sev)) = p
            .severity
            .iter()
            .filter(|(r, _)| r.matches(&f.id))
            .max_by_key(|(r, _)| r.0.len())
        else {
            continue;
        };
        let new = sev.status();
        if new != f.status {
            f.evidence.push(Evidence {
                source: cx.path.clone(),
                observed: format!("{} made {new} by severity.\"{}\"", f.status, r.0),
                expected: None,
            });
            f.status = new;
        }
    }
}

pub(super) fn waivers(
    findings: &mut [Finding],
    p: &Policy,
    cx: &Context,
    host: Option<&str>,
) -> Vec<Finding> {
    const ID: &str = "policy.waiver";
    let mut used = vec![0usize; p.waivers.len()];
    for f in findings.iter_mut() {
        if !matches!(f.status, Status::Warn | Status::Fail | Status::Error) || f.id == ID {
            continue;
        }
        for (i, w) in p.waivers.iter().enumerate() {
            if cx.today > w.expires || !w.check.matches(&f.id) {
                continue;
            }
            if w.subject
                .as_ref()
                .is_some_and(|s| !glob(s.as_str(), &f.subject))
            {
                continue;
            }
            if !w.hosts.is_empty()
                && !host.is_some_and(|h| w.hosts.iter().any(|p| glob(p.as_str(), h)))
            {
                continue;
            }
            used[i] += 1;
            f.evidence.push(Evidence {
                source: format!("{}: waiver {}", cx.path, i + 1),
                observed: format!("{} waived: {}", f.status, w.reason.as_str()),
                expected: Some(format!("expires {}", w.expires)),
            });
            f.message = format!("waived until {}: {}", w.expires, f.message);
            f.status = Status::Skip;
            break;
        }
    }
    p.waivers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let what = match &w.subject {
                Some(s) => format!("{} on {}", w.check.0, s.as_str()),
                None => w.check.0.clone(),
            };
            let src = format!("{}: waiver {}", cx.path, i + 1);
            if cx.today > w.expires {
                Finding::new(
                    ID,
                    Status::Warn,
                    "node",
                    format!(
                        "the waiver for {what} expired on {}; its findings count again",
                        w.expires
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires >= {}", cx.today))
                .fix("fix what the waiver covered, or renew it with a new reason and expiry date")
            } else if used[i] > 0 {
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "waiver for {what} until {}: {} finding(s) waived ({})",
                        w.expires,
                        used[i],
                        w.reason.as_str()
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires {}", w.expires))
            } else {
                Finding::new(
                    ID,
                    Status::Skip,
                    "node",
                    format!(
                        "waiver for {what} (until {}) matches no finding on this node",
                        w.expires
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires {}", w.expires))
            }
        })
        .collect()
}
