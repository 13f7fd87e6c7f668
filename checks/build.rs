//! The PCI name table of `names.rs`, generated from the `pci-ids` crate at build time.
//!
//! `pci-ids` keeps its database as `&'static str` and slice pointers: in a position-independent
//! binary each one is a relocation the dynamic loader applies at every start (53,000 of them,
//! 1.3 ms of every gdrdoctor process, its workers included; docs/performance.md). The table
//! written here holds the same vendor and device names as one string and integer offsets
//! into it, so the loader has nothing to patch. `names::tests` compares it with `pci-ids`
//! entry by entry.
//!
//! Written to `$OUT_DIR`: `pci_names.txt` (every name, back to back) and `pci_names.rs`:
//! `VENDORS: [(id, name start, name end, first device, end of devices)]` sorted by id and
//! `DEVICES: [(id, name start, name end)]`, each vendor's sorted by id.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let mut names = String::new();
    let mut add = |s: &str| -> (u32, u32) {
        let start = names.len();
        names.push_str(s);
        (start as u32, names.len() as u32)
    };
    let mut vendors: Vec<&pci_ids::Vendor> = pci_ids::Vendors::iter().collect();
    vendors.sort_by_key(|v| v.id());
    let mut vtab = String::new();
    let mut dtab = String::new();
    let mut ndev = 0u32;
    for v in &vendors {
        let (vs, ve) = add(v.name());
        let first = ndev;
        let mut devs: Vec<&pci_ids::Device> = v.devices().collect();
        devs.sort_by_key(|d| d.id());
        for d in devs {
            let (ds, de) = add(d.name());
            let _ = writeln!(dtab, "    (0x{:04x}, {ds}, {de}),", d.id());
            ndev += 1;
        }
        let _ = writeln!(vtab, "    (0x{:04x}, {vs}, {ve}, {first}, {ndev}),", v.id());
    }
    let rs = format!(
        "/// Every name, back to back.\n\
         pub static NAMES: &str = include_str!(concat!(env!(\"OUT_DIR\"), \"/pci_names.txt\"));\n\
         /// (vendor id, name start, name end, first device, end of devices), sorted by id.\n\
         pub static VENDORS: [(u16, u32, u32, u32, u32); {}] = [\n{vtab}];\n\
         /// (device id, name start, name end), each vendor's sorted by id.\n\
         pub static DEVICES: [(u16, u32, u32); {ndev}] = [\n{dtab}];\n",
        vendors.len()
    );
    let write = |name: &str, text: &str| {
        let p = out.join(name);
        if let Err(e) = std::fs::write(&p, text) {
            panic!("writing {}: {e}", p.display());
        }
    };
    write("pci_names.txt", &names);
    write("pci_names.rs", &rs);
}
