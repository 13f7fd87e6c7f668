//! The human table: one row per finding (status, id, subject, message), then, rustc-style, the
//! evidence and the fix under every finding that is not a pass.
//!
//! Sized for the terminal ([`crate::sys::term::stdout_width`]): the status, check and subject columns
//! are as wide as their longest entry and never wrap; the message wraps at spaces into what is
//! left. Every other line (header, gdr summary, evidence, help) wraps at spaces too, with a
//! hanging indent, so nothing is cut inside a word at 80 columns. Lines stay one column short
//! of the width, so a terminal never wraps them itself.

use super::wrap;
use super::Style;
use colored::Colorize;
use gdrdoctor_checks::report::{Finding, Report, Status};
use std::fmt::Write;

/// Below this many columns for the message, rows are stacked (status, check and subject on one
/// line, the message under them) instead of side by side.
const MIN_MESSAGE: usize = 24;

fn status_cell(s: Status, color: bool) -> String {
    let t = s.as_str().to_uppercase();
    if !color {
        return t;
    }
    match s {
        Status::Pass => t.green().to_string(),
        Status::Warn => t.yellow().bold().to_string(),
        Status::Fail => t.red().bold().to_string(),
        Status::Skip => t.dimmed().to_string(),
        Status::Error => t.magenta().bold().to_string(),
    }
}

/// One table row: the status (colored when asked), the check id, the subject, the message.
struct Row {
    status: Option<Status>,
    id: String,
    subject: String,
    message: String,
}

/// Lay the rows out in `width` columns: ` STATUS  CHECK  SUBJECT  MESSAGE`, two spaces between
/// columns, the message wrapped at spaces into the rest of the line.
fn layout(rows: &[Row], color: bool, width: usize) -> String {
    let max = width.saturating_sub(1);
    let header = Row {
        status: None,
        id: "CHECK".into(),
        subject: "SUBJECT".into(),
        message: "MESSAGE".into(),
    };
    let status_text = |r: &Row| {
        r.status
            .map_or("STATUS".to_string(), |s| s.as_str().to_uppercase())
    };
    let all = || std::iter::once(&header).chain(rows.iter());
    let w0 = all()
        .map(|r| wrap::width(&status_text(r)))
        .max()
        .unwrap_or(6);
    let w1 = all().map(|r| wrap::width(&r.id)).max().unwrap_or(5);
    let w2 = all().map(|r| wrap::width(&r.subject)).max().unwrap_or(7);
    let fixed = 1 + w0 + 2 + w1 + 2 + w2 + 2;
    let stacked = max < fixed + MIN_MESSAGE;
    let mut out = String::new();
    for r in all() {
        let plain = status_text(r);
        let status = match r.status {
            Some(s) => status_cell(s, color),
            None => plain.clone(),
        };
        let pad = |s: &str, w: usize| " ".repeat(w.saturating_sub(wrap::width(s)));
        if stacked {
            let first = format!(" {status}{}  {}  {}", pad(&plain, w0), r.id, r.subject);
            if wrap::width(first.trim_end()) <= max || r.subject.is_empty() {
                let _ = writeln!(out, "{}", first.trim_end());
            } else {
                // A long id and subject do not fit side by side: the subject goes under the id.
                let id_line = format!(" {status}{}  {}", pad(&plain, w0), r.id);
                let _ = writeln!(out, "{}", id_line.trim_end());
                let _ = writeln!(out, "{}{}", " ".repeat(1 + w0 + 2), r.subject);
            }
            out.push_str(&wrap::hanging("     ", 5, 5, &r.message, max));
            continue;
        }
        let first = format!(
            " {status}{}  {}{}  {}{}  ",
            pad(&plain, w0),
            r.id,
            pad(&r.id, w1),
            r.subject,
            pad(&r.subject, w2)
        );
        out.push_str(&wrap::hanging(&first, fixed, fixed, &r.message, max));
    }
    out
}

/// The table for stdout: as wide as the terminal (see [`crate::sys::term::stdout_width`]).
pub fn render(report: &Report, style: &Style) -> String {
    render_width(report, style, crate::sys::term::stdout_width())
}

/// The table laid out for `width` columns.
pub fn render_width(report: &Report, style: &Style, width: usize) -> String {
    // Node strings enter here: escape sequences in them are shown, never obeyed.
    let clean = super::sanitize::report(report);
    let report: &Report = &clean;
    let max = width.saturating_sub(1);
    let mut out = String::new();
    let host = report.host.hostname.as_deref().unwrap_or("?");
    let kernel = report.host.kernel.as_deref().unwrap_or("?");
    let head = format!(
        "gdrdoctor {} · host {host} · kernel {kernel} · source {}",
        report.tool.version, report.host.source
    );
    out.push_str(&wrap::hanging("", 0, 2, &head, max));
    let inv = &report.inventory;
    let drv = match (&inv.driver.nvidia_version, &inv.driver.flavor) {
        (Some(v), Some(f)) => format!("nvidia {v} ({f})"),
        _ => "no nvidia driver".into(),
    };
    let head = format!(
        "{} gpu(s) · {} rdma device(s) · {drv} · iommu {}",
        inv.gpus.len(),
        inv.nics.len(),
        inv.iommu.mode
    );
    out.push_str(&wrap::hanging("", 0, 2, &head, max));
    out.push('\n');
    let rows = rows(report, style.verbose);
    out.push_str(&layout(&rows, style.color, width));
    if !report.gdr.is_empty() {
        gdr_lines(report, style, max, &mut out);
    }
    details(report, style, max, &mut out);
    let s = &report.summary;
    let line = format!(
        "summary: {} pass, {} warn, {} fail, {} skip, {} error · exit code {}",
        s.pass, s.warn, s.fail, s.skip, s.error, s.exit_code
    );
    out.push_str(&wrap::hanging("", 0, 2, &line, max));
    out
}

