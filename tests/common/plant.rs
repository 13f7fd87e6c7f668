//! The defects an operator plants in a healthy node, on a copy of a sysroot (the same ones
//! scripts/plant.py plants for the shell tests and the benchmark).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

pub const GPU: &str = "0000:48:00.0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// The GPU at 0000:48:00.0 leaves the PCI bus and NVML/CUDA's lists (Xid 79).
    GpuGone,
    /// mlx5_3 port 1 at 200 Gb/s (2X NDR) among ports at 400.
    SlowPort,
    /// mlx5_5 runs 28.39.1002, the others 28.43.1014.
    OddFirmware,
    /// The command line loses `quiet` and gains `pci=noats`.
    Cmdline,
}

pub const ALL: [Defect; 4] = [
    Defect::GpuGone,
    Defect::SlowPort,
    Defect::OddFirmware,
    Defect::Cmdline,
];

pub fn plant(root: &Path, d: Defect) {
    match d {
        Defect::GpuGone => remove_gpu(root, GPU),
        Defect::SlowPort => std::fs::write(
            root.join("sys/class/infiniband/mlx5_3/ports/1/rate"),
            "200 Gb/sec (2X NDR)\n",
        )
        .unwrap(),
        Defect::OddFirmware => std::fs::write(
            root.join("sys/class/infiniband/mlx5_5/fw_ver"),
            "28.39.1002\n",
        )
        .unwrap(),
        Defect::Cmdline => {
            let p = root.join("proc/cmdline");
            let t = std::fs::read_to_string(&p).unwrap();
            let mut v: Vec<&str> = t.split_whitespace().filter(|a| *a != "quiet").collect();
            v.push("pci=noats");
            std::fs::write(&p, format!("{}\n", v.join(" "))).unwrap();
        }
    }
}

/// Remove one GPU from the PCI bus and from what NVML and CUDA report.
pub fn remove_gpu(root: &Path, bdf: &str) {
    let link = root.join("sys/bus/pci/devices").join(bdf);
    let target = std::fs::read_link(&link).unwrap();
    let dev = link.parent().unwrap().join(target);
    std::fs::remove_dir_all(&dev).unwrap();
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir_all(root.join("proc/driver/nvidia/gpus").join(bdf)).unwrap();
    let live = root.join("gdrdoctor/live.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&live).unwrap()).unwrap();
    let keep = |x: &serde_json::Value| {
        !x.as_object().is_some_and(|o| {
            ["bdf", "a", "b", "a_bdf", "b_bdf"]
                .iter()
                .any(|k| o.get(*k).and_then(|b| b.as_str()) == Some(bdf))
        })
    };
    for p in [
        "/nvml/value/gpus",
        "/nvml/value/pairs",
        "/cuda/value/devices",
        "/cuda/value/peers",
    ] {
        v.pointer_mut(p)
            .and_then(|a| a.as_array_mut())
            .unwrap()
            .retain(keep);
    }
    std::fs::write(&live, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Take one PCI function off the bus, as a hot-removal does: its directory (with its RDMA
/// devices and netdevs below it) and every link into it (`/sys/bus/pci/devices/<bdf>`,
/// `/sys/class/infiniband/<dev>`, ...).
pub fn remove_function(root: &Path, bdf: &str) {
    let link = root.join("sys/bus/pci/devices").join(bdf);
    let target = std::fs::read_link(&link).unwrap();
    let dev = link.parent().unwrap().join(target).canonicalize().unwrap();
    fn links_into(dir: &Path, into: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                if let Ok(to) = e.path().canonicalize() {
                    if to.starts_with(into) {
                        out.push(e.path());
                    }
                }
            } else if t.is_dir() {
                links_into(&e.path(), into, out);
            }
        }
    }
    let mut links = Vec::new();
    links_into(&root.join("sys"), &dev, &mut links);
    for l in links.iter().filter(|l| !l.starts_with(&dev)) {
        std::fs::remove_file(l).unwrap();
    }
    std::fs::remove_dir_all(&dev).unwrap();
    assert!(!link.exists() && !dev.exists());
}
