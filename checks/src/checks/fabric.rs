//! `driver.fabric-manager` and `gpu.fabric-state` (issue 39 item 3): on an NVSwitch system
//! (HGX/DGX A100, H100, H200, B200) the GPUs join the NVLink fabric only when NVIDIA Fabric
//! Manager, of the driver's exact version, has programmed the switches and registered each GPU.
//! Until then NVML reports the GPU's fabric state `not-started` or `in-progress`, `cuInit`
//! returns 802 (`CUDA_ERROR_SYSTEM_NOT_READY`), and NVLink P2P and NVLS are unavailable.
//! gdrdoctor reads the state from NVML; it never creates a multicast object to find out.

use crate::checks::Needs;
use crate::model::{Fact, Node};
use crate::report::{Finding, Status};

pub const NEEDS: Needs = Needs {
    kinds: &[],
    what: "fabric manager and the gpus' fabric state (nvml)",
    command: "systemctl status nvidia-fabricmanager; nvidia-smi -q | grep -A4 -i fabric",
};

const FIX_FM: &str = "install the Fabric Manager of the driver's exact version (`apt install nvidia-fabricmanager-<branch>=<driver version>-1`, `dnf install nvidia-fabric-manager-<driver version>`; the GPU operator's driver container runs it itself), then `systemctl enable --now nvidia-fabricmanager`; after a driver upgrade upgrade both together and reboot or restart the service";

/// Whether the node's GPUs hang off NVSwitches: NVSwitch functions on the PCI bus (10de, class
/// 0x0680), NVLinks whose far end NVML calls a switch, or a GPU NVML places in a fabric.
pub fn nvswitch_system(node: &Node) -> Option<bool> {
    let pci = nvswitch_on_bus(node);
    let nvml = node.live.nvml.get().map(|n| {
        n.gpus.iter().any(|g| {
            switch_links(g) > 0
                || g.fabric
                    .as_ref()
                    .is_some_and(|f| f.state != "not-supported")
        })
    });
    match (pci, nvml) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (_, Some(false)) => Some(false),
        (Some(false), None) => None,
        (None, None) => None,
    }
}

/// Whether an NVSwitch function (10de, class 0x0680) is on this PCI bus; `None` when the bus
/// was not read.
fn nvswitch_on_bus(node: &Node) -> Option<bool> {
    node.pci.get().map(|p| {
        p.iter().any(|d| {
            d.vendor_id.get() == Some(&0x10de) && d.class.get().is_some_and(|c| c >> 8 == 0x0680)
        })
    })
}

/// A GPU's NVLinks that are active with a switch at the far end.
fn switch_links(g: &crate::model::NvmlGpu) -> usize {
    g.nvlinks
        .iter()
        .filter(|l| l.active && l.remote_type.as_deref() == Some("switch"))
        .count()
}

/// `cuInit`'s 802, as the CUDA facts' absence records it.
fn cuda_802(node: &Node) -> Option<String> {
    match &node.live.cuda {
        Fact::Absent { reason, .. }
            if reason.contains("802") || reason.contains("SYSTEM_NOT_READY") =>
        {
            Some(reason.clone())
        }
        _ => None,
    }
}

const WHY_802: &str = "cuInit returns 802 (CUDA_ERROR_SYSTEM_NOT_READY) on an NVSwitch system until Fabric Manager has registered every GPU in the fabric";

/// Why the NVLink fabric is known to be up without a fabric manager in this OS, or `None`:
/// every GPU's NVML fabric state `completed` with `success`; else, with no NVSwitch function on
/// this PCI bus, a `cuInit` that succeeded (not 802) and NVLinks active to a switch.
fn fabric_up_elsewhere(node: &Node) -> Option<String> {
    let nvml = node.live.nvml.get()?;
    // A GPU whose recorded facts were set aside may be the one not registered.
    if nvml.gpus.is_empty() || !nvml.damaged.is_empty() {
        return None;
    }
    let registered = nvml.gpus.iter().all(|g| {
        g.fabric
            .as_ref()
            .is_some_and(|f| f.state == "completed" && f.status == "success")
    });
    if registered {
        return Some(format!(
            "nvml: {} gpu(s) registered, fabric state completed",
            nvml.gpus.len()
        ));
    }
    // A GPU whose state NVML did give and that is not registered: the fabric is not up.
    if nvml.gpus.iter().any(|g| {
        g.fabric
            .as_ref()
            .is_some_and(|f| f.state != "completed" || f.status != "success")
    }) {
        return None;
    }
    let switch_on_bus = nvswitch_on_bus(node) != Some(false);
    let cuda_up = matches!(node.live.cuda, Fact::Known { .. });
    let links: usize = nvml.gpus.iter().map(switch_links).sum();
    let every_gpu_linked = nvml.gpus.iter().all(|g| switch_links(g) > 0);
    (!switch_on_bus && cuda_up && every_gpu_linked).then(|| {
        format!("cuInit succeeded, {links} nvlinks active to nvswitch, no nvswitch on this pci bus")
    })
}

