//! The DEVX UAR of an mlx5 device (`mlx5dv_devx_alloc_uar`): where its doorbell is.

use super::device::Context;
use super::error::{clear_errno, errno, VerbsError, EOPNOTSUPP};
use super::ffi::{Mlx5DevxFreeUarFn, Mlx5dvDevxUar};
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

impl Context<'_> {
    /// `mlx5dv_devx_alloc_uar(ctx, flags)` with `flags` one of the `MLX5DV_UAR_ALLOC_TYPE_*`.
    /// Refused with `EOPNOTSUPP` (as libmlx5 itself would) when libmlx5 or its symbols are
    /// absent or the device is not (provably) mlx5.
    pub fn alloc_devx_uar(&self, flags: u32) -> Result<DevxUar<'_>, VerbsError> {
        const CALL: &str = "mlx5dv_devx_alloc_uar";
        let m = self
            .verbs
            .mlx5
            .as_ref()
            .map_err(|e| VerbsError::ours(CALL, EOPNOTSUPP, e.to_string()))?;
        let (Some(alloc), Some(free)) = (m.devx_alloc_uar, m.devx_free_uar) else {
            return Err(VerbsError::ours(
                CALL,
                EOPNOTSUPP,
                format!(
                    "{} lacks mlx5dv_devx_alloc_uar/free_uar@MLX5_1.7",
                    m.library
                ),
            ));
        };
        match self.is_mlx5() {
            Some(true) => {}
            Some(false) => {
                return Err(VerbsError::ours(
                    CALL,
                    EOPNOTSUPP,
                    format!("{} is not an mlx5 device", self.name),
                ))
            }
            None => {
                return Err(VerbsError::ours(
                    CALL,
                    EOPNOTSUPP,
                    format!(
                        "{} lacks mlx5dv_is_supported@MLX5_1.8: cannot confirm {} is mlx5",
                        m.library, self.name
                    ),
                ))
            }
        }
        clear_errno();
        // SAFETY: live context of an mlx5 device; flags is a plain integer libmlx5 validates.
        let uar = unsafe { alloc(self.raw.as_ptr(), flags) };
        match NonNull::new(uar) {
            Some(raw) => Ok(DevxUar {
                raw,
                free,
                _ctx: std::marker::PhantomData,
            }),
            None => Err(VerbsError::new(CALL, errno())),
        }
    }
}

/// A DEVX UAR (`mlx5dv_devx_alloc_uar`); freed on drop (a no-op in libmlx5 for the shared
/// `NC` singleton).
pub struct DevxUar<'c> {
    raw: NonNull<Mlx5dvDevxUar>,
    free: Mlx5DevxFreeUarFn,
    _ctx: std::marker::PhantomData<&'c Context<'c>>,
}

impl fmt::Debug for DevxUar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.get(), f)
    }
}

impl DevxUar<'_> {
    fn get(&self) -> &Mlx5dvDevxUar {
        // SAFETY: the UAR is live while `self` is, and the struct is declared completely.
        unsafe { self.raw.as_ref() }
    }

    /// The raw `struct mlx5dv_devx_uar *`, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut Mlx5dvDevxUar {
        self.raw.as_ptr()
    }

    /// The exact doorbell VA.
    pub fn reg_addr(&self) -> *mut c_void {
        self.get().reg_addr
    }

    /// VA of the mmapped system page holding the UAR.
    pub fn base_addr(&self) -> *mut c_void {
        self.get().base_addr
    }

    /// Firmware index of the 4 KiB UAR containing `reg_addr`.
    pub fn page_id(&self) -> u32 {
        self.get().page_id
    }

    /// The uverbs mmap cookie (not a BAR offset).
    pub fn mmap_off(&self) -> libc::off_t {
        self.get().mmap_off
    }

    /// `comp_mask`.
    pub fn comp_mask(&self) -> u64 {
        self.get().comp_mask
    }
}

impl Drop for DevxUar<'_> {
    fn drop(&mut self) {
        // SAFETY: the UAR is live and freed exactly once, before its context closes.
        unsafe { (self.free)(self.raw.as_ptr()) }
    }
}
