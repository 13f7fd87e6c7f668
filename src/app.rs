//! The lobby: parse the command line, dispatch to the command (`crate::cmd`), and return its
//! exit code (`crate::output` holds the contract's codes). The hidden `__worker` entry point of
//! the worker processes starts here too, with the task tables of the probes and the collectors.

use crate::cmd;
use crate::output::EXIT_USAGE;
use clap::{CommandFactory, Parser, Subcommand};

pub fn main() -> i32 {
    // The hidden worker entry point (worker::runner starts it); not a user command.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__worker") {
        return crate::worker::child::main(
            args.get(2..).unwrap_or(&[]),
            &[crate::probe::worker_task, crate::collect::live::worker_task],
        );
    }
    crate::sys::trace::init();
    let code = run();
    crate::sys::trace::flush();
    // The answer is out; reap the workers still exiting (the driver's teardown), so that none
    // is left to a PID 1 that never reaps (a container's plain entry point).
    crate::worker::runner::reap_left();
    code
}

fn run() -> i32 {
    let cli = match crate::sys::trace::timed("cli.parse", || {
        use clap::FromArgMatches;
        compact_help(Cli::command())
            .try_get_matches()
            .and_then(|m| Cli::from_arg_matches(&m))
    }) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => EXIT_USAGE,
            };
        }
    };
    match cli.command {
        Command::Check(a) => cmd::check::run(&a),
        Command::Topo(a) => cmd::topo::run(&a),
        Command::Diagnose(a) => cmd::diagnose::run(&a),
        Command::Probe(a) => cmd::probe::run(&a),
        Command::Watch(a) => cmd::watch::run(&a),
        Command::List(a) => cmd::list::run(&a),
        Command::Explain(a) => cmd::explain::run(&a),
        Command::Completions(a) => cmd::completions::run(&a, Cli::command()),
        Command::Man(a) => cmd::man::run(&a, Cli::command()),
        Command::Policy(c) => cmd::policy::run(&c),
        Command::Fleet(a) => cmd::fleet::run(&a),
        Command::Snapshot(a) => cmd::snapshot::run(&a),
        Command::Preflight(a) => cmd::preflight::run(&a),
    }
}

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

/// `-h` and `--help` print the same help: clap's short layout (one line per option where it
/// fits, no blank line between options) followed by the command's description, examples and
/// exit codes (its `after_long_help`), so that each command's help stays within two screens.
/// What needs more room lives in `explain` pages and docs/.
pub fn compact_help(cmd: clap::Command) -> clap::Command {
    let after = cmd.get_after_long_help().cloned();
    let mut cmd = cmd
        .disable_help_flag(true)
        .arg(
            clap::Arg::new("help")
                .short('h')
                .long("help")
                .action(clap::ArgAction::HelpShort)
                .help("Print help"),
        )
        .mut_subcommands(compact_help);
    if let Some(a) = after {
        cmd = cmd.after_help(a);
    }
    cmd
}

/// The commands, in `--help` order; each one's arguments, examples and code are in its file of
/// `crate::cmd`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the static checks on this node (or on a snapshot with --sysroot)
    Check(cmd::check::Args),
    /// The GPU x NIC matrix: PCIe path per pair as NCCL computes it, and whether GDR is used
    Topo(cmd::topo::Args),
    /// Diagnose from pasted command output (topo -m, NCCL logs, lspci -vvv, ibv_devinfo, lsmod,
    /// nvidia-smi -q, dmesg): the same checks and GDR verdicts, for bug reports
    Diagnose(cmd::diagnose::Args),
    /// Live probes on this node's GPUs (each in a worker process with a deadline)
    Probe(cmd::probe::Args),
    /// Watch your own kernels (instrumented with kernels/include/gdrdoctor/progress.cuh) for
    /// stalled spin-waits: who waits on what, for how long, and why
    Watch(cmd::watch::Args),
    /// List every check: id, category and what it verifies
    List(cmd::list::Args),
    /// Print the long-form page of one check: why it matters, how it is detected, how to fix it
    Explain(cmd::explain::Args),
    /// Print a shell completion script for gdrdoctor (bash, zsh, fish, elvish, powershell)
    Completions(cmd::completions::Args),
    /// Print the man page (roff), or write one page per command into a directory
    Man(cmd::man::Args),
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
    Policy(cmd::policy::Command),
    /// Roll up many nodes' JSON reports: checks x nodes, the nodes failing each check, and drift
    Fleet(cmd::fleet::Args),
    /// Capture every file the checks read (plus live-only facts) for --sysroot or a bug report
    Snapshot(cmd::snapshot::Args),
    /// One process per node of a job (srun, mpirun, torchrun, a Kubernetes Indexed Job): each
    /// node checked, NCCL run across the nodes, node pairs measured; rank 0 names the nodes to
    /// take out and why
    Preflight(cmd::preflight::Args),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every example line of every command's help fits the 100 columns clap wraps help at
    /// (with its two-space indent): a wrapped one, copied, runs as two commands (the review
    /// of 2026-12-07 found `fleet ... -o` with its path on the next line).
    #[test]
    fn every_help_example_fits_on_one_line() {
        fn walk(cmd: &clap::Command, path: &str, long: &mut Vec<String>) {
            for help in [cmd.get_after_help(), cmd.get_after_long_help()]
                .into_iter()
                .flatten()
            {
                for line in help.to_string().lines() {
                    if line.trim_start().starts_with("gdrdoctor ") || line.contains("| gdrdoctor") {
                        let width = line.chars().count() + usize::from(!line.starts_with("  ")) * 2;
                        if width > 99 {
                            long.push(format!("{path}: {width}: {line}"));
                        }
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), long);
            }
        }
        let mut long = Vec::new();
        walk(&compact_help(Cli::command()), "gdrdoctor", &mut long);
        assert!(long.is_empty(), "{long:#?}");
    }

    #[test]
    fn every_probe_option_fits_in_one_command_line() {
        // clap's own consistency checks (unique ids and groups, valid defaults) over the
        // command assembled from the registry: two probes declaring one option would panic here.
        Cli::command().debug_assert();
        let probe = Cli::command();
        let probe = probe
            .find_subcommand("probe")
            .map(|c| {
                c.get_arguments()
                    .map(|a| a.get_id().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for p in crate::probe::PROBES {
            assert!(
                probe.contains(&p.name.replace('-', "_")),
                "--{} missing",
                p.name
            );
        }
    }
}
