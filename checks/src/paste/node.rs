//! A [`Node`] from pasted text: the same model the checks read on a live node, with every fact
//! citing the paste block it came from (`b3 (lsmod, bug.txt:12-40)`) and every fact the paste
//! does not show absent with the reason `not in the pasted text`.
//!
//! Some facts follow from others exactly and are derived with the reason in their source:
//! a whole `lsmod` (or a `grep` whose pattern covers the name) says whether `nvidia_peermem`
//! and `nv_peer_mem` are loaded, hence whether `/sys/module/nvidia_peermem/version` and the
//! `memory_peers` entries exist; NCCL's `NET/IB : Using [0]mlx5_0:1/IB` lists only ports that
//! are ACTIVE (`ncclIbInit` skips the others); NCCL 2.20+ prints each NIC's sysfs `pciPath`.

use super::block::BlockStatus;
use super::nccl::NcclLog;
use super::pasted::Paste;
use crate::model::*;
use std::collections::BTreeMap;

/// The reason of every fact a paste does not show.
pub const NOT_PASTED: &str = "not in the pasted text";

fn absent<T>(source: &str, reason: impl Into<String>) -> Fact<T> {
    Fact::absent(source, reason)
}

/// Where each kind of kernel path the checks cite came from: (path prefix, block label).
pub type Provenance = Vec<(String, String)>;

/// Build the node, and the provenance of the kernel paths the checks cite. Each fact comes
/// from the blocks that show it, in an order of preference where several kinds do (a
/// `uname` before the kernel log's banner, `ibv_devinfo` before NCCL's device list).
pub fn build(p: &Paste) -> (Node, Provenance) {
    let mut prov: Provenance = Vec::new();
    let log = p.nccl_merged();
    let nccl_label = p.nccl.first().map(|(i, _)| p.label(*i));
    let hostname = hostname(log.as_ref(), nccl_label.as_deref());
    let (kernel_release, arch) = kernel_release(p);
    let (proc_modules, peermem) = modules(p, &mut prov);
    let cmdline = cmdline(p, &mut prov);
    let memlock = match p.ulimit.first() {
        Some((i, r)) => Fact::known(*r, p.label(*i)),
        None => absent("getrlimit(RLIMIT_MEMLOCK)", NOT_PASTED),
    };
    let env = environment(p, log.as_ref(), nccl_label.as_deref());
    let default_domain = default_domain(p);
    let version_file = version_file(p, &mut prov);
    let mut pci = pci_devices(p, &mut prov);
    let nvml = smi_gpus(p, &mut pci, &mut prov);
    // RDMA devices: ibv_devinfo / ibstat, else what NCCL listed.
    let rdma = rdma_devices(p, log.as_ref(), &mut prov);
    let node = Node {
        source: SourceKind::Evidence,
        root: "paste".into(),
        hostname,
        kernel_release,
        arch,
        cpu_vendor: absent("/proc/cpuinfo", NOT_PASTED),
        modules: Modules {
            proc_modules,
            sys_module: absent("/sys/module", NOT_PASTED),
        },
        cmdline,
        hugepages: absent("/proc/meminfo", NOT_PASTED),
        memlock,
        euid: absent("geteuid(2)", NOT_PASTED),
        env,
        iommu: Iommu {
            classes: absent(
                "/sys/class/iommu",
                format!("{NOT_PASTED} (`ls /sys/class/iommu`)"),
            ),
            groups: absent("/sys/kernel/iommu_groups", NOT_PASTED),
            default_domain,
        },
        nvidia: NvidiaDriver {
            version_file,
            params: absent(
                "/proc/driver/nvidia/params",
                format!("{NOT_PASTED} (`cat /proc/driver/nvidia/params`)"),
            ),
            gpus: absent("/proc/driver/nvidia/gpus", NOT_PASTED),
        },
        peermem,
        pci,
        rdma,
        live: LiveFacts {
            nvml,
            ..LiveFacts::absent(NOT_PASTED)
        },
        health: Health {
            kernel_log: kernel_log(p),
            ..Health::absent(NOT_PASTED)
        },
        container: absent(
            "container view",
            "live-only: run `gdrdoctor check --in-container` inside the job's container",
        ),
        cpu_model: absent("/proc/cpuinfo", NOT_PASTED),
        addons: Addons::absent("the paste", NOT_PASTED),
    };
    (node, prov)
}

