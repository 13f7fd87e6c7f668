//! Command-line interface. `--help` teaches: every flag says what it is for, every command ends
//! with examples and the exit-code contract.

use crate::render::Format;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const EXIT_CODES: &str = "\
Exit codes (check, probe):
  0  nothing failed (warnings allowed unless --fail-on warn)
  1  at least one check failed
  2  gdrdoctor could not run (usage error, unreadable sysroot)
  3  nothing failed, but some checks could not be evaluated (status error);
     a CI gate must not read this as healthy unless it passes --allow-incomplete";

/// `gdrdoctor --version`: the package version, the git commit it was built from (`unknown` from
/// a source tarball) and the target it was built for (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GDRDOCTOR_GIT_COMMIT"),
    ", target ",
    env!("GDRDOCTOR_TARGET"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "gdrdoctor",
    version = VERSION,
    about = "Diagnose GPUDirect RDMA on GPU cluster nodes: will GPU-to-NIC RDMA work here, and if not, why",
    long_about = "Diagnose GPUDirect RDMA on GPU cluster nodes.\n\n\
gdrdoctor reads the node (sysfs, procfs, the NVIDIA driver's files) and answers one question: will \
GPU-to-NIC RDMA work here, and if not, exactly why and what to change. Run it first on a new node, \
gate CI preflight on its exit code, attach a snapshot to a bug report.",
    after_long_help = "Examples:\n  gdrdoctor check                       # static checks of this node, as a table\n  gdrdoctor check --format json > r.json\n  gdrdoctor check --only rdma,iommu     # only some categories\n  gdrdoctor snapshot node.tar.gz        # capture what the checks read\n  gdrdoctor check --sysroot node.tar.gz # ... and check it anywhere\n  gdrdoctor explain kmod.nvidia-peermem\n  gdrdoctor list\n  gdrdoctor completions bash > /etc/bash_completion.d/gdrdoctor"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the static checks on this node (or on a snapshot with --sysroot)
    #[command(after_long_help = concat!(
        "Examples:\n",
        "  gdrdoctor check\n",
        "  gdrdoctor check --format junit -o gdrdoctor.xml        # CI\n",
        "  gdrdoctor check --format prometheus -o /var/lib/node_exporter/textfile/gdrdoctor.prom\n",
        "  gdrdoctor check --fail-on warn --allow-incomplete      # strict gate, tolerate non-root\n",
        "  gdrdoctor check --sysroot snapshot/ --only kmod --skip kmod.nv-peer-mem\n",
        "  gdrdoctor check --interval 10s --only counters    # is a link flapping right now?\n",
        "  gdrdoctor check --only kernel,roce                # Xids since boot, RoCE addressing\n\n",
        "Error counters only grow, so one reading says little. `--interval` reads them twice; \
without it, each live run records the counters in /run/gdrdoctor/counters.json (--state-dir, \
GDRDOCTOR_STATE_DIR) and the next run of the same boot judges the growth since then: run \
`check` from a timer and a rising counter fails the run that sees it.\n\n",
        "Run as root for the full picture: PCI config space beyond 64 bytes is root-only.\n\n",
        "Exit codes (check, probe):\n",
        "  0  nothing failed (warnings allowed unless --fail-on warn)\n",
        "  1  at least one check failed\n",
        "  2  gdrdoctor could not run (usage error, unreadable sysroot)\n",
        "  3  nothing failed, but some checks could not be evaluated (status error);\n",
        "     a CI gate must not read this as healthy unless it passes --allow-incomplete"
    ))]
    Check(CheckArgs),
    /// The GPU x NIC matrix: PCIe path per pair as NCCL computes it, and whether GDR is used
    #[command(
        after_long_help = "Like `nvidia-smi topo -m`, but for GPUs against RDMA devices, with NCCL's own \
decision per pair: `*` marks the pairs NCCL would use GPUDirect RDMA for, and every GPU without \
one gets the reason. The rules are those of the NCCL found on the node (libnccl.so.2 on the \
loader path or in a Python environment; --nccl-version to choose), with PXN (sends through an \
NVLink peer), the read gate (sends from pre-Ampere GPUs without NVLink) and Grace C2C. The NCCL_* \
variables that change the answer are honoured: NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ, \
NCCL_NET_GDR_C2C, NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_PXN_DISABLE, NCCL_P2P_LEVEL, NCCL_P2P_DISABLE \
(with --sysroot, the snapshot's environment overlaid by the current one).\n\nExamples:\n  \
gdrdoctor topo\n  gdrdoctor topo --format json\n  NCCL_NET_GDR_LEVEL=SYS gdrdoctor topo\n  \
NCCL_IB_HCA=^mlx5_4 gdrdoctor topo     # what if the job excludes a NIC\n  \
gdrdoctor topo --nccl-version 2.18.6   # judge for an older NCCL\n  \
gdrdoctor topo --sysroot node.tar.gz\n  gdrdoctor topo --nvidia-smi pasted.txt --nccl-version 2.21.5"
    )]
    Topo {
        /// Read a snapshot instead of the live node
        #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
        sysroot: Option<PathBuf>,
        /// text (default) or json
        #[arg(long, short = 'f', value_enum, default_value_t = TopoFormat::Text)]
        format: TopoFormat,
        /// Read a pasted `nvidia-smi topo -m` (a file, or - for stdin) instead of a node: the
        /// per-pair distance verdict and the rail balance, for bug reports without a snapshot
        #[arg(long, value_name = "FILE", conflicts_with = "sysroot")]
        nvidia_smi: Option<PathBuf>,
        /// Judge with this NCCL version's rules (e.g. 2.18.6) instead of the libnccl.so.2
        /// found on the node (or, with none found, the newest rules gdrdoctor knows)
        #[arg(long, value_name = "X.Y.Z", value_parser = parse_nccl_version)]
        nccl_version: Option<String>,
    },
    /// Live probes on this node's GPUs (each in a worker process with a deadline)
    #[command(after_long_help = format!("{}\n{EXIT_CODES}", crate::probe::help_examples()))]
    Probe(ProbeArgs),
    /// Watch your own kernels (instrumented with kernels/include/gdrdoctor/progress.cuh) for
    /// stalled spin-waits: who waits on what, for how long, and why
    #[command(after_long_help = concat!(
        "A job that includes kernels/include/gdrdoctor/progress.cuh publishes one record per warp in \
/dev/shm/gdrdoctor-<pid>-<n>. watch reads those files (it needs no CUDA and never writes to the job \
unless --abort) and reports every waiter stalled for --threshold or longer: kernel, block, warp, SM, \
wait site, address, expected and observed value, for how long, and the class of cause \
(spin-stall, forward-progress, ordering, stale-read, silent, remote-wait: those of \
`probe --hang`). Live stalls are printed on stderr as they happen; the report (--format) comes \
at the end: when the job exits, on Ctrl-C, after --duration, or at once with --once. \
docs/guides/watch.md shows how to instrument a kernel in three lines.\n\n",
        "Examples:\n",
        "  gdrdoctor watch --pid 4242                 # follow one job until it exits\n",
        "  gdrdoctor watch --pid 4242 --once          # snapshot a hung job now (like py-spy dump)\n",
        "  gdrdoctor watch --all --once --format json # every instrumented job on this node\n",
        "  gdrdoctor watch --pid 4242 --once --abort  # ... and ask its stalled waits to return\n",
        "  gdrdoctor watch --pid 4242 --threshold 200 --duration 60\n",
        "  gdrdoctor watch --pid 4242 --shm-dir /proc/4242/root/dev/shm   # a job in a container\n\n",
        "Exit codes (as check):\n",
        "  0  no stall (warnings allowed unless --fail-on warn)\n",
        "  1  a waiter stalled (or --abort did not free it)\n",
        "  2  gdrdoctor could not run (usage error, unreadable --shm-dir, --pid without area or process)\n",
        "  3  nothing stalled, but an area could not be read (damaged or foreign: status error)"
    ))]
    Watch(WatchArgs),
    /// List every check: id, category and what it verifies
    List {
        /// Output format
        #[arg(long, value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Print the long-form page of one check: why it matters, how it is detected, how to fix it
    #[command(
        after_long_help = "On a terminal the page is laid out for it (headings, lists, code, wrapped \
to its width) and shown through a pager: $PAGER, else `less -R` (PAGER=cat turns paging off). \
Piped or redirected, the page is printed as plain Markdown.\n\nExamples:\n  \
gdrdoctor explain iommu.mode\n  gdrdoctor explain kmod.nvidia-peermem --no-pager\n  \
gdrdoctor explain pcie.acs-redirect > acs.md"
    )]
    Explain {
        /// A check id, as `gdrdoctor list` shows it (e.g. iommu.mode)
        id: String,
        /// On a terminal, print the laid-out page directly instead of through a pager
        #[arg(long)]
        no_pager: bool,
    },
    /// Print a shell completion script for gdrdoctor (bash, zsh, fish, elvish, powershell)
    #[command(after_long_help = "Examples:\n  \
