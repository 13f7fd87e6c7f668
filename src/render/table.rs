//! The human table: one row per finding (status, id, subject, message), then, rustc-style, the
//! evidence and the fix under every finding that is not a pass.
//!
//! The rows are a [`super::grid`] table (comfy-table) at the width asked for: the terminal's
//! ([`crate::sys::term::stdout_width`]) or a fixed one for a pipe or a file. The status and
//! check columns never wrap; the subject keeps its width and the message wraps at spaces into
//! what is left, cutting no word when there is room for its longest one. Narrower, the subject
//! wraps too; narrower still (below [`MIN_MESSAGE`] columns for the message) each row is stacked:
//! the status, then the check and subject with the message under them. The other lines (header,
//! gdr summary, evidence, help) are prose, wrapped at spaces with a hanging indent
//! ([`super::wrap`]).

use super::fold;
use super::grid::{self, Column, Fit, Grid, Paint, Text};
use super::wrap;
use super::Style;
use anstyle::{AnsiColor, Style as Ansi};
use gdrdoctor_checks::report::{Finding, Report, Status};

/// Below this many columns for the message, rows are stacked (the check, the subject and the
/// message in one column beside the status) instead of side by side.
pub const MIN_MESSAGE: usize = 24;

/// The status as a painted cell.
fn status_cell(s: Status) -> Text {
    let t = s.as_str().to_uppercase();
    match s {
        Status::Pass => Text::painted(t, Paint::Green, false),
        Status::Warn => Text::painted(t, Paint::Yellow, true),
        Status::Fail => Text::painted(t, Paint::Red, true),
        Status::Skip => Text::painted(t, Paint::Dim, false),
        Status::Error => Text::painted(t, Paint::Magenta, true),
    }
}

/// One table row: the status, the check id, the subject, the message.
struct Row {
    status: Status,
    id: String,
    subject: String,
    message: String,
}

/// The findings in `width` columns: side by side (` STATUS  CHECK  SUBJECT  MESSAGE`) when the
/// message keeps [`MIN_MESSAGE`] columns, else stacked.
fn layout(rows: &[Row], color: bool, width: usize) -> String {
    let side: Vec<Vec<Text>> = rows
        .iter()
        .map(|r| {
            vec![
                status_cell(r.status),
                r.id.as_str().into(),
                r.subject.as_str().into(),
                r.message.as_str().into(),
            ]
        })
        .collect();
    // Widest first: whole words in the message, then the message cut only where a word is
    // wider than it, then the subject wrapped as well.
    let side_by_side = |subject, message| {
        Grid::new(vec![
            Column::new("STATUS", Fit::Keep),
            Column::new("CHECK", Fit::Keep),
            Column::new("SUBJECT", subject),
            Column::new("MESSAGE", message),
        ])
        .color(color)
    };
    let layouts = [
        side_by_side(Fit::Keep, Fit::Words),
        side_by_side(Fit::Keep, Fit::Min(MIN_MESSAGE)),
        side_by_side(Fit::Words, Fit::Min(MIN_MESSAGE)),
    ];
    if let Some(t) = layouts.iter().find_map(|g| grid::fit(g, &side, width)) {
        return t;
    }
    let stacked: Vec<Vec<Text>> = rows
        .iter()
        .map(|r| {
            vec![
                status_cell(r.status),
                format!("{}  {}\n{}", r.id, r.subject, r.message).into(),
            ]
        })
        .collect();
    let g = Grid::new(vec![
        Column::new("STATUS", Fit::Keep),
        Column::new("CHECK  SUBJECT", Fit::Min(MIN_MESSAGE)),
    ])
    .color(color);
    grid::force(&g, &stacked, width)
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
        gdr_lines(report, style, width, &mut out);
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

/// One row per finding; a check whose findings all pass folds into one row, and so do its
/// findings that are alike but for the device they name ([`super::fold`]); not with -v.
fn rows(report: &Report, verbose: bool) -> Vec<Row> {
    let masker = fold::Masker::new(report);
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
                status: Status::Pass,
                id: id.to_string(),
                subject: format!("{} subjects", fs.len()),
                message: msg,
            });
            continue;
        }
        let groups = if verbose {
            fs.iter().map(|f| vec![*f]).collect()
        } else {
            fold::findings(&fs, &masker)
        };
        for g in groups {
            let f = g[0];
            let (subject, message) = match g.len() {
                1 => (f.subject.clone(), f.message.clone()),
                n if g.iter().all(|x| x.message == f.message) => {
                    (format!("{n} subjects"), f.message.clone())
                }
                n => (
                    format!("{n} subjects"),
                    format!(
                        "{n} {} alike, e.g. {}: {}",
                        f.status.as_str(),
                        f.subject,
                        f.message
                    ),
                ),
            };
            rows.push(Row {
                status: f.status,
                id: f.id.clone(),
                subject,
                message,
            });
        }
    }
    if verbose {
        rows
    } else {
        skips_alike(rows)
    }
}

