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

fn schema_dir() -> std::path::PathBuf {
    repo().join("docs/schema")
}

fn schema_file(id: &str) -> std::path::PathBuf {
    schema_dir().join(format!("{}.schema.json", id.replace('/', ".")))
}

fn schema(id: &str) -> Value {
    let file = schema_file(id);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}: every schema id needs a schema", file.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["title"], id, "{}", file.display());
    v
}

/// Serves `$ref`s to the schema files beside the referring one (`gdrdoctor.report.v1.schema.json#/$defs/finding`),
/// read from docs/schema, and nothing else: no network, no other directory.
struct SchemaDir;

impl jsonschema::Retrieve for SchemaDir {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let prefix = format!("file://{}/", schema_dir().display());
        let name = uri
            .as_str()
            .strip_prefix(&prefix)
            .filter(|n| !n.contains('/') && n.ends_with(".schema.json"))
            .ok_or_else(|| {
                format!(
                    "{uri}: a schema may refer only to the schema files beside it in docs/schema"
                )
            })?;
        let text = std::fs::read_to_string(schema_dir().join(name))
            .map_err(|e| format!("docs/schema/{name}: {e}"))?;
        Ok(serde_json::from_str(&text)?)
    }
}

/// The validator of schema `id`, its references to the other files of docs/schema resolved as
/// a validator given the file's path resolves them (the schemas that refer to another file have
/// no `$id`, so that their base is their own location).
fn validator(id: &str) -> jsonschema::Validator {
    let s = schema(id);
    jsonschema::options()
        .with_base_uri(format!("file://{}", schema_file(id).display()))
        .with_retriever(SchemaDir)
        .build(&s)
        .unwrap_or_else(|e| panic!("{id}: bad schema: {e}"))
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .take(10)
        .collect()
}

/// Validate `doc`, which must declare schema `id`, against the schema its own `schema` field
/// names; panic with every error.
fn validate(id: &str, doc: &Value, what: &str) {
    let named = doc["schema"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no `schema` field naming its schema id"));
    assert_eq!(named, id, "{what}: declares the wrong schema id");
    let errors = errors(&validator(named), doc);
    assert!(
        errors.is_empty(),
        "{what} does not match docs/schema for {named} (update the schema and docs/report-format.md with the code):\n{}",
        errors.join("\n")
    );
}

/// Every `"gdrdoctor.<name>/v<n>"` literal in the Rust sources under `dir`.
fn schema_literals(dir: &std::path::Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            schema_literals(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, _) in text.match_indices("\"gdrdoctor.") {
                let rest = &text[i + 1..];
                let Some(end) = rest.find('"') else { continue };
                let lit = &rest[..end];
                let well_formed = lit.split_once('/').is_some_and(|(name, v)| {
                    name["gdrdoctor.".len()..]
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '-')
                        && v.strip_prefix('v')
                            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
                });
                if well_formed {
                    out.insert(lit.to_string());
                }
            }
        }
    }
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

