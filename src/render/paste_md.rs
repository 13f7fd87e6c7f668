//! Renderers for `gdrdoctor diagnose`: the GPU x NIC view of a pasted matrix (shared by the
//! table output and `topo --nvidia-smi`), and Markdown meant to be pasted back into the issue
//! thread the evidence came from (GitHub-flavoured: tables, `<details>` for the long parts).

use crate::sys::escape::{markdown as md, markdown_cell as esc, markdown_code as code};
use gdrdoctor_checks::paste::report::DiagnoseReport;
use gdrdoctor_checks::paste::verdict::{Gdr, PastePair};
use gdrdoctor_checks::report::{Finding, Status};
use std::fmt::Write;

/// The pairs of one block, as (gpus, nics) in matrix order.
fn axes<'a>(pairs: &[&'a PastePair]) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut gpus: Vec<&str> = Vec::new();
    let mut nics: Vec<&str> = Vec::new();
    for p in pairs {
        if !gpus.contains(&p.gpu.as_str()) {
            gpus.push(&p.gpu);
        }
        if !nics.contains(&p.nic.as_str()) {
            nics.push(&p.nic);
        }
    }
    (gpus, nics)
}

/// One cell: the path, then NCCL's verdict (`*` GDR, `x` GDR with sends through an NVLink peer
/// (PXN), `r` GDR for receives only, `?` undecided), then what NCCL logged (`+` GDRDMA, `-` no
/// GDRDMA).
pub fn cell(p: &PastePair) -> String {
    let mut s = p.nvidia_smi.clone();
    match p.gdr {
        Gdr::On if p.via.is_some() => s.push('x'),
        Gdr::On if p.send == Some(false) => s.push('r'),
        Gdr::On => s.push('*'),
        Gdr::Unknown if p.nvidia_smi != "?" => s.push('?'),
        _ => {}
    }
    match p.logged.as_ref().and_then(|l| l.any()) {
        Some(true) => s.push('+'),
        Some(false) => s.push('-'),
        None => {}
    }
    s
}

/// The legend under a view.
pub fn legend(r: &DiagnoseReport) -> Vec<String> {
    vec![
        format!(
            "* gdr, x gdr with sends through an nvlink peer (pxn), r gdr for receives only, ? nccl's rule allows gdr if what the paste does not show is in place; threshold {} ({})",
            r.gdr_level, r.gdr_level_source
        ),
        "+ NCCL logged GDRDMA, - NCCL logged no GDRDMA; a cell ? is not in the paste".into(),
        format!("Rules: {}", r.nccl_rules),
    ]
}

