//! The verdict of `probe --registration`: findings from the worker's record, a pure function
//! (replayed from saved reports by the tests).

use super::{GpuResult, Record, Result_, Step};
use crate::live::verbs::explain_errno;
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
        gpu_findings(res, g, &mut out);
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
        out.push(nccl_dmabuf_finding(dev, *errno));
    }
    out
}

/// The steps of one GPU called `name`.
fn steps<'a>(g: &'a GpuResult, name: &str) -> Vec<&'a Step> {
    g.steps
        .iter()
        .filter(|s| s.step == name)
        .collect::<Vec<_>>()
}

/// The findings of one GPU: dma-buf export, managed memory, host registration, verbs
/// registration per NIC, and the BAR1 use around them.
fn gpu_findings(res: &Result_, g: &GpuResult, out: &mut Vec<Finding>) {
    let subject = g.bdf.clone();
    out.push(export_finding(g, &subject));
    // Managed memory.
    match (steps(g, "cuMemAllocManaged").first(), steps(g, "dmabuf-export-managed").first()) {
        (Some(a), _) if !a.ok => out.push(Finding::new("probe.managed-memory", Status::Skip, &subject, format!("cuMemAllocManaged failed: {}", a.error.clone().unwrap_or_default()))),
        (_, Some(e)) if !e.ok => out.push(Finding::new("probe.managed-memory", Status::Pass, &subject, "managed memory cannot be exported as dma-buf (nor pinned by a peer-memory client): rdma buffers must come from cudaMalloc/cuMemAlloc or cuMemCreate")
            .evidence("cuMemGetHandleForAddressRange(managed)", e.error.clone().unwrap_or_default())),
        (_, Some(_)) => out.push(Finding::new("probe.managed-memory", Status::Warn, &subject, "managed memory exported as dma-buf on this platform: registration may still migrate pages under the nic; prefer cudaMalloc for rdma buffers")),
        _ => {}
    }
    // Host register baseline.
    if let Some(h) = steps(g, "cuMemHostRegister").first() {
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
    verbs_findings(res, g, &subject, out);
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

/// `probe.dmabuf-export`: GPU memory exported as dma-buf at every size, and at the 4 KiB
/// offset.
fn export_finding(g: &GpuResult, subject: &str) -> Finding {
    // dma-buf export at every size, and at the 4 KiB offset.
    let exports = steps(g, "dmabuf-export");
    let offset = steps(g, "dmabuf-export-offset-4k");
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
    let allocs = steps(g, "cuMemAlloc")
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
        Finding::new(
            "probe.dmabuf-export",
            Status::Error,
            subject,
            "no allocation succeeded, nothing to export",
        )
        .evidence("cuMemAlloc", allocs)
    } else if failed.is_empty() {
        Finding::new(
            "probe.dmabuf-export",
            Status::Pass,
            subject,
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
        )
    } else {
        let hint = failed.first().map(|f| explain_cuda(f)).unwrap_or("");
        let mut f = Finding::new(
            "probe.dmabuf-export",
            Status::Fail,
            subject,
            format!("dma-buf export failed: {}", failed.join("; ")),
        )
        .evidence("cuMemGetHandleForAddressRange", timings);
        if !hint.is_empty() {
            f = f.fix(format!("{hint}; NCCL has no fallback once dma-buf is chosen: set NCCL_DMABUF_ENABLE=0 to use nvidia-peermem instead"));
        }
        f
    }
}

/// `probe.verbs-registration`: one finding per NIC this GPU was registered with.
fn verbs_findings(res: &Result_, g: &GpuResult, subject: &str, out: &mut Vec<Finding>) {
    if let Some(why) = &res.verbs_skipped {
        out.push(Finding::new(
            "probe.verbs-registration",
            Status::Skip,
            subject,
            format!("verbs registration not run: {why}"),
        ));
    } else if g.verbs.is_empty() {
        out.push(Finding::new(
            "probe.verbs-registration",
            Status::Error,
            subject,
            "no registration was attempted (no gpu buffer of 4 KiB or 2 MiB could be allocated)",
        ));
    } else {
        let peers = match (&g.memory_peers_before, &g.memory_peers_after) {
            (Some(b), Some(a)) => format!(
                "num_alloc_mrs {} -> {}",
                b.get("num_alloc_mrs").copied().unwrap_or(0),
                a.get("num_alloc_mrs").copied().unwrap_or(0)
            ),
            _ => "no /sys/kernel/mm/memory_peers/nv_mem".into(),
        };
        let mut devs: Vec<&str> = Vec::new();
        for s in &g.verbs {
            let d = step_device(s);
            if !devs.contains(&d) {
                devs.push(d);
            }
        }
        for dev in devs {
            let probe = res.nccl_dmabuf_probe.get(dev).copied().flatten();
            out.push(
                verbs_finding(&g.bdf, dev, &g.verbs, probe)
                    .evidence("/sys/kernel/mm/memory_peers/nv_mem", peers.clone()),
            );
        }
    }
}

/// The NIC a verbs step is about: the last word of its name (`ibv_reg_mr mlx5_0`).
fn step_device(s: &Step) -> &str {
    s.step.rsplit(' ').next().unwrap_or("")
}

/// The verbs call of a step (`ibv_reg_mr`).
fn step_call(s: &Step) -> &str {
    s.step.split(' ').next().unwrap_or("")
}

/// A failed step's errno: kept by the worker, or read back from `errno N: ...` in reports
/// written before it was.
fn step_errno(s: &Step) -> Option<i32> {
    s.errno.or_else(|| {
        s.error
            .as_deref()?
            .strip_prefix("errno ")?
            .split(':')
            .next()?
            .trim()
            .parse()
            .ok()
    })
}

/// `errno 14 (Bad address)`.
fn errno_text(e: i32) -> String {
    let os = std::io::Error::from_raw_os_error(e).to_string();
    let name = os.split(" (os error").next().unwrap_or(&os).to_string();
    format!("errno {e} ({name})")
}

/// One path's outcome in words: `ok`, `errno 14 (Bad address)`, `not tried`.
fn path_text(steps: &[&Step]) -> String {
    if steps.is_empty() {
        return "not tried".into();
    }
    match steps.iter().find(|s| !s.ok) {
        None => "ok".into(),
        Some(s) => match step_errno(s) {
            Some(e) => errno_text(e),
            None => s.error.clone().unwrap_or_else(|| "failed".into()),
        },
    }
}

/// `probe.verbs-registration` for one GPU and one NIC.
///
/// NCCL registers GPU memory with a NIC one way: through dma-buf when its fd=-1 probe passes
/// on the NIC (and the GPU exports dma-bufs), else through peer memory (D04; NCCL's proxy has
/// no fallback once it chose dma-buf). So the finding follows the path NCCL will take: it
/// passes when that path works, and fails (a known errno: its cause and fix) or is an error
/// (an errno gdrdoctor does not recognise) when it does not, whatever the other path does.
fn verbs_finding(gpu: &str, dev: &str, steps: &[Step], probe: Option<i32>) -> Finding {
    let subject = format!("{gpu}/{dev}");
    let mine: Vec<&Step> = steps.iter().filter(|s| step_device(s) == dev).collect();
    let evidence = |mut f: Finding| {
        for s in &mine {
            f = f.evidence(
                "verbs",
                format!(
                    "{} {}: {}",
                    s.step,
                    gdrdoctor_checks::parse::human_bytes(s.bytes),
                    if s.ok {
                        format!("ok {:.0} us", s.us)
                    } else {
                        s.error.clone().unwrap_or_default()
                    }
                ),
            );
        }
        f
    };
    let by_call =
        |c: &str| -> Vec<&Step> { mine.iter().copied().filter(|s| step_call(s) == c).collect() };
    // The device could not be opened, or gave no protection domain.
    if let Some(s) = mine
        .iter()
        .find(|s| !s.ok && matches!(step_call(s), "ibv_open_device" | "ibv_alloc_pd"))
    {
        return evidence(failed(
            &subject,
            step_call(s),
            step_errno(s),
            &format!("{} failed, nothing registered", step_call(s)),
            "",
        ));
    }
    let pm = by_call("ibv_reg_mr");
    let db = by_call("ibv_reg_dmabuf_mr");
    let ok = |v: &[&Step]| !v.is_empty() && v.iter().all(|s| s.ok);
    let summary = format!(
        "peer memory (ibv_reg_mr): {}; dma-buf (ibv_reg_dmabuf_mr): {}",
        path_text(&pm),
        path_text(&db)
    );
    let nccl_dmabuf = probe.is_some_and(|e| e != 95 && e != 93) && !db.is_empty();
    let (chosen, call, other_ok, why) = if nccl_dmabuf {
        (
            &db,
            "ibv_reg_dmabuf_mr",
            ok(&pm),
            format!(
                "NCCL registers through dma-buf here (its fd=-1 probe on {dev} answered errno {})",
                probe.unwrap_or(0)
            ),
        )
    } else {
        (
            &pm,
            "ibv_reg_mr",
            ok(&db),
            match probe {
                Some(e @ (95 | 93)) => format!(
                    "NCCL registers through peer memory here (its dma-buf probe on {dev} failed with errno {e})"
                ),
                None => format!("NCCL's dma-buf probe did not run on {dev}: judged on the peer-memory path"),
                _ => "NCCL registers through peer memory here (no dma-buf export of this gpu's memory to register)".to_string(),
            },
        )
    };
    if ok(chosen) {
        return evidence(Finding::new(
            "probe.verbs-registration",
            Status::Pass,
            &subject,
            format!("gpu memory registers with {dev}: {summary}"),
        ))
        .evidence("path", why);
    }
    if chosen.is_empty() {
        return evidence(Finding::new(
            "probe.verbs-registration",
            Status::Error,
            &subject,
            format!("no {call} was attempted: {summary}"),
        ));
    }
    let first = chosen.iter().find(|s| !s.ok).copied();
    let hint = match (nccl_dmabuf, other_ok) {
        (true, true) => " (the peer-memory path works: NCCL_DMABUF_ENABLE=0 makes NCCL use it)",
        (false, true) => " (dma-buf registration works, but NCCL's own probe turned dma-buf off for this NIC: see probe.nccl-dmabuf)",
        _ => "",
    };
    evidence(failed(
        &subject,
        call,
        first.and_then(step_errno),
        &format!("gpu memory does not register with {dev}: {summary}"),
        hint,
    ))
    .evidence("path", why)
}

/// The finding for a failed verbs call: `fail` with the errno's cause and fix when gdrdoctor
/// knows the errno, `error` naming it when it does not (never a pass).
fn failed(subject: &str, call: &str, errno: Option<i32>, what: &str, hint: &str) -> Finding {
    let (cause, fix) = errno.map(|e| explain_errno(call, e)).unwrap_or(("", ""));
    match errno {
        Some(e) if !fix.is_empty() => Finding::new(
            "probe.verbs-registration",
            Status::Fail,
            subject,
            format!("{what}; {call}: {}: {cause}", errno_text(e)),
        )
        .fix(format!("{fix}{hint}; see docs/guides/registration-fails.md")),
        Some(e) => Finding::new(
            "probe.verbs-registration",
            Status::Error,
            subject,
            format!(
                "{what}; {call} failed with {}, which gdrdoctor does not recognise",
                errno_text(e)
            ),
        )
        .fix(format!("check `dmesg` right after the run and the NIC driver's documentation for {call} and this errno{hint}")),
        None => Finding::new(
            "probe.verbs-registration",
            Status::Error,
            subject,
            format!("{what}; {call} failed without an errno"),
        ),
    }
}

/// `probe.nccl-dmabuf` for one NIC: what NCCL decides from its fd=-1 probe (D02). NCCL turns
/// dma-buf off only for 95 and 93; a stack that supports dma-buf answers 9 (`EBADF`: the kernel
/// looked the fd up, Linux drivers/dma-buf/dma-buf.c `dma_buf_get()`). Any other answer is not
/// evidence that dma-buf works, although NCCL enables it: an error naming the errno.
fn nccl_dmabuf_finding(dev: &str, errno: Option<i32>) -> Finding {
    const CALL: &str = "ibv_reg_dmabuf_mr";
    match errno {
        Some(e @ (95 | 93)) => Finding::new("probe.nccl-dmabuf", Status::Fail, dev, format!("ibv_reg_dmabuf_mr(fd=-1) -> errno {e}: NCCL turns dma-buf off for {dev}"))
            .fix("errno 95 EOPNOTSUPP: libibverbs/provider without dma-buf (rdma-core >= 34, mlx5 needs ODP in the kernel); errno 93 EPROTONOSUPPORT: the kernel lacks the uverbs dma-buf method (>= 5.12)"),
        Some(9) => Finding::new("probe.nccl-dmabuf", Status::Pass, dev, format!("ibv_reg_dmabuf_mr(fd=-1) -> errno 9: NCCL enables dma-buf on {dev}")),
        Some(0) => Finding::new("probe.nccl-dmabuf", Status::Error, dev, format!("ibv_reg_dmabuf_mr(fd=-1) returned a memory region on {dev}: no kernel registers fd -1; NCCL would enable dma-buf, on a stack that is not behaving as any known one"))
            .fix("check the libibverbs that was loaded (`ldconfig -p | grep libibverbs`) and its provider"),
        Some(e) => {
            let (cause, fix) = explain_errno(CALL, e);
            let f = Finding::new(
                "probe.nccl-dmabuf",
                Status::Error,
                dev,
                format!(
                    "ibv_reg_dmabuf_mr(fd=-1) -> {}: NCCL would enable dma-buf on {dev} (it rules out only 95 and 93), but a stack with dma-buf support answers 9 (EBADF) for fd -1: {}",
                    errno_text(e),
                    if cause.is_empty() { "gdrdoctor does not recognise this errno" } else { cause }
                ),
            );
            f.fix(if fix.is_empty() { "check `dmesg` right after the run; set NCCL_DMABUF_ENABLE=0 if real registrations fail (probe.verbs-registration)" } else { fix })
        }
        None => Finding::new("probe.nccl-dmabuf", Status::Error, dev, "could not open the device or allocate a protection domain (see probe.verbs-registration)"),
    }
}
