//! What became of the RDMA devices the counter baseline placed on PCI functions: followed by
//! function, not by name (mlx5 hands a freed name to the next device that registers).

use crate::counters as c;
use crate::model::Node;
use std::collections::BTreeMap;

/// What became of an RDMA device that the counter baseline placed on a PCI function
/// (`rdma-at/<dev>/<bdf>`), judged by what is at that function now, not by its name (mlx5
/// names are handed out again: after one device goes, the next to register takes the lowest
/// free `mlx5_N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// On its function now under this name: itself, or renumbered, renamed, bonded (RoCE
    /// LAG's `mlx5_bond_N`), or unbonded.
    Now(String),
    /// Its function still serves RDMA without a device here: RoCE LAG's second PF beside the
    /// bond, a VF whose device moved into a pod.
    Excused(String),
    /// Lost: why, the path that shows it, what is there, and the fix.
    Lost {
        why: String,
        path: String,
        seen: String,
        fix: String,
    },
}

/// The fate of every RDMA device the baseline placed: device -> (its function then, fate).
pub(super) fn placed_fates(node: &Node) -> BTreeMap<String, (String, Fate)> {
    let mut out = BTreeMap::new();
    let Some(b) = node.health.baseline.as_ref() else {
        return out;
    };
    let under = format!("{}/", c::RDMA_AT);
    // bdf -> (device, node GUID or 1) as the baseline placed them.
    let mut was_at: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (k, v) in b
        .values
        .range(under.clone()..)
        .take_while(|(k, _)| k.starts_with(&under))
    {
        let Some((dev, bdf)) = k[under.len()..].split_once('/') else {
            continue;
        };
        if !dev.is_empty() && !bdf.is_empty() && !bdf.contains('/') {
            was_at.entry(bdf).or_default().push((dev, *v));
        }
    }
    if was_at.is_empty() {
        return out;
    }
    let devs = node.rdma.get().map(Vec::as_slice).unwrap_or_default();
    let mut now_at: BTreeMap<&str, Vec<&crate::model::RdmaDevice>> = BTreeMap::new();
    // Listed now without a readable function: not placeable, not lost either.
    let mut unplaceable: Vec<&str> = Vec::new();
    for d in devs {
        match d.pci_bdf.get() {
            Some(Some(bdf)) => now_at.entry(bdf.as_str()).or_default().push(d),
            _ => unplaceable.push(d.name.as_str()),
        }
    }
    let guid_of = |d: &crate::model::RdmaDevice| d.node_guid.get().and_then(|g| c::guid_value(g));
    // Devices on a function now that the baseline did not place there, by name.
    let fresh = |bdf: &str| -> Vec<&crate::model::RdmaDevice> {
        let was = was_at.get(bdf);
        let mut v: Vec<&crate::model::RdmaDevice> = now_at
            .get(bdf)
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|n| !was.is_some_and(|w| w.iter().any(|(x, _)| *x == n.name)))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        v
    };
    // A RoCE LAG bond formed on `sib` since: every device the baseline placed there is gone
    // from it, and a new bond device (its name says so) with an Ethernet port took their place.
    let bond_on = |sib: &str| -> Option<String> {
        let was = was_at.get(sib)?;
        let now = now_at.get(sib)?;
        if was.iter().any(|(d, _)| now.iter().any(|n| n.name == *d)) {
            return None;
        }
        fresh(sib)
            .into_iter()
            .find(|n| {
                // mlx5_bond_N, bnxt_re_bondN: a renumbered device is not a bond.
                n.name.contains("bond")
                    && n.ports.get().is_some_and(|ps| {
                        ps.iter()
                            .any(|p| p.link_layer.get().is_some_and(|l| l.trim() == "Ethernet"))
                    })
            })
            .map(|n| n.name.clone())
    };
    for (bdf, was) in &was_at {
        let now: Vec<&str> = now_at
            .get(bdf)
            .map(|v| v.iter().map(|d| d.name.as_str()).collect())
            .unwrap_or_default();
        let mut new_devs = fresh(bdf);
        let mut was = was.clone();
        was.sort_unstable();
        let mut missing: Vec<(&str, u64)> = Vec::new();
        for (d, guid) in was {
            if now.contains(&d) || unplaceable.contains(&d) {
                out.insert(d.to_string(), (bdf.to_string(), Fate::Now(d.to_string())));
            } else if let Some(i) = new_devs
                .iter()
                .position(|n| guid > 1 && guid_of(n) == Some(guid))
            {
                // Renamed (the same node GUID): renumbered, a new name, a bond on its PF.
                let n = new_devs.remove(i);
                out.insert(d.to_string(), (bdf.to_string(), Fate::Now(n.name.clone())));
            } else {
                missing.push((d, guid));
            }
        }
        if let ([(d, _)], [n]) = (missing.as_slice(), new_devs.as_slice()) {
            // One device gone, one new on its function: the same, renamed.
            out.insert(d.to_string(), (bdf.to_string(), Fate::Now(n.name.clone())));
            continue;
        }
        for (d, _) in missing {
            let fate = if !new_devs.is_empty() {
                let names: Vec<&str> = new_devs.iter().map(|n| n.name.as_str()).collect();
                Fate::Excused(format!(
                    "its PCI function {bdf} carries {} now, new since the baseline and not told apart from {d} (their node GUIDs differ or were not recorded)",
                    names.join(", ")
                ))
            } else if !now.is_empty() {
                Fate::Lost {
                    why: format!(
                        "its PCI function {bdf} still carries {} but no longer {d}",
                        now.join(", ")
                    ),
                    path: "/sys/class/infiniband".into(),
                    seen: format!("{} on {bdf}, {d} not listed", now.join(", ")),
                    fix: format!("one of the RDMA devices of {bdf} is gone while another stays (a PF's own device and its sub-function's): if a sub-function was deleted on purpose (a pod torn down) nothing is wrong (this is said once); otherwise `rdma dev`, `devlink port show`, `dmesg | grep -i {bdf}`"),
                }
            } else {
                function_fate(node, bdf, d, &bond_on)
            };
            out.insert(d.to_string(), (bdf.to_string(), fate));
        }
    }
    out
}

