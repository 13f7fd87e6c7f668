//! Small operating-system facts and calls the workers need beside the GPU libraries.

/// The host page size (`sysconf(_SC_PAGESIZE)`), 4096 when the call fails; the test-only
/// `GDRDOCTOR_PAGE_SIZE` when set ([`super::stand_in::page_size`]).
pub fn page_size() -> u64 {
    if let Some(p) = super::stand_in::page_size() {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// Print one line through C stdio and flush it: device `printf` goes through C stdio too, so
/// lines printed this way stay in order with the kernels' output.
pub fn c_stdout_line(text: &str) {
    if let Ok(c) = std::ffi::CString::new(format!("{text}\n")) {
        // SAFETY: printf with a "%s" format and a valid C string; fflush(NULL) flushes all.
        unsafe {
            libc::printf(c"%s".as_ptr(), c.as_ptr());
            libc::fflush(std::ptr::null_mut());
        }
    }
}

/// The calling process's pid.
pub fn pid() -> i32 {
    std::process::id() as i32
}

/// Make the kernel SIGKILL this process when the thread that started it exits
/// (`PR_SET_PDEATHSIG`), then check that the parent is still `expected` (it may have died
/// between our fork and the prctl, and the signal would then never come). `false` means the
/// parent is already gone: the caller must exit at once.
pub fn die_with_parent(expected: i32) -> bool {
    // SAFETY: prctl(PR_SET_PDEATHSIG, SIGKILL) takes plain integers and has no memory effects.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    // SAFETY: getppid has no preconditions and cannot fail.
    let parent = unsafe { libc::getppid() };
    parent == expected
}

/// SIGKILL a whole process group (a worker and any helpers it started). Async-signal-safe.
pub fn kill_group(pgid: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals the process group; plain integers.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
    }
}

/// Close stdout and stderr (a worker that has said everything: the parent sees end of file
/// before the process has finished exiting).
pub fn close_stdio() {
    // SAFETY: closing the standard descriptors; nothing in this process writes to them after.
    unsafe {
        libc::close(1);
        libc::close(2);
    }
}

/// `waitpid(pid, WNOHANG)`: whether the child `pid` is gone (reaped now, or not our child any
/// more). Async-signal-safe.
pub fn reap_nohang(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes only the status int we pass; it is async-signal-safe.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    r == pid || r < 0
}

/// Sleep `ms` milliseconds with `nanosleep` (async-signal-safe; an interruption ends it early).
pub fn sleep_ms_signal_safe(ms: u32) {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) as libc::c_long) * 1_000_000,
    };
    // SAFETY: nanosleep reads the timespec we pass and may write nothing (null remainder).
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// `_exit(code)`: leave now, without destructors or atexit handlers. Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// The termination signals a parent forwards to its workers before it exits.
pub const TERMINATION_SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Install `handler` for SIGINT, SIGTERM and SIGHUP, except for a signal the process was told
/// to ignore (`nohup` ignores SIGHUP: it stays ignored). The handler must be async-signal-safe.
pub fn on_termination_signals(handler: extern "C" fn(i32)) {
    for sig in TERMINATION_SIGNALS {
        // SAFETY: sigaction with a zeroed struct, an empty mask and a handler of the right
        // type; `old` is ours to fill. The handler only calls async-signal-safe functions
        // (the caller's contract).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// How deep [`remove_tree_signal_safe`] descends (a snapshot's sysfs tree is about 15 deep).
const REMOVE_DEPTH: u32 = 48;

/// Remove the directory tree at `path` (a NUL-terminated path) with nothing but
/// async-signal-safe system calls (`open`, `openat`, `getdents64`, `lseek`, `unlinkat`,
/// `fchmodat`, `close`): no allocation, no lock, symlinks never followed, at most
/// [`REMOVE_DEPTH`] levels. For a termination-signal handler: the temporary trees of unpacked
/// snapshots go before the process exits. Best effort: what it cannot remove stays.
///
/// # Safety
///
/// `path` must be null or point to a NUL-terminated string that stays valid (never freed)
/// while any handler may run.
pub unsafe fn remove_tree_signal_safe(path: *const libc::c_char) {
    if path.is_null() {
        return;
    }
    // SAFETY: `path` is a valid C string (the caller's contract); open(2) with plain flags.
    let fd = unsafe {
        libc::open(
            path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return;
    }
    // SAFETY: `fd` is a directory descriptor we own.
    unsafe {
        remove_children(fd, 0);
        libc::close(fd);
        libc::rmdir(path);
    }
}

/// Empty the directory `fd` (see [`remove_tree_signal_safe`]).
///
/// # Safety
///
/// `fd` must be an open directory descriptor.
unsafe fn remove_children(fd: libc::c_int, depth: u32) {
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    const NAME: usize = 19;
    let mut buf = [0u8; 1024];
    // Entries removed while the directory is read may shift the others: read again from the
    // start until a pass removes nothing (bounded, so a tree we cannot empty is left).
    for _pass in 0..64 {
        let mut removed = 0usize;
        // SAFETY: lseek on our descriptor.
        unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
        loop {
            // SAFETY: getdents64 fills at most `buf.len()` bytes of our buffer.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
            if n <= 0 {
                break;
            }
            let n = (n as usize).min(buf.len());
            let mut off = 0usize;
            while off + NAME < n {
                let reclen = usize::from(u16::from_ne_bytes([buf[off + 16], buf[off + 17]]));
                if reclen <= NAME || off + reclen > n {
                    break;
                }
                let dtype = buf[off + 18];
                let name = &buf[off + NAME..off + reclen];
                let len = name.iter().position(|b| *b == 0).unwrap_or(name.len());
                let dots = matches!(&name[..len], b"." | b"..");
                // The kernel NUL-terminates d_name inside the record.
                let cname = name.as_ptr().cast::<libc::c_char>();
                if !dots && len < name.len() {
                    // SAFETY: `cname` is NUL-terminated inside `buf`; `fd` is our directory.
                    unsafe {
                        if dtype != libc::DT_DIR && libc::unlinkat(fd, cname, 0) == 0 {
                            removed += 1;
                        } else if depth < REMOVE_DEPTH {
                            // A directory (or an unknown type that unlink refused): make it
                            // searchable, empty it, remove it.
                            libc::fchmodat(fd, cname, 0o700, 0);
                            let sub = libc::openat(
                                fd,
                                cname,
                                libc::O_RDONLY
                                    | libc::O_DIRECTORY
                                    | libc::O_NOFOLLOW
                                    | libc::O_CLOEXEC,
                            );
                            if sub >= 0 {
                                remove_children(sub, depth + 1);
                                libc::close(sub);
                            }
                            if libc::unlinkat(fd, cname, libc::AT_REMOVEDIR) == 0 {
                                removed += 1;
                            }
                        }
                    }
                }
                off += reclen;
            }
        }
        if removed == 0 {
            break;
        }
    }
}
