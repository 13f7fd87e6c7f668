//! Is libcuda there, and which file did this process load: the test-only `GDRDOCTOR_LIB_DIR`
//! override preloaded, the system's library looked for, the mapped file named.

use cudarc::driver::sys;
use std::ffi::CString;

/// The libcuda the test-only `GDRDOCTOR_LIB_DIR` names, loaded (once, for the life of the
/// process) before the CUDA bindings look for it: they `dlopen("libcuda.so")` first, which the
/// dynamic loader answers with a loaded library of that soname (the stand-in's) before it
/// searches the system's paths. Confirmed, not assumed: `dlopen("libcuda.so", RTLD_NOLOAD)`
/// must return this very library, else the override is reported as a problem.
fn preload_override(dir: &std::path::Path) -> Result<(), String> {
    use std::sync::OnceLock;
    static PRELOADED: OnceLock<Result<(), String>> = OnceLock::new();
    PRELOADED
        .get_or_init(|| {
            let path = dir.join("libcuda.so.1");
            let shown = path.display().to_string();
            let c = CString::new(shown.as_bytes()).map_err(|e| format!("{shown}: {e}"))?;
            // SAFETY: dlopen of a path; the handle is kept for the life of the process (the
            // bindings keep their own), so nothing it returns is ever unmapped.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if h.is_null() {
                return Err(format!(
                    "{shown} not loadable (GDRDOCTOR_LIB_DIR): {}",
                    dl_error()
                ));
            }
            // SAFETY: dlopen with RTLD_NOLOAD only looks up an already loaded library.
            let by_name =
                unsafe { libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if !by_name.is_null() {
                // SAFETY: drops the reference RTLD_NOLOAD just took; `h` keeps it loaded.
                unsafe { libc::dlclose(by_name) };
            }
            if by_name != h {
                return Err(format!(
                    "{shown} was loaded but \"libcuda.so\" does not resolve to it (its soname \
                     must be libcuda.so): the CUDA bindings would load another libcuda"
                ));
            }
            Ok(())
        })
        .clone()
}

fn dl_error() -> String {
    // SAFETY: dlerror has no preconditions; a non-null result is a C string we copy at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null dlerror results are NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Load libcuda now and keep it loaded, as the CUDA bindings will (the first of their candidate
/// names that loads, or the test-only override): a `live-cuda` worker started ahead of its
/// request does this while NVML answers the parent, so that its `cuInit` does not wait for the
/// loader. Loading opens no GPU (`cuInit` does: checked on the H100 by
/// `scripts/cuinit-uvm/dlopen-then-env.c`, which also shows `CUDA_VISIBLE_DEVICES` set after the
/// load and before `cuInit` is obeyed). Failures are left for [`library_problem`] to report.
pub fn preload() {
    use std::sync::OnceLock;
    static KEPT: OnceLock<Option<libloading::Library>> = OnceLock::new();
    if let Some(dir) = crate::live::stand_in::lib_dir() {
        let _ = preload_override(&dir);
        return;
    }
    KEPT.get_or_init(|| {
        cudarc::get_lib_name_candidates("cuda")
            .into_iter()
            // SAFETY: loading the driver's library runs its initialisers, as the bindings'
            // own load would; the handle is kept for the life of the process.
            .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
    });
}

/// Why CUDA cannot be used here, or `None` when libcuda loads.
pub fn library_problem() -> Option<String> {
    if let Some(dir) = crate::live::stand_in::lib_dir() {
        if let Err(e) = preload_override(&dir) {
            return Some(e);
        }
    }
    // SAFETY: only tries dlopen on the candidate names.
    if unsafe { sys::is_culib_present() } {
        None
    } else {
        Some("libcuda.so.1 not loadable (no NVIDIA driver user-space library on this node, or it is not on the loader path)".into())
    }
}

/// The libcuda file this process mapped (spots the toolkit's `stubs/libcuda.so`).
pub fn loaded_library() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libcuda.so"))
        .map(str::to_string)
}
