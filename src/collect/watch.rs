//! `gdrdoctor watch`: find the progress areas that jobs instrumented with
//! `kernels/include/gdrdoctor/progress.cuh` publish in /dev/shm, read them (never write, unless
//! `--abort`), and report every stalled waiter with the classes of `probe --hang`.
//!
//! This half does the I/O: discovery, reading the bytes (pread, twice, for a consistent copy of
//! each record), the process checks, the clock, the poll loop, the abort flag and the report.
//! Parsing, validation, classification and findings are pure: `gdrdoctor_checks::watch`.
//!
//! Files are read with pread, never mapped: a job (or anyone) shrinking a mapped file would
//! kill the watcher with SIGBUS, and a read of a shrunk file is just an error.

use gdrdoctor_checks::report::Finding;
use gdrdoctor_checks::watch::{
    self as w, AreaReport, Episode, Header, Kernel, Record, Site, Thresholds, Tracker,
};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only this job; `None`: every area.
    pub pid: Option<u32>,
    pub once: bool,
    pub abort: bool,
    pub threshold: Duration,
    pub poll: Duration,
    pub grace: Duration,
    /// Stop after this long (live mode); `None`: until the jobs end.
    pub duration: Option<Duration>,
    pub dir: PathBuf,
    pub quiet: bool,
}

/// Retries of a record whose two reads disagree (a writer in the middle of an update).
const RETRIES: usize = 16;

/// The most records watch reads from one area in one poll (one per waiting warp: an H200 runs
/// 8,448 warps at full occupancy, so this is 31 such kernels). An area that claims more is
/// refused, not read: a planted sparse file must not cost gigabytes.
pub const MAX_READ_RECORDS: u32 = 1 << 18;

/// Records read per pread (twice each, for a consistent copy): what one poll holds of the file
/// at a time.
const CHUNK_RECORDS: usize = 4096;

/// How long live mode waits for an area that exists but is still being initialised (the job
/// is inside `gdrdoctor_progress_init`, which writes the magic last); `--once` waits
/// [`INIT_WAIT_ONCE`].
const INIT_WAIT: Duration = Duration::from_secs(10);
const INIT_WAIT_ONCE: Duration = Duration::from_secs(1);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `gdrdoctor-<pid>-<n>`: the pid, or `None` for any other name.
pub fn area_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("gdrdoctor-")?;
    let (pid, n) = rest.split_once('-')?;
    if pid.is_empty() || n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !pid.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// The areas in `dir`, for one pid or all, sorted.
pub fn discover(dir: &Path, pid: Option<u32>) -> Result<Vec<(PathBuf, u32)>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(p) = area_pid(&name) {
            if pid.is_none_or(|want| want == p) {
                out.push((e.path(), p));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `running`, `gone` or `reused` for a job's pid (its /proc/<pid>/stat start time against the
/// one the header recorded).
pub fn process_state(pid: u32, start_ticks: u64) -> &'static str {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return "gone";
    };
    // Field 22 (starttime), counted after the command name's closing parenthesis.
    let ticks = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|s| s.parse::<u64>().ok());
    let zombie = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|s| s == "Z" || s == "X");
    if zombie {
        return "gone";
    }
    match ticks {
        Some(t) if start_ticks != 0 && t != start_ticks => "reused",
        _ => "running",
    }
}

/// Whether the area at `path` belongs to the job whose pid its name carries: the file's owner
/// is the process's. An area of a running job owned by another user is not that job's (a
/// planted file must not report a stall in someone else's job): refused, with both uids. A
/// job that is gone is judged as a leftover, not here.
fn owner_check(path: &Path, pid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(proc) = std::fs::metadata(format!("/proc/{pid}")) else {
        return Ok(());
    };
    let file = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if file.uid() != proc.uid() {
        return Err(format!(
            "{}: owned by uid {}, but pid {pid} runs as uid {}: not that job's area (not read)",
            path.display(),
            file.uid(),
            proc.uid()
        ));
    }
    Ok(())
}

/// One consistent read of an area.
struct Snapshot {
    header: Header,
    sites: BTreeMap<u32, Site>,
    kernels: Vec<Kernel>,
    words: Vec<u8>,
    records: Vec<Option<Record>>,
    problems: Vec<String>,
}

