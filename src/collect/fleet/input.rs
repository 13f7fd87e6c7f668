//! Where the reports come from: files, directories (every `*.json` below them, sorted), and
//! stdin (one or more concatenated reports, JSON arrays of reports, or `srun --label` output,
//! whose lines are split back into one stream per task).
//!
//! Standard input is streamed: [`stream`] cuts it into documents as it reads (a JSON-aware
//! scan of brackets and strings, [`Splitter`]) and hands each one on at once, so `fleet -`
//! holds at most the documents in flight, never the whole input (it held three copies of it).
//! Each document is parsed in full by the worker that digests it.

use crate::source::input::read_capped;
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

/// A report larger than this is not read (an 8-GPU node's report is a few hundred KiB).
pub const MAX_REPORT: u64 = 64 << 20;
/// Standard input beyond this many bytes is not read (many concatenated reports); what came
/// before is kept.
pub const MAX_STDIN: u64 = 4 << 30;

/// One report file, at most [`MAX_REPORT`] bytes (a named FIFO or `<(...)` is read too).
pub fn read_report_file(p: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(p).map_err(|e| e.to_string())?;
    read_capped(f, MAX_REPORT, &p.display().to_string())
}

/// One report to read.
pub enum Source {
    /// A file, read by the worker that digests it.
    File(PathBuf),
    /// One document already in memory.
    Text(String),
    /// Standard input: streamed, each document an input of its own ([`stream`]).
    Stdin,
}

pub struct Input {
    /// How the roll-up names this input: the path, or `stdin` (its documents are named
    /// `stdin`, `stdin#2`, `stdin[0]`, `stdin[task 3]`).
    pub name: String,
    pub source: Source,
}

/// An input that could not be read at all, named with the reason.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct Unreadable {
    pub input: String,
    pub error: String,
}

/// What the command line names, expanded: the inputs to read, the paths that could not be
/// listed, and the files named more than once.
#[derive(Default)]
pub struct Gathered {
    pub inputs: Vec<Input>,
    pub bad: Vec<Unreadable>,
    /// Files reached more than once (`fleet a.json a.json`, `fleet reports/ reports/x.json`, a
    /// link to a report beside it), once each: `(the name it is read under, the first other
    /// name)`. Each file is read once: twice, it was two nodes and the same Prometheus series
    /// twice.
    pub twice: Vec<(String, String)>,
}

/// Expand the command-line arguments into inputs, each file once (by its canonical path).
/// Paths that cannot be listed are unreadable inputs, never dropped; `Err` only for a usage
/// error (stdin named twice).
pub fn gather(args: &[PathBuf]) -> Result<Gathered, String> {
    let mut g = Gathered::default();
    let mut seen = Seen::default();
    let mut stdin_seen = false;
    for a in args {
        if a.as_os_str() == "-" {
            if stdin_seen {
                return Err("`-` (stdin) given twice".into());
            }
            stdin_seen = true;
            g.inputs.push(Input {
                name: "stdin".into(),
                source: Source::Stdin,
            });
            continue;
        }
        match std::fs::metadata(a) {
            Ok(m) if m.is_dir() => walk(a, &mut g, &mut seen),
            Ok(_) => seen.push(a.clone(), &mut g),
            Err(e) => g.bad.push(Unreadable {
                input: a.display().to_string(),
                error: e.to_string(),
            }),
        }
    }
    Ok(g)
}

/// The files already taken, by canonical path (the path as given when it has none: a file gone
/// meanwhile is then named unreadable by the read): the name each is read under, and whether
/// it was already said to be given twice.
#[derive(Default)]
struct Seen(std::collections::HashMap<PathBuf, (String, bool)>);

