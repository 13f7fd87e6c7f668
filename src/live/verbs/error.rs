//! The errors: a library that does not load ([`LoadError`]), a verbs call that fails
//! ([`VerbsError`]) with what its errno usually means and how to fix it ([`explain_errno`]), and
//! the errno of the calling thread.

use std::ffi::c_int;
use std::fmt;

pub(super) const EPERM: i32 = 1;
pub(super) const ENOENT: i32 = 2;
pub(super) const EBADF: i32 = 9;
pub(super) const ENOMEM: i32 = 12;
pub(super) const EACCES: i32 = 13;
pub(super) const EFAULT: i32 = 14;
pub(super) const ENODEV: i32 = 19;
pub(super) const EINVAL: i32 = 22;
pub(super) const ENOSYS: i32 = 38;
pub(super) const EPROTONOSUPPORT: i32 = 93;
pub(super) const EOPNOTSUPP: i32 = 95;
/// Kernel-internal `ENOTSUPP`, which leaks to user space from some dma-buf paths.
pub(super) const ENOTSUPP_KERNEL: i32 = 524;

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
    pub(super) fn ours(call: &'static str, errno: i32, message: String) -> VerbsError {
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
pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Clear errno so that a failing call that forgets to set it reads as 0, not as a stale value.
pub(super) fn clear_errno() {
    #[cfg(target_os = "linux")]
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe {
        *libc::__errno_location() = 0;
    }
}

/// Turn a verbs return code (0, an errno value, or -1 with errno set) into an errno.
pub(super) fn rc_errno(rc: c_int) -> i32 {
    if rc == -1 {
        errno()
    } else {
        rc.saturating_abs()
    }
}
