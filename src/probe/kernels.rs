//! Loading the probe kernels: NVRTC at run time (for the GPU's own architecture, `-lineinfo`)
//! when libnvrtc is on the node, else the PTX the binary carries (kernels/ptx, generated from
//! the same sources by scripts/gen-ptx.py with NVRTC 12.0: PTX ISA 8.0, compute_70, so any R525+
//! driver can JIT it). Every function is fetched before the first launch: lazy loading deadlocks
//! spin-wait pairs (knowledge/hang-probe.md §0 item 4).

use crate::live::cuda::{Context, Function, Module};
use crate::live::nvrtc;
use std::collections::BTreeMap;
use std::time::Instant;

/// A probe family's kernels: the CUDA source and the PTX generated from it.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// The source file's path in the repository (NVRTC's name for it, in line info).
    pub name: &'static str,
    pub cu: &'static str,
    pub ptx: &'static str,
}

pub const HANG: KernelSource = KernelSource {
    name: "kernels/hang.cu",
    cu: include_str!("../../kernels/hang.cu"),
    ptx: include_str!("../../kernels/ptx/hang.ptx"),
};

pub const DOORBELL: KernelSource = KernelSource {
    name: "kernels/doorbell.cu",
    cu: include_str!("../../kernels/doorbell.cu"),
    ptx: include_str!("../../kernels/ptx/doorbell.ptx"),
};

/// A loaded module with every function the probe launches.
pub struct Kernels {
    pub module: Module,
    pub functions: BTreeMap<&'static str, Function>,
    /// `nvrtc compute_90` or `embedded ptx (...)`, for the report.
    pub source: String,
    pub load_ms: f64,
}

impl Kernels {
    /// A function loaded by [`load`]; an error names it when it was not asked for.
    pub fn get(&self, name: &str) -> Result<&Function, String> {
        self.functions
            .get(name)
            .ok_or_else(|| format!("kernel {name} not loaded"))
    }
}

/// Load `k` into `ctx` and fetch `names`, preferring NVRTC unless `force_ptx`.
pub fn load(
    ctx: &Context,
    k: &KernelSource,
    names: &[&'static str],
    force_ptx: bool,
) -> Result<Kernels, String> {
    let t0 = Instant::now();
    let cc = ctx.device().compute_capability();
    let (text, source) = if force_ptx {
        (k.ptx.to_string(), "embedded ptx (forced)".to_string())
    } else {
        match nvrtc::compile(k.cu, k.name, cc) {
            Ok(p) => (p, format!("nvrtc {}", nvrtc::arch(cc).unwrap_or("?"))),
            Err(why) => (k.ptx.to_string(), format!("embedded ptx ({why})")),
        }
    };
    let (module, source) = match ctx.load_module(&text) {
        Ok(m) => (m, source),
        // An NVRTC newer than the driver emits a PTX ISA the driver's JIT rejects
        // (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): fall back to the carried PTX.
        Err(e) if !force_ptx && text != k.ptx => {
            let m = ctx
                .load_module(k.ptx)
                .map_err(|e2| format!("{e} ({source}); the carried PTX failed too: {e2}"))?;
            (
                m,
                format!("embedded ptx (the driver rejected {source}: {e})"),
            )
        }
        Err(e) => return Err(format!("{e} ({source})")),
    };
    let mut functions = BTreeMap::new();
    for n in names {
        functions.insert(*n, module.function(n)?);
    }
    Ok(Kernels {
        module,
        functions,
        source,
        load_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}