fn read_exact_at(f: &File, off: u64, len: u64, path: &Path) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off)
        .map_err(|e| format!("{}: read {len} bytes at {off}: {e}", path.display()))?;
    Ok(buf)
}

/// Why an area could not be read: it is still being initialised (no magic yet, or not yet sized
/// to its header), or it is damaged, foreign or unreadable.
#[derive(Debug)]
enum ReadFail {
    Initialising(String),
    Bad(String),
}

impl From<String> for ReadFail {
    fn from(e: String) -> ReadFail {
        ReadFail::Bad(e)
    }
}

fn open_area(path: &Path) -> Result<(File, u64), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let md = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !md.file_type().is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    Ok((f, md.len()))
}

/// Read an area: header, tables, words, and each record in use twice, a chunk at a time
/// (retrying a record whose copies differ or whose seqlock is odd, at most RETRIES times; then
/// it is `None`).
fn read_area(path: &Path) -> Result<Snapshot, ReadFail> {
    let (f, len) = open_area(path)?;
    let need = (w::CONTROL_OFFSET + w::CONTROL_SIZE) as u64;
    // `gdrdoctor_progress_init` sizes the file, fills the header and writes the magic last:
    // a file shorter than its magic, or a zero magic, is an area being initialised.
    if len < 8 {
        return Err(ReadFail::Initialising(format!(
            "{}: {len} bytes, not yet sized",
            path.display()
        )));
    }
    let head = read_exact_at(&f, 0, need.min(len), path)?;
    if head.get(..8).is_some_and(|m| m.iter().all(|&b| b == 0)) {
        return Err(ReadFail::Initialising(format!(
            "{}: no magic yet",
            path.display()
        )));
    }
    let header = w::parse_header(&head, len)?;
    if header.records_used > MAX_READ_RECORDS {
        return Err(ReadFail::Bad(format!(
            "{}: claims {} records in use; watch reads at most {MAX_READ_RECORDS} per area (one per waiting warp): not read",
            path.display(),
            header.records_used
        )));
    }
    let (s0, s1) = header.sites_range();
    let sites = w::parse_sites(&header, &read_exact_at(&f, s0, s1 - s0, path)?);
    let (k0, k1) = header.kernels_range();
    let kernels = w::parse_kernels(&header, &read_exact_at(&f, k0, k1 - k0, path)?)?;
    let (w0, w1) = header.words_range();
    let words = read_exact_at(&f, w0, w1 - w0, path)?;
    let (r0, r1) = header.records_range();
    let total = ((r1 - r0) / w::RECORD_SIZE as u64) as usize;
    let mut records = Vec::with_capacity(total);
    let mut problems = Vec::new();
    let chunk_bytes = (CHUNK_RECORDS * w::RECORD_SIZE) as u64;
    let mut c0 = r0;
    while c0 < r1 {
        let c1 = (c0 + chunk_bytes).min(r1);
        let a = read_exact_at(&f, c0, c1 - c0, path)?;
        let b = read_exact_at(&f, c0, c1 - c0, path)?;
        for (ca, cb) in a.chunks(w::RECORD_SIZE).zip(b.chunks(w::RECORD_SIZE)) {
            let i = records.len();
            let mut got = w::stable(ca, cb).then(|| w::decode_record(i as u32, ca));
            let off = r0 + (i * w::RECORD_SIZE) as u64;
            let mut tries = 0;
            while got.is_none() && tries < RETRIES {
                tries += 1;
                std::thread::yield_now();
                let x = read_exact_at(&f, off, w::RECORD_SIZE as u64, path)?;
                let y = read_exact_at(&f, off, w::RECORD_SIZE as u64, path)?;
                got = w::stable(&x, &y).then(|| w::decode_record(i as u32, &x));
            }
            if let Some(r) = &got {
                if let Some(p) = w::record_problem(r, &kernels) {
                    problems.push(p);
                }
            }
            records.push(got);
        }
        c0 = c1;
    }
    Ok(Snapshot {
        header,
        sites,
        kernels,
        words,
        records,
        problems,
    })
}

