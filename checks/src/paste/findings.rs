//! The findings only pasted text can give: how each block was read (`paste.blocks`) and what
//! NCCL logged (`nccl.*`: its GDR decisions against the prediction, and each known failure
//! line). Every id has a page `docs/checks/<id>.md`. What the kernel logged is judged by the
//! registry's `kernel.*` and `kmod.*` checks on the pasted lines (`crate::klog`).

use super::block::BlockStatus;
use super::nccl::{FailureKind, NcclLog};
use super::pasted::Paste;
use super::verdict::{Gdr, PastePair};
use crate::findings::def::{finding, FindingDef};
use crate::report::{Finding, Status};

/// The findings only `diagnose` produces, with what they verify and their pages.
pub static FINDINGS: &[FindingDef] = &[
    finding!(
        "paste.blocks",
        "each pasted block was recognised and read; what was repaired, what cannot be trusted"
    ),
    finding!(
        "nccl.gdr",
        "nccl's logged gdr decisions agree with the topology and the node's gdr support"
    ),
    finding!(
        "nccl.reg-mr",
        "nccl could register gpu memory with the nic (ibv_reg_mr)"
    ),
    finding!(
        "nccl.dmabuf-mr",
        "nccl could register gpu memory through dma-buf (ibv_reg_dmabuf_mr)"
    ),
    finding!("nccl.system-error", "nccl hit no unhandled system error"),
    finding!("nccl.cuda-failure", "nccl's cuda calls did not fail"),
    finding!(
        "nccl.ib-completion",
        "no infiniband work completion with an error status"
    ),
    finding!(
        "nccl.remote-error",
        "no peer rank exited or lost its network"
    ),
    finding!(
        "nccl.timeout",
        "no collective timed out (nccl or the pytorch watchdog)"
    ),
    finding!(
        "nccl.network",
        "nccl used an rdma network where traffic crossed hosts (not tcp sockets)"
    ),
    finding!(
        "nccl.ranks",
        "every rank of a multi-rank log made the same gdr decision"
    ),
    finding!(
        "nccl.runs",
        "the runs of one paste agree (version, settings, gdr), each read on its own"
    ),
];

/// `paste.blocks`: one finding per block that was recognised, one for the ignored text.
pub fn blocks(p: &Paste) -> Vec<Finding> {
    const ID: &str = "paste.blocks";
    let mut out = Vec::new();
    for b in &p.blocks {
        let lab = b.label();
        let f = match b.status {
            BlockStatus::Parsed => Finding::new(
                ID,
                Status::Pass,
                &b.id,
                format!("read {}: {}", b.kind.as_str(), b.summary),
            )
            .evidence(lab, b.summary.clone()),
            BlockStatus::Repaired => {
                let mut f = Finding::new(
                    ID,
                    Status::Pass,
                    &b.id,
                    format!("read {} after repairs: {}", b.kind.as_str(), b.summary),
                )
                .evidence(lab.clone(), b.summary.clone());
                for r in &b.repairs {
                    f = f.evidence(lab.clone(), format!("repaired: {r}"));
                }
                f
            }
            BlockStatus::Incomplete => {
                let mut f = Finding::new(
                    ID,
                    Status::Error,
                    &b.id,
                    format!(
                        "{} partly unreadable: {}; the parts that cannot be trusted get no verdict",
                        b.kind.as_str(),
                        b.summary
                    ),
                );
                for r in &b.repairs {
                    f = f.evidence(lab.clone(), format!("repaired: {r}"));
                }
                for x in &b.problems {
                    f = f.evidence(lab.clone(), format!("not trusted: {x}"));
                }
                f.fix(paste_again(b.command.as_deref(), b.kind))
            }
            BlockStatus::Refused => {
                let mut f = Finding::new(
                    ID,
                    Status::Error,
                    &b.id,
                    format!("{} recognised but not readable", b.kind.as_str()),
                );
                for x in &b.problems {
                    f = f.evidence(lab.clone(), x.clone());
                }
                f.fix(paste_again(b.command.as_deref(), b.kind))
            }
            BlockStatus::Ignored => continue,
        };
        out.push(f);
    }
    let ignored: Vec<String> = p
        .blocks
        .iter()
        .filter(|b| b.status == BlockStatus::Ignored)
        .map(|b| format!("{}:{}-{}", b.file, b.lines[0], b.lines[1]))
        .collect();
    if !ignored.is_empty() {
        out.push(
            Finding::new(
                ID,
                Status::Skip,
                "text",
                format!(
                    "{} stretch(es) of text not recognised as command output",
                    ignored.len()
                ),
            )
            .evidence("paste", ignored.join(", ")),
        );
    }
    out
}

