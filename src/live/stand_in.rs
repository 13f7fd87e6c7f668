//! Test-only overrides of where the live node comes from, so that the test suite can run the
//! real live paths (verbs registration, the DEVX UAR, NCCL's dma-buf probe, the live facts) on a
//! machine without an RDMA NIC or a GPU, against the stand-in libraries of `tests/stubs/`
//! (docs/testing.md):
//!
//! - `GDRDOCTOR_LIB_DIR=DIR`: libibverbs, libmlx5, libcuda and libnvidia-ml are loaded from
//!   `DIR/<soname>` instead of the loader's search ([`library`]); NVRTC is not loaded at all.
//!   A library missing from DIR is missing: nothing falls back to the system's copy.
//! - `GDRDOCTOR_LIVE_ROOT=DIR`: the live node's files are read under DIR (a sysroot: a fixture
//!   or a snapshot), still as the live node: live libraries in a worker, live process facts
//!   ([`live_root`], used by `Root::live`).
//! - `GDRDOCTOR_PAGE_SIZE=N`: the host page size the probes compute with ([`page_size`]), to
//!   play a 64 KiB-page host (aarch64) on a 4 KiB one.
//!
//! **Honoured only in debug builds (what `cargo test` builds) and in builds with the
//! `stand-ins` feature.** A release binary ignores them and says so once on stderr. Why: the
//! variables make gdrdoctor load code from, and read its evidence from, wherever they point,
//! and report the result as the live node's. A variable left set in a CI environment, or passed
//! through `sudo` or a job scheduler, must never turn a real preflight gate into a stand-in's
//! verdict. Building the release binary without them makes that impossible; a build that
//! wants them says so with `--features stand-ins`.

use std::path::PathBuf;
use std::sync::Once;

/// The directory the libraries are loaded from.
pub const LIB_DIR_ENV: &str = "GDRDOCTOR_LIB_DIR";
/// The directory the live node's files are read under.
pub const LIVE_ROOT_ENV: &str = "GDRDOCTOR_LIVE_ROOT";
/// The host page size the probes compute with.
pub const PAGE_SIZE_ENV: &str = "GDRDOCTOR_PAGE_SIZE";

/// Whether this build honours the overrides.
pub const HONOURED: bool = cfg!(any(debug_assertions, feature = "stand-ins"));

static IGNORED: Once = Once::new();

/// A non-empty override, or `None`; in a build that does not honour it, `None` and a one-time
/// warning.
fn var(name: &str) -> Option<String> {
    let v = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    if HONOURED {
        return Some(v);
    }
    IGNORED.call_once(|| {
        eprintln!(
            "gdrdoctor: warning: {name} is ignored: test-only overrides ({LIB_DIR_ENV}, \
             {LIVE_ROOT_ENV}, {PAGE_SIZE_ENV}) work in debug builds and builds with \
             --features stand-ins, never in a release build"
        );
    });
    None
}

/// The stand-in library directory, when the override is set (and honoured).
pub fn lib_dir() -> Option<PathBuf> {
    var(LIB_DIR_ENV).map(PathBuf::from)
}

/// What to pass to `dlopen` for the library `soname`: `DIR/soname` under `GDRDOCTOR_LIB_DIR`,
/// else the soname itself (the loader's search). Every library gdrdoctor loads by name goes
/// through here.
pub fn library(soname: &str) -> String {
    match lib_dir() {
        Some(d) => d.join(soname).to_string_lossy().into_owned(),
        None => soname.to_string(),
    }
}

/// The directory the live node's files are read under, when the override is set.
pub fn live_root() -> Option<PathBuf> {
    var(LIVE_ROOT_ENV).map(PathBuf::from)
}

/// The page size override: a power of two of at least 4096, else `None` (with a warning: a
/// bad value must not silently become the real page size in a test that wanted another one).
pub fn page_size() -> Option<u64> {
    let v = var(PAGE_SIZE_ENV)?;
    let p = parse_page_size(&v);
    if p.is_none() {
        eprintln!(
            "gdrdoctor: warning: {PAGE_SIZE_ENV}={v:?} is not a power of two >= 4096; \
             using the host's page size"
        );
    }
    p
}

fn parse_page_size(v: &str) -> Option<u64> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 4096 && n.is_power_of_two())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_are_powers_of_two_from_4k() {
        assert_eq!(parse_page_size("65536"), Some(65536));
        assert_eq!(parse_page_size(" 4096\n"), Some(4096));
        for bad in ["2048", "65535", "0", "64k", "", "-4096"] {
            assert_eq!(parse_page_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn library_names_resolve_to_the_soname_without_the_override() {
        if std::env::var_os(LIB_DIR_ENV).is_none() {
            assert_eq!(library("libibverbs.so.1"), "libibverbs.so.1");
        }
    }
}
