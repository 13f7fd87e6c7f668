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

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::ptr::NonNull;

use libloading::os::unix::Library;

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

const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const EBADF: i32 = 9;
const ENOMEM: i32 = 12;
const EACCES: i32 = 13;
const EFAULT: i32 = 14;
const ENODEV: i32 = 19;
const EINVAL: i32 = 22;
const ENOSYS: i32 = 38;
const EPROTONOSUPPORT: i32 = 93;
const EOPNOTSUPP: i32 = 95;
/// Kernel-internal `ENOTSUPP`, which leaks to user space from some dma-buf paths.
const ENOTSUPP_KERNEL: i32 = 524;

// ---------------------------------------------------------------------------------------------
// C structs (rdma-core libibverbs/verbs.h, providers/mlx5/mlx5dv.h)
// ---------------------------------------------------------------------------------------------

/// `struct ibv_device`: only ever handled by pointer.
#[repr(C)]
pub struct IbvDevice {
    _opaque: [u8; 0],
}

/// The head of `struct ibv_context`. We never allocate one; we read `device` (offset 0) from
/// a context libibverbs returned. The rest of the struct (ops table, fds, mutex) is not
/// declared.
#[repr(C)]
pub struct IbvContext {
    /// `struct ibv_device *device`.
    pub device: *mut IbvDevice,
}

/// `struct ibv_pd` (complete).
#[repr(C)]
pub struct IbvPd {
    /// `struct ibv_context *context`.
    pub context: *mut IbvContext,
    /// `uint32_t handle`: the kernel object handle.
    pub handle: u32,
}

/// `struct ibv_mr` (complete).
#[repr(C)]
pub struct IbvMr {
    /// `struct ibv_context *context`.
    pub context: *mut IbvContext,
    /// `struct ibv_pd *pd`.
    pub pd: *mut IbvPd,
    /// `void *addr`: the registered address (the dma-buf offset for a dma-buf MR).
    pub addr: *mut c_void,
    /// `size_t length`.
    pub length: usize,
    /// `uint32_t handle`.
    pub handle: u32,
    /// `uint32_t lkey`.
    pub lkey: u32,
    /// `uint32_t rkey`.
    pub rkey: u32,
}

/// `struct ibv_port_attr`, sized to the newest known layout (rdma-core >= 49 adds
/// `active_speed_ex`: 56 bytes; rdma-core 44, Debian 12, ends at `port_cap_flags2`: 52 bytes).
/// The exported `ibv_query_port` fills only the compat prefix up to `flags` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state` (4 = `IBV_PORT_ACTIVE`).
    pub state: u32,
    /// `enum ibv_mtu` (1 = 256 .. 5 = 4096).
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    /// `int gid_tbl_len`.
    pub gid_tbl_len: i32,
    /// `uint32_t port_cap_flags`.
    pub port_cap_flags: u32,
    /// `uint32_t max_msg_sz`.
    pub max_msg_sz: u32,
    /// `uint32_t bad_pkey_cntr`.
    pub bad_pkey_cntr: u32,
    /// `uint32_t qkey_viol_cntr`.
    pub qkey_viol_cntr: u32,
    /// `uint16_t pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `uint16_t lid`.
    pub lid: u16,
    /// `uint16_t sm_lid`.
    pub sm_lid: u16,
    /// `uint8_t lmc`.
    pub lmc: u8,
    /// `uint8_t max_vl_num`.
    pub max_vl_num: u8,
    /// `uint8_t sm_sl`.
    pub sm_sl: u8,
    /// `uint8_t subnet_timeout`.
    pub subnet_timeout: u8,
    /// `uint8_t init_type_reply`.
    pub init_type_reply: u8,
    /// `uint8_t active_width` (IB encoding: 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x).
    pub active_width: u8,
    /// `uint8_t active_speed` (IB encoding).
    pub active_speed: u8,
    /// `uint8_t phys_state` (5 = LinkUp).
    pub phys_state: u8,
    /// `uint8_t link_layer` (1 = InfiniBand, 2 = Ethernet).
    pub link_layer: u8,
    /// `uint8_t flags`: the last field the exported (compat) `ibv_query_port` fills.
    pub flags: u8,
    /// `uint16_t port_cap_flags2`: not filled through the compat symbol; reads as 0.
    pub port_cap_flags2: u16,
    /// `uint32_t active_speed_ex` (rdma-core >= 49): not filled through the compat symbol.
    pub active_speed_ex: u32,
}

