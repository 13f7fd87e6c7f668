//! Issue 18: damaged evidence is never good news, over every fixture and every kind of damage.
//!
//! Each constructed sysroot is copied once; then, one at a time, a file it holds is damaged
//! (truncated to half, emptied, overwritten with garbage, removed, or swapped with another file
//! of the same name), the report is built exactly as `check --sysroot` builds it, and the file
//! is put back. Invariants, for every mutation:
//!
//! 1. every `pass` carries evidence (a source and an observed value);
//! 2. the exit code never gets better: a node that was not healthy (1 or 3) never becomes
//!    healthy (0) because a file was damaged;
//! 3. damaged evidence is never a pass: a finding that was not a pass does not become one when
//!    a file is truncated, emptied, garbled or removed (a swap may legitimately move a defect
//!    from one subject to another, so only 1 and 2 hold for it).
//!
//! The sample is deterministic (seeded). `GDRDOCTOR_MUTATION_RUNS=N` runs N mutations (the CI
//! block runs more than the default), `GDRDOCTOR_MUTATION_SEED=S` changes the sample; a failure
//! prints the fixture, the file and the mutation to reproduce it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
use common::*;
use gdrdoctor::collect;
use gdrdoctor::source::{meta, reader::Root};
use gdrdoctor_checks::report::{Report, Status};
use gdrdoctor_checks::RunOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod byte_damage;
mod holes;
mod live_json;
mod unplug;

/// The files the checks read most: damage here is what an adversary would try first.
const EVIDENCE: &[&str] = &[
    "vendor",
    "device",
    "class",
    "config",
    "resource",
    "fw_ver",
    "hca_type",
    "state",
    "phys_state",
    "link_layer",
    "rate",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "numa_node",
    "cmdline",
    "modules",
    "version",
    "params",
    "live.json",
    "meta.json",
    "kernel-log.txt",
    "counters-baseline.json",
    "type",
    "information",
    "osrelease",
    "limits",
];

/// Files whose absence is a legitimate snapshot (taken by an older gdrdoctor, or without a
/// counter state file): their checks skip with the reason, or judge one reading. Removing
/// them is not damage; truncating or garbling them is.
const OPTIONAL: &[&str] = &["live.json", "counters-baseline.json", "kernel-log.txt"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    Truncate,
    Empty,
    Garbage,
    Remove,
    Swap,
}

const DAMAGES: [Damage; 5] = [
    Damage::Truncate,
    Damage::Empty,
    Damage::Garbage,
    Damage::Remove,
    Damage::Swap,
];

/// xorshift64*: a deterministic sample without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The regular files under `dir` (not the `.gdrdoctor-keep` markers of empty directories).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    walk(dir, &mut |p, t| {
        if t.is_file() && p.file_name().is_some_and(|n| n != ".gdrdoctor-keep") {
            out.push(p.to_path_buf());
        }
    });
}

/// The symbolic links under `dir`.
fn symlinks(dir: &Path, out: &mut Vec<PathBuf>) {
    walk(dir, &mut |p, t| {
        if t.is_symlink() {
            out.push(p.to_path_buf());
        }
    });
}

/// Every entry under `dir` but directories, depth first, links not followed.
fn walk(dir: &Path, each: &mut dyn FnMut(&Path, std::fs::FileType)) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            walk(&e.path(), each);
        } else {
            each(&e.path(), t);
        }
    }
}

/// A fixture copied into a scratch directory, with its intact report's statuses and exit
/// code (what the damaged copies are compared against).
struct Base {
    dir: tempfile::TempDir,
    status: BTreeMap<(String, String), Status>,
    exit: i32,
}

fn base(fixture_name: &str) -> Base {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture(fixture_name), dir.path());
    let r = report(dir.path()).expect("every fixture is readable");
    Base {
        status: statuses(&r),
        exit: r.summary.exit_code,
        dir,
    }
}

/// The campaign's closing line and verdict.
fn conclude(line: String, problems: &[String]) {
    eprintln!("{line}");
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `check --sysroot DIR` in-process; `None` where the CLI exits 2 (the sysroot cannot be
/// used: a garbage meta.json), which is never a better outcome.
fn report(dir: &Path) -> Option<Report> {
    let mut root = Root::sysroot(dir).ok()?;
    let m = meta::read(&root).ok()?;
    root.set_complete(m.is_some());
    let mut node = collect::collect(&root, m.as_ref());
    node.live = meta::read_live(&root);
    Some(gdrdoctor_checks::build_report(
        &node,
        &RunOptions::default(),
    ))
}

fn statuses(r: &Report) -> BTreeMap<(String, String), Status> {
    r.findings
        .iter()
        .map(|f| ((f.id.clone(), f.subject.clone()), f.status))
        .collect()
}

/// The invariants of a damaged report `r` against the intact one (`base`: its statuses and
/// exit code): 1. no pass without evidence; 2. (`exit`) the exit code never becomes 0; 3.
/// (`flips`) nothing that was not a pass becomes one. Each breach goes to `problems`.
fn check_invariants(
    what: &str,
    r: &Report,
    base: (&BTreeMap<(String, String), Status>, i32),
    exit: bool,
    flips: bool,
    problems: &mut Vec<String>,
) {
    let (base_status, base_exit) = base;
    for f in &r.findings {
        if f.status == Status::Pass && !f.has_evidence() {
            problems.push(format!(
                "{what}: {} {} passes without evidence",
                f.id, f.subject
            ));
        }
    }
    if exit && base_exit != 0 && r.summary.exit_code == 0 {
        problems.push(format!("{what}: exit code {base_exit} became 0"));
    }
    if flips {
        for (key, st) in statuses(r) {
            let was = base_status.get(&key).copied();
            if st == Status::Pass && was.is_some_and(|w| w != Status::Pass) {
                problems.push(format!(
                    "{what}: {} {} was {} and now passes",
                    key.0,
                    key.1,
                    was.map(|w| w.as_str()).unwrap_or("?")
                ));
            }
        }
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| {
            let v = v.trim();
            // The test prints its seed in hex: take it back as printed.
            match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(&h.replace('_', ""), 16).ok(),
                None => v.parse().ok(),
            }
        })
        .unwrap_or(default)
}
