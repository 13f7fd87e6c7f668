//! NCCL's GDR decision for every GPU x NIC pair: ONE pure function, [`decide`], of what a
//! node (or a pasted matrix, or NCCL's own topology dump) tells about the machine.
//!
//! It replays, per NCCL version, `ncclTopoComputePaths()` (the P2C and PXN rewrites of a GPU's
//! path to a NIC) and `ncclTopoCheckGdr()` (support, the read gate, the distance threshold) of
//! src/graph/paths.cc, and the send/receive setup of src/transport/net.cc, which ask the
//! question once per direction: `read=1` for sends (the NIC reads GPU memory), `read=0` for
//! receives. docs/topology.md has the rule table with the version ranges.
//!
//! What the rule cannot see and how it deals with it: link bandwidth (NCCL also takes PXN, and
//! picks its local GPU/NIC, by bandwidth; gdrdoctor uses path types only); the communicator's
//! GPU set (every GPU of the node is assumed to be in the job); unknown inputs make the answer
//! *undecided* (with the reason), never a guess.

use super::env::{Level, NcclEnv, Setting};
use super::version::{Chosen, PathKind, Version};
use serde::{Deserialize, Serialize};

/// One GPU as the rule sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpu {
    /// How messages name it (`0000:18:00.0`, `GPU3`).
    pub id: String,
    /// CUDA compute capability (major, minor), and where it came from.
    pub cc: Option<(i32, i32)>,
    pub cc_source: String,
    /// Attached to its CPU over NVLink-C2C (Grace Hopper / Grace Blackwell), and how we know.
    pub c2c: Option<bool>,
    pub c2c_source: String,
}

/// One RDMA device (an `ibv` device, as NCCL lists them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Nic {
    pub name: String,
    /// (port number, ACTIVE); `None` when the ports are not known.
    pub ports: Option<Vec<(u32, bool)>>,
}

/// Whether NCCL can register this GPU's memory with this NIC (ground truth §1 steps 1-4),
/// as the caller could tell. `None` = unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Support {
    /// A peer-memory client (NCCL_PTR_CUDA).
    pub peermem: Option<bool>,
    /// dma-buf for this GPU and NIC (kernel, driver, libibverbs, NIC probe, CUDA attribute).
    pub dmabuf: Option<bool>,
    /// CUDA GPU_DIRECT_RDMA_SUPPORTED for the GPU.
    pub gpu: Option<bool>,
    /// NCCL's own NIC-level answer when a log shows it (`NET/IB : GPU Direct RDMA
    /// Enabled|Disabled for HCA n 'mlx5_0'`: a peer-memory client or dma-buf for the NIC,
    /// src/graph/topo.cc v2.30.7-1 L1651-1654; 2.7-2.12 print only `Disabled .. (no module)`,
    /// src/transport/net_ib.cc v2.12.12-1 L290). It wins over what the other facts suggest.
    pub nic_logged: Option<bool>,
    /// The reason text when both paths are off (`NIC-level GDR off ...`), when the GPU says
    /// no, and when support cannot be told (one line per missing fact).
    pub nic_off: String,
    /// Why there is no peer-memory client, when there is none (empty: the generic words).
    pub peermem_off: String,
    pub gpu_off: String,
    pub unknown: Vec<String>,
    /// Live facts assumed.
    pub assumptions: Vec<String>,
    /// Facts that were recorded but cannot be read (a snapshot's damaged `live.json`): what
    /// they held is not assumed, so a pair that would use GDR is undecided instead.
    pub damaged: Vec<String>,
}

impl Support {
    /// Everything assumed to work (a pasted matrix says nothing about drivers).
    pub fn assumed(why: &str) -> Support {
        Support {
            peermem: Some(true),
            dmabuf: None,
            gpu: None,
            assumptions: vec![why.to_string()],
            ..Default::default()
        }
    }
}

/// The machine: GPUs, NICs and how they connect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct System {
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    /// `[gpu][nic]`: the PCIe path type (PIX, PXB, PHB, SYS; `None`: unknown).
    pub paths: Vec<Vec<Option<PathKind>>>,
    /// Why a `None` path is unknown, with what would show it (a pasted matrix: `matrix cell not
    /// in the paste; paste `nvidia-smi topo -m``); empty: the NIC's PCI location is unknown.
    pub path_hint: String,
    /// `[gpu][nic]`: nvidia-smi's name of the same path (`NODE` is NCCL's PHB), for 2.4's
    /// NODE distance and for display.
    pub smi: Vec<Vec<Option<String>>>,
    /// `[gpu][gpu]`: an NVLink path between the two GPUs (direct or through NVSwitch).
    pub nvlink: Vec<Vec<Option<bool>>>,
    /// Where the NVLink facts came from (`NVML`, `NV# cells of the pasted matrix`, ...).
    pub nvlink_source: String,
    /// `[gpu][gpu]`: the PCIe path between two GPUs, for NCCL_P2P_LEVEL.
    pub gpu_paths: Vec<Vec<Option<PathKind>>>,
    /// `[gpu][nic]`.
    pub support: Vec<Vec<Support>>,
    /// NCCL's P2P default is SYS on AMD x86 CPUs with at most two GPUs (src/graph/paths.cc
    /// v2.30.7-1 L351-354).
    pub amd_two_gpus: bool,
}

/// The verdict for one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Direction {
    pub gdr: bool,
    /// Why not (empty when `gdr`).
    pub reasons: Vec<String>,
    /// NCCL would map with `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (`/GDRDMA(PCI)`).
    pub pci_mode: bool,
    /// The answer depends on an unknown input (the reason is in `reasons`).
    pub undecided: bool,
}

/// The verdict for one GPU x NIC pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub gpu: usize,
    pub nic: usize,
    /// The PCIe path of the pair itself.
    pub pcie: Option<PathKind>,
    /// NCCL's path after its rewrites: `P2C` (the GPU's own Grace), `PXN` (through `via`).
    pub path: Option<PathKind>,
    /// The NVLink peer GPU that proxies sends to this NIC (PXN).
    pub via: Option<usize>,
    /// The pair's own path (P2C counted, PXN not) is within the threshold: NCCL's distance
    /// step alone. `None`: the path is unknown.
    pub within: Option<bool>,
    pub send: Direction,
    pub receive: Direction,
    /// `dmabuf` or `peermem` when some direction uses GDR.
    pub mechanism: Option<&'static str>,
    /// NCCL lists this NIC (an ACTIVE port, not excluded by NCCL_IB_HCA, IB not disabled).
    pub used: bool,
    /// The answer depends on something unknown (the reasons).
    pub undecided: Vec<String>,
    /// How the answer came about, beyond the reasons (PXN, P2C, forced reads, ...).
    pub notes: Vec<String>,
    pub assumptions: Vec<String>,
}

