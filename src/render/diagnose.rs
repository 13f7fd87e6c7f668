//! `gdrdoctor diagnose`'s table: what was read, the findings (the shared table renderer), the
//! GPU x NIC view.

use super::{paste_md, sanitize, table, Style};
use gdrdoctor_checks::paste::{self, report::DiagnoseReport};

/// The table: what was read, the findings (the shared table renderer), the GPU x NIC view.
pub fn render(r: &DiagnoseReport, style: &Style) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "gdrdoctor {} · diagnose · {} · source evidence\n",
        r.tool.version,
        sanitize::text(
            &r.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    ));
    for b in r
        .blocks
        .iter()
        .filter(|b| b.status != paste::BlockStatus::Ignored)
    {
        // The paste's cleaner drops escapes and control characters; bidi overrides and the
        // file name still pass through the one sanitiser.
        o.push_str(&format!(
            "  {} {:<28} {}:{}-{}  {}\n",
            b.id,
            b.kind.as_str(),
            sanitize::text(&b.file),
            b.lines[0],
            b.lines[1],
            sanitize::text(&b.summary)
        ));
    }
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
    let table = table::render(&rep, style);
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
        o.push_str(&format!(
            "\n{folded} check(s) skipped: their input is not in the paste (`-v` lists them). To complete the picture, paste:\n"
        ));
        for c in &pastable {
            o.push_str(&format!("  {c}\n"));
        }
        if !live.is_empty() {
            o.push_str("and for the live facts no paste shows, run on the node:\n");
            for c in &live {
                o.push_str(&format!("  {c}\n"));
            }
        }
    }
    if !r.gdr.is_empty() {
        o.push('\n');
        o.push_str(&sanitize::lines(&paste_md::gdr_view(r)));
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