/// Set the abort flag of an area: the one write watch ever makes, 4 bytes at ABORT_OFFSET.
fn set_abort(path: &Path) -> Result<(), String> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all_at(&1u32.to_le_bytes(), w::ABORT_OFFSET as u64)
        .map_err(|e| format!("{}: write abort: {e}", path.display()))
}

/// One area being watched.
struct Watched {
    path: PathBuf,
    name_pid: u32,
    rep: AreaReport,
    tracker: Tracker,
    /// (record, wait start) -> index in rep.episodes, for stalls not yet over.
    open: HashMap<(u32, u64), usize>,
    done: bool,
    ever_read: bool,
    aborted: bool,
    /// When the area was first found (an initialising area is waited for from then).
    found: Instant,
    /// The "still initialising" note was printed.
    init_noted: bool,
}

impl Watched {
    fn new(path: PathBuf, pid: u32, o: &Options) -> Watched {
        Watched {
            rep: AreaReport {
                path: path.display().to_string(),
                pid: Some(pid),
                threshold_ms: o.threshold.as_secs_f64() * 1e3,
                poll_ms: o.poll.as_secs_f64() * 1e3,
                ..Default::default()
            },
            path,
            name_pid: pid,
            tracker: Tracker::default(),
            open: HashMap::new(),
            done: false,
            ever_read: false,
            aborted: false,
            found: Instant::now(),
            init_noted: false,
        }
    }

    fn label(&self) -> String {
        match &self.rep.header {
            Some(h) => format!("pid {} ({})", h.pid, h.job),
            None => self.rep.path.clone(),
        }
    }

