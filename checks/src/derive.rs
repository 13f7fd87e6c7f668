//! Conclusions several checks share, derived from the Node: the IOMMU mode, whether the
//! peer-memory and dma-buf paths exist, the NVIDIA driver version. Pure functions.

use crate::model::{Fact, Flavor, Node, PciDevice};
use crate::parse;
use crate::report::Evidence;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuMode {
    Off,
    Passthrough,
    Translated,
    Unknown,
}

impl IommuMode {
    pub fn as_str(self) -> &'static str {
        match self {
            IommuMode::Off => "off",
            IommuMode::Passthrough => "passthrough",
            IommuMode::Translated => "translated",
            IommuMode::Unknown => "unknown",
        }
    }
}

/// What the kernel command line says about the IOMMU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdlineIommu {
    Off,
    Passthrough,
    Translated,
    Silent,
}

pub fn cmdline_iommu(args: &[String], arm: bool) -> (CmdlineIommu, Vec<String>) {
    let mut ev = Vec::new();
    let mut verdict = CmdlineIommu::Silent;
    for key in [
        "intel_iommu",
        "amd_iommu",
        "iommu",
        "iommu.passthrough",
        "iommu.strict",
    ] {
        if let Some(v) = parse::cmdline_value(args, key) {
            ev.push(format!("{key}={v}"));
        }
    }
    let v = |k| parse::cmdline_value(args, k);
    if matches!(v("intel_iommu"), Some(x) if x.split(',').any(|p| p == "off"))
        || matches!(v("amd_iommu"), Some(x) if x.split(',').any(|p| p == "off"))
    {
        verdict = CmdlineIommu::Off;
    }
    match v("iommu.passthrough") {
        Some("1") | Some("y") | Some("on") => verdict = CmdlineIommu::Passthrough,
        Some("0") | Some("n") | Some("off") => verdict = CmdlineIommu::Translated,
        _ => {}
    }
    // `iommu=pt` is parsed only by x86 (arch/x86/kernel/pci-dma.c); arm64 ignores it.
    if !arm && matches!(v("iommu"), Some(x) if x.split(',').any(|p| p == "pt")) {
        verdict = CmdlineIommu::Passthrough;
    }
    if verdict == CmdlineIommu::Silent
        && matches!(v("intel_iommu"), Some(x) if x.split(',').any(|p| p == "on"))
    {
        verdict = CmdlineIommu::Translated;
    }
    (verdict, ev)
}

pub fn is_arm(node: &Node) -> bool {
    matches!(
        node.arch.get().map(String::as_str),
        Some("aarch64") | Some("arm64")
    ) || node.cpu_vendor.get() == Some(&crate::model::CpuVendor::Arm)
}

/// The evidence line [`iommu_mode`] adds when the kernel command line asks for a translating
/// IOMMU (`intel_iommu=on`, `iommu.passthrough=0`) while `/sys/class/iommu` holds no unit.
pub const CONTRADICTION: &str =
    "contradicting evidence: the command line asks for a translating iommu, but no iommu unit is registered";

