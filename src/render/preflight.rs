//! `gdrdoctor preflight`'s answer (`gdrdoctor.preflight/v1`) as a table, JSON, JUnit,
//! Prometheus text or one line. The JSON is the contract (docs/schema/); the table is for
//! people: per node one row, the GPUs where NCCL and the node's facts disagree or GDR is off,
//! the slow pairs, the nodes to take out with why, and every finding that did not pass.
//! Node strings (names, NCCL's words) pass through `sanitize` in the text formats.

use crate::sys::escape::{prometheus_label as plabel, xml_attr, xml_text};
use gdrdoctor_checks::preflight::model::{Answer, NodeRow};
use gdrdoctor_checks::report::Status;
use std::fmt::Write;

fn secs(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.0} s", ms / 1000.0)
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

fn node_cell(n: &NodeRow) -> String {
    n.node.clone().unwrap_or_else(|| format!("rank {}", n.rank))
}

fn run_cell(a: &Answer, label: &str, rank: u32) -> String {
    let Some(r) = a.nccl.iter().find(|r| r.label == label) else {
        return "-".into();
    };
    if r.not_run.is_some() {
        return "not run".into();
    }
    match r.nodes.iter().find(|n| n.rank == rank) {
        None => "-".into(),
        Some(n) if n.status == "ok" => match n.allreduce_busbw_gbs {
            Some(b) => format!("ok {}", gdrdoctor_checks::preflight::judge::gbs(b)),
            None => "ok".into(),
        },
        Some(n) => match &n.step {
            Some(s) if n.status != "not-run" => format!("{} ({s})", n.status),
            _ => n.status.clone(),
        },
    }
}

fn gdr_cell(a: &Answer, rank: u32) -> String {
    let rows: Vec<_> = a.rails.iter().filter(|r| r.rank == rank).collect();
    let seen: Vec<_> = rows.iter().filter_map(|r| r.observed.as_ref()).collect();
    if seen.is_empty() {
        return "-".into();
    }
    format!("{}/{}", seen.iter().filter(|o| o.gdr).count(), seen.len())
}

fn pairs_cell(a: &Answer, rank: u32) -> String {
    let mine: Vec<_> = a
        .pairs
        .iter()
        .filter(|p| p.a == rank || p.b == rank)
        .collect();
    if mine.is_empty() {
        return "-".into();
    }
    let bad = mine.iter().filter(|p| p.status != "pass").count();
    let min = mine
        .iter()
        .filter_map(|p| p.busbw_gbs)
        .fold(f64::INFINITY, f64::min);
    let bw = if min.is_finite() {
        format!(" min {}", gdrdoctor_checks::preflight::judge::gbs(min))
    } else {
        String::new()
    };
    if bad == 0 {
        format!("ok{bw}")
    } else {
        format!("{bad}/{} low{bw}", mine.len())
    }
}

/// A table of the answer in `width` columns ([`super::grid`]): every column as wide as its
/// widest cell and the last one wrapped, then narrower arrangements while it does not fit.
fn table_rows(head: &[&str], rows: &[Vec<String>], width: usize) -> String {
    use super::grid::{self, Column, Fit, Grid, Text};
    let n = head.len();
    let g = |last: Fit, others: Fit| {
        Grid::new(
            head.iter()
                .enumerate()
                .map(|(i, h)| Column::new(h, if i + 1 == n { last } else { others }))
                .collect(),
        )
        .indent(2)
    };
    let rows: Vec<Vec<Text>> = rows
        .iter()
        .map(|r| r.iter().map(|c| Text::from(c.as_str())).collect())
        .collect();
    let layouts = [
        g(Fit::Words, Fit::Keep),
        g(Fit::Min(24), Fit::Keep),
        g(Fit::Min(24), Fit::Words),
    ];
    layouts
        .iter()
        .find_map(|l| grid::fit(l, &rows, width))
        .unwrap_or_else(|| grid::best(&layouts[2], &rows, width, 8))
}

