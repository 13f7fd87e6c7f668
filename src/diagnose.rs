//! `gdrdoctor diagnose FILE... | -` and its alias `gdrdoctor topo --nvidia-smi FILE`: read the
//! files, hand the text to the pure reader (`gdrdoctor_checks::paste`), render the report.
//! All the judgement is in the pure crate; this module does the I/O.

use crate::app::{color_enabled, emit, write_output, EXIT_USAGE};
use crate::cli::{DiagnoseArgs, DiagnoseFormat, FailOnArg, TopoFormat};
use crate::render::{self, Style};
use gdrdoctor_checks::checks::{Selection, CHECKS};
use gdrdoctor_checks::paste::{self, report::DiagnoseReport, verdict::Gdr, Input};
use gdrdoctor_checks::report::FailOn;
use gdrdoctor_checks::RunOptions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Pastes larger than this are refused (a whole `lspci -vvvxxxx` of a big node is ~3 MiB).
const MAX_INPUT: u64 = 64 << 20;

fn err(msg: impl std::fmt::Display) -> i32 {
    eprintln!("gdrdoctor: error: {msg}");
    EXIT_USAGE
}

/// Read a file (or stdin for `-`) as text, invalid UTF-8 replaced.
pub fn read_input(path: &Path) -> Result<Input, String> {
    use std::io::Read;
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("stdin: {e}"))?;
    } else {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if buf.len() as u64 > MAX_INPUT {
        return Err(format!(
            "{}: larger than {} MiB; paste the relevant command outputs only",
            path.display(),
            MAX_INPUT >> 20
        ));
    }
    Ok(Input {
        name: if path.as_os_str() == "-" {
            "stdin".into()
        } else {
            path.display().to_string()
        },
        text: String::from_utf8_lossy(&buf).into_owned(),
    })
}

fn known_pattern(p: &str) -> bool {
    let ids = CHECKS
        .iter()
        .map(|c| c.id)
        .chain(paste::findings::FINDINGS.iter().map(|f| f.id));
    ids.clone()
        .any(|i| i == p || i.split('.').next() == Some(p))
}

/// The table: what was read, the findings (the shared table renderer), the GPU x NIC view.
pub fn render_table(r: &DiagnoseReport, style: &Style) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "gdrdoctor {} · diagnose · {} · source evidence\n",
        r.tool.version,
        render::sanitize::text(
            &r.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    ));
    for b in r
        .blocks
        .iter()
        .filter(|b| b.status != paste::BlockStatus::Ignored)
    {
        // The paste's cleaner drops escapes and control characters; bidi overrides and the
        // file name still pass through the one sanitiser.
        o.push_str(&format!(
            "  {} {:<28} {}:{}-{}  {}\n",
            b.id,
            b.kind.as_str(),
            render::sanitize::text(&b.file),
            b.lines[0],
            b.lines[1],
            render::sanitize::text(&b.summary)
        ));
    }
    o.push('\n');
    // Checks whose input is not in the paste fold into one line with the commands to run.
    let missing = |f: &gdrdoctor_checks::report::Finding| {
        f.status == gdrdoctor_checks::report::Status::Skip
            && (f.message.contains("not in the pasted text")
                || f.message.contains("does not show it"))
    };
    let mut rep = r.as_report();
    let mut commands: Vec<String> = Vec::new();
    let mut folded = 0;
    if !style.verbose {
        for f in rep.findings.iter().filter(|f| missing(f)) {
            folded += 1;
            if let Some(c) = f
                .message
                .split_once("run `")
                .and_then(|(_, c)| c.split_once('`'))
            {
                if !commands.contains(&c.0.to_string()) {
                    commands.push(c.0.to_string());
                }
            }
        }
        rep.findings.retain(|f| !missing(f));
    }
    let table = render::table::render(&rep, style);
    // The shared renderer starts with the host and inventory lines of a live node: skip them.
    let body: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.trim().is_empty())
        .skip(1)
        .collect();
    let (head, tail): (Vec<&str>, Vec<&str>) = {
        let split = body
            .iter()
            .position(|l| l.trim().is_empty() || l.starts_with("summary:"))
            .unwrap_or(body.len());
        (body[..split].to_vec(), body[split..].to_vec())
    };
    for l in head {
        o.push_str(l);
        o.push('\n');
    }
    if folded > 0 {
        let (live, pastable): (Vec<&String>, Vec<&String>) =
            commands.iter().partition(|c| c.starts_with("gdrdoctor"));
        o.push_str(&format!(
            "\n{folded} check(s) skipped: their input is not in the paste (`-v` lists them). To complete the picture, paste:\n"
        ));
        for c in &pastable {
            o.push_str(&format!("  {c}\n"));
        }
        if !live.is_empty() {
            o.push_str("and for the live facts no paste shows, run on the node:\n");
            for c in &live {
                o.push_str(&format!("  {c}\n"));
            }
        }
    }
    if !r.gdr.is_empty() {
        o.push('\n');
        o.push_str(&render::sanitize::lines(&render::paste_md::gdr_view(r)));
    }
    for l in tail {
        o.push_str(l);
        o.push('\n');
    }
    o
}

