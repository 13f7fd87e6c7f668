//! The `gdrdoctor.diagnose/v1` report and its parts.

use crate::paste::nccl::LoggedGdr;
use crate::paste::verdict::PastePair;
use crate::report::{self, Finding};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

pub const SCHEMA: &str = "gdrdoctor.diagnose/v1";

/// A block id: `b1`, `b2`, ... in order over all inputs.
pub const BLOCK_PATTERN: &str = "^b[1-9][0-9]*$";

/// The pasted NCCL log as diagnose reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(rename = "nccl")]
pub struct NcclSummary {
    /// The block of the log.
    #[schemars(regex(pattern = BLOCK_PATTERN))]
    pub block: String,
    /// Every `NCCL version` the log shows.
    pub versions: Vec<String>,
    /// The `NCCL_*` environment the log (and the pasted env) shows.
    pub env: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    /// The networks NCCL used (`IB`, `Socket`, a plugin's name).
    pub networks: Vec<String>,
    pub net_devices: Vec<crate::paste::nccl::NetDevice>,
    pub nic_gdr: Vec<crate::paste::nccl::NicGdr>,
    pub gpu_gdr: Vec<crate::paste::nccl::GpuGdr>,
    /// NCCL's decision per local GPU, NIC and direction, from its channel lines.
    pub logged_gdr: Vec<LoggedGdr>,
    /// How many connection lines used each transport (`NET/IB/GDRDMA`, `NET/IB`, `P2P/CUMEM`, ..).
    #[schemars(extend("additionalProperties" = {"type": "integer", "minimum": 1}))]
    pub transports: BTreeMap<String, usize>,
    /// The job view: every rank with its host, process, GPU, NICs, GDR (NCCL's word) and the
    /// transport to each peer.
    pub ranks: Vec<super::job::RankView>,
    /// Logged decisions no pasted pair can take (a multi-host log whose hosts differ, a GPU
    /// neither by bus id nor by nvmlDev), with why.
    pub unplaced: Vec<super::pairs::Unplaced>,
    /// The runs of a block that held several, side by side (the verdicts follow the last).
    pub runs: Vec<super::job::RunView>,
    /// Lines read without NCCL's prefix (lower confidence).
    pub unprefixed_lines: usize,
}

/// A pasted `nvidia-smi topo -m` matrix, with the block it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(rename = "matrix")]
pub struct MatrixView {
    #[schemars(regex(pattern = BLOCK_PATTERN))]
    pub block: String,
    #[serde(flatten)]
    pub matrix: crate::paste::topo::Matrix,
}

/// One input of the paste.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(rename = "input")]
pub struct InputInfo {
    /// The file name, or `stdin`.
    pub name: String,
    pub lines: usize,
    pub bytes: usize,
}

/// The `gdrdoctor.diagnose/v1` report.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct DiagnoseReport {
    pub schema: String,
    pub tool: report::Tool,
    /// The report's host, whose source is always `evidence`.
    #[schemars(extend("properties" = {"source": {"const": "evidence"}}))]
    pub host: report::Host,
    /// The report's summary; exit code 2 (could not run) never appears in a report.
    #[schemars(extend("properties" = {"exit_code": {"enum": [0, 1, 3]}}))]
    pub summary: report::Summary,
    pub inputs: Vec<InputInfo>,
    pub blocks: Vec<crate::paste::Block>,
    pub findings: Vec<Finding>,
    /// One verdict per GPU x NIC pair of each matrix (or per logged pair without a matrix).
    pub gdr: Vec<PastePair>,
    /// The GDR distance threshold the verdicts used (NCCL's name, or 2.4-2.5's integer).
    pub gdr_level: String,
    /// Where the threshold came from.
    pub gdr_level_source: String,
    /// Whose rules the verdicts follow: `NCCL 2.19.3 rules (`NCCL version 2.19.3+cuda12.3` in
    /// b2 (...))`, `--nccl-version`, or the newest rules when the paste shows no version.
    pub nccl_rules: String,
    /// Node-wide remarks of the rule: the environment's effects (PXN disabled, ignored values),
    /// unknown NVLink-C2C.
    pub gdr_notes: Vec<String>,
    pub matrices: Vec<MatrixView>,
    /// The pasted NCCL log; null when the paste holds none.
    #[schemars(extend("x-required" = true))]
    pub nccl: Option<NcclSummary>,
    pub inventory: report::Inventory,
}

impl DiagnoseReport {
    /// The same findings as a `gdrdoctor.report/v1` shape, for the renderers that take one.
    pub fn as_report(&self) -> report::Report {
        report::Report {
            schema: report::SCHEMA.to_string(),
            tool: self.tool.clone(),
            timestamp: None,
            host: self.host.clone(),
            summary: self.summary.clone(),
            inventory: self.inventory.clone(),
            findings: self.findings.clone(),
            gdr: Vec::new(),
            probe: None,
        }
    }
}

