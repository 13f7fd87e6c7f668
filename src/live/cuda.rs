//! The CUDA driver API, loaded at run time through cudarc's `sys` layer, behind a small safe
//! layer: [`Driver`] (proof that libcuda loaded and `cuInit` succeeded), [`Device`],
//! [`Context`] (a retained primary context), [`Module`] and [`Function`], [`Stream`],
//! [`Event`], [`DeviceBuffer`], [`MappedHost`] (host memory the GPU sees), [`HostMemory`] with
//! its [`HostRegistration`], [`IoMapping`] (a NIC page mapped for the GPU) and peer access.
//! Every handle releases what it holds on drop, and every `unsafe` block of the CUDA side of
//! gdrdoctor is in this file, each with its SAFETY comment: the probes call no raw CUDA.
//!
//! Only ever used inside a worker process (see `worker::runner`). Every entry point first checks
//! that libcuda can be loaded at all (cudarc panics otherwise), and a symbol missing from an old
//! driver panics only inside the worker, which reports it.
//!
//! Resources keep their context alive (a reference-counted handle), so a buffer can never
//! outlive the context it was allocated in. Calls that run on a stream (copies, launches,
//! queries) do not switch the current context themselves: the probes make the right context
//! current, exactly as the driver API expects, and a wrong context is a CUDA error, not
//! undefined behaviour. Calls outside hot loops (allocation, module loading, set-up) make their
//! context current first.

