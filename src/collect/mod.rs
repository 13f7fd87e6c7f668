//! Collectors: read the node through the [`Source`] into the [`Node`] model. I/O only; no
//! judgement. Every field records where it came from; a field that cannot be read is absent
//! with the reason (`not found`, `permission denied (run as root)`, `not in this capture`).
//!
//! One collector per subsystem, one file each (node_exporter's layout): [`host`] (name, kernel
//! release, CPU), [`kernel`] (modules, command line, huge pages), [`process`] (the live-only
//! facts: machine, RLIMIT_MEMLOCK, euid, environment), [`pci`], [`iommu`], [`nvidia`] (the
//! driver), [`peermem`], [`rdma`], and [`live`] (NVML, CUDA and libibverbs, in workers). Each
//! is timed (`GDRDOCTOR_TRACE=1` prints the phases on stderr: [`crate::sys::trace`]). On the live
//! node the live libraries are asked in a thread of their own while this thread reads the
//! files: the run costs the longer of the two, not their sum.
//!
//! Captures are partial by nature. "File not found" means "absent on the node" only on a
//! complete root (live, or a gdrdoctor snapshot, whose recorder kept every directory it looked
//! in) and only when its parent (the *anchor*, e.g. `/sys/module`) exists; in a foreign capture
//! (hwloc's, a hand-made tree) a missing file is "not in this capture", never a finding.

mod addons;
pub mod allocation;
pub mod container;
mod fabric;
pub mod fleet;
pub mod health;
mod host;
mod iommu;
mod kernel;
pub mod live;
mod modfile;
mod nvidia;
mod pci;
mod peermem;
mod process;
mod rdma;
pub mod snapshot;
mod util;
pub mod watch;

pub use live::Libraries;
pub use pci::is_relevant;
pub use process::{live_memlock, relevant_env};

use crate::source::meta::Meta;
use crate::source::reader::Root;
use crate::source::{Origin, Source};
use gdrdoctor_checks::model::*;
use std::time::{Duration, Instant};

/// How long one collector took.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub collector: &'static str,
    pub elapsed: Duration,
}

/// The collectors' phase names in the trace (`collect.<name>`).
const PHASES: [(&str, &str); 10] = [
    ("host", "collect.host"),
    ("kernel", "collect.kernel"),
    ("process", "collect.process"),
    ("pci", "collect.pci"),
    ("iommu", "collect.iommu"),
    ("nvidia", "collect.nvidia"),
    ("peermem", "collect.peermem"),
    ("rdma", "collect.rdma"),
    ("health", "collect.health"),
    ("live", "collect.live"),
];

