//! The live libraries, loaded at run time and only ever called inside a worker process (so that
//! a wedged driver cannot hang the parent): the CUDA driver API behind a safe layer
//! ([`cuda`]), NVRTC ([`nvrtc`]), NVML ([`nvml`]), libibverbs and libmlx5 ([`verbs`]), the
//! memory shared with a GPU ([`shared`]) and a few OS calls ([`os`]). Every `unsafe` of the
//! probes' GPU and NIC work lives here.

pub mod cuda;
pub mod nccl;
pub mod nvml;
pub mod nvrtc;
pub mod os;
pub mod shared;
pub mod stand_in;
pub mod verbs;

use gdrdoctor_checks::model::{Fact, LiveFacts, VerbsFacts};

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

/// The live-facts worker: everything at once, each library's failure kept as an absent fact.
pub fn gather() -> LiveFacts {
    let cuda = match cuda::facts() {
        Ok(c) => Fact::known(c, "CUDA driver API (cuDeviceGetAttribute)"),
        Err(e) => Fact::absent("libcuda.so.1", e),
    };
    let nvml = match nvml::facts() {
        Ok(n) => Fact::known(n, "NVML"),
        Err(e) => Fact::absent("libnvidia-ml.so.1", e),
    };
    let verbs = match verbs_facts() {
        Ok(v) => Fact::known(v, "libibverbs.so.1"),
        Err(e) => Fact::absent("libibverbs.so.1", e),
    };
    LiveFacts {
        nvml,
        cuda,
        verbs,
        nccl: nccl::discover(),
    }
}
