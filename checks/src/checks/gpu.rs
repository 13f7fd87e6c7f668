//! `gpu.*`: NVIDIA GPUs on the bus, their BAR1 aperture, and what the live libraries (CUDA
//! attributes, NVML state) say about them. On a sysroot without `gdrdoctor/live.json`, or with
//! `check --static`, the live checks skip; on a live node where the library cannot be loaded they
//! report an error naming it.

use crate::model::{CudaDevice, Fact, Node, NvmlGpu, PciDevice, SourceKind};
use crate::names;
use crate::parse;
use crate::report::{Finding, Status};

pub fn present(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.present";
    let Some(pci) = node.pci.get() else {
        return vec![
            Finding::new(ID, Status::Error, "node", "cannot enumerate pci devices")
                .evidence(node.pci.source(), node.pci.describe(|_| String::new())),
        ];
    };
    let gpus: Vec<_> = pci.iter().filter(|d| d.is_nvidia_gpu()).collect();
    // GPUs that vanished from the bus scan: functions whose ids cannot be read, and GPUs the
    // driver, NVML or CUDA know that the scan does not show as NVIDIA GPUs.
    let lost = vanished(node, pci, &gpus);
    if gpus.is_empty() {
        // A display-class function whose vendor could not be read might be an NVIDIA GPU.
        let unknown: Vec<&str> = pci
            .iter()
            .filter(|d| {
                d.class_code().is_some_and(|c| (c >> 16) == 0x03) && d.vendor_id.get().is_none()
            })
            .map(|d| d.bdf.as_str())
            .collect();
        if !unknown.is_empty() {
            let mut out = vec![Finding::new(
                ID,
                Status::Error,
                "node",
                format!(
                    "{} display-class pci function(s) whose vendor cannot be read",
                    unknown.len()
                ),
            )
            .evidence("/sys/bus/pci/devices/*/vendor", unknown.join(" "))];
            out.extend(
                lost.into_iter()
                    .filter(|f| !unknown.contains(&f.subject.as_str())),
            );
            return out;
        }
        if !lost.is_empty() {
            return lost;
        }
        let nv_other = pci
            .iter()
            .filter(|d| d.vendor_id.get() == Some(&0x10de))
            .count();
        return vec![Finding::new(ID, Status::Fail, "node", "no nvidia gpu on the pci bus")
            .expected(
                "/sys/bus/pci/devices/*/{vendor,class}",
                format!("{} pci functions, none with vendor 0x10de and class 0x03xxxx ({nv_other} other nvidia functions)", pci.len()),
                "at least one nvidia gpu",
            )
            .fix("check that the GPUs are seated and powered and that the BIOS enumerates them (`lspci -d 10de:`); after a GPU fell off the bus (Xid 79), reboot the node")];
    }
    let mut out = Vec::new();
    for g in gpus {
        let name = names::device_name(g);
        let src = format!("{}/driver", g.sysfs_path);
        let f = match &g.driver {
            Fact::Known { value: Some(d), .. } if d == "nvidia" => {
                Finding::new(ID, Status::Pass, &g.bdf, format!("{name} bound to nvidia")).evidence(src, "nvidia")
            }
            Fact::Known { value: Some(d), .. } if d.starts_with("vfio") => Finding::new(
                ID,
                Status::Warn,
                &g.bdf,
                format!("{name} is bound to {d}: it is passed through to a virtual machine, not usable on this host"),
            )
            .expected(src, d.clone(), "nvidia")
            .fix(format!("if this host should use the GPU: `echo {} > /sys/bus/pci/drivers/{d}/unbind` and load nvidia; otherwise run gdrdoctor inside the guest", g.bdf)),
            Fact::Known { value: Some(d), .. } => Finding::new(ID, Status::Fail, &g.bdf, format!("{name} is bound to {d}, not nvidia"))
                .expected(src, d.clone(), "nvidia")
                .fix("install and load the NVIDIA driver (nouveau must be blacklisted: `echo blacklist nouveau > /etc/modprobe.d/blacklist-nouveau.conf`, rebuild the initramfs, reboot)"),
            Fact::Known { value: None, .. } => Finding::new(ID, Status::Fail, &g.bdf, format!("{name} has no driver bound"))
                .expected(src, "no driver", "nvidia")
                .fix("`modprobe nvidia`; if it fails, read `dmesg | grep -i nvrm` (a GPU the driver cannot initialise stays unbound)"),
            Fact::Absent { reason, .. } => Finding::new(ID, Status::Error, &g.bdf, format!("{name}: cannot tell which driver is bound"))
                .evidence(src, format!("unknown ({reason})")),
        };
        out.push(f);
    }
    out.extend(lost);
    out
}

