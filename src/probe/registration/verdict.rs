//! The verdict of `probe --registration`: findings from the worker's record, a pure function
//! (replayed from saved reports by the tests).

use super::Record;
use crate::probe::common::{self, explain_cuda};
use gdrdoctor_checks::report::{Finding, Status};

/// Findings from one registration run.
pub fn findings(r: &Record) -> Vec<Finding> {
    let mut out = common::problem_findings(r, |e| {
        let e = e.to_string();
        let hint = explain_cuda(&e);
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
        f
    });
    let Some(res) = r.output.as_ref().filter(|_| r.problem.is_none()) else {
        return out;
    };
    if res.gpus.is_empty() {
        let gpu = r.params.as_ref().and_then(|p| p.gpu);
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
        return out;
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
    out
}
