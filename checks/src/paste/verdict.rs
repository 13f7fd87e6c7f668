//! The GDR verdict for pasted GPU x NIC pairs. [`decide`] is the only place `diagnose` decides
//! GDR, and it decides nothing itself: it hands what the paste shows to NCCL's rule
//! ([`crate::nccl::rule::decide`], the one function `check`, `topo`, `gdr.gpu` and `diagnose`
//! share) and turns its verdicts into [`PastePair`]s.
//!
//! What a paste gives the rule ([`system`], [`Context::new`]):
//! - the path of every pair: the matrix cell (`NODE` is NCCL's PHB, `SOC` the old name of SYS;
//!   a `P2C` cell is a PHB NIC on the GPU's own C2C-attached CPU);
//! - NVLink between GPUs: the `NV#` cells (a `topo -mp` paste shows PCIe only: unknown);
//! - the compute capability (the read gate): the GPU model from `nvidia-smi -q` or `lspci`
//!   (a heuristic, said); NVLink-C2C: the model (GH200, GB200, GB300), or an x86 CPU shown by
//!   `uname` or by `lspci`'s host bridges;
//! - the NICs' ports: `ibv_devinfo`, `ibstat`, or NCCL's `NET/IB : Using` list (ACTIVE only);
//! - NIC support: NCCL's own `GPU Direct RDMA Enabled|Disabled for HCA` line, else `lsmod`
//!   (peer memory) and the driver flavor and kernel (dma-buf);
//! - the NCCL version: `--nccl-version`, else the log's `NCCL version` line, else the newest
//!   rules (said); the environment: NCCL's `set by environment` lines and pasted `NCCL_*=` lines.
//!
//! CUDA's `GPU_DIRECT_RDMA_SUPPORTED` is in no paste: assumed, and said. A verdict that would
//! be `on` but for a port state the paste does not show is `unknown`: a paste never passes on
//! a fact it lacks.

use super::nccl::NcclLog;
use super::pasted::Paste;
use crate::derive::{self, PathAnswer};
use crate::gdr::{self, Level};
use crate::model::NcclFacts;
use crate::model::{Fact, Node};
use crate::nccl::rule::{self, Config, Decision, Support, System};
use crate::nccl::{self, env::NcclEnv, Chosen, PathKind};
use serde::Serialize;
use std::collections::BTreeMap;

/// NCCL's path type for an nvidia-smi cell (`NODE` is NCCL's PHB; `SOC` is the pre-2017 name
/// of SYS; `P2C` is a PHB NIC reached through the GPU's own C2C-attached CPU).
pub fn kind_of_cell(cell: &str) -> Option<PathKind> {
    match cell {
        "PIX" => Some(PathKind::Pix),
        "PXB" => Some(PathKind::Pxb),
        "PHB" | "NODE" | "P2C" => Some(PathKind::Phb),
        "SYS" | "SOC" => Some(PathKind::Sys),
        _ => None,
    }
}

