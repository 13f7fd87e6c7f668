//! `kmod.*`: the two ways GPU memory reaches the NIC: a peer-memory client (nvidia_peermem,
//! legacy nv_peer_mem) or dma-buf. Rules from gdr-ground-truth §1 and §2.1 (K01, K04, K07).
//! A peer-memory module's load failure in the kernel log (`crate::klog`) is the reason there is
//! no client.

use crate::derive::{self, PathAnswer};
use crate::klog;
use crate::model::{Fact, Node};
use crate::report::{Finding, Status};

fn with_evidence(mut f: Finding, a: &PathAnswer) -> Finding {
    f.evidence.extend(a.evidence.iter().cloned());
    f
}

/// A node with no NVIDIA GPU and no NVIDIA driver: GPU-memory paths do not apply.
fn no_gpu_node(node: &Node) -> bool {
    derive::gpus(node).is_empty()
        && node.pci.get().is_some()
        && matches!(node.nvidia.version_file, Fact::Known { value: None, .. })
}

/// Peer-memory modules that failed to load, from the kernel log (`nv_peer_mem: Unknown symbol
/// ib_register_peer_memory_client (err -22)`): (module, line), and where the log came from.
fn peermem_failures(node: &Node) -> (Vec<(String, &str)>, String) {
    match &node.health.kernel_log {
        Fact::Known { value, source } => (
            value
                .lines
                .iter()
                .filter_map(|l| match klog::parse_line(l) {
                    Some(klog::Event::PeerMemFailed { module, .. }) => Some((module, l.as_str())),
                    _ => None,
                })
                .collect(),
            source.clone(),
        ),
        Fact::Absent { .. } => (Vec::new(), String::new()),
    }
}

/// The fix for a peer-memory module that could not load, fitted to what the evidence shows
/// (the review of 2026-12-07: the legacy nv_peer_mem failing on a 3.10 kernel was told to
/// switch to dma-buf, which needs 5.12, and nothing about rebuilding nv_peer_mem).
fn failed_load_fix(node: &Node, mods: &[&str], lines: &[&str]) -> String {
    let mut fix = String::new();
    if mods.contains(&"nv_peer_mem") {
        fix.push_str("nv_peer_mem (the legacy module) was built against another ib_core than the one running: rebuild it against the installed MOFED (`dkms autoinstall`, or nv_peer_memory's `build_module.sh` and reinstall), or on NVIDIA driver >= 470 remove it and use the driver's own `modprobe nvidia-peermem`; ");
    } else {
        fix.push_str("`modprobe nvidia-peermem` after fixing ib_core; ");
    }
    fix.push_str("`Unknown symbol ib_register_peer_memory_client` means the running ib_core has no peer-memory API (the distribution's inbox one): install MOFED/DOCA-OFED before the NVIDIA driver (or its peer-memory module) and rebuild or reinstall it");
    // The running kernel: the node's, else the one in a module path the failure lines show
    // (`/lib/modules/3.10.0-1127.el7.x86_64/extra/nv_peer_mem.ko`).
    let from_lines = lines.iter().find_map(|l| {
        let r = l.split("/lib/modules/").nth(1)?;
        Some(r.split('/').next()?.to_string())
    });
    let old_kernel = node
        .kernel_release
        .get()
        .cloned()
        .or(from_lines)
        .and_then(|r| crate::parse::kernel_version(&r))
        .is_some_and(|(a, b, _)| (a, b) < crate::derive::DMABUF_MIN_KERNEL);
    if !old_kernel {
        fix.push_str("; or switch to dma-buf (open kernel modules, kernel >= 5.12)");
    }
    fix
}

