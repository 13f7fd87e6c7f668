//! `gdrdoctor check`: the static checks of this node (or of a snapshot), judged against the
//! site policy, with the counters' growth since the last run or over `--interval`.

use crate::collect::{self, Libraries};
use crate::output::args::{LiveArgs, OutputArgs};
use crate::output::{deliver, fail};
use crate::render::Format;
use crate::source::{Location, Source};
use crate::sys::suggest;
use gdrdoctor_checks::checks::{Selection, CHECKS};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::RunOptions;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
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
    "  gdrdoctor check --format oneline                  # < 80 chars: NHC, node-problem-detector\n",
    "  gdrdoctor check --in-container --compare-host host.json   # inside the job's pod\n",
    "  GDRDOCTOR_TRACE=1 gdrdoctor check                 # where the time goes, per phase\n\n",
    "CUDA's answers (cuInit and device attributes; never a context) are kept for the rest of \
the boot in /run/gdrdoctor/cuda-facts.json, per driver and GPU set, so most runs start no CUDA; \
--no-cache asks CUDA anyway. GPUs in an exclusive or prohibited compute mode are left out of \
CUDA (a job may hold them).\n\n",
    "Error counters only grow: `--interval` reads the node twice; without it, a live run that \
judges counters records them in the ledger /run/gdrdoctor/counters.json and the next one judges \
the growth since then (docs/usage.md, the counter ledger).\n\n",
    "Run as root for the full picture: PCI config space beyond 64 bytes is root-only.\n\n",
    "Exit codes (check, probe):\n",
    "  0  nothing failed (warnings allowed unless --fail-on warn)\n",
    "  1  at least one check failed\n",
    "  2  gdrdoctor could not run (usage error, unreadable sysroot)\n",
    "  3  nothing failed, but some checks could not be evaluated (status error);\n",
    "     a CI gate must not read this as healthy unless it passes --allow-incomplete"
))]
pub struct Args {
    /// Read a snapshot (directory or .tar.gz from `gdrdoctor snapshot`) instead of the live node
    #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
    pub sysroot: Option<PathBuf>,
    /// Read the host through DIR, where a container mounts the host's `/` (Kubernetes: hostPath
    /// `/` at /host): its /proc, /sys and /etc as the live host's; NVML, CUDA and libibverbs are
    /// the container's (docs/usage.md)
    #[arg(long, value_name = "DIR", conflicts_with = "sysroot")]
    pub host_root: Option<PathBuf>,
    /// Output format: table (for people; details under each finding that is not a pass), json
    /// (the report, schema gdrdoctor.report/v1: the machine contract), junit (XML for CI),
    /// prometheus (node_exporter's textfile collector) or oneline (under 80 characters: NHC,
    /// Slurm drain reasons, node-problem-detector)
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Run only these checks: ids or categories, comma-separated or repeated (e.g. rdma,iommu.mode)
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID|CATEGORY",
        value_parser = crate::output::args::Ids(crate::output::args::IdSet::Checks),
        hide_possible_values = true
    )]
    pub only: Vec<String>,
    /// Do not run these checks: ids or categories
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID|CATEGORY",
        value_parser = crate::output::args::Ids(crate::output::args::IdSet::Checks),
        hide_possible_values = true
    )]
    pub skip: Vec<String>,
    /// Do not query NVML, the CUDA driver and libibverbs (files only: faster, no worker process)
    #[arg(long = "static")]
    pub static_only: bool,
    /// Judge GDR with this NCCL version's rules (e.g. 2.18.6) instead of the libnccl.so.2
    /// found on the node (or, with none found, the newest rules gdrdoctor knows)
    #[arg(long, value_name = "X.Y.Z", value_parser = crate::output::args::parse_nccl_version)]
    pub nccl_version: Option<String>,
    /// Read the error counters (AER, RDMA port, NVLink) twice, this far apart (10s, 1m; 1s to
    /// 1h), and judge how much they grew: a flapping link or a rising error rate shows up here
    #[arg(long, value_name = "DURATION", value_parser = crate::sys::clock::parse_duration)]
    pub interval: Option<std::time::Duration>,
    #[command(flatten)]
    pub live: LiveArgs,
    /// Neither read nor write the counter state file (counters are then judged on one reading
    /// unless --interval is given)
    #[arg(long)]
    pub no_state: bool,
    /// Also judge the node against a site policy (TOML: the gpus, ports, firmware, driver,
    /// kernel command line the site expects, severity overrides, waivers; `gdrdoctor policy
    /// init` writes one). Live runs read /etc/gdrdoctor/policy.toml by default when it exists
    #[arg(long, value_name = "FILE", env = "GDRDOCTOR_POLICY")]
    pub policy: Option<PathBuf>,
    /// Apply no policy at all, not even /etc/gdrdoctor/policy.toml (wins over --policy)
    #[arg(long)]
    pub no_policy: bool,
    /// Judge what a job in this container can use (run it inside the job's container): device
    /// nodes, CAP_IPC_LOCK and memlock, /dev/shm, the NCCL and net plugins the loader finds,
    /// NCCL_* (the container.* checks)
    #[arg(
        long,
        conflicts_with_all = ["sysroot", "host_root"],
        env = "GDRDOCTOR_IN_CONTAINER",
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub in_container: bool,
    /// With --in-container: compare with the host's report (`gdrdoctor check --format json -o
    /// HOST.json` on the host) and name every finding that is worse here, and every GPU-NIC
    /// pair that loses GDR (container.host-diff)
    #[arg(long, value_name = "HOST.json", requires = "in_container")]
    pub compare_host: Option<PathBuf>,
}

