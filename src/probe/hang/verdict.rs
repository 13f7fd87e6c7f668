//! The verdict of `probe --hang`: findings from the record of its worker runs, a pure function
//! (replayed from saved reports by the tests). The record keeps per worker run what was asked,
//! the worker's output, its raw printf lines, how it ended, and the health check after an
//! escalation; the findings come out in the order the probe reported them live.

use super::model::{Bench, Class, HangOutput, Options, ScenarioResult, Verdict};
use crate::probe::common::Problem;
use gdrdoctor_checks::report::{Finding, Status};
use serde::{Deserialize, Serialize};

/// What the report keeps of `probe --hang` (`probe.hang`): the run of the main scenarios and,
/// when asked, the abort-ignoring scenario's own run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "hang", default, skip_serializing_if = "Option::is_none")]
    pub main: Option<GroupRecord>,
    #[serde(
        rename = "hang-escalation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub escalation: Option<GroupRecord>,
}

impl Record {
    pub fn groups(&self) -> impl Iterator<Item = &GroupRecord> {
        self.main.iter().chain(self.escalation.iter())
    }
}

/// One worker run of the hang probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// What the worker was asked (absent in reports captured before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Options>,
    /// The worker's output, its fields at the top level.
    #[serde(flatten)]
    pub output: Option<HangOutput>,
    /// The worker's raw stdout lines: device printf and the scenario markers.
    #[serde(default)]
    pub printf: Vec<String>,
    /// How the worker ended: `Exited(0)`, `Exited(3)` (escalation), `TimedOut`, `Signaled(n)`.
    #[serde(default)]
    pub worker_exit: String,
    /// Why there is no usable output, or what went wrong around it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    /// The health check after an escalation or a stopped worker: its duration...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_ms: Option<f64>,
    /// ...and how long after the stall verdict the GPU was found healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_to_healthy_ms: Option<f64>,
    /// Or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_error: Option<String>,
}

impl GroupRecord {
    /// The worker was killed at its deadline or crashed.
    pub fn stopped(&self) -> bool {
        self.worker_exit.starts_with("TimedOut") || self.worker_exit.starts_with("Signaled")
    }

    /// A scenario's kernel ignored the abort: the worker left without releasing the GPU.
    pub fn escalated(&self) -> bool {
        self.output
            .as_ref()
            .is_some_and(|p| p.scenarios.iter().any(|s| s.escalated))
    }
}

/// Findings from the record of one `probe --hang`.
pub fn findings(r: &Record) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut outputs: Vec<&HangOutput> = Vec::new();
    for g in r.groups() {
        match &g.problem {
            Some(Problem::Start { message }) => {
                out.push(Finding::new(
                    "probe.cuda",
                    Status::Error,
                    "node",
                    message.clone(),
                ));
                continue;
            }
            Some(Problem::Worker { error }) => {
                out.push(Finding::new(
                    "probe.cuda",
                    Status::Error,
                    "node",
                    format!("cuda unavailable for the probe: {error}"),
                ));
                continue;
            }
            _ => {}
        }
        if g.escalated() || g.stopped() {
            match (&g.health_error, g.health_check_ms) {
                (None, Some(ms)) => out.push(Finding::new("probe.gpu-health", Status::Pass, "node", match g.verdict_to_healthy_ms {
                    Some(s) => format!("gpu healthy in a fresh process {s:.0} ms after the verdict (worker {}, health check {ms:.0} ms)", g.worker_exit),
                    None => format!("gpu healthy in a fresh process after the worker was stopped (health check {ms:.0} ms)"),
                })),
                (e, _) => out.push(Finding::new("probe.gpu-health", Status::Fail, "node", format!("gpu not healthy after the hang worker was stopped: {}", e.as_deref().unwrap_or("no health check was run")))
                    .fix("check `nvidia-smi` and `dmesg` for Xid errors; a GPU that stays hung needs `nvidia-smi -r` or a reboot")),
            }
        } else if let Some(Problem::Run { message }) = &g.problem {
            out.push(Finding::new(
                "probe.cuda",
                Status::Error,
                "node",
                message.clone(),
            ));
        }
        let requested: Vec<String> = g
            .params
            .as_ref()
            .map(|p| p.scenarios.clone())
            .unwrap_or_default();
        if g.output.is_none() && g.stopped() {
            // Killed (deadline, signal, crash) before it printed a result: say so, with what
            // it printed, instead of leaving only the health check.
            let tail: Vec<&str> = g.printf.iter().rev().take(3).map(String::as_str).collect();
            out.push(
                Finding::new(
                    "probe.hang",
                    Status::Error,
                    "node",
                    format!(
                        "the hang worker ({}) was stopped before it reported: {}",
                        requested.join(", "),
                        g.worker_exit
                    ),
                )
                .evidence(
                    "last worker output",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                )
                .fix("raise --timeout if the run was simply long; otherwise check `dmesg` for Xid errors and rerun with fewer scenarios (--inject NAME)"),
            );
        }
        if let Some(p) = &g.output {
            // Scenarios the worker never reached (it left early after an escalation).
            for name in &requested {
                if !p.scenarios.iter().any(|s| &s.name == name) {
                    out.push(Finding::new(
                        "probe.hang",
                        Status::Error,
                        format!("{}/{name}", p.gpu),
                        "did not run: the worker stopped after an earlier scenario's kernel ignored the abort",
                    ));
                }
            }
            outputs.push(p);
        }
    }
    for o in &outputs {
        for s in &o.scenarios {
            out.push(scenario_finding(o, s));
        }
        if let Some(b) = &o.bench {
            out.push(bench_finding(&o.gpu, b));
        }
    }
    if !outputs.is_empty() && !out.iter().any(|f| f.id == "probe.cuda") {
        let o = &outputs[0];
        out.insert(
            0,
            Finding::new(
                "probe.cuda",
                Status::Pass,
                "node",
                format!(
                    "{} ({}), kernels from {} in {:.0} ms",
                    o.name, o.gpu, o.kernel_source, o.load_ms
                ),
            ),
        );
    }
    out
}