impl IbvPortAttr {
    /// The port state as the kernel's sysfs `ports/N/state` spells it (`ACTIVE`, `DOWN`...).
    pub fn state_name(&self) -> &'static str {
        match self.state {
            0 => "NOP",
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "UNKNOWN",
        }
    }

    /// The physical state as sysfs `ports/N/phys_state` spells it (`LinkUp`, `Polling`...).
    pub fn phys_state_name(&self) -> &'static str {
        match self.phys_state {
            1 => "Sleep",
            2 => "Polling",
            3 => "Disabled",
            4 => "PortConfigurationTraining",
            5 => "LinkUp",
            6 => "LinkErrorRecovery",
            7 => "Phy Test",
            _ => "<unknown>",
        }
    }

    /// The link layer as sysfs `ports/N/link_layer` spells it. libibverbs reports 0
    /// (unspecified) for InfiniBand on old providers, as `ibv_devinfo` does we call that
    /// InfiniBand.
    pub fn link_layer_name(&self) -> &'static str {
        match self.link_layer {
            0 | LINK_LAYER_INFINIBAND => "InfiniBand",
            LINK_LAYER_ETHERNET => "Ethernet",
            _ => "Unknown",
        }
    }

    /// `active_mtu` in bytes (`None` for an encoding outside 1..=5).
    pub fn active_mtu_bytes(&self) -> Option<u32> {
        mtu_bytes(self.active_mtu)
    }

    /// `max_mtu` in bytes (`None` for an encoding outside 1..=5).
    pub fn max_mtu_bytes(&self) -> Option<u32> {
        mtu_bytes(self.max_mtu)
    }
}

fn mtu_bytes(enc: u32) -> Option<u32> {
    (1..=5).contains(&enc).then(|| 128u32 << enc)
}

/// `struct ibv_device_attr` (complete; 232 bytes on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbvDeviceAttr {
    /// `char fw_ver[64]`, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// `__be64 node_guid` (network byte order as stored).
    pub node_guid: u64,
    /// `__be64 sys_image_guid`.
    pub sys_image_guid: u64,
    /// `uint64_t max_mr_size`.
    pub max_mr_size: u64,
    /// `uint64_t page_size_cap`.
    pub page_size_cap: u64,
    /// `uint32_t vendor_id` (IEEE OUI; 0x02c9 = Mellanox).
    pub vendor_id: u32,
    /// `uint32_t vendor_part_id` (the PCI device id, e.g. 4129 = ConnectX-7).
    pub vendor_part_id: u32,
    /// `uint32_t hw_ver`.
    pub hw_ver: u32,
    /// `int max_qp`.
    pub max_qp: i32,
    /// `int max_qp_wr`.
    pub max_qp_wr: i32,
    /// `unsigned int device_cap_flags`.
    pub device_cap_flags: u32,
    /// `int max_sge`.
    pub max_sge: i32,
    /// `int max_sge_rd`.
    pub max_sge_rd: i32,
    /// `int max_cq`.
    pub max_cq: i32,
    /// `int max_cqe`.
    pub max_cqe: i32,
    /// `int max_mr`.
    pub max_mr: i32,
    /// `int max_pd`.
    pub max_pd: i32,
    /// `int max_qp_rd_atom`.
    pub max_qp_rd_atom: i32,
    /// `int max_ee_rd_atom`.
    pub max_ee_rd_atom: i32,
    /// `int max_res_rd_atom`.
    pub max_res_rd_atom: i32,
    /// `int max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: i32,
    /// `int max_ee_init_rd_atom`.
    pub max_ee_init_rd_atom: i32,
    /// `enum ibv_atomic_cap atomic_cap`.
    pub atomic_cap: u32,
    /// `int max_ee`.
    pub max_ee: i32,
    /// `int max_rdd`.
    pub max_rdd: i32,
    /// `int max_mw`.
    pub max_mw: i32,
    /// `int max_raw_ipv6_qp`.
    pub max_raw_ipv6_qp: i32,
    /// `int max_raw_ethy_qp`.
    pub max_raw_ethy_qp: i32,
    /// `int max_mcast_grp`.
    pub max_mcast_grp: i32,
    /// `int max_mcast_qp_attach`.
    pub max_mcast_qp_attach: i32,
    /// `int max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: i32,
    /// `int max_ah`.
    pub max_ah: i32,
    /// `int max_fmr`.
    pub max_fmr: i32,
    /// `int max_map_per_fmr`.
    pub max_map_per_fmr: i32,
    /// `int max_srq`.
    pub max_srq: i32,
    /// `int max_srq_wr`.
    pub max_srq_wr: i32,
    /// `int max_srq_sge`.
    pub max_srq_sge: i32,
    /// `uint16_t max_pkeys`.
    pub max_pkeys: u16,
    /// `uint8_t local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `uint8_t phys_port_cnt`.
    pub phys_port_cnt: u8,
}

impl Default for IbvDeviceAttr {
    fn default() -> Self {
        // SAFETY: every field is an integer or an array of integers; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

impl IbvDeviceAttr {
    /// `fw_ver` up to its NUL (lossy UTF-8; the whole array if there is no NUL).
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// `node_guid` as a number (converted from network byte order).
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.node_guid)
    }
}

