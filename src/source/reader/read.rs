//! Reading a whole file: opened relative to its resolved directory's descriptor when there is
//! one (one component for the kernel to walk), `O_NOFOLLOW`, into a stack buffer.

use super::at::{c_name, open_dir_fd, open_nofollow};
use super::{join, ErrorKind, ReadError, Recorded, ResolvedDir, Root, MAX_DIR_FDS, MAX_FILE};

impl Root {
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
    pub(super) fn cached_parent<'p>(
        &self,
        path: &'p str,
    ) -> Option<(std::sync::Arc<ResolvedDir>, &'p str)> {
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
    pub(super) fn open_in(&self, dir: &ResolvedDir, name: &str) -> std::io::Result<std::fs::File> {
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
    pub(super) fn dir_fd<'d>(&self, dir: &'d ResolvedDir) -> Option<&'d std::os::fd::OwnedFd> {
        if self.mem.is_some() {
            return None;
        }
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

    pub(super) fn read_inner(&self, path: &str) -> Result<Vec<u8>, ReadError> {
        if let Some(m) = &self.mem {
            let comps = self.resolve_comps(path, true)?;
            let key = join(&comps);
            let buf = m.read(&key).map_err(|e| match e.raw_os_error() {
                Some(libc::EISDIR) => ReadError::new(path, ErrorKind::Io("is a directory".into())),
                _ => ReadError::io(path, &e),
            })?;
            if buf.len() as u64 > MAX_FILE {
                return Err(ReadError::new(path, ErrorKind::TooLarge));
            }
            if self.recorder.is_some() {
                self.record(&key, Recorded::File(buf.clone()));
            }
            return Ok(buf);
        }
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

    pub(super) fn read_open(
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
}
