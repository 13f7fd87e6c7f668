//! `gdrdoctor fleet --format html`: the roll-up mapped onto the page of
//! [`crate::render::fleet_html`] (heat map checks x nodes, counts, drift rows, per node its
//! findings, a link to its report file and, with `--svg-dir`, its topology picture).

use super::rollup::Rollup;
use crate::render::fleet_html::{DriftRow, FleetCheck, FleetFinding, FleetNode, FleetPage};
use std::path::{Component, Path, PathBuf};

/// Above this many nodes, pictures are inlined only for nodes that do not pass cleanly (each
/// picture is 5-100 KB; 10,000 of them would make a page no browser opens).
pub const SVG_ALL_UP_TO: usize = 256;

/// The largest picture read from `--svg-dir`.
const SVG_MAX_BYTES: u64 = 4 << 20;

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
    let (mut inlined, mut missing) = (0usize, 0usize);
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
                        inlined += 1;
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
            "topology pictures from {}: {inlined} inlined, {missing} node(s) without one",
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

    let drift = r
        .drift
        .iter()
        .map(|d| {
            let mut odd: Vec<(String, String)> = Vec::new();
            if d.majority.is_none() {
                // A split: the most common value lists no nodes in the roll-up; say how many.
                if let Some(top) = d.values.first() {
                    odd.push((format!("{} node(s)", top.count), top.value.clone()));
                }
            }
            for v in d.values.iter().skip(usize::from(d.majority.is_none())) {
                for node in &v.nodes {
                    odd.push((node.clone(), v.value.clone()));
                }
            }
            DriftRow {
                field: d.field.clone(),
                majority: d.majority.as_ref().map(|m| m.value.clone()),
                majority_count: d.majority.as_ref().map(|m| m.count).unwrap_or(0),
                nodes: d.nodes,
                odd,
            }
        })
        .collect();
    FleetPage {
        title: format!("gdrdoctor fleet: {} nodes", s.nodes),
        summary,
        nodes,
        checks,
        cells,
        drift,
    }
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

/// The file names a node's picture may have, in order: its fleet name, its hostname, its
/// report file's name without `.json` (`srun --output='svgs/%N.svg'` and
/// `--output='reports/%N.json'` give the same stem). Names that are not a plain file name
/// (a `/`, a leading `.`) are left out.
pub fn svg_names(name: &str, hostname: Option<&str>, input: &str) -> Vec<String> {
    let stem = Path::new(input)
        .file_name()
        .and_then(|f| f.to_str())
        .map(|f| f.strip_suffix(".json").unwrap_or(f));
    let mut out: Vec<String> = Vec::new();
    for c in [Some(name), hostname, stem].into_iter().flatten() {
        let plain = !c.is_empty() && !c.starts_with('.') && !c.contains(['/', '\\', '\0']);
        let file = format!("{c}.svg");
        if plain && !out.contains(&file) {
            out.push(file);
        }
    }
    out
}

pub enum SvgLookup {
    Found(String),
    Missing,
    /// A file exists but cannot be used, with the reason (names the path).
    Bad(String),
}

/// The first of `names` under `dir`, checked to be a gdrdoctor topology picture that is safe to
/// inline (no script, no foreign content).
pub fn find_svg(dir: &Path, names: &[String]) -> SvgLookup {
    for n in names {
        let p = dir.join(n);
        match std::fs::metadata(&p) {
            Ok(m) if m.len() > SVG_MAX_BYTES => {
                return SvgLookup::Bad(format!(
                    "{}: {} bytes, more than {SVG_MAX_BYTES}",
                    p.display(),
                    m.len()
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return SvgLookup::Bad(format!("{}: {e}", p.display())),
        }
        return match std::fs::read_to_string(&p) {
            Ok(t) => match check_svg(&t) {
                Ok(()) => SvgLookup::Found(t),
                Err(e) => SvgLookup::Bad(format!("{}: {e}", p.display())),
            },
            Err(e) => SvgLookup::Bad(format!("{}: {e}", p.display())),
        };
    }
    SvgLookup::Missing
}

/// Whether a picture can be inlined: it is `gdrdoctor topo --format svg` output and carries
/// nothing that would run in the page.
pub fn check_svg(t: &str) -> Result<(), String> {
    let Some(start) = t.find("<svg") else {
        return Err("not an svg picture (no <svg element)".into());
    };
    let root_end = t[start..].find('>').map(|i| start + i).unwrap_or(t.len());
    if !t[start..root_end].contains("data-generator=\"gdrdoctor topo\"") {
        return Err("not written by `gdrdoctor topo --format svg`".into());
    }
    let lower = t.to_ascii_lowercase();
    for bad in ["<script", "<foreignobject", "javascript:", "<iframe"] {
        if lower.contains(bad) {
            return Err(format!("contains `{bad}`: not inlined"));
        }
    }
    Ok(())
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

    #[test]
    fn picture_names_and_what_may_be_inlined() {
        assert_eq!(
            svg_names("gpu-001", Some("gpu-001"), "reports/gpu-001.json"),
            vec!["gpu-001.svg"]
        );
        assert_eq!(
            svg_names("h@reports/n1.json", Some("h"), "reports/n1.json"),
            vec!["h.svg", "n1.svg"],
            "a name with a path is not a file name"
        );
        assert_eq!(svg_names("..", Some(".x"), "stdin"), vec!["stdin.svg"]);
        let ok = "<svg xmlns=\"http://www.w3.org/2000/svg\" data-generator=\"gdrdoctor topo\"><title>t</title></svg>";
        assert!(check_svg(ok).is_ok());
        assert!(check_svg("<svg xmlns=\"x\"></svg>").is_err(), "not ours");
        let script = ok.replace("<title>t</title>", "<SCRIPT>alert(1)</SCRIPT>");
        assert!(check_svg(&script).unwrap_err().contains("<script"));
        assert!(check_svg("plain text").is_err());
    }

    #[test]
    fn pictures_are_read_missing_or_refused_with_the_path() {
        let t = tempfile::tempdir().unwrap();
        let ok = "<?xml version=\"1.0\"?>\n<svg data-generator=\"gdrdoctor topo\"></svg>\n";
        std::fs::write(t.path().join("a.svg"), ok).unwrap();
        std::fs::write(t.path().join("b.svg"), "<html>").unwrap();
        let names = |n: &str| vec![format!("{n}.svg")];
        assert!(matches!(find_svg(t.path(), &names("a")), SvgLookup::Found(s) if s == ok));
        assert!(matches!(
            find_svg(t.path(), &names("zz")),
            SvgLookup::Missing
        ));
        match find_svg(t.path(), &names("b")) {
            SvgLookup::Bad(e) => assert!(e.contains("b.svg") && e.contains("no <svg"), "{e}"),
            _ => panic!("a damaged picture is named"),
        }
    }

    proptest! {
        #[test]
        fn links_and_names_never_panic(input in "\\PC{0,40}", name in "\\PC{0,20}") {
            let base = std::path::absolute(".").ok();
            if let Some(h) = report_href(&input, base.as_deref()) {
                prop_assert!(!h.contains(' ') && !h.contains('#') && !h.contains('"'));
            }
            for f in svg_names(&name, None, &input) {
                prop_assert!(!f.contains('/') && !f.starts_with('.'));
            }
            let _ = check_svg(&input);
        }
    }
}