/// The fate of device `d`, placed on `bdf` by the baseline, when no RDMA device sits on
/// `bdf` now (see [`Fate`]). `bond_on` names a RoCE LAG bond formed on a sibling function.
fn function_fate(
    node: &Node,
    bdf: &str,
    d: &str,
    bond_on: &dyn Fn(&str) -> Option<String>,
) -> Fate {
    use super::super::rdma::FunctionNow as F;
    let path = format!("/sys/bus/pci/devices/{bdf}");
    let lost = |why: String, seen: String, fix: String| Fate::Lost {
        why,
        path: path.clone(),
        seen,
        fix,
    };
    match super::super::rdma::function_now(node, bdf) {
        F::Deviceless {
            driver,
            virtfn: true,
        } => Fate::Excused(format!(
            "its PCI function {bdf} (a VF) is bound to {driver} without an RDMA device here: its device moved into a pod's network namespace (RDMA exclusive netns mode)"
        )),
        F::Deviceless {
            driver,
            virtfn: false,
        } => {
            let card = bdf.rsplit_once('.').map(|(c, _)| c).unwrap_or(bdf);
            let bond = super::super::rdma::pfs_of_card(node, card)
                .into_iter()
                .filter(|s| s != bdf)
                .find_map(|s| bond_on(&s).map(|n| (s, n)));
            match bond {
                Some((sib, n)) => Fate::Excused(format!(
                    "its PCI function {bdf} is bound to {driver} without an RDMA device here, beside {n}, the RoCE device that replaced the one on {sib} of the same card: RoCE LAG's second port"
                )),
                None => lost(
                    format!("its PCI function {bdf} (a PF) is bound to {driver} without an RDMA device here, and no RoCE bond formed on its card: the RDMA driver failed on it, or its device was moved into a pod's network namespace"),
                    format!("driver {driver}, no RDMA device"),
                    format!("`dmesg | grep -i {bdf}` for the RDMA driver's error; `devlink dev info pci/{bdf}`; rebind the function (`echo {bdf} > /sys/bus/pci/drivers/{driver}/unbind; echo {bdf} > /sys/bus/pci/drivers/{driver}/bind`); if {d}'s PF was assigned to a pod on purpose (RDMA exclusive netns mode), nothing is wrong (this is said once)"),
                ),
            }
        }
        F::Bound(driver) => lost(
            format!("its PCI function {bdf} is bound to {driver} now, which serves no RDMA here"),
            format!("driver {driver}"),
            format!("if {bdf} was handed to {driver} on purpose (a VM, DPDK), nothing is wrong (this is said once); otherwise give it back (`echo {bdf} > /sys/bus/pci/drivers/{driver}/unbind`, then bind it to the NIC's driver) and read `dmesg | grep -i {bdf}`"),
        ),
        F::Unbound => lost(
            format!("its PCI function {bdf} has no driver bound now"),
            "no driver".into(),
            format!("bind it to the NIC's driver (`echo {bdf} > /sys/bus/pci/drivers_probe`) and read `dmesg | grep -i {bdf}` for why it is unbound (a failed probe, firmware in recovery: kernel.mlx5-health)"),
        ),
        F::DriverUnreadable(reason) => lost(
            format!("the driver of its PCI function {bdf} cannot be read ({reason}), so whether it still serves RDMA is unknown"),
            format!("driver: unknown ({reason})"),
            "run as root; a snapshot that lost the function's `driver` link needs a new capture".into(),
        ),
        F::Absent => lost(
            format!("its PCI function {bdf} is no longer on the PCI bus"),
            "not on the bus".into(),
            format!("the NIC fell off the bus or was hot-removed (a VF detached by the hypervisor): `dmesg | grep -i {bdf}` (AER, surprise down, mlx5 health), `lspci -s {bdf}`; drain the node, then reset or re-seat the NIC (in a VM, re-attach the VF)"),
        ),
        F::Unknown(reason) => lost(
            format!("the PCI functions or RDMA devices cannot be listed now ({reason}), so whether {bdf} still serves RDMA is unknown"),
            format!("unknown ({reason})"),
            "run as root; a snapshot that lost /sys/bus/pci/devices or /sys/class/infiniband needs a new capture".into(),
        ),
    }
}