fn paste_again(cmd: Option<&str>, k: super::kind::Kind) -> String {
    let c = cmd.map(str::to_string).unwrap_or_else(|| match k {
        super::kind::Kind::TopoMatrix => "nvidia-smi topo -m".into(),
        super::kind::Kind::Lspci => "sudo lspci -vvv".into(),
        super::kind::Kind::IbvDevinfo => "ibv_devinfo -v".into(),
        other => other.as_str().to_string(),
    });
    format!("paste the whole output of `{c}` again inside a ``` code block (or attach `{c} > out.txt` as a file): terminals wrap and cut wide tables")
}

/// `ibv_wc_status` names (libibverbs `verbs.h`).
pub fn wc_status_name(s: u32) -> &'static str {
    const N: [&str; 22] = [
        "IBV_WC_SUCCESS",
        "IBV_WC_LOC_LEN_ERR",
        "IBV_WC_LOC_QP_OP_ERR",
        "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",
        "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR",
        "IBV_WC_REM_INV_REQ_ERR",
        "IBV_WC_REM_ACCESS_ERR",
        "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR",
        "IBV_WC_REM_INV_RD_REQ_ERR",
        "IBV_WC_REM_ABORT_ERR",
        "IBV_WC_INV_EECN_ERR",
        "IBV_WC_INV_EEC_STATE_ERR",
        "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR",
        "IBV_WC_GENERAL_ERR",
    ];
    N.get(s as usize).copied().unwrap_or("unknown status")
}

