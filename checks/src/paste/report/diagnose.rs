//! The whole `diagnose`: read the paste, build its node, run the registry's checks, adapt
//! them, add the paste's own findings, and assemble the report.

use super::adapt::adapt;
use super::pairs::pairs;
use super::topo::topo_findings;
use super::types::*;
use crate::paste::nccl::NcclLog;
use crate::paste::node;
use crate::paste::verdict::Context;
use crate::paste::{findings, BlockStatus, Input, Paste};
use crate::report::{self, Finding, Status};
use crate::RunOptions;
use std::collections::BTreeMap;

fn nccl_summary(p: &Paste, log: &NcclLog, unplaced: Vec<super::pairs::Unplaced>) -> NcclSummary {
    let mut transports = BTreeMap::new();
    for c in &log.connections {
        let k = match &c.transport {
            crate::paste::nccl::Transport::Net { net, gdr, .. } => {
                format!("NET/{net}{}", if *gdr { "/GDRDMA" } else { "" })
            }
            crate::paste::nccl::Transport::P2p { mode, read } => {
                format!("P2P/{mode}{}", if *read { "/read" } else { "" })
            }
            crate::paste::nccl::Transport::Shm { mode } => format!("SHM/{mode}"),
            crate::paste::nccl::Transport::Other { text } => text.clone(),
        };
        *transports.entry(k).or_insert(0) += 1;
    }
    NcclSummary {
        block: p
            .nccl
            .first()
            .and_then(|(i, _)| p.blocks.get(*i))
            .map(|b| b.id.clone())
            .unwrap_or_default(),
        versions: log.versions.clone(),
        env: log.env.clone(),
        hosts: log.hosts.clone(),
        networks: log.networks.clone(),
        net_devices: log.net_devices.clone(),
        nic_gdr: log.nic_gdr.clone(),
        gpu_gdr: log.gpu_gdr.clone(),
        logged_gdr: log.logged_gdr(),
        transports,
        ranks: super::job::ranks(log),
        unplaced,
        runs: super::job::runs(p),
        unprefixed_lines: log.unprefixed,
    }
}

/// `nccl.gdr` for the logged decisions no pasted pair takes: said, never put on a pair.
fn unplaced_finding(u: &[super::pairs::Unplaced], label: &str) -> Option<Finding> {
    let first = u.first()?;
    let mut f = Finding::new(
        "nccl.gdr",
        Status::Skip,
        "unplaced",
        format!(
            "{} logged GPU x NIC decision(s) are not placed on a pasted pair: {}",
            u.len(),
            first.why
        ),
    );
    for x in u.iter().take(6) {
        f = f.evidence(
            format!("{label} line {}", x.line),
            format!(
                "{} rank {} GPU {} {}: {}",
                x.host.as_deref().unwrap_or("an unnamed host"),
                x.rank,
                x.bus_id.as_deref().unwrap_or("?"),
                x.nic.as_deref().unwrap_or("?"),
                if x.gdr { "GDRDMA" } else { "no GDRDMA" }
            ),
        );
    }
    Some(f)
}

/// Whether anything in the inputs was recognised.
pub fn recognised(p: &Paste) -> bool {
    p.blocks.iter().any(|b| b.status != BlockStatus::Ignored)
}

/// Run diagnose on pasted inputs.
pub fn diagnose(inputs: &[Input], opts: &RunOptions) -> DiagnoseReport {
    let p = crate::paste::read(inputs);
    diagnose_paste(&p, inputs, opts, &Assume::default())
}

/// What the verdicts take from outside the paste.
#[derive(Debug, Clone, Default)]
pub struct Assume {
    /// `--nccl-version`: its rules, whatever the log says.
    pub nccl_version: Option<String>,
    /// `NCCL_*` variables of the environment gdrdoctor runs in: they overlay the paste's (to
    /// ask "what if", as `--sysroot` does), and the verdicts name them as the source.
    pub env: BTreeMap<String, String>,
    /// `--node-report`: the `gdrdoctor check` reports of the job's hosts (file name, report),
    /// joined to the log by host name so that a rank's decision is explained by its node.
    pub node_reports: Vec<(String, crate::report::Report)>,
}

/// Whether the paste shows a peer-memory client loaded (the files or the module list), whatever
/// NCCL's version makes of it.
fn peermem_loaded(node: &crate::model::Node, cx: &Context) -> Option<bool> {
    use crate::model::Fact;
    if cx.peermem.available == Some(true) {
        return Some(true);
    }
    if matches!(
        node.peermem.nvidia_peermem_version,
        Fact::Known { value: Some(_), .. }
    ) {
        return Some(true);
    }
    match crate::derive::peer_module_loaded(node) {
        Some((l, _)) if !l.is_empty() => Some(true),
        _ => cx.peermem.available,
    }
}