/// Error findings for GPUs that the PCI scan lost: a function that may be an NVIDIA GPU but
/// whose vendor or class cannot be read (absent or garbage), and a GPU that
/// `/proc/driver/nvidia/gpus`, NVML or CUDA list but the scan does not show as one. A GPU must
/// never just disappear: 7 of 8 GPUs passing is not a healthy node.
fn vanished(node: &Node, pci: &[PciDevice], gpus: &[&PciDevice]) -> Vec<Finding> {
    const ID: &str = "gpu.present";
    let mut out = Vec::new();
    let mut named: Vec<String> = Vec::new();
    for d in pci.iter().filter(|d| d.identity_unreadable()) {
        named.push(d.bdf.clone());
        out.push(
            Finding::new(
                ID,
                Status::Error,
                &d.bdf,
                "this pci function may be an nvidia gpu, but its vendor or class cannot be read",
            )
            .evidence(
                format!("{}/vendor", d.sysfs_path),
                d.vendor_id.describe(|v| format!("0x{v:04x}")),
            )
            .evidence(
                format!("{}/class", d.sysfs_path),
                d.class.describe(|c| format!("0x{c:06x}")),
            )
            .fix(format!("`lspci -nn -s {}` shows what the device reports; an unreadable id on a live node is a device that stopped answering (reseat, reboot), in a snapshot a damaged file", d.bdf)),
        );
    }
    // What else lists GPUs: the driver's own directory, NVML and CUDA.
    let listed = node.gpus_listed_elsewhere();
    for (bdf, by) in listed {
        if gpus.iter().any(|g| g.bdf == bdf) || named.contains(&bdf) {
            continue;
        }
        let on_bus = pci.iter().find(|d| d.bdf == bdf);
        let observed = match on_bus {
            Some(d) => format!(
                "vendor {}, class {}",
                d.vendor_id.describe(|v| format!("0x{v:04x}")),
                d.class.describe(|c| format!("0x{c:06x}"))
            ),
            None => "not listed".to_string(),
        };
        out.push(
            Finding::new(
                ID,
                Status::Error,
                &bdf,
                format!(
                    "{} list{} this gpu, but the pci bus scan does not show it as an nvidia gpu",
                    by.join(", "),
                    if by.len() == 1 { "s" } else { "" }
                ),
            )
            .expected("/sys/bus/pci/devices", observed, "vendor 0x10de, class 0x03xxxx")
            .fix(format!("`lspci -nn -s {bdf}`; a gpu that the driver knows and the bus scan does not is a damaged capture or a device that stopped answering config reads (reseat, reboot)")),
        );
    }
    out
}

/// The finding for an absent live fact.
pub(crate) fn absent<T>(id: &str, node: &Node, f: &Fact<T>) -> Finding {
    let reason = f.reason().unwrap_or_default();
    // Under --host-root the libraries are the container's: when the NVIDIA container toolkit
    // did not inject them (or the pod sees fewer GPUs than the host has), say so, not an error.
    // A snapshot's recorded cuInit failure is the node's own answer, not a missing library.
    let failed = reason.starts_with("cuInit failed") && node.source == SourceKind::Sysroot;
    let quiet = !failed
        && (matches!(node.source, SourceKind::Sysroot | SourceKind::HostRoot)
            || reason.starts_with("not queried"));
    if crate::model::is_damaged(reason) {
        // The snapshot holds the record, and it cannot be read: never a skip.
        Finding::new(
            id,
            Status::Error,
            "node",
            format!("the recorded live facts cannot be used: {reason}"),
        )
        .evidence(f.source(), reason.to_string())
        .fix("take the snapshot again (`gdrdoctor snapshot`) on the node; a gdrdoctor/live.json that does not parse was damaged after it was written")
    } else if quiet {
        Finding::new(
            id,
            Status::Skip,
            "node",
            format!("live-only fact not available: {reason}"),
        )
    } else if reason.starts_with("cuInit failed") {
        Finding::new(id, Status::Error, "node", format!("CUDA cannot start on this node: {reason}"))
            .evidence(f.source(), reason.to_string())
            .fix("the CUDA error says why: 802 (system not ready) on an NVSwitch node: the fabric manager is not running (`systemctl status nvidia-fabricmanager`); 100 (no device): no GPU visible to the process (CUDA_VISIBLE_DEVICES, the container's devices); 999 or 3: /dev/nvidia-uvm missing or unusable (`modprobe nvidia-uvm`); `nvidia-smi -q` shows each GPU's state")
    } else {
        Finding::new(id, Status::Error, "node", format!("cannot query {}: {reason}", f.source()))
            .evidence(f.source(), reason.to_string())
            .fix("run on the node with the NVIDIA driver's user-space libraries on the loader path (inside containers: the NVIDIA container toolkit); `gdrdoctor check --static` skips these checks")
    }
}

fn cuda_for<'a>(node: &'a Node, bdf: &str) -> Option<&'a CudaDevice> {
    node.live.cuda.get().and_then(|c| c.device(bdf))
}

fn nvml_for<'a>(node: &'a Node, bdf: &str) -> Option<&'a NvmlGpu> {
    node.live.nvml.get().and_then(|c| c.gpu(bdf))
}

/// The finding of a GPU NVML's answer (known) lacks: an error that says why (set aside as
/// damaged, or not listed).
pub(crate) fn no_nvml_answer(id: &str, node: &Node, bdf: &str) -> Finding {
    let why = node
        .live
        .nvml
        .get()
        .map(|n| n.why_missing(bdf))
        .unwrap_or_else(|| "nvml does not list this gpu".to_string());
    if crate::model::is_damaged(&why) {
        Finding::new(
            id,
            Status::Error,
            bdf,
            format!("the recorded nvml facts of this gpu cannot be used: {why}"),
        )
        .evidence(node.live.nvml.source(), why.clone())
        .fix("take the snapshot again (`gdrdoctor snapshot`) on the node")
    } else {
        Finding::new(id, Status::Error, bdf, why)
    }
}

