//! What every family of expectations shares: the context of the evaluation (the policy's
//! path, today) and the finding of a fact that cannot be read.

use crate::policy::types::Date;
use crate::report::{Finding, Status};

/// What the evaluation needs besides the node: where the policy came from (cited in every
/// finding) and today's date (for waivers), both supplied by the caller.
#[derive(Debug, Clone)]
pub struct Context {
    pub path: String,
    pub today: Date,
}

impl Context {
    /// `8 (policy gpu.count)`: the expected value and the key that set it.
    pub(super) fn want(&self, value: impl std::fmt::Display, key: &str) -> String {
        format!("{value} ({}: {key})", self.path)
    }
}

pub(super) fn cannot(id: &str, what: &str, fact_source: &str, reason: &str) -> Finding {
    Finding::new(id, Status::Error, "node", format!("cannot {what}"))
        .evidence(fact_source, format!("unknown ({reason})"))
}