/// `struct mlx5dv_devx_uar` (complete; providers/mlx5/mlx5dv.h).
#[repr(C)]
#[derive(Debug)]
pub struct Mlx5dvDevxUar {
    /// `void *reg_addr`: the exact doorbell VA.
    pub reg_addr: *mut c_void,
    /// `void *base_addr`: VA of the mmapped system page holding the UAR.
    pub base_addr: *mut c_void,
    /// `uint32_t page_id`: firmware index of the 4 KiB UAR containing `reg_addr`.
    pub page_id: u32,
    /// `off_t mmap_off`: the uverbs mmap cookie (not a BAR offset).
    pub mmap_off: libc::off_t,
    /// `uint64_t comp_mask`.
    pub comp_mask: u64,
}

// ---------------------------------------------------------------------------------------------
// Function pointer types
// ---------------------------------------------------------------------------------------------

type GetDeviceListFn = unsafe extern "C" fn(num: *mut c_int) -> *mut *mut IbvDevice;
type FreeDeviceListFn = unsafe extern "C" fn(list: *mut *mut IbvDevice);
type GetDeviceNameFn = unsafe extern "C" fn(device: *mut IbvDevice) -> *const c_char;
type GetDeviceGuidFn = unsafe extern "C" fn(device: *mut IbvDevice) -> u64;
type OpenDeviceFn = unsafe extern "C" fn(device: *mut IbvDevice) -> *mut IbvContext;
type CloseDeviceFn = unsafe extern "C" fn(context: *mut IbvContext) -> c_int;
type QueryDeviceFn =
    unsafe extern "C" fn(context: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int;
type QueryPortFn =
    unsafe extern "C" fn(context: *mut IbvContext, port: u8, attr: *mut IbvPortAttr) -> c_int;
type AllocPdFn = unsafe extern "C" fn(context: *mut IbvContext) -> *mut IbvPd;
type DeallocPdFn = unsafe extern "C" fn(pd: *mut IbvPd) -> c_int;
type RegMrFn = unsafe extern "C" fn(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut IbvMr;
type RegDmabufMrFn = unsafe extern "C" fn(
    pd: *mut IbvPd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut IbvMr;
type DeregMrFn = unsafe extern "C" fn(mr: *mut IbvMr) -> c_int;
type Mlx5IsSupportedFn = unsafe extern "C" fn(device: *mut IbvDevice) -> bool;
type Mlx5DevxAllocUarFn =
    unsafe extern "C" fn(context: *mut IbvContext, flags: u32) -> *mut Mlx5dvDevxUar;
type Mlx5DevxFreeUarFn = unsafe extern "C" fn(uar: *mut Mlx5dvDevxUar);

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A library could not be loaded, or lacks a symbol we cannot do without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The library as we asked `dlopen` for it (`libibverbs.so.1`, or a path).
    pub library: String,
    /// The missing symbol as `name@VERSION`, when the library loaded but lacks it.
    pub symbol: Option<String>,
    /// The `dlerror` text (libloading's own `Display` is only "dlopen failed"; this is the
    /// whole source chain).
    pub detail: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.symbol {
            None => write!(f, "{} not loadable: {}", self.library, self.detail),
            Some(s) => write!(f, "{} lacks symbol {}: {}", self.library, s, self.detail),
        }
    }
}

impl std::error::Error for LoadError {}

/// A verbs call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsError {
    /// The C function that failed (`ibv_reg_mr`, `ibv_get_device_list`...).
    pub call: &'static str,
    /// The errno it left (or returned); 0 if it failed without setting one.
    pub errno: i32,
    /// `strerror(errno)` followed by the usual cause when known.
    pub message: String,
    /// The usual cause of this errno from this call ([`explain_errno`]); empty when unknown.
    pub cause: &'static str,
    /// What to change ([`explain_errno`]); empty when unknown.
    pub fix: &'static str,
}

impl VerbsError {
    /// The error for `call` failing with `errno`, explained by [`explain_errno`].
    pub fn new(call: &'static str, errno: i32) -> VerbsError {
        let (cause, fix) = explain_errno(call, errno);
        let os = if errno == 0 {
            "failed without setting errno".to_string()
        } else {
            std::io::Error::from_raw_os_error(errno).to_string()
        };
        let message = if cause.is_empty() {
            os
        } else {
            format!("{os}: {cause}")
        };
        VerbsError {
            call,
            errno,
            message,
            cause,
            fix,
        }
    }

    /// A failure decided on our side (symbol or library missing, bad argument), reported with
    /// the errno the C wrappers of NCCL and rdma-core use for the same situation.
    fn ours(call: &'static str, errno: i32, message: String) -> VerbsError {
        let (cause, fix) = explain_errno(call, errno);
        VerbsError {
            call,
            errno,
            message,
            cause,
            fix,
        }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.call, self.message)
    }
}

impl std::error::Error for VerbsError {}

