//! Site policy: what a node *should* have (`gdrdoctor check --policy FILE`).
//!
//! The checks in [`crate::checks`] judge a node against what GPUDirect RDMA needs; a policy judges
//! it against what the site bought and configured: eight GPUs of one model, eight ports at 400
//! Gb/s, one firmware, one driver, a kernel command line. This module holds the policy's types
//! (deserialized by the binary from TOML, which attaches the line to every error raised here), the
//! evaluation (Node + report + policy -> `policy.*` findings, severity overrides, waivers) and
//! `policy init` (a commented policy written from a known-good node). No I/O: the binary reads the
//! file and the clock.
//!
//! The parts: [`types`] (the file's shape), [`findings`] (the `policy.*` table), [`eval`] (one
//! file per family of expectations), [`init`] and [`glob`] (the patterns' wildcards).

pub mod eval;
pub mod findings;
pub mod glob;
pub mod init;
pub mod types;

pub use eval::{apply, Context};
pub use findings::{known_check, FINDINGS};
pub use glob::glob;
pub use types::*;
