//! The machine contracts: every JSON document validates against its schema in docs/schema/ (and
//! every schema id has a schema), the CLI's JSON equals the golden report once the timestamp is
//! normalised, JUnit follows the Jenkins xUnit `junit-10.xsd` rules, `check` and `probe`
//! Prometheus files merge in one textfile directory without a collision, and `--format oneline`
//! stays under 80 bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor::render::{self, Format, Style};
use gdrdoctor_checks::report::Report;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn schema(id: &str) -> Value {
    let file = repo()
        .join("docs/schema")
        .join(format!("{}.schema.json", id.replace('/', ".")));
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}: every schema id needs a schema", file.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["title"], id, "{}", file.display());
    v
}

/// Validate `doc` against the schema of its own `schema` field (or `id`); panic with every error.
fn validate(id: &str, doc: &Value, what: &str) {
    let s = schema(id);
    let v = jsonschema::validator_for(&s).unwrap_or_else(|e| panic!("{id}: bad schema: {e}"));
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .take(10)
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not match docs/schema for {id} (update the schema and docs/report-format.md with the code):\n{}",
        errors.join("\n")
    );
}

fn json_files(dir: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_schema_id_has_a_schema_and_every_schema_is_valid() {
    let ids = [
        gdrdoctor_checks::report::SCHEMA,
        gdrdoctor::fleet::rollup::FLEET_SCHEMA,
        gdrdoctor::meta::META_SCHEMA,
        gdrdoctor_checks::policy::POLICY_SCHEMA,
        "gdrdoctor.topo/v1",
    ];
    let mut files: BTreeSet<String> = std::fs::read_dir(repo().join("docs/schema"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".schema.json"))
        .collect();
    for id in ids {
        let s = schema(id);
        assert!(
            jsonschema::meta::is_valid(&s),
            "{id}: not a valid draft 2020-12 schema"
        );
        files.remove(&format!("{}.schema.json", id.replace('/', ".")));
    }
    assert!(files.is_empty(), "schemas for no schema id: {files:?}");
    // The code's other schema ids are the ones listed above.
    let topo = std::fs::read_to_string(repo().join("src/render/topo.rs")).unwrap();
    assert!(topo.contains("\"gdrdoctor.topo/v1\""));
}

#[test]
fn golden_and_probe_reports_match_the_report_schema() {
    let mut n = 0;
    for f in json_files("fixtures/golden")
        .into_iter()
        .chain(json_files("fixtures/reports"))
    {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        validate(v["schema"].as_str().unwrap(), &v, &f.display().to_string());
        n += 1;
    }
    assert!(n >= 20, "only {n} reports");
    // The schema is strict: an undocumented field fails.
    let mut v: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("fixtures/golden/hgx-h200x8-cx7x8-healthy.json"))
            .unwrap(),
    )
    .unwrap();
    v["findings"][0]["severity"] = Value::from("high");
    let s = schema(gdrdoctor_checks::report::SCHEMA);
    assert!(!jsonschema::is_valid(&s, &v));
}

#[test]
fn cli_json_is_the_golden_report_plus_a_timestamp() {
    for sc in ["hgx-h200x8-cx7x8-healthy", "hgx-h200x8-cx7x8-port-down"] {
        let before = gdrdoctor::clock::now_rfc3339();
        let (_, out, _) = run(&[
            "check",
            "--sysroot",
            &fixture(sc).display().to_string(),
            "-f",
            "json",
        ]);
        let mut v: Value = serde_json::from_str(&out).unwrap();
        validate(gdrdoctor_checks::report::SCHEMA, &v, sc);
        let ts = v
            .as_object_mut()
            .unwrap()
            .remove("timestamp")
            .expect("check stamps its report");
        let ts = ts.as_str().unwrap();
        let after = gdrdoctor::clock::now_rfc3339();
        // Fixed-width UTC RFC 3339 sorts as time does.
        assert!(
            before.as_str() <= ts && ts <= after.as_str(),
            "{before} <= {ts} <= {after}"
        );
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(repo().join(format!("fixtures/golden/{sc}.json"))).unwrap(),
        )
        .unwrap();
        assert!(
            v == golden,
            "{sc}: check --format json differs from the golden report"
        );
    }
}

