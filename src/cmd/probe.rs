//! `gdrdoctor probe`: the live probes of the registry (`crate::probe::PROBES`), each in a worker
//! process with a deadline, reported with the same findings, renderers and exit codes as
//! `check`.

use crate::collect::{self, Libraries};
use crate::output::args::OutputArgs;
use crate::output::{deliver, fail};
use crate::render::Format;
use crate::source::Location;
use gdrdoctor_checks::RunOptions;
use std::path::PathBuf;

/// `gdrdoctor probe`: the probes and their options come from the probe registry
/// (`crate::probe::PROBES`); the rest says how to report.
#[derive(Debug, clap::Args)]
#[command(after_long_help = format!("{}\n{}", crate::probe::help_examples(), crate::output::args::EXIT_CODES))]
pub struct Args {
    #[command(flatten)]
    pub probes: crate::probe::ProbeOptions,
    /// Not for probes: they run GPU and RDMA work in gdrdoctor's own view of the node, so run
    /// them on the host, or in a pod that has the GPUs and /dev/infiniband, without it
    #[arg(long, value_name = "DIR", hide_short_help = true)]
    pub host_root: Option<PathBuf>,
    /// Output format: table (for people; details under each finding that is not a pass), json
    /// (the report, schema gdrdoctor.report/v1: the machine contract), junit (XML for CI),
    /// prometheus (node_exporter's textfile collector) or oneline (under 80 characters: NHC,
    /// Slurm drain reasons, node-problem-detector)
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub fn run(args: &Args) -> i32 {
    // Every plan is validated before anything runs.
    if let Some(dir) = &args.host_root {
        return fail(format!(
            "probe does not take --host-root {}: the probes run GPU and RDMA work in gdrdoctor's own view of the node; run `gdrdoctor probe` on the host, or in a pod that has the GPUs and /dev/infiniband, without --host-root (`check --host-root` reads the host's files)",
            dir.display()
        ));
    }
    let plans = match crate::probe::plans(&args.probes) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let (_src, node) = match collect::load_node(Location::Live, Libraries::Skip) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let (findings, records) = crate::probe::execute(&plans, &node);
    let opts = RunOptions {
        selection: Default::default(),
        fail_on: args.out.fail_on(),
        allow_incomplete: args.out.allow_incomplete,
    };
    let mut report = gdrdoctor_checks::report_with(&node, findings, &opts);
    report.probe = Some(serde_json::Value::Object(records));
    report.timestamp = Some(crate::sys::clock::now_rfc3339());
    deliver(&report, args.format, &args.out)
}
