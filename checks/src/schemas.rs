//! The registry of the JSON Schemas derived from this crate's types (see [`crate::schema`] for
//! how a type's schema is made): a table above the documents, so that the helpers below them
//! (`schema`) know none of them.

/// One derived schema: its id and how to make its published text.
pub struct Derived {
    pub id: &'static str,
    pub published: fn() -> serde_json::Value,
}

/// The schemas of docs/schema derived from the types of this crate. The binary's (snapshot
/// metadata, counter state, CUDA cache, fleet, topo, topo-paste) are listed beside these by
/// `tests/contracts/schemas.rs`. Every file of docs/schema is derived.
pub const DERIVED: &[Derived] = &[
    Derived {
        id: crate::report::SCHEMA,
        published: crate::report::json_schema,
    },
    Derived {
        id: crate::preflight::model::SCHEMA,
        published: crate::preflight::model::json_schema,
    },
    Derived {
        id: crate::paste::report::SCHEMA,
        published: crate::paste::report::json_schema,
    },
    Derived {
        id: crate::policy::POLICY_SCHEMA,
        published: crate::policy::types::json_schema,
    },
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use crate::schema::*;
    use schemars::JsonSchema;

    #[test]
    fn a_referring_schema_points_into_the_report_schema() {
        #[derive(serde::Serialize, JsonSchema)]
        struct Answer {
            schema: String,
            findings: Vec<crate::report::Finding>,
        }
        let v = published_referring::<Answer>(
            "example.answer/v1",
            "d",
            crate::report::SCHEMA,
            &["finding", "evidence"],
        );
        assert!(v.get("$id").is_none(), "a referring schema has no $id");
        assert_eq!(
            v["properties"]["findings"]["items"]["$ref"],
            "gdrdoctor.report.v1.schema.json#/$defs/finding"
        );
        assert!(v.get("$defs").is_none(), "{}", text(&v));
    }

    #[test]
    fn the_report_schema_is_open_where_v1_grows_and_keeps_its_sets_and_patterns() {
        let v = crate::report::json_schema();
        assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(v["title"], crate::report::SCHEMA);
        assert_eq!(v["properties"]["schema"]["const"], crate::report::SCHEMA);
        assert_eq!(v["additionalProperties"], true);
        let d = &v["$defs"];
        for name in [
            "tool",
            "host",
            "summary",
            "finding",
            "inventory",
            "gdr",
            "evidence",
        ] {
            assert_eq!(d[name]["additionalProperties"], true, "{name}");
        }
        assert_eq!(
            d["finding"]["properties"]["status"]["enum"],
            serde_json::json!(["pass", "skip", "warn", "error", "fail"])
        );
        assert_eq!(
            d["host"]["properties"]["source"]["enum"],
            serde_json::json!(["live", "sysroot", "host-root", "evidence"])
        );
        assert_eq!(
            d["summary"]["properties"]["exit_code"]["enum"],
            serde_json::json!([0, 1, 2, 3])
        );
        assert_eq!(
            d["gpu"]["properties"]["bdf"]["pattern"],
            crate::report::BDF_PATTERN
        );
        // Always written even when null: required. Added later in v1: optional.
        let req = |def: &str| d[def]["required"].as_array().cloned().unwrap_or_default();
        assert!(
            req("host").contains(&"hostname".into()),
            "{:?}",
            req("host")
        );
        assert!(req("pci").contains(&"parent".into()));
        assert!(!req("pci").contains(&"config_bytes".into()));
        assert!(!req("gdr").contains(&"send".into()));
        assert!(!v["required"]
            .as_array()
            .unwrap()
            .contains(&"timestamp".into()));
        // No schemars-only formats.
        assert!(!text(&v).contains("\"uint"), "{}", text(&v));
    }
}
