//! NVML, loaded at run time by nvml-wrapper (no link-time dependency). A missing library or
//! driver is an error value, never a crash. Called inside the `live-nvml` worker, which sends
//! the parent what it needs to decide about CUDA ([`Early`]) before the per-GPU queries.

use gdrdoctor_checks::model::{GpuFabric, NvLink, NvmlFacts, NvmlGpu, NvmlPair, RemappedRows};
use nvml_wrapper::enum_wrappers::device::{
    ComputeMode, P2pCapabilitiesIndex, P2pStatus, TopologyLevel,
};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

/// The error text of an NVML failure, with libloading's source chain (its Display alone is
/// only "a libloading error occurred").
fn err_text(e: &nvml_wrapper::error::NvmlError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

/// The soname of NVML.
pub const LIB: &str = "libnvidia-ml.so.1";

/// Load NVML (by soname, or from the test-only `GDRDOCTOR_LIB_DIR`) and call `nvmlInit_v2`.
pub fn open() -> Result<Nvml, String> {
    let lib = crate::live::stand_in::library(LIB);
    Nvml::builder()
        .lib_path(std::ffi::OsStr::new(&lib))
        .init()
        .map_err(|e| format!("{lib}: nvmlInit failed: {}", err_text(&e)))
}

/// What the parent needs from NVML before it decides whether to start CUDA (the CUDA cache's
/// key and the compute modes), sent ahead of the slower queries (see [`EARLY_PREFIX`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Early {
    pub driver_version: Option<String>,
    pub gpus: Vec<EarlyGpu>,
    /// NVML could not be started (the parent then decides about CUDA without waiting for the
    /// rest of the worker).
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyGpu {
    /// PCI address, or `index N` when NVML could not say.
    pub bdf: String,
    pub uuid: Option<String>,
    /// `default`, `exclusive-process`, `exclusive-thread`, `prohibited`; `None` when unknown.
    pub compute_mode: Option<String>,
}

/// The progress-line prefix of the early message: `GDRDOCTOR-PROGRESS nvml-early <Early JSON>`.
pub const EARLY_PREFIX: &str = "nvml-early ";

fn compute_mode_name(m: ComputeMode) -> &'static str {
    match m {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive-thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive-process",
    }
}

/// Every NVML fact the checks use.
pub fn facts() -> Result<NvmlFacts, String> {
    facts_with(&|_| {})
}

