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

use crate::derive::{self, PathAnswer};
use crate::model::{CpuVendor, Fact, Node, RdmaDevice};
use crate::nccl::env::Level as EnvLevel;
use crate::nccl::rule::{self, Config, Decision, Support, System, Verdict};
use crate::nccl::{self, PathKind};
use crate::report::GdrPair;
use crate::topo::{self, Endpoint, PciIndex};

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

/// The threshold of `cfg`, as a [`Level`].
pub fn level_of(cfg: &Config) -> Level {
    let (lvl, name, source) = rule::threshold(&cfg.env, cfg.rules.version);
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
    /// The node's context. Within a [`MemoScope`] (one report) the costly part, every GPU's
    /// and NIC's place in NCCL's tree, is computed once and copied to each check (the checks
    /// of an 8-GPU report asked for it 13 times: 2.4 M of its 33 M instructions).
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
            level: level_of(&placed.config),
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
        Placed {
            gpus,
            nics,
            peermem: derive::peermem_path_for(node, Some(config.rules.version)),
            config,
            dmabuf: derive::dmabuf_path(node),
        }
    }
}

/// Compute capability from a GPU's name when CUDA did not say: the chip code name of a pci.ids
/// name (`NVIDIA GH100 [H200 SXM 141GB]`), else the product name `nvidia-smi -q` prints
/// (`NVIDIA A100-SXM4-80GB`, `Tesla V100-SXM2-32GB`). A heuristic, and said so where used.
pub fn cc_from_model(name: &str) -> Option<(i32, i32)> {
    cc_from_name(name).or_else(|| cc_from_product(name))
}

/// `nvidia-smi -q` product names (NVIDIA's CUDA GPUs table: developer.nvidia.com/cuda-gpus).
fn cc_from_product(name: &str) -> Option<(i32, i32)> {
    let n = name.to_ascii_uppercase();
    let has = |w: &str| {
        n.split(|c: char| !c.is_ascii_alphanumeric()).any(|t| {
            t == w
                || (t.starts_with(w)
                    && t[w.len()..]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == 'G' || c == 'B'))
        })
    };
    let table: &[(&[&str], (i32, i32))] = &[
        (&["GB300", "B300"], (10, 3)),
        (&["GB200", "B200", "B100"], (10, 0)),
        (&["GH200", "H200", "H100", "H800", "H20"], (9, 0)),
        (&["L40S", "L40", "L4", "L20", "ADA"], (8, 9)),
        (&["A100", "A800", "A30"], (8, 0)),
        (
            &["A40", "A10", "A16", "A2", "A6000", "A5000", "A4000"],
            (8, 6),
        ),
        (&["V100", "TITAN V"], (7, 0)),
        (&["T4", "RTX6000", "RTX8000"], (7, 5)),
        (&["P100"], (6, 0)),
        (&["P40", "P4"], (6, 1)),
        (&["K80"], (3, 7)),
    ];
    for (words, cc) in table {
        if words.iter().any(|w| has(w)) {
            return Some(*cc);
        }
    }
    // GeForce / RTX by generation: RTX 50xx 12.0, 40xx 8.9, 30xx 8.6, 20xx 7.5, GTX 10xx 6.1.
    let num = n
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|t| t.len() == 4 && t.chars().all(|c| c.is_ascii_digit()))?;
    if !(n.contains("RTX") || n.contains("GTX")) {
        return None;
    }
    match &num[..2] {
        "50" => Some((12, 0)),
        "40" => Some((8, 9)),
        "30" => Some((8, 6)),
        "20" => Some((7, 5)),
        "10" => Some((6, 1)),
        _ => None,
    }
}

/// A GPU that reaches its Grace CPU over NVLink-C2C, by its name (GH200, GB200, GB300).
pub fn grace_model(name: &str) -> bool {
    ["GH200", "GB200", "GB300"].iter().any(|m| name.contains(m))
}

