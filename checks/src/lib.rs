//! gdrdoctor-checks: the pure core of gdrdoctor.
//!
//! The binary's collectors read the node (live or a sysroot) into a [`model::Node`]; everything
//! here is a pure function of that Node: derived conclusions ([`derive`]), the checks
//! ([`checks::CHECKS`]), and the versioned report ([`report`]). Nothing in this crate does I/O,
//! loads CUDA, NVML or libibverbs, or prints; so it builds and tests on any machine.

pub mod checks;
pub mod counters;
pub mod derive;
pub mod doorbell;
pub mod elf;
pub mod findings;
pub mod gdr;
pub mod inventory;
pub mod klog;
pub mod model;
pub mod names;
pub mod nccl;
pub mod parse;
pub mod paste;
pub mod pci;
pub mod policy;
pub mod preflight;
pub mod progress_record;
pub mod report;
pub mod roce;
pub mod schema;
pub mod schemas;
pub mod stall;
pub mod testing;
pub mod topo;
pub mod watch;

use report::{FailOn, Report};

/// Options that shape a report.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub selection: checks::Selection,
    pub fail_on: FailOn,
    pub allow_incomplete: bool,
}

/// The CPUs this process may use (`std::thread::available_parallelism`, at least 1), asked
/// once per process: each ask reads the cgroup's CPU quota (six system calls), and a `check`
/// sizes three thread pools with it.
pub fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Run the selected checks on a node and assemble the report (with its exit code).
pub fn build_report(node: &model::Node, opts: &RunOptions) -> Report {
    // The checks and the report's `gdr` share one NCCL decision.
    let _memo = gdr::memo_scope(node);
    let findings = checks::run(node, &opts.selection);
    report_with(node, findings, opts)
}

/// Assemble a report around findings that did not come from the check registry (probes).
pub fn report_with(
    node: &model::Node,
    findings: Vec<report::Finding>,
    opts: &RunOptions,
) -> Report {
    let mut summary = report::Summary::count(&findings);
    summary.exit_code = report::exit_code(&findings, opts.fail_on, opts.allow_incomplete);
    Report {
        schema: report::SCHEMA.to_string(),
        tool: report::Tool {
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        timestamp: None,
        host: report::Host {
            hostname: node.hostname.get().cloned(),
            kernel: node.kernel_release.get().cloned(),
            source: match node.source {
                model::SourceKind::Live => "live".into(),
                model::SourceKind::Sysroot => "sysroot".into(),
                model::SourceKind::HostRoot => "host-root".into(),
                model::SourceKind::Evidence => "evidence".into(),
            },
        },
        summary,
        inventory: inventory::build(node),
        findings,
        gdr: gdr::verdicts(node),
        probe: None,
    }
}
