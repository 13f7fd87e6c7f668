//! Whether a device's config space can be trusted, and what an absent capability means: a
//! capture that holds too little, config space that is not the device's, a chain that cannot
//! be walked to its end.

use crate::model::{Fact, Node, PciDevice};
use crate::pci::config::ConfigSpace;
use crate::report::{Finding, Status};

/// Why config space cannot answer, or `None` when it can (`need` bytes).
fn config_gap(d: &PciDevice, need: usize) -> Option<String> {
    match &d.config {
        Fact::Absent { reason, source } => Some(format!("{source}: {reason}")),
        Fact::Known { value, source } if value.len() < need => {
            Some(if value.len() <= 64 {
                format!("{source}: only {} bytes readable: needs root to read config space beyond 64 bytes", value.len())
            } else {
                format!(
                    "{source}: {} bytes readable, extended config space (4096) needed",
                    value.len()
                )
            })
        }
        Fact::Known { .. } => None,
    }
}

/// Config space that cannot be believed: the device's config space, decoded, does not belong
/// to the device sysfs lists (vendor or device id differ), or reads all-ones (the device does
/// not answer). `None` when the ids agree (or sysfs does not know them).
pub(crate) fn untrusted(d: &PciDevice, cs: &ConfigSpace) -> Option<String> {
    if cs.vendor_id == Some(0xffff) {
        return Some(
            "config space reads all-ones (vendor 0xffff): the device does not answer config reads"
                .to_string(),
        );
    }
    let pairs = [
        ("vendor", d.vendor_id.get(), cs.vendor_id),
        ("device", d.device_id.get(), cs.device_id),
    ];
    for (what, sysfs, config) in pairs {
        if let (Some(s), Some(c)) = (sysfs, config) {
            if *s != c {
                return Some(format!(
                    "config space {what} id 0x{c:04x} differs from sysfs {what} 0x{s:04x}: the config space is not this device's"
                ));
            }
        }
    }
    pcie_capability_lost(d, cs)
}

/// A PCI Express function always has a PCI Express capability. When sysfs (the kernel, which
/// read the capability at enumeration) names a PCIe link, or the extended config space holds
/// capability headers (only PCIe and PCI-X 2.0 functions have one), a capability list without
/// it (a capability pointer of 0x00 or 0xff, the Capabilities List bit cleared in Status, a
/// chain that ends before it) is damaged config space, not a device without capabilities:
/// otherwise a switch port's ACS redirect would read as "no ACS capability" and pass.
fn pcie_capability_lost(d: &PciDevice, cs: &ConfigSpace) -> Option<String> {
    if cs.limited || cs.pcie.is_some() || !cs.chain_breaks.is_empty() {
        return None;
    }
    let link = [&d.cur_link_speed, &d.max_link_speed]
        .into_iter()
        .find_map(|f| {
            f.get()
                .filter(|s| crate::parse::link_speed_gts(s).is_some())
                .map(|s| format!("{} says a PCIe link at {s}", f.source()))
        });
    let raw = d.config.get()?;
    let ext = raw
        .get(0x100..0x104)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .filter(|h| *h != 0 && *h != 0xffff_ffff && (1..=0x30).contains(&(h & 0xffff)))
        .map(|h| {
            format!(
                "its extended config space holds capability 0x{:04x} at 0x100",
                h & 0xffff
            )
        });
    let why = link.or(ext)?;
    let status = cs.status.unwrap_or(0);
    let ptr = raw.get(0x34).copied().unwrap_or(0);
    Some(format!(
        "{why}, but its config space has no PCI Express capability (Status 0x{status:04x}: Capabilities List bit {}; capability pointer 0x{ptr:02x}): the config space is damaged",
        if status & 0x10 != 0 { "set" } else { "clear" }
    ))
}

/// A bridge whose config space does not fit its place in the tree: its primary bus number
/// (0x18) is not the bus it sits on, or a function right below it is not on its secondary bus
/// (0x19). The ports of one switch have the same vendor and device ids, so [`untrusted`]
/// cannot tell their config spaces apart: a snapshot whose `config` files of an upstream and
/// a downstream port were swapped moved a set ACS redirect off the GPU-NIC path and the node
/// exited 0 (the mutation test, seed 692234378); two downstream ports swapped would move it
/// to another path. The bus numbers tell every such swap, and unlike the port type in the
/// PCIe capability (which Linux corrects for some ports that misstate it, leaving the raw
/// config as it is) they are what the kernel itself enumerated. `None` for a function that is
/// not a bridge, and where the bus numbers were never programmed (secondary bus 0).
pub(super) fn misplaced(node: &Node, d: &PciDevice) -> Option<String> {
    let raw = d.config.get()?;
    if raw.len() < 0x1b || raw[0x0e] & 0x7f != 1 {
        return None;
    }
    let (pri, sec, sub) = (raw[0x18], raw[0x19], raw[0x1a]);
    if sec == 0 {
        return None;
    }
    let bus_of = |bdf: &str| {
        bdf.split(':')
            .nth(1)
            .and_then(|b| u8::from_str_radix(b, 16).ok())
    };
    let bus = bus_of(&d.bdf)?;
    if pri != bus {
        return Some(format!(
            "config space says primary bus {pri:02x}, but {} is on bus {bus:02x}: the config space is not this device's",
            d.bdf
        ));
    }
    let below = node.pci.get().into_iter().flatten();
    for e in below.filter(|e| e.parent.as_deref() == Some(d.bdf.as_str())) {
        if let Some(cb) = bus_of(&e.bdf).filter(|cb| *cb != sec) {
            return Some(format!(
                "config space says secondary bus {sec:02x} (subordinate {sub:02x}), but {} right below {} is on bus {cb:02x}: the config space is not this device's",
                e.bdf, d.bdf
            ));
        }
    }
    None
}

/// [`readable`], or an `error` finding of `id` on `subject` saying `cannot read the <what>`,
/// with the reason as its evidence, pushed to `out`.
pub(super) fn readable_or_error(
    id: &str,
    subject: &str,
    d: &PciDevice,
    need: usize,
    what: String,
    out: &mut Vec<Finding>,
) -> Option<ConfigSpace> {
    match readable(d, need) {
        Ok(cs) => Some(cs),
        Err(why) => {
            out.push(
                Finding::new(
                    id,
                    Status::Error,
                    subject,
                    format!("cannot read the {what}"),
                )
                .evidence(format!("{}/config", d.sysfs_path), why),
            );
            None
        }
    }
}

/// The decoded config space of `d` when `need` bytes of it are readable and it is this
/// device's; otherwise the reason (for the evidence of an `error`).
pub(super) fn readable(d: &PciDevice, need: usize) -> Result<ConfigSpace, String> {
    if let Some(gap) = config_gap(d, need) {
        return Err(gap);
    }
    let cs = d
        .decoded()
        .ok_or_else(|| format!("{}/config: not readable", d.sysfs_path))?;
    match untrusted(d, &cs) {
        Some(why) => Err(why),
        None => Ok(cs),
    }
}

/// Why the absence of a capability cannot be concluded: the list that holds it could not be
/// walked to its end. `extended`: the capability lives in the extended list (ACS, ATS), which
/// is reached only through a readable standard list (the PCI Express capability).
pub(super) fn absence_unknown(cs: &ConfigSpace, extended: bool) -> Option<String> {
    cs.chain_breaks
        .iter()
        .find(|b| extended || !b.extended)
        .map(|b| b.to_string())
}
