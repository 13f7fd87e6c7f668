//! Everything read from the inputs ([`Paste`]): the blocks, and what each kind of block held,
//! each with the index of its block.

use super::block::Block;
use super::kind::Kind;
use super::{ibv, kernel, lsmod, lspci, nccl, smiq, topo};
use crate::model::Rlimit;
use std::collections::BTreeMap;

/// Everything read from the inputs. Parsed contents carry the index of their block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Paste {
    pub blocks: Vec<Block>,
    pub matrices: Vec<(usize, topo::Matrix)>,
    pub nccl: Vec<(usize, nccl::NcclLog)>,
    pub lspci: Vec<(usize, lspci::LspciDevice)>,
    /// The `lspci` blocks that are excerpts of the bus (`lspci -s`, `-d`, `| grep`), with what
    /// each covers ([`lspci::excerpt`]).
    pub lspci_excerpts: Vec<(usize, String)>,
    /// `ACSCtl:` lines of no device (`lspci -vvv | grep ACSCtl`): (block, line, flags).
    pub acs_lines: Vec<(usize, usize, lspci::AcsFlags)>,
    pub trees: Vec<(usize, lspci::Tree)>,
    pub ib: Vec<(usize, ibv::IbDevice)>,
    pub modules: Vec<(usize, lsmod::ModuleList)>,
    pub smiq: Vec<(usize, smiq::SmiQ)>,
    pub cmdline: Vec<(usize, kernel::Cmdline)>,
    pub dmesg: Vec<(usize, kernel::DmesgEvent)>,
    /// The lines of each kernel log block, continuation lines joined
    /// ([`crate::klog::join_continuations`]): what `crate::klog` and the `kernel.*` checks read.
    pub kernel_log: Vec<(usize, Vec<String>)>,
    pub nvidia_version: Vec<(usize, String)>,
    /// (block, kernel release, machine)
    pub uname: Vec<(usize, Option<String>, Option<String>)>,
    pub ulimit: Vec<(usize, Rlimit)>,
    pub env: Vec<(usize, BTreeMap<String, String>)>,
}

impl Paste {
    pub fn has(&self, k: Kind) -> bool {
        self.blocks
            .iter()
            .any(|b| b.kind == k && b.status != super::block::BlockStatus::Refused)
    }
    /// When every pasted `lspci` block is an excerpt of the bus: what they cover, in words
    /// (`None` when no lspci was pasted or one of them may be the whole bus). A function the
    /// excerpt lacks is not shown, never absent.
    pub fn pci_excerpt(&self) -> Option<String> {
        let blocks: std::collections::BTreeSet<usize> =
            self.lspci.iter().map(|(i, _)| *i).collect();
        if blocks.is_empty()
            || blocks
                .iter()
                .any(|b| !self.lspci_excerpts.iter().any(|(x, _)| x == b))
        {
            return None;
        }
        Some(
            self.lspci_excerpts
                .iter()
                .map(|(i, w)| format!("{}: {w}", self.label(*i)))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
    /// When every pasted `ibv_devinfo` / `ibstat` block is limited to some devices
    /// (`ibv_devinfo -d mlx5_0`, `ibstat mlx5_0`, `| grep ..`): what they cover, in words.
    pub fn rdma_excerpt(&self) -> Option<String> {
        let blocks: Vec<&super::block::Block> = self
            .blocks
            .iter()
            .filter(|b| matches!(b.kind, Kind::IbvDevinfo | Kind::Ibstat))
            .collect();
        let limited = |c: &str| -> bool {
            let head = c.split('|').next().unwrap_or(c);
            let words: Vec<&str> = head.split_whitespace().collect();
            c.contains('|')
                || words
                    .iter()
                    .any(|w| *w == "-d" || w.starts_with("--ib-dev") || w.starts_with("-d"))
                || (words.first().is_some_and(|w| *w == "ibstat")
                    && words.iter().skip(1).any(|w| !w.starts_with('-')))
        };
        if blocks.is_empty()
            || !blocks
                .iter()
                .all(|b| b.command.as_deref().is_some_and(limited))
        {
            return None;
        }
        Some(
            blocks
                .iter()
                .map(|b| {
                    format!(
                        "{}: `{}` shows only the devices it names or its filter kept",
                        b.id,
                        b.command.as_deref().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
    pub fn label(&self, block: usize) -> String {
        self.blocks
            .get(block)
            .map(Block::label)
            .unwrap_or_else(|| format!("b{}", block + 1))
    }
    /// The runs of every block that held several ([`nccl::NcclLog::run`]), in paste order.
    pub fn nccl_runs(&self) -> Vec<(usize, &nccl::NcclLog)> {
        self.nccl
            .iter()
            .filter(|(_, l)| l.run > 0)
            .map(|(b, l)| (*b, l))
            .collect()
    }

    /// The logs the verdicts read: every block's log, and of a block that held several runs
    /// its last run only (the earlier ones are shown beside it, never merged into it).
    pub fn nccl_current(&self) -> Vec<(usize, &nccl::NcclLog)> {
        let last_run = |b: usize| {
            self.nccl
                .iter()
                .filter(|(x, _)| *x == b)
                .map(|(_, l)| l.run)
                .max()
                .unwrap_or(0)
        };
        self.nccl
            .iter()
            .filter(|(b, l)| l.run == last_run(*b))
            .map(|(b, l)| (*b, l))
            .collect()
    }

    /// The NCCL log blocks merged into one view (several pastes of one job); of a block with
    /// several runs, its last run ([`Self::nccl_current`]).
    pub fn nccl_merged(&self) -> Option<nccl::NcclLog> {
        let current = self.nccl_current();
        let mut it = current.into_iter();
        let (_, first) = it.next()?;
        let mut m = first.clone();
        for (_, l) in it {
            for v in &l.versions {
                if !m.versions.contains(v) {
                    m.versions.push(v.clone());
                }
            }
            m.env.extend(l.env.clone());
            for h in &l.hosts {
                if !m.hosts.contains(h) {
                    m.hosts.push(h.clone());
                }
            }
            m.ranks.extend(l.ranks.iter().cloned());
            m.net_devices.extend(l.net_devices.iter().cloned());
            m.networks.extend(l.networks.iter().cloned());
            m.nic_gdr.extend(l.nic_gdr.iter().cloned());
            m.gpu_gdr.extend(l.gpu_gdr.iter().cloned());
            m.dmabuf_gpus.extend(l.dmabuf_gpus.iter().cloned());
            m.connections.extend(l.connections.iter().cloned());
            m.failures.extend(l.failures.iter().cloned());
            m.warnings.extend(l.warnings.iter().cloned());
            m.nccl_lines += l.nccl_lines;
            m.unreadable.extend(l.unreadable.iter().cloned());
            m.no_rdma.extend(l.no_rdma.iter().cloned());
            m.summaries += l.summaries;
            m.unprefixed += l.unprefixed;
            m.lines = [m.lines[0].min(l.lines[0]), m.lines[1].max(l.lines[1])];
        }
        Some(m)
    }
}
