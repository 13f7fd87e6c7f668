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
        IommuMode::Unknown if ev.iter().any(|e| e == derive::CONTRADICTION) => Finding::new(
            ID,
            Status::Warn,
            "node",
            "the kernel command line asks for a translating iommu, but no iommu unit is registered: the evidence contradicts itself, so the mode is unknown",
        )
        .fix("`dmesg | grep -iE 'dmar|iommu'` says whether the kernel found an IOMMU; VT-d / AMD-Vi disabled in the BIOS leaves `intel_iommu=on` without effect (then remove it, or enable VT-d and add `iommu=pt`); in a snapshot, /sys/class/iommu may be missing from the capture"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Fact, IommuGroup};
    use crate::testing::*;

    fn group(id: &str, kind: &str, devices: &[&str]) -> IommuGroup {
        IommuGroup {
            id: id.into(),
            kind: known(kind.into()),
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn no_unit_is_off_and_passes() {
        let f = mode(&switch_pair());
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0].message.starts_with("iommu off"), "{}", f[0].message);
        assert!(f[0].evidence.iter().any(|e| e.source == "/sys/class/iommu"));
    }

    #[test]
    fn translated_groups_warn_with_the_intel_fix_identity_groups_pass() {
        let mut n = switch_pair();
        n.cpu_vendor = known(CpuVendor::Intel);
        n.cmdline = known(vec!["intel_iommu=on".into()]);
        n.iommu.classes = known(vec!["dmar0".into()]);
        n.iommu.groups = known(vec![group("17", "DMA-FQ", &["0000:18:00.0"])]);
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Warn);
        assert!(f[0]
            .remediation
            .as_deref()
            .is_some_and(|r| r.contains("intel_iommu=on iommu=pt")));
        n.iommu.groups = known(vec![group("17", "identity", &["0000:18:00.0"])]);
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0].message.contains("passthrough"), "{}", f[0].message);
    }

    #[test]
    fn a_gpus_group_type_unreadable_beside_identity_ones_is_not_passthrough() {
        let mut n = switch_pair();
        n.cpu_vendor = known(CpuVendor::Intel);
        n.cmdline = known(vec!["intel_iommu=on".into()]);
        n.iommu.classes = known(vec!["dmar0".into()]);
        let mut gpu = group("17", "DMA-FQ", &["0000:18:00.0"]);
        gpu.kind = Fact::absent("/sys/kernel/iommu_groups/17/type", "is a directory");
        n.iommu.groups = known(vec![gpu, group("18", "identity", &["0000:19:00.0"])]);
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.observed.contains("group(s) 17")),
            "{:?}",
            f[0].evidence
        );
    }

    #[test]
    fn intel_iommu_on_without_a_registered_unit_warns_of_the_contradiction() {
        let mut n = switch_pair();
        n.cpu_vendor = known(CpuVendor::Intel);
        n.cmdline = known(vec!["intel_iommu=on".into()]);
        // /sys/class/iommu empty (or missing on a complete root: the collector says empty).
        n.iommu.classes = known(Vec::new());
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Warn, "{f:?}");
        assert!(!f[0].message.starts_with("iommu off"), "{}", f[0].message);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.observed.contains("contradicting")));
        assert_eq!(derive::iommu_mode(&n).0, IommuMode::Unknown);
        // Without the parameter, an empty class is off.
        n.cmdline = known(vec!["quiet".into()]);
        assert_eq!(mode(&n)[0].status, Status::Pass);
    }

    #[test]
    fn groups_with_domains_but_no_registered_unit_are_an_error_not_off() {
        // The sweep of 2026-12-07: the AMD node's /sys/class/iommu/ivhd0 removed.
        let mut n = switch_pair();
        n.iommu.groups = known(vec![group("17", "DMA", &["0000:18:00.0"])]);
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Error, "{f:#?}");
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.observed.contains("only a registered iommu unit gives")));
    }

    #[test]
    fn nothing_readable_is_an_error_not_off() {
        let mut n = empty_node();
        n.iommu.classes = Fact::absent("/sys/class/iommu", "not in this capture");
        let f = mode(&n);
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.observed.contains("not in this capture")));
    }
}
