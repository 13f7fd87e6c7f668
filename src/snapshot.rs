//! `gdrdoctor snapshot OUT`: copy exactly the files the collectors read (keeping sysfs links as
//! links) plus `gdrdoctor/meta.json`, into a directory or a `.tar.gz`.

use crate::collect;
use crate::meta::{Meta, META_PATH, META_SCHEMA};
use crate::reader::{Recorded, Root};
use crate::source::Source;
use gdrdoctor_checks::model::Node;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct SnapshotError(pub String);

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub struct Written {
    pub files: usize,
    pub links: usize,
    pub dirs: usize,
    pub bytes: u64,
}

/// Collect `root` through a recording reader and write what it saw under `out`.
pub fn take(
    root: Root,
    out: &Path,
    live: Option<&gdrdoctor_checks::model::LiveFacts>,
) -> Result<(Node, Written), SnapshotError> {
    let src = Source::from_root(root).map_err(SnapshotError)?;
    take_source(src.recording(), out, live)
}

/// Write what collecting `src` (a recording source) reads under `out`.
pub fn take_source(
    src: Source,
    out: &Path,
    live: Option<&gdrdoctor_checks::model::LiveFacts>,
) -> Result<(Node, Written), SnapshotError> {
    let root = &src.root;
    let mut node = collect::files(&src);
    // Issue 17: the kernel log lines and the counter baseline the checks use.
    let extra = crate::health::snapshot_files(root.is_live(), &mut node);
    let meta = Meta {
        schema: META_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        hostname: node.hostname.get().cloned(),
        kernel_release: node.kernel_release.get().cloned(),
        arch: node.arch.get().cloned(),
        euid: node.euid.get().copied(),
        memlock: node.memlock.get().copied(),
        env: node.env.get().cloned().unwrap_or_default(),
    };
    let tgz = out.extension().is_some_and(|e| e == "gz" || e == "tgz");
    // A `.tar.gz` is staged in a private temporary tree, removed on every way out.
    let staging = if tgz {
        Some(TempTree::new("gdrdoctor-snapshot-")?)
    } else {
        None
    };
    let dir: PathBuf = match &staging {
        Some(t) => t.path().to_path_buf(),
        None => out.to_path_buf(),
    };
    if !tgz {
        if let Ok(mut rd) = std::fs::read_dir(&dir) {
            if rd.next().is_some() {
                return Err(SnapshotError(format!(
                    "{}: exists and is not empty",
                    dir.display()
                )));
            }
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| SnapshotError(format!("{}: {e}", dir.display())))?;
    let mut w = Written {
        files: 0,
        links: 0,
        dirs: 0,
        bytes: 0,
    };
    let mut rec = root.recorded();
    rec.remove(META_PATH);
    rec.remove(crate::meta::LIVE_PATH);
    for (path, bytes) in extra {
        rec.insert(path, Recorded::File(bytes));
    }
    for (kpath, what) in &rec {
        let rel = kpath.trim_start_matches('/');
        if rel.is_empty() {
            continue;
        }
        let dest = dir.join(rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| SnapshotError(format!("{}: {e}", parent.display())))?;
        }
        let res = match what {
            Recorded::Dir => {
                w.dirs += 1;
                std::fs::create_dir_all(&dest)
            }
            Recorded::Link(t) => {
                w.links += 1;
                if dest.symlink_metadata().is_ok() {
                    Ok(())
                } else {
                    std::os::unix::fs::symlink(t, &dest)
                }
            }
            Recorded::File(b) => {
                w.files += 1;
                w.bytes += b.len() as u64;
                std::fs::write(&dest, b)
            }
            Recorded::Listed => {
                if dest.symlink_metadata().is_ok() {
                    Ok(())
                } else {
                    std::fs::write(&dest, b"")
                }
            }
        };
        res.map_err(|e| SnapshotError(format!("{}: {e}", dest.display())))?;
    }
    mark_empty_dirs(&dir).map_err(|e| SnapshotError(format!("{}: {e}", dir.display())))?;
    // A foreign capture stays foreign: without meta.json its missing files keep meaning
    // "not in this capture" rather than "absent on the node".
    if src.origin == crate::source::Origin::Foreign {
        if tgz {
            write_tgz(&dir, out)?;
        }
        return Ok((node, w));
    }
    let meta_dest = dir.join(META_PATH.trim_start_matches('/'));
    if let Some(p) = meta_dest.parent() {
        std::fs::create_dir_all(p).map_err(|e| SnapshotError(format!("{}: {e}", p.display())))?;
    }
    let json = serde_json::to_vec_pretty(&meta).map_err(|e| SnapshotError(e.to_string()))?;
    std::fs::write(&meta_dest, json)
        .map_err(|e| SnapshotError(format!("{}: {e}", meta_dest.display())))?;
    if let Some(l) = live {
        let dest = dir.join(crate::meta::LIVE_PATH.trim_start_matches('/'));
        let json = serde_json::to_vec_pretty(l).map_err(|e| SnapshotError(e.to_string()))?;
        std::fs::write(&dest, json)
            .map_err(|e| SnapshotError(format!("{}: {e}", dest.display())))?;
    }
    if tgz {
        write_tgz(&dir, out)?;
    }
    drop(staging);
    Ok((node, w))
}

