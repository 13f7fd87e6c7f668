//! Counter baselines: what turns "link_downed is 7" into "link_downed rose by 3 in 10 s".
//!
//! - `check --interval 10s` reads the counters, waits, reads them again ([`Rates::start`]).
//! - Periodic runs (a systemd timer, a cron job, node_exporter's textfile collector) keep the
//!   last reading in a small state file, `/run/gdrdoctor/counters.json` (directory:
//!   `--state-dir` / `GDRDOCTOR_STATE_DIR`), and judge the growth since that run. The file is
//!   written atomically (temporary file, fsync, rename), validated when read (schema, this boot's
//!   id, a time not in the future and at most [`MAX_AGE_MS`] old), and ignored and rewritten when
//!   it is corrupt or stale. `/run` is a tmpfs: a reboot starts afresh, as the counters do.
//! - A snapshot stores the baseline its findings used as `gdrdoctor/counters-baseline.json`.

use super::atomic::{self, read_trusted};
use super::boot_id;
use crate::source::reader::Root;
use crate::sys::clock::now_ms;
use gdrdoctor_checks::counters::{human_secs, in_families};
use gdrdoctor_checks::model::{CounterBaseline, Node};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const STATE_SCHEMA: &str = "gdrdoctor.counters-state/v2";
/// The schema of the files before the ledger (one reading for every counter); read once, as
/// if each family had been read then, and rewritten as v2.
pub const STATE_SCHEMA_V1: &str = "gdrdoctor.counters-state/v1";
pub const STATE_FILE: &str = "counters.json";
/// The lock every run that reads or moves the ledger holds from before it reads the node until
/// its reading is recorded: concurrent runs judge one after the other, each against a
/// consistent reading.
pub const LOCK_FILE: &str = "counters.lock";
pub const SNAPSHOT_BASELINE: &str = "/gdrdoctor/counters-baseline.json";
/// A state file older than this is stale (its growth would hide when it happened).
pub const MAX_AGE_MS: u64 = 24 * 3600 * 1000;
/// A reading younger than this is too recent to judge growth by (a rate over 0.2 s says
/// nothing a threshold can use), and is not replaced by a still younger one: the run after
/// judges against the older reading, which still holds what happened before.
pub const MIN_AGE_MS: u64 = 1000;
/// How long a run waits for another run's lock before judging without the ledger.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// One family's readings (`aer`, `ib`, `hw`, `rdma-at`, `nvlink`, `pcie-replay`): the last
/// one, and the one before it (what a run right after the last judges against).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "family")]
pub struct Family {
    /// When the last reading was taken, milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// counter key -> value, as the checks read them (aer/<bdf>/<file>/<name>,
    /// ib/<dev>/<port>/<name>, hw/<dev>/<port>/<name>, nvlink/<bdf>/<link>/<name>,
    /// pcie-replay/<bdf>), and rdma-at/<dev>/<bdf> -> 1: the PCI function each RDMA device sat on.
    pub values: BTreeMap<String, u64>,
    /// The reading before the last one: what a run less than a second after the last judges
    /// against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Reading")]
    pub previous: Option<Reading>,
}

/// A family's earlier reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "reading")]
pub struct Reading {
    /// When the reading was taken, milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// counter key -> value, as the checks read them (aer/<bdf>/<file>/<name>,
    /// ib/<dev>/<port>/<name>, hw/<dev>/<port>/<name>, nvlink/<bdf>/<link>/<name>,
    /// pcie-replay/<bdf>), and rdma-at/<dev>/<bdf> -> 1: the PCI function each RDMA device sat on.
    pub values: BTreeMap<String, u64>,
}

/// The state file: a ledger of readings per counter family. A run moves only the families of
/// the counters checks it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateFile {
    pub schema: String,
    /// /proc/sys/kernel/random/boot_id of the boot that took the readings.
    pub boot_id: String,
    /// Family (aer, ib, hw, rdma-at, nvlink, pcie-replay) -> its readings.
    pub families: BTreeMap<String, Family>,
}

