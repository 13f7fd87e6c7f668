//! `driver.*`: the NVIDIA kernel driver: loaded, its version and flavor, and registry overrides
//! that refuse GPUDirect RDMA mappings.

use crate::derive::{self, flavor_name};
use crate::model::{is_damaged, Fact, Node};
use crate::parse;
use crate::report::{Finding, Status};

pub fn driver(node: &Node) -> Vec<Finding> {
    const ID: &str = "driver.nvidia";
    const SRC: &str = "/proc/driver/nvidia/version";
    // GPUs this host's driver should own (not those passed through to VMs).
    let gpus: Vec<_> = derive::gpus(node)
        .into_iter()
        .filter(|g| !matches!(g.driver.get(), Some(Some(d)) if d.starts_with("vfio")))
        .collect();
    match &node.nvidia.version_file {
        Fact::Known { value: Some(text), .. } => match parse::nvidia_version(text) {
            Some((ver, flavor)) => {
                let mut f = Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!("nvidia driver {ver}, {}", flavor_name(flavor)),
                )
                .evidence(SRC, text.lines().next().unwrap_or_default().trim().to_string());
                if let Some(g) = node.nvidia.gpus.get() {
                    f = f.evidence("/proc/driver/nvidia/gpus", format!("{} gpus initialised by the driver", g.len()));
                    if !gpus.is_empty() && g.len() < gpus.len() {
                        f.status = Status::Fail;
                        f.message = format!(
                            "nvidia driver {ver} initialised {} of {} nvidia gpus on the pci bus",
                            g.len(),
                            gpus.len()
                        );
                        f = f.fix("read `dmesg | grep -iE 'nvrm|xid'` for the GPU the driver failed to initialise; a GPU that fell off the bus needs a node reboot or reseat");
                    }
                }
                vec![f]
            }
            None => vec![Finding::new(ID, Status::Error, "node", "nvidia driver version file has an unrecognised format")
                .evidence(SRC, text.lines().next().unwrap_or_default().to_string())],
        },
        Fact::Known { value: None, .. } if node.pci.get().is_none() => vec![Finding::new(
            ID,
            Status::Error,
            "node",
            "the nvidia driver is not loaded, and whether this node has nvidia gpus is unknown",
        )
        .evidence(SRC, "absent")
        .evidence(node.pci.source(), node.pci.describe(|_| String::new()))],
        Fact::Known { value: None, .. } if gpus.is_empty() => vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no nvidia gpu and no nvidia driver on this node",
        )
        .evidence(SRC, "absent")],
        Fact::Known { value: None, .. } => vec![Finding::new(ID, Status::Fail, "node", "the nvidia kernel driver is not loaded")
            .expected(SRC, "absent", "present")
            .fix("`modprobe nvidia` (install the driver first if `modinfo nvidia` fails; prefer the open kernel modules, `nvidia-open` packages, which dma-buf needs)")],
        Fact::Absent { reason, .. } => vec![Finding::new(ID, Status::Error, "node", "cannot read the nvidia driver version")
            .evidence(SRC, format!("unknown ({reason})"))],
    }
}

pub fn grdma_override(node: &Node) -> Vec<Finding> {
    const ID: &str = "driver.grdma-override";
    const SRC: &str = "/proc/driver/nvidia/params";
    match &node.nvidia.params {
        Fact::Known { value, .. } if !looks_like_params(value) => {
            let keys: Vec<&str> = value.keys().take(3).map(String::as_str).collect();
            vec![Finding::new(
                ID,
                Status::Error,
                "node",
                "the nvidia driver parameters file is empty or not in the driver's format: the override cannot be read",
            )
            .expected(
                SRC,
                if value.is_empty() {
                    "no `Key: value` line".to_string()
                } else {
                    format!("{} keys ({}), none of the driver's own", value.len(), keys.join(", "))
                },
                "the driver's parameters (ResmanDebugLevel, RmLogonRC, ...)",
            )]
        }
        Fact::Known { value, .. } => {
            let raw = value.get("GrdmaPciTopoCheckOverride");
            if let Some(r) = raw {
                if parse::registry_number(r).is_none() {
                    return vec![Finding::new(
                        ID,
                        Status::Error,
                        "node",
                        format!("GrdmaPciTopoCheckOverride has an unrecognised value {r:?}"),
                    )
                    .evidence(SRC, format!("GrdmaPciTopoCheckOverride: {r}"))];
                }
            }
            let v = raw.and_then(|v| parse::registry_number(v));
            match v {
                Some(2) => vec![Finding::new(ID, Status::Fail, "node", "the nvidia driver is told to refuse every gpudirect rdma mapping (GrdmaPciTopoCheckOverride=2)")
                    .expected(SRC, "GrdmaPciTopoCheckOverride: 2", "0 (driver decides)")
                    .fix("remove `NVreg_GrdmaPciTopoCheckOverride=2` from /etc/modprobe.d/*.conf, rebuild the initramfs and reload the nvidia module")],
                Some(n) => vec![Finding::new(ID, Status::Pass, "node", format!("GrdmaPciTopoCheckOverride={n} ({})", if n == 1 { "forced allow" } else { "driver decides" }))
                    .evidence(SRC, format!("GrdmaPciTopoCheckOverride: {n}"))],
                None => vec![Finding::new(ID, Status::Pass, "node", "no GrdmaPciTopoCheckOverride in the driver parameters (driver decides)")
                    .evidence(SRC, format!("GrdmaPciTopoCheckOverride not listed among {} parameters", value.len()))],
            }
        }
        Fact::Absent { reason, .. } if is_damaged(reason) => vec![Finding::new(
            ID,
            Status::Error,
            "node",
            format!("{SRC} is damaged: the override cannot be read from it"),
        )
        .evidence(SRC, format!("unknown ({reason})"))],
        Fact::Absent { reason, .. } => {
            if matches!(node.nvidia.version_file, Fact::Known { value: None, .. }) {
                vec![Finding::new(
                    ID,
                    Status::Skip,
                    "node",
                    "nvidia driver not loaded",
                )]
            } else {
                vec![Finding::new(
                    ID,
                    Status::Error,
                    "node",
                    "cannot read the nvidia driver parameters",
                )
                .evidence(SRC, format!("unknown ({reason})"))]
            }
        }
    }
}

