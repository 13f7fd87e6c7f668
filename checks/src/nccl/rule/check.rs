//! `ncclTopoCheckGdr()` for one GPU x NIC pair and direction, on the paths the steps of
//! [`super::decide`] computed, and the distance threshold NCCL applies.

use super::types::{Support, System, MECHANISM_LOGGED};
use crate::nccl::env::{Level, NcclEnv, Setting};
use crate::nccl::version::{PathKind, Version};

/// One answer of `ncclTopoCheckGdr()`.
pub(super) enum Check {
    On {
        pci_mode: bool,
    },
    Off(String),
    /// Nothing says no, but these inputs are unknown.
    Unknown(Vec<String>),
}

pub(super) struct Ctx<'a> {
    pub(super) sys: &'a System,
    pub(super) v: Version,
    pub(super) env: &'a NcclEnv,
    /// NCCL's path per pair after P2C and PXN.
    pub(super) path: Vec<Vec<Option<PathKind>>>,
    pub(super) via: Vec<Vec<Option<usize>>>,
    /// NVLink usable by NCCL (P2P not disabled).
    pub(super) nvl: Vec<Vec<Option<bool>>>,
    /// Per GPU: has an NVLink peer (from `nvl`, computed once: the read gate asks per pair).
    pub(super) peer: Vec<Option<bool>>,
    pub(super) level: Level,
    pub(super) level_name: String,
    pub(super) level_source: String,
}

pub(super) fn val(v: Version, k: PathKind) -> u8 {
    // Types a version lacks never reach a comparison; sort them last to be safe.
    v.value(k).unwrap_or(u8::MAX)
}

