//! The fixture nodes themselves (fixtures/nodes/<name>.tar.gz): packed deterministically,
//! `scripts/fixture` unpacks and repacks them byte for byte, and `fixtures/gen.py` writes the
//! constructed ones as they are committed (`.ci/run` checks all of them; here one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::path::Path;
use std::process::Command;

/// Every archive is what `scripts/fixture pack` writes: a gzip header without a file name or a
/// time, tar entries sorted by path, mtime 0, owner 0 without names, files 0644, directories
/// 0755, symlinks kept as symlinks; and only files, directories and symlinks.
#[test]
fn every_archive_is_packed_deterministically() {
    let all = scenarios();
    assert!(all.len() >= 26, "{all:?}");
    for s in all {
        let bytes = std::fs::read(nodes::archive(&s)).unwrap();
        assert_eq!(bytes[..3], [0x1f, 0x8b, 8], "{s}: a gzip stream");
        assert_eq!(bytes[3] & 0x08, 0, "{s}: a file name in the gzip header");
        assert_eq!(bytes[4..8], [0, 0, 0, 0], "{s}: a time in the gzip header");
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        let mut prev: Vec<String> = Vec::new();
        let (mut files, mut dirs, mut links) = (0, 0, 0);
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let parts: Vec<String> = path
                .trim_end_matches('/')
                .split('/')
                .map(str::to_string)
                .collect();
            assert!(prev < parts, "{s}: {path} after {}", prev.join("/"));
            assert_eq!(h.mtime().unwrap(), 0, "{s}: {path}");
            assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0), "{s}: {path}");
            assert_eq!(h.username().unwrap().unwrap_or(""), "", "{s}: {path}");
            assert_eq!(h.groupname().unwrap().unwrap_or(""), "", "{s}: {path}");
            let t = h.entry_type();
            let mode = if t.is_file() {
                files += 1;
                0o644
            } else if t.is_dir() {
                dirs += 1;
                0o755
            } else if t.is_symlink() {
                links += 1;
                0o777
            } else {
                panic!("{s}: {path}: a {t:?} entry")
            };
            assert_eq!(h.mode().unwrap(), mode, "{s}: {path}");
            prev = parts;
        }
        assert!(files > 30 && dirs > 30, "{s}: {files} files, {dirs} dirs");
        // Every node has PCI functions under /sys/bus/pci/devices, each a relative link.
        assert!(links > 0, "{s}: no symlinks");
    }
}

/// The relative path of every entry under `dir` with its kind and content (links as targets).
fn tree(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                ));
            } else if t.is_dir() {
                out.push((rel, "dir".into()));
                walk(root, &p, out);
            } else {
                out.push((rel, format!("{:?}", std::fs::read(&p).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn script(args: &[&str]) -> Result<String, String> {
    let out = Command::new(repo().join("scripts/fixture"))
        .args(args)
        .output()
        .map_err(|e| format!("scripts/fixture cannot be run ({e})"))?;
    assert!(
        out.status.success(),
        "scripts/fixture {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout).unwrap())
}

/// `scripts/fixture`: `list` names what the tests read, `path` unpacks into its cache the tree
/// the tests unpack, `pack` of that tree gives the committed bytes back, `listing` has a line per
/// entry.
#[test]
fn the_script_lists_unpacks_and_repacks_byte_for_byte() {
    if let Err(e) = require::runs("python3", &["--version"]) {
        require::skip("scripts/fixture", &e, "apt-get install python3");
        return;
    }
    let list = script(&["list"]).unwrap();
    assert_eq!(list.lines().collect::<Vec<_>>(), scenarios());
    let t = tempfile::tempdir().unwrap();
    for name in ["h200-vm-live", "gh200x2-cx7x2-c2c"] {
        let at = script(&["path", name]).unwrap();
        let at = Path::new(at.trim_end());
        assert!(
            at.starts_with(repo().join("target/fixtures")),
            "{}",
            at.display()
        );
        assert_eq!(
            script(&["path", name]).unwrap().trim_end(),
            at.to_str().unwrap()
        );
        assert_eq!(tree(at), tree(&fixture(name)), "{name}");
        let out = t.path().join(format!("{name}.tar.gz"));
        script(&["pack", at.to_str().unwrap(), out.to_str().unwrap()]).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(nodes::archive(name)).unwrap(),
            "{name}: scripts/fixture pack of its own unpacked tree gives other bytes"
        );
        let listing = script(&["listing", name]).unwrap();
        assert_eq!(listing.lines().count(), tree(at).len() + 1, "{listing}");
        assert!(listing.contains("sys/bus/pci/devices/"), "{listing}");
        assert!(listing.contains("\tfile\t") && listing.contains("\tlink\t-> "));
        let by_path = script(&["listing-file", nodes::archive(name).to_str().unwrap()]).unwrap();
        assert_eq!(by_path, listing);
    }
}

/// `fixtures/gen.py --check`: the constructed healthy node (the base every other constructed
/// node mutates) is the committed archive, byte for byte. `.ci/run` checks every scenario.
#[test]
fn gen_py_writes_the_committed_healthy_node() {
    if let Err(e) = require::runs("python3", &["--version"]) {
        require::skip("fixtures/gen.py", &e, "apt-get install python3");
        return;
    }
    let out = Command::new("python3")
        .arg(repo().join("fixtures/gen.py"))
        .args(["--check", "hgx-h200x8-cx7x8-healthy"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