/// One row per finding; a check whose findings all pass folds into one row (unless -v).
fn rows(report: &Report, verbose: bool) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut ids: Vec<&str> = Vec::new();
    for f in &report.findings {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    for id in ids {
        let fs: Vec<&Finding> = report.findings.iter().filter(|f| f.id == id).collect();
        if !verbose && fs.len() > 1 && fs.iter().all(|f| f.status == Status::Pass) {
            let same = fs.iter().all(|f| f.message == fs[0].message);
            let msg = if same {
                fs[0].message.clone()
            } else {
                format!(
                    "all {} pass, e.g. {}: {}",
                    fs.len(),
                    fs[0].subject,
                    fs[0].message
                )
            };
            rows.push(Row {
                status: Some(Status::Pass),
                id: id.to_string(),
                subject: format!("{} subjects", fs.len()),
                message: msg,
            });
            continue;
        }
        for f in fs {
            rows.push(Row {
                status: Some(f.status),
                id: f.id.clone(),
                subject: f.subject.clone(),
                message: f.message.clone(),
            });
        }
    }
    rows
}

/// The GPUDirect RDMA lines: how many pairs, and per GPU its pairs or why it has none.
fn gdr_lines(report: &Report, style: &Style, max: usize, out: &mut String) {
    out.push('\n');
    let on = report.gdr.iter().filter(|p| p.enabled).count();
    let mut mech: Vec<&str> = report
        .gdr
        .iter()
        .filter_map(|p| p.mechanism.as_deref())
        .collect();
    mech.sort();
    mech.dedup();
    let line = format!(
        "gpudirect rdma: {on} of {} gpu-nic pairs{} (`gdrdoctor topo` shows the matrix)",
        report.gdr.len(),
        if mech.is_empty() {
            String::new()
        } else {
            format!(", via {}", mech.join("/"))
        }
    );
    out.push_str(&wrap::hanging("", 0, 2, &line, max));
    let mut gpus: Vec<&str> = report.gdr.iter().map(|p| p.gpu.as_str()).collect();
    gpus.dedup();
    for g in gpus {
        let pairs: Vec<_> = report.gdr.iter().filter(|p| p.gpu == g).collect();
        let on: Vec<String> = pairs
            .iter()
            .filter(|p| p.enabled)
            .map(|p| format!("{} {}", p.nic, p.path))
            .collect();
        if on.is_empty() {
            let best = pairs
                .iter()
                .min_by_key(|p| gdrdoctor_checks::topo::parse_level(&p.path).unwrap_or(u8::MAX));
            let why = best
                .map(|p| {
                    format!(
                        "nearest {} {}: {}",
                        p.nic,
                        p.path,
                        p.reasons.first().cloned().unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            let first = format!("  {g} -> ");
            let text = wrap::hanging(
                &first,
                wrap::width(&first),
                4,
                &format!("no gdr ({why})"),
                max,
            );
            for line in text.lines() {
                let _ = writeln!(
                    out,
                    "{}",
                    if style.color {
                        line.red().to_string()
                    } else {
                        line.to_string()
                    }
                );
            }
        } else {
            let first = format!("  {g} -> ");
            out.push_str(&wrap::hanging(
                &first,
                wrap::width(&first),
                4,
                &on.join(", "),
                max,
            ));
        }
    }
}

/// The details of every finding that is not a pass or skip (every finding with -v).
fn details(report: &Report, style: &Style, max: usize, out: &mut String) {
    let details: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| {
            style.verbose || matches!(f.status, Status::Warn | Status::Fail | Status::Error)
        })
        .collect();
    if !details.is_empty() {
        out.push('\n');
    }
    for f in details {
        let head = format!("{}[{}]", f.status.as_str(), f.id);
        let head = if style.color {
            match f.status {
                Status::Fail => head.red().bold().to_string(),
                Status::Warn => head.yellow().bold().to_string(),
                Status::Error => head.magenta().bold().to_string(),
                Status::Skip => head.dimmed().to_string(),
                Status::Pass => head.green().to_string(),
            }
        } else {
            head
        };
        let head_w = wrap::width(&format!("{}[{}]: ", f.status.as_str(), f.id));
        out.push_str(&wrap::hanging(
            &format!("{head}: "),
            head_w,
            2,
            &f.message,
            max,
        ));
        out.push_str(&wrap::hanging("  --> ", 6, 6, &f.subject, max));
        for e in &f.evidence {
            let text = match &e.expected {
                Some(x) => format!("{}: {} (expected {x})", e.source, e.observed),
                None => format!("{}: {}", e.source, e.observed),
            };
            out.push_str(&wrap::hanging("   = evidence: ", 15, 15, &text, max));
        }
        if let Some(r) = &f.remediation {
            let label = if style.color {
                "help".cyan().bold().to_string()
            } else {
                "help".into()
            };
            out.push_str(&wrap::hanging(&format!("   = {label}: "), 11, 11, r, max));
        }
        out.push_str(&wrap::hanging(
            "   = explain: ",
            14,
            14,
            &format!("gdrdoctor explain {}", f.id),
            max,
        ));
        out.push('\n');
    }
}