/// `--nccl-version` and the `NCCL_*` variables of this run, which overlay the paste's.
fn assume(nccl_version: Option<&str>) -> paste::report::Assume {
    paste::report::Assume {
        nccl_version: nccl_version.map(str::to_string),
        env: crate::collect::relevant_env()
            .into_iter()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .collect(),
    }
}

pub fn run(args: &DiagnoseArgs) -> i32 {
    let unknown: Vec<&String> = args
        .only
        .iter()
        .chain(args.skip.iter())
        .filter(|p| !known_pattern(p))
        .collect();
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
    if args.files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        return err("`-` (stdin) can be given once");
    }
    let mut inputs = Vec::new();
    for f in &args.files {
        match read_input(f) {
            Ok(i) => inputs.push(i),
            Err(e) => return err(e),
        }
    }
    let p = paste::read(&inputs);
    if !paste::report::recognised(&p) {
        return err(format!(
            "{}: no command output gdrdoctor can read (expected nvidia-smi topo -m, an NCCL log, lspci -vvv, ibv_devinfo, lsmod, nvidia-smi -q, dmesg, ...; `gdrdoctor diagnose --help` lists them)",
            inputs.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let fail_on = match args.fail_on {
        FailOnArg::Warn => FailOn::Warn,
        FailOnArg::Fail => FailOn::Fail,
    };
    let opts = RunOptions {
        selection: Selection {
            only: args.only.clone(),
            skip: args.skip.clone(),
        },
        fail_on,
        allow_incomplete: args.allow_incomplete,
    };
    let r =
        paste::report::diagnose_paste(&p, &inputs, &opts, &assume(args.nccl_version.as_deref()));
    let color = args.output.is_none() && color_enabled(args.color);
    colored::control::set_override(color);
    let style = Style {
        color,
        verbose: args.verbose,
        warn_is_failure: fail_on == FailOn::Warn,
    };
    let text = match args.format {
        DiagnoseFormat::Table => render_table(&r, &style),
        DiagnoseFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        ),
        DiagnoseFormat::Markdown => render::paste_md::render(&r),
    };
    match &args.output {
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
    r.summary.exit_code
}

/// One pair of `topo --nvidia-smi --format json`.
#[derive(Debug, Serialize)]
pub struct TopoPastePair {
    pub gpu: String,
    pub nic: String,
    /// The cell as nvidia-smi printed it (`?` when the paste does not hold it).
    pub path: String,
    /// The pair's own path is within NCCL's GDR threshold; null when the cell is unknown.
    pub gdr_by_distance: Option<bool>,
    /// NCCL's verdict: `on`, `off`, or `unknown` when the paste lacks what it needs.
    pub gdr: Gdr,
    /// Per direction, when decided.
    pub send: Option<bool>,
    pub receive: Option<bool>,
    /// The NVLink peer that carries this GPU's sends to the NIC (PXN).
    pub via: Option<String>,
    pub reasons: Vec<String>,
    /// What the verdict needs that the paste does not show.
    pub unknown: Vec<String>,
}

/// `gdrdoctor topo --nvidia-smi FILE --format json` (`gdrdoctor.topo-paste/v1`).
#[derive(Debug, Serialize)]
pub struct TopoPaste {
    pub schema: &'static str,
    pub source: &'static str,
    /// The matrix block (`b1`) and where it is.
    pub block: String,
    /// The threshold, where it came from, and whose rules.
    pub gdr_level: String,
    pub gdr_level_source: String,
    pub nccl_rules: String,
    pub notes: Vec<String>,
    pub pairs: Vec<TopoPastePair>,
    /// Per GPU whose row is readable: the NICs within the GDR distance.
    pub close_nics: BTreeMap<String, Vec<String>>,
    /// One line on the rails (balanced, uneven, asymmetric, none).
    pub rails: String,
    pub repairs: Vec<String>,
    /// What in the matrix cannot be trusted (those cells have no verdict).
    pub problems: Vec<String>,
}

pub fn topo_paste(r: &DiagnoseReport) -> Option<TopoPaste> {
    let first = r.matrices.first()?;
    let block = r.blocks.iter().find(|b| b.id == first.block)?;
    let pairs: Vec<TopoPastePair> = r
        .gdr
        .iter()
        .filter(|p| p.block == first.block)
        .map(|p| TopoPastePair {
            gpu: p.gpu.clone(),
            nic: p.nic.clone(),
            path: p.nvidia_smi.clone(),
            gdr_by_distance: p.by_distance,
            gdr: p.gdr,
            send: p.send,
            receive: p.receive,
            via: p.via.clone(),
            reasons: p.reasons.clone(),
            unknown: p.unknown.clone(),
        })
        .collect();
    let mut close: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in first.matrix.gpus() {
        let row: Vec<&TopoPastePair> = pairs.iter().filter(|p| &p.gpu == g).collect();
        let readable = !row.is_empty()
            && (row.iter().all(|p| p.gdr_by_distance.is_some())
                || row.iter().any(|p| p.gdr_by_distance == Some(true)));
        if readable {
            close.insert(
                g.clone(),
                row.iter()
                    .filter(|p| p.gdr_by_distance == Some(true))
                    .map(|p| p.nic.clone())
                    .collect(),
            );
        }
    }
    let counts: Vec<usize> = close.values().map(Vec::len).collect();
    let (min, max) = (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    );
    let within = format!("within {}", r.gdr_level);
    let rails = if first.matrix.nics().is_empty() {
        "no NIC columns in the matrix".to_string()
    } else if close.is_empty() {
        "no GPU row is readable".to_string()
    } else if max == 0 {
        format!(
            "no GPU has a NIC {within}: NCCL uses GPUDirect RDMA from none of them on its own path"
        )
    } else if min == 0 {
        let none: Vec<&str> = close
            .iter()
            .filter(|(_, v)| v.is_empty())
            .map(|(g, _)| g.as_str())
            .collect();
        format!(
            "asymmetric rails: {} have no NIC {within} while others have up to {max}",
            none.join(", ")
        )
    } else if min != max {
        format!("uneven rails: GPUs have between {min} and {max} close NICs")
    } else {
        format!("balanced: every GPU has {min} close NIC(s)")
    };
    Some(TopoPaste {
        schema: "gdrdoctor.topo-paste/v1",
        source: "evidence",
        block: block.label(),
        gdr_level: r.gdr_level.clone(),
        gdr_level_source: r.gdr_level_source.clone(),
        nccl_rules: r.nccl_rules.clone(),
        notes: r.gdr_notes.clone(),
        pairs,
        close_nics: close,
        rails,
        repairs: block.repairs.clone(),
        problems: block.problems.clone(),
    })
}

/// `gdrdoctor topo --nvidia-smi FILE`: the diagnose reader and NCCL's rule, shown as the topo
/// view.
pub fn topo_alias(
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
    let input = match read_input(file) {
        Ok(i) => i,
        Err(e) => return err(e),
    };
    let inputs = vec![input];
    let p = paste::read(&inputs);
    if p.matrices.is_empty() {
        let why = p
            .blocks
            .iter()
            .find(|b| b.kind == paste::Kind::TopoMatrix)
            .map(|b| format!(": {}", b.problems.join("; ")))
            .unwrap_or_default();
        return err(format!(
            "{}: no `nvidia-smi topo -m` matrix found (expected a header line starting with GPU0, or its rows){why}",
            file.display()
        ));
    }
    let r =
        paste::report::diagnose_paste(&p, &inputs, &RunOptions::default(), &assume(nccl_version));
    let Some(t) = topo_paste(&r) else {
        return err(format!(
            "{}: the matrix has no readable rows",
            file.display()
        ));
    };
    let out = match format {
        TopoFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&t).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        ),
        TopoFormat::Text | TopoFormat::Svg | TopoFormat::Png => {
            let mut o = render::paste_md::gdr_view(&r);
            o.push_str(&format!("rails: {}\n", t.rails));
            for x in &t.repairs {
                o.push_str(&format!("repaired: {x}\n"));
            }
            for x in &t.problems {
                o.push_str(&format!("not trusted: {x}\n"));
            }
            o.push_str("A matrix alone does not show peer memory, dma-buf or port states; `gdrdoctor diagnose` reads the other pastes (lsmod, ibv_devinfo, NCCL logs) too.\n");
            o
        }
    };
    crate::app::deliver_topo(out.as_bytes(), output, false)
}