pub fn diagnose_paste(
    p: &Paste,
    inputs: &[Input],
    opts: &RunOptions,
    assume: &Assume,
) -> DiagnoseReport {
    let (mut node, prov) = node::build(p);
    if !assume.env.is_empty() {
        node.env = match &node.env {
            crate::model::Fact::Known { value, source } => {
                let mut e = value.clone();
                e.extend(assume.env.clone());
                crate::model::Fact::known(e, format!("{source} + the environment of this run"))
            }
            crate::model::Fact::Absent { .. } => {
                crate::model::Fact::known(assume.env.clone(), "the environment of this run")
            }
        };
    }
    let log = p.nccl_merged();
    let log_label = p.nccl.first().map(|(i, _)| p.label(*i)).unwrap_or_default();
    let cx = Context::new(&node, p, log.as_ref(), assume.nccl_version.as_deref());
    let (gdr, decision, unplaced) = pairs(p, &cx, log.as_ref());
    let replaced = ["topo.nic-distance", "topo.rails", "gdr.gpu"];
    let has_topo = !gdr.is_empty();
    let rdma_unplaced = node.rdma.get().is_some_and(|r| {
        !r.is_empty() && r.iter().all(|d| !matches!(d.pci_bdf.get(), Some(Some(_))))
    });
    // A matrix of GPUs without a NIC column: its GPUs are there, there is just no pair.
    let gpus_no_nic = p
        .matrices
        .iter()
        .find(|(_, m)| !m.gpus().is_empty() && m.nics().is_empty())
        .map(|(i, m)| (p.label(*i), m.gpus().len()));
    let mut fs: Vec<Finding> = findings::blocks(p);
    for (def, found) in crate::checks::run_each(&node, &opts.selection) {
        for mut f in found {
            if has_topo && replaced.contains(&f.id.as_str()) {
                continue;
            }
            if let Some((lab, n)) = &gpus_no_nic {
                if !has_topo && replaced.contains(&f.id.as_str()) && f.status == Status::Skip {
                    f.message = format!(
                        "{lab} lists {n} GPU(s) and no NIC: no GPU-NIC pair to judge (paste `ibv_devinfo` and a `nvidia-smi topo -m` taken where the NICs are visible)"
                    );
                }
            }
            fs.push(adapt(
                f,
                &def.needs,
                p,
                &prov,
                rdma_unplaced,
                node.rdma.get().is_none(),
            ));
        }
    }
    let wants = |id: &str| {
        (opts.selection.only.is_empty()
            || opts
                .selection
                .only
                .iter()
                .any(|o| o == id || id.split('.').next() == Some(o.as_str())))
            && !opts
                .selection
                .skip
                .iter()
                .any(|o| o == id || id.split('.').next() == Some(o.as_str()))
    };
    if has_topo {
        fs.extend(
            topo_findings(p, &gdr, &cx)
                .into_iter()
                .filter(|f| wants(&f.id)),
        );
    }
    fs.extend(
        findings::nccl_gdr(
            &gdr,
            log.as_ref(),
            &log_label,
            peermem_loaded(&node, &cx),
            &cx.config.rules,
        )
        .into_iter()
        .chain(findings::nccl_failures(p))
        .chain(
            log.as_ref()
                .and_then(|l| super::job::network(l, &log_label)),
        )
        .chain(
            log.as_ref()
                .and_then(|l| super::job::odd_ranks(l, &log_label, &assume.node_reports)),
        )
        .chain(super::job::runs_finding(&super::job::runs(p)))
        .chain(unplaced_finding(&unplaced, &log_label))
        .filter(|f| wants(&f.id)),
    );
    // ACS from lspci text where the check could not pair GPUs with NICs.
    if wants("pcie.acs-redirect") {
        if let Some(a) = findings::acs_text(p) {
            let undecided = fs
                .iter()
                .filter(|f| f.id == "pcie.acs-redirect")
                .all(|f| matches!(f.status, Status::Skip | Status::Error));
            if undecided {
                fs.retain(|f| f.id != "pcie.acs-redirect");
                fs.push(a);
            }
        }
    }
    fs.retain(|f| f.id != "paste.blocks" || wants("paste.blocks"));
    // A peer-memory client that NCCL's own log shows it did not use is no pass.
    if let Some(l) = log
        .as_ref()
        .filter(|l| l.nic_gdr.iter().any(|n| !n.enabled))
    {
        for f in fs
            .iter_mut()
            .filter(|f| f.id == "kmod.nvidia-peermem" && f.status == Status::Pass)
        {
            let off: Vec<&str> = l
                .nic_gdr
                .iter()
                .filter(|n| !n.enabled)
                .map(|n| n.name.as_str())
                .collect();
            f.status = Status::Warn;
            f.message = format!(
                "a peer-memory client is loaded, but NCCL's log shows GDR disabled for {} at the nic level: that NCCL did not use it (`nccl.gdr` says why)",
                off.join(", ")
            );
            for n in l.nic_gdr.iter().filter(|n| !n.enabled) {
                f.evidence.push(report::Evidence {
                    source: format!("{log_label} line {}", n.origin.line),
                    observed: format!("GPU Direct RDMA Disabled for HCA {} '{}'", n.index, n.name),
                    expected: None,
                });
            }
        }
    }
    let mut summary = report::Summary::count(&fs);
    summary.exit_code = report::exit_code(&fs, opts.fail_on, opts.allow_incomplete);
    DiagnoseReport {
        schema: SCHEMA.to_string(),
        tool: report::Tool {
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        host: report::Host {
            hostname: node.hostname.get().cloned(),
            kernel: node.kernel_release.get().cloned(),
            source: "evidence".into(),
        },
        summary,
        inputs: inputs
            .iter()
            .map(|i| InputInfo {
                name: i.name.clone(),
                lines: i.text.lines().count(),
                bytes: i.text.len(),
            })
            .collect(),
        blocks: p.blocks.clone(),
        findings: fs,
        gdr,
        gdr_level: cx.level.name.to_string(),
        gdr_level_source: cx.level.source.clone(),
        nccl_rules: cx.config.rules.describe(),
        gdr_notes: match &decision {
            Some(d) => d.notes.clone(),
            None => cx.config.env.notes.clone(),
        },
        matrices: p
            .matrices
            .iter()
            .map(|(i, m)| MatrixView {
                block: p.blocks.get(*i).map(|b| b.id.clone()).unwrap_or_default(),
                matrix: m.clone(),
            })
            .collect(),
        nccl: log.as_ref().map(|l| nccl_summary(p, l, unplaced.clone())),
        inventory: crate::inventory::build(&node),
    }
}