/// One line per GPU: the verdict and why.
pub fn gpu_line(g: &str, row: &[&PastePair]) -> String {
    let logged_on: Vec<&str> = row
        .iter()
        .filter(|p| p.logged.as_ref().and_then(|l| l.any()) == Some(true))
        .map(|p| p.nic.as_str())
        .collect();
    if !logged_on.is_empty() {
        return format!("{g}: NCCL logged GDRDMA with {}", logged_on.join(" "));
    }
    let on: Vec<&&PastePair> = row.iter().filter(|p| p.gdr == Gdr::On).collect();
    if let Some(first) = on.iter().find(|p| p.via.is_none()).or(on.first()) {
        let names = on
            .iter()
            .map(|p| p.nic.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        return match (&first.via, first.send) {
            (Some(v), _) => format!(
                "{g}: gdr with {names} through {v} via PXN (own path to {} is {}; sends go over NVLink to the peer)",
                first.nic, first.nvidia_smi
            ),
            (None, Some(false)) => format!(
                "{g}: gdr for receives only with {names}: {}",
                first.reasons.first().cloned().unwrap_or_default()
            ),
            _ => format!("{g}: gdr on with {names}"),
        };
    }
    let best = row
        .iter()
        .filter(|p| p.path != "?")
        .min_by_key(|p| match p.path.as_str() {
            "PIX" => 0,
            "PXB" => 1,
            "PHB" => 2,
            _ => 3,
        });
    if row.iter().all(|p| p.gdr == Gdr::Off) {
        return format!(
            "{g}: no gdr (nearest {} {}: {})",
            best.map(|b| b.nic.as_str()).unwrap_or("?"),
            best.map(|b| b.nvidia_smi.as_str()).unwrap_or("?"),
            best.and_then(|b| b.reasons.first().cloned())
                .unwrap_or_default()
        );
    }
    let open: Vec<&&PastePair> = row.iter().filter(|p| p.gdr == Gdr::Unknown).collect();
    if open.iter().all(|p| p.nvidia_smi == "?") {
        return format!("{g}: cannot tell: its matrix row is incomplete");
    }
    format!(
        "{g}: nccl's rule allows gdr with {}; the rest is not in the paste",
        open.iter()
            .filter(|p| p.nvidia_smi != "?")
            .map(|p| p.nic.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// What the paste lacks for the verdicts, once for all pairs.
pub fn unknowns(pairs: &[&PastePair]) -> Vec<String> {
    let mut unk: Vec<String> = pairs
        .iter()
        .filter(|p| p.gdr == Gdr::Unknown)
        .flat_map(|p| p.unknown.clone())
        .filter(|u| !u.contains("the matrix cell is not in the paste"))
        .map(|u| {
            // "cannot tell whether NCCL sends through GPU3 (PXN): ... that is unknown: <facts>":
            // the facts are listed on their own; say once what hangs on them.
            if u.contains("takes a PXN peer only with GDR to the NIC") {
                "pxn: whether NCCL sends through an NVLink peer: it takes a peer only with GDR to the NIC, which needs the facts above".to_string()
            } else {
                u
            }
        })
        .collect();
    unk.sort_by_key(|u| (u.starts_with("pxn:"), u.clone()));
    unk.dedup();
    unk
}

/// The GPU x NIC view of every block with pairs.
pub fn gdr_view(r: &DiagnoseReport, width: usize) -> String {
    use super::grid::{self, Column, Fit, Grid, Text};
    use super::wrap::hanging;
    let max = width.saturating_sub(1);
    let mut o = String::new();
    let mut blocks: Vec<&str> = r.gdr.iter().map(|p| p.block.as_str()).collect();
    blocks.dedup();
    for blk in blocks {
        let mine: Vec<&PastePair> = r.gdr.iter().filter(|p| p.block == blk).collect();
        let (gpus, nics) = axes(&mine);
        let label = r
            .blocks
            .iter()
            .find(|b| b.id == blk)
            .map(|b| b.label())
            .unwrap_or_else(|| blk.to_string());
        o.push_str(&hanging("", 0, 2, &format!("gpu x nic from {label}:"), max));
        let mut columns = vec![Column::new("", Fit::Keep)];
        columns.extend(nics.iter().map(|n| Column::new(n, Fit::Keep)));
        let rows: Vec<Vec<Text>> = gpus
            .iter()
            .map(|g| {
                let mut row: Vec<Text> = vec![(*g).into()];
                row.extend(nics.iter().map(|n| {
                    Text::from(
                        mine.iter()
                            .find(|p| p.gpu == *g && p.nic == *n)
                            .map(|p| cell(p))
                            .unwrap_or_else(|| "?".into()),
                    )
                }));
                row
            })
            .collect();
        o.push_str(&grid::force(&Grid::new(columns).indent(0), &rows, width));
        for l in legend(r) {
            o.push_str(&hanging("", 0, 2, &l, max));
        }
        for n in &r.gdr_notes {
            o.push_str(&hanging("", 0, 2, &format!("Note: {n}"), max));
        }
        for g in &gpus {
            let row: Vec<&PastePair> = mine.iter().copied().filter(|p| p.gpu == *g).collect();
            o.push_str(&hanging("  ", 2, 4, &gpu_line(g, &row), max));
        }
        let unk = unknowns(&mine);
        if !unk.is_empty() {
            o.push_str("not in the paste:\n");
            for u in unk {
                o.push_str(&hanging("  ", 2, 4, &u, max));
            }
        }
        o.push('\n');
    }
    o.lines().map(|l| format!("{}\n", l.trim_end())).collect()
}

fn icon(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Warn => "**warn**",
        Status::Fail => "**FAIL**",
        Status::Skip => "skip",
        Status::Error => "*error*",
    }
}

fn finding_row(f: &Finding) -> String {
    format!(
        "| {} | {} | {} | {} |\n",
        icon(f.status),
        code(&f.id),
        esc(&f.subject),
        esc(&f.message)
    )
}

/// Markdown for an issue thread.
pub fn render(r: &DiagnoseReport) -> String {
    let mut o = String::new();
    let s = &r.summary;
    let _ = writeln!(o, "### gdrdoctor diagnose\n");
    let _ = writeln!(
        o,
        "{} fail, {} warn, {} error, {} pass, {} skip (exit code {}) from {} pasted block(s) in {}. gdrdoctor {}.\n",
        s.fail,
        s.warn,
        s.error,
        s.pass,
        s.skip,
        s.exit_code,
        r.blocks
            .iter()
            .filter(|b| b.status != gdrdoctor_checks::paste::BlockStatus::Ignored)
            .count(),
        r.inputs
            .iter()
            .map(|i| code(&i.name))
            .collect::<Vec<_>>()
            .join(", "),
        r.tool.version
    );
    let bad: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| matches!(f.status, Status::Fail | Status::Warn | Status::Error))
        .collect();
    if !bad.is_empty() {
        let _ = writeln!(o, "#### What is wrong\n");
        for f in &bad {
            let _ = writeln!(
                o,
                "- {} {} ({}): {}",
                icon(f.status),
                code(&f.id),
                esc(&f.subject),
                md(&f.message)
            );
            for e in f.evidence.iter().take(4) {
                let _ = writeln!(o, "  - evidence: {}: {}", md(&e.source), code(&e.observed));
            }
            if let Some(x) = &f.remediation {
                let _ = writeln!(o, "  - fix: {}", md(x));
            }
            let _ = writeln!(o, "  - more: `gdrdoctor explain {}`", f.id);
        }
        o.push('\n');
    }
    if !r.gdr.is_empty() {
        let _ = writeln!(o, "#### GPUDirect RDMA per GPU x NIC\n");
        let mut blocks: Vec<&str> = r.gdr.iter().map(|p| p.block.as_str()).collect();
        blocks.dedup();
        for blk in blocks {
            let mine: Vec<&PastePair> = r.gdr.iter().filter(|p| p.block == blk).collect();
            let (gpus, nics) = axes(&mine);
            let _ = writeln!(o, "From block {}:\n", code(blk));
            let _ = writeln!(
                o,
                "| | {} |",
                nics.iter().map(|n| esc(n)).collect::<Vec<_>>().join(" | ")
            );
            let _ = writeln!(o, "|---|{}", "---|".repeat(nics.len()));
            for g in &gpus {
                let cells: Vec<String> = nics
                    .iter()
                    .map(|n| {
                        mine.iter()
                            .find(|p| p.gpu == *g && p.nic == *n)
                            .map(|p| esc(&cell(p)))
                            .unwrap_or_else(|| "?".into())
                    })
                    .collect();
                let _ = writeln!(o, "| {} | {} |", esc(g), cells.join(" | "));
            }
            let _ = writeln!(o);
            for l in legend(r) {
                // Markdown reads a leading `*`, `+` or `-` as a list item.
                let l = l
                    .replacen("* gdr,", "`*` gdr,", 1)
                    .replacen(", x gdr", ", `x` gdr", 1)
                    .replacen(", r gdr", ", `r` gdr", 1)
                    .replacen(", ? nccl", ", `?` nccl", 1)
                    .replacen("+ NCCL", "`+` NCCL", 1)
                    .replacen(", - NCCL", ", `-` NCCL", 1)
                    .replacen("cell ? is", "cell `?` is", 1);
                let _ = writeln!(o, "{l}  ");
            }
            for n in &r.gdr_notes {
                let _ = writeln!(o, "Note: {}  ", md(n));
            }
            let _ = writeln!(o);
            for g in &gpus {
                let row: Vec<&PastePair> = mine.iter().copied().filter(|p| p.gpu == *g).collect();
                let _ = writeln!(o, "- {}", md(&gpu_line(g, &row)));
            }
            let unk = unknowns(&mine);
            if !unk.is_empty() {
                let _ = writeln!(o, "\nNot in the paste:");
                for u in unk {
                    let _ = writeln!(o, "- {}", md(&u));
                }
            }
            o.push('\n');
        }
    }
    let job = super::diagnose_job::render(r);
    if !job.is_empty() {
        // A fenced block: the columns line up, and no cell is read as Markdown.
        let _ = writeln!(
            o,
            "#### The NCCL job\n\n```text\n{}```\n",
            job.replace("```", "` ` `")
        );
    }
    let _ = writeln!(o, "<details><summary>Every finding</summary>\n");
    let _ = writeln!(
        o,
        "| status | check | subject | message |\n|---|---|---|---|"
    );
    for f in &r.findings {
        o.push_str(&finding_row(f));
    }
    let _ = writeln!(o, "\n</details>\n");
    let _ = writeln!(
        o,
        "<details><summary>What was read from the paste</summary>\n"
    );
    let _ = writeln!(
        o,
        "| block | what | lines | read | notes |\n|---|---|---|---|---|"
    );
    for b in &r.blocks {
        let notes: Vec<String> = b
            .repairs
            .iter()
            .map(|x| format!("repaired: {x}"))
            .chain(b.problems.iter().map(|x| format!("not trusted: {x}")))
            .collect();
        let _ = writeln!(
            o,
            "| {} | {} | {}:{}-{} | {} | {} |",
            esc(&b.id),
            esc(b.kind.as_str()),
            esc(&b.file),
            b.lines[0],
            b.lines[1],
            serde_json::to_value(b.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            esc(&if notes.is_empty() {
                b.summary.clone()
            } else {
                format!("{}; {}", b.summary, notes.join("; "))
            })
        );
    }
    let _ = writeln!(o, "\n</details>");
    o
}