/// Host name: only when the log comes from a single host.
fn hostname(log: Option<&NcclLog>, nccl_label: Option<&str>) -> Fact<String> {
    match log.map(|l| l.hosts.clone()) {
        Some(h) if h.len() == 1 => Fact::known(h[0].clone(), nccl_label.unwrap_or_default()),
        Some(h) if h.len() > 1 => absent(
            "hostname",
            format!(
                "the NCCL log comes from {} hosts ({})",
                h.len(),
                h.join(", ")
            ),
        ),
        _ => absent("hostname", NOT_PASTED),
    }
}

/// Kernel release and machine: `uname`, else the kernel log's banner.
fn kernel_release(p: &Paste) -> (Fact<String>, Fact<String>) {
    let mut kernel_release = absent("/proc/sys/kernel/osrelease", NOT_PASTED);
    let mut arch = absent("uname -m", NOT_PASTED);
    if let Some((i, m)) = p
        .uname
        .iter()
        .find_map(|(i, _, m)| m.as_ref().map(|m| (i, m)))
    {
        arch = Fact::known(m.clone(), p.label(*i));
    }
    if let Some((i, r)) = p
        .uname
        .iter()
        .find_map(|(i, r, _)| r.as_ref().map(|r| (i, r)))
    {
        kernel_release = Fact::known(r.clone(), p.label(*i));
    } else if let Some((i, r)) = p.dmesg.iter().find_map(|(i, e)| match e {
        super::kernel::DmesgEvent::LinuxVersion { release, .. } => Some((i, release)),
        _ => None,
    }) {
        kernel_release = if super::kernel::release_cut(r) {
            absent(
                "/proc/sys/kernel/osrelease",
                format!(
                    "{}: the kernel release `{r}` in the boot banner is cut (a release has three numbers, as 5.15.0): unknown",
                    p.label(*i)
                ),
            )
        } else {
            Fact::known(r.clone(), p.label(*i))
        };
    }

    (kernel_release, arch)
}

