//! Node + report + policy -> `policy.*` findings, then severity overrides and waivers, then the
//! summary and exit code again. Missing evidence is an `error` finding, never a pass.

use super::types::*;
use super::{glob, FINDINGS};
use crate::derive;
use crate::model::{Fact, Node, PciDevice, RdmaDevice};
use crate::names;
use crate::parse;
use crate::report::{exit_code, Evidence, Finding, GdrPair, Report, Status, Summary};
use std::collections::{BTreeMap, BTreeSet};

/// What the evaluation needs besides the node: where the policy came from (cited in every
/// finding) and today's date (for waivers), both supplied by the caller.
#[derive(Debug, Clone)]
pub struct Context {
    pub path: String,
    pub today: Date,
}

impl Context {
    /// `8 (policy gpu.count)`: the expected value and the key that set it.
    fn want(&self, value: impl std::fmt::Display, key: &str) -> String {
        format!("{value} ({}: {key})", self.path)
    }
}

/// Evaluate the policy's expectations, append their findings, apply severity overrides and
/// waivers, and recompute the summary and exit code.
pub fn apply(
    report: &mut Report,
    node: &Node,
    policy: &Policy,
    cx: &Context,
    opts: &crate::RunOptions,
) {
    let extra = expectations(node, &report.gdr, policy, cx);
    report.findings.extend(extra);
    severity(&mut report.findings, policy, cx);
    let host = report.host.hostname.clone();
    let waived = waivers(&mut report.findings, policy, cx, host.as_deref());
    report.findings.extend(waived);
    let mut summary = Summary::count(&report.findings);
    summary.exit_code = exit_code(&report.findings, opts.fail_on, opts.allow_incomplete);
    report.summary = summary;
}

type Rule<'a> = Box<dyn Fn() -> Vec<Finding> + 'a>;

/// Every expectation the policy states, in the order of [`FINDINGS`]. A rule that panics
/// becomes one `error` finding.
pub fn expectations(node: &Node, gdr: &[GdrPair], p: &Policy, cx: &Context) -> Vec<Finding> {
    let mut rules: Vec<(&str, Rule)> = Vec::new();
    if let Some(r) = &p.gpu {
        rules.push(("policy.gpu", Box::new(move || gpu(node, r, cx))));
    }
    if let Some(r) = &p.rdma {
        if let Some(n) = r.count {
            rules.push(("policy.rdma", Box::new(move || rdma_count(node, n, cx))));
        }
        if !r.ports.0.is_empty() {
            rules.push((
                "policy.ports",
                Box::new(move || ports(node, &r.ports.0, cx)),
            ));
        }
        if let Some(fw) = &r.firmware {
            rules.push(("policy.firmware", Box::new(move || firmware(node, fw, cx))));
        }
    }
    if let Some(r) = &p.pcie {
        rules.push(("policy.pcie", Box::new(move || pcie(node, r, cx))));
    }
    if let Some(r) = &p.driver {
        rules.push(("policy.driver", Box::new(move || driver(node, r, cx))));
    }
    if let Some(r) = &p.peer_memory {
        rules.push((
            "policy.peer-memory",
            Box::new(move || peer_memory(node, r, cx)),
        ));
    }
    if let Some(r) = &p.iommu {
        rules.push(("policy.iommu", Box::new(move || iommu(node, r, cx))));
    }
    if let Some(r) = &p.gdr {
        rules.push(("policy.gdr", Box::new(move || gdr_pairs(node, gdr, r, cx))));
    }
    if let Some(k) = &p.kernel {
        if k.release.is_some() || k.min_release.is_some() {
            rules.push(("policy.kernel", Box::new(move || kernel(node, k, cx))));
        }
        if let Some(c) = &k.cmdline {
            rules.push(("policy.cmdline", Box::new(move || cmdline(node, c, cx))));
        }
    }
    let order = |id: &str| FINDINGS.iter().position(|f| f.id == id);
    rules.sort_by_key(|(id, _)| order(id));
    let mut out = Vec::new();
    for (id, rule) in rules {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(rule)) {
            Ok(f) => out.extend(f),
            Err(_) => out.push(Finding::new(
                id,
                Status::Error,
                "node",
                "internal error in this policy rule; please report it with a `gdrdoctor snapshot` and the policy file",
            )),
        }
    }
    out
}

fn cannot(id: &str, what: &str, fact_source: &str, reason: &str) -> Finding {
    Finding::new(id, Status::Error, "node", format!("cannot {what}"))
        .evidence(fact_source, format!("unknown ({reason})"))
}

