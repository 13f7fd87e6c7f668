//! The GDR verdict per GPU x NIC pair for a node: the node's facts turned into the inputs of
//! NCCL's rule ([`crate::nccl::rule::decide`], the one function `topo`, `gdr.gpu` and
//! `diagnose` share), and its verdicts turned into the report's [`GdrPair`]s.
//!
//! What this module supplies from the node (gdr-ground-truth §1): NIC support (peer-memory
//! client, or dma-buf with the per-GPU CUDA attribute and NCCL's per-NIC probe), GPU support
//! (a live CUDA attribute), the PCIe path of every pair from NCCL's tree ([`crate::topo`]),
//! NVLink between GPUs (NVML, else NVSwitches on the PCI bus), the compute capability (CUDA,
//! else the GPU model), NVLink-C2C attachment (the GPU model on an Arm CPU), the NCCL version
//! on the node and the `NCCL_*` environment.
//!
//! The parts: [`c2c`] (which GPUs reach their CPU over NVLink-C2C), [`context`] (the node's
//! facts the verdicts need, computed once per report),
//! [`system`] (the rule's inputs), [`p2p`] (GPU pairs: NVLink, PCIe, peer access) and
//! [`memo`] (one computation per report). This file joins them: the decision and the report's
//! pairs.

pub mod c2c;
pub mod context;
pub mod memo;
pub mod p2p;
pub mod system;

pub use c2c::grace_model;
pub use context::{level_of, Context, Level};
pub(crate) use memo::memo_scope;
pub use system::{cc_from_model, system};

use crate::model::{Fact, Node};
use crate::nccl::rule::{self, Decision, System, Verdict};
use crate::report::GdrPair;

/// The context, the rule's inputs, and NCCL's decision for the node.
pub fn decision(node: &Node) -> (Context<'_>, System, Decision) {
    let cx = Context::new(node);
    let sys = system(node, &cx);
    let d = rule::decide(&sys, &cx.config);
    (cx, sys, d)
}

/// NCCL's decision for a node and the report's pairs, as [`decision`] and [`verdicts`] compute
/// them: computed once for all the checks of one report while a
/// [`MemoScope`](memo::MemoScope) for the node is open ([`shared`]), else each time.
#[derive(Debug)]
pub struct Shared {
    pub system: System,
    pub decision: Decision,
    pub pairs: Vec<GdrPair>,
}

impl Shared {
    fn compute(node: &Node) -> Shared {
        let (_, system, decision) = self::decision(node);
        let pairs = decision
            .verdicts
            .iter()
            .map(|v| to_pair(&system, &decision, v))
            .collect();
        Shared {
            system,
            decision,
            pairs,
        }
    }
}

/// The node's decision and pairs: the one of its open [`MemoScope`](memo::MemoScope), else
/// computed now.
pub fn shared(node: &Node) -> std::sync::Arc<Shared> {
    memo::memoized(node, Shared::compute)
}

/// A verdict as the report's pair.
pub fn to_pair(sys: &System, d: &Decision, v: &Verdict) -> GdrPair {
    let mut reasons: Vec<String> = Vec::new();
    for r in v.send.reasons.iter().chain(v.receive.reasons.iter()) {
        if !reasons.contains(r) {
            reasons.push(r.clone());
        }
    }
    let pcie = v.pcie.map(|k| k.as_str().to_string());
    GdrPair {
        gpu: sys.gpus[v.gpu].id.clone(),
        nic: sys.nics[v.nic].name.clone(),
        path: pcie.clone().unwrap_or_else(|| "?".into()),
        nvidia_smi: sys
            .smi
            .get(v.gpu)
            .and_then(|r| r.get(v.nic))
            .cloned()
            .flatten(),
        enabled: v.enabled(),
        mechanism: if v.enabled() {
            v.mechanism.map(str::to_string)
        } else {
            None
        },
        reasons,
        assumptions: v.assumptions.clone(),
        send: (!v.send.undecided).then_some(v.send.gdr),
        receive: (!v.receive.undecided).then_some(v.receive.gdr),
        nccl_path: v.path.map(|k| k.as_str().to_string()),
        via: v.via.and_then(|p| sys.gpus.get(p)).map(|g| g.id.clone()),
        pci_mode: v.send.pci_mode || v.receive.pci_mode,
        threshold: Some(d.threshold.clone()),
        threshold_source: Some(d.threshold_source.clone()),
        rules: Some(d.rules.describe()),
        undecided: v.undecided.clone(),
        notes: v.notes.clone(),
    }
}

