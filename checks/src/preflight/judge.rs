//! The allocation's answer from what rank 0 gathered: who joined, each node's own check, what
//! NCCL did on every GPU beside what the node's facts predicted, the pairs' bandwidth against
//! the slower end's links, and the nodes to take out with the reason from that node's facts.
//!
//! Damaged or missing evidence is never good news: a rank that never reported is named, a node
//! whose report could not be read is taken out (nobody can vouch for it), an NCCL log that
//! cannot be read is an `error`, and a node killed at the deadline is named by the step it
//! stood at. When every node stopped at the same step, nobody is blamed: the finding says so.

use super::links;
use super::model::*;
use crate::paste::nccl::{self as ncclog, NcclLog, Transport};
use crate::report::{self, Finding, GdrPair, Report, Status};
use std::collections::{BTreeMap, BTreeSet};

/// How a rank is named: `gpu-07 (rank 6)`, or `rank 6` when its name is unknown.
pub fn who(m: &Member) -> String {
    match node_name(m) {
        Some(n) => format!("{n} (rank {})", m.rank),
        None => format!("rank {}", m.rank),
    }
}

/// The node's name: what the rank said it is, else its report's hostname.
pub fn node_name(m: &Member) -> Option<String> {
    m.node
        .clone()
        .or_else(|| m.report.as_ref().and_then(|r| r.host.hostname.clone()))
}

fn subject(m: &Member) -> String {
    node_name(m).unwrap_or_else(|| format!("rank {}", m.rank))
}

fn secs(ms: f64) -> String {
    let s = ms / 1000.0;
    if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// A bandwidth in GB/s with three significant digits or so.
pub fn gbs(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1} GB/s")
    } else if v >= 1.0 {
        format!("{v:.2} GB/s")
    } else {
        format!("{v:.3} GB/s")
    }
}

/// NCCL's path types, nearest first (nvidia-smi's NODE sits with PHB).
fn path_rank(p: &str) -> u32 {
    match p {
        "LOC" => 0,
        "NVL" => 1,
        "NVB" => 2,
        "C2C" => 3,
        "PIX" => 4,
        "PXB" => 5,
        "P2C" => 6,
        "PXN" => 7,
        "PHB" | "NODE" => 8,
        "SYS" => 9,
        _ => 10,
    }
}

/// The NIC NCCL would pick for a GPU: the nearest by path type (then by name).
fn nearest<'r>(report: &'r Report, bdf: &str) -> Option<&'r GdrPair> {
    report
        .gdr
        .iter()
        .filter(|p| p.gpu.eq_ignore_ascii_case(bdf))
        .min_by(|a, b| {
            let pa = path_rank(a.nccl_path.as_deref().unwrap_or(&a.path));
            let pb = path_rank(b.nccl_path.as_deref().unwrap_or(&b.path));
            pa.cmp(&pb).then(a.nic.cmp(&b.nic))
        })
}

fn pair_for<'r>(report: &'r Report, bdf: &str, nic: &str) -> Option<&'r GdrPair> {
    report
        .gdr
        .iter()
        .find(|p| p.gpu.eq_ignore_ascii_case(bdf) && p.nic == nic)
}

fn prediction(p: Option<&GdrPair>) -> Prediction {
    match p {
        None => Prediction::default(),
        Some(p) => Prediction {
            nic: Some(p.nic.clone()),
            path: Some(p.nccl_path.clone().unwrap_or_else(|| p.path.clone())),
            gdr: p.undecided.is_empty().then_some(p.enabled),
            mechanism: p.mechanism.clone(),
            reasons: p.reasons.clone(),
        },
    }
}

/// Why a pair has no GDR, in the node's own facts' words.
fn because(p: &GdrPair) -> String {
    if !p.reasons.is_empty() {
        p.reasons.join("; ")
    } else if !p.undecided.is_empty() {
        format!("undecided: {}", p.undecided.join("; "))
    } else {
        "the node's facts give no reason".into()
    }
}

/// The reasons to take a node out, most telling first: what NCCL did on it and why (its GDR,
/// its failure, its slow rail), then the rendezvous, then its own check's failures. The first
/// one is what a drain reason shows.
struct TakeOuts(BTreeMap<u32, Vec<(u8, String)>>);

const BY_GDR: u8 = 0;
const BY_NCCL: u8 = 1;
const BY_PAIRS: u8 = 2;
const BY_RENDEZVOUS: u8 = 3;
const BY_CHECK: u8 = 4;

impl TakeOuts {
    fn add(&mut self, rank: u32, by: u8, reason: String) {
        let v = self.0.entry(rank).or_default();
        if !v.iter().any(|(_, r)| *r == reason) {
            v.push((by, reason));
        }
    }

    fn reasons(&self, rank: u32) -> Vec<String> {
        let mut v = self.0.get(&rank).cloned().unwrap_or_default();
        v.sort_by_key(|(by, _)| *by);
        v.into_iter().map(|(_, r)| r).collect()
    }
}

/// The answer (`gdrdoctor.preflight/v1`) from everything rank 0 gathered.
pub fn answer(inp: &Inputs) -> Answer {
    let mut findings = Vec::new();
    let mut out = TakeOuts(BTreeMap::new());
    let logs = parse_logs(&inp.runs);
    rendezvous(inp, &mut findings, &mut out);
    nodes(inp, &mut findings, &mut out);
    let runs = nccl_runs(inp, &logs, &mut findings, &mut out);
    let rails = gdr(inp, &logs, &mut findings, &mut out);
    let pairs = pairs(inp, &logs, &mut findings, &mut out);

    let member = |r: u32| inp.members.iter().find(|m| m.rank == r);
    let take_out: Vec<TakeOut> = out
        .0
        .keys()
        .map(|r| TakeOut {
            rank: *r,
            node: member(*r).and_then(node_name),
            reasons: out.reasons(*r),
        })
        .collect();
    let s = report::Summary::count(&findings);
    // A node named under "take out" makes the answer 1, whatever the findings say (every
    // take-out has a fail finding; this holds the contract should one not).
    let exit_code = if take_out.is_empty() {
        report::exit_code(&findings, inp.fail_on, inp.allow_incomplete)
    } else {
        1
    };
    let drift_of = |r: u32| -> Vec<String> {
        inp.drift
            .iter()
            .filter(|d| d.member == r)
            .map(|d| d.field.clone())
            .collect()
    };
    let shared = shared_failure(&inp.runs);
    let unrun = never_ran(&inp.runs);
    let node_rows = inp
        .members
        .iter()
        .map(|m| NodeRow {
            rank: m.rank,
            node: node_name(m),
            host: m.report.as_ref().and_then(|r| r.host.hostname.clone()),
            state: if m.joined_ms.is_none() {
                "never-joined"
            } else if m.lost.is_some() {
                "lost"
            } else if m.report.is_none() {
                "no-report"
            } else {
                "joined"
            }
            .into(),
            check_exit: m.report.as_ref().map(|r| r.summary.exit_code),
            check: m.report.as_ref().map(|r| r.summary.clone()),
            failing: m
                .report
                .as_ref()
                .map(|r| {
                    let mut ids: Vec<String> = Vec::new();
                    for f in &r.findings {
                        if matches!(f.status, Status::Fail | Status::Error) && !ids.contains(&f.id)
                        {
                            ids.push(f.id.clone());
                        }
                    }
                    ids
                })
                .unwrap_or_default(),
            drift: drift_of(m.rank),
            gpus: m.gpus,
            take_out: out.0.contains_key(&m.rank),
            verdict: if out.0.contains_key(&m.rank) {
                "take-out"
            } else if shared.as_ref().is_some_and(|x| x.members.contains(&m.rank)) {
                "shared-failure"
            } else if unrun.iter().any(|(r, _)| *r == m.rank) {
                "not-evaluated"
            } else {
                "ok"
            }
            .into(),
        })
        .collect();
    Answer {
        schema: SCHEMA.into(),
        tool: Tool {
            version: env!("CARGO_PKG_VERSION").into(),
        },
        timestamp: None,
        allocation: inp.allocation.clone(),
        summary: Summary {
            nodes: inp.members.len() as u32,
            joined: inp.members.iter().filter(|m| m.joined_ms.is_some()).count() as u32,
            take_out: take_out.len() as u32,
            pass: s.pass as u32,
            warn: s.warn as u32,
            fail: s.fail as u32,
            skip: s.skip as u32,
            error: s.error as u32,
            exit_code,
        },
        stages: inp.stages.clone(),
        thresholds: inp.thresholds,
        nodes: node_rows,
        rails,
        nccl: runs,
        pairs,
        take_out,
        refused: inp.refused.clone(),
        findings,
    }
}

