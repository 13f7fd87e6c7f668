//! `gdrdoctor probe`: live probes, each in a worker process (see [`runner`]), reported with the
//! same findings, renderers and exit codes as `check`.

pub mod doorbell;
pub mod hang;
pub mod health;
pub mod kernels;
pub mod p2p;
pub mod protocol;
pub mod registration;
pub mod runner;
pub mod worker;

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
    ("probe.hang", "spin-wait protocols complete without a stall (and how fast); a stall says who waits on what"),
    ("probe.hang-inject", "each injected hang is detected, localised and classified, and the gpu recovers"),
    ("probe.doorbell-layout", "the gpu rings emulated mlx5 doorbells at the offsets the formula gives, and nowhere else"),
    ("probe.doorbell-latency", "gpu doorbell write to host visibility per store flavour, and whether the payload lands first"),
    ("probe.doorbell-mlx5", "a real mlx5 uar: doorbell address inside bar0 at a register offset, and mappable by the gpu"),
    ("probe.p2p-bandwidth", "peer copy bandwidth and latency per gpu pair, against the link's theoretical rate"),
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

/// The skip every probe reports on a node without an NVIDIA GPU, or `None` when there is one.
pub(crate) fn no_gpu(node: &Node) -> Option<Finding> {
    gdrdoctor_checks::derive::gpus(node).is_empty().then(|| {
        Finding::new(
            "probe.cuda",
            Status::Skip,
            "node",
            "no nvidia gpu on the pci bus: nothing to probe",
        )
    })
}

/// Start a probe worker with a progress line; a worker that cannot start is a `probe.cuda`
/// error pushed to `out`.
pub(crate) fn start(
    task: &str,
    params: &impl serde::Serialize,
    deadline: Duration,
    out: &mut Vec<Finding>,
) -> Option<runner::WorkerRun> {
    let progress = runner::Progress::new(&format!("probe --{task}: starting the worker"));
    let run = runner::run(task, params, deadline, &|m| progress.update(m));
    progress.finish();
    run.map_err(|e| {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            e.to_string(),
        ))
    })
    .ok()
}

/// The error a worker reported instead of a result (CUDA missing, device not found, ...).
pub(crate) fn worker_error(run: &runner::WorkerRun) -> Option<String> {
    run.worker_error().map(|e| e.to_string())
}