impl Ctx<'_> {
    pub(super) fn c2c(&self, g: usize) -> Option<bool> {
        self.sys.gpus.get(g).and_then(|x| x.c2c)
    }
    pub(super) fn gpu_name(&self, g: usize) -> String {
        self.sys
            .gpus
            .get(g)
            .map(|x| x.id.clone())
            .unwrap_or_else(|| format!("gpu {g}"))
    }
    pub(super) fn support(&self, g: usize, n: usize) -> Option<&Support> {
        self.sys.support.get(g).and_then(|r| r.get(n))
    }

    /// NCCL's mechanism for the pair, or why there is none.
    pub(super) fn mechanism(&self, g: usize, n: usize) -> Result<&'static str, Check> {
        let Some(s) = self.support(g, n) else {
            return Err(Check::Unknown(vec!["support not known".into()]));
        };
        if s.gpu == Some(false) {
            return Err(Check::Off(s.gpu_off.clone()));
        }
        if s.nic_logged == Some(false) {
            return Err(Check::Off(s.nic_off.clone()));
        }
        let dmabuf = if self.v.has_dmabuf() {
            s.dmabuf
        } else {
            Some(false)
        };
        let m = match (dmabuf, s.peermem) {
            (Some(true), _) => Ok("dmabuf"),
            (_, Some(true)) => Ok("peermem"),
            _ if s.nic_logged == Some(true) => Ok(MECHANISM_LOGGED),
            (Some(false), Some(false)) => Err(Check::Off(if self.v.has_dmabuf() {
                s.nic_off.clone()
            } else {
                format!(
                    "NIC-level GDR off: NCCL {} has no dma-buf support (2.13 added it) and {}",
                    self.v,
                    if s.peermem_off.is_empty() {
                        "there is no peer-memory client"
                    } else {
                        s.peermem_off.as_str()
                    }
                )
            })),
            _ => Err(Check::Unknown(s.unknown.clone())),
        };
        match m {
            // On, as far as the readable facts go; a damaged one could still say no.
            Ok(_) if !s.damaged.is_empty() => Err(Check::Unknown(s.damaged.clone())),
            m => m,
        }
    }

    fn has_nvlink_peer(&self, g: usize) -> Option<bool> {
        self.peer.get(g).copied().flatten()
    }

    pub(super) fn nvlink_peer_of(&self, g: usize) -> Option<bool> {
        let n = self.sys.gpus.len();
        if n == 1 && self.v.read_gate_single_gpu_ok() {
            return Some(true);
        }
        let row = self.nvl.get(g)?;
        let mut unknown = false;
        for (h, x) in row.iter().enumerate() {
            if h == g {
                continue;
            }
            match x {
                Some(true) => return Some(true),
                None => unknown = true,
                Some(false) => {}
            }
        }
        if unknown {
            None
        } else {
            Some(false)
        }
    }

    /// `ncclTopoCheckGdr(g, n, read)` with the current paths.
    ///
    /// NCCL asks in this order: support, the read gate (sends), the distance. A step that says
    /// no is the answer even when an earlier step could not be told (GDR is off either way);
    /// the answer is undecided only when no step says no and some step is unknown.
    pub(super) fn check(&self, g: usize, n: usize, read: bool) -> Check {
        let mut unknown: Vec<String> = Vec::new();
        match self.mechanism(g, n) {
            Ok(_) => {}
            Err(Check::Unknown(u)) => unknown.extend(u),
            Err(c) => return c,
        }
        if read {
            let r = &self.env.gdr_read;
            if r.value == 0 {
                return Check::Off(format!(
                    "{}: NCCL never uses GDR for sends (the NIC reading GPU memory); sends are staged through host memory",
                    r.source
                ));
            }
            if r.value < 0 {
                let gpu = &self.sys.gpus[g];
                let applies = if self.v.read_gate_all_gpus() {
                    Some(true)
                } else {
                    gpu.cc.map(|cc| cc < (8, 0))
                };
                let peer = self.has_nvlink_peer(g);
                match (applies, peer) {
                    (_, Some(true)) | (Some(false), _) => {}
                    (Some(true), Some(false)) => {
                        return Check::Off(if self.v.read_gate_all_gpus() {
                            format!(
                                "read gate: NCCL {} uses GDR for sends only from a GPU with an NVLink peer (NCCL_NET_GDR_READ unset), and this one has none: sends are staged through host memory, receives use GDR; NCCL_NET_GDR_READ=1 forces GDR for sends",
                                self.v
                            )
                        } else {
                            format!(
                                "read gate: NCCL {} uses GDR for sends from a GPU older than compute capability 8.0 ({}, {}) only with an NVLink peer, and this one has none: sends are staged through host memory, receives use GDR; NCCL_NET_GDR_READ=1 forces GDR for sends",
                                self.v,
                                gpu.cc.map(|(a, b)| format!("{a}.{b}")).unwrap_or_default(),
                                gpu.cc_source
                            )
                        });
                    }
                    (None, _) => unknown.push(format!(
                        "cannot tell the read gate: the compute capability of {} is unknown and it has no known NVLink peer (NCCL {} gates sends from GPUs below 8.0 without one)",
                        self.gpu_name(g),
                        self.v
                    )),
                    (Some(true), None) => unknown.push(format!(
                        "cannot tell the read gate: whether {} has an NVLink peer is unknown ({})",
                        self.gpu_name(g),
                        self.sys.nvlink_source
                    )),
                }
            }
        }
        let Some(mut distance) = self.path[g][n] else {
            unknown.push(if self.sys.path_hint.is_empty() {
                format!("the PCI location of {} is unknown", self.sys.nics[n].name)
            } else {
                format!(
                    "{} x {}: {}",
                    self.gpu_name(g),
                    self.sys.nics[n].name,
                    self.sys.path_hint
                )
            });
            return Check::Unknown(unknown);
        };
        let mut cg = g;
        if distance == PathKind::Pxn {
            if let Some(p) = self.via[g][n] {
                cg = p;
                distance = self.path[p][n].unwrap_or(PathKind::Sys);
            }
        }
        match self.distance(g, n, cg, distance) {
            Err(r) => Check::Off(r),
            Ok(_) if !unknown.is_empty() => Check::Unknown(unknown),
            Ok(pci_mode) => Check::On { pci_mode },
        }
    }

    /// The distance step of `ncclTopoCheckGdr()` for GPU `g`'s pair with NIC `n`, judged on
    /// `distance` from GPU `cg` (the PXN peer, or `g`): `Ok(pci_mode)` within the threshold,
    /// `Err(why)` beyond it.
    pub(super) fn distance(
        &self,
        g: usize,
        n: usize,
        cg: usize,
        distance: PathKind,
    ) -> Result<bool, String> {
        let mut distance = distance;
        // 2.26-2.28: a C2C-attached GPU's NIC on its own CPU counts as C2C.
        let gdr_c2c = self.env.gdr_c2c.as_ref().map(|s| s.value).unwrap_or(false);
        if !self.v.c2c_as_threshold() && gdr_c2c {
            let c2c_pair = if self.v.has_p2c() {
                distance == PathKind::P2c
            } else {
                distance == PathKind::Phb && self.c2c(cg) == Some(true)
            };
            if c2c_pair {
                distance = PathKind::C2c;
            }
        }
        if self.v.legacy() {
            let old = match (distance, self.sys.smi.get(g).and_then(|r| r.get(n))) {
                (PathKind::Phb, Some(Some(s))) if s == "NODE" && self.v.has_node_distance() => 3,
                _ => self.v.value(distance).map(i64::from).unwrap_or(4),
            };
            let lvl = match self.level {
                Level::Legacy(x) => x,
                Level::Kind(_) => 2,
            };
            if old >= lvl {
                return Err(format!(
                    "path {} (distance {old}) is not below NCCL_NET_GDR_LEVEL {lvl} ({}): NCCL silently stages through host memory",
                    distance, self.level_source
                ));
            }
            return Ok(false);
        }
        let lvl = match self.level {
            Level::Kind(k) => k,
            Level::Legacy(_) => PathKind::Pxb,
        };
        if val(self.v, distance) > val(self.v, lvl) {
            let shown = if cg != g {
                format!("path {} from the PXN peer {}", distance, self.gpu_name(cg))
            } else {
                format!("path {distance}")
            };
            return Err(format!(
                "{shown} is beyond NCCL_NET_GDR_LEVEL {} ({}): NCCL silently stages through host memory",
                self.level_name, self.level_source
            ));
        }
        Ok(self.c2c(cg) == Some(true)
            && if self.v.c2c_as_threshold() {
                distance != PathKind::P2c
            } else {
                distance != PathKind::C2c
            })
    }
}