/// The chip code name in a pci.ids name (`GH100` Hopper 9.0, `GA100` 8.0, `GV100` 7.0, ...).
fn cc_from_name(name: &str) -> Option<(i32, i32)> {
    let chip = name.split_whitespace().find(|w| {
        w.len() >= 4
            && w.chars().take(2).all(|c| c.is_ascii_uppercase())
            && w.chars().nth(2).is_some_and(|c| c.is_ascii_digit())
    })?;
    match &chip[..2] {
        "GK" => Some((3, 5)),
        "GM" => Some((5, 0)),
        "GP" => Some((6, 0)),
        "GV" => Some((7, 0)),
        "TU" => Some((7, 5)),
        "GA" if chip.starts_with("GA100") => Some((8, 0)),
        "GA" => Some((8, 6)),
        "AD" => Some((8, 9)),
        "GH" => Some((9, 0)),
        "GB" if chip.starts_with("GB1") => Some((10, 0)),
        "GB" => Some((12, 0)),
        _ => None,
    }
}

/// GH200 module device ids (pci.ids: `2342 GH100 [GH200 120GB / 480GB]`, `2348 GH100 [GH200
/// 144G HBM3e]`): GPUs that reach their Grace CPU over NVLink-C2C.
const C2C_DEVICE_IDS: [u16; 2] = [0x2342, 0x2348];

fn c2c_of(node: &Node, bdf: &str, idx: &PciIndex<'_>) -> (Option<bool>, String) {
    let x86 = matches!(node.arch.get().map(String::as_str), Some("x86_64"))
        || matches!(
            node.cpu_vendor.get(),
            Some(CpuVendor::Intel) | Some(CpuVendor::Amd)
        );
    if x86 {
        return (Some(false), "x86 CPU: no NVLink-C2C to the CPU".to_string());
    }
    let dev = idx.get(bdf);
    let name = dev.map(crate::names::device_name).unwrap_or_default();
    let grace_model = dev
        .and_then(|d| d.device_id.get().copied())
        .is_some_and(|id| C2C_DEVICE_IDS.contains(&id))
        || grace_model(&name);
    if grace_model {
        return (
            Some(true),
            format!("{name} is a Grace superchip GPU (by its PCI device id: heuristic)"),
        );
    }
    if derive::is_arm(node) {
        (
            None,
            format!("{name} on an Arm CPU: NVLink-C2C attachment not known"),
        )
    } else {
        (Some(false), format!("{name} is not a Grace superchip GPU"))
    }
}