pub fn nvidia_peermem(node: &Node) -> Vec<Finding> {
    const ID: &str = "kmod.nvidia-peermem";
    const FIX: &str = "`modprobe nvidia-peermem` (persist with `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`); if modprobe says `Invalid argument` or `Unknown symbol ib_register_peer_memory_client`, the running ib_core has no peer-memory API: install MOFED/DOCA-OFED before the NVIDIA driver and reinstall the driver, or switch to dma-buf (open kernel modules, kernel >= 5.12)";
    if no_gpu_node(node) {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no nvidia gpu and no nvidia driver on this node",
        )];
    }
    // As the NCCL that runs here looks (older ones see fewer files: ground truth K02).
    let rules = crate::nccl::config(node).rules;
    let pm = derive::peermem_path_for(node, Some(rules.version));
    let db = derive::dmabuf_path(node);
    let (failed, log_src) = peermem_failures(node);
    if !failed.is_empty() && pm.available != Some(true) && db.available != Some(true) {
        // The kernel log says why there is no peer-memory client.
        let mut mods: Vec<&str> = failed.iter().map(|(m, _)| m.as_str()).collect();
        mods.dedup();
        let now = if pm.available.is_none() {
            "; whether a peer-memory client is loaded now is not shown"
        } else {
            ""
        };
        let mut f = Finding::new(
            ID,
            Status::Fail,
            "node",
            format!(
                "{} could not load: the running ib_core has no peer-memory api (or another build of it), so there is no peer-memory client{now}",
                mods.join(", ")
            ),
        );
        for (_, l) in failed.iter().take(4) {
            f = f.evidence(log_src.clone(), l.trim().to_string());
        }
        let lines: Vec<&str> = failed.iter().map(|(_, l)| &l[..]).collect();
        f = with_evidence(f, &pm).fix(failed_load_fix(node, &mods, &lines));
        for r in &db.reasons {
            f = f.evidence("dma-buf path", r.clone());
        }
        return vec![f];
    }
    let only_module = matches!(node.peermem.nv_mem_version, Fact::Known { value: None, .. })
        && matches!(
            node.peermem.nv_mem_nc_version,
            Fact::Known { value: None, .. }
        )
        && matches!(
            node.peermem.nvidia_peermem_version,
            Fact::Known { value: Some(_), .. }
        );
    let f = match (pm.available, db.available) {
        (Some(true), _) => {
            let msg = if !only_module {
                "peer-memory client registered: NCCL enables the peer-memory path (NCCL_PTR_CUDA)".to_string()
            } else if rules.assumed {
                "nvidia_peermem loaded: NCCL >= 2.23 enables the peer-memory path (NCCL_PTR_CUDA); older NCCL looks only for /sys/kernel/mm/memory_peers/nv_mem".to_string()
            } else {
                format!(
                    "nvidia_peermem loaded: NCCL {} finds it through /sys/module/nvidia_peermem/version and enables the peer-memory path (NCCL_PTR_CUDA)",
                    rules.version
                )
            };
            Finding::new(ID, Status::Pass, "node", msg)
        }
        // Loaded, but this NCCL looks only for the registry file (K02).
        (Some(false), _) if only_module => {
            let dmabuf = rules.version.has_dmabuf() && db.available == Some(true);
            let f = Finding::new(
                ID,
                if dmabuf { Status::Pass } else { Status::Warn },
                "node",
                format!(
                    "nvidia_peermem is loaded, but {} ({}) cannot see it: {}{}",
                    format_args!("NCCL {}", rules.version),
                    rules.source,
                    pm.reasons.join("; "),
                    if dmabuf {
                        "; NCCL uses the dma-buf path instead"
                    } else {
                        "; that NCCL prints \"GPU Direct RDMA Disabled for HCA\" and stages through host memory"
                    }
                ),
            );
            if dmabuf {
                f
            } else {
                f.fix("upgrade NCCL to 2.23 or later (it also finds /sys/module/nvidia_peermem/version), or use the dma-buf path (NCCL >= 2.13 with the NVIDIA open kernel modules >= 515 on a kernel >= 5.12); `gdrdoctor check --nccl-version <version>` judges another NCCL")
            }
        }
        (Some(false), Some(true)) => Finding::new(
            ID,
            Status::Skip,
            "node",
            "nvidia_peermem not loaded; not needed: the dma-buf path is possible on this node",
        ),
        (Some(false), _) => Finding::new(
            ID,
            Status::Fail,
            "node",
            if db.available == Some(false) {
                "no peer-memory client and no dma-buf path: gpudirect rdma is impossible on this node"
            } else {
                "no peer-memory client (nvidia_peermem not loaded), and whether dma-buf can replace it is unknown"
            },
        )
        .fix(FIX),
        (None, _) => {
            let mut f = Finding::new(ID, Status::Error, "node", "cannot tell whether a peer-memory client is registered");
            for r in &pm.reasons {
                f = f.evidence("peer-memory", r.clone());
            }
            return vec![f];
        }
    };
    let mut f = with_evidence(f, &pm);
    if f.status != Status::Pass {
        for r in &db.reasons {
            f = f.evidence("dma-buf path", r.clone());
        }
    }
    vec![f]
}

