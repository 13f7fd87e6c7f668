//! The fixture nodes: `fixtures/nodes/<name>.tar.gz`, one archive per node in the format
//! `gdrdoctor snapshot X.tar.gz` writes (`scripts/fixture` packs them, `fixtures/gen.py` builds
//! the constructed ones). Tests read a node as a directory: [`fixture`] unpacks its archive once
//! per checkout into `<target>/tmp/fixtures/<name>-<hash of the archive>/<name>` with
//! [`build_once`] (a private directory renamed into place, so concurrent test binaries never
//! read a half-unpacked tree), and once per process it only looks the directory up. The
//! unpacked trees are shared: a test that damages or edits a node copies it first
//! (`copy_tree`).
//!
//! Std, flate2 and tar only: `tests/common/mod.rs` re-exports it for the gdrdoctor tests, and
//! the checks crate's tests and examples include this file with `#[path]`.
#![allow(dead_code, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the archives are, from the checkout's root.
pub const NODES: &str = "fixtures/nodes";

/// The checkout's root: the directory above this crate's manifest that holds `fixtures/nodes`.
pub fn checkout() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|p| p.join(NODES).is_dir())
        .unwrap_or_else(|| panic!("no {NODES} above {}", manifest.display()))
        .to_path_buf()
}

/// The archive of node `name`.
pub fn archive(name: &str) -> PathBuf {
    checkout().join(NODES).join(format!("{name}.tar.gz"))
}

/// Every node's name, sorted.
pub fn names() -> Vec<String> {
    let dir = checkout().join(NODES);
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".tar.gz"))
                .map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// Node `name` unpacked (once per checkout and archive content): a directory to read, never to
/// change.
pub fn fixture(name: &str) -> PathBuf {
    static UNPACKED: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut seen = UNPACKED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = seen.get(name) {
        return p.clone();
    }
    let from = archive(name);
    let bytes = std::fs::read(&from)
        .unwrap_or_else(|e| panic!("{}: {e} (no such fixture node)", from.display()));
    let key = format!("{name}-{:016x}", fnv1a(&bytes));
    let done = build_once(&cache_top(), &key, |dir| {
        let tree = dir.join(name);
        std::fs::create_dir(&tree).map_err(|e| format!("{}: {e}", tree.display()))?;
        unpack(&bytes, &tree).map_err(|e| format!("{}: {e}", from.display()))
    })
    .unwrap_or_else(|e| panic!("unpacking {}: {e}", from.display()));
    let tree = done.join(name);
    seen.insert(name.to_string(), tree.clone());
    tree
}

/// `<target>/tmp/fixtures` (cargo's scratch directory of tests; the system's temporary directory
/// for an example, which has none).
fn cache_top() -> PathBuf {
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(t) => PathBuf::from(t).join("fixtures"),
        None => std::env::temp_dir().join("gdrdoctor-fixtures"),
    }
}

/// Unpack a gzip-compressed tar (a fixture archive) into the existing directory `dir`: files,
/// directories and symlinks (kept as symlinks), nothing outside `dir`.
pub fn unpack(gz: &[u8], dir: &Path) -> Result<(), String> {
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    a.set_preserve_permissions(false);
    a.set_preserve_mtime(false);
    a.set_unpack_xattrs(false);
    for entry in a.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
            return Err(format!("{shown}: a {kind:?} entry in a fixture"));
        }
        if !entry.unpack_in(dir).map_err(|e| format!("{shown}: {e}"))? {
            return Err(format!("{shown}: outside the tree"));
        }
    }
    Ok(())
}

/// 64-bit FNV-1a: the cache key of an archive's content.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `top/<key>`, built once by `build` into a private directory and renamed into place:
/// test binaries (nextest: every test a process of its own) build concurrently, each into a
/// directory of its own, and the first rename wins, so no test loads a file another is still
/// writing. `build`'s error (a missing compiler, a skip) comes back; the half-built directory is
/// removed.
pub fn build_once(
    top: &Path,
    key: &str,
    build: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let done = top.join(key);
    if done.join("complete").exists() {
        return Ok(done);
    }
    std::fs::create_dir_all(top).unwrap_or_else(|e| panic!("create {}: {e}", top.display()));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = top.join(format!(".build-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("create {}: {e}", tmp.display()));
    if let Err(e) = build(&tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    std::fs::write(tmp.join("complete"), b"").expect("mark the build complete");
    if std::fs::rename(&tmp, &done).is_err() {
        // Another test process finished first: use its build.
        let _ = std::fs::remove_dir_all(&tmp);
        assert!(
            done.join("complete").exists(),
            "{} exists but is not a complete build",
            done.display()
        );
    }
    Ok(done)
}
