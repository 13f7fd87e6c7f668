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
use gdrdoctor_checks::model::{CounterBaseline, Node};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const STATE_SCHEMA: &str = "gdrdoctor.counters-state/v1";
pub const STATE_FILE: &str = "counters.json";
pub const SNAPSHOT_BASELINE: &str = "/gdrdoctor/counters-baseline.json";
/// A state file older than this is stale (its growth would hide when it happened).
pub const MAX_AGE_MS: u64 = 24 * 3600 * 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateFile {
    pub schema: String,
    pub boot_id: String,
    pub taken_unix_ms: u64,
    pub values: BTreeMap<String, u64>,
}

/// The largest state file read (they are a few KiB).
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// The baseline in the state file of `dir`: `Ok(None)` when there is none yet, `Err(why)` when
/// it exists but cannot be used (the caller says it was ignored; the next save rewrites it).
pub fn load(dir: &Path, boot: Option<&str>, now: u64) -> Result<Option<CounterBaseline>, String> {
    let path = dir.join(STATE_FILE);
    let Some(bytes) = read_trusted(dir, STATE_FILE, MAX_STATE_BYTES)? else {
        return Ok(None);
    };
    let s: StateFile = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: corrupt ({e}): ignored", path.display()))?;
    if s.schema != STATE_SCHEMA {
        return Err(format!(
            "{}: schema {:?}, expected {STATE_SCHEMA}: ignored",
            path.display(),
            s.schema
        ));
    }
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
    if s.taken_unix_ms > now {
        return Err(format!(
            "{}: written in the future (clock changed?): ignored",
            path.display()
        ));
    }
    let age = now - s.taken_unix_ms;
    if age > MAX_AGE_MS {
        return Err(format!(
            "{}: {} old, stale (more than 24 h): ignored",
            path.display(),
            gdrdoctor_checks::counters::human_secs(age)
        ));
    }
    Ok(Some(CounterBaseline {
        values: s.values,
        elapsed_ms: age,
        origin: format!(
            "the last run ({}, {} ago)",
            path.display(),
            gdrdoctor_checks::counters::human_secs(age)
        ),
    }))
}

/// Write the state file atomically: a temporary file in the same directory, fsync, rename.
pub fn save(
    dir: &Path,
    boot: &str,
    now: u64,
    values: &BTreeMap<String, u64>,
) -> Result<(), String> {
    let s = StateFile {
        schema: STATE_SCHEMA.into(),
        boot_id: boot.into(),
        taken_unix_ms: now,
        values: values.clone(),
    };
    let mut json = serde_json::to_vec_pretty(&s).map_err(|e| e.to_string())?;
    json.push(b'\n');
    atomic::replace(
        &dir.join(STATE_FILE),
        &json,
        atomic::Kind::State { durable: true },
    )
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
}

/// What [`Rates::finish`] needs to write the state file after the report.
pub struct Rates {
    state_dir: Option<PathBuf>,
    boot: Option<String>,
}