/// The verdict for every GPU x RDMA device pair.
pub fn verdicts(node: &Node) -> Vec<GdrPair> {
    shared(node).pairs.clone()
}

/// The NUMA node of a fact, for messages.
pub fn numa_text(n: &Fact<i32>) -> String {
    n.get().map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use memo::memo;

    #[test]
    fn one_decision_per_scope_for_that_node_only_and_none_after_it() {
        use crate::testing::*;
        use std::sync::Arc;
        let n = switch_pair();
        let fresh = verdicts(&n);
        assert!(!fresh.is_empty());
        // No scope: computed each time.
        assert!(!Arc::ptr_eq(&shared(&n), &shared(&n)));
        {
            let _outer = memo_scope(&n);
            let a = shared(&n);
            assert!(Arc::ptr_eq(&a, &shared(&n)));
            assert_eq!(a.pairs, fresh);
            assert_eq!(verdicts(&n), fresh);
            {
                let _inner = memo_scope(&n);
                assert!(Arc::ptr_eq(&a, &shared(&n)));
            }
            // The inner scope's end leaves the outer one's answer.
            assert!(Arc::ptr_eq(&a, &shared(&n)));
            // A changed copy of the node is another node: not answered from the memo.
            let mut m = n.clone();
            m.rdma = Fact::known(Vec::new(), "/sys/class/infiniband");
            let c = shared(&m);
            assert!(!Arc::ptr_eq(&a, &c));
            assert!(c.pairs.is_empty());
        }
        let key = &n as *const Node as usize;
        assert!(
            memo().iter().all(|e| e.0 != key),
            "the scope's entry outlived it"
        );
        assert!(!Arc::ptr_eq(&shared(&n), &shared(&n)));
    }

    #[test]
    fn a_nic_libibverbs_cannot_list_gets_no_gdr() {
        use crate::model::{Fact, VerbsFacts};
        let pair = |v: Option<VerbsFacts>| {
            let mut n = crate::testing::switch_pair();
            if let Some(v) = v {
                n.live.verbs = Fact::known(v, "libibverbs.so.1");
            }
            verdicts(&n).into_iter().next().expect("one pair")
        };
        // The live facts list mlx5_0: GDR through peer memory, as without live facts.
        let listed = VerbsFacts {
            has_reg_dmabuf_mr: true,
            devices: vec!["mlx5_0".into()],
            ..Default::default()
        };
        assert!(pair(Some(listed.clone())).enabled);
        assert!(pair(None).enabled);
        // No kernel RDMA support: NCCL finds no device at all.
        let p = pair(Some(VerbsFacts {
            devices: vec![],
            list_errno: Some(38),
            ..listed.clone()
        }));
        assert!(!p.enabled, "{p:?}");
        assert!(
            p.reasons
                .iter()
                .any(|r| r.contains("errno 38") && r.contains("sockets")),
            "{:?}",
            p.reasons
        );
        // Listed devices without this one.
        let p = pair(Some(VerbsFacts {
            devices: vec!["mlx5_1".into()],
            ..listed
        }));
        assert!(!p.enabled, "{p:?}");
        assert!(
            p.reasons
                .iter()
                .any(|r| r.contains("libibverbs does not list mlx5_0")),
            "{:?}",
            p.reasons
        );
    }
}
