//! Peer-memory clients: nvidia_peermem, the deprecated nv_peer_mem, and the kernel's
//! memory_peers registry.

use super::util::*;
use crate::source::reader::EntryKind;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;

pub(super) fn collect(root: &Root) -> PeerMem {
    let nv_peer_mem = match root.exists("/sys/module/nv_peer_mem") {
        Ok(true) => Fact::known(true, "/sys/module/nv_peer_mem"),
        Ok(false) if !root.is_complete() => Fact::absent("/sys/module/nv_peer_mem", NOT_CAPTURED),
        Ok(false) => match root.exists("/sys/module") {
            Ok(true) => Fact::known(false, "/sys/module/nv_peer_mem"),
            _ => Fact::absent(
                "/sys/module/nv_peer_mem",
                format!("{NOT_CAPTURED} (/sys/module missing)"),
            ),
        },
        Err(e) => Fact::absent("/sys/module/nv_peer_mem", e.reason()),
    };
    let params = match root.read_dir("/sys/module/nvidia_peermem/parameters") {
        Ok(v) => Fact::known(
            v.into_iter()
                .filter(|e| e.kind == EntryKind::File)
                .map(|e| {
                    let p = format!("/sys/module/nvidia_peermem/parameters/{}", e.name);
                    let val = root
                        .read_trimmed(&p)
                        .unwrap_or_else(|e| format!("unreadable: {}", e.reason()));
                    (e.name, val)
                })
                .collect(),
            "/sys/module/nvidia_peermem/parameters",
        ),
        Err(e) => Fact::absent("/sys/module/nvidia_peermem/parameters", e.reason()),
    };
    PeerMem {
        nv_mem_version: optional_file(
            root,
            "/sys/kernel/mm/memory_peers/nv_mem/version",
            "/sys/kernel/mm",
        ),
        nv_mem_nc_version: optional_file(
            root,
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
            "/sys/kernel/mm",
        ),
        nvidia_peermem_version: optional_file(
            root,
            "/sys/module/nvidia_peermem/version",
            "/sys/module",
        ),
        nv_peer_mem,
        memory_peers: optional_dir(root, "/sys/kernel/mm/memory_peers", "/sys/kernel/mm"),
        nvidia_peermem_params: params,
    }
}
