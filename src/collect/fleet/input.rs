//! Where the reports come from: files, directories (every `*.json` below them, sorted), and
//! stdin (one or more concatenated reports, a JSON array of reports, or `srun --label` output,
//! whose lines are split back into one stream per task).

use crate::source::input::read_capped;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A report file larger than this is not read (an 8-GPU node's report is a few hundred KiB).
pub const MAX_REPORT: u64 = 64 << 20;
/// Standard input larger than this is not read (many concatenated reports).
pub const MAX_STDIN: u64 = 4 << 30;

/// One report file, at most [`MAX_REPORT`] bytes (a named FIFO or `<(...)` is read too).
pub fn read_report_file(p: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(p).map_err(|e| e.to_string())?;
    read_capped(f, MAX_REPORT, &p.display().to_string())
}

/// One report to read: a file (read by the worker that digests it) or one document from stdin.
pub enum Source {
    File(PathBuf),
    Text(String),
}

pub struct Input {
    /// How the roll-up names this input: the path, or `stdin`, `stdin[task 3]`, `stdin#2`.
    pub name: String,
    pub source: Source,
}

/// An input that could not be read at all, named with the reason.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unreadable {
    pub input: String,
    pub error: String,
}

/// Expand the command-line arguments into inputs. Paths that cannot be listed are unreadable
/// inputs, never dropped; `Err` only for a usage error (stdin named twice).
pub fn gather(args: &[PathBuf]) -> Result<(Vec<Input>, Vec<Unreadable>), String> {
    let mut inputs = Vec::new();
    let mut bad = Vec::new();
    let mut stdin_seen = false;
    for a in args {
        if a.as_os_str() == "-" {
            if stdin_seen {
                return Err("`-` (stdin) given twice".into());
            }
            stdin_seen = true;
            let text = match read_capped(std::io::stdin(), MAX_STDIN, "stdin") {
                Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                Err(e) => {
                    bad.push(Unreadable {
                        input: "stdin".into(),
                        error: e,
                    });
                    continue;
                }
            };
            for (name, t) in split_stdin(&text) {
                documents(&name, &t, &mut inputs, &mut bad);
            }
            continue;
        }
        match std::fs::metadata(a) {
            Ok(m) if m.is_dir() => walk(a, &mut inputs, &mut bad),
            Ok(_) => inputs.push(Input {
                name: a.display().to_string(),
                source: Source::File(a.clone()),
            }),
            Err(e) => bad.push(Unreadable {
                input: a.display().to_string(),
                error: e.to_string(),
            }),
        }
    }
    Ok((inputs, bad))
}

/// One stream of text -> one input per JSON document: concatenated documents, or one array of
/// them. A damaged document ends the stream (what follows cannot be resynchronised).
pub fn documents(name: &str, text: &str, inputs: &mut Vec<Input>, bad: &mut Vec<Unreadable>) {
    let label = |k: usize| {
        if k == 0 {
            name.to_string()
        } else {
            format!("{name}#{}", k + 1)
        }
    };
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        bad.push(Unreadable {
            input: name.to_string(),
            error: "empty input".into(),
        });
        return;
    }
    if trimmed.starts_with('[') {
        match serde_json::from_str::<Vec<serde_json::Value>>(trimmed) {
            Ok(list) => {
                for (k, v) in list.iter().enumerate() {
                    inputs.push(Input {
                        name: format!("{name}[{k}]"),
                        source: Source::Text(v.to_string()),
                    });
                }
            }
            Err(e) => bad.push(Unreadable {
                input: name.to_string(),
                error: format!("not a json array of reports: {e}"),
            }),
        }
        return;
    }
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
    let mut start = 0usize;
    let mut k = 0usize;
    loop {
        match stream.next() {
            None => break,
            Some(Ok(_)) => {
                let end = stream.byte_offset();
                inputs.push(Input {
                    name: label(k),
                    source: Source::Text(text.get(start..end).unwrap_or("").to_string()),
                });
                start = end;
                k += 1;
            }
            Some(Err(e)) => {
                bad.push(Unreadable {
                    input: label(k),
                    error: format!(
                        "not a gdrdoctor json report: {e} (the rest of this stream is not read)"
                    ),
                });
                break;
            }
        }
    }
}

fn walk(dir: &Path, inputs: &mut Vec<Input>, bad: &mut Vec<Unreadable>) {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(e) => {
            bad.push(Unreadable {
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
            walk(&p, inputs, bad);
        } else if p.extension().is_some_and(|e| e == "json") {
            // A FIFO, device or socket found in a directory is never opened (a FIFO without a
            // writer blocks, /dev/zero never ends); a link to a regular file is read.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => inputs.push(Input {
                    name: p.display().to_string(),
                    source: Source::File(p),
                }),
                Ok(_) => bad.push(Unreadable {
                    input: p.display().to_string(),
                    error: "not a regular file (a FIFO, device or socket): not read".into(),
                }),
                Err(e) => bad.push(Unreadable {
                    input: p.display().to_string(),
                    error: e.to_string(),
                }),
            }
        }
    }
}

/// `srun --label` prefixes every line with the task id (`0: `, padded with spaces for wide
/// jobs). When every non-empty line carries such a prefix, the text is split by task;
/// otherwise it is one stream.
pub fn split_stdin(text: &str) -> Vec<(String, String)> {
    let label = |l: &str| -> Option<(u32, usize)> {
        let t = l.trim_start_matches(' ');
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 7 || !t[digits..].starts_with(": ") {
            return None;
        }
        let id = t[..digits].parse().ok()?;
        Some((id, l.len() - t.len() + digits + 2))
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let labelled = !lines.is_empty() && lines.iter().all(|l| label(l).is_some());
    if !labelled {
        return vec![("stdin".into(), text.to_string())];
    }
    let mut tasks: BTreeMap<u32, String> = BTreeMap::new();
    for l in lines {
        if let Some((id, cut)) = label(l) {
            let t = tasks.entry(id).or_default();
            t.push_str(&l[cut..]);
            t.push('\n');
        }
    }
    tasks
        .into_iter()
        .map(|(id, t)| (format!("stdin[task {id}]"), t))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn srun_labels_split_by_task() {
        let t = "0: {\n1: {\n0:   \"a\": 1\n1:   \"b\": 2\n0: }\n1: }\n";
        let s = split_stdin(t);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "stdin[task 0]");
        assert_eq!(s[0].1, "{\n  \"a\": 1\n}\n");
        assert_eq!(s[1].1, "{\n  \"b\": 2\n}\n");
        // Wide jobs pad the id.
        let s = split_stdin(" 9: {}\n10: {}\n");
        assert_eq!(s.len(), 2);
        // Plain JSON is one stream.
        let s = split_stdin("{\n  \"schema\": \"x\"\n}\n");
        assert_eq!(
            s,
            vec![(
                "stdin".to_string(),
                "{\n  \"schema\": \"x\"\n}\n".to_string()
            )]
        );
    }

    proptest! {
        #[test]
        fn split_never_panics_and_keeps_every_line(t in "([0-9 ]{0,3}: ?[ -~]{0,10}\n){0,8}") {
            let s = split_stdin(&t);
            prop_assert!(!s.is_empty());
        }
    }
}
