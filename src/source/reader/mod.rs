//! The one root-relative reader every collector goes through.
//!
//! Callers name real kernel paths (`/sys/bus/pci/devices`); the reader re-roots them under `/`
//! (live) or a sysroot directory. Symlinks are resolved by the reader itself, component by
//! component, *inside* the root, with chroot semantics: an absolute target restarts at the root
//! and `..` stops at the root, so nothing outside the sysroot is ever read. More than
//! [`MAX_LINKS`] links in one resolution is a loop and an error, never a hang. Every error names
//! the kernel path.
//!
//! The reader can record what it touched (files with the bytes read, listed directories,
//! followed links) so that `gdrdoctor snapshot` copies exactly what the collectors read.//!
//! [`error`]: what a failed read says; [`resolve`]: symlinks resolved inside the root;
//! [`read`]: files opened relative to their resolved directory; [`partial`]: only the bytes of
//! a config space the decoder looks at; [`at`]: the `*at` system calls under all of them.

mod at;
mod error;
pub mod memory;
mod partial;
mod read;
mod resolve;
#[cfg(test)]
mod tests;

pub use error::{ErrorKind, ReadError};
pub use partial::Partial;

use at::read_link_at;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A file snapshots put in empty directories so that git (which drops empty directories) keeps
/// them; the reader never lists it. sysfs and procfs have no names starting with a dot.
pub const KEEP_MARKER: &str = ".gdrdoctor-keep";

/// Link resolutions allowed in one path before we call it a loop (Linux uses 40).
pub const MAX_LINKS: usize = 40;
/// The most bytes read from one file (sysfs and procfs files are small; config space is 4 KiB).
pub const MAX_FILE: u64 = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Link,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
}

/// What the recorder saw at one kernel path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    File(Vec<u8>),
    /// A file that was listed but not read (written empty in a snapshot).
    Listed,
    Dir,
    Link(String),
}

pub struct Root {
    base: PathBuf,
    live: bool,
    /// Whether a missing file means "absent on the node" (live, or a gdrdoctor snapshot whose
    /// recorder kept every directory it looked in) rather than "not in this capture".
    complete: bool,
    recorder: Option<Mutex<BTreeMap<String, Recorded>>>,
    /// Resolved directories (kernel path -> components): a device directory is resolved once,
    /// not once per attribute read below it.
    dir_cache: Mutex<std::collections::HashMap<String, std::sync::Arc<ResolvedDir>, PathHash>>,
    /// Kernel paths already seen to be directories (not links): resolved without an lstat.
    known_dirs: Mutex<std::collections::HashSet<String, PathHash>>,
    /// `GDRDOCTOR_TRACE=reads`: every file read is a phase in the trace (`crate::sys::trace`).
    trace: bool,
    /// Config space read partially ([`Root::read_config`]): the live node.
    partial: bool,
    /// [`Root::config_stats`].
    config_stats: [std::sync::atomic::AtomicU64; 4],
    /// Directory descriptors opened so far ([`MAX_DIR_FDS`]).
    dir_fds: std::sync::atomic::AtomicUsize,
    /// A snapshot archive's tree, in memory ([`Root::archive`]): every read is answered from
    /// it, none from the file system (`base` is then the archive's path, for messages).
    mem: Option<std::sync::Arc<memory::Tree>>,
}

/// The hasher of the reader's path tables: FNV-1a, a byte at a time. The keys are kernel paths
/// the reader built itself (no hash flooding to fear), and SipHash over them was 3% of a big
/// node's instructions.
#[derive(Default, Clone, Copy)]
struct PathHasher(u64);

impl std::hash::Hasher for PathHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }
}

type PathHash = std::hash::BuildHasherDefault<PathHasher>;

/// A directory resolved inside the root: its kernel path's components and, opened on first
/// use, an `O_PATH` descriptor that the files below it are opened relative to (one path
/// component for the kernel to walk per file instead of the whole host path).
struct ResolvedDir {
    comps: Vec<String>,
    fd: std::sync::OnceLock<Option<std::os::fd::OwnedFd>>,
}

/// Directory descriptors kept open per [`Root`] at most (a node with thousands of functions
/// must not run out of descriptors: past this, files are opened by their whole path).
const MAX_DIR_FDS: usize = 256;

fn trace_enabled() -> bool {
    crate::sys::trace::reads()
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Root({})", self.base.display())
    }
}

