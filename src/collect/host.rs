//! The host: name, kernel release, CPU vendor (procfs, with the snapshot's metadata as the
//! fallback for captures that lack the files).

use super::process::from_meta;
use super::util::*;
use crate::source::meta::Meta;
use crate::source::reader::Root;
use crate::source::Origin;
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;

pub(super) struct Host {
    pub hostname: Fact<String>,
    pub kernel_release: Fact<String>,
    pub cpu_vendor: Fact<CpuVendor>,
}

pub(super) fn collect(root: &Root, origin: Origin, meta: Option<&Meta>) -> Host {
    // Under --host-root, /proc/sys/kernel/hostname answers for the *reader's* UTS namespace
    // (the pod's name unless hostNetwork): the host's own name is in its /etc/hostname.
    let etc = (origin == Origin::HostRoot)
        .then(|| root.read_trimmed("/etc/hostname").ok())
        .flatten()
        .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
        .filter(|h| !h.is_empty());
    let hostname = match etc {
        Some(h) => Fact::known(h, "/etc/hostname"),
        None => hostname(root, meta),
    };
    let kernel_release = match root.read_trimmed("/proc/sys/kernel/osrelease") {
        Ok(k) => Fact::known(k, "/proc/sys/kernel/osrelease"),
        Err(e) => match root.read_trimmed("/proc/version") {
            Ok(v) => match release_of_proc_version(&v) {
                Some(r) => Fact::known(r, "/proc/version"),
                None => Fact::absent("/proc/version", "unrecognised content"),
            },
            Err(_) => from_meta(meta, "kernel_release", |m| m.kernel_release.clone())
                .unwrap_or_else(|| Fact::absent("/proc/sys/kernel/osrelease", e.reason())),
        },
    };
    let cpu_vendor = parsed(root, "/proc/cpuinfo", parse::cpu_vendor);
    Host {
        hostname,
        kernel_release,
        cpu_vendor,
    }
}

fn hostname(root: &Root, meta: Option<&Meta>) -> Fact<String> {
    match root.read_trimmed("/proc/sys/kernel/hostname") {
        Ok(h) => Fact::known(h, "/proc/sys/kernel/hostname"),
        Err(e) => from_meta(meta, "hostname", |m| m.hostname.clone())
            .unwrap_or_else(|| Fact::absent("/proc/sys/kernel/hostname", e.reason())),
    }
}

/// The kernel release in `/proc/version` (`Linux version 6.8.0-45-generic (...) ...`).
pub(super) fn release_of_proc_version(v: &str) -> Option<String> {
    match v.split_whitespace().nth(2) {
        Some(r) if v.starts_with("Linux version") => Some(r.to_string()),
        _ => None,
    }
}
