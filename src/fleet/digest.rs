//! One report in, its contribution to the roll-up out: who the node is, its exit code, the worst
//! status of every check, and every inventory field flattened to `name = value` (fed straight
//! into a per-thread aggregate, so that 10,000 reports never sit in memory at once).
//!
//! Reports are read leniently (unknown fields ignored: consumers of v1 must accept reports from
//! newer versions), but a document that is not a `gdrdoctor.report/v1` is unreadable, with the
//! reason.

use gdrdoctor_checks::report::Status;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

/// What the roll-up keeps about one node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub input: String,
    pub hostname: Option<String>,
    pub timestamp: Option<String>,
    pub source: String,
    pub command: &'static str,
    pub exit_code: i32,
    pub counts: [usize; 5],
}

#[derive(Deserialize)]
struct View {
    schema: String,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    tool: Option<ToolView>,
    host: HostView,
    summary: SummaryView,
    #[serde(default)]
    inventory: Option<Value>,
    #[serde(default)]
    findings: Vec<FindingView>,
    #[serde(default)]
    gdr: Vec<GdrView>,
    #[serde(default)]
    probe: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolView {
    #[serde(default)]
    version: Option<String>,
}

#[derive(Deserialize)]
struct HostView {
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    kernel: Option<String>,
    #[serde(default)]
    source: Option<String>,
}

#[derive(Deserialize)]
struct SummaryView {
    exit_code: i32,
}

#[derive(Deserialize)]
struct FindingView {
    id: String,
    status: Status,
    #[serde(default)]
    subject: String,
}

#[derive(Deserialize)]
struct GdrView {
    gpu: String,
    nic: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    enabled: bool,
}

/// Index of a status in count arrays: pass, warn, fail, skip, error.
pub fn slot(s: Status) -> usize {
    match s {
        Status::Pass => 0,
        Status::Warn => 1,
        Status::Fail => 2,
        Status::Skip => 3,
        Status::Error => 4,
    }
}

/// One check on one node: its worst status and the subjects that did not pass.
pub struct CheckOnNode {
    pub worst: Status,
    pub subjects: Vec<String>,
}

/// Per-check aggregate: nodes per worst status, and who did not pass.
#[derive(Default)]
pub struct CheckAgg {
    pub counts: [usize; 5],
    /// (node index, worst status, subjects not passing), for warn, fail and error.
    pub not_passing: Vec<(u32, Status, Vec<String>)>,
}

/// Per-field aggregate: value -> node indices.
pub type FieldAgg = HashMap<String, Vec<u32>>;

/// What one worker thread accumulates.
#[derive(Default)]
pub struct Partial {
    pub nodes: Vec<(u32, NodeInfo)>,
    pub unreadable: Vec<(u32, super::input::Unreadable)>,
    pub checks: HashMap<String, CheckAgg>,
    pub fields: HashMap<String, FieldAgg>,
    /// Order in which check ids were first seen (registry order of the first report).
    pub check_order: Vec<String>,
}

/// Fields left out by default: they differ from node to node by design.
pub const VOLATILE: &[&str] = &[
    "cmdline.root",
    "cmdline.resume",
    "cmdline.rd.luks.uuid",
    "cmdline.rd.lvm.lv",
];

pub struct Digester<'a> {
    pub ignore: &'a [String],
}

