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
//! followed links) so that `gdrdoctor snapshot` copies exactly what the collectors read.

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    PermissionDenied,
    Loop,
    NotADirectory,
    TooLarge,
    Io(String),
}

/// A read that failed, with the kernel path it was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub path: String,
    pub kind: ErrorKind,
}

impl ReadError {
    fn new(path: &str, kind: ErrorKind) -> Self {
        ReadError {
            path: path.to_string(),
            kind,
        }
    }
    fn io(path: &str, e: &std::io::Error) -> Self {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            _ if e.raw_os_error() == Some(libc::ELOOP) => ErrorKind::Loop,
            _ if e.raw_os_error() == Some(libc::ENOTDIR) => ErrorKind::NotADirectory,
            _ => ErrorKind::Io(e.to_string()),
        };
        ReadError::new(path, kind)
    }
    /// A definite "does not exist". `ENOTDIR` (a path component that is a file) is not: in
    /// sysfs and procfs it cannot happen, so it means a damaged capture, and an absent fact
    /// says so instead of turning into "absent on the node".
    pub fn is_not_found(&self) -> bool {
        matches!(self.kind, ErrorKind::NotFound)
    }
    /// The reason alone, for a [`Fact::Absent`](gdrdoctor_checks::model::Fact).
    pub fn reason(&self) -> String {
        match &self.kind {
            ErrorKind::NotFound => "not found".into(),
            ErrorKind::PermissionDenied => "permission denied (run as root)".into(),
            ErrorKind::Loop => format!("symlink loop (more than {MAX_LINKS} links)"),
            ErrorKind::NotADirectory => "not a directory".into(),
            ErrorKind::TooLarge => format!("larger than {MAX_FILE} bytes"),
            ErrorKind::Io(e) => e.clone(),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason())
    }
}

