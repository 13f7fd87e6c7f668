//! The CUDA driver API, loaded at run time through cudarc's `sys` layer. Only ever called inside
//! a worker process (see `probe::runner`). Every entry point first checks that libcuda can be
//! loaded at all (cudarc panics otherwise), and a symbol missing from an old driver panics only
//! inside the worker, which reports it.

use cudarc::driver::sys;
use gdrdoctor_checks::model::{CudaDevice, CudaFacts, CudaPeer};
use std::ffi::{c_char, c_int};

/// A failed driver call: the function and the CUresult name.
#[derive(Debug, Clone)]
pub struct CuError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.code)
    }
}

pub fn check(call: &'static str, r: sys::CUresult) -> Result<(), CuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError {
            call,
            code: r as i32,
            name: format!("{r:?}"),
        })
    }
}

/// Why CUDA cannot be used here, or `None` when libcuda loads.
pub fn library_problem() -> Option<String> {
    // SAFETY: only tries dlopen on the candidate names.
    if unsafe { sys::is_culib_present() } {
        None
    } else {
        Some("libcuda.so.1 not loadable (no NVIDIA driver user-space library on this node, or it is not on the loader path)".into())
    }
}

/// The libcuda file this process mapped (spots the toolkit's `stubs/libcuda.so`).
pub fn loaded_library() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libcuda.so"))
        .map(str::to_string)
}

pub fn init() -> Result<(), CuError> {
    // SAFETY: cuInit has no preconditions; libcuda presence was checked by the caller.
    check("cuInit", unsafe { sys::cuInit(0) })
}

pub fn driver_version() -> Result<i32, CuError> {
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut v)
    })?;
    Ok(v)
}

pub fn device_count() -> Result<i32, CuError> {
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

pub fn device(ordinal: i32) -> Result<sys::CUdevice, CuError> {
    let mut d: sys::CUdevice = 0;
    // SAFETY: writes one handle.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
    Ok(d)
}

pub fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Option<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one int; an attribute this driver does not know returns an error.
    let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

fn cstr_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub fn pci_bus_id(dev: sys::CUdevice) -> Result<String, CuError> {
    let mut buf = [0 as c_char; 32];
    // SAFETY: the buffer length is passed; the driver NUL-terminates.
    check("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, dev)
    })?;
    Ok(normalize_bdf(&cstr_buf(&buf)))
}

/// `00000000:00:06.0` (NVML) or `0000:00:06.0` (CUDA) -> `0000:00:06.0`, lower case.
pub fn normalize_bdf(s: &str) -> String {
    let s = s.trim().to_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

pub fn name(dev: sys::CUdevice) -> String {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer length is passed; the driver NUL-terminates.
    let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev) };
    if r == sys::CUresult::CUDA_SUCCESS {
        cstr_buf(&buf)
    } else {
        String::new()
    }
}

pub fn total_mem(dev: sys::CUdevice) -> Option<u64> {
    let mut b: usize = 0;
    // SAFETY: writes one size_t.
    let r = unsafe { sys::cuDeviceTotalMem_v2(&mut b, dev) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(b as u64)
}

/// Every device's GDR-relevant attributes (no context is created).
pub fn facts() -> Result<CudaFacts, String> {
    if let Some(p) = library_problem() {
        return Err(p);
    }
    init().map_err(|e| e.to_string())?;
    let driver_version = driver_version().map_err(|e| e.to_string())?;
    let n = device_count().map_err(|e| e.to_string())?;
    use sys::CUdevice_attribute as A;
    let mut devices = Vec::new();
    for i in 0..n {
        let d = device(i).map_err(|e| e.to_string())?;
        devices.push(CudaDevice {
            ordinal: i,
            bdf: pci_bus_id(d).unwrap_or_default(),
            name: name(d),
            cc_major: attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap_or(0),
            cc_minor: attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).unwrap_or(0),
            multiprocessors: attribute(d, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or(0),
            gpu_direct_rdma_supported: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
            ),
            gpu_direct_rdma_flush_writes_options: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
            ),
            gpu_direct_rdma_writes_ordering: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
            ),
            gpu_direct_rdma_with_cuda_vmm_supported: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
            ),
            dma_buf_supported: attribute(d, A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
            host_register_supported: attribute(d, A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED),
            can_use_host_pointer_for_registered_mem: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
            ),
            virtual_memory_management_supported: attribute(
                d,
                A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            ),
            total_memory: total_mem(d),
        });
    }
    let mut peers = Vec::new();
    for a in &devices {
        for b in &devices {
            if a.ordinal != b.ordinal {
                peers.push(peer(a, b));
            }
        }
    }
    Ok(CudaFacts {
        driver_version,
        devices,
        library: loaded_library(),
        peers,
    })
}

/// `cuDeviceCanAccessPeer` and the P2P attributes from `a` to `b`.
fn peer(a: &CudaDevice, b: &CudaDevice) -> CudaPeer {
    let mut p = CudaPeer {
        a: a.ordinal,
        b: b.ordinal,
        a_bdf: a.bdf.clone(),
        b_bdf: b.bdf.clone(),
        ..Default::default()
    };
    let (da, db) = match (device(a.ordinal), device(b.ordinal)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            p.error = Some(e.to_string());
            return p;
        }
    };
    let mut v: c_int = 0;
    // SAFETY: writes one int.
    match check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut v, da, db)
    }) {
        Ok(()) => p.can_access = Some(v != 0),
        Err(e) => p.error = Some(e.to_string()),
    }
    let attr = |at: sys::CUdevice_P2PAttribute| -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetP2PAttribute(&mut v, at, da, db) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
    };
    use sys::CUdevice_P2PAttribute as P;
    p.performance_rank = attr(P::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK);
    p.native_atomic = attr(P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED).map(|v| v != 0);
    p
}
