//! Glue: parse the command line, run the command, map the outcome to the exit-code contract.

use crate::cli::{
    CheckArgs, Cli, ColorChoice, Command, FailOnArg, ListFormat, PolicyCommand, TopoFormat,
};
use crate::collect::{self, Libraries};
use crate::render::{self, Style};
use crate::source::{Location, Source};
use crate::{docs, snapshot};
use clap::Parser;
use gdrdoctor_checks::checks::{Selection, CHECKS};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::FailOn;
use gdrdoctor_checks::RunOptions;
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Exit code for "gdrdoctor could not run".
pub const EXIT_USAGE: i32 = 2;

pub fn main() -> i32 {
    // The hidden worker entry point (probe::runner starts it); not a user command.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__worker") {
        return crate::probe::worker::main(args.get(2..).unwrap_or(&[]));
    }
    crate::trace::init();
    let code = run();
    crate::trace::flush();
    code
}

fn run() -> i32 {
    let cli = match crate::trace::timed("cli.parse", Cli::try_parse) {
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
        Command::Check(args) => check(&args),
        Command::Diagnose(args) => crate::diagnose::run(&args),
        Command::Probe(args) => probe(&args),
        Command::Topo {
            sysroot,
            host_root,
            format,
            output,
            nvidia_smi: Some(file),
            nccl_version,
        } => {
            let _ = (sysroot, host_root);
            crate::diagnose::topo_alias(&file, format, output.as_deref(), nccl_version.as_deref())
        }
        Command::Topo {
            sysroot,
            host_root,
            format,
            output,
            nvidia_smi: None,
            nccl_version,
        } => topo(
            Location::from_args(sysroot.as_deref(), host_root.as_deref()),
            format,
            output.as_deref(),
            nccl_version.as_deref(),
        ),
        Command::List { format } => list(format),
        Command::Explain { id, no_pager } => explain(&id, no_pager),
        Command::Completions { shell } => completions(shell),
        Command::Man { out_dir } => man(out_dir.as_deref()),
        Command::Snapshot {
            out,
            sysroot,
            host_root,
        } => snapshot_cmd(
            &out,
            Location::from_args(sysroot.as_deref(), host_root.as_deref()),
        ),
        Command::Watch(args) => crate::watch::command(&args),
        Command::Policy(p) => policy_cmd(&p),
        Command::Fleet(a) => crate::fleet::run(&a),
    }
}

fn err(msg: impl std::fmt::Display) -> i32 {
    // Error text can quote the node (an archive's entry names, a file's content).
    eprintln!(
        "gdrdoctor: error: {}",
        render::sanitize::text(&msg.to_string())
    );
    EXIT_USAGE
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) -> bool {
    emit_bytes(text.as_bytes())
}

/// [`emit`] for bytes (a PNG).
pub fn emit_bytes(bytes: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => true,
        Err(e) => {
            eprintln!("gdrdoctor: error: writing to stdout: {e}");
            false
        }
    }
}

/// The one writer behind every `-o FILE` (check, probe, watch): `-` (and `/dev/stdout`,
/// `/dev/fd/1`, `/proc/self/fd/1`) is stdout, written through the process's own descriptor so
/// that `-o /dev/stdout >> log` appends; a path that does not exist or is a regular file is
/// replaced atomically ([`write_atomic`]); anything else that exists (a device such as
/// `/dev/null`, a FIFO, a socket, or a symlink) is written in place through `open(2)`, never
/// replaced: as root, renaming over `/dev/null` would turn the device into a regular file.
pub fn write_output(path: &Path, text: &str) -> Result<(), String> {
    write_output_bytes(path, text.as_bytes())
}