/// The usual cause of `errno` returned by the verbs call `call`, and the fix, as
/// `(cause, fix)`. Both are empty for an errno we have nothing to say about.
///
/// Sources: knowledge/gdr-ground-truth.md §2.2 (D02, D06), §2.8 (P01, P04), crates.md §1.4.
pub fn explain_errno(call: &str, errno: i32) -> (&'static str, &'static str) {
    let reg = matches!(call, "ibv_reg_mr" | "ibv_reg_dmabuf_mr");
    match errno {
        EFAULT if call == "ibv_reg_mr" => (
            "the kernel could not pin the address: for GPU memory, no peer-memory client \
             (nvidia-peermem) claimed the GPU virtual address",
            "load nvidia-peermem (needs a peer-memory capable ib_core: MOFED/DOCA-OFED or a vendor \
             kernel), or register through dma-buf (ibv_reg_dmabuf_mr) instead",
        ),
        EFAULT => (
            "the kernel was handed an address it cannot access",
            "check the buffer address and length",
        ),
        EOPNOTSUPP if call == "ibv_reg_dmabuf_mr" => (
            "no dma-buf memory registration: libibverbs lacks ibv_reg_dmabuf_mr (rdma-core < 34), \
             or the provider/kernel does not support it (mlx5 needs \
             CONFIG_INFINIBAND_ON_DEMAND_PAGING); NCCL then disables DMA-BUF",
            "use rdma-core >= 34 (or a recent MOFED/DOCA-OFED) and a kernel >= 5.12 with \
             on-demand paging enabled",
        ),
        EOPNOTSUPP if call.starts_with("mlx5dv_") => (
            "the mlx5 direct-verbs operation is not supported: not an mlx5 device, DEVX not \
             available, or an allocation type this libmlx5 does not know (NC_DEDICATED needs \
             rdma-core >= 45)",
            "use an mlx5 device with DEVX support, rdma-core >= 45 for NC_DEDICATED UARs, or fall \
             back to the BF/NC UAR types",
        ),
        EOPNOTSUPP => (
            "the provider or the kernel does not implement this operation",
            "upgrade rdma-core / the kernel (or MOFED/DOCA-OFED)",
        ),
        EPROTONOSUPPORT => (
            "the kernel's uverbs interface lacks this method (dma-buf MRs need Linux >= 5.12 or a \
             MOFED backport); NCCL then disables DMA-BUF",
            "upgrade the kernel or install MOFED/DOCA-OFED",
        ),
        ENOSYS => (
            "no kernel RDMA support: /sys/class/infiniband_verbs/abi_version is missing \
             (ib_uverbs not loaded, or not visible in this container) or its ABI does not match",
            "load ib_uverbs and the NIC driver (e.g. modprobe mlx5_ib ib_uverbs); in a container, \
             expose /sys/class/infiniband* and /dev/infiniband",
        ),
        ENOMEM if reg => (
            "the locked-memory limit (RLIMIT_MEMLOCK) is too low to pin the region, or the HCA ran \
             out of memory-region resources",
            "raise the memlock limit: ulimit -l unlimited (limits.conf, systemd \
             LimitMEMLOCK=infinity, docker --ulimit memlock=-1)",
        ),
        ENOMEM => (
            "out of memory, or the locked-memory limit (RLIMIT_MEMLOCK) is too low",
            "raise the memlock limit (ulimit -l unlimited)",
        ),
        EINVAL if call == "ibv_reg_dmabuf_mr" => (
            "invalid arguments: offset/length/iova not page aligned or outside the dma-buf, \
             unsupported access flags, or (mlx5) UMR could not load the page list",
            "align the exported range to the host page size and check the access flags",
        ),
        EINVAL if reg => (
            "invalid arguments: unsupported access flags (remote write or atomic without local \
             write) or a bad address/length",
            "check the access flags and the buffer",
        ),
        EINVAL => ("invalid argument", "check the arguments of the call"),
        EPERM if call == "ibv_reg_mr" => (
            "the locked-memory limit (RLIMIT_MEMLOCK) is 0: the kernel pins no memory for a \
             process that may not lock any (ib_umem_get: can_do_mlock)",
            "raise the memlock limit: ulimit -l unlimited (limits.conf, systemd \
             LimitMEMLOCK=infinity, docker --ulimit memlock=-1)",
        ),
        EPERM | EACCES => (
            "permission denied: /dev/infiniband/uverbs* is not accessible to this user, or the \
             operation needs a privilege the process lacks",
            "run as root or grant access to /dev/infiniband (udev rule; in a container pass \
             --device /dev/infiniband and the needed capabilities)",
        ),
        ENODEV | ENOENT if call == "ibv_open_device" => (
            "no such RDMA device, or its /dev/infiniband/uverbs* node is missing",
            "list devices with ibv_devices or /sys/class/infiniband; check that the uverbs node \
             exists (modprobe ib_uverbs)",
        ),
        ENODEV => (
            "the device is gone or does not exist",
            "check /sys/class/infiniband and dmesg",
        ),
        EBADF if call == "ibv_reg_dmabuf_mr" => (
            "the dma-buf fd is not valid (with fd -1 this is NCCL's probe answer: dma-buf \
             registration is supported)",
            "pass an fd from cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)",
        ),
        ENOTSUPP_KERNEL if call == "ibv_reg_dmabuf_mr" => (
            "the exporter refused the attach: NVIDIA's dma-buf PCI topology check (dmesg: \
             'NVRM: dma-buf attach failed: PCI topology not supported for dma-buf')",
            "see dmesg; place GPU and NIC under a common PCIe switch, or review \
             NVreg_GrdmaPciTopoCheckOverride",
        ),
        _ => ("", ""),
    }
}