/// Skipped checks that give the same subject and the same reason are one row, at the place of
/// the first: `4 checks` with the message `roce.gid, roce.netdev, roce.mtu, roce.qos: <reason>`.
/// A node without GPUs skips a score of checks for one reason; said once, the rows that judge
/// something stay on the first screen. Every id stays in the row (`explain` takes it); `-v`
/// gives one row per check.
fn skips_alike(rows: Vec<Row>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    // For each row of `out` that is a skip, the ids folded into it.
    let mut ids: Vec<Vec<String>> = Vec::with_capacity(rows.len());
    for r in rows {
        if r.status == Status::Skip {
            let same = out.iter().position(|o| {
                o.status == Status::Skip && o.subject == r.subject && o.message == r.message
            });
            if let Some(i) = same {
                ids[i].push(r.id);
                continue;
            }
        }
        ids.push(vec![r.id.clone()]);
        out.push(r);
    }
    for (row, ids) in out.iter_mut().zip(ids) {
        if ids.len() > 1 {
            row.message = format!("{}: {}", ids.join(", "), row.message);
            row.id = format!("{} checks", ids.len());
        }
    }
    out
}

/// The GPUDirect RDMA lines: how many pairs, then a table of each GPU and its pairs or why it
/// has none.
fn gdr_lines(report: &Report, style: &Style, width: usize, out: &mut String) {
    let max = width.saturating_sub(1);
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
    let masker = fold::Masker::new(report);
    // A reason already given for another GPU (alike but for the devices it names) is not
    // written again: `as for <gpu>`.
    let mut said: Vec<(String, &str)> = Vec::new();
    let mut rows: Vec<Vec<Text>> = Vec::new();
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
                    let reason = p.reasons.first().cloned().unwrap_or_default();
                    let key = format!("{}: {}", p.path, masker.mask(&reason));
                    let short = match said.iter().find(|(k, _)| *k == key) {
                        Some((_, first)) if !style.verbose => format!("as for {first}"),
                        _ => {
                            said.push((key, g));
                            reason
                        }
                    };
                    format!("nearest {} {}: {short}", p.nic, p.path)
                })
                .unwrap_or_default();
            rows.push(vec![
                Text::painted(g, Paint::Red, false),
                Text::painted("->", Paint::Red, false),
                Text::painted(format!("no gdr ({why})"), Paint::Red, false),
            ]);
        } else {
            rows.push(vec![g.into(), "->".into(), on.join(", ").into()]);
        }
    }
    let grid_of = |fit| {
        Grid::new(vec![
            Column::new("GPU", Fit::Keep),
            Column::new("", Fit::Keep),
            Column::new("NICS", fit),
        ])
        .without_header()
        .indent(2)
        .gap(1)
        .color(style.color)
    };
    out.push_str(&grid::first_fit(
        &[grid_of(Fit::Words), grid_of(Fit::Min(MIN_MESSAGE))],
        &rows,
        width,
    ));
}