pub fn run(args: &Args) -> i32 {
    let selection = Selection {
        only: args.only.clone(),
        skip: args.skip.clone(),
    };
    let unknown = selection.unknown_patterns();
    if !unknown.is_empty() {
        let known = suggest::selectable();
        return fail(format!(
            "no check or category named {}; `gdrdoctor list` shows them",
            unknown
                .iter()
                .map(|u| format!("`{u}`{}", suggest::hint(u, &known)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !selection.selects_any() {
        return fail(format!(
            "--only {} with --skip {} selects no check; `gdrdoctor list` shows them",
            if args.only.is_empty() {
                "(all)".to_string()
            } else {
                args.only.join(",")
            },
            args.skip.join(",")
        ));
    }
    // The policy is read before the node, so that a broken policy file stops the run (exit 2).
    let policy = match crate::source::policy::resolve(
        args.policy.as_deref(),
        args.no_policy,
        args.sysroot.is_none(),
    ) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let libs = if args.static_only {
        Libraries::Skip
    } else {
        Libraries::Query
    };
    let live_opts = args.live.options();
    let location = Location::from_args(args.sysroot.as_deref(), args.host_root.as_deref());
    // The node as the run reads it: the files, the live libraries, `--nccl-version` applied.
    // `--interval` reads it again after the interval, the same way.
    let detected = crate::collect::container::detect();
    let read_node = || -> Result<(Source, Node), String> {
        let (src, mut node) = collect::load_node_with(location, libs, &live_opts)?;
        collect::apply_nccl_version(&mut node, args.nccl_version.as_deref());
        container_view(&mut node, src.origin, args.in_container, &detected);
        Ok((src, node))
    };
    // Issue 17: a counter baseline (--interval, or the ledger of earlier runs in the state
    // directory). Only the counters checks this run selects read and move their families of
    // the ledger; no counters check selected: no point waiting, and the ledger is not touched.
    let families = gdrdoctor_checks::counters::families_of(|id| {
        CHECKS
            .iter()
            .any(|d| d.id == id && d.category() == "counters" && selection.wants(d))
    });
    let rate_opts = crate::state::counters::RateOptions {
        interval: args.interval.filter(|_| !families.is_empty()),
        state_dir: (!args.no_state).then(|| args.live.state_dir.clone()),
        families,
    };
    // The ledger is locked before the node is read: concurrent runs read, judge and record one
    // after the other (with --interval, only around the second reading).
    let ledger = if rate_opts.interval.is_none() {
        crate::state::counters::Ledger::open(&rate_opts, args.sysroot.is_none())
    } else {
        None
    };
    let (src, mut node) = match read_node() {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    // The comparison is of this container's view with the host's report: without the view
    // (no --in-container, or a snapshot) there is nothing to compare, and "nothing is worse"
    // would be a pass without evidence.
    if args.compare_host.is_some() {
        if let gdrdoctor_checks::model::Fact::Absent { reason, .. } = &node.container {
            return fail(format!(
                "--compare-host compares the job's container with the host, and this run has no container view ({reason}): run `gdrdoctor check --in-container --compare-host HOST.json` inside the job's container"
            ));
        }
    }
    let again = || read_node().map(|(_, n)| n);
    let rates = match crate::state::counters::Rates::start(
        src.origin, &mut node, &rate_opts, &again, ledger,
    ) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let opts = RunOptions {
        selection,
        fail_on: args.out.fail_on(),
        allow_incomplete: args.out.allow_incomplete,
    };
    let mut report =
        crate::sys::trace::timed("checks", || gdrdoctor_checks::build_report(&node, &opts));
    if let Some(l) = &policy {
        let _t = crate::sys::trace::span("policy");
        let cx = gdrdoctor_checks::policy::Context {
            path: l.path.display().to_string(),
            today: crate::sys::clock::today(),
        };
        gdrdoctor_checks::policy::apply(&mut report, &node, &l.policy, &cx, &opts);
    }
    if let Some(path) = &args.compare_host {
        if let Err(e) = compare_host(&mut report, path, &opts) {
            return fail(e);
        }
    }
    report.timestamp = Some(crate::sys::clock::now_rfc3339());
    crate::sys::trace::timed("state.save", || rates.finish(&node));
    let _t = crate::sys::trace::span("render");
    let code = deliver(&report, args.format, &args.out);
    // The process ends here: the node and the report (plain data, tens of thousands of
    // allocations on a big node) are not freed one by one first.
    std::mem::forget(report);
    std::mem::forget(node);
    code
}

/// The container view of a live run: collected with `--in-container`; otherwise absent, and
/// where this process looks like it runs in a container, the reason says so and how to judge it.
fn container_view(
    node: &mut Node,
    origin: crate::source::Origin,
    asked: bool,
    detected: &[String],
) {
    use gdrdoctor_checks::model::Fact;
    if origin != crate::source::Origin::Live {
        return;
    }
    if asked {
        let mut why = vec!["--in-container".to_string()];
        why.extend(detected.iter().cloned());
        node.container = Fact::known(
            crate::collect::container::collect(why),
            "this process (--in-container)",
        );
    } else if !detected.is_empty() {
        node.container = Fact::absent(
            "container view",
            format!(
                "this looks like a container ({}), but --in-container was not given: `gdrdoctor check --in-container` judges what a job in it can use",
                detected.join(", ")
            ),
        );
    }
}

/// `--compare-host`: the host's report read, `container.host-diff`'s findings put in place of
/// its skip, the summary and exit code counted again.
fn compare_host(
    report: &mut gdrdoctor_checks::report::Report,
    path: &std::path::Path,
    opts: &RunOptions,
) -> Result<(), String> {
    use gdrdoctor_checks::report;
    const ID: &str = "container.host-diff";
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--compare-host {shown}: {e}"))?;
    let host: report::Report = serde_json::from_str(&text).map_err(|e| {
        format!("--compare-host {shown}: not a gdrdoctor report (`gdrdoctor check --format json` on the host): {e}")
    })?;
    if host.schema != report::SCHEMA {
        return Err(format!(
            "--compare-host {shown}: schema `{}`: this gdrdoctor reads {} reports",
            host.schema,
            report::SCHEMA
        ));
    }
    let diff = gdrdoctor_checks::checks::container::compare_host(&host, report, &shown);
    let at = report.findings.iter().position(|f| f.id == ID);
    report.findings.retain(|f| f.id != ID);
    let at = at
        .unwrap_or(report.findings.len())
        .min(report.findings.len());
    report.findings.splice(at..at, diff);
    let mut summary = report::Summary::count(&report.findings);
    summary.exit_code = report::exit_code(&report.findings, opts.fail_on, opts.allow_incomplete);
    report.summary = summary;
    Ok(())
}
