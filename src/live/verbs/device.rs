//! The devices: the device list, opening a device by name, and the queries of an open device
//! (attributes, ports, whether it is mlx5). What is made on an open device is in
//! [`super::mr`] (a protection domain and its memory regions) and [`super::uar`].

use super::error::{clear_errno, errno, rc_errno, VerbsError, ENODEV};
use super::ffi::{IbvContext, IbvDevice, IbvDeviceAttr, IbvPortAttr};
use super::load::Verbs;
use std::ffi::{c_int, CStr};
use std::fmt;
use std::ptr::NonNull;

impl Verbs {
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
    pub(super) verbs: &'v Verbs,
    pub(super) raw: NonNull<IbvContext>,
    pub(super) name: String,
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