/// The finding of a GPU CUDA's answer (known) lacks: a skip where something says why (left
/// out for its compute mode, hidden by CUDA_VISIBLE_DEVICES), an error where nothing does or
/// its entries are damaged: its CUDA attributes are not known, never assumed.
fn no_cuda_answer(id: &str, node: &Node, bdf: &str) -> Finding {
    use crate::derive::CudaGap;
    match crate::derive::cuda_gap(node, bdf) {
        None => absent(id, node, &node.live.cuda),
        Some(CudaGap::NotAsked(w)) => Finding::new(id, Status::Skip, bdf, format!("cuda {w}")),
        Some(CudaGap::Hidden(v)) => Finding::new(
            id,
            Status::Skip,
            bdf,
            format!("cuda does not see this gpu: CUDA_VISIBLE_DEVICES={v} in {}", node.env.source()),
        ),
        Some(CudaGap::Damaged(why)) => Finding::new(
            id,
            Status::Error,
            bdf,
            format!("the recorded cuda facts of this gpu cannot be used: {why}"),
        )
        .evidence(node.live.cuda.source(), why)
        .fix("take the snapshot again (`gdrdoctor snapshot`) on the node"),
        Some(CudaGap::Unanswered(why)) => Finding::new(id, Status::Error, bdf, why.clone())
            .evidence(node.live.cuda.source(), why)
            .fix("run `gdrdoctor check` (or take the snapshot again) on the node; `nvidia-smi -q -i <bdf>` shows whether the gpu answers"),
    }
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
            out.push(no_cuda_answer(ID, node, &g.bdf));
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
        let src = node.live.cuda_evidence("cuDeviceGetAttribute");
        let src = src.as_str();
        let f = match d.gpu_direct_rdma_supported {
            Some(1) => Finding::new(ID, Status::Pass, &g.bdf, format!("cuda reports gpudirect rdma supported ({}, dma-buf {})", d.name, if d.dma_buf_supported == Some(1) { "supported" } else { "not supported" })).evidence(src, facts),
            Some(0) => Finding::new(ID, Status::Fail, &g.bdf, format!("cuda reports GPU_DIRECT_RDMA_SUPPORTED=0 for {}: nccl turns gdr off for this gpu, silently", d.name))
                .expected(src, facts, "GPU_DIRECT_RDMA_SUPPORTED=1")
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
            Some(true) => Finding::new(ID, Status::Pass, &g.bdf, "persistence mode on")
                .evidence("nvmlDeviceGetPersistenceMode", "Enabled"),
            Some(false) => Finding::new(ID, Status::Warn, &g.bdf, "persistence mode off: the driver tears the gpu down when the last client exits, so every job start pays the initialisation and ecc scrubbing again")
                .expected("nvmlDeviceGetPersistenceMode", "Disabled", "Enabled")
                .fix("`systemctl enable --now nvidia-persistenced` (or `nvidia-smi -pm 1` until reboot)"),
            None if nvml_for(node, &g.bdf).is_none() => no_nvml_answer(ID, node, &g.bdf),
            None => Finding::new(ID, Status::Error, &g.bdf, "nvml did not report persistence mode for this gpu")
                .evidence("nvmlDeviceGetPersistenceMode", "not reported"),
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
                return no_nvml_answer(ID, node, &g.bdf);
            };
            match (n.remapped_rows, n.retired_pages_pending) {
                (Some(r), _) if r.failure => Finding::new(ID, Status::Fail, &g.bdf, "row remapping failed: the gpu ran out of spare rows")
                    .evidence("nvmlDeviceGetRemappedRows", format!("correctable {} uncorrectable {} pending {} failure {}", r.correctable, r.uncorrectable, r.pending, r.failure))
                    .fix("the GPU needs replacing (field diagnostic / RMA); drain the node"),
                (Some(r), _) if r.pending => Finding::new(ID, Status::Fail, &g.bdf, "row remaps are pending: the gpu must be reset before the remapping takes effect")
                    .evidence("nvmlDeviceGetRemappedRows", format!("correctable {} uncorrectable {} pending true", r.correctable, r.uncorrectable))
                    .fix("drain the node and reset the GPU (`nvidia-smi -r -i <n>`) or reboot"),
                (_, Some(true)) => Finding::new(ID, Status::Fail, &g.bdf, "retired pages are pending: the gpu must be reset")
                    .evidence("nvmlDeviceGetRetiredPagesPendingStatus", "pending")
                    .fix("drain the node and reset the GPU (`nvidia-smi -r -i <n>`) or reboot"),
                (Some(r), _) => Finding::new(ID, Status::Pass, &g.bdf, format!("no pending row remaps ({} correctable, {} uncorrectable remapped so far)", r.correctable, r.uncorrectable))
                    .evidence("nvmlDeviceGetRemappedRows", format!("correctable {} uncorrectable {} pending {} failure {}", r.correctable, r.uncorrectable, r.pending, r.failure)),
                // Ampere and later remap rows; page retirement is the older GPUs' mechanism, so
                // its "not pending" says nothing about a newer GPU whose remap query failed.
                (None, _) if !remap_not_supported(n) && !before_ampere(node, g, n) => {
                    let why = remap_error(n).unwrap_or("no answer recorded (not in nvml's facts for this gpu)");
                    let cc = compute_capability(node, g, n);
                    let (generation, cc_source, cc_seen) = match &cc {
                        Some((cc, src)) => ("an ampere or later gpu", src.clone(), format!("compute capability {}.{}", cc.0, cc.1)),
                        None => ("a gpu of unknown generation", "compute capability".to_string(), "unknown (neither cuda, nvml nor the model name says)".to_string()),
                    };
                    Finding::new(ID, Status::Error, &g.bdf, format!("nvml's row-remap query failed for {generation}: pending row remaps cannot be ruled out ({why})"))
                        .evidence(format!("nvmlDeviceGetRemappedRows ({})", node.live.nvml.source()), why.to_string())
                        .evidence(cc_source, cc_seen)
                        .fix("`nvidia-smi -q -d ROW_REMAPPER -i <n>` shows the remapper's state; a query that keeps failing on a healthy driver is itself a reason to drain and reset the GPU")
                }
                (None, Some(false)) => Finding::new(ID, Status::Pass, &g.bdf, "no pending retired pages")
                    .evidence("nvmlDeviceGetRetiredPagesPendingStatus", "not pending"),
                (None, None) => Finding::new(ID, Status::Skip, &g.bdf, "nvml reports neither row remapping nor page retirement for this gpu"),
            }
        })
        .collect()
}

/// NVML's recorded failure of the row-remap query for this GPU.
fn remap_error(n: &NvmlGpu) -> Option<&str> {
    n.errors
        .iter()
        .find(|e| e.starts_with("nvmlDeviceGetRemappedRows"))
        .map(String::as_str)
}

