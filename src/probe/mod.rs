//! `gdrdoctor probe`: live probes, each in a worker process (see [`runner`]), reported with the
//! same findings, renderers and exit codes as `check`.

pub mod health;
pub mod registration;
pub mod runner;

use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::report::{Finding, Status};
use std::time::Duration;

/// Every probe finding id, with a one-line title (documented in docs/checks/<id>.md).
pub static PROBE_IDS: &[(&str, &str)] = &[
    ("probe.cuda", "the cuda driver can be loaded and sees the gpus the probes need"),
    ("probe.dmabuf-export", "cuMemAlloc'd gpu memory exports as a dma-buf at 4 KiB to 1 GiB and at a 4 KiB offset"),
    ("probe.managed-memory", "managed memory is refused for export (use cudaMalloc for rdma buffers)"),
    ("probe.host-register", "pinned host memory registers with cuMemHostRegister (the host baseline)"),
    ("probe.verbs-registration", "gpu memory registers with the nic: ibv_reg_mr (peer memory) and ibv_reg_dmabuf_mr"),
    ("probe.nccl-dmabuf", "nccl's own dma-buf probe (ibv_reg_dmabuf_mr with fd -1) on each rdma device"),
    ("probe.gpu-health", "the gpu is healthy in a fresh process after a probe worker was killed"),
];

/// Human text for a CUDA error name, with the usual cause.
pub fn explain_cuda(err: &str) -> &'static str {
    if err.contains("CUDA_ERROR_NOT_SUPPORTED") {
        "the driver cannot export this memory as dma-buf: proprietary kernel modules, a driver older than R515, or a platform without dma-buf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=0)"
    } else if err.contains("CUDA_ERROR_INVALID_VALUE") {
        "the range is not exportable: managed (cudaMallocManaged) or host memory, or a range not aligned to the host page size"
    } else if err.contains("CUDA_ERROR_OUT_OF_MEMORY") {
        "the gpu is out of memory (other processes? `nvidia-smi`)"
    } else if err.contains("CUDA_ERROR_STUB_LIBRARY") {
        "the toolkit's stub libcuda.so was loaded instead of the driver's: remove .../lib64/stubs from LD_LIBRARY_PATH"
    } else if err.contains("CUDA_ERROR_NO_DEVICE") {
        "no cuda-capable device is visible (CUDA_VISIBLE_DEVICES? driver not loaded?)"
    } else if err.contains("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED") {
        "the host range is already registered"
    } else {
        ""
    }
}

fn gpus_on_pci(node: &Node) -> usize {
    gdrdoctor_checks::derive::gpus(node).len()
}

