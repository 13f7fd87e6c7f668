//! Build metadata for `gdrdoctor --version`: the git commit the binary was built from and the
//! target it was built for.
//!
//! - `GDRDOCTOR_GIT_COMMIT`: from the environment when set (a packager building from a source
//!   tarball), else `git rev-parse --short=12 HEAD` of this checkout, else `unknown` (a tarball
//!   without `.git`, or no `git`). A checkout nested inside some other repository is not that
//!   repository's commit: the commit is taken only when the git top level is this directory.
//! - `GDRDOCTOR_TARGET`: cargo's `TARGET`, with `.GLIBC` appended when `GDRDOCTOR_GLIBC` is set
//!   (scripts/release.sh sets `2.17`, the glibc its cargo-zigbuild build links against, so the
//!   release binary says `x86_64-unknown-linux-gnu.2.17`, cargo-zigbuild's name for it).
//!
//! The script reruns when HEAD moves (the files git updates on commit, checkout and reset), so
//! a rebuild after a commit never reports the previous one.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn commit_from_git(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    if !same_dir(Path::new(&top), dir) {
        return None;
    }
    let commit = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    // HEAD (branch switch, detached checkout), HEAD's reflog (every commit, reset, checkout in
    // this worktree) and the branch ref itself. A path that does not exist would make cargo
    // rerun the script on every build, so only existing ones are named.
    let mut watch = vec![
        git(dir, &["rev-parse", "--git-path", "HEAD"]),
        git(dir, &["rev-parse", "--git-path", "logs/HEAD"]),
    ];
    if let Some(r) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(git(dir, &["rev-parse", "--git-path", &r]));
    }
    for p in watch.into_iter().flatten() {
        let p = if Path::new(&p).is_absolute() {
            PathBuf::from(p)
        } else {
            dir.join(p)
        };
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    Some(commit)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GDRDOCTOR_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=GDRDOCTOR_GLIBC");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = std::env::var("GDRDOCTOR_GIT_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| commit_from_git(&dir))
        .unwrap_or_else(|| "unknown".into());
    let mut target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    if let Some(glibc) = std::env::var("GDRDOCTOR_GLIBC")
        .ok()
        .filter(|s| !s.trim().is_empty())
    {
        target = format!("{target}.{}", glibc.trim());
    }
    println!("cargo:rustc-env=GDRDOCTOR_GIT_COMMIT={}", commit.trim());
    println!("cargo:rustc-env=GDRDOCTOR_TARGET={}", target.trim());
}