/// Read the calling thread's errno.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clear errno so that a failing call that forgets to set it reads as 0, not as a stale value.
fn clear_errno() {
    #[cfg(target_os = "linux")]
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe {
        *libc::__errno_location() = 0;
    }
}

/// Turn a verbs return code (0, an errno value, or -1 with errno set) into an errno.
fn rc_errno(rc: c_int) -> i32 {
    if rc == -1 {
        errno()
    } else {
        rc.saturating_abs()
    }
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// The whole `source()` chain of a libloading error (its `Display` is only "dlopen failed").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

fn open_library(path: &str) -> Result<Library, LoadError> {
    // SAFETY: loading runs the library's initialisers. libibverbs and libmlx5 are system
    // libraries whose constructors only register providers; we load them the way NCCL does.
    let lib = unsafe { Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    lib.map_err(|e| LoadError {
        library: path.to_string(),
        symbol: None,
        detail: error_chain(&e),
    })
}

/// `dlerror()` as text, if there is a pending error.
fn dlerror_text() -> Option<String> {
    // SAFETY: dlerror has no preconditions; the returned string is valid until the next dl*
    // call on this thread, and we copy it at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        None
    } else {
        // SAFETY: non-null dlerror results are NUL-terminated C strings.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Look `name@version` up in the library `handle` (`dlvsym` on glibc, `dlsym` elsewhere).
fn lookup(handle: *mut c_void, name: &CStr, version: &CStr) -> Result<NonNull<c_void>, String> {
    let _ = dlerror_text();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: handle is a live dlopen handle (its Library outlives this call); name and version
    // are NUL-terminated.
    let p = unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) };
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    // SAFETY: as above; without dlvsym the default version of the symbol is taken.
    let p = unsafe {
        let _ = version;
        libc::dlsym(handle, name.as_ptr())
    };
    NonNull::new(p).ok_or_else(|| dlerror_text().unwrap_or_else(|| "symbol not found".into()))
}

fn sym_name(name: &CStr, version: &CStr) -> String {
    format!("{}@{}", name.to_string_lossy(), version.to_string_lossy())
}

/// Look up a required symbol as the function pointer type `$ty`, or return a [`LoadError`].
macro_rules! required {
    ($handle:expr, $lib:expr, $name:expr, $ver:expr, $ty:ty) => {
        match lookup($handle, $name, $ver) {
            // SAFETY: the symbol is the rdma-core function of that name and version, whose C
            // prototype `$ty` mirrors; a function pointer and a data pointer have the same size.
            Ok(p) => unsafe { std::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) },
            Err(e) => {
                return Err(LoadError {
                    library: $lib.to_string(),
                    symbol: Some(sym_name($name, $ver)),
                    detail: e,
                })
            }
        }
    };
}

/// Look up an optional symbol as `Option<$ty>`.
macro_rules! optional {
    ($handle:expr, $name:expr, $ver:expr, $ty:ty) => {
        match lookup($handle, $name, $ver) {
            // SAFETY: as in `required!`.
            Ok(p) => Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) }),
            Err(_) => None,
        }
    };
}

struct Fns {
    get_device_list: GetDeviceListFn,
    free_device_list: FreeDeviceListFn,
    get_device_name: GetDeviceNameFn,
    get_device_guid: GetDeviceGuidFn,
    open_device: OpenDeviceFn,
    close_device: CloseDeviceFn,
    query_device: QueryDeviceFn,
    query_port: QueryPortFn,
    alloc_pd: AllocPdFn,
    dealloc_pd: DeallocPdFn,
    reg_mr: RegMrFn,
    dereg_mr: DeregMrFn,
    reg_dmabuf_mr: Option<RegDmabufMrFn>,
}

/// The optional mlx5 direct-verbs library (`libmlx5.so.1`), each symbol optional.
pub struct Mlx5dv {
    is_supported: Option<Mlx5IsSupportedFn>,
    devx_alloc_uar: Option<Mlx5DevxAllocUarFn>,
    devx_free_uar: Option<Mlx5DevxFreeUarFn>,
    library: String,
    _lib: Library,
}

impl fmt::Debug for Mlx5dv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5dv")
            .field("library", &self.library)
            .field("is_supported", &self.is_supported.is_some())
            .field("devx_uar", &self.has_devx_uar())
            .finish()
    }
}

