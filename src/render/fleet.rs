//! The roll-up as a table (people), JSON (`gdrdoctor.fleet/v1`) and Prometheus text.

use super::grid::{self, Column, Fit, Grid, Text};
use super::wrap;
use crate::collect::fleet::rollup::Rollup;
use crate::sys::escape::prometheus_label as esc;
use std::fmt::Write;

/// Text from the reports (node names, field names, values, messages) as one line: a line
/// break in a report's field name would otherwise start a row of its own.
fn t(s: &str) -> String {
    crate::sys::escape::text(s).into_owned()
}

fn names(list: &[String], max: usize) -> String {
    let list: Vec<String> = list.iter().map(|n| t(n)).collect();
    if list.len() <= max {
        list.join(" ")
    } else {
        format!("{} +{} more", list[..max].join(" "), list.len() - max)
    }
}

fn clip(s: &str, max: usize) -> String {
    let s = t(s);
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let k: String = s.chars().take(max.saturating_sub(3)).collect();
        format!("{k}...")
    }
}

/// The roll-up for people, in `width` columns: the nodes' outcome, a table of checks x
/// statuses with the nodes not passing, the drift, the odd nodes out, the unreadable inputs.
pub fn table(r: &Rollup, max_names: usize, width: usize) -> String {
    let max = width.saturating_sub(1);
    let say = |o: &mut String, text: &str| o.push_str(&wrap::hanging("", 0, 2, text, max));
    let s = &r.summary;
    let mut o = String::new();
    let mut head = format!(
        "gdrdoctor fleet · {} node(s) from {} report(s)",
        s.nodes, s.reports
    );
    if s.unreadable > 0 {
        let _ = write!(head, " · {} unreadable", s.unreadable);
    }
    if let (Some(a), Some(b)) = (&s.oldest, &s.newest) {
        let _ = write!(head, " · {a} .. {b}");
    }
    say(&mut o, &head);
    say(
        &mut o,
        &format!(
            "nodes: {} ok · {} failed · {} incomplete{}",
            s.ok,
            s.failed,
            s.incomplete,
            if s.other > 0 {
                format!(" · {} other exit codes", s.other)
            } else {
                String::new()
            }
        ),
    );

    if !r.checks.is_empty() {
        let mut rows: Vec<Vec<Text>> = Vec::new();
        for c in &r.checks {
            let mut who = Vec::new();
            for st in ["fail", "error", "warn"] {
                let list: Vec<String> = c
                    .not_passing
                    .iter()
                    .filter(|n| n.status.as_str() == st)
                    .map(|n| {
                        let subj: Vec<&str> = n
                            .subjects
                            .iter()
                            .map(String::as_str)
                            .filter(|s| *s != "node")
                            .collect();
                        if subj.is_empty() {
                            n.node.clone()
                        } else {
                            format!("{} ({})", n.node, clip(&subj.join(" "), 40))
                        }
                    })
                    .collect();
                if !list.is_empty() {
                    who.push(format!("{st}: {}", names(&list, max_names)));
                }
            }
            rows.push(vec![
                t(&c.id).into(),
                c.pass.to_string().into(),
                c.warn.to_string().into(),
                c.fail.to_string().into(),
                c.skip.to_string().into(),
                c.error.to_string().into(),
                who.join("; ").into(),
            ]);
        }
        let mut columns = vec![Column::new("CHECK", Fit::Keep)];
        for h in ["PASS", "WARN", "FAIL", "SKIP", "ERROR"] {
            columns.push(Column::new(h, Fit::Keep).right());
        }
        columns.push(Column::new("NODES NOT PASSING", Fit::Words));
        o.push('\n');
        o.push_str(&grid::best(&Grid::new(columns), &rows, width, MIN_TEXT));
    }

    if r.drift.is_empty() {
        if s.nodes > 1 {
            o.push_str("\nno drift: every inventory field has one value across the nodes\n");
        }
    } else {
        let rows: Vec<Vec<Text>> = r
            .drift
            .iter()
            .map(|d| {
                let maj = match &d.majority {
                    Some(m) => format!("{} ({})", clip(&m.value, 22), m.count),
                    None => format!("split, {} values", d.values.len()),
                };
                let mut others = Vec::new();
                for v in &d.values {
                    if v.nodes.is_empty() {
                        others.push(format!("{} ({})", clip(&v.value, 24), v.count));
                    } else {
                        others.push(format!(
                            "{}={}",
                            names(&v.nodes, max_names),
                            clip(&v.value, 24)
                        ));
                    }
                }
                vec![
                    clip(&d.field, 48).into(),
                    maj.into(),
                    others.join("; ").into(),
                ]
            })
            .collect();
        o.push('\n');
        say(
            &mut o,
            &format!("DRIFT ({} field(s) differ between nodes)", r.drift.len()),
        );
        let g = |field, majority, differing| {
            Grid::new(vec![
                Column::new("FIELD", field),
                Column::new("MAJORITY (NODES)", majority),
                Column::new("DIFFERING NODES", differing),
            ])
        };
        o.push_str(&grid::first_fit(
            &[
                g(Fit::Keep, Fit::Words, Fit::Words),
                g(Fit::Keep, Fit::Min(12), Fit::Min(MIN_TEXT)),
                g(Fit::Min(12), Fit::Min(12), Fit::Min(12)),
            ],
            &rows,
            width,
        ));
    }

    if !r.odd_nodes.is_empty() {
        o.push('\n');
        say(
            &mut o,
            &format!(
                "ODD NODES OUT (holding a minority value; {} node(s))",
                r.odd_nodes.len()
            ),
        );
        let rows: Vec<Vec<Text>> = r
            .odd_nodes
            .iter()
            .take(max_names.max(1) * 4)
            .map(|n| {
                let f: Vec<String> = n
                    .fields
                    .iter()
                    .map(|f| format!("{}={}", t(&f.field), clip(&f.value, 24)))
                    .collect();
                vec![
                    t(&n.node).into(),
                    format!("{} field(s): {}", n.fields.len(), clip(&f.join(", "), 160)).into(),
                ]
            })
            .collect();
        let g = |node, fields| {
            Grid::new(vec![
                Column::new("NODE", node),
                Column::new("FIELDS", fields),
            ])
            .without_header()
        };
        o.push_str(&grid::first_fit(
            &[
                g(Fit::Keep, Fit::Words),
                g(Fit::Keep, Fit::Min(MIN_TEXT)),
                g(Fit::Min(12), Fit::Min(MIN_TEXT)),
            ],
            &rows,
            width,
        ));
        if r.odd_nodes.len() > max_names.max(1) * 4 {
            let _ = writeln!(
                o,
                " ... and {} more (see --format json)",
                r.odd_nodes.len() - max_names.max(1) * 4
            );
        }
    }

    if !r.unreadable.is_empty() {
        let _ = writeln!(o, "\nUNREADABLE ({})", r.unreadable.len());
        let rows: Vec<Vec<Text>> = r
            .unreadable
            .iter()
            .map(|u| vec![format!("{}:", t(&u.input)).into(), t(&u.error).into()])
            .collect();
        let g = |input, error| {
            Grid::new(vec![
                Column::new("INPUT", input),
                Column::new("ERROR", error),
            ])
            .without_header()
        };
        o.push_str(&grid::first_fit(
            &[
                g(Fit::Keep, Fit::Words),
                g(Fit::Keep, Fit::Min(MIN_TEXT)),
                g(Fit::Min(12), Fit::Min(MIN_TEXT)),
            ],
            &rows,
            width,
        ));
    }
    o.push('\n');
    say(
        &mut o,
        &format!(
            "summary: {} node(s), {} failed, {} incomplete, {} unreadable, {} drift field(s) · exit code {}",
            s.nodes, s.failed, s.incomplete, s.unreadable, s.drift_fields, s.exit_code
        ),
    );
    o
}

