//! The CUDA answers of `check`, kept for the rest of the boot, so that most runs start no CUDA.
//!
//! The device attributes the checks use (GPUDirect RDMA support and its flush/ordering options,
//! dma-buf support, host registration, VMM, total memory) and the peer-access answers do not
//! change while the same driver drives the same GPUs. `cuInit` is the expensive part of a live
//! `check` (hundreds of milliseconds on a multi-GPU node), so its answers are kept in
//! `<state dir>/cuda-facts.json` (`/run/gdrdoctor`, a tmpfs: gone at reboot; `--state-dir`,
//! `GDRDOCTOR_STATE_DIR`) under a key of everything that could change them:
//!
//! * the boot (`/proc/sys/kernel/random/boot_id`);
//! * the driver: NVML's driver version, the first line of `/proc/driver/nvidia/version` (open or
//!   proprietary kernel module, and its build), the inode of `/sys/module/nvidia` (a new one at
//!   every load of the module: a reload of the same driver is a new key), and a hash of
//!   `/proc/driver/nvidia/params` (the registry keys the module loaded with);
//! * the GPUs: every GPU NVML lists, by PCI address and UUID (a swap, a hot-plug, a GPU that
//!   fell off the bus);
//! * the environment CUDA reads (`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`) and the one that
//!   picks the library (`LD_LIBRARY_PATH`, `LD_PRELOAD`), and the identity (device, inode,
//!   size, mtime) of the libcuda file the answers came from;
//! * this gdrdoctor build (another may ask other attributes).
//!
//! The file is written atomically (`state::atomic::replace`, without fsync: a crash
//! means a new boot id, which makes the file stale anyway) and read with validation
//! (`state::atomic::read_trusted`: owner and mode; then schema, unknown fields, a checksum,
//! the key, and the facts' own consistency). Anything that does not match is ignored, the
//! CUDA worker runs, and the file is rewritten: a stale or corrupt cache is never trusted.
//! Nothing here calls CUDA or NVML: the key's NVML half comes from the NVML worker.

use crate::live::nvml::Early;
use gdrdoctor_checks::model::CudaFacts;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const CACHE_FILE: &str = "cuda-facts.json";
pub const SCHEMA: &str = "gdrdoctor.cuda-cache/v1";
/// The environment variables in the key.
pub const KEY_ENV: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
];
/// The start of a fact source that came from the cache (`gdrdoctor_checks` shows it in the
/// evidence).
pub const SOURCE_PREFIX: &str = gdrdoctor_checks::model::CUDA_CACHE_SOURCE_PREFIX;

/// Everything that could change CUDA's answers (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// The gdrdoctor build that wrote the file.
    pub tool: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// NVML's driver version.
    pub driver_version: String,
    /// The `/proc/driver/nvidia/version` line (open or proprietary module, build).
    #[schemars(extend("x-required" = true))]
    pub kernel_module: Option<String>,
    /// Inode of `/sys/module/nvidia` (new at every load of the module).
    #[schemars(extend("x-required" = true))]
    pub module_instance: Option<u64>,
    /// Hash of `/proc/driver/nvidia/params`.
    #[schemars(extend("x-required" = true))]
    pub module_params: Option<String>,
    /// Every GPU NVML lists.
    pub gpus: Vec<KeyGpu>,
    /// The CUDA and loader environment variables that were set.
    pub env: BTreeMap<String, String>,
}

#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct KeyGpu {
    pub bdf: String,
    pub uuid: String,
}

/// The key's inputs that come from files (read under `root`: `/` on the live node).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileInputs {
    pub boot_id: Option<String>,
    pub kernel_module: Option<String>,
    pub module_instance: Option<u64>,
    pub module_params: Option<String>,
}

