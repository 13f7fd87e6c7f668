//! What the kernel's sysfs attributes of a PCI function say, computed from its config space.
//!
//! `device`, `subsystem_vendor`, `subsystem_device`, `current_link_speed`,
//! `current_link_width`, `max_link_speed` and `max_link_width` are the kernel's view of
//! registers that the config space holds: the collector reads the config space of every GPU,
//! NIC and bridge on their path anyway, so taking these values from it saves nine files per
//! function (432 of the 1,110 files of an eight-GPU, eight-NIC node). The rules are the
//! kernel's (drivers/pci/probe.c, pci-sysfs.c, pci.c):
//!
//! * `device`: the Device ID register (0x02).
//! * `subsystem_*`: type 0 header at 0x2c/0x2e; a type 1 header (a bridge) from the Bridge
//!   Subsystem Vendor ID capability (0x0d), 0 when the bridge has none.
//! * `current_link_*`: Link Status: speed from the Current Link Speed field (1 = 2.5 GT/s ... 6 =
//!   64 GT/s), width from Negotiated Link Width.
//! * `max_link_speed`: the highest bit of Link Capabilities 2's Supported Link Speeds Vector when
//!   that register is not zero (a PCIe 3.0 or later capability), else Link Capabilities' Max
//!   Link Speed (2.5 or 5.0 GT/s); `max_link_width`: Link Capabilities' Maximum Link Width.
//!
//! A value is given only when the config space is believable and the registers were read:
//! the Vendor ID matches the sysfs `vendor` (a virtual function reads 0xffff there, and so does
//! a device in D3cold or off the bus), the capability list was walked without a break up to
//! what is used, and the registers are inside the bytes read (a non-root reader sees only 64
//! bytes: no capabilities). Otherwise the collector reads the sysfs files as before. The
//! differential tests compare these values with the sysfs files of every captured node that has
//! both, and with the live machine's.

use super::config::{ConfigSpace, CAP_ID_SSVID};

/// The attributes a config space answers (each `None`: read the sysfs file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FromConfig {
    pub device: Option<u16>,
    pub subsystem: Option<(u16, u16)>,
    /// `current_link_speed` as the kernel prints it (`32.0 GT/s PCIe`, `Unknown`).
    pub cur_link_speed: Option<String>,
    pub cur_link_width: Option<u32>,
    pub max_link_speed: Option<String>,
    pub max_link_width: Option<u32>,
}

/// The kernel's `pci_speed_string()` for a Link Speed encoding (LNKSTA CLS, LNKCAP SLS, or the
/// position of the highest bit of the LNKCAP2 vector).
pub fn speed_text(code: u32) -> &'static str {
    match code {
        1 => "2.5 GT/s PCIe",
        2 => "5.0 GT/s PCIe",
        3 => "8.0 GT/s PCIe",
        4 => "16.0 GT/s PCIe",
        5 => "32.0 GT/s PCIe",
        6 => "64.0 GT/s PCIe",
        _ => "Unknown",
    }
}