gdrdoctor completions bash > /etc/bash_completion.d/gdrdoctor\n  \
gdrdoctor completions bash > ~/.local/share/bash-completion/completions/gdrdoctor\n  \
gdrdoctor completions zsh > \"${fpath[1]}/_gdrdoctor\"\n  \
gdrdoctor completions fish > ~/.config/fish/completions/gdrdoctor.fish")]
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write one page per command into a directory
    #[command(after_long_help = "Examples:\n  gdrdoctor man | man -l -\n  \
gdrdoctor man --out-dir /usr/local/share/man/man1   # gdrdoctor.1, gdrdoctor-check.1, ...")]
    Man {
        /// Write gdrdoctor.1 and a gdrdoctor-<command>.1 page per command into DIR instead of
        /// printing gdrdoctor.1
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Capture every file the checks read (plus live-only facts) for --sysroot or a bug report
    #[command(
        after_long_help = "The snapshot holds exactly the files the collectors read, with sysfs \
symlinks kept as symlinks, and gdrdoctor/meta.json for what only a live call sees (uname, \
RLIMIT_MEMLOCK, euid, NCCL_*/NVSHMEM_* environment), gdrdoctor/kernel-log.txt (only the kernel log \
lines about Xids, IOMMU faults and mlx5 health) and, when the last periodic check left a valid \
counter state file, gdrdoctor/counters-baseline.json. It contains the hostname: review it before \
sharing.\n\nExamples:\n  sudo gdrdoctor snapshot node-a/\n  sudo gdrdoctor snapshot node-a.tar.gz\n  gdrdoctor check --sysroot node-a.tar.gz"
    )]
    Snapshot {
        /// Output: a new directory, or a file ending in .tar.gz / .tgz
        out: PathBuf,
        /// Re-capture from another sysroot instead of the live node (prunes it to what the checks read)
        #[arg(long, value_name = "DIR|TAR.GZ")]
        sysroot: Option<PathBuf>,
    },
}