fn gpu(node: &Node, r: &GpuRule, cx: &Context) -> Vec<Finding> {
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

fn rdma_count(node: &Node, n: u32, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.rdma";
    let Some(devs) = node.rdma.get() else {
        return vec![cannot(
            ID,
            "list the rdma devices",
            node.rdma.source(),
            node.rdma.reason().unwrap_or("?"),
        )];
    };
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    let observed = format!("{} device(s): {}", devs.len(), names.join(" "));
    let f = if devs.len() == n as usize {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            format!("{n} rdma devices, as the policy expects"),
        )
    } else if devs.len() < n as usize {
        Finding::new(ID, Status::Fail, "node", format!("{} rdma device(s), the policy expects {n}", devs.len()))
            .fix("an rdma device is missing: `ibv_devices` and `lspci -d 15b3:` show what the node sees; `dmesg | grep -i mlx5` shows a driver or firmware failure; check the nic is seated, or change rdma.count if the node is built this way")
    } else {
        Finding::new(ID, Status::Fail, "node", format!("{} rdma device(s), more than the {n} the policy expects", devs.len()))
            .fix("check that the node is the class this policy is for (an extra nic, or sr-iov virtual functions exposed as rdma devices), or change rdma.count")
    };
    vec![f.expected(node.rdma.source(), observed, cx.want(n, "rdma.count"))]
}

/// `400 Gb/sec (4X NDR)` -> (400.0, "4X").
pub fn parse_rate(s: &str) -> (Option<f64>, Option<String>) {
    let gbps = s
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<f64>().ok())
        .filter(|v| v.is_finite());
    let width = s
        .split_once('(')
        .and_then(|(_, r)| r.split_whitespace().next())
        .map(|w| w.trim_end_matches(')').to_ascii_uppercase())
        .filter(|w| w.ends_with('X') && w.len() > 1);
    (gbps, width)
}

fn gbps_text(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn selects(patterns: &[NonEmpty], dev: &str, port: Option<&str>) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|p| glob(p.as_str(), dev) || port.is_some_and(|s| glob(p.as_str(), s)))
}

fn ports(node: &Node, rules: &[PortRule], cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.ports";
    let Some(devs) = node.rdma.get() else {
        return vec![cannot(
            ID,
            "list the rdma devices",
            node.rdma.source(),
            node.rdma.reason().unwrap_or("?"),
        )];
    };
    let mut out = Vec::new();
    for (ri, rule) in rules.iter().enumerate() {
        let key = if rules.len() == 1 {
            "rdma.ports".to_string()
        } else {
            format!("rdma.ports[{ri}]")
        };
        let mut matched = 0usize;
        for d in devs {
            let base = format!("/sys/class/infiniband/{}/ports", d.name);
            let ports = match &d.ports {
                Fact::Known { value, .. } => value,
                Fact::Absent { reason, .. } => {
                    if selects(&rule.devices, &d.name, None) {
                        matched += 1;
                        out.push(
                            Finding::new(ID, Status::Error, &d.name, "cannot read the ports")
                                .evidence(base, format!("unknown ({reason})")),
                        );
                    }
                    continue;
                }
            };
            for p in ports {
                let subject = format!("{}/{}", d.name, p.port);
                if !selects(&rule.devices, &d.name, Some(&subject)) {
                    continue;
                }
                matched += 1;
                out.push(port(
                    p,
                    &subject,
                    &format!("{base}/{}", p.port),
                    rule,
                    &key,
                    cx,
                ));
            }
        }
        if matched == 0 {
            let pats: Vec<&str> = rule.devices.iter().map(|p| p.as_str()).collect();
            out.push(
                Finding::new(ID, Status::Fail, "node", format!("no rdma port matches {}", if pats.is_empty() { "(every port)".to_string() } else { pats.join(", ") }))
                    .expected(node.rdma.source(), format!("{} device(s)", devs.len()), cx.want(pats.join(", "), &format!("{key}.devices")))
                    .fix("the ports this rule is for are missing: `ibv_devinfo -l` lists the devices; fix the node, or the rule's `devices` patterns"),
            );
        }
    }
    out
}