/// Put [`KEEP_MARKER`](crate::reader::KEEP_MARKER) in every empty directory: an empty
/// `/sys/class/infiniband` is a finding ("no RDMA device"), and git would drop it.
pub fn mark_empty_dirs(dir: &Path) -> std::io::Result<()> {
    let mut empty = true;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        empty = false;
        if e.file_type()?.is_dir() {
            mark_empty_dirs(&e.path())?;
        }
    }
    if empty {
        std::fs::write(dir.join(crate::reader::KEEP_MARKER), b"")?;
    }
    Ok(())
}

fn write_tgz(dir: &Path, out: &Path) -> Result<(), SnapshotError> {
    let f =
        std::fs::File::create(out).map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut t = tar::Builder::new(gz);
    t.follow_symlinks(false);
    t.append_dir_all(".", dir)
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    let gz = t
        .into_inner()
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    gz.finish()
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    Ok(())
}

/// What a `.tar.gz` snapshot may unpack to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of all regular files together.
    pub bytes: u64,
    /// Entries: files, directories and symlinks.
    pub entries: usize,
    /// Bytes of one regular file.
    pub file: u64,
}

impl Limits {
    /// A node's snapshot is a few MiB in a few thousand entries (the 8-GPU fixtures: about
    /// 1,200 entries, 2 MiB); a compressed bomb of 1 MB would otherwise unpack to 1 GiB. No file
    /// a snapshot holds is larger than the reader reads ([`crate::reader::MAX_FILE`]).
    pub const SNAPSHOT: Limits = Limits {
        bytes: 256 << 20,
        entries: 200_000,
        file: crate::reader::MAX_FILE,
    };
}

/// 64 unpredictable bits: `/dev/urandom`, else the clock and the pid mixed (names of temporary
/// files and directories; never a secret).
pub fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // splitmix64 of the clock and the pid.
    let mut z = t ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A private temporary directory with `mkdtemp(3)` semantics: an unpredictable name under the
/// temporary directory, created exclusively (nothing planted under that name is reused or
/// followed), mode 0700. It is removed when dropped, on every error path that drops it, and on
/// SIGINT, SIGTERM and SIGHUP (the probe runner's termination handlers, see
/// [`crate::probe::runner::remove_on_termination`]).
#[derive(Debug)]
pub struct TempTree {
    path: PathBuf,
    slot: Option<usize>,
}

