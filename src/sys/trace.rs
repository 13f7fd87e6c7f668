//! `GDRDOCTOR_TRACE`: where the time of one run goes, one line per phase on stderr.
//!
//! ```text
//! GDRDOCTOR_TRACE=1 gdrdoctor check          # the phases
//! GDRDOCTOR_TRACE=reads gdrdoctor check      # the phases and every file read
//! ```
//!
//! Values (comma-separated): `1`, `phases` or `on` print the phases; `reads` adds one line per
//! file read through the reader (path, bytes, time) and per config-space access; `all` is both.
//! `GDRDOCTOR_COLLECT_TIMING=1`, the older name, means `phases`.
//!
//! Each line: `gdrdoctor: trace: <start> ms <duration> ms <phase>  <detail>`, the start counted
//! from the process's own start (`main`), sorted by start, printed when the command ends (so
//! that the lines of parallel work do not interleave). The first line, `process-start`, is the
//! CPU time the process used before `main` (loader and relocations). Workers trace too: their
//! lines travel to the parent on stderr (`GDRDOCTOR-TRACE`) with CLOCK_MONOTONIC times, and the
//! parent prints them on its own time line, marked with the worker's task.
//!
//! Cheap when unset: [`span`] is one relaxed atomic load and no allocation.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// The environment variable.
pub const ENV: &str = "GDRDOCTOR_TRACE";
/// The older name (`=1`): the phases.
pub const LEGACY_ENV: &str = "GDRDOCTOR_COLLECT_TIMING";
/// Worker trace lines on stderr: `GDRDOCTOR-TRACE <start ns> <end ns> <name>\t<detail>`.
pub const WORKER_PREFIX: &str = "GDRDOCTOR-TRACE ";

const OFF: u8 = 0;
const PHASES: u8 = 1;
const READS: u8 = 2;
/// Not decided yet (before [`init`]).
const UNSET: u8 = 0x80;

static LEVEL: AtomicU8 = AtomicU8::new(UNSET);
static ORIGIN_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SPANS: Mutex<Vec<Record>> = Mutex::new(Vec::new());

#[derive(Debug, Clone, PartialEq)]
struct Record {
    start_ns: u64,
    end_ns: u64,
    name: String,
    detail: String,
}

/// What a `GDRDOCTOR_TRACE` value asks for.
fn parse(v: &str) -> u8 {
    let mut l = OFF;
    for w in v.split(',').map(str::trim) {
        match w {
            "1" | "phases" | "on" | "yes" | "true" => l |= PHASES,
            "reads" => l |= READS,
            "all" => l |= PHASES | READS,
            _ => {}
        }
    }
    l
}

fn level_from_env() -> u8 {
    let mut l = std::env::var(ENV).map(|v| parse(&v)).unwrap_or(OFF);
    if std::env::var(LEGACY_ENV).is_ok_and(|v| v == "1") {
        l |= PHASES;
    }
    l
}

fn level() -> u8 {
    let l = LEVEL.load(Ordering::Relaxed);
    if l != UNSET {
        return l;
    }
    let l = level_from_env();
    LEVEL.store(l, Ordering::Relaxed);
    l
}

/// CLOCK_MONOTONIC in nanoseconds (the clock `Instant` uses, shared by parent and workers).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CPU time this process has used so far (user + system), in nanoseconds.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Start the clock (first thing in `main`) and read the environment once.
pub fn init() {
    let l = level_from_env();
    LEVEL.store(l, Ordering::Relaxed);
    let now = now_ns();
    ORIGIN_NS.store(now, Ordering::Relaxed);
    if l & PHASES != 0 {
        let cpu = cpu_ns();
        record_at(
            "process-start",
            now.saturating_sub(cpu),
            now,
            format!(
                "{:.3} ms of CPU before main (loader, relocations)",
                cpu as f64 / 1e6
            ),
        );
    }
}

/// Whether phases are traced.
pub fn enabled() -> bool {
    level() & PHASES != 0
}

/// Whether every file read is traced.
pub fn reads() -> bool {
    level() & READS != 0
}

fn record_at(name: &str, start_ns: u64, end_ns: u64, detail: String) {
    let r = Record {
        start_ns,
        end_ns,
        name: name.to_string(),
        detail,
    };
    match SPANS.lock() {
        Ok(mut v) => v.push(r),
        Err(p) => p.into_inner().push(r),
    }
}

/// Record a phase that ran from `start_ns` (from [`now_ns`]) until now.
pub fn record(name: &str, start_ns: u64, detail: impl Into<String>) {
    if level() == OFF {
        return;
    }
    record_at(name, start_ns, now_ns(), detail.into());
}