/// `gdrdoctor probe`: the probes and their options come from the probe registry
/// (`crate::probe::PROBES`); the rest says how to report.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub probes: crate::probe::ProbeOptions,
    /// Output format
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to FILE instead of stdout: a regular file is replaced atomically (temp
    /// file + rename), a device, FIFO or symlink (/dev/null, a named pipe) is written in place,
    /// `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// The lowest status that makes the exit code 1
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when some probes could not run (no gpu, no driver)
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing probes too
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Watch the areas of this process only
    #[arg(long, value_name = "PID", conflicts_with = "all")]
    pub pid: Option<u32>,
    /// Watch every area in --shm-dir (the default without --pid)
    #[arg(long)]
    pub all: bool,
    /// Take one snapshot (three polls) and report, instead of following the job until it exits
    #[arg(long)]
    pub once: bool,
    /// Set the cooperative abort flag of every job with a stalled waiter (the only write watch
    /// makes), then wait --grace for the waiters to leave; the instrumented waits return 1
    #[arg(long)]
    pub abort: bool,
    /// A wait unsatisfied for this long is a stall (slow at half)
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub threshold: u64,
    /// How often to read the areas
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub poll_ms: u64,
    /// With --abort: how long the stalled waiters get to leave their waits
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub grace: u64,
    /// Stop following after this many seconds (0: when the watched jobs exit)
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub duration: u64,
    /// Where the jobs publish their areas (a container's: /proc/<pid>/root/dev/shm)
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub shm_dir: PathBuf,
    /// Do not print live stall lines on stderr
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Output format
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to FILE instead of stdout: a regular file is replaced atomically (temp
    /// file + rename), a device, FIFO or symlink (/dev/null, a named pipe) is written in place,
    /// `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// The lowest status that makes the exit code 1
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when an area could not be read
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing findings too
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopoFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Table,
    Json,
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Color when stdout is a terminal, NO_COLOR is unset and TERM is not dumb
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOnArg {
    /// Exit 1 on warnings too
    Warn,
    /// Exit 1 only on failures (default)
    Fail,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Read a snapshot (directory or .tar.gz from `gdrdoctor snapshot`) instead of the live node
    #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
    pub sysroot: Option<PathBuf>,
    /// Output format
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to FILE instead of stdout: a regular file is replaced atomically (temp
    /// file + rename), a device, FIFO or symlink (/dev/null, a named pipe) is written in place,
    /// `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Run only these checks: ids or categories, comma-separated or repeated (e.g. rdma,iommu.mode)
    #[arg(long, value_delimiter = ',', value_name = "ID|CATEGORY")]
    pub only: Vec<String>,
    /// Do not run these checks: ids or categories
    #[arg(long, value_delimiter = ',', value_name = "ID|CATEGORY")]
    pub skip: Vec<String>,
    /// The lowest status that makes the exit code 1
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when some checks could not be evaluated (e.g. not running as root)
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing checks too
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Do not query NVML, the CUDA driver and libibverbs (files only: faster, no worker process)
    #[arg(long = "static")]
    pub static_only: bool,
    /// Judge GDR with this NCCL version's rules (e.g. 2.18.6) instead of the libnccl.so.2
    /// found on the node (or, with none found, the newest rules gdrdoctor knows)
    #[arg(long, value_name = "X.Y.Z", value_parser = parse_nccl_version)]
    pub nccl_version: Option<String>,
    /// Read the error counters (AER, RDMA port, NVLink) twice, this far apart (10s, 500ms, 1m),
    /// and judge how much they grew: a flapping link or a rising error rate shows up here
    #[arg(long, value_name = "DURATION", value_parser = crate::health::parse_duration)]
    pub interval: Option<std::time::Duration>,
    /// Where periodic runs keep the last run's counters, to judge their growth since then
    #[arg(long, value_name = "DIR", env = "GDRDOCTOR_STATE_DIR", default_value = crate::health::state::DEFAULT_DIR)]
    pub state_dir: PathBuf,
    /// Neither read nor write the counter state file (counters are then judged on one reading
    /// unless --interval is given)
    #[arg(long)]
    pub no_state: bool,
}

/// `--nccl-version`: `2.28.9`, `2.28` or `v2.28.9-1`.
fn parse_nccl_version(s: &str) -> Result<String, String> {
    gdrdoctor_checks::nccl::Version::parse(s)
        .map(|v| v.to_string())
        .ok_or_else(|| format!("`{s}` is not an NCCL 2.x version (expected e.g. 2.28.9)"))
}

pub fn exit_codes_text() -> &'static str {
    EXIT_CODES
}
