//! gdrdoctor: the binary's library half, read top-down as the data flow (docs/architecture.md):
//! [`app`] (parse, dispatch, exit code) -> [`cmd`] (one file per command) -> [`output`] (the
//! one seam to stdout and `-o`) -> [`render`] -> [`probe`] -> [`collect`] -> [`state`] (what is
//! kept across runs) -> [`source`] (live, sysroot, archive; the root-relative reader) |
//! [`worker`] (worker processes and their protocol) -> [`live`] (the libraries loaded at run
//! time, signals) -> [`sys`] (trace, terminal, clock, escapers). Each layer imports only the
//! layers below it. The checks themselves, the model and the rules live in the pure crate
//! `gdrdoctor-checks`.

/// `gdrdoctor --version`: the package version, the git commit it was built from (`unknown` from
/// a source tarball) and the target it was built for (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GDRDOCTOR_GIT_COMMIT"),
    ", target ",
    env!("GDRDOCTOR_TARGET"),
    ")"
);

pub mod app;
pub mod cmd;
pub mod collect;
pub mod live;
pub mod output;
pub mod probe;
pub mod render;
pub mod source;
pub mod state;
pub mod sys;
pub mod worker;