/// Modules: a whole listing is /proc/modules; what a listing (or a `grep` whose pattern covers
/// the name) says of the peer-memory modules.
fn modules(p: &Paste, prov: &mut Provenance) -> (Fact<BTreeMap<String, LoadedModule>>, PeerMem) {
    let whole = p.modules.iter().find(|(_, m)| m.complete);
    let proc_modules = match whole {
        Some((i, m)) => {
            prov.push(("/proc/modules".into(), p.label(*i)));
            prov.push(("/sys/module".into(), p.label(*i)));
            Fact::known(m.modules.clone(), p.label(*i))
        }
        None => match p.modules.first() {
            Some((i, m)) => absent("/proc/modules", format!("{}: {}", p.label(*i), m.note)),
            None => absent("/proc/modules", NOT_PASTED),
        },
    };
    let knows = |name: &str| -> Option<(bool, usize)> {
        let mut no = None;
        for (i, m) in &p.modules {
            match m.knows(name) {
                Some(true) => return Some((true, *i)),
                Some(false) => no = no.or(Some(*i)),
                None => {}
            }
        }
        no.map(|i| (false, i))
    };
    let peermem_mod = knows("nvidia_peermem");
    let legacy_mod = knows("nv_peer_mem");
    let why_unknown = |name: &str| -> String {
        match p.modules.first() {
            Some((i, m)) => format!(
                "{}: {}; whether {name} is loaded is not shown (`lsmod | grep {name}`)",
                p.label(*i),
                m.note
            ),
            None => format!("{NOT_PASTED} (`lsmod | grep peer`)"),
        }
    };
    let nvidia_peermem_version = match peermem_mod {
        Some((true, i)) => {
            prov.push(("/sys/module/nvidia_peermem".into(), p.label(i)));
            Fact::known(
                Some("loaded (lsmod shows no version)".to_string()),
                p.label(i),
            )
        }
        Some((false, i)) => {
            prov.push(("/sys/module/nvidia_peermem".into(), p.label(i)));
            Fact::known(None, p.label(i))
        }
        None => absent(
            "/sys/module/nvidia_peermem/version",
            why_unknown("nvidia_peermem"),
        ),
    };
    let nv_peer_mem = match legacy_mod {
        Some((v, i)) => {
            prov.push(("/sys/module/nv_peer_mem".into(), p.label(i)));
            Fact::known(v, p.label(i))
        }
        None => absent("/sys/module/nv_peer_mem", why_unknown("nv_peer_mem")),
    };
    // The memory_peers entries exist only with a peer-memory module loaded.
    let (nv_mem, memory_peers): (Fact<Option<String>>, Fact<Option<Vec<String>>>) =
        match (peermem_mod, legacy_mod) {
            (Some((false, i)), Some((false, _))) => {
                prov.push(("/sys/kernel/mm/memory_peers".into(), p.label(i)));
                (Fact::known(None, p.label(i)), Fact::known(None, p.label(i)))
            }
            _ => (
                absent(
                    "/sys/kernel/mm/memory_peers/nv_mem/version",
                    "not in the pasted text (`ls /sys/kernel/mm/memory_peers`)",
                ),
                absent(
                    "/sys/kernel/mm/memory_peers",
                    "not in the pasted text (`ls /sys/kernel/mm/memory_peers`)",
                ),
            ),
        };
    let nv_mem_nc = nv_mem.clone();

    (
        proc_modules,
        PeerMem {
            nv_mem_version: nv_mem,
            nv_mem_nc_version: nv_mem_nc,
            nvidia_peermem_version,
            nv_peer_mem,
            memory_peers,
            nvidia_peermem_params: absent("/sys/module/nvidia_peermem/parameters", NOT_PASTED),
        },
    )
}

/// Command line: the running kernel's only.
fn cmdline(p: &Paste, prov: &mut Provenance) -> Fact<Vec<String>> {
    match p
        .cmdline
        .iter()
        .find(|(_, c)| c.running)
        .map(|(i, c)| (*i, c.args.clone()))
        .or_else(|| {
            p.dmesg.iter().find_map(|(i, e)| match e {
                super::kernel::DmesgEvent::CommandLine { args, .. } => Some((*i, args.clone())),
                _ => None,
            })
        }) {
        Some((i, a)) => {
            prov.push(("/proc/cmdline".into(), p.label(i)));
            Fact::known(a, p.label(i))
        }
        None => match p.cmdline.first() {
            Some((i, _)) => absent(
                "/proc/cmdline",
                format!(
                    "{} is GRUB_CMDLINE_LINUX, the boot configuration; the running kernel's is `cat /proc/cmdline`",
                    p.label(*i)
                ),
            ),
            None => absent("/proc/cmdline", NOT_PASTED),
        },
    }
}

/// Environment: NCCL's own `set by environment` lines, and pasted `NCCL_*=` lines.
fn environment(
    p: &Paste,
    log: Option<&NcclLog>,
    nccl_label: Option<&str>,
) -> Fact<BTreeMap<String, String>> {
    let mut env_map: BTreeMap<String, String> = BTreeMap::new();
    let mut env_src: Vec<String> = Vec::new();
    for (i, e) in &p.env {
        env_map.extend(e.clone());
        env_src.push(p.label(*i));
    }
    if let Some(l) = log {
        if !l.env.is_empty() {
            env_map.extend(l.env.clone());
        }
        if let Some(lab) = nccl_label {
            env_src.push(lab.to_string());
        }
    }
    if env_src.is_empty() {
        absent(
            "environment",
            "no NCCL log or NCCL_* lines in the paste: NCCL's defaults assumed",
        )
    } else {
        Fact::known(env_map, env_src.join(", "))
    }
}