/// Run the registration probe and turn its measurements into findings.
pub fn registration(node: &Node, gpu: Option<u32>, repeat: u32, deadline: Duration) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if gpus_on_pci(node) == 0 {
        out.push(Finding::new("probe.cuda", Status::Skip, "node", "no nvidia gpu on the pci bus: nothing to probe"));
        return (out, None);
    }
    let progress = runner::Progress::new("probe --registration: starting the worker");
    let args: Vec<String> = vec![gpu.map(|g| g.to_string()).unwrap_or_else(|| "-1".into()), repeat.to_string()];
    let run = runner::run("registration", &args, deadline, &|m| progress.update(m));
    progress.finish();
    let run = match run {
        Ok(r) => r,
        Err(e) => {
            out.push(Finding::new("probe.cuda", Status::Error, "node", e));
            return (out, None);
        }
    };
    if let Some(f) = run.failure() {
        out.push(Finding::new("probe.cuda", Status::Error, "node", f.clone()));
        health_after_kill(&run, &mut out);
        return (out, run.result);
    }
    let v = run.result.clone().unwrap_or_default();
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        let hint = explain_cuda(e);
        let mut f = Finding::new("probe.cuda", Status::Error, "node", format!("cuda unavailable for the probe: {e}"));
        if !hint.is_empty() {
            f = f.fix(hint);
        } else if e.contains("libcuda") {
            f = f.fix("install the NVIDIA driver's user-space libraries (libcuda.so.1 comes with the driver, e.g. `libnvidia-compute-<ver>`), or run inside a container started with the NVIDIA container toolkit");
        }
        out.push(f);
        return (out, run.result);
    }
    let res: registration::Result_ = match serde_json::from_value(v.clone()) {
        Ok(r) => r,
        Err(e) => {
            out.push(Finding::new("probe.cuda", Status::Error, "node", format!("unreadable worker result: {e}")));
            return (out, Some(v));
        }
    };
    out.push(Finding::new("probe.cuda", Status::Pass, "node", format!("cuda driver {}.{} with {} gpu(s) probed", res.driver_version / 1000, (res.driver_version % 1000) / 10, res.gpus.len())));
    for g in &res.gpus {
        let subject = g.bdf.clone();
        let find = |name: &str| g.steps.iter().filter(|s| s.step == name).collect::<Vec<_>>();
        // dma-buf export at every size, and at the 4 KiB offset.
        let exports = find("dmabuf-export");
        let offset = find("dmabuf-export-offset-4k");
        let failed: Vec<String> = exports.iter().chain(offset.iter()).filter(|s| !s.ok).map(|s| format!("{} {}: {}", s.step, gdrdoctor_checks::parse::human_bytes(s.bytes), s.error.clone().unwrap_or_default())).collect();
        let timings = exports.iter().map(|s| format!("{} {:.0} us", gdrdoctor_checks::parse::human_bytes(s.bytes), s.us)).collect::<Vec<_>>().join(", ");
        let allocs = find("cuMemAlloc").iter().map(|s| format!("{} {:.0} us", gdrdoctor_checks::parse::human_bytes(s.bytes), s.us)).collect::<Vec<_>>().join(", ");
        let repeated = g.timing.iter().map(|t| format!("{}: alloc {:.0} us, export {:.0} us (median of {}; p90 {:.0}/{:.0})", gdrdoctor_checks::parse::human_bytes(t.bytes), t.alloc_us_median, t.export_us_median, t.runs, t.alloc_us_p90, t.export_us_p90)).collect::<Vec<_>>().join("; ");
        if exports.is_empty() {
            out.push(Finding::new("probe.dmabuf-export", Status::Error, &subject, "no allocation succeeded, nothing to export").evidence("cuMemAlloc", allocs));
        } else if failed.is_empty() {
            out.push(Finding::new("probe.dmabuf-export", Status::Pass, &subject, format!("gpu memory exports as dma-buf at {} sizes and at a 4 KiB offset", exports.len()))
                .evidence("cuMemGetHandleForAddressRange", timings)
                .evidence("cuMemAlloc", allocs)
                .evidence("repeated", if repeated.is_empty() { "use --repeat N for medians".to_string() } else { repeated }));
        } else {
            let hint = failed.first().map(|f| explain_cuda(f)).unwrap_or("");
            let mut f = Finding::new("probe.dmabuf-export", Status::Fail, &subject, format!("dma-buf export failed: {}", failed.join("; ")))
                .evidence("cuMemGetHandleForAddressRange", timings);
            if !hint.is_empty() {
                f = f.fix(format!("{hint}; NCCL has no fallback once dma-buf is chosen: set NCCL_DMABUF_ENABLE=0 to use nvidia-peermem instead"));
            }
            out.push(f);
        }
        // Managed memory.
        match (find("cuMemAllocManaged").first(), find("dmabuf-export-managed").first()) {
            (Some(a), _) if !a.ok => out.push(Finding::new("probe.managed-memory", Status::Skip, &subject, format!("cuMemAllocManaged failed: {}", a.error.clone().unwrap_or_default()))),
            (_, Some(e)) if !e.ok => out.push(Finding::new("probe.managed-memory", Status::Pass, &subject, "managed memory cannot be exported as dma-buf (nor pinned by a peer-memory client): rdma buffers must come from cudaMalloc/cuMemAlloc or cuMemCreate")
                .evidence("cuMemGetHandleForAddressRange(managed)", e.error.clone().unwrap_or_default())),
            (_, Some(_)) => out.push(Finding::new("probe.managed-memory", Status::Warn, &subject, "managed memory exported as dma-buf on this platform: registration may still migrate pages under the nic; prefer cudaMalloc for rdma buffers")),
            _ => {}
        }
        // Host register baseline.
        if let Some(h) = find("cuMemHostRegister").first() {
            if h.ok {
                out.push(Finding::new("probe.host-register", Status::Pass, &subject, format!("pinned host memory registers ({} in {:.0} us)", gdrdoctor_checks::parse::human_bytes(h.bytes), h.us)));
            } else {
                out.push(Finding::new("probe.host-register", Status::Fail, &subject, format!("cuMemHostRegister failed: {}", h.error.clone().unwrap_or_default()))
                    .fix("check RLIMIT_MEMLOCK (mem.memlock) and that the driver supports host registration (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)"));
            }
        }
        // Verbs.
        if let Some(why) = &res.verbs_skipped {
            out.push(Finding::new("probe.verbs-registration", Status::Skip, &subject, format!("verbs registration not run: {why}")));
        } else {
            let bad: Vec<&registration::Step> = g.verbs.iter().filter(|s| !s.ok).collect();
            let all: Vec<String> = g.verbs.iter().map(|s| format!("{} {}: {}", s.step, gdrdoctor_checks::parse::human_bytes(s.bytes), if s.ok { format!("ok {:.0} us", s.us) } else { s.error.clone().unwrap_or_default() })).collect();
            let peers = match (&g.memory_peers_before, &g.memory_peers_after) {
                (Some(b), Some(a)) => format!("num_alloc_mrs {} -> {}", b.get("num_alloc_mrs").copied().unwrap_or(0), a.get("num_alloc_mrs").copied().unwrap_or(0)),
                _ => "no /sys/kernel/mm/memory_peers/nv_mem".into(),
            };
            let mut f = if bad.is_empty() {
                Finding::new("probe.verbs-registration", Status::Pass, &subject, format!("{} registrations of gpu memory succeeded", g.verbs.len()))
            } else {
                Finding::new("probe.verbs-registration", Status::Fail, &subject, format!("{} of {} registrations failed: {}", bad.len(), g.verbs.len(), bad[0].error.clone().unwrap_or_default()))
                    .fix("errno 14 (EFAULT) on ibv_reg_mr: no peer-memory client claimed the GPU address (load nvidia-peermem, kmod.nvidia-peermem); errno 95/93 on ibv_reg_dmabuf_mr: the kernel or provider lacks dma-buf support; see docs/guides/registration-fails.md")
            };
            for a in all {
                f = f.evidence("verbs", a);
            }
            f = f.evidence("/sys/kernel/mm/memory_peers/nv_mem", peers);
            out.push(f);
        }
        if let (Some(b), Some(a)) = (g.bar1_used_before, g.bar1_used_after) {
            if let Some(last) = out.last_mut() {
                last.evidence.push(gdrdoctor_checks::report::Evidence { source: "NVML BAR1 used".into(), observed: format!("{} before, {} after", gdrdoctor_checks::parse::human_bytes(b), gdrdoctor_checks::parse::human_bytes(a)), expected: None });
            }
        }
    }
    if res.rdma_devices.is_empty() {
        out.push(Finding::new("probe.nccl-dmabuf", Status::Skip, "node", format!("no rdma device: {}", res.verbs_skipped.clone().unwrap_or_default())));
    }
    for (dev, errno) in &res.nccl_dmabuf_probe {
        match errno {
            Some(95) | Some(93) => out.push(Finding::new("probe.nccl-dmabuf", Status::Fail, dev, format!("ibv_reg_dmabuf_mr(fd=-1) -> errno {}: NCCL turns dma-buf off for {dev}", errno.unwrap_or(0)))
                .fix("errno 95 EOPNOTSUPP: libibverbs/provider without dma-buf (rdma-core >= 34, mlx5 needs ODP in the kernel); errno 93 EPROTONOSUPPORT: the kernel lacks the uverbs dma-buf method (>= 5.12)")),
            Some(e) => out.push(Finding::new("probe.nccl-dmabuf", Status::Pass, dev, format!("ibv_reg_dmabuf_mr(fd=-1) -> errno {e}: NCCL enables dma-buf on {dev}"))),
            None => out.push(Finding::new("probe.nccl-dmabuf", Status::Error, dev, "could not open the device or allocate a protection domain")),
        }
    }
    (out, Some(v))
}

/// After a killed or crashed worker, prove the GPU is still usable from a fresh process.
pub fn health_after_kill(run: &runner::WorkerRun, out: &mut Vec<Finding>) {
    if matches!(run.outcome, runner::Outcome::TimedOut | runner::Outcome::Signaled(_)) {
        match health::check(Duration::from_secs(30)) {
            Ok(ms) => out.push(Finding::new("probe.gpu-health", Status::Pass, "node", format!("gpus healthy in a fresh process {ms:.0} ms after the worker was stopped"))),
            Err(e) => out.push(Finding::new("probe.gpu-health", Status::Fail, "node", format!("gpu not healthy after the worker was stopped: {e}"))
                .fix("check `nvidia-smi` and `dmesg` for Xid errors; a GPU that stays hung needs `nvidia-smi -r` (reset) or a reboot")),
        }
    }
}