/// [`facts`], handing `early` the driver version, the GPUs' addresses, UUIDs and compute modes
/// as soon as NVML knows them (before the per-GPU queries, which run on one thread per GPU).
pub fn facts_with(early: &dyn Fn(&Early)) -> Result<NvmlFacts, String> {
    let nvml = match crate::sys::trace::timed("nvml.init", open) {
        Ok(n) => n,
        Err(why) => {
            early(&Early {
                error: Some(why.clone()),
                ..Default::default()
            });
            return Err(why);
        }
    };
    // The process ends right after the answer: skip nvmlShutdown (detaching every GPU costs
    // time and the kernel closes the handles anyway).
    let nvml = std::mem::ManuallyDrop::new(nvml);
    let nvml: &Nvml = &nvml;
    let sys = crate::sys::trace::span("nvml.system");
    let mut f = NvmlFacts {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        gpus: Vec::new(),
        pairs: Vec::new(),
        damaged: Default::default(),
    };
    let n = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            let why = format!("nvmlDeviceGetCount: {}", err_text(&e));
            early(&Early {
                error: Some(why.clone()),
                ..Default::default()
            });
            return Err(why);
        }
    };
    drop(sys);
    // First pass: handles, addresses, UUIDs, compute modes, one thread per GPU (a GPU's first
    // handle is where the driver attaches it, a few ms each: serial, it grew with the count).
    let first = crate::sys::trace::span("nvml.identify");
    let identified: Vec<(NvmlGpu, Vec<String>, Option<nvml_wrapper::Device<'_>>)> =
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|i| s.spawn(move || identify(nvml, i))).collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(i, h)| {
                    h.join().unwrap_or_else(|_| {
                        let g = NvmlGpu {
                            bdf: format!("index {i}"),
                            ..Default::default()
                        };
                        (g, vec!["the NVML identify thread panicked".into()], None)
                    })
                })
                .collect()
        });
    let mut devs: Vec<Option<nvml_wrapper::Device<'_>>> = Vec::new();
    let mut gpus: Vec<NvmlGpu> = Vec::new();
    let mut errs: Vec<Vec<String>> = Vec::new();
    for (g, e, d) in identified {
        gpus.push(g);
        errs.push(e);
        devs.push(d);
    }
    drop(first);
    early(&Early {
        error: None,
        driver_version: f.driver_version.clone(),
        gpus: gpus
            .iter()
            .map(|g| EarlyGpu {
                bdf: g.bdf.clone(),
                uuid: g.uuid.clone(),
                compute_mode: g.compute_mode.clone(),
            })
            .collect(),
    });
    // Second pass: one thread per GPU (NVML is thread-safe; the driver serves GPUs apart).
    let bdfs: Vec<String> = gpus.iter().map(|g| g.bdf.clone()).collect();
    let results: Vec<(NvmlGpu, Vec<NvmlPair>)> = std::thread::scope(|s| {
        let handles: Vec<_> = gpus
            .into_iter()
            .zip(errs)
            .enumerate()
            .map(|(i, (g, e))| {
                let devs = &devs;
                let bdfs = &bdfs;
                s.spawn(move || {
                    let mut t = crate::sys::trace::span("nvml.gpu");
                    t.detail(|| bdfs.get(i).cloned().unwrap_or_default());
                    match &devs[i] {
                        Some(d) => {
                            let g = gpu_facts(nvml, d, g, e);
                            let pairs = pairs_from(nvml, devs, bdfs, i);
                            (g, pairs)
                        }
                        None => (NvmlGpu { errors: e, ..g }, Vec::new()),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                h.join().unwrap_or_else(|_| {
                    (
                        NvmlGpu {
                            bdf: format!("index {i}"),
                            errors: vec!["the NVML query thread panicked".into()],
                            ..Default::default()
                        },
                        Vec::new(),
                    )
                })
            })
            .collect()
    });
    for (g, p) in results {
        f.gpus.push(g);
        f.pairs.extend(p);
    }
    Ok(f)
}

/// GPU `i`'s handle, address, UUID and compute mode (what the early message and the cache key
/// need), and the errors met on the way.
fn identify(nvml: &Nvml, i: u32) -> (NvmlGpu, Vec<String>, Option<nvml_wrapper::Device<'_>>) {
    let mut g = NvmlGpu::default();
    let mut e = Vec::new();
    match nvml.device_by_index(i) {
        Ok(d) => {
            g.bdf = match d.pci_info() {
                Ok(p) => crate::live::cuda::normalize_bdf(&p.bus_id),
                Err(x) => {
                    e.push(format!("nvmlDeviceGetPciInfo: {}", err_text(&x)));
                    format!("index {i}")
                }
            };
            g.uuid = d
                .uuid()
                .map_err(|x| e.push(format!("nvmlDeviceGetUUID: {}", err_text(&x))))
                .ok();
            g.compute_mode = d
                .compute_mode()
                .map(|m| compute_mode_name(m).to_string())
                .map_err(|x| e.push(format!("nvmlDeviceGetComputeMode: {}", err_text(&x))))
                .ok();
            (g, e, Some(d))
        }
        Err(x) => {
            g.bdf = format!("index {i}");
            e.push(format!("nvmlDeviceGetHandleByIndex: {}", err_text(&x)));
            (g, e, None)
        }
    }
}

/// Everything NVML says about one GPU (its address, UUID and compute mode are already in `g`).
fn gpu_facts(
    nvml: &Nvml,
    d: &nvml_wrapper::Device<'_>,
    mut g: NvmlGpu,
    mut errs: Vec<String>,
) -> NvmlGpu {
    macro_rules! get {
        ($call:expr, $name:literal) => {
            match $call {
                Ok(v) => Some(v),
                Err(e) => {
                    errs.push(format!("{}: {}", $name, err_text(&e)));
                    None
                }
            }
        };
    }
    g.name = get!(d.name(), "nvmlDeviceGetName");
    if let Some(cc) = get!(
        d.cuda_compute_capability(),
        "nvmlDeviceGetCudaComputeCapability"
    ) {
        g.cc_major = Some(cc.major);
        g.cc_minor = Some(cc.minor);
    }
    g.memory_total = get!(d.memory_info(), "nvmlDeviceGetMemoryInfo").map(|m| m.total);
    if let Some(b) = get!(d.bar1_memory_info(), "nvmlDeviceGetBAR1MemoryInfo") {
        g.bar1_total = Some(b.total);
        g.bar1_used = Some(b.used);
    }
    g.pcie_gen_current = get!(
        d.current_pcie_link_gen(),
        "nvmlDeviceGetCurrPcieLinkGeneration"
    );
    g.pcie_gen_max = get!(d.max_pcie_link_gen(), "nvmlDeviceGetMaxPcieLinkGeneration");
    g.pcie_width_current = get!(
        d.current_pcie_link_width(),
        "nvmlDeviceGetCurrPcieLinkWidth"
    );
    g.pcie_width_max = get!(d.max_pcie_link_width(), "nvmlDeviceGetMaxPcieLinkWidth");
    g.persistence_mode = get!(d.is_in_persistent_mode(), "nvmlDeviceGetPersistenceMode");
    g.ecc_enabled = get!(d.is_ecc_enabled(), "nvmlDeviceGetEccMode").map(|e| e.currently_enabled);
    g.retired_pages_pending = get!(
        d.are_pages_pending_retired(),
        "nvmlDeviceGetRetiredPagesPendingStatus"
    );
    g.remapped_rows = remapped_rows(nvml, d, &mut errs);
    g.pcie_replay_counter = d.pcie_replay_counter().ok().map(u64::from);
    for l in 0..18u32 {
        let w = d.link_wrapper_for(l);
        match w.is_active() {
            Ok(active) => g.nvlinks.push(NvLink {
                link: l,
                active,
                remote_bdf: if active {
                    w.remote_pci_info()
                        .ok()
                        .map(|p| crate::live::cuda::normalize_bdf(&p.bus_id))
                } else {
                    None
                },
                remote_type: if active {
                    remote_device_type(nvml, d, l)
                } else {
                    None
                },
                version: w.version().ok(),
                // Error counters (issue 17); `None` where the GPU answers Not Supported.
                replay_errors: active
                    .then(|| w.error_counter(ErrorCounter::DlReplay).ok())
                    .flatten(),
                recovery_errors: active
                    .then(|| w.error_counter(ErrorCounter::DlRecovery).ok())
                    .flatten(),
                crc_flit_errors: active
                    .then(|| w.error_counter(ErrorCounter::DlCrcFlit).ok())
                    .flatten(),
                crc_data_errors: active
                    .then(|| w.error_counter(ErrorCounter::DlCrcData).ok())
                    .flatten(),
            }),
            Err(_) => break,
        }
    }
    g.fabric = fabric_info(d, &mut errs);
    g.errors = errs;
    g
}

/// `nvmlGpuFabricInfo*` as NVML declares it (`nvmlReturn_t` as its code; nvml-wrapper-sys's
/// layout).
fn return_name(code: u32) -> String {
    match code {
        0 => "success".into(),
        c => match nvml_wrapper::error::nvml_try(c) {
            Err(e) => format!("{e} ({c})"),
            Ok(()) => format!("nvmlReturn {c}"),
        },
    }
}

/// The GPU's fabric registration: `nvmlDeviceGetGpuFabricInfoV` (version 3, then 2, as older
/// drivers know only 2), else the older `nvmlDeviceGetGpuFabricInfo`; a symbol the driver's
/// NVML lacks is an error line and `None`.
fn fabric_info(d: &nvml_wrapper::Device<'_>, errs: &mut Vec<String>) -> Option<GpuFabric> {
    use nvml_wrapper_sys::bindings::{nvmlGpuFabricInfoV_t, nvmlGpuFabricInfo_t};
    let lib = d.nvml().lib();
    // SAFETY: the handle belongs to this live NVML instance (`d` borrows it).
    let handle = unsafe { d.handle() };
    let uuid = |u: &[u8; 16]| u.iter().map(|b| format!("{b:02x}")).collect::<String>();
    if let Ok(f) = lib.nvmlDeviceGetGpuFabricInfoV.as_ref() {
        for version in [3u32, 2] {
            // SAFETY: a zeroed nvmlGpuFabricInfo_v3_t is a valid value (integers and a byte
            // array); NVML reads `version` and writes at most the v3 struct it names.
            let mut info: nvmlGpuFabricInfoV_t = unsafe { std::mem::zeroed() };
            info.version = (std::mem::size_of::<nvmlGpuFabricInfoV_t>() as u32) | (version << 24);
            if version == 2 {
                info.version = (std::mem::size_of::<
                    nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_v2_t,
                >() as u32)
                    | (2 << 24);
            }
            // SAFETY: the function comes from the loaded NVML with its declared prototype; the
            // pointer is to a live struct of the size its version field says.
            let r = unsafe { f(handle, &mut info) };
            if r == 25 && version == 3 {
                continue;
            }
            if r != 0 {
                errs.push(format!("nvmlDeviceGetGpuFabricInfoV: {}", return_name(r)));
                return None;
            }
            return Some(GpuFabric {
                state: GpuFabric::state_name(info.state),
                status: return_name(info.status),
                clique_id: info.cliqueId,
                cluster_uuid: uuid(&info.clusterUuid),
                health_mask: Some(info.healthMask),
                call: format!("nvmlDeviceGetGpuFabricInfoV (v{version})"),
            });
        }
        return None;
    }
    match lib.nvmlDeviceGetGpuFabricInfo.as_ref() {
        Ok(f) => {
            // SAFETY: a zeroed nvmlGpuFabricInfo_t is a valid value.
            let mut info: nvmlGpuFabricInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: the loaded NVML's function with its declared prototype; a live struct.
            let r = unsafe { f(handle, &mut info) };
            if r != 0 {
                errs.push(format!("nvmlDeviceGetGpuFabricInfo: {}", return_name(r)));
                return None;
            }
            Some(GpuFabric {
                state: GpuFabric::state_name(info.state),
                status: return_name(info.status),
                clique_id: info.cliqueId,
                cluster_uuid: uuid(&info.clusterUuid),
                health_mask: None,
                call: "nvmlDeviceGetGpuFabricInfo".into(),
            })
        }
        Err(e) => {
            errs.push(format!(
                "nvmlDeviceGetGpuFabricInfo: not in this NVML (driver before 525): {e}"
            ));
            None
        }
    }
}

/// Topology and P2P status of the pairs (i, j) with j > i (NVML order).
fn pairs_from(
    nvml: &Nvml,
    devs: &[Option<nvml_wrapper::Device<'_>>],
    bdfs: &[String],
    i: usize,
) -> Vec<NvmlPair> {
    let mut out = Vec::new();
    let Some(Some(a)) = devs.get(i) else {
        return out;
    };
    for j in i + 1..devs.len() {
        let Some(Some(b)) = devs.get(j) else {
            continue;
        };
        let mut p = NvmlPair {
            a: bdfs.get(i).cloned().unwrap_or_default(),
            b: bdfs.get(j).cloned().unwrap_or_default(),
            ..Default::default()
        };
        match nvml.topology_common_ancestor(a, b) {
            Ok(l) => {
                p.common_ancestor = Some(
                    match l {
                        TopologyLevel::Internal => "internal",
                        TopologyLevel::Single => "single",
                        TopologyLevel::Multiple => "multiple",
                        TopologyLevel::HostBridge => "hostbridge",
                        TopologyLevel::Node => "node",
                        TopologyLevel::System => "system",
                    }
                    .to_string(),
                )
            }
            Err(e) => p.errors.push(format!(
                "nvmlDeviceGetTopologyCommonAncestor: {}",
                err_text(&e)
            )),
        }
        for (name, idx) in [
            ("read", P2pCapabilitiesIndex::Read),
            ("write", P2pCapabilitiesIndex::Write),
            ("nvlink", P2pCapabilitiesIndex::NvLink),
            ("atomics", P2pCapabilitiesIndex::Atomics),
            ("prop", P2pCapabilitiesIndex::Prop),
        ] {
            match a.p2p_status(b, idx) {
                Ok(s) => {
                    p.p2p.insert(name.to_string(), p2p_name(s).to_string());
                }
                Err(e) => p
                    .errors
                    .push(format!("nvmlDeviceGetP2PStatus({name}): {}", err_text(&e))),
            }
        }
        out.push(p);
    }
    out
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType`, called raw: nvml-wrapper 0.13 passes a temporary as
/// the out-pointer and always answers `Unknown`.
fn remote_device_type(nvml: &Nvml, d: &nvml_wrapper::Device<'_>, link: u32) -> Option<String> {
    let f = nvml
        .lib()
        .nvmlDeviceGetNvLinkRemoteDeviceType
        .as_ref()
        .ok()?;
    let mut t: std::os::raw::c_uint = 255;
    // SAFETY: the handle comes from a live Device of this Nvml; the out-pointer is ours.
    let r = unsafe { f(d.handle(), link, &mut t) };
    if r != 0 {
        return None;
    }
    Some(
        match t {
            0 => "gpu",
            1 => "ibmnpu",
            2 => "switch",
            _ => "unknown",
        }
        .to_string(),
    )
}

fn p2p_name(s: P2pStatus) -> &'static str {
    match s {
        P2pStatus::Ok => "ok",
        P2pStatus::ChipsetNotSupported => "chipset-not-supported",
        P2pStatus::GpuNotSupported => "gpu-not-supported",
        P2pStatus::IohTopologyNotSupported => "ioh-topology-not-supported",
        P2pStatus::DisabledByRegkey => "disabled-by-regkey",
        P2pStatus::NotSupported => "not-supported",
        P2pStatus::Unknown => "unknown",
    }
}

/// Row remapping (A100/H100/H200) is not wrapped by nvml-wrapper: call the raw symbol.
fn remapped_rows(
    nvml: &Nvml,
    d: &nvml_wrapper::Device<'_>,
    errs: &mut Vec<String>,
) -> Option<RemappedRows> {
    let f = match nvml.lib().nvmlDeviceGetRemappedRows.as_ref() {
        Ok(f) => f,
        Err(e) => {
            errs.push(format!(
                "nvmlDeviceGetRemappedRows: not in this libnvidia-ml: {e}"
            ));
            return None;
        }
    };
    let (mut c, mut u, mut p, mut fl) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the handle comes from a live Device of this Nvml; the out-pointers are ours.
    let r = unsafe { f(d.handle(), &mut c, &mut u, &mut p, &mut fl) };
    if r != 0 {
        errs.push(format!("nvmlDeviceGetRemappedRows: NVML error {r}"));
        return None;
    }
    Some(RemappedRows {
        correctable: c,
        uncorrectable: u,
        pending: p != 0,
        failure: fl != 0,
    })
}

/// Per GPU (PCI address, in NVML's order): the common speed of its active NVLinks in MB/s
/// (`nvmlDeviceGetFieldValues` with `NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON`, field 90; what
/// `nvidia-smi nvlink -s` prints per link, e.g. 26562 MB/s = 26.562 GB/s on H100/H200), `None`
/// where NVML does not answer (no NVLink, an old driver). Used by `probe --p2p` for the link's
/// theoretical rate.
pub fn nvlink_speeds() -> Result<Vec<(String, Option<u64>)>, String> {
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let nvml = Nvml::init()
        .map_err(|e| format!("libnvidia-ml.so.1: nvmlInit failed: {}", err_text(&e)))?;
    let n = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount: {}", err_text(&e)))?;
    let field = FieldId(nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON);
    let mut out = Vec::new();
    for i in 0..n {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let Ok(bdf) = d
            .pci_info()
            .map(|p| crate::live::cuda::normalize_bdf(&p.bus_id))
        else {
            continue;
        };
        let speed = d
            .field_values_for(std::slice::from_ref(&field))
            .ok()
            .and_then(|v| v.into_iter().next())
            .and_then(|s| s.ok())
            .and_then(|s| s.value.ok())
            .and_then(|v| match v {
                SampleValue::U32(x) => Some(u64::from(x)),
                SampleValue::U64(x) => Some(x),
                SampleValue::I64(x) => u64::try_from(x).ok(),
                SampleValue::F64(x) if x.is_finite() && x >= 0.0 => Some(x as u64),
                SampleValue::F64(_) => None,
            })
            .filter(|x| *x > 0);
        out.push((bdf, speed));
    }
    Ok(out)
}
