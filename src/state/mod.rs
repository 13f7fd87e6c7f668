//! What gdrdoctor keeps across runs, in one state directory (`/run/gdrdoctor`, a tmpfs: gone at
//! reboot; `--state-dir`, `GDRDOCTOR_STATE_DIR`): the counter baseline ([`counters`]) and the
//! CUDA answers of the boot ([`cuda_cache`]), each written by the one atomic writer and read
//! back with validation ([`atomic`]).

pub mod atomic;
pub mod counters;
pub mod cuda_cache;

use std::path::PathBuf;

/// The state directory when neither `--state-dir` nor `GDRDOCTOR_STATE_DIR` names one.
pub const DEFAULT_DIR: &str = "/run/gdrdoctor";

/// `GDRDOCTOR_STATE_DIR`, else `/run/gdrdoctor`.
pub fn default_dir() -> PathBuf {
    std::env::var_os("GDRDOCTOR_STATE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// `/proc/sys/kernel/random/boot_id` of the running system.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
