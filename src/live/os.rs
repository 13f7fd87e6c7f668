//! Small operating-system facts and calls the workers need beside the GPU libraries.

/// The host page size (`sysconf(_SC_PAGESIZE)`), 4096 when the call fails.
pub fn page_size() -> u64 {
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