use super::shared::Region;
use cudarc::driver::sys;
use gdrdoctor_checks::model::{CudaDevice, CudaFacts, CudaPeer};
use std::ffi::{c_char, c_int, c_void, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use sys::CUdevice_P2PAttribute as P2pAttribute;
pub use sys::CUdevice_attribute as Attribute;

/// A failed driver call: the function and the CUresult name.
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl std::error::Error for CuError {}

impl CuError {
    /// A request refused by this layer before it reached the driver (a copy larger than its
    /// buffer, say), reported the way the driver reports an invalid value.
    fn refused(call: &'static str, why: &str) -> CuError {
        CuError {
            call,
            code: sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32,
            name: format!("CUDA_ERROR_INVALID_VALUE ({why})"),
        }
    }
}

/// Set once a kernel may be wedged on the GPU: from then on no handle releases anything.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Give up on releasing: a kernel that ignores its abort (or a GPU that stopped answering)
/// makes `cuMemFree`, `cuModuleUnload` and the context release block forever
/// (knowledge/hang-probe.md §2.5). After this call every handle's drop is a no-op, so the
/// worker can report and exit; the driver reclaims everything when the process ends.
pub fn abandon() {
    ABANDONED.store(true, Ordering::SeqCst);
}

pub(crate) fn abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

pub(crate) fn check(call: &'static str, r: sys::CUresult) -> Result<(), CuError> {
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

/// The libcuda the test-only `GDRDOCTOR_LIB_DIR` names, loaded (once, for the life of the
/// process) before the CUDA bindings look for it: they `dlopen("libcuda.so")` first, which the
/// dynamic loader answers with a loaded library of that soname (the stand-in's) before it
/// searches the system's paths. Confirmed, not assumed: `dlopen("libcuda.so", RTLD_NOLOAD)`
/// must return this very library, else the override is reported as a problem.
fn preload_override(dir: &std::path::Path) -> Result<(), String> {
    use std::sync::OnceLock;
    static PRELOADED: OnceLock<Result<(), String>> = OnceLock::new();
    PRELOADED
        .get_or_init(|| {
            let path = dir.join("libcuda.so.1");
            let shown = path.display().to_string();
            let c = CString::new(shown.as_bytes()).map_err(|e| format!("{shown}: {e}"))?;
            // SAFETY: dlopen of a path; the handle is kept for the life of the process (the
            // bindings keep their own), so nothing it returns is ever unmapped.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if h.is_null() {
                return Err(format!(
                    "{shown} not loadable (GDRDOCTOR_LIB_DIR): {}",
                    dl_error()
                ));
            }
            // SAFETY: dlopen with RTLD_NOLOAD only looks up an already loaded library.
            let by_name =
                unsafe { libc::dlopen(c"libcuda.so".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if !by_name.is_null() {
                // SAFETY: drops the reference RTLD_NOLOAD just took; `h` keeps it loaded.
                unsafe { libc::dlclose(by_name) };
            }
            if by_name != h {
                return Err(format!(
                    "{shown} was loaded but \"libcuda.so\" does not resolve to it (its soname \
                     must be libcuda.so): the CUDA bindings would load another libcuda"
                ));
            }
            Ok(())
        })
        .clone()
}

fn dl_error() -> String {
    // SAFETY: dlerror has no preconditions; a non-null result is a C string we copy at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null dlerror results are NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Why CUDA cannot be used here, or `None` when libcuda loads.
pub fn library_problem() -> Option<String> {
    if let Some(dir) = super::stand_in::lib_dir() {
        if let Err(e) = preload_override(&dir) {
            return Some(e);
        }
    }
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

/// `00000000:00:06.0` (NVML) or `0000:00:06.0` (CUDA) -> `0000:00:06.0`, lower case.
pub fn normalize_bdf(s: &str) -> String {
    let s = s.trim().to_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

fn cstr_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why the driver could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitError {
    /// libcuda.so.1 cannot be loaded.
    LibraryMissing(String),
    /// `cuInit` failed.
    Init(CuError),
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::LibraryMissing(m) => f.write_str(m),
            InitError::Init(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for InitError {}

// ---------------------------------------------------------------------------------------------
// Driver and devices
// ---------------------------------------------------------------------------------------------

/// Proof that libcuda is loaded and `cuInit` succeeded; the way to every device.
#[derive(Debug, Clone, Copy)]
pub struct Driver {
    _private: (),
}

impl Driver {
    /// Load libcuda and call `cuInit(0)`.
    pub fn init() -> Result<Driver, InitError> {
        if let Some(p) = library_problem() {
            return Err(InitError::LibraryMissing(p));
        }
        // SAFETY: cuInit has no preconditions; libcuda presence was checked above (cudarc
        // panics on a missing library instead of returning an error).
        check("cuInit", unsafe { sys::cuInit(0) }).map_err(InitError::Init)?;
        Ok(Driver { _private: () })
    }

    /// `cuDriverGetVersion`: 13000 for CUDA 13.0.
    pub fn version(&self) -> Result<i32, CuError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut v)
        })?;
        Ok(v)
    }

    pub fn device_count(&self) -> Result<i32, CuError> {
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
        Ok(n)
    }

    pub fn device(&self, ordinal: i32) -> Result<Device, CuError> {
        let mut d: sys::CUdevice = 0;
        // SAFETY: writes one handle; an invalid ordinal is an error return.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
        Ok(Device { raw: d, ordinal })
    }
}

/// A device handle (`CUdevice`) and its ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    raw: sys::CUdevice,
    ordinal: i32,
}

impl Device {
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// `cuDeviceGetAttribute`; `None` when this driver does not know the attribute.
    pub fn attribute(&self, a: Attribute) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int; an attribute this driver does not know returns an error.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
    }

    /// (major, minor); (0, 0) when the driver does not say.
    pub fn compute_capability(&self) -> (i32, i32) {
        (
            self.attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .unwrap_or(0),
            self.attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .unwrap_or(0),
        )
    }

    /// The PCI address, normalised (`0000:00:06.0`).
    pub fn bdf(&self) -> Result<String, CuError> {
        let mut buf = [0 as c_char; 32];
        // SAFETY: the buffer length is passed; the driver NUL-terminates.
        check("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, self.raw)
        })?;
        Ok(normalize_bdf(&cstr_buf(&buf)))
    }

    /// The marketing name, or empty when the driver does not say.
    pub fn name(&self) -> String {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer length is passed; the driver NUL-terminates.
        let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.raw) };
        if r == sys::CUresult::CUDA_SUCCESS {
            cstr_buf(&buf)
        } else {
            String::new()
        }
    }

    pub fn total_mem(&self) -> Option<u64> {
        let mut b: usize = 0;
        // SAFETY: writes one size_t.
        let r = unsafe { sys::cuDeviceTotalMem_v2(&mut b, self.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(b as u64)
    }

    /// `cuDeviceCanAccessPeer(self -> peer)`: can this device access the peer's memory.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool, CuError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut v, self.raw, peer.raw)
        })?;
        Ok(v != 0)
    }

    /// `cuDeviceGetP2PAttribute(self -> peer)`; `None` when the driver refuses.
    pub fn p2p_attribute(&self, peer: &Device, a: P2pAttribute) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetP2PAttribute(&mut v, a, self.raw, peer.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
    }

    /// Retain the device's primary context and make it current on this thread.
    pub fn primary_context(&self) -> Result<Context, CuError> {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: primary context of a device handle from cuDeviceGet; released exactly once
        // when the last handle to it drops.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, self.raw)
        })?;
        let c = Context(Rc::new(CtxInner {
            raw: ctx,
            dev: *self,
        }));
        c.make_current()?;
        Ok(c)
    }
}

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