/// [`write_output`] for bytes (a PNG).
pub fn write_output_bytes(path: &Path, text: &[u8]) -> Result<(), String> {
    let shown = path.display();
    let as_str = path.to_str().unwrap_or("");
    if matches!(
        as_str,
        "-" | "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1"
    ) {
        return if emit_bytes(text) {
            Ok(())
        } else {
            Err("writing to stdout failed".to_string())
        };
    }
    if matches!(as_str, "/dev/stderr" | "/dev/fd/2" | "/proc/self/fd/2") {
        let mut e = std::io::stderr().lock();
        return e
            .write_all(text)
            .and_then(|_| e.flush())
            .map_err(|e| format!("{shown}: {e}"));
    }
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return write_atomic_bytes(path, text)
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let ft = md.file_type();
    if ft.is_file() {
        return write_atomic_bytes(path, text);
    }
    if ft.is_dir() {
        return Err(format!("{shown}: is a directory"));
    }
    // A device, a FIFO, a socket or a symlink: write through it. Truncate only what is (or
    // links to) a regular file; a dangling link is not followed into a new file.
    let target = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if target.is_dir() {
        return Err(format!("{shown}: is a directory"));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(target.is_file())
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    match f.write_all(text).and_then(|_| f.flush()) {
        Ok(()) => Ok(()),
        // A reader that went away (a FIFO's, `| head`) is not an error, as for stdout.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// Replace the regular file `path` (or create it) atomically: a new file with an unpredictable
/// name in the same directory, created exclusively (`O_EXCL|O_NOFOLLOW`: nothing planted under
/// that name is followed), then renamed over `path`. Use [`write_output`] for `-o`, which also
/// handles stdout and special files.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    write_atomic_bytes(path, text.as_bytes())
}

/// [`write_atomic`] for bytes (a PNG).
pub fn write_atomic_bytes(path: &Path, text: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let mut last = String::new();
    for attempt in 0..16u32 {
        let tmp = dir.join(format!(
            ".{name}.tmp.{}.{:016x}",
            std::process::id(),
            crate::snapshot::random_u64() ^ u64::from(attempt)
        ));
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = format!("{}: {e}", tmp.display());
                continue;
            }
            Err(e) => return Err(format!("{}: {e}", tmp.display())),
        };
        if let Err(e) = f.write_all(text).and_then(|_| f.flush()) {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{}: {e}", tmp.display()));
        }
        drop(f);
        return std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("{}: {e}", path.display())
        });
    }
    Err(last)
}

/// Render a report, write it to `output` ([`write_output`]) or stdout, and return its exit
/// code.
pub(crate) fn deliver(
    report: &gdrdoctor_checks::report::Report,
    format: render::Format,
    color: ColorChoice,
    verbose: bool,
    output: Option<&Path>,
    fail_on: FailOn,
) -> i32 {
    // `-o -` is stdout, laid out and coloured as stdout is.
    let output = output.filter(|p| p.as_os_str() != "-");
    let color = output.is_none() && color_enabled(color);
    colored::control::set_override(color);
    let style = Style {
        color,
        verbose,
        warn_is_failure: fail_on == FailOn::Warn,
    };
    let text = match (format, output) {
        // A file is not the terminal: the fixed width, not the terminal's.
        (render::Format::Table, Some(_)) => {
            render::table::render_width(report, &style, crate::term::DEFAULT_WIDTH)
        }
        _ => render::render(report, format, &style),
    };
    match output {
        Some(path) => {
            if let Err(e) = write_output(path, &text) {
                return err(e);
            }
        }
        None => {
            if !emit(&text) {
                return EXIT_USAGE;
            }
        }
    }
    report.summary.exit_code
}

pub fn color_enabled(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            if std::env::var("CLICOLOR_FORCE").is_ok_and(|v| !v.is_empty() && v != "0") {
                return true;
            }
            let no_color = std::env::var("NO_COLOR").is_ok_and(|v| !v.is_empty());
            let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
            std::io::stdout().is_terminal() && !no_color && !dumb
        }
    }
}

/// Open the source the user asked for and collect the node: the common start of check, topo and
/// probe. `libs`: on the live node, also ask NVML, CUDA and libibverbs (in a worker process).
/// The source is returned with the node: it holds the unpacked snapshot until the command ends.
pub fn load_node(at: Location, libs: Libraries) -> Result<(Source, Node), String> {
    load_node_with(at, libs, &collect::live::Options::default())
}

/// [`load_node`] with the live-facts options (the CUDA cache).
pub fn load_node_with(
    at: Location,
    libs: Libraries,
    opts: &collect::live::Options,
) -> Result<(Source, Node), String> {
    let src = crate::trace::timed("source.open", || Source::open(at))?;
    let node = collect::node_with(&src, libs, opts);
    Ok((src, node))
}

