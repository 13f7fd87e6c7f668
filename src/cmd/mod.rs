//! One file per command: its arguments (a `clap::Args`, with its examples and exit codes in
//! `--help`) and its `run`, which reads through `crate::collect` and `crate::source`, judges
//! with the pure crate and writes through `crate::output`. A command never imports `crate::app`
//! (the lobby that dispatches to it) or another command.

pub mod check;
pub mod completions;
pub mod diagnose;
pub mod explain;
pub mod fleet;
pub mod list;
pub mod man;
pub mod policy;
pub mod preflight;
pub mod probe;
pub mod snapshot;
pub mod topo;
pub mod watch;
