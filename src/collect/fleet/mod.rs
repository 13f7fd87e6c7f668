//! Many nodes' JSON reports (`gdrdoctor fleet REPORTS...`) gathered ([`input`]), digested
//! ([`digest`], [`flat`]) and rolled up into one view ([`rollup`]): checks x nodes with counts,
//! the nodes failing each check, and drift (the odd node out); and the nodes' topology pictures
//! for the HTML page ([`svg`]).
//!
//! Reports are read and digested by one worker thread per core, each feeding its own aggregate
//! (docs/performance.md: 10,000 reports of an 8-GPU node in seconds); damaged or unreadable
//! reports are named in the output and make the exit code 3, never silently dropped.

pub mod digest;
pub mod flat;
pub mod input;
pub mod rollup;
pub mod svg;

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
