//! One report in, its contribution to the roll-up out: who the node is, its exit code, the worst
//! status of every check, and every inventory field flattened to `name = value` (fed straight
//! into a per-thread aggregate, so that 10,000 reports never sit in memory at once).
//!
//! Reports are read leniently (unknown fields ignored: consumers of v1 must accept reports from
//! newer versions), but a document that is not a `gdrdoctor.report/v1` is unreadable, with the
//! reason.

pub use super::flat::PRESENT;
use super::nodeset::NodeSet;
use gdrdoctor_checks::report::Status;
use serde::Deserialize;
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
    /// Per check and finding detail, kept only for the HTML page ([`Digester::detail`]).
    pub detail: Option<NodeDetail>,
}

/// What the HTML page shows of one node beyond its counts.
#[derive(Debug, Clone, Default)]
pub struct NodeDetail {
    /// The worst status of every check in the node's report, in report order.
    pub worst: Vec<(String, Status)>,
    /// Its warn, fail and error findings, in report order.
    pub findings: Vec<DetailFinding>,
}

/// One non-passing finding, as the report has it.
#[derive(Debug, Clone)]
pub struct DetailFinding {
    pub id: String,
    pub status: Status,
    pub subject: String,
    pub message: String,
    pub remediation: Option<String>,
}

#[derive(Deserialize)]
struct View<'a> {
    schema: String,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    tool: Option<ToolView>,
    host: HostView,
    summary: SummaryView,
    #[serde(default)]
    inventory: Option<super::flat::Inventory>,
    #[serde(default, borrow)]
    findings: Vec<FindingView<'a>>,
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
struct FindingView<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    status: Status,
    #[serde(default, borrow)]
    subject: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    message: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    remediation: Option<std::borrow::Cow<'a, str>>,
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

/// Per-field aggregate: value -> nodes. In a [`Partial`], a node is its position in
/// `Partial::nodes` (a worker numbers its own nodes 0, 1, 2, ... so that a value shared by
/// every node is one run); the roll-up maps them to the fleet's input numbers.
pub type FieldAgg = HashMap<String, NodeSet>;

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
    /// Keep each node's worst status per check and its non-passing findings (`--format
    /// html`); the other formats need only the aggregates.
    pub detail: bool,
}

impl Digester<'_> {
    fn ignored(&self, key: &str) -> bool {
        // An empty entry is a prefix of every key: it leaves nothing out (the command line
        // refuses one; a caller that passes one does not hide all drift).
        self.ignore
            .iter()
            .any(|p| !p.is_empty() && key.starts_with(p.as_str()))
            || VOLATILE.contains(&key)
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
        let mut per_check: Vec<(&str, CheckOnNode)> = Vec::new();
        for f in &v.findings {
            counts[slot(f.status)] += 1;
            let bad = !matches!(f.status, Status::Pass | Status::Skip);
            match per_check.iter_mut().find(|(id, _)| *id == f.id) {
                Some((_, c)) => {
                    if f.status > c.worst {
                        c.worst = f.status;
                    }
                    if bad {
                        c.subjects.push(f.subject.to_string());
                    }
                }
                None => per_check.push((
                    &f.id,
                    CheckOnNode {
                        worst: f.status,
                        subjects: if bad {
                            vec![f.subject.to_string()]
                        } else {
                            vec![]
                        },
                    },
                )),
            }
        }
        let detail = self.detail.then(|| NodeDetail {
            worst: per_check
                .iter()
                .map(|(id, c)| (id.to_string(), c.worst))
                .collect(),
            findings: v
                .findings
                .iter()
                .filter(|f| matches!(f.status, Status::Warn | Status::Fail | Status::Error))
                .map(|f| DetailFinding {
                    id: f.id.to_string(),
                    status: f.status,
                    subject: f.subject.to_string(),
                    message: f.message.to_string(),
                    remediation: f.remediation.as_deref().map(str::to_string),
                })
                .collect(),
        });
        for (id, c) in per_check {
            let agg = match part.checks.get_mut(id) {
                Some(a) => a,
                None => {
                    part.check_order.push(id.to_string());
                    part.checks.entry(id.to_string()).or_default()
                }
            };
            agg.counts[slot(c.worst)] += 1;
            if matches!(c.worst, Status::Warn | Status::Fail | Status::Error) {
                agg.not_passing.push((idx, c.worst, c.subjects));
            }
        }
        // Fields, by this worker's own number of the node.
        let local = u32::try_from(part.nodes.len()).unwrap_or(u32::MAX);
        let mut sink = |k: &str, val: &str| {
            if self.ignored(k) {
                return;
            }
            let f = match part.fields.get_mut(k) {
                Some(f) => f,
                None => part.fields.entry(k.to_string()).or_default(),
            };
            match f.get_mut(val) {
                Some(n) => n.push(local),
                None => {
                    f.insert(val.to_string(), NodeSet::from_iter([local]));
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
            for (k, val) in inv.0.iter() {
                sink(k, val);
            }
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
                detail,
            },
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn volatile_fields_and_bar_addresses_are_left_out() {
        let d = super::Digester {
            ignore: &["env.".to_string()],
            detail: false,
        };
        assert!(d.ignored("cmdline.root") && d.ignored("gpus[x].bars[1].start"));
        assert!(d.ignored("env.NCCL_IB_HCA"));
        assert!(!d.ignored("gpus[x].bars[1].size") && !d.ignored("cmdline.iommu"));
        // An empty entry is a prefix of every field: it must not hide them all.
        let d = super::Digester {
            ignore: &[String::new(), "env.".to_string()],
            detail: false,
        };
        assert!(d.ignored("env.NCCL_IB_HCA"));
        assert!(!d.ignored("driver.nvidia_version") && !d.ignored("nics[mlx5_5].fw_ver"));
    }
}
