//! Merge the per-thread partials into the roll-up (`gdrdoctor.fleet/v1`): nodes, checks x nodes,
//! drift (fields where a minority of nodes differs from the majority: the odd nodes out; fields
//! with no majority: split), and the exit code.

use super::digest::{slot, CheckAgg, FieldAgg, NodeInfo, Partial, PRESENT};
use super::input::Unreadable;
use super::nodeset::NodeSet;
use gdrdoctor_checks::report::Status;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

pub const FLEET_SCHEMA: &str = "gdrdoctor.fleet/v1";

/// The value a node shows for a field its report does not have.
pub const ABSENT: &str = "(absent)";

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Rollup {
    pub schema: &'static str,
    pub tool: Tool,
    /// When the roll-up was made, RFC 3339 UTC.
    #[schemars(extend("format" = "date-time"))]
    pub timestamp: String,
    pub summary: FleetSummary,
    pub nodes: Vec<Node>,
    pub checks: Vec<Check>,
    pub drift: Vec<Drift>,
    pub odd_nodes: Vec<OddNode>,
    pub unreadable: Vec<Unreadable>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Tool {
    pub version: String,
}

#[derive(Debug, Default, Serialize, schemars::JsonSchema)]
pub struct FleetSummary {
    /// Inputs named on the command line and found below directories.
    pub reports: usize,
    /// Reports that were read (one node each).
    pub nodes: usize,
    pub unreadable: usize,
    /// Nodes by their report's exit code: 0, 1, 3 (and anything else).
    pub ok: usize,
    pub failed: usize,
    pub incomplete: usize,
    pub other: usize,
    pub drift_fields: usize,
    pub odd_nodes: usize,
    /// Oldest and newest report timestamps (reports without one are not counted).
    #[schemars(extend("x-required" = true))]
    pub oldest: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub newest: Option<String>,
    #[schemars(extend("enum" = [0, 1, 2, 3]))]
    pub exit_code: i32,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Node {
    pub name: String,
    #[schemars(extend("x-required" = true))]
    pub hostname: Option<String>,
    pub input: String,
    #[schemars(extend("x-required" = true))]
    pub timestamp: Option<String>,
    pub source: String,
    #[schemars(extend("enum" = ["check", "probe"]))]
    pub command: &'static str,
    pub exit_code: i32,
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: usize,
    /// Worst status per check and non-passing findings (only for the HTML page; not in the
    /// JSON roll-up).
    #[serde(skip)]
    pub detail: Option<super::digest::NodeDetail>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Check {
    pub id: String,
    /// Nodes whose report has this check.
    pub nodes: usize,
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    pub error: usize,
    /// Every node whose worst finding for this check is warn, fail or error, worst first.
    pub not_passing: Vec<NotPassing>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct NotPassing {
    pub node: String,
    #[schemars(extend("enum" = ["warn", "fail", "error"]))]
    pub status: Status,
    pub subjects: Vec<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Drift {
    pub field: String,
    /// `odd`: a majority value exists and the listed nodes differ from it; `split`: no value
    /// is held by more than half of the nodes.
    #[schemars(extend("enum" = ["odd", "split"]))]
    pub kind: &'static str,
    /// Nodes the field applies to (those whose report has the element it belongs to).
    pub nodes: usize,
    #[schemars(extend("x-required" = true))]
    pub majority: Option<MajorityValue>,
    /// The other values, most common first, with their nodes (for `split`, every value but
    /// the most common one lists its nodes).
    pub values: Vec<DriftValue>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct MajorityValue {
    pub value: String,
    pub count: usize,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct DriftValue {
    pub value: String,
    pub count: usize,
    pub nodes: Vec<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct OddNode {
    pub node: String,
    /// Drift fields where this node holds a minority value, with that value.
    pub fields: Vec<OddField>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct OddField {
    pub field: String,
    pub value: String,
    pub majority: String,
}

/// The published JSON Schema of `fleet --format json` (docs/schema/gdrdoctor.fleet.v1.schema.json),
/// derived from [`Rollup`].
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<Rollup>(
        FLEET_SCHEMA,
        "`gdrdoctor fleet --format json`: many nodes' reports rolled up (docs/guides/fleet.md).",
        true,
    )
}

pub struct Options {
    pub allow_drift: bool,
    pub allow_incomplete: bool,
}

/// The container a field sits in: `nics[mlx5_3].ports[1].rate` -> `nics[mlx5_3].ports[1]`;
/// `nics[mlx5_3].ports[1]` -> `nics[mlx5_3].ports`; `pci[0000:47:00.0].acs.ctl` ->
/// `pci[0000:47:00.0].acs`; `driver` -> none. Dots inside brackets (PCI addresses) are not
/// boundaries.
fn parent(field: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut last = None;
    for (i, c) in field.char_indices() {
        match c {
            '[' => {
                if depth == 0 {
                    last = Some(i);
                }
                depth += 1;
            }
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => last = Some(i),
            _ => {}
        }
    }
    last.filter(|&i| i > 0).map(|i| &field[..i])
}

/// The nearest ancestor of `k` that is a container on some node.
fn container_of<'k>(present: &HashMap<&str, &NodeSet>, k: &'k str) -> Option<&'k str> {
    let mut cur = parent(k);
    while let Some(p) = cur {
        if present.contains_key(p) {
            return Some(p);
        }
        cur = parent(p);
    }
    None
}

pub fn build(
    parts: Vec<Partial>,
    unreadable: Vec<(u32, Unreadable)>,
    reports: usize,
    opts: &Options,
) -> Rollup {
    let Merged {
        nodes,
        checks,
        order,
        fields,
        unreadable,
    } = merge(parts, unreadable);
    let names = Names::of_nodes(&nodes);
    let out_checks = checks_in_order(order, checks, &names);
    let (drift, odd_nodes) = drift(&fields, &nodes, &names);
    let s = summary(&nodes, &unreadable, &drift, &odd_nodes, reports, opts);
    Rollup {
        schema: FLEET_SCHEMA,
        tool: Tool {
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        timestamp: crate::sys::clock::now_rfc3339(),
        summary: s,
        nodes: nodes
            .into_iter()
            .map(|(i, n)| Node {
                name: names.of(&i),
                hostname: n.hostname,
                input: n.input,
                timestamp: n.timestamp,
                source: n.source,
                command: n.command,
                exit_code: n.exit_code,
                pass: n.counts[0],
                warn: n.counts[1],
                fail: n.counts[2],
                skip: n.counts[3],
                error: n.counts[4],
                detail: n.detail,
            })
            .collect(),
        checks: out_checks,
        drift,
        odd_nodes,
        unreadable: unreadable.into_iter().map(|(_, u)| u).collect(),
    }
}

/// The partials of every thread, merged: nodes and unreadable inputs in input order, the
/// checks and their order of first appearance, every field's values with their nodes.
struct Merged {
    nodes: Vec<(u32, NodeInfo)>,
    checks: HashMap<String, CheckAgg>,
    order: Vec<String>,
    fields: HashMap<String, FieldAgg>,
    unreadable: Vec<(u32, Unreadable)>,
}

fn merge(parts: Vec<Partial>, mut unreadable: Vec<(u32, Unreadable)>) -> Merged {
    // Nodes, in input order.
    let mut nodes: Vec<(u32, NodeInfo)> = Vec::new();
    let mut checks: HashMap<String, CheckAgg> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut fields: HashMap<String, FieldAgg> = HashMap::new();
    for p in parts {
        unreadable.extend(p.unreadable);
        for id in p.check_order {
            if !order.contains(&id) {
                order.push(id);
            }
        }
        for (id, c) in p.checks {
            let a = checks.entry(id).or_default();
            for i in 0..5 {
                a.counts[i] += c.counts[i];
            }
            a.not_passing.extend(c.not_passing);
        }
        // A worker numbers its nodes by their place in its own list: to input numbers.
        let map: Vec<u32> = p.nodes.iter().map(|(i, _)| *i).collect();
        for (k, f) in p.fields {
            let a = fields.entry(k).or_default();
            for (v, n) in f {
                a.entry(v).or_default().union(&n.mapped(&map));
            }
        }
        nodes.extend(p.nodes);
    }
    nodes.sort_by_key(|(i, _)| *i);
    unreadable.sort_by_key(|(i, _)| *i);
    Merged {
        nodes,
        checks,
        order,
        fields,
        unreadable,
    }
}

/// The nodes' names: the hostname, made unique with the input where hostnames repeat.
struct Names(HashMap<u32, String>);

impl Names {
    fn of_nodes(nodes: &[(u32, NodeInfo)]) -> Names {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (_, n) in nodes {
            *seen.entry(n.hostname.as_deref().unwrap_or("")).or_insert(0) += 1;
        }
        Names(
            nodes
                .iter()
                .map(|(i, n)| {
                    let name = match n.hostname.as_deref() {
                        Some(h) if !h.is_empty() && seen.get(h) == Some(&1) => h.to_string(),
                        Some(h) if !h.is_empty() => format!("{h}@{}", n.input),
                        _ => n.input.clone(),
                    };
                    (*i, name)
                })
                .collect(),
        )
    }

    /// The name of node `i`.
    fn of(&self, i: &u32) -> String {
        self.0.get(i).cloned().unwrap_or_else(|| format!("#{i}"))
    }
}

/// Checks, in the order the reports list them.
fn checks_in_order(
    order: Vec<String>,
    mut checks: HashMap<String, CheckAgg>,
    names: &Names,
) -> Vec<Check> {
    let mut out_checks = Vec::new();
    for id in order {
        let Some(mut a) = checks.remove(&id) else {
            continue;
        };
        a.not_passing
            .sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        out_checks.push(Check {
            nodes: a.counts.iter().sum(),
            pass: a.counts[slot(Status::Pass)],
            warn: a.counts[slot(Status::Warn)],
            fail: a.counts[slot(Status::Fail)],
            skip: a.counts[slot(Status::Skip)],
            error: a.counts[slot(Status::Error)],
            not_passing: a
                .not_passing
                .into_iter()
                .map(|(i, s, subjects)| NotPassing {
                    node: names.of(&i),
                    status: s,
                    subjects,
                })
                .collect(),
            id,
        });
    }
    out_checks
}

/// Drift, and the odd nodes out. A field's population is every node where the container it
/// sits in is present (the nearest ancestor that is a container: a list element, an object,
/// the command line), or every node for top-level fields. A container that is null on some
/// node (an object the collector could not read) is one drift row, not one row per field
/// inside it.
fn drift(
    fields: &HashMap<String, FieldAgg>,
    nodes: &[(u32, NodeInfo)],
    names: &Names,
) -> (Vec<Drift>, Vec<OddNode>) {
    let total = nodes.len();
    let present: HashMap<&str, &NodeSet> = fields
        .iter()
        .filter_map(|(k, f)| f.get(PRESENT).map(|n| (k.as_str(), n)))
        .collect();
    let mut drift = Vec::new();
    let mut odd: BTreeMap<u32, Vec<OddField>> = BTreeMap::new();
    let mut keys: Vec<&String> = fields.keys().collect();
    keys.sort();
    for k in keys {
        let f = &fields[k];
        let population = match container_of(&present, k) {
            Some(p) => present.get(p).map(|n| n.len()).unwrap_or(0),
            None => total,
        };
        let mut values: Vec<(&str, usize)> = f.iter().map(|(v, n)| (v.as_str(), n.len())).collect();
        let have: usize = values.iter().map(|(_, n)| n).sum();
        let absent = population.saturating_sub(have);
        if absent > 0 {
            values.push((ABSENT, absent));
        }
        if values.len() < 2 {
            continue;
        }
        values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let (top, top_n) = values[0];
        let majority = top_n * 2 > population;
        // Nodes holding each value; the absent ones are those with the parent but not the key.
        let holders = |v: &str| -> Vec<u32> {
            if v == ABSENT {
                let mut with = NodeSet::default();
                for n in f.values() {
                    with.union(n);
                }
                let universe: Vec<u32> = match container_of(&present, k) {
                    Some(p) => present
                        .get(p)
                        .map(|n| n.iter().collect())
                        .unwrap_or_default(),
                    None => nodes.iter().map(|(i, _)| *i).collect(),
                };
                universe
                    .into_iter()
                    .filter(|i| !with.contains(*i))
                    .collect()
            } else {
                f.get(v).map(|n| n.iter().collect()).unwrap_or_default()
            }
        };
        let mut rest = Vec::new();
        for (v, n) in values.iter().skip(1) {
            let who = holders(v);
            if majority {
                for i in &who {
                    odd.entry(*i).or_default().push(OddField {
                        field: k.clone(),
                        value: v.to_string(),
                        majority: top.to_string(),
                    });
                }
            }
            rest.push(DriftValue {
                value: v.to_string(),
                count: *n,
                nodes: who.iter().map(|i| names.of(i)).collect(),
            });
        }
        drift.push(Drift {
            field: k.clone(),
            kind: if majority { "odd" } else { "split" },
            nodes: population,
            majority: majority.then(|| MajorityValue {
                value: top.to_string(),
                count: top_n,
            }),
            values: if majority {
                rest
            } else {
                let mut all = vec![DriftValue {
                    value: top.to_string(),
                    count: top_n,
                    nodes: vec![],
                }];
                all.extend(rest);
                all
            },
        });
    }
    let odd_nodes: Vec<OddNode> = odd
        .into_iter()
        .map(|(i, fields)| OddNode {
            node: names.of(&i),
            fields,
        })
        .collect();
    (drift, odd_nodes)
}

/// The summary: the nodes by their findings and exit code, the report timestamps, and the
/// fleet's exit code.
fn summary(
    nodes: &[(u32, NodeInfo)],
    unreadable: &[(u32, Unreadable)],
    drift: &[Drift],
    odd_nodes: &[OddNode],
    reports: usize,
    opts: &Options,
) -> FleetSummary {
    let total = nodes.len();
    let mut s = FleetSummary {
        reports,
        nodes: total,
        unreadable: unreadable.len(),
        drift_fields: drift.len(),
        odd_nodes: odd_nodes.len(),
        ..Default::default()
    };
    for (_, n) in nodes {
        // The node's own findings, not only its exit code: a report written with `--fail-on
        // never` or `--allow-incomplete` exits 0 with failures or errors in it, a report that
        // holds a fail finding is failed whatever its exit code says (3, or anything else: a
        // hand-edited or damaged summary), and a report without a single finding shows nothing
        // of the node.
        let fail = n.counts[slot(Status::Fail)];
        let error = n.counts[slot(Status::Error)];
        let any = n.counts.iter().sum::<usize>();
        match n.exit_code {
            _ if fail > 0 => s.failed += 1,
            0 if error > 0 || any == 0 => s.incomplete += 1,
            0 => s.ok += 1,
            1 => s.failed += 1,
            3 => s.incomplete += 1,
            _ => s.other += 1,
        }
    }
    let stamps: Vec<&str> = nodes
        .iter()
        .filter_map(|(_, n)| n.timestamp.as_deref())
        .collect();
    s.oldest = stamps.iter().min().map(|t| t.to_string());
    s.newest = stamps.iter().max().map(|t| t.to_string());
    s.exit_code = if s.failed > 0 || s.other > 0 || (!drift.is_empty() && !opts.allow_drift) {
        1
    } else if (s.incomplete > 0 || s.unreadable > 0) && !opts.allow_incomplete {
        3
    } else {
        0
    };
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn parents_of_fields() {
        use super::parent;
        assert_eq!(
            parent("nics[mlx5_3].ports[1].rate"),
            Some("nics[mlx5_3].ports[1]")
        );
        assert_eq!(parent("nics[mlx5_3].ports[1]"), Some("nics[mlx5_3].ports"));
        assert_eq!(parent("nics[mlx5_3]"), Some("nics"));
        assert_eq!(parent("nics"), None);
        assert_eq!(parent("driver.flavor"), Some("driver"));
        assert_eq!(
            parent("pci[0000:17:00.0].acs.ctl"),
            Some("pci[0000:17:00.0].acs")
        );
        assert_eq!(parent("pci[0000:17:00.0]"), Some("pci"));
        assert_eq!(parent("cmdline.rd.luks.uuid"), Some("cmdline.rd.luks"));
    }
}
