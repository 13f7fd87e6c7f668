//! `gdrdoctor policy init`: a commented policy that the given (known-good) node passes, so that a
//! site starts from its golden node and deletes what it does not want to enforce.

use super::eval::{idle_link, parse_rate, pcie_classes};
use super::types::{Date, PathName};
use crate::derive;
use crate::model::{Fact, Node};
use crate::names;
use crate::parse;
use crate::report::GdrPair;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            '\r' => o.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(o, "\\u{:04X}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", items.join(", "))
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// Text from the node inside a TOML comment: a comment ends at the line break, so a line break
/// (or any control character) in a hostname, a firmware string or a reason would start a line of
/// TOML the node wrote (a hostile snapshot could plant keys). Control characters are written
/// visibly (`\n`, `\u{7f}`), as Rust escapes them.
pub fn toml_comment(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// Command-line keys that differ from node to node: ignored by the written policy.
pub const PER_NODE_CMDLINE_KEYS: &[&str] = &["root", "resume", "rd.luks.uuid", "rd.lvm.lv"];

/// Write the policy. `today` and the node's hostname go into the header comment only.
pub fn render(node: &Node, gdr: &[GdrPair], today: Date) -> String {
    let mut o = String::new();
    let host = node
        .hostname
        .get()
        .cloned()
        .map(|h| toml_comment(&h))
        .unwrap_or_else(|| "an unnamed node".into());
    let _ = writeln!(
        o,
        "# gdrdoctor site policy, written by `gdrdoctor policy init` from {host} ({}) on {today}.",
        toml_comment(&node.root.to_string())
    );
    let _ = writeln!(o, "# `gdrdoctor check --policy FILE` judges a node against it (live runs read {} by default).", super::types::DEFAULT_PATH);
    o.push_str("# Every value below is what the golden node shows; every section is optional: delete what your\n");
    o.push_str("# site does not want to enforce. `gdrdoctor explain policy.gpu` (and the other policy.* ids)\n");
    o.push_str(
        "# explains each rule; `gdrdoctor policy validate FILE` checks a file without a node.\n",
    );
    let _ = writeln!(o, "schema = {}", toml_str(super::types::POLICY_SCHEMA));

    gpu_section(&mut o, node);
    rdma_section(&mut o, node);
    pcie_section(&mut o, node);
    driver_section(&mut o, node);
    peer_memory_section(&mut o, node);
    iommu_section(&mut o, node);
    gdr_section(&mut o, node, gdr);
    kernel_section(&mut o, node);

    o.push_str(
        "\n# Severity overrides: the status a check's non-passing findings get (warn or fail).\n",
    );
    o.push_str("# [severity]\n# \"topo.nic-numa\" = \"fail\"\n# \"pcie.mrrs\" = \"warn\"\n");
    o.push_str("\n# Waivers: a finding accepted for a while, with the reason; from the day after `expires` it counts again.\n");
    o.push_str("# [[waiver]]\n# check = \"pcie.acs-redirect\"\n# subject = \"0000:18:00.0\"   # optional; * and ? allowed\n# hosts = [\"gpu-017\"]         # optional\n# reason = \"vendor case 12345: bios fix due\"\n# expires = 2026-06-30\n");
    o
}

/// `[gpu]`: the GPU count, model and device id.
fn gpu_section(o: &mut String, node: &Node) {
    // GPUs.
    o.push_str("\n[gpu]\n");
    match node.pci.get() {
        Some(_) => {
            let gpus = derive::gpus(node);
            let _ = writeln!(o, "count = {}", gpus.len());
            let models: BTreeMap<String, usize> = gpus.iter().fold(BTreeMap::new(), |mut m, g| {
                *m.entry(names::device_name(g)).or_insert(0) += 1;
                m
            });
            let ids: BTreeMap<(u16, u16), usize> = gpus.iter().fold(BTreeMap::new(), |mut m, g| {
                if let (Some(&v), Some(&d)) = (g.vendor_id.get(), g.device_id.get()) {
                    *m.entry((v, d)).or_insert(0) += 1;
                }
                m
            });
            if models.len() == 1 {
                if let Some((name, _)) = models.iter().next() {
                    let model = name
                        .split_once('[')
                        .and_then(|(_, r)| r.split_once(']'))
                        .map(|(m, _)| m.to_string())
                        .unwrap_or_else(|| name.clone());
                    let _ = writeln!(
                        o,
                        "model = {}  # a part of every gpu's name: {name}",
                        toml_str(&model)
                    );
                }
            } else if models.len() > 1 {
                let _ = writeln!(
                    o,
                    "# model: the golden node mixes gpu models ({}); not enforced",
                    toml_comment(&models.keys().cloned().collect::<Vec<_>>().join(", "))
                );
            }
            if ids.len() == 1 {
                if let Some(((v, d), _)) = ids.iter().next() {
                    let _ = writeln!(o, "device_id = \"{v:04x}:{d:04x}\"");
                }
            }
        }
        None => {
            let _ = writeln!(
                o,
                "# count: the golden node's pci devices could not be read ({})",
                toml_comment(node.pci.reason().unwrap_or("?"))
            );
        }
    }
}

/// `[rdma]`: the RDMA devices, their ports and firmware.
fn rdma_section(o: &mut String, node: &Node) {
    // RDMA devices, ports and firmware.
    o.push_str("\n[rdma]\n");
    match node.rdma.get() {
        None => {
            let _ = writeln!(
                o,
                "# count: the golden node's rdma devices could not be read ({})",
                toml_comment(node.rdma.reason().unwrap_or("?"))
            );
        }
        Some(devs) => {
            let _ = writeln!(o, "count = {}", devs.len());
            // Ports grouped by what they show; ports that are not ACTIVE stay out of the policy.
            type Shape = (String, Option<String>, Option<String>, Option<String>);
            let mut groups: BTreeMap<Shape, Vec<String>> = BTreeMap::new();
            let mut left_out = Vec::new();
            let mut total = 0usize;
            for d in devs {
                let Fact::Known { value: ports, .. } = &d.ports else {
                    left_out.push(format!("{} (ports unreadable)", d.name));
                    continue;
                };
                for p in ports {
                    total += 1;
                    let subject = format!("{}/{}", d.name, p.port);
                    match p.state_name() {
                        Some("ACTIVE") => {}
                        Some(s) => {
                            left_out.push(format!("{subject} ({s})"));
                            continue;
                        }
                        None => {
                            left_out.push(format!("{subject} (state unreadable)"));
                            continue;
                        }
                    }
                    let (gbps, width) = p.rate.get().map(|r| parse_rate(r)).unwrap_or((None, None));
                    let shape = (
                        "ACTIVE".to_string(),
                        p.link_layer.get().cloned(),
                        gbps.map(number),
                        width,
                    );
                    groups.entry(shape).or_default().push(subject);
                }
            }
            let every = groups.len() == 1 && left_out.is_empty();
            for ((state, ll, rate, width), subjects) in &groups {
                o.push_str("\n[[rdma.ports]]\n");
                if every {
                    let _ = writeln!(o, "# every port ({total})");
                } else {
                    let _ = writeln!(o, "devices = {}", toml_list(subjects));
                }
                let _ = writeln!(o, "state = {}", toml_str(state));
                if let Some(l) = ll {
                    let _ = writeln!(o, "link_layer = {}", toml_str(l));
                }
                if let Some(r) = rate {
                    let _ = writeln!(o, "rate_gbps = {r}");
                }
                if let Some(w) = width {
                    let _ = writeln!(o, "width = {}", toml_str(w));
                }
            }
            if !left_out.is_empty() {
                let _ = writeln!(
                    o,
                    "# not in the policy (not ACTIVE on the golden node): {}",
                    toml_comment(&left_out.join(", "))
                );
            }
            let fws: Vec<&String> = devs.iter().filter_map(|d| d.fw_ver.get()).collect();
            let mut distinct: Vec<&String> = fws.clone();
            distinct.sort();
            distinct.dedup();
            if !fws.is_empty() {
                o.push_str("\n[rdma.firmware]\n");
                if distinct.len() == 1 {
                    let _ = writeln!(
                        o,
                        "version = {}       # or: min_version = {}",
                        toml_str(distinct[0]),
                        toml_str(distinct[0])
                    );
                    o.push_str("all_equal = true\n");
                } else {
                    let _ = writeln!(
                        o,
                        "# the golden node runs several firmware versions: {}",
                        toml_comment(
                            &distinct
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    );
                    let _ = writeln!(o, "all_equal = false");
                }
            }
        }
    }
}

/// `[pcie]`: the slowest and narrowest link per device class.
fn pcie_section(o: &mut String, node: &Node) {
    // PCIe links per class: the slowest and narrowest link the golden node shows.
    if node.pci.get().is_some() {
        for (class, devs) in pcie_classes(node) {
            // An idle GPU's link (and the port above it) at a lower speed to save power is
            // written at the speed the link can do: the node's idle speed would pass a link
            // that trained low.
            let idle: Vec<(String, f64, f64)> = devs
                .iter()
                .filter_map(|d| {
                    idle_link(node, class, d).map(|i| (d.bdf.clone(), i.current, i.capability))
                })
                .collect();
            let speeds: Vec<f64> = devs
                .iter()
                .filter_map(|d| match idle.iter().find(|(b, ..)| *b == d.bdf) {
                    Some((_, _, cap)) => Some(*cap),
                    None => d
                        .cur_link_speed
                        .get()
                        .and_then(|s| parse::link_speed_gts(s)),
                })
                .collect();
            let widths: Vec<u32> = devs
                .iter()
                .filter_map(|d| d.cur_link_width.get().copied())
                .collect();
            if devs.is_empty() || speeds.len() != devs.len() || widths.len() != devs.len() {
                continue;
            }
            let s = speeds.iter().cloned().fold(f64::INFINITY, f64::min);
            let w = widths.iter().copied().min().unwrap_or(0);
            let _ = writeln!(
                o,
                "\n[pcie.{class}]  # {} link(s) on the golden node",
                devs.len()
            );
            if [2.5, 5.0, 8.0, 16.0, 32.0, 64.0].contains(&s) {
                let _ = writeln!(o, "speed_gts = {}", number(s));
            }
            if [1, 2, 4, 8, 12, 16, 32].contains(&w) {
                let _ = writeln!(o, "width = {w}");
            }
            if !idle.is_empty() {
                let mut at: Vec<String> = Vec::new();
                for (_, cur, cap) in &idle {
                    let t = format!("{} GT/s of {} GT/s", number(*cur), number(*cap));
                    if !at.contains(&t) {
                        at.push(t);
                    }
                }
                let _ = writeln!(
                    o,
                    "# note: {} link(s) {} ran at a lower speed to save power ({}): speed_gts is what those links can do, not the idle speed: {}",
                    idle.len(),
                    if class == "gpu" {
                        "of idle gpus"
                    } else {
                        "of the ports right above idle gpus"
                    },
                    at.join(", "),
                    toml_comment(&idle.iter().map(|(b, ..)| b.as_str()).collect::<Vec<_>>().join(" "))
                );
            }
            let below: Vec<String> = devs
                .iter()
                .filter(|d| !idle.iter().any(|(b, ..)| *b == d.bdf))
                .filter(|d| {
                    let cur = d.cur_link_width.get().copied().unwrap_or(0);
                    let max = d.max_link_width.get().copied().unwrap_or(0);
                    let cs = d
                        .cur_link_speed
                        .get()
                        .and_then(|s| parse::link_speed_gts(s))
                        .unwrap_or(0.0);
                    let ms = d
                        .max_link_speed
                        .get()
                        .and_then(|s| parse::link_speed_gts(s))
                        .unwrap_or(0.0);
                    cur < max || cs < ms
                })
                .map(|d| d.bdf.clone())
                .collect();
            if !below.is_empty() {
                let _ = writeln!(o, "# note: {} run(s) below capability on the golden node; raise the values above if that is a defect", toml_comment(&below.join(" ")));
            }
        }
    }
}

/// `[driver]`: the NVIDIA driver flavor and version.
fn driver_section(o: &mut String, node: &Node) {
    // Driver.
    if let Some((ver, flavor)) = derive::nvidia_driver(node) {
        o.push_str("\n[driver]\n");
        let _ = writeln!(o, "flavor = {}", toml_str(super::types::flavor_str(flavor)));
        let _ = writeln!(
            o,
            "version = {}       # or: min_version = {}",
            toml_str(&ver),
            toml_str(&ver)
        );
    } else {
        o.push_str("\n# [driver]: no nvidia driver version on the golden node\n");
    }
}

/// `[peer_memory]`: the peer-memory mechanism.
fn peer_memory_section(o: &mut String, node: &Node) {
    // Peer memory.
    let pm = derive::peermem_path(node).available == Some(true);
    let db = derive::dmabuf_path(node).available == Some(true);
    let mech = match (pm, db) {
        (true, true) => Some("either"),
        (true, false) => Some("peermem"),
        (false, true) => Some("dma-buf"),
        (false, false) => None,
    };
    match mech {
        Some(m) => {
            let _ = writeln!(o, "\n[peer_memory]\nmechanism = {}  # peermem, dma-buf or either", toml_str(m));
        }
        None => o.push_str("\n# [peer_memory]: neither nvidia_peermem nor dma-buf is available on the golden node\n"),
    }
}

/// `[iommu]`: the IOMMU mode.
fn iommu_section(o: &mut String, node: &Node) {
    // IOMMU.
    let (mode, _) = derive::iommu_mode(node);
    if mode != derive::IommuMode::Unknown {
        let _ = writeln!(
            o,
            "\n[iommu]\nmode = {}  # or a list: [\"off\", \"passthrough\"]",
            toml_str(mode.as_str())
        );
    } else {
        o.push_str("\n# [iommu]: the golden node's iommu mode could not be told\n");
    }
}

/// `[gdr]`: the GPU x NIC pairs with GPUDirect RDMA.
fn gdr_section(o: &mut String, node: &Node, gdr: &[GdrPair]) {
    // GDR pairs.
    let gpus = derive::gpus(node);
    if !gpus.is_empty() && !gdr.is_empty() {
        let rank = |p: &GdrPair| PathName::parse(&p.path).map(|x| x.rank).unwrap_or(u8::MAX);
        let best: Vec<Option<&GdrPair>> = gpus
            .iter()
            .map(|g| {
                gdr.iter()
                    .filter(|p| p.gpu == g.bdf && p.enabled)
                    .min_by_key(|p| rank(p))
            })
            .collect();
        let every = best.iter().all(Option::is_some);
        let worst = best.iter().flatten().max_by_key(|p| rank(p));
        o.push_str("\n[gdr]\n");
        let _ = writeln!(o, "every_gpu = {every}");
        if let Some(w) = worst {
            if let Some(pn) = PathName::parse(&w.path) {
                let _ = writeln!(
                    o,
                    "max_path = {}  # PIX, PXB, PHB, NODE or SYS",
                    toml_str(pn.name)
                );
            }
        }
        // Counted as the evaluation counts them: enabled and within `max_path` (PXN pairs, whose
        // own path is PHB or SYS, are not among the close pairs of a PIX node).
        let limit = worst.map(|w| rank(w)).unwrap_or(u8::MAX);
        let n = gdr.iter().filter(|p| p.enabled && rank(p) <= limit).count();
        let _ = writeln!(
            o,
            "min_pairs = {n}  # gpu x nic pairs with gpudirect rdma on the golden node"
        );
    }
}

/// `[kernel]`: the kernel release and command line.
fn kernel_section(o: &mut String, node: &Node) {
    // Kernel.
    o.push_str("\n[kernel]\n");
    match node.kernel_release.get() {
        Some(r) => {
            let _ = writeln!(
                o,
                "release = {}  # or: min_release = {}",
                toml_str(r),
                toml_str(r)
            );
        }
        None => o.push_str("# release: unreadable on the golden node\n"),
    }
    if let Some(args) = node.cmdline.get() {
        let keep: Vec<String> = args
            .iter()
            .filter(|a| {
                let k = a.split_once('=').map(|(k, _)| k).unwrap_or(a);
                !PER_NODE_CMDLINE_KEYS.contains(&k)
            })
            .cloned()
            .collect();
        o.push_str("\n[kernel.cmdline]\n");
        let _ = writeln!(o, "require = {}", toml_list(&keep));
        o.push_str("# forbid = [\"iommu=off\"]  # a key alone forbids every value\n");
        let ign: Vec<String> = PER_NODE_CMDLINE_KEYS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let _ = writeln!(
            o,
            "ignore = {}  # differ from node to node",
            toml_list(&ign)
        );
        o.push_str("allow_extra = false  # a parameter not listed here fails the node\n");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn comments_carry_no_line_break_from_the_node() {
        assert_eq!(
            toml_comment("fw 1.2\n[gpu]\ncount = 0"),
            "fw 1.2\\n[gpu]\\ncount = 0"
        );
        assert_eq!(toml_comment("a\u{7f}b\tc"), "a\\u{7f}b\\tc");
        assert_eq!(toml_comment("plain"), "plain");
    }

    #[test]
    fn toml_strings_escape() {
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(toml_str("x\u{1}"), "\"x\\u0001\"");
    }

    proptest! {
        #[test]
        fn toml_str_output_has_no_raw_control_or_unescaped_quote(s in "\\PC{0,30}|[\\x00-\\x1f\"\\\\]{0,8}") {
            let t = toml_str(&s);
            let inner = &t[1..t.len() - 1];
            prop_assert!(!inner.chars().any(|c| (c as u32) < 0x20));
            let mut esc = false;
            for c in inner.chars() {
                if esc { esc = false; continue; }
                if c == '\\' { esc = true; continue; }
                prop_assert!(c != '"');
            }
        }
    }
}
