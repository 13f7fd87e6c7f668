//! `pcie.bars`: BARs in sysfs and in config space agree for GPUs and NICs.

use super::trust::*;
use crate::gdr::Context;
use crate::model::{Node, PciDevice};
use crate::parse;
use crate::report::{Finding, Status};

/// BARs as the kernel placed them (sysfs `resource`) against the BAR registers in config space.
pub fn bars(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.bars";
    let cx = Context::new(node);
    let mut devs: Vec<&PciDevice> = cx
        .gpus
        .iter()
        .filter_map(|g| cx.index.get(&g.bdf))
        .collect();
    for f in cx.nic_functions() {
        if !devs.iter().any(|x| x.bdf == f.dev.bdf) {
            devs.push(f.dev);
        }
    }
    if devs.is_empty() {
        return vec![Finding::new(
            ID,
            Status::Skip,
            "node",
            "no gpu or nic on the pci bus",
        )];
    }
    let mut out = Vec::new();
    for d in devs {
        let rsrc = format!("{}/resource", d.sysfs_path);
        let (Some(res), Some(cs)) = (d.resources.get(), d.decoded()) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot read the bars (sysfs resource or config space missing)",
                )
                .evidence(rsrc, d.resources.describe(|_| "read".into()))
                .evidence(
                    format!("{}/config", d.sysfs_path),
                    d.config.describe(|b| format!("{} bytes", b.len())),
                ),
            );
            continue;
        };
        if d.is_virtfn {
            out.push(Finding::new(ID, Status::Pass, &d.bdf, "sr-iov virtual function: its bars are set by the physical function's sr-iov capability (the vf's bar registers read 0 by design)")
                .evidence(format!("{}/physfn", d.sysfs_path), "present"));
            continue;
        }
        let csrc = format!("{}/config", d.sysfs_path);
        if cs.vendor_id == Some(0xffff) {
            out.push(Finding::new(ID, Status::Fail, &d.bdf, "config space reads all ones: the device does not answer (fell off the bus?)")
                .evidence(csrc, "vendor 0xffff")
                .fix("check `dmesg` for `Xid 79` / `GPU has fallen off the bus` or AER errors; reboot or reseat"));
            continue;
        }
        if let Some(why) = untrusted(d, &cs) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot compare the bars: the config space is not this device's",
                )
                .evidence(csrc, why),
            );
            continue;
        }
        // Type 0 BAR registers end at 0x28, type 1 at 0x18: a shorter read cannot show them.
        if cs.len < 0x40 {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "cannot compare the bars: the config space is cut short",
                )
                .expected(csrc, format!("{} bytes", cs.len), "at least 64 bytes"),
            );
            continue;
        }
        let mut mismatches = Vec::new();
        let mut shown = Vec::new();
        for b in cs.bars.iter().filter(|b| !b.io) {
            let Some(r) = res.iter().find(|r| r.index == b.index as usize) else {
                continue;
            };
            if !r.is_set() {
                continue;
            }
            shown.push(format!(
                "BAR{} 0x{:x} {} {}{}",
                b.index,
                r.start,
                parse::human_bytes(r.size()),
                if r.mem64() { "64-bit" } else { "32-bit" },
                if r.prefetchable() {
                    " prefetchable"
                } else {
                    ""
                }
            ));
            if b.address != r.start || b.mem64 != r.mem64() || b.prefetchable != r.prefetchable() {
                mismatches.push(format!(
                    "BAR{}: sysfs 0x{:x}{}{}, config 0x{:x}{}{}",
                    b.index,
                    r.start,
                    if r.mem64() { " 64-bit" } else { "" },
                    if r.prefetchable() { " pref" } else { "" },
                    b.address,
                    if b.mem64 { " 64-bit" } else { "" },
                    if b.prefetchable { " pref" } else { "" }
                ));
            }
        }
        if shown.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &d.bdf,
                    "no memory bar to compare: sysfs resource lists none assigned (the kernel could not place them, or the file is damaged)",
                )
                .evidence(rsrc, format!("{} lines, no assigned memory bar in lines 0-5", res.len()))
                .fix("`dmesg | grep -i 'BAR\\|no space'` shows bars the kernel could not assign (enable \"Above 4G decoding\" in the BIOS for large GPU bars); `lspci -vv -s <bdf>` shows the regions"),
            );
            continue;
        }
        if mismatches.is_empty() {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &d.bdf,
                    format!("{} bars agree between sysfs and config space", shown.len()),
                )
                .evidence(rsrc, shown.join("; ")),
            );
        } else {
            out.push(Finding::new(ID, Status::Warn, &d.bdf, format!("{} bar(s) differ between sysfs and config space: the device was reset or reprogrammed behind the kernel", mismatches.len()))
                .expected(rsrc, mismatches.join("; "), "identical addresses and flags")
                .fix("a device reset (FLR, hot reset, firmware update) cleared or moved its BARs; rebind the driver or reboot; `lspci -vv -s <bdf>` shows `Region N: ... [virtual]` for BARs the device no longer decodes"));
        }
    }
    out
}
