//! gdrdoctor: the binary's library half. Collectors (all I/O, through [`reader::Root`]),
//! renderers, snapshot and the CLI glue. The checks themselves live in `gdrdoctor-checks`.

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
pub mod docs;
pub mod live;
pub mod output;
pub mod probe;
pub mod render;
pub mod source;
pub mod state;
pub mod sys;
pub mod worker;
