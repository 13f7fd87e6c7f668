//! Watch's findings: one area's report (what watch learned about it) into `watch.*` findings,
//! and their table.

use super::classify::*;
use super::layout::*;
use crate::findings::def::{finding, FindingDef};
use crate::report::{Finding, Status};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every watch finding, with its one-line title and its page (docs/checks/<id>.md).
pub static FINDINGS: &[FindingDef] = &[
    finding!("watch.area", "a progress area in /dev/shm is readable, valid and belongs to a running job"),
    finding!("watch.stall", "no instrumented wait of the job stalls past the threshold; a stall says who waits on what, and why"),
    finding!("watch.abort", "with --abort: every stalled waiter left its wait after the cooperative abort flag was set"),
];

/// One stall as watch followed it: detected once, then resolved or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    pub waiter: Waiter,
    /// Host realtime (ns) of the detection.
    pub detected_ns: u64,
    /// The wait's age at detection (ms): detection latency = this minus the threshold.
    pub detected_after_ms: f64,
    /// `stalled` (still at the end), `resumed` (the wait ended), `aborted` (ABORTED after
    /// --abort), `job-ended` (the process exited while it waited).
    pub outcome: String,
    /// The longest the wait was seen to last (ms).
    pub waited_ms: f64,
}

/// What watch learned about one area, for its findings and the raw JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AreaReport {
    pub path: String,
    pub pid: Option<u32>,
    pub job: String,
    /// `running`, `exited` (seen running, then gone), `gone` (not running when first seen),
    /// `reused` (the pid runs another process), `closed` (cleanup ran).
    pub process: String,
    /// Why the area could not be read, when it could not.
    pub error: Option<String>,
    pub header: Option<Header>,
    pub kernels: Vec<Kernel>,
    pub sites: Vec<Site>,
    pub clock: Option<Clock>,
    pub polls: u64,
    pub watched_ms: f64,
    pub threshold_ms: f64,
    pub poll_ms: f64,
    pub counts: Counts,
    pub longest_wait_ms: f64,
    pub episodes: Vec<Episode>,
    pub slow: Vec<Waiter>,
    /// With --abort: `not-needed`, `set`, or the error of setting it.
    pub abort: Option<String>,
    /// With --abort: waiters still WAITING after the grace.
    pub abort_still_waiting: Vec<Waiter>,
    pub abort_ms: Option<f64>,
    pub warnings: Vec<String>,
}

fn group_key(e: &Episode) -> (String, u32, Option<Class>) {
    (e.waiter.kernel.clone(), e.waiter.site, e.waiter.class)
}

/// The findings of one area.
pub fn findings(a: &AreaReport) -> Vec<Finding> {
    let subject = match a.pid {
        Some(p) if !a.job.is_empty() => format!("pid {p} ({})", a.job),
        Some(p) => format!("pid {p}"),
        None => a.path.clone(),
    };
    let Some(h) = &a.header else {
        return vec![damaged(a)];
    };
    let mut out = vec![area_finding(a, h, &subject)];
    out.extend(stall_findings(a, &subject));
    if let Some(ab) = &a.abort {
        out.push(abort_finding(a, ab, &subject));
    }
    out
}

/// `watch.area` of an area whose header cannot be read.
fn damaged(a: &AreaReport) -> Finding {
    let err = a.error.clone().unwrap_or_else(|| "unreadable".into());
    if err.starts_with("still initialising") {
        // Not damaged: the job has not finished `gdrdoctor_progress_init` (the magic is
        // written last). Still no verdict on its waits: an error, never a pass.
        return Finding::new(
            "watch.area",
            Status::Error,
            &a.path,
            format!("{}: {err}", a.path),
        )
        .evidence(&a.path, err)
        .fix("the job is still starting: run watch again in a moment, or without --once (live mode waits up to 10 s for an area to be initialised)");
    }
    Finding::new(
        "watch.area",
        Status::Error,
        &a.path,
        format!("{}: damaged or foreign progress area: {err}", a.path),
    )
    .evidence(&a.path, err)
    .fix(format!("if no job of yours uses {} (its name says which pid made it), remove it; if one does, the job and this gdrdoctor disagree on the layout of kernels/include/gdrdoctor/progress.cuh: build both from the same checkout", a.path))
}

