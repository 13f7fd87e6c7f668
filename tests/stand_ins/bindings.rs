//! The stand-ins against the bindings: the CUDA numbers the stand-in libcuda uses, and a
//! scenario with a typo.

use super::*;

// ---------------------------------------------------------------------------------------------
// The stand-ins against the bindings
// ---------------------------------------------------------------------------------------------

/// The CUDA attribute numbers and result codes the stand-in libcuda uses are the bindings'
/// (a code outside cudarc's enum would be undefined behaviour in gdrdoctor).
#[test]
fn stand_in_cuda_numbers_are_the_bindings_numbers() {
    let Some(l) = libs() else { return };
    use cudarc::driver::sys::{CUdevice_attribute as A, CUresult as R};
    // SAFETY: loads the stand-in (no scenario: it neither hangs nor reads one).
    let lib = unsafe { libloading::Library::new(l.current.join("libcuda.so.1")) }.unwrap();
    type Q = unsafe extern "C" fn(*const std::ffi::c_char) -> i32;
    // SAFETY: gdrstub_cuda_attribute is `int f(const char *)` in tests/stubs/libcuda.c, which
    // is `Q`; the symbol does not outlive `lib`.
    let attr: libloading::Symbol<Q> = unsafe { lib.get(b"gdrstub_cuda_attribute\0") }.unwrap();
    // SAFETY: gdrstub_cuda_result has the same prototype, and also lives as long as `lib`.
    let res: libloading::Symbol<Q> = unsafe { lib.get(b"gdrstub_cuda_result\0") }.unwrap();
    let q = |f: &libloading::Symbol<Q>, s: &str| {
        let c = std::ffi::CString::new(s).unwrap();
        // SAFETY: c is a NUL-terminated string alive across the call.
        unsafe { f(c.as_ptr()) }
    };
    for (opt, a) in [
        ("sms", A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        ("cc_major", A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        ("cc_minor", A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        (
            "host_ptr",
            A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
        ),
        (
            "host_register",
            A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED,
        ),
        (
            "vmm",
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        ),
        (
            "vmm_gdr",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        ),
        ("gdr", A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
        (
            "flush",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        ),
        (
            "ordering",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
        ),
        ("dmabuf", A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
    ] {
        assert_eq!(q(&attr, opt), a as i32, "{opt}");
    }
    for (name, r) in [
        ("CUDA_SUCCESS", R::CUDA_SUCCESS),
        ("CUDA_ERROR_INVALID_VALUE", R::CUDA_ERROR_INVALID_VALUE),
        ("CUDA_ERROR_OUT_OF_MEMORY", R::CUDA_ERROR_OUT_OF_MEMORY),
        ("CUDA_ERROR_NOT_INITIALIZED", R::CUDA_ERROR_NOT_INITIALIZED),
        ("CUDA_ERROR_DEINITIALIZED", R::CUDA_ERROR_DEINITIALIZED),
        ("CUDA_ERROR_STUB_LIBRARY", R::CUDA_ERROR_STUB_LIBRARY),
        (
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            R::CUDA_ERROR_DEVICE_UNAVAILABLE,
        ),
        ("CUDA_ERROR_NO_DEVICE", R::CUDA_ERROR_NO_DEVICE),
        ("CUDA_ERROR_INVALID_DEVICE", R::CUDA_ERROR_INVALID_DEVICE),
        ("CUDA_ERROR_INVALID_IMAGE", R::CUDA_ERROR_INVALID_IMAGE),
        ("CUDA_ERROR_INVALID_CONTEXT", R::CUDA_ERROR_INVALID_CONTEXT),
        ("CUDA_ERROR_INVALID_PTX", R::CUDA_ERROR_INVALID_PTX),
        (
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        ),
        (
            "CUDA_ERROR_OPERATING_SYSTEM",
            R::CUDA_ERROR_OPERATING_SYSTEM,
        ),
        ("CUDA_ERROR_INVALID_HANDLE", R::CUDA_ERROR_INVALID_HANDLE),
        ("CUDA_ERROR_NOT_FOUND", R::CUDA_ERROR_NOT_FOUND),
        ("CUDA_ERROR_ILLEGAL_ADDRESS", R::CUDA_ERROR_ILLEGAL_ADDRESS),
        ("CUDA_ERROR_LAUNCH_FAILED", R::CUDA_ERROR_LAUNCH_FAILED),
        ("CUDA_ERROR_NOT_PERMITTED", R::CUDA_ERROR_NOT_PERMITTED),
        ("CUDA_ERROR_NOT_SUPPORTED", R::CUDA_ERROR_NOT_SUPPORTED),
        (
            "CUDA_ERROR_SYSTEM_NOT_READY",
            R::CUDA_ERROR_SYSTEM_NOT_READY,
        ),
        (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        ),
        (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        ),
        ("CUDA_ERROR_UNKNOWN", R::CUDA_ERROR_UNKNOWN),
    ] {
        assert_eq!(q(&res, name), r as i32, "{name}");
    }
    assert_eq!(q(&res, "CUDA_ERROR_MADE_UP"), -1);
}

#[test]
fn a_scenario_with_a_typo_aborts_loudly() {
    let Some(l) = libs() else { return };
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        "gpu bdf=0000:18:00.0\ndevcie mlx5_0\n",
    )
    .run(&["probe", "--registration", "--format", "json"]);
    // The worker aborts with the stand-in's message: a run that cannot pass.
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stdout.contains("unknown directive `devcie`"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}