fn port(
    p: &crate::model::RdmaPort,
    subject: &str,
    src: &str,
    rule: &PortRule,
    key: &str,
    cx: &Context,
) -> Finding {
    const ID: &str = "policy.ports";
    let mut bad = Vec::new();
    let mut unknown = Vec::new();
    let mut observed = Vec::new();
    let mut wanted = Vec::new();
    if let Some(want) = rule.state {
        wanted.push(format!("state {}", want.as_str()));
        match p.state_name() {
            Some(s) => {
                observed.push(format!("state {s}"));
                if s != want.as_str() {
                    bad.push(format!("state {s}, policy expects {}", want.as_str()));
                }
            }
            None => unknown.push(format!("state: {}", p.state.describe(|s| s.clone()))),
        }
    }
    if let Some(want) = rule.link_layer {
        wanted.push(want.as_str().to_string());
        match p.link_layer.get() {
            Some(l) => {
                observed.push(l.clone());
                if l != want.as_str() {
                    bad.push(format!("link layer {l}, policy expects {}", want.as_str()));
                }
            }
            None => unknown.push(format!(
                "link_layer: {}",
                p.link_layer.describe(|s| s.clone())
            )),
        }
    }
    if rule.rate_gbps.is_some() || rule.width.is_some() {
        let raw = p.rate.get();
        let (gbps, width) = raw.map(|r| parse_rate(r)).unwrap_or((None, None));
        if let Some(r) = raw {
            observed.push(format!("rate {r}"));
        }
        if let Some(Rate(want)) = rule.rate_gbps {
            wanted.push(format!("{} Gb/s", gbps_text(want)));
            match gbps {
                Some(g) if (g - want).abs() < 1e-6 => {}
                Some(g) => bad.push(format!(
                    "rate {} Gb/s, policy expects {}",
                    gbps_text(g),
                    gbps_text(want)
                )),
                None => unknown.push(format!("rate: {}", p.rate.describe(|s| s.clone()))),
            }
        }
        if let Some(want) = &rule.width {
            wanted.push(want.0.clone());
            match &width {
                Some(w) if *w == want.0 => {}
                Some(w) => bad.push(format!("width {w}, policy expects {}", want.0)),
                None => unknown.push(format!("width: {}", p.rate.describe(|s| s.clone()))),
            }
        }
    }
    let expected = cx.want(wanted.join(", "), key);
    let f = if !bad.is_empty() {
        let dev = subject.split('/').next().unwrap_or(subject);
        let pn = subject.rsplit('/').next().unwrap_or("1");
        Finding::new(ID, Status::Fail, subject, bad.join("; "))
            .fix(format!("the port is not what the site expects: `ibstat {dev} {pn}` shows it; for a slow or narrow link reseat or replace the cable or transceiver (`mlxlink -d {dev} -p {pn} -m` shows the module and its errors) and check the switch port's speed; for a port that is not ACTIVE see `gdrdoctor explain rdma.ports`"))
    } else if !unknown.is_empty() {
        Finding::new(
            ID,
            Status::Error,
            subject,
            format!("cannot read {}", unknown.join(", ")),
        )
    } else {
        Finding::new(
            ID,
            Status::Pass,
            subject,
            format!("{}, as the policy expects", observed.join(", ")),
        )
    };
    f.expected(
        src,
        if observed.is_empty() {
            "unknown".into()
        } else {
            observed.join(", ")
        },
        expected,
    )
}

fn selected_devices<'a>(node: &'a Node, patterns: &[NonEmpty]) -> Option<Vec<&'a RdmaDevice>> {
    node.rdma.get().map(|d| {
        d.iter()
            .filter(|d| selects(patterns, &d.name, None))
            .collect()
    })
}

