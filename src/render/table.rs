//! The human table: one row per finding (status, id, subject, message), then, rustc-style, the
//! evidence and the fix under every finding that is not a pass.

use super::Style;
use colored::Colorize;
use comfy_table::{presets, Cell, ContentArrangement, Table};
use gdrdoctor_checks::report::{Finding, Report, Status};
use std::fmt::Write;

fn status_cell(s: Status, color: bool) -> String {
    let t = format!("{:<5}", s.as_str().to_uppercase());
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

fn width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|w| *w >= 60)
        .unwrap_or(120)
}

pub fn render(report: &Report, style: &Style) -> String {
    let mut out = String::new();
    let host = report.host.hostname.as_deref().unwrap_or("?");
    let kernel = report.host.kernel.as_deref().unwrap_or("?");
    let _ = writeln!(
        out,
        "gdrdoctor {} · host {host} · kernel {kernel} · source {}",
        report.tool.version, report.host.source
    );
    let inv = &report.inventory;
    let drv = match (&inv.driver.nvidia_version, &inv.driver.flavor) {
        (Some(v), Some(f)) => format!("nvidia {v} ({f})"),
        _ => "no nvidia driver".into(),
    };
    let _ = writeln!(
        out,
        "{} gpu(s) · {} rdma device(s) · {drv} · iommu {}\n",
        inv.gpus.len(),
        inv.nics.len(),
        inv.iommu.mode
    );
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.force_no_tty();
    if style.color {
        t.enforce_styling();
    }
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_width(width());
    t.set_header(vec!["STATUS", "CHECK", "SUBJECT", "MESSAGE"]);
    for f in &report.findings {
        t.add_row(vec![
            Cell::new(status_cell(f.status, style.color)),
            Cell::new(&f.id),
            Cell::new(&f.subject),
            Cell::new(&f.message),
        ]);
    }
    for line in t.to_string().lines() {
        let _ = writeln!(out, "{}", line.trim_end());
    }
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
        let _ = writeln!(out, "{head}: {}", f.message);
        let _ = writeln!(out, "  --> {}", f.subject);
        for e in &f.evidence {
            match &e.expected {
                Some(x) => {
                    let _ = writeln!(
                        out,
                        "   = evidence: {}: {} (expected {x})",
                        e.source, e.observed
                    );
                }
                None => {
                    let _ = writeln!(out, "   = evidence: {}: {}", e.source, e.observed);
                }
            }
        }
        if let Some(r) = &f.remediation {
            let label = if style.color {
                "help".cyan().bold().to_string()
            } else {
                "help".into()
            };
            let _ = writeln!(out, "   = {label}: {r}");
        }
        let _ = writeln!(out, "   = explain: gdrdoctor explain {}\n", f.id);
    }
    let s = &report.summary;
    let _ = writeln!(
        out,
        "summary: {} pass, {} warn, {} fail, {} skip, {} error · exit code {}",
        s.pass, s.warn, s.fail, s.skip, s.error, s.exit_code
    );
    out
}