/// Run the registration probe and turn its measurements into findings.
pub fn registration(
    node: &Node,
    gpu: Option<u32>,
    repeat: u32,
    deadline: Duration,
) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if let Some(f) = no_gpu(node) {
        out.push(f);
        return (out, None);
    }
    let params = registration::Params {
        gpu: gpu.map(|g| g as i32),
        repeat,
    };
    let Some(run) = start("registration", &params, deadline, &mut out) else {
        return (out, None);
    };
    if let Some(f) = run.failure() {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            f.to_string(),
        ));
        health_after_kill(&run, &mut out);
        return (out, run.value().cloned());
    }
    let v = run.value().cloned().unwrap_or_default();
    if let Some(e) = worker_error(&run) {
        let e = e.as_str();
        let hint = explain_cuda(e);
        let mut f = Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            format!("cuda unavailable for the probe: {e}"),
        );
        if !hint.is_empty() {
            f = f.fix(hint);
        } else if e.contains("libcuda") {
            f = f.fix("install the NVIDIA driver's user-space libraries (libcuda.so.1 comes with the driver, e.g. `libnvidia-compute-<ver>`), or run inside a container started with the NVIDIA container toolkit");
        }
        out.push(f);
        return (out, None);
    }
    let res: registration::Result_ = match serde_json::from_value(v.clone()) {
        Ok(r) => r,
        Err(e) => {
            out.push(Finding::new(
                "probe.cuda",
                Status::Error,
                "node",
                format!("unreadable worker result: {e}"),
            ));
            return (out, Some(v));
        }
    };
    if res.gpus.is_empty() {
        out.push(Finding::new(
            "probe.cuda",
            Status::Error,
            "node",
            format!(
                "no gpu probed: cuda sees no gpu{}",
                gpu.map(|g| format!(" with ordinal {g}"))
                    .unwrap_or_default()
            ),
        ));
        return (out, Some(v));
    }
    out.push(Finding::new(
        "probe.cuda",
        Status::Pass,
        "node",
        format!(
            "cuda driver {}.{} with {} gpu(s) probed",
            res.driver_version / 1000,
            (res.driver_version % 1000) / 10,
            res.gpus.len()
        ),
    ));
    for g in &res.gpus {
        let subject = g.bdf.clone();
        let find = |name: &str| {
            g.steps
                .iter()
                .filter(|s| s.step == name)
                .collect::<Vec<_>>()
        };
        // dma-buf export at every size, and at the 4 KiB offset.
        let exports = find("dmabuf-export");
        let offset = find("dmabuf-export-offset-4k");
        let failed: Vec<String> = exports
            .iter()
            .chain(offset.iter())
            .filter(|s| !s.ok)
            .map(|s| {
                format!(
                    "{} {}: {}",
                    s.step,
                    gdrdoctor_checks::parse::human_bytes(s.bytes),
                    s.error.clone().unwrap_or_default()
                )
            })
            .collect();
        let timings = exports
            .iter()
            .map(|s| {
                format!(
                    "{} {:.0} us",
                    gdrdoctor_checks::parse::human_bytes(s.bytes),
                    s.us
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let allocs = find("cuMemAlloc")
            .iter()
            .map(|s| {
                format!(
                    "{} {:.0} us",
                    gdrdoctor_checks::parse::human_bytes(s.bytes),
                    s.us
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let repeated = g
            .timing
            .iter()
            .map(|t| {
                format!(
                    "{}: alloc {:.0} us, export {:.0} us (median of {}; p90 {:.0}/{:.0})",
                    gdrdoctor_checks::parse::human_bytes(t.bytes),
                    t.alloc_us_median,
                    t.export_us_median,
                    t.runs,
                    t.alloc_us_p90,
                    t.export_us_p90
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        if exports.is_empty() {
            out.push(
                Finding::new(
                    "probe.dmabuf-export",
                    Status::Error,
                    &subject,
                    "no allocation succeeded, nothing to export",
                )
                .evidence("cuMemAlloc", allocs),
            );
        } else if failed.is_empty() {
            out.push(
                Finding::new(
                    "probe.dmabuf-export",
                    Status::Pass,
                    &subject,
                    format!(
                        "gpu memory exports as dma-buf at {} sizes{}",
                        exports.len(),
                        if offset.is_empty() {
                            ""
                        } else {
                            " and at a 4 KiB offset"
                        }
                    ),
                )
                .evidence("cuMemGetHandleForAddressRange", timings)
                .evidence("cuMemAlloc", allocs)
                .evidence(
                    "repeated",
                    if repeated.is_empty() {
                        "use --repeat N for medians".to_string()
                    } else {
                        repeated
                    },
                ),
            );
        } else {
            let hint = failed.first().map(|f| explain_cuda(f)).unwrap_or("");
            let mut f = Finding::new(
                "probe.dmabuf-export",
                Status::Fail,
                &subject,
                format!("dma-buf export failed: {}", failed.join("; ")),
            )
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
                out.push(Finding::new(
                    "probe.host-register",
                    Status::Pass,
                    &subject,
                    format!(
                        "pinned host memory registers ({} in {:.0} us)",
                        gdrdoctor_checks::parse::human_bytes(h.bytes),
                        h.us
                    ),
                ));
            } else {
                out.push(Finding::new("probe.host-register", Status::Fail, &subject, format!("cuMemHostRegister failed: {}", h.error.clone().unwrap_or_default()))
                    .fix("check that the driver supports host registration (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, gpu.gdr-support evidence) and that the host has free memory to pin"));
            }
        }
        // Verbs.
        if let Some(why) = &res.verbs_skipped {
            out.push(Finding::new(
                "probe.verbs-registration",
                Status::Skip,
                &subject,
                format!("verbs registration not run: {why}"),
            ));
        } else {
            let all: Vec<String> = g
                .verbs
                .iter()
                .map(|s| {
                    format!(
                        "{} {}: {}",
                        s.step,
                        gdrdoctor_checks::parse::human_bytes(s.bytes),
                        if s.ok {
                            format!("ok {:.0} us", s.us)
                        } else {
                            s.error.clone().unwrap_or_default()
                        }
                    )
                })
                .collect();
            let peers = match (&g.memory_peers_before, &g.memory_peers_after) {
                (Some(b), Some(a)) => format!(
                    "num_alloc_mrs {} -> {}",
                    b.get("num_alloc_mrs").copied().unwrap_or(0),
                    a.get("num_alloc_mrs").copied().unwrap_or(0)
                ),
                _ => "no /sys/kernel/mm/memory_peers/nv_mem".into(),
            };
            // One working path per NIC is what NCCL needs: peer memory (ibv_reg_mr on the
            // device pointer) or dma-buf (ibv_reg_dmabuf_mr on the exported fd).
            let path_ok = |prefix: &str| g.verbs.iter().any(|s| s.step.starts_with(prefix) && s.ok);
            let path_err = |prefix: &str| {
                g.verbs
                    .iter()
                    .find(|s| s.step.starts_with(prefix) && !s.ok)
                    .and_then(|s| s.error.clone())
            };
            let (pm, db) = (path_ok("ibv_reg_mr"), path_ok("ibv_reg_dmabuf_mr"));
            let describe = |ok: bool, prefix: &str| {
                if ok {
                    "ok".to_string()
                } else {
                    path_err(prefix).unwrap_or_else(|| "not tried".into())
                }
            };
            let summary = format!(
                "peer memory (ibv_reg_mr): {}; dma-buf (ibv_reg_dmabuf_mr): {}",
                describe(pm, "ibv_reg_mr"),
                describe(db, "ibv_reg_dmabuf_mr")
            );
            let mut f = if g.verbs.is_empty() {
                Finding::new("probe.verbs-registration", Status::Error, &subject, "no registration was attempted (no gpu buffer of 4 KiB or 2 MiB could be allocated)")
            } else if pm || db {
                Finding::new(
                    "probe.verbs-registration",
                    Status::Pass,
                    &subject,
                    format!("gpu memory registers with the nic: {summary}"),
                )
            } else {
                Finding::new("probe.verbs-registration", Status::Fail, &subject, format!("gpu memory registers with no path: {summary}"))
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
                last.evidence.push(gdrdoctor_checks::report::Evidence {
                    source: "NVML BAR1 used".into(),
                    observed: format!(
                        "{} before, {} after",
                        gdrdoctor_checks::parse::human_bytes(b),
                        gdrdoctor_checks::parse::human_bytes(a)
                    ),
                    expected: None,
                });
            }
        }
    }
    if res.rdma_devices.is_empty() {
        out.push(Finding::new(
            "probe.nccl-dmabuf",
            Status::Skip,
            "node",
            format!(
                "no rdma device: {}",
                res.verbs_skipped.clone().unwrap_or_default()
            ),
        ));
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
    if matches!(
        run.outcome,
        runner::Outcome::TimedOut | runner::Outcome::Signaled(_)
    ) {
        match health::check(Duration::from_secs(30)) {
            Ok(ms) => out.push(Finding::new("probe.gpu-health", Status::Pass, "node", format!("gpus healthy in a fresh process {ms:.0} ms after the worker was stopped"))),
            Err(e) => out.push(Finding::new("probe.gpu-health", Status::Fail, "node", format!("gpu not healthy after the worker was stopped: {e}"))
                .fix("check `nvidia-smi` and `dmesg` for Xid errors; a GPU that stays hung needs `nvidia-smi -r` (reset) or a reboot")),
        }
    }
}

/// `probe --hang`: run the worker with the scenarios, turn its verdicts into findings.
pub fn hang(
    node: &Node,
    opts: &hang::Options,
    deadline: Duration,
) -> (Vec<Finding>, Option<serde_json::Value>) {
    let mut out = Vec::new();
    if let Some(f) = no_gpu(node) {
        out.push(f);
        return (out, None);
    }
    // The abort-ignoring injection ends its worker: run it (and its control) in a worker of its
    // own, last.
    let (normal, last): (Vec<String>, Vec<String>) = opts
        .scenarios
        .iter()
        .cloned()
        .partition(|s| s != "ignore-abort");
    let mut raw = serde_json::Map::new();
    let mut outputs = Vec::new();
    for (i, group) in [normal, last].into_iter().enumerate() {
        if group.is_empty() && !(i == 0 && opts.bench > 0) {
            continue;
        }
        let mut o = opts.clone();
        o.scenarios = group;
        if !o.scenarios.iter().any(|s| s.ends_with("remote-wait")) {
            o.peer = None;
        }
        if i == 1 {
            o.bench = 0;
        }
        let Some(run) = start("hang", &o, deadline, &mut out) else {
            continue;
        };
        let key = if i == 0 { "hang" } else { "hang-escalation" };
        let result = run.value().cloned();
        if let Some(e) = worker_error(&run) {
            out.push(Finding::new(
                "probe.cuda",
                Status::Error,
                "node",
                format!("cuda unavailable for the probe: {e}"),
            ));
            continue;
        }
        let parsed: Option<hang::HangOutput> = result
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let escalated = parsed
            .as_ref()
            .is_some_and(|p| p.scenarios.iter().any(|s| s.escalated));
        // The parent's view of the escalation: the worker exits (or is killed at the deadline).
        let mut v = result.unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("printf".into(), serde_json::json!(run.raw));
            obj.insert(
                "worker_exit".into(),
                serde_json::json!(format!("{:?}", run.outcome)),
            );
        }
        if escalated
            || matches!(
                run.outcome,
                runner::Outcome::TimedOut | runner::Outcome::Signaled(_)
            )
        {
            let verdict_at = parsed.as_ref().and_then(|p| {
                p.scenarios
                    .iter()
                    .find_map(|s| s.verdict.as_ref().map(|v| v.at_realtime_ns))
            });
            match health::check(Duration::from_secs(30)) {
                Ok(ms) => {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
                    let since = verdict_at.map(|t| now.saturating_sub(t) as f64 / 1e6);
                    if let Some(obj) = v.as_object_mut() {
                        obj.insert("verdict_to_healthy_ms".into(), serde_json::json!(since));
                        obj.insert("health_check_ms".into(), serde_json::json!(ms));
                    }
                    out.push(Finding::new("probe.gpu-health", Status::Pass, "node", match since {
                        Some(s) => format!("gpu healthy in a fresh process {s:.0} ms after the verdict (worker {:?}, health check {ms:.0} ms)", run.outcome),
                        None => format!("gpu healthy in a fresh process after the worker was stopped (health check {ms:.0} ms)"),
                    }));
                }
                Err(e) => out.push(Finding::new("probe.gpu-health", Status::Fail, "node", format!("gpu not healthy after the hang worker was stopped: {e}"))
                    .fix("check `nvidia-smi` and `dmesg` for Xid errors; a GPU that stays hung needs `nvidia-smi -r` or a reboot")),
            }
        } else if let Some(f) = run.failure() {
            out.push(Finding::new(
                "probe.cuda",
                Status::Error,
                "node",
                f.to_string(),
            ));
        }
        if parsed.is_none()
            && matches!(
                run.outcome,
                runner::Outcome::TimedOut | runner::Outcome::Signaled(_)
            )
        {
            // Killed (deadline, signal, crash) before it printed a result: say so, with what
            // it printed, instead of leaving only the health check.
            let tail: Vec<&str> = run.raw.iter().rev().take(3).map(String::as_str).collect();
            out.push(
                Finding::new(
                    "probe.hang",
                    Status::Error,
                    "node",
                    format!(
                        "the hang worker ({}) was stopped before it reported: {:?}",
                        o.scenarios.join(", "),
                        run.outcome
                    ),
                )
                .evidence(
                    "last worker output",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                )
                .fix("raise --timeout if the run was simply long; otherwise check `dmesg` for Xid errors and rerun with fewer scenarios (--inject NAME)"),
            );
        }
        raw.insert(key.into(), v);
        if let Some(p) = parsed {
            // Scenarios the worker never reached (it left early after an escalation).
            for name in &o.scenarios {
                if !p.scenarios.iter().any(|s| &s.name == name) {
                    out.push(Finding::new(
                        "probe.hang",
                        Status::Error,
                        format!("{}/{name}", p.gpu),
                        "did not run: the worker stopped after an earlier scenario's kernel ignored the abort",
                    ));
                }
            }
            outputs.push(p);
        }
    }
    for o in &outputs {
        for s in &o.scenarios {
            out.push(scenario_finding(o, s));
        }
        if let Some(b) = &o.bench {
            out.push(bench_finding(&o.gpu, b));
        }
    }
    if !outputs.is_empty() && !out.iter().any(|f| f.id == "probe.cuda") {
        let o = &outputs[0];
        out.insert(
            0,
            Finding::new(
                "probe.cuda",
                Status::Pass,
                "node",
                format!(
                    "{} ({}), kernels from {} in {:.0} ms",
                    o.name, o.gpu, o.kernel_source, o.load_ms
                ),
            ),
        );
    }
    (out, Some(serde_json::Value::Object(raw)))
}

fn stall_text(v: &hang::Verdict) -> String {
    let Some(s) = v.stalled.first() else {
        return format!("{} (no waiter detail)", v.class.as_str());
    };
    let mem = s
        .memory
        .map(|m| format!(", memory holds {m}"))
        .unwrap_or_default();
    let mut t = format!(
        "{}: block {} warp {} (SM {}) waits at site {} ({}) for *{} {} {}, sees {}{mem}, for {:.0} ms",
        v.class.as_str(),
        s.block,
        s.warp,
        s.sm,
        s.site,
        s.site_what,
        s.addr,
        if s.cmp.is_empty() { "==" } else { s.cmp.as_str() },
        s.expected,
        s.observed,
        s.waited_ms
    );
    if v.stalled_total > 1 {
        t.push_str(&format!(" (+{} more waiters)", v.stalled_total - 1));
    }
    if v.class == hang::Class::ForwardProgress {
        t.push_str(&format!(
            "; {} blocks never started, {} started, capacity {}",
            v.never_started,
            v.started,
            v.capacity
                .map(|c| c.to_string())
                .unwrap_or_else(|| "?".into())
        ));
    }
    if let Some(w) = &v.writer {
        if v.class == hang::Class::Ordering {
            t.push_str(&format!("; writer {w}"));
        }
        if v.class == hang::Class::RemoteWait {
            t.push_str(&format!(
                "; the write should come from {} ({w})",
                v.peer.as_deref().unwrap_or("the peer gpu")
            ));
        }
    }
    t
}

fn scenario_finding(o: &hang::HangOutput, s: &hang::ScenarioResult) -> Finding {
    let subject = format!("{}/{}", o.gpu, s.name);
    let timing = s
        .timing
        .iter()
        .map(|(k, v)| format!("{k}={v:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    if s.kind == "error" {
        return Finding::new(
            "probe.hang",
            Status::Error,
            subject,
            format!("scenario could not run: {}", s.notes.join("; ")),
        );
    }
    let mut f = match (s.kind.as_str(), &s.verdict) {
        ("inject", Some(v)) if Some(v.class) == s.expect => Finding::new(
            "probe.hang-inject",
            Status::Pass,
            &subject,
            format!(
                "injected fault detected and classified in {:.0} ms: {}",
                v.latency_ms,
                stall_text(v)
            ),
        ),
        ("inject", Some(v)) => Finding::new(
            "probe.hang-inject",
            Status::Fail,
            &subject,
            format!(
                "injected fault classified as {} instead of {}: {}",
                v.class.as_str(),
                s.expect.map(|c| c.as_str()).unwrap_or("?"),
                stall_text(v)
            ),
        ),
        ("inject", None) => Finding::new(
            "probe.hang-inject",
            Status::Fail,
            &subject,
            format!(
                "injected fault not detected: the scenario completed in {:.0} ms",
                s.elapsed_ms
            ),
        ),
        (_, None) => Finding::new(
            "probe.hang",
            Status::Pass,
            &subject,
            format!(
                "completed in {:.0} ms, no stall{}",
                s.elapsed_ms,
                if timing.is_empty() {
                    String::new()
                } else {
                    format!(" ({timing})")
                }
            ),
        ),
        (_, Some(v)) => Finding::new(
            "probe.hang",
            Status::Fail,
            &subject,
            format!("stall: {}", stall_text(v)),
        )
        .fix(v.class.fix()),
    };
    f = f.evidence("scenario", s.description.clone());
    if let Some(v) = &s.verdict {
        f = f.evidence(
            "class",
            format!("{}: {}", v.class.as_str(), v.class.explain()),
        );
        f = f.evidence(
            "detector",
            format!(
                "threshold {:.0} ms, poll {:.0} ms, verdict {:.1} ms after the wait began",
                v.threshold_ms, v.poll_ms, v.latency_ms
            ),
        );
        for st in v.stalled.iter().take(4) {
            f = f.evidence(
                "waiter",
                format!("block {} warp {} sm {} site {} {} addr {} expected {} observed {} memory {} waited {:.0} ms heartbeat {:.0} ms ago", st.block, st.warp, st.sm, st.site, st.phase, st.addr, st.expected, st.observed, st.memory.map(|m| m.to_string()).unwrap_or_else(|| "?".into()), st.waited_ms, st.heartbeat_age_ms),
            );
        }
        match (s.aborted_cleanly, s.abort_ms) {
            (Some(true), Some(ms)) => f = f.evidence("abort", format!("cooperative abort: every block exited {ms:.1} ms after the abort flag")),
            (Some(false), _) => f = f.evidence("abort", "the kernel ignored the abort flag: the worker exited and the parent checked the gpu in a fresh process"),
            _ => {}
        }
    }
    for w in &s.warnings {
        f = f.evidence("warning", w.clone());
    }
    for n in &s.notes {
        f = f.evidence("note", n.clone());
    }
    f
}

fn bench_finding(gpu: &str, b: &hang::Bench) -> Finding {
    let pct = |v: &[f64], p: f64| -> f64 {
        let mut x = v.to_vec();
        x.sort_by(|a, b| a.total_cmp(b));
        if x.is_empty() {
            return 0.0;
        }
        x[(((x.len() - 1) as f64) * p).round() as usize]
    };
    let med = |v: &[f64]| pct(v, 0.5);
    let rtt_over =
        (med(&b.pingpong_rtt_ns_instrumented) / med(&b.pingpong_rtt_ns_bare) - 1.0) * 100.0;
    let thr_over =
        (1.0 - med(&b.ring_items_per_s_instrumented) / med(&b.ring_items_per_s_bare)) * 100.0;
    let thr_delta = -thr_over;
    Finding::new(
        "probe.hang",
        Status::Pass,
        format!("{gpu}/bench"),
        format!(
            "detection latency p50 {:.1} ms p99 {:.1} ms at threshold {:.0} ms ({} stalls); instrumentation {rtt_over:+.1}% round trip, {thr_delta:+.1}% ring throughput; host poll {:.1} ns per record",
            med(&b.detect_latency_ms),
            pct(&b.detect_latency_ms, 0.99),
            b.detect_threshold_ms,
            b.detect_latency_ms.len(),
            b.poll_ns_per_record
        ),
    )
    .evidence(format!("ping-pong rtt ns bare / instrumented (median of {})", b.pingpong_rtt_ns_bare.len()), format!("{:.0} / {:.0}", med(&b.pingpong_rtt_ns_bare), med(&b.pingpong_rtt_ns_instrumented)))
    .evidence(format!("ring items/s bare / instrumented (median of {})", b.ring_items_per_s_bare.len()), format!("{:.3e} / {:.3e}", med(&b.ring_items_per_s_bare), med(&b.ring_items_per_s_instrumented)))
}