fn firmware(node: &Node, r: &FirmwareRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.firmware";
    let Some(devs) = selected_devices(node, &r.devices) else {
        return vec![cannot(
            ID,
            "list the rdma devices",
            node.rdma.source(),
            node.rdma.reason().unwrap_or("?"),
        )];
    };
    if devs.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Fail,
            "node",
            "no rdma device to compare firmware on",
        )
        .expected(
            node.rdma.source(),
            "0 devices",
            cx.want("at least one device", "rdma.firmware.devices"),
        )
        .fix("`ibv_devinfo -l` lists the devices; see `gdrdoctor explain rdma.devices`")];
    }
    let mut out = Vec::new();
    let mut known: Vec<(&str, String)> = Vec::new();
    let flash = |dev: &str| {
        format!("update {dev}'s firmware to the site's version: `mlxfwmanager --query` shows it, `mlxfwmanager -u -i <image>` (or `flint -d <pci> -i <image> burn`) writes it, then `mlxfwreset -d <pci> reset` or a reboot loads it")
    };
    for d in &devs {
        let src = format!("/sys/class/infiniband/{}/fw_ver", d.name);
        let Some(fw) = d.fw_ver.get() else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.name,
                    "cannot read the firmware version",
                )
                .evidence(src, d.fw_ver.describe(|s| s.clone())),
            );
            continue;
        };
        known.push((d.name.as_str(), fw.clone()));
        let parsed = Version::parse(fw);
        if let Some(want) = &r.version {
            if fw.trim() != want.text {
                out.push(
                    Finding::new(
                        ID,
                        Status::Fail,
                        &d.name,
                        format!("firmware {fw}, the policy expects {}", want.text),
                    )
                    .expected(
                        &src,
                        fw.clone(),
                        cx.want(&want.text, "rdma.firmware.version"),
                    )
                    .fix(flash(&d.name)),
                );
            }
        }
        if let Some(min) = &r.min_version {
            match &parsed {
                Some(v) if v.cmp_parts(min).is_lt() => out.push(
                    Finding::new(
                        ID,
                        Status::Fail,
                        &d.name,
                        format!(
                            "firmware {fw} is older than the policy's minimum {}",
                            min.text
                        ),
                    )
                    .expected(
                        &src,
                        fw.clone(),
                        cx.want(format!(">= {}", min.text), "rdma.firmware.min_version"),
                    )
                    .fix(flash(&d.name)),
                ),
                Some(_) => {}
                None => out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &d.name,
                        format!("firmware version `{fw}` has no numeric parts to compare"),
                    )
                    .evidence(&src, fw.clone()),
                ),
            }
        }
    }
    if r.all_equal == Some(true) {
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (dev, fw) in &known {
            by.entry(fw.as_str()).or_default().push(dev);
        }
        if by.len() > 1 {
            let mut groups: Vec<(&str, Vec<&str>)> = by.into_iter().collect();
            groups.sort_by_key(|(_, d)| std::cmp::Reverse(d.len()));
            let text: Vec<String> = groups
                .iter()
                .map(|(fw, d)| format!("{fw} on {}", d.join(" ")))
                .collect();
            let odd: Vec<&str> = groups
                .iter()
                .skip(1)
                .flat_map(|(_, d)| d.iter().copied())
                .collect();
            out.push(Finding::new(ID, Status::Fail, "node", format!("nic firmware differs: {}", text.join("; ")))
                .expected("/sys/class/infiniband/*/fw_ver", text.join("; "), cx.want("one version on every device", "rdma.firmware.all_equal"))
                .fix(format!("bring {} to the version the others run (`mlxfwmanager --query` lists all; `mlxfwmanager -u` updates, `mlxfwreset` or a reboot loads it)", odd.join(", "))));
        }
    }
    if out.is_empty() {
        let mut versions: Vec<&str> = known.iter().map(|(_, f)| f.as_str()).collect();
        versions.sort();
        versions.dedup();
        let mut want = Vec::new();
        if let Some(v) = &r.version {
            want.push(format!("exactly {}", v.text));
        }
        if let Some(v) = &r.min_version {
            want.push(format!(">= {}", v.text));
        }
        if r.all_equal == Some(true) {
            want.push("all equal".into());
        }
        out.push(
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!(
                    "{} nic(s) run firmware {}, as the policy expects",
                    known.len(),
                    versions.join(", ")
                ),
            )
            .expected(
                "/sys/class/infiniband/*/fw_ver",
                versions.join(", "),
                cx.want(want.join(", "), "rdma.firmware"),
            ),
        );
    }
    out
}

/// The bridges on the paths from the root to every GPU and RDMA NIC.
fn bridges_above<'a>(node: &'a Node, endpoints: &[String]) -> Vec<&'a PciDevice> {
    let Some(pci) = node.pci.get() else {
        return vec![];
    };
    let by: BTreeMap<&str, &PciDevice> = pci.iter().map(|d| (d.bdf.as_str(), d)).collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for e in endpoints {
        let mut cur = by.get(e.as_str()).and_then(|d| d.parent.as_deref());
        let mut hops = 0;
        while let Some(b) = cur {
            hops += 1;
            if hops > 64 {
                break;
            }
            let Some(d) = by.get(b) else { break };
            if d.is_bridge() && seen.insert(d.bdf.clone()) {
                out.push(*d);
            }
            cur = d.parent.as_deref();
        }
    }
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    out
}

/// GPUs, RDMA NICs and the bridges above them, by class.
pub fn pcie_classes(node: &Node) -> Vec<(&'static str, Vec<&PciDevice>)> {
    let gpus = derive::gpus(node);
    let nic_bdfs: BTreeSet<String> = derive::rdma_pci(node).into_iter().collect();
    let nics: Vec<&PciDevice> = node
        .pci
        .get()
        .map(|p| p.iter().filter(|d| nic_bdfs.contains(&d.bdf)).collect())
        .unwrap_or_default();
    let ends: Vec<String> = gpus
        .iter()
        .chain(nics.iter())
        .map(|d| d.bdf.clone())
        .collect();
    let switches = bridges_above(node, &ends);
    vec![("gpu", gpus), ("nic", nics), ("switch", switches)]
}