/// `watch.area`: whose area it is, whether its job runs, and what it holds.
fn area_finding(a: &AreaReport, h: &Header, subject: &str) -> Finding {
    let layout = format!(
        "magic GDRDPRG1 version {VERSION}, {} bytes, {} of {} records in use, {} kernel(s), {} site(s) named, {} words",
        h.area_size,
        h.records_used,
        h.record_count,
        h.kernels_used,
        a.sites.iter().filter(|s| !s.name.is_empty()).count(),
        h.words_count
    );
    let mut area = match a.process.as_str() {
        "running" | "exited" => Finding::new(
            "watch.area",
            Status::Pass,
            subject,
            format!(
                "job {:?} (pid {}): {} kernel(s), {} records in use; {}",
                h.job,
                h.pid,
                h.kernels_used,
                h.records_used,
                if a.process == "exited" {
                    "the job exited while watched"
                } else {
                    "running"
                }
            ),
        ),
        "closed" => Finding::new(
            "watch.area",
            Status::Warn,
            subject,
            format!("area of job {:?} (pid {}) is closed (gdrdoctor_progress_cleanup ran) but still in /dev/shm", h.job, h.pid),
        )
        .fix(format!("remove it: rm {}", a.path)),
        "reused" => Finding::new(
            "watch.area",
            Status::Warn,
            subject,
            format!("leftover area of job {:?}: pid {} now runs another process (its start time differs)", h.job, h.pid),
        )
        .fix(format!("the job ended without gdrdoctor_progress_cleanup (crash or kill): remove it: rm {}", a.path)),
        _ => Finding::new(
            "watch.area",
            Status::Warn,
            subject,
            format!("leftover area of job {:?}: pid {} is not running", h.job, h.pid),
        )
        .fix(format!("the job ended without gdrdoctor_progress_cleanup (crash or kill); its records are its last state (below); remove it when done: rm {}", a.path)),
    }
    .evidence(&a.path, layout);
    if let Some(c) = &a.clock {
        area = area.evidence("clock", c.describe());
    }
    if h.dropped > 0 {
        area.status = area.status.max(Status::Warn);
        area.message.push_str(&format!(
            "; {} kernel declaration(s) got no records (area full): their waits are bare spins watch cannot see",
            h.dropped
        ));
        area = area
            .expected(
                format!("{} dropped", a.path),
                h.dropped.to_string(),
                "0".to_string(),
            )
            .fix("give gdrdoctor_progress_init more records (gdrdoctor_progress_options_t.records) or declare fewer blocks per kernel");
    }
    for w in &a.warnings {
        area = area.evidence("warning", w.clone());
    }
    area
}

/// `watch.stall`: one finding per (kernel, site, class) of the stalls watch saw, or one
/// saying there was none (or that some waits cannot be known).
fn stall_findings(a: &AreaReport, subject: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let alive = a.process == "running" || a.process == "exited";
    // Stalls: one finding per (kernel, site, class).
    let mut groups: BTreeMap<(String, u32, Option<Class>), Vec<&Episode>> = BTreeMap::new();
    for e in &a.episodes {
        groups.entry(group_key(e)).or_default().push(e);
    }
    let watch_line = format!(
        "threshold {:.0} ms, poll {:.0} ms, {} poll(s) over {:.0} ms",
        a.threshold_ms, a.poll_ms, a.polls, a.watched_ms
    );
    if groups.is_empty() && alive {
        let f = if a.counts.undated > 0 && a.watched_ms < a.threshold_ms {
            // Their waits began at a time the clock cannot place, and watch itself saw them
            // for less than the threshold: a stall among them would look like this too.
            Finding::new(
                "watch.stall",
                Status::Error,
                subject,
                format!(
                    "no stall seen, but {} waiting record(s) cannot be dated (the area's clock puts their wait start outside the area's life) and watch saw them for only {:.0} ms, less than the {:.0} ms threshold: they may be stalled",
                    a.counts.undated, a.watched_ms, a.threshold_ms
                ),
            )
            .evidence("clock", a.clock.map(|c| c.describe()).unwrap_or_else(|| "unknown".into()))
            .fix(format!("watch for longer than the threshold (`gdrdoctor watch --pid <pid> --duration {:.0}`, without --once): the time watch sees a waiter waiting needs no clock; a wrong offset in the area header means the job's gdrdoctor_progress_init calibration failed or the area was written by something else", (a.threshold_ms / 1000.0).ceil() + 1.0))
        } else if a.counts.unstable > 0 {
            // A record that never reads consistently hides whatever it holds: not healthy.
            Finding::new(
                "watch.stall",
                Status::Error,
                subject,
                format!(
                    "no stall among the records read, but {} record(s) never read consistently (seqlock odd or changing on every retry): their waits are unknown",
                    a.counts.unstable
                ),
            )
            .fix("a warp stopped in the middle of an update (its kernel was killed) or something else writes the area; watch again, and if it persists treat the job as hung (gdrdoctor watch --abort, cuda-gdb)")
        } else {
            Finding::new(
                "watch.stall",
                Status::Pass,
                subject,
                format!(
                    "no waiter stalled for {:.0} ms or more ({} waiting now, longest wait {:.0} ms)",
                    a.threshold_ms, a.counts.waiting, a.longest_wait_ms
                ),
            )
        };
        out.push(
            f.evidence(&a.path, counts_text(&a.counts))
                .evidence("watch", watch_line.clone()),
        );
    }
    for ((_, _, class), eps) in groups {
        out.push(group_finding(a, subject, alive, &watch_line, class, &eps));
    }
    out
}