fn failure_text(kind: FailureKind, first: &super::nccl::Failure) -> (String, String) {
    let err = first.error.as_deref().unwrap_or("");
    match kind {
        FailureKind::RegMr => {
            let fix = if err.contains("Bad address") {
                "`Bad address` (EFAULT) on GPU memory means no peer-memory client served the registration: `modprobe nvidia-peermem` (MOFED/DOCA-OFED installed before the NVIDIA driver), or move to dma-buf (NVIDIA open kernel modules, kernel >= 5.12, NCCL >= 2.13); `gdrdoctor explain nccl.reg-mr`"
            } else if err.contains("Cannot allocate memory") || err.contains("Operation not permitted") {
                "the locked-memory limit is too low for the registration: `ulimit -l unlimited` (systemd: `LimitMEMLOCK=infinity`; docker: `--ulimit memlock=-1`; Slurm: `PropagateResourceLimits`), then rerun"
            } else {
                "read the error after `failed with error`: `Bad address` is a missing peer-memory client (`modprobe nvidia-peermem`), `Cannot allocate memory` the locked-memory limit (`ulimit -l unlimited`)"
            };
            (format!("nccl could not register memory with the nic: {}", if err.is_empty() { "ibv_reg_mr failed" } else { err }), fix.into())
        }
        FailureKind::DmabufMr => (
            format!("nccl could not register gpu memory through dma-buf: {}", if err.is_empty() { "ibv_reg_dmabuf_mr failed" } else { err }),
            "dma-buf registration needs the NVIDIA open kernel modules (>= 515), a kernel >= 5.12 (or a MOFED with dma-buf) and rdma-core >= 34; until then `NCCL_DMABUF_ENABLE=0` makes NCCL use nvidia-peermem (which must be loaded)".into(),
        ),
        FailureKind::SystemError => (
            "nccl reported an unhandled system error".into(),
            "the first `NCCL WARN` above it names the failing call: rerun with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET` and read it; frequent causes are a small /dev/shm in containers (`--shm-size=1g`), the wrong socket interface (`NCCL_SOCKET_IFNAME`), and failed verbs calls (see nccl.reg-mr)".into(),
        ),
        FailureKind::CudaFailure => {
            let fix = if err.contains("out of memory") {
                "the GPU ran out of memory while NCCL allocated its buffers: free memory in the application (or lower `NCCL_BUFFSIZE`/channels), and check `nvidia-smi` for other processes on the GPU"
            } else if err.contains("initialization error") || err.contains("no CUDA-capable") {
                "CUDA could not initialise: driver and toolkit mismatch, or a GPU in a bad state; check `nvidia-smi` and `dmesg | grep -i xid`"
            } else {
                "read the CUDA error NCCL quoted; `dmesg | grep -i xid` shows GPU faults behind it"
            };
            (format!("a cuda call inside nccl failed: {}", if err.is_empty() { "Cuda failure" } else { err }), fix.into())
        }
        FailureKind::IbCompletion => {
            let st = first.status.map(|s| format!("{s} ({})", wc_status_name(s))).unwrap_or_else(|| "?".into());
            let fix = match first.status {
                Some(4) => "local protection error: the NIC could not access the registered (GPU) memory; with GDR this is usually ACS redirecting peer-to-peer to the root complex or an IOMMU in translated mode: disable ACS on the bridges between GPU and NIC (`gdrdoctor check --only pcie.acs-redirect`) and use `iommu=pt`; `NCCL_NET_GDR_LEVEL=LOC` confirms by turning GDR off",
                Some(12) => "transport retry counter exceeded: the peer never acknowledged; check the link on both nodes (`ibstat`, cable/switch counters), the RoCE setup (`NCCL_IB_GID_INDEX`, PFC/ECN) and whether the peer process died (its log)",
                Some(5) => "work request flushed: a consequence of an earlier error on the same queue pair; find the first completion error in the logs of both nodes",
                Some(10) => "remote access error: the peer refused the RDMA access (its memory registration failed or was revoked); read the peer's log",
                Some(13) => "receiver-not-ready retries exceeded: the peer did not post receives in time (peer stuck or dead)",
                _ => "read the status and vendor error; the first completion error across all nodes' logs is the cause, the others follow from it",
            };
            (format!("the nic completed a work request with an error: status {st}{}", first.vendor_err.map(|v| format!(", vendor err {v} (0x{v:x})")).unwrap_or_default()), fix.into())
        }
        FailureKind::RemoteError => (
            "a peer rank exited or its network failed".into(),
            "the cause is on the other side: read the first error in the other ranks' logs, then check the network between the nodes (`ibstat`, `ib_write_bw` between them)".into(),
        ),
        FailureKind::Timeout => (
            "a collective operation timed out".into(),
            "one rank stopped making progress (application hang, a dead peer, or a network/GDR fault): compare the ranks' last collectives (PyTorch: `TORCH_NCCL_DUMP_ON_TIMEOUT=1` for the flight recorder), and look for the first `NCCL WARN` and completion error before the timeout".into(),
        ),
    }
}

/// One finding per kind of failure line in the NCCL logs.
pub fn nccl_failures(p: &Paste) -> Vec<Finding> {
    let mut out = Vec::new();
    for (bi, log) in &p.nccl {
        let lab = p.label(*bi);
        let mut kinds: Vec<FailureKind> = log.failures.iter().map(|f| f.kind).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            // One finding per host, in the order the log names them: a job's log holds every
            // rank's lines, and whoever drains nodes by a finding's subject must get each host
            // (the review of 2026-12-07: two hosts' `error 4` lines were one finding named after
            // the first host).
            let mut hosts: Vec<Option<String>> = Vec::new();
            for x in log.failures.iter().filter(|f| f.kind == k) {
                if !hosts.contains(&x.origin.host) {
                    hosts.push(x.origin.host.clone());
                }
            }
            for h in hosts {
                let all: Vec<&super::nccl::Failure> = log
                    .failures
                    .iter()
                    .filter(|f| f.kind == k && f.origin.host == h)
                    .collect();
                let Some(first) = all.first() else { continue };
                let (msg, fix) = failure_text(k, first);
                let mut f = Finding::new(
                    k.id(),
                    Status::Fail,
                    h.clone().unwrap_or_else(|| "log".into()),
                    if all.len() > 1 {
                        format!("{msg} ({} lines)", all.len())
                    } else {
                        msg
                    },
                );
                for x in all.iter().take(3) {
                    f = f.evidence(format!("{lab} line {}", x.origin.line), x.text.clone());
                }
                out.push(f.fix(fix));
            }
        }
    }
    out
}

