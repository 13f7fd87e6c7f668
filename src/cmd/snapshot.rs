//! `gdrdoctor snapshot OUT`: capture every file the checks read, with the live libraries' facts,
//! for `--sysroot` and bug reports (`crate::collect::snapshot` writes it).

use crate::collect::{self, Libraries};
use crate::output::args::LiveArgs;
use crate::output::fail;
use crate::source::{Location, Source};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "The snapshot holds exactly the files the collectors read, with sysfs \
symlinks kept as symlinks, and gdrdoctor/meta.json for what only a live call sees (uname, \
RLIMIT_MEMLOCK, euid, NCCL_*/NVSHMEM_* environment), gdrdoctor/kernel-log.txt (only the kernel log \
lines about Xids, IOMMU faults and mlx5 health) and, when the last periodic check left a valid \
counter state file, gdrdoctor/counters-baseline.json. It contains the hostname: review it before \
sharing.\n\nExamples:\n  sudo gdrdoctor snapshot node-a/\n  sudo gdrdoctor snapshot node-a.tar.gz\n  gdrdoctor check --sysroot node-a.tar.gz"
)]
pub struct Args {
    /// Output: a new directory, or a file ending in .tar.gz / .tgz
    pub out: PathBuf,
    /// Re-capture from another sysroot instead of the live node (prunes it to what the checks read)
    #[arg(long, value_name = "DIR|TAR.GZ")]
    pub sysroot: Option<PathBuf>,
    /// Capture the host whose `/` a container mounts at DIR (see `check --help`): the
    /// host's files, the container's libraries, the container runtime's RLIMIT_MEMLOCK
    #[arg(long, value_name = "DIR", conflicts_with = "sysroot")]
    pub host_root: Option<PathBuf>,
    /// Replace OUT when it exists (a file, or a symbolic link, which is replaced, never
    /// followed); without it an existing OUT is refused
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub live: LiveArgs,
}

pub fn run(args: &Args) -> i32 {
    let out = args.out.as_path();
    let tgz = out.extension().is_some_and(|e| e == "gz" || e == "tgz");
    if tgz && std::fs::symlink_metadata(out).is_ok() && !args.force {
        return fail(format!(
            "{}: exists; pass --force to replace it (a symbolic link there is replaced, never followed)",
            out.display()
        ));
    }
    let at = Location::from_args(args.sysroot.as_deref(), args.host_root.as_deref());
    let src = match Source::open(at) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let t0 = std::time::Instant::now();
    // Live library facts: from the node's libraries, or carried over from the sysroot.
    // Keep the last periodic run's counters as the snapshot's baseline (issue 17).
    collect::health::SNAPSHOT_USES_STATE.store(true, std::sync::atomic::Ordering::Relaxed);
    // CUDA's answers through the boot's cache, as `check` takes them (`--no-cache` asks CUDA).
    let mut live = collect::live::collect_with(&src, Libraries::Query, &args.live.options());
    if src.origin == crate::source::Origin::HostRoot {
        // What the container's libraries cannot see of the host is not kept as the host's.
        collect::live::host_root_visibility(&mut live, &collect::files(&src));
    }
    match crate::collect::snapshot::take_source(src.recording(), out, Some(&live)) {
        Ok((node, w)) => {
            if node.euid.get() != Some(&0)
                && node.source == gdrdoctor_checks::model::SourceKind::Live
            {
                eprintln!("gdrdoctor: note: not running as root: PCI config space is captured as 64 bytes only");
            }
            eprintln!(
                "gdrdoctor: wrote {} ({} files, {} links, {} dirs, {} bytes) in {:.0} ms",
                out.display(),
                w.files,
                w.links,
                w.dirs,
                w.bytes,
                t0.elapsed().as_secs_f64() * 1e3
            );
            0
        }
        Err(e) => fail(e),
    }
}