/// The attributes of a function whose sysfs `vendor` is `sysfs_vendor`, from its decoded config
/// space; nothing when the config space cannot be believed (see the module comment).
pub fn from_config(cs: &ConfigSpace, sysfs_vendor: Option<u16>) -> FromConfig {
    let mut out = FromConfig::default();
    let (Some(vendor), Some(sysfs)) = (cs.vendor_id, sysfs_vendor) else {
        return out;
    };
    if vendor != sysfs || vendor == 0xffff || cs.device_id == Some(0xffff) {
        return out;
    }
    out.device = cs.device_id;
    // The standard capability list is walked only from a header with a capability list, with
    // at least 256 bytes read; a break means what follows is unknown.
    let caps_known = !cs.limited && !cs.chain_breaks.iter().any(|b| !b.extended);
    out.subsystem = match cs.header_type {
        Some(0) => cs.subsystem_vendor_id.zip(cs.subsystem_id),
        Some(1) if caps_known => {
            if cs
                .capabilities
                .iter()
                .any(|c| c.id == u16::from(CAP_ID_SSVID))
            {
                cs.subsystem_vendor_id.zip(cs.subsystem_id)
            } else {
                Some((0, 0))
            }
        }
        _ => None,
    };
    let Some(p) = &cs.pcie else {
        return out;
    };
    if let Some(sta) = p.lnksta {
        out.cur_link_speed = Some(speed_text(u32::from(sta & 0xf)).to_string());
        out.cur_link_width = Some(u32::from((sta >> 4) & 0x3f));
    }
    if let Some(cap) = p.lnkcap {
        out.max_link_width = Some((cap >> 4) & 0x3f);
        // Version 1 capabilities have no Link Capabilities 2 (the kernel reads it as 0).
        let cap2 = if p.version >= 2 { p.lnkcap2 } else { Some(0) };
        out.max_link_speed = match cap2 {
            Some(v) if (v >> 1) & 0x7f != 0 => {
                let vector = (v >> 1) & 0x7f;
                Some(speed_text(32 - vector.leading_zeros()).to_string())
            }
            // No Supported Link Speeds Vector: the Max Link Speed field of Link Capabilities
            // (the kernel's fallback, `pcie_get_speed_cap`). A reserved value there: unknown
            // here, and the sysfs file is read instead.
            Some(_) => match speed_text(cap & 0xf) {
                "Unknown" => None,
                s => Some(s.to_string()),
            },
            // A version 2 capability cut before Link Capabilities 2: unknown, read the file.
            None => None,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::pci::config::decode;

    /// A type 0 or type 1 header with a PCI Express capability at 0x40 (version 2).
    fn space(header: u8, lnkcap: u32, lnksta: u16, lnkcap2: u32) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0..4].copy_from_slice(&[0xde, 0x10, 0x35, 0x23]);
        c[6] = 0x10; // status: capability list
        c[0x0b] = if header == 1 { 0x06 } else { 0x03 };
        c[0x0a] = if header == 1 { 0x04 } else { 0x02 };
        c[0x0e] = header;
        if header == 0 {
            c[0x2c..0x30].copy_from_slice(&[0xde, 0x10, 0xb0, 0x18]);
        }
        c[0x34] = 0x40;
        c[0x40] = 0x10;
        c[0x42] = 0x02 | if header == 1 { 0x60 } else { 0 };
        c[0x4c..0x50].copy_from_slice(&lnkcap.to_le_bytes());
        c[0x52..0x54].copy_from_slice(&lnksta.to_le_bytes());
        c[0x6c..0x70].copy_from_slice(&lnkcap2.to_le_bytes());
        c
    }

    #[test]
    fn an_endpoint_reads_as_the_kernel_prints_it() {
        let cs = decode(&space(0, 0x105, 0x1084, 0x3e));
        let a = from_config(&cs, Some(0x10de));
        assert_eq!(a.device, Some(0x2335));
        assert_eq!(a.subsystem, Some((0x10de, 0x18b0)));
        assert_eq!(a.cur_link_speed.as_deref(), Some("16.0 GT/s PCIe"));
        assert_eq!(a.cur_link_width, Some(8));
        assert_eq!(a.max_link_speed.as_deref(), Some("32.0 GT/s PCIe"));
        assert_eq!(a.max_link_width, Some(16));
    }

    #[test]
    fn max_speed_from_lnkcap_when_lnkcap2_is_zero() {
        // The Max Link Speed field of Link Capabilities, as lspci decodes it; a reserved value
        // is unknown here (the sysfs file is read instead).
        for (sls, want) in [
            (1, Some("2.5 GT/s PCIe")),
            (2, Some("5.0 GT/s PCIe")),
            (3, Some("8.0 GT/s PCIe")),
            (5, Some("32.0 GT/s PCIe")),
            (0, None),
            (7, None),
        ] {
            let cs = decode(&space(0, 0x100 | sls, 0x1011, 0));
            let a = from_config(&cs, Some(0x10de));
            assert_eq!(a.max_link_speed.as_deref(), want, "sls {sls}");
        }
        // The vector's highest bit, not LNKCAP: a 64 GT/s vector beside a 32 GT/s LNKCAP.
        let cs = decode(&space(0, 0x105, 0x1015, 0x7e));
        let a = from_config(&cs, Some(0x10de));
        assert_eq!(a.max_link_speed.as_deref(), Some("64.0 GT/s PCIe"));
        assert_eq!(a.cur_link_speed.as_deref(), Some("32.0 GT/s PCIe"));
        // A reserved current speed is what the kernel prints for it.
        let cs = decode(&space(0, 0x105, 0x1017, 0x3e));
        assert_eq!(
            from_config(&cs, Some(0x10de)).cur_link_speed.as_deref(),
            Some("Unknown")
        );
    }

    #[test]
    fn a_bridge_without_ssvid_has_subsystem_zero() {
        let cs = decode(&space(1, 0x105, 0x1105, 0x3e));
        assert_eq!(from_config(&cs, Some(0x10de)).subsystem, Some((0, 0)));
        // With the capability: its ids (chained after the PCI Express capability).
        let mut c = space(1, 0x105, 0x1105, 0x3e);
        c[0x41] = 0x80;
        c[0x80..0x88].copy_from_slice(&[0x0d, 0, 0, 0, 0x00, 0x10, 0x30, 0xa0]);
        let cs = decode(&c);
        assert_eq!(
            from_config(&cs, Some(0x10de)).subsystem,
            Some((0x1000, 0xa030))
        );
    }

    #[test]
    fn nothing_from_a_config_space_that_is_not_believable() {
        let c = space(0, 0x105, 0x1105, 0x3e);
        // Another vendor in sysfs (a config file of another device), no sysfs vendor.
        assert_eq!(
            from_config(&decode(&c), Some(0x15b3)),
            FromConfig::default()
        );
        assert_eq!(from_config(&decode(&c), None), FromConfig::default());
        // All-ones: a device that does not answer (and sysfs that says 0xffff too).
        let ones = vec![0xffu8; 4096];
        assert_eq!(
            from_config(&decode(&ones), Some(0xffff)),
            FromConfig::default()
        );
        // 64 bytes (a non-root reader): the ids, no capability, so no link and no bridge ids.
        let a = from_config(&decode(&c[..64]), Some(0x10de));
        assert_eq!(a.device, Some(0x2335));
        assert_eq!(a.subsystem, Some((0x10de, 0x18b0)));
        assert_eq!(a.cur_link_speed, None);
        assert_eq!(a.max_link_speed, None);
        let b = space(1, 0x105, 0x1105, 0x3e);
        assert_eq!(from_config(&decode(&b[..64]), Some(0x10de)).subsystem, None);
        // Cut inside the capability, before Link Capabilities 2: the current link, no maximum
        // speed.
        let a = from_config(&decode(&c[..0x60]), Some(0x10de));
        assert_eq!(a.cur_link_width, Some(16));
        assert_eq!(a.max_link_width, Some(16));
    }
}