/// NVML said the GPU has no row remapper (`NVML_ERROR_NOT_SUPPORTED`, 3): not a failed query.
fn remap_not_supported(n: &NvmlGpu) -> bool {
    remap_error(n).is_some_and(|e| {
        let e = e.to_ascii_lowercase();
        e.ends_with("nvml error 3") || e.contains("not supported")
    })
}

/// The GPU's compute capability and where it came from: CUDA, NVML, then the model name (a
/// heuristic, said so).
fn compute_capability(node: &Node, g: &PciDevice, n: &NvmlGpu) -> Option<((i32, i32), String)> {
    if let Some(d) = cuda_for(node, &g.bdf) {
        return Some((
            (d.cc_major, d.cc_minor),
            node.live.cuda_evidence("cuDeviceGetAttribute"),
        ));
    }
    if let (Some(a), Some(b)) = (n.cc_major, n.cc_minor) {
        return Some(((a, b), "nvmlDeviceGetCudaComputeCapability".to_string()));
    }
    let pci_name = names::device_name(g);
    if let Some(cc) = crate::gdr::cc_from_model(&pci_name) {
        return Some((cc, format!("gpu model {pci_name} (heuristic)")));
    }
    let nvml_name = n.name.as_deref()?;
    crate::gdr::cc_from_model(nvml_name)
        .map(|cc| (cc, format!("gpu model {nvml_name} (nvml, heuristic)")))
}

/// Known to be older than Ampere (compute capability below 8.0): page retirement is its
/// mechanism. Unknown is not known to be older.
fn before_ampere(node: &Node, g: &PciDevice, n: &NvmlGpu) -> bool {
    compute_capability(node, g, n).is_some_and(|((major, _), _)| major < 8)
}