struct CtxInner {
    raw: sys::CUcontext,
    dev: Device,
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        // SAFETY: releases the retain of `Device::primary_context`; every resource allocated in
        // the context holds a clone of the handle, so none is left when this runs.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev.raw) };
    }
}

/// A retained primary context. Cloning shares it; the last clone to drop releases it.
#[derive(Clone)]
pub struct Context(Rc<CtxInner>);

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context(GPU{})", self.0.dev.ordinal)
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.0.raw == other.0.raw
    }
}

impl Context {
    pub fn device(&self) -> Device {
        self.0.dev
    }

    /// `cuCtxSetCurrent`.
    pub fn make_current(&self) -> Result<(), CuError> {
        // SAFETY: the context is retained while `self` lives.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.0.raw)
        })
    }

    /// `cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE)`: must come before the first launch.
    pub fn set_printf_fifo(&self, bytes: usize) -> Result<(), CuError> {
        self.make_current()?;
        // SAFETY: sets a limit of the current context.
        check("cuCtxSetLimit", unsafe {
            sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE, bytes)
        })
    }

    /// `cuCtxSynchronize`.
    pub fn synchronize(&self) -> Result<(), CuError> {
        self.make_current()?;
        // SAFETY: waits for the current context's work.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// Let kernels of this context access `peer`'s memory (`cuCtxEnablePeerAccess` from this
    /// context); already enabled is success. Leaves this context current.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<(), CuError> {
        self.make_current()?;
        // SAFETY: both contexts are retained; flags must be 0.
        let e = unsafe { sys::cuCtxEnablePeerAccess(peer.0.raw, 0) };
        if e == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check("cuCtxEnablePeerAccess", e)
    }

    /// `cuMemAlloc`.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CuError> {
        self.make_current()?;
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: allocates into p; freed by DeviceBuffer's drop.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, bytes) })?;
        Ok(DeviceBuffer {
            ctx: self.clone(),
            ptr: p,
            len: bytes,
        })
    }

    /// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`.
    pub fn alloc_managed(&self, bytes: usize) -> Result<DeviceBuffer, CuError> {
        self.make_current()?;
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: allocates into p (flags 1 = CU_MEM_ATTACH_GLOBAL); freed with cuMemFree.
        check("cuMemAllocManaged", unsafe {
            sys::cuMemAllocManaged(&mut p, bytes, 1)
        })?;
        Ok(DeviceBuffer {
            ctx: self.clone(),
            ptr: p,
            len: bytes,
        })
    }

    /// Pinned host memory mapped into the device's address space (`cuMemHostAlloc` with
    /// DEVICEMAP | PORTABLE), zeroed.
    pub fn alloc_mapped_host(&self, bytes: usize) -> Result<MappedHost, CuError> {
        self.make_current()?;
        let bytes = bytes.div_ceil(8) * 8;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: allocates into host (flags 0x02 DEVICEMAP | 0x01 PORTABLE).
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, 0x02 | 0x01)
        })?;
        let mut m = MappedHost {
            ctx: self.clone(),
            host,
            dev: 0,
            len: bytes,
        };
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: host was just allocated with DEVICEMAP.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0)
        })?;
        // SAFETY: `bytes` bytes at `host` are ours and nothing runs on them yet.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        m.dev = dev;
        Ok(m)
    }

    /// `cuMemHostRegister(flags 0)` of `mem` for as long as the registration lives.
    pub fn register_host<'m>(
        &self,
        mem: &'m mut HostMemory,
    ) -> Result<HostRegistration<'m>, CuError> {
        self.make_current()?;
        // SAFETY: `mem` points to `mem.len` bytes we own; the registration borrows `mem`
        // mutably, so the memory stays allocated (and untouched by Rust code) until it is
        // unregistered.
        check("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(mem.ptr.cast(), mem.len, 0)
        })?;
        Ok(HostRegistration {
            ctx: self.clone(),
            ptr: mem.ptr.cast(),
            _mem: std::marker::PhantomData,
        })
    }

    /// Map the system page holding a DEVX UAR's doorbell for the GPU (`cuMemHostRegister` with
    /// PORTABLE | DEVICEMAP | IOMEMORY, then `cuMemHostGetDevicePointer`). Nothing is written.
    pub fn map_uar<'u>(
        &self,
        uar: &'u super::verbs::DevxUar<'_>,
        page: u64,
    ) -> Result<IoMapping<'u>, CuError> {
        self.make_current()?;
        let reg = uar.reg_addr() as u64;
        let page = page.max(4096);
        let start = reg & !(page - 1);
        // SAFETY: the page is mmapped by libmlx5 for as long as `uar` lives, and the mapping
        // borrows `uar`; it is unregistered on drop, before the UAR can be freed.
        check("cuMemHostRegister(IOMEMORY)", unsafe {
            sys::cuMemHostRegister_v2(start as *mut c_void, page as usize, 0x01 | 0x02 | 0x04)
        })?;
        let mut m = IoMapping {
            ctx: self.clone(),
            start,
            doorbell_offset: reg - start,
            device: Err(CuError::refused("cuMemHostGetDevicePointer", "not asked")),
            _uar: std::marker::PhantomData,
        };
        let mut dp: sys::CUdeviceptr = 0;
        // SAFETY: the page was just registered.
        let g = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dp, start as *mut c_void, 0) };
        m.device = check("cuMemHostGetDevicePointer", g).map(|()| dp);
        Ok(m)
    }

    /// A non-blocking stream (`cuStreamCreate(CU_STREAM_NON_BLOCKING)`).
    pub fn stream(&self) -> Result<Stream, CuError> {
        self.make_current()?;
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: creates a stream in the current context; destroyed on drop.
        check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut s, 1) })?;
        Ok(Stream {
            ctx: self.clone(),
            raw: s,
        })
    }

    /// An event without timing (`CU_EVENT_DISABLE_TIMING`).
    pub fn event(&self) -> Result<Event, CuError> {
        self.make_current()?;
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: creates an event in the current context; destroyed on drop.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, 2) })?;
        Ok(Event {
            _ctx: self.clone(),
            raw: e,
        })
    }

    /// `cuModuleLoadData` of a PTX image (the driver JIT-compiles it for this device).
    pub fn load_module(&self, ptx: &str) -> Result<Module, String> {
        let c = CString::new(ptx).map_err(|e| format!("PTX contains a NUL byte: {e}"))?;
        self.make_current().map_err(|e| e.to_string())?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: c is a NUL-terminated PTX image that outlives the call.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut module, c.as_ptr().cast())
        })
        .map_err(|e| e.to_string())?;
        Ok(Module(Rc::new(ModInner {
            ctx: self.clone(),
            raw: module,
        })))
    }
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// Device memory (`cuMemAlloc` or `cuMemAllocManaged`), freed on drop.
pub struct DeviceBuffer {
    ctx: Context,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer(0x{:x}, {} bytes)", self.ptr, self.len)
    }
}