    /// One poll. Returns the waiters that became stalled in this poll.
    fn poll(&mut self, o: &Options, start: Instant) -> Vec<w::Waiter> {
        let now_mono = start.elapsed().as_nanos() as u64;
        // An area owned by another user than its job's is refused before a byte of it is read
        // (a planted sparse file cost a full read and its memory first).
        if !self.ever_read {
            if let Err(e) = owner_check(&self.path, self.name_pid) {
                self.rep.error = Some(e);
                self.rep.header = None;
                self.done = true;
                return Vec::new();
            }
        }
        let snap = match read_area(&self.path) {
            Ok(s) => s,
            Err(ReadFail::Initialising(why)) if !self.ever_read => {
                self.initialising(o, &why);
                return Vec::new();
            }
            Err(ReadFail::Initialising(e) | ReadFail::Bad(e)) => {
                if self.ever_read && !self.path.exists() {
                    // The job removed its area (gdrdoctor_progress_cleanup): it is over, even
                    // while its process is still on the way out (asking /proc now raced with
                    // the exit and could call an ended job running).
                    self.finish_process("closed");
                } else if !self.ever_read {
                    self.rep.error = Some(e);
                    self.done = true;
                } else {
                    self.rep
                        .warnings
                        .push(format!("a later read failed, kept the last good one: {e}"));
                    self.done = true;
                }
                return Vec::new();
            }
        };
        if snap.header.pid != self.name_pid {
            self.rep.error = Some(format!(
                "the file name says pid {}, the header says pid {}: a copied or foreign area",
                self.name_pid, snap.header.pid
            ));
            self.rep.header = None;
            self.done = true;
            return Vec::new();
        }
        if let Some(p) = snap.problems.first() {
            self.rep.error = Some(format!(
                "{p} ({} record(s) cannot come from progress.cuh)",
                snap.problems.len()
            ));
            self.rep.header = None;
            self.done = true;
            return Vec::new();
        }
        let first = !self.ever_read;
        self.ever_read = true;
        self.rep.polls += 1;
        self.rep.watched_ms = start.elapsed().as_secs_f64() * 1e3;
        self.rep.job = snap.header.job.clone();
        let state = if snap.header.closed() {
            "closed"
        } else {
            process_state(snap.header.pid, snap.header.start_ticks)
        };
        let live: Vec<Record> = snap.records.iter().flatten().copied().collect();
        self.tracker.observe(&live, now_mono);
        let clock = w::Clock::of(&snap.header);
        let view = w::View {
            header: &snap.header,
            sites: &snap.sites,
            kernels: &snap.kernels,
            words: &snap.words,
            records: &snap.records,
        };
        let a = w::analyse(
            &view,
            &self.tracker,
            &clock,
            realtime_ns(),
            now_mono,
            Thresholds {
                stall_ns: o.threshold.as_nanos() as u64,
            },
        );
        self.rep.counts = a.counts.clone();
        self.rep.longest_wait_ms = self.rep.longest_wait_ms.max(a.longest_wait_ms);
        self.rep.slow = a.slow.clone();
        self.rep.clock = Some(clock);
        self.rep.kernels = snap.kernels.clone();
        self.rep.sites = snap.sites.values().cloned().collect();
        self.rep.header = Some(snap.header.clone());
        let mut new = Vec::new();
        let mut seen = Vec::new();
        for s in &a.stalled {
            let key = (s.record, s.wait_start_gt);
            seen.push(key);
            match self.open.get(&key) {
                Some(&i) => {
                    if let Some(e) = self.rep.episodes.get_mut(i) {
                        e.waited_ms = e.waited_ms.max(s.waited_ms);
                        e.waiter.waited_ms = s.waited_ms;
                        e.waiter.heartbeat_age_ms = s.heartbeat_age_ms;
                        e.waiter.observed = s.observed.clone();
                        e.waiter.memory = s.memory.clone();
                    }
                }
                None => {
                    self.open.insert(key, self.rep.episodes.len());
                    self.rep.episodes.push(Episode {
                        waiter: s.clone(),
                        detected_ns: realtime_ns(),
                        detected_after_ms: s.waited_ms,
                        outcome: "stalled".into(),
                        waited_ms: s.waited_ms,
                    });
                    new.push(s.clone());
                }
            }
        }
        // Stalls that ended: resumed, or aborted.
        let ended: Vec<(u32, u64)> = self
            .open
            .keys()
            .filter(|k| !seen.contains(k))
            .copied()
            .collect();
        for key in ended {
            let Some(i) = self.open.remove(&key) else {
                continue;
            };
            let r = snap.records.get(key.0 as usize).copied().flatten();
            let outcome = match r {
                None => {
                    // Unstable this poll: keep it open.
                    self.open.insert(key, i);
                    continue;
                }
                Some(r) if r.wait_start_gt == key.1 && r.phase == w::PH_ABORTED => "aborted",
                Some(r) if r.wait_start_gt == key.1 && r.phase == w::PH_WAITING => {
                    // Still the same wait (below the threshold by the host's clock): open.
                    self.open.insert(key, i);
                    continue;
                }
                Some(_) if self.aborted => "aborted",
                Some(_) => "resumed",
            };
            let label = self.label();
            if let Some(e) = self.rep.episodes.get_mut(i) {
                e.outcome = outcome.into();
                if !o.quiet {
                    eprintln!("{}", crate::sys::escape::text(&format!(
                        "gdrdoctor watch: {label}: {outcome} after {:.0} ms: kernel {} block {} warp {} at {}",
                        e.waited_ms,
                        e.waiter.kernel,
                        e.waiter.block,
                        e.waiter.warp,
                        e.waiter.site_label()
                    )));
                }
            }
        }
        if first {
            if state == "running" {
                self.rep.process = "running".into();
            } else {
                self.rep.process = state.into();
                self.done = true;
            }
            if !o.quiet {
                eprintln!("{}", crate::sys::escape::text(&format!(
                    "gdrdoctor watch: {} {}: job {:?} pid {} ({}), {} kernel(s), {} records; threshold {:.0} ms, poll {:.0} ms",
                    if self.done { "found" } else { "watching" },
                    self.rep.path,
                    snap.header.job,
                    snap.header.pid,
                    state,
                    snap.header.kernels_used,
                    snap.header.records_used,
                    self.rep.threshold_ms,
                    self.rep.poll_ms
                )));
            }
        } else if state != "running" {
            self.finish_process(state);
        }
        new
    }

