//! Memory registration: a protection domain, `ibv_reg_mr` and `ibv_reg_dmabuf_mr`, NCCL's
//! dma-buf probe, and the registered region.

use super::device::Context;
use super::error::{clear_errno, errno, rc_errno, VerbsError, EINVAL, EOPNOTSUPP, EPROTONOSUPPORT};
use super::ffi::{IbvMr, IbvPd};
use super::load::Verbs;
use super::ACCESS_OPTIONAL_RANGE;
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

/// A protection domain (`ibv_alloc_pd`); deallocated on drop.
pub struct Pd<'c> {
    pub(super) verbs: &'c Verbs,
    pub(super) raw: NonNull<IbvPd>,
    pub(super) _ctx: std::marker::PhantomData<&'c Context<'c>>,
}

impl fmt::Debug for Pd<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("handle", &self.handle())
            .finish()
    }
}

/// NCCL's dma-buf support probe result (gdr-ground-truth D02).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmabufProbe {
    /// libibverbs has no `ibv_reg_dmabuf_mr@IBVERBS_1.12` (rdma-core < 34). NCCL's wrapper
    /// reports `EOPNOTSUPP`, so DMA-BUF is off.
    SymbolMissing,
    /// errno `EOPNOTSUPP` (95) or `EPROTONOSUPPORT` (93): the kernel or provider cannot
    /// register dma-buf memory. NCCL disables DMA-BUF.
    Unsupported {
        /// The errno observed.
        errno: i32,
    },
    /// Any other errno (normally `EBADF` 9 for fd -1): NCCL treats dma-buf as supported. An
    /// errno of 0 means the call unexpectedly returned an MR (it was deregistered at once).
    Supported {
        /// The errno observed.
        errno: i32,
    },
}

impl DmabufProbe {
    /// NCCL would enable dma-buf registration on this device (as far as the NIC side goes).
    pub fn is_supported(&self) -> bool {
        matches!(self, DmabufProbe::Supported { .. })
    }

    /// The errno NCCL's probe sees: 95 (`EOPNOTSUPP`) when the symbol is missing, as NCCL's
    /// wrapper reports it.
    pub fn errno(&self) -> i32 {
        match *self {
            DmabufProbe::SymbolMissing => 95,
            DmabufProbe::Unsupported { errno } | DmabufProbe::Supported { errno } => errno,
        }
    }
}

impl Pd<'_> {
    /// The raw `struct ibv_pd *`, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut IbvPd {
        self.raw.as_ptr()
    }

    /// The kernel handle of the PD.
    pub fn handle(&self) -> u32 {
        // SAFETY: the PD is live and `handle` is a plain field of the complete ibv_pd.
        unsafe { (*self.raw.as_ptr()).handle }
    }

    /// `ibv_reg_mr` (the plain exported symbol) on the virtual address range
    /// `addr..addr + len`. The address is an integer because it is usually a GPU pointer
    /// (`CUdeviceptr`); for host memory pass `ptr as u64`. Access flags with bits in
    /// [`ACCESS_OPTIONAL_RANGE`] are refused with `EINVAL` before the call: the verbs.h inline
    /// would divert them to `ibv_reg_mr_iova2`, which this module does not use.
    ///
    /// Safe with any address: the kernel validates and pins the range (a GPU VA nobody claims
    /// fails with `EFAULT`), nothing in this process reads or writes through it, and this
    /// module exposes no queue pair through which the NIC could write to it.
    pub fn reg_mr(&self, addr: u64, len: usize, access: i32) -> Result<Mr<'_>, VerbsError> {
        const CALL: &str = "ibv_reg_mr";
        if access & ACCESS_OPTIONAL_RANGE != 0 {
            return Err(VerbsError::ours(
                CALL,
                EINVAL,
                format!(
                    "access flags {access:#x} contain optional bits ({ACCESS_OPTIONAL_RANGE:#x}), \
                     which the plain ibv_reg_mr symbol must not get"
                ),
            ));
        }
        let Ok(addr) = usize::try_from(addr) else {
            return Err(VerbsError::ours(
                CALL,
                EINVAL,
                format!("address {addr:#x} does not fit this platform's pointers"),
            ));
        };
        clear_errno();
        // SAFETY: live PD; the address range is only handed to the kernel (see above).
        let mr =
            unsafe { (self.verbs.fns.reg_mr)(self.raw.as_ptr(), addr as *mut c_void, len, access) };
        self.wrap_mr(mr, CALL)
    }

    /// `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`. Without the symbol this is an
    /// `EOPNOTSUPP` error, as NCCL's wrapper reports it.
    pub fn reg_dmabuf_mr(
        &self,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: i32,
    ) -> Result<Mr<'_>, VerbsError> {
        const CALL: &str = "ibv_reg_dmabuf_mr";
        let Some(f) = self.verbs.fns.reg_dmabuf_mr else {
            return Err(VerbsError::ours(
                CALL,
                EOPNOTSUPP,
                format!(
                    "{} has no ibv_reg_dmabuf_mr@IBVERBS_1.12 (rdma-core < 34)",
                    self.verbs.library
                ),
            ));
        };
        clear_errno();
        // SAFETY: live PD; the kernel validates fd, offset and length against the dma-buf.
        let mr = unsafe { f(self.raw.as_ptr(), offset, len, iova, fd, access) };
        self.wrap_mr(mr, CALL)
    }

    fn wrap_mr(&self, mr: *mut IbvMr, call: &'static str) -> Result<Mr<'_>, VerbsError> {
        match NonNull::new(mr) {
            Some(raw) => Ok(Mr {
                verbs: self.verbs,
                raw,
                _pd: std::marker::PhantomData,
            }),
            None => Err(VerbsError::new(call, errno())),
        }
    }

    /// NCCL's own dma-buf support probe (gdr-ground-truth D02):
    /// `ibv_reg_dmabuf_mr(pd, 0, 0, 0, fd=-1, 0)`; errno `EOPNOTSUPP` (95) /
    /// `EPROTONOSUPPORT` (93) means unsupported, anything else (normally `EBADF`) supported.
    pub fn dmabuf_probe(&self) -> DmabufProbe {
        if self.verbs.fns.reg_dmabuf_mr.is_none() {
            return DmabufProbe::SymbolMissing;
        }
        match self.reg_dmabuf_mr(0, 0, 0, -1, 0) {
            Ok(mr) => {
                drop(mr);
                DmabufProbe::Supported { errno: 0 }
            }
            Err(e) if e.errno == EOPNOTSUPP || e.errno == EPROTONOSUPPORT => {
                DmabufProbe::Unsupported { errno: e.errno }
            }
            Err(e) => DmabufProbe::Supported { errno: e.errno },
        }
    }

    /// `ibv_dealloc_pd`, reporting its result (dropping deallocates and ignores it).
    pub fn dealloc(self) -> Result<(), VerbsError> {
        // SAFETY: the PD is live; `self` is forgotten below, so Drop does not free it again.
        let rc = unsafe { (self.verbs.fns.dealloc_pd)(self.raw.as_ptr()) };
        std::mem::forget(self);
        if rc != 0 {
            return Err(VerbsError::new("ibv_dealloc_pd", rc_errno(rc)));
        }
        Ok(())
    }
}

