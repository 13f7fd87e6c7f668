//! `gdrdoctor diagnose`'s table: what was read, the findings (the shared table renderer), the
//! GPU x NIC view.

use super::grid::{self, Column, Fit, Grid, Text};
use super::{paste_md, sanitize, table, wrap, Style};
use gdrdoctor_checks::paste::{self, report::DiagnoseReport};

/// The table in `width` columns: what was read, the findings (the shared table renderer), the
/// GPU x NIC view.
pub fn render(r: &DiagnoseReport, style: &Style, width: usize) -> String {
    let max = width.saturating_sub(1);
    let mut o = String::new();
    o.push_str(&wrap::hanging(
        "",
        0,
        2,
        &format!(
            "gdrdoctor {} · diagnose · {} · source evidence",
            r.tool.version,
            sanitize::text(
                &r.inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        ),
        max,
    ));
    // The blocks read: id, kind, where, what.
    let blocks: Vec<Vec<Text>> = r
        .blocks
        .iter()
        .filter(|b| b.status != paste::BlockStatus::Ignored)
        .map(|b| {
            // The paste's cleaner drops escapes and control characters; bidi overrides and the
            // file name still pass through the one sanitiser.
            vec![
                b.id.as_str().into(),
                b.kind.as_str().into(),
                format!("{}:{}-{}", sanitize::text(&b.file), b.lines[0], b.lines[1]).into(),
                sanitize::text(&b.summary).into_owned().into(),
            ]
        })
        .collect();
    let blocks_grid = |place, summary| {
        Grid::new(vec![
            Column::new("", Fit::Keep),
            Column::new("", Fit::Keep),
            Column::new("", place),
            Column::new("", summary),
        ])
        .without_header()
        .indent(2)
    };
    o.push_str(&grid::first_fit(
        &[
            blocks_grid(Fit::Keep, Fit::Words),
            blocks_grid(Fit::Words, Fit::Min(table::MIN_MESSAGE)),
            blocks_grid(Fit::Min(12), Fit::Min(table::MIN_MESSAGE)),
        ],
        &blocks,
        width,
    ));
    o.push('\n');
    // Checks whose input is not in the paste fold into one line with the commands to run.
    let missing = |f: &gdrdoctor_checks::report::Finding| {
        f.status == gdrdoctor_checks::report::Status::Skip
            && (f.message.contains("not in the pasted text")
                || f.message.contains("does not show it"))
    };
    let mut rep = r.as_report();
    let mut commands: Vec<String> = Vec::new();
    let mut folded = 0;
    if !style.verbose {
        for f in rep.findings.iter().filter(|f| missing(f)) {
            folded += 1;
            if let Some(c) = f
                .message
                .split_once("run `")
                .and_then(|(_, c)| c.split_once('`'))
            {
                if !commands.contains(&c.0.to_string()) {
                    commands.push(c.0.to_string());
                }
            }
        }
        rep.findings.retain(|f| !missing(f));
    }
    let table = table::render_width(&rep, style, width);
    // The shared renderer starts with the host and inventory lines of a live node: skip them.
    let body: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.trim().is_empty())
        .skip(1)
        .collect();
    let (head, tail): (Vec<&str>, Vec<&str>) = {
        let split = body
            .iter()
            .position(|l| l.trim().is_empty() || l.starts_with("summary:"))
            .unwrap_or(body.len());
        (body[..split].to_vec(), body[split..].to_vec())
    };
    for l in head {
        o.push_str(l);
        o.push('\n');
    }
    if folded > 0 {
        let (live, pastable): (Vec<&String>, Vec<&String>) =
            commands.iter().partition(|c| c.starts_with("gdrdoctor"));
        o.push('\n');
        o.push_str(&wrap::hanging(
            "",
            0,
            2,
            &format!(
                "{folded} check(s) skipped: their input is not in the paste (`-v` lists them). To complete the picture, paste:"
            ),
            max,
        ));
        for c in &pastable {
            o.push_str(&wrap::hanging("  ", 2, 4, c, max));
        }
        if !live.is_empty() {
            o.push_str("and for the live facts no paste shows, run on the node:\n");
            for c in &live {
                o.push_str(&wrap::hanging("  ", 2, 4, c, max));
            }
        }
    }
    if !r.gdr.is_empty() {
        o.push('\n');
        o.push_str(&sanitize::lines(&paste_md::gdr_view(r, width)));
    }
    let job = super::diagnose_job::render(r);
    if !job.is_empty() {
        o.push('\n');
        o.push_str(&job);
    }
    for l in tail {
        o.push_str(l);
        o.push('\n');
    }
    o
}