impl Mlx5dv {
    fn load_from(path: &str) -> Result<Mlx5dv, LoadError> {
        let lib = open_library(path)?;
        let handle = lib.into_raw();
        // SAFETY: `handle` came from `into_raw` just above and is wrapped back exactly once.
        let lib = unsafe { Library::from_raw(handle) };
        Ok(Mlx5dv {
            is_supported: optional!(
                handle,
                c"mlx5dv_is_supported",
                c"MLX5_1.8",
                Mlx5IsSupportedFn
            ),
            devx_alloc_uar: optional!(
                handle,
                c"mlx5dv_devx_alloc_uar",
                c"MLX5_1.7",
                Mlx5DevxAllocUarFn
            ),
            devx_free_uar: optional!(
                handle,
                c"mlx5dv_devx_free_uar",
                c"MLX5_1.7",
                Mlx5DevxFreeUarFn
            ),
            library: path.to_string(),
            _lib: lib,
        })
    }

    /// The library as it was opened.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// `mlx5dv_is_supported@MLX5_1.8` is present.
    pub fn has_is_supported(&self) -> bool {
        self.is_supported.is_some()
    }

    /// `mlx5dv_devx_alloc_uar@MLX5_1.7` and `mlx5dv_devx_free_uar@MLX5_1.7` are present.
    pub fn has_devx_uar(&self) -> bool {
        self.devx_alloc_uar.is_some() && self.devx_free_uar.is_some()
    }
}

/// libibverbs, loaded at run time, plus libmlx5 when it loads.
pub struct Verbs {
    fns: Fns,
    mlx5: Result<Mlx5dv, LoadError>,
    library: String,
    _lib: Library,
}

impl fmt::Debug for Verbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verbs")
            .field("library", &self.library)
            .field("reg_dmabuf_mr", &self.fns.reg_dmabuf_mr.is_some())
            .field("mlx5", &self.mlx5.as_ref().map(|m| m.library()))
            .finish()
    }
}

impl Verbs {
    /// Load `libibverbs.so.1` and try `libmlx5.so.1` (its absence is kept, see [`Verbs::mlx5dv`]),
    /// both by soname, or both from the test-only `GDRDOCTOR_LIB_DIR` ([`super::stand_in`]).
    pub fn load() -> Result<Verbs, LoadError> {
        Verbs::load_paths(
            &super::stand_in::library(IBVERBS_LIB),
            &super::stand_in::library(MLX5_LIB),
        )
    }

    /// Load libibverbs from `ibverbs` (a soname or a path) and libmlx5 from its default soname.
    pub fn load_from(ibverbs: &str) -> Result<Verbs, LoadError> {
        Verbs::load_paths(ibverbs, MLX5_LIB)
    }

    /// Load libibverbs from `ibverbs` and try libmlx5 from `mlx5`. Only libibverbs (and its
    /// `IBVERBS_1.1` core symbols) is required. libmlx5 links against libibverbs by soname,
    /// so pairing it with a libibverbs from another path mixes two copies: tests only.
    pub fn load_paths(ibverbs: &str, mlx5: &str) -> Result<Verbs, LoadError> {
        let lib = open_library(ibverbs)?;
        let h = lib.into_raw();
        // SAFETY: `h` came from `into_raw` just above and is wrapped back exactly once; the
        // copy in `h` is used only while `lib` is alive (within this function).
        let lib = unsafe { Library::from_raw(h) };
        let v = c"IBVERBS_1.1";
        let fns = Fns {
            get_device_list: required!(h, ibverbs, c"ibv_get_device_list", v, GetDeviceListFn),
            free_device_list: required!(h, ibverbs, c"ibv_free_device_list", v, FreeDeviceListFn),
            get_device_name: required!(h, ibverbs, c"ibv_get_device_name", v, GetDeviceNameFn),
            get_device_guid: required!(h, ibverbs, c"ibv_get_device_guid", v, GetDeviceGuidFn),
            open_device: required!(h, ibverbs, c"ibv_open_device", v, OpenDeviceFn),
            close_device: required!(h, ibverbs, c"ibv_close_device", v, CloseDeviceFn),
            query_device: required!(h, ibverbs, c"ibv_query_device", v, QueryDeviceFn),
            query_port: required!(h, ibverbs, c"ibv_query_port", v, QueryPortFn),
            alloc_pd: required!(h, ibverbs, c"ibv_alloc_pd", v, AllocPdFn),
            dealloc_pd: required!(h, ibverbs, c"ibv_dealloc_pd", v, DeallocPdFn),
            reg_mr: required!(h, ibverbs, c"ibv_reg_mr", v, RegMrFn),
            dereg_mr: required!(h, ibverbs, c"ibv_dereg_mr", v, DeregMrFn),
            reg_dmabuf_mr: optional!(h, c"ibv_reg_dmabuf_mr", c"IBVERBS_1.12", RegDmabufMrFn),
        };
        Ok(Verbs {
            fns,
            mlx5: Mlx5dv::load_from(mlx5),
            library: ibverbs.to_string(),
            _lib: lib,
        })
    }

