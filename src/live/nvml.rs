//! NVML, loaded at run time by nvml-wrapper (no link-time dependency). A missing library or
//! driver is an error value, never a crash. Called inside the live-facts worker.

use gdrdoctor_checks::model::{NvLink, NvmlFacts, NvmlGpu, RemappedRows};
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

pub fn facts() -> Result<NvmlFacts, String> {
    let nvml = Nvml::init()
        .map_err(|e| format!("libnvidia-ml.so.1: nvmlInit failed: {}", err_text(&e)))?;
    let mut f = NvmlFacts {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_driver_version: nvml.sys_cuda_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        gpus: Vec::new(),
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
                }),
                Err(_) => break,
            }
        }
        g.errors = errs;
        f.gpus.push(g);
    }
    Ok(f)
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