/// NCCL's path-type names by number (the `distance N` of its GDR lines) for version `v`:
/// [`crate::nccl::Version::path_names`], the one table the rule uses; 2.4-2.5 number PIX 0,
/// PXB 1, PHB 2, NODE 3 (2.4), SYS 4 (src/include/topo.h v2.4.8-1 L32-38).
fn path_names(v: super::nccl::Version) -> Vec<&'static str> {
    match v.path_names() {
        Some(k) => k.iter().map(|k| k.as_str()).collect(),
        None => vec!["PIX", "PXB", "PHB", "NODE", "SYS"],
    }
}

/// One version of each numbering NCCL 2.4-2.30 used (the boundaries of `path_names`).
const NUMBERINGS: [(u32, u32, u32); 7] = [
    (2, 4, 8),
    (2, 6, 4),
    (2, 8, 4),
    (2, 12, 12),
    (2, 26, 6),
    (2, 27, 3),
    (2, 30, 7),
];

/// Name NCCL's `distance d > t` numbers: by the version when the log has it, else by the
/// threshold (NCCL_NET_GDR_LEVEL's name when set, else NCCL's default PXB) when only one
/// numbering fits. `None` when it cannot be told.
pub fn distance_names(
    d: u32,
    t: u32,
    version: Option<super::nccl::Version>,
    level: Option<&str>,
) -> Option<(&'static str, &'static str)> {
    let fits: Vec<Vec<&'static str>> = match version {
        Some(v) => vec![path_names(v)],
        None => {
            let want = level.unwrap_or("PXB");
            NUMBERINGS
                .iter()
                .map(|(a, b, c)| path_names(super::nccl::Version::new(*a, *b, *c)))
                .filter(|names| names.get(t as usize) == Some(&want) && (d as usize) < names.len())
                .collect()
        }
    };
    let names: Vec<(&str, &str)> = fits
        .iter()
        .filter_map(|n| Some((*n.get(d as usize)?, *n.get(t as usize)?)))
        .collect();
    match names.as_slice() {
        [first, rest @ ..] if rest.iter().all(|x| x == first) => Some(*first),
        _ => None,
    }
}

/// `nccl.gdr` from NCCL's own distance lines (`GPU Direct RDMA Disabled for GPU x / HCA y
/// (distance 5 > 4)`), one finding per logged GPU.
pub fn nccl_distance(log: Option<&NcclLog>, log_label: &str) -> Vec<Finding> {
    const ID: &str = "nccl.gdr";
    let mut out = Vec::new();
    let Some(log) = log else { return out };
    let version = log.version();
    let level = log.env.get("NCCL_NET_GDR_LEVEL").map(String::as_str);
    let mut gpus: Vec<(Option<String>, String)> = Vec::new();
    for g in &log.gpu_gdr {
        let k = (g.origin.host.clone(), g.gpu.clone());
        if !gpus.contains(&k) {
            gpus.push(k);
        }
    }
    for (host, gpu) in gpus {
        let lines: Vec<&super::nccl::GpuGdr> = log
            .gpu_gdr
            .iter()
            .filter(|g| g.origin.host == host && g.gpu == gpu)
            .collect();
        let describe = |g: &super::nccl::GpuGdr| -> String {
            let (d, t) = (g.distance.unwrap_or(0), g.threshold.unwrap_or(0));
            let names = distance_names(d, t, version, level)
                .map(|(a, b)| format!(" ({a} vs {b})"))
                .unwrap_or_default();
            format!(
                "HCA {}: {} (distance {d} {} {t}{names})",
                g.hca,
                if g.enabled { "enabled" } else { "disabled" },
                g.op.as_deref().unwrap_or("?")
            )
        };
        let mut seen: Vec<String> = Vec::new();
        let mut ev: Vec<(usize, String)> = Vec::new();
        for g in &lines {
            let d = describe(g);
            if !seen.contains(&d) {
                seen.push(d.clone());
                ev.push((g.origin.line, d));
            }
        }
        // Several hosts each have their own GPU of that bus id.
        let subject = match (&host, log.hosts.len() > 1) {
            (Some(h), true) => format!("gpu {gpu} on {h}"),
            _ => format!("gpu {gpu}"),
        };
        let on = lines.iter().any(|g| g.enabled);
        let mut f = if on {
            Finding::new(
                ID,
                Status::Pass,
                &subject,
                format!("nccl enabled gdr for gpu {gpu} by distance"),
            )
        } else {
            Finding::new(ID, Status::Warn, &subject, format!("nccl turned gdr off for gpu {gpu}: every logged nic is beyond NCCL_NET_GDR_LEVEL"))
                .fix("the NIC is too far from the GPU (across the CPU or sockets): put a NIC under the GPU's PCIe switch, or accept the host-memory path; `NCCL_NET_GDR_LEVEL=SYS` forces GDR through the CPU, which is often slower")
        };
        for (line, d) in ev {
            f = f.evidence(format!("{log_label} line {line}"), d);
        }
        out.push(f);
    }
    out
}

