//! NVLink-C2C: whether a GPU reaches its CPU over NVLink-C2C (a Grace superchip), from the CPU
//! (x86 has none), the GPU's PCI device id and its name. Below [`super::context`] and
//! [`super::system`], which both ask.

use crate::derive;
use crate::model::{CpuVendor, Node};
use crate::topo::PciIndex;

/// A GPU that reaches its Grace CPU over NVLink-C2C, by its name (GH200, GB200, GB300).
pub fn grace_model(name: &str) -> bool {
    ["GH200", "GB200", "GB300"].iter().any(|m| name.contains(m))
}

/// GH200 module device ids (pci.ids: `2342 GH100 [GH200 120GB / 480GB]`, `2348 GH100 [GH200
/// 144G HBM3e]`): GPUs that reach their Grace CPU over NVLink-C2C.
const C2C_DEVICE_IDS: [u16; 2] = [0x2342, 0x2348];

/// The GPU at `bdf`: C2C-attached (`Some(true)`), not (`Some(false)`), or unknown, and why.
pub(crate) fn c2c_of(node: &Node, bdf: &str, idx: &PciIndex<'_>) -> (Option<bool>, String) {
    let x86 = matches!(node.arch.get().map(String::as_str), Some("x86_64"))
        || matches!(
            node.cpu_vendor.get(),
            Some(CpuVendor::Intel) | Some(CpuVendor::Amd)
        );
    if x86 {
        return (Some(false), "x86 CPU: no NVLink-C2C to the CPU".to_string());
    }
    let dev = idx.get(bdf);
    let name = dev.map(crate::names::device_name).unwrap_or_default();
    let grace_model = dev
        .and_then(|d| d.device_id.get().copied())
        .is_some_and(|id| C2C_DEVICE_IDS.contains(&id))
        || grace_model(&name);
    if grace_model {
        return (
            Some(true),
            format!("{name} is a Grace superchip GPU (by its PCI device id: heuristic)"),
        );
    }
    if derive::is_arm(node) {
        (
            None,
            format!("{name} on an Arm CPU: NVLink-C2C attachment not known"),
        )
    } else {
        (Some(false), format!("{name} is not a Grace superchip GPU"))
    }
}
