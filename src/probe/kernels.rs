//! Loading the probe kernels: NVRTC at run time (for the GPU's own architecture, `-lineinfo`)
//! when libnvrtc is on the node, else the PTX the binary carries (kernels/ptx, generated from
//! the same sources by scripts/gen-ptx.py with NVRTC 12.0: PTX ISA 8.0, compute_70, so any R525+
//! driver can JIT it). Every function is fetched before the first launch: lazy loading deadlocks
//! spin-wait pairs (knowledge/hang-probe.md §0 item 4).

use crate::live::cuda::{self, CuError};
use cudarc::driver::sys;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::time::Instant;

pub const HANG_CU: &str = include_str!("../../kernels/hang.cu");
pub const HANG_PTX: &str = include_str!("../../kernels/ptx/hang.ptx");

pub struct Module {
    pub module: sys::CUmodule,
    pub functions: BTreeMap<&'static str, sys::CUfunction>,
    /// `nvrtc compute_90` or `embedded ptx (...)`, for the report.
    pub source: String,
    pub load_ms: f64,
}

fn arch(cc: (i32, i32)) -> Option<&'static str> {
    Some(match cc {
        (7, 0) => "compute_70",
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => return None,
    })
}

/// Compile `src` with NVRTC for `cc`; `Err` with the reason when NVRTC is absent or fails.
fn nvrtc(src: &str, name: &str, cc: (i32, i32)) -> Result<String, String> {
    // SAFETY: only tries to dlopen the candidate library names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("libnvrtc not on this node".into());
    }
    let a = arch(cc).ok_or_else(|| {
        format!(
            "no NVRTC architecture for compute capability {}.{}",
            cc.0, cc.1
        )
    })?;
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(a),
        options: vec![
            "-lineinfo".into(),
            "--std=c++14".into(),
            "-default-device".into(),
        ],
        name: Some(name.to_string()),
        ..Default::default()
    };
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
        .map_err(|_| "NVRTC panicked (symbol missing?)".to_string())?
        .map(|p| p.to_src())
        .map_err(|e| format!("NVRTC: {e:?}"))
}

fn load_data(text: &str) -> Result<sys::CUmodule, String> {
    let c = CString::new(text).map_err(|e| format!("PTX contains a NUL byte: {e}"))?;
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: c is a NUL-terminated PTX image that outlives the call.
    cuda::check("cuModuleLoadData", unsafe {
        sys::cuModuleLoadData(&mut module, c.as_ptr().cast())
    })
    .map_err(|e: CuError| e.to_string())?;
    Ok(module)
}

/// Load a module and fetch `names`, preferring NVRTC; the caller holds a current context.
pub fn load(
    src: &str,
    ptx: &str,
    name: &str,
    cc: (i32, i32),
    names: &[&'static str],
    force_ptx: bool,
) -> Result<Module, String> {
    let t0 = Instant::now();
    let (text, source) = if force_ptx {
        (ptx.to_string(), "embedded ptx (forced)".to_string())
    } else {
        match nvrtc(src, name, cc) {
            Ok(p) => (p, format!("nvrtc {}", arch(cc).unwrap_or("?"))),
            Err(why) => (ptx.to_string(), format!("embedded ptx ({why})")),
        }
    };
    let (module, source) = match load_data(&text) {
        Ok(m) => (m, source),
        // An NVRTC newer than the driver emits a PTX ISA the driver's JIT rejects
        // (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): fall back to the carried PTX.
        Err(e) if !force_ptx && text != ptx => {
            let m = load_data(ptx)
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
        let cn = CString::new(*n).map_err(|e| e.to_string())?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: module was just loaded; cn is NUL-terminated.
        cuda::check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, module, cn.as_ptr())
        })
        .map_err(|e| format!("{e}: {n}"))?;
        functions.insert(*n, f);
    }
    Ok(Module {
        module,
        functions,
        source,
        load_ms: t0.elapsed().as_secs_f64() * 1e3,
    })
}