/// The rule's view of the node.
pub fn system(node: &Node, cx: &Context<'_>) -> System {
    let cuda = node.live.cuda.get();
    let cuda_dev = |bdf: &str| cuda.and_then(|c| c.devices.iter().find(|d| d.bdf == bdf));
    let gpus: Vec<rule::Gpu> = cx
        .gpus
        .iter()
        .map(|g| {
            let (cc, cc_source) = match cuda_dev(&g.bdf) {
                Some(d) => (
                    Some((d.cc_major, d.cc_minor)),
                    "CUDA compute capability".to_string(),
                ),
                None => {
                    let name = cx
                        .index
                        .get(&g.bdf)
                        .map(crate::names::device_name)
                        .unwrap_or_default();
                    // NVML knows it without CUDA (a GPU CUDA was not started on).
                    let nvml_cc = node.live.nvml.get().and_then(|n| {
                        n.gpus
                            .iter()
                            .find(|x| x.bdf == g.bdf)
                            .and_then(|x| Some((x.cc_major?, x.cc_minor?)))
                    });
                    if let Some(cc) = nvml_cc {
                        (
                            Some(cc),
                            "NVML compute capability (nvmlDeviceGetCudaComputeCapability)"
                                .to_string(),
                        )
                    } else {
                        match cc_from_model(&name) {
                            Some(cc) => (
                                Some(cc),
                                format!("GPU model {name} (CUDA not queried: heuristic)"),
                            ),
                            None => (None, format!("unknown for {name}")),
                        }
                    }
                }
            };
            let (c2c, c2c_source) = c2c_of(node, &g.bdf, &cx.index);
            rule::Gpu {
                id: g.bdf.clone(),
                cc,
                cc_source,
                c2c,
                c2c_source,
            }
        })
        .collect();
    let nics: Vec<rule::Nic> = cx
        .nics
        .iter()
        .map(|(d, _)| rule::Nic {
            name: d.name.clone(),
            ports: d.ports.get().map(|ps| {
                ps.iter()
                    .map(|p| (p.port, p.state_name() == Some("ACTIVE")))
                    .collect()
            }),
        })
        .collect();
    let mut paths = Vec::new();
    let mut smi = Vec::new();
    for g in &cx.gpus {
        let (mut pr, mut sr) = (Vec::new(), Vec::new());
        for (_, ep) in &cx.nics {
            match ep {
                Some(n) => {
                    let p = topo::path(g, n);
                    pr.push(Some(PathKind::from_pcie(p.nccl)));
                    sr.push(Some(p.smi.as_str().to_string()));
                }
                None => {
                    pr.push(None);
                    sr.push(None);
                }
            }
        }
        paths.push(pr);
        smi.push(sr);
    }
    let gpu_paths = cx
        .gpus
        .iter()
        .map(|a| {
            cx.gpus
                .iter()
                .map(|b| Some(PathKind::from_pcie(topo::path(a, b).nccl)))
                .collect()
        })
        .collect();
    // NVLink: NVML when it was queried, else the NVSwitches of an HGX board on the PCI bus.
    let ng = cx.gpus.len();
    let mut nvlink = vec![vec![None; ng]; ng];
    let nvml_gpus: Vec<&str> = node
        .live
        .nvml
        .get()
        .map(|n| n.gpus.iter().map(|g| g.bdf.as_str()).collect())
        .unwrap_or_default();
    let switches = crate::p2p::nvswitches(node);
    let nvlink_source = if !nvml_gpus.is_empty() {
        "NVML NVLink state".to_string()
    } else if switches > 0 {
        format!(
            "assumed from {switches} NVSwitch(es) on the PCI bus (NVML not queried: run `gdrdoctor check` for the live links)"
        )
    } else {
        format!(
            "not known: NVML not queried ({})",
            node.live.nvml.reason().unwrap_or("no NVLink facts")
        )
    };
    let pairs = if !nvml_gpus.is_empty() {
        crate::p2p::pairs(node)
    } else {
        Vec::new()
    };
    // Indexed once: the loops below are per GPU pair (a 512-GPU node has 262,144).
    let nvml_set: std::collections::HashSet<&str> = nvml_gpus.iter().copied().collect();
    let links: std::collections::HashMap<(&str, &str), usize> = pairs
        .iter()
        .flat_map(|p| {
            let n = p.nvlinks();
            [
                ((p.a.as_str(), p.b.as_str()), n),
                ((p.b.as_str(), p.a.as_str()), n),
            ]
        })
        .collect();
    for (a, ga) in cx.gpus.iter().enumerate() {
        for (b, gb) in cx.gpus.iter().enumerate() {
            if a == b {
                continue;
            }
            nvlink[a][b] =
                if nvml_set.contains(ga.bdf.as_str()) && nvml_set.contains(gb.bdf.as_str()) {
                    let n = links
                        .get(&(ga.bdf.as_str(), gb.bdf.as_str()))
                        .copied()
                        .unwrap_or(0);
                    Some(n > 0)
                } else if switches > 0 {
                    Some(true)
                } else {
                    None
                };
        }
    }
    let support = cx
        .gpus
        .iter()
        .map(|g| {
            let dev = cuda_dev(&g.bdf);
            cx.nics
                .iter()
                .map(|(nic, _)| support(node, cx, dev, nic))
                .collect()
        })
        .collect();
    System {
        gpus,
        nics,
        paths,
        path_hint: String::new(),
        smi,
        nvlink,
        nvlink_source,
        gpu_paths,
        support,
        amd_two_gpus: node.cpu_vendor.get() == Some(&CpuVendor::Amd) && ng <= 2,
    }
}

