//! The parent side of every live GPU operation: run `gdrdoctor __worker TASK` as a child in its
//! own process group, hold the deadline, and kill the whole group when it passes.
//!
//! Why a child: the parent must never own a CUDA context. A hung kernel makes context release
//! block forever, and `__trap` poisons the process (knowledge/hang-probe.md §0 items 6-7); a
//! killed child releases the GPU in about 0.1 s. The child prints its result as one line
//! `GDRDOCTOR-RESULT <json>` on stdout; every other stdout line (device printf) is kept as raw
//! output. Lines `GDRDOCTOR-PROGRESS <text>` on stderr drive the progress display.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const RESULT_PREFIX: &str = "GDRDOCTOR-RESULT ";
pub const PROGRESS_PREFIX: &str = "GDRDOCTOR-PROGRESS ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The worker exited with this code.
    Exited(i32),
    /// The worker died from a signal it did not get from us (a crash).
    Signaled(i32),
    /// The deadline passed; we killed the process group.
    TimedOut,
}

#[derive(Debug, Clone)]
pub struct WorkerRun {
    pub task: String,
    pub outcome: Outcome,
    /// The parsed `GDRDOCTOR-RESULT` payload, if the worker printed one.
    pub result: Option<serde_json::Value>,
    /// Every other stdout line (kernel printf), in order.
    pub raw: Vec<String>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl WorkerRun {
    /// A one-line account of what went wrong, for findings.
    pub fn failure(&self) -> Option<String> {
        let tail = self
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.starts_with(PROGRESS_PREFIX))
            .unwrap_or("");
        match (&self.outcome, &self.result) {
            (Outcome::Exited(0), Some(_)) => None,
            (Outcome::TimedOut, _) => Some(format!(
                "worker `{}` did not finish within its deadline ({:.1} s) and was killed",
                self.task,
                self.elapsed.as_secs_f64()
            )),
            (Outcome::Signaled(s), _) => Some(format!(
                "worker `{}` was killed by signal {s} (crashed){}",
                self.task,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )),
            (Outcome::Exited(c), None) => Some(format!(
                "worker `{}` exited with {c} without a result{}",
                self.task,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )),
            (Outcome::Exited(_), Some(_)) => None,
        }
    }
}

/// Run `gdrdoctor __worker <task> <args>` with a deadline. `on_progress` receives the worker's
/// progress lines as they arrive.
pub fn run(
    task: &str,
    args: &[String],
    deadline: Duration,
    on_progress: &(dyn Fn(&str) + Sync),
) -> Result<WorkerRun, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the gdrdoctor executable to start a worker: {e}"))?;
    run_with(&exe, task, args, deadline, on_progress)
}

/// [`run`] with an explicit gdrdoctor executable (tests).
pub fn run_with(
    exe: &std::path::Path,
    task: &str,
    args: &[String],
    deadline: Duration,
    on_progress: &(dyn Fn(&str) + Sync),
) -> Result<WorkerRun, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("__worker")
        .arg(task)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: cannot start worker: {e}", exe.display()))?;
    let pid = child.id() as i32;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let err_text: Arc<Mutex<String>> = Arc::default();
    let outcome = std::thread::scope(|s| {
        let ol = Arc::clone(&out_lines);
        let et = Arc::clone(&err_text);
        if let Some(o) = stdout {
            s.spawn(move || {
                // Bytes, not `lines()`: kernel printf may emit invalid UTF-8, and a reader that
                // stopped would let the pipe fill and stall the worker.
                let mut r = BufReader::new(o);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match r.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf)
                                .trim_end_matches(['\n', '\r'])
                                .to_string();
                            if let Ok(mut v) = ol.lock() {
                                v.push(line);
                            }
                        }
                    }
                }
            });
        }
        if let Some(mut e) = stderr {
            s.spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match e.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            buf.extend_from_slice(&chunk[..n]);
                            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                                let line: Vec<u8> = buf.drain(..=i).collect();
                                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                                if let Some(p) = line.strip_prefix(PROGRESS_PREFIX) {
                                    on_progress(p);
                                }
                                if let Ok(mut t) = et.lock() {
                                    t.push_str(&line);
                                    t.push('\n');
                                }
                            }
                        }
                    }
                }
                if let Ok(mut t) = et.lock() {
                    t.push_str(&String::from_utf8_lossy(&buf));
                }
            });
        }
        let mut last_tick = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    use std::os::unix::process::ExitStatusExt;
                    return match (st.code(), st.signal()) {
                        (Some(c), _) => Outcome::Exited(c),
                        (None, Some(sig)) => Outcome::Signaled(sig),
                        _ => Outcome::Exited(-1),
                    };
                }
                Ok(None) => {}
                Err(_) => return Outcome::Exited(-1),
            }
            if last_tick.elapsed() >= Duration::from_millis(100) {
                on_progress("");
                last_tick = Instant::now();
            }
            if start.elapsed() >= deadline {
                kill_group(pid);
                let _ = child.wait();
                return Outcome::TimedOut;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let elapsed = start.elapsed();
    let lines = out_lines.lock().map(|v| v.clone()).unwrap_or_default();
    let mut result = None;
    let mut raw = Vec::new();
    for l in lines {
        match l.strip_prefix(RESULT_PREFIX) {
            Some(j) => result = serde_json::from_str(j).ok(),
            None => raw.push(l),
        }
    }
    let stderr = err_text.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(WorkerRun {
        task: task.to_string(),
        outcome,
        result,
        raw,
        stderr,
        elapsed,
    })
}

/// SIGKILL the worker's whole process group (it may have started helpers of its own).
pub fn kill_group(pid: i32) {
    // SAFETY: kill(2) with a negative pid signals the process group we created for the worker.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// A spinner on stderr for work that takes more than a second; silent when stderr is not a
/// terminal (CI logs stay clean).
pub struct Progress {
    bar: indicatif::ProgressBar,
    start: Instant,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub fn new(what: &str) -> Progress {
        let bar = indicatif::ProgressBar::hidden();
        bar.set_message(what.to_string());
        Progress {
            bar,
            start: Instant::now(),
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }
    pub fn update(&self, msg: &str) {
        if !self.shown.load(std::sync::atomic::Ordering::Relaxed)
            && self.start.elapsed() > Duration::from_secs(1)
        {
            self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
            self.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {elapsed:>3} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        if !msg.is_empty() {
            self.bar.set_message(msg.to_string());
        }
    }
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