/// Compare NCCL's logged decisions with the pairs' predictions (`nccl.gdr`).
pub fn nccl_gdr(
    pairs: &[PastePair],
    log: Option<&NcclLog>,
    log_label: &str,
    peermem_loaded: Option<bool>,
    rules: &crate::nccl::Chosen,
) -> Vec<Finding> {
    const ID: &str = "nccl.gdr";
    let mut out = Vec::new();
    let Some(log) = log else { return out };
    out.extend(nccl_distance(Some(log), log_label));
    // A module list of one host explains another host's NIC only when no host of the log had
    // NIC-level GDR: where one did, with the same NCCL, the module list (of which host, the
    // paste does not say) is no explanation of the others'.
    let peermem_loaded = if log.hosts.len() > 1 && log.nic_gdr.iter().any(|n| n.enabled) {
        None
    } else {
        peermem_loaded
    };
    for nic in &log.nic_gdr {
        if !nic.enabled {
            let v = rules.version;
            let (why, fix) = if peermem_loaded == Some(true) {
                let why = if rules.assumed {
                    " although nvidia_peermem is loaded: a NCCL older than 2.23 looks only for /sys/kernel/mm/memory_peers/nv_mem (absent without MOFED's peer-memory registry, or hidden in a container; 2.23 added /sys/module/nvidia_peermem/version), and its dma-buf probe failed; the paste does not show NCCL's version (`--nccl-version`)".to_string()
                } else if v.sees_peermem_module() {
                    format!(" although nvidia_peermem is loaded: NCCL {v} ({}) finds it through /sys/module/nvidia_peermem/version, so that NCCL could not read the file (a container without the host's /sys) or the log comes from an older NCCL; and its dma-buf probe failed", rules.source)
                } else {
                    format!(" although nvidia_peermem is loaded: NCCL {v} ({}) looks only for /sys/kernel/mm/memory_peers/nv_mem (absent without MOFED's peer-memory registry, or hidden in a container; 2.23 added /sys/module/nvidia_peermem/version), and its dma-buf probe failed", rules.source)
                };
                (why, "upgrade NCCL to 2.23 or later (it also finds /sys/module/nvidia_peermem/version), or make the dma-buf path work (NCCL >= 2.13 with the NVIDIA open kernel modules >= 515 on a kernel >= 5.12); in a container, give it the host's /sys; `gdrdoctor explain kmod.nvidia-peermem`")
            } else {
                (
                    ": nccl found no peer-memory client and no usable dma-buf".to_string(),
                    "load a peer-memory client (`modprobe nvidia-peermem`) or enable dma-buf (NVIDIA open kernel modules, kernel >= 5.12); `gdrdoctor explain kmod.nvidia-peermem`",
                )
            };
            // A job's log of several hosts: the NIC of the host that logged it (each host has
            // its own mlx5_0; the fix is that host's).
            let (subject, on) = match (&nic.origin.host, log.hosts.len() > 1) {
                (Some(h), true) => (format!("{} on {h}", nic.name), format!(" on {h}")),
                _ => (nic.name.clone(), String::new()),
            };
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    &subject,
                    format!(
                        "nccl turned gdr off for {}{on} at the nic level{why}",
                        nic.name
                    ),
                )
                .evidence(
                    format!("{log_label} line {}", nic.origin.line),
                    format!(
                        "GPU Direct RDMA Disabled for HCA {} '{}'{}",
                        nic.index,
                        nic.name,
                        nic.reason
                            .as_ref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    ),
                )
                .fix(fix),
            );
        }
    }
    for p in pairs {
        let Some(l) = &p.logged else { continue };
        let Some(any) = l.any() else { continue };
        let subject = format!("{}|{}", p.gpu, p.nic);
        let dirs = [
            ("send", l.send),
            ("receive", l.receive),
            ("channel", l.undirected),
        ]
        .iter()
        .filter_map(|(d, v)| v.map(|v| format!("{d} {}", if v { "GDRDMA" } else { "no GDRDMA" })))
        .collect::<Vec<_>>()
        .join(", ");
        let ev = format!("{log_label} line {}", l.line);
        // The rule's prediction per direction (`None`: the paste lacks what it needs), and
        // whether NCCL's log agrees with it where both are known.
        let decided = p.gdr != Gdr::Unknown;
        let pred_send = if decided { p.send } else { None };
        let pred_recv = if decided { p.receive } else { None };
        let agree = |logged: Option<bool>, pred: Option<bool>| match (logged, pred) {
            (Some(a), Some(b)) => Some(a == b),
            _ => None,
        };
        let checks = [
            agree(l.send, pred_send),
            agree(l.receive, pred_recv),
            agree(l.undirected, pred_send.zip(pred_recv).map(|(a, b)| a || b)),
        ];
        let disagrees = checks.contains(&Some(false));
        let agrees = !disagrees && checks.contains(&Some(true));
        let predicted = format!(
            "gdrdoctor predicts {} ({}; {})",
            match (pred_send, pred_recv) {
                (Some(true), Some(true)) => "gdr both ways".to_string(),
                (Some(false), Some(true)) => "gdr for receives only".to_string(),
                (Some(true), Some(false)) => "gdr for sends only".to_string(),
                (Some(false), Some(false)) => "no gdr".to_string(),
                _ => "nothing: the paste lacks what the rule needs".to_string(),
            },
            if p.reasons.is_empty() {
                p.unknown
                    .first()
                    .cloned()
                    .unwrap_or_else(|| format!("path {}", p.nvidia_smi))
            } else {
                p.reasons.join("; ")
            },
            p.via
                .as_ref()
                .map(|v| format!("sends through {v} via PXN"))
                .unwrap_or_else(|| format!("path {}", p.nvidia_smi))
        );
        let mut f = match (any, l.send, l.receive) {
            (true, Some(false), Some(true)) => Finding::new(ID, Status::Warn, &subject, format!(
                "nccl uses gdr only to receive on {} ({dirs}): the send side reads gpu memory through the cpu{}",
                p.nic,
                if pred_send == Some(false) { ", as nccl's read gate predicts" } else { "" }
            ))
            .fix("NCCL's read gate: <= 2.18 GDR reads need an NVLink peer for every GPU, >= 2.19 only pre-Ampere GPUs are gated; `NCCL_NET_GDR_READ=1` forces GDR reads where the platform supports them"),
            (true, _, _) if disagrees => Finding::new(ID, Status::Pass, &subject, format!(
                "nccl used gdr with {} ({dirs}) where the paste predicts otherwise: the paste may lack the environment or version the job ran with (NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ)",
                p.nic
            )),
            (true, _, _) => Finding::new(ID, Status::Pass, &subject, format!("nccl used gdr with {} ({dirs}){}", p.nic, if agrees { ", as predicted" } else { "" })),
            (false, _, _) if p.by_distance == Some(true) && !agrees => Finding::new(ID, Status::Fail, &subject, format!("nccl did not use gdr with {} although the path ({}) allows it", p.nic, p.nvidia_smi))
                .fix("the NIC-level support is missing: look for `GPU Direct RDMA Disabled for HCA` in the log; load nvidia-peermem or enable dma-buf, and check NCCL_NET_GDR_LEVEL in the environment"),
            (false, _, _) if disagrees => Finding::new(ID, Status::Warn, &subject, format!(
                "nccl did not use gdr with {} ({dirs}) where the paste predicts it: something the paste does not show turned it off",
                p.nic
            ))
            .fix("look for `GPU Direct RDMA Disabled` lines and `NCCL_*` settings in the whole log; `gdrdoctor check` on the node shows the peer-memory and dma-buf state"),
            (false, _, _) if !agrees && p.nvidia_smi == "?" => Finding::new(ID, Status::Warn, &subject, format!(
                "nccl did not use gdr with {} ({dirs}); the paste does not show their path, so not why",
                p.nic
            ))
            .fix("paste `nvidia-smi topo -m` of that node, and the log's `GPU Direct RDMA` lines: they say whether the NIC is too far (NCCL_NET_GDR_LEVEL) or has no peer-memory client"),
            (false, _, _) => Finding::new(ID, Status::Pass, &subject, format!(
                "nccl did not use gdr with {} ({dirs}){}",
                p.nic,
                if agrees { ", as predicted".to_string() } else { format!(", and the {} path does not allow it", p.nvidia_smi) }
            )),
        }
        .evidence(ev, dirs.clone());
        f = f.evidence("nccl rule", predicted);
        out.push(f);
    }
    out
}

