//! Collectors: read the node through the [`Source`] into the [`Node`] model. I/O only; no
//! judgement. Every field records where it came from; a field that cannot be read is absent
//! with the reason (`not found`, `permission denied (run as root)`, `not in this capture`).
//!
//! One collector per subsystem, one file each (node_exporter's layout): [`host`] (name, kernel
//! release, CPU), [`kernel`] (modules, command line, huge pages), [`process`] (the live-only
//! facts: machine, RLIMIT_MEMLOCK, euid, environment), [`pci`], [`iommu`], [`nvidia`] (the
//! driver), [`peermem`], [`rdma`], and [`live`] (NVML, CUDA and libibverbs, in a worker). Each
//! is timed; `GDRDOCTOR_COLLECT_TIMING=1` prints the timings on stderr.
//!
//! Captures are partial by nature. "File not found" means "absent on the node" only on a
//! complete root (live, or a gdrdoctor snapshot, whose recorder kept every directory it looked
//! in) and only when its parent (the *anchor*, e.g. `/sys/module`) exists; in a foreign capture
//! (hwloc's, a hand-made tree) a missing file is "not in this capture", never a finding.

mod host;
mod iommu;
mod kernel;
pub mod live;
mod nvidia;
mod pci;
mod peermem;
mod process;
mod rdma;
mod util;

pub use live::Libraries;
pub use pci::is_relevant;
pub use process::{live_memlock, relevant_env};

use crate::meta::Meta;
use crate::reader::Root;
use crate::source::{Origin, Source};
use gdrdoctor_checks::model::*;
use std::time::{Duration, Instant};

/// The environment variable that prints the collectors' timings on stderr.
pub const TIMING_ENV: &str = "GDRDOCTOR_COLLECT_TIMING";

/// How long one collector took.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub collector: &'static str,
    pub elapsed: Duration,
}

/// Run one collector, timed.
fn timed<T>(timings: &mut Vec<Timing>, collector: &'static str, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let v = f();
    timings.push(Timing {
        collector,
        elapsed: t0.elapsed(),
    });
    v
}

/// The whole node from a source, live libraries included (or not), with each collector's time.
pub fn node_timed(src: &Source, libs: Libraries) -> (Node, Vec<Timing>) {
    let (mut node, mut timings) = files_timed(&src.root, src.origin, src.meta.as_ref());
    node.live = timed(&mut timings, "live", || live::collect(src, libs));
    if src.origin == Origin::HostRoot {
        let mut l = std::mem::replace(&mut node.live, LiveFacts::absent("not queried"));
        live::host_root_visibility(&mut l, &node);
        node.live = l;
    }
    (node, timings)
}

/// The whole node from a source (timings on stderr with `GDRDOCTOR_COLLECT_TIMING=1`).
pub fn node(src: &Source, libs: Libraries) -> Node {
    let (node, timings) = node_timed(src, libs);
    if std::env::var(TIMING_ENV).is_ok_and(|v| v == "1") {
        for t in &timings {
            eprintln!(
                "gdrdoctor: collector {:<8} {:>9.3} ms",
                t.collector,
                t.elapsed.as_secs_f64() * 1e3
            );
        }
    }
    node
}

/// The node from the source's files alone (`node.live` absent).
pub fn files(src: &Source) -> Node {
    files_timed(&src.root, src.origin, src.meta.as_ref()).0
}

/// The node from the files of `root` alone (no live libraries: `node.live` is absent), its
/// origin decided by [`Origin::classify`]. The caller has marked the root complete or not
/// (`Source::from_root` does both).
pub fn collect(root: &Root, meta: Option<&Meta>) -> Node {
    files_timed(root, Origin::classify(root, meta), meta).0
}

fn files_timed(root: &Root, origin: Origin, meta: Option<&Meta>) -> (Node, Vec<Timing>) {
    let mut t = Vec::new();
    let host = timed(&mut t, "host", || host::collect(root, origin, meta));
    let kernel = timed(&mut t, "kernel", || kernel::collect(root));
    let process = timed(&mut t, "process", || process::collect(root, origin, meta));
    let pci = timed(&mut t, "pci", || pci::collect(root));
    let iommu = timed(&mut t, "iommu", || iommu::collect(root));
    let nvidia = timed(&mut t, "nvidia", || nvidia::collect(root));
    let peermem = timed(&mut t, "peermem", || peermem::collect(root));
    let rdma = timed(&mut t, "rdma", || rdma::collect(root));
    let health = timed(&mut t, "health", || {
        let mut h = crate::health::collect(root, &pci, &rdma);
        if origin == Origin::HostRoot {
            h.kernel_log = host_root_kernel_log(root, h.kernel_log);
        }
        h
    });
    let node = Node {
        source: origin.kind(),
        root: root.base().display().to_string(),
        hostname: host.hostname,
        kernel_release: host.kernel_release,
        arch: process.arch,
        cpu_vendor: host.cpu_vendor,
        modules: kernel.modules,
        cmdline: kernel.cmdline,
        hugepages: kernel.hugepages,
        memlock: process.memlock,
        euid: process.euid,
        env: process.env,
        iommu,
        nvidia,
        peermem,
        pci,
        health,
        rdma,
        live: LiveFacts::absent("not queried"),
    };
    (node, t)
}

/// `--host-root`: the host's `/dev/kmsg` through the mount when the container may open it (a
/// privileged pod; the device cgroup refuses others), else what the text logs under the root
/// gave, else why not, in the words of a container.
fn host_root_kernel_log(root: &Root, from_files: Fact<KernelLog>) -> Fact<KernelLog> {
    let kmsg = root.base().join("dev/kmsg");
    let shown = kmsg.display().to_string();
    let is_char = std::fs::symlink_metadata(&kmsg)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
    let kmsg_err = if is_char {
        match crate::health::kernel_log::read_kmsg(&shown) {
            Ok(l) => return Fact::known(l, shown),
            Err(e) => e,
        }
    } else {
        "not a character device".to_string()
    };
    match from_files {
        Fact::Known { .. } => from_files,
        Fact::Absent { source, reason } => Fact::absent(
            source,
            format!(
                "the host's kernel log is out of this container's reach: {shown}: {kmsg_err} (a privileged pod can read it); no /var/log/kern.log, messages or syslog under {} ({reason})",
                root.base().display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::source::Location;

    #[test]
    fn every_collector_is_timed_and_a_snapshot_reads_its_own_live_facts() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/sysroots/hgx-h200x8-cx7x8-healthy");
        let src = Source::open(Location::Sysroot(&dir)).unwrap();
        let (node, timings) = node_timed(&src, Libraries::Query);
        let names: Vec<&str> = timings.iter().map(|t| t.collector).collect();
        assert_eq!(
            names,
            [
                "host", "kernel", "process", "pci", "iommu", "nvidia", "peermem", "rdma", "health",
                "live"
            ]
        );
        // A snapshot never asks this machine's libraries: its live facts are its own.
        assert!(node.live.cuda.get().is_some_and(|c| c.devices.len() == 8));
        assert_eq!(node.source, SourceKind::Sysroot);
        assert_eq!(node.pci.get().map(|p| p.len() > 16), Some(true));
    }
}