impl TempTree {
    pub fn new(prefix: &str) -> Result<TempTree, SnapshotError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = String::new();
        for _ in 0..64 {
            let path = base.join(format!("{prefix}{:016x}", random_u64()));
            // Registered before it exists: a signal between mkdir and here would leak it.
            let slot = crate::probe::runner::remove_on_termination(&path);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TempTree { path, slot }),
                Err(e) => {
                    if let Some(s) = slot {
                        crate::probe::runner::forget_on_termination(s);
                    }
                    last = format!("{}: {e}", path.display());
                    if e.kind() != std::io::ErrorKind::AlreadyExists {
                        break;
                    }
                }
            }
        }
        Err(SnapshotError(format!(
            "cannot create a private temporary directory: {last}"
        )))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        remove_tree(&self.path);
        if let Some(s) = self.slot {
            crate::probe::runner::forget_on_termination(s);
        }
    }
}

/// Remove a tree we created, directories made searchable first (an archive may carry
/// directories of mode 000). Symlinks are removed, never followed.
fn remove_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn open_up(p: &Path, depth: usize) {
        if depth > 64 {
            return;
        }
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return;
        };
        if !md.is_dir() {
            return;
        }
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                open_up(&e.path(), depth + 1);
            }
        }
    }
    open_up(dir, 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `.tar.gz` snapshot unpacked into a [`TempTree`] (for `--sysroot x.tar.gz`), within
/// [`Limits::SNAPSHOT`]: regular files, directories and symlinks only (no hard links, devices,
/// FIFOs or sparse files), every path inside the tree. Any refusal or read error removes what
/// was unpacked.
pub fn unpack(archive: &Path) -> Result<TempTree, SnapshotError> {
    let f = std::fs::File::open(archive)
        .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))?;
    let tree = TempTree::new("gdrdoctor-sysroot-")?;
    unpack_into(f, tree.path(), &Limits::SNAPSHOT)
        .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))?;
    Ok(tree)
}

/// Unpack the gzip-compressed tar from `input` into the existing directory `dir`, within
/// `limits` (see [`unpack`]).
pub fn unpack_into(input: impl std::io::Read, dir: &Path, limits: &Limits) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    use tar::EntryType;
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(input));
    a.set_preserve_permissions(false);
    a.set_preserve_mtime(false);
    a.set_unpack_xattrs(false);
    let mut bytes = 0u64;
    let mut count = 0usize;
    let entries = a.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        count += 1;
        if count > limits.entries {
            return Err(format!(
                "more than {} entries: not a gdrdoctor snapshot (refused)",
                limits.entries
            ));
        }
        let kind = entry.header().entry_type();
        let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        match kind {
            EntryType::Regular | EntryType::Continuous => {
                let size = entry.header().size().map_err(|e| format!("{shown}: {e}"))?;
                if size > limits.file {
                    return Err(format!(
                        "{shown}: {size} bytes, more than any file a snapshot holds ({} bytes)",
                        limits.file
                    ));
                }
                bytes = bytes.saturating_add(size);
                if bytes > limits.bytes {
                    return Err(format!(
                        "more than {} bytes unpacked: not a gdrdoctor snapshot (refused)",
                        limits.bytes
                    ));
                }
            }
            EntryType::Directory | EntryType::Symlink => {}
            // pax and GNU long-name headers are consumed by the reader; anything else
            // (hard links, devices, FIFOs, sparse files) has no place in a snapshot.
            other => {
                return Err(format!(
                "{shown}: {other:?} entry: a snapshot holds only files, directories and symlinks"
            ))
            }
        }
        // `unpack_in` refuses entries that would land outside `dir` (`..`, absolute paths,
        // through a symlink unpacked earlier).
        let inside = entry.unpack_in(dir).map_err(|e| format!("{shown}: {e}"))?;
        if !inside {
            return Err(format!("{shown}: outside the snapshot (refused)"));
        }
        if kind == EntryType::Directory {
            // Searchable whatever mode the archive gave it; never through a symlink.
            let p = dir.join(entry.path().map_err(|e| format!("{shown}: {e}"))?);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700));
            }
        }
    }
    Ok(())
}
