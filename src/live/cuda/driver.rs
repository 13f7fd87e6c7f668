//! The driver (libcuda loaded, `cuInit` done) and its devices: attributes, names, PCI
//! addresses, peer access (a device's primary context is in [`super::context`]).

use super::library::library_problem;
use super::{check, cstr_buf, normalize_bdf, Attribute, CuError, InitError, P2pAttribute};
use cudarc::driver::sys;
use std::ffi::{c_char, c_int};

/// Proof that libcuda is loaded and `cuInit` succeeded; the way to every device.
#[derive(Debug, Clone, Copy)]
pub struct Driver {
    pub(super) _private: (),
}

impl Driver {
    /// Load libcuda and call `cuInit(0)`.
    pub fn init() -> Result<Driver, InitError> {
        if let Some(p) = library_problem() {
            return Err(InitError::LibraryMissing(p));
        }
        // SAFETY: cuInit has no preconditions; libcuda presence was checked above (cudarc
        // panics on a missing library instead of returning an error).
        check("cuInit", unsafe { sys::cuInit(0) }).map_err(InitError::Init)?;
        Ok(Driver { _private: () })
    }

    /// `cuDriverGetVersion`: 13000 for CUDA 13.0.
    pub fn version(&self) -> Result<i32, CuError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut v)
        })?;
        Ok(v)
    }

    pub fn device_count(&self) -> Result<i32, CuError> {
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
        Ok(n)
    }

    pub fn device(&self, ordinal: i32) -> Result<Device, CuError> {
        let mut d: sys::CUdevice = 0;
        // SAFETY: writes one handle; an invalid ordinal is an error return.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
        Ok(Device { raw: d, ordinal })
    }
}

/// A device handle (`CUdevice`) and its ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Device {
    pub(super) raw: sys::CUdevice,
    pub(super) ordinal: i32,
}

impl Device {
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// `cuDeviceGetAttribute`; `None` when this driver does not know the attribute.
    pub fn attribute(&self, a: Attribute) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int; an attribute this driver does not know returns an error.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, self.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
    }

    /// (major, minor); (0, 0) when the driver does not say.
    pub fn compute_capability(&self) -> (i32, i32) {
        (
            self.attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .unwrap_or(0),
            self.attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .unwrap_or(0),
        )
    }

    /// The PCI address, normalised (`0000:00:06.0`).
    pub fn bdf(&self) -> Result<String, CuError> {
        let mut buf = [0 as c_char; 32];
        // SAFETY: the buffer length is passed; the driver NUL-terminates.
        check("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, self.raw)
        })?;
        Ok(normalize_bdf(&cstr_buf(&buf)))
    }

    /// The marketing name, or empty when the driver does not say.
    pub fn name(&self) -> String {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the buffer length is passed; the driver NUL-terminates.
        let r = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.raw) };
        if r == sys::CUresult::CUDA_SUCCESS {
            cstr_buf(&buf)
        } else {
            String::new()
        }
    }

    pub fn total_mem(&self) -> Option<u64> {
        let mut b: usize = 0;
        // SAFETY: writes one size_t.
        let r = unsafe { sys::cuDeviceTotalMem_v2(&mut b, self.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(b as u64)
    }

    /// `cuDeviceCanAccessPeer(self -> peer)`: can this device access the peer's memory.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool, CuError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut v, self.raw, peer.raw)
        })?;
        Ok(v != 0)
    }

    /// `cuDeviceGetP2PAttribute(self -> peer)`; `None` when the driver refuses.
    pub fn p2p_attribute(&self, peer: &Device, a: P2pAttribute) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { sys::cuDeviceGetP2PAttribute(&mut v, a, self.raw, peer.raw) };
        (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
    }
}
