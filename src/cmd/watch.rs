//! `gdrdoctor watch`: follow the progress areas of the user's own instrumented kernels
//! (`crate::collect::watch`) and report their stalls, with `check`'s exit codes.

use crate::collect::{self, watch, Libraries};
use crate::output::args::OutputArgs;
use crate::output::{deliver, fail};
use crate::render::Format;
use crate::source::Location;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
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
pub struct Args {
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
    /// Output format: table (for people; details under each finding that is not a pass), json
    /// (the report, schema gdrdoctor.report/v1: the machine contract), junit (XML for CI),
    /// prometheus (node_exporter's textfile collector) or oneline (under 80 characters: NHC,
    /// Slurm drain reasons, node-problem-detector)
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `gdrdoctor watch`: run, report, exit code (as `check`).
pub fn run(args: &Args) -> i32 {
    let o = watch::Options {
        pid: args.pid,
        once: args.once,
        abort: args.abort,
        threshold: std::time::Duration::from_millis(args.threshold.max(1)),
        poll: std::time::Duration::from_millis(args.poll_ms.max(1)),
        grace: std::time::Duration::from_millis(args.grace),
        duration: (args.duration > 0).then(|| std::time::Duration::from_secs(args.duration)),
        dir: args.shm_dir.clone(),
        quiet: args.quiet,
    };
    let reports = match watch::run(&o) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let findings = watch::findings(&o, &reports);
    let (_opened, node) = match collect::load_node(Location::from_arg(None), Libraries::Skip) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let opts = gdrdoctor_checks::RunOptions {
        selection: Default::default(),
        fail_on: args.out.fail_on(),
        allow_incomplete: args.out.allow_incomplete,
    };
    let mut report = gdrdoctor_checks::report_with(&node, findings, &opts);
    report.probe = Some(serde_json::json!({ "watch": { "areas": reports } }));
    deliver(&report, args.format, &args.out)
}