impl DeviceBuffer {
    /// The device address (a kernel argument, an `ibv_reg_mr` address).
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `cuMemsetD8` of the whole buffer (synchronous).
    pub fn memset_d8(&self, value: u8) -> Result<(), CuError> {
        self.ctx.make_current()?;
        // SAFETY: the range is this allocation.
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(self.ptr, value, self.len)
        })
    }

    /// `cuMemsetD32` of the whole buffer (synchronous): `len / 4` words of `value` (an `f32`
    /// as its bits, `f32::to_bits`).
    pub fn memset_d32(&self, value: u32) -> Result<(), CuError> {
        self.ctx.make_current()?;
        // SAFETY: the range is this allocation (whole 4-byte words only).
        check("cuMemsetD32", unsafe {
            sys::cuMemsetD32_v2(self.ptr, value, self.len / 4)
        })
    }

    /// `cuMemcpyDtoH` of the buffer's first `out.len()` bytes into `out` (synchronous: the
    /// context's earlier work on the legacy stream finishes first; other streams must be
    /// synchronized by the caller).
    pub fn copy_to_host(&self, out: &mut [u8]) -> Result<(), CuError> {
        const CALL: &str = "cuMemcpyDtoH";
        if out.len() > self.len {
            return Err(CuError::refused(CALL, "copy larger than the buffer"));
        }
        self.ctx.make_current()?;
        // SAFETY: `out` is a live, writable host slice of exactly the copied length; the
        // source range lies inside this allocation.
        check(CALL, unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, out.len())
        })
    }

    /// Export the whole buffer as a dma-buf fd (`cuMemGetHandleForAddressRange`).
    pub fn export_dmabuf(&self) -> Result<OwnedFd, CuError> {
        self.export_dmabuf_range(0, self.len)
    }

    /// Export `len` bytes from `offset` as a dma-buf fd.
    pub fn export_dmabuf_range(&self, offset: usize, len: usize) -> Result<OwnedFd, CuError> {
        const CALL: &str = "cuMemGetHandleForAddressRange";
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(CuError::refused(CALL, "range outside the allocation"));
        }
        let mut fd: c_int = -1;
        // SAFETY: the handle out-pointer is an int the driver fills with a new fd; the range
        // lies inside this allocation.
        check(CALL, unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut c_int).cast(),
                self.ptr + offset as u64,
                len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(CuError::refused(CALL, "the driver returned no fd"));
        }
        // SAFETY: the driver handed us a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `cuMemFree` now, reporting its result; the buffer's context must be current (dropping
    /// makes it current first and ignores the result). Used where the free itself is timed.
    pub fn free(self) -> Result<(), CuError> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: frees this allocation exactly once (`me` never drops).
        let r = check("cuMemFree", unsafe { sys::cuMemFree_v2(me.ptr) });
        // SAFETY: moves the context handle out of the never-dropped buffer, so its count
        // drops exactly once.
        drop(unsafe { std::ptr::read(&me.ctx) });
        r
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: frees this allocation exactly once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Pinned host memory the GPU addresses directly (`cuMemHostAlloc` DEVICEMAP), freed on drop.
/// The host reads and writes it only through atomics ([`MappedHost::region`]): the GPU writes
/// it concurrently.
pub struct MappedHost {
    ctx: Context,
    host: *mut c_void,
    dev: sys::CUdeviceptr,
    len: usize,
}