/// Resolve the IOMMU into off / passthrough / translated / unknown, with the evidence.
///
/// Order: registered IOMMU units (`/sys/class/iommu`), then the default-domain type of the groups
/// holding GPUs and NICs (`/sys/kernel/iommu_groups/*/type`), then the kernel command line.
pub fn iommu_mode(node: &Node) -> (IommuMode, Vec<String>) {
    let arm = is_arm(node);
    let (cmd, mut ev) = match node.cmdline.get() {
        Some(args) => cmdline_iommu(args, arm),
        None => (CmdlineIommu::Silent, vec![]),
    };
    ev.iter_mut()
        .for_each(|e| *e = format!("/proc/cmdline: {e}"));
    if !arm
        && node
            .cmdline
            .get()
            .is_some_and(|a| parse::cmdline_value(a, "iommu") == Some("pt"))
    {
        // fine on x86
    } else if arm
        && node
            .cmdline
            .get()
            .is_some_and(|a| parse::cmdline_value(a, "iommu") == Some("pt"))
    {
        ev.push("iommu=pt is ignored on arm64 (x86-only parameter)".into());
    }
    let from_cmdline = |ev: Vec<String>| -> (IommuMode, Vec<String>) {
        let mode = match cmd {
            CmdlineIommu::Off => IommuMode::Off,
            CmdlineIommu::Passthrough => IommuMode::Passthrough,
            CmdlineIommu::Translated => IommuMode::Translated,
            CmdlineIommu::Silent => IommuMode::Unknown,
        };
        (mode, ev)
    };
    let classes = match &node.iommu.classes {
        Fact::Known { value, .. } => value,
        Fact::Absent { reason, .. } => {
            ev.push(format!("/sys/class/iommu: {reason}"));
            return from_cmdline(ev);
        }
    };
    if classes.is_empty() {
        ev.push("/sys/class/iommu: empty (no IOMMU unit registered)".into());
        if cmd == CmdlineIommu::Translated {
            // The command line asks for translation and no unit registered: the evidence
            // contradicts itself (VT-d off in the BIOS, or a damaged capture). Not "off".
            ev.push(CONTRADICTION.into());
            return (IommuMode::Unknown, ev);
        }
        // Groups with a translating or identity domain exist only behind a registered unit: an
        // empty class beside them is damage, not "off" (the sweep of 2026-12-07: the AMD
        // node's ivhd0 link removed turned its translated iommu into a pass).
        let domains: Vec<String> = node
            .iommu
            .groups
            .get()
            .map(|gs| {
                gs.iter()
                    .filter_map(|g| g.kind.get())
                    .filter(|t| matches!(t.as_str(), "DMA" | "DMA-FQ" | "identity"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if !domains.is_empty() {
            ev.push(format!(
                "/sys/kernel/iommu_groups: {} group(s) with a {} domain, which only a registered iommu unit gives",
                domains.len(),
                domains[0]
            ));
            return (IommuMode::Unknown, ev);
        }
        if let Some(Some(line)) = node.iommu.default_domain.get() {
            ev.push(format!(
                "kernel log: {line} (no unit is attached, so no translation)"
            ));
        }
        return (IommuMode::Off, ev);
    }
    ev.push(format!("/sys/class/iommu: {}", classes.join(" ")));
    let groups = match &node.iommu.groups {
        Fact::Known { value, .. } => value,
        Fact::Absent { reason, .. } => {
            ev.push(format!("/sys/kernel/iommu_groups: {reason}"));
            return from_cmdline(ev);
        }
    };
    // Prefer the groups that hold GPUs and NICs; fall back to every group.
    let interesting: Vec<String> = gpus(node)
        .iter()
        .map(|d| d.bdf.clone())
        .chain(rdma_pci(node))
        .collect();
    let mut relevant: Vec<_> = groups
        .iter()
        .filter(|g| g.devices.iter().any(|d| interesting.contains(d)))
        .collect();
    if relevant.is_empty() {
        relevant = groups.iter().collect();
    }
    let mut types: Vec<String> = relevant
        .iter()
        .filter_map(|g| g.kind.get().cloned())
        .collect();
    types.sort();
    types.dedup();
    if types.is_empty() {
        ev.push("iommu group types unreadable (kernel < 5.11?)".into());
        return from_cmdline(ev);
    }
    ev.push(format!(
        "/sys/kernel/iommu_groups/*/type: {}",
        types.join(", ")
    ));
    // Some groups' types read and others not: a kernel that has the file has it for every
    // group, so the rest is damage, and what it hides may be the one translating domain (the
    // review of 2026-12-07: the GPUs' groups unreadable, the NICs' identity, read as
    // passthrough).
    let unread: Vec<&str> = relevant
        .iter()
        .filter(|g| g.kind.get().is_none())
        .map(|g| g.id.as_str())
        .collect();
    if types.iter().any(|t| t == "DMA" || t == "DMA-FQ") {
        (IommuMode::Translated, ev)
    } else if !unread.is_empty() {
        ev.push(format!(
            "/sys/kernel/iommu_groups: the type of group(s) {} cannot be read, so whether their dma is translated is unknown",
            unread.join(", ")
        ));
        (IommuMode::Unknown, ev)
    } else if types.iter().all(|t| t == "identity") {
        (IommuMode::Passthrough, ev)
    } else {
        (IommuMode::Unknown, ev)
    }
}

/// NVIDIA GPUs on the PCI bus.
pub fn gpus(node: &Node) -> Vec<&PciDevice> {
    node.pci
        .get()
        .map(|p| p.iter().filter(|d| d.is_nvidia_gpu()).collect())
        .unwrap_or_default()
}

/// Why this GPU's recorded live facts (NVML's, then CUDA's) were set aside as damaged (listed
/// more than once in `gdrdoctor/live.json`); `None` when they were not.
pub fn live_damage(node: &Node, bdf: &str) -> Option<String> {
    let nvml = node.live.nvml.get().and_then(|n| n.damaged.get(bdf));
    let cuda = node.live.cuda.get().and_then(|c| c.damaged.get(bdf));
    nvml.or(cuda).cloned()
}

/// Why CUDA's answer (known) has no device for a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaGap {
    /// Left out on purpose (`not_asked`: its compute mode says a job may hold it).
    NotAsked(String),
    /// Hidden by `CUDA_VISIBLE_DEVICES` in the environment CUDA ran with (the value).
    Hidden(String),
    /// Its entries were damaged and set aside (the reason, `damaged: ...`).
    Damaged(String),
    /// Missing with nothing that says why (a stale or partial record, a GPU CUDA could not
    /// enumerate): the reason names where the answer was read.
    Unanswered(String),
}

/// Why CUDA's answer lacks the GPU at `bdf`; `None` when CUDA was not asked at all (the whole
/// fact is absent: the checks say that) or the GPU is there.
pub fn cuda_gap(node: &Node, bdf: &str) -> Option<CudaGap> {
    let c = node.live.cuda.get()?;
    if c.device(bdf).is_some() {
        return None;
    }
    if let Some(w) = c.not_asked.get(bdf) {
        return Some(CudaGap::NotAsked(w.clone()));
    }
    if let Some(w) = c.damaged.get(bdf) {
        return Some(CudaGap::Damaged(w.clone()));
    }
    if let Some(v) = node.env.get().and_then(|e| e.get("CUDA_VISIBLE_DEVICES")) {
        return Some(CudaGap::Hidden(v.clone()));
    }
    Some(CudaGap::Unanswered(
        if node.source == crate::model::SourceKind::Sysroot {
            "gdrdoctor/live.json has no CUDA answer for this gpu (no device entry, no recorded reason, no CUDA_VISIBLE_DEVICES in the snapshot's environment)".to_string()
        } else {
            format!(
                "{} has no answer for this gpu (cuda did not enumerate it, and no CUDA_VISIBLE_DEVICES hides it)",
                node.live.cuda.source()
            )
        },
    ))
}

/// PCI addresses behind the RDMA devices.
pub fn rdma_pci(node: &Node) -> Vec<String> {
    node.rdma
        .get()
        .map(|r| {
            r.iter()
                .filter_map(|d| d.pci_bdf.get().cloned().flatten())
                .collect()
        })
        .unwrap_or_default()
}

/// The NVIDIA driver's version and flavor, when the version file was read.
pub fn nvidia_driver(node: &Node) -> Option<(String, Flavor)> {
    node.nvidia
        .version_file
        .get()?
        .as_deref()
        .and_then(parse::nvidia_version)
}

/// Whether a path exists, as an answer with evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAnswer {
    /// `Some(true)` available, `Some(false)` not, `None` could not tell.
    pub available: Option<bool>,
    /// Why not (or why unknown), one line each; with `available: Some(true)`, what that
    /// answer assumes.
    pub reasons: Vec<String>,
    pub evidence: Vec<Evidence>,
}

/// NCCL's peer-memory test (`ncclIbGdrSupport`) as the newest NCCL runs it: any of three
/// files exists.
pub fn peermem_path(node: &Node) -> PathAnswer {
    peermem_path_for(node, None)
}

/// NCCL's peer-memory test as NCCL `version` runs it (`None`: the newest): the files that
/// version looks for ([`crate::nccl::Version::sees_peermem_module`]). A client that only a
/// newer NCCL would see (nvidia_peermem loaded, `/sys/kernel/mm/memory_peers/nv_mem` absent,
/// NCCL < 2.23) is no client for this one (ground truth K02).
pub fn peermem_path_for(node: &Node, version: Option<crate::nccl::Version>) -> PathAnswer {
    let pm = &node.peermem;
    let sees_nc = version.is_none_or(|v| v.sees_peermem_nc());
    let sees_module = version.is_none_or(|v| v.sees_peermem_module());
    let files = [
        (
            "/sys/kernel/mm/memory_peers/nv_mem/version",
            &pm.nv_mem_version,
            true,
        ),
        (
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
            &pm.nv_mem_nc_version,
            sees_nc,
        ),
        (
            "/sys/module/nvidia_peermem/version",
            &pm.nvidia_peermem_version,
            sees_module,
        ),
    ];
    let mut evidence = Vec::new();
    let mut unknown = Vec::new();
    let mut found = false;
    // Present, but not among the files this NCCL looks for.
    let mut unseen: Vec<&str> = Vec::new();
    for (path, fact, counts) in files {
        match fact {
            Fact::Known { value: Some(v), .. } if !counts => {
                unseen.push(path);
                evidence.push(Evidence {
                    source: path.into(),
                    observed: format!("present (version {v})"),
                    expected: version.map(|v| {
                        format!("not looked for by NCCL {v} (2.23 added /sys/module/nvidia_peermem/version, 2.22 nv_mem_nc)")
                    }),
                });
            }
            Fact::Absent { .. } if !counts => {}
            Fact::Known { value: Some(v), .. } => {
                found = true;
                evidence.push(Evidence {
                    source: path.into(),
                    observed: format!("present (version {v})"),
                    expected: None,
                });
            }
            Fact::Known { value: None, .. } => {
                evidence.push(Evidence {
                    source: path.into(),
                    observed: "absent".into(),
                    expected: None,
                });
            }
            Fact::Absent { reason, .. } => {
                unknown.push(format!("{path}: {reason}"));
                evidence.push(Evidence {
                    source: path.into(),
                    observed: format!("unknown ({reason})"),
                    expected: None,
                });
            }
        }
    }
    let looks = |v: crate::nccl::Version| {
        if v.sees_peermem_nc() {
            "/sys/kernel/mm/memory_peers/nv_mem or nv_mem_nc"
        } else {
            "/sys/kernel/mm/memory_peers/nv_mem"
        }
    };
    let older = |v: crate::nccl::Version| {
        format!(
            "NCCL {v} looks only for {} (2.23 added /sys/module/nvidia_peermem/version)",
            looks(v)
        )
    };
    if !found && unknown.is_empty() && !unseen.is_empty() {
        let why = version.map(older).unwrap_or_default();
        return PathAnswer {
            available: Some(false),
            reasons: vec![format!(
                "no peer-memory client that this NCCL sees: {} present, but {why}, and that is absent",
                unseen.join(" and ")
            )],
            evidence,
        };
    }
    // A captured /proc/modules (or a pasted whole lsmod) is the whole list of loaded modules,
    // and both peer-memory clients are loadable modules, never built in: where the files are not
    // in a capture, the list answers for them. A NCCL older than 2.23 needs the registry file,
    // which the list does not show.
    if !found && !unknown.is_empty() {
        // The module is shown loaded (its sysfs entry, or a pasted lsmod), the registry file an
        // older NCCL needs is not shown: MOFED's ib_core registers nvidia_peermem there, so it
        // is there wherever the module could load. Assumed, and said so.
        let listed = peer_module_loaded(node).filter(|(l, _)| !l.is_empty());
        if let Some(v) = version.filter(|v| !v.sees_peermem_module()) {
            let shown = if !unseen.is_empty() {
                Some(unseen.join(" and "))
            } else {
                listed
                    .as_ref()
                    .map(|(l, src)| format!("{} loaded ({src})", l.join(" and ")))
            };
            if let Some(shown) = shown {
                return PathAnswer {
                    available: Some(true),
                    reasons: vec![format!(
                        "peer memory: {shown}; NCCL {v} needs {}, assumed present (MOFED registers the module there; not shown)",
                        looks(v)
                    )],
                    evidence,
                };
            }
        }
        if let Some((loaded, src)) = peer_module_loaded(node) {
            evidence.push(Evidence {
                source: src.clone(),
                observed: if loaded.is_empty() {
                    "neither nvidia_peermem nor nv_peer_mem in the whole list of loaded modules"
                        .into()
                } else {
                    format!("{} loaded", loaded.join(" and "))
                },
                expected: None,
            });
            return if loaded.is_empty() {
                PathAnswer {
                    available: Some(false),
                    reasons: vec![format!("no peer-memory client: {src} (the whole list of loaded modules) has neither nvidia_peermem nor nv_peer_mem")],
                    evidence,
                }
            } else {
                PathAnswer {
                    available: Some(true),
                    reasons: vec![],
                    evidence,
                }
            };
        }
    }
    if found {
        PathAnswer {
            available: Some(true),
            reasons: vec![],
            evidence,
        }
    } else if unknown.is_empty() {
        PathAnswer {
            available: Some(false),
            reasons: vec!["no peer-memory client: nvidia_peermem is not loaded and no /sys/kernel/mm/memory_peers/nv_mem*".into()],
            evidence,
        }
    } else {
        PathAnswer {
            available: None,
            reasons: unknown,
            evidence,
        }
    }
}

/// Whether a module is loaded, from a readable `/proc/modules` (the whole list of loadable
/// modules): `Some((loaded, source))`. `None` when the list was not read. Built-in modules are
/// not in the list; use this only for modules that cannot be built in.
pub fn module_loaded(node: &Node, name: &str) -> Option<(bool, String)> {
    match &node.modules.proc_modules {
        Fact::Known { value, source } => Some((value.contains_key(name), source.clone())),
        Fact::Absent { .. } => None,
    }
}

/// The peer-memory modules (`nvidia_peermem`, `nv_peer_mem`) a readable `/proc/modules` lists.
pub fn peer_module_loaded(node: &Node) -> Option<(Vec<&'static str>, String)> {
    let (a, src) = module_loaded(node, "nvidia_peermem")?;
    let (b, _) = module_loaded(node, "nv_peer_mem")?;
    let mut v = Vec::new();
    if a {
        v.push("nvidia_peermem");
    }
    if b {
        v.push("nv_peer_mem");
    }
    Some((v, src))
}

/// The minimum kernel for `ibv_reg_dmabuf_mr` in uverbs (commonly cited 5.12; see ground truth §7).
pub const DMABUF_MIN_KERNEL: (u32, u32) = (5, 12);
/// Open kernel modules first shipped with R515.
pub const DMABUF_MIN_DRIVER: u32 = 515;

/// Whether the dma-buf path is possible from what a static read can tell: NVIDIA open kernel
/// modules >= 515 and kernel >= 5.12. The libibverbs symbol and the CUDA attribute are live facts.
pub fn dmabuf_path(node: &Node) -> PathAnswer {
    let mut blockers = Vec::new();
    let mut unknowns = Vec::new();
    let mut evidence = Vec::new();
    match &node.nvidia.version_file {
        Fact::Known {
            value: Some(text), ..
        } => match parse::nvidia_version(text) {
            Some((ver, flavor)) => {
                evidence.push(Evidence {
                    source: "/proc/driver/nvidia/version".into(),
                    observed: format!("{ver} ({})", flavor_name(flavor)),
                    expected: Some(format!("open kernel module >= {DMABUF_MIN_DRIVER}")),
                });
                if flavor != Flavor::Open {
                    blockers.push(format!("NVIDIA driver {ver} is the proprietary flavor; dma-buf export needs the open kernel modules"));
                } else if parse::driver_major(&ver).is_some_and(|m| m < DMABUF_MIN_DRIVER) {
                    blockers.push(format!(
                        "NVIDIA driver {ver} is older than {DMABUF_MIN_DRIVER}"
                    ));
                }
            }
            None => unknowns.push("/proc/driver/nvidia/version: unrecognised format".to_string()),
        },
        Fact::Known { value: None, .. } => {
            blockers.push("NVIDIA driver not loaded (/proc/driver/nvidia/version absent)".into());
            evidence.push(Evidence {
                source: "/proc/driver/nvidia/version".into(),
                observed: "absent".into(),
                expected: None,
            });
        }
        Fact::Absent { reason, .. } => {
            unknowns.push(format!("/proc/driver/nvidia/version: {reason}"))
        }
    }
    match &node.kernel_release {
        Fact::Known { value, source } => match parse::kernel_version(value) {
            Some((maj, min, _)) => {
                evidence.push(Evidence {
                    source: source.clone(),
                    observed: value.clone(),
                    expected: Some(format!(
                        ">= {}.{}",
                        DMABUF_MIN_KERNEL.0, DMABUF_MIN_KERNEL.1
                    )),
                });
                // NCCL itself reads no kernel version: it asks the NICs (`ibv_reg_dmabuf_mr`
                // with fd -1; only EOPNOTSUPP/EPROTONOSUPPORT mean no support). A recorded
                // probe that a NIC answered otherwise is a kernel that has it (RHEL 8's 4.18,
                // a MOFED backport), whatever its number.
                let nic_accepts = node.live.verbs.get().is_some_and(|v| {
                    v.has_reg_dmabuf_mr
                        && v.dmabuf_probe
                            .iter()
                            .any(|(_, e)| e.is_some_and(|e| e != 95 && e != 93))
                });
                if (maj, min) < DMABUF_MIN_KERNEL && nic_accepts {
                    evidence.push(Evidence {
                        source: "ibv_reg_dmabuf_mr(fd -1) probe".into(),
                        observed: format!(
                            "kernel {value} is older than {}.{}, but a NIC answered the probe with an error other than EOPNOTSUPP/EPROTONOSUPPORT: its uverbs has dma-buf registration (a backport)",
                            DMABUF_MIN_KERNEL.0, DMABUF_MIN_KERNEL.1
                        ),
                        expected: None,
                    });
                } else if (maj, min) < DMABUF_MIN_KERNEL {
                    blockers.push(format!(
                        "kernel {value} is older than {}.{} (no ibv_reg_dmabuf_mr in uverbs unless a MOFED backport adds it)",
                        DMABUF_MIN_KERNEL.0, DMABUF_MIN_KERNEL.1
                    ));
                }
            }
            None => unknowns.push(format!("kernel release {value:?} not recognised")),
        },
        Fact::Absent { reason, source } => unknowns.push(format!("{source}: {reason}")),
    }
    // A recorded answer that cannot be read is no answer: the path cannot be judged from the
    // files alone then (a snapshot's live.json damaged, say), rather than assumed possible.
    for (what, reason) in [
        ("CUDA's dma-buf attribute", node.live.cuda.reason()),
        ("the NICs' dma-buf probe", node.live.verbs.reason()),
    ] {
        if let Some(r) = reason.filter(|r| crate::model::is_damaged(r)) {
            unknowns.push(format!("{what}: {r}"));
        }
    }
    // Live facts, when a worker could ask the libraries (D01, D03).
    if let Some(c) = node.live.cuda.get() {
        if c.driver_version > 0 && c.driver_version < 11070 {
            blockers.push(format!(
                "CUDA driver {} is older than 11.7 (no dma-buf export)",
                c.driver_version
            ));
        }
        let gpus: Vec<_> = c.devices.iter().collect();
        if !gpus.is_empty() && gpus.iter().all(|d| d.dma_buf_supported == Some(0)) {
            blockers
                .push("CUDA reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=0 on every gpu".into());
        }
        // No device asked (all left out by their compute mode): no CUDA evidence.
        if !gpus.is_empty() {
            evidence.push(Evidence {
                source: node
                    .live
                    .cuda_evidence("cuDeviceGetAttribute(DMA_BUF_SUPPORTED)"),
                observed: gpus
                    .iter()
                    .map(|d| {
                        format!(
                            "{}={}",
                            d.bdf,
                            d.dma_buf_supported
                                .map(|v| v.to_string())
                                .unwrap_or_else(|| "?".into())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                expected: Some("1".into()),
            });
        }
    }
    if let Some(v) = node.live.verbs.get() {
        let refused: Vec<String> = v
            .dmabuf_probe
            .iter()
            .filter(|(_, e)| matches!(e, Some(95) | Some(93)))
            .map(|(d, e)| format!("{d} errno {}", e.unwrap_or(0)))
            .collect();
        if !v.dmabuf_probe.is_empty() && refused.len() == v.dmabuf_probe.len() {
            blockers.push(format!("every rdma device refuses dma-buf registration (NCCL's ibv_reg_dmabuf_mr probe: {})", refused.join(", ")));
        }
        if !v.has_reg_dmabuf_mr {
            blockers.push("libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34): NCCL's wrapper reports EOPNOTSUPP".into());
        }
        evidence.push(Evidence {
            source: "libibverbs.so.1".into(),
            observed: format!(
                "ibv_reg_dmabuf_mr {}",
                if v.has_reg_dmabuf_mr {
                    "present"
                } else {
                    "missing"
                }
            ),
            expected: Some("present".into()),
        });
    }
    if let Some(env) = node.env.get() {
        if env.get("NCCL_DMABUF_ENABLE").map(|v| v.trim()) == Some("0") {
            blockers
                .push("NCCL_DMABUF_ENABLE=0 in the environment turns dma-buf off for NCCL".into());
            evidence.push(Evidence {
                source: node.env.source().to_string(),
                observed: "NCCL_DMABUF_ENABLE=0".into(),
                expected: None,
            });
        }
    }
    let available = if !blockers.is_empty() {
        Some(false)
    } else if !unknowns.is_empty() {
        None
    } else {
        Some(true)
    };
    blockers.extend(unknowns);
    PathAnswer {
        available,
        reasons: blockers,
        evidence,
    }
}

pub fn flavor_name(f: Flavor) -> &'static str {
    match f {
        Flavor::Open => "open kernel module",
        Flavor::Proprietary => "proprietary kernel module",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LiveFacts;

    /// NCCL's peer-memory test by version (ground truth K02): nvidia_peermem loaded without
    /// MOFED's registry file is seen from 2.23 only; the registry file by every version;
    /// nv_mem_nc from 2.22; a module list without the files answers only for 2.23 and later.
    #[test]
    fn the_peer_memory_client_is_the_one_this_nccl_looks_for() {
        use crate::nccl::Version;
        let mut n = crate::testing::switch_pair();
        let at = |n: &Node, v: Option<Version>| peermem_path_for(n, v).available;
        // switch_pair: only /sys/module/nvidia_peermem/version.
        assert_eq!(at(&n, None), Some(true));
        assert_eq!(at(&n, Some(Version::new(2, 23, 4))), Some(true));
        assert_eq!(at(&n, Some(Version::new(2, 22, 3))), Some(false));
        let a = peermem_path_for(&n, Some(Version::new(2, 21, 5)));
        assert_eq!(a.available, Some(false), "{a:?}");
        assert!(
            a.reasons[0].contains(
                "NCCL 2.21.5 looks only for /sys/kernel/mm/memory_peers/nv_mem (2.23 added"
            ),
            "{a:?}"
        );
        // MOFED's registry file: every version sees it.
        n.peermem.nv_mem_version = Fact::known(Some("1.0".into()), "/sys");
        assert_eq!(at(&n, Some(Version::new(2, 12, 12))), Some(true));
        // nv_mem_nc alone: from 2.22.
        n.peermem.nv_mem_version = Fact::known(None, "/sys");
        n.peermem.nv_mem_nc_version = Fact::known(Some("1.0".into()), "/sys");
        assert_eq!(at(&n, Some(Version::new(2, 21, 5))), Some(false));
        assert_eq!(at(&n, Some(Version::new(2, 22, 3))), Some(true));
        // Only a whole module list saying nvidia_peermem is loaded (a pasted lsmod).
        n.peermem.nv_mem_version = Fact::absent("/sys", "not in the paste");
        n.peermem.nv_mem_nc_version = Fact::absent("/sys", "not in the paste");
        n.peermem.nvidia_peermem_version = Fact::absent("/sys", "not in the paste");
        n.modules.proc_modules = Fact::known(
            [(
                "nvidia_peermem".to_string(),
                crate::model::LoadedModule {
                    state: "Live".into(),
                    used_by: vec![],
                },
            )]
            .into_iter()
            .collect(),
            "lsmod",
        );
        assert_eq!(at(&n, Some(Version::new(2, 28, 9))), Some(true));
        let a = peermem_path_for(&n, Some(Version::new(2, 19, 3)));
        assert_eq!(a.available, Some(true), "{a:?}");
        assert!(a.reasons[0].contains("assumed present"), "{a:?}");
    }

    /// A snapshot whose live.json cannot be read: the dma-buf path is not judged possible from
    /// the driver and kernel alone (the NICs' refusal may be in the part that was lost).
    #[test]
    fn damaged_live_facts_leave_the_dmabuf_path_undecided() {
        let mut n = crate::testing::switch_pair();
        n.nvidia.version_file = Fact::known(
            Some("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04".into()),
            "/proc/driver/nvidia/version",
        );
        n.kernel_release = Fact::known("6.8.0-49-generic".into(), "/proc/sys/kernel/osrelease");
        n.live = LiveFacts::absent("not queried (--static)");
        assert_eq!(
            dmabuf_path(&n).available,
            Some(true),
            "{:?}",
            dmabuf_path(&n)
        );
        n.live = LiveFacts::damaged("/gdrdoctor/live.json: EOF while parsing");
        let a = dmabuf_path(&n);
        assert_eq!(a.available, None, "{a:?}");
        assert!(
            a.reasons.iter().any(|r| r.contains("EOF while parsing")),
            "{a:?}"
        );
    }

    /// A kernel older than 5.12 (RHEL 8's 4.18) whose NICs answered NCCL's dma-buf probe with
    /// EBADF (supported: only EOPNOTSUPP/EPROTONOSUPPORT mean no): the path is possible, as
    /// NCCL decides it; without the probe the version still blocks, and a probe that every NIC
    /// refused blocks too.
    #[test]
    fn an_old_kernel_whose_nics_take_dmabuf_is_no_blocker() {
        use crate::model::VerbsFacts;
        let mut n = crate::testing::switch_pair();
        n.nvidia.version_file = Fact::known(
            Some("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04".into()),
            "/proc/driver/nvidia/version",
        );
        n.kernel_release =
            Fact::known("4.18.0-513.el8.x86_64".into(), "/proc/sys/kernel/osrelease");
        n.live = LiveFacts::absent("not queried (--static)");
        assert_eq!(dmabuf_path(&n).available, Some(false));
        let probe = |errno: i32| {
            Fact::known(
                VerbsFacts {
                    has_reg_dmabuf_mr: true,
                    devices: vec!["mlx5_0".into()],
                    list_errno: None,
                    dmabuf_probe: [("mlx5_0".to_string(), Some(errno))].into_iter().collect(),
                },
                "libibverbs.so.1",
            )
        };
        n.live.verbs = probe(9);
        let a = dmabuf_path(&n);
        assert_eq!(a.available, Some(true), "{a:?}");
        assert!(
            a.evidence.iter().any(|e| e.observed.contains("backport")),
            "{a:?}"
        );
        n.live.verbs = probe(95);
        assert_eq!(dmabuf_path(&n).available, Some(false));
    }
}