/// Every node's NCCL log, parsed once: `(run index, member) -> log`.
fn parse_logs(runs: &[RunInput]) -> BTreeMap<(usize, u32), NcclLog> {
    let mut m = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        for n in &r.nodes {
            if let Some(l) = &n.log {
                m.insert((i, n.member), ncclog::parse_file(l));
            }
        }
    }
    m
}

// ---- stage 0: the rendezvous -----------------------------------------------------------------

fn rendezvous(inp: &Inputs, f: &mut Vec<Finding>, out: &mut TakeOuts) {
    const ID: &str = "preflight.rendezvous";
    let a = &inp.allocation;
    let mut all = true;
    for m in &inp.members {
        if m.joined_ms.is_none() {
            all = false;
            f.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    subject(m),
                    format!("{} never joined after {}", who(m), secs(a.timeout_s * 1000.0)),
                )
                .expected(
                    format!("rendezvous {}", a.rendezvous),
                    "no authenticated join",
                    format!("rank {} of {} joins within the deadline", m.rank, a.world),
                )
                .fix("see whether the rank started at all (the engine's log for that task), and whether it can reach rank 0's address and port (a firewall, another interface, the wrong --rendezvous) with the job's secret file"),
            );
            out.add(
                m.rank,
                BY_RENDEZVOUS,
                format!("never joined rank 0 within {}", secs(a.timeout_s * 1000.0)),
            );
        } else if let Some(why) = &m.lost {
            all = false;
            f.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    subject(m),
                    format!("{} joined, then was lost: {why}", who(m)),
                )
                .evidence(format!("rendezvous {}", a.rendezvous), why.clone())
                .fix("the node's gdrdoctor process died or its network went away: see the engine's log for that task and the node's kernel log"),
            );
            out.add(m.rank, BY_RENDEZVOUS, format!("lost after joining: {why}"));
        }
    }
    if all {
        let last = inp
            .members
            .iter()
            .filter_map(|m| m.joined_ms)
            .fold(0.0f64, f64::max);
        f.push(
            Finding::new(
                ID,
                Status::Pass,
                "allocation",
                format!(
                    "{} of {} ranks joined in {} ({} engine)",
                    inp.members.len(),
                    a.world,
                    secs(last),
                    a.engine
                ),
            )
            .evidence(
                format!("rendezvous {}", a.rendezvous),
                format!(
                    "{} authenticated joins, the last after {}",
                    inp.members.len(),
                    secs(last)
                ),
            ),
        );
    }
    if !inp.refused.is_empty() {
        let mut fi = Finding::new(
            ID,
            Status::Warn,
            "rendezvous",
            format!(
                "{} connection(s) refused at the rendezvous and counted: {}",
                inp.refused.len(),
                inp.refused
                    .iter()
                    .take(3)
                    .map(|r| format!("{} ({})", r.peer, r.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
        .fix("only the job's own ranks hold its secret: a refused connection is a stranger (a port scan, another job on the same port) or a rank with another secret file; if a rank of this job was refused, give every rank the same --secret-file");
        for r in &inp.refused {
            fi = fi.evidence(
                format!("rendezvous {}", a.rendezvous),
                format!("{}: {}", r.peer, r.reason),
            );
        }
        f.push(fi);
    }
}

// ---- stage 1: each node's own check ----------------------------------------------------------

fn nodes(inp: &Inputs, f: &mut Vec<Finding>, out: &mut TakeOuts) {
    const ID: &str = "preflight.node";
    for m in &inp.members {
        if m.joined_ms.is_none() {
            continue;
        }
        let Some(r) = &m.report else {
            let why = m
                .report_error
                .clone()
                .unwrap_or_else(|| "no report arrived".into());
            // Taken out (nobody can vouch for it), so a fail, as a rank that never joined: an
            // error here made the answer exit 3 (0 with --allow-incomplete) with the node
            // named under "take out".
            f.push(
                Finding::new(ID, Status::Fail, subject(m), format!("{}: no check report: {why}", who(m)))
                    .evidence("rendezvous", why.clone())
                    .fix("run `gdrdoctor check` on that node and look at its output; a report refused for its size or shape comes from another gdrdoctor version or a damaged process"),
            );
            out.add(
                m.rank,
                BY_CHECK,
                format!("its check report could not be read: {why}"),
            );
            continue;
        };
        let bad: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|x| x.status == Status::Fail)
            .collect();
        let errs: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|x| x.status == Status::Error)
            .collect();
        let src = format!("{}'s check report", subject(m));
        if !bad.is_empty() || r.summary.exit_code == 1 {
            let ids = distinct_ids(&bad);
            let first = bad
                .first()
                .map(|x| format!(": {}: {}", x.subject, x.message))
                .unwrap_or_default();
            let mut fi = Finding::new(
                ID,
                Status::Fail,
                subject(m),
                format!("{}: check failed ({}){first}", who(m), ids.join(", ")),
            );
            for x in bad.iter().take(8) {
                fi = fi.evidence(
                    src.clone(),
                    format!("{} {}: {}", x.id, x.subject, x.message),
                );
            }
            f.push(fi.fix("`gdrdoctor explain ID` for each failing check; fix the node, or take it out of the job"));
            for x in bad.iter().take(3) {
                out.add(m.rank, BY_CHECK, format!("{}: {}", x.id, x.message));
            }
        } else if !errs.is_empty() || r.summary.exit_code == 3 {
            let ids = distinct_ids(&errs);
            let mut fi = Finding::new(
                ID,
                Status::Error,
                subject(m),
                format!(
                    "{}: check incomplete: {} check(s) could not be evaluated ({})",
                    who(m),
                    errs.len(),
                    ids.join(", ")
                ),
            );
            for x in errs.iter().take(8) {
                fi = fi.evidence(
                    src.clone(),
                    format!("{} {}: {}", x.id, x.subject, x.message),
                );
            }
            f.push(fi.fix("run preflight as root (config space, kernel log), or pass --allow-incomplete to accept it"));
        } else {
            f.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    subject(m),
                    format!(
                        "{}: check passed ({} pass, {} warn, {} skip)",
                        who(m),
                        r.summary.pass,
                        r.summary.warn,
                        r.summary.skip
                    ),
                )
                .evidence(src, format!("exit code {}", r.summary.exit_code)),
            );
        }
        let drift: Vec<&OddField> = inp.drift.iter().filter(|d| d.member == m.rank).collect();
        if !drift.is_empty() {
            let shown: Vec<String> = drift
                .iter()
                .take(4)
                .map(|d| {
                    format!(
                        "{} {} (majority {})",
                        d.field,
                        clip(&d.value),
                        clip(&d.majority)
                    )
                })
                .collect();
            let mut fi = Finding::new(
                ID,
                Status::Warn,
                subject(m),
                format!(
                    "{} is the odd node out in {} field(s): {}{}",
                    who(m),
                    drift.len(),
                    shown.join("; "),
                    if drift.len() > 4 { "; ..." } else { "" }
                ),
            )
            .fix("the other nodes agree on these values: bring this node in line (driver, firmware, kernel command line), or confirm the difference is intended");
            for d in drift.iter().take(12) {
                fi = fi.expected(
                    "fleet roll-up of the allocation's reports",
                    format!("{} = {}", d.field, d.value),
                    d.majority.clone(),
                );
            }
            f.push(fi);
        }
    }
}

/// A value cut to 60 characters for a message (the evidence keeps it whole).
fn clip(s: &str) -> String {
    if s.chars().count() <= 60 {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(57).collect::<String>())
    }
}

fn distinct_ids(v: &[&Finding]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for x in v {
        if !ids.contains(&x.id) {
            ids.push(x.id.clone());
        }
    }
    ids
}

// ---- stage 2: NCCL across the allocation -----------------------------------------------------

fn warnings_of(log: Option<&NcclLog>) -> Vec<String> {
    log.map(|l| {
        let mut v: Vec<String> = Vec::new();
        for w in &l.warnings {
            if !v.contains(&w.text) {
                v.push(w.text.clone());
            }
        }
        v.truncate(4);
        v
    })
    .unwrap_or_default()
}

fn run_status(n: &NodeRun) -> &'static str {
    if n.not_started {
        return "not-run";
    }
    match (&n.output, &n.problem) {
        (Some(o), _) if o.error.is_some() => "nccl-error",
        (_, Some(_)) if n.timed_out => "timed-out",
        (_, Some(_)) => "failed",
        (None, None) => "failed",
        (Some(o), None) => match &o.allreduce {
            Some(c) if c.sums.wrong > 0 => "sums-wrong",
            Some(_) if o.step == "done" => "ok",
            _ => "failed",
        },
    }
}