impl FileInputs {
    pub fn read(root: &Path) -> FileInputs {
        use std::os::unix::fs::MetadataExt;
        let at = |p: &str| root.join(p.trim_start_matches('/'));
        let text = |p: &str| std::fs::read(at(p)).ok();
        FileInputs {
            boot_id: text("/proc/sys/kernel/random/boot_id")
                .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                .filter(|s| !s.is_empty()),
            kernel_module: text("/proc/driver/nvidia/version").and_then(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .next()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            }),
            module_instance: std::fs::metadata(at("/sys/module/nvidia"))
                .ok()
                .map(|m| m.ino()),
            module_params: text("/proc/driver/nvidia/params")
                .map(|b| format!("{:016x}", fnv64(&b))),
        }
    }
}

/// The environment variables of [`KEY_ENV`] that are set.
pub fn key_env(get: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
    KEY_ENV
        .iter()
        .filter_map(|k| get(k).map(|v| (k.to_string(), v)))
        .collect()
}

/// The key of this run, or why there is none (then nothing is read or written).
pub fn key(
    files: &FileInputs,
    early: &Early,
    env: BTreeMap<String, String>,
) -> Result<Key, String> {
    if let Some(e) = &early.error {
        return Err(format!("NVML did not answer ({e})"));
    }
    let boot_id = files
        .boot_id
        .clone()
        .ok_or("the boot id (/proc/sys/kernel/random/boot_id) is unreadable")?;
    let driver_version = early
        .driver_version
        .clone()
        .ok_or("NVML did not report the driver version")?;
    if early.gpus.is_empty() {
        return Err("NVML lists no GPU".into());
    }
    let mut gpus = Vec::new();
    for g in &early.gpus {
        match &g.uuid {
            Some(u) if !g.bdf.starts_with("index") => gpus.push(KeyGpu {
                bdf: g.bdf.clone(),
                uuid: u.clone(),
            }),
            _ => return Err(format!("NVML did not identify GPU {}", g.bdf)),
        }
    }
    gpus.sort();
    Ok(Key {
        tool: crate::VERSION.to_string(),
        boot_id,
        driver_version,
        kernel_module: files.kernel_module.clone(),
        module_instance: files.module_instance,
        module_params: files.module_params.clone(),
        gpus,
        env,
    })
}

/// Which libcuda file the answers came from: if it changes, they may too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LibraryId {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

impl LibraryId {
    pub fn of(path: &str) -> Option<LibraryId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(LibraryId {
            path: path.to_string(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        })
    }
}

/// The file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    schema: String,
    /// Everything that could change CUDA's answers; any difference makes the file stale.
    key: Key,
    /// The libcuda file the answers came from.
    #[schemars(extend("x-required" = true))]
    library: Option<LibraryId>,
    /// When the file was written, milliseconds since the Unix epoch.
    written_unix_ms: u64,
    /// CUDA's answers.
    facts: CudaFacts,
    /// FNV-1a 64 of the file with this field empty (catches a damaged file; the owner and
    /// mode checks keep other users out).
    #[schemars(regex(pattern = r"^[0-9a-f]{16}$"))]
    checksum: String,
}

impl CacheFile {
    fn sum(&self) -> Result<String, String> {
        let mut c = self.clone();
        c.checksum = String::new();
        let b = serde_json::to_vec(&c).map_err(|e| e.to_string())?;
        Ok(format!("{:016x}", fnv64(&b)))
    }
}

/// The published JSON Schema of the cache file (docs/schema/gdrdoctor.cuda-cache.v1.schema.json),
/// derived from the type that writes and reads it.
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<CacheFile>(
        SCHEMA,
        "The CUDA answers of live `check` runs kept for the rest of the boot (`/run/gdrdoctor/cuda-facts.json`, or `--state-dir` / GDRDOCTOR_STATE_DIR): cuInit and device attributes, never a context. Used only when its key matches the node now; gdrdoctor ignores (and rewrites) a file it cannot use or whose checksum, owner or mode is wrong. Not an interface: read it for diagnosis only.",
        true,
    )
}

