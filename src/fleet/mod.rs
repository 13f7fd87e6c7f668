//! `gdrdoctor fleet REPORTS...`: many nodes' JSON reports rolled up into one view: checks x
//! nodes with counts, the nodes failing each check, and drift (the odd node out).
//!
//! Reports are read and digested by one worker thread per core, each feeding its own aggregate
//! (docs/performance.md: 10,000 reports of an 8-GPU node in seconds); damaged or unreadable
//! reports are named in the output and make the exit code 3, never silently dropped.

pub mod digest;
pub mod flat;
pub mod html;
pub mod input;
pub mod render;
pub mod rollup;

use crate::cli::{FleetArgs, FleetFormat};
use digest::{Digester, Partial};
use input::{Input, Source, Unreadable};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Digest every input on `threads` workers (at least one).
/// `detail`: keep what the HTML page shows per node ([`digest::NodeDetail`]).
pub fn digest_all(
    inputs: &[Input],
    ignore: &[String],
    detail: bool,
    threads: usize,
) -> Vec<Partial> {
    let next = AtomicUsize::new(0);
    let d = Digester { ignore, detail };
    let work = || {
        let mut part = Partial::default();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(inp) = inputs.get(i) else { break };
            let idx = i as u32;
            let push_bad = |part: &mut Partial, e: String| {
                part.unreadable.push((
                    idx,
                    Unreadable {
                        input: inp.name.clone(),
                        error: e,
                    },
                ))
            };
            match &inp.source {
                Source::File(p) => match input::read_report_file(p) {
                    Ok(b) => {
                        if let Err(e) = d.digest(idx, &inp.name, &b, &mut part) {
                            push_bad(&mut part, e);
                        }
                    }
                    Err(e) => push_bad(&mut part, e),
                },
                Source::Text(t) => {
                    if let Err(e) = d.digest(idx, &inp.name, t.as_bytes(), &mut part) {
                        push_bad(&mut part, e);
                    }
                }
            }
        }
        part
    };
    let threads = threads.max(1).min(inputs.len().max(1));
    if threads == 1 {
        return vec![work()];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

pub fn run(args: &FleetArgs) -> i32 {
    if args.svg_dir.is_some() && args.format != FleetFormat::Html {
        eprintln!("gdrdoctor: error: --svg-dir only applies to --format html");
        return crate::app::EXIT_USAGE;
    }
    if let Some(d) = &args.svg_dir {
        if !d.is_dir() {
            eprintln!(
                "gdrdoctor: error: --svg-dir {}: not a directory",
                d.display()
            );
            return crate::app::EXIT_USAGE;
        }
    }
    let (inputs, gather_bad) = match input::gather(&args.reports) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gdrdoctor: error: {e}");
            return crate::app::EXIT_USAGE;
        }
    };
    let threads = gdrdoctor_checks::cpus();
    let t0 = std::time::Instant::now();
    let html = args.format == FleetFormat::Html;
    let parts = digest_all(&inputs, &args.ignore, html, threads);
    let reports = inputs.len() + gather_bad.len();
    // Inputs that failed while listing go first, in argument order.
    let bad: Vec<(u32, Unreadable)> = gather_bad.into_iter().map(|u| (0, u)).collect();
    let r = rollup::build(
        parts,
        bad,
        reports,
        &rollup::Options {
            allow_drift: args.allow_drift,
            allow_incomplete: args.allow_incomplete,
        },
    );
    if r.summary.nodes == 0 {
        for u in &r.unreadable {
            eprintln!("gdrdoctor: {}: {}", u.input, u.error);
        }
        eprintln!("gdrdoctor: error: no report could be read");
        return crate::app::EXIT_USAGE;
    }
    let text = match args.format {
        // Hostnames, messages and values come from the reports: shown, not obeyed.
        FleetFormat::Table => {
            crate::render::sanitize::lines(&render::table(&r, args.max_names)).into_owned()
        }
        FleetFormat::Json => render::json(&r),
        FleetFormat::Prometheus => render::prometheus(&r),
        FleetFormat::Html => crate::render::fleet_html::render(&html::page(
            &r,
            &html::Options {
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
            if let Err(e) = crate::app::write_output(p, &text) {
                eprintln!("gdrdoctor: error: {e}");
                return crate::app::EXIT_USAGE;
            }
        }
        None => {
            if !crate::app::emit(&text) {
                return crate::app::EXIT_USAGE;
            }
        }
    }
    r.summary.exit_code
}