fn stall_text(v: &Verdict) -> String {
    let Some(s) = v.stalled.first() else {
        return format!("{} (no waiter detail)", v.class.as_str());
    };
    let mem = s
        .memory
        .map(|m| format!(", memory holds {m}"))
        .unwrap_or_default();
    let mut t = format!(
        "{}: block {} warp {} (SM {}) waits at site {} ({}) for *{} {} {}, sees {}{mem}, for {:.0} ms",
        v.class.as_str(),
        s.block,
        s.warp,
        s.sm,
        s.site,
        s.site_what,
        s.addr,
        if s.cmp.is_empty() { "==" } else { s.cmp.as_str() },
        s.expected,
        s.observed,
        s.waited_ms
    );
    if v.stalled_total > 1 {
        t.push_str(&format!(" (+{} more waiters)", v.stalled_total - 1));
    }
    if v.class == Class::ForwardProgress {
        t.push_str(&format!(
            "; {} blocks never started, {} started, capacity {}",
            v.never_started,
            v.started,
            v.capacity
                .map(|c| c.to_string())
                .unwrap_or_else(|| "?".into())
        ));
    }
    if let Some(w) = &v.writer {
        if v.class == Class::Ordering {
            t.push_str(&format!("; writer {w}"));
        }
        if v.class == Class::RemoteWait {
            t.push_str(&format!(
                "; the write should come from {} ({w})",
                v.peer.as_deref().unwrap_or("the peer gpu")
            ));
        }
    }
    t
}

