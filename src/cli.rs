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
    version,
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
        "  gdrdoctor check --policy site.toml                     # also judge against the site policy\n",
        "  gdrdoctor check --format oneline                       # one line < 80 chars (NHC, node-problem-detector)\n\n",
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
one gets the reason. NCCL_NET_GDR_LEVEL in the environment is honoured (with --sysroot, the \
snapshot's environment overlaid by the current one).\n\nExamples:\n  gdrdoctor topo\n  \
gdrdoctor topo --format json\n  NCCL_NET_GDR_LEVEL=SYS gdrdoctor topo\n  gdrdoctor topo --sysroot node.tar.gz"
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
    },
    /// Live probes on this node's GPUs (each in a worker process with a deadline)
    #[command(after_long_help = concat!(
        "Probes run on the live node only. The parent never creates a CUDA context: each probe runs in a \
worker process that the parent kills at the deadline, then a fresh process confirms the GPU is healthy.\n\n",
        "Examples:\n",
        "  gdrdoctor probe --registration            # can GPU memory be exported and registered for RDMA?\n",
        "  gdrdoctor probe --registration --gpu 0 --format json\n",
        "  gdrdoctor probe --hang                    # healthy spin-wait protocols, timed\n",
        "  gdrdoctor probe --hang --inject all       # every injected fault must be caught and classified\n",
        "  gdrdoctor probe --hang --inject never-set --hang-timeout 200\n",
        "  gdrdoctor probe --doorbell                # doorbell offsets, GPU write path, store latency\n",
        "  gdrdoctor probe --doorbell --lspci nic.txt --allow-mmio-write\n",
        "  gdrdoctor probe --p2p                     # peer bandwidth per gpu pair vs the link rate\n",
        "  gdrdoctor probe --hang --inject remote-wait --peer 1\n\n",
        "Exit codes (check, probe):\n",
        "  0  nothing failed (warnings allowed unless --fail-on warn)\n",
        "  1  at least one check failed\n",
        "  2  gdrdoctor could not run (usage error, unreadable sysroot)\n",
        "  3  nothing failed, but some checks could not be evaluated (status error);\n",
        "     a CI gate must not read this as healthy unless it passes --allow-incomplete"
    ))]
    Probe(ProbeArgs),
    /// List every check: id, category and what it verifies
    List {
        /// Output format
        #[arg(long, value_enum, default_value_t = ListFormat::Table)]
        format: ListFormat,
    },
    /// Print the long-form page of one check: why it matters, how it is detected, how to fix it
    Explain {
        /// A check id, as `gdrdoctor list` shows it (e.g. iommu.mode)
        id: String,
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
        "  gdrdoctor fleet reports/ --ignore env.,pci. --allow-drift\n\n",
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
RLIMIT_MEMLOCK, euid, NCCL_*/NVSHMEM_* environment). It contains the hostname: review it before \
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

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Allocate, export (dma-buf) and register GPU memory, timing each step
    #[arg(long)]
    pub registration: bool,
    /// Run spin-wait protocols on the GPU and watch them for stalls (healthy protocols by default)
    #[arg(long)]
    pub hang: bool,
    /// Check doorbell arithmetic and the GPU-to-NIC write path: an emulated mlx5 doorbell page
    /// rung by the GPU (always), store-flavour latency, and a real mlx5 UAR when there is one
    #[arg(long)]
    pub doorbell: bool,
    /// Peer copy bandwidth and latency for every GPU pair (both directions and both at once),
    /// against the link's theoretical rate; one GPU: a copy reference inside it
    #[arg(long)]
    pub p2p: bool,
    /// With --p2p: bytes per copy, in MiB
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub p2p_size: usize,
    /// With --doorbell: rings per store flavour for the latency table
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub rings: u32,
    /// With --doorbell: a saved `lspci -vv -s <nic>` to cross-check the NIC's BAR0 against
    #[arg(long, value_name = "FILE")]
    pub lspci: Option<PathBuf>,
    /// With --doorbell: let the GPU write the real doorbell once (value 0, a dedicated UAR with
    /// no queue); without it nothing is written to the NIC
    #[arg(long)]
    pub allow_mmio_write: bool,
    /// With --hang: inject faults, comma-separated (never-set, occupancy, ordering, stale-read,
    /// silent, ignore-abort, remote-wait) or `all`; each runs beside a healthy control
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub inject: Vec<String>,
    /// With --hang: a waiter without progress for this long is a stall (warning at half)
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub hang_timeout: u64,
    /// With --hang: how often the host detector polls the records
    #[arg(long, value_name = "MS", default_value_t = 10)]
    pub poll_ms: u64,
    /// With --hang: measure detection latency over N stalls, instrumentation overhead and host
    /// poll cost
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub bench: usize,
    /// With --hang or --doorbell: use the PTX carried in the binary even when NVRTC is available
    #[arg(long)]
    pub ptx: bool,
    /// The peer GPU (CUDA ordinal). --hang --inject remote-wait: default GPU 1 (GPU 0 when
    /// --gpu is not 0), the GPU itself (loopback) on a one-GPU node; --p2p: with --gpu, measure
    /// only that pair
    #[arg(long, value_name = "N")]
    pub peer: Option<u32>,
    /// Only this GPU (CUDA ordinal); default: every GPU for --registration, GPU 0 for --hang
    /// and --doorbell
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Repeat the timed steps N times and report medians and p90 (registration); with --p2p:
    /// copies per measurement (at least 20)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: u32,
    /// Kill a probe worker that runs longer than this many seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout: u64,
    /// Output format
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the report to FILE instead of stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// The lowest status that makes the exit code 1
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when some probes could not run
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing probes too
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
    /// Write the report to FILE (atomically: temp file + rename) instead of stdout
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
    /// Also judge the node against a site policy (TOML: the gpus, ports, firmware, driver,
    /// kernel command line the site expects, severity overrides, waivers; `gdrdoctor policy
    /// init` writes one). Live runs read /etc/gdrdoctor/policy.toml by default when it exists
    #[arg(long, value_name = "FILE", env = "GDRDOCTOR_POLICY")]
    pub policy: Option<PathBuf>,
    /// Apply no policy at all, not even /etc/gdrdoctor/policy.toml (wins over --policy)
    #[arg(long)]
    pub no_policy: bool,
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
        /// Write the policy to FILE instead of stdout
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
    /// Write the roll-up to FILE (atomically) instead of stdout
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
}

pub fn exit_codes_text() -> &'static str {
    EXIT_CODES
}