impl Root {
    /// The running system: `/`, or under the test-only `GDRDOCTOR_LIVE_ROOT`
    /// ([`crate::live::stand_in::live_root`]) a directory read as the live node's files. That
    /// root is complete (a missing file is absent on the node) but not live: the kernel log,
    /// the counter baseline and the counter state file come from the directory, never from
    /// this machine.
    pub fn live() -> Root {
        match crate::live::stand_in::live_root() {
            // Read as the live node is: only the config-space bytes the decoder uses.
            Some(dir) => Root::with(dir, false, true, true, None),
            None => Root::with(PathBuf::from("/"), true, true, true, None),
        }
    }

    /// A captured tree; errors if `dir` is not a readable directory.
    pub fn sysroot(dir: &Path) -> Result<Root, ReadError> {
        let shown = dir.display().to_string();
        let md = std::fs::metadata(dir).map_err(|e| ReadError::io(&shown, &e))?;
        if !md.is_dir() {
            return Err(ReadError::new(&shown, ErrorKind::NotADirectory));
        }
        std::fs::read_dir(dir).map_err(|e| ReadError::io(&shown, &e))?;
        Ok(Root::with(dir.to_path_buf(), false, false, false, None))
    }

    /// A snapshot archive read in memory (`--sysroot x.tar.gz`); `archive` names it in the
    /// report and in messages.
    pub fn archive(archive: &Path, tree: memory::Tree) -> Root {
        let mem = Some(std::sync::Arc::new(tree));
        Root::with(archive.to_path_buf(), false, false, false, mem)
    }

    /// A root with empty caches, not recording.
    fn with(
        base: PathBuf,
        live: bool,
        complete: bool,
        partial: bool,
        mem: Option<std::sync::Arc<memory::Tree>>,
    ) -> Root {
        Root {
            base,
            live,
            complete,
            recorder: None,
            dir_cache: Mutex::default(),
            known_dirs: Mutex::default(),
            config_stats: Default::default(),
            dir_fds: Default::default(),
            trace: trace_enabled(),
            partial,
            mem,
        }
    }

    /// Record every path touched from now on (for `snapshot`).
    pub fn recording(mut self) -> Root {
        self.recorder = Some(Mutex::new(BTreeMap::new()));
        self
    }

    /// Declare a sysroot complete (it is a gdrdoctor snapshot: it has `gdrdoctor/meta.json`).
    pub fn set_complete(&mut self, complete: bool) {
        self.complete = complete || self.live;
    }

    pub fn is_complete(&self) -> bool {
        self.complete
    }

    pub fn is_live(&self) -> bool {
        self.live
    }

    pub fn base(&self) -> &Path {
        &self.base
    }

    /// What was recorded so far (empty when not recording).
    pub fn recorded(&self) -> BTreeMap<String, Recorded> {
        match &self.recorder {
            Some(m) => match m.lock() {
                Ok(g) => g.clone(),
                Err(p) => p.into_inner().clone(),
            },
            None => BTreeMap::new(),
        }
    }

    fn record(&self, path: &str, what: Recorded) {
        let Some(m) = &self.recorder else { return };
        let mut g = match m.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        match (g.get(path), &what) {
            // Content beats a bare listing; a directory stays a directory.
            (Some(Recorded::File(_)), Recorded::Listed)
            | (Some(Recorded::Dir), Recorded::Listed) => {}
            _ => {
                g.insert(path.to_string(), what);
            }
        }
    }

    /// The fully resolved kernel path (`/sys/bus/pci/devices/X` -> `/sys/devices/pci0000:00/X`).
    pub fn canonical(&self, path: &str) -> Result<String, ReadError> {
        let comps = self.resolve_comps(path, true)?;
        let key = join(&comps);
        // Resolved to a directory seen as one on the way: it exists, no second lstat.
        if self.is_known_dir(&key) {
            return Ok(key);
        }
        let seen = match &self.mem {
            Some(m) => m.lstat(&key).map(|_| ()),
            None => std::fs::symlink_metadata(self.host_path(&comps)).map(|_| ()),
        };
        match seen {
            Ok(()) => Ok(key),
            Err(e) => Err(ReadError::io(path, &e)),
        }
    }

    /// Read a text file (invalid UTF-8 replaced), trailing whitespace trimmed.
    pub fn read_trimmed(&self, path: &str) -> Result<String, ReadError> {
        let b = self.read(path)?;
        Ok(String::from_utf8_lossy(&b).trim_end().to_string())
    }