/// The facts [`fabric_up_elsewhere`] read, as evidence lines.
fn fabric_up_evidence(node: &Node) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(n) = node.live.nvml.get() {
        for g in &n.gpus {
            let fab = g
                .fabric
                .as_ref()
                .map_or("fabric state not recorded".to_string(), |f| {
                    format!("fabric state {}, status {}", f.state, f.status)
                });
            let links = switch_links(g);
            out.push((
                node.live.nvml.source().to_string(),
                format!("{}: {fab}; {links} nvlinks active to nvswitch", g.bdf),
            ));
        }
    }
    if let Fact::Known { source, .. } = &node.live.cuda {
        out.push((source.clone(), "cuInit succeeded".to_string()));
    }
    out
}

pub fn fabric_manager(node: &Node) -> Vec<Finding> {
    const ID: &str = "driver.fabric-manager";
    let fm = &node.addons.fabric_manager;
    match nvswitch_system(node) {
        Some(true) => {}
        Some(false) => {
            return vec![Finding::new(
                ID,
                Status::Skip,
                "node",
                "not an nvswitch system: no nvswitch on the pci bus and no nvlink to a switch; fabric manager is not needed",
            )]
        }
        None => {
            return vec![Finding::new(
                ID,
                Status::Skip,
                "node",
                format!(
                    "whether this is an nvswitch system is not shown (nvml: {})",
                    node.live.nvml.reason().unwrap_or("no nvlink facts")
                ),
            )]
        }
    }
    let bin = fm
        .binary
        .describe(|b| b.clone().unwrap_or_else(|| "not installed".into()));
    let unit = fm.unit.describe(|u| match u {
        None => "no unit".into(),
        Some(u) => format!(
            "{} ({})",
            u.path,
            if u.enabled { "enabled" } else { "not enabled" }
        ),
    });
    let evidence = |f: Finding| {
        let mut f = f
            .evidence(fm.binary.source().to_string(), bin.clone())
            .evidence(fm.unit.source().to_string(), unit.clone());
        if let Some(r) = cuda_802(node) {
            f = f.evidence("cuInit", r);
        }
        f
    };
    let installed = match (fm.binary.get(), fm.unit.get()) {
        (Some(Some(_)), _) | (_, Some(Some(_))) => true,
        (Some(None), Some(None)) => false,
        _ => {
            return vec![evidence(Finding::new(
                ID,
                Status::Error,
                "node",
                format!(
                "an nvswitch system, and whether fabric manager is installed cannot be read ({})",
                fm.binary
                    .reason()
                    .or(fm.unit.reason())
                    .unwrap_or("unreadable")
            ),
            ))]
        }
    };
    if !installed {
        // No fabric manager in this OS, and yet the fabric is up: a VM (or a partition) whose
        // NVSwitches stay with the hypervisor, which runs fabric manager for it. NVML's own
        // fabric state says so; without it, a `cuInit` that succeeded with NVLinks active to the
        // switches does, but only where no NVSwitch is on this PCI bus (on bare metal the
        // switches are ours and a missing fabric manager is ours to fix).
        if let Some(why) = fabric_up_elsewhere(node) {
            let mut f = evidence(Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("no fabric manager in this os, and the gpus are in the nvlink fabric ({why}): it is managed outside this os (a vm whose nvswitches stay with the host)"),
            ));
            for (source, value) in fabric_up_evidence(node) {
                f = f.evidence(source, value);
            }
            return vec![f];
        }
        return vec![evidence(
            Finding::new(
                ID,
                Status::Fail,
                "node",
                format!("an nvswitch system without fabric manager (no nv-fabricmanager, no nvidia-fabricmanager.service): the gpus never join the nvlink fabric; {WHY_802}, and nvlink p2p and nvls are off"),
            )
            .fix(FIX_FM),
        )];
    }
    let driver = crate::derive::nvidia_driver(node).map(|(v, _)| v);
    let mut problems: Vec<(Status, String)> = Vec::new();
    let vtext = match (fm.version_file.get(), &driver) {
        (Some(Some((v, path))), Some(d)) => {
            if v != d {
                problems.push((Status::Fail, format!("fabric manager {v} is not the driver's version {d}: it refuses to start (\"fabric manager version is incompatible\"), so the fabric is never set up")));
            }
            format!("{v} ({path}); driver {d}")
        }
        (Some(Some((v, path))), None) => {
            problems.push((
                Status::Warn,
                format!("fabric manager {v}: the driver's version is not known to compare"),
            ));
            format!("{v} ({path})")
        }
        (Some(None), _) | (None, _) => {
            problems.push((
                Status::Warn,
                "fabric manager's version cannot be read (no package record, no log line): it must equal the driver's".into(),
            ));
            fm.version_file.describe(|_| "none".into())
        }
    };
    if let Some(Some(u)) = fm.unit.get() {
        if !u.enabled {
            problems.push((
                Status::Warn,
                "nvidia-fabricmanager.service is not enabled: it does not start at boot".into(),
            ));
        }
    }
    let f = match problems.iter().map(|(s, _)| *s).max() {
        Some(worst) => Finding::new(
            ID,
            worst,
            "node",
            problems
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
        .fix(FIX_FM),
        None => Finding::new(
            ID,
            Status::Pass,
            "node",
            format!(
                "fabric manager {} is installed and enabled, the driver's version",
                driver.clone().unwrap_or_default()
            ),
        ),
    };
    vec![evidence(f).evidence(fm.version_file.source().to_string(), vtext)]
}

