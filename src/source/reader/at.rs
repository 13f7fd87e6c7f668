//! The `*at` system calls the reader is built on: `fstatat`, `readlinkat`, `O_PATH`
//! directory descriptors and `O_NOFOLLOW` opens.

use std::path::Path;

/// What an entry is, as the resolver needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    Link,
    Dir,
    Other,
}

impl Entry {
    pub(super) fn of(md: &std::fs::Metadata) -> Entry {
        if md.file_type().is_symlink() {
            Entry::Link
        } else if md.is_dir() {
            Entry::Dir
        } else {
            Entry::Other
        }
    }
}

pub(super) fn c_name(name: &str) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// `lstat` of `name` in the directory `dir` (`fstatat(.., AT_SYMLINK_NOFOLLOW)`).
pub(super) fn lstat_at(dir: &std::os::fd::OwnedFd, name: &str) -> std::io::Result<Entry> {
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
pub(super) fn read_link_at(dir: &std::os::fd::OwnedFd, name: &str) -> std::io::Result<String> {
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

/// An `O_PATH` descriptor of a directory (not a link), `None` when it cannot be opened (the
/// files below it are then opened by their whole path, which reports the error).
pub(super) fn open_dir_fd(p: &Path) -> Option<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(p)
        .ok()
        .map(std::os::fd::OwnedFd::from)
}

pub(super) fn open_nofollow(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
}
