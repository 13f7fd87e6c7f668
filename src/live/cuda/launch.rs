//! Streams, events, modules and launches, and the context's calls that make them.

use super::context::Context;
use super::memory::DeviceBuffer;
use super::{abandoned, check, CuError};
use cudarc::driver::sys;
use std::ffi::{c_int, c_void, CString};
use std::rc::Rc;

/// A stream of one context; destroyed on drop.
pub struct Stream {
    pub(super) ctx: Context,
    pub(super) raw: sys::CUstream,
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
    pub(super) _ctx: Context,
    pub(super) raw: sys::CUevent,
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

pub(super) struct ModInner {
    pub(super) ctx: Context,
    pub(super) raw: sys::CUmodule,
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
pub struct Module(pub(super) Rc<ModInner>);

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
    pub(super) _module: Module,
    pub(super) raw: sys::CUfunction,
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

impl Context {
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
