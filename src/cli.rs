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

#[derive(Debug, Parser)]
#[command(
    name = "gdrdoctor",
    version = crate::VERSION,
    about = "Diagnose GPUDirect RDMA on GPU cluster nodes: will GPU-to-NIC RDMA work here, and if not, why",
    long_about = "Diagnose GPUDirect RDMA on GPU cluster nodes.\n\n\
gdrdoctor reads the node (sysfs, procfs, the NVIDIA driver's files) and answers one question: will \
GPU-to-NIC RDMA work here, and if not, exactly why and what to change. Run it first on a new node, \
gate CI preflight on its exit code, attach a snapshot to a bug report.",
    after_long_help = "Examples:\n  gdrdoctor check                       # static checks of this node, as a table\n  gdrdoctor check --format json > r.json\n  gdrdoctor check --only rdma,iommu     # only some categories\n  gdrdoctor snapshot node.tar.gz        # capture what the checks read\n  gdrdoctor check --sysroot node.tar.gz # ... and check it anywhere\n  gdrdoctor explain kmod.nvidia-peermem\n  gdrdoctor list\n  gdrdoctor policy init -o policy.toml  # the site's expectations, from a golden node\n  gdrdoctor check --policy policy.toml\n  gdrdoctor fleet reports/              # many nodes' JSON reports: failures and drift"
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
        "  gdrdoctor check --only kernel,roce                # Xids since boot, RoCE addressing\n",
        "  gdrdoctor check --policy site.toml                # also judge against the site policy\n",
        "  gdrdoctor check --format oneline                  # one line < 80 chars (NHC, node-problem-detector)\n",
        "  GDRDOCTOR_TRACE=1 gdrdoctor check                 # where the time goes, per phase\n\n",
        "CUDA's answers (cuInit and device attributes; never a context) are kept for the rest of \
the boot in /run/gdrdoctor/cuda-facts.json, per driver and GPU set, so most runs start no CUDA; \
--no-cache asks CUDA anyway. GPUs in an exclusive or prohibited compute mode are left out of \
CUDA (a job may hold them).\n\n",
        "Error counters only grow, so one reading says little. `--interval` reads the node twice \
and judges the second reading against the first one's counters; without it, each live run \
records the counters in /run/gdrdoctor/counters.json (--state-dir, \
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
gdrdoctor topo --format svg -o topo.svg # the PCIe tree with the verdicts, for a browser\n  \
gdrdoctor topo --format png -o topo.png --sysroot node.tar.gz\n  \
gdrdoctor topo --nccl-version 2.18.6   # judge for an older NCCL\n  \
gdrdoctor topo --sysroot node.tar.gz\n  gdrdoctor topo --nvidia-smi pasted.txt --nccl-version 2.21.5"
    )]
    Topo {
        /// Read a snapshot instead of the live node
        #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
        sysroot: Option<PathBuf>,
        /// Read the host through DIR, where a container mounts the host's `/` (Kubernetes: hostPath `/`
        /// at /host, read-only): the host's /proc, /sys and /etc are read as the live host's (a
        /// missing file is absent on the host; symlinks, absolute ones too, resolve inside DIR).
        /// NVML, CUDA and libibverbs are the container's (checks that need them skip when it has
        /// none or sees fewer devices than the host); RLIMIT_MEMLOCK is the container runtime's
        /// (containerd, cri-o, dockerd: the pods inherit it), read from DIR/proc
        #[arg(long, value_name = "DIR", conflicts_with_all = ["sysroot", "nvidia_smi"])]
        host_root: Option<PathBuf>,
        /// text (default), json, or a picture of the PCIe tree with the verdicts: svg (hover a
        /// GPU for its routes, a box for its findings) or png
        #[arg(long, short = 'f', value_enum, default_value_t = TopoFormat::Text)]
        format: TopoFormat,
        /// Write to FILE instead of stdout (png is never written to a terminal); a device or
        /// FIFO is written in place, `-` is stdout
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// Read a pasted `nvidia-smi topo -m` (a file, or - for stdin) instead of a node: NCCL's
        /// verdict per pair (PXN from the NV# cells; peer memory, dma-buf and ports unknown
        /// unless the file shows them) and the rail balance, for bug reports without a
        /// snapshot. The same reader and rule as `gdrdoctor diagnose` (its JSON schema:
        /// gdrdoctor.topo-paste/v1)
        #[arg(long, value_name = "FILE", conflicts_with = "sysroot")]
        nvidia_smi: Option<PathBuf>,
        /// Judge with this NCCL version's rules (e.g. 2.18.6) instead of the libnccl.so.2
        /// found on the node (with --nvidia-smi: instead of the version in a pasted NCCL log;
        /// with none found, the newest rules gdrdoctor knows)
        #[arg(long, value_name = "X.Y.Z", value_parser = parse_nccl_version)]
        nccl_version: Option<String>,
    },
    /// Diagnose from pasted command output (topo -m, NCCL logs, lspci -vvv, ibv_devinfo, lsmod,
    /// nvidia-smi -q, dmesg): the same checks and GDR verdicts, for bug reports
    #[command(after_long_help = concat!(
        "Give it what people paste into a bug report, in any mix and order: several outputs in one \
file are fine, each block is recognised by its shape (not by the file name). Damaged text is \
repaired where that is unambiguous (ANSI escapes, CRLF, `> ` quotes, cells glued or wrapped by a \
terminal, a lost header) and the repair is reported; what cannot be trusted gets no verdict. What \
the paste does not show is `skip` with the command that shows it, never `pass`.\n\n",
        "Reads: nvidia-smi topo -m/-mp, NCCL_DEBUG=INFO/WARN logs (2.4-2.30), lspci -vvv[-xxxx] and \
lspci -tv, ibv_devinfo [-v], ibstat/ibstatus, lsmod (whole, or `| grep` with the command shown), \
/proc/modules, nvidia-smi -q, /proc/cmdline, /proc/driver/nvidia/version, dmesg, uname -a, ulimit -l, \
NCCL_* environment lines.\n\n",
        "Examples:\n",
        "  gdrdoctor diagnose issue.txt                   # everything pasted in one file\n",
        "  gdrdoctor diagnose topo.txt nccl.log lsmod.txt\n",
        "  pbpaste | gdrdoctor diagnose -                 # from the clipboard\n",
        "  gdrdoctor diagnose issue.txt --format markdown # to paste back into the issue\n",
        "  gdrdoctor diagnose issue.txt --format json     # schema gdrdoctor.diagnose/v1\n",
        "  gdrdoctor diagnose topo.txt --nccl-version 2.18.6  # judge for the NCCL the job used\n\n",
        "GDR verdicts follow NCCL's rule for the version in the pasted log (or --nccl-version), with \
the NCCL_* settings the log or the paste shows; NCCL_* variables set where gdrdoctor runs overlay \
them (to ask \"what if\").\n\n",
        "Exit codes:\n",
        "  0  nothing failed (warnings allowed unless --fail-on warn)\n",
        "  1  at least one check failed\n",
        "  2  gdrdoctor could not run (unreadable file, nothing recognisable in the input)\n",
        "  3  nothing failed, but part of the paste could not be read (status error)"
    ))]
    Diagnose(DiagnoseArgs),
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
    /// Site policy: write one from a known-good node (`init`) or check a file (`validate`)
    #[command(
        subcommand,
        after_long_help = "A policy states what the site expects of a node (gpu count and model, rdma \
devices, port state/rate/width, pcie links, driver, firmware, peer memory, iommu, gdr pairs, kernel \
and command line), with severity overrides and waivers that carry a reason and an expiry date. \
`gdrdoctor check --policy FILE` adds policy.* findings; live runs read /etc/gdrdoctor/policy.toml \
when it exists (--no-policy turns it off). Guide: docs/guides/fleet.md.\n\nExamples:\n  \
sudo gdrdoctor policy init -o /etc/gdrdoctor/policy.toml\n  \
gdrdoctor policy validate /etc/gdrdoctor/policy.toml\n  \
gdrdoctor check --policy /etc/gdrdoctor/policy.toml --format oneline"
    )]
    Policy(PolicyCommand),
    /// Roll up many nodes' JSON reports: checks x nodes, the nodes failing each check, and drift
    #[command(after_long_help = concat!(
        "Drift: every inventory field (driver, firmware, kernel, cmdline, NCCL environment, BAR1, \
link states, pci devices, gdr pairs) is compared across nodes; where a minority of nodes differs \
from the majority, the odd nodes are named. A field with no majority value is shown as split.\n\n",
        "Examples:\n",
        "  srun -N64 --ntasks-per-node=1 --output='reports/%N.json' gdrdoctor check -f json\n",
        "  gdrdoctor fleet reports/\n",
        "  srun -N64 --ntasks-per-node=1 --label gdrdoctor check -f json | gdrdoctor fleet -\n",
        "  gdrdoctor fleet reports/ -f prometheus -o /var/lib/node_exporter/textfile_collector/gdrdoctor_fleet.prom\n",
        "  gdrdoctor fleet reports/ --ignore env.,pci. --allow-drift\n",
        "  srun -N64 --ntasks-per-node=1 --output='svgs/%N.svg' gdrdoctor topo --format svg\n",
        "  gdrdoctor fleet reports/ -f html --svg-dir svgs/ -o fleet.html   # open in a browser\n\n",
        "Exit codes (fleet):\n",
        "  0  no node failed and no drift\n",
        "  1  a node failed (its report's exit code is 1), or drift (unless --allow-drift)\n",
        "  2  gdrdoctor could not run (no report could be read at all, usage error)\n",
        "  3  nothing failed, but some reports are unreadable or some nodes incomplete\n",
        "     (unless --allow-incomplete)"
    ))]
    Fleet(FleetArgs),
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
        /// Capture the host whose `/` a container mounts at DIR (see `check --help`): the
        /// host's files, the container's libraries, the container runtime's RLIMIT_MEMLOCK
        #[arg(long, value_name = "DIR", conflicts_with = "sysroot")]
        host_root: Option<PathBuf>,
    },
}