/// The kernel log's `iommu: Default domain type:` line.
fn default_domain(p: &Paste) -> Fact<Option<String>> {
    match p.dmesg.iter().find_map(|(i, e)| match e {
        super::kernel::DmesgEvent::IommuInfo { text, .. }
            if text.contains("Default domain type") =>
        {
            Some((i, text.clone()))
        }
        _ => None,
    }) {
        Some((i, t)) => Fact::known(Some(t), p.label(*i)),
        None => absent("kernel log", NOT_PASTED),
    }
}

/// NVIDIA driver: the version file text, from the file or the driver's dmesg banner.
fn version_file(p: &Paste, prov: &mut Provenance) -> Fact<Option<String>> {
    match p.nvidia_version.first() {
        Some((i, t)) => {
            prov.push(("/proc/driver/nvidia/version".into(), p.label(*i)));
            Fact::known(Some(t.clone()), p.label(*i))
        }
        None => {
            let smi = p
                .smiq
                .iter()
                .find_map(|(i, q)| q.driver_version.clone().map(|v| (i, v)));
            match smi {
                Some((i, v)) => absent(
                    "/proc/driver/nvidia/version",
                    format!(
                        "{} shows driver {v} but not whether its kernel module is open or proprietary (`cat /proc/driver/nvidia/version`)",
                        p.label(*i)
                    ),
                ),
                None => absent("/proc/driver/nvidia/version", NOT_PASTED),
            }
        }
    }
}

/// PCI functions from lspci, placed in the tree when lspci -tv is pasted too.
fn pci_devices(p: &Paste, prov: &mut Provenance) -> Fact<Vec<PciDevice>> {
    let tree = p.trees.first().map(|(i, t)| (*i, t));
    if p.lspci.is_empty() {
        absent(
            "/sys/bus/pci/devices",
            format!("{NOT_PASTED} (`sudo lspci -vvv`)"),
        )
    } else {
        let (first_i, _) = &p.lspci[0];
        prov.push(("/sys/bus/pci/devices".into(), p.label(*first_i)));
        let mut devs: Vec<PciDevice> = Vec::new();
        for (i, d) in &p.lspci {
            if devs.iter().any(|x| x.bdf == d.bdf) {
                continue;
            }
            let lab = p.label(*i);
            let path = tree.and_then(|(ti, t)| {
                t.sysfs_path(&d.bdf).inspect(|s| {
                    prov.push((s.clone(), format!("{lab} + {}", p.label(ti))));
                })
            });
            devs.push(pci_device(d, &lab, path, tree.map(|(_, t)| t)));
        }
        Fact::known(devs, p.label(*first_i))
    }
}

/// A PCIe generation's transfer rate as sysfs writes it (`16.0 GT/s PCIe`).
fn gen_speed(g: u32) -> Option<String> {
    let gts = match g {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        _ => return None,
    };
    Some(format!("{gts:.1} GT/s PCIe"))
}