/// `gpu.p2p`: every GPU pair that should reach each other over NVLink or a PCIe switch does.
pub fn p2p(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.p2p";
    let gpus = crate::derive::gpus(node);
    if gpus.len() < 2 {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            format!("{} nvidia gpu(s): no gpu pair", gpus.len()),
        )];
    }
    // NVSwitch systems without the fabric manager: CUDA itself refuses to start.
    if let Some(r) = node.live.cuda.reason() {
        if r.contains("SYSTEM_NOT_READY") {
            let switched =
                crate::gdr::p2p::nvswitches(node) > 0
                    || node.live.nvml.get().is_some_and(|n| {
                        n.gpus.iter().any(|g| crate::gdr::p2p::switch_links(g) > 0)
                    });
            let why = if switched {
                "the nvlink fabric is not initialised: an nvswitch system without a running fabric manager"
            } else {
                "the driver is not ready (on nvswitch systems: the fabric manager is not running)"
            };
            return vec![Finding::new(ID, Status::Fail, "node", format!("cuda reports CUDA_ERROR_SYSTEM_NOT_READY: {why}"))
                .evidence("libcuda.so.1", r.to_string())
                .fix("`systemctl enable --now nvidia-fabricmanager` (its version must match the driver's exactly; `nvidia-smi -q | grep -A2 Fabric` shows the state), then rerun")];
        }
    }
    if node.live.nvml.get().is_none() {
        return vec![absent(ID, node, &node.live.nvml)];
    }
    // NCCL's own P2P decision per pair (the rule's, src/graph/paths.cc ncclTopoCheckP2p()),
    // judged only where the job's environment sets NCCL_P2P_DISABLE or NCCL_P2P_LEVEL: then
    // NCCL may stay off a path whose peer access works.
    let cx = crate::gdr::Context::new(node);
    let shared = crate::gdr::shared(node);
    let (sys, decision) = (&shared.system, &shared.decision);
    let user_level = cx.config.env.p2p_level.clone().filter(|l| l.user);
    let mut out = Vec::new();
    for p in crate::gdr::p2p::pairs(node) {
        let subject = format!("{}|{}", p.a, p.b);
        // A GPU whose recorded live facts are damaged: its links and peer access are unknown.
        if let Some(why) = crate::derive::live_damage(node, &p.a)
            .or_else(|| crate::derive::live_damage(node, &p.b))
        {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &subject,
                    format!("the recorded live facts of this pair cannot be used: {why}"),
                )
                .evidence(node.live.nvml.source(), why),
            );
            continue;
        }
        let links = p.nvlinks();
        let via = if p.nvlinks_direct >= p.nvlinks_switch {
            "direct nvlinks"
        } else {
            "nvlinks through nvswitch"
        };
        let nvl = p.status("nvlink");
        let rw_ok = p.status("read") == Some("ok") && p.status("write") == Some("ok");
        let rw_bad = ["read", "write"]
            .into_iter()
            .find_map(|c| p.status(c).filter(|s| *s != "ok"));
        let cuda = p.cuda_both();
        let pcie = p.pcie.clone().unwrap_or_else(|| "?".into());
        let mut f = if p.p2p.is_empty() && cuda.is_none() {
            Finding::new(ID, Status::Skip, &subject, format!("no nvml p2p status or cuda peer facts for this pair ({}): a snapshot taken before gdrdoctor recorded them, or the query failed", p.cell()))
        } else if links > 0 {
            if nvl.is_some_and(|s| s != "ok") || rw_bad.is_some() || cuda == Some(false) {
                let why = match (rw_bad, nvl, cuda) {
                    (Some(s), _, _) => format!(
                        "nvml p2p read/write is `{s}` ({})",
                        crate::gdr::p2p::explain_status(s)
                    ),
                    (_, Some(s), _) if s != "ok" => format!(
                        "nvml p2p over nvlink is `{s}` ({})",
                        crate::gdr::p2p::explain_status(s)
                    ),
                    _ => "cuda refuses peer access (cuDeviceCanAccessPeer = 0)".to_string(),
                };
                let consequence = if rw_bad.is_some() {
                    "nccl stops with ncclUnhandledCudaError between them (unless NCCL_IGNORE_DISABLED_P2P=1, which sends the traffic through host memory)"
                } else {
                    "nccl logs `Could not enable P2P` and carries this pair through host memory instead of nvlink"
                };
                let f = Finding::new(
                    ID,
                    Status::Fail,
                    &subject,
                    format!("{links} {via} join these gpus but {why}: {consequence}"),
                );
                if p.nvlinks_switch > 0 {
                    f.fix("on nvswitch systems nvlink p2p needs the fabric manager: `systemctl status nvidia-fabricmanager` (version equal to the driver's), `nvidia-smi -q | grep -A2 Fabric` must say Completed; then `nvidia-smi nvlink -s` for link errors")
                } else {
                    f.fix("`nvidia-smi nvlink -s` and `nvidia-smi nvlink -e` for down or erroring links; reseat the bridge or reset the gpus (`nvidia-smi -r`)")
                }
            } else {
                Finding::new(
                    ID,
                    Status::Pass,
                    &subject,
                    format!("peer access over {links} {via}"),
                )
            }
        } else if matches!(pcie.as_str(), "PIX" | "PXB") {
            if !rw_ok && !p.p2p.is_empty() || cuda == Some(false) {
                let why = match rw_bad {
                    Some(s) => format!("nvml p2p is `{s}`: {}", crate::gdr::p2p::explain_status(s)),
                    None => "cuda refuses peer access (cuDeviceCanAccessPeer = 0)".to_string(),
                };
                Finding::new(ID, Status::Warn, &subject, format!("gpus share a pcie switch ({pcie}) but {why}"))
                    .fix("look at `pcie.acs-redirect` and `iommu.mode` in this report: ACS redirection on the switch ports or a translating iommu sends every p2p transfer through the root complex; `setpci` ACS off or `iommu=pt` restores direct p2p")
            } else {
                Finding::new(
                    ID,
                    Status::Pass,
                    &subject,
                    format!("peer access over pcie ({pcie})"),
                )
            }
        } else if (rw_ok || p.p2p.is_empty()) && cuda != Some(false) {
            Finding::new(
                ID,
                Status::Pass,
                &subject,
                format!("peer access over pcie through the cpu ({pcie})"),
            )
        } else {
            let why = match rw_bad {
                Some(s) => format!("nvml: {}", crate::gdr::p2p::explain_status(s)),
                None => "cuda refuses peer access".to_string(),
            };
            Finding::new(ID, Status::Pass, &subject, format!("no peer access across {pcie} without nvlink ({why}); nccl stages these transfers through host memory, as expected"))
        };
        if let Some(level) = &user_level {
            let ia = sys.gpus.iter().position(|g| g.id == p.a);
            let ib = sys.gpus.iter().position(|g| g.id == p.b);
            let nccl = decision
                .p2p
                .iter()
                .find(|x| (Some(x.a), Some(x.b)) == (ia, ib) || (Some(x.a), Some(x.b)) == (ib, ia));
            if let Some(x) = nccl {
                let works = f.status == Status::Pass && f.message.starts_with("peer access over");
                if works && x.p2p == Some(false) {
                    f.status = Status::Warn;
                    f.message = format!(
                        "{}, but {} keeps nccl off p2p between these gpus: nccl stages their traffic through host memory (shm) instead",
                        f.message, level.source
                    );
                    f.remediation = Some(format!(
                        "drop {} from the job's environment (or set NCCL_P2P_LEVEL to {} or higher) unless you meant to keep nccl off this path",
                        level.source.split(" from ").next().unwrap_or("the variable"),
                        x.path.map(|k| k.as_str()).unwrap_or("the pair's path")
                    ));
                }
                f = f.evidence(
                    format!("nccl p2p ({})", decision.rules.describe()),
                    format!(
                        "{}: {}",
                        match x.p2p {
                            Some(true) => "p2p",
                            Some(false) => "no p2p",
                            None => "unknown",
                        },
                        x.reason
                    ),
                );
            }
        }
        f = f.evidence("path", p.cell());
        if let Some(a) = &p.nvml_ancestor {
            f = f.evidence("nvmlDeviceGetTopologyCommonAncestor", a.clone());
        }
        if !p.p2p.is_empty() {
            let s: Vec<String> = p.p2p.iter().map(|(k, v)| format!("{k}={v}")).collect();
            f = f.evidence("nvmlDeviceGetP2PStatus", s.join(" "));
        }
        if let (Some(x), Some(y)) = (p.cuda_ab, p.cuda_ba) {
            f = f.evidence(
                node.live.cuda_evidence("cuDeviceCanAccessPeer a->b / b->a"),
                format!("{} / {}", u8::from(x), u8::from(y)),
            );
        }
        out.push(f);
    }
    out
}

