//! Where the facts come from, decided once: [`Origin`] says what kind of root it is, and
//! [`Source`] opens it (unpacking a `.tar.gz`, reading `gdrdoctor/meta.json`, marking a
//! gdrdoctor snapshot complete). `check`, `topo`, `probe` and `snapshot` all start here; the
//! collectors ask the origin, never the root, whether a fact comes from a system call or from
//! the snapshot's metadata.
//!
//! Adding a kind of source (the next one is `--host-root DIR` for a container that mounts the
//! host's `/` at DIR, e.g. a Kubernetes DaemonSet): a variant of [`Origin`]; its arm in
//! [`Source::open`] (a [`Location`] for it, `Root::sysroot(DIR)` marked complete, since it is
//! the live host seen through a mount); its arm in `collect::process` (the container's
//! uid, rlimits and environment are not the host's: say so, or read `/proc/1/...` of the host);
//! and its arm in `collect::live` (the host's libraries: query them in a worker as for
//! [`Origin::Live`] when the container has them).

use crate::meta::{self, Meta};
use crate::reader::Root;
use crate::snapshot;
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
}

impl<'a> Location<'a> {
    /// `--sysroot` when given, else the live node.
    pub fn from_arg(sysroot: Option<&'a Path>) -> Location<'a> {
        sysroot.map_or(Location::Live, Location::Sysroot)
    }
}

/// An opened root with its origin and metadata. A `.tar.gz` is unpacked to a private temporary
/// directory that goes when the source drops (or a termination signal ends the process).
pub struct Source {
    pub root: Root,
    pub origin: Origin,
    pub meta: Option<Meta>,
    /// The private tree a `.tar.gz` was unpacked into; removed when the source drops.
    unpacked: Option<snapshot::TempTree>,
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
            unpacked: None,
        }
    }

    /// Open what the command line points at.
    pub fn open(at: Location) -> Result<Source, String> {
        let p = match at {
            Location::Live => return Ok(Source::live()),
            Location::Sysroot(p) => p,
        };
        if p.is_file() {
            // Every early return below drops `tree`, which removes what was unpacked.
            let tree = snapshot::unpack(p).map_err(|e| format!("--sysroot {e}"))?;
            let root = Root::sysroot(tree.path())
                .map_err(|e| format!("--sysroot {}: {e}", p.display()))?;
            let mut s = Source::from_root(root)?;
            s.unpacked = Some(tree);
            return Ok(s);
        }
        let root = Root::sysroot(p).map_err(|e| format!("--sysroot: {e}"))?;
        Source::from_root(root)
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
            unpacked: None,
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
            &repo.join("fixtures/sysroots/hgx-h200x8-cx7x8-healthy"),
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
}