/// The table (for people).
pub fn table(a: &Answer, verbose: bool, width: usize) -> String {
    let mut s = String::new();
    let total = a
        .stages
        .iter()
        .find(|x| x.name == "total")
        .map(|x| secs(x.ms))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "gdrdoctor preflight: {} of {} node(s) joined ({}{}), rendezvous {}, {total}",
        a.summary.joined,
        a.summary.nodes,
        a.allocation.engine,
        a.allocation
            .job
            .as_deref()
            .map(|j| format!(" job {j}"))
            .unwrap_or_default(),
        a.allocation.rendezvous
    );
    s.push('\n');
    let rows: Vec<Vec<String>> = a
        .nodes
        .iter()
        .map(|n| {
            let check = match (&n.check, n.state.as_str()) {
                (Some(c), _) if c.exit_code == 1 => format!("fail ({})", n.failing.len()),
                (Some(c), _) if c.exit_code == 3 => "incomplete".into(),
                (Some(_), _) => "pass".into(),
                (None, st) => st.to_string(),
            };
            let drift = if n.drift.is_empty() {
                String::new()
            } else {
                format!(" +{} drift", n.drift.len())
            };
            vec![
                node_cell(n),
                n.rank.to_string(),
                format!("{check}{drift}"),
                if n.gpus > 0 {
                    n.gpus.to_string()
                } else {
                    "-".into()
                },
                run_cell(a, "default", n.rank),
                run_cell(a, "net-only", n.rank),
                gdr_cell(a, n.rank),
                pairs_cell(a, n.rank),
                match n.verdict.as_str() {
                    _ if n.take_out => "TAKE OUT".into(),
                    "shared-failure" => "FAILED (shared)".into(),
                    "not-evaluated" => "NOT EVALUATED".into(),
                    _ => "ok".into(),
                },
            ]
        })
        .collect();
    s.push_str(&table_rows(
        &[
            "NODE", "RANK", "CHECK", "GPUS", "NCCL", "NET-ONLY", "GDRDMA", "PAIRS", "VERDICT",
        ],
        &rows,
        width,
    ));

    // GPUs: every one with -v, else those where GDR is off or NCCL and the facts disagree.
    let shown: Vec<_> = a
        .rails
        .iter()
        .filter(|r| {
            verbose || r.agree == Some(false) || r.observed.as_ref().is_some_and(|o| !o.gdr)
        })
        .collect();
    let good = a
        .rails
        .iter()
        .filter(|r| r.observed.as_ref().is_some_and(|o| o.gdr) && r.agree != Some(false))
        .count();
    if !a.rails.is_empty() {
        let _ = writeln!(
            s,
            "\nGPU x NIC: what the node's facts predict | what NCCL did ({good} of {} GPU(s) used GDRDMA as predicted{})",
            a.rails.len(),
            if verbose || shown.is_empty() { "" } else { "; the others:" }
        );
        if !shown.is_empty() {
            let rows: Vec<Vec<String>> = shown
                .iter()
                .map(|r| {
                    let p = &r.predicted;
                    let pred = format!(
                        "{} {} {}",
                        p.nic.clone().unwrap_or_else(|| "?".into()),
                        p.path.clone().unwrap_or_default(),
                        match p.gdr {
                            Some(true) =>
                                format!("gdr ({})", p.mechanism.clone().unwrap_or_default()),
                            Some(false) => "no gdr".into(),
                            None => "undecided".into(),
                        }
                    );
                    let obs = match &r.observed {
                        Some(o) => format!(
                            "{} {}",
                            o.nic.clone().unwrap_or_else(|| "?".into()),
                            if o.transport.is_empty() {
                                "-".into()
                            } else {
                                o.transport.clone()
                            }
                        ),
                        None => "not observed".into(),
                    };
                    vec![
                        r.node.clone().unwrap_or_else(|| format!("rank {}", r.rank)),
                        r.gpu.to_string(),
                        r.bdf.clone(),
                        pred,
                        obs,
                        match r.agree {
                            Some(true) => "agree".into(),
                            Some(false) => "DISAGREE".into(),
                            None => "-".into(),
                        },
                    ]
                })
                .collect();
            s.push_str(&table_rows(
                &["NODE", "GPU", "BDF", "PREDICTED", "NCCL", ""],
                &rows,
                width,
            ));
        }
    }

    if !a.pairs.is_empty() {
        let rounds = a.pairs.iter().map(|p| p.round).max().map_or(0, |r| r + 1);
        let mut bw: Vec<f64> = a.pairs.iter().filter_map(|p| p.busbw_gbs).collect();
        bw.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
        let med = bw.get(bw.len() / 2).copied();
        let _ = writeln!(
            s,
            "\nPairs: {} rail measurement(s) in {rounds} round(s){}{}",
            a.pairs.len(),
            med.map(|m| format!(", median {}", gdrdoctor_checks::preflight::judge::gbs(m)))
                .unwrap_or_default(),
            if a.thresholds.min_fraction > 0.0 {
                format!(
                    "; threshold {:.0}% of the slower end's links",
                    a.thresholds.min_fraction * 100.0
                )
            } else {
                String::new()
            }
        );
        let bad: Vec<Vec<String>> = a
            .pairs
            .iter()
            .filter(|p| verbose || p.status != "pass")
            .map(|p| {
                vec![
                    p.round.to_string(),
                    format!(
                        "{} <-> {}",
                        p.a_node.clone().unwrap_or_else(|| format!("rank {}", p.a)),
                        p.b_node.clone().unwrap_or_else(|| format!("rank {}", p.b))
                    ),
                    p.rail.to_string(),
                    p.busbw_gbs
                        .map(gdrdoctor_checks::preflight::judge::gbs)
                        .unwrap_or_else(|| "-".into()),
                    p.allowed_gbs
                        .map(|b| format!("{b:.1} GB/s"))
                        .unwrap_or_else(|| "?".into()),
                    p.status.to_uppercase(),
                ]
            })
            .collect();
        if !bad.is_empty() {
            s.push_str(&table_rows(
                &["ROUND", "PAIR", "RAIL", "BUSBW", "LINKS ALLOW", ""],
                &bad,
                width,
            ));
        }
    }

    if !a.take_out.is_empty() {
        let _ = writeln!(s, "\nTake out:");
        for t in &a.take_out {
            let _ = writeln!(
                s,
                "  {} (rank {})",
                t.node.clone().unwrap_or_else(|| "?".into()),
                t.rank
            );
            for r in &t.reasons {
                s.push_str(&super::wrap::hanging("    - ", 6, 6, r, width));
            }
        }
    }

    let notable: Vec<_> = a
        .findings
        .iter()
        .filter(|f| verbose || !matches!(f.status, Status::Pass | Status::Skip))
        .collect();
    if !notable.is_empty() {
        let _ = writeln!(s, "\nFindings:");
        for f in notable {
            let head = format!("  {:<5} {} ", f.status.as_str().to_uppercase(), f.id);
            let w = super::wrap::width(&head);
            s.push_str(&super::wrap::hanging(&head, w, 8, &f.message, width));
        }
    }
    let _ = writeln!(
        s,
        "\n{} pass, {} warn, {} fail, {} skip, {} error; {} node(s) to take out; exit {}",
        a.summary.pass,
        a.summary.warn,
        a.summary.fail,
        a.summary.skip,
        a.summary.error,
        a.summary.take_out,
        a.summary.exit_code
    );
    let stages: Vec<String> = a
        .stages
        .iter()
        .filter(|x| x.name != "total")
        .map(|x| format!("{} {}", x.name, secs(x.ms)))
        .collect();
    if !stages.is_empty() {
        let _ = writeln!(s, "stages: {}", stages.join(", "));
    }
    super::sanitize::lines(&s).into_owned()
}

