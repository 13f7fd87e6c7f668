//! External validators the tests use when the machine has them (CI installs them in .ci/run).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};

/// `promtool check metrics` on the text (Debian's `prometheus` package ships promtool). Without
/// promtool the text is still parsed line by line here; with it, any lint is a failure. Set
/// GDRDOCTOR_REQUIRE_PROMTOOL=1 (CI does) to fail when promtool is missing.
pub fn promtool_check(text: &str) {
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        assert!(!line.starts_with('#'), "stray comment: {line}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line}"
        );
    }
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("GDRDOCTOR_REQUIRE_PROMTOOL").is_err(),
                "promtool required but not runnable: {e}"
            );
            eprintln!("note: promtool not installed ({e}); only the local parse ran");
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
