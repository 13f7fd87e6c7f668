//! Shared helpers for the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use gdrdoctor::collect;
use gdrdoctor::source::meta;
use gdrdoctor::source::reader::Root;
use gdrdoctor_checks::report::{Finding, Report};
use gdrdoctor_checks::RunOptions;
pub mod host_root;
pub mod hostile_svg;
pub mod nodes;
pub mod plant;
pub mod tools;
pub use nodes::{build_once, fixture};

use std::path::{Path, PathBuf};

pub mod require;
pub mod stand_ins;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every fixture node's name, sorted (`fixtures/nodes/<name>.tar.gz`).
pub fn scenarios() -> Vec<String> {
    nodes::names()
}

/// `check --sysroot DIR` in-process, exactly as the CLI does it.
pub fn report_for(dir: &Path) -> Report {
    let mut root = Root::sysroot(dir).unwrap();
    let m = meta::read(&root).unwrap();
    root.set_complete(m.is_some());
    let mut node = collect::collect(&root, m.as_ref());
    node.live = meta::read_live(&root);
    gdrdoctor_checks::build_report(&node, &RunOptions::default())
}

/// A scratch state directory (under cargo's `target/tmp`) for the live `check` runs of the tests.
pub fn test_state_dir() -> std::path::PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gdrdoctor-state")
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gdrdoctor")
}

pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .env_remove("NO_COLOR")
        // Live `check` runs keep a counter state file; tests must not touch /run/gdrdoctor.
        .env("GDRDOCTOR_STATE_DIR", test_state_dir())
        // The table's width: the fixed default for a pipe, whatever the caller's shell exports.
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// id, status, subject, message, remediation, evidence (observed / expected).
pub type Comparable = (String, String, String, String, Option<String>, Vec<String>);

/// Findings without provenance paths: what must be equal between a node and its snapshot.
pub fn comparable(f: &[Finding]) -> Vec<Comparable> {
    f.iter()
        .map(|f| {
            (
                f.id.clone(),
                f.status.to_string(),
                f.subject.clone(),
                f.message.clone(),
                f.remediation.clone(),
                f.evidence
                    .iter()
                    .map(|e| format!("{} / {:?}", e.observed, e.expected))
                    .collect(),
            )
        })
        .collect()
}

pub fn find<'a>(r: &'a Report, id: &str, subject: &str) -> &'a Finding {
    r.findings
        .iter()
        .find(|f| f.id == id && f.subject == subject)
        .unwrap_or_else(|| panic!("no finding {id} for {subject}: {:#?}", r.findings))
}

/// Copy a tree (symlinks kept as symlinks) into `dst`.
pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        let to = dst.join(e.file_name());
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &to).unwrap();
        } else if t.is_dir() {
            copy_tree(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Start `cmd` with SIGINT, SIGTERM and SIGHUP at their default dispositions, whatever the test
/// inherited: a harness started in the background by a shell without job control ignores
/// SIGINT (and `nohup` SIGHUP), and gdrdoctor keeps an ignored signal ignored, as it should;
/// a test of its signal handling must not depend on how the harness was started.
#[allow(dead_code)]
pub fn with_default_termination_signals(
    cmd: &mut std::process::Command,
) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}