/// `pcie.acs-redirect` from lspci text when the check itself cannot pair GPUs with NICs: every
/// pasted port whose ACSCtl redirects peer-to-peer (ReqRedir+, CmpltRedir+ or EgressCtrl+).
/// `None` when the paste has no ACSCtl line.
pub fn acs_text(p: &Paste) -> Option<Finding> {
    const ID: &str = "pcie.acs-redirect";
    let mut all: Vec<(String, String, super::lspci::AcsFlags)> = Vec::new();
    for (i, d) in &p.lspci {
        if let Some(c) = d.acs_ctl {
            all.push((p.label(*i), d.bdf.clone(), c));
        }
    }
    for (i, no, c) in &p.acs_lines {
        all.push((p.label(*i), format!("line {no}"), *c));
    }
    if all.is_empty() {
        return None;
    }
    let on: Vec<&(String, String, super::lspci::AcsFlags)> =
        all.iter().filter(|x| x.2.redirects()).collect();
    let flags = |c: &super::lspci::AcsFlags| {
        format!(
            "ReqRedir{} CmpltRedir{} EgressCtrl{}",
            if c.req_redir { '+' } else { '-' },
            if c.cmplt_redir { '+' } else { '-' },
            if c.egress_ctrl { '+' } else { '-' }
        )
    };
    let mut f = if on.is_empty() {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            format!("acs redirection is off on all {} pasted port(s)", all.len()),
        )
    } else {
        Finding::new(ID, Status::Warn, "node", format!(
            "acs redirects peer-to-peer on {} of {} pasted port(s): if one sits between a gpu and its nic, gdr traffic detours through the root complex (or fails with IOMMU faults)",
            on.len(),
            all.len()
        ))
        .fix("disable ACS redirection on the switch ports between GPUs and NICs (BIOS: ACS off, or `setpci -s <bdf> ECAP_ACS+0x6.w=0000` at boot); paste `lspci -tv` with `sudo lspci -vvv` (or run `gdrdoctor check --only pcie.acs-redirect` on the node) to see which ports are on a GPU-NIC path")
    };
    for (lab, who, c) in on
        .iter()
        .copied()
        .chain(all.iter().filter(|x| !x.2.redirects()))
        .take(6)
    {
        f = f.evidence(format!("{lab} {who}"), format!("ACSCtl {}", flags(c)));
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paste::nccl::Version;

    #[test]
    fn distance_numbers_are_named_by_version_or_threshold() {
        // 2.12-2.25: PIX3 PXB4 PXN5 PHB6 SYS7 (issue #1151 asked what "distance 7" is).
        assert_eq!(distance_names(7, 4, None, None), Some(("SYS", "PXB")));
        let v = |a, b| Some(Version::new(a, b, 0));
        assert_eq!(distance_names(7, 4, v(2, 19), None), Some(("SYS", "PXB")));
        assert_eq!(distance_names(5, 4, v(2, 7), None), Some(("SYS", "PHB")));
        // NCCL_NET_GDR_LEVEL=PHB with threshold 4: only 2.6-2.7 numbers PHB as 4.
        assert_eq!(
            distance_names(5, 4, None, Some("PHB")),
            Some(("SYS", "PHB"))
        );
        assert_eq!(distance_names(8, 5, v(2, 28), None), Some(("PHB", "PXB")));
        // Ambiguous without a version: PXB is 3 in 2.6-2.7 only, so 5 there is SYS.
        assert_eq!(distance_names(9, 1, None, None), None);
    }
}