impl std::error::Error for ReadError {}

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
        if let Some(dir) = crate::live::stand_in::live_root() {
            return Root {
                base: dir,
                live: false,
                complete: true,
                recorder: None,
                dir_cache: Mutex::default(),
                known_dirs: Mutex::default(),
                config_stats: Default::default(),
                dir_fds: Default::default(),
                trace: trace_enabled(),
                // Read as the live node is: only the config-space bytes the decoder uses.
                partial: true,
            };
        }
        Root {
            base: PathBuf::from("/"),
            live: true,
            complete: true,
            recorder: None,
            dir_cache: Mutex::default(),
            known_dirs: Mutex::default(),
            config_stats: Default::default(),
            dir_fds: Default::default(),
            trace: trace_enabled(),
            partial: true,
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
        Ok(Root {
            base: dir.to_path_buf(),
            live: false,
            complete: false,
            recorder: None,
            dir_cache: Mutex::default(),
            known_dirs: Mutex::default(),
            config_stats: Default::default(),
            dir_fds: Default::default(),
            trace: trace_enabled(),
            partial: false,
        })
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

    fn host_path(&self, comps: &[String]) -> PathBuf {
        let mut p = self.base.clone();
        for c in comps {
            p.push(c);
        }
        p
    }

    /// Resolve `path` inside the root; returns the components of the resolved kernel path.
    /// With `follow_last` false the final component is not dereferenced (for `read_link`).
    fn resolve_comps(&self, path: &str, follow_last: bool) -> Result<Vec<String>, ReadError> {
        // Fast path: `<dir>/<name>` with `<dir>` already resolved.
        if let Some((dir, name)) = path.rsplit_once('/') {
            if !dir.is_empty() && !matches!(name, "" | "." | "..") {
                let cached = match self.dir_cache.lock() {
                    Ok(c) => c.get(dir).cloned(),
                    Err(p) => p.into_inner().get(dir).cloned(),
                };
                let (parent, base) = match cached {
                    Some(d) => (d.comps.clone(), Some(d)),
                    None => {
                        let c = self.resolve_comps(dir, true).map_err(|e| ReadError {
                            path: path.to_string(),
                            kind: e.kind,
                        })?;
                        let d = std::sync::Arc::new(ResolvedDir {
                            comps: c.clone(),
                            fd: std::sync::OnceLock::new(),
                        });
                        match self.dir_cache.lock() {
                            Ok(mut m) => m.insert(dir.to_string(), d.clone()),
                            Err(p) => p.into_inner().insert(dir.to_string(), d.clone()),
                        };
                        (c, Some(d))
                    }
                };
                return self.resolve_from(
                    parent,
                    std::iter::once(name.to_string()).collect(),
                    path,
                    follow_last,
                    base.as_deref(),
                );
            }
        }
        let pending: std::collections::VecDeque<String> =
            path.split('/').map(str::to_string).collect();
        self.resolve_from(Vec::new(), pending, path, follow_last, None)
    }

    /// Resolve `pending` on top of `stack`. `base`: the resolved directory `stack` is, while
    /// the walk has not left it its direct entries are looked at relative to its descriptor
    /// (one component for the kernel to walk, not the whole host path).
    fn resolve_from(
        &self,
        mut stack: Vec<String>,
        mut pending: std::collections::VecDeque<String>,
        path: &str,
        follow_last: bool,
        base: Option<&ResolvedDir>,
    ) -> Result<Vec<String>, ReadError> {
        let mut base = base.map(|d| (d, stack.len()));
        let mut links = 0usize;
        // The kernel path of `stack`, kept beside it (no join per component).
        let mut key = join(&stack);
        while let Some(c) = pending.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    base = None;
                    if let Some(last) = stack.pop() {
                        key.truncate(key.len() - last.len() - 1);
                        if key.is_empty() {
                            key.push('/');
                        }
                    }
                    continue;
                }
                _ => {}
            }
            if key != "/" {
                key.push('/');
            }
            key.push_str(&c);
            stack.push(c);
            let is_last = pending.iter().all(|p| p.is_empty() || p == ".");
            if is_last && !follow_last {
                break;
            }
            // A component seen as a real directory before (`/sys`, `/sys/devices/pci0000:00`,
            // every bridge above a device): no second lstat.
            if self.is_known_dir(&key) {
                continue;
            }
            // The entry relative to the base directory's descriptor when it is one of its
            // direct entries, else by its whole host path.
            let rel = match base {
                Some((d, n)) if stack.len() == n + 1 => self.dir_fd(d).zip(stack.last()),
                _ => None,
            };
            let kind = match rel {
                Some((fd, name)) => lstat_at(fd, name),
                None => std::fs::symlink_metadata(self.host_path(&stack)).map(|md| Entry::of(&md)),
            };
            let kind = match kind {
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if is_last {
                        return Ok(stack);
                    }
                    return Err(ReadError::new(path, ErrorKind::NotFound));
                }
                Err(e) => return Err(ReadError::io(path, &e)),
            };
            if kind == Entry::Link {
                links += 1;
                if links > MAX_LINKS {
                    return Err(ReadError::new(path, ErrorKind::Loop));
                }
                let target = match rel {
                    Some((fd, name)) => read_link_at(fd, name),
                    None => std::fs::read_link(self.host_path(&stack))
                        .map(|t| t.to_string_lossy().into_owned()),
                }
                .map_err(|e| ReadError::io(path, &e))?;
                self.record(&key, Recorded::Link(target.clone()));
                base = None;
                stack.pop();
                if target.starts_with('/') {
                    stack.clear();
                }
                key = join(&stack);
                for (i, t) in target.split('/').enumerate() {
                    pending.insert(i, t.to_string());
                }
            } else if kind == Entry::Dir {
                self.known_dir(key.clone());
            } else if !is_last {
                return Err(ReadError::new(path, ErrorKind::NotADirectory));
            }
        }
        Ok(stack)
    }

    fn is_known_dir(&self, key: &str) -> bool {
        match self.known_dirs.lock() {
            Ok(k) => k.contains(key),
            Err(p) => p.into_inner().contains(key),
        }
    }

    fn known_dir(&self, key: String) {
        match self.known_dirs.lock() {
            Ok(mut k) => k.insert(key),
            Err(p) => p.into_inner().insert(key),
        };
    }

    /// The fully resolved kernel path (`/sys/bus/pci/devices/X` -> `/sys/devices/pci0000:00/X`).
    pub fn canonical(&self, path: &str) -> Result<String, ReadError> {
        let comps = self.resolve_comps(path, true)?;
        let key = join(&comps);
        // Resolved to a directory seen as one on the way: it exists, no second lstat.
        if self.is_known_dir(&key) {
            return Ok(key);
        }
        let host = self.host_path(&comps);
        match std::fs::symlink_metadata(&host) {
            Ok(_) => Ok(key),
            Err(e) => Err(ReadError::io(path, &e)),
        }
    }

    /// Read a whole file (at most [`MAX_FILE`] bytes).
    pub fn read(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        if self.trace {
            let t0 = crate::sys::trace::now_ns();
            let r = self.read_inner(path);
            crate::sys::trace::record_read("read", t0, path, || match &r {
                Ok(b) => format!("{} bytes", b.len()),
                Err(e) => e.reason(),
            });
            return r;
        }
        self.read_inner(path)
    }

    /// `path`'s directory when it is in the cache, and the name.
    fn cached_parent<'p>(&self, path: &'p str) -> Option<(std::sync::Arc<ResolvedDir>, &'p str)> {
        let (dir, name) = path.rsplit_once('/')?;
        if dir.is_empty() || matches!(name, "" | "." | "..") {
            return None;
        }
        let c = match self.dir_cache.lock() {
            Ok(c) => c.get(dir).cloned(),
            Err(p) => p.into_inner().get(dir).cloned(),
        };
        c.map(|c| (c, name))
    }

    /// Open `name` in a resolved directory, relative to its descriptor when one is (or can
    /// be) open; `O_NOFOLLOW`, so a link fails with ELOOP.
    fn open_in(&self, dir: &ResolvedDir, name: &str) -> std::io::Result<std::fs::File> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let Some(fd) = self.dir_fd(dir) else {
            let mut p = self.host_path(&dir.comps);
            p.push(name);
            return open_nofollow(&p);
        };
        let c = c_name(name)?;
        // SAFETY: `fd` is an open descriptor owned by `dir` for the duration of the call, `c`
        // a NUL-terminated name; a non-negative result is a new descriptor that the File owns.
        let r = unsafe {
            libc::openat(
                fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `r` is a descriptor just returned by openat and owned by nobody else.
        Ok(unsafe { std::fs::File::from_raw_fd(r) })
    }

    /// The directory's `O_PATH` descriptor, opened on first use (none past [`MAX_DIR_FDS`] or
    /// when it cannot be opened).
    fn dir_fd<'d>(&self, dir: &'d ResolvedDir) -> Option<&'d std::os::fd::OwnedFd> {
        dir.fd
            .get_or_init(|| {
                use std::sync::atomic::Ordering::Relaxed;
                if self.dir_fds.fetch_add(1, Relaxed) >= MAX_DIR_FDS {
                    return None;
                }
                open_dir_fd(&self.host_path(&dir.comps))
            })
            .as_ref()
    }

    fn read_inner(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        // Fast path (most reads: the attributes of a device directory already resolved): open
        // the name relative to the directory's descriptor. O_NOFOLLOW fails with ELOOP on a
        // link, which takes the slow path below; anything else is the answer. Three system
        // calls a file: openat, read, close.
        if let Some((dir, name)) = self.cached_parent(path) {
            match self.open_in(&dir, name) {
                Ok(f) => {
                    return self.read_open(
                        path,
                        || {
                            let mut c = dir.comps.clone();
                            c.push(name.to_string());
                            c
                        },
                        f,
                    )
                }
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
                Err(e) => return Err(ReadError::io(path, &e)),
            }
        }
        let comps = self.resolve_comps(path, true)?;
        let host = self.host_path(&comps);
        let file = open_nofollow(&host).map_err(|e| ReadError::io(path, &e))?;
        self.read_open(path, || comps, file)
    }

    fn read_open(
        &self,
        path: &str,
        comps: impl FnOnce() -> Vec<String>,
        file: std::fs::File,
    ) -> Result<Vec<u8>, ReadError> {
        // A read shorter than a page is the end of a sysfs attribute (kernfs hands out the
        // rest of the file, or a page, per read) and of a regular file: no second read to see
        // the end. procfs (seq_file) and devices can return less before the end: read to EOF.
        let one_shot = !(path.starts_with("/proc/") || path.starts_with("/dev/"));
        // Read into an uninitialised stack buffer and keep what was read: a zeroed 8 KiB
        // buffer per file was 14% of the 8x8 sysroot's instructions (777 files), and a vector
        // of a page per file holds 4 KiB for every 10-byte attribute.
        let mut buf: Vec<u8> = Vec::new();
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        loop {
            // SAFETY: `chunk` is writable memory of `chunk.len()` bytes; read(2) writes at most
            // that many and returns how many it wrote.
            let r = unsafe {
                libc::read(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    chunk.as_mut_ptr().cast(),
                    chunk.len(),
                )
            };
            let n = if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // A directory opens fine; reading it fails.
                    Some(libc::EISDIR) => {
                        return Err(ReadError::new(path, ErrorKind::Io("is a directory".into())))
                    }
                    _ => return Err(ReadError::io(path, &e)),
                }
            } else {
                (r as usize).min(chunk.len())
            };
            // SAFETY: read(2) initialised the first `n` bytes of `chunk`.
            let got = unsafe { std::slice::from_raw_parts(chunk.as_ptr().cast::<u8>(), n) };
            buf.extend_from_slice(got);
            if buf.len() as u64 > MAX_FILE {
                return Err(ReadError::new(path, ErrorKind::TooLarge));
            }
            if n == 0 || (one_shot && n < 4096) {
                break;
            }
        }
        if self.recorder.is_some() {
            self.record(&join(&comps()), Recorded::File(buf.clone()));
        }
        Ok(buf)
    }

    /// A device's PCI config space (`.../config`) as the checks need it. On the live node
    /// (not recording) only the bytes the decoder reads are fetched
    /// ([`Root::read_partial`] driven by `gdrdoctor_checks::pci::config::touched`): in a VM
    /// every config dword read traps to the hypervisor. Elsewhere (a sysroot's plain files, a
    /// snapshot being recorded, which keeps the whole space) the whole file.
    pub fn read_config(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        use std::sync::atomic::Ordering::Relaxed;
        let t0 = crate::sys::trace::now_ns();
        let r = if self.partial && self.recorder.is_none() {
            self.read_partial(path, &gdrdoctor_checks::pci::config::touched)
                .map(|p| {
                    self.config_stats[1].fetch_add(p.fetched as u64, Relaxed);
                    self.config_stats[2].fetch_add(p.reads as u64, Relaxed);
                    p.bytes
                })
        } else {
            self.read(path).inspect(|b| {
                self.config_stats[1].fetch_add(b.len() as u64, Relaxed);
                self.config_stats[2].fetch_add(1, Relaxed);
            })
        };
        self.config_stats[0].fetch_add(1, Relaxed);
        self.config_stats[3].fetch_add(crate::sys::trace::now_ns().saturating_sub(t0), Relaxed);
        r
    }

    /// Config-space reads so far: (files, bytes fetched, reads, nanoseconds summed over
    /// threads), for the trace.
    pub fn config_stats(&self) -> (u64, u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let [a, b, c, d] = &self.config_stats;
        (
            a.load(Relaxed),
            b.load(Relaxed),
            c.load(Relaxed),
            d.load(Relaxed),
        )
    }

    /// Read config space partially even on a sysroot (tests of the partial reader).
    pub fn with_partial_reads(mut self, on: bool) -> Root {
        self.partial = on;
        self
    }

    /// Read only the parts of a file that `need` asks for. The buffer has the file's readable
    /// length (what a whole read would return: a non-root reader of sysfs `config` gets 64
    /// bytes of a 4096-byte file) and holds zeros where nothing was fetched. `need` sees the
    /// buffer so far and names the byte ranges it reads; they are fetched (whole dwords, with
    /// `pread`) and `need` asked again, until it asks for nothing new. The caller's decoder
    /// then sees exactly the bytes it would see in the whole file wherever it looks.
    pub fn read_partial(
        &self,
        path: &str,
        need: &dyn Fn(&[u8]) -> Vec<std::ops::Range<usize>>,
    ) -> Result<Partial, ReadError> {
        let t0 = crate::sys::trace::now_ns();
        let comps = self.resolve_comps(path, true)?;
        let host = self.host_path(&comps);
        let file = open_nofollow(&host).map_err(|e| ReadError::io(path, &e))?;
        let md = file.metadata().map_err(|e| ReadError::io(path, &e))?;
        if md.is_dir() {
            return Err(ReadError::new(path, ErrorKind::Io("is a directory".into())));
        }
        if md.len() > MAX_FILE {
            return Err(ReadError::new(path, ErrorKind::TooLarge));
        }
        let size = md.len() as usize;
        let mut p = Partial::default();
        // The first 64 bytes (the standard header) in one read.
        let mut head = vec![0u8; size.min(64)];
        let n = pread_full(&file, &mut head, 0, &mut p).map_err(|e| ReadError::io(path, &e))?;
        let len = if n < head.len() || n == size {
            n
        } else {
            readable_len(&file, n, size, &mut p).map_err(|e| ReadError::io(path, &e))?
        };
        let mut buf = vec![0u8; len];
        let mut have = vec![false; len];
        let k = n.min(len);
        buf[..k].copy_from_slice(&head[..k]);
        have[..k].iter_mut().for_each(|h| *h = true);
        // Each round follows one more link of a capability chain; a chain is at most
        // 48 + 480 links (config.rs), and each round fetches something new.
        for _ in 0..1024 {
            let mut todo: Vec<std::ops::Range<usize>> = Vec::new();
            for r in need(&buf) {
                let (s, e) = (r.start.min(len), r.end.min(len));
                if (s..e).all(|i| have[i]) {
                    continue;
                }
                // Whole dwords, as the hardware reads them.
                let (s, e) = (s & !3, ((e + 3) & !3).min(len));
                match todo.last_mut() {
                    Some(l) if l.end >= s => l.end = l.end.max(e),
                    _ => todo.push(s..e),
                }
            }
            if todo.is_empty() {
                break;
            }
            for r in todo {
                let got = pread_full(&file, &mut buf[r.clone()], r.start as u64, &mut p)
                    .map_err(|e| ReadError::io(path, &e))?;
                // A short read (the file shrank) leaves zeros: still marked, so that the
                // loop ends.
                let _ = got;
                have[r].iter_mut().for_each(|h| *h = true);
            }
        }
        p.len = len;
        p.bytes = buf;
        crate::sys::trace::record_read("read-partial", t0, path, || {
            format!("{} of {} bytes in {} reads", p.fetched, p.len, p.reads)
        });
        Ok(p)
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
        let host = self.host_path(&comps);
        let rd = std::fs::read_dir(&host).map_err(|e| ReadError::io(path, &e))?;
        let dir_path = join(&comps);
        self.record(&dir_path, Recorded::Dir);
        let mut out = Vec::new();
        for e in rd {
            let e = e.map_err(|e| ReadError::io(path, &e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == KEEP_MARKER {
                continue;
            }
            let kind = match e.file_type() {
                Ok(t) if t.is_symlink() => EntryKind::Link,
                Ok(t) if t.is_dir() => EntryKind::Dir,
                Ok(t) if t.is_file() => EntryKind::File,
                _ => EntryKind::Other,
            };
            let child = if dir_path == "/" {
                format!("/{name}")
            } else {
                format!("{dir_path}/{name}")
            };
            match kind {
                // The target is read only for a snapshot (one readlink per entry otherwise: 48
                // for the PCI bus of an eight-GPU node, each resolved again when it is used).
                EntryKind::Link if self.recorder.is_some() => {
                    if let Ok(t) = std::fs::read_link(e.path()) {
                        self.record(&child, Recorded::Link(t.to_string_lossy().into_owned()));
                    }
                }
                EntryKind::Dir => self.record(&child, Recorded::Dir),
                EntryKind::File => self.record(&child, Recorded::Listed),
                EntryKind::Link | EntryKind::Other => {}
            }
            out.push(DirEntry { name, kind });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The raw target of a symlink (not resolved).
    pub fn read_link(&self, path: &str) -> Result<String, ReadError> {
        // A link in a resolved directory (`<device>/driver`, `<device>/iommu_group`): read
        // relative to its descriptor.
        if let Some((dir, name)) = self.cached_parent(path) {
            if let Some(fd) = self.dir_fd(&dir) {
                let t = read_link_at(fd, name).map_err(|e| ReadError::io(path, &e))?;
                let mut comps = dir.comps.clone();
                comps.push(name.to_string());
                self.record(&join(&comps), Recorded::Link(t.clone()));
                return Ok(t);
            }
        }
        let comps = self.resolve_comps(path, false)?;
        let host = self.host_path(&comps);
        let t = std::fs::read_link(&host).map_err(|e| ReadError::io(path, &e))?;
        let t = t.to_string_lossy().into_owned();
        self.record(&join(&comps), Recorded::Link(t.clone()));
        Ok(t)
    }

    /// Whether `path` exists: `Ok(false)` only for a definite "not found".
    pub fn exists(&self, path: &str) -> Result<bool, ReadError> {
        match self.canonical(path) {
            Ok(c) => {
                if let Ok(md) = std::fs::metadata(self.host_path(&split(&c))) {
                    if md.is_dir() {
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

/// What [`Root::read_partial`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    /// The file's readable length, with zeros where nothing was fetched.
    pub bytes: Vec<u8>,
    pub len: usize,
    /// Bytes fetched, and `pread` calls made (the length probes included).
    pub fetched: usize,
    pub reads: usize,
}

/// `pread` until `buf` is full or the file ends; the bytes read.
fn pread_full(
    f: &std::fs::File,
    buf: &mut [u8],
    off: u64,
    p: &mut Partial,
) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        p.reads += 1;
        match f.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    p.fetched += done;
    Ok(done)
}

/// How many bytes of a file a whole read would return, knowing the first `known` are there
/// and the file claims `size`: sysfs `config` holds 4096 bytes but gives a non-root reader
/// 64 (128 for CardBus). One-byte probes; past the limit the kernel answers without touching
/// the device.
fn readable_len(
    f: &std::fs::File,
    known: usize,
    size: usize,
    p: &mut Partial,
) -> std::io::Result<usize> {
    let mut one = [0u8; 1];
    let mut probe = |off: usize, p: &mut Partial| -> std::io::Result<bool> {
        Ok(pread_full(f, &mut one, off as u64, p)? == 1)
    };
    if probe(size - 1, p)? {
        return Ok(size);
    }
    // Readable below `lo`, not at `hi`.
    let (mut lo, mut hi) = (known, size - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if probe(mid, p)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
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

/// An `O_PATH` descriptor of a directory (not a link), `None` when it cannot be opened (the
/// files below it are then opened by their whole path, which reports the error).
/// What an entry is, as the resolver needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Link,
    Dir,
    Other,
}

impl Entry {
    fn of(md: &std::fs::Metadata) -> Entry {
        if md.file_type().is_symlink() {
            Entry::Link
        } else if md.is_dir() {
            Entry::Dir
        } else {
            Entry::Other
        }
    }
}

fn c_name(name: &str) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// `lstat` of `name` in the directory `dir` (`fstatat(.., AT_SYMLINK_NOFOLLOW)`).
fn lstat_at(dir: &std::os::fd::OwnedFd, name: &str) -> std::io::Result<Entry> {
    use std::os::fd::AsRawFd;
    let c = c_name(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is an open descriptor, `c` a NUL-terminated name and `st` writable memory
    // of a `struct stat`, which fstatat fills when it returns 0.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it wrote the whole struct.
    let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
    Ok(match mode {
        libc::S_IFLNK => Entry::Link,
        libc::S_IFDIR => Entry::Dir,
        _ => Entry::Other,
    })
}

/// The target of the link `name` in the directory `dir` (`readlinkat`), lossily as text.
fn read_link_at(dir: &std::os::fd::OwnedFd, name: &str) -> std::io::Result<String> {
    use std::os::fd::AsRawFd;
    let c = c_name(name)?;
    let mut cap = 256usize;
    loop {
        let mut buf: Vec<u8> = Vec::with_capacity(cap);
        // SAFETY: `buf` has `cap` bytes of spare capacity that readlinkat may write; it
        // returns how many it wrote (no NUL), or -1.
        let r =
            unsafe { libc::readlinkat(dir.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), cap) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = r as usize;
        if n < cap {
            // SAFETY: readlinkat wrote `n` bytes, `n < cap`.
            unsafe { buf.set_len(n) };
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        // Possibly truncated: a larger buffer (a link target is at most PATH_MAX).
        if cap >= 1 << 16 {
            return Err(std::io::Error::other("link target longer than 64 KiB"));
        }
        cap *= 4;
    }
}

fn open_dir_fd(p: &Path) -> Option<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(p)
        .ok()
        .map(std::os::fd::OwnedFd::from)
}

fn open_nofollow(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:06.0")).unwrap();
        std::fs::write(
            r.join("sys/devices/pci0000:00/0000:00:06.0/vendor"),
            "0x10de\n",
        )
        .unwrap();
        std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:06.0",
            r.join("sys/bus/pci/devices/0000:00:06.0"),
        )
        .unwrap();
        t
    }

    #[test]
    fn relative_links_resolve_inside_the_root() {
        let t = tree();
        let root = Root::sysroot(t.path()).unwrap();
        assert_eq!(
            root.read_trimmed("/sys/bus/pci/devices/0000:00:06.0/vendor")
                .unwrap(),
            "0x10de"
        );
        assert_eq!(
            root.canonical("/sys/bus/pci/devices/0000:00:06.0").unwrap(),
            "/sys/devices/pci0000:00/0000:00:06.0"
        );
    }

    #[test]
    fn escaping_links_stay_inside() {
        let t = tree();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "leak").unwrap();
        let r = t.path();
        // An absolute link to a real file outside the root, and a `..` chain.
        symlink(outside.path().join("secret"), r.join("abs")).unwrap();
        let depth = "../".repeat(30);
        symlink(
            format!("{depth}{}", outside.path().join("secret").display()),
            r.join("dots"),
        )
        .unwrap();
        let root = Root::sysroot(r).unwrap();
        for p in ["/abs", "/dots", "/../../../../etc/passwd"] {
            match root.read(p) {
                Ok(b) => assert_ne!(b, b"leak", "{p} escaped the root"),
                Err(e) => assert!(e.is_not_found(), "{p}: {e}"),
            }
        }
    }

    #[test]
    fn files_in_resolved_directories_open_relative_to_them_and_links_stay_inside() {
        // More directories than descriptors kept open: past MAX_DIR_FDS files are opened by
        // their whole path, with the same answers.
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let n = MAX_DIR_FDS + 40;
        for i in 0..n {
            let d = r.join(format!("sys/devices/d{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("a"), format!("{i}\n")).unwrap();
            std::fs::write(d.join("b"), format!("b{i}\n")).unwrap();
        }
        // A link where a file is expected, in a directory already resolved: the descriptor's
        // O_NOFOLLOW refuses it and the reader resolves it inside the root.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "leak").unwrap();
        symlink(outside.path().join("secret"), r.join("sys/devices/d0/out")).unwrap();
        symlink("/secret", r.join("sys/devices/d0/abs")).unwrap();
        std::fs::write(r.join("secret"), "inside").unwrap();
        symlink("b", r.join("sys/devices/d1/rel")).unwrap();
        let root = Root::sysroot(r).unwrap().recording();
        for pass in 0..2 {
            for i in 0..n {
                let a = root.read_trimmed(&format!("/sys/devices/d{i}/a")).unwrap();
                assert_eq!(a, i.to_string(), "pass {pass}");
                let b = root.read_trimmed(&format!("/sys/devices/d{i}/b")).unwrap();
                assert_eq!(b, format!("b{i}"), "pass {pass}");
            }
        }
        assert_eq!(root.read_trimmed("/sys/devices/d0/abs").unwrap(), "inside");
        let e = root.read("/sys/devices/d0/out").unwrap_err();
        assert!(
            e.is_not_found(),
            "an absolute link restarts at the root: {e}"
        );
        assert_eq!(root.read_trimmed("/sys/devices/d1/rel").unwrap(), "b1");
        let e = root.read("/sys/devices/d2/missing").unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert_eq!(e.path, "/sys/devices/d2/missing");
        // The recorder names the kernel paths of the files read through a descriptor.
        let rec = root.recorded();
        assert_eq!(
            rec.get(&format!("/sys/devices/d{}/a", n - 1)),
            Some(&Recorded::File(format!("{}\n", n - 1).into_bytes()))
        );
        assert_eq!(
            rec.get("/sys/devices/d1/b"),
            Some(&Recorded::File(b"b1\n".to_vec()))
        );
    }

    #[test]
    fn entries_of_a_resolved_directory_are_looked_at_relative_to_it() {
        // Once a directory is resolved, the lstat and readlink of its entries go through its
        // descriptor: links to directories, a link target longer than the first readlinkat
        // buffer, escapes, missing entries and `..` must resolve as by whole paths.
        let t = tree();
        let r = t.path();
        let dev = r.join("sys/devices/pci0000:00/0000:00:06.0");
        std::fs::create_dir_all(r.join("sys/bus/pci/drivers/nvidia")).unwrap();
        std::fs::write(r.join("sys/bus/pci/drivers/nvidia/new_id"), "x\n").unwrap();
        symlink("../../../bus/pci/drivers/nvidia", dev.join("driver")).unwrap();
        std::fs::create_dir_all(dev.join("sub")).unwrap();
        std::fs::write(dev.join("sub/f"), "deep\n").unwrap();
        let long = format!("{}sub", "./".repeat(200));
        symlink(&long, dev.join("long")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("d")).unwrap();
        std::fs::write(outside.path().join("d/secret"), "leak").unwrap();
        symlink(outside.path().join("d"), dev.join("esc")).unwrap();
        let root = Root::sysroot(r).unwrap();
        let d = "/sys/bus/pci/devices/0000:00:06.0";
        assert_eq!(root.read_trimmed(&format!("{d}/vendor")).unwrap(), "0x10de");
        for pass in 0..2 {
            assert_eq!(
                root.canonical(&format!("{d}/driver")).unwrap(),
                "/sys/bus/pci/drivers/nvidia",
                "pass {pass}"
            );
            assert_eq!(
                root.read_link(&format!("{d}/driver")).unwrap(),
                "../../../bus/pci/drivers/nvidia"
            );
            assert_eq!(root.read_link(&format!("{d}/long")).unwrap(), long);
            assert_eq!(
                root.read_trimmed(&format!("{d}/long/f")).unwrap(),
                "deep",
                "pass {pass}"
            );
            assert_eq!(root.read_trimmed(&format!("{d}/sub/f")).unwrap(), "deep");
            assert_eq!(
                root.read_trimmed(&format!("{d}/driver/new_id")).unwrap(),
                "x"
            );
            assert!(root.exists(&format!("{d}/sub")).unwrap());
            assert!(!root.exists(&format!("{d}/nothing")).unwrap());
            assert!(root.read(&format!("{d}/esc/secret")).is_err(), "escaped");
            assert_eq!(
                root.canonical(&format!("{d}/sub/..")).unwrap(),
                "/sys/devices/pci0000:00/0000:00:06.0"
            );
        }
    }

    #[test]
    fn files_of_every_size_read_whole_and_exactly() {
        let t = tree();
        let root = Root::sysroot(t.path()).unwrap();
        let dir = t.path().join("sys/devices/pci0000:00/0000:00:06.0");
        std::fs::create_dir_all(t.path().join("proc/driver")).unwrap();
        for len in [
            0usize, 1, 4095, 4096, 4097, 8191, 8192, 8193, 20_000, 100_003,
        ] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            for (host, kernel) in [
                (
                    dir.join("blob"),
                    "/sys/bus/pci/devices/0000:00:06.0/blob".to_string(),
                ),
                (
                    t.path().join("proc/driver/blob"),
                    "/proc/driver/blob".to_string(),
                ),
            ] {
                std::fs::write(&host, &body).unwrap();
                let got = root.read(&kernel).unwrap();
                assert_eq!(got.len(), len, "{kernel}");
                assert!(got == body, "{kernel}: {len} bytes read differ");
            }
        }
        // The limit holds across reads.
        let big = vec![b'x'; MAX_FILE as usize + 1];
        std::fs::write(dir.join("big"), &big).unwrap();
        let e = root
            .read("/sys/bus/pci/devices/0000:00:06.0/big")
            .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::TooLarge), "{e}");
        // A directory opens and does not read.
        let e = root.read("/sys/bus/pci/devices/0000:00:06.0").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn link_loops_end_with_an_error() {
        let t = tempfile::tempdir().unwrap();
        symlink("b", t.path().join("a")).unwrap();
        symlink("a", t.path().join("b")).unwrap();
        symlink("self/x", t.path().join("self")).unwrap();
        let root = Root::sysroot(t.path()).unwrap();
        for p in ["/a", "/self/x"] {
            let e = root.read(p).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Loop, "{p}");
            assert_eq!(e.path, p);
        }
    }

    #[test]
    fn errors_carry_the_path_and_recording_keeps_links() {
        let t = tree();
        let root = Root::sysroot(t.path()).unwrap().recording();
        let e = root.read("/proc/modules").unwrap_err();
        assert_eq!(e.to_string(), "/proc/modules: not found");
        root.read("/sys/bus/pci/devices/0000:00:06.0/vendor")
            .unwrap();
        let rec = root.recorded();
        assert_eq!(
            rec.get("/sys/bus/pci/devices/0000:00:06.0"),
            Some(&Recorded::Link(
                "../../../devices/pci0000:00/0000:00:06.0".into()
            ))
        );
        assert_eq!(
            rec.get("/sys/devices/pci0000:00/0000:00:06.0/vendor"),
            Some(&Recorded::File(b"0x10de\n".to_vec()))
        );
        assert!(!root.exists("/sys/nope").unwrap());
        assert!(root.exists("/sys/devices").unwrap());
    }

    #[test]
    fn a_file_where_a_directory_belongs_is_not_a_missing_file() {
        let t = tree();
        // `/sys/module` as a file: what lies below it is unknown, not absent.
        std::fs::write(t.path().join("sys/module"), "x").unwrap();
        let mut root = Root::sysroot(t.path()).unwrap();
        root.set_complete(true);
        let e = root.read("/sys/module/nvidia_peermem/version").unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotADirectory);
        assert!(!e.is_not_found(), "{e}");
        assert!(root.exists("/sys/module/nvidia_peermem").is_err());
        assert!(root.read("/sys/nope/x").unwrap_err().is_not_found());
    }
}