/// The details of every finding that is not a pass or skip (every finding with -v). Findings
/// alike but for the device they name are one block naming every subject, with the first's
/// evidence (its own alike lines folded the same way); not with -v.
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
    let masker = fold::Masker::new(report);
    let groups = if style.verbose {
        details.iter().map(|f| vec![*f]).collect()
    } else {
        fold::findings(&details, &masker)
    };
    for g in groups {
        let f = g[0];
        let head = format!("{}[{}]", f.status.as_str(), f.id);
        let head = if style.color {
            let ansi = match f.status {
                Status::Fail => AnsiColor::Red.on_default().bold(),
                Status::Warn => AnsiColor::Yellow.on_default().bold(),
                Status::Error => AnsiColor::Magenta.on_default().bold(),
                Status::Skip => Ansi::new().dimmed(),
                Status::Pass => AnsiColor::Green.on_default(),
            };
            super::paint(&head, ansi)
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
        let subject = if g.len() == 1 {
            f.subject.clone()
        } else {
            let others: Vec<&str> = g[1..].iter().map(|x| x.subject.as_str()).collect();
            format!(
                "{} and {} more alike: {} (`-v` shows each)",
                f.subject,
                others.len(),
                others.join(", ")
            )
        };
        out.push_str(&wrap::hanging("  --> ", 6, 6, &subject, max));
        // Evidence lines alike but for the device in their source fold into one; lines of one
        // source (whose device is only in the value) stay apart.
        let evidence: Vec<Vec<&gdrdoctor_checks::report::Evidence>> = if style.verbose {
            f.evidence.iter().map(|e| vec![e]).collect()
        } else {
            fold::evidence(&f.evidence, &masker)
                .into_iter()
                .flat_map(|eg| {
                    if eg.iter().all(|x| x.source == eg[0].source) && eg.len() > 1 {
                        eg.into_iter().map(|e| vec![e]).collect::<Vec<_>>()
                    } else {
                        vec![eg]
                    }
                })
                .collect()
        };
        for eg in evidence {
            let e = eg[0];
            let mut text = match &e.expected {
                Some(x) => format!("{}: {} (expected {x})", e.source, e.observed),
                None => format!("{}: {}", e.source, e.observed),
            };
            if eg.len() > 1 {
                let others: Vec<&str> = eg[1..].iter().map(|x| x.source.as_str()).collect();
                text.push_str(&format!(
                    "; alike: {} ({} more)",
                    others.join(", "),
                    others.len()
                ));
            }
            out.push_str(&wrap::hanging("   = evidence: ", 15, 15, &text, max));
        }
        if f.remediation.is_some() {
            let label = if style.color {
                super::paint("help", AnsiColor::Cyan.on_default().bold())
            } else {
                "help".into()
            };
            // Folded findings whose fixes name their own devices (one `setpci` per bridge):
            // every distinct fix, each with the subjects it is for, so none is lost.
            let mut fixes: Vec<(&str, Vec<&str>)> = Vec::new();
            for x in &g {
                let Some(r) = x.remediation.as_deref() else {
                    continue;
                };
                match fixes.iter_mut().find(|(t, _)| *t == r) {
                    Some((_, subjects)) => subjects.push(&x.subject),
                    None => fixes.push((r, vec![&x.subject])),
                }
            }
            let one = fixes.len() == 1 && g.iter().all(|x| x.remediation.is_some());
            for (r, subjects) in fixes {
                let text = if one {
                    r.to_string()
                } else {
                    format!("for {}: {r}", subjects.join(", "))
                };
                out.push_str(&wrap::hanging(
                    &format!("   = {label}: "),
                    11,
                    11,
                    &text,
                    max,
                ));
            }
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
