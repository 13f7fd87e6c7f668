//! Error counters: PCIe AER statistics of GPUs, NICs and the bridges between them
//! (`aer_dev_{correctable,nonfatal,fatal}`, Linux >= 4.19), and every RDMA port's `counters/`
//! and `hw_counters/`.

use super::reason;
use crate::source::reader::{EntryKind, Root};
use gdrdoctor_checks::counters::parse_aer;
use gdrdoctor_checks::model::{AerStats, Fact, PciDevice, PortCounters, RdmaDevice, DAMAGED};
use std::collections::{BTreeMap, BTreeSet};

const NOT_EXPOSED: &str =
    "not exposed: the device has no AER capability, or the kernel has no AER statistics (Linux < 4.19, CONFIG_PCIEAER off)";

/// GPUs, RDMA NICs (physical functions) and every bridge above them. Without a readable RDMA
/// device list, every network physical function counts as a NIC.
pub fn collect_aer(
    root: &Root,
    pci: &Fact<Vec<PciDevice>>,
    rdma: &Fact<Vec<RdmaDevice>>,
) -> Fact<Vec<AerStats>> {
    let devs = match pci {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::absent(source.clone(), reason.clone()),
    };
    let rdma_bdfs: Option<BTreeSet<String>> = rdma.get().map(|l| {
        l.iter()
            .filter_map(|d| d.pci_bdf.get().cloned().flatten())
            .collect()
    });
    let is_nic = |d: &PciDevice| match &rdma_bdfs {
        Some(set) => set.contains(&d.bdf) && !d.is_virtfn,
        None => d.is_network() && !d.is_virtfn,
    };
    let by_bdf: BTreeMap<&str, &PciDevice> = devs.iter().map(|d| (d.bdf.as_str(), d)).collect();
    let mut roles: BTreeMap<String, &'static str> = BTreeMap::new();
    for d in devs {
        let role = if d.is_nvidia_gpu() {
            "gpu"
        } else if is_nic(d) {
            "nic"
        } else {
            continue;
        };
        roles.insert(d.bdf.clone(), role);
        // The bridges between the device and its root port: the BDFs in its sysfs path.
        for c in d
            .sysfs_path
            .split('/')
            .filter(|c| gdrdoctor_checks::parse::is_bdf(c))
        {
            let c = c.to_lowercase();
            if c != d.bdf {
                roles.entry(c).or_insert("bridge");
            }
        }
    }
    let one = |(bdf, role): &(String, &'static str)| -> Option<AerStats> {
        let d = by_bdf.get(bdf.as_str())?;
        let read = |file: &str| -> Fact<BTreeMap<String, u64>> {
            let p = crate::source::reader::child(&d.sysfs_path, file);
            match root.read_text(&p) {
                Ok(t) => match parse_aer(&t) {
                    Some(m) => Fact::known(m, p),
                    None => Fact::absent(p, "no `<name> <count>` lines"),
                },
                Err(e) => Fact::absent(p, reason(root, &e, NOT_EXPOSED)),
            }
        };
        Some(AerStats {
            bdf: bdf.clone(),
            role: role.to_string(),
            correctable: read("aer_dev_correctable"),
            nonfatal: read("aer_dev_nonfatal"),
            fatal: read("aer_dev_fatal"),
        })
    };
    // Three files per function, after the PCI list: on an 8-GPU node 150 files on the
    // critical path, spread over a few threads (kept in address order).
    let roles: Vec<(String, &'static str)> = roles.into_iter().collect();
    let threads = gdrdoctor_checks::cpus().clamp(1, 4);
    let out: Vec<AerStats> = if threads < 2 || roles.len() < 16 {
        roles.iter().filter_map(one).collect()
    } else {
        let chunk = roles.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = roles
                .chunks(chunk)
                .map(|part| s.spawn(move || part.iter().filter_map(one).collect::<Vec<_>>()))
                .collect();
            let mut out = Vec::new();
            for (h, part) in handles.into_iter().zip(roles.chunks(chunk)) {
                match h.join() {
                    Ok(v) => out.extend(v),
                    // A thread that panicked: its part again here, where a panic reaches
                    // the caller as it would without threads.
                    Err(_) => out.extend(part.iter().filter_map(one)),
                }
            }
            out
        })
    };
    Fact::known(out, "/sys/bus/pci/devices/*/aer_dev_*")
}

/// The counter files of a directory that a check reads (`port_counter_used`) and that hold
/// a number; the others are listed, not read.
fn counter_dir(root: &Root, dir: &str) -> Fact<BTreeMap<String, u64>> {
    match root.read_dir(dir) {
        Ok(list) => {
            let mut m = BTreeMap::new();
            let mut seen = BTreeSet::new();
            for e in list.iter().filter(|e| {
                e.kind == EntryKind::File && gdrdoctor_checks::counters::port_counter_used(&e.name)
            }) {
                if !seen.insert(e.name.clone()) {
                    continue;
                }
                // A file the driver refuses to read is left out (some ports refuse some
                // counters); one that reads but is not a number is damaged evidence, and the
                // port's counters are then not judged at all.
                let p = crate::source::reader::child(dir, &e.name);
                if let Ok(v) = root.read_trimmed(&p) {
                    match v.parse::<u64>() {
                        Ok(n) => {
                            m.insert(e.name.clone(), n);
                        }
                        Err(_) => {
                            return Fact::absent(
                                dir,
                                format!("{DAMAGED}{p} holds {v:?}, not a counter value"),
                            )
                        }
                    }
                }
            }
            Fact::known(m, dir)
        }
        Err(e) => Fact::absent(dir, reason(root, &e, "not exposed by this driver")),
    }
}

pub fn collect_ports(root: &Root, rdma: &Fact<Vec<RdmaDevice>>) -> Fact<Vec<PortCounters>> {
    let devs = match rdma {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::absent(source.clone(), reason.clone()),
    };
    let mut out = Vec::new();
    for d in devs {
        let Some(ports) = d.ports.get() else { continue };
        for p in ports {
            let base = format!("/sys/class/infiniband/{}/ports/{}", d.name, p.port);
            out.push(PortCounters {
                device: d.name.clone(),
                port: p.port,
                counters: counter_dir(root, &format!("{base}/counters")),
                hw_counters: counter_dir(root, &format!("{base}/hw_counters")),
            });
        }
    }
    Fact::known(out, "/sys/class/infiniband/*/ports/*/counters")
}