fn is_nvlink(cell: &str) -> bool {
    cell.strip_prefix("NV")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// What every pair of a paste shares: the rules and environment, the support paths, the
/// NICs' ports, NCCL's NIC-level lines, the GPU models.
#[derive(Debug, Clone)]
pub struct Context {
    /// The NCCL version whose rules apply and the environment.
    pub config: Config,
    /// The threshold, for the distance views.
    pub level: Level,
    pub peermem: PathAnswer,
    pub dmabuf: PathAnswer,
    /// NIC name -> (port, ACTIVE) (`None`: the ports are not shown).
    pub ports: BTreeMap<String, Option<Vec<(u32, bool)>>>,
    /// Whether the node's RDMA devices are known at all (ibv_devinfo, ibstat or NCCL's list).
    pub rdma_known: bool,
    /// NIC name -> NCCL's own NIC-level answer and the line as it was logged.
    pub nic_logged: BTreeMap<String, (bool, String)>,
    /// GPU models in nvidia-smi's order, with the block they came from.
    pub models: Vec<(String, String)>,
    /// The CPU is x86, and what shows it.
    pub x86: Option<String>,
    /// `GPU C2C Mode` of `nvidia-smi -q` when every pasted GPU shows the same value: whether
    /// it is `Enabled`, and the words to cite.
    pub c2c_mode: Option<(bool, String)>,
}

/// `GPU C2C Mode` (nvidia-smi -q, driver 550+), when every pasted GPU shows one and the same:
/// `Enabled` only on a GPU joined to a Grace CPU by NVLink-C2C; `Disabled` or `N/A` on the
/// others (every x86 node: the words name C2C, the GPU has none).
fn c2c_mode(p: &Paste) -> Option<(bool, String)> {
    let (i, q) = p.smiq.iter().find(|(_, q)| !q.gpus.is_empty())?;
    let first = q.gpus.first()?.c2c_mode.clone()?;
    q.gpus
        .iter()
        .all(|g| g.c2c_mode.as_deref() == Some(first.as_str()))
        .then(|| {
            (
                first == "Enabled",
                format!("`GPU C2C Mode : {first}` for every GPU in {}", p.label(*i)),
            )
        })
}

/// The rules of the paste: `--nccl-version`, else the log's version, else the newest.
fn rules(requested: Option<&str>, log: Option<&NcclLog>, log_label: &str) -> Chosen {
    if let Some(r) = requested {
        return nccl::choose(
            Some(&NcclFacts {
                requested: Some(r.to_string()),
                ..Default::default()
            }),
            None,
        );
    }
    let Some(l) = log else {
        return Chosen::newest("no NCCL log in the paste; pass --nccl-version");
    };
    match (l.version(), l.versions.first()) {
        (Some(v), Some(raw)) => {
            let mut source = format!("`NCCL version {raw}` in {log_label}");
            let others: Vec<&String> = l
                .versions
                .iter()
                .filter(|x| super::nccl::Version::parse(x) != Some(v))
                .collect();
            if !others.is_empty() {
                source.push_str(&format!(
                    "; the log also shows {} (pass --nccl-version for the one the job used)",
                    others
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            nccl::clamp(v, source)
        }
        _ => Chosen::newest(&format!(
            "{log_label} does not show the `NCCL version` line; pass --nccl-version"
        )),
    }
}

/// The GPU models a paste shows, in nvidia-smi's order (nvidia-smi -q, else lspci's NVIDIA
/// GPUs in PCI address order, which is NVML's).
fn models(node: &Node, p: &Paste) -> Vec<(String, String)> {
    if let Some((i, q)) = p.smiq.iter().find(|(_, q)| !q.gpus.is_empty()) {
        let lab = p.label(*i);
        return q
            .gpus
            .iter()
            .map(|g| {
                (
                    g.product_name.clone().unwrap_or_default(),
                    format!("{lab} {}", g.bdf),
                )
            })
            .collect();
    }
    let mut gpus: Vec<&crate::model::PciDevice> = derive::gpus(node);
    gpus.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    gpus.iter()
        .map(|d| {
            (
                crate::names::device_name(d),
                format!("{} {}", d.device_id.source(), d.bdf),
            )
        })
        .collect()
}

/// Modules only x86 kernels load.
const X86_MODULES: [&str; 6] = [
    "kvm_intel",
    "kvm_amd",
    "intel_rapl_msr",
    "x86_pkg_temp_thermal",
    "amd64_edac",
    "intel_cstate",
];

/// An x86 CPU, when the paste shows one: `uname -m`, an x86-only module in a pasted `lsmod`,
/// or an Intel or AMD host bridge in lspci.
fn x86(node: &Node) -> Option<String> {
    if let Fact::Known { value, source } = &node.arch {
        if value == "x86_64" {
            return Some(format!("uname: {value} ({source})"));
        }
        return None;
    }
    if let Fact::Known { value, source } = &node.modules.proc_modules {
        if let Some(m) = X86_MODULES.iter().find(|m| value.contains_key(**m)) {
            return Some(format!("{m} in {source}"));
        }
    }
    let pci = node.pci.get()?;
    pci.iter()
        .find(|d| {
            d.class.get().is_some_and(|c| c >> 8 == 0x0600)
                && matches!(d.vendor_id.get(), Some(0x8086) | Some(0x1022))
        })
        .map(|d| {
            format!(
                "{} host bridge {} ({})",
                if d.vendor_id.get() == Some(&0x8086) {
                    "Intel"
                } else {
                    "AMD"
                },
                d.bdf,
                d.vendor_id.source()
            )
        })
}

impl Context {
    /// `nccl_version`: `--nccl-version`. The environment is the node's (`node.env`: what the
    /// paste shows, with whatever the caller overlaid).
    pub fn new(
        node: &Node,
        p: &Paste,
        log: Option<&NcclLog>,
        nccl_version: Option<&str>,
    ) -> Context {
        let log_label = p.nccl.first().map(|(i, _)| p.label(*i)).unwrap_or_default();
        let rules = rules(nccl_version, log, &log_label);
        let origin = match &node.env {
            Fact::Known { source, .. } => source.clone(),
            Fact::Absent { reason, .. } => format!("no environment in the paste: {reason}"),
        };
        let env = NcclEnv::parse(node.env.get(), &origin, rules.version);
        let config = Config { rules, env };
        let mut ports = BTreeMap::new();
        if let Some(r) = node.rdma.get() {
            for d in r {
                // A port whose state the paste does not settle (two nodes' copies that
                // disagree, a damaged block) is not a port that is down: with no port known
                // ACTIVE, the device's ports are unknown.
                let known = d.ports.get().and_then(|ps| {
                    let active = ps.iter().any(|pt| pt.state_name() == Some("ACTIVE"));
                    let unknown = ps.iter().any(|pt| pt.state_name().is_none());
                    (active || !unknown).then(|| {
                        ps.iter()
                            .map(|pt| (pt.port, pt.state_name() == Some("ACTIVE")))
                            .collect()
                    })
                });
                ports.insert(d.name.clone(), known);
            }
        }
        let mut nic_logged = BTreeMap::new();
        if let Some(l) = log {
            // A job's log of several hosts that disagree about a NIC (gpu-a's NCCL enabled
            // mlx5_0, gpu-b's did not), or where some host said nothing about it, says nothing
            // about the matrix's host (the paste does not say which it is): left out, as the
            // per-pair decisions that differ between hosts are.
            let disagree = |name: &str| {
                let lines: Vec<_> = l.nic_gdr.iter().filter(|n| n.name == name).collect();
                let mixed = lines.iter().any(|n| n.enabled != lines[0].enabled);
                let silent = l.hosts.len() > 1
                    && l.hosts
                        .iter()
                        .any(|h| !lines.iter().any(|n| n.origin.host.as_ref() == Some(h)));
                mixed || silent
            };
            for n in l.nic_gdr.iter().filter(|n| !disagree(&n.name)) {
                nic_logged.insert(
                    n.name.clone(),
                    (
                        n.enabled,
                        format!(
                            "NET/{} : GPU Direct RDMA {} for HCA {} '{}'{}",
                            n.net,
                            if n.enabled { "Enabled" } else { "Disabled" },
                            n.index,
                            n.name,
                            n.reason
                                .as_ref()
                                .map(|r| format!(" ({r})"))
                                .unwrap_or_default()
                        ),
                    ),
                );
            }
        }
        Context {
            level: gdr::level_of(&config, x86(node).map(|_| false)),
            peermem: derive::peermem_path_for(node, Some(config.rules.version)),
            config,
            dmabuf: derive::dmabuf_path(node),
            ports,
            rdma_known: node.rdma.get().is_some(),
            nic_logged,
            models: models(node, p),
            x86: x86(node),
            c2c_mode: c2c_mode(p),
        }
    }

    /// The model of the GPU at index `i` of `n` GPUs (by order when the counts agree, or the one
    /// model when every pasted GPU is the same).
    fn model(&self, i: usize, n: usize) -> Option<(String, String)> {
        let known: Vec<&(String, String)> =
            self.models.iter().filter(|(m, _)| !m.is_empty()).collect();
        if self.models.len() == n {
            return self
                .models
                .get(i)
                .filter(|(m, _)| !m.is_empty())
                .map(|(m, s)| (m.clone(), format!("{s}, matched by order")));
        }
        let first = known.first()?;
        known.iter().all(|(m, _)| *m == first.0).then(|| {
            (
                first.0.clone(),
                format!("{}, every pasted GPU is this model", first.1),
            )
        })
    }

    /// What NCCL can register for a pair with `nic`, as the paste shows it.
    fn support(&self, nic: &str) -> Support {
        let logged = self.nic_logged.get(nic);
        let mut unknown = Vec::new();
        if self.peermem.available.is_none() {
            // Loaded, but a NCCL older than 2.23 needs the registry file the paste lacks.
            match self.peermem.reasons.first() {
                Some(r) if r.contains("2.23 added") => unknown.push(format!(
                    "peer memory: {r}; run `ls /sys/kernel/mm/memory_peers/`"
                )),
                _ => unknown
                    .push("peer memory: not in the pasted text; run `lsmod | grep peermem`".into()),
            }
        }
        let mut assumed = Vec::new();
        if self.peermem.available == Some(true) {
            assumed.extend(self.peermem.reasons.iter().cloned());
        }
        if self.dmabuf.available.is_none() {
            unknown.push(
                "dma-buf: not in the pasted text; run `cat /proc/driver/nvidia/version; uname -r`"
                    .into(),
            );
        }
        Support {
            peermem: self.peermem.available,
            dmabuf: self.dmabuf.available,
            gpu: None,
            nic_logged: logged.map(|l| l.0),
            peermem_off: if self.peermem.available == Some(false) {
                self.peermem.reasons.join("; ")
            } else {
                String::new()
            },
            nic_off: match logged {
                Some((false, line)) => format!(
                    "NCCL logged `{line}`: no peer-memory client it recognises and no dma-buf for this NIC"
                ),
                _ => format!(
                    "no peer-memory client and no dma-buf path: {}",
                    self.peermem
                        .reasons
                        .iter()
                        .chain(self.dmabuf.reasons.iter())
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            },
            gpu_off: String::new(),
            unknown,
            assumptions: assumed
                .into_iter()
                .chain(std::iter::once(
                    "gpu: CUDA GPU_DIRECT_RDMA_SUPPORTED=1 (a live fact no paste shows)".into(),
                ))
                .collect(),
            damaged: Vec::new(),
        }
    }

    /// A GPU's compute capability and NVLink-C2C attachment, with their sources. `not_grace`:
    /// what the matrix shows against a Grace superchip node.
    fn gpu(
        &self,
        id: &str,
        i: usize,
        n: usize,
        p2c_cell: bool,
        not_grace: Option<String>,
    ) -> rule::Gpu {
        let model = self.model(i, n);
        let (cc, cc_source) = match &model {
            Some((m, src)) => match gdr::cc_from_model(m) {
                Some(cc) => (Some(cc), format!("GPU model {m} ({src}; heuristic)")),
                None => (None, format!("unknown for the GPU model {m} ({src})")),
            },
            None => (
                None,
                "not in the paste (the GPU model: `nvidia-smi -q`)".to_string(),
            ),
        };
        let (c2c, c2c_source) = if p2c_cell {
            (Some(true), format!("the pasted matrix shows P2C for {id}"))
        } else if let Some((true, src)) = &self.c2c_mode {
            (Some(true), format!("{src}: NVLink-C2C to a Grace CPU"))
        } else if let Some((m, src)) = model.as_ref().filter(|(m, _)| gdr::grace_model(m)) {
            (Some(true), format!("{m} ({src}) is a Grace superchip GPU"))
        } else if let Some((false, src)) = &self.c2c_mode {
            (
                Some(false),
                format!("{src}: no NVLink-C2C (the words name C2C; the GPU has none)"),
            )
        } else if let Some(x) = &self.x86 {
            (Some(false), format!("x86 CPU ({x}): no NVLink-C2C"))
        } else if let Some((m, src)) = &model {
            (
                Some(false),
                format!("{m} ({src}) is not a Grace superchip GPU"),
            )
        } else if let Some(why) = not_grace {
            (Some(false), why)
        } else {
            (
                None,
                "not in the paste (the GPU model: `nvidia-smi -q`; the CPU: `uname -m`)"
                    .to_string(),
            )
        };
        rule::Gpu {
            id: id.to_string(),
            cc,
            cc_source,
            c2c,
            c2c_source,
        }
    }
}

/// What a matrix shows against a Grace superchip node (GH200: one GPU per Grace CPU; GB200 and
/// GB300 trays: four GPUs, two Graces): more than four GPUs, or a GPU's CPU affinity in several
/// ranges (SMT siblings, which Grace's Neoverse cores do not have). Heuristics, and said so.
fn not_grace(m: &super::topo::Matrix, g: &str) -> Option<String> {
    let n = m.gpus().len();
    if n > 4 {
        return Some(format!(
            "{n} GPUs in one matrix: not a Grace superchip node, whose CPUs each carry at most two GPUs (heuristic)"
        ));
    }
    let aff = m.row(g)?.cpu_affinity.as_deref()?;
    aff.contains(',').then(|| {
        format!("CPU affinity {aff} has SMT sibling ranges, which Grace CPUs do not have: x86 (heuristic)")
    })
}

/// The rule's [`System`] for one pasted matrix (block `bi`). GPU ids are the matrix's names
/// (`GPU0`), NIC names the legend's (`mlx5_0`) or the column's.
pub fn system(cx: &Context, p: &Paste, bi: usize, m: &super::topo::Matrix) -> System {
    let gpus: Vec<&String> = m.gpus();
    let cols: Vec<&String> = m.nics();
    let cell = |r: &str, c: &str| m.cell(r, c).map(str::to_string);
    let pci_only = p
        .blocks
        .get(bi)
        .and_then(|b| b.command.as_deref())
        .is_some_and(|c| c.contains("-mp") || c.contains("matrix_pci"));
    let ng = gpus.len();
    System {
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let p2c = cols.iter().any(|n| cell(g, n).as_deref() == Some("P2C"));
                cx.gpu(g, i, ng, p2c, not_grace(m, g))
            })
            .collect(),
        nics: cols
            .iter()
            .map(|c| {
                let name = m.nic_name(c).to_string();
                rule::Nic {
                    ports: cx.ports.get(&name).cloned().flatten(),
                    name,
                }
            })
            .collect(),
        paths: gpus
            .iter()
            .map(|g| {
                cols.iter()
                    .map(|n| cell(g, n).as_deref().and_then(kind_of_cell))
                    .collect()
            })
            .collect(),
        path_hint: "the matrix cell is not in the paste (paste `nvidia-smi topo -m` again, whole)"
            .into(),
        smi: gpus
            .iter()
            .map(|g| cols.iter().map(|n| cell(g, n)).collect())
            .collect(),
        nvlink: gpus
            .iter()
            .map(|a| {
                gpus.iter()
                    .map(|b| {
                        if a == b {
                            return Some(false);
                        }
                        if pci_only {
                            return None;
                        }
                        let c = cell(a, b).or_else(|| cell(b, a))?;
                        if is_nvlink(&c) {
                            Some(true)
                        } else {
                            kind_of_cell(&c).map(|_| false)
                        }
                    })
                    .collect()
            })
            .collect(),
        nvlink_source: if pci_only {
            format!(
                "{} is `nvidia-smi topo -mp`, which shows PCIe paths only; paste `nvidia-smi topo -m`",
                p.label(bi)
            )
        } else {
            format!("the NV# cells of {}", p.label(bi))
        },
        gpu_paths: gpus
            .iter()
            .map(|a| {
                gpus.iter()
                    .map(|b| cell(a, b).as_deref().and_then(kind_of_cell))
                    .collect()
            })
            .collect(),
        support: gpus
            .iter()
            .map(|_| cols.iter().map(|c| cx.support(m.nic_name(c))).collect())
            .collect(),
        amd_two_gpus: false,
        cpu: None,
    }
}

/// The rule's [`System`] when the paste has no matrix: the GPU x NIC pairs NCCL logged, with
/// their paths unknown.
pub fn system_of_pairs(cx: &Context, gpus: &[String], nics: &[String]) -> System {
    let (ng, nn) = (gpus.len(), nics.len());
    System {
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(i, g)| cx.gpu(g, i, ng, false, None))
            .collect(),
        nics: nics
            .iter()
            .map(|n| rule::Nic {
                name: n.clone(),
                ports: cx.ports.get(n).cloned().flatten(),
            })
            .collect(),
        paths: vec![vec![None; nn]; ng],
        path_hint: "no `nvidia-smi topo -m` in the paste".into(),
        smi: vec![vec![None; nn]; ng],
        nvlink: (0..ng)
            .map(|a| (0..ng).map(|b| (a == b).then_some(false)).collect())
            .collect(),
        nvlink_source: "no `nvidia-smi topo -m` in the paste".into(),
        gpu_paths: vec![vec![None; ng]; ng],
        support: (0..ng)
            .map(|_| nics.iter().map(|n| cx.support(n)).collect())
            .collect(),
        amd_two_gpus: false,
        cpu: None,
    }
}

/// `on`: some direction uses GDR; `off`: a step of NCCL's rule says no; `unknown`: the paste
/// lacks what the decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "gdr_verdict")]
pub enum Gdr {
    On,
    Off,
    Unknown,
}

/// A GPU as the matrix names it.
const GPU_PATTERN: &str = "^GPU[0-9]+$";

/// NCCL's rule for one GPU x NIC pair of the paste.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "pair")]
pub struct PastePair {
    /// The matrix (or NCCL log) block the pair comes from.
    #[schemars(regex(pattern = super::report::BLOCK_PATTERN))]
    pub block: String,
    /// The matrix's GPU label.
    #[schemars(regex(pattern = GPU_PATTERN))]
    pub gpu: String,
    /// The RDMA device (by the NIC legend), else the matrix column.
    pub nic: String,
    /// The cell as nvidia-smi printed it, `?` when the paste does not hold a trustworthy value.
    #[schemars(regex(pattern = r"^(PIX|PXB|PHB|NODE|SYS|SOC|P2C|C2C|X|NV[0-9]+|\?)$"))]
    pub nvidia_smi: String,
    /// NCCL's path type of the pair itself (`NODE` is PHB), `?` when unknown.
    #[schemars(extend("enum" = ["PIX", "PXB", "PHB", "SYS", "?"]))]
    pub path: String,
    /// NCCL's path after its rewrites, when it differs: `PXN` (sends through `via`), `P2C`.
    #[schemars(extend("x-required" = true), extend("enum" = ["PXN", "P2C", null]))]
    pub nccl_path: Option<String>,
    /// The NVLink peer GPU whose NIC path NCCL uses for this GPU's sends (PXN).
    #[schemars(extend("x-required" = true), regex(pattern = GPU_PATTERN))]
    pub via: Option<String>,
    /// The pair's own path is within the GDR threshold; null when the cell is not in the paste.
    #[schemars(extend("x-required" = true))]
    pub by_distance: Option<bool>,
    pub gdr: Gdr,
    /// GDR for sends (the NIC reads GPU memory); null: undecided.
    #[schemars(extend("x-required" = true))]
    pub send: Option<bool>,
    /// GDR for receives; null: undecided.
    #[schemars(extend("x-required" = true))]
    pub receive: Option<bool>,
    /// `peermem`, `dmabuf`, or `peermem or dmabuf` (NCCL logged GDR for the NIC without saying
    /// which), when GDR is on.
    #[schemars(
        extend("x-required" = true),
        extend("enum" = ["peermem", "dmabuf", "peermem or dmabuf", null])
    )]
    pub mechanism: Option<String>,
    /// Why GDR is off (both directions, or the one that is off).
    pub reasons: Vec<String>,
    /// What the paste does not show that the verdict needs, with the command that shows it.
    pub unknown: Vec<String>,
    /// What the verdict assumes (live-only facts).
    pub assumptions: Vec<String>,
    /// How the verdict came about (PXN, P2C, the read gate lifted).
    pub notes: Vec<String>,
    /// What NCCL itself logged for this pair, when the paste has an NCCL log that covers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Logged", extend("x-optional" = true))]
    pub logged: Option<Logged>,
}

