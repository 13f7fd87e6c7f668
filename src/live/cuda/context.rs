//! A retained primary context (`Device::primary_context`) and the calls on it: make it current,
//! the printf FIFO, synchronise, peer access. What is made in it is in [`super::memory`]
//! (buffers, host memory, a NIC page) and [`super::launch`] (streams, events, modules).

use super::driver::Device;
use super::{abandoned, check, CuError};
use cudarc::driver::sys;
use std::rc::Rc;

pub(super) struct CtxInner {
    pub(super) raw: sys::CUcontext,
    pub(super) dev: Device,
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
pub struct Context(pub(super) Rc<CtxInner>);

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
}

impl Device {
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
