//! Parsers for the text formats of sysfs and procfs files. Pure functions of `&str`: they never
//! panic and return `None`/`Err` on anything they do not recognise (property-tested).

use crate::model::{Flavor, Resource, Rlimit};
use std::collections::BTreeMap;

/// `4: ACTIVE` -> `ACTIVE` (the model's, where the port state is read).
pub use crate::model::rdma::after_colon;

/// `0x10de` (with or without `0x`, surrounding whitespace allowed).
pub fn hex_u64(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.is_empty() || t.len() > 16 {
        return None;
    }
    u64::from_str_radix(t, 16).ok()
}

pub fn hex_u16(s: &str) -> Option<u16> {
    hex_u64(s).and_then(|v| u16::try_from(v).ok())
}

pub fn hex_u32(s: &str) -> Option<u32> {
    hex_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// `32.0 GT/s PCIe`, `8 GT/s`, `2.5 GT/s` -> GT/s. `Unknown` and garbage -> `None`.
pub fn link_speed_gts(s: &str) -> Option<f64> {
    let t = s.trim();
    let num: String = t
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    if num.is_empty() || !t[num.len()..].trim_start().starts_with("GT/s") {
        return None;
    }
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// A PCIe generation for a GT/s value (2.5 -> 1, ..., 64 -> 6).
pub fn pcie_gen(gts: f64) -> Option<u8> {
    const GENS: [(f64, u8); 6] = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ];
    GENS.iter()
        .find(|(g, _)| (g - gts).abs() < 0.01)
        .map(|(_, n)| *n)
}

/// The fewest lines a sysfs `resource` file has: the six BARs and the expansion ROM
/// (`resource_show()` in drivers/pci/pci-sysfs.c prints every resource up to
/// `PCI_BRIDGE_RESOURCES`, more for bridges and SR-IOV).
pub const RESOURCE_MIN_LINES: usize = 7;

/// sysfs `resource`: one `0x<start> 0x<end> 0x<flags>` line per resource. Fewer than
/// [`RESOURCE_MIN_LINES`] lines is a cut-short file, an error.
pub fn resource_file(text: &str) -> Result<Vec<Resource>, String> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(a), Some(b), Some(c), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return Err(format!(
                "line {}: expected three hex numbers, got {line:?}",
                index + 1
            ));
        };
        let (Some(start), Some(end), Some(flags)) = (hex_u64(a), hex_u64(b), hex_u64(c)) else {
            return Err(format!("line {}: not hex: {line:?}", index + 1));
        };
        out.push(Resource {
            index,
            start,
            end,
            flags,
        });
    }
    if out.len() < RESOURCE_MIN_LINES {
        return Err(format!(
            "{} resource lines, a sysfs resource file has at least {RESOURCE_MIN_LINES}: cut short",
            out.len()
        ));
    }
    Ok(out)
}

/// `/proc/driver/nvidia/version` -> (version, flavor).
///
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...`
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023`
pub fn nvidia_version(text: &str) -> Option<(String, Flavor)> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))?;
    let flavor = if line.contains("Open Kernel Module") {
        Flavor::Open
    } else {
        Flavor::Proprietary
    };
    let version = line
        .split_whitespace()
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })?
        .to_string();
    Some((version, flavor))
}

/// The major number of a driver version (`580.159.04` -> 580).
pub fn driver_major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// `Key: value` lines (`/proc/driver/nvidia/params`, `gpus/*/information`).
pub fn colon_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// A whole `Key: value` file as the driver writes it (`/proc/driver/nvidia/params`: one
/// `"%s: %s\n"` per parameter), or why it is not one: a last line without its newline (the
/// file was cut) or a line without a `:` (not the driver's line). A cut file may have lost the
/// very key a check looks for, so its absence there proves nothing. Empty text is an empty map.
pub fn colon_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        let last = text.rsplit('\n').next().unwrap_or(text);
        return Err(format!(
            "the last line {last:?} has no newline: the file was cut"
        ));
    }
    if let Some((n, l)) = text
        .lines()
        .enumerate()
        .find(|(_, l)| !l.trim().is_empty() && !l.contains(':'))
    {
        return Err(format!("line {} {l:?} is not `Key: value`", n + 1));
    }
    Ok(colon_map(text))
}