#[test]
fn policy_fleet_topo_and_snapshot_documents_match_their_schemas() {
    let t = tempfile::tempdir().unwrap();
    // A report with policy findings and waivers.
    let p = t.path().join("p.toml");
    let (code, _, _) = run(&[
        "policy",
        "init",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "-o",
        &p.display().to_string(),
    ]);
    assert_eq!(code, 0);
    let mut policy_text = std::fs::read_to_string(&p).unwrap();
    let as_json: Value = toml::from_str(&policy_text).unwrap();
    validate(
        gdrdoctor_checks::policy::POLICY_SCHEMA,
        &as_json,
        "policy init",
    );
    policy_text.push_str(
        "\n[severity]\n\"rdma.firmware\" = \"fail\"\n[[waiver]]\ncheck = \"rdma.ports\"\nreason = \"r\"\nexpires = \"2999-01-01\"\n",
    );
    std::fs::write(&p, &policy_text).unwrap();
    let as_json: Value = toml::from_str(&policy_text).unwrap();
    validate(
        gdrdoctor_checks::policy::POLICY_SCHEMA,
        &as_json,
        "policy with waivers",
    );
    let reports = t.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    for sc in [
        "hgx-h200x8-cx7x8-port-down",
        "hgx-h200x8-cx7x8-mixed-fw",
        "hgx-h200x8-cx7x8-healthy",
    ] {
        let out = reports.join(format!("{sc}.json"));
        run(&[
            "check",
            "--sysroot",
            &fixture(sc).display().to_string(),
            "--policy",
            &p.display().to_string(),
            "-f",
            "json",
            "-o",
            &out.display().to_string(),
        ]);
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        validate(gdrdoctor_checks::report::SCHEMA, &v, sc);
    }
    std::fs::write(reports.join("broken.json"), "{").unwrap();
    let (_, out, _) = run(&["fleet", "-f", "json", &reports.display().to_string()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["unreadable"], 1);
    validate(gdrdoctor::fleet::rollup::FLEET_SCHEMA, &v, "fleet");
    for sc in scenarios() {
        let (_, out, _) = run(&[
            "topo",
            "--sysroot",
            &fixture(&sc).display().to_string(),
            "-f",
            "json",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        validate("gdrdoctor.topo/v1", &v, &format!("topo {sc}"));
        let meta = fixture(&sc).join("gdrdoctor/meta.json");
        let m: Value = serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap();
        validate(gdrdoctor::meta::META_SCHEMA, &m, &format!("{sc} meta.json"));
    }
    // A fresh snapshot's metadata.
    let snap = t.path().join("snap");
    let (code, _, err) = run(&[
        "snapshot",
        &snap.display().to_string(),
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(snap.join("gdrdoctor/meta.json")).unwrap())
            .unwrap();
    validate(gdrdoctor::meta::META_SCHEMA, &m, "snapshot meta.json");
    // `topo --nvidia-smi` from the real captures, when present.
    let real = repo().join("../shared/realdata");
    for name in [
        "llm-action-a800x8-4nic-topo",
        "blog-8gpu-pcie-switch-cx6-topo",
    ] {
        let dir = real.join(name);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let (code, out, _) = run(&[
                "topo",
                "--nvidia-smi",
                &e.path().display().to_string(),
                "-f",
                "json",
            ]);
            if code == 0 {
                let v: Value = serde_json::from_str(&out).unwrap();
                validate("gdrdoctor.topo/v1", &v, &e.path().display().to_string());
            }
        }
    }
}

// ---- JUnit -------------------------------------------------------------------------------

/// The rules of the Jenkins xUnit plugin's junit-10.xsd (the version pytest ships as
/// testing/example_scripts/junit-10.xsd), enforced on a parsed document: which elements may
/// appear where, which attributes each may carry, which are required, and the time pattern.
/// .ci/run also validates with xmllint against the XSD itself (GDRDOCTOR_JUNIT_XSD).
fn elements<'a, 'i>(n: roxmltree::Node<'a, 'i>) -> Vec<roxmltree::Node<'a, 'i>> {
    n.children().filter(|c| c.is_element()).collect()
}

fn junit_xsd_rules(xml: &str) {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("not xml: {e}\n{xml}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let attrs = |n: roxmltree::Node| -> BTreeSet<String> {
        n.attributes().map(|a| a.name().to_string()).collect()
    };
    let allowed = |n: roxmltree::Node, ok: &[&str], required: &[&str]| {
        let a = attrs(n);
        for x in &a {
            assert!(
                ok.contains(&x.as_str()),
                "<{}> may not carry `{x}` (junit-10.xsd)",
                n.tag_name().name()
            );
        }
        for r in required {
            assert!(
                a.contains(*r),
                "<{}> lacks required `{r}`",
                n.tag_name().name()
            );
        }
    };
    let time_ok = |t: &str| {
        // SUREFIRE_TIME: (([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]{0,3})?
        let (int, frac) = t.split_once('.').unwrap_or((t, ""));
        int.chars().all(|c| c.is_ascii_digit() || c == ',')
            && frac.len() <= 3
            && frac.chars().all(|c| c.is_ascii_digit())
    };
    allowed(root, &["name", "time", "tests", "failures", "errors"], &[]);
    if let Some(t) = root.attribute("time") {
        assert!(time_ok(t), "{t}");
    }
    for suite in elements(root) {
        assert_eq!(suite.tag_name().name(), "testsuite");
        allowed(
            suite,
            &[
                "name",
                "tests",
                "failures",
                "errors",
                "group",
                "time",
                "skipped",
                "timestamp",
                "hostname",
                "id",
                "package",
                "file",
                "log",
                "url",
            ],
            &["name", "tests", "failures", "errors"],
        );
        let (mut tests, mut failures, mut errors, mut skipped) = (0, 0, 0, 0);
        for c in elements(suite) {
            match c.tag_name().name() {
                "properties" => {
                    allowed(c, &[], &[]);
                    for p in elements(c) {
                        assert_eq!(p.tag_name().name(), "property");
                        allowed(p, &["name", "value"], &["name", "value"]);
                    }
                }
                "system-out" | "system-err" => {}
                "testcase" => {
                    tests += 1;
                    allowed(c, &["name", "time", "classname", "group"], &["name"]);
                    for k in elements(c) {
                        let name = k.tag_name().name();
                        match name {
                            "failure" | "error" | "skipped" => {
                                allowed(k, &["type", "message"], &[]);
                                match name {
                                    "failure" => failures += 1,
                                    "error" => errors += 1,
                                    _ => skipped += 1,
                                }
                            }
                            "system-out" | "system-err" => {
                                assert!(elements(k).is_empty(), "<{name}> holds text only")
                            }
                            other => panic!("<testcase> may not hold <{other}> (junit-10.xsd)"),
                        }
                    }
                }
                other => panic!("<testsuite> may not hold <{other}> (junit-10.xsd)"),
            }
        }
        // The counts say what the cases hold.
        assert_eq!(suite.attribute("tests"), Some(tests.to_string().as_str()));
        assert_eq!(
            suite.attribute("failures"),
            Some(failures.to_string().as_str())
        );
        assert_eq!(suite.attribute("errors"), Some(errors.to_string().as_str()));
        if let Some(s) = suite.attribute("skipped") {
            assert_eq!(s, skipped.to_string());
        }
    }
}

fn xmllint_against_xsd(xml: &str, what: &str) {
    let Ok(xsd) = std::env::var("GDRDOCTOR_JUNIT_XSD") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("junit.xml");
    std::fs::write(&f, xml).unwrap();
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", &xsd, &f.display().to_string()])
        .output()
        .expect("GDRDOCTOR_JUNIT_XSD is set: xmllint must be installed");
    assert!(
        out.status.success(),
        "{what}: xmllint --schema {xsd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn probe_reports() -> Vec<(String, Report)> {
    json_files("fixtures/reports")
        .into_iter()
        .map(|f| {
            let r: Report = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            (f.display().to_string(), r)
        })
        .collect()
}

#[test]
fn junit_follows_the_xunit_xsd_for_every_fixture_and_probe_report() {
    let mut reports: Vec<(String, Report)> = scenarios()
        .into_iter()
        .map(|s| (s.clone(), report_for(&fixture(&s))))
        .collect();
    reports.extend(probe_reports());
    // Text XML cannot carry, in a message.
    let mut odd = report_for(&fixture("hgx-h200x8-cx7x8-port-down"));
    odd.findings[0].message = "a <b> & \"c\" \u{1} \u{fffe} é".into();
    odd.findings[0].status = gdrdoctor_checks::report::Status::Fail;
    odd.timestamp = Some("2026-11-30T12:00:00Z".into());
    reports.push(("odd characters".into(), odd));
    for (name, r) in &reports {
        for warn_is_failure in [false, true] {
            let xml = render::render(
                r,
                Format::Junit,
                &Style {
                    color: false,
                    verbose: false,
                    warn_is_failure,
                },
            );
            junit_xsd_rules(&xml);
            xmllint_against_xsd(&xml, name);
        }
    }
    // The counts on <testsuites> match the report.
    let r = report_for(&fixture("hgx-h200x8-cx7x8-port-down"));
    let xml = render::render(
        &r,
        Format::Junit,
        &Style {
            color: false,
            verbose: false,
            warn_is_failure: false,
        },
    );
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let root = doc.root_element();
    assert_eq!(root.attribute("failures"), Some("1"));
    assert_eq!(root.attribute("skipped"), None, "junit-10.xsd rejects it");
    let odd = reports.last().unwrap();
    let xml = render::render(
        &odd.1,
        Format::Junit,
        &Style {
            color: false,
            verbose: false,
            warn_is_failure: false,
        },
    );
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let msg = doc
        .descendants()
        .find_map(|n| n.attribute("message").filter(|m| m.contains("<b>")))
        .unwrap();
    assert_eq!(
        msg, "a <b> & \"c\"   é",
        "escaped, and characters XML cannot hold dropped"
    );
}

// ---- Prometheus --------------------------------------------------------------------------

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

// ---- oneline -----------------------------------------------------------------------------

#[test]
fn oneline_is_one_short_line_whose_word_follows_the_exit_code() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("p.toml");
    std::fs::write(
        &p,
        "[gpu]\ncount = 16\nmodel = \"B200\"\n[rdma]\ncount = 9\n",
    )
    .unwrap();
    for sc in scenarios() {
        for extra in [
            vec![],
            vec!["--policy", p.to_str().unwrap()],
            vec!["--fail-on", "warn"],
        ] {
            let mut args = vec!["check", "--sysroot"];
            let f = fixture(&sc).display().to_string();
            args.push(&f);
            args.extend_from_slice(&["-f", "oneline"]);
            args.extend(extra.iter());
            let (code, out, _) = run(&args);
            assert!(
                out.ends_with('\n') && out.lines().count() == 1,
                "{sc}: {out:?}"
            );
            let line = out.trim_end_matches('\n');
            assert!(line.len() < 80, "{sc}: {} bytes: {line}", line.len());
            let word = line.split(' ').next().unwrap();
            match code {
                0 => assert_eq!(word, "OK", "{sc}: {line}"),
                1 => assert!(word == "FAIL" || word == "WARN", "{sc}: {line}"),
                3 => assert_eq!(word, "ERROR", "{sc}: {line}"),
                other => panic!("{sc}: exit {other}: {line}"),
            }
            if code == 1 {
                let ids = line[word.len() + 1..].split(':').next().unwrap();
                assert!(
                    ids.split(',')
                        .all(|i| i.contains('.') || i.starts_with('+')),
                    "{sc}: {line}"
                );
            }
        }
    }
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-port-down").display().to_string(),
        "-f",
        "oneline",
    ]);
    assert!(out.starts_with("FAIL rdma.ports: mlx5_3/1: "), "{out}");
    let (_, out, _) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "-f",
        "oneline",
    ]);
    assert!(out.starts_with("OK ") && out.contains(" pass"), "{out}");
}
