//! `gdrdoctor snapshot OUT`: collect the node through a recording reader and copy exactly the
//! files the collectors read (keeping sysfs links as links) plus `gdrdoctor/meta.json`, into a
//! directory or a `.tar.gz` ([`crate::source::archive`] packs it).

use crate::collect;
use crate::source::archive::{pack_tgz, SnapshotError, TempTree};
use crate::source::meta::{Meta, META_PATH, META_SCHEMA};
use crate::source::reader::{Recorded, Root};
use crate::source::Source;
use gdrdoctor_checks::model::Node;
use std::path::{Path, PathBuf};

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
    let mut extra = crate::collect::health::snapshot_files(root.is_live(), &mut node);
    extra.extend(crate::collect::addons::snapshot_file(&node));
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
        memlock_damage: None,
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
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(SnapshotError(format!(
                "{}: is a symbolic link: not followed (remove it or choose another directory)",
                dir.display()
            )));
        }
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
    rec.remove(crate::source::meta::LIVE_PATH);
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
        let dest = dir.join(crate::source::meta::LIVE_PATH.trim_start_matches('/'));
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

/// The archive of `dir` written to `out` through the one atomic writer: a new file beside it,
/// renamed over it, so a symlink planted at `out` is replaced, never followed.
fn write_tgz(dir: &Path, out: &Path) -> Result<(), SnapshotError> {
    let bytes = pack_tgz(dir, out)?;
    crate::state::atomic::replace(out, &bytes, crate::state::atomic::Kind::Output)
        .map_err(SnapshotError)
}

/// Put [`KEEP_MARKER`](crate::source::reader::KEEP_MARKER) in every empty directory: an empty
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
        std::fs::write(dir.join(crate::source::reader::KEEP_MARKER), b"")?;
    }
    Ok(())
}
