//! `policy.gpu`: the GPU count and model the site expects.

use super::context::{cannot, Context};
use crate::derive;
use crate::model::Node;
use crate::names;
use crate::policy::types::*;
use crate::report::{Evidence, Finding, Status};

pub(super) fn gpu(node: &Node, r: &GpuRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.gpu";
    let (Some(_), src) = (node.pci.get(), node.pci.source()) else {
        return vec![cannot(
            ID,
            "list the gpus",
            node.pci.source(),
            node.pci.reason().unwrap_or("?"),
        )];
    };
    let gpus = derive::gpus(node);
    let bdfs: Vec<&str> = gpus.iter().map(|g| g.bdf.as_str()).collect();
    let mut out = Vec::new();
    if let Some(n) = r.count {
        let observed = format!("{} nvidia gpu(s): {}", gpus.len(), bdfs.join(" "));
        let f = if gpus.len() == n as usize {
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("{n} nvidia gpus, as the policy expects"),
            )
        } else if gpus.len() < n as usize {
            Finding::new(
                ID,
                Status::Fail,
                "node",
                format!("{} nvidia gpu(s) on the pci bus, the policy expects {n}", gpus.len()),
            )
            .fix("a gpu is missing: `nvidia-smi -L` and `lspci -d 10de:` list what the node sees, `dmesg | grep -i xid` shows a gpu that fell off the bus (Xid 79); reseat or replace it, or change gpu.count if the node is built this way")
        } else {
            Finding::new(
                ID,
                Status::Fail,
                "node",
                format!("{} nvidia gpu(s) on the pci bus, more than the {n} the policy expects", gpus.len()),
            )
            .fix("the node has more gpus than the site expects: check that it is the node class this policy is for, or change gpu.count")
        };
        out.push(f.expected(src, observed, cx.want(n, "gpu.count")));
        // The driver's and NVML's views, when they were read: a GPU on the bus that the driver
        // did not initialise, or that NVML does not see, is as gone for jobs.
        if gpus.len() == n as usize {
            let mut views: Vec<(String, Vec<String>)> = Vec::new();
            if let Some(d) = node.nvidia.gpus.get() {
                views.push((
                    node.nvidia.gpus.source().to_string(),
                    d.keys().cloned().collect(),
                ));
            }
            if let Some(v) = node.live.nvml.get() {
                views.push((
                    format!("{} (nvmlDeviceGetCount)", node.live.nvml.source()),
                    v.gpus.iter().map(|g| g.bdf.clone()).collect(),
                ));
            }
            for (source, seen) in views {
                if seen.len() == n as usize {
                    continue;
                }
                let missing: Vec<&str> = bdfs
                    .iter()
                    .copied()
                    .filter(|b| !seen.iter().any(|s| s.eq_ignore_ascii_case(b)))
                    .collect();
                let what = if source.starts_with("/proc") {
                    "the nvidia driver initialised"
                } else {
                    "nvml sees"
                };
                if let Some(f) = out.iter_mut().find(|f| f.id == ID && f.subject == "node") {
                    f.status = Status::Fail;
                    f.message = format!(
                        "{what} {} of the {n} gpus the policy expects{}",
                        seen.len(),
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!(" (not {})", missing.join(" "))
                        }
                    );
                    f.evidence.push(Evidence {
                        source: source.clone(),
                        observed: format!("{} gpu(s): {}", seen.len(), seen.join(" ")),
                        expected: Some(cx.want(n, "gpu.count")),
                    });
                    f.remediation = Some("a gpu is on the bus but not usable: `nvidia-smi -L` lists what the driver offers, `dmesg | grep -i -E 'nvrm|xid'` says why one was not initialised (Xid 79, 119, a failed GSP boot); reset it (`nvidia-smi -r`) or reboot, and replace it if it keeps failing".into());
                }
            }
        }
    }
    if r.model.is_some() || r.device_id.is_some() {
        let mut bad = Vec::new();
        for g in &gpus {
            let name = names::device_name(g);
            let mut why = Vec::new();
            if let Some(m) = &r.model {
                if !name.to_lowercase().contains(&m.as_str().to_lowercase()) {
                    why.push(format!("not a {}", m.as_str()));
                }
            }
            if let Some(id) = r.device_id {
                match (g.vendor_id.get(), g.device_id.get()) {
                    (Some(&v), Some(&d)) if v == id.vendor && d == id.device => {}
                    (Some(&v), Some(&d)) => why.push(format!("pci id {v:04x}:{d:04x}, not {id}")),
                    _ => why.push("pci id unreadable".into()),
                }
            }
            if !why.is_empty() {
                bad.push((g.bdf.clone(), name, why));
            }
        }
        let want = match (&r.model, r.device_id) {
            (Some(m), Some(id)) => format!("{} ({id})", m.as_str()),
            (Some(m), None) => m.as_str().to_string(),
            (None, Some(id)) => id.to_string(),
            (None, None) => String::new(),
        };
        let key = if r.model.is_some() {
            "gpu.model"
        } else {
            "gpu.device_id"
        };
        if gpus.is_empty() {
            out.push(
                Finding::new(ID, Status::Fail, "node", format!("no nvidia gpu on the pci bus; the policy expects {want} gpus"))
                    .expected(src, "0 nvidia gpus", cx.want(&want, key))
                    .fix("`lspci -d 10de:` lists NVIDIA functions; check that the gpus are seated and powered and that the node is the class this policy is for"),
            );
        } else if bad.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!("every gpu is a {want} ({} of {})", gpus.len(), gpus.len()),
                )
                .expected(src, names::device_name(gpus[0]), cx.want(&want, key)),
            );
        }
        for (bdf, name, why) in bad {
            out.push(
                Finding::new(ID, Status::Fail, &bdf, format!("{name}: {}", why.join(", ")))
                    .expected(format!("/sys/bus/pci/devices/{bdf}"), name.clone(), cx.want(&want, key))
                    .fix("a gpu of another model is in this node: replace it, or give this node class its own policy"),
            );
        }
    }
    out
}
