//! What the verdicts need from the node, computed once per report: every GPU's and NIC's
//! place in NCCL's tree, the NCCL version and environment, the distance threshold, and the
//! peer-memory and dma-buf paths.

use super::memo::memoized;
use crate::derive::{self, PathAnswer};
use crate::model::{Node, PciDevice, RdmaDevice};
use crate::nccl::env::Level as EnvLevel;
use crate::nccl::rule::{self, Config};
use crate::nccl::{self, PathKind};
use crate::topo::{Endpoint, PciIndex};

/// The distance threshold and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// The threshold in NCCL 2.29+ numbering ([`crate::topo::PathType`] values), so that
    /// `(path as u8) <= value` holds exactly for the PCIe paths within it.
    pub value: u8,
    /// NCCL's name of the threshold (`PXB`, `P2C`, `PHB`, ...).
    pub name: String,
    pub source: String,
}

/// The threshold of `cfg`, as a [`Level`]; `c2c` as [`rule::c2c_here`] says.
pub fn level_of(cfg: &Config, c2c: Option<bool>) -> Level {
    let (lvl, name, source) = rule::threshold(&cfg.env, cfg.rules.version, c2c);
    let kind = match lvl {
        EnvLevel::Kind(k) => k,
        // 2.4-2.5: GDR below the integer (PIX 0, PXB 1, PHB 2, NODE 3, SYS 4).
        EnvLevel::Legacy(n) => match n {
            i64::MIN..=0 => PathKind::Loc,
            1 => PathKind::Pix,
            2 => PathKind::Pxb,
            3 | 4 => PathKind::Phb,
            _ => PathKind::Sys,
        },
    };
    Level {
        value: nccl::version::NEWEST.value(kind).unwrap_or(u8::MAX),
        name,
        source,
    }
}

/// One RDMA NIC's PCI function ([`Context::nic_functions`]).
pub struct NicFunction<'a, 'c> {
    /// The first NIC on the function.
    pub nic: &'a RdmaDevice,
    /// Its place in NCCL's tree, when known.
    pub ep: Option<&'c Endpoint>,
    /// The address as the NIC names it.
    pub bdf: &'a String,
    pub dev: &'a PciDevice,
}

/// Everything the verdicts need, computed once.
pub struct Context<'a> {
    pub index: PciIndex<'a>,
    pub gpus: Vec<Endpoint>,
    pub nics: Vec<(&'a RdmaDevice, Option<Endpoint>)>,
    pub level: Level,
    pub peermem: PathAnswer,
    pub dmabuf: PathAnswer,
    /// The NCCL version and environment that apply.
    pub config: Config,
}

impl<'a> Context<'a> {
    /// The node's context. Within a [`MemoScope`](super::memo::MemoScope) (one report) the
    /// costly part, every GPU's and NIC's place in NCCL's tree, is computed once and copied to
    /// each check (the checks of an 8-GPU report asked for it 13 times: 2.4 M of its 33 M
    /// instructions).
    /// The PCI functions of the RDMA NICs, each once and in NIC order (two NICs on one
    /// function, a PF and its sub-functions, are judged once, as the first that names it),
    /// with that NIC and its place in NCCL's tree; a NIC whose function is unknown or not on
    /// the bus is left out.
    pub fn nic_functions(&self) -> Vec<NicFunction<'a, '_>> {
        let mut out: Vec<NicFunction<'a, '_>> = Vec::new();
        let mut seen: Vec<&String> = Vec::new();
        for (nic, ep) in &self.nics {
            let Some(Some(bdf)) = nic.pci_bdf.get() else {
                continue;
            };
            if seen.contains(&bdf) {
                continue;
            }
            seen.push(bdf);
            if let Some(dev) = self.index.get(bdf) {
                out.push(NicFunction {
                    nic,
                    ep: ep.as_ref(),
                    bdf,
                    dev,
                });
            }
        }
        out
    }

    pub fn new(node: &'a Node) -> Self {
        let index = PciIndex::new(node);
        let placed = placed(node);
        let nics = node
            .rdma
            .get()
            .map(|r| {
                r.iter()
                    .enumerate()
                    .map(|(i, d)| (d, placed.nics.get(i).cloned().flatten()))
                    .collect()
            })
            .unwrap_or_default();
        Context {
            index,
            gpus: placed.gpus.clone(),
            nics,
            level: level_of(&placed.config, placed.c2c),
            peermem: placed.peermem.clone(),
            dmabuf: placed.dmabuf.clone(),
            config: placed.config.clone(),
        }
    }
}

/// What [`Context::new`] derives from the node and keeps for a report: owned, so that the
/// memo can hold it.
#[derive(Debug)]
struct Placed {
    gpus: Vec<Endpoint>,
    /// In the order of `node.rdma`.
    nics: Vec<Option<Endpoint>>,
    config: Config,
    peermem: PathAnswer,
    dmabuf: PathAnswer,
    /// Whether any GPU is C2C-attached ([`rule::c2c_here`]).
    c2c: Option<bool>,
}

impl Placed {
    fn compute(node: &Node) -> Placed {
        let index = PciIndex::new(node);
        let gpus = derive::gpus(node)
            .iter()
            .filter_map(|g| index.endpoint(&g.bdf, false))
            .collect();
        let nics = node
            .rdma
            .get()
            .map(|r| {
                r.iter()
                    .map(|d| match d.pci_bdf.get() {
                        Some(Some(b)) => index.endpoint(b, true),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let config = nccl::config(node);
        let c2c = rule::c2c_here(
            derive::gpus(node)
                .iter()
                .map(|g| super::c2c::c2c_of(node, &g.bdf, &index).0),
        );
        Placed {
            c2c,
            gpus,
            nics,
            peermem: derive::peermem_path_for(node, Some(config.rules.version)),
            config,
            dmabuf: derive::dmabuf_path(node),
        }
    }
}

/// The node's placed endpoints: the ones of its open [`MemoScope`](super::memo::MemoScope), else
/// computed now.
fn placed(node: &Node) -> std::sync::Arc<Placed> {
    memoized(node, Placed::compute)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::super::memo::memo_scope;
    use super::*;
    use crate::model::Fact;

    #[test]
    fn one_placement_per_scope_the_same_as_a_fresh_one() {
        use crate::testing::*;
        use std::sync::Arc;
        let n = switch_pair();
        let fresh = Context::new(&n);
        assert!(!fresh.gpus.is_empty() && !fresh.nics.is_empty());
        assert!(!Arc::ptr_eq(&placed(&n), &placed(&n)));
        {
            let _scope = memo_scope(&n);
            let p = placed(&n);
            assert!(Arc::ptr_eq(&p, &placed(&n)));
            let cx = Context::new(&n);
            assert_eq!(cx.gpus, fresh.gpus);
            assert_eq!(cx.nics, fresh.nics);
            assert_eq!(cx.config, fresh.config);
            assert_eq!((&cx.peermem, &cx.dmabuf), (&fresh.peermem, &fresh.dmabuf));
            // Another node (a copy without its NICs) is placed on its own.
            let mut m = n.clone();
            m.rdma = Fact::known(Vec::new(), "/sys/class/infiniband");
            assert!(Context::new(&m).nics.is_empty());
            assert!(!Arc::ptr_eq(&p, &placed(&m)));
        }
        assert!(!Arc::ptr_eq(&placed(&n), &placed(&n)));
    }
}