impl MappedHost {
    /// The device address of byte 0 (kernel arguments).
    pub fn device_ptr(&self) -> u64 {
        self.dev
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory as shared words (atomic access only).
    pub fn region(&self) -> Region<'_> {
        // SAFETY: `len` bytes at `host` (8-byte multiple, page aligned) stay allocated while
        // the returned region borrows `self`; host and device access them only atomically.
        unsafe { Region::from_raw(self.host.cast(), self.len) }
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: frees this allocation exactly once.
        unsafe { sys::cuMemFreeHost(self.host) };
    }
}

/// Page-aligned host memory owned by us (`posix_memalign`), to register with the driver.
pub struct HostMemory {
    ptr: *mut u8,
    len: usize,
}

impl HostMemory {
    /// `len` bytes aligned to `align` (a power of two, at least the pointer size).
    pub fn alloc(len: usize, align: usize) -> Option<HostMemory> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign writes our pointer; a bad alignment is an error return.
        let rc = unsafe { libc::posix_memalign(&mut p, align, len) };
        (rc == 0 && !p.is_null()).then(|| HostMemory { ptr: p.cast(), len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        if abandoned() {
            // A registration of it may still be held by the driver.
            return;
        }
        // SAFETY: frees the posix_memalign allocation exactly once (any registration borrowed
        // it and is gone).
        unsafe { libc::free(self.ptr.cast()) };
    }
}

/// A `cuMemHostRegister` of a [`HostMemory`], unregistered on drop.
pub struct HostRegistration<'m> {
    ctx: Context,
    ptr: *mut c_void,
    _mem: std::marker::PhantomData<&'m mut HostMemory>,
}