pub fn nv_peer_mem(node: &Node) -> Vec<Finding> {
    const ID: &str = "kmod.nv-peer-mem";
    const SRC: &str = "/sys/module/nv_peer_mem";
    match &node.peermem.nv_peer_mem {
        Fact::Known { value: true, .. } => vec![Finding::new(ID, Status::Warn, "node", "the deprecated nv_peer_mem module is loaded")
            .expected(SRC, "present", "absent")
            .fix("`systemctl disable --now nv_peer_mem` (or `rmmod nv_peer_mem`), uninstall the nvidia-peer-memory package, then `modprobe nvidia-peermem`; NCCL's GPU-initiated (GIN/GDAKI) paths accept only nvidia_peermem or dma-buf")],
        Fact::Known { value: false, .. } => {
            vec![Finding::new(ID, Status::Pass, "node", "nv_peer_mem is not loaded").evidence(SRC, "absent")]
        }
        Fact::Absent { reason, .. } => match derive::module_loaded(node, "nv_peer_mem") {
            // A whole /proc/modules answers where /sys/module was not captured.
            Some((true, src)) => vec![Finding::new(ID, Status::Warn, "node", "the deprecated nv_peer_mem module is loaded")
                .expected(src, "nv_peer_mem listed", "absent")
                .fix("`systemctl disable --now nv_peer_mem` (or `rmmod nv_peer_mem`), uninstall the nvidia-peer-memory package, then `modprobe nvidia-peermem`")],
            Some((false, src)) => vec![Finding::new(ID, Status::Pass, "node", "nv_peer_mem is not loaded")
                .evidence(src, "not in the list of loaded modules")],
            None => vec![Finding::new(ID, Status::Error, "node", "cannot tell whether nv_peer_mem is loaded")
                .evidence(SRC, format!("unknown ({reason})"))],
        },
    }
}