/// What an edit breaks, and the edit: a valid document edited so that its schema must reject it.
type Edit = (&'static str, fn(&mut Value));

const TOPO_SCHEMA: &str = "gdrdoctor.topo/v1";
const TOPO_PASTE_SCHEMA: &str = "gdrdoctor.topo-paste/v1";

#[test]
fn every_schema_id_has_a_schema_and_every_schema_is_valid() {
    let ids = [
        gdrdoctor_checks::report::SCHEMA,
        gdrdoctor::collect::fleet::rollup::FLEET_SCHEMA,
        gdrdoctor::source::meta::META_SCHEMA,
        gdrdoctor_checks::policy::POLICY_SCHEMA,
        gdrdoctor_checks::paste::report::SCHEMA,
        gdrdoctor::state::counters::STATE_SCHEMA,
        gdrdoctor::state::cuda_cache::SCHEMA,
        TOPO_SCHEMA,
        TOPO_PASTE_SCHEMA,
    ];
    let mut files: BTreeSet<String> = std::fs::read_dir(schema_dir())
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
        assert_eq!(
            s["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{id}"
        );
        assert_eq!(
            s["properties"]["schema"]["const"], id,
            "{id}: `schema` field"
        );
        assert_eq!(s["additionalProperties"], false, "{id}: strict at the top");
        // Every reference resolves (to this file or one beside it).
        validator(id);
        files.remove(&format!("{}.schema.json", id.replace('/', ".")));
    }
    assert!(files.is_empty(), "schemas for no schema id: {files:?}");
    // Every schema id the code writes is one of the above.
    let mut literals = BTreeSet::new();
    schema_literals(&repo().join("src"), &mut literals);
    schema_literals(&repo().join("checks/src"), &mut literals);
    let known: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
    let missing: Vec<&String> = literals.difference(&known).collect();
    assert!(
        missing.is_empty(),
        "schema ids in the code without a schema in docs/schema (and a row in its README): {missing:?}"
    );
    assert!(literals.contains(TOPO_SCHEMA) && literals.contains(TOPO_PASTE_SCHEMA));
    // The README's table lists every schema file.
    let readme = std::fs::read_to_string(schema_dir().join("README.md")).unwrap();
    for id in ids {
        assert!(
            readme.contains(&format!(
                "| `{id}` | [{}.schema.json]",
                id.replace('/', ".")
            )),
            "docs/schema/README.md has no row for {id}"
        );
    }
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
    assert!(!validator(gdrdoctor_checks::report::SCHEMA).is_valid(&v));
}

#[test]
fn cli_json_is_the_golden_report_plus_a_timestamp() {
    for sc in ["hgx-h200x8-cx7x8-healthy", "hgx-h200x8-cx7x8-port-down"] {
        let before = gdrdoctor::sys::clock::now_rfc3339();
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
        let after = gdrdoctor::sys::clock::now_rfc3339();
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
    validate(gdrdoctor::collect::fleet::rollup::FLEET_SCHEMA, &v, "fleet");
    for sc in scenarios() {
        let (_, out, _) = run(&[
            "topo",
            "--sysroot",
            &fixture(&sc).display().to_string(),
            "-f",
            "json",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        validate(TOPO_SCHEMA, &v, &format!("topo {sc}"));
        let meta = fixture(&sc).join("gdrdoctor/meta.json");
        let m: Value = serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap();
        validate(
            gdrdoctor::source::meta::META_SCHEMA,
            &m,
            &format!("{sc} meta.json"),
        );
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
    validate(
        gdrdoctor::source::meta::META_SCHEMA,
        &m,
        "snapshot meta.json",
    );
}

// ---- pasted text: diagnose and topo --nvidia-smi ------------------------------------------

/// The files of fixtures/pastes (not their SOURCES.md).
fn pastes() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo().join("fixtures/pastes"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && !p.ends_with("SOURCES.md"))
        .collect();
    v.sort();
    v
}

/// The captures of ../shared/realdata, each with its files (not its subdirectories: sysfs
/// trees and hwloc XML are no pastes); empty when the directory is absent.
fn real_captures() -> Vec<(String, Vec<std::path::PathBuf>)> {
    let Ok(rd) = std::fs::read_dir(repo().join("../shared/realdata")) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<std::path::PathBuf>)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let mut files: Vec<_> = std::fs::read_dir(e.path())
                .unwrap()
                .filter_map(|f| f.ok())
                .map(|f| f.path())
                .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "xml"))
                .collect();
            files.sort();
            (e.file_name().to_string_lossy().into_owned(), files)
        })
        .filter(|(_, f)| !f.is_empty())
        .collect();
    out.sort();
    out
}

/// Whether a text holds an `nvidia-smi topo -m` header line (the reader's own test).
fn has_matrix_header(text: &str) -> bool {
    text.lines()
        .any(|l| gdrdoctor_checks::paste::topo::is_header(l.trim()))
}

/// The findings' statuses add up to the summary.
fn summary_counts_findings(doc: &Value, what: &str) {
    let mut n: BTreeMap<&str, u64> = BTreeMap::new();
    for f in doc["findings"].as_array().unwrap() {
        *n.entry(f["status"].as_str().unwrap()).or_default() += 1;
    }
    for k in ["pass", "warn", "fail", "skip", "error"] {
        assert_eq!(
            doc["summary"][k].as_u64(),
            Some(n.get(k).copied().unwrap_or(0)),
            "{what}: summary.{k}"
        );
    }
}

/// `gdrdoctor diagnose FILES -f json`: exit 0, 1 or 3 with a valid report, or 2 with nothing
/// recognised (and no document). Returns the report.
fn diagnose_cli(files: &[&std::path::Path], what: &str) -> Option<Value> {
    let mut args = vec!["diagnose".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["-f".into(), "json".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&args);
    match code {
        0 | 1 | 3 => {
            let v: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("{what}: diagnose -f json is not JSON: {e}"));
            validate(gdrdoctor_checks::paste::report::SCHEMA, &v, what);
            summary_counts_findings(&v, what);
            assert_eq!(v["summary"]["exit_code"], code, "{what}");
            Some(v)
        }
        2 => {
            assert!(
                out.is_empty() && err.starts_with("gdrdoctor: error: "),
                "{what}: {err}"
            );
            None
        }
        other => panic!("{what}: diagnose exited {other}: {err}"),
    }
}