/// The v1 file: one reading of every counter.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct StateFileV1 {
    schema: String,
    /// /proc/sys/kernel/random/boot_id of the boot that took the reading.
    boot_id: String,
    /// When the reading was taken, milliseconds since the Unix epoch.
    taken_unix_ms: u64,
    /// counter key -> value, as the checks read them (aer/<bdf>/<file>/<name>,
    /// ib/<dev>/<port>/<name>, hw/<dev>/<port>/<name>, nvlink/<bdf>/<link>/<name>,
    /// pcie-replay/<bdf>), and rdma-at/<dev>/<bdf> -> 1: the PCI function each RDMA device sat on.
    values: BTreeMap<String, u64>,
}

/// The published JSON Schema of the counter ledger (docs/schema/gdrdoctor.counters-state.v2.schema.json),
/// derived from [`StateFile`].
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<StateFile>(
        STATE_SCHEMA,
        "The counter ledger of periodic live runs (`/run/gdrdoctor/counters.json`, or `--state-dir` / GDRDOCTOR_STATE_DIR): per family of counters, the last reading a run that judged that family took, and the one before it. A run moves only the families of the counters checks it judges, under the lock `counters.lock` beside the file. gdrdoctor reads a v1 file (one reading of every counter) as if every family had been read then, ignores (and rewrites) a file it cannot use.",
        true,
    )
}

/// The published JSON Schema of the v1 state file (docs/schema/gdrdoctor.counters-state.v1.schema.json),
/// derived from the type that still reads it.
pub fn json_schema_v1() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<StateFileV1>(
        STATE_SCHEMA_V1,
        "The counter state file of periodic live runs (`/run/gdrdoctor/counters.json`, or `--state-dir` / GDRDOCTOR_STATE_DIR): the last reading of the error counters, judged against by the next run. gdrdoctor ignores (and rewrites) a file it cannot use.",
        true,
    )
}

/// The largest state file read (they are a few KiB).
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// The family of a key of `gdrdoctor_checks::counters::values`: its first path element.
pub fn family_of(key: &str) -> &str {
    key.split('/').next().unwrap_or(key)
}

/// Read and validate the ledger of `dir`: `Ok(None)` when there is none yet, `Err(why)` when
/// it exists but cannot be used (the caller says it was ignored; the next save rewrites it).
pub fn load_ledger(dir: &Path, boot: Option<&str>, now: u64) -> Result<Option<StateFile>, String> {
    let path = dir.join(STATE_FILE);
    let Some(bytes) = read_trusted(dir, STATE_FILE, MAX_STATE_BYTES)? else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: corrupt ({e}): ignored", path.display()))?;
    let s = match v.get("schema").and_then(|s| s.as_str()) {
        Some(STATE_SCHEMA) => serde_json::from_value::<StateFile>(v)
            .map_err(|e| format!("{}: corrupt ({e}): ignored", path.display()))?,
        Some(STATE_SCHEMA_V1) => {
            let old = serde_json::from_value::<StateFileV1>(v)
                .map_err(|e| format!("{}: corrupt ({e}): ignored", path.display()))?;
            let mut families: BTreeMap<String, Family> = BTreeMap::new();
            for (k, val) in old.values {
                families
                    .entry(family_of(&k).to_string())
                    .or_insert_with(|| Family {
                        taken_unix_ms: old.taken_unix_ms,
                        values: BTreeMap::new(),
                        previous: None,
                    })
                    .values
                    .insert(k, val);
            }
            let _ = old.schema;
            StateFile {
                schema: STATE_SCHEMA.into(),
                boot_id: old.boot_id,
                families,
            }
        }
        other => {
            return Err(format!(
                "{}: schema {:?}, expected {STATE_SCHEMA}: ignored",
                path.display(),
                other.unwrap_or("none")
            ))
        }
    };
    let Some(boot) = boot else {
        return Err(format!(
            "{}: this system's boot id is unreadable, so the file cannot be matched to this boot: ignored",
            path.display()
        ));
    };
    if s.boot_id != boot {
        return Err(format!(
            "{}: written during another boot (the counters restarted since): ignored",
            path.display()
        ));
    }
    let times = s.families.values().flat_map(|f| {
        std::iter::once(f.taken_unix_ms).chain(f.previous.iter().map(|p| p.taken_unix_ms))
    });
    if times.clone().any(|t| t > now) {
        return Err(format!(
            "{}: written in the future (clock changed?): ignored",
            path.display()
        ));
    }
    if let Some(newest) = times.max() {
        let age = now - newest;
        if age > MAX_AGE_MS {
            return Err(format!(
                "{}: {} old, stale (more than 24 h): ignored",
                path.display(),
                human_secs(age)
            ));
        }
    }
    Ok(Some(s))
}

