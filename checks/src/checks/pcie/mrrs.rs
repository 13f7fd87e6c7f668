//! `pcie.mrrs`: NICs use a 4096-byte max read request.

use super::trust::*;
use crate::gdr::Context;
use crate::model::Node;
use crate::report::{Finding, Status};

pub fn mrrs(node: &Node) -> Vec<Finding> {
    const ID: &str = "pcie.mrrs";
    let cx = Context::new(node);
    let mut out = Vec::new();
    for f in cx.nic_functions() {
        let (nic, bdf, d) = (f.nic, f.bdf, f.dev);
        let src = format!("{}/config", d.sysfs_path);
        let what = format!("pcie device control of {}", nic.name);
        let Some(cs) = readable_or_error(ID, bdf, d, 256, what, &mut out) else {
            continue;
        };
        let Some(p) = cs.pcie.clone() else {
            let (msg, why) = match absence_unknown(&cs, false) {
                Some(b) => (
                    format!(
                        "cannot find the pci express capability of {}: its capability list is broken",
                        nic.name
                    ),
                    b,
                ),
                None => (
                    format!(
                        "{} has no pci express capability in its config space",
                        nic.name
                    ),
                    "no PCIe capability".to_string(),
                ),
            };
            out.push(Finding::new(ID, Status::Error, bdf, msg).evidence(src, why));
            continue;
        };
        let at = format!("{src}@0x{:x}", p.offset + 8);
        // DevCtl bits 14:12 (Max_Read_Request_Size) and 7:5 (Max_Payload_Size): 110b and 111b
        // are reserved encodings (PCIe Base Specification, Device Control Register).
        let mrrs_code = (p.devctl >> 12) & 0x7;
        let mps_code = (p.devctl >> 5) & 0x7;
        if mrrs_code >= 6 || mps_code >= 6 {
            let field = if mrrs_code >= 6 {
                format!("Max_Read_Request_Size encoding {mrrs_code:03b}b")
            } else {
                format!("Max_Payload_Size encoding {mps_code:03b}b")
            };
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    bdf,
                    format!(
                        "{} device control holds a reserved {field}: the register read is not trustworthy",
                        nic.name
                    ),
                )
                .expected(
                    at,
                    format!("DevCtl 0x{:04x}", p.devctl),
                    "Max_Read_Request_Size and Max_Payload_Size encodings 000b-101b",
                )
                .fix(format!("`lspci -vvv -s {bdf}` shows DevCtl as the kernel reads it; a reserved value there is a device or firmware fault (reset the device or update its firmware), in a snapshot a damaged config file")),
            );
            continue;
        }
        let obs = format!(
            "MaxReadReq {} bytes, MaxPayload {} bytes, RlxdOrd{}",
            p.mrrs,
            p.mps,
            if p.relaxed_ordering { "+" } else { "-" }
        );
        if p.mrrs < 4096 {
            out.push(Finding::new(ID, Status::Warn, bdf, format!("{} reads at most {} bytes per pcie request: gpudirect rdma reads from gpu memory lose bandwidth", nic.name, p.mrrs))
                .expected(at, obs, "MaxReadReq 4096")
                .fix(format!("`setpci -s {bdf} CAP_EXP+8.w` shows DevCtl; set bits 14:12 to 5 (4096): `setpci -s {bdf} CAP_EXP+8.w=5000:7000` (until reboot); for good, the BIOS \"PCIe Max Read Request\" setting or a udev rule running that setpci at boot; NVIDIA's multi-node performance guide recommends 4096")));
        } else {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    bdf,
                    format!("{} MaxReadReq {} bytes", nic.name, p.mrrs),
                )
                .evidence(at, obs),
            );
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            ID,
            Status::Skip,
            "node",
            "no rdma nic on the pci bus",
        ));
    }
    out
}
