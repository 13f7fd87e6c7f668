//! The facts `check` reads (no context is created): every device's GDR-relevant attributes
//! and the peer pairs. tests/fast_check.rs scans this folder for the calls they reach.

use super::driver::Driver;
use super::library::loaded_library;
use super::{Attribute, P2pAttribute};
use gdrdoctor_checks::model::{CudaDevice, CudaFacts, CudaPeer};

/// Every device's GDR-relevant attributes.
pub fn facts() -> Result<CudaFacts, String> {
    let mut t = crate::sys::trace::span("cuda.init");
    let t0 = std::time::Instant::now();
    let drv = Driver::init();
    if t0.elapsed() >= std::time::Duration::from_millis(100) {
        // Measured on the H200: ~170 ms per GPU of UVM_REGISTER_GPU when no other CUDA process
        // is on it, 2 ms when one is (docs/performance.md, scripts/cuinit-uvm.sh).
        t.detail(|| {
            "slow: the first CUDA client of an idle GPU waits for the UVM driver to register it \
             (about 170 ms per GPU; `check` keeps the answers for the rest of the boot)"
                .to_string()
        });
    }
    drop(t);
    let drv = drv.map_err(|e| e.to_string())?;
    let driver_version = drv.version().map_err(|e| e.to_string())?;
    let n = drv.device_count().map_err(|e| e.to_string())?;
    use Attribute as A;
    let mut devices = Vec::new();
    for i in 0..n {
        let mut t = crate::sys::trace::span("cuda.attributes");
        t.detail(|| format!("device {i}"));
        let d = drv.device(i).map_err(|e| e.to_string())?;
        let (cc_major, cc_minor) = d.compute_capability();
        devices.push(CudaDevice {
            ordinal: i,
            bdf: d.bdf().unwrap_or_default(),
            name: d.name(),
            cc_major,
            cc_minor,
            multiprocessors: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .unwrap_or(0),
            gpu_direct_rdma_supported: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
            gpu_direct_rdma_flush_writes_options: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
            gpu_direct_rdma_writes_ordering: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
            gpu_direct_rdma_with_cuda_vmm_supported: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED),
            dma_buf_supported: d.attribute(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
            host_register_supported: d.attribute(A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED),
            can_use_host_pointer_for_registered_mem: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
            virtual_memory_management_supported: d
                .attribute(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
            total_memory: d.total_mem(),
        });
    }
    let _t = crate::sys::trace::span("cuda.peers");
    let mut peers = Vec::new();
    for a in &devices {
        for b in &devices {
            if a.ordinal != b.ordinal {
                peers.push(peer(&drv, a, b));
            }
        }
    }
    Ok(CudaFacts {
        driver_version,
        devices,
        library: loaded_library(),
        peers,
        not_asked: Default::default(),
        damaged: Default::default(),
    })
}

/// `cuDeviceCanAccessPeer` and the P2P attributes from `a` to `b`.
fn peer(drv: &Driver, a: &CudaDevice, b: &CudaDevice) -> CudaPeer {
    let mut p = CudaPeer {
        a: a.ordinal,
        b: b.ordinal,
        a_bdf: a.bdf.clone(),
        b_bdf: b.bdf.clone(),
        ..Default::default()
    };
    let (da, db) = match (drv.device(a.ordinal), drv.device(b.ordinal)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            p.error = Some(e.to_string());
            return p;
        }
    };
    match da.can_access_peer(&db) {
        Ok(v) => p.can_access = Some(v),
        Err(e) => p.error = Some(e.to_string()),
    }
    use P2pAttribute as P;
    p.performance_rank = da.p2p_attribute(&db, P::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK);
    p.native_atomic = da
        .p2p_attribute(&db, P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)
        .map(|v| v != 0);
    p
}
