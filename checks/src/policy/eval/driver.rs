//! `policy.driver`, `policy.peer-memory` and `policy.iommu`: the NVIDIA driver, the
//! peer-memory mechanism and the IOMMU mode the site requires.

use super::context::{cannot, Context};
use crate::derive;
use crate::model::{Fact, Node};
use crate::parse;
use crate::policy::types::*;
use crate::report::{Evidence, Finding, Status};

pub(super) fn driver(node: &Node, r: &DriverRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.driver";
    const SRC: &str = "/proc/driver/nvidia/version";
    let text = match &node.nvidia.version_file {
        Fact::Absent { source, reason } => {
            return vec![cannot(ID, "read the nvidia driver version", source, reason)]
        }
        Fact::Known { value: None, .. } => {
            return vec![Finding::new(
            ID,
            Status::Fail,
            "node",
            "the nvidia driver is not loaded",
        )
        .expected(SRC, "absent", cx.want("a loaded nvidia driver", "driver"))
        .fix("load it (`modprobe nvidia`); `dmesg | grep -i nvrm` shows why it did not load")]
        }
        Fact::Known { value: Some(t), .. } => t,
    };
    let Some((ver, flavor)) = parse::nvidia_version(text) else {
        return vec![Finding::new(
            ID,
            Status::Error,
            "node",
            "cannot parse the nvidia driver version",
        )
        .evidence(SRC, text.lines().next().unwrap_or("").to_string())];
    };
    let flavor = super::flavor_str(flavor);
    let mut out = Vec::new();
    let install = "install the site's driver (the distribution's nvidia-driver-<branch>-open or -server package, or the .run installer with -m=kernel-open), then reboot or reload the modules";
    if let Some(want) = r.flavor {
        if flavor != want.as_str() {
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!(
                        "nvidia {ver} runs the {flavor} kernel modules, the policy expects {}",
                        want.as_str()
                    ),
                )
                .expected(
                    SRC,
                    format!("{ver} ({flavor})"),
                    cx.want(want.as_str(), "driver.flavor"),
                )
                .fix(install),
            );
        }
    }
    let v = Version::parse(&ver);
    if let Some(want) = &r.version {
        if ver != want.text {
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!("nvidia driver {ver}, the policy expects {}", want.text),
                )
                .expected(SRC, &ver, cx.want(&want.text, "driver.version"))
                .fix(install),
            );
        }
    }
    if let Some(min) = &r.min_version {
        match &v {
            Some(v) if v.cmp_parts(min).is_lt() => out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!(
                        "nvidia driver {ver} is older than the policy's minimum {}",
                        min.text
                    ),
                )
                .expected(
                    SRC,
                    &ver,
                    cx.want(format!(">= {}", min.text), "driver.min_version"),
                )
                .fix(install),
            ),
            Some(_) => {}
            None => out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    "node",
                    format!("driver version `{ver}` has no numeric parts to compare"),
                )
                .evidence(SRC, &ver),
            ),
        }
    }
    if out.is_empty() {
        let mut want = Vec::new();
        if let Some(f) = r.flavor {
            want.push(f.as_str().to_string());
        }
        if let Some(v) = &r.version {
            want.push(v.text.clone());
        }
        if let Some(v) = &r.min_version {
            want.push(format!(">= {}", v.text));
        }
        out.push(
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("nvidia {ver} ({flavor}), as the policy expects"),
            )
            .expected(
                SRC,
                format!("{ver} ({flavor})"),
                cx.want(want.join(", "), "driver"),
            ),
        );
    }
    out
}

pub(super) fn peer_memory(node: &Node, r: &PeerMemoryRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.peer-memory";
    let pm = derive::peermem_path(node);
    let db = derive::dmabuf_path(node);
    let want = r.mechanism.as_str();
    let expected = cx.want(want, "peer_memory.mechanism");
    let (answer, name): (Option<bool>, &str) = match r.mechanism {
        Mechanism::Peermem => (pm.available, "the peer-memory client (nvidia_peermem)"),
        Mechanism::DmaBuf => (db.available, "the dma-buf path"),
        Mechanism::Either => (
            match (pm.available, db.available) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
            "a peer-memory client or the dma-buf path",
        ),
    };
    let used: &[&derive::PathAnswer] = match r.mechanism {
        Mechanism::Peermem => &[&pm],
        Mechanism::DmaBuf => &[&db],
        Mechanism::Either => &[&pm, &db],
    };
    let mut f = match answer {
        Some(true) => Finding::new(
            ID,
            Status::Pass,
            "node",
            format!("{name} is available, as the policy requires"),
        ),
        Some(false) => {
            let reasons: Vec<&str> = used
                .iter()
                .flat_map(|a| a.reasons.iter().map(String::as_str))
                .collect();
            Finding::new(ID, Status::Fail, "node", format!("{name} is not available: {}", reasons.join("; ")))
                .fix(match r.mechanism {
                    Mechanism::Peermem => "load the peer-memory client: `modprobe nvidia-peermem` (and add it to /etc/modules-load.d/); see `gdrdoctor explain kmod.nvidia-peermem`",
                    Mechanism::DmaBuf => "dma-buf needs the open nvidia kernel modules (>= 515), a kernel >= 5.12 and rdma-core >= 34; see `gdrdoctor explain kmod.dmabuf`",
                    Mechanism::Either => "load nvidia-peermem (`modprobe nvidia-peermem`) or move to the open nvidia modules with a kernel >= 5.12 for dma-buf; see `gdrdoctor explain kmod.nvidia-peermem` and `gdrdoctor explain kmod.dmabuf`",
                })
        }
        None => {
            let reasons: Vec<&str> = used
                .iter()
                .flat_map(|a| a.reasons.iter().map(String::as_str))
                .collect();
            Finding::new(
                ID,
                Status::Error,
                "node",
                format!(
                    "cannot tell whether {name} is available: {}",
                    reasons.join("; ")
                ),
            )
        }
    };
    for a in used {
        for e in &a.evidence {
            f.evidence.push(e.clone());
        }
    }
    f.evidence.push(Evidence {
        source: cx.path.clone(),
        observed: format!("peer_memory.mechanism = \"{want}\""),
        expected: Some(expected),
    });
    vec![f]
}

pub(super) fn iommu(node: &Node, r: &IommuRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.iommu";
    let (mode, ev) = derive::iommu_mode(node);
    let allowed: Vec<&str> = r.mode.0.iter().map(|m| m.as_str()).collect();
    let expected = cx.want(allowed.join(" or "), "iommu.mode");
    let observed = if ev.is_empty() {
        mode.as_str().to_string()
    } else {
        format!("{} ({})", mode.as_str(), ev.join("; "))
    };
    let f = if mode == derive::IommuMode::Unknown {
        Finding::new(ID, Status::Error, "node", "cannot tell the iommu mode")
    } else if allowed.contains(&mode.as_str()) {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            format!("iommu {}, as the policy expects", mode.as_str()),
        )
    } else {
        Finding::new(ID, Status::Fail, "node", format!("iommu {}, the policy expects {}", mode.as_str(), allowed.join(" or ")))
            .fix("set the kernel command line for the site's mode and reboot: passthrough is `iommu=pt` with `intel_iommu=on` or `amd_iommu=on` on x86 (`iommu.passthrough=1` on arm64), off is `intel_iommu=off` / `amd_iommu=off`; see `gdrdoctor explain iommu.mode`")
    };
    vec![f.expected(
        "/sys/class/iommu, /sys/kernel/iommu_groups, /proc/cmdline",
        observed,
        expected,
    )]
}
