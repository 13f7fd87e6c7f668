//! What people expect of a command-line tool: `--version` with the build's commit and target,
//! shell completions and man pages generated from the CLI, "did you mean" on a mistyped id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Command;

#[test]
fn version_names_the_commit_and_the_target() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    let v = out.trim();
    let rest = v
        .strip_prefix(&format!("gdrdoctor {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{v}"));
    let (commit, target) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", target "))
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        commit == "unknown" || commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{v}"
    );
    assert!(target.starts_with(std::env::consts::ARCH), "{v}");
    // In a git checkout the commit is HEAD's (what the binary was built from).
    if let Ok(o) = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
    {
        if o.status.success() && repo().join(".git").exists() {
            assert_eq!(commit, String::from_utf8_lossy(&o.stdout).trim(), "{v}");
        }
    }
    assert_eq!(run(&["-V"]).1, out);
}

#[test]
fn completions_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _gdrdoctor"),
        ("zsh", "#compdef gdrdoctor"),
        ("fish", "complete -c gdrdoctor"),
        ("elvish", "gdrdoctor"),
        ("powershell", "gdrdoctor"),
    ] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: no {marker:?}");
        for word in ["check", "explain", "sysroot", "fail-on"] {
            assert!(out.contains(word), "{shell} completion lacks {word}");
        }
    }
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert!(err.contains("bash"), "{err}");
}