    /// Read a text file as is (invalid UTF-8 replaced).
    pub fn read_text(&self, path: &str) -> Result<String, ReadError> {
        let b = self.read(path)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// List a directory, sorted by name.
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, ReadError> {
        let comps = self.resolve_comps(path, true)?;
        let dir_path = join(&comps);
        let listed: Vec<DirEntry> = match &self.mem {
            Some(m) => m
                .list(&dir_path)
                .map_err(|e| ReadError::io(path, &e))?
                .to_vec(),
            None => {
                let host = self.host_path(&comps);
                let rd = std::fs::read_dir(&host).map_err(|e| ReadError::io(path, &e))?;
                let mut v = Vec::new();
                for e in rd {
                    let e = e.map_err(|e| ReadError::io(path, &e))?;
                    let kind = match e.file_type() {
                        Ok(t) if t.is_symlink() => EntryKind::Link,
                        Ok(t) if t.is_dir() => EntryKind::Dir,
                        Ok(t) if t.is_file() => EntryKind::File,
                        _ => EntryKind::Other,
                    };
                    v.push(DirEntry {
                        name: e.file_name().to_string_lossy().into_owned(),
                        kind,
                    });
                }
                v
            }
        };
        self.record(&dir_path, Recorded::Dir);
        let mut out = Vec::with_capacity(listed.len());
        for e in listed {
            if e.name == KEEP_MARKER {
                continue;
            }
            let child = if dir_path == "/" {
                format!("/{}", e.name)
            } else {
                format!("{dir_path}/{}", e.name)
            };
            match e.kind {
                // The target is read only for a snapshot (one readlink per entry otherwise: 48
                // for the PCI bus of an eight-GPU node, each resolved again when it is used).
                EntryKind::Link if self.recorder.is_some() => {
                    let t = match &self.mem {
                        Some(m) => m.read_link(&child).ok(),
                        None => std::fs::read_link(self.host_path(&split(&child)))
                            .ok()
                            .map(|t| t.to_string_lossy().into_owned()),
                    };
                    if let Some(t) = t {
                        self.record(&child, Recorded::Link(t));
                    }
                }
                EntryKind::Dir => self.record(&child, Recorded::Dir),
                EntryKind::File => self.record(&child, Recorded::Listed),
                EntryKind::Link | EntryKind::Other => {}
            }
            out.push(e);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The raw target of a symlink (not resolved).
    pub fn read_link(&self, path: &str) -> Result<String, ReadError> {
        // A link in a resolved directory (`<device>/driver`, `<device>/iommu_group`): read
        // relative to its descriptor.
        if let Some((dir, name)) = self.cached_parent(path).filter(|_| self.mem.is_none()) {
            if let Some(fd) = self.dir_fd(&dir) {
                let t = read_link_at(fd, name).map_err(|e| ReadError::io(path, &e))?;
                let mut comps = dir.comps.clone();
                comps.push(name.to_string());
                self.record(&join(&comps), Recorded::Link(t.clone()));
                return Ok(t);
            }
        }
        let comps = self.resolve_comps(path, false)?;
        let t = match &self.mem {
            Some(m) => m.read_link(&join(&comps)),
            None => {
                std::fs::read_link(self.host_path(&comps)).map(|t| t.to_string_lossy().into_owned())
            }
        }
        .map_err(|e| ReadError::io(path, &e))?;
        self.record(&join(&comps), Recorded::Link(t.clone()));
        Ok(t)
    }

    /// Whether `path` exists: `Ok(false)` only for a definite "not found".
    pub fn exists(&self, path: &str) -> Result<bool, ReadError> {
        match self.canonical(path) {
            Ok(c) => {
                let is_dir = match &self.mem {
                    Some(m) => m.lstat(&c).ok().map(|k| k == at::Entry::Dir),
                    None => std::fs::metadata(self.host_path(&split(&c)))
                        .ok()
                        .map(|md| md.is_dir()),
                };
                if let Some(is_dir) = is_dir {
                    if is_dir {
                        self.record(&c, Recorded::Dir);
                    } else {
                        // Keep the file in a snapshot; its content is what exists() saw.
                        let _ = self.read(&c);
                    }
                }
                Ok(true)
            }
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn split(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// `dir/name`: the path of a file in a directory (what `format!("{dir}/{name}")` makes, without
/// the formatting machinery: thousands of them per node).
pub fn child(dir: &str, name: &str) -> String {
    let mut s = String::with_capacity(dir.len() + 1 + name.len());
    s.push_str(dir);
    s.push('/');
    s.push_str(name);
    s
}

fn join(comps: &[String]) -> String {
    if comps.is_empty() {
        return "/".to_string();
    }
    let mut s = String::with_capacity(comps.iter().map(|c| c.len() + 1).sum());
    for c in comps {
        s.push('/');
        s.push_str(c);
    }
    s
}