/// Who broke an NCCL run, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlameKind {
    /// Nothing failed (wrong sums are judged apart).
    None,
    /// NCCL (or the worker) failed on these nodes.
    Failed,
    /// These nodes hung at a step the others had passed.
    Hung,
    /// Every node timed out at the same step: nobody is behind, nobody is named.
    AllStuck,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blame {
    pub kind: BlameKind,
    pub culprits: Vec<u32>,
    /// The failing nodes that are not culprits: they waited for the culprits, or failed
    /// because of them.
    pub waiting: Vec<u32>,
    /// The culprits' step, and the furthest step any node reached.
    pub step: String,
    pub furthest: String,
}

/// An NCCL error that only says a peer went away (`ncclRemoteError`).
fn is_remote(text: &str) -> bool {
    text.contains("remote process exited") || text.contains("(6)")
}

/// Who broke a run, without comparing clocks across nodes.
///
/// A node whose NCCL failed while every node was still within its deadline (its worker's own
/// run time well under the deadline) started it; errors that came at the deadline are the
/// others' reaction to a node killed there (NCCL reports a vanished peer as `remote process
/// exited or there was a network error` on every other rank) and count as waiting. Among the
/// nodes that started it, the lowest step wins, and an error of its own wins over a remote
/// one. With no such error, a node that timed out (or failed late) at an earlier step than
/// the others reached hung; when every node stopped at the same step, nobody is behind and
/// nobody is named.
pub fn blame(run: &RunInput) -> Blame {
    let order = |n: &NodeRun| step_order(step_of(n).as_deref().unwrap_or(""));
    let failing: Vec<&NodeRun> = run
        .nodes
        .iter()
        .filter(|n| matches!(run_status(n), "nccl-error" | "failed" | "timed-out"))
        .collect();
    let furthest_n = run.nodes.iter().max_by_key(|n| order(n));
    let furthest = furthest_n.and_then(step_of).unwrap_or_default();
    let mut b = Blame {
        kind: BlameKind::None,
        culprits: Vec::new(),
        waiting: Vec::new(),
        step: String::new(),
        furthest,
    };
    if failing.is_empty() {
        return b;
    }
    let late = |n: &NodeRun| match (n.elapsed_ms, run.deadline_ms) {
        (Some(e), Some(d)) => e >= 0.8 * d,
        _ => false,
    };
    let err_text = |n: &NodeRun| {
        n.output
            .as_ref()
            .and_then(|o| o.error.clone())
            .or_else(|| n.problem.clone())
            .unwrap_or_default()
    };
    let early: Vec<&&NodeRun> = failing
        .iter()
        .filter(|n| run_status(n) != "timed-out" && !late(n))
        .collect();
    if let Some(low) = early.iter().map(|n| order(n)).min() {
        let at: Vec<&&NodeRun> = early.iter().copied().filter(|n| order(n) == low).collect();
        let own: Vec<&&NodeRun> = at
            .iter()
            .copied()
            .filter(|n| !is_remote(&err_text(n)))
            .collect();
        let pick = if own.is_empty() { at } else { own };
        b.kind = BlameKind::Failed;
        b.step = pick
            .first()
            .and_then(|n| step_of(n))
            .unwrap_or_else(|| "start".into());
        b.culprits = pick.iter().map(|n| n.member).collect();
    } else {
        let low = failing.iter().map(|n| order(n)).min().unwrap_or((0, 0));
        let at: Vec<&&NodeRun> = failing.iter().filter(|n| order(n) == low).collect();
        b.step = at
            .first()
            .and_then(|n| step_of(n))
            .unwrap_or_else(|| "start".into());
        let max = run.nodes.iter().map(order).max().unwrap_or(low);
        if low < max {
            b.kind = BlameKind::Hung;
            b.culprits = at.iter().map(|n| n.member).collect();
        } else {
            b.kind = BlameKind::AllStuck;
        }
    }
    b.waiting = failing
        .iter()
        .map(|n| n.member)
        .filter(|m| !b.culprits.contains(m))
        .collect();
    b
}

/// The nodes that broke a run (failed, hung behind the others, or read wrong sums), and
/// whether every node hung alike (then a second run would teach nothing).
pub fn culprits(run: &RunInput) -> (BTreeSet<u32>, bool) {
    let b = blame(run);
    let mut out: BTreeSet<u32> = b.culprits.iter().copied().collect();
    for n in &run.nodes {
        if run_status(n) == "sums-wrong" {
            out.insert(n.member);
        }
    }
    (out, b.kind == BlameKind::AllStuck)
}

/// A failure every node where NCCL ran shares: the same status, step and error (less its
/// numbers: ranks, addresses and devices differ from node to node) on at least two nodes, and
/// no node where NCCL did anything else. The nodes did not break each other; what they share
/// (the job's environment: its container, its NCCL, the libraries on its loader path) did.
#[derive(Debug, Clone, PartialEq)]
pub struct Shared {
    /// The nodes where NCCL ran, every one failed alike.
    pub members: Vec<u32>,
    /// `failed` (the worker) or `nccl-error` (NCCL itself).
    pub status: &'static str,
    pub step: String,
    /// The first failure's words.
    pub error: String,
    /// Each failure: the run's label and the node.
    pub seen: Vec<(String, u32)>,
}

/// The words of a failure, its numbers made `#`: one failure class across nodes.
fn failure_class(n: &NodeRun) -> Option<(&'static str, String, String)> {
    let status = run_status(n);
    if !matches!(status, "failed" | "nccl-error") {
        return None;
    }
    let err = n
        .output
        .as_ref()
        .and_then(|o| o.error.clone())
        .or_else(|| n.problem.clone())
        .unwrap_or_default();
    let mut words = String::new();
    let mut digits = false;
    for c in err.chars() {
        if c.is_ascii_digit() {
            if !digits {
                words.push('#');
            }
            digits = true;
        } else {
            digits = false;
            words.push(c);
        }
    }
    Some((status, step_of(n).unwrap_or_else(|| "start".into()), words))
}

/// The failure the nodes where NCCL ran share, over every run that happened ([`Shared`]).
pub fn shared_failure(runs: &[RunInput]) -> Option<Shared> {
    let ran: Vec<(&str, &NodeRun)> = runs
        .iter()
        .filter(|r| r.not_run.is_none())
        .flat_map(|r| {
            r.nodes
                .iter()
                .filter(|n| !n.not_started)
                .map(move |n| (r.label.as_str(), n))
        })
        .collect();
    let members: BTreeSet<u32> = ran.iter().map(|(_, n)| n.member).collect();
    if members.len() < 2 {
        // One node cannot tell its own failure from the allocation's.
        return None;
    }
    let (_, first) = ran.first()?;
    let class = failure_class(first)?;
    for (_, n) in &ran {
        if failure_class(n)? != class {
            return None;
        }
    }
    Some(Shared {
        members: members.into_iter().collect(),
        status: class.0,
        step: class.1,
        error: first
            .output
            .as_ref()
            .and_then(|o| o.error.clone())
            .or_else(|| first.problem.clone())
            .unwrap_or_default(),
        seen: ran.iter().map(|(l, n)| (l.to_string(), n.member)).collect(),
    })
}

/// The nodes NCCL was to run on but never did: not started in every run that happened (the
/// node making NCCL's id failed first). With why, from the first run.
pub fn never_ran(runs: &[RunInput]) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = Vec::new();
    let mut ran: BTreeSet<u32> = BTreeSet::new();
    for r in runs.iter().filter(|r| r.not_run.is_none()) {
        for n in &r.nodes {
            if !n.not_started {
                ran.insert(n.member);
            } else if !out.iter().any(|(m, _)| *m == n.member) {
                let why = n.problem.clone().unwrap_or_else(|| "not started".into());
                out.push((n.member, format!("{} run: {why}", r.label)));
            }
        }
    }
    out.retain(|(m, _)| !ran.contains(m));
    out.sort_by_key(|(m, _)| *m);
    out
}

fn step_of(n: &NodeRun) -> Option<String> {
    n.output
        .as_ref()
        .map(|o| o.step.clone())
        .or_else(|| n.step.clone())
}

