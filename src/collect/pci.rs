//! PCI functions: `/sys/bus/pci/devices` (or a walk of `/sys/devices/pci*` in captures without
//! it), with config space and the other attributes for GPUs, NICs, NVSwitches and the bridges
//! above them.

use super::util::*;
use crate::source::reader::Root;
use crate::source::reader::{EntryKind, ErrorKind};
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;
use gdrdoctor_checks::pci::{attrs, config};

pub(super) fn collect(root: &Root) -> Fact<Vec<PciDevice>> {
    const BUS: &str = "/sys/bus/pci/devices";
    let mut paths: Vec<String> = Vec::new();
    let listed = root.read_dir(BUS);
    match &listed {
        Ok(entries) => {
            for e in entries.iter().filter(|e| parse::is_bdf(&e.name)) {
                match root.canonical(&format!("{BUS}/{}", e.name)) {
                    Ok(p) => paths.push(p),
                    Err(_) => paths.push(format!("{BUS}/{}", e.name)),
                }
            }
        }
        Err(e) if !e.is_not_found() => return Fact::absent(BUS, e.reason()),
        Err(_) => {}
    }
    let mut source = BUS.to_string();
    if paths.is_empty() {
        match root.read_dir("/sys/devices") {
            Ok(tops) => {
                for t in tops
                    .iter()
                    .filter(|t| t.name.starts_with("pci") && t.kind == EntryKind::Dir)
                {
                    walk_pci(root, &format!("/sys/devices/{}", t.name), &mut paths, 0);
                }
                source = "/sys/devices/pci*".into();
                // A capture that holds neither the bus listing nor a PCI root is one that left
                // the bus out, not a node without one (a gdrdoctor snapshot or the live node is
                // complete: there, no bus is no bus).
                if paths.is_empty() && listed.is_err() && !root.is_complete() {
                    return Fact::absent(
                        BUS,
                        "not in this capture (neither /sys/bus/pci/devices nor /sys/devices/pci*)",
                    );
                }
            }
            Err(e) => {
                return match listed {
                    Err(le) => Fact::absent(BUS, le.reason()),
                    Ok(_) => Fact::absent("/sys/devices", e.reason()),
                }
            }
        }
    }
    // Config space and the other attributes are read only for GPUs, NICs, NVSwitches and the
    // bridges above them: config reads are slow (each dword traps to the hypervisor in a VM) and
    // nothing else changes a GDR decision.
    // Class and vendor of every function, read once (they decide what else is read).
    let ids: Vec<(Fact<u32>, Fact<u16>)> = paths
        .iter()
        .map(|p| {
            (
                parsed(root, &format!("{p}/class"), parse::hex_u32),
                parsed(root, &format!("{p}/vendor"), parse::hex_u16),
            )
        })
        .collect();
    let mut relevant = std::collections::BTreeSet::new();
    for (p, (class, vendor)) in paths.iter().zip(&ids) {
        let (class, vendor) = (
            class.get().copied().unwrap_or(0),
            vendor.get().copied().unwrap_or(0),
        );
        if is_relevant(class, vendor) {
            relevant.extend(
                p.split('/')
                    .filter(|c| parse::is_bdf(c))
                    .map(str::to_lowercase),
            );
        }
    }
    let one = |(p, (class, vendor)): (&String, (Fact<u32>, Fact<u16>))| {
        let bdf = p.rsplit('/').next().unwrap_or_default().to_lowercase();
        pci_device(root, p, relevant.contains(&bdf), class, vendor)
    };
    // The relevant functions read some twenty files each (config space among them, where every
    // dword traps to the hypervisor in a VM): spread them over a few threads.
    let work: Vec<_> = paths.iter().zip(ids).collect();
    let threads = gdrdoctor_checks::cpus().clamp(1, 4);
    let mut devs: Vec<PciDevice> = if threads > 1 && relevant.len() >= 8 {
        let chunk = work.len().div_ceil(threads);
        let mut parts: Vec<Vec<_>> = Vec::new();
        let mut it = work.into_iter();
        loop {
            let part: Vec<_> = it.by_ref().take(chunk).collect();
            if part.is_empty() {
                break;
            }
            parts.push(part);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .into_iter()
                .map(|part| s.spawn(|| part.into_iter().map(one).collect::<Vec<_>>()))
                .collect();
            let mut out = Vec::new();
            for h in handles {
                match h.join() {
                    Ok(v) => out.extend(v),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            out
        })
    } else {
        work.into_iter().map(one).collect()
    };
    if crate::sys::trace::enabled() {
        let (n, bytes, reads, ns) = root.config_stats();
        crate::sys::trace::record_summed(
            "collect.config-space",
            ns,
            format!("{n} functions, {bytes} bytes in {reads} reads (time summed over threads)"),
        );
    }
    devs.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    devs.dedup_by(|a, b| a.bdf == b.bdf);
    Fact::known(devs, source)
}

fn walk_pci(root: &Root, dir: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 32 {
        return;
    }
    let Ok(entries) = root.read_dir(dir) else {
        return;
    };
    for e in entries
        .into_iter()
        .filter(|e| e.kind == EntryKind::Dir && parse::is_bdf(&e.name))
    {
        let p = crate::source::reader::child(dir, &e.name);
        out.push(p.clone());
        walk_pci(root, &p, out, depth + 1);
    }
}

fn not_read<T>(path: &str) -> Fact<T> {
    Fact::absent(path, "not read: not a GPU, NIC or a bridge above one")
}

/// GPUs (display class), network controllers (Ethernet, InfiniBand), NVSwitches and accelerators.
pub fn is_relevant(class: u32, vendor: u16) -> bool {
    let base = class >> 16;
    base == 0x03 || base == 0x02 || base == 0x12 || (vendor == 0x10de && (class >> 8) == 0x0680)
}

fn pci_device(
    root: &Root,
    path: &str,
    full: bool,
    class: Fact<u32>,
    vendor_id: Fact<u16>,
) -> PciDevice {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let bdf = comps.last().map(|c| c.to_lowercase()).unwrap_or_default();
    let bdfs: Vec<&&str> = comps.iter().filter(|c| parse::is_bdf(c)).collect();
    let parent = if bdfs.len() >= 2 {
        Some(bdfs[bdfs.len() - 2].to_lowercase())
    } else {
        None
    };
    let host_bridge = comps
        .iter()
        .find(|c| c.starts_with("pci"))
        .map(|c| c.to_string())
        .unwrap_or_default();
    let attr = |name: &str| crate::source::reader::child(path, name);
    let hex16 = |name: &str| parsed(root, &attr(name), parse::hex_u16);
    let link_name = |name: &str| -> Fact<Option<String>> {
        let p = attr(name);
        match root.read_link(&p) {
            // A link that resolves to itself (`driver -> driver`) names no driver: its target's
            // last component is the link's own name, not a binding.
            Ok(_) if matches!(root.canonical(&p), Err(e) if e.kind == ErrorKind::Loop) => {
                Fact::absent(
                    p,
                    "symlink loop: the link resolves to itself, naming nothing",
                )
            }
            Ok(t) => Fact::known(Some(basename(&t)), p),
            Err(e) if e.is_not_found() && root.is_complete() => Fact::known(None, p),
            Err(e) if e.is_not_found() => Fact::absent(p, NOT_CAPTURED),
            // Captures that flattened links into files (content = target) still tell us.
            Err(e) => match root.read_trimmed(&p) {
                Ok(t) if t.contains('/') => Fact::known(Some(basename(&t)), p),
                _ => Fact::absent(p, e.reason()),
            },
        }
    };
    if !full {
        return PciDevice {
            bdf,
            sysfs_path: path.to_string(),
            parent,
            host_bridge,
            vendor_id,
            device_id: hex16("device"),
            subsystem_vendor_id: not_read(&attr("subsystem_vendor")),
            subsystem_device_id: not_read(&attr("subsystem_device")),
            class,
            numa_node: not_read(&attr("numa_node")),
            local_cpulist: not_read(&attr("local_cpulist")),
            cur_link_speed: not_read(&attr("current_link_speed")),
            cur_link_width: not_read(&attr("current_link_width")),
            max_link_speed: not_read(&attr("max_link_speed")),
            max_link_width: not_read(&attr("max_link_width")),
            resources: not_read(&attr("resource")),
            driver: not_read(&attr("driver")),
            iommu_group: not_read(&attr("iommu_group")),
            config: not_read(&attr("config")),
            is_virtfn: false,
        };
    }
    // The identity and link attributes the config space holds are taken from it (read anyway):
    // nine files fewer per function; the sysfs files when it cannot answer (`pci::attrs`).
    let config = fact(&attr("config"), root.read_config(&attr("config")));
    let derived = config
        .get()
        .map(|b| attrs::from_config(&config::decode(b), vendor_id.get().copied()))
        .unwrap_or_default();
    let reg = |what: &str| format!("{}/config [{what}]", path);
    let text = |name: &str| fact(&attr(name), root.read_trimmed(&attr(name)));
    let number = |name: &str| parsed(root, &attr(name), |s| s.trim().parse().ok());
    let (subsystem_vendor_id, subsystem_device_id) = match derived.subsystem {
        Some((v, d)) => (
            Fact::known(v, reg("subsystem vendor")),
            Fact::known(d, reg("subsystem id")),
        ),
        None => (hex16("subsystem_vendor"), hex16("subsystem_device")),
    };
    PciDevice {
        bdf,
        sysfs_path: path.to_string(),
        parent,
        host_bridge,
        vendor_id,
        device_id: derived
            .device
            .map(|v| Fact::known(v, reg("device id")))
            .unwrap_or_else(|| hex16("device")),
        subsystem_vendor_id,
        subsystem_device_id,
        class,
        numa_node: parsed(root, &attr("numa_node"), |s| s.trim().parse().ok()),
        local_cpulist: fact(
            &attr("local_cpulist"),
            root.read_trimmed(&attr("local_cpulist")),
        ),
        cur_link_speed: derived
            .cur_link_speed
            .map(|v| Fact::known(v, reg("LnkSta")))
            .unwrap_or_else(|| text("current_link_speed")),
        cur_link_width: derived
            .cur_link_width
            .map(|v| Fact::known(v, reg("LnkSta")))
            .unwrap_or_else(|| number("current_link_width")),
        max_link_speed: derived
            .max_link_speed
            .map(|v| Fact::known(v, reg("LnkCap2, LnkCap")))
            .unwrap_or_else(|| text("max_link_speed")),
        max_link_width: derived
            .max_link_width
            .map(|v| Fact::known(v, reg("LnkCap")))
            .unwrap_or_else(|| number("max_link_width")),
        resources: match root.read_text(&attr("resource")) {
            Ok(t) => match parse::resource_file(&t) {
                Ok(r) => Fact::known(r, attr("resource")),
                Err(e) => Fact::absent(attr("resource"), e),
            },
            Err(e) => Fact::absent(attr("resource"), e.reason()),
        },
        driver: link_name("driver"),
        iommu_group: link_name("iommu_group"),
        config,
        is_virtfn: root.exists(&attr("physfn")).unwrap_or(false),
    }
}