/// [`baseline_since`] for a run that started when it read the node.
pub fn baseline_of(
    ledger: &StateFile,
    families: &[&str],
    now: u64,
    path: &Path,
) -> Result<CounterBaseline, String> {
    baseline_since(ledger, families, now, now, path)
}

/// The baseline of every family in the ledger of `dir` (what a snapshot stores beside its
/// reading): `Ok(None)` when there is no ledger or no usable reading in it.
pub fn load(dir: &Path, boot: Option<&str>, now: u64) -> Result<Option<CounterBaseline>, String> {
    let Some(s) = load_ledger(dir, boot, now)? else {
        return Ok(None);
    };
    let all: Vec<&str> = s.families.keys().map(String::as_str).collect();
    Ok(baseline_of(&s, &all, now, &dir.join(STATE_FILE)).ok())
}

/// The baseline a run judges the `families` it runs against: per family, the newest reading
/// taken at least [`MIN_AGE_MS`] before the run started (`started`: before it waited for the
/// lock, so that runs started together all judge against the reading from before them, not
/// against each other's) and at most [`MAX_AGE_MS`] before `now` (its reading). `Err(note)`
/// says why there is none (no reading of those families yet, or only one too recent).
pub fn baseline_since(
    ledger: &StateFile,
    families: &[&str],
    started: u64,
    now: u64,
    path: &Path,
) -> Result<CounterBaseline, String> {
    let mut values = BTreeMap::new();
    let mut ages = BTreeMap::new();
    let mut too_recent: Option<u64> = None;
    for (name, f) in &ledger.families {
        if !families.iter().any(|p| p.trim_end_matches('/') == name) {
            continue;
        }
        let readings = std::iter::once((f.taken_unix_ms, &f.values))
            .chain(f.previous.iter().map(|p| (p.taken_unix_ms, &p.values)));
        let mut used = false;
        for (t, vals) in readings {
            let age = now.saturating_sub(t);
            if started.saturating_sub(t) < MIN_AGE_MS {
                too_recent = Some(too_recent.map_or(age, |a: u64| a.min(age)));
                continue;
            }
            if age > MAX_AGE_MS {
                break;
            }
            for (k, v) in vals {
                values.insert(k.clone(), *v);
                ages.insert(k.clone(), age);
            }
            used = true;
            break;
        }
        let _ = used;
    }
    if values.is_empty() {
        return Err(match too_recent {
            Some(age) => format!(
                "{}: the last run was {} ago, too recent to judge growth by (at least {}); its reading is kept for the next run",
                path.display(),
                human_secs(age),
                human_secs(MIN_AGE_MS)
            ),
            None => format!(
                "no earlier reading of these counters in {}: the next periodic run judges the growth since this one (or use --interval 10s)",
                path.display()
            ),
        });
    }
    let lo = ages.values().copied().min().unwrap_or(0);
    let hi = ages.values().copied().max().unwrap_or(0);
    let origin = if lo == hi {
        format!("the last run ({}, {} ago)", path.display(), human_secs(lo))
    } else {
        format!(
            "the ledger {} (readings {} to {} old, per counter family)",
            path.display(),
            human_secs(lo),
            human_secs(hi)
        )
    };
    Ok(CounterBaseline {
        values,
        elapsed_ms: lo,
        origin,
        ages_ms: if lo == hi { BTreeMap::new() } else { ages },
    })
}