/// `gdrdoctor topo --nvidia-smi FILE -f json`: a valid `gdrdoctor.topo-paste/v1` document when
/// the file holds a matrix (exit 0), else exit 2 with the reason.
fn topo_paste_cli(file: &std::path::Path) -> Option<Value> {
    let what = format!("topo --nvidia-smi {}", file.display());
    let (code, out, err) = run(&[
        "topo",
        "--nvidia-smi",
        &file.display().to_string(),
        "-f",
        "json",
    ]);
    match code {
        0 => {
            let v: Value = serde_json::from_str(&out).unwrap();
            validate(TOPO_PASTE_SCHEMA, &v, &what);
            Some(v)
        }
        2 => {
            assert!(
                out.is_empty() && err.contains("matrix"),
                "{what}: exit 2 without naming the matrix: {err}"
            );
            None
        }
        other => panic!("{what}: exited {other}: {err}"),
    }
}

#[test]
fn topo_nvidia_smi_documents_match_the_topo_paste_schema() {
    // Every paste: a document when it holds a matrix, the reason when it does not.
    let mut n = 0;
    for f in pastes() {
        let text = std::fs::read_to_string(&f).unwrap();
        let doc = topo_paste_cli(&f);
        if has_matrix_header(&text) {
            assert!(doc.is_some(), "{}: a matrix, but no document", f.display());
        }
        n += usize::from(doc.is_some());
    }
    assert!(n >= 9, "only {n} pastes with a matrix");
    // Every real matrix, when ../shared/realdata is present.
    let mut real = 0;
    for (_, files) in real_captures() {
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            if !has_matrix_header(&text) {
                continue;
            }
            let doc = topo_paste_cli(&f);
            assert!(
                doc.is_some(),
                "{}: a real matrix, but no document",
                f.display()
            );
            real += 1;
        }
    }
    assert!(
        real == 0 || real >= 10,
        "only {real} real matrices found in ../shared/realdata"
    );
    // A node's `topo` is not a paste's: the two schemas reject each other's documents.
    let paste = pastes()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("nccl-1435-topo"))
        .unwrap();
    let doc = topo_paste_cli(&paste).unwrap();
    assert!(!validator(TOPO_SCHEMA).is_valid(&doc));
    let (_, out, _) = run(&[
        "topo",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "-f",
        "json",
    ]);
    let node: Value = serde_json::from_str(&out).unwrap();
    assert!(!validator(TOPO_PASTE_SCHEMA).is_valid(&node));
    // Strict: an undocumented field, or a value out of its set, fails.
    let v = validator(TOPO_PASTE_SCHEMA);
    assert!(v.is_valid(&doc));
    let bad: [Edit; 5] = [
        ("an undocumented pair field", |d| {
            d["pairs"][0]["why"] = Value::from("x")
        }),
        ("a verdict", |d| d["pairs"][0]["gdr"] = Value::from("maybe")),
        ("a cell", |d| d["pairs"][0]["path"] = Value::from("NEAR")),
        ("a source", |d| d["source"] = Value::from("live")),
        ("a close_nics key", |d| {
            d["close_nics"]["mlx5_0"] = Value::from(Vec::<String>::new())
        }),
    ];
    for (what, edit) in bad {
        let mut b = doc.clone();
        edit(&mut b);
        assert!(!v.is_valid(&b), "the topo-paste schema accepts {what}");
    }
}

