//! Differential test: `pci::attrs::from_config` against the kernel's own sysfs attributes.
//!
//! The collector takes `device`, `subsystem_*` and the four link attributes from the config
//! space instead of their sysfs files. Here every PCI function that has both is compared, value
//! by value, with the files the kernel wrote: this machine's `/sys/bus/pci/devices` (a real
//! kernel, read live), the real captures under `shared/realdata` (non-root captures: 64 bytes of
//! config space, so the ids), the snapshot of the H200 VM (`fixtures/nodes/h200-vm-live.tar.gz`,
//! 4 KiB: the ids and the link) and the constructed sysroots (which must be self-consistent).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/common/nodes.rs"]
mod nodes;
#[path = "../../tests/common/require.rs"]
mod require;

use gdrdoctor_checks::parse;
use gdrdoctor_checks::pci::attrs::{from_config, FromConfig};
use gdrdoctor_checks::pci::config::decode;
use std::path::{Path, PathBuf};

const REALDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/realdata");

/// Every directory under `dir` that holds a `config` file (links not followed).
fn functions(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut has_config = false;
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            functions(&e.path(), out);
        } else if t.is_file() && e.file_name() == "config" {
            has_config = true;
        }
    }
    if has_config {
        out.push(dir.to_path_buf());
    }
}

fn file(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

fn hex16(s: &str) -> Option<u16> {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// The same speed: exactly the kernel's text, or (older kernels print `8 GT/s`, `2.5 GT/s`) the
/// same number.
fn same_speed(ours: &str, kernel: &str) -> bool {
    ours == kernel
        || match (parse::link_speed_gts(ours), parse::link_speed_gts(kernel)) {
            (Some(a), Some(b)) => (a - b).abs() < 1e-9,
            _ => false,
        }
}

/// Compare one function; returns (values compared, disagreements).
fn compare(dir: &Path) -> (usize, Vec<String>) {
    let Ok(bytes) = std::fs::read(dir.join("config")) else {
        return (0, Vec::new());
    };
    let vendor = file(dir, "vendor").as_deref().and_then(hex16);
    let a: FromConfig = from_config(&decode(&bytes), vendor);
    let mut n = 0;
    let mut bad = Vec::new();
    let mut check = |name: &str, ours: Option<String>, same: &dyn Fn(&str, &str) -> bool| {
        if let (Some(ours), Some(kernel)) = (ours, file(dir, name)) {
            n += 1;
            if !same(&ours, &kernel) {
                bad.push(format!(
                    "{}: {name}: config says {ours:?}, sysfs {kernel:?}",
                    dir.display()
                ));
            }
        }
    };
    let id = |a: &str, b: &str| hex16(a) == hex16(b);
    let num = |a: &str, b: &str| a.parse::<u32>().ok() == b.parse::<u32>().ok();
    check("device", a.device.map(|v| format!("0x{v:04x}")), &id);
    check(
        "subsystem_vendor",
        a.subsystem.map(|v| format!("0x{:04x}", v.0)),
        &id,
    );
    check(
        "subsystem_device",
        a.subsystem.map(|v| format!("0x{:04x}", v.1)),
        &id,
    );
    check("current_link_speed", a.cur_link_speed.clone(), &same_speed);
    check(
        "current_link_width",
        a.cur_link_width.map(|v| v.to_string()),
        &num,
    );
    check("max_link_speed", a.max_link_speed.clone(), &same_speed);
    check(
        "max_link_width",
        a.max_link_width.map(|v| v.to_string()),
        &num,
    );
    (n, bad)
}

fn compare_all(dirs: &[PathBuf]) -> (usize, Vec<String>) {
    let mut n = 0;
    let mut bad = Vec::new();
    for d in dirs {
        let (k, b) = compare(d);
        n += k;
        bad.extend(b);
    }
    (n, bad)
}

#[test]
fn the_constructed_sysroots_agree_with_their_config_spaces() {
    let mut dirs = Vec::new();
    for n in nodes::names() {
        functions(&nodes::fixture(&n), &mut dirs);
    }
    let (n, bad) = compare_all(&dirs);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // 26 sysroots of 30-48 functions, seven attributes each.
    assert!(n > 5_000, "only {n} values compared");
}

#[test]
fn the_h200_snapshot_agrees_link_and_ids() {
    let gpu = nodes::fixture("h200-vm-live").join("sys/devices/pci0000:00/0000:00:06.0");
    let (n, bad) = compare(&gpu);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(n, 7, "device, two subsystem ids, four link attributes");
}

#[test]
fn the_real_captures_agree() {
    if require::realdata(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).is_none() {
        return;
    }
    let mut dirs = Vec::new();
    functions(Path::new(REALDATA), &mut dirs);
    let (n, bad) = compare_all(&dirs);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(n >= 100, "only {n} values compared");
}

/// This machine's kernel, read live: every function whose sysfs files can be read.
#[test]
fn this_machines_kernel_agrees() {
    let bus = Path::new("/sys/bus/pci/devices");
    let Ok(rd) = std::fs::read_dir(bus) else {
        eprintln!(
            "SKIP sysfs attributes against this kernel: no {}",
            bus.display()
        );
        return;
    };
    let dirs: Vec<PathBuf> = rd
        .flatten()
        .filter_map(|e| std::fs::canonicalize(e.path()).ok())
        .collect();
    let (n, bad) = compare_all(&dirs);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    if !dirs.is_empty() {
        assert!(n > 0, "{} functions, nothing compared", dirs.len());
    }
}
