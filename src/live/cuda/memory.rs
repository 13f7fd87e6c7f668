//! Memory: device buffers (with their dma-buf export), host memory the GPU sees (mapped or
//! registered) and a NIC page mapped for the GPU, and the context's calls that make them.

use super::context::Context;
use super::{abandoned, check, CuError};
use crate::live::shared::Region;
use cudarc::driver::sys;
use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};

/// Device memory (`cuMemAlloc` or `cuMemAllocManaged`), freed on drop.
pub struct DeviceBuffer {
    pub(super) ctx: Context,
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) len: usize,
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
    pub(super) ctx: Context,
    pub(super) host: *mut c_void,
    pub(super) dev: sys::CUdeviceptr,
    pub(super) len: usize,
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
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
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
    pub(super) ctx: Context,
    pub(super) ptr: *mut c_void,
    pub(super) _mem: std::marker::PhantomData<&'m mut HostMemory>,
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
    pub(super) ctx: Context,
    pub(super) start: u64,
    pub(super) doorbell_offset: u64,
    pub(super) device: Result<u64, CuError>,
    pub(super) _uar: std::marker::PhantomData<&'u ()>,
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

impl Context {
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
        uar: &'u crate::live::verbs::DevxUar<'_>,
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
}