/// What NCCL itself logged for a pair, per direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "logged")]
pub struct Logged {
    #[schemars(extend("x-required" = true))]
    pub send: Option<bool>,
    #[schemars(extend("x-required" = true))]
    pub receive: Option<bool>,
    /// Channels without a direction tag (`Ring 00 : 3 -> 4 via NET/IB/0/GDRDMA`, 2.4).
    #[schemars(extend("x-required" = true))]
    pub undirected: Option<bool>,
    /// PXN: the proxy rank when NCCL sent through another GPU.
    #[schemars(extend("x-required" = true))]
    pub proxy: Option<u32>,
    /// First log line (from 1).
    #[schemars(range(min = 1))]
    pub line: usize,
}

impl Logged {
    /// GDR in any direction.
    pub fn any(&self) -> Option<bool> {
        [self.send, self.receive, self.undirected]
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| a || b)
    }
}

/// Decide every pair of `sys` (block `block`) by NCCL's rule: the only GDR decision of
/// `diagnose`.
pub fn decide(cx: &Context, block: &str, sys: &System) -> (Decision, Vec<PastePair>) {
    let d = rule::decide(sys, &cx.config);
    let mut out = Vec::new();
    for v in &d.verdicts {
        let gpu = sys
            .gpus
            .get(v.gpu)
            .map(|g| g.id.clone())
            .unwrap_or_default();
        let nic = sys
            .nics
            .get(v.nic)
            .map(|n| n.name.clone())
            .unwrap_or_default();
        let ports_unknown = sys.nics.get(v.nic).is_some_and(|n| n.ports.is_none());
        let mut unknown: Vec<String> = Vec::new();
        let gdr = if v.enabled() {
            if ports_unknown && v.used {
                unknown.push(if cx.rdma_known {
                    format!("port state of {nic}: not in the pasted ibv_devinfo/ibstat; run `ibv_devinfo -d {nic}`")
                } else {
                    "port states: not in the pasted text; run `ibv_devinfo`".to_string()
                });
                Gdr::Unknown
            } else {
                Gdr::On
            }
        } else if v.undecided.is_empty() {
            Gdr::Off
        } else {
            Gdr::Unknown
        };
        for u in &v.undecided {
            if !unknown.contains(u) {
                unknown.push(u.clone());
            }
        }
        let mut reasons: Vec<String> = Vec::new();
        for side in [&v.send, &v.receive] {
            if side.gdr {
                continue;
            }
            for x in &side.reasons {
                if !v.undecided.contains(x) && !reasons.contains(x) {
                    reasons.push(x.clone());
                }
            }
        }
        // Per direction when decided; an `on` that waits on a port state is not decided.
        let decided = |s: &rule::Direction| -> Option<bool> {
            if s.undecided || (gdr == Gdr::Unknown && v.enabled()) {
                None
            } else {
                Some(s.gdr)
            }
        };
        let path = v.pcie.map(|k| k.as_str().to_string());
        out.push(PastePair {
            block: block.to_string(),
            gpu,
            nic,
            nvidia_smi: sys
                .smi
                .get(v.gpu)
                .and_then(|r| r.get(v.nic))
                .cloned()
                .flatten()
                .unwrap_or_else(|| "?".into()),
            nccl_path: v
                .path
                .map(|k| k.as_str().to_string())
                .filter(|k| Some(k) != path.as_ref()),
            path: path.unwrap_or_else(|| "?".into()),
            via: v.via.and_then(|p| sys.gpus.get(p)).map(|g| g.id.clone()),
            by_distance: v.within,
            gdr,
            send: decided(&v.send),
            receive: decided(&v.receive),
            mechanism: if v.enabled() {
                v.mechanism.map(str::to_string)
            } else {
                None
            },
            reasons,
            unknown,
            assumptions: v
                .assumptions
                .iter()
                .filter(|a| !a.starts_with("port state of"))
                .cloned()
                .collect(),
            notes: v.notes.clone(),
            logged: None,
        });
    }
    (d, out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::{read, Input};

    fn paste(texts: &[&str]) -> (Node, Paste) {
        let inputs: Vec<Input> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Input {
                name: format!("in{i}"),
                text: t.to_string(),
            })
            .collect();
        let p = read(&inputs);
        let (n, _) = crate::paste::node::build(&p);
        (n, p)
    }

    fn pairs(texts: &[&str], version: Option<&str>) -> (Decision, Vec<PastePair>) {
        let (node, p) = paste(texts);
        let log = p.nccl_merged();
        let cx = Context::new(&node, &p, log.as_ref(), version);
        let (bi, m) = &p.matrices[0];
        let sys = system(&cx, &p, *bi, m);
        decide(&cx, &p.label(*bi), &sys)
    }

    fn pair<'a>(v: &'a [PastePair], g: &str, n: &str) -> &'a PastePair {
        v.iter().find(|p| p.gpu == g && p.nic == n).unwrap()
    }

    const TWO: &str = "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\n\
GPU0\t X \tNV18\tPIX\tNODE\t0-31\t0\n\
GPU1\tNV18\t X \tNODE\tPIX\t0-31\t0\n\
NIC0\tPIX\tNODE\t X \tNODE\n\
NIC1\tNODE\tPIX\tNODE\t X \n\n\
NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n";

    #[test]
    fn cells_become_the_rules_paths_and_nvlink() {
        let (node, p) = paste(&[TWO]);
        let cx = Context::new(&node, &p, None, None);
        let sys = system(&cx, &p, 0, &p.matrices[0].1);
        assert_eq!(sys.paths[0][0], Some(PathKind::Pix));
        assert_eq!(sys.paths[0][1], Some(PathKind::Phb), "NODE is NCCL's PHB");
        assert_eq!(sys.smi[0][1].as_deref(), Some("NODE"));
        assert_eq!(sys.nvlink[0][1], Some(true));
        assert_eq!(sys.nics[1].name, "mlx5_1");
        assert!(cx.config.rules.assumed, "no version in the paste");
    }

    #[test]
    fn distance_alone_gives_off_or_unknown_never_on() {
        let (_, v) = pairs(&[TWO], None);
        // PIX, but peer memory, dma-buf and ports are not in the paste.
        let p = pair(&v, "GPU0", "mlx5_0");
        assert_eq!((p.by_distance, p.gdr), (Some(true), Gdr::Unknown));
        assert!(p.unknown.iter().any(|u| u.contains("lsmod | grep peermem")));
        // NODE is PHB for NCCL: beyond PXB. PXN through GPU1 (NV18, PIX to mlx5_1) would carry
        // it, but support is unknown there too: unknown, not on.
        let p = pair(&v, "GPU0", "mlx5_1");
        assert_eq!((p.path.as_str(), p.by_distance), ("PHB", Some(false)));
        assert_ne!(p.gdr, Gdr::On);
        // Without PXN (NCCL 2.11) the distance alone says no, whatever else is unknown.
        let (_, v) = pairs(&[TWO], Some("2.11.4"));
        let p = pair(&v, "GPU0", "mlx5_1");
        assert_eq!(p.gdr, Gdr::Off, "{p:?}");
        assert!(
            p.reasons[0].contains("beyond NCCL_NET_GDR_LEVEL PXB"),
            "{p:?}"
        );
    }

    const LSMOD: &str = "Module                  Size  Used by\nnvidia_peermem         16384  0\nnvidia              56598528  147 nvidia_uvm,nvidia_peermem\nib_core               4194304  1 nvidia_peermem\nmlx5_core             2097152  0\nmlx5_ib               409600  0\nib_uverbs             163840  1 mlx5_ib\nnvidia_uvm            1966080  0\nnvidia_modeset        1564672  0\nnvidia_drm            122880  0\nvideo                 69632  0\n";

    const IBSTAT: &str = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\nCA 'mlx5_1'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n";

    #[test]
    fn pxn_and_the_version_from_the_log() {
        let log = "n1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n";
        let (d, v) = pairs(&[TWO, LSMOD, IBSTAT, log], None);
        assert_eq!(d.rules.version, nccl::Version::new(2, 19, 3));
        assert!(
            d.rules.source.contains("NCCL version 2.19.3"),
            "{:?}",
            d.rules
        );
        let own = pair(&v, "GPU0", "mlx5_0");
        assert_eq!(own.gdr, Gdr::On, "{own:?}");
        assert_eq!(own.mechanism.as_deref(), Some("peermem"));
        // GPU0's NODE NIC through its NVLink peer GPU1 (PIX to mlx5_1): PXN, GDR.
        let pxn = pair(&v, "GPU0", "mlx5_1");
        assert_eq!(pxn.via.as_deref(), Some("GPU1"), "{pxn:?}");
        assert_eq!(pxn.nccl_path.as_deref(), Some("PXN"));
        assert_eq!(pxn.gdr, Gdr::On);
        // NCCL_PXN_DISABLE from the log's environment lines turns it off.
        let log = "n1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\nn1:1:2 [0] NCCL INFO NCCL_PXN_DISABLE set by environment to 1\n";
        let (_, v) = pairs(&[TWO, LSMOD, IBSTAT, log], None);
        let p = pair(&v, "GPU0", "mlx5_1");
        assert_eq!((p.gdr, p.via.as_deref()), (Gdr::Off, None), "{p:?}");
    }

    #[test]
    fn nccls_nic_line_wins_and_the_read_gate_is_per_direction() {
        // NCCL 2.18 without NVLink: sends are staged, receives use GDR (the read gate).
        let t = TWO.replace("NV18", "SYS");
        let log = "n1:1:2 [0] NCCL INFO NCCL version 2.18.6+cuda12.2\nn1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\nn1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'\n";
        let (_, v) = pairs(&[&t, IBSTAT, log], None);
        let p = pair(&v, "GPU0", "mlx5_0");
        assert_eq!(p.gdr, Gdr::On, "{p:?}");
        assert_eq!((p.send, p.receive), (Some(false), Some(true)));
        assert!(p.reasons[0].starts_with("read gate: NCCL 2.18.6"), "{p:?}");
        assert_eq!(p.mechanism.as_deref(), Some(rule::MECHANISM_LOGGED));
        let p = pair(&v, "GPU1", "mlx5_1");
        assert_eq!(p.gdr, Gdr::Off);
        assert!(
            p.reasons[0].contains("Disabled for HCA 1 'mlx5_1'"),
            "{p:?}"
        );
        // --nccl-version wins over the log.
        let (d, _) = pairs(&[&t, IBSTAT, log], Some("2.30.7"));
        assert_eq!(d.rules.source, "--nccl-version 2.30.7");
    }

    #[test]
    fn an_unknown_cpu_leaves_a_node_pair_undecided_and_smt_shows_x86() {
        // No NVLink (no PXN), peer memory loaded, ports active: GPU0's NODE NIC would be P2C
        // on a Grace (NCCL 2.27-2.28 take every PHB NIC of a C2C GPU, v2.27.3-1 L670-680), so
        // with nothing showing the CPU it is undecided. (2.29+ only the closest NIC: PIX here.)
        let t = TWO.replace("NV18", "SYS");
        let (_, v) = pairs(&[&t, LSMOD, IBSTAT], Some("2.28.9"));
        let p = pair(&v, "GPU0", "mlx5_1");
        assert_eq!(p.gdr, Gdr::Unknown, "{p:?}");
        assert!(p.unknown.iter().any(|u| u.contains("NVLink-C2C")), "{p:?}");
        // SMT sibling ranges in the CPU affinity: x86, so NODE is plain PHB: off.
        let (_, v) = pairs(&[&t, LSMOD, IBSTAT], None);
        assert_eq!(pair(&v, "GPU0", "mlx5_1").gdr, Gdr::Off);
        let t = t.replace("\t0-31\t", "\t0-31,64-95\t");
        let (_, v) = pairs(&[&t, LSMOD, IBSTAT], Some("2.28.9"));
        let p = pair(&v, "GPU0", "mlx5_1");
        assert_eq!(p.gdr, Gdr::Off, "{p:?}");
        assert!(p.reasons[0].contains("path PHB is beyond"), "{p:?}");
    }

    #[test]
    fn c2c_words_on_a_gpu_without_c2c_are_no_c2c() {
        // The undecided pair above, with NCCL's own `NCCL_NET_GDR_C2C` line (the C2C rule on)
        // and nvidia-smi -q's `GPU C2C Mode : N/A`: the words name C2C, the GPUs have none
        // (x86 H100s), so NODE is plain PHB: off.
        let t = TWO.replace("NV18", "SYS");
        let log = "n1:1:2 [0] NCCL INFO NCCL version 2.28.9+cuda12.9\nn1:1:2 [0] NCCL INFO NCCL_NET_GDR_C2C set by environment to 1\n";
        let (_, v) = pairs(&[&t, LSMOD, IBSTAT, log], None);
        assert_eq!(pair(&v, "GPU0", "mlx5_1").gdr, Gdr::Unknown);
        let smi = "$ nvidia-smi -q\nDriver Version : 570.86.10\nGPU 00000000:18:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    GPU C2C Mode : N/A\nGPU 00000000:2A:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n    GPU C2C Mode : N/A\n";
        let (node, p) = paste(&[&t, LSMOD, IBSTAT, log, smi]);
        let cx = Context::new(&node, &p, p.nccl_merged().as_ref(), None);
        assert_eq!(cx.c2c_mode.as_ref().map(|c| c.0), Some(false));
        let sys = system(&cx, &p, p.matrices[0].0, &p.matrices[0].1);
        assert_eq!(sys.gpus[0].c2c, Some(false));
        assert!(
            sys.gpus[0].c2c_source.contains("GPU C2C Mode : N/A"),
            "{}",
            sys.gpus[0].c2c_source
        );
        let (_, v) = decide(&cx, "b1", &sys);
        let x = pair(&v, "GPU0", "mlx5_1");
        assert_eq!(x.gdr, Gdr::Off, "{x:?}");
        // `Enabled` is C2C (a Grace superchip's GPU).
        let smi = smi.replace("N/A", "Enabled");
        let (node, p) = paste(&[&t, LSMOD, IBSTAT, log, &smi]);
        let cx = Context::new(&node, &p, None, None);
        let sys = system(&cx, &p, p.matrices[0].0, &p.matrices[0].1);
        assert_eq!(sys.gpus[0].c2c, Some(true));
    }

    proptest::proptest! {
        /// A matrix alone never gives `on` (peer memory, dma-buf and ports are not in it), and
        /// no input panics.
        #[test]
        fn a_matrix_alone_is_never_on(
            cells in proptest::collection::vec(0usize..8, 16),
            version in proptest::option::of(4u32..31),
        ) {
            const C: [&str; 8] = ["PIX", "PXB", "PHB", "NODE", "SYS", "NV4", "P2C", "SOC"];
            let c = |i: usize| C[cells[i] % 8];
            let t = format!(
                "\tGPU0\tGPU1\tNIC0\tNIC1\nGPU0\t X \t{}\t{}\t{}\nGPU1\t{}\t X \t{}\t{}\nNIC0\t{}\t{}\t X \t{}\nNIC1\t{}\t{}\t{}\t X \n",
                c(0), c(1), c(2), c(0), c(3), c(4), c(1), c(3), c(5), c(2), c(4), c(5)
            );
            let (node, p) = paste(&[&t]);
            let v = version.map(|m| format!("2.{m}.0"));
            let cx = Context::new(&node, &p, None, v.as_deref());
            proptest::prop_assert_eq!(p.matrices.len(), 1, "{}", t);
            for (bi, m) in &p.matrices {
                let sys = system(&cx, &p, *bi, m);
                let (_, pairs) = decide(&cx, "b1", &sys);
                for x in pairs {
                    proptest::prop_assert_ne!(x.gdr, Gdr::On, "{:?}", x);
                }
            }
        }
    }

    #[test]
    fn a_pci_only_matrix_hides_nvlink() {
        let t = format!("$ nvidia-smi topo -mp\n{}", TWO.replace("NV18", "SYS"));
        let (node, p) = paste(&[&t]);
        let cx = Context::new(&node, &p, None, None);
        let sys = system(&cx, &p, 0, &p.matrices[0].1);
        assert_eq!(sys.nvlink[0][1], None, "{}", sys.nvlink_source);
        assert!(sys.nvlink_source.contains("topo -mp"));
    }

    #[test]
    fn gpu_models_give_compute_capability_and_c2c() {
        let smiq = "==============NVSMI LOG==============\n\nDriver Version                            : 550.54.15\nCUDA Version                              : 12.4\n\nAttached GPUs                             : 2\nGPU 00000000:18:00.0\n    Product Name                          : Tesla V100-SXM2-32GB\nGPU 00000000:3B:00.0\n    Product Name                          : Tesla V100-SXM2-32GB\n";
        let (node, p) = paste(&[TWO, smiq]);
        let cx = Context::new(&node, &p, None, None);
        let sys = system(&cx, &p, 0, &p.matrices[0].1);
        assert_eq!(sys.gpus[1].cc, Some((7, 0)), "{:?}", sys.gpus[1]);
        assert!(sys.gpus[1].cc_source.contains("heuristic"));
        assert_eq!(sys.gpus[0].c2c, Some(false));
    }
}