impl Verdict {
    /// GDR in at least one direction.
    pub fn enabled(&self) -> bool {
        self.send.gdr || self.receive.gdr
    }
}

/// NCCL's P2P decision for one GPU pair (`ncclTopoCheckP2p()`, distance part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuP2p {
    pub a: usize,
    pub b: usize,
    /// NVL over NVLink, else the PCIe path.
    pub path: Option<PathKind>,
    pub p2p: Option<bool>,
    pub reason: String,
}

/// Everything [`decide`] concludes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub rules: Chosen,
    /// The threshold as NCCL holds it (`PXB`, `P2C`, `PHB`...).
    pub threshold: String,
    /// Where it came from (`NCCL_NET_GDR_LEVEL=PHB from environment`, `NCCL 2.30's default`).
    pub threshold_source: String,
    pub verdicts: Vec<Verdict>,
    pub p2p: Vec<GpuP2p>,
    /// Node-wide remarks: ignored variables, PXN disabled, NCCL_P2P_PXN_LEVEL=0, ...
    pub notes: Vec<String>,
}

impl Decision {
    pub fn pair(&self, g: usize, n: usize) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.gpu == g && v.nic == n)
    }
    /// `PXB (NCCL's default...)`, for messages.
    pub fn threshold_text(&self) -> String {
        format!("{} ({})", self.threshold, self.threshold_source)
    }
}

/// The rules and the environment to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rules: Chosen,
    pub env: NcclEnv,
}

/// [`Verdict::mechanism`] when NCCL's log says the NIC supports GDR but nothing shows whether
/// through a peer-memory client or dma-buf.
pub const MECHANISM_LOGGED: &str = "peermem or dmabuf";

/// One answer of `ncclTopoCheckGdr()`.
enum Check {
    On {
        pci_mode: bool,
    },
    Off(String),
    /// Nothing says no, but these inputs are unknown.
    Unknown(Vec<String>),
}

struct Ctx<'a> {
    sys: &'a System,
    v: Version,
    env: &'a NcclEnv,
    /// NCCL's path per pair after P2C and PXN.
    path: Vec<Vec<Option<PathKind>>>,
    via: Vec<Vec<Option<usize>>>,
    /// NVLink usable by NCCL (P2P not disabled).
    nvl: Vec<Vec<Option<bool>>>,
    /// Per GPU: has an NVLink peer (from `nvl`, computed once: the read gate asks per pair).
    peer: Vec<Option<bool>>,
    level: Level,
    level_name: String,
    level_source: String,
}

fn val(v: Version, k: PathKind) -> u8 {
    // Types a version lacks never reach a comparison; sort them last to be safe.
    v.value(k).unwrap_or(u8::MAX)
}

