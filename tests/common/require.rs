//! Tests that need something outside the Rust toolchain (a system library, its headers, a tool)
//! go through [`skip`] when it is missing, so that `cargo test --workspace` passes on a machine
//! that has only cargo, and says so:
//!
//! ```text
//! SKIP verbs: libibverbs.so.1 not loadable: ...; to run these tests: apt-get install libibverbs1 ibverbs-providers (GDRDOCTOR_TEST_REQUIRE_ALL=1 makes this a failure)
//! ```
//!
//! One line per group and test binary, written straight to the process's stderr: the test
//! harness captures `eprintln!` of passing tests, so a skip printed that way would be invisible.
//! `GDRDOCTOR_TEST_REQUIRE_ALL=1` (set by `.ci/run`) turns every skip into a failure with the
//! same text, so CI runs them all.
//!
//! Std only: `tests/common/mod.rs` re-exports it for the gdrdoctor tests, and the checks crate's
//! tests include this file with `#[path]`.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Set to `1` to make every skip a failure.
pub const REQUIRE_ALL: &str = "GDRDOCTOR_TEST_REQUIRE_ALL";

/// Groups already reported by this test binary.
static REPORTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Whether skips are failures.
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| v.trim() == "1")
}

/// `../shared/realdata` beside the repository at `repo` (the real captures tests read in
/// place), or `None` after the group's visible SKIP line: a test that reads them never passes
/// having read nothing unseen, and under `GDRDOCTOR_TEST_REQUIRE_ALL=1` their absence fails.
pub fn realdata(repo: &std::path::Path) -> Option<std::path::PathBuf> {
    let p = repo.join("../shared/realdata");
    if p.is_dir() {
        return Some(p);
    }
    skip(
        "real captures",
        &format!("{} is absent", p.display()),
        "put the shared folder (shared/realdata) beside the repository, as CI has it",
    );
    None
}

/// The line printed (or the panic message) for a skipped group.
pub fn skip_line(group: &str, missing: &str, install: &str) -> String {
    format!(
        "SKIP {group}: {missing}; to run these tests: {install} ({REQUIRE_ALL}=1 makes this a failure)"
    )
}

/// `group` cannot run here because `missing`; `install` says how to get it. Panics under
/// `GDRDOCTOR_TEST_REQUIRE_ALL=1`; otherwise prints the skip line once per group and returns,
/// and the caller returns from the test.
pub fn skip(group: &str, missing: &str, install: &str) {
    if require_all() {
        panic!(
            "{group} cannot run: {missing}; install: {install} ({REQUIRE_ALL}=1 makes a missing \
             prerequisite a failure)"
        );
    }
    let line = skip_line(group, missing, install);
    let mut seen = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|g| g == group) {
        return;
    }
    seen.push(group.to_string());
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// Whether `program args...` can be started and exits 0 (e.g. `lspci --version`); the error
/// says why not.
pub fn runs(program: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("`{program} {}` exited with {s}", args.join(" "))),
        Err(e) => Err(format!("`{program}` cannot be run ({e})")),
    }
}