/// `nvidia-smi -q`: the NVML facts it prints (persistence, BAR1, link, ECC, fabric, row
/// remapping), and each GPU it lists on the PCI bus when no pasted lspci shows it: nvidia-smi
/// lists only display-class NVIDIA functions bound to the nvidia driver, with their link
/// generation and width (`GPU Link Info`), which fill the link facts lspci did not give.
fn smi_gpus(p: &Paste, pci: &mut Fact<Vec<PciDevice>>, prov: &mut Provenance) -> Fact<NvmlFacts> {
    let Some((i, q)) = p.smiq.iter().find(|(_, q)| !q.gpus.is_empty()) else {
        return absent("libnvidia-ml.so.1", NOT_PASTED);
    };
    let lab = p.label(*i);
    let mut devs: Vec<PciDevice> = pci.get().cloned().unwrap_or_default();
    for g in q.gpus.iter().filter(|g| !g.anonymous) {
        let from_smi = |v: Option<String>, what: &str| -> Fact<String> {
            match v {
                Some(x) => Fact::known(x, format!("{lab} (GPU Link Info)")),
                None => absent(&lab, format!("{lab} does not show the {what}")),
            }
        };
        let num = |v: Option<u32>, what: &str| -> Fact<u32> {
            match v {
                Some(x) => Fact::known(x, format!("{lab} (GPU Link Info)")),
                None => absent(&lab, format!("{lab} does not show the {what}")),
            }
        };
        if let Some(d) = devs.iter_mut().find(|d| d.bdf == g.bdf) {
            // lspci's LnkSta/LnkCap first; nvidia-smi's where lspci did not show them.
            if d.cur_link_speed.get().is_none() {
                d.cur_link_speed = from_smi(
                    g.pcie_gen_current.and_then(gen_speed),
                    "current PCIe generation",
                );
            }
            if d.max_link_speed.get().is_none() {
                d.max_link_speed = from_smi(
                    g.pcie_gen_max.and_then(gen_speed),
                    "maximum PCIe generation",
                );
            }
            if d.cur_link_width.get().is_none() {
                d.cur_link_width = num(g.width_current, "current link width");
            }
            if d.max_link_width.get().is_none() {
                d.max_link_width = num(g.width_max, "maximum link width");
            }
            continue;
        }
        let path = format!("nvidia-smi -q {}", g.bdf);
        prov.push((path.clone(), lab.clone()));
        let not = |what: &str| -> String {
            format!("{lab} does not show {what} (`sudo lspci -vvv -d 10de:`)")
        };
        devs.push(PciDevice {
            bdf: g.bdf.clone(),
            sysfs_path: path,
            parent: None,
            host_bridge: String::new(),
            vendor_id: Fact::known(0x10de, format!("{lab} (nvidia-smi lists NVIDIA GPUs only)")),
            device_id: absent(&lab, not("the device id")),
            subsystem_vendor_id: absent(&lab, not("the subsystem ids")),
            subsystem_device_id: absent(&lab, not("the subsystem ids")),
            // Display class (0x03); the subclass (VGA or 3D) is not shown.
            class: Fact::known(
                0x030000,
                format!("{lab} (nvidia-smi lists display-class GPUs; the subclass is not shown)"),
            ),
            numa_node: absent(&lab, not("the NUMA node")),
            local_cpulist: absent(&lab, NOT_PASTED),
            cur_link_speed: from_smi(
                g.pcie_gen_current.and_then(gen_speed),
                "current PCIe generation",
            ),
            cur_link_width: num(g.width_current, "current link width"),
            max_link_speed: from_smi(
                g.pcie_gen_max.and_then(gen_speed),
                "maximum PCIe generation",
            ),
            max_link_width: num(g.width_max, "maximum link width"),
            resources: absent(&lab, not("the BAR addresses")),
            driver: Fact::known(
                Some("nvidia".to_string()),
                format!("{lab} (nvidia-smi lists GPUs the nvidia driver holds)"),
            ),
            iommu_group: absent(&lab, NOT_PASTED),
            config: absent(&lab, not("config space")),
            is_virtfn: false,
        });
    }
    if !matches!(pci, Fact::Known { .. }) {
        prov.push(("/sys/bus/pci/devices".into(), lab.clone()));
        *pci = Fact::known(devs, lab.clone());
    } else if let Fact::Known { value, .. } = pci {
        *value = devs;
    }
    Fact::known(super::smiq::nvml_facts(q), format!("{lab} (nvidia-smi -q)"))
}