impl Ctx<'_> {
    fn c2c(&self, g: usize) -> Option<bool> {
        self.sys.gpus.get(g).and_then(|x| x.c2c)
    }
    fn gpu_name(&self, g: usize) -> String {
        self.sys
            .gpus
            .get(g)
            .map(|x| x.id.clone())
            .unwrap_or_else(|| format!("gpu {g}"))
    }
    fn support(&self, g: usize, n: usize) -> Option<&Support> {
        self.sys.support.get(g).and_then(|r| r.get(n))
    }

    /// NCCL's mechanism for the pair, or why there is none.
    fn mechanism(&self, g: usize, n: usize) -> Result<&'static str, Check> {
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

    fn nvlink_peer_of(&self, g: usize) -> Option<bool> {
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
    fn check(&self, g: usize, n: usize, read: bool) -> Check {
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
    fn distance(&self, g: usize, n: usize, cg: usize, distance: PathKind) -> Result<bool, String> {
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

/// The threshold NCCL applies: the level, its display name, and where it came from.
pub fn threshold(env: &NcclEnv, v: Version) -> (Level, String, String) {
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
            format!(
                "{}: P2C, which is PXB over PCIe plus a NIC on the GPU's own C2C-attached CPU",
                s.source
            ),
        ),
        Some(s) if s.value => (
            Level::Kind(PathKind::Pxb),
            "PXB".into(),
            format!(
                "NCCL {}.{}'s default; {} also lets a NIC on the GPU's own C2C-attached CPU through",
                v.major, v.minor, s.source
            ),
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

/// NCCL's GDR decision for every GPU x NIC pair of `sys` under `cfg`.
pub fn decide(sys: &System, cfg: &Config) -> Decision {
    let v = cfg.rules.version;
    let env = &cfg.env;
    let ng = sys.gpus.len();
    let nn = sys.nics.len();
    let cell = |m: &Vec<Vec<Option<PathKind>>>, a: usize, b: usize| -> Option<PathKind> {
        m.get(a).and_then(|r| r.get(b)).copied().flatten()
    };
    let mut notes = env.notes.clone();
    // (1) The NICs NCCL lists: ACTIVE ports, NCCL_IB_HCA, NCCL_IB_DISABLE.
    let mut nic_reason: Vec<Option<String>> = vec![None; nn];
    let mut nic_assume: Vec<Vec<String>> = vec![Vec::new(); nn];
    for (i, nic) in sys.nics.iter().enumerate() {
        if env.ib_disable.value {
            nic_reason[i] = Some(format!(
                "{}: NCCL uses no RDMA device (it falls back to sockets), so no GDR",
                env.ib_disable.source
            ));
            continue;
        }
        match &nic.ports {
            None => nic_assume[i].push(format!("port state of {} unknown", nic.name)),
            Some(ports) => {
                let active: Vec<u32> = ports.iter().filter(|p| p.1).map(|p| p.0).collect();
                if active.is_empty() {
                    nic_reason[i] = Some(format!(
                        "{} has no ACTIVE port: NCCL does not use it",
                        nic.name
                    ));
                    continue;
                }
                if let Some(f) = &env.ib_hca {
                    if !active.iter().any(|p| f.value.allows(&nic.name, *p)) {
                        nic_reason[i] = Some(format!(
                            "{} is not used by NCCL: {} excludes its active port(s)",
                            nic.name, f.source
                        ));
                        continue;
                    }
                }
            }
        }
        if let (Some(f), None) = (&env.ib_hca, &nic.ports) {
            if !f.value.allows(&nic.name, 1) {
                nic_reason[i] = Some(format!(
                    "{} is not used by NCCL: {} excludes it",
                    nic.name, f.source
                ));
            }
        }
    }
    let used: Vec<bool> = nic_reason.iter().map(Option::is_none).collect();
    // (2) NVLink that NCCL may use: NCCL_P2P_LEVEL below NVL diverts GPU pairs through the CPU
    // (ncclTopoComputePaths(), v2.30.7-1 L765-778), which also ends PXN and the read gate's
    // NVLink peer.
    let p2p_nvl_ok = env
        .p2p_level
        .as_ref()
        .is_none_or(|l| val(v, l.value) >= val(v, PathKind::Nvl));
    if !p2p_nvl_ok {
        if let Some(l) = &env.p2p_level {
            notes.push(format!(
                "{}: NCCL sends GPU-to-GPU traffic through the CPU, so no GPU counts as an NVLink peer (no PXN, and the read gate sees no NVLink)",
                l.source
            ));
        }
    }
    let nvl: Vec<Vec<Option<bool>>> = (0..ng)
        .map(|a| {
            (0..ng)
                .map(|b| {
                    let x = sys.nvlink.get(a).and_then(|r| r.get(b)).copied().flatten();
                    if p2p_nvl_ok {
                        x
                    } else {
                        Some(false)
                    }
                })
                .collect()
        })
        .collect();
    let (level, level_name, level_source) = threshold(env, v);
    let mut cx = Ctx {
        sys,
        v,
        env,
        path: (0..ng)
            .map(|g| (0..nn).map(|n| cell(&sys.paths, g, n)).collect())
            .collect(),
        via: vec![vec![None; nn]; ng],
        nvl,
        peer: Vec::new(),
        level,
        level_name: level_name.clone(),
        level_source: level_source.clone(),
    };
    cx.peer = (0..ng).map(|g| cx.nvlink_peer_of(g)).collect();
    let mut pair_notes: Vec<Vec<Vec<String>>> = vec![vec![Vec::new(); nn]; ng];
    let mut pair_undecided: Vec<Vec<Vec<String>>> = vec![vec![Vec::new(); nn]; ng];
    // (3) P2C: a GPU's PHB NIC on its own C2C-attached CPU (v2.27.3-1 L670-680; from 2.29
    // only the GPU's closest NICs, v2.29.7-1 L712-727).
    let mut c2c_unknown: Vec<usize> = Vec::new();
    // GDR for a NIC on the GPU's own C2C CPU is on (2.26 with NCCL_NET_GDR_C2C=1, 2.27+ by
    // default): an unknown C2C attachment leaves such a pair undecided, not off.
    let c2c_gdr = env.gdr_c2c.as_ref().is_some_and(|s| s.value);
    if v.has_p2c() || c2c_gdr {
        #[allow(clippy::needless_range_loop)]
        for g in 0..ng {
            let best = (0..nn)
                .filter(|n| used[*n])
                .filter_map(|n| cx.path[g][n])
                .min_by_key(|k| val(v, *k));
            let closest = !v.p2c_local_nets_only() || best == Some(PathKind::Phb);
            for n in (0..nn).filter(|n| used[*n]) {
                if cx.path[g][n] != Some(PathKind::Phb) {
                    continue;
                }
                match cx.c2c(g) {
                    Some(true) if v.has_p2c() && closest => {
                        cx.path[g][n] = Some(PathKind::P2c);
                        pair_notes[g][n].push(format!(
                            "P2C: {} reaches its own CPU over NVLink-C2C ({}) and the NIC hangs off that CPU: NCCL counts the pair as P2C, not PHB",
                            cx.gpu_name(g),
                            sys.gpus[g].c2c_source
                        ));
                    }
                    None => {
                        if !c2c_unknown.contains(&g) {
                            c2c_unknown.push(g);
                        }
                        if c2c_gdr && closest {
                            pair_undecided[g][n].push(format!(
                                "cannot tell whether NCCL {v} uses GDR with {} through {}'s own CPU (NVLink-C2C, P2C): whether {} reaches its CPU over NVLink-C2C is unknown ({})",
                                sys.nics[n].name,
                                cx.gpu_name(g),
                                cx.gpu_name(g),
                                sys.gpus[g].c2c_source
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if !c2c_unknown.is_empty() {
        notes.push(format!(
            "whether {} reach their CPU over NVLink-C2C is unknown ({}): on a Grace system NCCL {v} counts a NIC on the GPU's own CPU as P2C and uses GDR with it",
            c2c_unknown
                .iter()
                .map(|g| cx.gpu_name(*g))
                .collect::<Vec<_>>()
                .join(", "),
            sys.gpus[c2c_unknown[0]].c2c_source
        ));
    }
    // The pairs' own paths, P2C counted, before PXN reroutes them.
    let own_paths = cx.path.clone();
    // (4) PXN (v2.12+): send through an NVLink peer that is close to the NIC.
    let pxn_on = v.has_pxn() && !env.pxn_disable.value;
    if v.has_pxn() && env.pxn_disable.value {
        notes.push(format!(
            "{}: NCCL sends no GPU's traffic through an NVLink peer",
            env.pxn_disable.source
        ));
    }
    if pxn_on && env.p2p_pxn_level.user && env.p2p_pxn_level.value == 0 {
        notes.push(format!(
            "{}: point-to-point operations (send/recv) do not use PXN; collectives still do",
            env.p2p_pxn_level.source
        ));
    }
    if pxn_on {
        let pxn_c2c = env.pxn_c2c.as_ref().map(|s| s.value).unwrap_or(false);
        let peer_ok = |cx: &Ctx<'_>, p: usize, n: usize| -> bool {
            let Some(pp) = cx.path[p][n] else {
                return false;
            };
            if v.has_p2c() && pxn_c2c {
                if v.pxn_spares_p2c() {
                    val(v, pp) <= val(v, PathKind::P2c)
                } else {
                    val(v, pp) <= val(v, PathKind::Pxb) || pp == PathKind::P2c
                }
            } else {
                val(v, pp) <= val(v, PathKind::Pxb)
            }
        };
        let own_wants = |own: PathKind| -> bool {
            if v.pxn_spares_p2c() {
                val(v, own) > val(v, PathKind::Pxn)
            } else {
                val(v, own) > val(v, PathKind::Pxb)
            }
        };
        // Each GPU's closest used NIC (2.12-2.17 prefer a PXN peer whose own NIC it is),
        // computed once, not per candidate peer.
        let own_nic: Vec<Option<usize>> = (0..ng)
            .map(|p| {
                (0..nn)
                    .filter(|m| used[*m])
                    .filter_map(|m| cx.path[p][m].map(|k| (val(v, k), m)))
                    .min()
                    .map(|x| x.1)
            })
            .collect();
        for n in (0..nn).filter(|n| used[*n]) {
            // The NIC's local GPU: the closest GPU, first in PCI order (NCCL: by bandwidth,
            // then its channel-to-NIC assignment; ncclTopoGetLocalGpu(), src/graph/topo.cc
            // v2.30.7-1 L2110-2135).
            let local = (0..ng)
                .filter_map(|g| cx.path[g][n].map(|k| (val(v, k), g)))
                .min()
                .map(|x| x.1);
            // GPUs whose path to the NIC is unknown (rows cut from a pasted matrix): one of
            // them may be the NIC's local GPU (or, before 2.18, another PXN peer), unless a
            // known one is already as close as a GPU gets (PIX).
            let unseen: Vec<usize> = (0..ng).filter(|p| cx.path[*p][n].is_none()).collect();
            let local_certain = local
                .and_then(|p| cx.path[p][n])
                .is_some_and(|k| k == PathKind::Pix);
            for g in 0..ng {
                let Some(own) = cx.path[g][n] else { continue };
                if !own_wants(own) {
                    continue;
                }
                let candidates: Vec<usize> = if v.pxn_local_gpu_only() {
                    local.filter(|p| *p != g).into_iter().collect()
                } else {
                    (0..ng).filter(|p| *p != g).collect()
                };
                let mut chosen = None;
                let mut unknown_peer = None;
                let mut unknown_gdr: Option<(usize, Vec<String>)> = None;
                for p in candidates {
                    if !peer_ok(&cx, p, n) {
                        continue;
                    }
                    if v.pxn_peer_needs_gdr() {
                        match cx.check(p, n, true) {
                            Check::On { .. } => {}
                            Check::Unknown(why) => {
                                // PXN would carry this pair if the peer had GDR: undecided.
                                if cx.nvl[p][g] != Some(false) && unknown_gdr.is_none() {
                                    unknown_gdr = Some((p, why));
                                }
                                continue;
                            }
                            Check::Off(_) => continue,
                        }
                    }
                    match cx.nvl[p][g] {
                        Some(true) => {
                            chosen = Some(p);
                            // 2.12-2.17 prefer a peer whose own NIC this is: its closest.
                            if v.pxn_local_gpu_only() || own_nic[p] == Some(n) {
                                break;
                            }
                        }
                        None => unknown_peer = unknown_peer.or(Some(p)),
                        Some(false) => {}
                    }
                }
                let unseen_peers: Vec<usize> = unseen
                    .iter()
                    .copied()
                    .filter(|p| *p != g && cx.nvl[*p][g] != Some(false))
                    .collect();
                if chosen.is_none()
                    && !unseen_peers.is_empty()
                    && (!v.pxn_local_gpu_only() || !local_certain)
                {
                    pair_undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through another GPU (PXN): the paths of {} to {} are not known, and {}",
                        unseen_peers
                            .iter()
                            .map(|p| cx.gpu_name(*p))
                            .collect::<Vec<_>>()
                            .join(", "),
                        sys.nics[n].name,
                        if v.pxn_local_gpu_only() {
                            "the NIC's local GPU may be among them"
                        } else {
                            "a PXN peer may be among them"
                        }
                    ));
                }
                match (chosen, unknown_peer) {
                    (Some(p), _) => {
                        cx.via[g][n] = Some(p);
                        cx.path[g][n] = Some(PathKind::Pxn);
                        pair_notes[g][n].push(format!(
                            "PXN: NCCL sends through {} (NVLink peer, {} to {}), whose proxy posts to the NIC; own path {own}",
                            cx.gpu_name(p),
                            cx.path[p][n].map(|k| k.as_str()).unwrap_or("?"),
                            sys.nics[n].name
                        ));
                    }
                    (None, Some(p)) => pair_undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through {} (PXN): NVLink between {} and {} is unknown ({})",
                        cx.gpu_name(p),
                        cx.gpu_name(g),
                        cx.gpu_name(p),
                        sys.nvlink_source
                    )),
                    _ => {}
                }
                // From 2.30.3 the peer must have GDR itself (v2.30.7-1 L826-830).
                if let (None, Some((p, why))) = (chosen, unknown_gdr) {
                    pair_undecided[g][n].push(format!(
                        "cannot tell whether NCCL sends through {} (PXN): NCCL {v} takes a PXN peer only with GDR to the NIC, and that is unknown: {}",
                        cx.gpu_name(p),
                        why.join("; ")
                    ));
                }
            }
        }
    }
    // (5) Both directions, per pair.
    let mut verdicts = Vec::new();
    for g in 0..ng {
        for n in 0..nn {
            let mut vd = Verdict {
                gpu: g,
                nic: n,
                pcie: cell(&sys.paths, g, n),
                path: cx.path[g][n],
                via: cx.via[g][n],
                within: own_paths[g][n].map(|k| cx.distance(g, n, g, k).is_ok()),
                used: used[n],
                notes: std::mem::take(&mut pair_notes[g][n]),
                undecided: std::mem::take(&mut pair_undecided[g][n]),
                assumptions: nic_assume[n].clone(),
                ..Default::default()
            };
            if let Some(s) = cx.support(g, n) {
                vd.assumptions.extend(s.assumptions.iter().cloned());
            }
            if let Some(r) = &nic_reason[n] {
                vd.send.reasons.push(r.clone());
                vd.receive.reasons.push(r.clone());
                verdicts.push(vd);
                continue;
            }
            for (read, dir) in [(true, &mut vd.send), (false, &mut vd.receive)] {
                match cx.check(g, n, read) {
                    Check::On { pci_mode } => {
                        dir.gdr = true;
                        dir.pci_mode = pci_mode;
                    }
                    Check::Off(r) => dir.reasons.push(r),
                    Check::Unknown(rs) => {
                        dir.undecided = true;
                        for r in rs {
                            dir.reasons.push(r.clone());
                            if !vd.undecided.contains(&r) {
                                vd.undecided.push(r);
                            }
                        }
                    }
                }
            }
            if vd.enabled() {
                vd.mechanism = cx.mechanism(g, n).ok();
                // Pair-level undecided PXN no longer matters when GDR is on anyway.
                if vd.send.gdr && vd.receive.gdr {
                    vd.undecided.clear();
                }
            }
            if vd.via.is_some() && vd.receive.gdr {
                vd.notes.push(format!(
                    "receives do not use PXN (net.cc recvSetup): the NIC writes into this GPU's memory over its own {} path, with GDR because NCCL judges the pair by the peer's distance",
                    vd.pcie.map(|k| k.as_str()).unwrap_or("?")
                ));
            }
            if vd.send.gdr && env.gdr_read.user && env.gdr_read.value > 0 {
                vd.notes.push(format!(
                    "{}: sends use GDR without the read gate",
                    env.gdr_read.source
                ));
            }
            verdicts.push(vd);
        }
    }
    // GPU pairs: NCCL_P2P_LEVEL (default PXB; SYS on AMD with at most two GPUs).
    let (p2p_lvl, p2p_src) = match &env.p2p_level {
        Some(s) => (s.value, s.source.clone()),
        None if sys.amd_two_gpus => (
            PathKind::Sys,
            format!(
                "NCCL {}.{}'s default on AMD CPUs with at most two GPUs",
                v.major, v.minor
            ),
        ),
        None => (
            PathKind::Pxb,
            format!("NCCL {}.{}'s default", v.major, v.minor),
        ),
    };
    let mut p2p = Vec::new();
    if !v.legacy() {
        for a in 0..ng {
            for b in (a + 1)..ng {
                let nv = sys.nvlink.get(a).and_then(|r| r.get(b)).copied().flatten();
                let path = match nv {
                    Some(true) => Some(PathKind::Nvl),
                    _ => cell(&sys.gpu_paths, a, b),
                };
                let (ok, reason) = match (path, nv) {
                    (Some(k), Some(_)) | (Some(k @ PathKind::Nvl), None) => {
                        let ok = val(v, k) <= val(v, p2p_lvl);
                        (
                            Some(ok),
                            format!(
                                "{k} {} NCCL_P2P_LEVEL {} ({p2p_src})",
                                if ok { "within" } else { "beyond" },
                                p2p_lvl
                            ),
                        )
                    }
                    (Some(k), None) if val(v, k) > val(v, p2p_lvl) => (
                        Some(false),
                        format!("{k} beyond NCCL_P2P_LEVEL {p2p_lvl} ({p2p_src}), unless NVLink connects them (not known)"),
                    ),
                    _ => (
                        None,
                        format!("path unknown ({})", sys.nvlink_source),
                    ),
                };
                p2p.push(GpuP2p {
                    a,
                    b,
                    path,
                    p2p: ok,
                    reason,
                });
            }
        }
    }
    Decision {
        rules: cfg.rules.clone(),
        threshold: level_name,
        threshold_source: level_source,
        verdicts,
        p2p,
        notes,
    }
}

#[cfg(test)]
mod tests {
    //! One test per rule and version range; NCCL's source (NVIDIA/nccl at the tag named) is
    //! the specification.
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::nccl::env::NcclEnv;
    use std::collections::BTreeMap;
    use PathKind::*;

    /// `paths[g][n]`, NVLink between every GPU pair (`nvl`), cc 9.0, support everywhere.
    fn sys(paths: &[&[PathKind]], nvl: bool) -> System {
        let ng = paths.len();
        let nn = paths.first().map(|r| r.len()).unwrap_or(0);
        System {
            gpus: (0..ng)
                .map(|g| Gpu {
                    id: format!("GPU{g}"),
                    cc: Some((9, 0)),
                    cc_source: "test".into(),
                    c2c: Some(false),
                    c2c_source: "test".into(),
                })
                .collect(),
            nics: (0..nn)
                .map(|n| Nic {
                    name: format!("mlx5_{n}"),
                    ports: Some(vec![(1, true)]),
                })
                .collect(),
            paths: paths
                .iter()
                .map(|r| r.iter().map(|k| Some(*k)).collect())
                .collect(),
            path_hint: String::new(),
            smi: vec![vec![None; nn]; ng],
            nvlink: (0..ng)
                .map(|a| (0..ng).map(|b| Some(nvl && a != b)).collect())
                .collect(),
            nvlink_source: "test".into(),
            gpu_paths: vec![vec![Some(Pxb); ng]; ng],
            support: vec![
                vec![
                    Support {
                        peermem: Some(true),
                        dmabuf: Some(true),
                        gpu: Some(true),
                        ..Default::default()
                    };
                    nn
                ];
                ng
            ],
            amd_two_gpus: false,
        }
    }

    fn run(s: &System, version: &str, env: &[(&str, &str)]) -> Decision {
        let v = Version::parse(version).unwrap();
        let m: BTreeMap<String, String> = env
            .iter()
            .map(|(k, x)| (k.to_string(), x.to_string()))
            .collect();
        decide(
            s,
            &Config {
                rules: Chosen {
                    version: v,
                    source: "test".into(),
                    assumed: false,
                },
                env: NcclEnv::parse(Some(&m), "env", v),
            },
        )
    }

    /// The 8-GPU node of the brief: GPU3 has only PHB NICs, its NVLink peers have PIX NICs.
    fn eight_gpus_gpu3_without_nic() -> System {
        let mut rows: Vec<Vec<PathKind>> = Vec::new();
        for g in 0..8 {
            let mut r = vec![Phb; 7];
            let own = match g {
                0..=2 => Some(g),
                4..=7 => Some(g - 1),
                _ => None,
            };
            if let Some(n) = own {
                r[n] = Pix;
            }
            rows.push(r);
        }
        let refs: Vec<&[PathKind]> = rows.iter().map(|r| r.as_slice()).collect();
        sys(&refs, true)
    }

    #[test]
    fn pxn_serves_a_gpu_without_a_close_nic() {
        // src/graph/paths.cc v2.30.7-1 L812-840: GPU3's PHB path to mlx5_0 becomes PXN through
        // mlx5_0's local GPU (GPU0), and ncclTopoCheckGdr() judges GPU0's PIX (L515-520).
        let s = eight_gpus_gpu3_without_nic();
        let d = run(&s, "2.30.7", &[]);
        let v = d.pair(3, 0).unwrap();
        assert_eq!((v.path, v.via), (Some(Pxn), Some(0)));
        assert!(v.send.gdr && v.receive.gdr, "{v:?}");
        assert!(v
            .notes
            .iter()
            .any(|n| n.starts_with("PXN: NCCL sends through GPU0")));
        assert!(!v.send.reasons.iter().any(|r| r.contains("host memory")));
        // A GPU with its own PIX NIC keeps its own path to it.
        assert_eq!(d.pair(0, 0).unwrap().via, None);
    }

    /// Rows cut from a pasted matrix: where the NIC's local GPU may be among the GPUs whose
    /// path is unknown, PXN is undecided, not "off by distance" (it said off, and a GPU that
    /// NCCL serves over PXN was reported as staging through host memory).
    #[test]
    fn pxn_is_undecided_when_the_local_gpu_may_be_unseen() {
        let mut s = eight_gpus_gpu3_without_nic();
        // GPU0 (mlx5_0's PIX GPU) and GPUs 4-7 lost their rows.
        for g in [0, 4, 5, 6, 7] {
            for n in 0..7 {
                s.paths[g][n] = None;
            }
        }
        for v in ["2.30.7", "2.17.1"] {
            let p = run(&s, v, &[]).pair(3, 0).unwrap().clone();
            assert!(!p.enabled() && p.via.is_none(), "{v}: {p:?}");
            assert!(
                p.undecided
                    .iter()
                    .any(|u| u.contains("GPU0") && u.contains("PXN")),
                "{v}: {p:?}"
            );
        }
        // A known PIX GPU is the local one whatever the unseen rows hold: decided.
        let mut s = eight_gpus_gpu3_without_nic();
        for g in [4, 5, 6, 7] {
            for n in 0..7 {
                s.paths[g][n] = None;
            }
        }
        let p = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
        assert_eq!(p.via, Some(0), "{p:?}");
    }

    #[test]
    fn pxn_disable_and_old_versions() {
        let s = eight_gpus_gpu3_without_nic();
        // NCCL_PXN_DISABLE=1 (v2.30.7-1 L668-684, L819).
        let d = run(&s, "2.30.7", &[("NCCL_PXN_DISABLE", "1")]);
        let v = d.pair(3, 0).unwrap();
        assert!(!v.enabled() && v.via.is_none());
        assert!(v.send.reasons[0].contains("path PHB is beyond NCCL_NET_GDR_LEVEL PXB"));
        assert!(d
            .notes
            .iter()
            .any(|n| n.contains("NCCL_PXN_DISABLE=1 from env")));
        // No PXN before 2.12 (v2.11.4-1 has no PATH_PXN).
        assert!(!run(&s, "2.11.4", &[]).pair(3, 0).unwrap().enabled());
        // 2.12-2.17: any NVLink peer within PXB (v2.12.12-1 L526-545).
        assert_eq!(run(&s, "2.12.12", &[]).pair(3, 0).unwrap().via, Some(0));
        assert_eq!(run(&s, "2.17.1", &[]).pair(3, 1).unwrap().via, Some(1));
    }

    #[test]
    fn pxn_needs_nvlink_and_says_when_unknown() {
        // (2) "is connected to us through NVLink" (v2.30.7-1 L832).
        let mut s = eight_gpus_gpu3_without_nic();
        for a in 0..8 {
            for b in 0..8 {
                s.nvlink[a][b] = Some(false);
            }
        }
        assert!(!run(&s, "2.30.7", &[]).pair(3, 0).unwrap().enabled());
        for a in 0..8 {
            for b in 0..8 {
                s.nvlink[a][b] = if a == b { Some(false) } else { None };
            }
        }
        let v = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
        assert!(!v.enabled());
        assert!(
            v.undecided[0].contains("cannot tell whether NCCL sends through GPU0"),
            "{v:?}"
        );
        // NCCL_P2P_DISABLE=1 diverts GPU pairs through the CPU: no NVLink peer, no PXN
        // (v2.30.7-1 L765-778).
        let s = eight_gpus_gpu3_without_nic();
        let d = run(&s, "2.30.7", &[("NCCL_P2P_DISABLE", "1")]);
        assert!(!d.pair(3, 0).unwrap().enabled());
    }

    #[test]
    fn pxn_peer_must_have_gdr_from_2_30_3() {
        // v2.30.7-1 L826-830: ncclTopoCheckGdr(peer, read=1) must pass; v2.29.7-1 does not ask.
        let mut s = eight_gpus_gpu3_without_nic();
        s.support[0][0].gpu = Some(false);
        s.support[0][0].gpu_off = "GPU0 has no GDR".into();
        let new = run(&s, "2.30.7", &[]);
        assert!(!new.pair(3, 0).unwrap().enabled());
        let old = run(&s, "2.29.7", &[]);
        assert_eq!(old.pair(3, 0).unwrap().via, Some(0));
        assert!(old.pair(3, 0).unwrap().enabled());
        // The peer's GDR unknown (a paste without lsmod): undecided, not "off by distance".
        let mut s = eight_gpus_gpu3_without_nic();
        s.support[0][0].peermem = None;
        s.support[0][0].dmabuf = None;
        s.support[0][0].unknown = vec!["peer memory: not shown".into()];
        let v = run(&s, "2.30.7", &[]).pair(3, 0).unwrap().clone();
        assert!(!v.enabled() && v.via.is_none());
        assert!(
            v.undecided.iter().any(|u| u
                .starts_with("cannot tell whether NCCL sends through GPU0 (PXN)")
                && u.contains("peer memory: not shown")),
            "{v:?}"
        );
    }

    #[test]
    fn damaged_facts_make_an_on_pair_undecided_and_leave_an_off_one_off() {
        // Peer memory present, the GPU's attribute recorded but unreadable: not assumed on.
        let mut s = sys(&[&[Pix]], false);
        s.support[0][0].damaged = vec!["cannot tell CUDA's attribute: damaged: x".into()];
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(!v.enabled(), "{v:?}");
        assert!(
            v.undecided.iter().any(|u| u.contains("damaged: x")),
            "{v:?}"
        );
        // The same damage where the path is beyond the threshold: off, not undecided.
        let mut s = sys(&[&[Sys]], false);
        s.support[0][0].damaged = vec!["cannot tell CUDA's attribute: damaged: x".into()];
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(!v.enabled() && v.undecided.is_empty(), "{v:?}");
        // Without damage the same pair is on.
        let s = sys(&[&[Pix]], false);
        assert!(run(&s, "2.30.7", &[]).pair(0, 0).unwrap().enabled());
    }

    #[test]
    fn a_no_wins_over_an_unknown_earlier_step() {
        // ncclTopoCheckGdr() (v2.30.7-1 L468-549): support, read gate, distance. Support
        // unknown but the path beyond the threshold: off either way, not undecided.
        let mut s = sys(&[&[Sys]], false);
        s.support[0][0].peermem = None;
        s.support[0][0].dmabuf = None;
        s.support[0][0].unknown = vec!["peer memory: not shown".into()];
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(!v.enabled() && v.undecided.is_empty(), "{v:?}");
        assert!(v.receive.reasons[0].contains("path SYS is beyond"), "{v:?}");
        assert_eq!(v.within, Some(false));
        // Within the threshold, the unknown support decides: undecided, with the reason.
        let mut s = sys(&[&[Pix]], false);
        s.support[0][0].peermem = None;
        s.support[0][0].dmabuf = None;
        s.support[0][0].unknown = vec!["peer memory: not shown".into()];
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(!v.enabled() && v.receive.undecided, "{v:?}");
        assert_eq!(v.undecided, vec!["peer memory: not shown".to_string()]);
        assert_eq!(v.within, Some(true));
        // NCCL's own NIC-level line wins over the other facts (src/graph/topo.cc v2.30.7-1
        // L1651-1654).
        s.support[0][0].nic_logged = Some(true);
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert_eq!(v.mechanism, Some(MECHANISM_LOGGED));
        s.support[0][0].peermem = Some(true);
        s.support[0][0].nic_logged = Some(false);
        s.support[0][0].nic_off = "NCCL logged Disabled".into();
        let v = run(&s, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(!v.enabled());
        assert_eq!(v.receive.reasons, vec!["NCCL logged Disabled".to_string()]);
    }

    #[test]
    fn read_gate_by_version_and_compute_capability() {
        // One GPU per PCIe NIC, no NVLink, two GPUs.
        let mut s = sys(&[&[Pix, Phb], &[Phb, Pix]], false);
        // <= 2.18: every GPU needs an NVLink peer for GDR sends (v2.18.6-1 L363-376).
        let d = run(&s, "2.18.6", &[]);
        let v = d.pair(0, 0).unwrap();
        assert!(!v.send.gdr && v.receive.gdr && v.enabled());
        assert!(
            v.send.reasons[0].starts_with("read gate: NCCL 2.18.6"),
            "{v:?}"
        );
        // From 2.19 only below compute capability 8.0 (v2.19.1-1 L365).
        let d = run(&s, "2.19.1", &[]);
        assert!(d.pair(0, 0).unwrap().send.gdr);
        s.gpus[0].cc = Some((7, 0));
        let d = run(&s, "2.30.7", &[]);
        assert!(!d.pair(0, 0).unwrap().send.gdr && d.pair(0, 0).unwrap().receive.gdr);
        // NCCL_NET_GDR_READ=1 lifts the gate, 0 turns sends off everywhere (L491-493).
        assert!(
            run(&s, "2.30.7", &[("NCCL_NET_GDR_READ", "1")])
                .pair(0, 0)
                .unwrap()
                .send
                .gdr
        );
        let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_READ", "0")]);
        assert!(!d.pair(1, 1).unwrap().send.gdr && d.pair(1, 1).unwrap().receive.gdr);
        // A single GPU counts as having NVLink from 2.6 (v2.6.4-1 L299) but not in 2.5.
        let one = sys(&[&[Pix]], false);
        assert!(run(&one, "2.18.6", &[]).pair(0, 0).unwrap().send.gdr);
        assert!(!run(&one, "2.5.7", &[]).pair(0, 0).unwrap().send.gdr);
        // Unknown compute capability without NVLink: undecided, not a guess.
        let mut u = sys(&[&[Pix]], false);
        u.gpus.push(u.gpus[0].clone());
        u.paths.push(vec![Some(Phb)]);
        u.smi.push(vec![None]);
        u.support.push(u.support[0].clone());
        u.nvlink = vec![vec![Some(false); 2]; 2];
        u.gpus[0].cc = None;
        let v = run(&u, "2.30.7", &[]).pair(0, 0).unwrap().clone();
        assert!(v.send.undecided && v.receive.gdr, "{v:?}");
    }

    #[test]
    fn c2c_p2c_by_version() {
        // A Grace Hopper: the NIC on the GPU's own CPU is PHB over PCIe.
        let mut s = sys(&[&[Phb, Sys]], false);
        s.gpus[0].c2c = Some(true);
        // 2.25: no C2C rule, PHB is beyond PXB.
        assert!(!run(&s, "2.25.1", &[]).pair(0, 0).unwrap().enabled());
        // 2.26: NCCL_NET_GDR_C2C default 0 (v2.26.6-1 L381); set to 1 it counts as C2C (L433).
        assert!(!run(&s, "2.26.6", &[]).pair(0, 0).unwrap().enabled());
        assert!(run(&s, "2.26.6", &[("NCCL_NET_GDR_C2C", "1")])
            .pair(0, 0)
            .unwrap()
            .enabled());
        // 2.27-2.28: P2C path (v2.27.3-1 L670-680), default on, judged as C2C (L437-440), so
        // even NCCL_NET_GDR_LEVEL=PIX lets it through.
        let d = run(&s, "2.28.9", &[]);
        let v = d.pair(0, 0).unwrap();
        assert_eq!(v.path, Some(P2c));
        assert!(v.enabled() && !v.send.pci_mode);
        assert!(run(&s, "2.28.9", &[("NCCL_NET_GDR_LEVEL", "PIX")])
            .pair(0, 0)
            .unwrap()
            .enabled());
        assert!(!run(&s, "2.28.9", &[("NCCL_NET_GDR_C2C", "0")])
            .pair(0, 0)
            .unwrap()
            .enabled());
        // 2.29+: the threshold itself is P2C (v2.29.7-1 L460), so LEVEL=PIX now excludes it.
        assert!(run(&s, "2.30.7", &[]).pair(0, 0).unwrap().enabled());
        assert!(!run(&s, "2.30.7", &[("NCCL_NET_GDR_LEVEL", "PIX")])
            .pair(0, 0)
            .unwrap()
            .enabled());
        // The other Grace's NIC stays SYS.
        assert!(!run(&s, "2.30.7", &[]).pair(0, 1).unwrap().enabled());
        // A C2C GPU with a PCIe NIC under its switch: GDR in PCI mode (v2.30.7-1 L537-541).
        let mut p = sys(&[&[Pix]], false);
        p.gpus[0].c2c = Some(true);
        assert!(run(&p, "2.30.7", &[]).pair(0, 0).unwrap().send.pci_mode);
        // Unknown C2C is said once, not guessed.
        s.gpus[0].c2c = None;
        let d = run(&s, "2.30.7", &[]);
        assert!(!d.pair(0, 0).unwrap().enabled());
        assert!(d.notes.iter().any(|n| n.contains("NVLink-C2C is unknown")));
        // ... and the PHB pair is undecided, not off: on a Grace it would be P2C.
        assert!(d.pair(0, 0).unwrap().undecided[0].contains("(NVLink-C2C, P2C)"));
        // The SYS pair is off whatever the attachment.
        assert!(d.pair(0, 1).unwrap().undecided.is_empty());
        // With the C2C rule off (NCCL_NET_GDR_C2C=0) the PHB pair is off.
        let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_C2C", "0")]);
        assert!(d.pair(0, 0).unwrap().undecided.is_empty());
    }

    #[test]
    fn legacy_2_4_integer_level() {
        // v2.4.8-1 src/transport/net.cc L246-272: NET_GDR_LEVEL default PHB (2), GDR iff
        // distance < level; "PHB" is strtoll 0: no GDR at all.
        let s = sys(&[&[Pix, Pxb, Phb]], false);
        let d = run(&s, "2.4.8", &[]);
        let on: Vec<bool> = (0..3).map(|n| d.pair(0, n).unwrap().receive.gdr).collect();
        assert_eq!(on, vec![true, true, false]);
        let d = run(&s, "2.4.8", &[("NCCL_NET_GDR_LEVEL", "3")]);
        assert!(d.pair(0, 2).unwrap().receive.gdr);
        let d = run(&s, "2.4.8", &[("NCCL_NET_GDR_LEVEL", "PHB")]);
        assert!(!d.pair(0, 0).unwrap().receive.gdr);
        // No dma-buf before 2.13: only the peer-memory path counts.
        let mut s = sys(&[&[Pix]], false);
        s.support[0][0].peermem = Some(false);
        assert!(!run(&s, "2.12.12", &[]).pair(0, 0).unwrap().enabled());
        assert_eq!(
            run(&s, "2.13.4", &[]).pair(0, 0).unwrap().mechanism,
            Some("dmabuf")
        );
    }

    #[test]
    fn gdr_level_names_and_integers_move_the_threshold() {
        // ncclGetLevel() (v2.30.7-1 L244-280) and the comparison distance > level (L528).
        let s = sys(&[&[Pix, Pxb, Phb, Sys]], false);
        for (val, want) in [
            ("PIX", [true, false, false, false]),
            ("PHB", [true, true, true, false]),
            ("5", [true, true, true, true]),
            ("1", [true, false, false, false]),
            ("pix", [true, true, false, false]),
        ] {
            let d = run(
                &s,
                "2.30.7",
                &[("NCCL_NET_GDR_LEVEL", val), ("NCCL_PXN_DISABLE", "1")],
            );
            let got: Vec<bool> = (0..4).map(|n| d.pair(0, n).unwrap().receive.gdr).collect();
            assert_eq!(got, want, "NCCL_NET_GDR_LEVEL={val}");
        }
        let d = run(&s, "2.30.7", &[("NCCL_NET_GDR_LEVEL", "PHB")]);
        assert_eq!(d.threshold, "PHB");
        assert_eq!(d.threshold_source, "NCCL_NET_GDR_LEVEL=PHB from env");
    }

    #[test]
    fn ib_hca_ib_disable_and_ports() {
        // src/transport/net_ib/init.cc v2.30.7-1 L317-369 and L291.
        let mut s = sys(&[&[Pix, Pix]], false);
        let d = run(&s, "2.30.7", &[("NCCL_IB_HCA", "^mlx5_0")]);
        let v = d.pair(0, 0).unwrap();
        assert!(!v.used && !v.enabled());
        assert!(v.send.reasons[0].contains("NCCL_IB_HCA=^mlx5_0 from env excludes"));
        assert!(d.pair(0, 1).unwrap().enabled());
        let d = run(&s, "2.30.7", &[("NCCL_IB_HCA", "mlx5_1:2")]);
        assert!(
            !d.pair(0, 1).unwrap().used,
            "port 2 is not the active port 1"
        );
        let d = run(&s, "2.30.7", &[("NCCL_IB_DISABLE", "1")]);
        assert!(d.verdicts.iter().all(|v| !v.used && !v.enabled()));
        s.nics[1].ports = Some(vec![(1, false)]);
        let d = run(&s, "2.30.7", &[]);
        assert!(d.pair(0, 1).unwrap().send.reasons[0].contains("no ACTIVE port"));
    }

    #[test]
    fn p2p_level_for_gpu_pairs() {
        // ncclTopoCheckP2p(): default PXB, NCCL_P2P_LEVEL / NCCL_P2P_DISABLE (v2.30.7-1
        // L287-362).
        let mut s = sys(&[&[Pix], &[Pix]], false);
        s.gpu_paths = vec![vec![Some(Phb); 2]; 2];
        assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(false));
        assert_eq!(
            run(&s, "2.30.7", &[("NCCL_P2P_LEVEL", "SYS")]).p2p[0].p2p,
            Some(true)
        );
        s.nvlink = vec![vec![Some(false), Some(true)], vec![Some(true), Some(false)]];
        assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(true));
        assert_eq!(
            run(&s, "2.30.7", &[("NCCL_P2P_DISABLE", "1")]).p2p[0].p2p,
            Some(false)
        );
        s.amd_two_gpus = true;
        s.nvlink = vec![vec![Some(false); 2]; 2];
        assert_eq!(run(&s, "2.30.7", &[]).p2p[0].p2p, Some(true));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(paths in proptest::collection::vec(proptest::collection::vec(0usize..4, 0..4), 0..4),
                        minor in 4u32..32, nvl in proptest::bool::ANY) {
            let kinds = [Pix, Pxb, Phb, Sys];
            let n = paths.first().map(|r| r.len()).unwrap_or(0);
            let rows: Vec<Vec<PathKind>> = paths.iter().map(|r| (0..n).map(|i| kinds[*r.get(i).unwrap_or(&0)]).collect()).collect();
            let refs: Vec<&[PathKind]> = rows.iter().map(|r| r.as_slice()).collect();
            let s = sys(&refs, nvl);
            let _ = run(&s, &format!("2.{minor}.0"), &[("NCCL_IB_HCA", "^=mlx5_1:1")]);
        }
    }
}
