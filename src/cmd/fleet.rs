//! `gdrdoctor fleet REPORTS...`: many nodes' JSON reports rolled up into one view: checks x
//! nodes with counts, the nodes failing each check, and drift (the odd node out).

use crate::collect::fleet;
use crate::output::{emit, write_output, EXIT_USAGE};
use crate::render;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    Table,
    Json,
    Prometheus,
    Html,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = concat!(
    "Drift: every inventory field (driver, firmware, kernel, cmdline, NCCL environment, BAR1, \
link states, pci devices, gdr pairs) is compared across nodes; where a minority of nodes differs \
from the majority, the odd nodes are named. A field with no majority value is shown as split.\n\n",
    "Examples:\n",
    "  srun -N64 --ntasks-per-node=1 --output='reports/%N.json' gdrdoctor check -f json\n",
    "  gdrdoctor fleet reports/\n",
    "  srun -N64 --ntasks-per-node=1 --label gdrdoctor check -f json | gdrdoctor fleet -\n",
    "  gdrdoctor fleet reports/ -f prometheus -o $TEXTFILE_DIR/gdrdoctor_fleet.prom   # node_exporter\n",
    "  gdrdoctor fleet reports/ --ignore env.,pci. --allow-drift\n",
    "  srun -N64 --ntasks-per-node=1 --output='svgs/%N.svg' gdrdoctor topo --format svg\n",
    "  gdrdoctor fleet reports/ -f html --svg-dir svgs/ -o fleet.html   # open in a browser\n\n",
    "Exit codes (fleet):\n",
    "  0  no node failed and no drift\n",
    "  1  a node failed (its report's exit code is 1, or it holds a fail finding whatever\n",
    "     its exit code), or drift (unless --allow-drift)\n",
    "  2  gdrdoctor could not run (no report could be read at all, usage error)\n",
    "  3  nothing failed, but some reports are unreadable or some nodes incomplete\n",
    "     (unless --allow-incomplete)"
))]
pub struct Args {
    /// JSON reports (`gdrdoctor check -f json`): files, directories (every *.json below them),
    /// or - for stdin (one or more reports; `srun --label` output is split by task); a file
    /// named twice is read once
    #[arg(required = true, value_name = "REPORTS")]
    pub reports: Vec<PathBuf>,
    /// Output format: table (checks x nodes, failing nodes, drift), json (schema
    /// gdrdoctor.fleet/v1), prometheus (counts per check and status, drift per field) or html
    /// (one self-contained page: a filterable heat map, the drift, each node's findings and
    /// report, with --svg-dir its topology picture)
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
    /// (e.g. cmdline.BOOT_IMAGE, env., pci.); an empty entry is refused
    #[arg(long, value_delimiter = ',', value_name = "FIELD", value_parser = crate::output::args::parse_field_prefix)]
    pub ignore: Vec<String>,
    /// Node names shown per row in the table (the JSON always lists every node)
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub max_names: usize,
    /// With --format html: a directory of topology pictures, `<node>.svg` as written by
    /// `gdrdoctor topo --format svg` (node = hostname, or the report file's name without
    /// .json), embedded in each node's section as an image (never as markup: no script in
    /// it runs)
    #[arg(long, value_name = "DIR")]
    pub svg_dir: Option<PathBuf>,
}

pub fn run(args: &Args) -> i32 {
    if args.svg_dir.is_some() && args.format != FleetFormat::Html {
        eprintln!("gdrdoctor: error: --svg-dir only applies to --format html");
        return EXIT_USAGE;
    }
    if let Some(d) = &args.svg_dir {
        if !d.is_dir() {
            eprintln!(
                "gdrdoctor: error: --svg-dir {}: not a directory",
                d.display()
            );
            return EXIT_USAGE;
        }
    }
    let fleet::input::Gathered {
        inputs,
        bad: gather_bad,
        twice,
    } = match fleet::input::gather(&args.reports) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gdrdoctor: error: {e}");
            return EXIT_USAGE;
        }
    };
    // A file named twice is one node, read once; said once per file (the first few by name).
    const SHOWN: usize = 3;
    for (first, other) in twice.iter().take(SHOWN) {
        let also = if other == first {
            String::new()
        } else {
            format!(" (also as {other})")
        };
        eprintln!(
            "gdrdoctor: fleet: {}{} given more than once: read once",
            crate::render::sanitize::text(first),
            crate::render::sanitize::text(&also)
        );
    }
    if twice.len() > SHOWN {
        eprintln!(
            "gdrdoctor: fleet: {} more report file(s) given more than once: each read once",
            twice.len() - SHOWN
        );
    }
    let threads = gdrdoctor_checks::cpus();
    let t0 = std::time::Instant::now();
    let html = args.format == FleetFormat::Html;
    let parts = fleet::digest_all(&inputs, &args.ignore, html, threads);
    // Every input (a file, a document of stdin) is a node or an unreadable report.
    let reports = parts
        .iter()
        .map(|p| p.nodes.len() + p.unreadable.len())
        .sum::<usize>()
        + gather_bad.len();
    // Inputs that failed while listing go first, in argument order.
    let bad: Vec<(u32, fleet::input::Unreadable)> =
        gather_bad.into_iter().map(|u| (0, u)).collect();
    let r = fleet::rollup::build(
        parts,
        bad,
        reports,
        &fleet::rollup::Options {
            allow_drift: args.allow_drift,
            allow_incomplete: args.allow_incomplete,
        },
    );
    if r.summary.nodes == 0 {
        for u in &r.unreadable {
            eprintln!("gdrdoctor: {}: {}", u.input, u.error);
        }
        eprintln!("gdrdoctor: error: no report could be read");
        return EXIT_USAGE;
    }
    let text = match args.format {
        // Hostnames, messages and values come from the reports: shown, not obeyed.
        FleetFormat::Table => render::sanitize::lines(&render::fleet::table(
            &r,
            args.max_names,
            crate::output::text_width(args.output.as_deref()),
        ))
        .into_owned(),
        FleetFormat::Json => render::fleet::json(&r),
        FleetFormat::Prometheus => render::fleet::prometheus(&r),
        FleetFormat::Html => render::fleet_html::render(&render::fleet_page::page(
            &r,
            &render::fleet_page::Options {
                output: args.output.as_deref(),
                svg_dir: args.svg_dir.as_deref(),
            },
        )),
    };
    if std::env::var_os("GDRDOCTOR_FLEET_TIMING").is_some() {
        eprintln!(
            "gdrdoctor: fleet: {} report(s) on {threads} thread(s) in {:.0} ms",
            reports,
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    match &args.output {
        Some(p) => {
            if let Err(e) = write_output(p, &text) {
                eprintln!("gdrdoctor: error: {e}");
                return EXIT_USAGE;
            }
        }
        None => {
            if !emit(&text) {
                return EXIT_USAGE;
            }
        }
    }
    r.summary.exit_code
}
