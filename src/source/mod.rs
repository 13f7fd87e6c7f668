//! Where the facts come from, decided once: [`Origin`] says what kind of root it is, and
//! [`Source`] opens it (reading a `.tar.gz` into memory, reading `gdrdoctor/meta.json`, marking a
//! gdrdoctor snapshot complete). `check`, `topo`, `probe` and `snapshot` all start here; the
//! collectors ask the origin, never the root, whether a fact comes from a system call or from
//! the snapshot's metadata.
//!
//! Adding a kind of source: a variant of [`Origin`]; its arm in [`Source::open`] (a
//! [`Location`] for it); its arm in `collect::process` (where the live-only process facts come
//! from) and in `collect::live` (the libraries). The last one added is [`Origin::HostRoot`]
//! (`--host-root DIR`, a container that mounts the host's `/` at DIR, e.g. a Kubernetes
//! DaemonSet): `Root::sysroot(DIR)` marked complete, since it is the live host seen through a
//! mount; the container's rlimits and environment are not the host's (the memlock limit is read
//! from the container runtime's `/proc/PID/limits` through DIR); the libraries are queried in a
//! worker as for [`Origin::Live`] when the container has them.

pub mod archive;
pub mod input;
pub mod meta;
pub mod policy;
pub mod reader;

use meta::Meta;
use reader::Root;
use std::path::Path;

/// What kind of root the facts are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This node, at `/`: live-only facts from system calls, live libraries in a worker.
    Live,
    /// A `gdrdoctor snapshot` (it has `gdrdoctor/meta.json`): complete, so a missing file is
    /// absent on the node; live-only facts from its metadata and `gdrdoctor/live.json`.
    Snapshot,
    /// Another tool's capture (hwloc's, a hand-made tree): partial, so a missing file is "not
    /// in this capture", never a finding.
    Foreign,
    /// `--host-root DIR`: the host's `/` mounted at DIR in a container. Complete (a missing file
    /// is absent on the host), never read for `gdrdoctor/meta.json`; symlinks resolve inside
    /// DIR (an absolute target restarts at DIR, never at the container's `/`).
    HostRoot,
}

impl Origin {
    /// The one decision: live root, or a sysroot with or without gdrdoctor's metadata.
    pub fn classify(root: &Root, meta: Option<&Meta>) -> Origin {
        if root.is_live() {
            Origin::Live
        } else if meta.is_some() {
            Origin::Snapshot
        } else {
            Origin::Foreign
        }
    }

    /// What the report calls it (`host.source`).
    pub fn kind(self) -> gdrdoctor_checks::model::SourceKind {
        match self {
            Origin::Live => gdrdoctor_checks::model::SourceKind::Live,
            Origin::Snapshot | Origin::Foreign => gdrdoctor_checks::model::SourceKind::Sysroot,
            Origin::HostRoot => gdrdoctor_checks::model::SourceKind::HostRoot,
        }
    }
}

/// What the command line points at.
#[derive(Debug, Clone, Copy)]
pub enum Location<'a> {
    /// The node gdrdoctor runs on.
    Live,
    /// `--sysroot`: a directory, or a `.tar.gz` snapshot.
    Sysroot(&'a Path),
    /// `--host-root`: the host's `/` mounted at this directory.
    HostRoot(&'a Path),
}

impl<'a> Location<'a> {
    /// `--sysroot` when given, else the live node.
    pub fn from_arg(sysroot: Option<&'a Path>) -> Location<'a> {
        sysroot.map_or(Location::Live, Location::Sysroot)
    }

    /// `--sysroot` or `--host-root` (clap makes them exclusive; `--sysroot` wins if both come).
    pub fn from_args(sysroot: Option<&'a Path>, host_root: Option<&'a Path>) -> Location<'a> {
        match (sysroot, host_root) {
            (Some(s), _) => Location::Sysroot(s),
            (None, Some(h)) => Location::HostRoot(h),
            (None, None) => Location::Live,
        }
    }
}

/// What a host root must hold to be read as the live host: its procfs and sysfs (a hostPath
/// mount of `/` brings them along; a mount of `/etc` alone does not).
pub const HOST_ROOT_NEEDS: &[&str] = &["proc", "sys"];

/// An opened root with its origin and metadata. A `.tar.gz` is read into memory
/// ([`archive::read_tree`]), never unpacked.
pub struct Source {
    pub root: Root,
    pub origin: Origin,
    pub meta: Option<Meta>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("root", &self.root.base())
            .field("origin", &self.origin)
            .finish()
    }
}

impl Source {
    /// The live node.
    pub fn live() -> Source {
        Source {
            root: Root::live(),
            origin: Origin::Live,
            meta: None,
        }
    }