/// NVIDIA `RegistryDwords` value: `"PeerMappingOverride=1;RMForceFoo=0x2"` -> map.
pub fn registry_dwords(value: &str) -> BTreeMap<String, String> {
    value
        .trim()
        .trim_matches('"')
        .split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// A registry value as a number (`1`, `0x1`).
pub fn registry_number(v: &str) -> Option<u64> {
    let t = v.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// `/proc/cmdline` -> arguments, honouring double quotes (`foo="a b"` is one argument).
pub fn cmdline(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The value of `key=` in a cmdline (last one wins, as in the kernel), quotes removed.
pub fn cmdline_value<'a>(args: &'a [String], key: &str) -> Option<&'a str> {
    args.iter()
        .rev()
        .find_map(|a| a.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .map(|v| v.trim_matches('"'))
}

/// `6.18.0-1-amd64` -> (6, 18, 0).
pub fn kernel_version(release: &str) -> Option<(u32, u32, u32)> {
    let mut nums = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = nums.next()?.parse().ok()?;
    let minor = nums.next()?.parse().ok()?;
    let patch = nums.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// The `Max locked memory` line of `/proc/<pid>/limits`.
pub fn memlock_from_limits(text: &str) -> Option<Rlimit> {
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let rest = line.strip_prefix("Max locked memory")?;
    let mut it = rest.split_whitespace();
    let soft = limit_value(it.next()?)?;
    let hard = limit_value(it.next()?)?;
    Some(Rlimit { soft, hard })
}

fn limit_value(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse().ok().map(Some)
    }
}

/// A PCI address `dddd:bb:dd.f` (lower or upper hex).
pub fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
        && (b'0'..=b'7').contains(&b[11])
}

/// `/proc/cpuinfo` -> CPU vendor.
pub fn cpu_vendor(cpuinfo: &str) -> Option<crate::model::CpuVendor> {
    use crate::model::CpuVendor;
    for line in cpuinfo.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "vendor_id" if v == "GenuineIntel" => return Some(CpuVendor::Intel),
            "vendor_id" if v == "AuthenticAMD" || v == "HygonGenuine" => {
                return Some(CpuVendor::Amd)
            }
            "vendor_id" => return Some(CpuVendor::Other),
            "CPU implementer" => return Some(CpuVendor::Arm),
            "cpu" if v.starts_with("POWER") => return Some(CpuVendor::Power),
            _ => {}
        }
    }
    None
}

/// A GID as sysfs prints it (`fe80:0000:...`); all-zero GIDs are unused table slots.
pub fn gid_is_set(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty() && t.chars().any(|c| c.is_ascii_hexdigit() && c != '0')
}