impl Digester<'_> {
    fn ignored(&self, key: &str) -> bool {
        self.ignore.iter().any(|p| key.starts_with(p.as_str()))
            || VOLATILE.iter().any(|p| key == *p)
            // BAR addresses depend on the firmware's allocation; sizes are what matter.
            || key.ends_with(".start")
    }

    /// Parse one report and add it to `part` as node `idx`.
    pub fn digest(
        &self,
        idx: u32,
        input: &str,
        bytes: &[u8],
        part: &mut Partial,
    ) -> Result<(), String> {
        let v: View = serde_json::from_slice(bytes).map_err(|e| {
            if e.is_eof() && bytes.iter().all(u8::is_ascii_whitespace) {
                "empty file".to_string()
            } else {
                format!("not a gdrdoctor json report: {e}")
            }
        })?;
        if !v.schema.starts_with("gdrdoctor.report/") {
            return Err(format!("schema `{}` is not a gdrdoctor report", v.schema));
        }
        if v.schema != gdrdoctor_checks::report::SCHEMA {
            return Err(format!(
                "schema `{}`: this gdrdoctor reads {}",
                v.schema,
                gdrdoctor_checks::report::SCHEMA
            ));
        }
        let mut counts = [0usize; 5];
        let mut per_check: Vec<(String, CheckOnNode)> = Vec::new();
        for f in &v.findings {
            counts[slot(f.status)] += 1;
            match per_check.iter_mut().find(|(id, _)| *id == f.id) {
                Some((_, c)) => {
                    if f.status > c.worst {
                        c.worst = f.status;
                    }
                    if !matches!(f.status, Status::Pass | Status::Skip) {
                        c.subjects.push(f.subject.clone());
                    }
                }
                None => per_check.push((
                    f.id.clone(),
                    CheckOnNode {
                        worst: f.status,
                        subjects: if matches!(f.status, Status::Pass | Status::Skip) {
                            vec![]
                        } else {
                            vec![f.subject.clone()]
                        },
                    },
                )),
            }
        }
        for (id, c) in per_check {
            let agg = match part.checks.get_mut(&id) {
                Some(a) => a,
                None => {
                    part.check_order.push(id.clone());
                    part.checks.entry(id).or_default()
                }
            };
            agg.counts[slot(c.worst)] += 1;
            if matches!(c.worst, Status::Warn | Status::Fail | Status::Error) {
                agg.not_passing.push((idx, c.worst, c.subjects));
            }
        }
        // Fields.
        let mut sink = |k: &str, val: &str| {
            if self.ignored(k) {
                return;
            }
            let f = match part.fields.get_mut(k) {
                Some(f) => f,
                None => part.fields.entry(k.to_string()).or_default(),
            };
            match f.get_mut(val) {
                Some(n) => n.push(idx),
                None => {
                    f.insert(val.to_string(), vec![idx]);
                }
            }
        };
        sink("kernel", v.host.kernel.as_deref().unwrap_or("null"));
        sink(
            "tool.version",
            v.tool
                .as_ref()
                .and_then(|t| t.version.as_deref())
                .unwrap_or("null"),
        );
        if let Some(inv) = &v.inventory {
            let mut key = String::new();
            flatten_inventory(&mut key, inv, &mut sink);
        }
        // GDR: per GPU, the NICs it has GPUDirect RDMA with and at what distance.
        let mut per_gpu: Vec<(&str, Vec<String>)> = Vec::new();
        for p in &v.gdr {
            let e = match per_gpu.iter_mut().find(|(g, _)| *g == p.gpu) {
                Some(e) => e,
                None => {
                    per_gpu.push((&p.gpu, vec![]));
                    let n = per_gpu.len() - 1;
                    &mut per_gpu[n]
                }
            };
            if p.enabled {
                e.1.push(format!("{} {}", p.nic, p.path));
            }
        }
        for (g, nics) in per_gpu {
            let val = if nics.is_empty() {
                "none".to_string()
            } else {
                nics.join(", ")
            };
            sink(&format!("gdr[{g}]"), &val);
        }
        part.nodes.push((
            idx,
            NodeInfo {
                input: input.to_string(),
                hostname: v.host.hostname,
                timestamp: v.timestamp,
                source: v.host.source.unwrap_or_else(|| "unknown".into()),
                command: if v.probe.is_some() { "probe" } else { "check" },
                exit_code: v.summary.exit_code,
                counts,
            },
        ));
        Ok(())
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// The field that names an element of an inventory list.
fn element_id(o: &serde_json::Map<String, Value>) -> Option<String> {
    for k in ["ibdev", "bdf", "port", "index"] {
        if let Some(v) = o.get(k).and_then(scalar) {
            return Some(v);
        }
    }
    None
}

/// The value of a container (an object, a list element, the command line) that is present:
/// fields inside it count only on the nodes where it is.
pub const PRESENT: &str = "(present)";

fn flatten_inventory(key: &mut String, inv: &Value, sink: &mut impl FnMut(&str, &str)) {
    let Value::Object(top) = inv else {
        sink("inventory", "not an object");
        return;
    };
    for (k, v) in top {
        let len = key.len();
        key.push_str(k);
        if k == "cmdline" {
            cmdline(key, v, sink);
        } else {
            flatten(key, v, sink);
        }
        key.truncate(len);
    }
}

/// `cmdline.KEY = value` (`(flag)` for a bare parameter; repeated keys joined by spaces).
fn cmdline(key: &mut String, v: &Value, sink: &mut impl FnMut(&str, &str)) {
    let Value::Array(items) = v else {
        sink(key, &scalar(v).unwrap_or_else(|| "?".into()));
        return;
    };
    sink(key, PRESENT);
    let mut by: Vec<(String, Vec<String>)> = Vec::new();
    for it in items {
        let s = scalar(it).unwrap_or_default();
        let (k, val) = match s.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (s.clone(), "(flag)".to_string()),
        };
        match by.iter_mut().find(|(x, _)| *x == k) {
            Some((_, vals)) => vals.push(val),
            None => by.push((k, vec![val])),
        }
    }
    for (k, vals) in by {
        let len = key.len();
        key.push('.');
        key.push_str(&k);
        sink(key, &vals.join(" "));
        key.truncate(len);
    }
}