    /// The libibverbs name or path that was opened.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// `ibv_reg_dmabuf_mr@IBVERBS_1.12` (rdma-core >= 34) is exported: NCCL's check D01.
    /// Without it NCCL's wrapper answers `EOPNOTSUPP` and DMA-BUF is off.
    pub fn has_reg_dmabuf_mr(&self) -> bool {
        self.fns.reg_dmabuf_mr.is_some()
    }

    /// libmlx5, or why it did not load.
    pub fn mlx5dv(&self) -> Result<&Mlx5dv, &LoadError> {
        self.mlx5.as_ref()
    }

    /// `ibv_get_device_list`, freed by the guard.
    fn device_list(&self) -> Result<DeviceList<'_>, VerbsError> {
        let mut n: c_int = 0;
        clear_errno();
        // SAFETY: `n` is a valid out-pointer; the function has no other preconditions.
        let list = unsafe { (self.fns.get_device_list)(&mut n) };
        match NonNull::new(list) {
            None => Err(VerbsError::new("ibv_get_device_list", errno())),
            Some(list) => Ok(DeviceList {
                verbs: self,
                list,
                len: usize::try_from(n).unwrap_or(0),
            }),
        }
    }

    /// The RDMA devices libibverbs sees. `NULL` from `ibv_get_device_list` is an `Err`
    /// carrying errno (`ENOSYS` 38: no kernel RDMA support); no devices is `Ok(vec![])`.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>, VerbsError> {
        let list = self.device_list()?;
        Ok(list.iter().map(|d| self.describe(d)).collect())
    }

    fn describe(&self, dev: NonNull<IbvDevice>) -> DeviceInfo {
        DeviceInfo {
            name: self.device_name(dev),
            // SAFETY: `dev` is an entry of a live device list.
            guid: u64::from_be(unsafe { (self.fns.get_device_guid)(dev.as_ptr()) }),
            is_mlx5: self.is_mlx5_device(dev.as_ptr()),
        }
    }

    fn device_name(&self, dev: NonNull<IbvDevice>) -> String {
        // SAFETY: `dev` is an entry of a live device list.
        let p = unsafe { (self.fns.get_device_name)(dev.as_ptr()) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a non-null name is the NUL-terminated `name` array inside the device.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `mlx5dv_is_supported(dev)`, `None` if libmlx5 or the symbol is absent.
    fn is_mlx5_device(&self, dev: *mut IbvDevice) -> Option<bool> {
        let f = self.mlx5.as_ref().ok()?.is_supported?;
        // SAFETY: `dev` is a live ibv_device (from a device list or a context's `device`);
        // mlx5dv_is_supported only compares its ops pointer.
        Some(unsafe { f(dev) })
    }

    /// Open the device named `name` (`ibv_open_device`). A name not in the device list is an
    /// `Err` with `ENODEV`; a failing device list is that call's error.
    pub fn open(&self, name: &str) -> Result<Context<'_>, VerbsError> {
        let list = self.device_list()?;
        let mut seen = Vec::new();
        for dev in list.iter() {
            let n = self.device_name(dev);
            if n != name {
                seen.push(n);
                continue;
            }
            clear_errno();
            // SAFETY: `dev` is an entry of the live list; the context keeps its own reference
            // to the device, so freeing the list afterwards is allowed (ibv_open_device(3)).
            let ctx = unsafe { (self.fns.open_device)(dev.as_ptr()) };
            return match NonNull::new(ctx) {
                Some(raw) => Ok(Context {
                    verbs: self,
                    raw,
                    name: n,
                }),
                None => Err(VerbsError::new("ibv_open_device", errno())),
            };
        }
        let have = if seen.is_empty() {
            "none".to_string()
        } else {
            seen.join(", ")
        };
        Err(VerbsError::ours(
            "ibv_open_device",
            ENODEV,
            format!("no RDMA device named {name:?} (devices: {have})"),
        ))
    }
}

/// A live `ibv_get_device_list` result; freed on drop.
struct DeviceList<'v> {
    verbs: &'v Verbs,
    list: NonNull<*mut IbvDevice>,
    len: usize,
}

impl DeviceList<'_> {
    /// The non-null entries, up to the count and the terminating NULL.
    fn iter(&self) -> impl Iterator<Item = NonNull<IbvDevice>> + '_ {
        (0..self.len)
            // SAFETY: the list has `len` entries followed by a NULL terminator.
            .map(|i| unsafe { *self.list.as_ptr().add(i) })
            .map_while(NonNull::new)
    }
}

impl Drop for DeviceList<'_> {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed exactly once.
        unsafe { (self.verbs.fns.free_device_list)(self.list.as_ptr()) }
    }
}

