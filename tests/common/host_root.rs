//! A constructed host root for `--host-root` (tests/host_root.rs, tests/seats.rs): a fixture
//! sysroot as a host's `/` seen through a container's hostPath mount.
#![allow(dead_code, clippy::unwrap_used)]

use super::{copy_tree, fixture};
use std::path::Path;

/// The host's name in the constructed /etc/hostname.
pub const HOSTNAME: &str = "gpu-node-17";
/// The pid of the constructed containerd.
pub const RUNTIME_PID: &str = "812";

/// `fixture_name` as a host's `/` at `dst`: no gdrdoctor/ directory (a host has none), its kernel
/// log lines in /var/log/kern.log, its name in /etc/hostname, and in its procfs a pid 1, a
/// containerd whose RLIMIT_MEMLOCK is `memlock` (the pods inherit it) and a shim.
pub fn host_tree(fixture_name: &str, dst: &Path, memlock: &str) {
    copy_tree(&fixture(fixture_name), dst);
    let log = std::fs::read_to_string(dst.join("gdrdoctor/kernel-log.txt")).unwrap_or_default();
    std::fs::remove_dir_all(dst.join("gdrdoctor")).unwrap();
    std::fs::create_dir_all(dst.join("var/log")).unwrap();
    let body: String = log
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dst.join("var/log/kern.log"), body).unwrap();
    std::fs::create_dir_all(dst.join("etc")).unwrap();
    std::fs::write(dst.join("etc/hostname"), format!("{HOSTNAME}\n")).unwrap();
    let limits = |ml: &str| {
        format!(
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max open files            1024                 524288               files     \n\
             Max locked memory         {ml}            {ml}            bytes     \n"
        )
    };
    for (pid, comm, ml) in [
        ("1", "systemd", "8388608"),
        (RUNTIME_PID, "containerd", memlock),
        ("4242", "containerd-shim", "65536"),
    ] {
        let d = dst.join("proc").join(pid);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(d.join("limits"), limits(ml)).unwrap();
    }
}