/// A phase made of many pieces (on several threads): `total_ns` summed, shown as ending now.
pub fn record_summed(name: &str, total_ns: u64, detail: impl Into<String>) {
    if level() & PHASES == 0 {
        return;
    }
    let end = now_ns();
    record_at(name, end.saturating_sub(total_ns), end, detail.into());
}

/// One file read (`GDRDOCTOR_TRACE=reads`): `kind path`, from `start_ns` until now.
pub fn record_read(kind: &str, start_ns: u64, path: &str, detail: impl FnOnce() -> String) {
    if level() & READS == 0 {
        return;
    }
    record_at(&format!("{kind} {path}"), start_ns, now_ns(), detail());
}

/// A phase: timed from now until the guard drops. `GDRDOCTOR_TRACE` unset: nothing happens.
#[must_use = "the phase ends when the guard drops"]
pub struct Span {
    inner: Option<(&'static str, u64, String)>,
}

impl Span {
    /// Add to the phase's detail (shown after its name).
    pub fn detail(&mut self, d: impl FnOnce() -> String) {
        if let Some((_, _, s)) = &mut self.inner {
            if !s.is_empty() {
                s.push_str(", ");
            }
            s.push_str(&d());
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((name, start, detail)) = self.inner.take() {
            record_at(name, start, now_ns(), detail);
        }
    }
}

/// Time a phase until the returned guard drops.
pub fn span(name: &'static str) -> Span {
    Span {
        inner: (level() & PHASES != 0).then(|| (name, now_ns(), String::new())),
    }
}

/// Time `f` as the phase `name`.
pub fn timed<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let _s = span(name);
    f()
}

/// A worker's trace line (stderr), taken into this process's trace under `task`. Returns
/// `false` for a line that is not a trace line.
pub fn ingest(task: &str, line: &str) -> bool {
    let Some(rest) = line.strip_prefix(WORKER_PREFIX) else {
        return false;
    };
    let mut it = rest.splitn(3, ' ');
    let (Some(s), Some(e), Some(text)) = (it.next(), it.next(), it.next()) else {
        return true;
    };
    let (Ok(s), Ok(e)) = (s.parse::<u64>(), e.parse::<u64>()) else {
        return true;
    };
    let (name, detail) = text.split_once('\t').unwrap_or((text, ""));
    if level() != OFF {
        record_at(&format!("[{task}] {name}"), s, e, detail.to_string());
    }
    true
}

fn take() -> Vec<Record> {
    let mut v = match SPANS.lock() {
        Ok(mut v) => std::mem::take(&mut *v),
        Err(p) => std::mem::take(&mut *p.into_inner()),
    };
    v.sort_by_key(|r| (r.start_ns, std::cmp::Reverse(r.end_ns)));
    v
}

fn line(r: &Record, origin: u64) -> String {
    let at = (r.start_ns as f64 - origin as f64) / 1e6;
    let dur = r.end_ns.saturating_sub(r.start_ns) as f64 / 1e6;
    let mut s = format!("gdrdoctor: trace: {at:>9.3} ms {dur:>9.3} ms  {}", r.name);
    if !r.detail.is_empty() {
        s.push_str("  ");
        s.push_str(&r.detail);
    }
    s
}

/// Print the recorded phases on stderr (the end of a command).
pub fn flush() {
    if level() == OFF {
        return;
    }
    let origin = ORIGIN_NS.load(Ordering::Relaxed);
    let mut out = String::new();
    for r in take() {
        out.push_str(&line(&r, origin));
        out.push('\n');
    }
    eprint!("{out}");
}

/// In a worker: hand the recorded phases to the parent (stderr lines it reads back).
pub fn flush_to_parent() {
    if level() == OFF {
        return;
    }
    let mut out = String::new();
    for r in take() {
        let clean = |s: &str| s.replace(['\n', '\t'], " ");
        out.push_str(&format!(
            "{WORKER_PREFIX}{} {} {}\t{}\n",
            r.start_ns,
            r.end_ns,
            clean(&r.name),
            clean(&r.detail)
        ));
    }
    eprint!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse(""), OFF);
        assert_eq!(parse("0"), OFF);
        assert_eq!(parse("1"), PHASES);
        assert_eq!(parse("reads"), READS);
        assert_eq!(parse("phases,reads"), PHASES | READS);
        assert_eq!(parse("all"), PHASES | READS);
        assert_eq!(parse("nonsense"), OFF);
    }

    #[test]
    fn a_line_says_start_duration_and_name() {
        let r = Record {
            start_ns: 3_500_000,
            end_ns: 5_750_000,
            name: "collect.pci".into(),
            detail: "48 functions".into(),
        };
        assert_eq!(
            line(&r, 1_000_000),
            "gdrdoctor: trace:     2.500 ms     2.250 ms  collect.pci  48 functions"
        );
    }
}