/// Whether any GPU of the node is attached to its CPU over NVLink-C2C: `Some(false)` when every
/// GPU is known not to be (x86, or no Grace superchip), `None` when not known for every GPU.
pub fn c2c_here<I: IntoIterator<Item = Option<bool>>>(gpus: I) -> Option<bool> {
    let (mut seen, mut unknown) = (false, false);
    for c in gpus {
        seen = true;
        match c {
            Some(true) => return Some(true),
            Some(false) => {}
            None => unknown = true,
        }
    }
    (seen && !unknown).then_some(false)
}

/// The threshold NCCL applies: the level, its display name, and where it came from. `c2c_gpus` is
/// [`c2c_here`]: where no GPU is C2C-attached, NCCL's C2C setting is said not to apply (it
/// changes nothing over PCIe).
pub fn threshold(env: &NcclEnv, v: Version, c2c_gpus: Option<bool>) -> (Level, String, String) {
    if let Some(Setting { value, source, .. }) = &env.gdr_level {
        let name = match value {
            Level::Kind(k) => k.as_str().to_string(),
            Level::Legacy(n) => n.to_string(),
        };
        return (*value, name, source.clone());
    }
    if v.legacy() {
        return (
            Level::Legacy(2),
            "2".into(),
            format!(
                "NCCL {}.{}'s default PATH_PHB: GDR below PHB, i.e. PIX and PXB",
                v.major, v.minor
            ),
        );
    }
    let c2c = env.gdr_c2c.as_ref();
    match c2c {
        // NCCL holds P2C; over PCIe that accepts exactly PIX and PXB, so it is shown as PXB.
        Some(s) if v.c2c_as_threshold() && s.value => (
            Level::Kind(PathKind::P2c),
            "PXB".into(),
            if c2c_gpus == Some(false) {
                format!(
                    "{}: P2C, which is PXB here: no GPU on this node is C2C-attached",
                    s.source
                )
            } else {
                format!(
                    "{}: P2C, which is PXB over PCIe plus a NIC on the GPU's own C2C-attached CPU",
                    s.source
                )
            },
        ),
        Some(s) if s.value => (
            Level::Kind(PathKind::Pxb),
            "PXB".into(),
            // A default setting's source already reads "NCCL 2.27's default NCCL_NET_GDR_C2C=1".
            match (c2c_gpus == Some(false), s.user) {
                (true, true) => format!(
                    "NCCL {}.{}'s default ({} changes nothing here: no GPU on this node is C2C-attached)",
                    v.major, v.minor, s.source
                ),
                (true, false) => format!(
                    "{}, which changes nothing here: no GPU on this node is C2C-attached",
                    s.source
                ),
                (false, true) => format!(
                    "NCCL {}.{}'s default; {} also lets a NIC on the GPU's own C2C-attached CPU through",
                    v.major, v.minor, s.source
                ),
                (false, false) => format!(
                    "{}, which also lets a NIC on the GPU's own C2C-attached CPU through",
                    s.source
                ),
            },
        ),
        Some(s) => (
            Level::Kind(PathKind::Pxb),
            "PXB".into(),
            format!("NCCL {}.{}'s default with {}", v.major, v.minor, s.source),
        ),
        None => (
            Level::Kind(PathKind::Pxb),
            "PXB".into(),
            format!("NCCL {}.{}'s default", v.major, v.minor),
        ),
    }
}
