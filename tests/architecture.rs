//! The floor plan of `src/` (docs/architecture.md), held by a test: every `crate::` path in a
//! source file names a layer at or below the file's own, `source/` and `worker/` (side by side
//! on one floor) do not use each other, and a command (`cmd/`) uses neither the lobby nor another
//! command. A change that runs an import back up a floor fails here with the file, the line and
//! the two layers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The layers, top first; a file's layer is its first path component under `src/`.
const LAYERS: &[&[&str]] = &[
    &["main", "lib"],
    &["app"],
    &["cmd"],
    &["output"],
    &["render"],
    &["probe"],
    &["collect"],
    &["state"],
    &["source", "worker"],
    &["live"],
    &["sys"],
];

fn floor(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a `src/` file belongs to: `src/cmd/check.rs` -> `cmd`, `src/lib.rs` -> `lib`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::NAME` in the code of a line (comments and string literals are not code).
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut in_str = false;
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' && (i == 0 || b[i - 1] != b'\\') {
            in_str = !in_str;
        }
        if !in_str && b[i..].starts_with(b"crate::") {
            let name: String = b[i + 7..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .map(|c| char::from(*c))
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
            i += 7;
            continue;
        }
        i += 1;
    }
    out
}

/// What `use crate::{a, b::c}` brings in: `a`, `b`.
fn grouped_use(line: &str) -> Vec<String> {
    let Some(rest) = line.trim_start().strip_prefix("use crate::{") else {
        return Vec::new();
    };
    rest.split(['{', '}', ','])
        .map(|s| s.trim().split("::").next().unwrap_or("").to_string())
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// The lines of a file, with a `use` statement that spans lines joined into one (at its first
/// line's number).
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (no, line) in text.lines().enumerate() {
        if let Some((start, mut acc)) = open.take() {
            acc.push(' ');
            acc.push_str(line.trim());
            if line.contains(';') {
                out.push((start, acc));
            } else {
                open = Some((start, acc));
            }
            continue;
        }
        let t = line.trim_start();
        if (t.starts_with("use ") || t.starts_with("pub use ")) && !line.contains(';') {
            open = Some((no, line.to_string()));
        } else {
            out.push((no, line.to_string()));
        }
    }
    out.extend(open);
    out
}

#[test]
fn every_import_runs_down_the_floors() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for f in &files {
        let own = module_of(&src, f);
        let own_floor =
            floor(&own).unwrap_or_else(|| panic!("{}: `{own}` is on no floor", f.display()));
        let text = std::fs::read_to_string(f).unwrap();
        for (no, line) in statements(&text) {
            let line = line.as_str();
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            for used in crate_paths(line).into_iter().chain(grouped_use(line)) {
                if used == "VERSION" || used == own {
                    continue;
                }
                let Some(used_floor) = floor(&used) else {
                    wrong.push(format!(
                        "{}:{}: crate::{used} is on no floor",
                        f.display(),
                        no + 1
                    ));
                    continue;
                };
                let why = if used_floor < own_floor {
                    Some("runs back up")
                } else if used_floor == own_floor {
                    Some("side by side on one floor")
                } else {
                    None
                };
                if let Some(why) = why {
                    wrong.push(format!(
                        "{}:{}: `{own}` uses `crate::{used}`: {why}",
                        f.display(),
                        no + 1
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the floor plan:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_command_is_one_file_that_knows_no_other_command() {
    let cmd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/cmd");
    let mut files = Vec::new();
    rs_files(&cmd, &mut files);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for f in &files {
        assert!(
            f.parent() == Some(cmd.as_path()),
            "{}: a command is one file in src/cmd/",
            f.display()
        );
        let me = f.file_stem().unwrap().to_string_lossy();
        let text = std::fs::read_to_string(f).unwrap();
        for (no, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for other in &names {
                if other != me.as_ref()
                    && other != "mod"
                    && (code.contains(&format!("cmd::{other}::"))
                        || code.contains(&format!("super::{other}")))
                {
                    panic!(
                        "{}:{}: the command `{me}` uses the command `{other}`",
                        f.display(),
                        no + 1
                    );
                }
            }
        }
    }
}

#[test]
fn the_reader_sees_paths_in_code_only() {
    assert_eq!(crate_paths("use crate::sys::trace; // crate::app"), ["sys"]);
    assert_eq!(
        crate_paths("let s = \"crate::app\"; crate::output::fail(e)"),
        ["output"]
    );
    assert_eq!(
        grouped_use("use crate::{collect, source::Location};"),
        ["collect", "source"]
    );
    assert_eq!(
        statements("use crate::{\n    a,\n    b::c,\n};\nx")[0].1,
        "use crate::{ a, b::c, };"
    );
    assert_eq!(floor("cmd"), Some(2));
    assert_eq!(floor("source"), floor("worker"));
}
