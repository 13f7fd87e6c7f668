//! `gpu.*` checks that need the live libraries: CUDA attributes and NVML state. On a sysroot
//! without `gdrdoctor/live.json`, or with `check --static`, they skip; on a live node where the
//! library cannot be loaded they report an error naming it.

use crate::model::{CudaDevice, Fact, Node, NvmlGpu, SourceKind};
use crate::report::{Finding, Status};

/// The finding for an absent live fact.
fn absent<T>(id: &str, node: &Node, f: &Fact<T>) -> Finding {
    let reason = f.reason().unwrap_or_default();
    let quiet = node.source == SourceKind::Sysroot || reason.starts_with("not queried");
    if quiet {
        Finding::new(
            id,
            Status::Skip,
            "node",
            format!("live-only fact not available: {reason}"),
        )
    } else {
        Finding::new(id, Status::Error, "node", format!("cannot query {}: {reason}", f.source()))
            .evidence(f.source(), reason.to_string())
            .fix("run on the node with the NVIDIA driver's user-space libraries on the loader path (inside containers: the NVIDIA container toolkit); `gdrdoctor check --static` skips these checks")
    }
}

fn cuda_for<'a>(node: &'a Node, bdf: &str) -> Option<&'a CudaDevice> {
    node.live
        .cuda
        .get()
        .and_then(|c| c.devices.iter().find(|d| d.bdf == bdf))
}

fn nvml_for<'a>(node: &'a Node, bdf: &str) -> Option<&'a NvmlGpu> {
    node.live
        .nvml
        .get()
        .and_then(|c| c.gpus.iter().find(|d| d.bdf == bdf))
}

fn ordering(v: Option<i32>) -> &'static str {
    match v {
        Some(0) => "NONE (consumers must flush)",
        Some(100) => "OWNER",
        Some(200) => "ALL_DEVICES",
        _ => "unknown",
    }
}

pub fn gdr_support(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.gdr-support";
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    if node.live.cuda.get().is_none() {
        return vec![absent(ID, node, &node.live.cuda)];
    }
    let mut out = Vec::new();
    for g in gpus {
        let Some(d) = cuda_for(node, &g.bdf) else {
            out.push(Finding::new(
                ID,
                Status::Skip,
                &g.bdf,
                "cuda does not see this gpu (CUDA_VISIBLE_DEVICES, or it is not usable)",
            ));
            continue;
        };
        let facts = format!(
            "cc {}.{}, GPU_DIRECT_RDMA_SUPPORTED={}, DMA_BUF_SUPPORTED={}, WRITES_ORDERING={}, FLUSH_WRITES_OPTIONS={}, VMM GDR={}",
            d.cc_major,
            d.cc_minor,
            opt(d.gpu_direct_rdma_supported),
            opt(d.dma_buf_supported),
            ordering(d.gpu_direct_rdma_writes_ordering),
            opt(d.gpu_direct_rdma_flush_writes_options),
            opt(d.gpu_direct_rdma_with_cuda_vmm_supported)
        );
        let src = "cuDeviceGetAttribute";
        let f = match d.gpu_direct_rdma_supported {
            Some(1) => Finding::new(ID, Status::Pass, &g.bdf, format!("cuda reports gpudirect rdma supported ({}, dma-buf {})", d.name, if d.dma_buf_supported == Some(1) { "supported" } else { "not supported" })).evidence(src, facts),
            Some(0) => Finding::new(ID, Status::Fail, &g.bdf, format!("cuda reports GPU_DIRECT_RDMA_SUPPORTED=0 for {}: nccl turns gdr off for this gpu, silently", d.name))
                .expect(src, facts, "GPU_DIRECT_RDMA_SUPPORTED=1")
                .fix("this GPU or platform does not support GPUDirect RDMA (e.g. unified-memory platforms such as DGX Spark report 0); use a GPU/platform that does, or accept host staging"),
            Some(v) => Finding::new(ID, Status::Warn, &g.bdf, format!("cuda reports an unexpected GPU_DIRECT_RDMA_SUPPORTED={v}"))
                .evidence(src, facts),
            None => Finding::new(ID, Status::Warn, &g.bdf, "the cuda driver does not know CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (driver older than 11.3): nccl falls back to a trial registration")
                .evidence(src, facts)
                .fix("update the NVIDIA driver"),
        };
        out.push(f);
    }
    out
}

fn opt(v: Option<i32>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
}

pub fn persistence(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.persistence";
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    if node.live.nvml.get().is_none() {
        return vec![absent(ID, node, &node.live.nvml)];
    }
    gpus.iter()
        .map(|g| match nvml_for(node, &g.bdf).and_then(|n| n.persistence_mode) {
            Some(true) => Finding::new(ID, Status::Pass, &g.bdf, "persistence mode on"),
            Some(false) => Finding::new(ID, Status::Warn, &g.bdf, "persistence mode off: the driver tears the gpu down when the last client exits, so every job start pays the initialisation and ecc scrubbing again")
                .expect("nvmlDeviceGetPersistenceMode", "Disabled", "Enabled")
                .fix("`systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1` until reboot)"),
            None => Finding::new(ID, Status::Error, &g.bdf, "nvml did not report persistence mode for this gpu"),
        })
        .collect()
}

pub fn row_remap(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.row-remap";
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    if node.live.nvml.get().is_none() {
        return vec![absent(ID, node, &node.live.nvml)];
    }
    gpus.iter()
        .map(|g| {
            let Some(n) = nvml_for(node, &g.bdf) else {
                return Finding::new(ID, Status::Error, &g.bdf, "nvml does not list this gpu");
            };
            match (n.remapped_rows, n.retired_pages_pending) {
                (Some(r), _) if r.failure => Finding::new(ID, Status::Fail, &g.bdf, "row remapping failed: the gpu ran out of spare rows")
                    .evidence("nvmlDeviceGetRemappedRows", format!("correctable {} uncorrectable {} pending {} failure {}", r.correctable, r.uncorrectable, r.pending, r.failure))
                    .fix("the GPU needs replacing (field diagnostic / RMA); drain the node"),
                (Some(r), _) if r.pending => Finding::new(ID, Status::Fail, &g.bdf, "row remaps are pending: the gpu must be reset before the remapping takes effect")
                    .evidence("nvmlDeviceGetRemappedRows", format!("correctable {} uncorrectable {} pending true", r.correctable, r.uncorrectable))
                    .fix("drain the node and reset the GPU (`nvidia-smi -r -i <n>`) or reboot"),
                (_, Some(true)) => Finding::new(ID, Status::Fail, &g.bdf, "retired pages are pending: the gpu must be reset")
                    .fix("drain the node and reset the GPU (`nvidia-smi -r -i <n>`) or reboot"),
                (Some(r), _) => Finding::new(ID, Status::Pass, &g.bdf, format!("no pending row remaps ({} correctable, {} uncorrectable remapped so far)", r.correctable, r.uncorrectable)),
                (None, Some(false)) => Finding::new(ID, Status::Pass, &g.bdf, "no pending retired pages"),
                (None, None) => Finding::new(ID, Status::Skip, &g.bdf, "nvml reports neither row remapping nor page retirement for this gpu"),
            }
        })
        .collect()
}