/// The pasted kernel log lines, through the same keeper as every other kernel log
/// ([`crate::klog::Keeper`]), as an excerpt: what they show happened, but a missing event
/// proves nothing.
fn kernel_log(p: &Paste) -> Fact<KernelLog> {
    if p.kernel_log.is_empty() {
        return absent("kernel log", format!("{NOT_PASTED} (`sudo dmesg`)"));
    }
    let mut k = crate::klog::Keeper::default();
    let mut labels = Vec::new();
    for (i, lines) in &p.kernel_log {
        labels.push(p.label(*i));
        for l in lines {
            k.push(l.clone());
        }
    }
    let origin = labels.join(", ");
    let mut log = k.finish(origin.clone(), LogScope::Excerpt);
    log.scope = LogScope::Excerpt;
    Fact::known(log, origin)
}

fn kn<T>(lab: &str) -> impl Fn(T) -> Fact<T> + '_ {
    move |v| Fact::known(v, lab)
}

fn pci_device(
    d: &super::lspci::LspciDevice,
    lab: &str,
    path: Option<String>,
    tree: Option<&super::lspci::Tree>,
) -> PciDevice {
    let not = |what: &str| -> String { format!("{lab} does not show {what}") };
    let parent = tree.and_then(|t| t.parent.get(&d.bdf).cloned().flatten());
    let host_bridge = tree
        .and_then(|t| t.host_bridge.get(&d.bdf).cloned())
        .unwrap_or_default();
    let resources: Vec<Resource> = d
        .regions
        .iter()
        .filter_map(|r| {
            let start = r.address?;
            let size = r.size?;
            let mut flags = if r.io {
                Resource::IORESOURCE_IO
            } else {
                Resource::IORESOURCE_MEM
            };
            if r.prefetchable {
                flags |= Resource::IORESOURCE_PREFETCH;
            }
            if r.mem64 {
                flags |= Resource::IORESOURCE_MEM_64;
            }
            Some(Resource {
                index: r.index,
                start,
                end: start.checked_add(size)?.checked_sub(1)?,
                flags,
            })
        })
        .collect();
    PciDevice {
        bdf: d.bdf.clone(),
        // Without the tree the path holds no PCI component, so no topology is computed from it.
        sysfs_path: path
            .unwrap_or_else(|| format!("lspci {} (no `lspci -tv` in the paste)", d.bdf)),
        parent,
        host_bridge,
        vendor_id: d
            .vendor_id
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, "vendor name not found in pci.ids (paste `lspci -nn`)")),
        device_id: d
            .device_id
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, "device name not found in pci.ids (paste `lspci -nn`)")),
        subsystem_vendor_id: absent(lab, not("the subsystem ids")),
        subsystem_device_id: absent(lab, not("the subsystem ids")),
        class: d
            .class
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("a known class"))),
        numa_node: d
            .numa_node
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("`NUMA node:`"))),
        local_cpulist: absent(lab, NOT_PASTED),
        cur_link_speed: d
            .lnksta_speed
            .clone()
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("LnkSta"))),
        cur_link_width: d
            .lnksta_width
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("LnkSta"))),
        max_link_speed: d
            .lnkcap_speed
            .clone()
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("LnkCap"))),
        max_link_width: d
            .lnkcap_width
            .map(kn(lab))
            .unwrap_or_else(|| absent(lab, not("LnkCap"))),
        resources: if resources.is_empty() {
            absent(lab, not("regions"))
        } else {
            Fact::known(resources, lab)
        },
        driver: match &d.driver {
            Some(x) => Fact::known(Some(x.clone()), lab),
            None => absent(
                lab,
                "no `Kernel driver in use` line (unbound, or cut from the paste)",
            ),
        },
        iommu_group: absent(lab, NOT_PASTED),
        config: if d.config_bytes >= 64 {
            Fact::known(d.config.clone(), lab)
        } else {
            absent(
                lab,
                format!(
                    "config space not in the paste (`sudo lspci -vvvxxxx -s {}` adds it)",
                    d.bdf.trim_start_matches("0000:")
                ),
            )
        },
        is_virtfn: false,
    }
}

