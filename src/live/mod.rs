//! The live libraries, loaded at run time and only ever called inside a worker process (so that
//! a wedged driver cannot hang the parent): the CUDA driver API behind a safe layer
//! ([`cuda`]), NVRTC ([`nvrtc`]), NVML ([`nvml`]), libibverbs and libmlx5 ([`verbs`]), the
//! memory shared with a GPU ([`shared`]), a few OS calls ([`os`]) and the termination signals
//! ([`signals`]). Every `unsafe` of the probes' GPU and NIC work lives here. (The CUDA answers
//! of `check` kept for the rest of the boot are state: `crate::state::cuda_cache`.)

pub mod cuda;
pub mod nccl;
pub mod nvml;
pub mod nvrtc;
pub mod os;
pub mod shared;
pub mod signals;
pub mod stand_in;
pub mod verbs;

use gdrdoctor_checks::model::{CudaFacts, Fact, LiveFacts, VerbsFacts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What libibverbs says: the dma-buf symbol, the devices, and NCCL's dma-buf probe per device.
pub fn verbs_facts() -> Result<VerbsFacts, String> {
    let v = verbs::Verbs::load().map_err(|e| e.to_string())?;
    let mut f = VerbsFacts {
        has_reg_dmabuf_mr: v.has_reg_dmabuf_mr(),
        ..Default::default()
    };
    match v.devices() {
        Ok(devs) => {
            for d in devs {
                let probe = v
                    .open(&d.name)
                    .ok()
                    .and_then(|ctx| ctx.alloc_pd().ok().map(|pd| pd.dmabuf_probe().errno()));
                f.dmabuf_probe.insert(d.name.clone(), probe);
                f.devices.push(d.name);
            }
        }
        Err(e) => f.list_errno = Some(e.errno),
    }
    Ok(f)
}

/// The `live-nvml` worker: NVML, libibverbs and the NCCL files, each on a thread of its own.
/// CUDA is not touched here (the parent decides, from `early`, whether a `live-cuda` worker
/// runs at all): `early` receives NVML's driver version, GPU addresses, UUIDs and compute modes
/// as soon as NVML knows them.
pub fn gather_nvml(early: &(dyn Fn(&nvml::Early) + Sync)) -> LiveFacts {
    std::thread::scope(|s| {
        let verbs = s.spawn(|| crate::sys::trace::timed("verbs", verbs_facts));
        let nccl = s.spawn(|| crate::sys::trace::timed("nccl.discover", nccl::discover));
        let nvml = match nvml::facts_with(early) {
            Ok(n) => Fact::known(n, "NVML"),
            Err(e) => Fact::absent("libnvidia-ml.so.1", e),
        };
        let verbs = match verbs.join() {
            Ok(Ok(v)) => Fact::known(v, "libibverbs.so.1"),
            Ok(Err(e)) => Fact::absent("libibverbs.so.1", e),
            Err(_) => Fact::absent("libibverbs.so.1", "the libibverbs query panicked"),
        };
        let nccl = nccl
            .join()
            .unwrap_or_else(|_| Fact::absent("libnccl.so.2", "the NCCL discovery panicked"));
        LiveFacts {
            nvml,
            cuda: Fact::absent("libcuda.so.1", "not asked by the NVML worker"),
            verbs,
            nccl,
        }
    })
}

/// What a worker does before it reads its request (a worker may be started ahead of it:
/// [`crate::worker::runner::start`]): the `live-cuda` worker loads libcuda, which opens no GPU,
/// so that its `cuInit` can start as soon as the parent knows which GPUs it may open.
pub fn prepare_worker(task: &str) {
    if task == "live-cuda" {
        let _t = crate::sys::trace::span("cuda.load");
        cuda::preload();
    }
}

/// `CUDA_MPS_PIPE_DIRECTORY` of the `live-cuda` worker: a directory nobody can create (under
/// `/proc/self`), so no MPS control pipe is ever found there.
pub const NO_MPS_PIPE_DIRECTORY: &str = "/proc/self/gdrdoctor-no-mps";

/// What the parent asks the `live-cuda` worker.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaParams {
    /// `CUDA_VISIBLE_DEVICES` for this worker, set before libcuda is loaded: the GPUs CUDA
    /// must not open (compute mode exclusive or prohibited) left out. `None`: as inherited.
    pub visible_devices: Option<String>,
    /// The GPUs left out and why (PCI address -> reason), reported with the facts.
    pub not_asked: BTreeMap<String, String>,
}

/// The `live-cuda` worker: `cuInit` and the device attributes, no context (see
/// [`cuda::facts`]).
pub fn gather_cuda(p: &CudaParams) -> Result<CudaFacts, String> {
    // The worker is single-threaded here and libcuda is not loaded yet: CUDA reads these in
    // cuInit.
    if let Some(v) = &p.visible_devices {
        std::env::set_var("CUDA_VISIBLE_DEVICES", v);
    }
    // Never an MPS client: "when CUDA is first initialized in a program, the CUDA driver
    // attempts to connect to the MPS control daemon", and a client of another user makes the
    // daemon ask the running MPS server to shut down once its clients are done, then start one
    // for the newcomer (nvidia-cuda-mps-control(1)): a root `check` would queue the users' next
    // jobs behind it. With no control pipe to connect to, CUDA runs as without MPS.
    std::env::set_var("CUDA_MPS_PIPE_DIRECTORY", NO_MPS_PIPE_DIRECTORY);
    std::env::remove_var("CUDA_MPS_LOG_DIRECTORY");
    let mut f = cuda::facts()?;
    f.not_asked = p.not_asked.clone();
    Ok(f)
}