/// Parameters every NVIDIA driver lists in `/proc/driver/nvidia/params`, open and proprietary,
/// for a decade (`nv-reg.h`): a file with none of them is not the driver's.
const ALWAYS_LISTED: [&str; 4] = [
    "ResmanDebugLevel",
    "RmLogonRC",
    "ModifyDeviceFiles",
    "RegistryDwords",
];

fn looks_like_params(params: &std::collections::BTreeMap<String, String>) -> bool {
    ALWAYS_LISTED.iter().any(|k| params.contains_key(*k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn a_loaded_open_driver_passes_with_its_version_line() {
        let f = driver(&switch_pair());
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0].message.contains("580.159.04"), "{}", f[0].message);
        assert!(f[0].evidence[0].observed.starts_with("NVRM version"));
    }

    #[test]
    fn a_gpu_without_its_driver_fails_and_a_gpu_the_driver_lost_fails() {
        let mut n = switch_pair();
        n.nvidia.version_file = known(None);
        let f = driver(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert_eq!(f[0].evidence[0].expected.as_deref(), Some("present"));
        let mut n = switch_pair();
        n.nvidia.gpus = known(Default::default());
        let f = driver(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message.contains("initialised 0 of 1"),
            "{}",
            f[0].message
        );
        // No GPU and no driver: nothing to check.
        let mut n = empty_node();
        n.nvidia.version_file = known(None);
        assert_eq!(driver(&n)[0].status, Status::Skip);
    }

    #[test]
    fn the_override_that_refuses_gdr_fails_and_garbage_is_an_error() {
        let mut n = switch_pair();
        assert_eq!(grdma_override(&n)[0].status, Status::Pass);
        let set = |n: &mut Node, v: &str| {
            if let Fact::Known { value, .. } = &mut n.nvidia.params {
                value.insert("GrdmaPciTopoCheckOverride".to_string(), v.to_string());
            }
        };
        set(&mut n, "2");
        let f = grdma_override(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert!(f[0].remediation.is_some());
        set(&mut n, "yes");
        assert_eq!(grdma_override(&n)[0].status, Status::Error);
    }

    #[test]
    fn an_empty_or_foreign_params_file_is_an_error_not_a_pass() {
        let mut n = switch_pair();
        n.nvidia.params = known(Default::default());
        let f = grdma_override(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        n.nvidia.params = known(crate::parse::colon_map("garbage: yes\nBOOT_IMAGE: x\n"));
        assert_eq!(grdma_override(&n)[0].status, Status::Error);
        // The driver's own file without the key: the driver decides, said with the evidence.
        n.nvidia.params = known(crate::parse::colon_map(
            "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\n",
        ));
        let f = grdma_override(&n);
        assert_eq!(f[0].status, Status::Pass);
        assert!(f[0].evidence[0].observed.contains("among 2 parameters"));
    }

    #[test]
    fn a_params_file_cut_short_is_an_error_naming_it_not_the_driver_deciding() {
        // Cut before the override's line: the last line has no newline, or no colon.
        for cut in [
            "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nGrdmaPciTop",
            "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nEnableMSI: 1",
            "ResmanDebugLevel: 4294967295\nGrdmaPciTop\nRmLogonRC: 1\n",
        ] {
            let mut n = switch_pair();
            n.nvidia.params = match crate::parse::colon_file(cut) {
                Ok(m) => known(m),
                Err(why) => Fact::absent(
                    "/proc/driver/nvidia/params",
                    format!("{}/proc/driver/nvidia/params: {why}", crate::model::DAMAGED),
                ),
            };
            let f = grdma_override(&n);
            assert_eq!(f[0].status, Status::Error, "{cut:?}: {f:?}");
            assert!(f[0].message.contains("/proc/driver/nvidia/params"), "{f:?}");
        }
        // The intact file without the key still passes.
        let m = crate::parse::colon_file("ResmanDebugLevel: 4294967295\nRmLogonRC: 1\n");
        assert_eq!(m.as_ref().map(|m| m.len()), Ok(2));
        assert_eq!(crate::parse::colon_file(""), Ok(Default::default()));
    }
}