impl Drop for HostRegistration<'_> {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: unregisters what `Context::register_host` registered, exactly once.
        unsafe { sys::cuMemHostUnregister(self.ptr) };
    }
}

/// A NIC doorbell page registered for the GPU ([`Context::map_uar`]), unregistered on drop.
pub struct IoMapping<'u> {
    ctx: Context,
    start: u64,
    doorbell_offset: u64,
    device: Result<u64, CuError>,
    _uar: std::marker::PhantomData<&'u ()>,
}

impl IoMapping<'_> {
    /// The GPU address of the doorbell register, or why `cuMemHostGetDevicePointer` refused.
    pub fn doorbell_device_ptr(&self) -> Result<u64, &CuError> {
        self.device.as_ref().map(|d| d + self.doorbell_offset)
    }
}

impl Drop for IoMapping<'_> {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: unregisters what `Context::map_uar` registered, exactly once.
        unsafe { sys::cuMemHostUnregister(self.start as *mut c_void) };
    }
}

// ---------------------------------------------------------------------------------------------
// Streams, events, modules, launches
// ---------------------------------------------------------------------------------------------

/// A stream of one context; destroyed on drop.
pub struct Stream {
    ctx: Context,
    raw: sys::CUstream,
}

impl Stream {
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// `cuStreamSynchronize`.
    pub fn synchronize(&self) -> Result<(), CuError> {
        // SAFETY: a live stream handle.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }

    /// The raw `CUstream`, for another library of the live layer that takes a `cudaStream_t`
    /// (the runtime's stream type is the same handle: NCCL's collectives in `live::nccl`). The
    /// stream stays owned by `self`.
    pub(crate) fn raw(&self) -> *mut c_void {
        self.raw.cast()
    }

    /// `cuStreamQuery`: `Ok(true)` when all its work finished, `Ok(false)` while it runs.
    pub fn query(&self) -> Result<bool, CuError> {
        // SAFETY: a live stream handle; non-blocking.
        let q = unsafe { sys::cuStreamQuery(self.raw) };
        if q == sys::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check("cuStreamQuery", q).map(|()| true)
    }

    /// `cuStreamWaitEvent`: later work on this stream waits for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<(), CuError> {
        // SAFETY: live stream and event handles.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(self.raw, event.raw, 0)
        })
    }

    /// `cuMemcpyPeerAsync` of `bytes` from the start of `src` to the start of `dst` (each in
    /// its own context) on this stream.
    pub fn copy_peer(
        &self,
        dst: &DeviceBuffer,
        src: &DeviceBuffer,
        bytes: usize,
    ) -> Result<(), CuError> {
        const CALL: &str = "cuMemcpyPeerAsync";
        if bytes > dst.len || bytes > src.len {
            return Err(CuError::refused(CALL, "copy larger than a buffer"));
        }
        // SAFETY: both ranges lie inside live allocations of retained contexts.
        check(CALL, unsafe {
            sys::cuMemcpyPeerAsync(
                dst.ptr,
                dst.ctx.0.raw,
                src.ptr,
                src.ctx.0.raw,
                bytes,
                self.raw,
            )
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: destroys this stream exactly once.
        unsafe { sys::cuStreamDestroy_v2(self.raw) };
    }
}

/// An event; destroyed on drop.
pub struct Event {
    _ctx: Context,
    raw: sys::CUevent,
}

impl Event {
    /// `cuEventRecord` on `stream`.
    pub fn record(&self, stream: &Stream) -> Result<(), CuError> {
        // SAFETY: live event and stream handles.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw, stream.raw)
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        // SAFETY: destroys this event exactly once.
        unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}

struct ModInner {
    ctx: Context,
    raw: sys::CUmodule,
}

impl Drop for ModInner {
    fn drop(&mut self) {
        if abandoned() {
            return;
        }
        let _ = self.ctx.make_current();
        // SAFETY: unloads this module exactly once; every Function holds the module.
        unsafe { sys::cuModuleUnload(self.raw) };
    }
}

/// A loaded module; its functions keep it loaded.
#[derive(Clone)]
pub struct Module(Rc<ModInner>);

impl Module {
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// `cuModuleGetFunction`.
    pub fn function(&self, name: &str) -> Result<Function, String> {
        let cn = CString::new(name).map_err(|e| e.to_string())?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded while `self` lives; cn is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.0.raw, cn.as_ptr())
        })
        .map_err(|e| format!("{e}: {name}"))?;
        Ok(Function {
            _module: self.clone(),
            raw: f,
        })
    }
}

