//! NVML, loaded at run time by nvml-wrapper (no link-time dependency). A missing library or
//! driver is an error value, never a crash. Called inside the live-facts worker.

use gdrdoctor_checks::model::{NvLink, NvmlFacts, NvmlGpu, NvmlPair, RemappedRows};
use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus, TopologyLevel};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::Nvml;

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

pub fn facts() -> Result<NvmlFacts, String> {
    let nvml = open()?;
    let mut f = NvmlFacts {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        gpus: Vec::new(),
        pairs: Vec::new(),
    };
    let n = nvml
        .device_count()
        .map_err(|e| format!("nvmlDeviceGetCount: {}", err_text(&e)))?;
    for i in 0..n {
        let d = match nvml.device_by_index(i) {
            Ok(d) => d,
            Err(e) => {
                f.gpus.push(NvmlGpu {
                    bdf: format!("index {i}"),
                    errors: vec![format!("nvmlDeviceGetHandleByIndex: {}", err_text(&e))],
                    ..Default::default()
                });
                continue;
            }
        };
        let mut g = NvmlGpu::default();
        let mut errs = Vec::new();
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
        g.bdf = get!(d.pci_info(), "nvmlDeviceGetPciInfo")
            .map(|p| crate::live::cuda::normalize_bdf(&p.bus_id))
            .unwrap_or_else(|| format!("index {i}"));
        g.name = get!(d.name(), "nvmlDeviceGetName");
        g.uuid = get!(d.uuid(), "nvmlDeviceGetUUID");
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
        g.ecc_enabled =
            get!(d.is_ecc_enabled(), "nvmlDeviceGetEccMode").map(|e| e.currently_enabled);
        g.retired_pages_pending = get!(
            d.are_pages_pending_retired(),
            "nvmlDeviceGetRetiredPagesPendingStatus"
        );
        g.remapped_rows = remapped_rows(&nvml, &d, &mut errs);
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
                        remote_device_type(&nvml, &d, l)
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
        g.errors = errs;
        f.gpus.push(g);
    }
    f.pairs = pairs(&nvml, n);
    Ok(f)
}

/// Topology and P2P status of every GPU pair.
fn pairs(nvml: &Nvml, n: u32) -> Vec<NvmlPair> {
    let mut out = Vec::new();
    let devs: Vec<Option<nvml_wrapper::Device<'_>>> =
        (0..n).map(|i| nvml.device_by_index(i).ok()).collect();
    let bdf = |d: &nvml_wrapper::Device<'_>| {
        d.pci_info()
            .map(|p| crate::live::cuda::normalize_bdf(&p.bus_id))
            .unwrap_or_default()
    };
    for i in 0..devs.len() {
        for j in i + 1..devs.len() {
            let (Some(a), Some(b)) = (&devs[i], &devs[j]) else {
                continue;
            };
            let mut p = NvmlPair {
                a: bdf(a),
                b: bdf(b),
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