/// The completion scripts offer the check ids (and categories) for `--only` and `--skip`, and
/// every finding id for `explain`, from the registries; `--help` does not list them, and an id
/// that is not one is still answered by the command ("did you mean"), not by clap.
#[test]
fn completions_offer_the_check_ids() {
    let (_, bash, _) = run(&["completions", "bash"]);
    for id in ["rdma.ports", "iommu.mode", "gdr.gpu", "pcie.acs-redirect"] {
        assert!(bash.contains(id), "bash completion lacks {id}");
    }
    // fish names the flag the ids belong to (its entries may span lines).
    let (_, fish, _) = run(&["completions", "fish"]);
    let only = fish
        .split("\ncomplete ")
        .find(|e| e.contains("using_subcommand check\" -l only"))
        .unwrap_or_else(|| panic!("no --only entry: {fish}"));
    assert!(
        only.contains("rdma.ports") && only.contains("\nrdma\\t"),
        "{only}"
    );
    // explain's argument: fish gets one entry per id (clap_complete's fish script completes
    // no positional value; gdrdoctor appends them), with its title.
    let explain: Vec<&str> = fish
        .lines()
        .filter(|l| {
            l.starts_with(
                "complete -c gdrdoctor -n \"__fish_gdrdoctor_using_subcommand explain\" -f -a ",
            )
        })
        .collect();
    for id in [
        "probe.hang-inject",
        "kmod.nvidia-peermem",
        "kernel.peermem",
        "gdr.gpu",
    ] {
        assert!(
            explain
                .iter()
                .any(|l| l.contains(&format!("-a \"{id}\" -d '"))),
            "fish explain lacks {id}: {explain:?}"
        );
    }
    // zsh names it with its values.
    let (_, zsh, _) = run(&["completions", "zsh"]);
    let id = zsh
        .lines()
        .find(|l| l.starts_with("':id -- "))
        .unwrap_or_else(|| panic!("no explain id in zsh: {zsh}"));
    assert!(
        id.contains("probe.hang-inject") && id.contains("kmod.nvidia-peermem"),
        "{id}"
    );
    // --help stays short: the ids are not listed there.
    let (_, help, _) = run(&["check", "--help"]);
    assert!(!help.contains("rdma.ports"), "{help}");
    let (code, _, err) = run(&[
        "check",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "--only",
        "rdma.port",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean"), "{err}");
}

#[test]
fn bash_completion_is_valid_bash() {
    let (_, script, _) = run(&["completions", "bash"]);
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("gdrdoctor.bash");
    std::fs::write(&f, &script).unwrap();
    // bash is part of every Linux system this runs on; -n parses without running.
    match Command::new("bash").arg("-n").arg(&f).output() {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => require::skip(
            "bash completion syntax",
            &format!("bash: {e}"),
            "apt-get install bash",
        ),
    }
}

#[test]
fn man_page_on_stdout_and_per_command_into_a_directory() {
    let (code, page, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(
        page.contains(".TH gdrdoctor 1"),
        "{}",
        &page[..page.len().min(200)]
    );
    for s in ["check", "explain", "completions", ".SH EXAMPLES"] {
        assert!(page.contains(s), "man page lacks {s}");
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("man1");
    let (code, _, err) = run(&["man", "--out-dir", &dir.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for want in [
        "gdrdoctor.1",
        "gdrdoctor-check.1",
        "gdrdoctor-explain.1",
        "gdrdoctor-probe.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} not in {pages:?}");
    }
    let check = std::fs::read_to_string(dir.join("gdrdoctor-check.1")).unwrap();
    assert!(check.contains("sysroot"), "{check}");
    // Examples and exit codes are sections of their own: the examples one per line in a
    // no-fill block (not reflowed into prose), each exit code a tagged paragraph.
    let section = |page: &str, name: &str| -> String {
        page.split("\n.SH ")
            .find(|s| s.starts_with(name))
            .unwrap_or_else(|| panic!("no section {name}: {page}"))
            .to_string()
    };
    let ex = section(&check, "EXAMPLES");
    assert!(ex.contains(".nf") && ex.contains(".fi"), "{ex}");
    let lines: Vec<&str> = ex.lines().filter(|l| l.starts_with("gdrdoctor")).collect();
    assert!(lines.len() >= 3, "{ex}");
    let exit = section(&check, "\"EXIT STATUS\"");
    for code in ["0", "1", "2", "3"] {
        assert!(exit.contains(&format!(".TP\n.B {code}\n")), "{exit}");
    }
    assert!(
        !section(&check, "DESCRIPTION").contains("Exit codes"),
        "{check}"
    );
    // The page renders with man(1) where it is installed.
    if require::runs("man", &["--version"]).is_ok() {
        let out = Command::new("man")
            .arg("-l")
            .arg(dir.join("gdrdoctor-check.1"))
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("EXIT STATUS") && text.contains("EXAMPLES"),
            "{text}"
        );
    }
    // An unwritable directory is an error that names it.
    let (code, _, err) = run(&["man", "--out-dir", "/proc/gdrdoctor-man"]);
    assert_eq!(code, 2);
    assert!(err.contains("/proc/gdrdoctor-man"), "{err}");
}

#[test]
fn did_you_mean_on_only_skip_and_explain() {
    let healthy = fixture("hgx-h200x8-cx7x8-healthy").display().to_string();
    let (code, _, err) = run(&["check", "--sysroot", &healthy, "--only", "rdma.port"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`rdma.port` (did you mean `rdma.ports`?)"),
        "{err}"
    );
    let (code, _, err) = run(&["check", "--sysroot", &healthy, "--skip", "iommu.mdoe,rdam"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("`iommu.mdoe` (did you mean `iommu.mode`?)"),
        "{err}"
    );
    assert!(err.contains("`rdam` (did you mean `rdma`?)"), "{err}");
    // Nothing close: no suggestion, just the pointer to the list.
    let (_, _, err) = run(&["check", "--sysroot", &healthy, "--only", "frobnicate"]);
    assert!(!err.contains("did you mean"), "{err}");
    assert!(err.contains("`gdrdoctor list` shows them"), "{err}");
    let (code, _, err) = run(&["explain", "pcie.acs"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `pcie.acs-redirect`"), "{err}");
    let (_, _, err) = run(&["explain", "probe.hang-injct"]);
    assert!(err.contains("`probe.hang-inject`"), "{err}");
}

#[test]
fn help_teaches_the_new_commands() {
    let (_, top, _) = run(&["--help"]);
    for s in ["completions", "man", "explain"] {
        assert!(top.contains(s), "--help lacks {s}");
    }
    let (_, h, _) = run(&["completions", "--help"]);
    assert!(
        h.contains("Examples") && h.contains("bash_completion.d"),
        "{h}"
    );
    let (_, h, _) = run(&["explain", "--help"]);
    assert!(h.contains("PAGER") && h.contains("--no-pager"), "{h}");
}

/// build.rs run by hand, as cargo runs it, for a source tree without `.git` (a tarball) and for
/// one unpacked inside another repository: both must say `unknown`, not a made-up or foreign
/// commit. `GDRDOCTOR_GIT_COMMIT` (a packager's) and `GDRDOCTOR_GLIBC` are honoured.
#[test]
fn build_script_says_unknown_without_its_own_git() {
    let t = tempfile::tempdir().unwrap();
    let exe = t.path().join("build-script");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--edition", "2021", "-o"])
        .arg(&exe)
        .arg(repo().join("build.rs"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = |dir: &std::path::Path, env: &[(&str, &str)]| {
        let mut c = Command::new(&exe);
        c.env("CARGO_MANIFEST_DIR", dir)
            .env("TARGET", "x86_64-unknown-linux-gnu")
            .env_remove("GDRDOCTOR_GIT_COMMIT")
            .env_remove("GDRDOCTOR_GLIBC");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    // A tarball: no .git anywhere above (a fresh temp directory).
    let tarball = t.path().join("gdrdoctor-0.1.0");
    std::fs::create_dir(&tarball).unwrap();
    let s = run(&tarball, &[]);
    assert!(
        s.contains("cargo:rustc-env=GDRDOCTOR_GIT_COMMIT=unknown\n"),
        "{s}"
    );
    assert!(
        s.contains("cargo:rustc-env=GDRDOCTOR_TARGET=x86_64-unknown-linux-gnu\n"),
        "{s}"
    );
    // Inside this repository's target/: git finds a repository, but not this tree's.
    std::fs::create_dir_all(repo().join("target")).unwrap();
    let nested = tempfile::tempdir_in(repo().join("target")).unwrap();
    let s = run(nested.path(), &[("GDRDOCTOR_GLIBC", "2.17")]);
    assert!(s.contains("GDRDOCTOR_GIT_COMMIT=unknown\n"), "{s}");
    assert!(
        s.contains("GDRDOCTOR_TARGET=x86_64-unknown-linux-gnu.2.17\n"),
        "{s}"
    );
    let s = run(&tarball, &[("GDRDOCTOR_GIT_COMMIT", "0123456789ab")]);
    assert!(s.contains("GDRDOCTOR_GIT_COMMIT=0123456789ab\n"), "{s}");
}

/// `-h` and `--help` of every command are one help (options one per line where they fit, then
/// the description, examples and exit codes) under two screens: at most 100 lines at 100
/// columns. What needs more room lives in `explain` pages and docs/.
#[test]
fn every_help_is_under_two_screens() {
    let mut cmds: Vec<Vec<&str>> = vec![vec![]];
    for c in [
        "check",
        "topo",
        "diagnose",
        "probe",
        "watch",
        "list",
        "explain",
        "completions",
        "man",
        "policy",
        "fleet",
        "snapshot",
        "preflight",
    ] {
        cmds.push(vec![c]);
    }
    cmds.push(vec!["policy", "init"]);
    cmds.push(vec!["policy", "validate"]);
    for c in cmds {
        let mut long = c.clone();
        long.push("--help");
        let (code, help, err) = run(&long);
        assert_eq!(code, 0, "{long:?}: {err}");
        let n = help.lines().count();
        assert!(n <= 100, "{long:?}: {n} lines:\n{help}");
        let mut short = c.clone();
        short.push("-h");
        assert_eq!(run(&short).1, help, "{c:?}: -h and --help differ");
        // Not clap's long layout (a blank line between options).
        assert!(
            !help.contains("\n\n      --"),
            "{long:?}: options set apart by blank lines:\n{help}"
        );
    }
    // The examples and exit codes are still there.
    let (_, h, _) = run(&["check", "-h"]);
    assert!(h.contains("Examples:") && h.contains("Exit codes"), "{h}");
}

/// Every group a test can skip (`skip("<group>", ...)` anywhere under tests/ and checks/tests/)
/// is in docs/testing.md's table, the list `scripts/test-report.sh`'s summary refers to, and
/// the script runs the workspace's tests and sums up their SKIP lines.
#[test]
fn every_skip_group_is_documented() {
    fn scan(dir: &std::path::Path, groups: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()) {
            let p = e.path();
            if p.is_dir() {
                scan(&p, groups);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, _) in text.match_indices("skip(") {
                    let rest = text[i + 5..].trim_start();
                    if let Some(lit) = rest.strip_prefix('"') {
                        // A group name is a one-line literal (this scanner's own `"skip("` is not).
                        if let Some(end) = lit.find('"').filter(|e| !lit[..*e].contains('\n')) {
                            groups.push(lit[..end].to_string());
                        }
                    }
                }
            }
        }
    }
    let mut groups = Vec::new();
    scan(&repo().join("tests"), &mut groups);
    scan(&repo().join("checks/tests"), &mut groups);
    groups.sort();
    groups.dedup();
    assert!(groups.len() >= 10, "{groups:?}");
    let doc = std::fs::read_to_string(repo().join("docs/testing.md")).unwrap();
    let missing: Vec<&String> = groups
        .iter()
        .filter(|g| !doc.contains(g.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "skip groups not in docs/testing.md's table: {missing:?}"
    );
    let script = std::fs::read_to_string(repo().join("scripts/test-report.sh")).unwrap();
    assert!(
        script.contains("cargo test") && script.contains("^SKIP "),
        "{script}"
    );
}

/// `--help` of every command is wrapped to fit 100 columns (clap's `wrap_help`; 100 is its
/// width when stdout is not a terminal), so a reader never scrolls sideways.
#[test]
fn every_help_fits_100_columns() {
    let mut cmds: Vec<Vec<&str>> = vec![vec![]];
    for c in [
        "check",
        "topo",
        "diagnose",
        "probe",
        "watch",
        "list",
        "explain",
        "completions",
        "man",
        "policy",
        "fleet",
        "snapshot",
    ] {
        cmds.push(vec![c]);
    }
    cmds.push(vec!["policy", "init"]);
    cmds.push(vec!["policy", "validate"]);
    for c in cmds {
        for flag in ["--help", "-h"] {
            let mut args = c.clone();
            args.push(flag);
            let (code, out, err) = run(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            for line in out.lines() {
                assert!(
                    line.chars().count() <= 100,
                    "{args:?}: {} columns: {line}",
                    line.chars().count()
                );
            }
        }
    }
}

/// The README's sample output is what the binary prints for the snapshot it names: every line
/// of the sample is a line of `check --sysroot fixtures/nodes/h200-vm-live.tar.gz`, and the
/// line count it states is the output's (the review of 2026-12-07 found 58 stated, 84 printed).
#[test]
fn the_readme_sample_is_what_the_binary_prints() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let at = readme
        .find("11 of its ")
        .expect("the README's sample paragraph");
    let stated: usize = readme[at + "11 of its ".len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a line count");
    let block = &readme[at..];
    let start = block.find("```\n").unwrap() + 4;
    let end = start + block[start..].find("```").unwrap();
    let sample: Vec<&str> = block[start..end].lines().collect();
    let fixture = repo().join("fixtures/nodes/h200-vm-live.tar.gz");
    let (code, out, err) = run(&["check", "--sysroot", fixture.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let printed: Vec<&str> = out.lines().map(str::trim_end).collect();
    assert_eq!(printed.len(), stated, "README says {stated} lines:\n{out}");
    for l in sample {
        assert!(
            printed.contains(&l.trim_end()),
            "README sample line not printed: {l:?}\n{out}"
        );
    }
}
