//! `policy.rdma`, `policy.ports` and `policy.firmware`: the RDMA devices, their ports and
//! their firmware.

use super::context::{cannot, Context};
use crate::model::{Fact, Node, RdmaDevice};
use crate::policy::glob::glob;
use crate::policy::types::*;
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

pub(super) fn rdma_count(node: &Node, n: u32, cx: &Context) -> Vec<Finding> {
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

pub(super) fn ports(node: &Node, rules: &[PortRule], cx: &Context) -> Vec<Finding> {
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

pub(super) fn firmware(node: &Node, r: &FirmwareRule, cx: &Context) -> Vec<Finding> {
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

    proptest! {
        #[test]
        fn parse_rate_never_panics(s in "\\PC{0,40}") {
            let _ = parse_rate(&s);
        }
    }
}
