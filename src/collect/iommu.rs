//! IOMMU: the registered units (`/sys/class/iommu`) and the groups with their domain type.

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;

pub(super) fn collect(root: &Root) -> Iommu {
    Iommu {
        classes: list_or_empty(root, "/sys/class/iommu", "/sys/class"),
        groups: collect_iommu_groups(root),
        default_domain: Fact::absent("kernel log", "not collected (needs dmesg access)"),
    }
}

fn collect_iommu_groups(root: &Root) -> Fact<Vec<IommuGroup>> {
    const DIR: &str = "/sys/kernel/iommu_groups";
    let ids = match list_or_empty(root, DIR, "/sys/kernel") {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::Absent { source, reason },
    };
    let mut groups: Vec<IommuGroup> = ids
        .into_iter()
        .map(|id| {
            let base = format!("{DIR}/{id}");
            let kind = fact(
                &format!("{base}/type"),
                root.read_trimmed(&format!("{base}/type")),
            );
            let devices = root
                .read_dir(&format!("{base}/devices"))
                .map(|v| v.into_iter().map(|e| e.name).collect())
                .unwrap_or_default();
            IommuGroup { id, kind, devices }
        })
        .collect();
    groups.sort_by_key(|g| g.id.parse::<u64>().unwrap_or(u64::MAX));
    Fact::known(groups, DIR)
}
