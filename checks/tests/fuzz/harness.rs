//! A stable-toolchain fuzzing harness (issue 18): corpus-driven mutation, bounded by time or
//! iterations, reproducible by seed. Shared by `checks/tests/fuzz.rs` (the decoders and text
//! parsers) and `tests/fuzz.rs` (the snapshot reader).
//!
//! Why not cargo-fuzz: it needs a nightly toolchain (`-Zsanitizer`, libFuzzer's coverage
//! instrumentation), and this project builds on stable only. afl.rs runs on stable but needs
//! AFL++ built on every CI machine and a forking harness per target; bolero on stable falls
//! back to plain random generation. What we need is cheap, deterministic and runs inside
//! `cargo test`: start from real inputs (the fixtures' files, the config-space dumps, kernel
//! logs, NCCL dumps), apply the byte- and token-level mutations fuzzers use (bit flips,
//! interesting bytes and integers, inserted tokens, deletions, duplications, splices,
//! truncations), run the target under `catch_unwind` in a debug build (so arithmetic overflow
//! panics too), and on a panic save the input and name the seed. No coverage feedback: the
//! corpus carries the structure instead.
//!
//! Knobs: `GDRDOCTOR_FUZZ_SECS=S` runs each target for S seconds (CI); otherwise
//! `GDRDOCTOR_FUZZ_ITERS=N` iterations (default [`DEFAULT_ITERS`], what `cargo test` runs);
//! `GDRDOCTOR_FUZZ_SEED=X` picks the sample (default fixed, so plain test runs are
//! reproducible). A crashing input is written to `<target>/tmp/fuzz-crashes/<target>-<seed>.bin`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Iterations per target in a plain `cargo test`.
pub const DEFAULT_ITERS: u64 = 1500;

/// xorshift64*.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const BYTES: &[u8] = &[
    0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe, b' ', b'\n', b'\t', b':', b'0', b'.', b'x', b'-', b'=',
    b'"', b'<', b'>', b'/', 0x1b, 0xc3,
];

const TOKENS: &[&str] = &[
    "0x",
    "ffffffff",
    "ffffffffffffffff",
    "18446744073709551616",
    "-1",
    "-9223372036854775808",
    "NaN",
    "inf",
    "\n",
    "\n\n",
    ": ",
    "=",
    ",",
    ";",
    "\"",
    "\u{1b}[2J",
    "\u{e9}",
    "\u{202e}",
    "<",
    "/>",
    "</system>",
    " GT/s PCIe",
    "x16",
    "4: ACTIVE",
    "NVRM version:",
    "Xid",
    "(",
    ")",
    "[",
    "]",
    "0000:",
    ":00.0",
    "mlx5_",
    "00:",
    "ff0:",
];

const INTS: &[u64] = &[
    0,
    1,
    0x40,
    0x100,
    0xfff,
    0x1000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    u64::MAX,
];

/// One mutation of `data` (`corpus` for splices).
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let len = data.len();
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = BYTES[rng.below(BYTES.len())];
        }
        2 => {
            let i = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(i..i, ins);
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(64));
            data.drain(i..i + n);
        }
        4 if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below((len - i).min(256));
            let copy: Vec<u8> = data[i..i + n].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, copy);
        }
        5 => data.truncate(rng.below(len + 1)),
        6 if !corpus.is_empty() => {
            let other = &corpus[rng.below(corpus.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        7 => {
            let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
            let i = rng.below(len + 1);
            data.splice(i..i, t.iter().copied());
        }
        8 if len >= 4 => {
            // An interesting integer over an aligned field (binary formats).
            let width = [1usize, 2, 4, 8][rng.below(4)].min(len);
            let i = (rng.below(len - width + 1) / width) * width;
            let v = INTS[rng.below(INTS.len())].to_le_bytes();
            data[i..i + width].copy_from_slice(&v[..width]);
        }
        _ => {
            // A number in text: replace a digit run with an interesting one.
            if let Some(i) = (0..len)
                .map(|_| rng.below(len))
                .find(|&i| data[i].is_ascii_digit())
            {
                let mut j = i;
                while j < len && data[j].is_ascii_digit() {
                    j += 1;
                }
                let v = INTS[rng.below(INTS.len())].to_string();
                data.splice(i..j, v.bytes());
            }
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How long to run: `(iterations, time)`; the loop stops at whichever comes first.
fn budget(cost: u64) -> (u64, Option<Duration>) {
    match env_u64("GDRDOCTOR_FUZZ_SECS") {
        Some(s) => (u64::MAX, Some(Duration::from_secs(s))),
        None => (
            env_u64("GDRDOCTOR_FUZZ_ITERS").unwrap_or(DEFAULT_ITERS) / cost.max(1),
            None,
        ),
    }
}

/// Fuzz `target` from `corpus`. `cost` divides the default iteration count for slow targets
/// (one iteration of a target of cost 100 takes about as long as 100 of cost 1).
pub fn fuzz(name: &str, corpus: Vec<Vec<u8>>, cost: u64, target: impl Fn(&[u8])) {
    assert!(!corpus.is_empty(), "{name}: empty corpus");
    let seed = env_u64("GDRDOCTOR_FUZZ_SEED").unwrap_or(0x1818_1818) ^ name_hash(name);
    let mut rng = Rng::new(seed);
    let (iters, time) = budget(cost);
    let start = Instant::now();
    let mut n = 0u64;
    // The corpus as it is first: a parser must take its own inputs (cheap targets only).
    if cost < 50 {
        for c in &corpus {
            check(name, seed, 0, c, &target);
        }
    }
    while n < iters && time.is_none_or(|t| start.elapsed() < t) {
        n += 1;
        let mut data = corpus[rng.below(corpus.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut data, &corpus);
        }
        check(name, seed, n, &data, &target);
    }
    eprintln!(
        "fuzz {name}: {n} inputs in {:.1} s (seed {seed:#x})",
        start.elapsed().as_secs_f64()
    );
}

fn check(name: &str, seed: u64, n: u64, data: &[u8], target: &impl Fn(&[u8])) {
    if catch_unwind(AssertUnwindSafe(|| target(data))).is_err() {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes");
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join(format!("{name}-{seed:x}-{n}.bin"));
        let _ = std::fs::write(&file, data);
        panic!(
            "fuzz {name}: input {n} (seed {seed:#x}) panicked; saved to {}",
            file.display()
        );
    }
}

/// Every regular file named `name` (or every file, with `None`) under `dir`, deduplicated by
/// content, at most `max`.
pub fn files(dir: &std::path::Path, name: Option<&str>, max: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file()
                && name.is_none_or(|n| e.file_name().to_string_lossy() == n)
                && out.len() < max
            {
                if let Ok(b) = std::fs::read(e.path()) {
                    if seen.insert(b.clone()) {
                        out.push(b);
                    }
                }
            }
        }
    }
    out
}