impl Drop for Pd<'_> {
    fn drop(&mut self) {
        // SAFETY: the PD is live and freed exactly once; its MRs borrowed it and are gone.
        unsafe { (self.verbs.fns.dealloc_pd)(self.raw.as_ptr()) };
    }
}

/// A registered memory region; deregistered on drop.
pub struct Mr<'p> {
    verbs: &'p Verbs,
    raw: NonNull<IbvMr>,
    _pd: std::marker::PhantomData<&'p Pd<'p>>,
}

impl fmt::Debug for Mr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.addr())
            .field("length", &self.length())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl Mr<'_> {
    fn get(&self) -> &IbvMr {
        // SAFETY: the MR is live while `self` is, and ibv_mr is declared completely.
        unsafe { self.raw.as_ref() }
    }

    /// The raw `struct ibv_mr *`, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut IbvMr {
        self.raw.as_ptr()
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.get().lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.get().rkey
    }

    /// Kernel handle.
    pub fn handle(&self) -> u32 {
        self.get().handle
    }

    /// Registered address (the dma-buf offset for a dma-buf MR, as libibverbs records it).
    pub fn addr(&self) -> *mut c_void {
        self.get().addr
    }

    /// Registered length.
    pub fn length(&self) -> usize {
        self.get().length
    }

    /// `ibv_dereg_mr`, reporting its result (dropping deregisters and ignores it).
    pub fn deregister(self) -> Result<(), VerbsError> {
        // SAFETY: the MR is live; `self` is forgotten below, so Drop does not free it again.
        let rc = unsafe { (self.verbs.fns.dereg_mr)(self.raw.as_ptr()) };
        std::mem::forget(self);
        if rc != 0 {
            return Err(VerbsError::new("ibv_dereg_mr", rc_errno(rc)));
        }
        Ok(())
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // SAFETY: the MR is live and deregistered exactly once.
        unsafe { (self.verbs.fns.dereg_mr)(self.raw.as_ptr()) };
    }
}

impl Context<'_> {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd<'_>, VerbsError> {
        clear_errno();
        // SAFETY: live context.
        let pd = unsafe { (self.verbs.fns.alloc_pd)(self.raw.as_ptr()) };
        match NonNull::new(pd) {
            Some(raw) => Ok(Pd {
                verbs: self.verbs,
                raw,
                _ctx: std::marker::PhantomData,
            }),
            None => Err(VerbsError::new("ibv_alloc_pd", errno())),
        }
    }
}