/// `gpu.nvlink`: every GPU has as many active NVLinks as its peers, and where they go.
pub fn nvlink(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.nvlink";
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    let Some(nvml) = node.live.nvml.get() else {
        return vec![absent(ID, node, &node.live.nvml)];
    };
    let active = |g: &NvmlGpu| g.nvlinks.iter().filter(|l| l.active).count();
    let switches = crate::gdr::p2p::nvswitches(node);
    let most = nvml.gpus.iter().map(active).max().unwrap_or(0);
    if nvml.gpus.iter().all(|g| g.nvlinks.is_empty()) {
        return vec![Finding::new(ID, Status::Skip, "node", "no gpu reports nvlinks (pcie-only gpus, or a virtual machine without nvlink passthrough)")];
    }
    let mut out = Vec::new();
    for g in gpus {
        let Some(n) = nvml_for(node, &g.bdf) else {
            out.push(no_nvml_answer(ID, node, &g.bdf));
            continue;
        };
        let k = active(n);
        let down: Vec<String> = n
            .nvlinks
            .iter()
            .filter(|l| !l.active)
            .map(|l| l.link.to_string())
            .collect();
        let sw = crate::gdr::p2p::switch_links(n);
        let mut to_gpu: std::collections::BTreeMap<&str, usize> = Default::default();
        let mut other = 0usize;
        for l in n
            .nvlinks
            .iter()
            .filter(|l| l.active && l.remote_type.as_deref() != Some("switch"))
        {
            if l.remote_type.as_deref() == Some("gpu") {
                *to_gpu
                    .entry(l.remote_bdf.as_deref().unwrap_or("?"))
                    .or_default() += 1;
            } else {
                other += 1;
            }
        }
        let ends = {
            let mut v = Vec::new();
            if sw > 0 {
                v.push(format!("{sw} to nvswitch"));
            }
            v.extend(to_gpu.iter().map(|(b, c)| format!("{c} to {b}")));
            if other > 0 {
                v.push(format!("{other} to a device of unknown type"));
            }
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let version = n.nvlinks.iter().find_map(|l| l.version);
        let mut f = if k == 0 && most > 0 {
            Finding::new(ID, Status::Fail, &g.bdf, format!("all {} nvlinks down while other gpus have {most} active: this gpu reaches its peers over pcie only", n.nvlinks.len()))
                .fix("`nvidia-smi nvlink -s -i <gpu>` and `nvidia-smi nvlink -e`; check `dmesg` for Xid 74 (nvlink error); reset the gpu (`nvidia-smi -r -i <gpu>`) or reseat; on nvswitch systems restart nvidia-fabricmanager")
        } else if k < most {
            Finding::new(ID, Status::Warn, &g.bdf, format!("{k} of {} nvlinks active where other gpus have {most}: links {} down, so this gpu's nvlink bandwidth is {}% of its peers'", n.nvlinks.len(), down.join(", "), k * 100 / most.max(1)))
                .fix("`nvidia-smi nvlink -s -i <gpu>` for the down links and `nvidia-smi nvlink -e` for errors; Xid 74 in `dmesg` names failing links")
        } else if k == 0 && switches > 0 {
            Finding::new(ID, Status::Fail, &g.bdf, format!("no nvlink active on any gpu although {switches} nvswitch(es) are on the pci bus: the fabric manager is not running or the links did not train"))
                .fix("`systemctl enable --now nvidia-fabricmanager` (same version as the driver), then `nvidia-smi nvlink -s`; `journalctl -u nvidia-fabricmanager` says why training failed")
        } else if k == 0 {
            Finding::new(ID, Status::Skip, &g.bdf, "no active nvlink")
        } else {
            Finding::new(
                ID,
                Status::Pass,
                &g.bdf,
                format!("{k} nvlinks active ({ends})"),
            )
        };
        f = f.evidence(
            "nvmlDeviceGetNvLinkState",
            format!("{k} active of {}", n.nvlinks.len()),
        );
        if let Some(v) = version {
            f = f.evidence("nvmlDeviceGetNvLinkVersion", v.to_string());
        }
        f = f.evidence("remote ends", ends);
        out.push(f);
    }
    out
}

/// Memory of common datacenter GPUs (MiB, as nvidia-smi reports it), by PCI device id: used to
/// judge BAR1 when NVML is not available.
const GPU_MEMORY_MIB: &[(u16, u64, &str)] = &[
    (0x2335, 143_771, "H200 SXM 141GB"),
    (0x233b, 143_771, "H200 NVL"),
    (0x2330, 81_559, "H100 SXM5 80GB"),
    (0x2331, 81_559, "H100 PCIe 80GB"),
    (0x20b0, 40_960, "A100 SXM4 40GB"),
    (0x20b2, 81_920, "A100 SXM4 80GB"),
    (0x20b5, 81_920, "A100 PCIe 80GB"),
    (0x20f1, 40_960, "A100 PCIe 40GB"),
    (0x26b9, 46_068, "L40S"),
    (0x26b5, 46_068, "L40"),
    (0x1db1, 16_160, "V100 SXM2 16GB"),
];

/// The GPU's BAR1 (frame-buffer aperture): the first memory BAR after BAR0.
pub fn bar1(d: &PciDevice) -> Option<crate::model::Resource> {
    let res = d.resources.get()?;
    let bar0 = res.iter().find(|r| r.index == 0 && r.is_set())?;
    let next = if bar0.mem64() { 2 } else { 1 };
    res.iter()
        .find(|r| r.index >= next && r.index < 6 && r.is_set() && r.is_mem())
        .copied()
}

pub fn gpu_bar1(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.bar1";
    let gpus = crate::derive::gpus(node);
    if gpus.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no nvidia gpu")];
    }
    let mut out = Vec::new();
    for g in gpus {
        let src = format!("{}/resource", g.sysfs_path);
        // No BARs read (a paste of `nvidia-smi -q` without lspci): BAR1's size as NVML
        // reports it, judged by the same rule against the memory NVML reports.
        if g.resources.get().is_none() {
            if let Some((b1, mem)) = nvml_for(node, &g.bdf).and_then(|n| {
                n.bar1_total
                    .filter(|b| *b > 0)
                    .map(|b| (b, n.memory_total.filter(|m| *m > 0)))
            }) {
                let src = format!("{} (nvmlDeviceGetBAR1MemoryInfo)", node.live.nvml.source());
                let observed = format!("BAR1 {}", parse::human_bytes(b1));
                let f = match mem {
                    Some(m) if b1 < m => Finding::new(ID, Status::Warn, &g.bdf, format!("bar1 is {} but the gpu has {} of memory: at most that much gpu memory can be registered for rdma at once", parse::human_bytes(b1), parse::human_bytes(m)))
                        .expected(src, observed, format!(">= {}", parse::human_bytes(m)))
                        .fix("enable Above 4G Decoding and Resizable BAR in the BIOS (and `NVreg_EnableResizableBar=1` where the driver needs it), then reboot; `nvidia-smi -q -d MEMORY` shows BAR1 Memory Usage"),
                    Some(m) => Finding::new(ID, Status::Pass, &g.bdf, format!("bar1 {} covers the gpu's {} of memory", parse::human_bytes(b1), parse::human_bytes(m))).evidence(src, observed),
                    None if b1 <= 256 << 20 => Finding::new(ID, Status::Warn, &g.bdf, format!("bar1 is only {}: gpudirect rdma can map at most that much gpu memory", parse::human_bytes(b1)))
                        .expected(src, observed, "a bar1 as large as the gpu memory")
                        .fix("enable Above 4G Decoding and Resizable BAR in the BIOS, then reboot"),
                    None => Finding::new(ID, Status::Pass, &g.bdf, format!("bar1 is {} (the gpu memory size is not shown; not compared)", parse::human_bytes(b1))).evidence(src, observed),
                };
                out.push(f);
                continue;
            }
        }
        let Some(b1) = bar1(g) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &g.bdf,
                    "cannot find bar1 (the frame-buffer aperture)",
                )
                .evidence(
                    src,
                    g.resources.describe(|r| format!("{} resources", r.len())),
                ),
            );
            continue;
        };
        let size = b1.size();
        let mem = g
            .device_id
            .get()
            .and_then(|id| GPU_MEMORY_MIB.iter().find(|(d, _, _)| d == id))
            .map(|(_, m, n)| (*m << 20, *n));
        let observed = format!(
            "BAR{} {} at 0x{:x}",
            b1.index,
            parse::human_bytes(size),
            b1.start
        );
        let f = match mem {
            Some((m, model)) if size < m => Finding::new(ID, Status::Warn, &g.bdf, format!("bar1 is {} but the {model} has {} of memory: at most that much gpu memory can be registered for rdma at once", parse::human_bytes(size), parse::human_bytes(m)))
                .expected(src, observed, format!(">= {}", parse::human_bytes(m)))
                .fix("enable Above 4G Decoding and Resizable BAR in the BIOS (and `NVreg_EnableResizableBar=1` where the driver needs it), then reboot; `nvidia-smi -q -d MEMORY` shows BAR1 Memory Usage"),
            Some((m, model)) => Finding::new(ID, Status::Pass, &g.bdf, format!("bar1 {} covers the {model}'s {} of memory", parse::human_bytes(size), parse::human_bytes(m))).evidence(src, observed),
            None if size <= 256 << 20 => Finding::new(ID, Status::Warn, &g.bdf, format!("bar1 is only {}: gpudirect rdma can map at most that much gpu memory", parse::human_bytes(size)))
                .expected(src, observed, "a bar1 as large as the gpu memory")
                .fix("enable Above 4G Decoding and Resizable BAR in the BIOS, then reboot"),
            None => Finding::new(ID, Status::Pass, &g.bdf, format!("bar1 is {} (gpu memory size is a live fact; not compared)", parse::human_bytes(size))).evidence(src, observed),
        };
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CudaFacts, LiveFacts};
    use crate::testing::*;

    fn set_gpu_driver(n: &mut Node, d: Option<&str>) {
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for g in pci.iter_mut().filter(|g| g.is_nvidia_gpu()) {
                g.driver = known(d.map(str::to_string));
            }
        }
    }

    fn h200(gdr: i32) -> CudaDevice {
        CudaDevice {
            bdf: "0000:18:00.0".into(),
            name: "NVIDIA H200".into(),
            cc_major: 9,
            gpu_direct_rdma_supported: Some(gdr),
            dma_buf_supported: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_listed_twice_in_the_record_is_an_error_for_its_live_checks_not_the_first_entry() {
        let mut n = switch_pair();
        let mut cuda = CudaFacts {
            driver_version: 13000,
            devices: vec![h200(1), h200(0)],
            ..Default::default()
        };
        cuda.set_aside_duplicates("/gdrdoctor/live.json");
        assert!(cuda.devices.is_empty());
        n.live.cuda = known(cuda);
        let ok = NvmlGpu {
            bdf: "0000:18:00.0".into(),
            persistence_mode: Some(true),
            remapped_rows: Some(crate::model::RemappedRows::default()),
            ..Default::default()
        };
        let mut nvml = crate::model::NvmlFacts {
            gpus: vec![
                ok.clone(),
                NvmlGpu {
                    persistence_mode: Some(false),
                    ..ok
                },
            ],
            ..Default::default()
        };
        nvml.set_aside_duplicates("/gdrdoctor/live.json");
        n.live.nvml = known(nvml);
        for f in [
            gdr_support(&n),
            persistence(&n),
            row_remap(&n),
            crate::checks::gdr::per_gpu(&n),
        ] {
            assert_eq!(f[0].status, Status::Error, "{f:?}");
            let said = format!("{} {:?}", f[0].message, f[0].evidence);
            assert!(said.contains("/gdrdoctor/live.json"), "{f:?}");
            assert!(said.contains("2 times"), "{f:?}");
        }
    }

    #[test]
    fn a_gpu_cudas_answer_lacks_without_a_reason_is_an_error_not_an_assumption() {
        let mut n = switch_pair();
        n.live.cuda = known(CudaFacts {
            driver_version: 13000,
            devices: vec![],
            ..Default::default()
        });
        let f = gdr_support(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].message
                .contains("live.json has no CUDA answer for this gpu"),
            "{f:?}"
        );
        assert!(!f[0].message.contains("CUDA_VISIBLE_DEVICES="), "{f:?}");
        let g = crate::checks::gdr::per_gpu(&n);
        assert_eq!(g[0].status, Status::Error, "{g:?}");
        assert!(g[0].message.contains("no CUDA answer"), "{g:?}");
        // CUDA_VISIBLE_DEVICES in the environment CUDA ran with: hidden, a skip that says so.
        if let Fact::Known { value, .. } = &mut n.env {
            value.insert("CUDA_VISIBLE_DEVICES".into(), "1".into());
        }
        let f = gdr_support(&n);
        assert_eq!(f[0].status, Status::Skip, "{f:?}");
        assert!(f[0].message.contains("CUDA_VISIBLE_DEVICES=1"), "{f:?}");
        assert_ne!(crate::checks::gdr::per_gpu(&n)[0].status, Status::Error);
    }

    #[test]
    fn a_gpu_bound_to_nvidia_passes_vfio_warns_unbound_fails_none_fails() {
        let mut n = switch_pair();
        let f = present(&n);
        assert_eq!(
            (f.len(), f[0].status, f[0].subject.as_str()),
            (1, Status::Pass, "0000:18:00.0")
        );
        set_gpu_driver(&mut n, Some("vfio-pci"));
        assert_eq!(present(&n)[0].status, Status::Warn);
        set_gpu_driver(&mut n, None);
        let f = present(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].evidence[0].expected.as_deref(), Some("nvidia"));
        let no_gpu = with(empty_node(), vec![bridge(ROOT_PORT, 0)], vec![]);
        assert_eq!(present(&no_gpu)[0].status, Status::Fail);
    }

    #[test]
    fn cuda_attributes_decide_gdr_support_and_missing_live_facts_depend_on_the_source() {
        let mut n = switch_pair();
        // A snapshot without live facts: skip; on the live node the same absence is an error.
        assert_eq!(gdr_support(&n)[0].status, Status::Skip);
        n.source = SourceKind::Live;
        n.live = LiveFacts::absent("libcuda.so.1 not loadable");
        let f = gdr_support(&n);
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0].remediation.is_some());
        let dev = |v: i32| CudaDevice {
            bdf: "0000:18:00.0".into(),
            name: "NVIDIA H200".into(),
            cc_major: 9,
            gpu_direct_rdma_supported: Some(v),
            dma_buf_supported: Some(1),
            ..Default::default()
        };
        for (v, want) in [(1, Status::Pass), (0, Status::Fail)] {
            n.live.cuda = known(CudaFacts {
                driver_version: 13000,
                devices: vec![dev(v)],
                ..Default::default()
            });
            let f = gdr_support(&n);
            assert_eq!(f[0].status, want, "GPU_DIRECT_RDMA_SUPPORTED={v}");
            assert!(f[0].evidence[0]
                .observed
                .contains(&format!("GPU_DIRECT_RDMA_SUPPORTED={v}")));
            assert_eq!(f[0].evidence[0].source, "cuDeviceGetAttribute");
        }
        // Answered by the cache of an earlier run: the evidence says so.
        n.live.cuda = Fact::known(
            CudaFacts {
                driver_version: 13000,
                devices: vec![dev(1)],
                ..Default::default()
            },
            "cache /run/gdrdoctor/cuda-facts.json (cuDeviceGetAttribute 5.0 min ago, this boot, driver 580.159.04)",
        );
        let f = gdr_support(&n);
        assert_eq!(f[0].status, Status::Pass);
        assert!(
            f[0].evidence[0]
                .source
                .starts_with("cuDeviceGetAttribute via cache /run/gdrdoctor/cuda-facts.json"),
            "{}",
            f[0].evidence[0].source
        );
        // Left out on purpose (compute mode): a skip that says why, never a pass.
        let mut left = CudaFacts::default();
        left.not_asked.insert(
            "0000:18:00.0".into(),
            "not asked: compute mode exclusive-process (a job may hold this gpu; gdrdoctor starts no CUDA on it)".into(),
        );
        n.live.cuda = known(left);
        let f = gdr_support(&n);
        assert_eq!(f[0].status, Status::Skip);
        assert!(
            f[0].message.contains("compute mode exclusive-process"),
            "{}",
            f[0].message
        );
    }

    fn with_nvml(mut n: Node, g: NvmlGpu) -> Node {
        n.live.nvml = known(crate::model::NvmlFacts {
            gpus: vec![g],
            ..Default::default()
        });
        n
    }

    #[test]
    fn a_failed_row_remap_query_on_an_ampere_or_later_gpu_is_an_error_not_retired_pages() {
        // The H200 (GH100) of the switch pair: the remap query failed, page retirement (not
        // Ampere's mechanism) answered "not pending".
        let g = NvmlGpu {
            bdf: "0000:18:00.0".into(),
            retired_pages_pending: Some(false),
            remapped_rows: None,
            errors: vec!["nvmlDeviceGetRemappedRows: NVML error 999".into()],
            ..Default::default()
        };
        let f = row_remap(&with_nvml(switch_pair(), g.clone()));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("NVML error 999"), "{f:?}");
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.observed == "compute capability 9.0"),
            "{f:?}"
        );
        // No error recorded and no remap answer: the same.
        let f = row_remap(&with_nvml(
            switch_pair(),
            NvmlGpu {
                errors: vec![],
                ..g.clone()
            },
        ));
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        // NVML's own compute capability says Volta: page retirement is its mechanism.
        let mut volta = with_nvml(
            switch_pair(),
            NvmlGpu {
                cc_major: Some(7),
                cc_minor: Some(0),
                ..g.clone()
            },
        );
        if let Fact::Known { value: pci, .. } = &mut volta.pci {
            for d in pci.iter_mut().filter(|d| d.is_nvidia_gpu()) {
                d.device_id = known(0x1db5); // GV100 [Tesla V100 SXM2 32GB]
            }
        }
        let f = row_remap(&volta);
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        assert_eq!(
            f[0].evidence[0].source,
            "nvmlDeviceGetRetiredPagesPendingStatus"
        );
        // An Ampere+ GPU whose NVML says it has no remapper: not a failed query.
        let f = row_remap(&with_nvml(
            switch_pair(),
            NvmlGpu {
                errors: vec!["nvmlDeviceGetRemappedRows: NVML error 3".into()],
                ..g.clone()
            },
        ));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        // The remap answer itself still decides.
        let f = row_remap(&with_nvml(
            switch_pair(),
            NvmlGpu {
                remapped_rows: Some(crate::model::RemappedRows::default()),
                errors: vec![],
                ..g
            },
        ));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
    }
}