/// `gdrdoctor probe`: the probes and their options come from the probe registry
/// (`crate::probe::PROBES`); the rest says how to report.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub probes: crate::probe::ProbeOptions,
    /// Not for probes: they run GPU and RDMA work in gdrdoctor's own view of the node, so run
    /// them on the host, or in a pod that has the GPUs and /dev/infiniband, without it
    #[arg(long, value_name = "DIR", hide_short_help = true)]
    pub host_root: Option<PathBuf>,
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

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    /// Files holding pasted command output (any mix; several outputs per file are fine); `-`
    /// reads standard input
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// table (default), json (schema gdrdoctor.diagnose/v1) or markdown (to paste back into the
    /// issue thread)
    #[arg(long, short = 'f', value_enum, default_value_t = DiagnoseFormat::Table)]
    pub format: DiagnoseFormat,
    /// Write the report to FILE instead of stdout: a regular file is replaced atomically, a
    /// device or FIFO is written in place, `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Report only these checks: ids or categories, comma-separated (e.g. nccl,gdr.gpu)
    #[arg(long, value_delimiter = ',', value_name = "ID|CATEGORY")]
    pub only: Vec<String>,
    /// Leave out these checks: ids or categories
    #[arg(long, value_delimiter = ',', value_name = "ID|CATEGORY")]
    pub skip: Vec<String>,
    /// The lowest status that makes the exit code 1
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when part of the paste could not be read
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing and skipped checks too
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Judge GDR with this NCCL version's rules (e.g. 2.18.6) instead of the version in the
    /// pasted NCCL log (or, with none, the newest rules gdrdoctor knows)
    #[arg(long, value_name = "X.Y.Z", value_parser = parse_nccl_version)]
    pub nccl_version: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiagnoseFormat {
    /// Human table, the GPU x NIC view, details under each finding that is not a pass
    Table,
    /// The versioned report (schema gdrdoctor.diagnose/v1)
    Json,
    /// GitHub-flavoured Markdown to paste back into the issue thread
    Markdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopoFormat {
    /// The GPU x NIC matrix (default)
    Text,
    /// The same data, schema gdrdoctor.topo/v1
    Json,
    /// The PCIe tree drawn like lstopo's I/O view, with findings and GDR paths; open it in a
    /// browser
    Svg,
    /// The same picture as a PNG (needs a monospace font installed, e.g. fonts-dejavu-core)
    Png,
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
    /// Read the host through DIR, where a container mounts the host's `/` (Kubernetes: hostPath `/`
    /// at /host, read-only): the host's /proc, /sys and /etc are read as the live host's (a
    /// missing file is absent on the host; symlinks, absolute ones too, resolve inside DIR).
    /// NVML, CUDA and libibverbs are the container's (checks that need them skip when it has
    /// none or sees fewer devices than the host); RLIMIT_MEMLOCK is the container runtime's
    /// (containerd, cri-o, dockerd: the pods inherit it), read from DIR/proc
    #[arg(long, value_name = "DIR", conflicts_with = "sysroot")]
    pub host_root: Option<PathBuf>,
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
    #[arg(long, value_name = "DURATION", value_parser = crate::sys::clock::parse_duration)]
    pub interval: Option<std::time::Duration>,
    /// Where periodic runs keep the last run's counters, to judge their growth since then
    #[arg(long, value_name = "DIR", env = "GDRDOCTOR_STATE_DIR", default_value = crate::state::DEFAULT_DIR)]
    pub state_dir: PathBuf,
    /// Neither read nor write the counter state file (counters are then judged on one reading
    /// unless --interval is given)
    #[arg(long)]
    pub no_state: bool,
    /// Ask CUDA in this run instead of using the answers kept from an earlier run of this boot
    /// (cuda-facts.json in the state directory; kept per driver and GPU set), and keep none
    #[arg(long)]
    pub no_cache: bool,
    /// Also judge the node against a site policy (TOML: the gpus, ports, firmware, driver,
    /// kernel command line the site expects, severity overrides, waivers; `gdrdoctor policy
    /// init` writes one). Live runs read /etc/gdrdoctor/policy.toml by default when it exists
    #[arg(long, value_name = "FILE", env = "GDRDOCTOR_POLICY")]
    pub policy: Option<PathBuf>,
    /// Apply no policy at all, not even /etc/gdrdoctor/policy.toml (wins over --policy)
    #[arg(long)]
    pub no_policy: bool,
}

/// `--nccl-version`: `2.28.9`, `2.28` or `v2.28.9-1`.
fn parse_nccl_version(s: &str) -> Result<String, String> {
    gdrdoctor_checks::nccl::Version::parse(s)
        .map(|v| v.to_string())
        .ok_or_else(|| format!("`{s}` is not an NCCL 2.x version (expected e.g. 2.28.9)"))
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Write a commented policy that this node (or a snapshot) passes: start from the golden node
    #[command(
        after_long_help = "The policy states what the golden node shows: gpu count and model, rdma devices, \
port state/link layer/rate/width, firmware, pcie links per class, driver, peer-memory mechanism, iommu \
mode, gdr pairs, kernel release and command line. Delete what your site does not want to enforce; \
per-node command-line keys (root, resume) are ignored.\n\nExamples:\n  \
sudo gdrdoctor policy init -o /etc/gdrdoctor/policy.toml     # on the golden node\n  \
gdrdoctor policy init --sysroot golden.tar.gz -o policy.toml\n  \
gdrdoctor check --policy policy.toml --sysroot other-node.tar.gz"
    )]
    Init {
        /// Read a snapshot instead of the live node
        #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
        sysroot: Option<PathBuf>,
        /// Write the policy to FILE instead of stdout (a device or FIFO is written in place,
        /// `-` is stdout)
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// Overwrite FILE when it exists
        #[arg(long)]
        force: bool,
        /// Do not query NVML, the CUDA driver and libibverbs
        #[arg(long = "static")]
        static_only: bool,
    },
    /// Check a policy file without a node: exit 0 when valid, 2 naming the line of the error
    #[command(
        after_long_help = "Examples:\n  gdrdoctor policy validate /etc/gdrdoctor/policy.toml"
    )]
    Validate {
        /// The policy file (TOML)
        file: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FleetFormat {
    /// Checks x nodes, failing nodes, drift (default)
    Table,
    /// The roll-up as JSON (schema gdrdoctor.fleet/v1)
    Json,
    /// Prometheus text exposition (counts per check and status, drift per field)
    Prometheus,
    /// One self-contained HTML page (no network): a sortable, filterable heat map of checks x
    /// nodes, the drift table, per node its findings, a link to its report and (--svg-dir) its
    /// topology picture
    Html,
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// JSON reports (`gdrdoctor check -f json`): files, directories (every *.json below them),
    /// or - for stdin (one or more reports; `srun --label` output is split by task)
    #[arg(required = true, value_name = "REPORTS")]
    pub reports: Vec<PathBuf>,
    /// Output format
    #[arg(long, short = 'f', value_enum, default_value_t = FleetFormat::Table)]
    pub format: FleetFormat,
    /// Write the roll-up to FILE (atomically) instead of stdout; a device or FIFO is written
    /// in place, `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Show drift, but do not let it make the exit code 1
    #[arg(long)]
    pub allow_drift: bool,
    /// Exit 0 instead of 3 when some reports are unreadable or some nodes could not evaluate
    /// every check
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Leave fields out of the drift analysis: names or prefixes as the drift table prints them
    /// (e.g. cmdline.BOOT_IMAGE, env., pci.)
    #[arg(long, value_delimiter = ',', value_name = "FIELD")]
    pub ignore: Vec<String>,
    /// Node names shown per row in the table (the JSON always lists every node)
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub max_names: usize,
    /// With --format html: a directory of topology pictures, `<node>.svg` as written by
    /// `gdrdoctor topo --format svg` (node = hostname, or the report file's name without
    /// .json), inlined in each node's section
    #[arg(long, value_name = "DIR")]
    pub svg_dir: Option<PathBuf>,
}

pub fn exit_codes_text() -> &'static str {
    EXIT_CODES
}