    /// An area the job has created but not finished initialising: wait for it (live mode up to
    /// [`INIT_WAIT`], `--once` up to [`INIT_WAIT_ONCE`]) while its process runs; then it is an
    /// error that says so, never a healthy job and never "damaged".
    fn initialising(&mut self, o: &Options, why: &str) {
        let limit = if o.once { INIT_WAIT_ONCE } else { INIT_WAIT };
        if process_state(self.name_pid, 0) != "running" {
            self.rep.error = Some(format!(
                "{why}: pid {} is gone and never finished initialising its area",
                self.name_pid
            ));
            self.done = true;
        } else if self.found.elapsed() >= limit {
            self.rep.error = Some(format!(
                "still initialising after {:.1} s: {why} (gdrdoctor_progress_init writes the magic last){}",
                self.found.elapsed().as_secs_f64(),
                if o.once {
                    "; run watch again in a moment, or without --once to wait for it"
                } else {
                    ""
                }
            ));
            self.done = true;
        } else if !self.init_noted && !o.quiet {
            self.init_noted = true;
            eprintln!(
                "{}",
                crate::sys::escape::text(&format!(
                    "gdrdoctor watch: {}: still initialising ({why}); waiting for gdrdoctor_progress_init",
                    self.rep.path
                ))
            );
        }
    }

    fn finish_process(&mut self, state: &str) {
        self.rep.process = match state {
            "running" => "running".into(),
            "closed" => "exited".into(),
            _ => "exited".into(),
        };
        for (_, i) in self.open.drain() {
            if let Some(e) = self.rep.episodes.get_mut(i) {
                if e.outcome == "stalled" {
                    e.outcome = "job-ended".into();
                }
            }
        }
        self.done = true;
    }

    /// Set the abort flag, then wait up to the grace for the stalled waiters to leave.
    fn abort(&mut self, o: &Options, start: Instant) {
        if self.aborted || self.rep.header.is_none() {
            return;
        }
        let stalled: Vec<(u32, u64)> = self
            .rep
            .episodes
            .iter()
            .filter(|e| e.outcome == "stalled")
            .map(|e| (e.waiter.record, e.waiter.wait_start_gt))
            .collect();
        if stalled.is_empty() {
            if self.rep.abort.is_none() {
                self.rep.abort = Some("not-needed".into());
            }
            return;
        }
        self.aborted = true;
        if let Err(e) = set_abort(&self.path) {
            self.rep.abort = Some(e);
            return;
        }
        self.rep.abort = Some("set".into());
        if !o.quiet {
            eprintln!(
                "{}",
                crate::sys::escape::text(&format!(
                    "gdrdoctor watch: {}: abort flag set ({} stalled waiter(s))",
                    self.label(),
                    stalled.len()
                ))
            );
        }
        let t0 = Instant::now();
        loop {
            let snap = read_area(&self.path).ok();
            let still: Vec<w::Waiter> = match &snap {
                Some(s) => self
                    .rep
                    .episodes
                    .iter()
                    .filter(|e| {
                        stalled.contains(&(e.waiter.record, e.waiter.wait_start_gt))
                            && s.records
                                .get(e.waiter.record as usize)
                                .copied()
                                .flatten()
                                .is_some_and(|r| {
                                    r.phase == w::PH_WAITING
                                        && r.wait_start_gt == e.waiter.wait_start_gt
                                })
                    })
                    .map(|e| e.waiter.clone())
                    .collect(),
                None => Vec::new(),
            };
            let gone = snap.is_none()
                || process_state(
                    self.name_pid,
                    snap.as_ref().map_or(0, |s| s.header.start_ticks),
                ) != "running";
            if still.is_empty() || gone {
                self.rep.abort_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                self.rep.abort_still_waiting.clear();
                break;
            }
            if t0.elapsed() >= o.grace {
                self.rep.abort_still_waiting = still;
                break;
            }
            std::thread::sleep(o.poll.min(Duration::from_millis(5)));
        }
        // One more poll marks the aborted episodes.
        let _ = self.poll(o, start);
    }
}