    /// Open what the command line points at.
    pub fn open(at: Location) -> Result<Source, String> {
        let p = match at {
            Location::Live => return Ok(Source::live()),
            Location::HostRoot(dir) => return Source::host_root(dir),
            Location::Sysroot(p) => p,
        };
        if p.is_file() {
            // Read in memory: nothing unpacked, nothing to remove.
            let tree = archive::read_tree(p).map_err(|e| format!("--sysroot {e}"))?;
            return Source::from_root(Root::archive(p, tree));
        }
        let root = Root::sysroot(p).map_err(|e| format!("--sysroot: {e}"))?;
        Source::from_root(root)
    }

    /// `--host-root DIR`: the live host through a mount. Complete, no metadata; DIR must be a
    /// directory holding the host's `proc` and `sys` (not empty: an unmounted procfs or sysfs
    /// would make every device look absent).
    pub fn host_root(dir: &Path) -> Result<Source, String> {
        let shown = dir.display();
        let mut root = Root::sysroot(dir).map_err(|e| format!("--host-root: {e}"))?;
        for sub in HOST_ROOT_NEEDS {
            let p = dir.join(sub);
            let populated = match std::fs::symlink_metadata(&p) {
                Ok(md) if md.is_dir() => std::fs::read_dir(&p)
                    .map_err(|e| format!("--host-root {shown}: {}: {e}", p.display()))?
                    .next()
                    .is_some(),
                Ok(_) => false,
                Err(e) => {
                    return Err(format!(
                        "--host-root {shown}: {}: {e}: mount the host's / there (hostPath / at {shown}, with its /proc and /sys)",
                        p.display()
                    ))
                }
            };
            if !populated {
                return Err(format!(
                    "--host-root {shown}: {} is not a populated directory: mount the host's / there (hostPath / at {shown}, with its /proc and /sys)",
                    p.display()
                ));
            }
        }
        root.set_complete(true);
        Ok(Source {
            root,
            origin: Origin::HostRoot,
            meta: None,
        })
    }

    /// Decide the origin of a root: read its metadata (sysroots only) and mark a gdrdoctor
    /// snapshot complete.
    pub fn from_root(mut root: Root) -> Result<Source, String> {
        let meta = if root.is_live() {
            None
        } else {
            meta::read(&root)?
        };
        root.set_complete(meta.is_some());
        Ok(Source {
            origin: Origin::classify(&root, meta.as_ref()),
            root,
            meta,
        })
    }

    /// The same source, reading through a recording root (for `snapshot`).
    pub fn recording(mut self) -> Source {
        let root = std::mem::replace(&mut self.root, Root::live());
        self.root = root.recording();
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn snapshots_foreign_captures_and_the_live_node_are_told_apart_once() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let snap = Source::open(Location::Sysroot(
            &repo.join("fixtures/nodes/hgx-h200x8-cx7x8-healthy.tar.gz"),
        ))
        .unwrap();
        assert_eq!(snap.origin, Origin::Snapshot);
        assert!(snap.root.is_complete() && snap.meta.is_some());
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("sys/class")).unwrap();
        let foreign = Source::open(Location::Sysroot(t.path())).unwrap();
        assert_eq!(foreign.origin, Origin::Foreign);
        assert!(!foreign.root.is_complete() && foreign.meta.is_none());
        let live = Source::open(Location::Live).unwrap();
        assert_eq!(live.origin, Origin::Live);
        assert!(live.root.is_complete());
        assert!(Source::open(Location::Sysroot(&t.path().join("missing"))).is_err());
    }

    #[test]
    fn a_host_root_is_complete_without_metadata_and_needs_proc_and_sys() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        // Even a tree with gdrdoctor/meta.json is the live host here: its metadata is not read.
        let tree =
            archive::unpack(&repo.join("fixtures/nodes/hgx-h200x8-cx7x8-healthy.tar.gz")).unwrap();
        let h = Source::open(Location::HostRoot(tree.path())).unwrap();
        assert_eq!(h.origin, Origin::HostRoot);
        assert!(h.root.is_complete() && !h.root.is_live() && h.meta.is_none());
        assert_eq!(
            h.origin.kind(),
            gdrdoctor_checks::model::SourceKind::HostRoot
        );
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/1")).unwrap();
        let e = Source::open(Location::HostRoot(t.path())).unwrap_err();
        assert!(e.contains("sys") && e.contains("mount the host's /"), "{e}");
        std::fs::create_dir_all(t.path().join("sys/devices")).unwrap();
        assert!(Source::open(Location::HostRoot(t.path())).is_ok());
        assert!(matches!(
            Location::from_args(None, Some(t.path())),
            Location::HostRoot(_)
        ));
    }
}
