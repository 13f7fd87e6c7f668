//! Glue: parse the command line, run the command, map the outcome to the exit-code contract.

use crate::cli::{CheckArgs, Cli, ColorChoice, Command, FailOnArg, ListFormat, TopoFormat};
use crate::reader::Root;
use crate::render::{self, Style};
use crate::{collect, docs, meta, snapshot};
use clap::Parser;
use gdrdoctor_checks::checks::{Selection, CHECKS};
use gdrdoctor_checks::report::FailOn;
use gdrdoctor_checks::RunOptions;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Exit code for "gdrdoctor could not run".
pub const EXIT_USAGE: i32 = 2;

pub fn main() -> i32 {
    // The hidden worker entry point (probe::runner starts it); not a user command.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__worker") {
        return crate::worker::main(args.get(2..).unwrap_or(&[]));
    }
    let cli = match Cli::try_parse() {
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
        Command::Probe(args) => probe(&args),
        Command::Topo {
            sysroot,
            format,
            output,
            nvidia_smi: Some(file),
            nccl_version,
        } => {
            let _ = sysroot;
            topo_smi(&file, format, output.as_deref(), nccl_version.as_deref())
        }
        Command::Topo {
            sysroot,
            format,
            output,
            nvidia_smi: None,
            nccl_version,
        } => topo(
            sysroot.as_deref(),
            format,
            output.as_deref(),
            nccl_version.as_deref(),
        ),
        Command::List { format } => list(format),
        Command::Explain { id } => explain(&id),
        Command::Snapshot { out, sysroot } => snapshot_cmd(&out, sysroot.as_deref()),
        Command::Watch(args) => crate::watch::command(&args),
    }
}

fn err(msg: impl std::fmt::Display) -> i32 {
    eprintln!("gdrdoctor: error: {msg}");
    EXIT_USAGE
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => true,
        Err(e) => {
            eprintln!("gdrdoctor: error: writing to stdout: {e}");
            false
        }
    }
}

/// Write `text` to `path` atomically (temp file in the same directory, then rename).
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    write_atomic_bytes(path, text.as_bytes())
}

/// [`write_atomic`] for bytes (a PNG).
pub fn write_atomic_bytes(path: &Path, text: &[u8]) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