impl Seen {
    fn push(&mut self, p: PathBuf, g: &mut Gathered) {
        let name = p.display().to_string();
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        match self.0.get_mut(&key) {
            Some((first, said)) => {
                if !*said {
                    *said = true;
                    g.twice.push((first.clone(), name));
                }
            }
            None => {
                self.0.insert(key, (name.clone(), false));
                g.inputs.push(Input {
                    name,
                    source: Source::File(p),
                });
            }
        }
    }
}

/// Counts what is read from standard input and refuses more than its cap.
struct Capped<R> {
    inner: R,
    read: u64,
    cap: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.read >= self.cap {
            // One byte more tells a stream of exactly `cap` bytes from a longer one.
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(format!(
                    "more than {} MiB: the rest is not read",
                    self.cap >> 20
                ))),
            };
        }
        let room = usize::try_from(self.cap - self.read)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(&mut buf[..room])?;
        self.read += n as u64;
        Ok(n)
    }
}

/// What [`stream`] hands on: the name of one document and its bytes, or why it cannot be read.
pub type Document = (String, Result<Vec<u8>, String>);

/// Read standard input (or any reader) as it comes and hand every document to `emit`, in the
/// order they complete: concatenated reports (`stdin`, `stdin#2`, ...), the elements of a JSON
/// array (`stdin[0]`, ...), or, when the first line carries an `srun --label` prefix (`0: `,
/// padded with spaces in wide jobs), one stream per task (`stdin[task 3]`, `stdin[task 3]#2`).
/// At most `max_stdin` bytes are read and one document holds at most `max_doc` bytes; what
/// cannot be read is an `Err` document naming why, never dropped.
pub fn stream(r: impl Read, max_stdin: u64, max_doc: usize, emit: &mut dyn FnMut(Document)) {
    let mut r = std::io::BufReader::with_capacity(
        1 << 20,
        Capped {
            inner: r,
            read: 0,
            cap: max_stdin,
        },
    );
    // Leading white space, then: a label (`12: `) or the first document.
    let first = loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) => {
                emit(("stdin".into(), Err(format!("stdin: {e}"))));
                return;
            }
        };
        if buf.is_empty() {
            emit(("stdin".into(), Err("empty input".into())));
            return;
        }
        let ws = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
        let at = buf.get(ws).copied();
        r.consume(ws);
        if let Some(b) = at {
            break b;
        }
    };
    if first.is_ascii_digit() {
        labelled(r, max_doc, emit);
    } else {
        let mut sp = Splitter::new(max_doc);
        let mut k = 0usize;
        let name = |k: &mut usize, array: Option<usize>| {
            let n = match array {
                Some(i) => format!("stdin[{i}]"),
                None if *k == 0 => "stdin".to_string(),
                None => format!("stdin#{}", *k + 1),
            };
            *k += 1;
            n
        };
        loop {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) => {
                    let n = name(&mut k, None);
                    emit((n, Err(format!("stdin: {e}"))));
                    return;
                }
            };
            if buf.is_empty() {
                break;
            }
            let len = buf.len();
            sp.feed(buf, &mut |d| emit((name(&mut k, d.element), d.bytes)));
            r.consume(len);
            if sp.stopped() {
                return;
            }
        }
        sp.finish(&mut |d| emit((name(&mut k, d.element), d.bytes)));
    }
}

