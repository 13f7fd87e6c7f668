//! Prometheus: `check` and `probe` textfiles merge in one directory without a collision.

use super::*;

type Families = BTreeMap<String, (String, String, BTreeSet<String>)>;

/// Merge exposition texts as node_exporter's textfile collector does: one family per metric
/// name (HELP and TYPE must agree), and no series (name + labels) twice.
fn merge_textfiles(files: &[(&str, &str)]) -> Families {
    let mut fam: Families = BTreeMap::new();
    for (file, text) in files {
        let mut help: BTreeMap<&str, &str> = BTreeMap::new();
        let mut typ: BTreeMap<&str, &str> = BTreeMap::new();
        for l in text.lines() {
            if let Some(r) = l.strip_prefix("# HELP ") {
                let (n, h) = r.split_once(' ').unwrap();
                help.insert(n, h);
            } else if let Some(r) = l.strip_prefix("# TYPE ") {
                let (n, t) = r.split_once(' ').unwrap();
                typ.insert(n, t);
            } else {
                let (series, _) = l.rsplit_once(' ').unwrap();
                let name = series.split('{').next().unwrap();
                let e = fam.entry(name.to_string()).or_insert_with(|| {
                    (
                        help.get(name).unwrap_or(&"").to_string(),
                        typ.get(name).unwrap_or(&"").to_string(),
                        BTreeSet::new(),
                    )
                });
                assert_eq!(
                    e.0,
                    *help.get(name).unwrap_or(&""),
                    "{file}: HELP of {name} differs between files"
                );
                assert_eq!(
                    e.1,
                    *typ.get(name).unwrap_or(&""),
                    "{file}: TYPE of {name} differs"
                );
                assert!(
                    e.2.insert(series.to_string()),
                    "{file}: {series} collides with another file's series"
                );
            }
        }
    }
    fam
}

#[test]
fn check_and_probe_prometheus_files_share_a_textfile_directory() {
    let style = Style {
        color: false,
        verbose: false,
        warn_is_failure: false,
    };
    let check = render::render(
        &report_for(&fixture("hgx-h200x8-cx7x8-port-down")),
        Format::Prometheus,
        &style,
    );
    common::tools::promtool_check(&check);
    let probes = probe_reports();
    let texts: Vec<String> = probes
        .iter()
        .map(|(_, r)| render::render(r, Format::Prometheus, &style))
        .collect();
    for t in &texts {
        common::tools::promtool_check(t);
        assert!(t.contains("gdrdoctor_exit_code{command=\"probe\"}"), "{t}");
    }
    assert!(check.contains("gdrdoctor_exit_code{command=\"check\"} 1"));
    // A check file and one probe file, as a node writes them side by side.
    let fam = merge_textfiles(&[
        ("gdrdoctor.prom", &check),
        ("gdrdoctor-probe.prom", &texts[0]),
    ]);
    let exit = &fam["gdrdoctor_exit_code"].2;
    assert_eq!(
        exit.len(),
        2,
        "{exit:?}: the probe's exit code no longer hides the check's"
    );
    // The merged family is what node_exporter serves: promtool accepts it too.
    let mut merged = String::new();
    for (name, (help, typ, series)) in &fam {
        merged.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {typ}\n"));
        for s in series {
            merged.push_str(&format!("{s} 0\n"));
        }
    }
    common::tools::promtool_check(&merged);
}
