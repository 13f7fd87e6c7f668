//! Loading: libibverbs and (optionally) libmlx5 opened with `dlopen`, each symbol looked up by
//! name and rdma-core version (`dlvsym`), a missing required one a [`LoadError`].

use super::error::LoadError;
use super::ffi::*;
use super::{IBVERBS_LIB, MLX5_LIB};
use libloading::os::unix::Library;
use std::ffi::{c_void, CStr};
use std::fmt;
use std::ptr::NonNull;

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

/// The libibverbs functions, looked up once.
pub(super) struct Fns {
    pub(super) get_device_list: GetDeviceListFn,
    pub(super) free_device_list: FreeDeviceListFn,
    pub(super) get_device_name: GetDeviceNameFn,
    pub(super) get_device_guid: GetDeviceGuidFn,
    pub(super) open_device: OpenDeviceFn,
    pub(super) close_device: CloseDeviceFn,
    pub(super) query_device: QueryDeviceFn,
    pub(super) query_port: QueryPortFn,
    pub(super) alloc_pd: AllocPdFn,
    pub(super) dealloc_pd: DeallocPdFn,
    pub(super) reg_mr: RegMrFn,
    pub(super) dereg_mr: DeregMrFn,
    pub(super) reg_dmabuf_mr: Option<RegDmabufMrFn>,
}

/// The optional mlx5 direct-verbs library (`libmlx5.so.1`), each symbol optional.
pub struct Mlx5dv {
    pub(super) is_supported: Option<Mlx5IsSupportedFn>,
    pub(super) devx_alloc_uar: Option<Mlx5DevxAllocUarFn>,
    pub(super) devx_free_uar: Option<Mlx5DevxFreeUarFn>,
    pub(super) library: String,
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
    pub(super) fns: Fns,
    pub(super) mlx5: Result<Mlx5dv, LoadError>,
    pub(super) library: String,
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
    /// both by soname, or both from the test-only `GDRDOCTOR_LIB_DIR`
    /// ([`crate::live::stand_in`]).
    pub fn load() -> Result<Verbs, LoadError> {
        Verbs::load_paths(
            &crate::live::stand_in::library(IBVERBS_LIB),
            &crate::live::stand_in::library(MLX5_LIB),
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
}
