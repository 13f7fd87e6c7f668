//! What a probe's plan is and what running it gives: the types the probe folders implement and
//! the registry lists (a leaf module: it uses no probe).

use super::args::CommonArgs;
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::Finding;

/// A probe's plan from the parsed command line: `Ok(None)` when not asked for; `Err` is a
/// usage error (exit 2) before anything runs.
pub type PlanFn = fn(&clap::ArgMatches, &CommonArgs) -> Result<Option<Box<dyn Plan>>, String>;

/// A probe's plan: what it will do, validated; `execute` runs it on the live node.
pub trait Plan {
    /// Run the probe (workers, health checks) and judge it.
    fn execute(&self, node: &Node) -> Ran;
}

/// What a probe run gives the report.
#[derive(Debug, Clone, Default)]
pub struct Ran {
    /// The findings; those from a record are exactly its verdict (see `ProbeDef::replay` in the registry).
    pub findings: Vec<Finding>,
    /// What the report keeps under `probe.<name>`.
    pub record: Option<serde_json::Value>,
}

impl Ran {
    /// Findings without a record (the probe could not start on this node).
    pub fn findings(findings: Vec<Finding>) -> Ran {
        Ran {
            findings,
            record: None,
        }
    }
}
