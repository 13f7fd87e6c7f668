//! Every document gdrdoctor writes against its schema: the schemas themselves, the golden and
//! probe reports, the CLI's JSON against the golden report, policy, fleet, topo, snapshot, the
//! counter state file and the CUDA cache.

use super::*;

#[test]
fn every_schema_id_has_a_schema_and_every_schema_is_valid() {
    let ids = [
        gdrdoctor_checks::report::SCHEMA,
        gdrdoctor::collect::fleet::rollup::FLEET_SCHEMA,
        gdrdoctor::source::meta::META_SCHEMA,
        gdrdoctor_checks::policy::POLICY_SCHEMA,
        gdrdoctor_checks::paste::report::SCHEMA,
        gdrdoctor::state::counters::STATE_SCHEMA,
        gdrdoctor::state::counters::STATE_SCHEMA_V1,
        gdrdoctor::state::cuda_cache::SCHEMA,
        gdrdoctor_checks::preflight::model::SCHEMA,
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
        // As published, a document that v1 may grow takes unknown members; the policy is read
        // by a loader that refuses unknown keys (a typo must not pass silently), and says so.
        let open = id != gdrdoctor_checks::policy::POLICY_SCHEMA;
        assert_eq!(
            published_schema(id)["additionalProperties"],
            open,
            "{id}: published with additionalProperties {open} at the top"
        );
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

/// The schemas derived from the serde types (`gdrdoctor_checks::schemas::DERIVED`) are the
/// files published in docs/schema, byte for byte: a type that changes without its schema fails
/// here (rewrite the files with `GDRDOCTOR_UPDATE_GOLDEN=1` and review the diff).
#[test]
fn published_schemas_are_derived_from_the_serde_types() {
    let update = std::env::var("GDRDOCTOR_UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    let derived = gdrdoctor_checks::schemas::DERIVED
        .iter()
        .map(|d| (d.id, (d.published)()))
        .chain([
            (
                gdrdoctor::source::meta::META_SCHEMA,
                gdrdoctor::source::meta::json_schema(),
            ),
            (
                gdrdoctor::state::counters::STATE_SCHEMA,
                gdrdoctor::state::counters::json_schema(),
            ),
            (
                gdrdoctor::state::counters::STATE_SCHEMA_V1,
                gdrdoctor::state::counters::json_schema_v1(),
            ),
            (
                gdrdoctor::collect::fleet::rollup::FLEET_SCHEMA,
                gdrdoctor::collect::fleet::rollup::json_schema(),
            ),
            (TOPO_SCHEMA, gdrdoctor::render::topo::json_schema()),
            (
                TOPO_PASTE_SCHEMA,
                gdrdoctor::render::topo_paste::json_schema(),
            ),
            (
                gdrdoctor::state::cuda_cache::SCHEMA,
                gdrdoctor::state::cuda_cache::json_schema(),
            ),
        ]);
    let mut derived_ids = Vec::new();
    for (id, schema) in derived {
        derived_ids.push(id);
        let want = gdrdoctor_checks::schema::text(&schema);
        let file = schema_file(id);
        if update {
            std::fs::write(&file, &want).unwrap();
        }
        let have = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with GDRDOCTOR_UPDATE_GOLDEN=1)",
                file.display()
            )
        });
        if have != want {
            stale.push(id);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/schema differs from the schema derived from the types for {stale:?}; rerun with GDRDOCTOR_UPDATE_GOLDEN=1 and review"
    );
    // Every schema is derived: none is written by hand.
    let mut not_derived: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".schema.json"))
        .collect();
    for id in &derived_ids {
        not_derived.remove(&format!("{}.schema.json", id.replace('/', ".")));
    }
    assert!(
        not_derived.is_empty(),
        "schemas in docs/schema not derived from the types: {not_derived:?}"
    );
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

/// The contract: v1 grows by adding fields, and a consumer that pins today's published schema
/// keeps reading the next release's reports. A golden report with unknown fields added at the
/// top, in a finding, in its evidence, in the inventory and in the summary validates against
/// the published schema (and fails the strict variant the project's tests use).
#[test]
fn a_v1_report_with_new_fields_validates_against_the_published_schema() {
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(repo().join(p)).unwrap()).unwrap()
    };
    let mut v = read("fixtures/golden/hgx-h200x8-cx7x8-port-down.json");
    let published = published_validator(gdrdoctor_checks::report::SCHEMA);
    assert!(published.is_valid(&v), "{:?}", errors(&published, &v));
    v["added_in_a_later_v1"] = serde_json::json!({"anything": [1, 2, 3]});
    v["findings"][0]["severity"] = Value::from("high");
    v["findings"][0]["evidence"][0]["unit"] = Value::from("bytes");
    v["inventory"]["new_area"] = serde_json::json!({"count": 2});
    v["summary"]["duration_ms"] = Value::from(12);
    assert!(
        published.is_valid(&v),
        "the published schema rejects a grown v1 report: {:?}",
        errors(&published, &v)
    );
    assert!(!validator(gdrdoctor_checks::report::SCHEMA).is_valid(&v));
    // What the contract does not let grow still fails: a known field of the wrong type, a
    // status outside its set, a missing required field.
    let mut bad = v.clone();
    bad["findings"][0]["status"] = Value::from("fine");
    assert!(!published.is_valid(&bad));
    let mut bad = v.clone();
    bad["summary"]["exit_code"] = Value::from("one");
    assert!(!published.is_valid(&bad));
    let mut bad = v.clone();
    bad.as_object_mut().unwrap().remove("findings");
    assert!(!published.is_valid(&bad));
    // The same for diagnose, whose findings come from the report schema by reference.
    let (_, out, _) = run(&[
        "diagnose",
        &repo()
            .join("fixtures/pastes/nccl-1435-topo-pxb-numa.txt")
            .display()
            .to_string(),
        "-f",
        "json",
    ]);
    let mut d: Value = serde_json::from_str(&out).unwrap();
    d["added_in_a_later_v1"] = Value::from(true);
    d["findings"][0]["severity"] = Value::from("high");
    let published = published_validator(gdrdoctor_checks::paste::report::SCHEMA);
    assert!(published.is_valid(&d), "{:?}", errors(&published, &d));
    assert!(!validator(gdrdoctor_checks::paste::report::SCHEMA).is_valid(&d));
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

#[test]
fn the_counter_state_file_matches_its_schema() {
    let t = tempfile::tempdir().unwrap();
    let values: BTreeMap<String, u64> = [
        ("ib/mlx5_0/1/link_downed".to_string(), 3),
        ("aer/0000:15:01.0/aer_dev_correctable/RxErr".to_string(), 0),
    ]
    .into_iter()
    .collect();
    use gdrdoctor::state::counters::{record, save};
    let first = record(
        None,
        "8f3c-boot",
        &["aer/", "ib/"],
        1_764_000_000_000,
        &values,
    );
    // A second reading of one family keeps the first as its `previous`.
    let s = record(
        Some(first),
        "8f3c-boot",
        &["ib/"],
        1_764_000_060_000,
        &values,
    );
    assert!(s.families.values().any(|f| f.previous.is_some()), "{s:?}");
    save(t.path(), &s).unwrap();
    let text =
        std::fs::read_to_string(t.path().join(gdrdoctor::state::counters::STATE_FILE)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    validate(
        gdrdoctor::state::counters::STATE_SCHEMA,
        &v,
        "counters.json",
    );
    let mut bad = v.clone();
    bad["families"]["ib"]["values"]["x"] = Value::from(-1);
    assert!(!validator(gdrdoctor::state::counters::STATE_SCHEMA).is_valid(&bad));
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