#[test]
fn diagnose_documents_match_the_diagnose_schema() {
    let files = pastes();
    let mut n = 0;
    for f in &files {
        n += usize::from(diagnose_cli(&[f], &f.display().to_string()).is_some());
    }
    assert!(n >= 35, "only {n} pastes diagnosed");
    // All of them at once: many blocks, several matrices and logs.
    let all: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let v = diagnose_cli(&all, "every paste at once").unwrap();
    assert!(v["matrices"].as_array().unwrap().len() >= 9);
    // Each real capture, its files together, when ../shared/realdata is present.
    for (name, files) in real_captures() {
        let fs: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
        diagnose_cli(&fs, &format!("realdata {name}"));
    }
    // A paste whose verdicts are on and whose NCCL log covers the pairs: `logged`, the
    // mechanism and the per-direction fields are in the document, and match the schema.
    let t = tempfile::tempdir().unwrap();
    let mut lsmod = String::from("Module                  Size  Used by\n");
    for i in 0..30 {
        lsmod.push_str(&format!("mod{i:<20} 16384  0\n"));
    }
    lsmod.push_str("nvidia_peermem         16384  0\nnvidia              56598528  147 nvidia_uvm,nvidia_peermem\n");
    let topo = "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    PIX     SYS     0-31    0       N/A
GPU1    NV18     X      SYS     PIX     32-63   1       N/A
NIC0    PIX     SYS      X      SYS
NIC1    SYS     PIX     SYS      X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
";
    let log = "n1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
n1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>
n1:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x2 - Init START
n1:1:3 [1] NCCL INFO comm 0x3 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 9b000 commId 0x2 - Init START
n1:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA
n1:1:2 [0] NCCL INFO Connected all rings
";
    let mut paths = Vec::new();
    for (name, text) in [
        ("lsmod.txt", lsmod.as_str()),
        ("topo.txt", topo),
        ("nccl.log", log),
    ] {
        let p = t.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p);
    }
    let ps: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let v = diagnose_cli(&ps, "matrix, lsmod and nccl log").unwrap();
    let p0 = v["gdr"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gpu"] == "GPU0" && p["nic"] == "mlx5_0")
        .unwrap();
    assert_eq!(p0["gdr"], "on", "{p0}");
    assert_eq!(p0["mechanism"], "peermem", "{p0}");
    assert_eq!(p0["logged"]["send"], true, "{p0}");
    assert!(!v["nccl"]["logged_gdr"].as_array().unwrap().is_empty());
    // Strict: through the references into gdrdoctor.report.v1 too.
    let s = validator(gdrdoctor_checks::paste::report::SCHEMA);
    assert!(s.is_valid(&v));
    let bad: [Edit; 9] = [
        ("an undocumented top-level field", |v| {
            v["timestamp"] = Value::from("2026-11-30T12:00:00Z")
        }),
        ("a host that is not evidence", |v| {
            v["host"]["source"] = Value::from("live")
        }),
        ("exit code 2", |v| {
            v["summary"]["exit_code"] = Value::from(2)
        }),
        ("an evidence field the report lacks", |v| {
            v["findings"][0]["evidence"][0]["why"] = Value::from("x")
        }),
        ("a driver flavor", |v| {
            v["inventory"]["driver"]["flavor"] = Value::from("closed")
        }),
        ("a verdict", |v| v["gdr"][0]["gdr"] = Value::from("maybe")),
        ("a logged field", |v| {
            v["gdr"][0]["logged"]["via"] = Value::Null
        }),
        ("a matrix cell", |v| {
            v["matrices"][0]["rows"][0]["cells"][1] = Value::from("NV")
        }),
        ("a block kind", |v| {
            v["blocks"][0]["kind"] = Value::from("topo")
        }),
    ];
    for (what, edit) in bad {
        let mut b = v.clone();
        edit(&mut b);
        assert!(!s.is_valid(&b), "the diagnose schema accepts {what}");
    }
}