/// FNV-1a, 64 bits.
pub fn fnv64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= u64::from(*x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What the cache says for this run.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Valid: the facts, and where they came from (for the evidence).
    Hit { facts: CudaFacts, source: String },
    /// Nothing usable, and why (no file yet, another boot, corrupt, ...).
    Miss(String),
}

/// How long ago, in words.
fn ago(ms: u64) -> String {
    gdrdoctor_checks::counters::human_secs(ms)
}

/// What differs between the key the file was written for and this run's.
fn difference(old: &Key, new: &Key) -> String {
    if old.tool != new.tool {
        return format!("written by another gdrdoctor build ({})", old.tool);
    }
    if old.boot_id != new.boot_id {
        return "written during another boot".into();
    }
    if old.driver_version != new.driver_version {
        return format!(
            "the driver changed ({} -> {})",
            old.driver_version, new.driver_version
        );
    }
    if old.kernel_module != new.kernel_module {
        return "the nvidia kernel module changed (/proc/driver/nvidia/version)".into();
    }
    if old.module_instance != new.module_instance {
        return "the nvidia kernel module was reloaded (/sys/module/nvidia is new)".into();
    }
    if old.module_params != new.module_params {
        return "the nvidia module parameters changed (/proc/driver/nvidia/params)".into();
    }
    if old.gpus != new.gpus {
        let a: BTreeSet<_> = old.gpus.iter().collect();
        let b: BTreeSet<_> = new.gpus.iter().collect();
        let gone: Vec<String> = a
            .difference(&b)
            .map(|g| format!("{} {}", g.bdf, g.uuid))
            .collect();
        let came: Vec<String> = b
            .difference(&a)
            .map(|g| format!("{} {}", g.bdf, g.uuid))
            .collect();
        return format!(
            "the GPUs changed (gone: {}; new: {})",
            if gone.is_empty() {
                "none".into()
            } else {
                gone.join(", ")
            },
            if came.is_empty() {
                "none".into()
            } else {
                came.join(", ")
            }
        );
    }
    if old.env != new.env {
        let keys: BTreeSet<&String> = old.env.keys().chain(new.env.keys()).collect();
        let changed: Vec<&str> = keys
            .into_iter()
            .filter(|k| old.env.get(*k) != new.env.get(*k))
            .map(String::as_str)
            .collect();
        return format!("the environment changed ({})", changed.join(", "));
    }
    "the key changed".into()
}