/// The `watch.stall` of one group of episodes (one kernel, site and class).
fn group_finding(
    a: &AreaReport,
    subject: &str,
    alive: bool,
    watch_line: &str,
    class: Option<Class>,
    eps: &[&Episode],
) -> Finding {
    let first = eps[0];
    let w = &first.waiter;
    let still: Vec<&&Episode> = eps
        .iter()
        .filter(|e| e.outcome == "stalled" || e.outcome == "job-ended")
        .collect();
    let resumed = eps.iter().all(|e| e.outcome == "resumed");
    let status = if !alive || resumed {
        Status::Warn
    } else {
        Status::Fail
    };
    let more = if eps.len() > 1 {
        format!(" (+{} more waiters)", eps.len() - 1)
    } else {
        String::new()
    };
    let tail = if !alive {
        "; the job is not running: these are its last records".to_string()
    } else if resumed {
        format!(
            "; then resumed (longest {:.0} ms)",
            eps.iter().map(|e| e.waited_ms).fold(0.0, f64::max)
        )
    } else if eps.iter().any(|e| e.outcome == "aborted") && still.is_empty() {
        "; aborted (--abort)".to_string()
    } else {
        String::new()
    };
    let mut f = Finding::new(
        "watch.stall",
        status,
        format!("{subject}/{}/site {}", w.kernel, w.site),
        format!("{}{more}{tail}", w.text()),
    );
    if let Some(c) = class {
        f = f
            .evidence("class", format!("{}: {}", c.as_str(), explain(c)))
            .fix(fix(c));
    }
    if !w.why.is_empty() {
        f = f.evidence("verdict", w.why.clone());
    }
    f = f.evidence(
        "watch",
        format!(
            "{watch_line}; detected {:.0} ms after the wait began",
            first.detected_after_ms
        ),
    );
    for e in eps.iter().take(8) {
        f = f.evidence(
            "waiter",
            format!("{} [{}]", e.waiter.evidence_line(), e.outcome),
        );
    }
    f.evidence(&a.path, counts_text(&a.counts))
}

/// `watch.abort`: what became of the waiters after `--abort` set the flag (`ab`: `set`,
/// `not-needed`, or the error of setting it).
fn abort_finding(a: &AreaReport, ab: &str, subject: &str) -> Finding {
    match ab {
        "not-needed" => Finding::new(
            "watch.abort",
            Status::Skip,
            subject,
            "abort flag not set: no waiter stalled",
        ),
        "set" if a.abort_still_waiting.is_empty() => Finding::new(
            "watch.abort",
            Status::Pass,
            subject,
            format!(
                "abort flag set: every stalled waiter left its wait{}",
                a.abort_ms
                    .map(|m| format!(" within {m:.0} ms"))
                    .unwrap_or_default()
            ),
        )
        .evidence(format!("{} abort", a.path), "1"),
        "set" => {
            let mut f = Finding::new(
                "watch.abort",
                Status::Fail,
            subject,
                format!(
                    "abort flag set, but {} waiter(s) still wait after the grace: {}",
                    a.abort_still_waiting.len(),
                    a.abort_still_waiting[0].text()
                ),
            )
            .fix("the waits that ignore the flag are loops of your own (GDRDOCTOR_MARK_WAITING) that do not check GDRDOCTOR_ABORTED(): make them check it, or end the job (kill it; the gpu is usable by a new process after that)");
            for w in a.abort_still_waiting.iter().take(8) {
                f = f.evidence("waiter", w.evidence_line());
            }
            f
        }
        err => Finding::new(
            "watch.abort",
            Status::Error,
            subject,
            format!("could not set the abort flag: {err}"),
        )
        .fix("the area belongs to the job's user: run watch --abort as that user or as root"),
    }
}

fn counts_text(c: &Counts) -> String {
    format!(
        "records: {} waiting, {} started, {} progress, {} done, {} aborted, {} not started{}",
        c.waiting,
        c.started,
        c.progress,
        c.done,
        c.aborted,
        c.not_started,
        if c.unstable > 0 {
            format!(", {} unstable (skipped)", c.unstable)
        } else {
            String::new()
        }
    )
}
