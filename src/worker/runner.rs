//! The parent side of every live GPU operation: run `gdrdoctor __worker TASK` as a child in its
//! own process group, send it its [`Request`], hold the deadline, and kill the whole group when
//! it passes. The child side is [`super::child`]; the protocol is [`super::protocol`].
//!
//! Why a child: the parent must never own a CUDA context. A hung kernel makes context release
//! block forever, and `__trap` poisons the process (knowledge/hang-probe.md §0 items 6-7); a
//! killed child releases the GPU in about 0.1 s.
//!
//! Workers die with their parent. The worker asks the kernel for SIGKILL when the parent goes
//! (`PR_SET_PDEATHSIG`, then checks the parent is still the one that started it); and the
//! parent, on SIGINT, SIGTERM or SIGHUP, kills every worker group it started and exits with
//! 128 + the signal. The worker has its own process group, so a Ctrl-C on the terminal reaches
//! only the parent: without the forwarding a worker would outlive it under PID 1.

use super::protocol::{self, Reply, Request, WorkerError, PROGRESS_PREFIX, RESULT_PREFIX};
use crate::live::os;
use crate::live::signals::{forward_signals, track, untrack};
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The environment variable through which the parent tells the worker its pid.
pub const PARENT_ENV: &str = "GDRDOCTOR_WORKER_PARENT";

/// Test-only hook: a worker started with this variable set (milliseconds) sleeps that long
/// after reading its request and before its task, so that the tests can catch a parent with a
/// running worker without a GPU. It has no other effect, in any build; gdrdoctor never sets it.
pub const TEST_DELAY_ENV: &str = "GDRDOCTOR_TEST_WORKER_DELAY_MS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The worker exited with this code.
    Exited(i32),
    /// The worker died from a signal it did not get from us (a crash).
    Signaled(i32),
    /// The deadline passed; we killed the process group.
    TimedOut,
    /// The worker closed its output after its reply and was left to finish exiting on its own
    /// (`check`'s live-facts workers: see [`leaves_after_output`]).
    Left,
}

/// The tasks whose parent reads the reply and does not wait for the process to end: `check`'s
/// live-facts workers close stdout and stderr after their reply, and their exit (the kernel
/// releasing the driver's files and mappings: ~57 ms after `cuInit` on an H200) is nobody's
/// business. The probes' workers are always waited for (their exit status is a finding).
pub fn leaves_after_output(task: &str) -> bool {
    task == "live-nvml" || task == "live-cuda"
}

impl Outcome {
    /// The worker was stopped (killed at the deadline, or crashed): the GPU may need a health
    /// check from a fresh process.
    pub fn stopped(&self) -> bool {
        matches!(self, Outcome::TimedOut | Outcome::Signaled(_))
    }
}

/// What went wrong with a worker, in one line for a finding.
#[derive(Debug, Clone, PartialEq)]
pub enum RunFailure {
    /// The worker could not be started.
    Spawn(String),
    /// It ran past its deadline and was killed.
    TimedOut { task: String, secs: f64 },
    /// It died from a signal (a crash).
    Crashed {
        task: String,
        signal: i32,
        tail: String,
    },
    /// It exited without printing a result.
    NoResult {
        task: String,
        code: i32,
        tail: String,
    },
    /// It printed a result line that is not a reply of this protocol.
    Garbage { task: String, detail: String },
    /// It reported an error instead of a result.
    Worker(WorkerError),
}