/// Whether NCCL can register this GPU's memory (`cuda_dev`: what CUDA says about the GPU) with
/// this NIC, from the node's facts.
fn support(
    node: &Node,
    cx: &Context<'_>,
    cuda_dev: Option<&crate::model::CudaDevice>,
    nic: &RdmaDevice,
) -> Support {
    let mut s = Support {
        peermem: cx.peermem.available,
        ..Default::default()
    };
    if cx.peermem.available == Some(true) {
        s.assumptions.extend(cx.peermem.reasons.iter().cloned());
    }
    let probe = node
        .live
        .verbs
        .get()
        .and_then(|v| v.dmabuf_probe.get(&nic.name).copied().flatten());
    s.dmabuf = cx.dmabuf.available;
    // Live facts recorded but unreadable (a snapshot's live.json damaged): what they would
    // have said is not assumed (a GPU_DIRECT_RDMA_SUPPORTED=0 or an unlisted NIC may be in
    // the part that was lost).
    for (what, reason) in [
        (
            "CUDA's GPU_DIRECT_RDMA_SUPPORTED for the gpu",
            node.live.cuda.reason(),
        ),
        ("whether libibverbs lists the NIC", node.live.verbs.reason()),
    ] {
        if let Some(r) = reason.filter(|r| crate::model::is_damaged(r)) {
            s.damaged.push(format!("cannot tell {what}: {r}"));
        }
    }
    // CUDA asked and refusing to start (the fabric manager down, a GPU fallen off): no attribute
    // to assume, and NCCL cannot start either. (Under --host-root the library is the
    // container's, which may lack the devices: that stays an assumption.)
    if let Some(r) = node
        .live
        .cuda
        .reason()
        .filter(|r| r.starts_with("cuInit failed"))
    {
        if node.source != crate::model::SourceKind::HostRoot {
            s.damaged.push(format!(
                "cannot tell CUDA's GPU_DIRECT_RDMA_SUPPORTED for the gpu: {r} (CUDA cannot start here, and neither can NCCL)"
            ));
        }
    }
    // NCCL opens NICs through libibverbs: a NIC it cannot list is not used at all, whatever
    // sysfs shows (live verbs facts; ncclIbInit lists devices with ibv_get_device_list).
    if let Some(v) = node.live.verbs.get() {
        let unlisted = match v.list_errno {
            Some(e) => Some(format!(
                "libibverbs cannot list rdma devices (ibv_get_device_list errno {e}{}): NCCL finds no IB device and falls back to sockets, so no GDR",
                if e == 38 {
                    ": no kernel RDMA support, ib_uverbs not loaded or /sys/class/infiniband_verbs not visible (in a container)"
                } else {
                    ""
                }
            )),
            None if !v.devices.contains(&nic.name) => Some(format!(
                "libibverbs does not list {} (no user-space provider for it, or /dev/infiniband not visible): NCCL does not use it",
                nic.name
            )),
            None => None,
        };
        if let Some(why) = unlisted {
            s.peermem = Some(false);
            s.dmabuf = Some(false);
            s.nic_off = why;
            return s;
        }
    }
    if cx.peermem.available == Some(false) {
        s.peermem_off = cx.peermem.reasons.join("; ");
    }
    s.nic_off = format!(
        "NIC-level GDR off (NCCL: \"GPU Direct RDMA Disabled for HCA\"): {}, and no dma-buf path: {}",
        if s.peermem_off.is_empty() {
            "no peer-memory client"
        } else {
            s.peermem_off.as_str()
        },
        cx.dmabuf.reasons.join("; ")
    );
    s.unknown = vec![format!(
        "cannot tell whether the NIC supports GDR: {}",
        cx.peermem
            .reasons
            .iter()
            .chain(cx.dmabuf.reasons.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")
    )];
    // NCCL's per-device dma-buf probe (D02) and the GPU's own dma-buf attribute (D03).
    if s.dmabuf == Some(true) {
        let gpu_no = cuda_dev.is_some_and(|d| d.dma_buf_supported == Some(0));
        let nic_no = matches!(probe, Some(95) | Some(93));
        if gpu_no || nic_no {
            s.dmabuf = Some(false);
            s.nic_off = if nic_no {
                format!(
                    "dma-buf refused by {} (ibv_reg_dmabuf_mr probe errno {}) and no peer-memory client",
                    nic.name,
                    probe.unwrap_or(0)
                )
            } else {
                "CUDA reports DMA_BUF_SUPPORTED=0 on this gpu and there is no peer-memory client"
                    .into()
            };
        }
        if cuda_dev.is_none() {
            s.assumptions.push(
                "dma-buf: CUDA DMA_BUF_SUPPORTED on this gpu (live fact, not known here)".into(),
            );
        }
        if probe.is_none() {
            s.assumptions.push(format!(
                "dma-buf: NCCL's ibv_reg_dmabuf_mr probe on {} (live fact, not known here)",
                nic.name
            ));
        }
    }
    // (4) GPU support: a CUDA attribute, live only.
    s.gpu_off =
        "CUDA reports GPU_DIRECT_RDMA_SUPPORTED=0 for this gpu: NCCL turns GDR off for it".into();
    match cuda_dev.and_then(|d| d.gpu_direct_rdma_supported) {
        Some(0) => s.gpu = Some(false),
        Some(_) => s.gpu = Some(true),
        None if s.damaged.is_empty() => s
            .assumptions
            .push("gpu: CUDA GPU_DIRECT_RDMA_SUPPORTED=1 (live fact, not known here)".into()),
        None => {}
    }
    s
}

/// The context, the rule's inputs, and NCCL's decision for the node.
pub fn decision(node: &Node) -> (Context<'_>, System, Decision) {
    let cx = Context::new(node);
    let sys = system(node, &cx);
    let d = rule::decide(&sys, &cx.config);
    (cx, sys, d)
}

/// NCCL's decision for a node and the report's pairs, as [`decision`] and [`verdicts`] compute
/// them: computed once for all the checks of one report while a [`MemoScope`] for the node is
/// open ([`shared`]), else each time.
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

/// A node's memo: its decision and its placed endpoints, each computed at the first ask.
#[derive(Default)]
struct Memo {
    shared: std::sync::OnceLock<std::sync::Arc<Shared>>,
    placed: std::sync::OnceLock<std::sync::Arc<Placed>>,
}

type Slot = std::sync::Arc<Memo>;

/// The open scopes: (node address, scopes open for it, its slot). A node's address names it
/// only while it is borrowed, which each [`MemoScope`] is for as long as it lives; the entry
/// goes with the last one.
static MEMO: std::sync::Mutex<Vec<(usize, usize, Slot)>> = std::sync::Mutex::new(Vec::new());

fn memo() -> std::sync::MutexGuard<'static, Vec<(usize, usize, Slot)>> {
    MEMO.lock().unwrap_or_else(|p| p.into_inner())
}