fn pcie(node: &Node, r: &PcieRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.pcie";
    if node.pci.get().is_none() {
        return vec![cannot(
            ID,
            "list the pci devices",
            node.pci.source(),
            node.pci.reason().unwrap_or("?"),
        )];
    }
    let mut out = Vec::new();
    for (class, devs) in pcie_classes(node) {
        let rule = match class {
            "gpu" => &r.gpu,
            "nic" => &r.nic,
            _ => &r.switch,
        };
        let Some(rule) = rule else { continue };
        if rule.speed_gts.is_none() && rule.width.is_none() {
            continue;
        }
        let mut want = Vec::new();
        if let Some(LinkSpeed(s)) = rule.speed_gts {
            want.push(format!("{s} GT/s"));
        }
        if let Some(LinkWidth(w)) = rule.width {
            want.push(format!("x{w}"));
        }
        let key = format!("pcie.{class}");
        let expected = cx.want(format!("at least {}", want.join(" ")), &key);
        if devs.is_empty() {
            out.push(Finding::new(
                ID,
                Status::Skip,
                "node",
                format!(
                    "no {class} link to compare: this node has no {}",
                    match class {
                        "switch" => "bridge above its gpus and nics",
                        "gpu" => "nvidia gpu",
                        _ => "rdma nic",
                    }
                ),
            ));
            continue;
        }
        let before = out.len();
        let mut errors = 0;
        for d in &devs {
            let src = match d.link_from_config() {
                Some(reg) => reg.to_string(),
                None => format!("/sys/bus/pci/devices/{}/current_link_speed", d.bdf),
            };
            let speed = d
                .cur_link_speed
                .get()
                .and_then(|s| parse::link_speed_gts(s));
            let width = d.cur_link_width.get().copied();
            let mut bad = Vec::new();
            let mut unknown = Vec::new();
            if let Some(LinkSpeed(s)) = rule.speed_gts {
                match speed {
                    Some(v) if v + 1e-9 >= s => {}
                    Some(v) => bad.push(format!("{v} GT/s")),
                    None => unknown.push(format!(
                        "speed: {}",
                        d.cur_link_speed.describe(|s| s.clone())
                    )),
                }
            }
            if let Some(LinkWidth(w)) = rule.width {
                match width {
                    Some(v) if v >= w => {}
                    Some(v) => bad.push(format!("x{v}")),
                    None => unknown.push(format!(
                        "width: {}",
                        d.cur_link_width.describe(|w| w.to_string())
                    )),
                }
            }
            let observed = format!(
                "{} GT/s x{}",
                speed.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                width.map(|w| w.to_string()).unwrap_or_else(|| "?".into())
            );
            if !bad.is_empty() {
                out.push(Finding::new(ID, Status::Fail, &d.bdf, format!("{class} link at {observed}, below the policy's {}", want.join(" ")))
                    .expected(&src, &observed, &expected)
                    .fix(format!("the link trained below the site's expectation: `lspci -s {} -vv | grep -E 'LnkCap|LnkSta'` shows it; reseat the device or its riser/cable, check the slot's bifurcation and speed settings in the BIOS, and see `gdrdoctor explain pcie.link`", d.bdf)));
            } else if !unknown.is_empty() {
                errors += 1;
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &d.bdf,
                        format!("cannot read the {class} link: {}", unknown.join(", ")),
                    )
                    .evidence(&src, observed),
                );
            }
        }
        if out.len() == before && errors == 0 {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "{} {class} link(s) at {} or better, as the policy expects",
                        devs.len(),
                        want.join(" ")
                    ),
                )
                .expected(
                    "/sys/bus/pci/devices/*/current_link_{speed,width}",
                    format!("{} {class} link(s) checked", devs.len()),
                    expected,
                ),
            );
        }
    }
    out
}