/// A pasted text damaged as terminals, trackers and mail clients damage it.
fn damaged(t: &str) -> Vec<(&'static str, String)> {
    let lines: Vec<&str> = t.lines().collect();
    let join = |v: Vec<String>| v.join("\n");
    let chars: Vec<char> = t.chars().collect();
    vec![
        ("crlf", t.replace('\n', "\r\n")),
        ("cut in half", chars[..chars.len() / 2].iter().collect()),
        (
            "every other line lost",
            join(lines.iter().step_by(2).map(|l| l.to_string()).collect()),
        ),
        (
            "lines cut at 50 columns",
            join(lines.iter().map(|l| l.chars().take(50).collect()).collect()),
        ),
        (
            "wrapped at 70 columns",
            join(
                lines
                    .iter()
                    .flat_map(|l| {
                        let c: Vec<char> = l.chars().collect();
                        c.chunks(70)
                            .map(|x| x.iter().collect::<String>())
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            ),
        ),
        (
            "control characters and colour codes",
            join(
                lines
                    .iter()
                    .enumerate()
                    .map(|(i, l)| match i % 3 {
                        0 => format!("\u{1b}[1m{l}\u{1b}[0m"),
                        1 => format!("{l}\u{0}\u{7}\u{fffd}"),
                        _ => l.replace(' ', "\u{a0}"),
                    })
                    .collect(),
            ),
        ),
        (
            "lines reversed",
            join(lines.iter().rev().map(|l| l.to_string()).collect()),
        ),
        ("doubled", format!("{t}\n{t}")),
    ]
}

#[test]
fn damaged_pastes_still_give_documents_that_match_their_schemas() {
    use gdrdoctor_checks::paste::{self, report::diagnose_paste, report::Assume, Input};
    let diag = validator(gdrdoctor_checks::paste::report::SCHEMA);
    let topo = validator(TOPO_PASTE_SCHEMA);
    let mut n = 0;
    for f in pastes() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (how, t) in damaged(&text) {
            let what = format!("{} ({how})", f.display());
            let inputs = vec![Input {
                name: f.file_name().unwrap().to_string_lossy().into_owned(),
                text: t,
            }];
            let p = paste::read(&inputs);
            if !paste::report::recognised(&p) {
                continue;
            }
            // As `diagnose -f json` and `topo --nvidia-smi -f json` write them.
            let r = diagnose_paste(
                &p,
                &inputs,
                &gdrdoctor_checks::RunOptions::default(),
                &Assume::default(),
            );
            let v = serde_json::to_value(&r).unwrap();
            let e = errors(&diag, &v);
            assert!(e.is_empty(), "{what}: diagnose:\n{}", e.join("\n"));
            summary_counts_findings(&v, &what);
            if let Some(tp) = gdrdoctor::render::topo_paste::build(&r) {
                let v = serde_json::to_value(&tp).unwrap();
                let e = errors(&topo, &v);
                assert!(e.is_empty(), "{what}: topo --nvidia-smi:\n{}", e.join("\n"));
            }
            n += 1;
        }
    }
    assert!(n >= 200, "only {n} damaged variants read");
}

#[test]
fn the_counter_state_file_matches_its_schema() {
    let t = tempfile::tempdir().unwrap();
    let values: BTreeMap<String, u64> = [
        ("ib/mlx5_0/1/link_downed".to_string(), 3),
        ("aer/0000:15:01.0/aer_dev_correctable/RxErr".to_string(), 0),
    ]
    .into_iter()
    .collect();
    gdrdoctor::state::counters::save(t.path(), "8f3c-boot", 1_764_000_000_000, &values).unwrap();
    let text =
        std::fs::read_to_string(t.path().join(gdrdoctor::state::counters::STATE_FILE)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    validate(
        gdrdoctor::state::counters::STATE_SCHEMA,
        &v,
        "counters.json",
    );
    let mut bad = v.clone();
    bad["values"]["x"] = Value::from(-1);
    assert!(!validator(gdrdoctor::state::counters::STATE_SCHEMA).is_valid(&bad));
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
    // The control character is shown escaped by the terminal sanitiser (render::sanitize,
    // issue 18) before XML sees it; U+FFFE, which XML cannot hold, is dropped.
    assert_eq!(
        msg, "a <b> & \"c\" \\x01  é",
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

/// The CUDA cache file a live `check` writes (against the stand-in libraries, on the 8-GPU
/// fixture as the node) matches its schema, and the schema is strict about it.
#[test]
fn the_cuda_cache_file_matches_its_schema() {
    let Some(l) = common::stand_ins::build() else {
        return;
    };
    let mut scenario = String::new();
    for b in ["18", "28", "38", "48", "98", "a8", "b8", "c8"] {
        scenario.push_str(&format!("gpu bdf=0000:{b}:00.0\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = common::stand_ins::Scenario::new(
        &l.current,
        fixture("hgx-h200x8-cx7x8-healthy"),
        &scenario,
    )
    .command(dir.path(), &["check", "--only", "gpu", "--format", "json"])
    .output()
    .unwrap();
    let file = dir
        .path()
        .join("state")
        .join(gdrdoctor::state::cuda_cache::CACHE_FILE);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nstderr: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["facts"]["devices"].as_array().map(Vec::len),
        Some(8),
        "{v:#}"
    );
    validate(gdrdoctor::state::cuda_cache::SCHEMA, &v, "cuda-facts.json");
    let validator = validator(gdrdoctor::state::cuda_cache::SCHEMA);
    let mut bad = v.clone();
    bad["facts"]["devices"][0]["surprise"] = Value::from(1);
    assert!(!validator.is_valid(&bad), "an unknown device field passes");
    let mut bad = v.clone();
    bad["key"]["gpus"][0]
        .as_object_mut()
        .unwrap()
        .remove("uuid");
    assert!(!validator.is_valid(&bad), "a gpu without a uuid passes");
}