pub fn json(a: &Answer) -> String {
    let mut s =
        serde_json::to_string_pretty(a).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// One line: `gdrdoctor preflight: FAIL take out gpu-03 (gdr off on 8 GPUs) ...`.
pub fn oneline(a: &Answer) -> String {
    let status = match a.summary.exit_code {
        0 => "OK",
        1 => "FAIL",
        3 => "INCOMPLETE",
        _ => "ERROR",
    };
    let mut s = format!(
        "gdrdoctor preflight: {status} {}/{} nodes",
        a.summary.joined, a.summary.nodes
    );
    if !a.take_out.is_empty() {
        let names: Vec<String> = a
            .take_out
            .iter()
            .map(|t| t.node.clone().unwrap_or_else(|| format!("rank {}", t.rank)))
            .collect();
        let _ = write!(s, "; take out {}", names.join(","));
        if let Some(r) = a.take_out.first().and_then(|t| t.reasons.first()) {
            let _ = write!(s, ": {r}");
        }
    }
    let mut line = super::sanitize::lines(&s).into_owned();
    line = super::oneline::clip(&line, 200);
    line.push('\n');
    line
}

/// JUnit XML: one testsuite per finding id, one testcase per finding (junit-10.xsd rules, as
/// `check`'s JUnit).
pub fn junit(a: &Answer) -> String {
    let fails = |st: Status| a.findings.iter().filter(|f| f.status == st).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"gdrdoctor preflight\" tests=\"{}\" failures=\"{}\" errors=\"{}\">",
        a.findings.len(),
        fails(Status::Fail),
        fails(Status::Error)
    );
    let mut ids: Vec<&str> = Vec::new();
    for f in &a.findings {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    for id in ids {
        let fs: Vec<_> = a.findings.iter().filter(|f| f.id == id).collect();
        let c = |st: Status| fs.iter().filter(|f| f.status == st).count();
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            xml_attr(id),
            fs.len(),
            c(Status::Fail),
            c(Status::Error),
            c(Status::Skip)
        );
        for f in fs {
            let clean_subject = super::sanitize::lines(&f.subject).into_owned();
            let clean_msg = super::sanitize::lines(&f.message).into_owned();
            let _ = write!(
                s,
                "    <testcase name=\"{} [{}]\" classname=\"gdrdoctor.preflight\"",
                xml_attr(id),
                xml_attr(&clean_subject)
            );
            let mut body = String::new();
            for e in &f.evidence {
                let _ = writeln!(
                    body,
                    "evidence: {}: {}{}",
                    e.source,
                    e.observed,
                    e.expected
                        .as_deref()
                        .map(|x| format!(" (expected {x})"))
                        .unwrap_or_default()
                );
            }
            if let Some(r) = &f.remediation {
                let _ = writeln!(body, "help: {r}");
            }
            let body = super::sanitize::lines(&body).into_owned();
            match f.status {
                Status::Pass => {
                    let _ = writeln!(s, "/>");
                }
                Status::Warn => {
                    let _ = writeln!(
                        s,
                        "><system-out>{}</system-out></testcase>",
                        xml_text(&format!("warning: {clean_msg}\n{body}"))
                    );
                }
                Status::Skip => {
                    let _ = writeln!(
                        s,
                        "><skipped message=\"{}\"/></testcase>",
                        xml_attr(&clean_msg)
                    );
                }
                Status::Fail | Status::Error => {
                    let tag = if f.status == Status::Fail {
                        "failure"
                    } else {
                        "error"
                    };
                    let _ = writeln!(
                        s,
                        "><{tag} type=\"{}\" message=\"{}\">{}</{tag}></testcase>",
                        xml_attr(id),
                        xml_attr(&clean_msg),
                        xml_text(&body)
                    );
                }
            }
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

/// Prometheus text: per node whether to take it out and its stage states, per (node, GPU)
/// whether NCCL used GDRDMA, per pair rail the bus bandwidth; bounded by the allocation's size.
pub fn prometheus(a: &Answer) -> String {
    let mut s = String::new();
    let job = plabel(a.allocation.job.as_deref().unwrap_or(""));
    let _ = writeln!(s, "# HELP gdrdoctor_preflight_exit_code The preflight's exit code (0 ok, 1 fail, 3 incomplete).");
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_exit_code gauge");
    let _ = writeln!(
        s,
        "gdrdoctor_preflight_exit_code{{job=\"{job}\"}} {}",
        a.summary.exit_code
    );
    let _ = writeln!(
        s,
        "# HELP gdrdoctor_preflight_nodes Nodes of the allocation, by state."
    );
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_nodes gauge");
    let _ = writeln!(
        s,
        "gdrdoctor_preflight_nodes{{job=\"{job}\",state=\"joined\"}} {}",
        a.summary.joined
    );
    let _ = writeln!(
        s,
        "gdrdoctor_preflight_nodes{{job=\"{job}\",state=\"take_out\"}} {}",
        a.summary.take_out
    );
    let _ = writeln!(
        s,
        "gdrdoctor_preflight_nodes{{job=\"{job}\",state=\"all\"}} {}",
        a.summary.nodes
    );
    let _ = writeln!(s, "# HELP gdrdoctor_preflight_take_out 1 when preflight names the node to take out of the job.");
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_take_out gauge");
    for n in &a.nodes {
        let _ = writeln!(
            s,
            "gdrdoctor_preflight_take_out{{job=\"{job}\",node=\"{}\",rank=\"{}\"}} {}",
            plabel(&node_cell(n)),
            n.rank,
            u8::from(n.take_out)
        );
    }
    let _ = writeln!(s, "# HELP gdrdoctor_preflight_gpu_gdr 1 when NCCL used GDRDMA on the GPU's NIC (network-only run).");
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_gpu_gdr gauge");
    for r in &a.rails {
        if let Some(o) = &r.observed {
            let _ = writeln!(
                s,
                "gdrdoctor_preflight_gpu_gdr{{job=\"{job}\",node=\"{}\",gpu=\"{}\",nic=\"{}\"}} {}",
                plabel(&r.node.clone().unwrap_or_default()),
                r.gpu,
                plabel(o.nic.as_deref().unwrap_or("")),
                u8::from(o.gdr)
            );
        }
    }
    let _ = writeln!(s, "# HELP gdrdoctor_preflight_pair_busbw_bytes Bus bandwidth of one rail of a node pair, bytes per second, one direction.");
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_pair_busbw_bytes gauge");
    for p in &a.pairs {
        if let Some(b) = p.busbw_gbs {
            let _ = writeln!(
                s,
                "gdrdoctor_preflight_pair_busbw_bytes{{job=\"{job}\",a=\"{}\",b=\"{}\",rail=\"{}\"}} {}",
                plabel(&p.a_node.clone().unwrap_or_default()),
                plabel(&p.b_node.clone().unwrap_or_default()),
                p.rail,
                (b * 1e9).round()
            );
        }
    }
    let _ = writeln!(
        s,
        "# HELP gdrdoctor_preflight_findings Findings of the preflight by status."
    );
    let _ = writeln!(s, "# TYPE gdrdoctor_preflight_findings gauge");
    for (st, n) in [
        ("pass", a.summary.pass),
        ("warn", a.summary.warn),
        ("fail", a.summary.fail),
        ("skip", a.summary.skip),
        ("error", a.summary.error),
    ] {
        let _ = writeln!(
            s,
            "gdrdoctor_preflight_findings{{job=\"{job}\",status=\"{st}\"}} {n}"
        );
    }
    s
}