/// The ledger after a run that read `values` at `taken` and ran the counters checks of
/// `families`: each of those families gets the new reading (the last one becomes the one
/// before), unless its last reading is younger than [`MIN_AGE_MS`] or was taken after this run
/// started (a run that waited while another recorded: then it stays, so a burst of runs does
/// not push the reading they all judge against out of the ledger); other families keep
/// theirs; families with nothing younger than [`MAX_AGE_MS`] are dropped.
pub fn record(
    old: Option<StateFile>,
    boot: &str,
    families: &[&str],
    taken: u64,
    values: &BTreeMap<String, u64>,
) -> StateFile {
    record_since(old, boot, families, taken, taken, values)
}

/// [`record`] for a run that started (asked for the lock) at `started`.
pub fn record_since(
    old: Option<StateFile>,
    boot: &str,
    families: &[&str],
    started: u64,
    taken: u64,
    values: &BTreeMap<String, u64>,
) -> StateFile {
    let mut s = old
        .filter(|s| s.boot_id == boot)
        .unwrap_or_else(|| StateFile {
            schema: STATE_SCHEMA.into(),
            boot_id: boot.into(),
            families: BTreeMap::new(),
        });
    let mut fresh: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (k, v) in values.iter().filter(|(k, _)| in_families(k, families)) {
        fresh
            .entry(family_of(k).to_string())
            .or_default()
            .insert(k.clone(), *v);
    }
    // A selected family this reading holds nothing of (every NIC gone) is recorded empty.
    for p in families {
        fresh
            .entry(p.trim_end_matches('/').to_string())
            .or_default();
    }
    for (name, vals) in fresh {
        match s.families.get_mut(&name) {
            Some(f)
                if taken.saturating_sub(f.taken_unix_ms) < MIN_AGE_MS
                    || started < f.taken_unix_ms => {}
            Some(f) => {
                let prev = Reading {
                    taken_unix_ms: f.taken_unix_ms,
                    values: std::mem::take(&mut f.values),
                };
                f.previous = Some(prev);
                f.taken_unix_ms = taken;
                f.values = vals;
            }
            None => {
                s.families.insert(
                    name,
                    Family {
                        taken_unix_ms: taken,
                        values: vals,
                        previous: None,
                    },
                );
            }
        }
    }
    s.families.retain(|_, f| {
        if f.previous
            .as_ref()
            .is_some_and(|p| taken.saturating_sub(p.taken_unix_ms) > MAX_AGE_MS)
        {
            f.previous = None;
        }
        taken.saturating_sub(f.taken_unix_ms) <= MAX_AGE_MS
    });
    s.schema = STATE_SCHEMA.into();
    s
}

/// Write the state file atomically: a temporary file in the same directory, fsync, rename.
pub fn save(dir: &Path, s: &StateFile) -> Result<(), String> {
    let mut json = serde_json::to_vec_pretty(s).map_err(|e| e.to_string())?;
    json.push(b'\n');
    atomic::replace(
        &dir.join(STATE_FILE),
        &json,
        atomic::Kind::State { durable: true },
    )
}

/// The ledger's lock, held until dropped (`flock` on `counters.lock`; released by the kernel
/// when the process ends, however it ends).
#[derive(Debug)]
pub struct Lock {
    _file: std::fs::File,
}

