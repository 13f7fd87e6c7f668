//! A registry check's finding into what a paste can say: evidence cited by block, a missing
//! input a `skip` with the command that shows it.

use crate::checks::Needs;
use crate::paste::node::Provenance;
use crate::paste::{BlockStatus, Kind, Paste};
use crate::report::{self, Finding, Status};

/// The words of a fact two pasted copies disagree on (`node::rdma_devices`).
pub const TWICE: &str = "(two nodes' outputs?)";

/// The words of a fact the pasted tool itself failed to read (`ibpanic: ... failed`).
pub const UNREADABLE: &str = "the tool could not read";

/// Turn a registry check's finding into what a paste can say. `needs`: what the check reads,
/// as its row says. `rdma_unplaced`: the paste shows RDMA devices but not their PCI addresses,
/// so checks that pair NICs with PCI functions cannot be answered (their "no rdma nic on the
/// pci bus" would be a claim the paste does not make).
pub(super) fn adapt(
    f: Finding,
    needs: &Needs,
    p: &Paste,
    prov: &Provenance,
    rdma_unplaced: bool,
    rdma_unknown: bool,
) -> Finding {
    let mut f = f;
    // Without the RDMA devices (no ibv_devinfo, ibstat or NCCL device list), which PCI
    // functions are RDMA NICs is not shown: "no rdma nic on the pci bus" would be a claim the
    // paste does not make (a pasted ConnectX was "no gpu or nic on the pci bus").
    if rdma_unknown
        && f.subject == "node"
        && f.status == Status::Skip
        && f.message.contains("nic")
        && needs
            .kinds
            .iter()
            .any(|k| matches!(k, Kind::Lspci | Kind::LspciTree))
    {
        let was = f.message.clone();
        f.message = "which pci functions are rdma nics: the rdma devices are not in the pasted text; run `ibv_devinfo -v; ls -l /sys/class/infiniband/`".into();
        f.evidence = vec![report::Evidence {
            source: "check".into(),
            observed: was,
            expected: None,
        }];
        f.remediation = None;
        return f;
    }
    let pairs_nics = [
        "pcie.ats",
        "pcie.mrrs",
        "pcie.acs-redirect",
        "topo.nic-numa",
    ];
    if rdma_unplaced
        && pairs_nics.contains(&f.id.as_str())
        && f.status != Status::Fail
        && f.status != Status::Warn
    {
        let was = f.message.clone();
        f.status = Status::Skip;
        f.message = "the pci addresses of the rdma devices: not in the pasted text; run `ls -l /sys/class/infiniband/`".into();
        f.evidence = vec![report::Evidence {
            source: "check".into(),
            observed: was,
            expected: None,
        }];
        f.remediation = None;
        return f;
    }
    // An lspci excerpt (`lspci -s`, `-d`, `| grep`) is not the whole bus: a node-wide answer
    // of a check that reads the PCI functions ("no rdma nic on the pci bus", "no nvidia gpu")
    // would be a claim about functions the excerpt does not show.
    if let Some(part) = p.pci_excerpt() {
        let reads_pci = needs
            .kinds
            .iter()
            .any(|k| matches!(k, Kind::Lspci | Kind::LspciTree));
        if reads_pci && f.subject == "node" && f.status != Status::Error {
            return excerpt_skip(f, part, needs, "the pasted lspci is an excerpt of the bus");
        }
    }
    // `ibv_devinfo -d mlx5_0` (or `ibstat mlx5_0`, `| grep`) is not the node's device list.
    if let Some(part) = p.rdma_excerpt() {
        let reads_rdma = needs
            .kinds
            .iter()
            .any(|k| matches!(k, Kind::IbvDevinfo | Kind::Ibstat));
        if reads_rdma && f.subject == "node" && f.status != Status::Error {
            return excerpt_skip(
                f,
                part,
                needs,
                "the pasted device list is limited to some devices",
            );
        }
    }
    for e in &mut f.evidence {
        if let Some((path, lab)) = prov
            .iter()
            .filter(|(path, _)| e.source.starts_with(path.as_str()))
            .max_by_key(|(path, _)| path.len())
        {
            e.source = format!("{lab} (as {})", e.source.replacen(path.as_str(), path, 1));
        }
    }
    if !matches!(f.status, Status::Error | Status::Skip) {
        return f;
    }
    // Two copies of a device that disagree: an error the paste itself shows, not a missing
    // paste (the node's own node.rs says so in the fact).
    let shown = |t: &str| t.contains(TWICE) || t.contains(UNREADABLE);
    if f.status == Status::Error
        && (shown(&f.message) || f.evidence.iter().any(|e| shown(&e.observed)))
    {
        return f;
    }
    let (kinds, what, cmd) = (needs.kinds, needs.what, needs.command);
    let blocks: Vec<&crate::paste::Block> = p
        .blocks
        .iter()
        .filter(|b| kinds.contains(&b.kind))
        .collect();
    // Damaged input stays an error; an input that is there and whole keeps the check's answer.
    if blocks
        .iter()
        .any(|b| matches!(b.status, BlockStatus::Incomplete | BlockStatus::Refused))
    {
        return f;
    }
    if !blocks.is_empty() && f.status == Status::Skip {
        return f;
    }
    let was = f.message.clone();
    f.status = Status::Skip;
    let on_node = if cmd.starts_with("gdrdoctor") {
        " on the node"
    } else {
        ""
    };
    f.message = if blocks.is_empty() {
        format!("{what}: not in the pasted text; run `{cmd}`{on_node}")
    } else {
        format!(
            "{what}: the pasted {} does not show it; run `{cmd}`{on_node}",
            blocks
                .iter()
                .map(|b| b.kind.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    f.evidence.insert(
        0,
        report::Evidence {
            source: "check".into(),
            observed: was,
            expected: None,
        },
    );
    f.remediation = None;
    f
}

/// A node-wide finding judged on an excerpt (`what` the excerpt is): a skip naming the excerpt
/// and the command that shows the whole, with the check's own answer kept as evidence.
fn excerpt_skip(mut f: Finding, part: String, needs: &Needs, what: &str) -> Finding {
    let was = std::mem::take(&mut f.message);
    f.status = Status::Skip;
    f.message = format!(
        "{}: {what}, and what it does not show is not absent from the node; run `{}`",
        needs.what, needs.command
    );
    f.evidence = vec![
        report::Evidence {
            source: "excerpt".into(),
            observed: part,
            expected: None,
        },
        report::Evidence {
            source: "check (on the excerpt)".into(),
            observed: was,
            expected: None,
        },
    ];
    f.remediation = None;
    f
}
