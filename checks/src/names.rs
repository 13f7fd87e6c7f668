//! Display names from the embedded pci.ids database. Names are for people only: every decision
//! is made on numeric ids.

use crate::model::PciDevice;

pub fn vendor_device(vendor: u16, device: u16) -> Option<String> {
    let d = pci_ids::Device::from_vid_pid(vendor, device)?;
    Some(format!("{} {}", short_vendor(d.vendor().name()), d.name()))
}

fn short_vendor(v: &str) -> &str {
    match v {
        "NVIDIA Corporation" => "NVIDIA",
        "Mellanox Technologies" => "Mellanox",
        "Intel Corporation" => "Intel",
        "Advanced Micro Devices, Inc. [AMD]" => "AMD",
        "Broadcom / LSI" => "Broadcom",
        other => other,
    }
}

/// `NVIDIA GH100 [H200 SXM 141GB]`, or `10de:2335` when the database does not know it.
pub fn device_name(d: &PciDevice) -> String {
    match (d.vendor_id.get(), d.device_id.get()) {
        (Some(&v), Some(&p)) => vendor_device(v, p).unwrap_or_else(|| format!("{v:04x}:{p:04x}")),
        _ => format!("device {}", d.bdf),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    #[test]
    fn embedded_database_knows_h200_and_cx7() {
        let h200 = super::vendor_device(0x10de, 0x2335).unwrap_or_default();
        assert!(h200.contains("H200"), "{h200}");
        let cx7 = super::vendor_device(0x15b3, 0x1021).unwrap_or_default();
        assert!(cx7.contains("ConnectX-7"), "{cx7}");
        assert_eq!(super::vendor_device(0xffff, 0xffff), None);
    }
}