fn nccl_runs(
    inp: &Inputs,
    logs: &BTreeMap<(usize, u32), NcclLog>,
    f: &mut Vec<Finding>,
    out: &mut TakeOuts,
) -> Vec<RunRow> {
    const ID: &str = "preflight.nccl-run";
    let member = |r: u32| inp.members.iter().find(|m| m.rank == r);
    let who_r = |r: u32| member(r).map(who).unwrap_or_else(|| format!("rank {r}"));
    let subj_r = |r: u32| {
        member(r)
            .map(subject)
            .unwrap_or_else(|| format!("rank {r}"))
    };
    let shared = shared_failure(&inp.runs);
    let mut rows = Vec::new();
    for (ri, run) in inp.runs.iter().enumerate() {
        let label = &run.label;
        let mut version = None;
        let mut nodes = Vec::new();
        for n in &run.nodes {
            let log = logs.get(&(ri, n.member));
            if version.is_none() {
                version = n.output.as_ref().and_then(|o| o.version.clone());
            }
            nodes.push(RunNode {
                rank: n.member,
                node: member(n.member).and_then(node_name),
                status: run_status(n).into(),
                step: step_of(n),
                error: n
                    .output
                    .as_ref()
                    .and_then(|o| o.error.clone())
                    .or_else(|| n.problem.clone()),
                init_ms: n.output.as_ref().and_then(|o| o.init_ms),
                allreduce_busbw_gbs: n
                    .output
                    .as_ref()
                    .and_then(|o| o.allreduce.as_ref())
                    .map(|c| c.busbw_gbs),
                nccl_warnings: warnings_of(log),
            });
        }
        rows.push(RunRow {
            label: label.clone(),
            env: run.env.clone(),
            nranks: run.nranks,
            version,
            ms: run.ms,
            not_run: run.not_run.clone(),
            nodes: nodes.clone(),
        });
        if let Some(why) = &run.not_run {
            f.push(
                Finding::new(
                    ID,
                    Status::Skip,
                    "allocation",
                    format!("nccl ({label}) not run: {why}"),
                )
                .evidence("preflight", why.clone()),
            );
            continue;
        }
        let wrong: Vec<&RunNode> = nodes.iter().filter(|n| n.status == "sums-wrong").collect();
        let ok = nodes.iter().filter(|n| n.status == "ok").count();
        let bl = blame(run);
        let node_of = |r: u32| nodes.iter().find(|n| n.rank == r);
        let waiting = if bl.waiting.is_empty() {
            String::new()
        } else {
            format!(
                "; {} other node(s) waited for it or failed after it ({})",
                bl.waiting.len(),
                bl.waiting
                    .iter()
                    .map(|r| who_r(*r))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        match bl.kind {
            BlameKind::None => {}
            // Every node failed alike: said once for the allocation, below; nobody is blamed.
            BlameKind::Failed if shared.is_some() => {}
            BlameKind::Failed => {
                for r in &bl.culprits {
                    let Some(n) = node_of(*r) else { continue };
                    let err = n.error.clone().unwrap_or_else(|| "no result".into());
                    let step = n.step.clone().unwrap_or_else(|| "start".into());
                    let warns = if n.nccl_warnings.is_empty() {
                        String::new()
                    } else {
                        format!("; NCCL WARN: {}", n.nccl_warnings.join(" | "))
                    };
                    let what = if n.status == "nccl-error" {
                        format!("NCCL failed in step `{step}`: {err}")
                    } else {
                        format!("its NCCL worker failed in step `{step}`: {err}")
                    };
                    let mut fi = Finding::new(
                        ID,
                        Status::Fail,
                        subj_r(n.rank),
                        format!("{} ({label}): {what}{warns}{waiting}", who_r(n.rank)),
                    )
                    .evidence(
                        format!("{}'s nccl worker ({label})", subj_r(n.rank)),
                        err.clone(),
                    );
                    for w in &n.nccl_warnings {
                        fi = fi.evidence(
                            format!("{}'s NCCL log ({label})", subj_r(n.rank)),
                            w.clone(),
                        );
                    }
                    f.push(fi.fix("read the node's NCCL WARN lines (in the JSON answer); `gdrdoctor probe --nccl` on that node alone shows whether it fails by itself"));
                    out.add(
                        n.rank,
                        BY_NCCL,
                        format!("NCCL ({label}) failed in `{step}`: {err}"),
                    );
                }
            }
            BlameKind::Hung => {
                for r in &bl.culprits {
                    let Some(n) = node_of(*r) else { continue };
                    let step = n.step.clone().unwrap_or_else(|| "start".into());
                    f.push(
                        Finding::new(
                            ID,
                            Status::Fail,
                            subj_r(n.rank),
                            format!(
                                "{} ({label}) hung in step `{step}` and was killed at its deadline, while the others had reached `{}`{waiting}",
                                who_r(n.rank),
                                bl.furthest
                            ),
                        )
                        .evidence(format!("{}'s nccl worker ({label})", subj_r(n.rank)), n.error.clone().unwrap_or_default())
                        .fix("the node's GPU or its NCCL is stuck: look at the node's kernel log (Xid), `nvidia-smi`, and `gdrdoctor probe --nccl` on it alone"),
                    );
                    out.add(
                        n.rank,
                        BY_NCCL,
                        format!("NCCL ({label}) hung in `{step}` while the others waited for it"),
                    );
                }
            }
            BlameKind::AllStuck => {
                let mut fi = Finding::new(
                    ID,
                    Status::Fail,
                    "allocation",
                    format!(
                        "nccl ({label}): every node timed out at the same step `{}`: no node was behind the others, so none is named; the network between the nodes (or NCCL's bootstrap) is the suspect",
                        bl.step
                    ),
                );
                for n in &nodes {
                    fi = fi.evidence(
                        format!("{}'s nccl worker ({label})", subj_r(n.rank)),
                        n.error.clone().unwrap_or_default(),
                    );
                }
                f.push(fi.fix("run with fewer nodes (halves) to find the pair that hangs, and look at NCCL's WARN lines in the JSON answer"));
            }
        }
        for n in &wrong {
            let o = run
                .nodes
                .iter()
                .find(|x| x.member == n.rank)
                .and_then(|x| x.output.as_ref())
                .and_then(|o| o.allreduce.as_ref());
            let detail = o
                .map(|c| {
                    format!(
                        "{} of {} elements wrong (expected {}{})",
                        c.sums.wrong,
                        c.sums.checked,
                        c.sums.expected,
                        c.sums
                            .first_wrong
                            .map(|(r, i, v)| format!(", first: rank {r} element {i} = {v}"))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            f.push(
                Finding::new(ID, Status::Fail, subj_r(n.rank), format!("{} ({label}): the all-reduce's sums are wrong: {detail}", who_r(n.rank)))
                    .evidence(format!("{}'s nccl worker ({label})", subj_r(n.rank)), detail.clone())
                    .fix("data was corrupted between GPUs and NICs: check the node's AER and NIC error counters (`gdrdoctor check --interval 10s --only counters`)"),
            );
            out.add(
                n.rank,
                BY_NCCL,
                format!("NCCL ({label}) returned wrong sums: {detail}"),
            );
        }
        if ok == nodes.len() && !nodes.is_empty() {
            let bw = nodes
                .iter()
                .filter_map(|n| n.allreduce_busbw_gbs)
                .fold(f64::INFINITY, f64::min);
            let bytes = run
                .nodes
                .iter()
                .find_map(|n| n.output.as_ref()?.allreduce.as_ref().map(|c| c.bytes))
                .unwrap_or(0);
            f.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "allocation",
                    format!(
                        "nccl ({label}): {} ranks on {} nodes initialised; all-reduce of {} per GPU right on every GPU, bus bandwidth {} (slowest node)",
                        run.nranks,
                        nodes.len(),
                        human_bytes(bytes),
                        busbw_text(run.nranks, bw)
                    ),
                )
                .evidence(
                    format!("the nodes' nccl workers ({label})"),
                    format!("{} nodes ok, version {}", nodes.len(), rows.last().and_then(|r| r.version.clone()).unwrap_or_else(|| "unknown".into())),
                ),
            );
        }
    }
    let unrun = never_ran(&inp.runs);
    if let Some(sh) = &shared {
        let what = if sh.status == "nccl-error" {
            "NCCL failed"
        } else {
            "its NCCL worker failed"
        };
        let ran: Vec<String> = sh
            .seen
            .iter()
            .map(|(l, r)| format!("{} in the {l} run", who_r(*r)))
            .collect();
        let never = if unrun.is_empty() {
            String::new()
        } else {
            format!(
                "; NCCL never ran on the {} other node(s) ({}), which are not evaluated",
                unrun.len(),
                unrun
                    .iter()
                    .map(|(r, _)| who_r(*r))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut fi = Finding::new(
            ID,
            Status::Fail,
            "allocation",
            format!(
                "every node where NCCL ran failed alike ({}): {what} in step `{}`: {}; a cause the allocation shares (the job's environment: its container, --nccl-lib, the libraries on its loader path), not one node's: none is taken out{never}",
                ran.join(", "),
                sh.step,
                sh.error,
            ),
        );
        for (l, r) in &sh.seen {
            let err = inp
                .runs
                .iter()
                .find(|x| x.label == *l)
                .and_then(|x| x.nodes.iter().find(|n| n.member == *r))
                .and_then(|n| {
                    n.output
                        .as_ref()
                        .and_then(|o| o.error.clone())
                        .or_else(|| n.problem.clone())
                })
                .unwrap_or_default();
            fi = fi.evidence(format!("{}'s nccl worker ({l})", subj_r(*r)), err);
        }
        f.push(fi.fix("fix what every node shares (the NCCL library --nccl-lib names, libcuda on the job's loader path, the container image), then run preflight again; `gdrdoctor probe --nccl` on one node shows whether it fails there by itself"));
    }
    for (r, why) in &unrun {
        f.push(
            Finding::new(
                ID,
                Status::Error,
                subj_r(*r),
                format!(
                    "{}: NCCL never ran on this node, so it is not evaluated: nothing says whether GPUDirect RDMA works there ({why})",
                    who_r(*r)
                ),
            )
            .evidence(format!("{}'s nccl worker", subj_r(*r)), why.clone())
            .fix("fix the failure that stopped the run (preflight.nccl-run names it), then run preflight again"),
        );
    }
    rows
}

/// The all-reduce's bus bandwidth in words: NCCL's bus bandwidth of one rank is 0 by definition
/// (busBw = algBw x 2(n-1)/n: nothing crossed a link), which is not a measurement.
fn busbw_text(nranks: u32, slowest: f64) -> String {
    if nranks <= 1 {
        "not applicable (one rank: nothing crosses a link)".to_string()
    } else if slowest.is_finite() {
        gbs(slowest)
    } else {
        "unknown".into()
    }
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

// ---- what NCCL did per GPU beside the prediction ---------------------------------------------

/// The observation of one NCCL rank in one run's log.
fn observe(log: &NcclLog, rank: u32, run: &str) -> Option<Observed> {
    let logged: Vec<_> = log
        .logged_gdr()
        .into_iter()
        .filter(|g| g.rank == rank)
        .collect();
    if logged.is_empty() {
        return None;
    }
    let mut peers = BTreeMap::new();
    for c in &log.connections {
        let (local, _) = c.local();
        if local != rank {
            continue;
        }
        let peer = if local == c.from_rank {
            c.to_rank
        } else {
            c.from_rank
        };
        peers
            .entry(peer.to_string())
            .or_insert_with(|| c.transport.label());
    }
    let first = logged.first()?;
    let transport = log
        .connections
        .iter()
        .find(|c| c.local().0 == rank && matches!(c.transport, Transport::Net { .. }))
        .map(|c| c.transport.label())
        .unwrap_or_default();
    Some(Observed {
        run: run.into(),
        nic: first.nic.clone(),
        transport,
        gdr: logged.iter().all(|g| g.gdr),
        peers,
    })
}

struct Bad {
    gpu: i32,
    bdf: String,
    transport: String,
    why: String,
    run: String,
}

fn gdr(
    inp: &Inputs,
    logs: &BTreeMap<(usize, u32), NcclLog>,
    f: &mut Vec<Finding>,
    out: &mut TakeOuts,
) -> Vec<RailRow> {
    const ID: &str = "preflight.nccl-gdr";
    // The network-only run first: every GPU goes through its NIC there.
    let mut order: Vec<usize> = (0..inp.runs.len()).collect();
    order.sort_by_key(|i| {
        if inp.runs[*i].label == "net-only" {
            0
        } else {
            1
        }
    });
    let mut rows = Vec::new();
    for m in &inp.members {
        let Some(report) = &m.report else { continue };
        // The node's GPUs as NCCL ranks, from whichever run reported them.
        let ranks: Vec<LocalRank> = order
            .iter()
            .find_map(|&i| {
                let n = inp.runs[i].nodes.iter().find(|n| n.member == m.rank)?;
                let o = n.output.as_ref()?;
                (!o.ranks.is_empty()).then(|| o.ranks.clone())
            })
            .unwrap_or_default();
        let ran: Vec<&NodeRun> = inp
            .runs
            .iter()
            .filter_map(|r| r.nodes.iter().find(|n| n.member == m.rank))
            .collect();
        if ran.is_empty() {
            continue;
        }
        let log_missing: Vec<String> = inp
            .runs
            .iter()
            .filter_map(|r| {
                let n = r.nodes.iter().find(|n| n.member == m.rank)?;
                (n.log.is_none() && n.output.is_some()).then(|| {
                    format!(
                        "{} run: {}",
                        r.label,
                        n.log_error.clone().unwrap_or_else(|| "no log".into())
                    )
                })
            })
            .collect();
        let mut bad = Vec::new();
        let mut good = 0usize;
        let mut socket_only = 0usize;
        let mut seen_any = false;
        for lr in &ranks {
            let near = nearest(report, &lr.bdf);
            let mut pred = prediction(near);
            let obs = order.iter().find_map(|&i| {
                let log = logs.get(&(i, m.rank))?;
                observe(log, lr.rank, &inp.runs[i].label)
            });
            // The prediction for the NIC NCCL actually used, when it used another.
            let used_pair = obs
                .as_ref()
                .and_then(|o| o.nic.as_deref())
                .and_then(|nic| pair_for(report, &lr.bdf, nic));
            if let (Some(p), Some(n)) = (used_pair, near) {
                if p.nic != n.nic {
                    pred = prediction(Some(p));
                }
            }
            let sockets = obs
                .as_ref()
                .is_some_and(|o| o.transport.starts_with("NET/Socket"));
            // No RDMA device: nothing was predicted, and sockets do no GDR.
            let agree = if sockets && report.inventory.nics.is_empty() {
                None
            } else {
                obs.as_ref().map(|o| pred.gdr == Some(o.gdr))
            };
            if let (Some(o), true) = (&obs, sockets) {
                seen_any = true;
                if report.inventory.nics.is_empty() {
                    // No RDMA device: NCCL's network is its sockets, GDR does not apply.
                    socket_only += 1;
                } else {
                    let nics: Vec<&str> = report
                        .inventory
                        .nics
                        .iter()
                        .map(|n| n.ibdev.as_str())
                        .collect();
                    bad.push(Bad {
                        gpu: lr.cuda,
                        bdf: lr.bdf.clone(),
                        transport: o.transport.clone(),
                        why: format!(
                            "although the node has RDMA devices ({}): NCCL could not use them and fell back to its socket transport (its WARN lines in the JSON answer say why: NCCL_IB_HCA, a port down, rdma-core missing in the job's environment)",
                            nics.join(", ")
                        ),
                        run: o.run.clone(),
                    });
                }
            } else if let Some(o) = &obs {
                seen_any = true;
                let gpu_i = lr.cuda;
                let nic = o.nic.clone().unwrap_or_else(|| "its NIC".into());
                if !o.gdr {
                    let why = match used_pair.or(near) {
                        Some(p) if !p.enabled => format!("because {}", because(p)),
                        Some(p) => format!(
                            "although the node's facts predict GDR ({} path {}{}): the node's live state differs from its files (a module unloaded, a driver reloaded) or NCCL decided otherwise (its NIC-level line: {})",
                            p.nic,
                            p.nccl_path.clone().unwrap_or_else(|| p.path.clone()),
                            p.mechanism.as_deref().map(|x| format!(", {x}")).unwrap_or_default(),
                            nic_line(logs, inp, m.rank, o)
                        ),
                        None => "and the node's report has no verdict for this GPU".into(),
                    };
                    bad.push(Bad {
                        gpu: gpu_i,
                        bdf: lr.bdf.clone(),
                        transport: if o.transport.is_empty() {
                            nic.clone()
                        } else {
                            o.transport.clone()
                        },
                        why,
                        run: o.run.clone(),
                    });
                } else if pred.gdr == Some(false) {
                    f.push(
                        Finding::new(
                            ID,
                            Status::Warn,
                            format!("{}/{}", subject(m), lr.bdf),
                            format!(
                                "{}: NCCL used {} with GDRDMA on GPU {gpu_i} ({}) where the node's facts predict none ({}): gdrdoctor's prediction is wrong here",
                                subject(m),
                                o.transport,
                                lr.bdf,
                                pred.reasons.join("; ")
                            ),
                        )
                        .evidence(format!("{}'s NCCL log ({})", subject(m), o.run), o.transport.clone())
                        .fix("please report it with the node's snapshot (`gdrdoctor snapshot`) and the JSON answer"),
                    );
                } else {
                    good += 1;
                }
            }
            rows.push(RailRow {
                rank: m.rank,
                node: node_name(m),
                gpu: u32::try_from(lr.cuda).unwrap_or(0),
                bdf: lr.bdf.clone(),
                nccl_rank: Some(lr.rank),
                predicted: pred,
                observed: obs,
                agree,
            });
        }
        if !log_missing.is_empty() {
            f.push(
                Finding::new(
                    ID,
                    Status::Error,
                    subject(m),
                    format!(
                        "{}: NCCL's log could not be read, so what NCCL did there is unknown: {}",
                        who(m),
                        log_missing.join("; ")
                    ),
                )
                .evidence(format!("{}'s nccl worker", subject(m)), log_missing.join("; "))
                .fix("NCCL writes its log to NCCL_DEBUG_FILE in a private directory: the node's temporary directory must be writable"),
            );
        }
        // One finding per cause: a node without GDR says it once for all its GPUs.
        let mut causes: Vec<&str> = Vec::new();
        for b in &bad {
            if !causes.contains(&b.why.as_str()) {
                causes.push(&b.why);
            }
        }
        for why in causes {
            let these: Vec<&Bad> = bad.iter().filter(|b| b.why == why).collect();
            let Some(first) = these.first() else { continue };
            let (subj, msg) = if these.len() == 1 {
                (
                    format!("{}/{}", subject(m), first.bdf),
                    format!(
                        "{}: NCCL used {} without GDRDMA on GPU {} ({}) {why}",
                        subject(m),
                        first.transport,
                        first.gpu,
                        first.bdf
                    ),
                )
            } else {
                let ts: Vec<&str> = these.iter().map(|b| b.transport.as_str()).collect();
                (
                    subject(m),
                    format!(
                        "{}: NCCL used {} without GDRDMA on {} GPUs ({}) {why}",
                        subject(m),
                        if ts.len() <= 3 {
                            ts.join(", ")
                        } else {
                            format!("{} .. {}", ts[0], ts[ts.len() - 1])
                        },
                        these.len(),
                        these
                            .iter()
                            .map(|b| b.gpu.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            };
            let mut fi = Finding::new(ID, Status::Fail, subj, msg.clone());
            for b in &these {
                fi = fi.evidence(
                    format!("{}'s NCCL log ({})", subject(m), b.run),
                    format!("GPU {} ({}): {}", b.gpu, b.bdf, b.transport),
                );
            }
            f.push(fi.fix("fix the cause named (load nvidia_peermem, or install the open kernel modules for dma-buf), then run preflight again; until then take the node out of the job"));
            out.add(m.rank, BY_GDR, msg);
        }
        if socket_only > 0 {
            f.push(
                Finding::new(
                    ID,
                    Status::Skip,
                    subject(m),
                    format!(
                        "{}: no RDMA device on this node: NCCL connected {socket_only} GPU(s) through its socket transport, where GDR does not apply",
                        who(m)
                    ),
                )
                .evidence(format!("{}'s NCCL log", subject(m)), "NET/Socket"),
            );
        }
        if bad.is_empty() && good > 0 && log_missing.is_empty() {
            f.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    subject(m),
                    format!(
                        "{}: NCCL used GDRDMA on all {good} GPU(s), as predicted",
                        who(m)
                    ),
                )
                .evidence(
                    format!("{}'s NCCL log", subject(m)),
                    rows.iter()
                        .filter(|r| r.rank == m.rank)
                        .filter_map(|r| {
                            r.observed
                                .as_ref()
                                .map(|o| format!("GPU {} {}", r.gpu, o.transport))
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            );
        } else if !seen_any && log_missing.is_empty() && !ranks.is_empty() {
            // NCCL ran but connected nothing through a network (one node, or a failed run).
            f.push(
                Finding::new(
                    ID,
                    Status::Skip,
                    subject(m),
                    format!(
                        "{}: NCCL's log shows no network connection to judge GDR by",
                        who(m)
                    ),
                )
                .evidence(
                    format!("{}'s NCCL log", subject(m)),
                    "no `via NET/...` channel line",
                ),
            );
        }
    }
    rows
}

/// NCCL's NIC-level GDR line for the NIC an observation used, quoted.
fn nic_line(
    logs: &BTreeMap<(usize, u32), NcclLog>,
    inp: &Inputs,
    member: u32,
    o: &Observed,
) -> String {
    let ri = inp.runs.iter().position(|r| r.label == o.run);
    let line = ri.and_then(|i| logs.get(&(i, member))).and_then(|l| {
        l.nic_gdr
            .iter()
            .find(|g| Some(&g.name) == o.nic.as_ref())
            .map(|g| {
                format!(
                    "GPU Direct RDMA {} for HCA {} '{}'{}",
                    if g.enabled { "Enabled" } else { "Disabled" },
                    g.index,
                    g.name,
                    g.reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            })
    });
    line.unwrap_or_else(|| "none logged".into())
}

// ---- stage 3: pairs --------------------------------------------------------------------------

fn pairs(
    inp: &Inputs,
    logs: &BTreeMap<(usize, u32), NcclLog>,
    f: &mut Vec<Finding>,
    out: &mut TakeOuts,
) -> Vec<PairRow> {
    const ID: &str = "preflight.pairs";
    let member = |r: u32| inp.members.iter().find(|m| m.rank == r);
    let Some((ri, run)) = inp
        .runs
        .iter()
        .enumerate()
        .find(|(_, r)| r.label == "net-only")
    else {
        return Vec::new();
    };
    // Every round each node was asked to play, from any node's output (the schedule is the
    // same everywhere): (round, a, b) with a < b.
    let mut expected: BTreeSet<(u32, u32, u32)> = BTreeSet::new();
    let mut measured: BTreeMap<(u32, u32, u32, u32), (f64, u64)> = BTreeMap::new();
    let mut rail_count: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for n in &run.nodes {
        let Some(o) = &n.output else { continue };
        for r in &o.rounds {
            let (a, b) = (n.member.min(r.peer), n.member.max(r.peer));
            expected.insert((r.round, a, b));
            for rail in &r.rails {
                let key = (r.round, a, b, rail.rail);
                let e = measured.entry(key).or_insert((f64::INFINITY, 0));
                // Both ends measure the same exchange; the slower view counts.
                e.0 = e.0.min(rail.busbw_gbs);
                e.1 += rail.wrong;
            }
            let c = rail_count.entry((a, b)).or_insert(0);
            *c = (*c).max(r.rails.len() as u32);
        }
    }
    if expected.is_empty() {
        if run.nodes.len() >= 2 && run.not_run.is_none() {
            f.push(
                Finding::new(ID, Status::Error, "allocation", "no node pair was measured: the network-only NCCL run did not reach the pairs (see preflight.nccl-run)")
                    .evidence("net-only run", "no round reported"),
            );
        }
        return Vec::new();
    }
    // The NIC each node's GPU used (observed), else its nearest.
    let nic_of = |mem: u32, rail: u32| -> Option<(String, String)> {
        let m = member(mem)?;
        let report = m.report.as_ref()?;
        let n = run.nodes.iter().find(|n| n.member == mem)?;
        let lr = n
            .output
            .as_ref()?
            .ranks
            .iter()
            .find(|r| r.cuda == rail as i32)?;
        let obs = logs
            .get(&(ri, mem))
            .and_then(|l| observe(l, lr.rank, &run.label))
            .and_then(|o| o.nic);
        let nic = obs.or_else(|| nearest(report, &lr.bdf).map(|p| p.nic.clone()))?;
        Some((lr.bdf.clone(), nic))
    };
    let allowed = |a: u32, b: u32, rail: u32| -> Option<links::LinkRate> {
        let mut best: Option<links::LinkRate> = None;
        for x in [a, b] {
            let (bdf, nic) = nic_of(x, rail)?;
            let report = member(x)?.report.as_ref()?;
            let e = links::end(report, &bdf, &nic);
            let l = e.limit()?.clone();
            let l = links::LinkRate {
                gbs: l.gbs,
                what: format!("{}: {}", member(x).map(subject).unwrap_or_default(), l.what),
            };
            if best.as_ref().is_none_or(|b| l.gbs < b.gbs) {
                best = Some(l);
            }
        }
        best
    };
    let mut all_bw: Vec<f64> = measured
        .values()
        .map(|(b, _)| *b)
        .filter(|b| b.is_finite())
        .collect();
    all_bw.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let median = if all_bw.is_empty() {
        None
    } else {
        Some(all_bw[all_bw.len() / 2])
    };
    let th = inp.thresholds;
    let mut rows = Vec::new();
    for &(round, a, b) in &expected {
        let rails = rail_count.get(&(a, b)).copied().unwrap_or(0);
        for rail in 0..rails {
            let m = measured.get(&(round, a, b, rail));
            let lim = allowed(a, b, rail);
            let bw = m.map(|x| x.0).filter(|x| x.is_finite());
            let wrong = m.map(|x| x.1).unwrap_or(0);
            let fraction = bw.zip(lim.as_ref()).map(|(v, l)| v / l.gbs);
            let relative = bw
                .zip(median)
                .map(|(v, md)| if md > 0.0 { v / md } else { 1.0 });
            let status = if wrong > 0 {
                "fail"
            } else if bw.is_none() {
                "error"
            } else if (th.min_fraction > 0.0 && fraction.is_some_and(|x| x < th.min_fraction))
                || (th.min_relative > 0.0
                    && all_bw.len() >= 3
                    && relative.is_some_and(|x| x < th.min_relative))
            {
                "fail"
            } else {
                "pass"
            };
            rows.push(PairRow {
                round,
                a,
                b,
                a_node: member(a).and_then(node_name),
                b_node: member(b).and_then(node_name),
                rail,
                busbw_gbs: bw,
                allowed_gbs: lim.as_ref().map(|l| l.gbs),
                limited_by: lim.map(|l| l.what),
                fraction,
                wrong,
                status: status.into(),
            });
        }
    }
    // Attribute failing rails: a node whose every pair on a rail failed while some of its
    // partners passed with others is that rail's culprit; the rest are named as pairs.
    let rails_all: BTreeSet<u32> = rows.iter().map(|r| r.rail).collect();
    let mut named_pairs: BTreeSet<(u32, u32, u32, u32)> = BTreeSet::new();
    for &rail in &rails_all {
        let on: Vec<&PairRow> = rows
            .iter()
            .filter(|r| r.rail == rail && r.status != "error")
            .collect();
        let nodes_on: BTreeSet<u32> = on.iter().flat_map(|r| [r.a, r.b]).collect();
        for &x in &nodes_on {
            let mine: Vec<&&PairRow> = on.iter().filter(|r| r.a == x || r.b == x).collect();
            let failing: Vec<&&PairRow> = mine
                .iter()
                .copied()
                .filter(|r| r.status == "fail")
                .collect();
            if failing.is_empty() || failing.len() != mine.len() {
                continue;
            }
            let partner_ok = failing.iter().any(|r| {
                let p = if r.a == x { r.b } else { r.a };
                on.iter()
                    .any(|o| (o.a == p || o.b == p) && o.a != x && o.b != x && o.status == "pass")
            });
            if !partner_ok {
                continue;
            }
            let mx = member(x);
            let name = mx.map(subject).unwrap_or_else(|| format!("rank {x}"));
            let detail: Vec<String> = failing
                .iter()
                .map(|r| {
                    let p = if r.a == x {
                        r.b_node.clone()
                    } else {
                        r.a_node.clone()
                    };
                    format!(
                        "{} with {}",
                        r.busbw_gbs.map(gbs).unwrap_or_else(|| "?".into()),
                        p.unwrap_or_else(|| "?".into())
                    )
                })
                .collect();
            let lim = failing
                .first()
                .and_then(|r| r.allowed_gbs.zip(r.limited_by.clone()));
            let nic = nic_of(x, rail)
                .map(|(_, n)| n)
                .unwrap_or_else(|| "?".into());
            let msg = format!(
                "{}: rail {rail} ({nic}) is slow in every pair: {}{}{}",
                mx.map(who).unwrap_or_else(|| name.clone()),
                detail.join(", "),
                median
                    .map(|m| format!("; the median rail does {}", gbs(m)))
                    .unwrap_or_default(),
                lim.map(|(g, w)| format!("; the slower end's links allow {} ({w})", gbs(g)))
                    .unwrap_or_default()
            );
            let mut fi = Finding::new(ID, Status::Fail, format!("{name}/rail{rail}"), msg.clone());
            for r in &failing {
                named_pairs.insert((r.round, r.a, r.b, r.rail));
                fi = fi.expected(
                    format!(
                        "round {} {} <-> {} rail {}",
                        r.round,
                        r.a_node.clone().unwrap_or_default(),
                        r.b_node.clone().unwrap_or_default(),
                        r.rail
                    ),
                    r.busbw_gbs.map(gbs).unwrap_or_default(),
                    threshold_text(th, r.allowed_gbs, median),
                );
            }
            f.push(fi.fix("check that rail's NIC port (`gdrdoctor check --only rdma,counters`: rate, width, symbol errors), its cable and switch port, and the PCIe link of the GPU and NIC; then measure again"));
            out.add(
                x,
                BY_PAIRS,
                format!(
                    "rail {rail} ({nic}) below the threshold in every pair ({})",
                    detail.join(", ")
                ),
            );
        }
    }
    for r in rows
        .iter()
        .filter(|r| r.status == "fail" && !named_pairs.contains(&(r.round, r.a, r.b, r.rail)))
    {
        let msg = if r.wrong > 0 {
            format!(
                "{} <-> {} rail {}: {} received word(s) were not the peer's data",
                r.a_node.clone().unwrap_or_default(),
                r.b_node.clone().unwrap_or_default(),
                r.rail,
                r.wrong
            )
        } else {
            format!(
                "{} <-> {} rail {}: {}, below the site's threshold ({})",
                r.a_node.clone().unwrap_or_else(|| format!("rank {}", r.a)),
                r.b_node.clone().unwrap_or_else(|| format!("rank {}", r.b)),
                r.rail,
                r.busbw_gbs.map(gbs).unwrap_or_default(),
                threshold_text(th, r.allowed_gbs, median)
            )
        };
        f.push(
            Finding::new(ID, Status::Fail, format!("{}-{}/rail{}", r.a_node.clone().unwrap_or_default(), r.b_node.clone().unwrap_or_default(), r.rail), msg)
                .expected(format!("round {} rail {}", r.round, r.rail), r.busbw_gbs.map(gbs).unwrap_or_default(), threshold_text(th, r.allowed_gbs, median))
                .fix("one pair cannot say which end is slow: measure both nodes with a third one (more nodes in the allocation), and check both ends' NIC ports and PCIe links"),
        );
    }
    let unmeasured: Vec<&PairRow> = rows.iter().filter(|r| r.status == "error").collect();
    if !unmeasured.is_empty() {
        let mut fi = Finding::new(
            ID,
            Status::Error,
            "allocation",
            format!("{} pair rail(s) were not measured (a node's NCCL run did not reach its rounds; see preflight.nccl-run)", unmeasured.len()),
        );
        for r in unmeasured.iter().take(8) {
            fi = fi.evidence(
                format!("round {}", r.round),
                format!(
                    "{} <-> {} rail {}",
                    r.a_node.clone().unwrap_or_default(),
                    r.b_node.clone().unwrap_or_default(),
                    r.rail
                ),
            );
        }
        f.push(fi);
    }
    let passed: Vec<&PairRow> = rows.iter().filter(|r| r.status == "pass").collect();
    if !passed.is_empty() && rows.iter().all(|r| r.status == "pass") {
        let slowest = passed
            .iter()
            .filter_map(|r| r.busbw_gbs.map(|b| (b, *r)))
            .min_by(|x, y| x.0.partial_cmp(&y.0).unwrap_or(std::cmp::Ordering::Equal));
        let rounds: BTreeSet<u32> = rows.iter().map(|r| r.round).collect();
        f.push(
            Finding::new(
                ID,
                Status::Pass,
                "allocation",
                format!(
                    "{} pair rail(s) in {} round(s) all reach the threshold; slowest {}",
                    rows.len(),
                    rounds.len(),
                    slowest
                        .map(|(b, r)| format!(
                            "{} ({} <-> {} rail {}{})",
                            gbs(b),
                            r.a_node.clone().unwrap_or_default(),
                            r.b_node.clone().unwrap_or_default(),
                            r.rail,
                            r.fraction
                                .map(|x| format!(", {:.0}% of what its links allow", x * 100.0))
                                .unwrap_or_default()
                        ))
                        .unwrap_or_default()
                ),
            )
            .evidence(
                "the nodes' nccl workers (net-only)",
                format!("median rail {}", median.map(gbs).unwrap_or_default()),
            ),
        );
    }
    rows
}

fn threshold_text(th: Thresholds, allowed: Option<f64>, median: Option<f64>) -> String {
    let mut parts = Vec::new();
    if th.min_fraction > 0.0 {
        if let Some(a) = allowed {
            parts.push(format!(
                "{:.0}% of {} the links allow",
                th.min_fraction * 100.0,
                gbs(a)
            ));
        }
    }
    if th.min_relative > 0.0 {
        if let Some(m) = median {
            parts.push(format!(
                "{:.0}% of the median {}",
                th.min_relative * 100.0,
                gbs(m)
            ));
        }
    }
    if parts.is_empty() {
        "no threshold applies".into()
    } else {
        format!("at least {}", parts.join(" and "))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn node(member: u32, status: &str, step: &str, elapsed: f64) -> NodeRun {
        let mut n = NodeRun {
            member,
            step: Some(step.into()),
            elapsed_ms: Some(elapsed),
            ..Default::default()
        };
        match status {
            "ok" => {
                n.output = Some(NcclOutput {
                    step: "done".into(),
                    allreduce: Some(Collective {
                        bytes: 4,
                        ms: 1.0,
                        iterations: 1,
                        busbw_gbs: 1.0,
                        sums: Sums {
                            expected: 1.0,
                            checked: 1,
                            wrong: 0,
                            first_wrong: None,
                        },
                    }),
                    ..Default::default()
                })
            }
            "remote" | "own" => {
                n.output = Some(NcclOutput {
                    step: step.into(),
                    error: Some(if status == "remote" {
                        "ncclGroupEnd failed: remote process exited or there was a network error (6)".into()
                    } else {
                        "ncclGroupEnd failed: unhandled system error (2)".into()
                    }),
                    ..Default::default()
                })
            }
            "timeout" => {
                n.problem = Some("killed at its deadline".into());
                n.timed_out = true;
            }
            _ => unreachable!(),
        }
        n
    }

    fn run(nodes: Vec<NodeRun>) -> RunInput {
        RunInput {
            label: "default".into(),
            nodes,
            deadline_ms: Some(8000.0),
            ..Default::default()
        }
    }

    #[test]
    fn one_rank_has_no_bus_bandwidth_to_report() {
        // The 1-GPU preflight on the H100 printed "bus bandwidth 0.000 GB/s".
        assert_eq!(
            busbw_text(1, 0.0),
            "not applicable (one rank: nothing crosses a link)"
        );
        assert_eq!(busbw_text(8, 180.25), gbs(180.25));
        assert_eq!(busbw_text(8, f64::INFINITY), "unknown");
    }

    #[test]
    fn an_early_failure_is_blamed_and_the_waiters_are_not() {
        // Rank 2 failed at once; rank 0 (which held the bootstrap root) was killed at its
        // deadline, and ranks 1 and 3 then lost the root: remote errors, but late.
        let b = blame(&run(vec![
            node(0, "timeout", "init", 8000.0),
            node(1, "remote", "init", 7900.0),
            node(2, "remote", "init", 40.0),
            node(3, "remote", "init", 7950.0),
        ]));
        assert_eq!((b.kind, b.culprits.clone()), (BlameKind::Failed, vec![2]));
        assert_eq!(b.waiting, vec![0, 1, 3]);
        // An error of its own wins over a remote one at the same step.
        let b = blame(&run(vec![
            node(0, "remote", "allreduce-wait", 100.0),
            node(1, "own", "allreduce-wait", 90.0),
            node(2, "ok", "done", 120.0),
        ]));
        assert_eq!(b.culprits, vec![1]);
    }

    #[test]
    fn a_node_behind_the_others_hung_and_equals_are_not_blamed() {
        // Rank 3 never left the all-reduce's enqueue; the others waited in it, and those that
        // lost the root when rank 0 was killed failed late.
        let b = blame(&run(vec![
            node(0, "timeout", "allreduce-wait", 8000.0),
            node(1, "remote", "allreduce-wait", 7990.0),
            node(2, "remote", "allreduce-wait", 7995.0),
            node(3, "timeout", "allreduce", 8000.0),
        ]));
        assert_eq!((b.kind, b.culprits.clone()), (BlameKind::Hung, vec![3]));
        assert_eq!(b.step, "allreduce");
        let b = blame(&run(vec![
            node(0, "timeout", "init", 8000.0),
            node(1, "timeout", "init", 8000.0),
        ]));
        assert_eq!(b.kind, BlameKind::AllStuck);
        assert!(b.culprits.is_empty());
        let (c, stuck) = culprits(&run(vec![
            node(0, "timeout", "init", 8000.0),
            node(1, "timeout", "init", 8000.0),
        ]));
        assert!(c.is_empty() && stuck);
        let b = blame(&run(vec![
            node(0, "ok", "done", 1.0),
            node(1, "ok", "done", 1.0),
        ]));
        assert_eq!(b.kind, BlameKind::None);
    }

    #[test]
    fn a_failure_every_node_that_ran_shares_is_the_allocations() {
        // Every node failed NCCL's init with its own error, alike: nobody broke the others.
        let all = run(vec![
            node(0, "own", "init", 40.0),
            node(1, "own", "init", 41.0),
            node(2, "own", "init", 39.0),
        ]);
        let sh = shared_failure(std::slice::from_ref(&all)).unwrap();
        assert_eq!(sh.members, vec![0, 1, 2]);
        assert_eq!((sh.status, sh.step.as_str()), ("nccl-error", "init"));
        // The culprits stay what blame says (the coordinator's second run); the answer
        // takes nobody out for it.
        let inp = Inputs {
            allocation: Allocation {
                engine: "flags".into(),
                job: None,
                world: 3,
                rendezvous: "127.0.0.1:1".into(),
                timeout_s: 10.0,
            },
            members: (0..3)
                .map(|r| Member {
                    rank: r,
                    joined_ms: Some(1.0),
                    ..Default::default()
                })
                .collect(),
            refused: Vec::new(),
            drift: Vec::new(),
            runs: vec![all.clone()],
            thresholds: Thresholds::default(),
            stages: Vec::new(),
            fail_on: crate::report::FailOn::default(),
            allow_incomplete: false,
        };
        let a = answer(&inp);
        // (These members sent no check report: taken out for that, never for NCCL.)
        assert!(
            a.take_out
                .iter()
                .all(|t| t.reasons.iter().all(|r| !r.contains("NCCL"))),
            "{:#?}",
            a.take_out
        );
        let bad: Vec<&Finding> = a
            .findings
            .iter()
            .filter(|f| f.id == "preflight.nccl-run" && f.status == Status::Fail)
            .collect();
        assert_eq!(bad.len(), 1, "{bad:#?}");
        assert_eq!(bad[0].subject, "allocation");
        assert!(
            bad[0]
                .message
                .starts_with("every node where NCCL ran failed alike"),
            "{}",
            bad[0].message
        );
        // A root that failed before NCCL's id, the others never started, then the next root
        // failing the same way in the second run: two alike; the rest were never evaluated.
        let mut first = run(vec![node(0, "own", "unique-id", 5.0)]);
        let mut second = run(vec![node(1, "own", "unique-id", 5.0)]);
        second.label = "net-only".into();
        for (r, m) in [(&mut first, 1..4), (&mut second, 2..4)] {
            for x in m {
                r.nodes.push(NodeRun {
                    member: x,
                    not_started: true,
                    problem: Some("not started".into()),
                    ..Default::default()
                });
            }
        }
        let runs = [first.clone(), second];
        let sh = shared_failure(&runs).unwrap();
        assert_eq!(sh.members, vec![0, 1]);
        assert_eq!(
            never_ran(&runs).iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            vec![2, 3]
        );
        // One node alone cannot tell its own failure from the allocation's.
        assert!(shared_failure(std::slice::from_ref(&first)).is_none());
        // Not alike: another step, another error, a node that passed or hung.
        for other in [
            node(2, "own", "allreduce", 40.0),
            node(2, "remote", "init", 40.0),
            node(2, "ok", "done", 40.0),
            node(2, "timeout", "init", 8000.0),
        ] {
            let r = run(vec![
                node(0, "own", "init", 40.0),
                node(1, "own", "init", 41.0),
                other,
            ]);
            assert!(shared_failure(std::slice::from_ref(&r)).is_none());
        }
    }

    #[test]
    fn unknown_run_times_are_taken_as_early() {
        let mut n = node(1, "remote", "init", 0.0);
        n.elapsed_ms = None;
        let b = blame(&run(vec![node(0, "timeout", "init", 8000.0), n]));
        assert_eq!(b.culprits, vec![1]);
    }
}