impl Rates {
    /// Give `node` a baseline: with `--interval`, read the whole node again after the interval
    /// (`again`: the files, the PCI and RDMA lists among them, and the live libraries, as the
    /// first reading was made) and judge that reading against the first one's counters;
    /// otherwise the state file of the last run.
    /// A sysroot is one reading: `--interval` is an error there and the state file is not used.
    /// A host root (`--host-root`) is the live host seen through a mount: its counters are read
    /// twice like the live node's, and the state file (in the container's state directory,
    /// keyed by the boot id the container shares with the host) works the same.
    pub fn start(
        origin: crate::source::Origin,
        node: &mut Node,
        opts: &RateOptions,
        again: &dyn Fn() -> Result<Node, String>,
    ) -> Result<Rates, String> {
        use crate::source::Origin;
        if !matches!(origin, Origin::Live | Origin::HostRoot) {
            if opts.interval.is_some() {
                return Err("--interval reads the live counters twice; a snapshot holds one reading (it may carry its own baseline)".into());
            }
            return Ok(Rates {
                state_dir: None,
                boot: None,
            });
        }
        let boot = boot_id();
        if let Some(iv) = opts.interval {
            let before = gdrdoctor_checks::counters::values(node);
            let t0 = Instant::now();
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!(
                    "gdrdoctor: reading the error counters again in {} (--interval)",
                    gdrdoctor_checks::counters::human_secs(iv.as_millis() as u64)
                );
            }
            std::thread::sleep(iv);
            // A NIC or GPU that left the bus, was renamed or renumbered during the interval is
            // judged on the lists of now, as a periodic run's would be (the counters checks
            // follow each RDMA device by its PCI function from the first reading's placement).
            *node = again().map_err(|e| {
                format!(
                    "--interval: reading the node again after {}: {e}",
                    gdrdoctor_checks::counters::human_secs(iv.as_millis() as u64)
                )
            })?;
            let elapsed = t0.elapsed().as_millis() as u64;
            node.health.baseline = Some(CounterBaseline {
                values: before,
                elapsed_ms: elapsed.max(1),
                origin: format!(
                    "--interval {}",
                    gdrdoctor_checks::counters::human_secs(iv.as_millis() as u64)
                ),
            });
        } else if let Some(dir) = &opts.state_dir {
            match load(dir, boot.as_deref(), now_ms()) {
                Ok(Some(b)) => node.health.baseline = Some(b),
                Ok(None) => {
                    node.health.baseline_note = Some(format!(
                        "no earlier run recorded in {}: the next periodic run judges the growth since this one (or use --interval 10s)",
                        dir.join(STATE_FILE).display()
                    ))
                }
                Err(why) => node.health.baseline_note = Some(why),
            }
        }
        Ok(Rates {
            state_dir: opts.state_dir.clone(),
            boot,
        })
    }

    /// Record this run's counters for the next one. Failing to write is a note on stderr,
    /// never a failed check (a non-root run cannot write `/run/gdrdoctor`).
    pub fn finish(&self, node: &Node) {
        let (Some(dir), Some(boot)) = (&self.state_dir, &self.boot) else {
            return;
        };
        let values = gdrdoctor_checks::counters::values(node);
        if let Err(e) = save(dir, boot, now_ms(), &values) {
            eprintln!("gdrdoctor: note: cannot record the counters for the next run: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn vals() -> BTreeMap<String, u64> {
        [("ib/mlx5_0/1/link_downed".to_string(), 3u64)].into()
    }

    #[test]
    fn save_then_load_gives_the_growth_base() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        save(&dir, "boot-a", 1_000_000, &vals()).unwrap();
        let b = load(&dir, Some("boot-a"), 1_010_000).unwrap().unwrap();
        assert_eq!(b.values, vals());
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
    fn missing_corrupt_stale_and_foreign_files() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(load(t.path(), Some("b"), 5).unwrap(), None);
        std::fs::write(t.path().join(STATE_FILE), b"{not json").unwrap();
        assert!(load(t.path(), Some("b"), 5)
            .unwrap_err()
            .contains("corrupt"));
        save(t.path(), "boot-a", 1_000, &vals()).unwrap();
        assert!(load(t.path(), Some("boot-b"), 2_000)
            .unwrap_err()
            .contains("another boot"));
        assert!(load(t.path(), Some("boot-a"), 500)
            .unwrap_err()
            .contains("future"));
        assert!(load(t.path(), Some("boot-a"), 1_000 + MAX_AGE_MS + 1)
            .unwrap_err()
            .contains("stale"));
        assert!(load(t.path(), None, 2_000).unwrap_err().contains("boot id"));
        // Unknown fields are corruption too (deny_unknown_fields), and the next save rewrites.
        std::fs::write(t.path().join(STATE_FILE), br#"{"schema":"gdrdoctor.counters-state/v1","boot_id":"a","taken_unix_ms":1,"values":{},"x":1}"#).unwrap();
        assert!(load(t.path(), Some("a"), 2).is_err());
        save(t.path(), "a", 2, &vals()).unwrap();
        assert!(load(t.path(), Some("a"), 3).unwrap().is_some());
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_panic() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(save(&file.join("sub"), "a", 1, &vals()).is_err());
    }
}