/// Bytes in human units (`256 GiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{} {}", v.round() as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::CpuVendor;

    #[test]
    fn nvidia_version_open_and_proprietary() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 2025\nGCC version:  gcc version 13.3.0\n";
        assert_eq!(
            nvidia_version(open),
            Some(("580.159.04".into(), Flavor::Open))
        );
        let prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n";
        assert_eq!(
            nvidia_version(prop),
            Some(("535.104.05".into(), Flavor::Proprietary))
        );
        assert_eq!(nvidia_version("garbage"), None);
        assert_eq!(driver_major("580.159.04"), Some(580));
    }

    #[test]
    fn resource_lines() {
        let head = "0x0000104002000000 0x0000104002ffffff 0x0000000000040200\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n0x0000100000000000 0x0000103fffffffff 0x000000000014220c\n";
        let t = format!("{head}{}", "0x0 0x0 0x0\n".repeat(4));
        let r = resource_file(&t).unwrap();
        assert_eq!(r.len(), 7);
        assert_eq!(r[0].size(), 16 << 20);
        assert!(!r[1].is_set());
        assert_eq!(r[2].size(), 256 << 30);
        assert!(r[2].prefetchable() && r[2].mem64());
        assert!(resource_file("0x1 0x2").is_err());
        // Empty or cut short: never "no bars".
        assert!(resource_file("").is_err());
        assert!(resource_file(head).is_err());
    }

    #[test]
    fn cmdline_quotes_and_newline() {
        let a = cmdline("BOOT_IMAGE=/vmlinuz root=UUID=x foo=\"a b\" iommu=pt\n");
        assert_eq!(
            a,
            vec![
                "BOOT_IMAGE=/vmlinuz",
                "root=UUID=x",
                "foo=\"a b\"",
                "iommu=pt"
            ]
        );
        assert_eq!(cmdline_value(&a, "iommu"), Some("pt"));
        assert_eq!(cmdline_value(&a, "foo"), Some("a b"));
        assert_eq!(cmdline_value(&a, "intel_iommu"), None);
    }

    #[test]
    fn speeds_versions_limits() {
        assert_eq!(link_speed_gts("32.0 GT/s PCIe\n"), Some(32.0));
        assert_eq!(link_speed_gts("2.5 GT/s"), Some(2.5));
        assert_eq!(link_speed_gts("Unknown"), None);
        assert_eq!(pcie_gen(16.0), Some(4));
        assert_eq!(kernel_version("6.18.0-1-amd64"), Some((6, 18, 0)));
        assert_eq!(
            kernel_version("3.10.0-1160.15.2.el7.x86_64"),
            Some((3, 10, 0))
        );
        assert_eq!(kernel_version("x"), None);
        let lim = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\n";
        assert_eq!(
            memlock_from_limits(lim),
            Some(Rlimit {
                soft: Some(8388608),
                hard: Some(8388608)
            })
        );
        let unl = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(
            memlock_from_limits(unl),
            Some(Rlimit {
                soft: None,
                hard: None
            })
        );
    }

    #[test]
    fn registry_and_bdf() {
        let m = registry_dwords("\"PeerMappingOverride=1;RmFoo=0x10\"");
        assert_eq!(m.get("PeerMappingOverride").map(String::as_str), Some("1"));
        assert_eq!(registry_number("0x10"), Some(16));
        assert!(is_bdf("0000:00:06.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:00:06.8"));
        assert_eq!(
            cpu_vendor("vendor_id\t: AuthenticAMD\n"),
            Some(CpuVendor::Amd)
        );
        assert_eq!(
            cpu_vendor("CPU implementer\t: 0x41\n"),
            Some(CpuVendor::Arm)
        );
        assert_eq!(human_bytes(256 << 30), "256 GiB");
        assert!(gid_is_set("fe80:0000:0000:0000:0000:0000:0000:0001"));
        assert!(!gid_is_set("0000:0000:0000:0000:0000:0000:0000:0000"));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;
        proptest! {
            #[test]
            fn parsers_never_panic(s in "\\PC{0,300}") {
                let _ = after_colon(&s);
                let _ = hex_u64(&s);
                let _ = link_speed_gts(&s);
                let _ = resource_file(&s);
                let _ = nvidia_version(&s);
                let _ = colon_map(&s);
                let _ = registry_dwords(&s);
                let _ = cmdline(&s);
                let _ = kernel_version(&s);
                let _ = memlock_from_limits(&s);
                let _ = is_bdf(&s);
                let _ = cpu_vendor(&s);
            }

            #[test]
            fn resource_roundtrip(v in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 7..20)) {
                let text: String = v.iter().map(|(a, b, c)| format!("0x{a:016x} 0x{b:016x} 0x{c:016x}\n")).collect();
                let parsed = resource_file(&text).unwrap();
                prop_assert_eq!(parsed.len(), v.len());
                for (r, (a, b, c)) in parsed.iter().zip(v.iter()) {
                    prop_assert_eq!((r.start, r.end, r.flags), (*a, *b, *c));
                }
            }

            #[test]
            fn cmdline_roundtrip(args in proptest::collection::vec("[a-z_.]{1,8}(=[a-z0-9,]{1,6})?", 0..10)) {
                let text = format!("{}\n", args.join(" "));
                prop_assert_eq!(cmdline(&text), args);
            }
        }
    }
}