/// The published JSON Schema of `gdrdoctor diagnose --format json`
/// (docs/schema/gdrdoctor.diagnose.v1.schema.json), derived from [`DiagnoseReport`]; `tool`,
/// `host`, `summary`, `findings` and `inventory` refer to the report schema beside it.
pub fn json_schema() -> serde_json::Value {
    // Every type of the report's (its $defs: tool, host, summary, finding, inventory and the
    // inventory's parts) is referred to there, not copied.
    let report = report::json_schema();
    let shared: Vec<&str> = report["$defs"]
        .as_object()
        .map(|d| d.keys().map(String::as_str).collect())
        .unwrap_or_default();
    crate::schema::published_referring::<DiagnoseReport>(
        SCHEMA,
        "`gdrdoctor diagnose --format json`: the report of pasted text (docs/report-format.md), derived from the serde types. tool, host, summary, findings and inventory are those of gdrdoctor.report/v1, referred to in gdrdoctor.report.v1.schema.json beside this file (no $id here, so that the reference resolves against this file's location). v1 only grows: objects take members they do not know, and consumers must ignore fields they do not know.",
        report::SCHEMA,
        &shared,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::{json, Value};

    fn required(v: &Value) -> Vec<&str> {
        v["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn the_diagnose_schema_refers_to_the_report_schema_and_copies_none_of_it() {
        let v = json_schema();
        let report = report::json_schema();
        assert!(v.get("$id").is_none(), "a referring schema has no $id");
        assert_eq!(v["title"], SCHEMA);
        assert_eq!(v["properties"]["schema"]["const"], SCHEMA);
        let file = "gdrdoctor.report.v1.schema.json#/$defs/";
        for (member, def) in [
            ("tool", "tool"),
            ("host", "host"),
            ("summary", "summary"),
            ("inventory", "inventory"),
        ] {
            assert_eq!(
                v["properties"][member]["$ref"],
                format!("{file}{def}"),
                "{member}"
            );
        }
        assert_eq!(
            v["properties"]["findings"]["items"]["$ref"],
            format!("{file}finding")
        );
        // The diagnose's own types keep names of their own: none is a report type's name,
        // which would send its references to the report's type instead.
        let own = v["$defs"].as_object().unwrap();
        for name in report["$defs"].as_object().unwrap().keys() {
            assert!(!own.contains_key(name), "{name} copied from the report");
        }
        for name in [
            "input",
            "block",
            "pair",
            "logged",
            "matrix",
            "row",
            "origin",
            "nccl",
            "net_device",
            "nic_gdr",
            "gpu_gdr",
            "logged_gdr",
            "rank_view",
            "unplaced",
            "run_view",
        ] {
            assert_eq!(own[name]["additionalProperties"], true, "{name}: v1 grows");
        }
        // The narrowings of the report's types are no objects of their own.
        assert_eq!(
            v["properties"]["host"]["properties"]["source"],
            json!({ "const": "evidence" })
        );
        assert_eq!(
            v["properties"]["summary"]["properties"]["exit_code"]["enum"],
            json!([0, 1, 3])
        );
        assert!(v["properties"]["host"]
            .get("additionalProperties")
            .is_none());
        assert!(!crate::schema::text(&v).contains("x-required"));
    }

    #[test]
    fn the_diagnose_schema_keeps_its_sets_patterns_and_required_members() {
        let v = json_schema();
        let d = &v["$defs"];
        let kinds: Vec<&Value> = d["block_kind"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| &k["const"])
            .collect();
        assert_eq!(kinds.len(), 16);
        assert!(kinds.contains(&&json!("topo-matrix")) && kinds.contains(&&json!("unrecognised")));
        assert_eq!(d["gdr_verdict"]["enum"], json!(["on", "off", "unknown"]));
        let pair = &d["pair"]["properties"];
        assert_eq!(
            pair["path"]["enum"],
            json!(["PIX", "PXB", "PHB", "SYS", "?"])
        );
        assert_eq!(pair["nccl_path"]["enum"], json!(["PXN", "P2C", null]));
        assert_eq!(
            pair["mechanism"]["enum"],
            json!(["peermem", "dmabuf", "peermem or dmabuf", null])
        );
        assert_eq!(pair["gpu"]["pattern"], "^GPU[0-9]+$");
        assert_eq!(d["block"]["properties"]["id"]["pattern"], BLOCK_PATTERN);
        // Always written, null when unknown: required. Left out when unknown: optional, and
        // never null.
        assert!(required(&d["pair"]).contains(&"via"));
        assert!(!required(&d["pair"]).contains(&"logged"));
        assert_eq!(pair["logged"]["$ref"], "#/$defs/logged");
        assert_eq!(required(&d["origin"]), ["dev", "host", "line", "pid"]);
        assert_eq!(d["origin"]["properties"]["rank"]["type"], "integer");
        assert_eq!(d["origin"]["properties"]["unprefixed"]["const"], true);
        assert!(!required(&d["logged_gdr"]).contains(&"bus_id"));
        assert!(required(&d["logged_gdr"]).contains(&"direction"));
        assert_eq!(
            d["logged_gdr"]["properties"]["direction"]["enum"],
            json!(["send", "receive", null])
        );
        assert!(required(&v).contains(&"nccl"));
        assert_eq!(
            d["nccl"]["properties"]["transports"]["additionalProperties"]["minimum"],
            1
        );
        assert_eq!(d["row"]["properties"]["line"]["minimum"], 1);
    }
}
