//! `iommu.*`: DMA translation between GPU and NIC. Ground truth §2.5 (I01-I03).

use crate::derive::{self, IommuMode};
use crate::model::{CpuVendor, Node};
use crate::report::{Finding, Status};

/// The kernel parameters that turn translation off for the node's CPU.
pub fn cmdline_fix(node: &Node) -> String {
    if derive::is_arm(node) {
        return "add `iommu.passthrough=1` to the kernel command line (arm64 ignores `iommu=pt`): edit GRUB_CMDLINE_LINUX in /etc/default/grub, `update-grub` (or `grub2-mkconfig -o /boot/grub2/grub.cfg`), reboot".into();
    }
    let vendor = match node.cpu_vendor.get() {
        Some(CpuVendor::Intel) => "`intel_iommu=on iommu=pt`",
        Some(CpuVendor::Amd) => "`iommu=pt`",
        _ => "`iommu=pt` (plus `intel_iommu=on` on Intel)",
    };
    format!("add {vendor} to the kernel command line (passthrough for host devices, translation stays available to VFIO): edit GRUB_CMDLINE_LINUX in /etc/default/grub, `update-grub` (or `grub2-mkconfig -o /boot/grub2/grub.cfg`), reboot; or disable VT-d/AMD-Vi in the BIOS on bare-metal training nodes")
}

pub fn mode(node: &Node) -> Vec<Finding> {
    const ID: &str = "iommu.mode";
    let (mode, ev) = derive::iommu_mode(node);
    let mut f = match mode {
        IommuMode::Off => Finding::new(ID, Status::Pass, "node", "iommu off: gpu and nic dma is not translated"),
        IommuMode::Passthrough => Finding::new(ID, Status::Pass, "node", "iommu in passthrough: gpu and nic dma is not translated"),
        IommuMode::Translated => Finding::new(
            ID,
            Status::Warn,
            "node",
            "iommu translates dma: peer-to-peer between nic and gpu must be iommu-mapped and is usually routed through the root complex (slow, or io page faults)",
        )
        .fix(cmdline_fix(node)),
        IommuMode::Unknown => Finding::new(ID, Status::Error, "node", "cannot determine the iommu mode"),
    };
    for e in ev {
        let (src, obs) = match e.split_once(": ") {
            Some((s, o)) if s.starts_with('/') || s.starts_with("kernel") => {
                (s.to_string(), o.to_string())
            }
            _ => ("iommu".to_string(), e),
        };
        f = f.evidence(src, obs);
    }
    vec![f]
}
