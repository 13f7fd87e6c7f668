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
