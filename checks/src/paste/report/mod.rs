//! `gdrdoctor diagnose`: pasted text in, the same checks and GDR verdicts out, as the versioned
//! `gdrdoctor.diagnose/v1` report (docs/report-format.md).
//!
//! The registry's checks run on the [`Node`](crate::model::Node) built from the paste. A check
//! that cannot be evaluated because its input is not in the paste is `skip` with the reason and
//! the command that shows it ("peer memory: not in the pasted text; run `lsmod | grep
//! peermem`"), never `pass`; when the input is in the paste but damaged it stays `error`. The
//! topology checks (`topo.nic-distance`, `topo.rails`, `gdr.gpu`) are answered from the pasted
//! matrix and NCCL log, through [`super::verdict::decide`].
//!
//! The parts: [`types`] (the report), [`adapt`] (a registry finding into paste words),
//! [`pairs`] (the pairs and their verdicts), [`topo`] (the topology checks from the matrix) and
//! [`diagnose`] (the whole run).

pub mod adapt;
pub mod diagnose;
pub mod job;
pub mod pairs;
pub mod topo;
pub mod types;

pub use adapt::{TWICE, UNREADABLE};
pub use diagnose::{diagnose, diagnose_paste, recognised, Assume};
pub use types::*;