/// `--nccl-version`: the rules of that version, whatever the node has.
pub fn apply_nccl_version(node: &mut gdrdoctor_checks::model::Node, version: Option<&str>) {
    use gdrdoctor_checks::model::Fact;
    let Some(v) = version else { return };
    match &mut node.live.nccl {
        Fact::Known { value, .. } => value.requested = Some(v.to_string()),
        f @ Fact::Absent { .. } => {
            *f = Fact::known(
                gdrdoctor_checks::model::NcclFacts {
                    requested: Some(v.to_string()),
                    ..Default::default()
                },
                "--nccl-version",
            )
        }
    }
}

fn probe(args: &crate::cli::ProbeArgs) -> i32 {
    // Every plan is validated before anything runs.
    if let Some(dir) = &args.host_root {
        return err(format!(
            "probe does not take --host-root {}: the probes run GPU and RDMA work in gdrdoctor's own view of the node; run `gdrdoctor probe` on the host, or in a pod that has the GPUs and /dev/infiniband, without --host-root (`check --host-root` reads the host's files)",
            dir.display()
        ));
    }
    let plans = match crate::probe::plans(&args.probes) {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    let (_src, node) = match load_node(Location::Live, Libraries::Skip) {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    let (findings, records) = crate::probe::execute(&plans, &node);
    let opts = RunOptions {
        selection: Default::default(),
        fail_on: match args.fail_on {
            FailOnArg::Warn => FailOn::Warn,
            FailOnArg::Fail => FailOn::Fail,
        },
        allow_incomplete: args.allow_incomplete,
    };
    let mut report = gdrdoctor_checks::report_with(&node, findings, &opts);
    report.probe = Some(serde_json::Value::Object(records));
    report.timestamp = Some(crate::clock::now_rfc3339());
    deliver(
        &report,
        args.format,
        args.color,
        args.verbose,
        args.output.as_deref(),
        opts.fail_on,
    )
}

/// Write `out` to `output`, or to stdout; a PNG is not written to a terminal.
pub(crate) fn deliver_topo(out: &[u8], output: Option<&Path>, binary: bool) -> i32 {
    // `-o -` is stdout (and a png is still not written to a terminal).
    match output.filter(|p| p.as_os_str() != "-") {
        Some(p) => match write_output_bytes(p, out) {
            Ok(()) => 0,
            Err(e) => err(e),
        },
        None if binary && std::io::stdout().is_terminal() => {
            err("not writing a png to a terminal: pass -o FILE (or redirect stdout to a file)")
        }
        None => {
            let mut o = std::io::stdout().lock();
            match o.write_all(out).and_then(|_| o.flush()) {
                Ok(()) => 0,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                Err(e) => err(format!("writing to stdout: {e}")),
            }
        }
    }
}

fn topo(
    at: Location,
    format: TopoFormat,
    output: Option<&Path>,
    nccl_version: Option<&str>,
) -> i32 {
    // The live libraries' facts (NCCL's dma-buf probe per NIC, CUDA's GDR and dma-buf
    // attributes, NVML's GPU pairs) decide GDR and the GPU x GPU block, and colour the picture:
    // topo asks them as check does (the GPU x GPU block then says NV18 over NVLink, as
    // `nvidia-smi topo -m` does, not the PCIe path).
    let (_src, mut node) = match load_node(at, Libraries::Query) {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    apply_nccl_version(&mut node, nccl_version);
    let out = match format {
        TopoFormat::Text => render::topo::render_text(&render::topo::build(&node)).into_bytes(),
        TopoFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&render::topo::build(&node)).unwrap_or_default()
        )
        .into_bytes(),
        // The picture colours elements by the check registry's findings on the same node.
        TopoFormat::Svg => {
            let findings = gdrdoctor_checks::checks::run(&node, &Selection::default());
            render::svg::svg(&node, &findings).into_bytes()
        }
        TopoFormat::Png => {
            let findings = gdrdoctor_checks::checks::run(&node, &Selection::default());
            match render::svg_png::png(&render::svg::svg_static(&node, &findings), 1.0) {
                Ok(b) => b,
                Err(e) => return err(e),
            }
        }
    };
    deliver_topo(&out, output, format == TopoFormat::Png)
}

fn check(args: &CheckArgs) -> i32 {
    let selection = Selection {
        only: args.only.clone(),
        skip: args.skip.clone(),
    };
    let unknown = selection.unknown_patterns();
    if !unknown.is_empty() {
        let known = crate::suggest::selectable();
        return err(format!(
            "no check or category named {}; `gdrdoctor list` shows them",
            unknown
                .iter()
                .map(|u| format!("`{u}`{}", crate::suggest::hint(u, &known)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !selection.selects_any() {
        return err(format!(
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
    let policy = match crate::policy::resolve(
        args.policy.as_deref(),
        args.no_policy,
        args.sysroot.is_none(),
    ) {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    let libs = if args.static_only {
        Libraries::Skip
    } else {
        Libraries::Query
    };
    let live_opts = collect::live::Options {
        cache: if args.no_cache {
            collect::live::CacheMode::Off
        } else {
            collect::live::CacheMode::Use
        },
        state_dir: Some(args.state_dir.clone()),
    };
    let location = Location::from_args(args.sysroot.as_deref(), args.host_root.as_deref());
    // The node as the run reads it: the files, the live libraries, `--nccl-version` applied.
    // `--interval` reads it again after the interval, the same way.
    let read_node = || -> Result<(Source, Node), String> {
        let (src, mut node) = load_node_with(location, libs, &live_opts)?;
        apply_nccl_version(&mut node, args.nccl_version.as_deref());
        Ok((src, node))
    };
    let (src, mut node) = match read_node() {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    // Issue 17: a counter baseline (--interval, or the last run's state file). No counters
    // check selected: no point waiting.
    let counters_selected = CHECKS
        .iter()
        .any(|d| d.category() == "counters" && selection.wants(d));
    let rate_opts = crate::health::state::RateOptions {
        interval: args.interval.filter(|_| counters_selected),
        state_dir: (!args.no_state).then(|| args.state_dir.clone()),
    };
    let again = || read_node().map(|(_, n)| n);
    let rates = match crate::health::state::Rates::start(src.origin, &mut node, &rate_opts, &again)
    {
        Ok(r) => r,
        Err(e) => return err(e),
    };
    let opts = RunOptions {
        selection,
        fail_on: match args.fail_on {
            FailOnArg::Warn => FailOn::Warn,
            FailOnArg::Fail => FailOn::Fail,
        },
        allow_incomplete: args.allow_incomplete,
    };
    let mut report = crate::trace::timed("checks", || gdrdoctor_checks::build_report(&node, &opts));
    if let Some(l) = &policy {
        let _t = crate::trace::span("policy");
        let cx = gdrdoctor_checks::policy::Context {
            path: l.path.display().to_string(),
            today: crate::clock::today(),
        };
        gdrdoctor_checks::policy::apply(&mut report, &node, &l.policy, &cx, &opts);
    }
    report.timestamp = Some(crate::clock::now_rfc3339());
    crate::trace::timed("state.save", || rates.finish(&node));
    let _t = crate::trace::span("render");
    let code = deliver(
        &report,
        args.format,
        args.color,
        args.verbose,
        args.output.as_deref(),
        opts.fail_on,
    );
    // The process ends here: the node and the report (plain data, tens of thousands of
    // allocations on a big node) are not freed one by one first.
    std::mem::forget(report);
    std::mem::forget(node);
    code
}

fn list(format: ListFormat) -> i32 {
    let text = match format {
        ListFormat::Table => {
            // Titles wrap at spaces under themselves, to the terminal's width.
            let w = CHECKS
                .iter()
                .map(|c| c.id)
                .chain(crate::docs::pages().into_iter().map(|(id, _)| id))
                .map(str::len)
                .max()
                .unwrap_or(10);
            let max = crate::term::stdout_width().saturating_sub(1);
            let row = |id: &str, title: &str| {
                render::wrap::hanging(&format!("{id:<w$}  "), w + 2, w + 2, title, max)
            };
            let mut s = String::new();
            for c in CHECKS {
                s.push_str(&row(c.id, c.title));
            }
            s.push_str("\npolicy findings (gdrdoctor check --policy):\n");
            for f in gdrdoctor_checks::policy::FINDINGS {
                s.push_str(&row(f.id, f.title));
            }
            s.push_str("\nprobe findings (gdrdoctor probe):\n");
            for f in crate::probe::finding_defs() {
                s.push_str(&row(f.id, f.title));
            }
            s.push_str("\nwatch findings (gdrdoctor watch):\n");
            for f in gdrdoctor_checks::watch::FINDINGS {
                s.push_str(&row(f.id, f.title));
            }
            s.push_str("\ndiagnose findings (gdrdoctor diagnose):\n");
            for f in gdrdoctor_checks::paste::findings::FINDINGS {
                s.push_str(&row(f.id, f.title));
            }
            s
        }
        ListFormat::Json => {
            let v: Vec<_> = CHECKS
                .iter()
                .map(|c| serde_json::json!({"id": c.id, "category": c.category(), "title": c.title, "docs": format!("docs/checks/{}.md", c.id)}))
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
        }
        ListFormat::Markdown => markdown_list(),
    };
    if emit(&text) {
        0
    } else {
        EXIT_USAGE
    }
}

/// `docs/checks.md`, generated from the registry (a test keeps the file in sync).
pub fn markdown_list() -> String {
    let mut s = String::from("# Checks\n\nGenerated by `gdrdoctor list --format markdown`; do not edit by hand.\n\n| id | category | verifies |\n|---|---|---|\n");
    for c in CHECKS {
        s.push_str(&format!(
            "| [`{}`](checks/{}.md) | {} | {} |\n",
            c.id,
            c.id,
            c.category(),
            c.title
        ));
    }
    s.push_str("\n## Policy findings\n\n`gdrdoctor check --policy FILE` adds these (see [the fleet guide](guides/fleet.md)).\n\n| id | verifies |\n|---|---|\n");
    for f in gdrdoctor_checks::policy::FINDINGS {
        let (id, title) = (f.id, f.title);
        s.push_str(&format!("| [`{id}`](checks/{id}.md) | {title} |\n"));
    }
    s
}

/// The page as plain Markdown when stdout is not a terminal; on a terminal, laid out for its
/// width and shown through the pager (unless `--no-pager`).
fn explain(id: &str, no_pager: bool) -> i32 {
    let Some(page) = docs::page(id) else {
        let hint = crate::suggest::hint(id, &crate::suggest::explainable());
        return err(format!(
            "no check `{id}`{hint}; `gdrdoctor list` shows them"
        ));
    };
    if !std::io::stdout().is_terminal() {
        return if emit(page) { 0 } else { EXIT_USAGE };
    }
    let color = color_enabled(ColorChoice::Auto);
    colored::control::set_override(color);
    let text = render::markdown::render(page, crate::term::stdout_width(), color);
    if !no_pager && crate::term::page(&text) {
        return 0;
    }
    if emit(&text) {
        0
    } else {
        EXIT_USAGE
    }
}

/// `gdrdoctor completions SHELL`: the completion script, generated from the CLI definition.
fn completions(shell: clap_complete::Shell) -> i32 {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "gdrdoctor", &mut buf);
    if emit(&String::from_utf8_lossy(&buf)) {
        0
    } else {
        EXIT_USAGE
    }
}

/// `gdrdoctor man`: gdrdoctor.1 on stdout, or every page (one per command) into a directory.
fn man(out_dir: Option<&Path>) -> i32 {
    let cmd = <Cli as clap::CommandFactory>::command();
    if let Some(dir) = out_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return err(format!("{}: {e}", dir.display()));
        }
        return match clap_mangen::generate_to(cmd, dir) {
            Ok(()) => 0,
            Err(e) => err(format!("writing man pages to {}: {e}", dir.display())),
        };
    }
    let mut buf = Vec::new();
    if let Err(e) = clap_mangen::Man::new(cmd).render(&mut buf) {
        return err(format!("rendering the man page: {e}"));
    }
    if emit(&String::from_utf8_lossy(&buf)) {
        0
    } else {
        EXIT_USAGE
    }
}

fn snapshot_cmd(out: &Path, at: Location) -> i32 {
    let src = match Source::open(at) {
        Ok(s) => s,
        Err(e) => return err(e),
    };
    let t0 = std::time::Instant::now();
    // Live library facts: from the node's libraries, or carried over from the sysroot.
    // Keep the last periodic run's counters as the snapshot's baseline (issue 17).
    crate::health::SNAPSHOT_USES_STATE.store(true, std::sync::atomic::Ordering::Relaxed);
    // Fresh CUDA answers for a bug report (and the cache refreshed with them).
    let mut live = collect::live::collect_with(
        &src,
        Libraries::Query,
        &collect::live::Options {
            cache: collect::live::CacheMode::Refresh,
            state_dir: None,
        },
    );
    if src.origin == crate::source::Origin::HostRoot {
        // What the container's libraries cannot see of the host is not kept as the host's.
        collect::live::host_root_visibility(&mut live, &collect::files(&src));
    }
    match snapshot::take_source(src.recording(), out, Some(&live)) {
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
        Err(e) => err(e),
    }
}

fn policy_cmd(c: &PolicyCommand) -> i32 {
    match c {
        PolicyCommand::Init {
            sysroot,
            output,
            force,
            static_only,
        } => {
            // Only a policy file is not overwritten by accident: a device, a FIFO and `-`
            // (stdout) take the text.
            if let Some(o) = output.as_ref().filter(|p| p.as_os_str() != "-") {
                if o.is_file() && !force {
                    return err(format!(
                        "{} exists; pass --force to overwrite it",
                        o.display()
                    ));
                }
            }
            let libs = if *static_only {
                Libraries::Skip
            } else {
                Libraries::Query
            };
            let (_src, node) = match load_node(Location::from_arg(sysroot.as_deref()), libs) {
                Ok(x) => x,
                Err(e) => return err(e),
            };
            let gdr = gdrdoctor_checks::gdr::verdicts(&node);
            let text = gdrdoctor_checks::policy::init::render(&node, &gdr, crate::clock::today());
            // What we write must read back.
            if let Err(e) = crate::policy::parse("the generated policy", &text) {
                return err(format!("internal error, please report it: {e}"));
            }
            // `-o -` is stdout.
            match output.as_ref().filter(|p| p.as_os_str() != "-") {
                Some(o) => {
                    if let Err(e) = write_output(o, &text) {
                        return err(e);
                    }
                    eprintln!(
                        "gdrdoctor: wrote {}; review it, then `gdrdoctor check --policy {}`",
                        o.display(),
                        o.display()
                    );
                    0
                }
                None => {
                    if emit(&text) {
                        0
                    } else {
                        EXIT_USAGE
                    }
                }
            }
        }
        PolicyCommand::Validate { file } => match crate::policy::load(file) {
            Ok(l) => {
                let p = &l.policy;
                let mut parts: Vec<String> = Vec::new();
                for (name, on) in [
                    ("gpu", p.gpu.is_some()),
                    ("rdma", p.rdma.is_some()),
                    ("pcie", p.pcie.is_some()),
                    ("driver", p.driver.is_some()),
                    ("peer_memory", p.peer_memory.is_some()),
                    ("iommu", p.iommu.is_some()),
                    ("gdr", p.gdr.is_some()),
                    ("kernel", p.kernel.is_some()),
                ] {
                    if on {
                        parts.push(name.to_string());
                    }
                }
                let today = crate::clock::today();
                let expired = p.waivers.iter().filter(|w| today > w.expires).count();
                let text = format!(
                    "{}: valid policy: {}; {} severity override(s); {} waiver(s){}\n",
                    file.display(),
                    if parts.is_empty() {
                        "no expectations".to_string()
                    } else {
                        parts.join(", ")
                    },
                    p.severity.len(),
                    p.waivers.len(),
                    if expired > 0 {
                        format!(", {expired} expired")
                    } else {
                        String::new()
                    }
                );
                if emit(&text) {
                    0
                } else {
                    EXIT_USAGE
                }
            }
            Err(e) => err(e),
        },
    }
}