/// The baseline with each placed device's port keys (`ib/`, `hw/`) under the name its
/// function carries now, and without those of devices lost or excused (their own findings say
/// so): growth is judged per function, so renumbered devices are not compared with each
/// other's counters, and a name handed to another function does not hide a loss. `None`
/// when nothing moved.
pub(super) fn by_function(
    b: &crate::model::CounterBaseline,
    fates: &BTreeMap<String, (String, Fate)>,
) -> Option<(crate::model::CounterBaseline, Vec<String>)> {
    if fates
        .iter()
        .all(|(d, (_, f))| matches!(f, Fate::Now(n) if n == d))
    {
        return None;
    }
    // Names a placed device carries now that it did not carry then.
    let taken: Vec<&str> = fates
        .iter()
        .filter_map(|(d, (_, f))| match f {
            Fate::Now(n) if n != d => Some(n.as_str()),
            _ => None,
        })
        .collect();
    let mut displaced: Vec<String> = Vec::new();
    let mut values = BTreeMap::new();
    let mut ages_ms = BTreeMap::new();
    let mut unplaced = Vec::new();
    for (k, v) in &b.values {
        match port_key(k).map(|(fam, d, tail)| (fam, fates.get(d), tail)) {
            Some((fam, Some((_, Fate::Now(n))), tail)) => {
                let moved = format!("{fam}/{n}/{tail}");
                if let Some(a) = b.ages_ms.get(k) {
                    ages_ms.insert(moved.clone(), *a);
                }
                values.insert(moved, *v);
            }
            Some((_, Some(_), _)) => {}
            _ => unplaced.push((k, *v)),
        }
    }
    // A device the baseline could not place whose name a placed device carries now: which
    // function it was on is unknown, and its readings are not the placed device's. Said as
    // gone (`displaced`), its keys left out.
    for (k, v) in unplaced {
        match port_key(k).map(|(_, d, _)| d) {
            Some(d) if taken.contains(&d) => {
                if !displaced.iter().any(|x| x == d) {
                    displaced.push(d.to_string());
                }
            }
            _ => {
                if let Some(a) = b.ages_ms.get(k) {
                    ages_ms.insert(k.clone(), *a);
                }
                values.insert(k.clone(), v);
            }
        }
    }
    Some((
        crate::model::CounterBaseline {
            values,
            elapsed_ms: b.elapsed_ms,
            origin: b.origin.clone(),
            ages_ms,
        },
        displaced,
    ))
}

/// A port counter key (`ib/<dev>/<rest>`, `hw/<dev>/<rest>`) split into its family, device
/// and the rest.
fn port_key(k: &str) -> Option<(&str, &str, &str)> {
    let (fam, rest) = k.split_once('/')?;
    if !matches!(fam, "ib" | "hw") {
        return None;
    }
    let (d, tail) = rest.split_once('/')?;
    Some((fam, d, tail))
}
