//! `gdrdoctor diagnose FILE... | -`: read the files, hand the text to the pure reader
//! (`gdrdoctor_checks::paste`), render the report. All the judgement is in the pure crate; this
//! command does the I/O.

use crate::collect;
use crate::output::args::OutputArgs;
use crate::output::{color_enabled, deliver_bytes, fail};
use crate::render::{self, Style};
use crate::source::input;
use gdrdoctor_checks::checks::{Selection, CHECKS};
use gdrdoctor_checks::paste;
use gdrdoctor_checks::report::FailOn;
use gdrdoctor_checks::RunOptions;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
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
pub struct Args {
    /// Files holding pasted command output (any mix; several outputs per file are fine); `-`
    /// reads standard input
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// table (default), json (schema gdrdoctor.diagnose/v1) or markdown (to paste back into the
    /// issue thread)
    #[arg(long, short = 'f', value_enum, default_value_t = DiagnoseFormat::Table)]
    pub format: DiagnoseFormat,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Report only these checks: ids or categories, comma-separated (e.g. nccl,gdr.gpu)
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID|CATEGORY",
        value_parser = crate::output::args::Ids(crate::output::args::IdSet::Diagnose),
        hide_possible_values = true
    )]
    pub only: Vec<String>,
    /// Leave out these checks: ids or categories
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "ID|CATEGORY",
        value_parser = crate::output::args::Ids(crate::output::args::IdSet::Diagnose),
        hide_possible_values = true
    )]
    pub skip: Vec<String>,
    /// Judge GDR with this NCCL version's rules (e.g. 2.18.6) instead of the version in the
    /// pasted NCCL log (or, with none, the newest rules gdrdoctor knows)
    #[arg(long, value_name = "X.Y.Z", value_parser = crate::output::args::parse_nccl_version)]
    pub nccl_version: Option<String>,
    /// `gdrdoctor check --format json` reports of the job's hosts (files, or directories of
    /// `*.json`): joined to the NCCL log by host name, they explain a rank's GDR decision with
    /// its node's facts
    #[arg(long = "node-report", value_name = "FILE|DIR")]
    pub node_reports: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiagnoseFormat {
    Table,
    Json,
    Markdown,
}

fn known_pattern(p: &str) -> bool {
    let ids = CHECKS
        .iter()
        .map(|c| c.id)
        .chain(paste::findings::FINDINGS.iter().map(|f| f.id));
    ids.clone()
        .any(|i| i == p || i.split('.').next() == Some(p))
}

pub fn run(args: &Args) -> i32 {
    let unknown: Vec<&String> = args
        .only
        .iter()
        .chain(args.skip.iter())
        .filter(|p| !known_pattern(p))
        .collect();
    if !unknown.is_empty() {
        return fail(format!(
            "no check or category named {}; `gdrdoctor list` shows them",
            unknown
                .iter()
                .map(|u| format!("`{u}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if args.files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        return fail("`-` (stdin) can be given once");
    }
    let mut inputs = Vec::new();
    for f in &args.files {
        match input::read_input(f) {
            Ok(i) => inputs.push(i),
            Err(e) => return fail(e),
        }
    }
    // Each input is capped where it is read; together they are capped too, so that memory stays
    // bounded (the reader uses about 12 bytes per byte of paste).
    let total: u64 = inputs.iter().map(|i| i.text.len() as u64).sum();
    if total > input::MAX_INPUT {
        return fail(format!(
            "{}: {} MiB of paste together, more than {} MiB; give the relevant command outputs only (or one host's log at a time)",
            inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", "),
            total >> 20,
            input::MAX_INPUT >> 20
        ));
    }
    let p = paste::read(&inputs);
    if !paste::report::recognised(&p) {
        return fail(format!(
            "{}: no command output gdrdoctor can read (expected nvidia-smi topo -m, an NCCL log, lspci -vvv, ibv_devinfo, lsmod, nvidia-smi -q, dmesg, ...; `gdrdoctor diagnose --help` lists them)",
            inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let fail_on = args.out.fail_on();
    let opts = RunOptions {
        selection: Selection {
            only: args.only.clone(),
            skip: args.skip.clone(),
        },
        fail_on,
        allow_incomplete: args.out.allow_incomplete,
    };
    let mut assume = collect::assume(args.nccl_version.as_deref());
    match node_reports(&args.node_reports) {
        Ok(r) => assume.node_reports = r,
        Err(e) => return fail(e),
    }
    let r = paste::report::diagnose_paste(&p, &inputs, &opts, &assume);
    let color = args.out.output.is_none() && color_enabled(args.out.color);
    let style = Style {
        color,
        verbose: args.out.verbose,
        warn_is_failure: fail_on == FailOn::Warn,
    };
    let text = match args.format {
        DiagnoseFormat::Table => render::diagnose::render(
            &r,
            &style,
            crate::output::text_width(args.out.output.as_deref()),
        ),
        DiagnoseFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        ),
        DiagnoseFormat::Markdown => render::paste_md::render(&r),
    };
    match deliver_bytes(text.as_bytes(), args.out.output.as_deref(), false) {
        0 => r.summary.exit_code,
        code => code,
    }
}

/// The `--node-report` files (a directory: its `*.json`, in name order), each a
/// `gdrdoctor.report/v1`; an unreadable or foreign file is an error naming it.
fn node_reports(
    paths: &[PathBuf],
) -> Result<Vec<(String, gdrdoctor_checks::report::Report)>, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "json"))
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    let mut out = Vec::new();
    for f in files {
        let file = input::open_regular(&f)?;
        let buf = input::read_capped(file, input::MAX_INPUT, &f.display().to_string())?;
        let r: gdrdoctor_checks::report::Report = serde_json::from_slice(&buf).map_err(|e| {
            format!(
                "{}: not a gdrdoctor check report (gdrdoctor.report/v1): {e}",
                f.display()
            )
        })?;
        if r.schema != gdrdoctor_checks::report::SCHEMA {
            return Err(format!(
                "{}: schema `{}`: this gdrdoctor reads {} reports",
                f.display(),
                r.schema,
                gdrdoctor_checks::report::SCHEMA
            ));
        }
        out.push((f.display().to_string(), r));
    }
    Ok(out)
}