fn tail_text(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

impl std::fmt::Display for RunFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunFailure::Spawn(e) => f.write_str(e),
            RunFailure::TimedOut { task, secs } => write!(
                f,
                "worker `{task}` did not finish within its deadline ({secs:.1} s) and was killed"
            ),
            RunFailure::Crashed { task, signal, tail } => write!(
                f,
                "worker `{task}` was killed by signal {signal} (crashed){}",
                tail_text(tail)
            ),
            RunFailure::NoResult { task, code, tail } => write!(
                f,
                "worker `{task}` exited with {code} without a result{}",
                tail_text(tail)
            ),
            RunFailure::Garbage { task, detail } => {
                write!(f, "worker `{task}` wrote an unreadable result: {detail}")
            }
            RunFailure::Worker(e) => e.fmt(f),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkerRun {
    pub task: String,
    pub outcome: Outcome,
    /// The worker's reply, when it printed a valid one.
    pub reply: Option<protocol::Outcome>,
    /// Why the result line could not be read (not JSON, another protocol, another task).
    pub garbage: Option<String>,
    /// Every other stdout line (kernel printf), in order.
    pub raw: Vec<String>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl WorkerRun {
    fn tail(&self) -> String {
        self.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.starts_with(PROGRESS_PREFIX))
            .unwrap_or("")
            .to_string()
    }

    /// What went wrong with the run itself (it hung, died, wrote garbage or nothing), or
    /// `None`; an error the worker reported is [`WorkerRun::worker_error`].
    pub fn failure(&self) -> Option<RunFailure> {
        let task = self.task.clone();
        match (&self.outcome, &self.reply, &self.garbage) {
            (Outcome::TimedOut, _, _) => Some(RunFailure::TimedOut {
                task,
                secs: self.elapsed.as_secs_f64(),
            }),
            (Outcome::Signaled(s), _, _) => Some(RunFailure::Crashed {
                task,
                signal: *s,
                tail: self.tail(),
            }),
            (Outcome::Exited(_) | Outcome::Left, None, Some(g)) => Some(RunFailure::Garbage {
                task,
                detail: g.clone(),
            }),
            (Outcome::Exited(c), None, None) => Some(RunFailure::NoResult {
                task,
                code: *c,
                tail: self.tail(),
            }),
            (Outcome::Left, None, None) => Some(RunFailure::NoResult {
                task,
                code: -1,
                tail: self.tail(),
            }),
            (Outcome::Exited(_) | Outcome::Left, Some(_), _) => None,
        }
    }

    /// The error the worker reported instead of a result.
    pub fn worker_error(&self) -> Option<&WorkerError> {
        match &self.reply {
            Some(protocol::Outcome::Err(e)) => Some(e),
            _ => None,
        }
    }

    /// The worker's output, as JSON, when it printed one.
    pub fn value(&self) -> Option<&serde_json::Value> {
        match &self.reply {
            Some(protocol::Outcome::Ok(v)) => Some(v),
            _ => None,
        }
    }

    /// The output as the task's type, or what went wrong (the run, the worker, or an output
    /// that does not have the task's shape).
    pub fn output<T: DeserializeOwned>(&self) -> Result<T, RunFailure> {
        if let Some(f) = self.failure() {
            return Err(f);
        }
        if let Some(e) = self.worker_error() {
            return Err(RunFailure::Worker(e.clone()));
        }
        let v = self.value().cloned().unwrap_or_default();
        serde_json::from_value(v).map_err(|e| RunFailure::Garbage {
            task: self.task.clone(),
            detail: format!("the result does not have the `{}` shape: {e}", self.task),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Running a worker
// ---------------------------------------------------------------------------------------------

/// Run `gdrdoctor __worker <task>` with `params` and a deadline. `on_progress` receives the
/// worker's progress lines as they arrive (and an empty string every 100 ms).
pub fn run(
    task: &str,
    params: &impl serde::Serialize,
    deadline: Duration,
    on_progress: &(dyn Fn(&str) + Sync),
) -> Result<WorkerRun, RunFailure> {
    let exe = std::env::current_exe().map_err(|e| {
        RunFailure::Spawn(format!(
            "cannot find the gdrdoctor executable to start a worker: {e}"
        ))
    })?;
    let req = Request::new(task, params).map_err(RunFailure::Spawn)?;
    run_with(&exe, &req, deadline, on_progress)
}

/// [`run`] with an explicit gdrdoctor executable and request (tests).
pub fn run_with(
    exe: &std::path::Path,
    req: &Request,
    deadline: Duration,
    on_progress: &(dyn Fn(&str) + Sync),
) -> Result<WorkerRun, RunFailure> {
    start_with(exe, &req.task)?.send(req, deadline, on_progress)
}

/// A worker started ahead of its request: it has exec'd and runs what its task does before
/// reading one (`live-cuda` loads libcuda, nothing more: see
/// [`crate::live::prepare_worker`]), then waits on its standard input. [`Started::send`] gives
/// it the request and runs it as [`run`] does; [`Started::cancel`] (or dropping it) kills it.
pub struct Started {
    task: String,
    child: Option<std::process::Child>,
    pid: i32,
}

/// Start `gdrdoctor __worker <task>` now; its request comes later ([`Started::send`]).
pub fn start(task: &str) -> Result<Started, RunFailure> {
    let exe = std::env::current_exe().map_err(|e| {
        RunFailure::Spawn(format!(
            "cannot find the gdrdoctor executable to start a worker: {e}"
        ))
    })?;
    start_with(&exe, task)
}

fn start_with(exe: &std::path::Path, task: &str) -> Result<Started, RunFailure> {
    let mut cmd = Command::new(exe);
    cmd.arg("__worker")
        .arg(task)
        .env(PARENT_ENV, os::pid().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    forward_signals();
    let spawn_ns = crate::sys::trace::now_ns();
    let child = cmd
        .spawn()
        .map_err(|e| RunFailure::Spawn(format!("{}: cannot start worker: {e}", exe.display())))?;
    crate::sys::trace::record("worker.spawn", spawn_ns, task);
    let pid = child.id() as i32;
    track(pid);
    Ok(Started {
        task: task.to_string(),
        child: Some(child),
        pid,
    })
}

impl Started {
    /// Run the started worker with `params`, as [`run`] does; the deadline counts from now.
    pub fn send_params(
        self,
        params: &impl serde::Serialize,
        deadline: Duration,
        on_progress: &(dyn Fn(&str) + Sync),
    ) -> Result<WorkerRun, RunFailure> {
        let req = Request::new(&self.task, params).map_err(RunFailure::Spawn)?;
        self.send(&req, deadline, on_progress)
    }

    /// Kill the worker (its process group) and reap it: its request will not come.
    pub fn cancel(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            os::kill_group(self.pid);
            let _ = child.wait();
            untrack(self.pid);
        }
    }

    fn send(
        mut self,
        req: &Request,
        deadline: Duration,
        on_progress: &(dyn Fn(&str) + Sync),
    ) -> Result<WorkerRun, RunFailure> {
        let task = self.task.clone();
        let body = serde_json::to_vec(req)
            .map_err(|e| RunFailure::Spawn(format!("worker request for `{task}`: {e}")))?;
        let Some(child) = self.child.take() else {
            return Err(RunFailure::Spawn(format!(
                "the `{task}` worker was already used"
            )));
        };
        monitor(&task, child, self.pid, &body, deadline, on_progress)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Send `body` to a started worker, read its output, hold the deadline.
fn monitor(
    task: &str,
    mut child: std::process::Child,
    pid: i32,
    body: &[u8],
    deadline: Duration,
    on_progress: &(dyn Fn(&str) + Sync),
) -> Result<WorkerRun, RunFailure> {
    let start = Instant::now();
    if let Some(mut stdin) = child.stdin.take() {
        // A worker that died at once makes this fail; its exit status says why.
        let _ = stdin.write_all(body);
    }
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let err_text: Arc<Mutex<String>> = Arc::default();
    let leave = leaves_after_output(task);
    // Both output pipes at end of file (a pipe we do not have counts as ended).
    let out_eof = std::sync::atomic::AtomicBool::new(stdout.is_none());
    let err_eof = std::sync::atomic::AtomicBool::new(stderr.is_none());
    let outcome = std::thread::scope(|s| {
        let ol = Arc::clone(&out_lines);
        let et = Arc::clone(&err_text);
        let (out_eof, err_eof) = (&out_eof, &err_eof);
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
                out_eof.store(true, Ordering::SeqCst);
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
                                // GDRDOCTOR_TRACE: the worker's phases join the parent's.
                                if crate::sys::trace::ingest(task, &line) {
                                    continue;
                                }
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
                err_eof.store(true, Ordering::SeqCst);
            });
        }
        let mut last_tick = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    use std::os::unix::process::ExitStatusExt;
                    untrack(pid);
                    return match (st.code(), st.signal()) {
                        (Some(c), _) => Outcome::Exited(c),
                        (None, Some(sig)) => Outcome::Signaled(sig),
                        _ => Outcome::Exited(-1),
                    };
                }
                Ok(None) => {
                    if leave
                        && out_eof.load(Ordering::SeqCst)
                        && err_eof.load(Ordering::SeqCst)
                        && crate::live::signals::leave(pid)
                    {
                        // Its whole output is in; the process is on its way out: reaped
                        // before gdrdoctor exits (`reap_left`), not waited for now.
                        untrack(pid);
                        return Outcome::Left;
                    }
                }
                Err(_) => {
                    os::kill_group(pid);
                    let _ = child.wait();
                    untrack(pid);
                    return Outcome::Exited(-1);
                }
            }
            if last_tick.elapsed() >= Duration::from_millis(100) {
                on_progress("");
                last_tick = Instant::now();
            }
            if start.elapsed() >= deadline {
                os::kill_group(pid);
                let _ = child.wait();
                untrack(pid);
                return Outcome::TimedOut;
            }
            // Short: a live-facts worker is done in tens of milliseconds, and every
            // millisecond here is one of `check`'s.
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let elapsed = start.elapsed();
    let lines = out_lines.lock().map(|v| v.clone()).unwrap_or_default();
    let mut reply = None;
    let mut garbage = None;
    let mut raw = Vec::new();
    for l in lines {
        match l.strip_prefix(RESULT_PREFIX) {
            Some(j) => match read_reply(j, task) {
                Ok(r) => reply = Some(r),
                Err(g) => garbage = Some(g),
            },
            None => raw.push(l),
        }
    }
    let stderr = err_text.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(WorkerRun {
        task: task.to_string(),
        outcome,
        reply,
        garbage,
        raw,
        stderr,
        elapsed,
    })
}

/// How long gdrdoctor waits, at its end, for the workers it left exiting.
pub const REAP_BOUND: Duration = Duration::from_secs(2);

/// Before the process exits: reap the workers whose answer was read but whose exit was not
/// waited for ([`Outcome::Left`]). Standard output and error are closed first, so that whoever
/// reads them (a pipe, `$(...)`) has the whole answer without waiting for the teardown.
pub fn reap_left() {
    if !crate::live::signals::any_left() {
        return;
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    os::close_stdio();
    crate::live::signals::reap_left(REAP_BOUND);
}

/// A result line: a reply of this protocol, for this task.
fn read_reply(json: &str, task: &str) -> Result<protocol::Outcome, String> {
    let r: Reply = serde_json::from_str(json).map_err(|e| {
        let head: String = json.chars().take(80).collect();
        format!("{e} in `{head}`")
    })?;
    if r.protocol != protocol::PROTOCOL {
        return Err(format!(
            "protocol version {} (this gdrdoctor speaks {}): a different gdrdoctor binary answered",
            r.protocol,
            protocol::PROTOCOL
        ));
    }
    if r.task != task {
        return Err(format!("a reply for task `{}`, not `{task}`", r.task));
    }
    Ok(r.outcome)
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
