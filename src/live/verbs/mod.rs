//! Runtime-loaded FFI to `libibverbs.so.1` and (optionally) `libmlx5.so.1`.
//!
//! Nothing here links against rdma-core: both libraries are opened with `dlopen` (through
//! [`libloading`]) when [`Verbs::load`] is called, so `cargo build` needs no rdma-core headers,
//! no clang and no pkg-config, and the binary starts on a node without libibverbs. Absence is a
//! value: a missing library is a [`LoadError`], a missing optional symbol is `None`, a failing
//! call is a [`VerbsError`] carrying the errno and what it usually means. Nothing panics on
//! anything the system returns.
//!
//! Only exported, versioned symbols are used, looked up the way NCCL does it (`dlvsym` with
//! the rdma-core symbol version, `IBVERBS_1.1` for the core verbs, `IBVERBS_1.12` for
//! `ibv_reg_dmabuf_mr`); on C libraries without `dlvsym` a plain `dlsym` is used. Three traps
//! of `<infiniband/verbs.h>` are reproduced by hand (knowledge/crates.md §1.4):
//!
//! - `ibv_query_port` is a macro over an inline; the exported symbol is the compat entry
//!   point that fills only the prefix up to `flags`. [`Context::query_port`] zeroes the whole
//!   (newest-size) struct first, exactly as the inline does, so `port_cap_flags2` and
//!   `active_speed_ex` read as 0 (sysfs `ports/N/rate` has the full speed).
//! - `ibv_reg_mr` is a macro that diverts to `ibv_reg_mr_iova2` when the access flags carry
//!   optional bits; [`Pd::reg_mr`] calls the plain symbol and refuses optional bits.
//! - `ibv_get_device_list` is a macro that only adds static-provider registration; the
//!   exported symbol is used directly. `NULL` + `ENOSYS` means no kernel RDMA support.
//!
//! The `#[repr(C)]` structs mirror rdma-core's `libibverbs/verbs.h` and
//! `providers/mlx5/mlx5dv.h`; `tests/verbs.rs` compiles `tests/verbs_layout.c` against the
//! system headers and compares every offset and size declared here.
//!
//! The bindings ([`ffi`]: the C structs and the function pointer types), the errors and what
//! each errno usually means ([`error`]), loading the libraries ([`load`]), the devices and their
//! queries ([`device`]), memory registration ([`mr`]) and the DEVX UAR ([`uar`]).

mod device;
mod error;
mod ffi;
mod load;
mod mr;
mod uar;

pub use device::{Context, DeviceInfo};
pub use error::{explain_errno, LoadError, VerbsError};
pub use ffi::{IbvContext, IbvDevice, IbvDeviceAttr, IbvMr, IbvPd, IbvPortAttr, Mlx5dvDevxUar};
pub use load::{Mlx5dv, Verbs};
pub use mr::{DmabufProbe, Mr, Pd};
pub use uar::DevxUar;

/// Soname of libibverbs that [`Verbs::load`] opens.
pub const IBVERBS_LIB: &str = "libibverbs.so.1";
/// Soname of the mlx5 direct-verbs library that [`Verbs::load`] tries to open alongside.
pub const MLX5_LIB: &str = "libmlx5.so.1";

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: i32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: i32 = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: i32 = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: i32 = 1 << 3;
/// `IBV_ACCESS_RELAXED_ORDERING` (the first "optional" access bit).
pub const ACCESS_RELAXED_ORDERING: i32 = 1 << 20;
/// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..=29. The `ibv_reg_mr` inline diverts such flags to
/// `ibv_reg_mr_iova2`; [`Pd::reg_mr`] uses the plain symbol and so refuses them.
pub const ACCESS_OPTIONAL_RANGE: i32 = 0x3ff0_0000;
/// The access flags NCCL uses for a GPU buffer (`ncclGpuGdrSupport`, gdr-ground-truth P01).
pub const ACCESS_NCCL_GPU: i32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

/// `IBV_PORT_ACTIVE` (`ibv_port_attr.state`).
pub const PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_INFINIBAND` (`ibv_port_attr.link_layer`).
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET` (`ibv_port_attr.link_layer`).
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// `MLX5DV_UAR_ALLOC_TYPE_BF`: a BlueFlame UAR (write-combining mapping).
pub const MLX5DV_UAR_ALLOC_TYPE_BF: u32 = 0;
/// `MLX5DV_UAR_ALLOC_TYPE_NC`: the context's singleton non-cached UAR (freeing it is a no-op).
pub const MLX5DV_UAR_ALLOC_TYPE_NC: u32 = 1;
/// `MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED` (`1U << 31`, rdma-core >= 45): a dedicated
/// non-cached UAR. Older libmlx5 rejects it with `EOPNOTSUPP`.
pub const MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED: u32 = 1 << 31;

#[cfg(test)]
mod tests;