fn driver(node: &Node, r: &DriverRule, cx: &Context) -> Vec<Finding> {
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

fn peer_memory(node: &Node, r: &PeerMemoryRule, cx: &Context) -> Vec<Finding> {
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

fn iommu(node: &Node, r: &IommuRule, cx: &Context) -> Vec<Finding> {
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

fn path_rank(path: &str) -> u8 {
    PathName::parse(path).map(|p| p.rank).unwrap_or(u8::MAX)
}

fn gdr_pairs(node: &Node, pairs: &[GdrPair], r: &GdrRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.gdr";
    let max = r.max_path.unwrap_or(PathName {
        name: "SYS",
        rank: 9,
    });
    let ok = |p: &GdrPair| p.enabled && path_rank(&p.path) <= max.rank;
    let within = if r.max_path.is_some() {
        format!(" at {} or closer", max.name)
    } else {
        String::new()
    };
    let mut out = Vec::new();
    if node.pci.get().is_none() {
        return vec![cannot(
            ID,
            "list the gpus",
            node.pci.source(),
            node.pci.reason().unwrap_or("?"),
        )];
    }
    if r.every_gpu == Some(true) {
        let gpus = derive::gpus(node);
        if gpus.is_empty() {
            out.push(Finding::new(
                ID,
                Status::Skip,
                "node",
                "no nvidia gpu: no gpu to pair (see policy.gpu)",
            ));
        }
        let mut bad = 0;
        for g in &gpus {
            let mine: Vec<&GdrPair> = pairs.iter().filter(|p| p.gpu == g.bdf).collect();
            if mine.iter().any(|p| ok(p)) {
                continue;
            }
            bad += 1;
            let nearest = mine.iter().min_by_key(|p| path_rank(&p.path));
            let why = match nearest {
                Some(p) if p.enabled => format!("nearest nic with gdr is {} at {}", p.nic, p.path),
                Some(p) => format!(
                    "nearest nic {} ({}): {}",
                    p.nic,
                    p.path,
                    if p.reasons.is_empty() {
                        "gdr off".to_string()
                    } else {
                        p.reasons.join("; ")
                    }
                ),
                None => "no rdma nic to pair with".into(),
            };
            out.push(Finding::new(ID, Status::Fail, &g.bdf, format!("no nic with gpudirect rdma{within}: {why}"))
                .expected("gdr verdicts (gdrdoctor topo)", why.clone(), cx.want(format!("a gdr nic{within}"), "gdr.every_gpu"))
                .fix("`gdrdoctor topo` shows the pair matrix and why each pair has no gdr; see `gdrdoctor explain gdr.gpu`"));
        }
        if bad == 0 && !gpus.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "every gpu ({}) has a nic with gpudirect rdma{within}",
                        gpus.len()
                    ),
                )
                .expected(
                    "gdr verdicts (gdrdoctor topo)",
                    format!("{} of {} gpus", gpus.len(), gpus.len()),
                    cx.want(format!("every gpu{within}"), "gdr.every_gpu"),
                ),
            );
        }
    }
    if let Some(n) = r.min_pairs {
        let have = pairs.iter().filter(|p| ok(p)).count();
        let f = if have >= n as usize {
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!(
                    "{have} gpu x nic pairs with gpudirect rdma{within} (policy: at least {n})"
                ),
            )
        } else {
            Finding::new(ID, Status::Fail, "node", format!("{have} gpu x nic pairs with gpudirect rdma{within}, the policy expects at least {n}"))
                .fix("`gdrdoctor topo` shows which pairs lost gdr and why; see `gdrdoctor explain gdr.gpu`")
        };
        out.push(f.expected(
            "gdr verdicts (gdrdoctor topo)",
            format!("{have} of {} pairs", pairs.len()),
            cx.want(format!(">= {n}"), "gdr.min_pairs"),
        ));
    }
    out
}

fn kernel(node: &Node, r: &KernelRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.kernel";
    let Some(rel) = node.kernel_release.get() else {
        return vec![cannot(
            ID,
            "read the kernel release",
            node.kernel_release.source(),
            node.kernel_release.reason().unwrap_or("?"),
        )];
    };
    let src = node.kernel_release.source();
    let mut out = Vec::new();
    let fix = "boot the site's kernel (the default entry in /etc/default/grub, then `update-grub` or `grub2-mkconfig`), or change kernel.release in the policy if the fleet moved";
    if let Some(want) = &r.release {
        if rel != want.as_str() {
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!("kernel {rel}, the policy expects {}", want.as_str()),
                )
                .expected(src, rel, cx.want(want.as_str(), "kernel.release"))
                .fix(fix),
            );
        }
    }
    if let Some(min) = &r.min_release {
        match Version::parse(rel) {
            Some(v) if v.cmp_parts(min).is_lt() => out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!(
                        "kernel {rel} is older than the policy's minimum {}",
                        min.text
                    ),
                )
                .expected(
                    src,
                    rel,
                    cx.want(format!(">= {}", min.text), "kernel.min_release"),
                )
                .fix(fix),
            ),
            Some(_) => {}
            None => out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    "node",
                    format!("kernel release `{rel}` has no numeric parts to compare"),
                )
                .evidence(src, rel),
            ),
        }
    }
    if out.is_empty() {
        out.push(
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("kernel {rel}, as the policy expects"),
            )
            .expected(src, rel, {
                let mut want = Vec::new();
                if let Some(r) = &r.release {
                    want.push(r.as_str().to_string());
                }
                if let Some(m) = &r.min_release {
                    want.push(format!(">= {}", m.text));
                }
                cx.want(want.join(", "), "kernel")
            }),
        );
    }
    out
}

