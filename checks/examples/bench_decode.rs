//! Time `pci::config::decode` on real and constructed config spaces.
//! `cargo run --release -p gdrdoctor-checks --example bench_decode`
use gdrdoctor_checks::pci::config::decode;
use std::time::Instant;

#[path = "../../tests/common/nodes.rs"]
mod nodes;

fn main() {
    let at = |name: &str, rel: &str| nodes::fixture(name).join(rel).display().to_string();
    let cases = [
        (
            "H200 GPU (captured, 4096 B)",
            at("h200-vm-live", "sys/devices/pci0000:00/0000:00:06.0/config"),
        ),
        (
            "switch downstream port (ACS, AER)",
            at(
                "hgx-h200x8-cx7x8-acs-redirect",
                "sys/devices/pci0000:35/0000:35:01.0/0000:36:00.0/0000:37:00.0/config",
            ),
        ),
        (
            "ConnectX-7 (ATS, AER)",
            at(
                "hgx-h200x8-cx7x8-healthy",
                "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0/config",
            ),
        ),
    ];
    const N: u32 = 200_000;
    for (name, path) in cases {
        let Ok(bytes) = std::fs::read(&path) else {
            eprintln!("{path}: missing");
            continue;
        };
        let mut sink = 0usize;
        let t0 = Instant::now();
        for _ in 0..N {
            let cs = decode(std::hint::black_box(&bytes));
            sink += cs.ext_capabilities.len();
        }
        let ns = t0.elapsed().as_nanos() as f64 / f64::from(N);
        println!("{name:<36} {ns:>8.0} ns per decode ({sink} caps seen)");
    }
}