/// `srun --label` output: every line `<task>: <text>`, tasks interleaved line by line. Each
/// task's text goes through its own [`Splitter`]; a document is handed on as soon as its task
/// completes it, so only the documents still being written are held.
fn labelled(mut r: impl BufRead, max_doc: usize, emit: &mut dyn FnMut(Document)) {
    struct Task {
        sp: Splitter,
        docs: usize,
    }
    fn name(id: u32, task: &mut Task, element: Option<usize>) -> String {
        let base = format!("stdin[task {id}]");
        task.docs += 1;
        match element {
            Some(i) => format!("{base}[{i}]"),
            None if task.docs == 1 => base,
            None => format!("{base}#{}", task.docs),
        }
    }
    let mut tasks: BTreeMap<u32, Task> = BTreeMap::new();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        // A line is at most one document (and its label) long.
        match r
            .by_ref()
            .take(max_doc as u64 + 64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                emit(("stdin".into(), Err(format!("stdin: {e}"))));
                return;
            }
        }
        number += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Some((id, cut)) = label(&line) else {
            emit((
                format!("stdin line {number}"),
                Err("not `srun --label` output (no `<task>: ` prefix) where the first line had one: line not read".into()),
            ));
            continue;
        };
        let t = tasks.entry(id).or_insert_with(|| Task {
            sp: Splitter::new(max_doc),
            docs: 0,
        });
        if t.sp.stopped() {
            continue;
        }
        let mut out = Vec::new();
        t.sp.feed(&line[cut..], &mut |d| out.push(d));
        if !line.ends_with(b"\n") {
            t.sp.feed(b"\n", &mut |d| out.push(d));
        }
        for d in out {
            let n = name(id, t, d.element);
            emit((n, d.bytes));
        }
    }
    for (id, t) in tasks.iter_mut() {
        let mut out = Vec::new();
        t.sp.finish(&mut |d| out.push(d));
        for d in out {
            let n = name(*id, t, d.element);
            emit((n, d.bytes));
        }
    }
}

/// The task id of an `srun --label` line and where its text starts: `0: `, ` 9: `, `10: `.
fn label(l: &[u8]) -> Option<(u32, usize)> {
    let pad = l.iter().take_while(|b| **b == b' ').count();
    let t = &l[pad..];
    let digits = t.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 7 || !t[digits..].starts_with(b": ") {
        return None;
    }
    let id = std::str::from_utf8(&t[..digits]).ok()?.parse().ok()?;
    Some((id, pad + digits + 2))
}

/// One document cut out of a stream: its bytes (or why not), and its place when it was an
/// element of a top-level array.
pub struct Cut {
    pub element: Option<usize>,
    pub bytes: Result<Vec<u8>, String>,
}

/// The second line of every report gdrdoctor writes (`-f json`, pretty-printed).
const SECOND_LINE: &[u8] = b"  \"schema\": \"gdrdoctor.";

const CUT_SHORT: &str =
    "a report cut short: another report starts before it ends; the stream is read on from there";

/// Cuts a stream of JSON into documents as it comes, without parsing them: it follows strings
/// (and their escapes) and brackets only. A top-level object is a document; a top-level array
/// is a list of documents, one per element. A document that is not valid JSON is still handed
/// on whole (the parse that digests it says what is wrong).
///
/// Damage is resynchronised where a report starts. Every report gdrdoctor writes starts with a
/// line `{` and its second line is [`SECOND_LINE`]; inside one, no line starts with `{` and no
/// other line is the second. Inside a document, a line that starts with `{` means the document
/// was cut short (`check -f json | head -c`) and another one starts there; a second line
/// means another one started at the `{` that ends the line before it (the next report written
/// right after the cut, on the same line). The damaged one is an `Err` cut and the next is read
/// (it swallowed every report after it). Text at the top level that starts no document (a
/// stray line of a launcher) is an `Err` cut, and what follows is skipped up to a line that
/// starts with `{`. A document larger than the cap stops the stream.
pub struct Splitter {
    cur: Vec<u8>,
    max: usize,
    /// Inside a top-level array (elements are documents).
    in_array: bool,
    /// The element number of the next element of the current top-level array.
    element: usize,
    /// Inside a document: its bracket depth, whether in a string, after a backslash in one.
    in_doc: bool,
    depth: u32,
    in_str: bool,
    esc: bool,
    /// The document is a scalar element of an array (ends at `,` or `]` outside a string).
    scalar: bool,
    /// The next byte starts a line.
    bol: bool,
    /// How much of [`SECOND_LINE`] the current line has matched so far (`None`: it does not).
    second: Option<usize>,
    /// After text that starts no document: skipping to a line that starts with `{`.
    skipping: bool,
    stopped: bool,
}