/// Render a report, write it to `output` (atomically) or stdout, and return its exit code.
pub(crate) fn deliver(
    report: &gdrdoctor_checks::report::Report,
    format: render::Format,
    color: ColorChoice,
    verbose: bool,
    output: Option<&Path>,
    fail_on: FailOn,
) -> i32 {
    let color = output.is_none() && color_enabled(color);
    colored::control::set_override(color);
    let style = Style {
        color,
        verbose,
        warn_is_failure: fail_on == FailOn::Warn,
    };
    let text = render::render(report, format, &style);
    match output {
        Some(path) => {
            if let Err(e) = write_atomic(path, &text) {
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

/// Open the root the user asked for: live `/`, a directory, or a `.tar.gz` (unpacked to a temp
/// directory that is removed when the guard drops).
pub struct OpenedRoot {
    pub root: Root,
    cleanup: Option<PathBuf>,
}

impl Drop for OpenedRoot {
    fn drop(&mut self) {
        if let Some(d) = &self.cleanup {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub fn open_root(sysroot: Option<&Path>) -> Result<OpenedRoot, String> {
    let Some(p) = sysroot else {
        return Ok(OpenedRoot {
            root: Root::live(),
            cleanup: None,
        });
    };
    if p.is_file() {
        let dir = snapshot::unpack(p).map_err(|e| e.to_string())?;
        let root = Root::sysroot(&dir).map_err(|e| format!("--sysroot {}: {e}", p.display()))?;
        return Ok(OpenedRoot {
            root,
            cleanup: Some(dir),
        });
    }
    let root = Root::sysroot(p).map_err(|e| format!("--sysroot: {e}"))?;
    Ok(OpenedRoot {
        root,
        cleanup: None,
    })
}

/// Open the root, read its metadata, collect the node: the common start of check and topo.
/// `live_libs`: on a live node, also ask NVML, CUDA and libibverbs (in a worker process).
pub fn load_node(
    sysroot: Option<&Path>,
    live_libs: bool,
) -> Result<(OpenedRoot, gdrdoctor_checks::model::Node), String> {
    let mut opened = open_root(sysroot)?;
    let meta = if opened.root.is_live() {
        None
    } else {
        meta::read(&opened.root)?
    };
    opened.root.set_complete(meta.is_some());
    let mut node = collect::collect(&opened.root, meta.as_ref());
    if opened.root.is_live() {
        if live_libs {
            node.live = live_facts();
        } else {
            node.live = gdrdoctor_checks::model::LiveFacts::absent("not queried (--static)");
        }
    } else {
        node.live = meta::read_live(&opened.root);
    }
    if opened.root.is_live() && !live_libs {
        // Reading the library files is cheap and initialises nothing: no worker needed.
        node.live.nccl = crate::live::nccl::discover_live(false);
    }
    Ok((opened, node))
}

/// `--nccl-version`: the rules of that version, whatever the node has.
pub fn apply_nccl_version(node: &mut gdrdoctor_checks::model::Node, version: Option<&str>) {
    use gdrdoctor_checks::model::Fact;
    let Some(v) = version else { return };
    match &mut node.live.nccl {
        Fact::Known { value, .. } => value.requested = Some(v.to_string()),
        f @ Fact::Absent { .. } => {
            *f = Fact::known(
                gdrdoctor_checks::nccl::NcclFacts {
                    requested: Some(v.to_string()),
                    ..Default::default()
                },
                "--nccl-version",
            )
        }
    }
}

/// NVML, CUDA and libibverbs facts from a worker process (20 s deadline).
pub fn live_facts() -> gdrdoctor_checks::model::LiveFacts {
    let progress = crate::probe::runner::Progress::new("querying NVML, CUDA and libibverbs");
    let run = crate::probe::runner::run(
        "live-facts",
        &[],
        std::time::Duration::from_secs(20),
        &|m| progress.update(m),
    );
    progress.finish();
    match run {
        Ok(r) => match (r.failure(), r.result) {
            (None, Some(v)) => match v.get("error").and_then(|e| e.as_str()) {
                Some(e) => gdrdoctor_checks::model::LiveFacts::absent(e),
                None => serde_json::from_value(v).unwrap_or_else(|e| {
                    gdrdoctor_checks::model::LiveFacts::absent(&format!(
                        "unreadable worker result: {e}"
                    ))
                }),
            },
            (Some(f), _) => gdrdoctor_checks::model::LiveFacts::absent(&f),
            (None, None) => gdrdoctor_checks::model::LiveFacts::absent("worker printed no result"),
        },
        Err(e) => gdrdoctor_checks::model::LiveFacts::absent(&e),
    }
}

fn probe(args: &crate::cli::ProbeArgs) -> i32 {
    if !args.registration && !args.hang && !args.doorbell && !args.p2p {
        return err(
            "choose a probe: --registration, --hang, --doorbell or --p2p (see `gdrdoctor probe --help`)",
        );
    }
    if (args.lspci.is_some() || args.allow_mmio_write) && !args.doorbell {
        return err("--lspci and --allow-mmio-write need --doorbell");
    }
    let mut scenarios: Vec<String> = crate::probe::hang::DEFAULT_SCENARIOS
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in &args.inject {
        let names: Vec<&str> = if i == "all" {
            crate::probe::hang::INJECTIONS.to_vec()
        } else {
            vec![i.as_str()]
        };
        for n in names {
            if !crate::probe::hang::INJECTIONS.contains(&n) {
                return err(format!(
                    "unknown injection `{n}`; choose from {} or all",
                    crate::probe::hang::INJECTIONS.join(", ")
                ));
            }
            for s in [n.to_string(), format!("control:{n}")] {
                if crate::probe::hang::SCENARIOS.iter().any(|x| x.0 == s) && !scenarios.contains(&s)
                {
                    scenarios.push(s);
                }
            }
        }
    }
    if !args.inject.is_empty() && !args.hang {
        return err("--inject needs --hang");
    }
    let (_opened, node) = match load_node(None, false) {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    let mut findings = Vec::new();
    let mut raw = serde_json::Map::new();
    if args.registration {
        let (f, v) = crate::probe::registration(
            &node,
            args.gpu,
            args.repeat,
            std::time::Duration::from_secs(args.timeout),
        );
        findings.extend(f);
        if let Some(v) = v {
            raw.insert("registration".into(), v);
        }
    }
    if args.hang {
        // The cross-GPU scenarios need a peer: --peer, else another GPU, else this one
        // (loopback, said so in the report).
        let ordinal = args.gpu.map(|g| g as i32).unwrap_or(0);
        let n_gpus = gdrdoctor_checks::derive::gpus(&node).len() as i32;
        let hang_peer = if scenarios.iter().any(|s| s.ends_with("remote-wait")) {
            Some(args.peer.map(|p| p as i32).unwrap_or(if n_gpus >= 2 {
                if ordinal == 0 {
                    1
                } else {
                    0
                }
            } else {
                ordinal
            }))
        } else {
            None
        };
        let o = crate::probe::hang::Options {
            ordinal: args.gpu.map(|g| g as i32).unwrap_or(0),
            threshold: std::time::Duration::from_millis(args.hang_timeout.max(20)),
            poll: std::time::Duration::from_millis(args.poll_ms.max(1)),
            grace: std::time::Duration::from_millis(300),
            scenarios,
            bench: args.bench,
            force_ptx: args.ptx,
            peer: hang_peer,
        };
        let (f, v) = crate::probe::hang(&node, &o, std::time::Duration::from_secs(args.timeout));
        findings.extend(f);
        if let Some(v) = v {
            raw.insert("hang".into(), v);
        }
    }
    if args.p2p {
        let gpus = match (args.gpu, args.peer) {
            (Some(a), Some(b)) if a == b => {
                return err("--p2p with --gpu and --peer needs two different gpus")
            }
            (Some(a), Some(b)) => Some(format!("{a},{b}")),
            (None, None) => None,
            _ => return err("--p2p measures every pair; give both --gpu and --peer for one pair"),
        };
        let (f, v) = crate::probe::p2p::run(
            &node,
            gpus.as_deref(),
            args.p2p_size,
            args.repeat.max(20),
            std::time::Duration::from_secs(args.timeout),
        );
        findings.extend(f);
        if let Some(v) = v {
            raw.insert("p2p".into(), v);
        }
    }
    if args.doorbell {
        let o = crate::probe::doorbell::Options {
            ordinal: args.gpu.map(|g| g as i32).unwrap_or(0),
            rings: args.rings,
            lspci: args.lspci.clone(),
            allow_mmio_write: args.allow_mmio_write,
            force_ptx: args.ptx,
        };
        let (f, v) =
            crate::probe::doorbell::run(&node, &o, std::time::Duration::from_secs(args.timeout));
        findings.extend(f);
        if let Some(v) = v {
            raw.insert("doorbell".into(), v);
        }
    }
    let opts = RunOptions {
        selection: Default::default(),
        fail_on: match args.fail_on {
            FailOnArg::Warn => FailOn::Warn,
            FailOnArg::Fail => FailOn::Fail,
        },
        allow_incomplete: args.allow_incomplete,
    };
    let mut report = gdrdoctor_checks::report_with(&node, findings, &opts);
    report.probe = Some(serde_json::Value::Object(raw));
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
fn deliver_topo(out: &[u8], output: Option<&Path>, binary: bool) -> i32 {
    match output {
        Some(p) => match write_atomic_bytes(p, out) {
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

fn topo_smi(
    file: &Path,
    format: TopoFormat,
    output: Option<&Path>,
    nccl_version: Option<&str>,
) -> i32 {
    if matches!(format, TopoFormat::Svg | TopoFormat::Png) {
        return err(
            "--format svg and png draw a node's PCIe tree, which a pasted `nvidia-smi topo -m` does not hold: use --sysroot or run on the node",
        );
    }
    let text = if file.as_os_str() == "-" {
        let mut s = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut s) {
            return err(format!("stdin: {e}"));
        }
        s
    } else {
        match std::fs::read(file) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => return err(format!("{}: {e}", file.display())),
        }
    };
    let Some(m) = gdrdoctor_checks::smi::parse(&text) else {
        return err(format!(
            "{}: no `nvidia-smi topo -m` matrix found (expected a header line starting with GPU0)",
            file.display()
        ));
    };
    let t = render::topo::build_smi(&m, nccl_version, &collect::relevant_env());
    let out = match format {
        TopoFormat::Json => format!("{}\n", serde_json::to_string_pretty(&t).unwrap_or_default()),
        _ => render::topo::render_smi(&m, &t),
    };
    deliver_topo(out.as_bytes(), output, false)
}

fn topo(
    sysroot: Option<&Path>,
    format: TopoFormat,
    output: Option<&Path>,
    nccl_version: Option<&str>,
) -> i32 {
    // The picture is coloured by the checks' findings, which on a live node need what NVML,
    // CUDA and libibverbs say (as `check`); the matrix does not.
    let picture = matches!(format, TopoFormat::Svg | TopoFormat::Png);
    let (_opened, mut node) = match load_node(sysroot, picture) {
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
        return err(format!(
            "no check or category named {}; `gdrdoctor list` shows them",
            unknown
                .iter()
                .map(|u| format!("`{u}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let (_opened, mut node) = match load_node(args.sysroot.as_deref(), !args.static_only) {
        Ok(x) => x,
        Err(e) => return err(e),
    };
    apply_nccl_version(&mut node, args.nccl_version.as_deref());
    let opts = RunOptions {
        selection,
        fail_on: match args.fail_on {
            FailOnArg::Warn => FailOn::Warn,
            FailOnArg::Fail => FailOn::Fail,
        },
        allow_incomplete: args.allow_incomplete,
    };
    let report = gdrdoctor_checks::build_report(&node, &opts);
    deliver(
        &report,
        args.format,
        args.color,
        args.verbose,
        args.output.as_deref(),
        opts.fail_on,
    )
}

fn list(format: ListFormat) -> i32 {
    let text = match format {
        ListFormat::Table => {
            let w = CHECKS.iter().map(|c| c.id.len()).max().unwrap_or(10);
            let mut s = String::new();
            for c in CHECKS {
                s.push_str(&format!("{:<w$}  {}\n", c.id, c.title));
            }
            s.push_str("\nprobe findings (gdrdoctor probe):\n");
            for (id, title) in crate::probe::PROBE_IDS {
                s.push_str(&format!("{id:<w$}  {title}\n"));
            }
            s.push_str("\nwatch findings (gdrdoctor watch):\n");
            for (id, title) in gdrdoctor_checks::watch::IDS {
                s.push_str(&format!("{id:<w$}  {title}\n"));
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
    s
}

fn explain(id: &str) -> i32 {
    match docs::page(id) {
        Some(p) => {
            if emit(p) {
                0
            } else {
                EXIT_USAGE
            }
        }
        None => {
            let near: Vec<&str> = CHECKS
                .iter()
                .map(|c| c.id)
                .filter(|c| c.contains(id) || id.contains(c.split('.').next().unwrap_or("")))
                .collect();
            let hint = if near.is_empty() {
                String::new()
            } else {
                format!(" (did you mean {}?)", near.join(", "))
            };
            err(format!(
                "no check `{id}`{hint}; `gdrdoctor list` shows them"
            ))
        }
    }
}

fn snapshot_cmd(out: &Path, sysroot: Option<&Path>) -> i32 {
    let opened = match open_root(sysroot) {
        Ok(o) => o,
        Err(e) => return err(e),
    };
    // The recording root must own the reader; re-open for sysroots (cheap).
    let root = if opened.root.is_live() {
        Root::live()
    } else {
        match Root::sysroot(opened.root.base()) {
            Ok(r) => r,
            Err(e) => return err(e),
        }
    };
    // SAFETY of euid: a non-root snapshot is still useful, but config space is cut to 64 bytes.
    let t0 = std::time::Instant::now();
    // Live library facts: from the node's libraries, or carried over from the sysroot.
    let live = if root.is_live() {
        live_facts()
    } else {
        meta::read_live(&root)
    };
    match snapshot::take(root, out, Some(&live)) {
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