/// One entry of the device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kernel device name (`mlx5_0`).
    pub name: String,
    /// Node GUID as a number (`ibv_get_device_guid`, converted from network byte order).
    pub guid: u64,
    /// `mlx5dv_is_supported`; `None` when libmlx5 or the symbol is absent.
    pub is_mlx5: Option<bool>,
}

impl DeviceInfo {
    /// The GUID the way `ibv_devices` prints it (16 hex digits).
    pub fn guid_hex(&self) -> String {
        format!("{:016x}", self.guid)
    }
}

/// An open device (`ibv_open_device`); closed on drop.
pub struct Context<'v> {
    verbs: &'v Verbs,
    raw: NonNull<IbvContext>,
    name: String,
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("name", &self.name).finish()
    }
}

impl<'v> Context<'v> {
    /// The device name it was opened by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw `struct ibv_context *`, for calls this module does not wrap. It stays valid
    /// while `self` lives.
    pub fn as_ptr(&self) -> *mut IbvContext {
        self.raw.as_ptr()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<IbvDeviceAttr, VerbsError> {
        let mut attr = IbvDeviceAttr::default();
        clear_errno();
        // SAFETY: live context; `attr` is a complete, writable ibv_device_attr.
        let rc = unsafe { (self.verbs.fns.query_device)(self.raw.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(VerbsError::new("ibv_query_device", rc_errno(rc)));
        }
        Ok(attr)
    }

    /// `ibv_query_port` through the exported compat symbol, on a zeroed newest-size struct
    /// (only the prefix up to `flags` is filled; see the module docs). Ports count from 1.
    pub fn query_port(&self, port: u8) -> Result<IbvPortAttr, VerbsError> {
        let mut attr = IbvPortAttr::default();
        clear_errno();
        // SAFETY: live context; `attr` is at least as large as any ibv_port_attr the library
        // may write (it writes the 48-byte compat prefix).
        let rc = unsafe { (self.verbs.fns.query_port)(self.raw.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::new("ibv_query_port", rc_errno(rc)));
        }
        Ok(attr)
    }

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

    /// Whether this is an mlx5 device (`mlx5dv_is_supported(context->device)`); `None` when
    /// libmlx5 or the symbol is absent.
    pub fn is_mlx5(&self) -> Option<bool> {
        // SAFETY: a live context's `device` field (offset 0, checked by the layout test) points
        // to the device it was opened on, which the context keeps referenced.
        let dev = unsafe { (*self.raw.as_ptr()).device };
        if dev.is_null() {
            return Some(false);
        }
        self.verbs.is_mlx5_device(dev)
    }

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

    /// `ibv_close_device`, reporting its result (dropping closes and ignores it).
    pub fn close(self) -> Result<(), VerbsError> {
        // SAFETY: the context is live; `self` is forgotten below, so Drop does not close it
        // a second time (forgetting leaks nothing: `name` is the only owned field).
        let rc = unsafe { (self.verbs.fns.close_device)(self.raw.as_ptr()) };
        std::mem::forget(self);
        if rc != 0 {
            return Err(VerbsError::new("ibv_close_device", rc_errno(rc)));
        }
        Ok(())
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: the context is live and closed exactly once; borrowers (Pd, DevxUar) are
        // gone, as their lifetimes end before this one.
        unsafe { (self.verbs.fns.close_device)(self.raw.as_ptr()) };
    }
}

/// A protection domain (`ibv_alloc_pd`); deallocated on drop.
pub struct Pd<'c> {
    verbs: &'c Verbs,
    raw: NonNull<IbvPd>,
    _ctx: std::marker::PhantomData<&'c Context<'c>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_error_message_has_strerror_and_cause() {
        let e = VerbsError::new("ibv_get_device_list", 38);
        assert_eq!(e.errno, 38);
        assert!(
            e.message.contains("Function not implemented"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("no kernel RDMA support"),
            "{}",
            e.message
        );
        assert!(e.to_string().starts_with("ibv_get_device_list: "));
        let e = VerbsError::new("ibv_reg_mr", 0);
        assert!(e.message.contains("without setting errno"));
    }

    #[test]
    fn rc_errno_accepts_both_conventions() {
        assert_eq!(rc_errno(22), 22);
        assert_eq!(rc_errno(-22), 22);
    }

    #[test]
    fn port_attr_names() {
        let a = IbvPortAttr {
            state: PORT_ACTIVE,
            phys_state: 5,
            link_layer: LINK_LAYER_ETHERNET,
            active_mtu: 5,
            ..Default::default()
        };
        assert_eq!(a.state_name(), "ACTIVE");
        assert_eq!(a.phys_state_name(), "LinkUp");
        assert_eq!(a.link_layer_name(), "Ethernet");
        assert_eq!(a.active_mtu_bytes(), Some(4096));
        assert_eq!(a.max_mtu_bytes(), None);
    }
}