pub fn dmabuf(node: &Node) -> Vec<Finding> {
    const ID: &str = "kmod.dmabuf";
    if no_gpu_node(node) {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no nvidia gpu and no nvidia driver on this node",
        )];
    }
    let db = derive::dmabuf_path(node);
    let pm = derive::peermem_path_for(node, Some(crate::nccl::config(node).rules.version));
    let f = match (db.available, pm.available) {
        (Some(true), _) => Finding::new(
            ID,
            Status::Pass,
            "node",
            "the dma-buf path is possible: open nvidia kernel modules and a kernel with dma-buf memory registration",
        ),
        (Some(false), Some(true)) => Finding::new(
            ID,
            Status::Skip,
            "node",
            format!("dma-buf path not possible ({}); not needed: a peer-memory client is registered", db.reasons.join("; ")),
        ),
        (Some(false), _) => {
            let mut f = Finding::new(
                ID,
                Status::Fail,
                "node",
                format!("dma-buf path not possible: {}", db.reasons.join("; ")),
            );
            if pm.available == Some(false) {
                f.message.push_str("; and no peer-memory client either");
            }
            f.fix("install the NVIDIA open kernel modules (driver >= 515; the default from 560: `nvidia-open` / `nvidia-driver-<ver>-open` packages) on a kernel >= 5.12, or load nvidia-peermem instead")
        }
        (None, _) => {
            let mut f = Finding::new(ID, Status::Error, "node", "cannot tell whether the dma-buf path is possible");
            for r in &db.reasons {
                f = f.evidence("dma-buf path", r.clone());
            }
            return vec![f];
        }
    };
    vec![with_evidence(f, &db)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn a_failed_load_gets_the_fix_its_module_and_kernel_allow() {
        let mut n = empty_node();
        let legacy = failed_load_fix(&n, &["nv_peer_mem"], &[]);
        assert!(legacy.contains("rebuild it against"), "{legacy}");
        assert!(
            legacy.contains("dma-buf"),
            "kernel unknown: dma-buf stays a way: {legacy}"
        );
        n.kernel_release = known("3.10.0-1127.19.1.el7.x86_64".into());
        let old = failed_load_fix(&n, &["nv_peer_mem"], &[]);
        assert!(!old.contains("dma-buf"), "{old}");
        let from_path = failed_load_fix(
            &empty_node(),
            &["nvidia_peermem"],
            &["insmod /lib/modules/4.18.0-305.el8.x86_64/extra/nvidia-peermem.ko"],
        );
        assert!(
            !from_path.contains("dma-buf") && !from_path.contains("legacy"),
            "{from_path}"
        );
    }

    fn proprietary(n: &mut Node) {
        n.nvidia.version_file = known(Some(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
                .into(),
        ));
    }

    #[test]
    fn peermem_loaded_passes_and_dmabuf_is_possible_on_the_open_driver() {
        let n = switch_pair();
        let f = nvidia_peermem(&n);
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.source == "/sys/module/nvidia_peermem/version"));
        assert_eq!(dmabuf(&n)[0].status, Status::Pass);
    }

    #[test]
    fn neither_path_fails_both_checks() {
        let mut n = switch_pair();
        proprietary(&mut n);
        n.peermem.nvidia_peermem_version = known(None);
        let pm = nvidia_peermem(&n);
        assert_eq!(pm[0].status, Status::Fail);
        assert!(
            pm[0].message.contains("gpudirect rdma is impossible"),
            "{}",
            pm[0].message
        );
        let db = dmabuf(&n);
        assert_eq!(db[0].status, Status::Fail);
        assert!(db[0].message.contains("proprietary"), "{}", db[0].message);
        assert!(db[0].message.ends_with("no peer-memory client either"));
    }

    #[test]
    fn one_path_makes_the_other_not_needed_and_unknown_is_an_error() {
        let mut n = switch_pair();
        n.peermem.nvidia_peermem_version = known(None);
        assert_eq!(
            nvidia_peermem(&n)[0].status,
            Status::Skip,
            "dma-buf covers it"
        );
        let mut n = switch_pair();
        proprietary(&mut n);
        assert_eq!(dmabuf(&n)[0].status, Status::Skip, "peer memory covers it");
        let mut n = switch_pair();
        n.peermem.nvidia_peermem_version =
            Fact::absent("/sys/module/nvidia_peermem/version", "permission denied");
        n.peermem.nv_mem_version = Fact::absent(
            "/sys/kernel/mm/memory_peers/nv_mem/version",
            "permission denied",
        );
        assert_eq!(nvidia_peermem(&n)[0].status, Status::Error);
    }

    #[test]
    fn a_peer_memory_module_that_could_not_load_is_the_reason() {
        use crate::model::{KernelLog, LogScope};
        let mut n = switch_pair();
        proprietary(&mut n);
        n.peermem.nvidia_peermem_version = Fact::absent(
            "/sys/module/nvidia_peermem/version",
            "not in the pasted text",
        );
        n.peermem.nv_mem_version = Fact::absent(
            "/sys/kernel/mm/memory_peers/nv_mem/version",
            "not in the pasted text",
        );
        n.health.kernel_log = known(KernelLog {
            origin: "b1".into(),
            scope: LogScope::Excerpt,
            scanned: 2,
            lines: vec![
                "[ 47.3] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err -22)"
                    .into(),
            ],
        });
        let f = nvidia_peermem(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:?}");
        assert!(
            f[0].message.starts_with("nv_peer_mem could not load")
                && f[0]
                    .message
                    .contains("whether a peer-memory client is loaded now is not shown"),
            "{}",
            f[0].message
        );
        assert!(f[0].evidence.iter().any(|e| e
            .observed
            .contains("Unknown symbol ib_register_peer_memory_client")));
        // A client loaded now: the old failure does not matter.
        let mut n = switch_pair();
        n.health.kernel_log = known(KernelLog {
            origin: "b1".into(),
            scope: LogScope::Excerpt,
            scanned: 1,
            lines: vec!["nv_peer_mem: Unknown symbol x (err -22)".into()],
        });
        assert_eq!(nvidia_peermem(&n)[0].status, Status::Pass);
    }

    #[test]
    fn the_legacy_module_warns() {
        let mut n = switch_pair();
        assert_eq!(nv_peer_mem(&n)[0].status, Status::Pass);
        n.peermem.nv_peer_mem = known(true);
        let f = nv_peer_mem(&n);
        assert_eq!(f[0].status, Status::Warn);
        assert_eq!(f[0].evidence[0].expected.as_deref(), Some("absent"));
    }
}
