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
    // One row per finding; a check whose findings all pass folds into one row (unless -v).
    let mut ids: Vec<&str> = Vec::new();
    for f in &report.findings {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    for id in ids {
        let fs: Vec<&Finding> = report.findings.iter().filter(|f| f.id == id).collect();
        if !style.verbose && fs.len() > 1 && fs.iter().all(|f| f.status == Status::Pass) {
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
            t.add_row(vec![
                Cell::new(status_cell(Status::Pass, style.color)),
                Cell::new(id),
                Cell::new(format!("{} subjects", fs.len())),
                Cell::new(msg),
            ]);
            continue;
        }
        for f in fs {
            t.add_row(vec![
                Cell::new(status_cell(f.status, style.color)),
                Cell::new(&f.id),
                Cell::new(&f.subject),
                Cell::new(&f.message),
            ]);
        }
    }
    for line in t.to_string().lines() {
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if !report.gdr.is_empty() {
        out.push('\n');
        let on = report.gdr.iter().filter(|p| p.enabled).count();
        let mut mech: Vec<&str> = report
            .gdr
            .iter()
            .filter_map(|p| p.mechanism.as_deref())
            .collect();
        mech.sort();
        mech.dedup();
        let _ = writeln!(
            out,
            "gpudirect rdma: {on} of {} gpu-nic pairs{} (`gdrdoctor topo` shows the matrix)",
            report.gdr.len(),
            if mech.is_empty() {
                String::new()
            } else {
                format!(", via {}", mech.join("/"))
            }
        );
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
                let best = pairs.iter().min_by_key(|p| {
                    gdrdoctor_checks::topo::parse_level(&p.path).unwrap_or(u8::MAX)
                });
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
                let line = format!("  {g} -> no gdr ({why})");
                let _ = writeln!(
                    out,
                    "{}",
                    if style.color {
                        line.red().to_string()
                    } else {
                        line
                    }
                );
            } else {
                let _ = writeln!(out, "  {g} -> {}", on.join(", "));
            }
        }
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