fn rdma_devices(
    p: &Paste,
    log: Option<&super::nccl::NcclLog>,
    prov: &mut Provenance,
) -> Fact<Vec<RdmaDevice>> {
    let pci_path = |name: &str| -> Option<(String, String)> {
        let l = log?;
        let d = l.net_devices.iter().find(|d| d.name == name)?;
        let path = d.pci_path.as_ref()?;
        let bdf = path
            .rsplit('/')
            .find(|c| crate::parse::is_bdf(c))?
            .to_lowercase();
        Some((bdf, path.clone()))
    };
    let nccl_label = p.nccl.first().map(|(i, _)| p.label(*i)).unwrap_or_default();
    let bdf_fact = |name: &str| -> Fact<Option<String>> {
        match pci_path(name) {
            Some((b, _)) => Fact::known(Some(b), format!("{nccl_label} (NCCL's pciPath)")),
            None => absent(
                "/sys/class/infiniband",
                format!(
                    "the paste does not tie {name} to a PCI address (`ls -l /sys/class/infiniband/`)"
                ),
            ),
        }
    };
    if !p.ib.is_empty() {
        let (first, _) = &p.ib[0];
        prov.push(("/sys/class/infiniband".into(), p.label(*first)));
        let mut out: Vec<RdmaDevice> = Vec::new();
        for (i, d) in &p.ib {
            let lab = p.label(*i);
            // The same device pasted twice (two nodes' outputs, or before and after): where the
            // copies disagree, neither is the answer.
            if let Some(kept) = out.iter_mut().find(|x| x.name == d.name) {
                let conflict = |what: &str, a: &str, b: &str, src: &str| -> String {
                    format!(
                        "the paste shows {} twice with different {what}: {a} in {src}, {b} in {lab} (two nodes' outputs?); paste one node's",
                        d.name
                    )
                };
                if let (Fact::Known { value: a, source }, Some(b)) = (&kept.fw_ver, &d.fw_ver) {
                    if a != b {
                        let why = conflict("firmware", a, b, source);
                        kept.fw_ver = absent(&lab, why);
                    }
                }
                if let Fact::Known { value: ports, .. } = &mut kept.ports {
                    for pt in &d.ports {
                        let Some(k) = ports.iter_mut().find(|k| k.port == pt.port) else {
                            continue;
                        };
                        if let (Fact::Known { value: a, source }, Some(b)) = (&k.state, &pt.state) {
                            if a != b {
                                let why =
                                    conflict(&format!("states of port {}", pt.port), a, b, source);
                                k.state = absent(&lab, why);
                            }
                        }
                    }
                }
                continue;
            }
            let opt = |v: &Option<String>, what: &str| -> Fact<String> {
                match v {
                    Some(x) => Fact::known(x.clone(), lab.clone()),
                    None => absent(&lab, format!("{lab} does not show {what}")),
                }
            };
            if let Some(why) = &d.failed {
                // Listed by the tool, but not readable: every fact of it unknown, said so.
                let no = |what: &str| -> Fact<String> {
                    absent(
                        &lab,
                        format!("{lab}: the tool could not read {what} of {}: {why}", d.name),
                    )
                };
                out.push(RdmaDevice {
                    name: d.name.clone(),
                    pci_bdf: bdf_fact(&d.name),
                    fw_ver: no("the firmware"),
                    hca_type: no("the HCA type"),
                    board_id: no("the board id"),
                    node_guid: no("the node GUID"),
                    node_type: no("the node type"),
                    ports: absent(
                        &lab,
                        format!(
                            "{lab}: the tool could not read the ports of {}: {why}",
                            d.name
                        ),
                    ),
                });
                continue;
            }
            let ports = d
                .ports
                .iter()
                .map(|pt| RdmaPort {
                    port: pt.port,
                    state: opt(&pt.state, "the port state"),
                    phys_state: opt(&pt.phys_state, "the physical state (`ibv_devinfo -v`)"),
                    link_layer: opt(&pt.link_layer, "the link layer"),
                    rate: opt(&pt.rate, "the rate"),
                    gid_count: absent(&lab, NOT_PASTED),
                })
                .collect();
            out.push(RdmaDevice {
                name: d.name.clone(),
                pci_bdf: bdf_fact(&d.name),
                fw_ver: opt(&d.fw_ver, "the firmware"),
                hca_type: opt(&d.hca_type, "the HCA type"),
                board_id: opt(&d.board_id, "the board id"),
                node_guid: opt(&d.node_guid, "the node GUID"),
                node_type: absent(&lab, NOT_PASTED),
                // An excerpt cut before the device's port lines: its ports are unknown, not
                // none (it was "device has no ports", a fail).
                ports: match (&d.cut, d.ports.is_empty()) {
                    (Some(why), true) => absent(&lab, format!("{lab}: {}: {why}", d.name)),
                    _ => Fact::known(ports, lab.clone()),
                },
            });
        }
        return Fact::known(out, p.label(*first));
    }
    // NCCL's device list: only ACTIVE ports, IB or RoCE.
    if let Some(l) = log {
        let ib: Vec<&super::nccl::NetDevice> = l
            .net_devices
            .iter()
            .filter(|d| d.net != "Socket" && d.port.is_some())
            .collect();
        let hosts: std::collections::BTreeSet<Option<&str>> =
            ib.iter().map(|d| d.origin.host.as_deref()).collect();
        if !ib.is_empty() && hosts.len() == 1 {
            let src = format!("{nccl_label} (`NET/IB : Using` lists only ports that are ACTIVE)");
            prov.push(("/sys/class/infiniband".into(), src.clone()));
            let mut out: Vec<RdmaDevice> = Vec::new();
            for d in ib {
                if out.iter().any(|x| x.name == d.name) {
                    continue;
                }
                let link = match d.link.as_deref() {
                    Some("IB") => Fact::known("InfiniBand".to_string(), src.clone()),
                    Some("RoCE") => Fact::known("Ethernet".to_string(), src.clone()),
                    _ => absent(&src, "link layer not shown"),
                };
                out.push(RdmaDevice {
                    name: d.name.clone(),
                    pci_bdf: bdf_fact(&d.name),
                    fw_ver: absent(&src, format!("{NOT_PASTED} (`ibv_devinfo`)")),
                    hca_type: absent(&src, NOT_PASTED),
                    board_id: absent(&src, NOT_PASTED),
                    node_guid: absent(&src, NOT_PASTED),
                    node_type: absent(&src, NOT_PASTED),
                    ports: Fact::known(
                        vec![RdmaPort {
                            port: d.port.unwrap_or(1),
                            state: Fact::known("4: ACTIVE".to_string(), src.clone()),
                            phys_state: Fact::known("5: LinkUp".to_string(), src.clone()),
                            link_layer: link,
                            rate: match d.speed_mbps {
                                Some(s) => Fact::known(format!("{} Gb/sec", s / 1000), src.clone()),
                                None => absent(&src, NOT_PASTED),
                            },
                            gid_count: absent(&src, NOT_PASTED),
                        }],
                        src.clone(),
                    ),
                });
            }
            return Fact::known(out, src);
        }
    }
    absent(
        "/sys/class/infiniband",
        format!("{NOT_PASTED} (`ibv_devinfo -v`)"),
    )
}

/// Whether any block of the paste could be used at all.
pub fn anything_read(p: &Paste) -> bool {
    p.blocks
        .iter()
        .any(|b| !matches!(b.status, BlockStatus::Ignored | BlockStatus::Refused))
}