pub fn fabric_state(node: &Node) -> Vec<Finding> {
    const ID: &str = "gpu.fabric-state";
    let c802 = cuda_802(node);
    let nvml = match &node.live.nvml {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => {
            return vec![match &c802 {
                Some(r) => Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!(
                        "cuda is not ready: {WHY_802}; nvml's fabric state is not shown ({reason})"
                    ),
                )
                .evidence("cuInit", r.clone())
                .fix(FIX_FM),
                None => Finding::new(
                    ID,
                    Status::Skip,
                    "node",
                    format!("the gpus' fabric state needs nvml: {reason}"),
                )
                .evidence(source.clone(), reason.clone()),
            }]
        }
    };
    let mut out = Vec::new();
    let mut completed = 0usize;
    for g in &nvml.gpus {
        let Some(fab) = &g.fabric else {
            let why = g
                .errors
                .iter()
                .find(|e| e.contains("FabricInfo"))
                .cloned()
                .unwrap_or_else(|| "not recorded (a snapshot of an older gdrdoctor)".into());
            out.push(Finding::new(
                ID,
                if c802.is_some() {
                    Status::Fail
                } else {
                    Status::Skip
                },
                g.bdf.clone(),
                if c802.is_some() {
                    format!(
                        "cuda is not ready ({WHY_802}) and nvml's fabric state is not shown: {why}"
                    )
                } else {
                    format!("nvml's fabric state is not shown: {why}")
                },
            ));
            continue;
        };
        let obs = format!(
            "state {}, status {}, clique {}, cluster {}",
            fab.state, fab.status, fab.clique_id, fab.cluster_uuid
        );
        let f = match (fab.state.as_str(), fab.status.as_str()) {
            ("not-supported", _) => Finding::new(
                ID,
                Status::Skip,
                g.bdf.clone(),
                "this gpu is not in an nvswitch fabric (state not-supported)",
            ),
            ("completed", "success") => {
                completed += 1;
                Finding::new(
                    ID,
                    Status::Pass,
                    g.bdf.clone(),
                    format!("registered in the nvlink fabric (clique {})", fab.clique_id),
                )
            }
            ("completed", st) => Finding::new(
                ID,
                Status::Fail,
                g.bdf.clone(),
                format!("fabric registration finished with an error ({st}): this gpu is out of the nvlink fabric; fabric manager's log (/var/log/fabricmanager.log) says why"),
            )
            .fix(FIX_FM),
            (st, _) => Finding::new(
                ID,
                Status::Fail,
                g.bdf.clone(),
                format!("fabric state {st}: fabric manager has not registered this gpu; {WHY_802}, nvlink p2p and nvls are off until it does"),
            )
            .fix(FIX_FM),
        };
        let mut f = f.evidence(fab.call.clone(), obs);
        if let Some(r) = &c802 {
            f = f.evidence("cuInit", r.clone());
        }
        out.push(f);
    }
    // GPUs whose recorded entries were set aside (listed twice): their state is not known.
    for (bdf, why) in &nvml.damaged {
        out.push(
            Finding::new(
                ID,
                Status::Error,
                bdf.clone(),
                format!("the recorded nvml facts of this gpu cannot be used: {why}"),
            )
            .evidence(node.live.nvml.source(), why.clone()),
        );
    }
    // NVLS as NCCL decides it: NCCL_NVLS_ENABLE (default 2: when supported), every GPU in the
    // fabric, CUDA 12.1 or later, sm90 or later; NCCL then asks CUDA for
    // CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, which gdrdoctor does not read.
    if completed >= 2 && completed == nvml.gpus.len() && nvml.damaged.is_empty() {
        let env = node
            .env
            .get()
            .and_then(|e| e.get("NCCL_NVLS_ENABLE"))
            .cloned();
        let cuda = node.live.cuda.get();
        let drv = cuda.map(|c| c.driver_version);
        let sm90 = cuda.map(|c| c.devices.iter().all(|d| d.cc_major >= 9));
        let (status, msg) = if env.as_deref().map(str::trim) == Some("0") {
            (
                Status::Pass,
                "every gpu is in the fabric; NVLS is off by NCCL_NVLS_ENABLE=0".to_string(),
            )
        } else if drv.is_some_and(|d| d < 12010) || sm90 == Some(false) {
            (
                Status::Pass,
                "every gpu is in the fabric; NCCL will not use NVLS here (it needs sm90 or later and a CUDA 12.1 driver)".to_string(),
            )
        } else {
            (
                Status::Pass,
                format!(
                    "every gpu is in the fabric: NCCL can use NVLS (NCCL_NVLS_ENABLE {}), if CUDA reports multicast support (not read here: gdrdoctor never creates a multicast object)",
                    env.as_deref().unwrap_or("unset, default 2")
                ),
            )
        };
        out.push(Finding::new(ID, status, "node", msg).evidence(
            "nvmlDeviceGetGpuFabricInfoV",
            format!("{completed} of {} gpus completed", nvml.gpus.len()),
        ));
    }
    if out.is_empty() {
        out.push(Finding::new(ID, Status::Skip, "node", "nvml lists no gpu"));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::*;
    use crate::testing::*;

    fn hgx(state: &str, status: &str, fm_version: Option<&str>) -> Node {
        let mut n = switch_pair();
        let gpu = |bdf: &str| NvmlGpu {
            bdf: bdf.into(),
            nvlinks: vec![NvLink {
                link: 0,
                active: true,
                remote_type: Some("switch".into()),
                ..Default::default()
            }],
            fabric: Some(GpuFabric {
                state: state.into(),
                status: status.into(),
                clique_id: 1,
                cluster_uuid: "ab".into(),
                health_mask: Some(0),
                call: "nvmlDeviceGetGpuFabricInfoV (v3)".into(),
            }),
            ..Default::default()
        };
        n.live.nvml = known(NvmlFacts {
            gpus: vec![gpu("0000:18:00.0"), gpu("0000:28:00.0")],
            ..Default::default()
        });
        n.addons.fabric_manager = FabricManager {
            version_file: known(
                fm_version.map(|v| (v.to_string(), "/var/lib/dpkg/status".to_string())),
            ),
            binary: known(fm_version.map(|_| "/usr/bin/nv-fabricmanager".to_string())),
            unit: known(fm_version.map(|_| FmUnit {
                path: "/lib/systemd/system/nvidia-fabricmanager.service".into(),
                enabled: true,
            })),
        };
        n
    }

    #[test]
    fn installed_at_the_drivers_version_passes_and_another_version_fails() {
        let f = fabric_manager(&hgx("completed", "success", Some("580.159.04")));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        let f = fabric_manager(&hgx("not-started", "success", Some("570.86.15")));
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message
                .contains("570.86.15 is not the driver's version 580.159.04"),
            "{}",
            f[0].message
        );
        let f = fabric_manager(&hgx("not-started", "success", None));
        assert_eq!(f[0].status, Status::Fail);
        assert!(f[0].message.contains("without fabric manager"));
    }

    #[test]
    fn fabric_states_per_gpu_and_nvls() {
        let f = fabric_state(&hgx("completed", "success", Some("580.159.04")));
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f.iter().all(|x| x.status == Status::Pass));
        assert!(f[2].message.contains("NVLS"), "{}", f[2].message);
        let f = fabric_state(&hgx("in-progress", "success", Some("580.159.04")));
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|x| x.status == Status::Fail));
        assert!(f[0].message.contains("802"), "{}", f[0].message);
        let f = fabric_state(&hgx(
            "completed",
            "NVML_ERROR_UNKNOWN (999)",
            Some("580.159.04"),
        ));
        assert_eq!(f[0].status, Status::Fail);
        let f = fabric_state(&hgx("not-supported", "success", None));
        assert!(f.iter().all(|x| x.status == Status::Skip));
    }

    #[test]
    fn a_fabric_up_without_a_fabric_manager_here_is_managed_outside_this_os() {
        // NVML says every GPU is registered: the hypervisor's fabric manager did it.
        let f = fabric_manager(&hgx("completed", "success", None));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        assert!(f[0].message.contains("managed outside"), "{}", f[0].message);
        assert!(
            f[0].evidence
                .iter()
                .any(|e| e.observed.contains("fabric state completed")),
            "{:?}",
            f[0].evidence
        );
        // A snapshot without the fabric state (the real H200 x2 VM of 2026-11-30): cuInit
        // succeeded, every GPU has NVLinks active to a switch, and no NVSwitch is on this bus.
        let vm = || {
            let mut n = hgx("completed", "success", None);
            if let Fact::Known { value, .. } = &mut n.live.nvml {
                for g in &mut value.gpus {
                    g.fabric = None;
                }
            }
            n.live.cuda = known(CudaFacts::default());
            n
        };
        let f = fabric_manager(&vm());
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
        assert!(
            f[0].message.contains("cuInit succeeded"),
            "{}",
            f[0].message
        );
        // cuInit failed with 802: the fabric is not up, fabric manager is missing.
        let mut n = vm();
        n.live.cuda = Fact::absent(
            "libcuda.so.1",
            "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)",
        );
        assert_eq!(fabric_manager(&n)[0].status, Status::Fail);
        // A GPU with no NVLink to a switch: not shown to be in the fabric.
        let mut n = vm();
        if let Fact::Known { value, .. } = &mut n.live.nvml {
            value.gpus[1].nvlinks.clear();
        }
        assert_eq!(fabric_manager(&n)[0].status, Status::Fail);
        // An NVSwitch on this PCI bus: bare metal, the switches are ours to manage.
        let mut n = vm();
        if let Fact::Known { value, .. } = &mut n.pci {
            let mut sw = value[0].clone();
            sw.bdf = "0000:05:00.0".into();
            sw.vendor_id = known(0x10de);
            sw.class = known(0x068000);
            value.push(sw);
        }
        assert_eq!(fabric_manager(&n)[0].status, Status::Fail);
        // One GPU's state given and not registered: not up, whatever else.
        let mut n = hgx("completed", "success", None);
        if let Fact::Known { value, .. } = &mut n.live.nvml {
            if let Some(f) = value.gpus[1].fabric.as_mut() {
                f.state = "in-progress".into();
            }
        }
        assert_eq!(fabric_manager(&n)[0].status, Status::Fail);
    }

    #[test]
    fn cuinit_802_without_nvml_is_explained() {
        let mut n = hgx("completed", "success", None);
        n.live.nvml = Fact::absent("libnvidia-ml.so.1", "nvmlInit failed");
        n.live.cuda = Fact::absent(
            "libcuda.so.1",
            "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802)",
        );
        let f = fabric_state(&n);
        assert_eq!(f[0].status, Status::Fail);
        assert!(
            f[0].message.contains("Fabric Manager has registered"),
            "{}",
            f[0].message
        );
        // Not an NVSwitch system: no fabric manager needed.
        let mut p = switch_pair();
        p.live.nvml = known(NvmlFacts {
            gpus: vec![NvmlGpu {
                bdf: "0000:18:00.0".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(fabric_manager(&p)[0].status, Status::Skip);
    }
}
