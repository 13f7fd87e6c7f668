//! Fuzz targets for the snapshot reader (issue 18): a `.tar.gz` snapshot unpacked within its
//! limits and read back (`check --sysroot x.tar.gz` in-process), the files of a snapshot the
//! reader trusts least (`gdrdoctor/meta.json`, `live.json`, `kernel-log.txt`, the counter state
//! file), and any file of a sysroot damaged byte by byte through the whole `check` path. Nothing
//! panics, nothing escapes the unpack directory, and no `pass` goes without evidence. Harness
//! and knobs: `checks/tests/fuzz/harness.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../checks/tests/fuzz/harness.rs"]
mod harness;

use common::*;
use gdrdoctor::source::archive::{unpack_into, Limits};
use gdrdoctor::source::Source;
use gdrdoctor_checks::model::LiveFacts;
use gdrdoctor_checks::report::Status;
use gdrdoctor_checks::RunOptions;
use harness::{files, fuzz};
use std::path::Path;

/// The tar (uncompressed: mutations hit the structure, not the deflate stream) of `dir`.
fn tar_of(dir: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", dir).unwrap();
    b.into_inner().unwrap()
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b).unwrap();
    gz.finish().unwrap()
}

fn no_pass_without_evidence(r: &gdrdoctor_checks::report::Report) {
    for f in &r.findings {
        assert!(
            f.status != Status::Pass || f.has_evidence(),
            "{} {} passes without evidence",
            f.id,
            f.subject
        );
    }
}

#[test]
fn fuzz_tarball_snapshots() {
    let corpus = vec![tar_of(&fixture("h200-vm-live"))];
    let limits = Limits {
        bytes: 8 << 20,
        entries: 4096,
        file: 1 << 20,
    };
    let outside = tempfile::tempdir().unwrap();
    fuzz("snapshot-tarball", corpus, 40, |tar| {
        let work = tempfile::tempdir_in(outside.path()).unwrap();
        let dir = work.path().join("root");
        std::fs::create_dir(&dir).unwrap();
        let res = unpack_into(&gzip(tar)[..], &dir, &limits);
        // Nothing lands beside the unpack directory, whatever the archive says.
        let beside: Vec<_> = std::fs::read_dir(work.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(beside, vec![std::ffi::OsString::from("root")], "{res:?}");
        // The same bytes read in memory, as `--sysroot x.tar.gz` does: never a panic, and never
        // a pass that lacks its evidence. (Whether it refuses exactly what unpacking refuses is
        // not asked: a directory entry over a file, say, unpacks as an error and reads as the
        // later entry.)
        let mem = gdrdoctor::source::archive::tree_from(&gzip(tar)[..], &limits);
        if let Ok(tree) = mem {
            let root =
                gdrdoctor::source::reader::Root::archive(std::path::Path::new("fuzz.tar.gz"), tree);
            if let Ok(src) = Source::from_root(root) {
                let node = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
                let r = gdrdoctor_checks::build_report(&node, &RunOptions::default());
                no_pass_without_evidence(&r);
            }
        }
        if res.is_ok() {
            if let Ok(root) = gdrdoctor::source::reader::Root::sysroot(&dir) {
                if let Ok(src) = Source::from_root(root) {
                    let node = gdrdoctor::collect::node(&src, gdrdoctor::collect::Libraries::Skip);
                    let r = gdrdoctor_checks::build_report(&node, &RunOptions::default());
                    no_pass_without_evidence(&r);
                }
            }
        }
    });
}

#[test]
fn fuzz_snapshot_metadata_live_facts_kernel_log_and_state() {
    let mut corpus = Vec::new();
    for s in [
        "hgx-h200x8-cx7x8-healthy",
        "h200-vm-live",
        "hgx-h200x8-cx7x8-xid-79",
    ] {
        for name in ["meta.json", "live.json", "kernel-log.txt"] {
            corpus.extend(files(&fixture(s), Some(name), 1));
        }
    }
    corpus.extend(files(
        &fixture("hgx-h200x8-cx7x8-port-flapping"),
        Some("counters-baseline.json"),
        1,
    ));
    let base = gdrdoctor_checks::testing::switch_pair();
    let state = tempfile::tempdir().unwrap();
    fuzz("snapshot-json", corpus, 8, |b| {
        let _ = serde_json::from_slice::<gdrdoctor::source::meta::Meta>(b);
        let t = String::from_utf8_lossy(b);
        let _ = gdrdoctor::collect::health::kernel_log::parse_snapshot(&t);
        // The counter state file, as a periodic run reads it back.
        let _ = std::fs::write(state.path().join("counters.json"), b);
        let _ = gdrdoctor::state::counters::load(state.path(), Some("boot"), 1_000_000);
        if let Ok(live) = serde_json::from_slice::<LiveFacts>(b) {
            let mut n = base.clone();
            n.live = live;
            let r = gdrdoctor_checks::build_report(&n, &RunOptions::default());
            no_pass_without_evidence(&r);
        }
    });
}

#[test]
fn fuzz_any_sysroot_file_through_check() {
    // One file of a sysroot at a time, damaged by the fuzzer's mutations (the mutation test's
    // truncate/empty/garbage/remove/swap are the coarse version of this).
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-acs-redirect"), t.path());
    let mut paths = Vec::new();
    let mut stack = vec![t.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                paths.push(e.path());
            }
        }
    }
    paths.sort();
    // The corpus entry's first 4 bytes pick the file; the rest is its content.
    let corpus: Vec<Vec<u8>> = paths
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let n = p.file_name().unwrap().to_string_lossy();
            [
                "config",
                "vendor",
                "class",
                "resource",
                "params",
                "fw_ver",
                "state",
                "cmdline",
                "live.json",
            ]
            .contains(&n.as_ref())
        })
        .step_by(3)
        .take(40)
        .map(|(i, p)| {
            let mut v = (i as u32).to_le_bytes().to_vec();
            v.extend(std::fs::read(p).unwrap());
            v
        })
        .collect();
    let root = t.path().to_path_buf();
    fuzz("sysroot-file", corpus, 150, |b| {
        let Some(head) = b.get(..4) else { return };
        let i = u32::from_le_bytes(head.try_into().unwrap()) as usize % paths.len();
        let p = &paths[i];
        let original = std::fs::read(p).unwrap();
        std::fs::write(p, &b[4..]).unwrap();
        let r = std::panic::catch_unwind(|| report_for(&root));
        std::fs::write(p, &original).unwrap();
        match r {
            Ok(r) => no_pass_without_evidence(&r),
            // report_for unwraps meta.json as the CLI would refuse it (exit 2): not a crash.
            Err(_) if p.ends_with("gdrdoctor/meta.json") => {}
            Err(e) => std::panic::resume_unwind(e),
        }
    });
}
