//! Many nodes' JSON reports (`gdrdoctor fleet REPORTS...`) gathered ([`input`]), digested
//! ([`digest`], [`flat`]) and rolled up into one view ([`rollup`]): checks x nodes with counts,
//! the nodes failing each check, and drift (the odd node out); and the nodes' topology pictures
//! for the HTML page ([`svg`]).
//!
//! Reports are read and digested by one worker thread per core, each feeding its own aggregate
//! (docs/performance.md: 10,000 reports of an 8-GPU node in seconds); damaged or unreadable
//! reports are named in the output and make the exit code 3, never silently dropped.
//!
//! The inputs are streamed: one thread (the caller's) lists them and cuts standard input into
//! documents ([`input::stream`]), handing batches of consecutive inputs to the workers through a
//! bounded queue. What is held at once is the queue and the reports being digested (each worker
//! keeps only its aggregate), never the whole input.

pub mod digest;
pub mod flat;
pub mod input;
pub mod nodeset;
pub mod rollup;
pub mod svg;

use digest::{Digester, Partial};
use input::{Input, Source, Unreadable};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;

/// A batch handed to a worker holds at most this many inputs, or (documents of stdin) about
/// this many bytes.
const BATCH_INPUTS: usize = 64;
const BATCH_BYTES: usize = 1 << 20;

/// One input for a worker: its number (input order), its name, and what to digest.
enum Work<'a> {
    File(&'a std::path::Path),
    Text(&'a str),
    Bytes(Vec<u8>),
    Bad(String),
}

struct Batch<'a> {
    items: Vec<(u32, String, Work<'a>)>,
    bytes: usize,
}

/// Fills batches in input order and sends them when full.
struct Feeder<'a> {
    tx: SyncSender<Batch<'a>>,
    batch: Batch<'a>,
    next: u32,
}

impl<'a> Feeder<'a> {
    fn push(&mut self, name: String, w: Work<'a>) {
        if let Work::Bytes(b) = &w {
            self.batch.bytes += b.len();
        }
        self.batch.items.push((self.next, name, w));
        self.next = self.next.saturating_add(1);
        if self.batch.items.len() >= BATCH_INPUTS || self.batch.bytes >= BATCH_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.batch.items.is_empty() {
            return;
        }
        let b = std::mem::replace(
            &mut self.batch,
            Batch {
                items: Vec::with_capacity(BATCH_INPUTS),
                bytes: 0,
            },
        );
        // A worker that panicked has dropped nothing: the others still receive.
        let _ = self.tx.send(b);
    }
}

/// Digest every input on `threads` workers (at least one).
/// `detail`: keep what the HTML page shows per node ([`digest::NodeDetail`]).
pub fn digest_all(
    inputs: &[Input],
    ignore: &[String],
    detail: bool,
    threads: usize,
) -> Vec<Partial> {
    let d = Digester { ignore, detail };
    let threads = threads.max(1);
    let (tx, rx) = sync_channel::<Batch>(threads * 2);
    let rx: Mutex<Receiver<Batch>> = Mutex::new(rx);
    let work = || {
        let mut part = Partial::default();
        loop {
            let batch = match rx.lock() {
                Ok(r) => match r.recv() {
                    Ok(b) => b,
                    Err(_) => break,
                },
                Err(_) => break,
            };
            for (idx, name, w) in batch.items {
                // A panic in one report's digest names that report; the worker goes on (a
                // worker that died would leave the queue full and the feeder waiting).
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match w {
                    Work::File(p) => {
                        input::read_report_file(p).and_then(|b| d.digest(idx, &name, &b, &mut part))
                    }
                    Work::Text(t) => d.digest(idx, &name, t.as_bytes(), &mut part),
                    Work::Bytes(b) => d.digest(idx, &name, &b, &mut part),
                    Work::Bad(e) => Err(e),
                }))
                .unwrap_or_else(|_| Err("internal error while reading this report".into()));
                if let Err(error) = r {
                    part.unreadable
                        .push((idx, Unreadable { input: name, error }));
                }
            }
        }
        part
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        let mut feed = Feeder {
            tx,
            batch: Batch {
                items: Vec::with_capacity(BATCH_INPUTS),
                bytes: 0,
            },
            next: 0,
        };
        for inp in inputs {
            match &inp.source {
                Source::File(p) => feed.push(inp.name.clone(), Work::File(p)),
                Source::Text(t) => feed.push(inp.name.clone(), Work::Text(t)),
                Source::Stdin => input::stream(
                    std::io::stdin().lock(),
                    input::MAX_STDIN,
                    input::MAX_REPORT as usize,
                    &mut |(name, r)| match r {
                        Ok(b) => feed.push(name, Work::Bytes(b)),
                        Err(e) => feed.push(name, Work::Bad(e)),
                    },
                ),
            }
        }
        feed.flush();
        drop(feed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    })
}