/// A kernel argument (the probe kernels take 64-bit pointers and counters, 32-bit flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelArg {
    U64(u64),
    U32(u32),
}

/// A kernel of a loaded module.
pub struct Function {
    _module: Module,
    raw: sys::CUfunction,
}

impl Function {
    /// `cuLaunchKernel` with a 1-D grid and block, no dynamic shared memory, on `stream`.
    pub fn launch(
        &self,
        grid: u32,
        block: u32,
        stream: &Stream,
        args: &[KernelArg],
    ) -> Result<(), CuError> {
        self.launch_with(grid, block, stream, args, false)
    }

    /// `cuLaunchCooperativeKernel` (refused by the driver for grids that cannot be resident).
    pub fn launch_cooperative(
        &self,
        grid: u32,
        block: u32,
        stream: &Stream,
        args: &[KernelArg],
    ) -> Result<(), CuError> {
        self.launch_with(grid, block, stream, args, true)
    }

    fn launch_with(
        &self,
        grid: u32,
        block: u32,
        stream: &Stream,
        args: &[KernelArg],
        cooperative: bool,
    ) -> Result<(), CuError> {
        // The values live in `vals`, which is not resized while `params` points into it.
        let mut vals: Vec<KernelArg> = args.to_vec();
        let mut params: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|a| match a {
                KernelArg::U64(v) => (v as *mut u64).cast::<c_void>(),
                KernelArg::U32(v) => (v as *mut u32).cast::<c_void>(),
            })
            .collect();
        // SAFETY: `params` points to one value per kernel parameter, alive across the call (the
        // driver copies them before returning). A kernel whose parameters do not match `args`
        // reads wrong device addresses: that is a CUDA error (illegal address) reported by the
        // next synchronising call, never a write to host memory the GPU was not given.
        let r = unsafe {
            if cooperative {
                sys::cuLaunchCooperativeKernel(
                    self.raw,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    stream.raw,
                    params.as_mut_ptr(),
                )
            } else {
                sys::cuLaunchKernel(
                    self.raw,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    stream.raw,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
        };
        check(
            if cooperative {
                "cuLaunchCooperativeKernel"
            } else {
                "cuLaunchKernel"
            },
            r,
        )
    }

    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor` for `block` threads and no dynamic shared
    /// memory.
    pub fn max_active_blocks_per_sm(&self, block: i32) -> Result<i32, CuError> {
        let mut n: c_int = 0;
        // SAFETY: occupancy query on a loaded function; writes one int.
        check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, self.raw, block, 0)
        })?;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------------
// Facts for `check` (no context is created)
// ---------------------------------------------------------------------------------------------

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