impl Splitter {
    pub fn new(max: usize) -> Splitter {
        Splitter {
            cur: Vec::new(),
            max,
            in_array: false,
            element: 0,
            in_doc: false,
            depth: 0,
            in_str: false,
            esc: false,
            scalar: false,
            bol: true,
            second: None,
            skipping: false,
            stopped: false,
        }
    }

    /// Damaged: the rest of the stream is not read.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    fn cut(&mut self, out: &mut dyn FnMut(Cut)) {
        let element = self.in_array.then(|| {
            self.element += 1;
            self.element - 1
        });
        self.in_doc = false;
        out(Cut {
            element,
            bytes: Ok(std::mem::take(&mut self.cur)),
        });
    }

    /// The current document is damaged: handed on as an `Err`, its bytes dropped; the stream
    /// goes on.
    fn damaged(&mut self, why: String, out: &mut dyn FnMut(Cut)) {
        let element = self.in_array.then(|| {
            self.element += 1;
            self.element - 1
        });
        self.in_doc = false;
        self.cur = Vec::new();
        out(Cut {
            element,
            bytes: Err(why),
        });
    }

    /// The current document's last line is [`SECOND_LINE`]: unless it is the document's own
    /// second line, another report started at the `{` that ends the line before it. The
    /// document up to there is damaged; the new one goes on from its `{`.
    fn second_line(&mut self, out: &mut dyn FnMut(Cut)) {
        let mut k = self.cur.len().saturating_sub(SECOND_LINE.len());
        for b in [b'\n', b'\r'] {
            if k > 0 && self.cur[k - 1] == b {
                k -= 1;
            }
        }
        if k < 2 || self.cur[k - 1] != b'{' {
            // Its own second line (`{` is its first byte), or not after a `{`: read on.
            return;
        }
        let rest = self.cur.split_off(k - 1);
        self.damaged(CUT_SHORT.into(), out);
        self.cur = rest;
        self.in_doc = true;
        // Where [`SECOND_LINE`] ends: in the top-level object, inside the schema's string.
        self.depth = 1;
        self.in_str = true;
        self.esc = false;
        self.scalar = false;
    }

    fn stop(&mut self, why: String, out: &mut dyn FnMut(Cut)) {
        self.stopped = true;
        self.cur = Vec::new();
        let element = self.in_array.then_some(self.element);
        out(Cut {
            element,
            bytes: Err(why),
        });
    }

    pub fn feed(&mut self, bytes: &[u8], out: &mut dyn FnMut(Cut)) {
        let mut i = 0usize;
        while i < bytes.len() && !self.stopped {
            if self.in_doc {
                // Scan to the end of the document or of these bytes, then copy in one go.
                let from = i;
                let mut end = None;
                let mut cut_short = false;
                let mut glued = false;
                while i < bytes.len() {
                    let b = bytes[i];
                    if self.bol && b == b'{' && (i > from || !self.cur.is_empty()) {
                        // A line that starts with `{` inside a document: this one was cut
                        // short and another starts here (a raw line break cannot be inside
                        // a JSON string, and no report of gdrdoctor's has one nested at
                        // column 0).
                        cut_short = true;
                        break;
                    }
                    if self.bol {
                        self.second = Some(0);
                    }
                    if let Some(n) = self.second {
                        self.second = (SECOND_LINE.get(n) == Some(&b)).then_some(n + 1);
                        if self.second == Some(SECOND_LINE.len()) {
                            self.second = None;
                            glued = true;
                        }
                    }
                    self.bol = b == b'\n';
                    if self.in_str {
                        if self.esc {
                            self.esc = false;
                        } else if b == b'\\' {
                            self.esc = true;
                        } else if b == b'"' {
                            self.in_str = false;
                        }
                    } else if self.scalar && (b == b',' || b == b']' || b.is_ascii_whitespace()) {
                        end = Some(i);
                        break;
                    } else {
                        match b {
                            b'"' => self.in_str = true,
                            b'{' | b'[' => self.depth += 1,
                            b'}' | b']' => {
                                self.depth = self.depth.saturating_sub(1);
                                if self.depth == 0 && !self.scalar {
                                    i += 1;
                                    end = Some(i);
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    i += 1;
                    if glued {
                        break;
                    }
                }
                if cut_short {
                    self.damaged(CUT_SHORT.into(), out);
                    continue;
                }
                let to = end.unwrap_or(i);
                if self.cur.len() + (to - from) > self.max {
                    self.stop(
                        format!(
                            "a document larger than {} MiB: not read (the rest of this stream is not read)",
                            self.max >> 20
                        ),
                        out,
                    );
                    return;
                }
                self.cur.extend_from_slice(&bytes[from..to]);
                if end.is_some() {
                    self.cut(out);
                } else if glued {
                    self.second_line(out);
                }
                continue;
            }
            let b = bytes[i];
            if self.skipping {
                if self.bol && b == b'{' {
                    self.skipping = false;
                } else {
                    self.bol = b == b'\n';
                    i += 1;
                    continue;
                }
            }
            if b.is_ascii_whitespace() {
                self.bol = b == b'\n';
                i += 1;
                continue;
            }
            if self.in_array {
                match b {
                    b',' => {
                        self.bol = false;
                        i += 1;
                        continue;
                    }
                    b']' => {
                        self.in_array = false;
                        self.bol = false;
                        i += 1;
                        continue;
                    }
                    _ => {}
                }
            } else if b == b'[' {
                self.in_array = true;
                self.element = 0;
                self.bol = false;
                i += 1;
                continue;
            } else if b != b'{' {
                let near = String::from_utf8_lossy(&bytes[i..bytes.len().min(i + 16)]).into_owned();
                // (Only outside an array: inside one, anything is an element.)
                out(Cut {
                    element: None,
                    bytes: Err(format!(
                        "not a gdrdoctor json report: `{}` where a report should start (skipped up to the next line that starts with `{{`)",
                        near.escape_debug()
                    )),
                });
                self.skipping = true;
                continue;
            }
            // A document starts here: an object, or any element of an array.
            self.in_doc = true;
            self.scalar = !matches!(b, b'{' | b'[');
            self.depth = 0;
            self.in_str = false;
            self.esc = false;
            self.cur.clear();
        }
    }

    /// The end of the stream: a document still open is handed on as it is (its parse says
    /// that it ends early).
    pub fn finish(&mut self, out: &mut dyn FnMut(Cut)) {
        if self.stopped || self.skipping {
            return;
        }
        if self.in_doc && !self.cur.is_empty() {
            self.cut(out);
        } else if self.in_array {
            self.stop("a json array of reports that does not end".into(), out);
        }
    }
}

fn walk(dir: &Path, g: &mut Gathered, seen: &mut Seen) {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(e) => {
            g.bad.push(Unreadable {
                input: dir.display().to_string(),
                error: e.to_string(),
            });
            return;
        }
    };
    entries.sort();
    for p in entries {
        // Do not follow directory symlinks (loops); files behind links are read.
        let Ok(lm) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if lm.is_dir() {
            walk(&p, g, seen);
        } else if p.extension().is_some_and(|e| e == "json") {
            // A FIFO, device or socket found in a directory is never opened (a FIFO without a
            // writer blocks, /dev/zero never ends); a link to a regular file is read.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => seen.push(p, g),
                Ok(_) => g.bad.push(Unreadable {
                    input: p.display().to_string(),
                    error: "not a regular file (a FIFO, device or socket): not read".into(),
                }),
                Err(e) => g.bad.push(Unreadable {
                    input: p.display().to_string(),
                    error: e.to_string(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    /// The documents of a stream, as `(name, text or error)`.
    fn docs(t: &str) -> Vec<(String, Result<String, String>)> {
        docs_capped(t, MAX_STDIN, MAX_REPORT as usize)
    }

    fn docs_capped(t: &str, max: u64, max_doc: usize) -> Vec<(String, Result<String, String>)> {
        let mut out = Vec::new();
        stream(
            std::io::Cursor::new(t.as_bytes()),
            max,
            max_doc,
            &mut |(n, b)| out.push((n, b.map(|b| String::from_utf8(b).unwrap()))),
        );
        out
    }

    fn ok(n: &str, t: &str) -> (String, Result<String, String>) {
        (n.to_string(), Ok(t.to_string()))
    }

    #[test]
    fn srun_labels_split_by_task() {
        let t = "0: {\n1: {\n0:   \"a\": 1\n1:   \"b\": \"}\"\n0: }\n1: }\n";
        assert_eq!(
            docs(t),
            vec![
                ok("stdin[task 0]", "{\n  \"a\": 1\n}"),
                ok("stdin[task 1]", "{\n  \"b\": \"}\"\n}"),
            ]
        );
        // Wide jobs pad the id; two reports from one task.
        assert_eq!(
            docs(" 9: {}\n10: {}\n 9: {\"x\":[1]}"),
            vec![
                ok("stdin[task 9]", "{}"),
                ok("stdin[task 10]", "{}"),
                ok("stdin[task 9]#2", "{\"x\":[1]}"),
            ]
        );
        // A line without a label is named, the rest is read.
        let d = docs("0: {\n{}\n0: }\n");
        assert_eq!(d[0].0, "stdin line 2");
        assert!(d[0].1.as_ref().unwrap_err().contains("srun --label"));
        assert_eq!(d[1], ok("stdin[task 0]", "{\n}"));
    }

    #[test]
    fn concatenated_reports_and_arrays_are_cut_as_they_come() {
        assert_eq!(
            docs("  {\"a\": \"x}\\\"{\"}{\"b\":{}}\n\n{}"),
            vec![
                ok("stdin", "{\"a\": \"x}\\\"{\"}"),
                ok("stdin#2", "{\"b\":{}}"),
                ok("stdin#3", "{}"),
            ]
        );
        assert_eq!(
            docs("[{\"a\": [1, 2]}, {}, 7 , \"s,]\"]"),
            vec![
                ok("stdin[0]", "{\"a\": [1, 2]}"),
                ok("stdin[1]", "{}"),
                ok("stdin[2]", "7"),
                ok("stdin[3]", "\"s,]\""),
            ]
        );
        // Damage: what parsed is kept; an open document is handed on (its parse says so);
        // garbage at the top level ends the stream.
        assert_eq!(
            docs("{} {\"a\": "),
            vec![ok("stdin", "{}"), ok("stdin#2", "{\"a\": ")]
        );
        let d = docs("{} x {}");
        assert_eq!(d.len(), 2);
        assert!(d[1]
            .1
            .as_ref()
            .unwrap_err()
            .contains("where a report should start"));
        assert_eq!(docs("   ")[0].1, Err("empty input".to_string()));
        assert!(docs("[{}")[1]
            .1
            .as_ref()
            .unwrap_err()
            .contains("does not end"));
    }

    /// A report cut short (`check -f json | head -c`) swallowed every report after it (its
    /// open brackets and strings ran on into them): a line that starts with `{`, or a report's
    /// second line after a `{`, starts the next report; the damaged one is named, and the rest
    /// is read. Text that starts no report is skipped to a line that starts with `{`.
    #[test]
    fn damage_is_resynchronised_where_the_next_report_starts() {
        let whole = "{\n  \"schema\": \"gdrdoctor.report/v1\",\n  \"a\": [\n    {\n      \"s\": \"x\"\n    }\n  ]\n}";
        let ws = |d: &[(String, Result<String, String>)]| {
            d.iter()
                .map(|(n, r)| format!("{n}: {}", if r.is_ok() { "ok" } else { "err" }))
                .collect::<Vec<_>>()
        };
        // Cut anywhere (inside a string or not, after a line break or not), followed by the
        // next report on a line of its own or on the same line.
        for cut in 1..whole.len() {
            let short = &whole[..cut];
            for sep in ["\n", ""] {
                let d = docs(&format!("{whole}\n{short}{sep}{whole}\n{whole}"));
                assert_eq!(
                    ws(&d),
                    ["stdin: ok", "stdin#2: err", "stdin#3: ok", "stdin#4: ok"],
                    "cut at {cut} {short:?}, then {sep:?}: {d:?}"
                );
                assert_eq!(d[0], ok("stdin", whole));
                assert!(d[1].1.as_ref().unwrap_err().contains("cut short"), "{d:?}");
                assert_eq!(d[2], ok("stdin#3", whole));
                assert_eq!(d[3], ok("stdin#4", whole));
            }
        }
        // The last report cut short: handed on (its parse says so).
        let d = docs(&format!("{whole}{}", &whole[..20]));
        assert_eq!(d[1], ok("stdin#2", &whole[..20]));
        // The same per task in `srun --label` output.
        let mut t = String::new();
        for l in whole[..20].lines().chain(whole.lines()) {
            t.push_str(&format!("0: {l}\n"));
        }
        let d = docs(&t);
        assert!(d[0].1.as_ref().unwrap_err().contains("cut short"), "{d:?}");
        assert_eq!(d[1], ok("stdin[task 0]#2", whole));
        // A stray line between reports: named, then the next report is read.
        let d = docs(&format!(
            "{whole}\nsrun: error: task 3 {{x}}\n {{}}\n{whole}"
        ));
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d[1].1.as_ref().unwrap_err().contains("`srun: error"),
            "{d:?}"
        );
        assert_eq!(d[2], ok("stdin#3", whole));
        // An object nested at column 0 (not gdrdoctor's) is damage, never read as whole.
        let d = docs("{\"a\":\n{\"b\": 1}}");
        assert!(d[0].1.is_err(), "{d:?}");
    }

    #[test]
    fn caps_on_the_stream_and_on_one_document() {
        let d = docs_capped("{}{\"aaaaaaaaaa\": 1}{}", 1 << 30, 8);
        assert_eq!(d[0], ok("stdin", "{}"));
        assert!(
            d[1].1.as_ref().unwrap_err().contains("larger than"),
            "{d:?}"
        );
        assert_eq!(d.len(), 2, "the rest is not read");
        let d = docs_capped("{}{}{}{}", 4, 1 << 20);
        assert_eq!(d[..2], [ok("stdin", "{}"), ok("stdin#2", "{}")]);
        assert!(
            d[2].1.as_ref().unwrap_err().contains("rest is not read"),
            "{d:?}"
        );
        assert_eq!(docs_capped("{}{}", 4, 1 << 20).len(), 2, "exactly the cap");
    }

    proptest! {
        #[test]
        fn streams_never_panic(t in "([0-9 ]{0,3}: ?[ -~]{0,10}\n){0,8}", u in "[\\[\\]{}\",: a1\\\\]{0,40}") {
            let _ = docs(&t);
            let _ = docs(&u);
        }

        /// Any list of objects, written one after another, comes back as it was.
        #[test]
        fn concatenated_objects_come_back_whole(vals in proptest::collection::vec("[ -~]{0,12}", 1..6)) {
            let objs: Vec<String> = vals.iter().map(|v| serde_json::json!({"k": v, "l": [v]}).to_string()).collect();
            let got = docs(&objs.join("\n"));
            let want: Vec<_> = objs.iter().enumerate().map(|(k, o)| (if k == 0 { "stdin".to_string() } else { format!("stdin#{}", k + 1) }, Ok(o.clone()))).collect();
            prop_assert_eq!(got, want);
        }
    }
}