fn flatten(key: &mut String, v: &Value, sink: &mut impl FnMut(&str, &str)) {
    match v {
        Value::Object(o) => {
            sink(key, PRESENT);
            for (k, v) in o {
                let len = key.len();
                key.push('.');
                key.push_str(k);
                flatten(key, v, sink);
                key.truncate(len);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            {
                let len = key.len();
                key.push_str(".count");
                sink(key, &items.len().to_string());
                key.truncate(len);
            }
            for (i, it) in items.iter().enumerate() {
                let id = match it {
                    Value::Object(o) => element_id(o).unwrap_or_else(|| format!("#{i}")),
                    _ => format!("#{i}"),
                };
                let len = key.len();
                key.push('[');
                key.push_str(&id);
                key.push(']');
                sink(key, PRESENT);
                match it {
                    Value::Object(o) => {
                        for (k, v) in o {
                            let l2 = key.len();
                            key.push('.');
                            key.push_str(k);
                            flatten(key, v, sink);
                            key.truncate(l2);
                        }
                    }
                    other => sink(key, &scalar(other).unwrap_or_default()),
                }
                key.truncate(len);
            }
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().filter_map(scalar).collect();
            sink(key, &parts.join(" "));
        }
        other => sink(key, &scalar(other).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn inventory_flattens_by_element_id() {
        let inv = serde_json::json!({
            "gpus": [{"bdf": "0000:18:00.0", "bars": [{"index": 1, "size": 5, "start": "0x1"}]}],
            "nics": [{"ibdev": "mlx5_0", "fw_ver": "1", "ports": [{"port": 1, "rate": "400"}]}],
            "cmdline": ["ro", "iommu=pt", "root=UUID=1"],
            "env": {"NCCL_IB_HCA": "mlx5"},
        });
        let mut got: Vec<(String, String)> = Vec::new();
        let mut key = String::new();
        flatten_inventory(&mut key, &inv, &mut |k: &str, v: &str| {
            got.push((k.into(), v.into()))
        });
        let has = |k: &str, v: &str| got.iter().any(|(a, b)| a == k && b == v);
        assert!(has("gpus.count", "1"));
        assert!(has("gpus[0000:18:00.0]", PRESENT));
        assert!(has("env", PRESENT) && has("cmdline", PRESENT));
        assert!(has("gpus[0000:18:00.0].bars[1].size", "5"));
        assert!(has("nics[mlx5_0].fw_ver", "1"));
        assert!(has("nics[mlx5_0].ports[1].rate", "400"));
        assert!(has("cmdline.ro", "(flag)"));
        assert!(has("cmdline.iommu", "pt"));
        assert!(has("cmdline.root", "UUID=1"));
        assert!(has("env.NCCL_IB_HCA", "mlx5"));
        let d = Digester { ignore: &[] };
        assert!(d.ignored("cmdline.root") && d.ignored("gpus[x].bars[1].start"));
        assert!(!d.ignored("gpus[x].bars[1].size"));
    }
}