/// The facts must be about the key's GPUs, each once.
fn consistent(key: &Key, f: &CudaFacts) -> Result<(), String> {
    let gpus: BTreeSet<&str> = key.gpus.iter().map(|g| g.bdf.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut ordinals = BTreeSet::new();
    for d in &f.devices {
        if !gpus.contains(d.bdf.as_str()) {
            return Err(format!("a device {} that NVML does not list", d.bdf));
        }
        if !seen.insert(d.bdf.as_str()) || !ordinals.insert(d.ordinal) {
            return Err(format!("device {} twice", d.bdf));
        }
    }
    for p in &f.peers {
        if !seen.contains(p.a_bdf.as_str()) || !seen.contains(p.b_bdf.as_str()) {
            return Err(format!(
                "a peer pair {} -> {} of unknown devices",
                p.a_bdf, p.b_bdf
            ));
        }
    }
    for b in f.not_asked.keys() {
        if !gpus.contains(b.as_str()) || seen.contains(b.as_str()) {
            return Err(format!("{b} both asked and not asked, or unknown"));
        }
    }
    Ok(())
}

/// Look the key up in `dir`. `left_out`: the GPUs this run would not ask CUDA about (compute
/// mode); a file that left out a GPU this run could ask is a miss (there is something to
/// learn).
pub fn load(dir: &Path, key: &Key, left_out: &BTreeSet<String>, now_ms: u64) -> Lookup {
    let path = dir.join(CACHE_FILE);
    let bytes = match super::atomic::read_trusted(dir, CACHE_FILE, MAX_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Lookup::Miss(format!("{}: none yet", path.display())),
        Err(e) => return Lookup::Miss(e),
    };
    let f: CacheFile = match serde_json::from_slice(&bytes) {
        Ok(f) => f,
        Err(e) => return Lookup::Miss(format!("{}: corrupt ({e}): ignored", path.display())),
    };
    let why = |w: String| Lookup::Miss(format!("{}: {w}: ignored", path.display()));
    if f.schema != SCHEMA {
        return why(format!("schema {:?}, expected {SCHEMA}", f.schema));
    }
    match f.sum() {
        Ok(s) if s == f.checksum => {}
        _ => return why("checksum mismatch (damaged)".into()),
    }
    if f.key != *key {
        return why(difference(&f.key, key));
    }
    if f.written_unix_ms > now_ms {
        return why("written in the future (clock changed?)".into());
    }
    if let Some(lib) = &f.library {
        if LibraryId::of(&lib.path).as_ref() != Some(lib) {
            return why(format!("{} changed since", lib.path));
        }
    }
    if let Err(e) = consistent(key, &f.facts) {
        return why(format!("inconsistent ({e})"));
    }
    if let Some(b) = f.facts.not_asked.keys().find(|b| !left_out.contains(*b)) {
        return why(format!("GPU {b} was left out then and can be asked now"));
    }
    let source = format!(
        "{SOURCE_PREFIX}{} (cuDeviceGetAttribute {} ago, this boot, driver {})",
        path.display(),
        ago(now_ms - f.written_unix_ms),
        key.driver_version
    );
    Lookup::Hit {
        facts: f.facts,
        source,
    }
}

/// Before NVML answers: `Some(why)` when this run's cache lookup cannot hit, whatever NVML will
/// say (no file, a damaged one, another gdrdoctor build, boot, kernel module or environment), so
/// that CUDA's worker may be started at once ([`crate::collect::live`]); `None` when it may.
/// The parts of the key only NVML knows (driver version, GPUs) are left to [`load`].
pub fn certain_miss(
    dir: &Path,
    files: &FileInputs,
    env: &BTreeMap<String, String>,
) -> Option<String> {
    let bytes = match super::atomic::read_trusted(dir, CACHE_FILE, MAX_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Some("no cache file yet".into()),
        Err(e) => return Some(e),
    };
    let f: CacheFile = match serde_json::from_slice(&bytes) {
        Ok(f) => f,
        Err(e) => return Some(format!("corrupt ({e})")),
    };
    if f.schema != SCHEMA {
        return Some(format!("schema {:?}", f.schema));
    }
    if !matches!(f.sum(), Ok(s) if s == f.checksum) {
        return Some("checksum mismatch".into());
    }
    let k = &f.key;
    if k.tool != crate::VERSION {
        Some("written by another gdrdoctor build".into())
    } else if files.boot_id.as_deref() != Some(k.boot_id.as_str()) {
        Some("written during another boot".into())
    } else if files.kernel_module != k.kernel_module
        || files.module_instance != k.module_instance
        || files.module_params != k.module_params
    {
        Some("the nvidia kernel module changed".into())
    } else if *env != k.env {
        Some("the environment changed".into())
    } else {
        None
    }
}

/// The largest cache file read.
const MAX_BYTES: u64 = 4 << 20;

/// Keep `facts` for the rest of the boot. Returns the file written.
pub fn save(dir: &Path, key: &Key, facts: &CudaFacts, now_ms: u64) -> Result<PathBuf, String> {
    consistent(key, facts).map_err(|e| format!("not cached: {e}"))?;
    let mut f = CacheFile {
        schema: SCHEMA.into(),
        key: key.clone(),
        library: facts.library.as_deref().and_then(LibraryId::of),
        written_unix_ms: now_ms,
        facts: facts.clone(),
        checksum: String::new(),
    };
    f.checksum = f.sum()?;
    let mut json = serde_json::to_vec_pretty(&f).map_err(|e| e.to_string())?;
    json.push(b'\n');
    super::atomic::replace(
        &dir.join(CACHE_FILE),
        &json,
        super::atomic::Kind::State { durable: false },
    )?;
    Ok(dir.join(CACHE_FILE))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::live::nvml::EarlyGpu;
    use gdrdoctor_checks::model::{CudaDevice, CudaPeer};

    fn early() -> Early {
        Early {
            driver_version: Some("580.159.04".into()),
            gpus: vec![
                EarlyGpu {
                    bdf: "0000:18:00.0".into(),
                    uuid: Some("GPU-aaaa".into()),
                    compute_mode: Some("default".into()),
                },
                EarlyGpu {
                    bdf: "0000:2a:00.0".into(),
                    uuid: Some("GPU-bbbb".into()),
                    compute_mode: Some("default".into()),
                },
            ],
            error: None,
        }
    }

    fn files() -> FileInputs {
        FileInputs {
            boot_id: Some("boot-1".into()),
            kernel_module: Some(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 580.159.04 Release Build"
                    .into(),
            ),
            module_instance: Some(4242),
            module_params: Some("00ff".into()),
        }
    }

    fn facts(gdr: i32) -> CudaFacts {
        let dev = |o: i32, bdf: &str| CudaDevice {
            ordinal: o,
            bdf: bdf.into(),
            name: "NVIDIA H200".into(),
            cc_major: 9,
            gpu_direct_rdma_supported: Some(gdr),
            dma_buf_supported: Some(1),
            ..Default::default()
        };
        CudaFacts {
            driver_version: 13000,
            devices: vec![dev(0, "0000:18:00.0"), dev(1, "0000:2a:00.0")],
            library: None,
            peers: vec![CudaPeer {
                a: 0,
                b: 1,
                a_bdf: "0000:18:00.0".into(),
                b_bdf: "0000:2a:00.0".into(),
                can_access: Some(true),
                ..Default::default()
            }],
            not_asked: BTreeMap::new(),
            damaged: BTreeMap::new(),
        }
    }

    fn k(f: &FileInputs, e: &Early) -> Key {
        key(f, e, BTreeMap::new()).unwrap()
    }

    fn hit(l: &Lookup) -> Option<&CudaFacts> {
        match l {
            Lookup::Hit { facts, .. } => Some(facts),
            Lookup::Miss(_) => None,
        }
    }

    fn miss(l: &Lookup) -> &str {
        match l {
            Lookup::Miss(w) => w,
            Lookup::Hit { .. } => panic!("a hit where a miss was expected"),
        }
    }

    #[test]
    fn save_then_load_is_a_hit_with_the_source_named() {
        let t = tempfile::tempdir().unwrap();
        let key = k(&files(), &early());
        save(t.path(), &key, &facts(1), 1_000).unwrap();
        let l = load(t.path(), &key, &BTreeSet::new(), 61_000);
        assert_eq!(hit(&l), Some(&facts(1)));
        let Lookup::Hit { source, .. } = l else {
            unreachable!()
        };
        assert!(source.starts_with(SOURCE_PREFIX), "{source}");
        assert!(source.contains("60.0 s ago"), "{source}");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![CACHE_FILE.to_string()]);
        // Readable by everyone (a non-root `check` may use root's answers), writable by its
        // owner only (what `read_trusted` asks), whatever the umask.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(t.path().join(CACHE_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    /// Every key input, changed alone, makes the cache a miss that says why; the facts of the
    /// old key are never returned.
    #[test]
    fn every_key_input_changed_alone_is_a_miss() {
        let t = tempfile::tempdir().unwrap();
        let base = k(&files(), &early());
        save(t.path(), &base, &facts(1), 1_000).unwrap();
        let none = BTreeSet::new();
        type Change = (
            &'static str,
            Box<dyn Fn(&mut FileInputs, &mut Early)>,
            &'static str,
        );
        let changes: Vec<Change> = vec![
            (
                "boot id",
                Box::new(|f, _| f.boot_id = Some("boot-2".into())),
                "another boot",
            ),
            (
                "driver version",
                Box::new(|_, e| e.driver_version = Some("580.160.01".into())),
                "the driver changed (580.159.04 -> 580.160.01)",
            ),
            (
                "kernel module flavor",
                Box::new(|f, _| {
                    f.kernel_module =
                        Some("NVRM version: NVIDIA UNIX x86_64 Kernel Module 580.159.04".into())
                }),
                "kernel module changed",
            ),
            (
                "module reload",
                Box::new(|f, _| f.module_instance = Some(4243)),
                "was reloaded",
            ),
            (
                "module parameters",
                Box::new(|f, _| f.module_params = Some("0100".into())),
                "module parameters changed",
            ),
            (
                "a GPU UUID",
                Box::new(|_, e| e.gpus[1].uuid = Some("GPU-cccc".into())),
                "new: 0000:2a:00.0 GPU-cccc",
            ),
            (
                "a PCI address",
                Box::new(|_, e| e.gpus[0].bdf = "0000:19:00.0".into()),
                "gone: 0000:18:00.0 GPU-aaaa",
            ),
            (
                "a GPU gone",
                Box::new(|_, e| {
                    e.gpus.pop();
                }),
                "the GPUs changed",
            ),
        ];
        for (what, change, says) in changes {
            let (mut f, mut e) = (files(), early());
            change(&mut f, &mut e);
            let key = k(&f, &e);
            let l = load(t.path(), &key, &none, 2_000);
            assert!(hit(&l).is_none(), "{what}: the old facts were trusted");
            assert!(miss(&l).contains(says), "{what}: {}", miss(&l));
        }
        // The environment CUDA reads.
        let key = key(
            &files(),
            &early(),
            [("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string())].into(),
        )
        .unwrap();
        assert!(miss(&load(t.path(), &key, &none, 2_000)).contains("CUDA_VISIBLE_DEVICES"));
        // Another gdrdoctor build.
        let mut other = base.clone();
        other.tool = "0.0.1 (commit x)".into();
        assert!(miss(&load(t.path(), &other, &none, 2_000)).contains("another gdrdoctor build"));
        // And the unchanged key still hits.
        assert!(hit(&load(t.path(), &base, &none, 2_000)).is_some());
    }

    #[test]
    fn a_changed_key_rewrites_the_file() {
        let t = tempfile::tempdir().unwrap();
        let a = k(&files(), &early());
        save(t.path(), &a, &facts(1), 1_000).unwrap();
        let mut e = early();
        e.driver_version = Some("590.1".into());
        let b = k(&files(), &e);
        assert!(hit(&load(t.path(), &b, &BTreeSet::new(), 2_000)).is_none());
        save(t.path(), &b, &facts(0), 2_000).unwrap();
        assert_eq!(
            hit(&load(t.path(), &b, &BTreeSet::new(), 3_000)),
            Some(&facts(0))
        );
        assert!(hit(&load(t.path(), &a, &BTreeSet::new(), 3_000)).is_none());
    }

    #[test]
    fn damaged_foreign_and_inconsistent_files_are_misses() {
        let t = tempfile::tempdir().unwrap();
        let key = k(&files(), &early());
        let none = BTreeSet::new();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("none yet"));
        let path = t.path().join(CACHE_FILE);
        std::fs::write(&path, b"{not json").unwrap();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("corrupt"));
        // A value flipped by hand (or by a bad disk) fails the checksum.
        save(t.path(), &key, &facts(1), 1).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let flipped = text.replacen(
            "\"gpu_direct_rdma_supported\": 1",
            "\"gpu_direct_rdma_supported\": 0",
            1,
        );
        assert_ne!(text, flipped);
        std::fs::write(&path, flipped).unwrap();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("checksum"));
        // Unknown fields are corruption too.
        let extra = text.replacen("{", "{\"x\": 1,", 1);
        std::fs::write(&path, extra).unwrap();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("corrupt"));
        // Written in the future.
        save(t.path(), &key, &facts(1), 10).unwrap();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("future"));
        // Writable by others: another user could have planted it.
        save(t.path(), &key, &facts(1), 1).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(miss(&load(t.path(), &key, &none, 5)).contains("writable by group or others"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(hit(&load(t.path(), &key, &none, 5)).is_some());
        // Facts about a GPU the key does not list are not written.
        let mut bad = facts(1);
        bad.devices[1].bdf = "0000:99:00.0".into();
        assert!(save(t.path(), &key, &bad, 6).is_err());
        // A symlink in place of the file is refused, not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(hit(&load(t.path(), &key, &none, 5)).is_none());
    }

    #[test]
    fn a_gpu_left_out_then_but_askable_now_is_a_miss() {
        let t = tempfile::tempdir().unwrap();
        let key = k(&files(), &early());
        let mut f = facts(1);
        f.devices.pop();
        f.peers.clear();
        f.not_asked.insert(
            "0000:2a:00.0".into(),
            "compute mode exclusive-process".into(),
        );
        save(t.path(), &key, &f, 1).unwrap();
        let still: BTreeSet<String> = ["0000:2a:00.0".to_string()].into();
        assert_eq!(hit(&load(t.path(), &key, &still, 2)), Some(&f));
        assert!(miss(&load(t.path(), &key, &BTreeSet::new(), 2)).contains("can be asked now"));
    }

    #[test]
    fn the_library_identity_is_checked() {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("libcuda.so.1");
        std::fs::write(&lib, b"one").unwrap();
        let key = k(&files(), &early());
        let mut f = facts(1);
        f.library = Some(lib.display().to_string());
        let dir = t.path().join("state");
        save(&dir, &key, &f, 1).unwrap();
        assert!(hit(&load(&dir, &key, &BTreeSet::new(), 2)).is_some());
        std::fs::write(&lib, b"another build").unwrap();
        assert!(miss(&load(&dir, &key, &BTreeSet::new(), 2)).contains("changed since"));
    }

    #[test]
    fn no_key_without_a_boot_id_or_gpu_identities() {
        let mut f = files();
        f.boot_id = None;
        assert!(key(&f, &early(), BTreeMap::new()).is_err());
        let mut e = early();
        e.gpus[0].uuid = None;
        assert!(key(&files(), &e, BTreeMap::new()).is_err());
        assert!(key(&files(), &Early::default(), BTreeMap::new()).is_err());
    }

    #[test]
    fn file_inputs_come_from_the_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("proc/sys/kernel/random")).unwrap();
        std::fs::create_dir_all(r.join("proc/driver/nvidia")).unwrap();
        std::fs::create_dir_all(r.join("sys/module/nvidia")).unwrap();
        std::fs::write(r.join("proc/sys/kernel/random/boot_id"), "abc\n").unwrap();
        std::fs::write(
            r.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\nGCC version: 13\n",
        )
        .unwrap();
        std::fs::write(
            r.join("proc/driver/nvidia/params"),
            "EnableStreamMemOPs: 0\n",
        )
        .unwrap();
        let a = FileInputs::read(r);
        assert_eq!(a.boot_id.as_deref(), Some("abc"));
        assert_eq!(
            a.kernel_module.as_deref(),
            Some(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64 580.159.04 Release Build"
            )
        );
        assert!(a.module_instance.is_some());
        // Another parameter, another key.
        std::fs::write(
            r.join("proc/driver/nvidia/params"),
            "EnableStreamMemOPs: 1\n",
        )
        .unwrap();
        assert_ne!(FileInputs::read(r).module_params, a.module_params);
        // A module loaded again is a new directory (sysfs numbers its nodes cyclically, so a
        // new load gets a new inode; here the old directory is kept so that the filesystem
        // cannot hand its inode out again).
        std::fs::rename(r.join("sys/module/nvidia"), r.join("sys/module/old")).unwrap();
        std::fs::create_dir_all(r.join("sys/module/nvidia")).unwrap();
        assert_ne!(FileInputs::read(r).module_instance, a.module_instance);
    }
}