/// The narrowest a wrapped text column of the roll-up gets before its words are cut.
const MIN_TEXT: usize = 24;

pub fn prometheus(r: &Rollup) -> String {
    let s = &r.summary;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_fleet_nodes Nodes in the roll-up by their report's outcome."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_nodes gauge");
    for (k, v) in [
        ("ok", s.ok),
        ("failed", s.failed),
        ("incomplete", s.incomplete),
        ("other", s.other),
    ] {
        let _ = writeln!(o, "gdrdoctor_fleet_nodes{{outcome=\"{k}\"}} {v}");
    }
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_fleet_unreadable_reports Reports that could not be read."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_unreadable_reports gauge");
    let _ = writeln!(o, "gdrdoctor_fleet_unreadable_reports {}", s.unreadable);
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_fleet_check_nodes Nodes per check by the worst status of its findings."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_check_nodes gauge");
    for c in &r.checks {
        for (st, n) in [
            ("pass", c.pass),
            ("warn", c.warn),
            ("fail", c.fail),
            ("skip", c.skip),
            ("error", c.error),
        ] {
            let _ = writeln!(
                o,
                "gdrdoctor_fleet_check_nodes{{check=\"{}\",status=\"{st}\"}} {n}",
                esc(&c.id)
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_fleet_drift_fields Inventory fields that differ between nodes, by area."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_drift_fields gauge");
    let mut areas: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for d in &r.drift {
        let area: String = d
            .field
            .split(['.', '['])
            .next()
            .unwrap_or("other")
            .to_string();
        *areas.entry(area).or_insert(0) += 1;
    }
    for a in [
        "cmdline", "driver", "env", "gdr", "gpus", "iommu", "kernel", "nics", "pci", "tool",
    ] {
        areas.entry(a.to_string()).or_insert(0);
    }
    for (a, n) in &areas {
        let _ = writeln!(o, "gdrdoctor_fleet_drift_fields{{area=\"{}\"}} {n}", esc(a));
    }
    let _ = writeln!(
        o,
        "# HELP gdrdoctor_fleet_node_exit_code Exit code of each node's report."
    );
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_node_exit_code gauge");
    for n in &r.nodes {
        let _ = writeln!(
            o,
            "gdrdoctor_fleet_node_exit_code{{node=\"{}\"}} {}",
            esc(&n.name),
            n.exit_code
        );
    }
    let _ = writeln!(o, "# HELP gdrdoctor_fleet_node_drift_fields Drift fields where a node holds a minority value (the odd node out).");
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_node_drift_fields gauge");
    let odd: std::collections::HashMap<&str, usize> = r
        .odd_nodes
        .iter()
        .map(|n| (n.node.as_str(), n.fields.len()))
        .collect();
    for n in &r.nodes {
        let _ = writeln!(
            o,
            "gdrdoctor_fleet_node_drift_fields{{node=\"{}\"}} {}",
            esc(&n.name),
            odd.get(n.name.as_str()).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(o, "# HELP gdrdoctor_fleet_exit_code Exit code of gdrdoctor fleet (0 ok, 1 failed or drift, 3 incomplete).");
    let _ = writeln!(o, "# TYPE gdrdoctor_fleet_exit_code gauge");
    let _ = writeln!(o, "gdrdoctor_fleet_exit_code {}", s.exit_code);
    o
}

pub fn json(r: &Rollup) -> String {
    let mut s =
        serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