/// Take the ledger's lock in `dir`, waiting at most `wait` for another run to finish. `Err`
/// names why not (the directory cannot be made or trusted, the wait ran out): the run then
/// judges without the ledger and leaves it as it is.
pub fn lock(dir: &Path, wait: Duration) -> Result<Lock, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    atomic::trusted_dir(dir)?;
    let path = dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let t0 = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Lock { _file: f });
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) && e.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("{}: {e}", path.display()));
        }
        if t0.elapsed() >= wait {
            return Err(format!(
                "{}: another gdrdoctor run held the counter ledger for more than {}",
                path.display(),
                human_secs(wait.as_millis() as u64)
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// A snapshot's baseline (`gdrdoctor/counters-baseline.json`), if it has one.
pub fn snapshot_baseline(root: &Root) -> Option<CounterBaseline> {
    snapshot_baseline_checked(root).ok().flatten()
}

/// A snapshot's baseline: `Ok(None)` when it has none (taken without a valid state file),
/// `Err` when the file is there but cannot be read or parsed (damaged evidence: the counters
/// checks then refuse to pass on one reading, see `gdrdoctor_checks::model::DAMAGED`).
pub fn snapshot_baseline_checked(root: &Root) -> Result<Option<CounterBaseline>, String> {
    use gdrdoctor_checks::model::DAMAGED;
    let b = match root.read(SNAPSHOT_BASELINE) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(format!("{DAMAGED}{e}")),
    };
    serde_json::from_slice(&b)
        .map(Some)
        .map_err(|e| format!("{DAMAGED}{SNAPSHOT_BASELINE}: {e}"))
}

/// How `check` gets its baseline.
#[derive(Debug, Clone, Default)]
pub struct RateOptions {
    /// `--interval`: read twice, this far apart.
    pub interval: Option<Duration>,
    /// The state directory; `None` with `--no-state`.
    pub state_dir: Option<PathBuf>,
    /// The key families of the counters checks this run judges
    /// (`gdrdoctor_checks::counters::families_of`): the only ones it reads from the ledger and
    /// moves. Empty: the run neither reads nor writes the state file.
    pub families: Vec<&'static str>,
}

/// The ledger held for one run: taken before the node is read ([`Ledger::open`]), so that the
/// reading, the judgement and the record happen while no other run moves it.
pub struct Ledger {
    dir: PathBuf,
    lock: Result<Lock, String>,
    /// When the run asked for the lock.
    started: u64,
    /// When the node was read (the lock's time: the reading follows at once).
    read_at: u64,
}

impl Ledger {
    /// Take the lock of the state directory in `opts` for a live run that judges counters;
    /// `None` when the run uses no ledger (no counters check, `--no-state`, a snapshot).
    pub fn open(opts: &RateOptions, live: bool) -> Option<Ledger> {
        let dir = opts.state_dir.as_ref()?;
        if !live || opts.families.is_empty() {
            return None;
        }
        let started = now_ms();
        let lock = crate::sys::trace::timed("state.lock", || lock(dir, LOCK_WAIT));
        Some(Ledger {
            dir: dir.clone(),
            lock,
            started,
            read_at: now_ms(),
        })
    }
}

/// What [`Rates::finish`] needs to write the state file after the report.
pub struct Rates {
    ledger: Option<Ledger>,
    boot: Option<String>,
    families: Vec<&'static str>,
    /// The time of the reading the checks judged (after `--interval`, the second one).
    taken: u64,
}

impl Rates {
    /// Give `node` a baseline: with `--interval`, read the whole node again after the interval
    /// (`again`: the files, the PCI and RDMA lists among them, and the live libraries, as the
    /// first reading was made) and judge that reading against the first one's counters;
    /// otherwise the ledger of the earlier runs (`ledger`, opened before `node` was read).
    /// A sysroot is one reading: `--interval` is an error there and the state file is not used.
    /// A host root (`--host-root`) is the live host seen through a mount: its counters are read
    /// twice like the live node's, and the state file (in the container's state directory,
    /// keyed by the boot id the container shares with the host) works the same.
    pub fn start(
        origin: crate::source::Origin,
        node: &mut Node,
        opts: &RateOptions,
        again: &dyn Fn() -> Result<Node, String>,
        ledger: Option<Ledger>,
    ) -> Result<Rates, String> {
        use crate::source::Origin;
        if !matches!(origin, Origin::Live | Origin::HostRoot) {
            if opts.interval.is_some() {
                return Err("--interval reads the live counters twice; a snapshot holds one reading (it may carry its own baseline)".into());
            }
            return Ok(Rates {
                ledger: None,
                boot: None,
                families: vec![],
                taken: 0,
            });
        }
        let boot = boot_id();
        let mut ledger = ledger;
        let mut taken = ledger.as_ref().map_or_else(now_ms, |l| l.read_at);
        if let Some(iv) = opts.interval {
            let before = gdrdoctor_checks::counters::values(node);
            let t0 = Instant::now();
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!(
                    "gdrdoctor: reading the error counters again in {} (--interval)",
                    human_secs(iv.as_millis() as u64)
                );
            }
            std::thread::sleep(iv);
            // A NIC or GPU that left the bus, was renamed or renumbered during the interval is
            // judged on the lists of now, as a periodic run's would be (the counters checks
            // follow each RDMA device by its PCI function from the first reading's placement).
            // The ledger is taken for the second reading only (not across the interval, which
            // may be an hour): that reading is what this run records.
            ledger = Ledger::open(opts, true);
            taken = ledger.as_ref().map_or_else(now_ms, |l| l.read_at);
            *node = again().map_err(|e| {
                format!(
                    "--interval: reading the node again after {}: {e}",
                    human_secs(iv.as_millis() as u64)
                )
            })?;
            let elapsed = t0.elapsed().as_millis() as u64;
            node.health.baseline = Some(CounterBaseline {
                values: before,
                elapsed_ms: elapsed.max(1),
                origin: format!("--interval {}", human_secs(iv.as_millis() as u64)),
                ages_ms: BTreeMap::new(),
            });
        } else if let Some(l) = &ledger {
            let path = l.dir.join(STATE_FILE);
            match &l.lock {
                Err(why) => {
                    node.health.baseline_note =
                        Some(format!("the counter ledger is not used by this run: {why}"))
                }
                Ok(_) => match load_ledger(&l.dir, boot.as_deref(), l.read_at) {
                    Ok(Some(s)) => match baseline_since(
                        &s,
                        &opts.families,
                        l.started,
                        l.read_at,
                        &path,
                    ) {
                        Ok(b) => node.health.baseline = Some(b),
                        Err(note) => node.health.baseline_note = Some(note),
                    },
                    Ok(None) => {
                        node.health.baseline_note = Some(format!(
                            "no earlier run recorded in {}: the next periodic run judges the growth since this one (or use --interval 10s)",
                            path.display()
                        ))
                    }
                    Err(why) => node.health.baseline_note = Some(why),
                },
            }
        }
        Ok(Rates {
            ledger,
            boot,
            families: opts.families.clone(),
            taken,
        })
    }

    /// Record this run's counters for the next one, in the families it judged, and release the
    /// ledger (before the report is written: a reader slow to take the output must not hold
    /// other runs up). Failing to write is a note on stderr, never a failed check (a non-root
    /// run cannot write `/run/gdrdoctor`).
    pub fn finish(self, node: &Node) {
        let (Some(l), Some(boot)) = (&self.ledger, &self.boot) else {
            return;
        };
        if let Err(why) = &l.lock {
            eprintln!("gdrdoctor: note: the counters of this run are not recorded: {why}");
            return;
        }
        let values = gdrdoctor_checks::counters::values(node);
        // A ledger that cannot be used (corrupt, another boot) is replaced.
        let old = load_ledger(&l.dir, Some(boot), self.taken).ok().flatten();
        let s = record_since(old, boot, &self.families, l.started, self.taken, &values);
        if let Err(e) = save(&l.dir, &s) {
            eprintln!("gdrdoctor: note: cannot record the counters for the next run: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const ALL: &[&str] = &["aer/", "hw/", "ib/", "nvlink/", "pcie-replay/", "rdma-at/"];
    const KMOD_ONLY: &[&str] = &[];

    fn vals(link_downed: u64) -> BTreeMap<String, u64> {
        [
            ("ib/mlx5_0/1/link_downed".to_string(), link_downed),
            (
                "aer/0000:01:00.0/aer_dev_fatal/TOTAL_ERR_FATAL".to_string(),
                0,
            ),
        ]
        .into()
    }

    fn roundtrip(dir: &Path, s: &StateFile, now: u64) -> StateFile {
        save(dir, s).unwrap();
        load_ledger(dir, Some(&s.boot_id), now).unwrap().unwrap()
    }

    #[test]
    fn save_then_load_gives_the_growth_base() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        let s = record(None, "boot-a", ALL, 1_000_000, &vals(3));
        let s = roundtrip(&dir, &s, 1_010_000);
        let b = baseline_of(&s, ALL, 1_010_000, &dir.join(STATE_FILE)).unwrap();
        assert_eq!(b.values, vals(3));
        assert_eq!(b.elapsed_ms, 10_000);
        assert!(b.origin.contains("10.0 s ago"), "{}", b.origin);
        // No temporary file left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(STATE_FILE)]);
    }

    #[test]
    fn a_run_that_judges_no_counters_does_not_move_the_ledger() {
        // Periodic run at t=0 records link_downed 3; the link flaps 5 times; an operator's
        // `--only kmod` at t=30 s; the next periodic run at t=60 s still sees +5.
        let s = record(None, "b", ALL, 0, &vals(3));
        let s = record(Some(s), "b", KMOD_ONLY, 30_000, &vals(8));
        let b = baseline_of(&s, ALL, 60_000, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 3);
        assert_eq!(b.elapsed_ms, 60_000);
        // `--only counters.aer` moves aer only: the ib family keeps its reading and its age.
        let aer: Vec<&str> = gdrdoctor_checks::counters::families_of(|id| id == "counters.aer");
        assert_eq!(aer, vec!["aer/"]);
        let s = record(Some(s), "b", &aer, 40_000, &vals(8));
        let b = baseline_of(&s, ALL, 60_000, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 3);
        assert_eq!(b.elapsed_of("ib/mlx5_0/1/link_downed"), 60_000);
        assert_eq!(
            b.elapsed_of("aer/0000:01:00.0/aer_dev_fatal/TOTAL_ERR_FATAL"),
            20_000
        );
        assert!(b.origin.contains("20.0 s to 60.0 s"), "{}", b.origin);
    }

    #[test]
    fn a_reading_younger_than_a_second_is_not_judged_by_nor_replaced() {
        let s = record(None, "b", ALL, 0, &vals(3));
        // t=60 s: a periodic run records 8 (it judged +5 against t=0).
        let s = record(Some(s), "b", ALL, 60_000, &vals(8));
        // t=60.2 s: a second run in the same second judges against t=0 (the reading before),
        // so it too sees the +5, and does not replace the 60 s reading.
        let b = baseline_of(&s, ALL, 60_200, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 3);
        assert_eq!(b.elapsed_ms, 60_200);
        let s2 = record(Some(s.clone()), "b", ALL, 60_200, &vals(8));
        assert_eq!(s2, s);
        // With only a too-recent reading, no baseline, and the note says why.
        let only = record(None, "b", ALL, 0, &vals(3));
        let e = baseline_of(&only, ALL, 200, Path::new("/run/x/counters.json")).unwrap_err();
        assert!(e.contains("0.2 s ago, too recent"), "{e}");
        let again = record(Some(only.clone()), "b", ALL, 200, &vals(4));
        assert_eq!(again, only);
    }

    #[test]
    fn runs_started_together_judge_against_the_reading_before_them_all() {
        let s = record(None, "b", ALL, 0, &vals(3));
        // Ten runs start at t=10 s; the first reads and records at once, the last gets the lock
        // 2.5 s later: it still judges against t=0, not against the first run's reading.
        let s = record(Some(s), "b", ALL, 10_000, &vals(8));
        let b = baseline_since(&s, ALL, 9_990, 12_500, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 3);
        assert_eq!(b.elapsed_ms, 12_500);
        // The runs that waited while the first recorded do not replace its reading, even 2.5 s
        // on: the reading before it stays for the rest of the burst.
        let s2 = record_since(Some(s.clone()), "b", ALL, 9_990, 12_500, &vals(8));
        assert_eq!(s2, s);
        // A run that started after the first one's reading judges against that reading.
        let b = baseline_since(&s, ALL, 11_500, 12_500, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 8);
    }

    #[test]
    fn a_family_never_read_is_a_note_not_a_baseline() {
        let aer: Vec<&str> = gdrdoctor_checks::counters::families_of(|id| id == "counters.aer");
        let s = record(None, "b", &aer, 0, &vals(3));
        assert!(!s.families.contains_key("ib"));
        let ib = gdrdoctor_checks::counters::families_of(|id| id == "counters.ib-port");
        let e = baseline_of(&s, &ib, 60_000, Path::new("x")).unwrap_err();
        assert!(e.contains("no earlier reading"), "{e}");
    }

    #[test]
    fn a_v1_file_is_read_as_one_reading_of_every_family() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(
            t.path().join(STATE_FILE),
            br#"{"schema":"gdrdoctor.counters-state/v1","boot_id":"a","taken_unix_ms":1000,"values":{"ib/mlx5_0/1/link_downed":3}}"#,
        )
        .unwrap();
        let s = load_ledger(t.path(), Some("a"), 11_000).unwrap().unwrap();
        let b = baseline_of(&s, ALL, 11_000, Path::new("x")).unwrap();
        assert_eq!(b.values["ib/mlx5_0/1/link_downed"], 3);
        assert_eq!(b.elapsed_ms, 10_000);
    }

    #[test]
    fn missing_corrupt_stale_and_foreign_files() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(load_ledger(t.path(), Some("b"), 5).unwrap(), None);
        std::fs::write(t.path().join(STATE_FILE), b"{not json").unwrap();
        assert!(load_ledger(t.path(), Some("b"), 5)
            .unwrap_err()
            .contains("corrupt"));
        save(t.path(), &record(None, "boot-a", ALL, 1_000, &vals(3))).unwrap();
        assert!(load_ledger(t.path(), Some("boot-b"), 2_000)
            .unwrap_err()
            .contains("another boot"));
        assert!(load_ledger(t.path(), Some("boot-a"), 500)
            .unwrap_err()
            .contains("future"));
        assert!(
            load_ledger(t.path(), Some("boot-a"), 1_000 + MAX_AGE_MS + 1)
                .unwrap_err()
                .contains("stale")
        );
        assert!(load_ledger(t.path(), None, 2_000)
            .unwrap_err()
            .contains("boot id"));
        // Unknown fields are corruption too (deny_unknown_fields), and the next save rewrites.
        std::fs::write(
            t.path().join(STATE_FILE),
            br#"{"schema":"gdrdoctor.counters-state/v2","boot_id":"a","families":{},"x":1}"#,
        )
        .unwrap();
        assert!(load_ledger(t.path(), Some("a"), 2).is_err());
        save(t.path(), &record(None, "a", ALL, 2, &vals(3))).unwrap();
        assert!(load_ledger(t.path(), Some("a"), 3).unwrap().is_some());
        // A family older than a day is dropped when the ledger is next written.
        let s = record(None, "a", ALL, 0, &vals(3));
        let aer = gdrdoctor_checks::counters::families_of(|id| id == "counters.aer");
        let s = record(Some(s), "a", &aer, MAX_AGE_MS + 5, &vals(3));
        assert!(!s.families.contains_key("ib"), "{s:?}");
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_panic() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(save(&file.join("sub"), &record(None, "a", ALL, 1, &vals(3))).is_err());
        assert!(lock(&file.join("sub"), Duration::from_millis(10)).is_err());
    }

    #[test]
    fn the_lock_is_exclusive_and_the_wait_is_bounded() {
        let t = tempfile::tempdir().unwrap();
        let held = lock(t.path(), Duration::from_millis(10)).unwrap();
        let t0 = Instant::now();
        let e = lock(t.path(), Duration::from_millis(150)).unwrap_err();
        assert!(t0.elapsed() >= Duration::from_millis(150));
        assert!(e.contains("held the counter ledger"), "{e}");
        drop(held);
        assert!(lock(t.path(), Duration::from_millis(10)).is_ok());
    }

    #[test]
    fn a_directory_others_can_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = lock(&dir, Duration::from_millis(10)).unwrap_err();
        assert!(e.contains("writable by group or others"), "{e}");
        save(&dir, &record(None, "a", ALL, 1, &vals(3))).unwrap();
        let e = load_ledger(&dir, Some("a"), 2).unwrap_err();
        assert!(e.contains("writable by group or others"), "{e}");
    }
}
