//! The JSON Schemas of `docs/schema/` that are derived from the serde types (`schemars`), so that
//! the published contract cannot drift from what the code writes and reads.
//!
//! A type derives `JsonSchema` next to `Serialize`/`Deserialize`; its attributes carry what the
//! types alone do not say (the set of values of a string, a pattern, a field that is always
//! written even when null). The schema is made for the reader's contract (what the type's
//! `Deserialize` needs: a field with `#[serde(default)]` may be absent, which is how v1 grew),
//! and `#[schemars(extend("x-required" = true))]` on the fields that every v1 document carries,
//! null when unknown (`#[schemars(required)]` would also drop the `null`): [`published`] moves
//! each such property into its object's `required` list. A type without `Deserialize` (the
//! outputs only written) marks the members added later in v1, which a consumer may not find in
//! an older document, with `extend("x-optional" = true)`: they leave `required`.
//!
//! Published, a document v1 may grow takes members it does not know: every struct's object
//! (closed by `#[serde(deny_unknown_fields)]` or not) gets `"additionalProperties": true`; the
//! policy, whose loader refuses unknown keys, gets `false`. The project's tests close them again (tests/contracts/),
//! so that a field the code adds without a schema change fails there. Members set beside a
//! `$ref` by `extend("properties" = ...)` narrow the object referred to (diagnose's
//! `host.source` is `evidence`): they are left without `additionalProperties`, which would
//! refuse the referred object's own members.
//! `tests/contracts/schemas.rs` compares each file of docs/schema with [`crate::schemas::DERIVED`]'s
//! output and rewrites it under `GDRDOCTOR_UPDATE_GOLDEN=1`. This module knows no document of
//! the crate (the registry of them is [`crate::schemas`], above the documents): the report's
//! own schema function calls it, and it must not call back.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The published schema of `T` under `id`: draft 2020-12, `$id` `urn:gdrdoctor:schema:<id>`,
/// the title `id`, `description`; the `schema` member is the constant `id`; every closed object
/// opened (`open`: the document may grow) or left closed.
pub fn published<T: JsonSchema>(id: &str, description: &str, open: bool) -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(top) = &mut v {
        top.insert("$id".into(), format!("urn:gdrdoctor:schema:{id}").into());
        top.insert("title".into(), id.into());
        top.insert("description".into(), description.into());
        if let Some(Value::Object(props)) = top.get_mut("properties") {
            props.insert("schema".into(), serde_json::json!({ "const": id }));
        }
    }
    tidy(&mut v, open);
    v
}

/// The published schema of a TOML document (closed: its loader refuses unknown keys): TOML has
/// no null, so an absent key is how an `Option` says `None`, and no `null` is offered.
pub fn published_toml<T: JsonSchema>(id: &str, description: &str) -> Value {
    let mut v = published::<T>(id, description, false);
    no_null(&mut v);
    v
}

fn no_null(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(types)) = m.get_mut("type") {
                types.retain(|t| t != "null");
                if types.len() == 1 {
                    let t = types.remove(0);
                    m.insert("type".into(), t);
                }
            }
            if let Some(Value::Array(values)) = m.get_mut("enum") {
                values.retain(|x| !x.is_null());
            }
            if m.get("default").is_some_and(Value::is_null) {
                m.remove("default");
            }
            // `anyOf: [X, {"type": "null"}]` (an optional reference): X.
            if let Some(Value::Array(alts)) = m.get_mut("anyOf") {
                alts.retain(|x| x != &serde_json::json!({ "type": "null" }));
                if alts.len() == 1 {
                    if let Some(Value::Object(only)) = alts.pop() {
                        m.remove("anyOf");
                        for (k, x) in only {
                            m.entry(k).or_insert(x);
                        }
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                if k != "const" && k != "enum" && k != "default" {
                    no_null(x);
                }
            }
            sort(m);
        }
        Value::Array(a) => a.iter_mut().for_each(no_null),
        _ => {}
    }
}

/// The published schema of `T` as [`published`] (open), for a document that shares types with
/// the report: each of `report_defs` (names in the `$defs` of the schema `report_id`, the
/// report's) is referred to in that schema's file beside it (`gdrdoctor.report.v1.schema.json`)
/// instead of copied, and the schema has no `$id` (the reference resolves against the file's
/// own location).
pub fn published_referring<T: JsonSchema>(
    id: &str,
    description: &str,
    report_id: &str,
    report_defs: &[&str],
) -> Value {
    let mut v = published::<T>(id, description, true);
    if let Value::Object(top) = &mut v {
        top.remove("$id");
        if let Some(Value::Object(defs)) = top.get_mut("$defs") {
            for name in report_defs {
                defs.remove(*name);
            }
            if defs.is_empty() {
                top.remove("$defs");
            }
        }
    }
    let file = format!("{}.schema.json", report_id.replace('/', "."));
    refer(&mut v, &file, report_defs);
    v
}