/// Watch until done; the report of every area (in discovery order).
pub fn run(o: &Options) -> Result<Vec<AreaReport>, String> {
    STOP.store(false, Ordering::SeqCst);
    // SAFETY: installs a handler that only stores an atomic flag (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let start = Instant::now();
    let mut areas: Vec<Watched> = Vec::new();
    let mut last_scan: Option<Instant> = None;
    let mut polls = 0u64;
    let mut waited_note = false;
    loop {
        if last_scan.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
            last_scan = Some(Instant::now());
            for (path, pid) in discover(&o.dir, o.pid)? {
                if !areas.iter().any(|a| a.path == path) {
                    areas.push(Watched::new(path, pid, o));
                }
            }
        }
        for a in areas.iter_mut().filter(|a| !a.done) {
            let new = a.poll(o, start);
            if !o.quiet {
                for s in &new {
                    eprintln!(
                        "{}",
                        crate::sys::escape::text(&format!(
                            "gdrdoctor watch: {}: STALL {}",
                            a.label(),
                            s.text()
                        ))
                    );
                }
            }
            if o.abort && !new.is_empty() && !o.once {
                a.abort(o, start);
            }
        }
        polls += 1;
        let stop = STOP.load(Ordering::SeqCst);
        let timed_out = o.duration.is_some_and(|d| start.elapsed() >= d);
        let initialising = areas.iter().any(|a| !a.done && !a.ever_read);
        if o.once && polls >= 3 && !initialising {
            break;
        }
        if stop || timed_out {
            break;
        }
        if areas.is_empty() {
            match o.pid {
                None => break,
                Some(p) => {
                    if process_state(p, 0) != "running" {
                        return Err(format!(
                            "no progress area for pid {p} in {} and no such process",
                            o.dir.display()
                        ));
                    }
                    if o.once {
                        break;
                    }
                    if !waited_note && !o.quiet {
                        waited_note = true;
                        eprintln!("{}", crate::sys::escape::text(&format!(
                            "gdrdoctor watch: pid {p} has no progress area in {} yet; waiting for gdrdoctor_progress_init",
                            o.dir.display()
                        )));
                    }
                }
            }
        } else if areas.iter().all(|a| a.done) {
            break;
        }
        std::thread::sleep(o.poll);
    }
    if o.abort {
        for a in areas.iter_mut() {
            if a.rep.header.is_some() && a.rep.process == "running" {
                a.abort(o, start);
            }
        }
    }
    for a in areas.iter_mut() {
        a.rep.watched_ms = start.elapsed().as_secs_f64() * 1e3;
        if a.rep.process.is_empty() && a.rep.header.is_some() {
            a.rep.process = "running".into();
        }
    }
    Ok(areas.into_iter().map(|a| a.rep).collect())
}

/// The findings of a watch run: one group per area; with no area at all, what that means.
pub fn findings(o: &Options, reports: &[AreaReport]) -> Vec<Finding> {
    use gdrdoctor_checks::report::Status;
    if reports.is_empty() {
        let (status, msg) = match o.pid {
            Some(p) => (
                Status::Error,
                format!("pid {p} published no progress area in {}: is the job instrumented with progress.cuh and past gdrdoctor_progress_init?", o.dir.display()),
            ),
            None => (
                Status::Skip,
                format!("no progress area in {}: no instrumented job runs on this node", o.dir.display()),
            ),
        };
        let mut f = Finding::new("watch.area", status, "node", msg)
            .evidence(o.dir.display().to_string(), "no gdrdoctor-<pid>-<n> file");
        if status == Status::Error {
            f = f.fix("add kernels/include/gdrdoctor/progress.cuh to the job (docs/guides/watch.md); a job in a container keeps its /dev/shm private: pass --shm-dir /proc/<pid>/root/dev/shm");
        }
        return vec![f];
    }
    reports.iter().flat_map(w::findings).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_area_names_are_areas() {
        assert_eq!(area_pid("gdrdoctor-123-0"), Some(123));
        assert_eq!(area_pid("gdrdoctor-123-10"), Some(123));
        for bad in [
            "gdrdoctor-123",
            "gdrdoctor--0",
            "gdrdoctor-x-0",
            "gdrdoctor-1-",
            "gdrdoctor-1-0.tmp",
            "other-1-0",
            "gdrdoctor-99999999999999999999-0",
        ] {
            assert_eq!(area_pid(bad), None, "{bad}");
        }
    }

    #[test]
    fn this_process_is_running_and_pid_reuse_is_seen() {
        let me = std::process::id();
        assert_eq!(process_state(me, 0), "running");
        assert_eq!(process_state(me, 1), "reused");
        assert_eq!(process_state(u32::MAX, 0), "gone");
    }
}
