//! Worker processes: the parent never owns a CUDA context or an NVML handle; it starts
//! `gdrdoctor __worker TASK` ([`runner`], parent side), which serves one typed request
//! ([`protocol`]) in [`child`] and exits. Used by the collectors (NVML, CUDA and libibverbs
//! facts) and by the probes alike; the task table itself is the caller's.

pub mod child;
pub mod protocol;
pub mod runner;