/// While alive, [`shared`] computes the node's decision once (the checks of one report ask
/// for it four times). It borrows the node, so the node cannot change or move under it. Only
/// this crate opens one (`build_report`, `checks::run`), and never forgets it: a scope that
/// is not dropped would leave its entry behind for another node at the same address.
pub(crate) struct MemoScope<'a> {
    key: usize,
    _node: std::marker::PhantomData<&'a Node>,
}

pub(crate) fn memo_scope(node: &Node) -> MemoScope<'_> {
    let key = node as *const Node as usize;
    let mut m = memo();
    match m.iter_mut().find(|e| e.0 == key) {
        Some(e) => e.1 += 1,
        None => m.push((key, 1, Slot::default())),
    }
    MemoScope {
        key,
        _node: std::marker::PhantomData,
    }
}

impl Drop for MemoScope<'_> {
    fn drop(&mut self) {
        let mut m = memo();
        if let Some(i) = m.iter().position(|e| e.0 == self.key) {
            m[i].1 -= 1;
            if m[i].1 == 0 {
                m.swap_remove(i);
            }
        }
    }
}

/// The node's decision and pairs: the one of its open [`MemoScope`], else computed now.
pub fn shared(node: &Node) -> std::sync::Arc<Shared> {
    memoized(node, |m| &m.shared, Shared::compute)
}

