//! Collectors: read the node through the [`Root`] into the [`Node`] model. I/O only; no
//! judgement. Every field records where it came from; a field that cannot be read is absent
//! with the reason (`not found`, `permission denied (run as root)`, `not in this capture`).
//!
//! Captures are partial by nature. "File not found" means "absent on the node" only on a
//! complete root (live, or a gdrdoctor snapshot, whose recorder kept every directory it looked
//! in) and only when its parent (the *anchor*, e.g. `/sys/module`) exists; in a foreign capture
//! (hwloc's, a hand-made tree) a missing file is "not in this capture", never a finding.

use crate::meta::Meta;
use crate::reader::{EntryKind, ReadError, Root};
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;
use procfs_core::FromBufRead;
use std::collections::BTreeMap;

const NOT_CAPTURED: &str = "not in this capture";

fn fact<T>(path: &str, r: Result<T, ReadError>) -> Fact<T> {
    match r {
        Ok(v) => Fact::known(v, path),
        Err(e) => Fact::absent(path, e.reason()),
    }
}

/// Parse a file read through the root; a parse failure is an absent fact naming the content.
fn parsed<T>(root: &Root, path: &str, f: impl FnOnce(&str) -> Option<T>) -> Fact<T> {
    match root.read_trimmed(path) {
        Ok(s) => match f(&s) {
            Some(v) => Fact::known(v, path),
            None => Fact::absent(path, format!("unrecognised content {:?}", truncate(&s, 60))),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// A file whose absence is itself an answer, when `anchor` exists.
fn optional_file(root: &Root, path: &str, anchor: &str) -> Fact<Option<String>> {
    match root.read_trimmed(path) {
        Ok(s) => Fact::known(Some(s), path),
        Err(e) if e.is_not_found() && !root.is_complete() => Fact::absent(path, NOT_CAPTURED),
        Err(e) if e.is_not_found() => match root.exists(anchor) {
            Ok(true) => Fact::known(None, path),
            Ok(false) => Fact::absent(path, format!("{NOT_CAPTURED} ({anchor} missing)")),
            Err(e) => Fact::absent(path, e.to_string()),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

/// A directory listing whose absence means "empty" when `anchor` exists.
fn optional_dir(root: &Root, path: &str, anchor: &str) -> Fact<Option<Vec<String>>> {
    match root.read_dir(path) {
        Ok(v) => Fact::known(Some(v.into_iter().map(|e| e.name).collect()), path),
        Err(e) if e.is_not_found() && !root.is_complete() => Fact::absent(path, NOT_CAPTURED),
        Err(e) if e.is_not_found() => match root.exists(anchor) {
            Ok(true) => Fact::known(None, path),
            Ok(false) => Fact::absent(path, format!("{NOT_CAPTURED} ({anchor} missing)")),
            Err(e) => Fact::absent(path, e.to_string()),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

fn list_or_empty(root: &Root, path: &str, anchor: &str) -> Fact<Vec<String>> {
    match optional_dir(root, path, anchor) {
        Fact::Known { value, source } => Fact::Known {
            value: value.unwrap_or_default(),
            source,
        },
        Fact::Absent { source, reason } => Fact::Absent { source, reason },
    }
}

fn basename(s: &str) -> String {
    s.rsplit('/').next().unwrap_or(s).to_string()
}

/// Read the whole node.
pub fn collect(root: &Root, meta: Option<&Meta>) -> Node {
    let live = root.is_live();
    let hostname = match root.read_trimmed("/proc/sys/kernel/hostname") {
        Ok(h) => Fact::known(h, "/proc/sys/kernel/hostname"),
        Err(e) => from_meta(meta, "hostname", |m| m.hostname.clone())
            .unwrap_or_else(|| Fact::absent("/proc/sys/kernel/hostname", e.reason())),
    };
    let kernel_release = match root.read_trimmed("/proc/sys/kernel/osrelease") {
        Ok(k) => Fact::known(k, "/proc/sys/kernel/osrelease"),
        Err(e) => match root.read_trimmed("/proc/version") {
            Ok(v) => match v.split_whitespace().nth(2) {
                Some(r) if v.starts_with("Linux version") => {
                    Fact::known(r.to_string(), "/proc/version")
                }
                _ => Fact::absent("/proc/version", "unrecognised content"),
            },
            Err(_) => from_meta(meta, "kernel_release", |m| m.kernel_release.clone())
                .unwrap_or_else(|| Fact::absent("/proc/sys/kernel/osrelease", e.reason())),
        },
    };
    let arch = if live {
        match uname_machine() {
            Some(m) => Fact::known(m, "uname(2)"),
            None => Fact::absent("uname(2)", "uname failed"),
        }
    } else {
        from_meta(meta, "arch", |m| m.arch.clone()).unwrap_or_else(|| {
            Fact::absent(
                "uname(2)",
                "live-only fact; the sysroot has no gdrdoctor/meta.json",
            )
        })
    };
    let cpu_vendor = parsed(root, "/proc/cpuinfo", parse::cpu_vendor);
    let modules = Modules {
        proc_modules: match root.read("/proc/modules") {
            Ok(b) => match procfs_core::KernelModules::from_buf_read(b.as_slice()) {
                Ok(m) => Fact::known(
                    m.0.into_iter()
                        .map(|(k, v)| {
                            (
                                k,
                                LoadedModule {
                                    state: v.state,
                                    used_by: v.used_by,
                                },
                            )
                        })
                        .collect(),
                    "/proc/modules",
                ),
                Err(e) => Fact::absent("/proc/modules", format!("unparsable: {e}")),
            },
            Err(e) => Fact::absent("/proc/modules", e.reason()),
        },
        sys_module: match root.read_dir("/sys/module") {
            Ok(v) => Fact::known(v.into_iter().map(|e| e.name).collect(), "/sys/module"),
            Err(e) => Fact::absent("/sys/module", e.reason()),
        },
    };
    let cmdline = parsed(root, "/proc/cmdline", |s| Some(parse::cmdline(s)));
    let hugepages = match root.read("/proc/meminfo") {
        Ok(b) => match procfs_core::Meminfo::from_buf_read(b.as_slice()) {
            Ok(m) => Fact::known(
                HugePages {
                    total: m.hugepages_total.unwrap_or(0),
                    free: m.hugepages_free.unwrap_or(0),
                    size_kib: m.hugepagesize.unwrap_or(0) / 1024,
                },
                "/proc/meminfo",
            ),
            Err(e) => Fact::absent("/proc/meminfo", format!("unparsable: {e}")),
        },
        Err(e) => Fact::absent("/proc/meminfo", e.reason()),
    };
    let (memlock, euid, env) = if live {
        (
            live_memlock(),
            Fact::known(unsafe_free_geteuid(), "geteuid(2)"),
            Fact::known(relevant_env(), "environment"),
        )
    } else {
        let memlock = from_meta(meta, "memlock", |m| m.memlock).unwrap_or_else(|| {
            match root.read_text("/proc/self/limits") {
                Ok(t) => match parse::memlock_from_limits(&t) {
                    Some(l) => Fact::known(l, "/proc/self/limits"),
                    None => Fact::absent("/proc/self/limits", "no `Max locked memory` line"),
                },
                Err(_) => Fact::absent(
                    "getrlimit(RLIMIT_MEMLOCK)",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                ),
            }
        });
        let euid = from_meta(meta, "euid", |m| m.euid).unwrap_or_else(|| {
            Fact::absent(
                "geteuid(2)",
                "live-only fact; the sysroot has no gdrdoctor/meta.json",
            )
        });
        // The snapshot's environment, overlaid by the NCCL_*/NVSHMEM_* variables gdrdoctor runs
        // with now (so `NCCL_NET_GDR_LEVEL=SYS gdrdoctor topo --sysroot x` asks "what if").
        let now = relevant_env();
        let env = match meta {
            Some(m) => {
                let mut e = m.env.clone();
                let overlaid = !now.is_empty();
                e.extend(now);
                Fact::known(
                    e,
                    if overlaid {
                        "gdrdoctor/meta.json + current environment"
                    } else {
                        "gdrdoctor/meta.json"
                    },
                )
            }
            None if !now.is_empty() => Fact::known(now, "current environment"),
            None => Fact::absent(
                "environment",
                "live-only fact; the sysroot has no gdrdoctor/meta.json",
            ),
        };
        (memlock, euid, env)
    };
    let pci = collect_pci(root);
    let iommu = Iommu {
        classes: list_or_empty(root, "/sys/class/iommu", "/sys/class"),
        groups: collect_iommu_groups(root),
        default_domain: Fact::absent("kernel log", "not collected (needs dmesg access)"),
    };
    let nvidia = collect_nvidia(root);
    let peermem = collect_peermem(root);
    let rdma = collect_rdma(root);
    let health = crate::health::collect(root, &pci, &rdma);
    Node {
        source: if live {
            SourceKind::Live
        } else {
            SourceKind::Sysroot
        },
        root: root.base().display().to_string(),
        hostname,
        kernel_release,
        arch,
        cpu_vendor,
        modules,
        cmdline,
        hugepages,
        memlock,
        euid,
        env,
        iommu,
        nvidia,
        peermem,
        pci,
        health,
        rdma,
        live: LiveFacts::absent("not queried"),
    }
}

fn from_meta<T>(
    meta: Option<&Meta>,
    what: &str,
    f: impl FnOnce(&Meta) -> Option<T>,
) -> Option<Fact<T>> {
    let m = meta?;
    f(m).map(|v| Fact::known(v, format!("gdrdoctor/meta.json ({what} at snapshot time)")))
}

fn uname_machine() -> Option<String> {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct we own; the fields are NUL-terminated C strings.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = u
        .machine
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn unsafe_free_geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn live_memlock() -> Fact<Rlimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return Fact::absent(
            "getrlimit(RLIMIT_MEMLOCK)",
            std::io::Error::last_os_error().to_string(),
        );
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            None
        } else {
            Some(v)
        }
    };
    Fact::known(
        Rlimit {
            soft: conv(r.rlim_cur),
            hard: conv(r.rlim_max),
        },
        "getrlimit(RLIMIT_MEMLOCK)",
    )
}

/// The environment variables that change GDR decisions (NCCL, NVSHMEM, UCX, CUDA).
pub fn relevant_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            [
                "NCCL_",
                "NVSHMEM_",
                "UCX_",
                "CUDA_VISIBLE_DEVICES",
                "CUDA_MODULE_LOADING",
            ]
            .iter()
            .any(|p| k.starts_with(p))
        })
        .collect()
}

fn collect_iommu_groups(root: &Root) -> Fact<Vec<IommuGroup>> {
    const DIR: &str = "/sys/kernel/iommu_groups";
    let ids = match list_or_empty(root, DIR, "/sys/kernel") {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::Absent { source, reason },
    };
    let mut groups: Vec<IommuGroup> = ids
        .into_iter()
        .map(|id| {
            let base = format!("{DIR}/{id}");
            let kind = fact(
                &format!("{base}/type"),
                root.read_trimmed(&format!("{base}/type")),
            );
            let devices = root
                .read_dir(&format!("{base}/devices"))
                .map(|v| v.into_iter().map(|e| e.name).collect())
                .unwrap_or_default();
            IommuGroup { id, kind, devices }
        })
        .collect();
    groups.sort_by_key(|g| g.id.parse::<u64>().unwrap_or(u64::MAX));
    Fact::known(groups, DIR)
}

fn collect_nvidia(root: &Root) -> NvidiaDriver {
    const VERSION: &str = "/proc/driver/nvidia/version";
    // A missing version file means "driver not loaded" only where /proc/driver itself exists
    // (always, live; in a capture, only if it was captured).
    let mut version_file = optional_file(root, VERSION, "/proc/driver");
    if let Fact::Known { value: None, .. } = version_file {
        if root.exists("/proc/driver/nvidia").unwrap_or(false) {
            version_file = Fact::absent(VERSION, "missing although /proc/driver/nvidia exists");
        }
    }
    let params = match root.read_text("/proc/driver/nvidia/params") {
        Ok(t) => Fact::known(parse::colon_map(&t), "/proc/driver/nvidia/params"),
        Err(e) => Fact::absent("/proc/driver/nvidia/params", e.reason()),
    };
    let gpus = match root.read_dir("/proc/driver/nvidia/gpus") {
        Ok(entries) => {
            let mut m = BTreeMap::new();
            for e in entries {
                let p = format!("/proc/driver/nvidia/gpus/{}/information", e.name);
                let info = root
                    .read_text(&p)
                    .map(|t| parse::colon_map(&t))
                    .unwrap_or_default();
                m.insert(e.name.to_lowercase(), info);
            }
            Fact::known(m, "/proc/driver/nvidia/gpus")
        }
        Err(e) => Fact::absent("/proc/driver/nvidia/gpus", e.reason()),
    };
    NvidiaDriver {
        version_file,
        params,
        gpus,
    }
}

fn collect_peermem(root: &Root) -> PeerMem {
    let nv_peer_mem = match root.exists("/sys/module/nv_peer_mem") {
        Ok(true) => Fact::known(true, "/sys/module/nv_peer_mem"),
        Ok(false) if !root.is_complete() => Fact::absent("/sys/module/nv_peer_mem", NOT_CAPTURED),
        Ok(false) => match root.exists("/sys/module") {
            Ok(true) => Fact::known(false, "/sys/module/nv_peer_mem"),
            _ => Fact::absent(
                "/sys/module/nv_peer_mem",
                format!("{NOT_CAPTURED} (/sys/module missing)"),
            ),
        },
        Err(e) => Fact::absent("/sys/module/nv_peer_mem", e.reason()),
    };
    let params = match root.read_dir("/sys/module/nvidia_peermem/parameters") {
        Ok(v) => Fact::known(
            v.into_iter()
                .filter(|e| e.kind == EntryKind::File)
                .map(|e| {
                    let p = format!("/sys/module/nvidia_peermem/parameters/{}", e.name);
                    let val = root
                        .read_trimmed(&p)
                        .unwrap_or_else(|e| format!("unreadable: {}", e.reason()));
                    (e.name, val)
                })
                .collect(),
            "/sys/module/nvidia_peermem/parameters",
        ),
        Err(e) => Fact::absent("/sys/module/nvidia_peermem/parameters", e.reason()),
    };
    PeerMem {
        nv_mem_version: optional_file(
            root,
            "/sys/kernel/mm/memory_peers/nv_mem/version",
            "/sys/kernel/mm",
        ),
        nv_mem_nc_version: optional_file(
            root,
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
            "/sys/kernel/mm",
        ),
        nvidia_peermem_version: optional_file(
            root,
            "/sys/module/nvidia_peermem/version",
            "/sys/module",
        ),
        nv_peer_mem,
        memory_peers: optional_dir(root, "/sys/kernel/mm/memory_peers", "/sys/kernel/mm"),
        nvidia_peermem_params: params,
    }
}

/// The PCI functions: `/sys/bus/pci/devices`, or, in captures without it, a walk of
/// `/sys/devices/pci*`.
fn collect_pci(root: &Root) -> Fact<Vec<PciDevice>> {
    const BUS: &str = "/sys/bus/pci/devices";
    let mut paths: Vec<String> = Vec::new();
    let listed = root.read_dir(BUS);
    match &listed {
        Ok(entries) => {
            for e in entries.iter().filter(|e| parse::is_bdf(&e.name)) {
                match root.canonical(&format!("{BUS}/{}", e.name)) {
                    Ok(p) => paths.push(p),
                    Err(_) => paths.push(format!("{BUS}/{}", e.name)),
                }
            }
        }
        Err(e) if !e.is_not_found() => return Fact::absent(BUS, e.reason()),
        Err(_) => {}
    }
    let mut source = BUS.to_string();
    if paths.is_empty() {
        match root.read_dir("/sys/devices") {
            Ok(tops) => {
                for t in tops
                    .iter()
                    .filter(|t| t.name.starts_with("pci") && t.kind == EntryKind::Dir)
                {
                    walk_pci(root, &format!("/sys/devices/{}", t.name), &mut paths, 0);
                }
                source = "/sys/devices/pci*".into();
            }
            Err(e) => {
                return match listed {
                    Err(le) => Fact::absent(BUS, le.reason()),
                    Ok(_) => Fact::absent("/sys/devices", e.reason()),
                }
            }
        }
    }
    // Config space and the other attributes are read only for GPUs, NICs, NVSwitches and the
    // bridges above them: config reads are slow (each dword traps to the hypervisor in a VM) and
    // nothing else changes a GDR decision.
    let ids: Vec<(u32, u16)> = paths
        .iter()
        .map(|p| {
            let class = root
                .read_trimmed(&format!("{p}/class"))
                .ok()
                .and_then(|s| parse::hex_u32(&s))
                .unwrap_or(0);
            let vendor = root
                .read_trimmed(&format!("{p}/vendor"))
                .ok()
                .and_then(|s| parse::hex_u16(&s))
                .unwrap_or(0);
            (class, vendor)
        })
        .collect();
    let mut relevant = std::collections::BTreeSet::new();
    for (p, (class, vendor)) in paths.iter().zip(&ids) {
        if is_relevant(*class, *vendor) {
            relevant.extend(
                p.split('/')
                    .filter(|c| parse::is_bdf(c))
                    .map(str::to_lowercase),
            );
        }
    }
    let mut devs: Vec<PciDevice> = paths
        .iter()
        .map(|p| {
            let bdf = p.rsplit('/').next().unwrap_or_default().to_lowercase();
            pci_device(root, p, relevant.contains(&bdf))
        })
        .collect();
    devs.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    devs.dedup_by(|a, b| a.bdf == b.bdf);
    Fact::known(devs, source)
}

fn walk_pci(root: &Root, dir: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 32 {
        return;
    }
    let Ok(entries) = root.read_dir(dir) else {
        return;
    };
    for e in entries
        .into_iter()
        .filter(|e| e.kind == EntryKind::Dir && parse::is_bdf(&e.name))
    {
        let p = format!("{dir}/{}", e.name);
        out.push(p.clone());
        walk_pci(root, &p, out, depth + 1);
    }
}

fn not_read<T>(path: &str) -> Fact<T> {
    Fact::absent(path, "not read: not a GPU, NIC or a bridge above one")
}

/// GPUs (display class), network controllers (Ethernet, InfiniBand), NVSwitches and accelerators.
pub fn is_relevant(class: u32, vendor: u16) -> bool {
    let base = class >> 16;
    base == 0x03 || base == 0x02 || base == 0x12 || (vendor == 0x10de && (class >> 8) == 0x0680)
}

fn pci_device(root: &Root, path: &str, full: bool) -> PciDevice {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let bdf = comps.last().map(|c| c.to_lowercase()).unwrap_or_default();
    let bdfs: Vec<&&str> = comps.iter().filter(|c| parse::is_bdf(c)).collect();
    let parent = if bdfs.len() >= 2 {
        Some(bdfs[bdfs.len() - 2].to_lowercase())
    } else {
        None
    };
    let host_bridge = comps
        .iter()
        .find(|c| c.starts_with("pci"))
        .map(|c| c.to_string())
        .unwrap_or_default();
    let attr = |name: &str| format!("{path}/{name}");
    let hex16 = |name: &str| parsed(root, &attr(name), parse::hex_u16);
    let link_name = |name: &str| -> Fact<Option<String>> {
        let p = attr(name);
        match root.read_link(&p) {
            Ok(t) => Fact::known(Some(basename(&t)), p),
            Err(e) if e.is_not_found() && root.is_complete() => Fact::known(None, p),
            Err(e) if e.is_not_found() => Fact::absent(p, NOT_CAPTURED),
            // Captures that flattened links into files (content = target) still tell us.
            Err(e) => match root.read_trimmed(&p) {
                Ok(t) if t.contains('/') => Fact::known(Some(basename(&t)), p),
                _ => Fact::absent(p, e.reason()),
            },
        }
    };
    if !full {
        return PciDevice {
            bdf,
            sysfs_path: path.to_string(),
            parent,
            host_bridge,
            vendor_id: hex16("vendor"),
            device_id: hex16("device"),
            subsystem_vendor_id: not_read(&attr("subsystem_vendor")),
            subsystem_device_id: not_read(&attr("subsystem_device")),
            class: parsed(root, &attr("class"), parse::hex_u32),
            numa_node: not_read(&attr("numa_node")),
            local_cpulist: not_read(&attr("local_cpulist")),
            cur_link_speed: not_read(&attr("current_link_speed")),
            cur_link_width: not_read(&attr("current_link_width")),
            max_link_speed: not_read(&attr("max_link_speed")),
            max_link_width: not_read(&attr("max_link_width")),
            resources: not_read(&attr("resource")),
            driver: not_read(&attr("driver")),
            iommu_group: not_read(&attr("iommu_group")),
            config: not_read(&attr("config")),
            is_virtfn: false,
        };
    }
    PciDevice {
        bdf,
        sysfs_path: path.to_string(),
        parent,
        host_bridge,
        vendor_id: hex16("vendor"),
        device_id: hex16("device"),
        subsystem_vendor_id: hex16("subsystem_vendor"),
        subsystem_device_id: hex16("subsystem_device"),
        class: parsed(root, &attr("class"), parse::hex_u32),
        numa_node: parsed(root, &attr("numa_node"), |s| s.trim().parse().ok()),
        local_cpulist: fact(
            &attr("local_cpulist"),
            root.read_trimmed(&attr("local_cpulist")),
        ),
        cur_link_speed: fact(
            &attr("current_link_speed"),
            root.read_trimmed(&attr("current_link_speed")),
        ),
        cur_link_width: parsed(root, &attr("current_link_width"), |s| s.trim().parse().ok()),
        max_link_speed: fact(
            &attr("max_link_speed"),
            root.read_trimmed(&attr("max_link_speed")),
        ),
        max_link_width: parsed(root, &attr("max_link_width"), |s| s.trim().parse().ok()),
        resources: match root.read_text(&attr("resource")) {
            Ok(t) => match parse::resource_file(&t) {
                Ok(r) => Fact::known(r, attr("resource")),
                Err(e) => Fact::absent(attr("resource"), e),
            },
            Err(e) => Fact::absent(attr("resource"), e.reason()),
        },
        driver: link_name("driver"),
        iommu_group: link_name("iommu_group"),
        config: fact(&attr("config"), root.read(&attr("config"))),
        is_virtfn: root.exists(&attr("physfn")).unwrap_or(false),
    }
}

fn collect_rdma(root: &Root) -> Fact<Vec<RdmaDevice>> {
    const DIR: &str = "/sys/class/infiniband";
    let names = match list_or_empty(root, DIR, "/sys/class") {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::Absent { source, reason },
    };
    let devs = names
        .into_iter()
        .map(|name| {
            let base = format!("{DIR}/{name}");
            let attr = |a: &str| {
                let p = format!("{base}/{a}");
                fact(&p, root.read_trimmed(&p))
            };
            let dev_link = format!("{base}/device");
            let pci_bdf = match root.canonical(&dev_link) {
                Ok(p) => Fact::known(
                    p.rsplit('/')
                        .find(|c| parse::is_bdf(c))
                        .map(str::to_lowercase),
                    dev_link,
                ),
                Err(e) if e.is_not_found() => Fact::known(None, dev_link),
                Err(e) => Fact::absent(dev_link, e.reason()),
            };
            RdmaDevice {
                pci_bdf,
                fw_ver: attr("fw_ver"),
                hca_type: attr("hca_type"),
                board_id: attr("board_id"),
                node_guid: attr("node_guid"),
                node_type: attr("node_type"),
                ports: collect_ports(root, &base),
                name,
            }
        })
        .collect();
    Fact::known(devs, DIR)
}

fn collect_ports(root: &Root, base: &str) -> Fact<Vec<RdmaPort>> {
    let dir = format!("{base}/ports");
    let entries = match root.read_dir(&dir) {
        Ok(e) => e,
        Err(e) => return Fact::absent(dir, e.reason()),
    };
    let mut ports: Vec<RdmaPort> = entries
        .into_iter()
        .filter_map(|e| e.name.parse::<u32>().ok())
        .map(|port| {
            let pb = format!("{dir}/{port}");
            let attr = |a: &str| {
                let p = format!("{pb}/{a}");
                fact(&p, root.read_trimmed(&p))
            };
            let gids = format!("{pb}/gids");
            let gid_count = match root.read_dir(&gids) {
                Ok(list) => Fact::known(
                    list.iter()
                        .filter(|g| {
                            root.read_trimmed(&format!("{gids}/{}", g.name))
                                .is_ok_and(|t| parse::gid_is_set(&t))
                        })
                        .count(),
                    gids,
                ),
                Err(e) => Fact::absent(gids, e.reason()),
            };
            RdmaPort {
                port,
                state: attr("state"),
                phys_state: attr("phys_state"),
                link_layer: attr("link_layer"),
                rate: attr("rate"),
                gid_count,
            }
        })
        .collect();
    ports.sort_by_key(|p| p.port);
    Fact::known(ports, dir)
}