fn refer(v: &mut Value, file: &str, report_defs: &[&str]) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get_mut("$ref") {
                if let Some(name) = r.strip_prefix("#/$defs/") {
                    if report_defs.contains(&name) {
                        *r = format!("{file}#/$defs/{name}");
                    }
                }
            }
            m.values_mut().for_each(|x| refer(x, file, report_defs));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| refer(x, file, report_defs)),
        _ => {}
    }
}

/// Any JSON object, its members not described (a probe's raw measurements): no
/// `additionalProperties` that the strict variant of the tests would close.
pub fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// The text of a schema file: two-space indents, a final newline.
pub fn text(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// Open the closed objects (when `open`) and drop schemars' own integer formats (`uint32`,
/// `int64`, `double`...), which no validator knows: the integer type and its minimum say it.
fn tidy(v: &mut Value, open: bool) {
    match v {
        Value::Object(m) => {
            let mut always = Vec::new();
            let mut later = Vec::new();
            if let Some(Value::Object(props)) = m.get_mut("properties") {
                for (name, p) in props.iter_mut() {
                    if let Some(p) = p.as_object_mut() {
                        if p.remove("x-required").is_some() {
                            always.push(Value::from(name.as_str()));
                        }
                        if p.remove("x-optional").is_some() {
                            later.push(Value::from(name.as_str()));
                        }
                    }
                }
            }
            if let Some(Value::Array(r)) = m.get_mut("required") {
                r.retain(|n| !later.contains(n));
            }
            if !always.is_empty() {
                let required = m
                    .entry("required")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(r) = required {
                    for name in always {
                        if !r.contains(&name) {
                            r.push(name);
                        }
                    }
                }
            }
            // In name order: the same file whichever map serde_json was built with (the
            // members marked above come in the map's order).
            if let Some(Value::Array(r)) = m.get_mut("required") {
                r.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
            // Every struct's object (closed by `deny_unknown_fields` or not): open when
            // published, closed otherwise (the tests close the published ones again). Members
            // beside a `$ref` narrow the object referred to (diagnose's `host.source`): no
            // object of their own, whose `additionalProperties` would refuse the referred
            // object's members.
            if m.contains_key("properties")
                && !m.contains_key("$ref")
                && matches!(m.get("additionalProperties"), None | Some(Value::Bool(_)))
            {
                m.insert("additionalProperties".into(), Value::Bool(open));
            }
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f != "date-time")
            {
                m.remove("format");
            }
            for (k, x) in m.iter_mut() {
                // A `const` or `enum` is a value, not a schema.
                if k != "const" && k != "enum" && k != "default" {
                    tidy(x, open);
                }
            }
            sort(m);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| tidy(x, open)),
        _ => {}
    }
}

/// Keys in sorted order, whichever map serde_json was built with.
fn sort(m: &mut Map<String, Value>) {
    let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    m.extend(entries);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A document with a member always written (null when unknown), one added later, one the
    /// reader defaults, and a nested object.
    #[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        schema: String,
        #[schemars(extend("x-required" = true))]
        always: Option<String>,
        #[serde(default)]
        later: Option<u32>,
        #[schemars(extend("x-optional" = true))]
        written_later: Vec<String>,
        inner: Inner,
        maybe: Option<Inner>,
    }

    /// Not closed by its type: the published file still opens it and the tests close it.
    #[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
    struct Inner {
        n: u8,
    }

    fn required(v: &Value) -> Vec<&str> {
        let mut r: Vec<&str> = v["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        r.sort();
        r
    }

    #[test]
    fn required_and_open_follow_the_markers() {
        let v = published::<Doc>("example.doc/v1", "d", true);
        assert_eq!(v["$id"], "urn:gdrdoctor:schema:example.doc/v1");
        assert_eq!(
            v["properties"]["schema"],
            serde_json::json!({ "const": "example.doc/v1" })
        );
        assert_eq!(required(&v), ["always", "inner", "schema"]);
        assert_eq!(
            v["properties"]["always"]["type"],
            serde_json::json!(["string", "null"])
        );
        assert!(!text(&v).contains("x-required") && !text(&v).contains("x-optional"));
        assert_eq!(v["additionalProperties"], true);
        assert_eq!(v["$defs"]["Inner"]["additionalProperties"], true);
        let closed = published::<Doc>("example.doc/v1", "d", false);
        assert_eq!(closed["additionalProperties"], false);
        assert_eq!(closed["$defs"]["Inner"]["additionalProperties"], false);
    }

    #[test]
    fn toml_schemas_offer_no_null() {
        let v = published_toml::<Doc>("example.doc/v1", "d");
        let t = text(&v);
        assert!(!t.contains("null"), "{t}");
        assert_eq!(v["properties"]["always"]["type"], "string");
        assert_eq!(v["properties"]["maybe"]["$ref"], "#/$defs/Inner");
    }
}