fn cmdline(node: &Node, r: &CmdlineRule, cx: &Context) -> Vec<Finding> {
    const ID: &str = "policy.cmdline";
    let Some(args) = node.cmdline.get() else {
        return vec![cannot(
            ID,
            "read the kernel command line",
            node.cmdline.source(),
            node.cmdline.reason().unwrap_or("?"),
        )];
    };
    let key_of = |a: &str| {
        a.split_once('=')
            .map(|(k, _)| k.to_string())
            .unwrap_or_else(|| a.to_string())
    };
    let ignored = |k: &str| r.ignore.iter().any(|i| glob(i.as_str(), k));
    let mut problems = Vec::new();
    let required: Vec<&CmdlineParam> = r.require.iter().filter(|p| !ignored(p.key())).collect();
    for p in &required {
        if args.contains(&p.0) {
            continue;
        }
        let same_key: Vec<&String> = args.iter().filter(|a| key_of(a) == p.key()).collect();
        if same_key.is_empty() {
            problems.push(format!("missing {}", p.0));
        } else {
            let have: Vec<&str> = same_key.iter().map(|s| s.as_str()).collect();
            problems.push(format!("{} instead of {}", have.join(" "), p.0));
        }
    }
    for p in &r.forbid {
        let hits: Vec<&String> = args
            .iter()
            .filter(|a| {
                if p.has_value() {
                    **a == p.0
                } else {
                    key_of(a) == p.0
                }
            })
            .collect();
        for h in hits {
            problems.push(format!("forbidden {h}"));
        }
    }
    if !r.allow_extra {
        let req_keys: BTreeSet<&str> = required.iter().map(|p| p.key()).collect();
        for a in args {
            let k = key_of(a);
            if ignored(&k) || required.iter().any(|p| p.0 == *a) || req_keys.contains(k.as_str()) {
                continue;
            }
            if r.forbid
                .iter()
                .any(|p| if p.has_value() { p.0 == *a } else { p.0 == k })
            {
                continue;
            }
            problems.push(format!("unexpected {a}"));
        }
    }
    let mut want = Vec::new();
    if !required.is_empty() {
        want.push(format!(
            "require {}",
            required
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !r.forbid.is_empty() {
        want.push(format!(
            "forbid {}",
            r.forbid
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !r.allow_extra {
        want.push("nothing else".into());
    }
    if !r.ignore.is_empty() {
        want.push(format!(
            "ignoring {}",
            r.ignore
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let f = if problems.is_empty() {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            format!(
                "the kernel command line matches the policy ({} required parameter(s) present)",
                required.len()
            ),
        )
    } else {
        Finding::new(ID, Status::Fail, "node", format!("the kernel command line differs from the policy: {}", problems.join(", ")))
            .fix("edit GRUB_CMDLINE_LINUX in /etc/default/grub (or the node image's boot configuration), run `update-grub` or `grub2-mkconfig -o /boot/grub2/grub.cfg`, and reboot; change kernel.cmdline in the policy if the difference is intended")
    };
    vec![f.expected(
        node.cmdline.source(),
        args.join(" "),
        cx.want(want.join("; "), "kernel.cmdline"),
    )]
}

/// Severity overrides: the most specific entry (id before category) decides.
fn severity(findings: &mut [Finding], p: &Policy, cx: &Context) {
    if p.severity.is_empty() {
        return;
    }
    for f in findings.iter_mut() {
        if !matches!(f.status, Status::Warn | Status::Fail) {
            continue;
        }
        let Some((r, sev)) = p
            .severity
            .iter()
            .filter(|(r, _)| r.matches(&f.id))
            .max_by_key(|(r, _)| r.0.len())
        else {
            continue;
        };
        let new = sev.status();
        if new != f.status {
            f.evidence.push(Evidence {
                source: cx.path.clone(),
                observed: format!("{} made {new} by severity.\"{}\"", f.status, r.0),
                expected: None,
            });
            f.status = new;
        }
    }
}

fn waivers(findings: &mut [Finding], p: &Policy, cx: &Context, host: Option<&str>) -> Vec<Finding> {
    const ID: &str = "policy.waiver";
    let mut used = vec![0usize; p.waivers.len()];
    for f in findings.iter_mut() {
        if !matches!(f.status, Status::Warn | Status::Fail | Status::Error) || f.id == ID {
            continue;
        }
        for (i, w) in p.waivers.iter().enumerate() {
            if cx.today > w.expires || !w.check.matches(&f.id) {
                continue;
            }
            if w.subject
                .as_ref()
                .is_some_and(|s| !glob(s.as_str(), &f.subject))
            {
                continue;
            }
            if !w.hosts.is_empty()
                && !host.is_some_and(|h| w.hosts.iter().any(|p| glob(p.as_str(), h)))
            {
                continue;
            }
            used[i] += 1;
            f.evidence.push(Evidence {
                source: format!("{}: waiver {}", cx.path, i + 1),
                observed: format!("{} waived: {}", f.status, w.reason.as_str()),
                expected: Some(format!("expires {}", w.expires)),
            });
            f.message = format!("waived until {}: {}", w.expires, f.message);
            f.status = Status::Skip;
            break;
        }
    }
    p.waivers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let what = match &w.subject {
                Some(s) => format!("{} on {}", w.check.0, s.as_str()),
                None => w.check.0.clone(),
            };
            let src = format!("{}: waiver {}", cx.path, i + 1);
            if cx.today > w.expires {
                Finding::new(
                    ID,
                    Status::Warn,
                    "node",
                    format!(
                        "the waiver for {what} expired on {}; its findings count again",
                        w.expires
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires >= {}", cx.today))
                .fix("fix what the waiver covered, or renew it with a new reason and expiry date")
            } else if used[i] > 0 {
                Finding::new(
                    ID,
                    Status::Pass,
                    "node",
                    format!(
                        "waiver for {what} until {}: {} finding(s) waived ({})",
                        w.expires,
                        used[i],
                        w.reason.as_str()
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires {}", w.expires))
            } else {
                Finding::new(
                    ID,
                    Status::Skip,
                    "node",
                    format!(
                        "waiver for {what} (until {}) matches no finding on this node",
                        w.expires
                    ),
                )
                .expected(src, w.reason.as_str(), format!("expires {}", w.expires))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_parse_as_sysfs_writes_them() {
        assert_eq!(
            parse_rate("400 Gb/sec (4X NDR)"),
            (Some(400.0), Some("4X".into()))
        );
        assert_eq!(
            parse_rate("2.5 Gb/sec (1X SDR)"),
            (Some(2.5), Some("1X".into()))
        );
        assert_eq!(
            parse_rate("200 Gb/sec (2X NDR)"),
            (Some(200.0), Some("2X".into()))
        );
        assert_eq!(parse_rate("garbage"), (None, None));
        assert_eq!(parse_rate(""), (None, None));
    }

    fn full_policy() -> Policy {
        let p = |s: &str| Version::parse(s).unwrap();
        Policy {
            gpu: Some(GpuRule {
                count: Some(8),
                model: Some(NonEmpty("H200".into())),
                device_id: None,
            }),
            rdma: Some(RdmaRule {
                count: Some(8),
                ports: OneOrMany(vec![PortRule {
                    state: Some(PortState::Active),
                    rate_gbps: Some(Rate(400.0)),
                    ..Default::default()
                }]),
                firmware: Some(FirmwareRule {
                    version: Some(p("28.43.1014")),
                    all_equal: Some(true),
                    ..Default::default()
                }),
            }),
            pcie: Some(PcieRule {
                gpu: Some(LinkRule {
                    speed_gts: Some(LinkSpeed(32.0)),
                    width: Some(LinkWidth(16)),
                }),
                ..Default::default()
            }),
            driver: Some(DriverRule {
                flavor: Some(DriverFlavor::Open),
                version: None,
                min_version: Some(p("570")),
            }),
            peer_memory: Some(PeerMemoryRule {
                mechanism: Mechanism::Either,
            }),
            iommu: Some(IommuRule {
                mode: OneOrMany(vec![IommuModeName::Off]),
            }),
            gdr: Some(GdrRule {
                every_gpu: Some(true),
                max_path: PathName::parse("PXB"),
                min_pairs: Some(8),
            }),
            kernel: Some(KernelRule {
                release: Some(NonEmpty("6.8.0".into())),
                min_release: None,
                cmdline: Some(CmdlineRule {
                    require: vec![CmdlineParam("iommu=pt".into())],
                    forbid: vec![],
                    ignore: vec![],
                    allow_extra: false,
                }),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_evidence_is_never_a_pass() {
        // Every fact unreadable: every rule says error (or fails what it can prove), none passes.
        let mut node = crate::testing::empty_node();
        node.pci = Fact::absent("/sys/bus/pci/devices", "permission denied");
        node.rdma = Fact::absent("/sys/class/infiniband", "permission denied");
        let cx = Context {
            path: "p.toml".into(),
            today: Date::from_unix(0),
        };
        let f = expectations(&node, &[], &full_policy(), &cx);
        let ids: BTreeSet<&str> = f.iter().map(|f| f.id.as_str()).collect();
        assert!(ids.len() >= 10, "{ids:?}");
        for x in &f {
            assert_ne!(x.status, Status::Pass, "{x:#?}");
            assert!(
                !x.evidence.is_empty() || x.status == Status::Error,
                "{x:#?}"
            );
        }
        assert!(f
            .iter()
            .any(|x| x.id == "policy.gpu" && x.status == Status::Error));
        assert!(f
            .iter()
            .any(|x| x.id == "policy.cmdline" && x.status == Status::Error));
    }

    #[test]
    fn an_empty_policy_adds_nothing_and_changes_nothing() {
        let node = crate::testing::empty_node();
        let mut r = crate::build_report(&node, &crate::RunOptions::default());
        let before = r.clone();
        let cx = Context {
            path: "p.toml".into(),
            today: Date::from_unix(0),
        };
        apply(
            &mut r,
            &node,
            &Policy::default(),
            &cx,
            &crate::RunOptions::default(),
        );
        assert_eq!(r, before);
    }

    proptest! {
        #[test]
        fn parse_rate_never_panics(s in "\\PC{0,40}") {
            let _ = parse_rate(&s);
        }
    }
}
