//! Builders for tests: a Node from a few PCI paths, without touching a filesystem.
#![doc(hidden)]

use crate::model::*;
use std::collections::BTreeMap;

fn absent<T>() -> Fact<T> {
    Fact::absent("test", "not set")
}

/// An empty node: every fact absent, no PCI devices, no RDMA devices.
pub fn empty_node() -> Node {
    Node {
        source: SourceKind::Sysroot,
        root: "/test".into(),
        hostname: absent(),
        kernel_release: absent(),
        arch: absent(),
        cpu_vendor: absent(),
        modules: Modules {
            proc_modules: absent(),
            sys_module: absent(),
        },
        cmdline: absent(),
        hugepages: absent(),
        memlock: absent(),
        euid: absent(),
        env: Fact::known(BTreeMap::new(), "test"),
        iommu: Iommu {
            classes: absent(),
            groups: absent(),
            default_domain: absent(),
        },
        nvidia: NvidiaDriver {
            version_file: absent(),
            params: absent(),
            gpus: absent(),
        },
        peermem: PeerMem {
            nv_mem_version: absent(),
            nv_mem_nc_version: absent(),
            nvidia_peermem_version: absent(),
            nv_peer_mem: absent(),
            memory_peers: absent(),
            nvidia_peermem_params: absent(),
        },
        pci: Fact::known(Vec::new(), "test"),
        rdma: Fact::known(Vec::new(), "test"),
        live: LiveFacts::absent("test"),
        health: Health::absent("test"),
        container: absent(),
        cpu_model: absent(),
        addons: Addons::absent("test", "not set"),
    }
}

/// A PCI function at `path` (`/sys/devices/pci0000:15/0000:15:01.0/...`).
pub fn pci(path: &str, class: u32, vendor: u16, device: u16, numa: i32) -> PciDevice {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let bdfs: Vec<&&str> = comps.iter().filter(|c| crate::parse::is_bdf(c)).collect();
    let k = |v| Fact::known(v, "test");
    PciDevice {
        bdf: bdfs.last().map(|s| s.to_string()).unwrap_or_default(),
        sysfs_path: path.to_string(),
        parent: if bdfs.len() >= 2 {
            Some(bdfs[bdfs.len() - 2].to_string())
        } else {
            None
        },
        host_bridge: comps
            .iter()
            .find(|c| c.starts_with("pci"))
            .map(|c| c.to_string())
            .unwrap_or_default(),
        vendor_id: k(vendor),
        device_id: k(device),
        subsystem_vendor_id: k(0),
        subsystem_device_id: k(0),
        class: Fact::known(class, "test"),
        numa_node: Fact::known(numa, "test"),
        local_cpulist: absent(),
        cur_link_speed: absent(),
        cur_link_width: absent(),
        max_link_speed: absent(),
        max_link_width: absent(),
        resources: absent(),
        driver: Fact::known(None, "test"),
        iommu_group: Fact::known(None, "test"),
        config: absent(),
        is_virtfn: false,
    }
}

pub fn bridge(path: &str, numa: i32) -> PciDevice {
    pci(path, 0x060400, 0x10b5, 0x8796, numa)
}
pub fn gpu(path: &str, numa: i32) -> PciDevice {
    pci(path, 0x030200, 0x10de, 0x2335, numa)
}
pub fn nic(path: &str, numa: i32) -> PciDevice {
    pci(path, 0x020700, 0x15b3, 0x1021, numa)
}

/// An RDMA device on `bdf` with one port in `state` (`4: ACTIVE`).
pub fn rdma(name: &str, bdf: &str, state: &str) -> RdmaDevice {
    let k = |v: &str| Fact::known(v.to_string(), "test");
    RdmaDevice {
        name: name.into(),
        pci_bdf: Fact::known(Some(bdf.into()), "test"),
        fw_ver: k("28.43.1014"),
        hca_type: k("MT4129"),
        board_id: k("MT_0000000838"),
        node_guid: k("0"),
        node_type: k("1: CA"),
        ports: Fact::known(
            vec![RdmaPort {
                port: 1,
                state: k(state),
                phys_state: k("5: LinkUp"),
                link_layer: k("InfiniBand"),
                rate: k("400 Gb/sec (4X NDR)"),
                gid_count: Fact::known(1, "test"),
            }],
            "test",
        ),
    }
}

pub fn with(mut n: Node, pci: Vec<PciDevice>, rdma: Vec<RdmaDevice>) -> Node {
    n.pci = Fact::known(pci, "test");
    n.rdma = Fact::known(rdma, "test");
    n
}

/// A fact known from a test.
pub fn known<T>(v: T) -> Fact<T> {
    Fact::known(v, "test")
}

/// The root port every [`switch_pair`] device hangs below.
pub const ROOT_PORT: &str = "/sys/devices/pci0000:15/0000:15:01.0";

/// An HGX-like pair: one PCIe switch (upstream port 0000:16:00.0) below [`ROOT_PORT`] holding a
/// GPU (0000:18:00.0) and a ConnectX-7 (0000:19:00.0, `mlx5_0`, port ACTIVE), on NUMA node 0;
/// the NVIDIA open kernel module 580.159.04 on kernel 6.8 with nvidia_peermem loaded, memlock
/// unlimited, no IOMMU unit.
pub fn switch_pair() -> Node {
    let usp = format!("{ROOT_PORT}/0000:16:00.0");
    let mut n = with(
        empty_node(),
        vec![
            bridge(ROOT_PORT, 0),
            bridge(&usp, 0),
            bridge(&format!("{usp}/0000:17:00.0"), 0),
            gpu(&format!("{usp}/0000:17:00.0/0000:18:00.0"), 0),
            bridge(&format!("{usp}/0000:17:01.0"), 0),
            nic(&format!("{usp}/0000:17:01.0/0000:19:00.0"), 0),
        ],
        vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE")],
    );
    if let Fact::Known { value: pci, .. } = &mut n.pci {
        for d in pci.iter_mut() {
            d.driver = known(Some(
                if d.is_nvidia_gpu() {
                    "nvidia"
                } else if d.is_network() {
                    "mlx5_core"
                } else {
                    "pcieport"
                }
                .into(),
            ));
        }
    }
    n.nvidia.version_file = known(Some("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 01:08:29 UTC 2025".into()));
    n.nvidia.params = known(crate::parse::colon_map(
        "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nGrdmaPciTopoCheckOverride: 0\nRegistryDwords: \"\"\n",
    ));
    n.nvidia.gpus = known(
        [("0000:18:00.0".to_string(), BTreeMap::new())]
            .into_iter()
            .collect(),
    );
    n.kernel_release = known("6.8.0-45-generic".into());
    n.peermem = PeerMem {
        nv_mem_version: known(None),
        nv_mem_nc_version: known(None),
        nvidia_peermem_version: known(Some("580.159.04".into())),
        nv_peer_mem: known(false),
        memory_peers: known(None),
        nvidia_peermem_params: known(BTreeMap::new()),
    };
    n.memlock = known(Rlimit {
        soft: None,
        hard: None,
    });
    n.iommu.classes = known(Vec::new());
    n.iommu.groups = known(Vec::new());
    n
}