fn phase(collector: &'static str) -> &'static str {
    PHASES
        .iter()
        .find(|(c, _)| *c == collector)
        .map(|(_, p)| *p)
        .unwrap_or("collect")
}

/// Run one collector, timed (and traced).
fn timed<T>(timings: &mut Vec<Timing>, collector: &'static str, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let v = crate::sys::trace::timed(phase(collector), f);
    timings.push(Timing {
        collector,
        elapsed: t0.elapsed(),
    });
    v
}

/// The whole node from a source, live libraries included (or not), with each collector's time.
/// The live libraries are asked on a thread of their own, in parallel with the file collectors
/// (their time is the `live` entry, measured on that thread).
pub fn node_timed(src: &Source, libs: Libraries) -> (Node, Vec<Timing>) {
    node_timed_with(src, libs, &live::Options::default())
}

/// [`node_timed`] with the live-facts options (the CUDA cache).
pub fn node_timed_with(src: &Source, libs: Libraries, opts: &live::Options) -> (Node, Vec<Timing>) {
    std::thread::scope(|s| {
        let live = s.spawn(|| {
            let t0 = Instant::now();
            let l =
                crate::sys::trace::timed("collect.live", || live::collect_with(src, libs, opts));
            (l, t0.elapsed())
        });
        let (mut node, mut timings) = crate::sys::trace::timed("collect.files", || {
            files_timed(&src.root, src.origin, src.meta.as_ref())
        });
        let (l, elapsed) = match live.join() {
            Ok(x) => x,
            Err(_) => (
                LiveFacts::absent("the live-facts thread panicked"),
                Duration::ZERO,
            ),
        };
        let mut l = l;
        if src.origin == Origin::HostRoot {
            // What the container's libraries cannot see of the host is said, not judged.
            live::host_root_visibility(&mut l, &node);
        }
        node.live = l;
        timings.push(Timing {
            collector: "live",
            elapsed,
        });
        (node, timings)
    })
}

/// The whole node from a source (`GDRDOCTOR_TRACE=1` prints each collector's time).
pub fn node(src: &Source, libs: Libraries) -> Node {
    node_timed(src, libs).0
}

/// [`node`] with the live-facts options (the CUDA cache).
pub fn node_with(src: &Source, libs: Libraries, opts: &live::Options) -> Node {
    node_timed_with(src, libs, opts).0
}

/// Open the source the user asked for and collect the node: the common start of check, topo and
/// probe. `libs`: on the live node, also ask NVML, CUDA and libibverbs (in a worker process).
/// The source is returned with the node: it holds the unpacked snapshot until the command ends.
pub fn load_node(at: crate::source::Location, libs: Libraries) -> Result<(Source, Node), String> {
    load_node_with(at, libs, &live::Options::default())
}

/// [`load_node`] with the live-facts options (the CUDA cache).
pub fn load_node_with(
    at: crate::source::Location,
    libs: Libraries,
    opts: &live::Options,
) -> Result<(Source, Node), String> {
    let src = crate::sys::trace::timed("source.open", || Source::open(at))?;
    let node = node_with(&src, libs, opts);
    Ok((src, node))
}

/// `--nccl-version`: the rules of that version, whatever the node has.
pub fn apply_nccl_version(node: &mut Node, version: Option<&str>) {
    let Some(v) = version else { return };
    match &mut node.live.nccl {
        Fact::Known { value, .. } => value.requested = Some(v.to_string()),
        f @ Fact::Absent { .. } => {
            *f = Fact::known(
                gdrdoctor_checks::model::NcclFacts {
                    requested: Some(v.to_string()),
                    ..Default::default()
                },
                "--nccl-version",
            )
        }
    }
}

/// `--nccl-version` and the `NCCL_*` variables of this run, which overlay the paste's.
pub fn assume(nccl_version: Option<&str>) -> gdrdoctor_checks::paste::report::Assume {
    gdrdoctor_checks::paste::report::Assume {
        nccl_version: nccl_version.map(str::to_string),
        env: relevant_env()
            .into_iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .collect(),
        ..Default::default()
    }
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

/// The file collectors on three threads: the PCI functions (the most files, and config space)
/// on this one; the kernel log (`/dev/kmsg` can hold a megabyte) on another; everything else
/// on a third, with the RDMA half of the health collector (RoCE, port counters) once the RDMA
/// list is there; then the AER files, which need both lists.
fn files_timed(root: &Root, origin: Origin, meta: Option<&Meta>) -> (Node, Vec<Timing>) {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let (pci, rest, klog) = std::thread::scope(|s| {
        let klog = s.spawn(|| {
            crate::sys::trace::timed("collect.kernel-log", || {
                crate::collect::health::kernel_log::collect(root)
            })
        });
        let rest = s.spawn(|| {
            let tb = &mut tb;
            let host = timed(tb, "host", || host::collect(root, origin, meta));
            let kernel = timed(tb, "kernel", || kernel::collect(root));
            let process = timed(tb, "process", || process::collect(root, origin, meta));
            let iommu = timed(tb, "iommu", || iommu::collect(root));
            let nvidia = timed(tb, "nvidia", || nvidia::collect(root));
            let peermem = timed(tb, "peermem", || peermem::collect(root));
            let rdma = timed(tb, "rdma", || rdma::collect(root));
            let addons = timed(tb, "addons", || addons::collect(root, origin));
            let cpu_model = addons::cpu_model(root);
            // The health collector's RDMA half needs only the RDMA list: read it now.
            let side = crate::sys::trace::timed("collect.health-rdma", || {
                crate::collect::health::collect_rdma_side(root, &rdma)
            });
            (
                host,
                kernel,
                process,
                iommu,
                nvidia,
                peermem,
                rdma,
                side,
                (addons, cpu_model),
            )
        });
        let pci = timed(&mut ta, "pci", || pci::collect(root));
        (pci, rest.join(), klog.join())
    });
    // A collector thread that panicked: the whole collection is wrong; run it again here,
    // where the panic reaches the caller as it did before the threads.
    let (host, kernel, process, iommu, nvidia, peermem, rdma, side, (addons, cpu_model)) =
        match rest {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        };
    let klog = match klog {
        Ok(k) => k,
        Err(p) => std::panic::resume_unwind(p),
    };
    let mut t = Vec::new();
    for name in [
        "host", "kernel", "process", "pci", "iommu", "nvidia", "peermem", "rdma", "addons",
    ] {
        if let Some(x) = ta.iter().chain(&tb).find(|x| x.collector == name) {
            t.push(x.clone());
        }
    }
    let health = timed(&mut t, "health", || {
        let mut h = crate::collect::health::collect_with(root, &pci, &rdma, side, klog);
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
        // One reason for every source, so that a live node and its snapshot agree: the view
        // is judged only when asked for, inside the job's container (`cmd/check.rs`).
        container: Fact::absent(
            "container view",
            "not asked for: `gdrdoctor check --in-container`, run inside the job's container, judges what a job there can use",
        ),
        cpu_model,
        addons,
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
        match crate::collect::health::kernel_log::read_kmsg(&shown) {
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
            .join("fixtures/nodes/hgx-h200x8-cx7x8-healthy.tar.gz");
        let src = Source::open(Location::Sysroot(&dir)).unwrap();
        let (node, timings) = node_timed(&src, Libraries::Query);
        let names: Vec<&str> = timings.iter().map(|t| t.collector).collect();
        assert_eq!(
            names,
            [
                "host", "kernel", "process", "pci", "iommu", "nvidia", "peermem", "rdma", "addons",
                "health", "live"
            ]
        );
        // A snapshot never asks this machine's libraries: its live facts are its own.
        assert!(node.live.cuda.get().is_some_and(|c| c.devices.len() == 8));
        assert_eq!(node.source, SourceKind::Sysroot);
        assert_eq!(node.pci.get().map(|p| p.len() > 16), Some(true));
    }
}
