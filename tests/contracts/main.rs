//! The machine contracts: every JSON document validates against its schema in docs/schema/ (and
//! every schema id has a schema), the CLI's JSON equals the golden report once the timestamp is
//! normalised, JUnit follows the Jenkins xUnit `junit-10.xsd` rules, `check` and `probe`
//! Prometheus files merge in one textfile directory without a collision, and `--format oneline`
//! stays under 80 bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
use common::*;
use gdrdoctor::render::{self, Format, Style};
use gdrdoctor_checks::report::Report;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

mod junit;
mod oneline;
mod pastes;
mod prometheus;
mod schemas;

fn schema_dir() -> std::path::PathBuf {
    repo().join("docs/schema")
}

fn schema_file(id: &str) -> std::path::PathBuf {
    schema_dir().join(format!("{}.schema.json", id.replace('/', ".")))
}

/// Schema `id` as published: an object of a document that may grow (every output of v1) takes
/// members it does not know (`"additionalProperties": true`), so that a consumer pinning this
/// schema still reads the next release's reports.
fn published_schema(id: &str) -> Value {
    let file = schema_file(id);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}: every schema id needs a schema", file.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["title"], id, "{}", file.display());
    v
}

/// The strict variant the project's own tests use: every object that takes unknown members in
/// the published schema rejects them, so that a field the code adds without documenting it (in
/// the schema and docs/report-format.md) fails here.
fn strict(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.get("additionalProperties") == Some(&Value::Bool(true)) {
                    m.insert("additionalProperties".into(), Value::Bool(false));
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// The strict variant of schema `id` ([`strict`]).
fn schema(id: &str) -> Value {
    strict(published_schema(id))
}

/// Serves `$ref`s to the schema files beside the referring one (`gdrdoctor.report.v1.schema.json#/$defs/finding`),
/// read from docs/schema, and nothing else: no network, no other directory.
struct SchemaDir {
    /// Serve the strict variants ([`strict`]) of the files referred to.
    strict: bool,
}

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
        let v: Value = serde_json::from_str(&text)?;
        Ok(if self.strict { strict(v) } else { v })
    }
}

/// The validator of schema `id`, its references to the other files of docs/schema resolved as
/// a validator given the file's path resolves them (the schemas that refer to another file have
/// no `$id`, so that their base is their own location).
fn validator(id: &str) -> jsonschema::Validator {
    build_validator(id, true)
}

/// The validator of schema `id` as published (unknown members allowed where v1 may grow).
fn published_validator(id: &str) -> jsonschema::Validator {
    build_validator(id, false)
}

fn build_validator(id: &str, strict: bool) -> jsonschema::Validator {
    let s = if strict {
        schema(id)
    } else {
        published_schema(id)
    };
    jsonschema::options()
        .with_base_uri(format!("file://{}", schema_file(id).display()))
        .with_retriever(SchemaDir { strict })
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
fn probe_reports() -> Vec<(String, Report)> {
    json_files("fixtures/reports")
        .into_iter()
        .map(|f| {
            let r: Report = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            (f.display().to_string(), r)
        })
        .collect()
}

type Edit = (&'static str, fn(&mut Value));

const TOPO_SCHEMA: &str = "gdrdoctor.topo/v1";
const TOPO_PASTE_SCHEMA: &str = "gdrdoctor.topo-paste/v1";