fn scenario_finding(o: &HangOutput, s: &ScenarioResult) -> Finding {
    let subject = format!("{}/{}", o.gpu, s.name);
    let timing = s
        .timing
        .iter()
        .map(|(k, v)| format!("{k}={v:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    if s.kind == "error" {
        return Finding::new(
            "probe.hang",
            Status::Error,
            subject,
            format!("scenario could not run: {}", s.notes.join("; ")),
        );
    }
    let mut f = match (s.kind.as_str(), &s.verdict) {
        ("inject", Some(v)) if Some(v.class) == s.expect => Finding::new(
            "probe.hang-inject",
            Status::Pass,
            &subject,
            format!(
                "injected fault detected and classified in {:.0} ms: {}",
                v.latency_ms,
                stall_text(v)
            ),
        ),
        ("inject", Some(v)) => Finding::new(
            "probe.hang-inject",
            Status::Fail,
            &subject,
            format!(
                "injected fault classified as {} instead of {}: {}",
                v.class.as_str(),
                s.expect.map(|c| c.as_str()).unwrap_or("?"),
                stall_text(v)
            ),
        ),
        ("inject", None) => Finding::new(
            "probe.hang-inject",
            Status::Fail,
            &subject,
            format!(
                "injected fault not detected: the scenario completed in {:.0} ms",
                s.elapsed_ms
            ),
        ),
        (_, None) => Finding::new(
            "probe.hang",
            Status::Pass,
            &subject,
            format!(
                "completed in {:.0} ms, no stall{}",
                s.elapsed_ms,
                if timing.is_empty() {
                    String::new()
                } else {
                    format!(" ({timing})")
                }
            ),
        ),
        (_, Some(v)) => Finding::new(
            "probe.hang",
            Status::Fail,
            &subject,
            format!("stall: {}", stall_text(v)),
        )
        .fix(super::model::fix(v.class)),
    };
    f = f.evidence("scenario", s.description.clone());
    if let Some(v) = &s.verdict {
        f = f.evidence(
            "class",
            format!("{}: {}", v.class.as_str(), super::model::explain(v.class)),
        );
        f = f.evidence(
            "detector",
            format!(
                "threshold {:.0} ms, poll {:.0} ms, verdict {:.1} ms after the wait began",
                v.threshold_ms, v.poll_ms, v.latency_ms
            ),
        );
        for st in v.stalled.iter().take(4) {
            f = f.evidence(
                "waiter",
                format!("block {} warp {} sm {} site {} {} addr {} expected {} observed {} memory {} waited {:.0} ms heartbeat {:.0} ms ago", st.block, st.warp, st.sm, st.site, st.phase, st.addr, st.expected, st.observed, st.memory.map(|m| m.to_string()).unwrap_or_else(|| "?".into()), st.waited_ms, st.heartbeat_age_ms),
            );
        }
        match (s.aborted_cleanly, s.abort_ms) {
            (Some(true), Some(ms)) => f = f.evidence("abort", format!("cooperative abort: every block exited {ms:.1} ms after the abort flag")),
            (Some(false), _) => f = f.evidence("abort", "the kernel ignored the abort flag: the worker exited and the parent checked the gpu in a fresh process"),
            _ => {}
        }
    }
    for w in &s.warnings {
        f = f.evidence("warning", w.clone());
    }
    for n in &s.notes {
        f = f.evidence("note", n.clone());
    }
    f
}

fn bench_finding(gpu: &str, b: &Bench) -> Finding {
    let pct = |v: &[f64], p: f64| -> f64 {
        let mut x = v.to_vec();
        x.sort_by(|a, b| a.total_cmp(b));
        if x.is_empty() {
            return 0.0;
        }
        x[(((x.len() - 1) as f64) * p).round() as usize]
    };
    let med = |v: &[f64]| pct(v, 0.5);
    let rtt_over =
        (med(&b.pingpong_rtt_ns_instrumented) / med(&b.pingpong_rtt_ns_bare) - 1.0) * 100.0;
    let thr_over =
        (1.0 - med(&b.ring_items_per_s_instrumented) / med(&b.ring_items_per_s_bare)) * 100.0;
    let thr_delta = -thr_over;
    Finding::new(
        "probe.hang",
        Status::Pass,
        format!("{gpu}/bench"),
        format!(
            "detection latency p50 {:.1} ms p99 {:.1} ms at threshold {:.0} ms ({} stalls); instrumentation {rtt_over:+.1}% round trip, {thr_delta:+.1}% ring throughput; host poll {:.1} ns per record",
            med(&b.detect_latency_ms),
            pct(&b.detect_latency_ms, 0.99),
            b.detect_threshold_ms,
            b.detect_latency_ms.len(),
            b.poll_ns_per_record
        ),
    )
    .evidence(format!("ping-pong rtt ns bare / instrumented (median of {})", b.pingpong_rtt_ns_bare.len()), format!("{:.0} / {:.0}", med(&b.pingpong_rtt_ns_bare), med(&b.pingpong_rtt_ns_instrumented)))
    .evidence(format!("ring items/s bare / instrumented (median of {})", b.ring_items_per_s_bare.len()), format!("{:.3e} / {:.3e}", med(&b.ring_items_per_s_bare), med(&b.ring_items_per_s_instrumented)))
}