/// The node's placed endpoints: the ones of its open [`MemoScope`], else computed now.
fn placed(node: &Node) -> std::sync::Arc<Placed> {
    memoized(node, |m| &m.placed, Placed::compute)
}

/// `compute(node)` kept in `cell` of the node's memo while a scope for it is open, else
/// computed each time.
fn memoized<T>(
    node: &Node,
    cell: fn(&Memo) -> &std::sync::OnceLock<std::sync::Arc<T>>,
    compute: fn(&Node) -> T,
) -> std::sync::Arc<T> {
    let key = node as *const Node as usize;
    let slot = memo().iter().find(|e| e.0 == key).map(|e| e.2.clone());
    match slot {
        Some(s) => cell(&s)
            .get_or_init(|| std::sync::Arc::new(compute(node)))
            .clone(),
        None => std::sync::Arc::new(compute(node)),
    }
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

    #[test]
    fn compute_capability_from_the_model_name() {
        assert_eq!(cc_from_name("NVIDIA GH100 [H200 SXM 141GB]"), Some((9, 0)));
        assert_eq!(cc_from_name("NVIDIA GA100 [A100 SXM4 80GB]"), Some((8, 0)));
        assert_eq!(
            cc_from_name("NVIDIA GV100GL [Tesla V100 SXM2 32GB]"),
            Some((7, 0))
        );
        assert_eq!(cc_from_name("NVIDIA TU104GL [Tesla T4]"), Some((7, 5)));
        assert_eq!(cc_from_name("NVIDIA AD102GL [L40S]"), Some((8, 9)));
        assert_eq!(cc_from_name("10de:9999"), None);
    }

    #[test]
    fn compute_capability_from_cuda_then_nvml_then_the_name() {
        use crate::model::{CudaDevice, CudaFacts, NvmlFacts, NvmlGpu};
        use crate::testing::*;
        let mut n = switch_pair();
        let cc = |n: &Node| {
            let cx = Context::new(n);
            let s = system(n, &cx);
            (s.gpus[0].cc, s.gpus[0].cc_source.clone())
        };
        assert!(cc(&n).1.contains("heuristic"), "{:?}", cc(&n));
        // NVML knows it without CUDA (a GPU CUDA was not started on).
        n.live.nvml = known(NvmlFacts {
            gpus: vec![NvmlGpu {
                bdf: "0000:18:00.0".into(),
                cc_major: Some(9),
                cc_minor: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(
            cc(&n),
            (
                Some((9, 0)),
                "NVML compute capability (nvmlDeviceGetCudaComputeCapability)".to_string()
            )
        );
        // CUDA's own answer first.
        n.live.cuda = known(CudaFacts {
            devices: vec![CudaDevice {
                bdf: "0000:18:00.0".into(),
                cc_major: 9,
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(cc(&n).1, "CUDA compute capability");
    }

    #[test]
    fn compute_capability_from_nvidia_smi_product_names() {
        for (name, cc) in [
            ("NVIDIA H100 80GB HBM3", Some((9, 0))),
            ("NVIDIA A100-SXM4-80GB", Some((8, 0))),
            ("NVIDIA A800-SXM4-80GB", Some((8, 0))),
            ("NVIDIA A10", Some((8, 6))),
            ("Tesla V100-SXM2-32GB", Some((7, 0))),
            ("Tesla T4", Some((7, 5))),
            ("GeForce GTX 1080", Some((6, 1))),
            ("NVIDIA GeForce RTX 3090", Some((8, 6))),
            ("NVIDIA RTX 6000 Ada Generation", Some((8, 9))),
            ("NVIDIA L40S", Some((8, 9))),
            ("NVIDIA GH200 480GB", Some((9, 0))),
            ("NVIDIA B200", Some((10, 0))),
            ("Quadro K2200", None),
        ] {
            assert_eq!(cc_from_model(name), cc, "{name}");
        }
        assert!(grace_model("NVIDIA GH200 480GB") && !grace_model("NVIDIA H100 80GB HBM3"));
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
