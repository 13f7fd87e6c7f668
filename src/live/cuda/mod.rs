//! The CUDA driver API, loaded at run time through cudarc's `sys` layer, behind a small safe
//! layer: [`Driver`] (proof that libcuda loaded and `cuInit` succeeded), [`Device`],
//! [`Context`] (a retained primary context), [`Module`] and [`Function`], [`Stream`],
//! [`Event`], [`DeviceBuffer`], [`MappedHost`] (host memory the GPU sees), [`HostMemory`] with
//! its [`HostRegistration`], [`IoMapping`] (a NIC page mapped for the GPU) and peer access.
//! Every handle releases what it holds on drop, and every `unsafe` block of the CUDA side of
//! gdrdoctor is in this folder, each with its SAFETY comment: the probes call no raw CUDA.
//!
//! Only ever used inside a worker process (see `worker::runner`). Every entry point first checks
//! that libcuda can be loaded at all (cudarc panics otherwise), and a symbol missing from an old
//! driver panics only inside the worker, which reports it.
//!
//! Resources keep their context alive (a reference-counted handle), so a buffer can never
//! outlive the context it was allocated in. Calls that run on a stream (copies, launches,
//! queries) do not switch the current context themselves: the probes make the right context
//! current, exactly as the driver API expects, and a wrong context is a CUDA error, not
//! undefined behaviour. Calls outside hot loops (allocation, module loading, set-up) make their
//! context current first.//!
//! One file per part, each using only the ones before it: [`library`] (is libcuda there, which
//! file was loaded), [`driver`] (the driver and its devices), [`context`] (a device's primary
//! context), [`memory`] and [`launch`] (what is made in a context: buffers and host memory;
//! streams, events, modules and launches), and [`facts`] (the attributes `check` reads, with no
//! context).

mod context;
mod driver;
mod facts;
mod launch;
mod library;
mod memory;

pub use context::Context;
pub use driver::{Device, Driver};
pub use facts::facts;
pub use launch::{Event, Function, KernelArg, Module, Stream};
pub use library::{library_problem, loaded_library, preload};
pub use memory::{DeviceBuffer, HostMemory, HostRegistration, IoMapping, MappedHost};

use cudarc::driver::sys;
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

pub use sys::CUdevice_P2PAttribute as P2pAttribute;
pub use sys::CUdevice_attribute as Attribute;

/// A failed driver call: the function and the CUresult name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
}

impl std::fmt::Display for CuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.code)
    }
}

impl std::error::Error for CuError {}

impl CuError {
    /// A request refused by this layer before it reached the driver (a copy larger than its
    /// buffer, say), reported the way the driver reports an invalid value.
    pub(super) fn refused(call: &'static str, why: &str) -> CuError {
        CuError {
            call,
            code: sys::CUresult::CUDA_ERROR_INVALID_VALUE as i32,
            name: format!("CUDA_ERROR_INVALID_VALUE ({why})"),
        }
    }
}

/// Set once a kernel may be wedged on the GPU: from then on no handle releases anything.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// Give up on releasing: a kernel that ignores its abort (or a GPU that stopped answering)
/// makes `cuMemFree`, `cuModuleUnload` and the context release block forever
/// (knowledge/hang-probe.md §2.5). After this call every handle's drop is a no-op, so the
/// worker can report and exit; the driver reclaims everything when the process ends.
pub fn abandon() {
    ABANDONED.store(true, Ordering::SeqCst);
}

pub(crate) fn abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}

pub(crate) fn check(call: &'static str, r: sys::CUresult) -> Result<(), CuError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CuError {
            call,
            code: r as i32,
            name: format!("{r:?}"),
        })
    }
}

/// `00000000:00:06.0` (NVML) or `0000:00:06.0` (CUDA) -> `0000:00:06.0`, lower case.
pub fn normalize_bdf(s: &str) -> String {
    let s = s.trim().to_lowercase();
    match s.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => s,
    }
}

pub(super) fn cstr_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why the driver could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitError {
    /// libcuda.so.1 cannot be loaded.
    LibraryMissing(String),
    /// `cuInit` failed.
    Init(CuError),
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::LibraryMissing(m) => f.write_str(m),
            InitError::Init(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for InitError {}
