//! `gdrdoctor fleet --format html`: the roll-up mapped onto the page of
//! [`super::fleet_html`] (heat map checks x nodes, counts, drift rows, per node its
//! findings, a link to its report file and, with `--svg-dir`, its topology picture).

use crate::collect::fleet::rollup::Rollup;
use crate::collect::fleet::svg::{find_svg, svg_names, SvgLookup};
use crate::render::fleet_html::{
    DriftGroup, DriftRow, FleetCheck, FleetFinding, FleetNode, FleetPage,
};
use std::path::{Component, Path, PathBuf};

/// Above this many nodes, pictures are embedded only for nodes that do not pass cleanly (each
/// picture is 5-100 KB; 10,000 of them would make a page no browser opens).
pub const SVG_ALL_UP_TO: usize = 256;

pub struct Options<'a> {
    /// Where the page is written (`-o`), to make report links relative to it; `None`: stdout,
    /// links relative to the current directory.
    pub output: Option<&'a Path>,
    /// `--svg-dir`.
    pub svg_dir: Option<&'a Path>,
}

/// The page of a roll-up. Pictures are read from `opts.svg_dir`; what could not be used is
/// said in the page's summary, never silently dropped.
pub fn page(r: &Rollup, opts: &Options) -> FleetPage {
    let s = &r.summary;
    let mut summary = vec![format!(
        "{} node(s) from {} report(s): {} ok, {} failed, {} incomplete{}",
        s.nodes,
        s.reports,
        s.ok,
        s.failed,
        s.incomplete,
        if s.other > 0 {
            format!(", {} other exit codes", s.other)
        } else {
            String::new()
        }
    )];
    if let (Some(a), Some(b)) = (&s.oldest, &s.newest) {
        summary.push(format!("reports from {a} to {b}"));
    }
    summary.push(format!(
        "{} drift field(s), {} odd node(s) out; exit code {}",
        s.drift_fields, s.odd_nodes, s.exit_code
    ));
    for u in &r.unreadable {
        summary.push(format!("unreadable: {}: {}", u.input, u.error));
    }

    let checks: Vec<FleetCheck> = r
        .checks
        .iter()
        .map(|c| FleetCheck {
            id: c.id.clone(),
            title: gdrdoctor_checks::checks::CHECKS
                .iter()
                .find(|d| d.id == c.id)
                .map(|d| d.title.to_string())
                .unwrap_or_default(),
        })
        .collect();
    let mut cells = vec![vec![None; r.nodes.len()]; checks.len()];
    let base = page_dir(opts.output);
    let all_svgs = r.nodes.len() <= SVG_ALL_UP_TO;
    let mut svg_notes: Vec<String> = Vec::new();
    let (mut embedded, mut missing) = (0usize, 0usize);
    let mut nodes = Vec::with_capacity(r.nodes.len());
    for (ni, n) in r.nodes.iter().enumerate() {
        let detail = n.detail.as_ref();
        for (id, st) in detail.map(|d| d.worst.as_slice()).unwrap_or_default() {
            if let Some(ci) = checks.iter().position(|c| c.id == *id) {
                cells[ci][ni] = Some(*st);
            }
        }
        let clean = n.exit_code == 0 && n.warn + n.fail + n.error == 0;
        let topo_svg = match opts.svg_dir {
            Some(dir) if all_svgs || !clean => {
                match find_svg(dir, &svg_names(&n.name, n.hostname.as_deref(), &n.input)) {
                    SvgLookup::Found(t) => {
                        embedded += 1;
                        Some(t)
                    }
                    SvgLookup::Missing => {
                        missing += 1;
                        None
                    }
                    SvgLookup::Bad(e) => {
                        svg_notes.push(format!("{}: topology picture not used: {e}", n.name));
                        None
                    }
                }
            }
            _ => None,
        };
        nodes.push(FleetNode {
            name: n.name.clone(),
            exit_code: n.exit_code,
            pass: n.pass,
            warn: n.warn,
            fail: n.fail,
            skip: n.skip,
            error: n.error,
            findings: detail
                .map(|d| {
                    d.findings
                        .iter()
                        .map(|f| FleetFinding {
                            id: f.id.clone(),
                            status: f.status,
                            subject: f.subject.clone(),
                            message: f.message.clone(),
                            remediation: f.remediation.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            report_href: report_href(&n.input, base.as_deref()),
            topo_svg,
        });
    }
    if let Some(dir) = opts.svg_dir {
        let mut line = format!(
            "topology pictures from {}: {embedded} embedded as images, {missing} node(s) without one",
            dir.display()
        );
        if !all_svgs {
            line.push_str(&format!(
                " (more than {SVG_ALL_UP_TO} nodes: only nodes that do not pass cleanly)"
            ));
        }
        summary.push(line);
        summary.extend(svg_notes);
    }

    let drift = drift_groups(r);
    FleetPage {
        title: format!("gdrdoctor fleet: {} nodes", s.nodes),
        summary,
        nodes,
        checks,
        cells,
        drift,
    }
}

/// Drift grouped by cause: the fields in which the same nodes differ from the majority are one
/// group (one port down on one node changes its state, its rate and the GDR pairs of every GPU:
/// one group, not a dozen rows), in the order of each group's first field. A field with no
/// majority (a split) is a group of its own.
pub fn drift_groups(r: &Rollup) -> Vec<DriftGroup> {
    let mut groups: Vec<DriftGroup> = Vec::new();
    for d in &r.drift {
        if d.majority.is_none() {
            // A split: the most common value lists no nodes in the roll-up; say how many.
            let mut odd: Vec<(String, String)> = Vec::new();
            if let Some(top) = d.values.first() {
                odd.push((format!("{} node(s)", top.count), top.value.clone()));
            }
            for v in d.values.iter().skip(1) {
                for node in &v.nodes {
                    odd.push((node.clone(), v.value.clone()));
                }
            }
            groups.push(DriftGroup {
                nodes: Vec::new(),
                rows: vec![DriftRow {
                    field: d.field.clone(),
                    majority: None,
                    majority_count: 0,
                    nodes: d.nodes,
                    odd,
                }],
            });
            continue;
        }
        for v in &d.values {
            let row = DriftRow {
                field: d.field.clone(),
                majority: d.majority.as_ref().map(|m| m.value.clone()),
                majority_count: d.majority.as_ref().map(|m| m.count).unwrap_or(0),
                nodes: d.nodes,
                odd: v
                    .nodes
                    .iter()
                    .map(|n| (n.clone(), v.value.clone()))
                    .collect(),
            };
            match groups
                .iter_mut()
                .find(|g| !g.nodes.is_empty() && g.nodes == v.nodes)
            {
                Some(g) => g.rows.push(row),
                None => groups.push(DriftGroup {
                    nodes: v.nodes.clone(),
                    rows: vec![row],
                }),
            }
        }
    }
    groups
}

/// The directory the page is written to, absolute, or `None` when it cannot be known.
fn page_dir(output: Option<&Path>) -> Option<PathBuf> {
    let dir = match output {
        Some(p) => p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
        None => Path::new("."),
    };
    std::path::absolute(dir).ok().map(|d| normalise(&d))
}

/// `a/./b/../c` -> `a/c`, without touching the file system (no symlink is resolved).
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// A link from the page to a report file: the path relative to the page's directory,
/// percent-encoded; `None` for reports from stdin or when no relative path exists.
pub fn report_href(input: &str, base: Option<&Path>) -> Option<String> {
    if input == "stdin" || input.starts_with("stdin[") || input.starts_with("stdin#") {
        return None;
    }
    let base = base?;
    let target = normalise(&std::path::absolute(input).ok()?);
    let b: Vec<Component> = base.components().collect();
    let t: Vec<Component> = target.components().collect();
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return None;
    }
    let mut parts: Vec<String> = vec!["..".into(); b.len() - common];
    for c in &t[common..] {
        parts.push(c.as_os_str().to_str()?.to_string());
    }
    if parts.is_empty() {
        return None;
    }
    Some(
        parts
            .iter()
            .map(|p| percent(p))
            .collect::<Vec<_>>()
            .join("/"),
    )
}

/// Percent-encode one path segment for an href (RFC 3986 unreserved characters stay).
fn percent(seg: &str) -> String {
    let mut o = String::with_capacity(seg.len());
    for b in seg.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn report_links_are_relative_to_the_page() {
        let cwd = std::path::absolute(".").unwrap_or_default();
        let base = normalise(&cwd.join("out"));
        assert_eq!(
            report_href("reports/a b#1.json", Some(&base)).as_deref(),
            Some("../reports/a%20b%231.json")
        );
        assert_eq!(
            report_href("out/x/r.json", Some(&base)).as_deref(),
            Some("x/r.json")
        );
        assert_eq!(report_href("stdin[task 3]", Some(&base)), None);
        assert_eq!(report_href("r.json", None), None);
    }

    proptest! {
        #[test]
        fn links_never_panic(input in "\\PC{0,40}") {
            let base = std::path::absolute(".").ok();
            if let Some(h) = report_href(&input, base.as_deref()) {
                prop_assert!(!h.contains(' ') && !h.contains('#') && !h.contains('"'));
            }
        }
    }
}
