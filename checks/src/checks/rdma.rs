//! `rdma.*`: the RDMA devices NCCL and NVSHMEM would use, as `ibv_devinfo` shows them.
//! Ground truth §2.7 (N01-N03): NCCL skips ports that are not ACTIVE.

use crate::model::{is_damaged, Fact, Node, RdmaDevice, SourceKind};
use crate::report::{Finding, Status};
use std::collections::BTreeMap;

pub fn devices(node: &Node) -> Vec<Finding> {
    const ID: &str = "rdma.devices";
    match &node.rdma {
        Fact::Known { value, .. } if value.is_empty() => {
            let capable = rdma_capable_nics(node);
            let mut f = if capable.is_empty() {
                Finding::new(ID, Status::Fail, "node", "no rdma device: gpudirect rdma needs an infiniband or roce nic")
                    .fix("check that the NIC is on the PCI bus (`lspci -d 15b3:`), that its RDMA driver is loaded (`modprobe mlx5_ib`), and that rdma-core / MOFED is installed")
            } else {
                let (drivers, list): (Vec<&str>, Vec<String>) = capable
                    .iter()
                    .map(|(b, n, d)| (*d, format!("{b} {n}")))
                    .unzip();
                let mut drivers = drivers;
                drivers.sort();
                drivers.dedup();
                Finding::new(
                    ID,
                    Status::Fail,
                    "node",
                    format!("{} rdma-capable nic(s) on the pci bus but no rdma device: the rdma driver ({}) is not loaded", capable.len(), drivers.join(", ")),
                )
                .evidence("/sys/bus/pci/devices", list.join("; "))
                .fix(format!("`modprobe {}` (and `modprobe ib_uverbs`); install rdma-core (`apt install rdma-core ibverbs-providers` / `dnf install rdma-core libibverbs`) or MOFED/DOCA-OFED", drivers.join(" ")))
            };
            f = f.expected(
                "/sys/class/infiniband",
                "empty",
                "at least one device (mlx5_0, ...)",
            );
            vec![f]
        }
        Fact::Known { value, .. } => {
            let names: Vec<String> = value
                .iter()
                .map(|d| match d.pci_bdf.get() {
                    Some(Some(b)) => format!("{} ({b})", d.name),
                    _ => d.name.clone(),
                })
                .collect();
            let short: Vec<&str> = value.iter().map(|d| d.name.as_str()).collect();
            let mut out = vec![Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("{} rdma device(s): {}", value.len(), short.join(" ")),
            )
            .evidence("/sys/class/infiniband", names.join(" "))];
            out.extend(unserved(node, value));
            out
        }
        Fact::Absent { source, reason } => {
            vec![
                Finding::new(ID, Status::Error, "node", "cannot list rdma devices")
                    .evidence(source.clone(), format!("unknown ({reason})")),
            ]
        }
    }
}

/// The RDMA devices and the PCI bus disagree: a device whose PCI function is not on the bus
/// listing, and an RDMA-capable function bound to the same driver as functions that have an
/// RDMA device but without one itself. A NIC of a GPU node that lost its RDMA device is a lost
/// rail (mlx5_ib did not probe it: a firmware error, a failed reset), and a snapshot that lost
/// `/sys/class/infiniband/<dev>` or a `/sys/bus/pci/devices` entry would otherwise drop the NIC
/// and every finding about it, silently.
fn unserved(node: &Node, devs: &[crate::model::RdmaDevice]) -> Vec<Finding> {
    const ID: &str = "rdma.devices";
    let Some(pci) = node.pci.get() else {
        return vec![];
    };
    let mut out = Vec::new();
    let served: Vec<(&str, &str)> = devs
        .iter()
        .filter_map(|d| match d.pci_bdf.get() {
            Some(Some(b)) => Some((b.as_str(), d.name.as_str())),
            _ => None,
        })
        .collect();
    for (bdf, dev) in &served {
        if !pci.iter().any(|p| p.bdf == *bdf) {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    *bdf,
                    format!("{dev}'s pci function {bdf} is not in the pci bus listing: its path to the gpus cannot be judged"),
                )
                .expected(
                    format!("/sys/bus/pci/devices/{bdf}"),
                    "not listed",
                    format!("listed (it is /sys/class/infiniband/{dev}/device)"),
                )
                .fix("read the node again; a snapshot that lost the /sys/bus/pci/devices entry needs a new capture; on a live node `lspci -s <bdf>` and `dmesg` say whether the function is being removed"),
            );
        }
    }
    let bound = |p: &crate::model::PciDevice| p.driver.get().and_then(|d| d.clone());
    let serving = serving_drivers(pci, devs);
    // The card of a function: domain:bus:device. Another function of the same card with an
    // RDMA device covers it: a RoCE LAG's mlx5_bond_0 sits on PF0 only, a multi-port (MPV)
    // card's second port is a port of the first function's device.
    let card = |bdf: &str| bdf.rsplit_once('.').map(|(c, _)| c.to_string());
    // RDMA devices whose PCI function cannot be read (a symlink loop, a damaged capture): any
    // of them may be the one a NIC below seems to lack.
    let unplaced: Vec<&crate::model::RdmaDevice> =
        devs.iter().filter(|d| d.pci_bdf.get().is_none()).collect();
    for (bdf, name, rdma_drv) in rdma_capable_nics(node) {
        if served.iter().any(|(b, _)| card(b) == card(&bdf)) {
            continue;
        }
        if !unplaced.is_empty() {
            let mut f = Finding::new(
                ID,
                Status::Error,
                &bdf,
                format!(
                    "{name} ({bdf}) has no rdma device known to be its: the pci function of {} cannot be read, and it may be this one",
                    unplaced.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
            for d in &unplaced {
                f = f.evidence(d.pci_bdf.source(), d.pci_bdf.describe(|_| String::new()));
            }
            out.push(f);
            continue;
        }
        let Some(p) = pci.iter().find(|p| p.bdf == bdf) else {
            continue;
        };
        // A virtual function: in the RDMA "exclusive" netns mode its device lives in the pod
        // that uses it, not in the host's listing.
        if p.is_virtfn {
            continue;
        }
        if let Some(reason) = p.driver.reason() {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    &bdf,
                    format!("{name} ({bdf}) has no rdma device and its driver cannot be read: whether it should have one is unknown"),
                )
                .evidence(p.driver.source(), format!("unknown ({reason})")),
            );
            continue;
        }
        // Only a function bound to a driver that gives its siblings RDMA devices: a function
        // passed to a VM (vfio-pci) or left unbound is not this case.
        let Some(drv) = bound(p).filter(|d| serving.contains(d)) else {
            continue;
        };
        let with: Vec<&str> = served.iter().map(|(_, d)| *d).collect();
        out.push(
            Finding::new(
                ID,
                Status::Fail,
                &bdf,
                format!(
                    "{name} ({bdf}, driver {drv}) has no rdma device while {} other function(s) of the same driver have one: {rdma_drv} did not create it, so gpudirect rdma cannot use this nic",
                    with.len()
                ),
            )
            .expected(
                "/sys/class/infiniband/*/device",
                format!("none resolves to {bdf}"),
                "one rdma device per rdma-capable function",
            )
            .evidence("/sys/class/infiniband", with.join(" "))
            .fix(format!("`dmesg | grep -i {bdf}` for the probe error ({rdma_drv}, firmware health: kernel.mlx5-health); `devlink dev info pci/{bdf}`; rebind the function (`echo {bdf} > /sys/bus/pci/drivers/{drv}/unbind; echo {bdf} > /sys/bus/pci/drivers/{drv}/bind`) or reset it (`mlxfwreset -d {bdf} reset`); a snapshot that lost /sys/class/infiniband/<dev> needs a new capture")),
        );
    }
    out
}

/// RDMA-capable PCI functions (physical or virtual) bound to a driver that serves RDMA devices
/// on this node, without an RDMA device of their own in this listing: RoCE LAG's second PF
/// (its port is `mlx5_bond_0`'s), a VF or PF whose device moved into a pod (RDMA exclusive
/// netns mode). An RDMA device that vanished since an earlier reading may be one of them
/// (`counters.*` counts them before calling a port lost); a function gone from the bus, or
/// handed to vfio-pci or left unbound, is not counted.
pub(crate) fn deviceless_functions(node: &Node) -> Vec<String> {
    let Some(devs) = node.rdma.get() else {
        return Vec::new();
    };
    let own = |bdf: &str| {
        devs.iter()
            .any(|d| matches!(d.pci_bdf.get(), Some(Some(b)) if b == bdf))
    };
    rdma_capable_nics(node)
        .into_iter()
        .map(|(bdf, _, _)| bdf)
        .filter(|bdf| !own(bdf))
        .filter(|bdf| matches!(function_now(node, bdf), FunctionNow::Deviceless { .. }))
        .collect()
}

/// What is at a PCI function that carries no RDMA device now, for a device an earlier reading
/// saw on it ([`function_now`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FunctionNow {
    /// Bound to a driver that serves RDMA here (the driver of a function that has an RDMA
    /// device), without a device in this listing.
    Deviceless { driver: String, virtfn: bool },
    /// Bound to a driver that serves no RDMA here (vfio-pci).
    Bound(String),
    /// On the bus with no driver bound.
    Unbound,
    /// On the bus, its `driver` link unreadable (why).
    DriverUnreadable(String),
    /// Not on the PCI bus.
    Absent,
    /// The PCI functions or RDMA devices cannot be listed now (why).
    Unknown(String),
}

/// What is at `bdf`, which carries no RDMA device now (see [`FunctionNow`]).
pub(crate) fn function_now(node: &Node, bdf: &str) -> FunctionNow {
    let (pci, devs) = match (node.pci.get(), node.rdma.get()) {
        (Some(p), Some(d)) => (p, d),
        (None, _) => {
            return FunctionNow::Unknown(format!(
                "{}: {}",
                node.pci.source(),
                node.pci.reason().unwrap_or("unknown")
            ))
        }
        (_, None) => {
            return FunctionNow::Unknown(format!(
                "{}: {}",
                node.rdma.source(),
                node.rdma.reason().unwrap_or("unknown")
            ))
        }
    };
    let Some(f) = pci.iter().find(|p| p.bdf == bdf) else {
        return FunctionNow::Absent;
    };
    match f.driver.get() {
        None => FunctionNow::DriverUnreadable(f.driver.reason().unwrap_or("unknown").to_string()),
        Some(None) => FunctionNow::Unbound,
        Some(Some(d)) if serving_drivers(pci, devs).contains(d) => FunctionNow::Deviceless {
            driver: d.clone(),
            virtfn: f.is_virtfn,
        },
        Some(Some(d)) => FunctionNow::Bound(d.clone()),
    }
}

/// The physical functions of one card (`card` is `domain:bus:device`, the address without
/// its function number; VFs, which may share it under ARI, are left out).
pub(crate) fn pfs_of_card(node: &Node, card: &str) -> Vec<String> {
    node.pci
        .get()
        .map(|pci| {
            pci.iter()
                .filter(|p| !p.is_virtfn)
                .filter(|p| p.bdf.rsplit_once('.').is_some_and(|(c, _)| c == card))
                .map(|p| p.bdf.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The drivers bound to a function that has an RDMA device: those that serve RDMA here.
fn serving_drivers(
    pci: &[crate::model::PciDevice],
    devs: &[crate::model::RdmaDevice],
) -> Vec<String> {
    pci.iter()
        .filter(|p| {
            devs.iter()
                .any(|d| matches!(d.pci_bdf.get(), Some(Some(b)) if *b == p.bdf))
        })
        .filter_map(|p| p.driver.get().cloned().flatten())
        .collect()
}

/// PCI network functions of vendors with RDMA drivers, and the driver that provides it.
fn rdma_capable_nics(node: &Node) -> Vec<(String, String, &'static str)> {
    let Some(pci) = node.pci.get() else {
        return vec![];
    };
    pci.iter()
        .filter(|d| d.is_network())
        .filter_map(|d| {
            let drv = match d.vendor_id.get()? {
                0x15b3 => "mlx5_ib",
                0x14e4 => "bnxt_re",
                0x8086 => "irdma",
                0x1077 => "qedr",
                0x1d0f => "efa",
                0x1dd8 => "ionic_rdma",
                _ => return None,
            };
            // Intel and Broadcom make many NICs without RDMA; only count InfiniBand-class or
            // vendors whose network functions are RDMA-capable as a rule.
            let ib_class = d.class_code().is_some_and(|c| (c >> 8) == 0x0207);
            if matches!(drv, "irdma" | "bnxt_re") && !ib_class {
                return None;
            }
            Some((d.bdf.clone(), crate::names::device_name(d), drv))
        })
        .collect()
}

fn port_fix(link_layer: Option<&str>, state: &str, phys: Option<&str>) -> String {
    let ib = link_layer != Some("Ethernet");
    match (state, phys) {
        ("INIT", Some("LinkUp")) if ib => "the physical link is up but no subnet manager configured the port: start opensm on a node of this fabric (or check the managed switch's SM), then `ibstat` should show State: Active".into(),
        (_, Some("Disabled")) if !ib => "the netdev is down: `ip link set <netdev> up` (`ibdev2netdev` or `rdma link` maps it), then check the cable and the switch port".into(),
        (_, Some("Disabled")) => "the port is administratively disabled: enable it (`mlxlink -d <dev> -p <port> -a UP`, or on the switch side)".into(),
        (_, Some("Polling")) => "the port is polling for a peer: check the cable and the switch port (`mlxlink -d <dev> -m` shows cable and signal info)".into(),
        _ if !ib => "bring the netdev up (`ip link set <netdev> up`; `ibdev2netdev` maps it) and check the cable and switch port".into(),
        _ => "check the cable, the switch port and the subnet manager (`ibstat`, `mlxlink -d <dev> -m`)".into(),
    }
}

pub fn ports(node: &Node) -> Vec<Finding> {
    const ID: &str = "rdma.ports";
    let Some(devs) = node.rdma.get() else {
        return vec![
            Finding::new(ID, Status::Error, "node", "cannot list rdma devices")
                .evidence(node.rdma.source(), node.rdma.describe(|_| String::new())),
        ];
    };
    if devs.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no rdma device")];
    }
    let mut out = Vec::new();
    for d in devs {
        let base = format!("/sys/class/infiniband/{}/ports", d.name);
        let ports = match &d.ports {
            Fact::Known { value, .. } => value,
            Fact::Absent { reason, .. } => {
                out.push(
                    Finding::new(ID, Status::Error, &d.name, "cannot read the ports")
                        .evidence(base, format!("unknown ({reason})")),
                );
                continue;
            }
        };
        let any_active = ports.iter().any(|p| p.state_name() == Some("ACTIVE"));
        // mlx5 makes each port of a dual-port card its own device, one PCI function each: the
        // card's other port is an active port of a sibling function (same bus and device).
        let sibling_active = sibling_with_active_port(devs, d);
        if ports.is_empty() {
            out.push(
                Finding::new(ID, Status::Fail, &d.name, "device has no ports")
                    .evidence(base, "empty"),
            );
            continue;
        }
        for p in ports {
            let subject = format!("{}/{}", d.name, p.port);
            let src = format!("{base}/{}", p.port);
            let ll = p.link_layer.get().map(String::as_str);
            let rate = p.rate.get().map(String::as_str).unwrap_or("?");
            let Some(state) = p.state_name() else {
                let msg = match &p.state {
                    Fact::Absent { reason, .. } => {
                        format!("cannot read the port state: {reason}")
                    }
                    Fact::Known { value, .. } => format!(
                        "the port state is damaged: {}",
                        crate::model::port_state_value(value)
                            .err()
                            .unwrap_or_default()
                    ),
                };
                out.push(Finding::new(ID, Status::Error, &subject, msg).evidence(
                    format!("{src}/state"),
                    p.state.describe(|s| format!("{s:?}")),
                ));
                continue;
            };
            let phys = p.phys_state_name();
            // A paste of plain `ibv_devinfo` does not show the physical state; a file that is
            // there and unreadable or damaged (sysfs, a snapshot) is not a state left unshown.
            let not_shown = node.source == SourceKind::Evidence
                && matches!(&p.phys_state, Fact::Absent { reason, .. } if !is_damaged(reason));
            if phys.is_none() && !not_shown {
                let why = match &p.phys_state {
                    Fact::Absent { reason, .. } => format!("cannot be read: {reason}"),
                    Fact::Known { value, .. } => format!(
                        "is damaged: {}",
                        crate::model::phys_state_value(value)
                            .err()
                            .unwrap_or_default()
                    ),
                };
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &subject,
                        format!("port state {state}, but its physical state {why}"),
                    )
                    .evidence(
                        format!("{src}/phys_state"),
                        p.phys_state.describe(|s| format!("{s:?}")),
                    )
                    .fix("read the port again (`cat /sys/class/infiniband/<dev>/ports/<n>/phys_state`, `ibv_devinfo -v -d <dev>`); a snapshot with a damaged file needs a new capture"),
                );
                continue;
            }
            let observed = format!(
                "state {state}, phys_state {}, link_layer {}, rate {rate}",
                phys.unwrap_or("?"),
                ll.unwrap_or("?")
            );
            if state == "ACTIVE" && matches!(phys, Some("LinkUp")) && p.link_layer_name().is_none()
            {
                // Up, but InfiniBand or RoCE cannot be told: the RoCE checks cannot decide
                // whether they apply, so this is not a pass.
                out.push(
                    Finding::new(
                        ID,
                        Status::Error,
                        &subject,
                        "port is active but its link layer is unreadable or not one the kernel writes (InfiniBand, Ethernet): cannot tell InfiniBand from RoCE",
                    )
                    .evidence(
                        format!("{src}/link_layer"),
                        p.link_layer.describe(|s| s.clone()),
                    )
                    .evidence(src, observed)
                    .fix("read the port's `link_layer` again (`cat /sys/class/infiniband/<dev>/ports/<n>/link_layer`, `ibv_devinfo -d <dev>`); a snapshot with a damaged file needs a new capture"),
                );
            } else if state == "ACTIVE" && matches!(phys, Some("LinkUp") | None) {
                // ACTIVE is reached only over a link that is up (LinkUp is the physical state
                // it needs), so a paste without `phys_state` (plain `ibv_devinfo`) still shows
                // an up port; the evidence says which was read.
                let observed = if phys.is_none() {
                    format!("{observed} (phys_state not shown: ACTIVE implies LinkUp)")
                } else {
                    observed
                };
                out.push(
                    Finding::new(
                        ID,
                        Status::Pass,
                        &subject,
                        format!("active, {}, {rate}", ll.unwrap_or("?")),
                    )
                    .evidence(src, observed),
                );
            } else if state == "ACTIVE" {
                out.push(
                    Finding::new(
                        ID,
                        Status::Warn,
                        &subject,
                        format!(
                            "port active but physical state is {}",
                            phys.unwrap_or("unknown")
                        ),
                    )
                    .expected(src, observed, "phys_state LinkUp"),
                );
            } else {
                let status = if any_active {
                    Status::Skip
                } else if sibling_active.is_some() {
                    Status::Warn
                } else {
                    Status::Fail
                };
                let msg = if any_active {
                    format!(
                        "port is {state}; another port of {} is active, NCCL uses that one and skips this (an unused port?)",
                        d.name
                    )
                } else if let Some(s) = &sibling_active {
                    format!(
                        "port is {state}; the card's other port ({s}, a function of the same pci device) is active: NCCL uses that one and skips this (the unused second port of a dual-port card?)"
                    )
                } else {
                    format!(
                        "port is {state} and no port of {} is active: NCCL cannot use this device",
                        d.name
                    )
                };
                out.push(
                    Finding::new(ID, status, &subject, msg)
                        .expected(src, observed, "state ACTIVE, phys_state LinkUp")
                        .fix(port_fix(ll, state, phys)),
                );
            }
        }
    }
    out
}

/// An RDMA device with an ACTIVE port on another function of `d`'s PCI device (`0000:5e:00.1`
/// for `0000:5e:00.0`): the other port of a dual-port card, which mlx5 lists as its own device.
fn sibling_with_active_port(
    devs: &[crate::model::RdmaDevice],
    d: &crate::model::RdmaDevice,
) -> Option<String> {
    let slot = |x: &crate::model::RdmaDevice| -> Option<String> {
        let b = x.pci_bdf.get()?.as_ref()?;
        Some(b.rsplit_once('.')?.0.to_string())
    };
    let mine = slot(d)?;
    devs.iter()
        .filter(|o| o.name != d.name && slot(o).as_deref() == Some(mine.as_str()))
        .find(|o| {
            o.ports
                .get()
                .is_some_and(|ps| ps.iter().any(|p| p.state_name() == Some("ACTIVE")))
        })
        .map(|o| o.name.clone())
}

/// The model key for grouping: `hca_type` (`MT4129`). mlx4 and mlx5 write `MT` and the PCI
/// device id of the function in decimal (`hca_type_show()` in drivers/infiniband/hw/mlx5/
/// main.c), so for a Mellanox/NVIDIA HCA with a readable device id that name is the model, and
/// an `hca_type` that says otherwise (cut, garbage) is damaged: the second value says so
/// (grouping by it would split a firmware mismatch across two "models"). Without the PCI ids,
/// `hca_type` alone; for other vendors, `hca_type`, else the PCI ids. `None`: nothing tells the
/// model, so the firmware cannot be compared.
fn model(d: &RdmaDevice, idx: &crate::topo::PciIndex<'_>) -> Option<(String, Option<String>)> {
    let hca = d.hca_type.get().map(|t| t.trim()).filter(|t| !t.is_empty());
    let ids = match d.pci_bdf.get() {
        Some(Some(b)) => idx
            .get(b)
            .and_then(|pci| Some((*pci.vendor_id.get()?, *pci.device_id.get()?))),
        _ => None,
    };
    match (hca, ids) {
        (Some(t), Some((0x15b3, device))) => {
            let from_id = format!("MT{device}");
            if t == from_id {
                Some((from_id, None))
            } else {
                let why = format!(
                    "{t:?} disagrees with the pci device id {device:#06x}, for which mlx5 writes {from_id}"
                );
                Some((from_id, Some(why)))
            }
        }
        (Some(t), _) => Some((t.to_string(), None)),
        (None, Some((0x15b3, device))) => Some((format!("MT{device}"), None)),
        (None, Some((vendor, device))) => Some((format!("{vendor:04x}:{device:04x}"), None)),
        (None, None) => None,
    }
}

/// Why `fw_ver` is not a firmware version as the driver writes it (empty, cut): mlx4 and mlx5
/// write `%d.%d.%04d` (`28.39.1002`); other drivers at least two dotted numbers.
fn fw_damage(v: &str, mellanox: bool) -> Option<String> {
    let parts: Vec<&str> = v.trim().split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    let ok = if mellanox {
        numeric && parts.len() == 3 && parts[2].len() >= 4
    } else {
        numeric && parts.len() >= 2
    };
    (!ok).then(|| {
        format!(
            "{v:?} is not a firmware version as the driver writes it ({})",
            if mellanox {
                "mlx5: major.minor.subminor, the last of four digits"
            } else {
                "dotted numbers"
            }
        )
    })
}

pub fn firmware(node: &Node) -> Vec<Finding> {
    const ID: &str = "rdma.firmware";
    let Some(devs) = node.rdma.get() else {
        return vec![
            Finding::new(ID, Status::Error, "node", "cannot list rdma devices")
                .evidence(node.rdma.source(), node.rdma.describe(|_| String::new())),
        ];
    };
    let idx = crate::topo::PciIndex::new(node);
    let mut by_model: BTreeMap<String, Vec<&RdmaDevice>> = BTreeMap::new();
    let mut unknown_model: Vec<&RdmaDevice> = Vec::new();
    let mut out = Vec::new();
    for d in devs {
        match model(d, &idx) {
            Some((m, damaged)) => {
                if let Some(why) = damaged {
                    // Grouped by its device id (the firmware is still compared); the file is
                    // damaged evidence all the same.
                    out.push(
                        Finding::new(
                            ID,
                            Status::Error,
                            &d.name,
                            format!("hca_type is damaged: {why} (its firmware is compared with the other {m} hcas by the pci device id)"),
                        )
                        .evidence(
                            format!("/sys/class/infiniband/{}/hca_type", d.name),
                            d.hca_type.describe(|t| format!("{t:?}")),
                        ),
                    );
                }
                by_model.entry(m).or_default().push(d)
            }
            None => unknown_model.push(d),
        }
    }
    if by_model.is_empty() && unknown_model.is_empty() {
        return vec![Finding::new(ID, Status::Skip, "node", "no rdma device")];
    }
    for d in unknown_model {
        out.push(
            Finding::new(
                ID,
                Status::Error,
                &d.name,
                format!(
                    "cannot tell the model of {}: its firmware cannot be compared with its peers'",
                    d.name
                ),
            )
            .evidence(
                format!("/sys/class/infiniband/{}/hca_type", d.name),
                d.hca_type.describe(|t| format!("{t:?}")),
            )
            .evidence(
                format!("/sys/class/infiniband/{}/device", d.name),
                d.pci_bdf.describe(|b| match b {
                    Some(b) => format!("{b} (pci ids unknown)"),
                    None => "no pci device".to_string(),
                }),
            ),
        );
    }
    for (model, ds) in by_model {
        let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unknown = Vec::new();
        // Unreadable or damaged, each with its file and what it holds.
        let mut unusable = Vec::new();
        let mellanox = model.starts_with("MT");
        for d in &ds {
            let file = format!("/sys/class/infiniband/{}/fw_ver", d.name);
            match d.fw_ver.get() {
                Some(v) => match fw_damage(v, mellanox) {
                    None => versions
                        .entry(v.trim().to_string())
                        .or_default()
                        .push(d.name.clone()),
                    Some(why) => {
                        unknown.push(d.name.clone());
                        unusable.push((file, format!("damaged: {why}")));
                    }
                },
                None => {
                    unknown.push(d.name.clone());
                    unusable.push((file, d.fw_ver.describe(|_| String::new())));
                }
            }
        }
        let subject = format!("model {model}");
        let listing = versions
            .iter()
            .map(|(v, n)| format!("{v}: {}", n.join(" ")))
            .collect::<Vec<_>>()
            .join("; ");
        if !unknown.is_empty() {
            let mut f = Finding::new(
                ID,
                Status::Error,
                &subject,
                format!(
                    "cannot read fw_ver of {}: the firmware cannot be compared",
                    unknown.join(", ")
                ),
            );
            for (file, seen) in unusable {
                f = f.evidence(file, seen);
            }
            if !listing.is_empty() {
                f = f.evidence("/sys/class/infiniband/*/fw_ver", listing.clone());
            }
            out.push(f);
        } else if versions.len() > 1 {
            let newest = versions
                .keys()
                .max_by(|a, b| fw_cmp(a, b))
                .cloned()
                .unwrap_or_default();
            out.push(Finding::new(ID, Status::Warn, &subject, format!("{} {model} hcas run {} different firmware versions", ds.len(), versions.len()))
                .expected("/sys/class/infiniband/*/fw_ver", listing, "one version per model")
                .fix(format!("update every {model} to the same firmware (newest here: {newest}) with `mlxfwmanager --online -u` or `mlxup`, then reset the devices (`mlxfwreset -d <dev> reset`) or reboot")));
        } else if ds.len() == 1 {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &subject,
                    format!(
                        "one {model} hca, firmware {}",
                        versions.keys().next().cloned().unwrap_or_default()
                    ),
                )
                .evidence("/sys/class/infiniband/*/fw_ver", listing),
            );
        } else {
            out.push(
                Finding::new(
                    ID,
                    Status::Pass,
                    &subject,
                    format!(
                        "all {} {model} hcas run firmware {}",
                        ds.len(),
                        versions.keys().next().cloned().unwrap_or_default()
                    ),
                )
                .evidence("/sys/class/infiniband/*/fw_ver", listing),
            );
        }
    }
    out
}

/// Compare dotted firmware versions numerically (`28.39.1002` < `28.42.1000`).
fn fw_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let n = |s: &str| -> Vec<u64> {
        s.split('.')
            .map(|p| p.trim().parse().unwrap_or(0))
            .collect()
    };
    n(a).cmp(&n(b))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::*;

    #[test]
    fn an_active_port_without_phys_state_passes_and_a_dual_port_cards_idle_port_warns() {
        // Plain `ibv_devinfo` shows no phys_state: ACTIVE implies LinkUp.
        let mut d = rdma("mlx5_0", "0000:5e:00.0", "4: ACTIVE");
        if let Fact::Known { value, .. } = &mut d.ports {
            value[0].phys_state = Fact::absent("ibv_devinfo", "not shown");
        }
        let mut down = rdma("mlx5_1", "0000:5e:00.1", "1: DOWN");
        if let Fact::Known { value, .. } = &mut down.ports {
            value[0].phys_state = Fact::known("3: Disabled".into(), "test");
        }
        let mut n = with(empty_node(), vec![], vec![d.clone(), down.clone()]);
        n.source = SourceKind::Evidence;
        let f = ports(&n);
        let up = f.iter().find(|x| x.subject == "mlx5_0/1").unwrap();
        assert_eq!(up.status, Status::Pass, "{up:?}");
        assert!(up.evidence[0].observed.contains("ACTIVE implies LinkUp"));
        // The card's other function is active: the idle port is a warning, not a failure.
        let idle = f.iter().find(|x| x.subject == "mlx5_1/1").unwrap();
        assert_eq!(idle.status, Status::Warn, "{idle:?}");
        assert!(idle.message.contains("mlx5_0"), "{}", idle.message);
        // On another card it fails as before.
        let mut other = down.clone();
        other.pci_bdf = Fact::known(Some("0000:6e:00.1".into()), "test");
        let mut n = with(empty_node(), vec![], vec![d, other]);
        n.source = SourceKind::Evidence;
        let f = ports(&n);
        let idle = f.iter().find(|x| x.subject == "mlx5_1/1").unwrap();
        assert_eq!(idle.status, Status::Fail, "{idle:?}");
    }

    #[test]
    fn damaged_or_unreadable_port_state_files_are_errors_naming_the_file() {
        let port = |state: Fact<String>, phys: Fact<String>| {
            let mut d = rdma("mlx5_0", "0000:5e:00.0", "4: ACTIVE");
            if let Fact::Known { value, .. } = &mut d.ports {
                value[0].state = state;
                value[0].phys_state = phys;
            }
            let f = ports(&with(empty_node(), vec![], vec![d]));
            assert_eq!(f.len(), 1, "{f:?}");
            f.into_iter().next().unwrap()
        };
        let k = |v: &str| Fact::known(v.to_string(), "test");
        // Cut, empty, garbage, a number and a name that disagree: not a physical state.
        for phys in ["5: Lin", "", "zz", "3: LinkUp", "9: LinkUp", "LinkUp"] {
            let f = port(k("4: ACTIVE"), k(phys));
            assert_eq!(f.status, Status::Error, "{phys:?}: {f:?}");
            assert_eq!(
                f.evidence[0].source,
                "/sys/class/infiniband/mlx5_0/ports/1/phys_state"
            );
        }
        // A read error (a directory where the file belongs) in a snapshot: not "not shown".
        let f = port(
            k("4: ACTIVE"),
            Fact::absent(
                "/sys/class/infiniband/mlx5_0/ports/1/phys_state",
                "Is a directory (os error 21)",
            ),
        );
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert!(f.message.contains("Is a directory"), "{f:?}");
        // The state itself empty or cut: an error, not "port is  and no port is active".
        for state in ["", "4: ACT", "4", "7: ACTIVE"] {
            let f = port(k(state), k("5: LinkUp"));
            assert_eq!(f.status, Status::Error, "{state:?}: {f:?}");
            assert_eq!(
                f.evidence[0].source,
                "/sys/class/infiniband/mlx5_0/ports/1/state"
            );
        }
        // What the kernel writes, older and newer: judged as before.
        assert_eq!(port(k("4: ACTIVE"), k("5: LinkUp")).status, Status::Pass);
        assert_eq!(port(k("4: ACTIVE"), k("7: Phy Test")).status, Status::Warn);
        assert_eq!(port(k("1: DOWN"), k("3: Disabled")).status, Status::Fail);
    }

    #[test]
    fn devices_pass_with_their_pci_address_none_fails_naming_the_driver() {
        let n = switch_pair();
        let f = devices(&n);
        assert_eq!(f[0].status, Status::Pass);
        assert_eq!(f[0].evidence[0].observed, "mlx5_0 (0000:19:00.0)");
        let mut n = switch_pair();
        n.rdma = known(Vec::new());
        let f = devices(&n);
        assert_eq!(f[0].status, Status::Fail);
        // The ConnectX-7 on the bus is named: its driver is what is missing.
        assert!(
            f[0].message.contains("rdma-capable nic"),
            "{}",
            f[0].message
        );
    }

    /// [`switch_pair`] with a second ConnectX-7 (0000:1a:00.0) below the same switch, bound to
    /// `driver`, without an RDMA device.
    fn second_nic(driver: Option<&str>) -> Node {
        let mut n = switch_pair();
        if let Fact::Known { value, .. } = &mut n.pci {
            let mut d = nic(
                &format!("{ROOT_PORT}/0000:16:00.0/0000:17:01.0/0000:1a:00.0"),
                0,
            );
            d.driver = known(driver.map(str::to_string));
            value.push(d);
        }
        n
    }

    #[test]
    fn a_nic_without_its_rdma_device_fails_and_a_vm_nic_does_not() {
        let f = devices(&second_nic(Some("mlx5_core")));
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[1].status, Status::Fail);
        assert_eq!(f[1].subject, "0000:1a:00.0");
        assert!(
            f[1].message.contains("mlx5_ib did not create it"),
            "{}",
            f[1].message
        );
        assert!(f[1].remediation.as_deref().unwrap().contains("unbind"));
        // Passed to a VM, or unbound: not an RDMA function of this host.
        for d in [Some("vfio-pci"), None] {
            let f = devices(&second_nic(d));
            assert_eq!(f.len(), 1, "{d:?}: {f:?}");
            assert_eq!(f[0].status, Status::Pass);
        }
        // A virtual function (its device may live in a pod's namespace): not counted.
        let mut n = second_nic(Some("mlx5_core"));
        if let Fact::Known { value, .. } = &mut n.pci {
            value[6].is_virtfn = true;
        }
        assert_eq!(devices(&n).len(), 1);
        // The driver link unreadable: unknown, not skipped.
        let mut n = second_nic(Some("mlx5_core"));
        if let Fact::Known { value, .. } = &mut n.pci {
            value[6].driver = Fact::absent("/sys/x/driver", "permission denied");
        }
        let f = devices(&n);
        assert_eq!(f[1].status, Status::Error, "{f:?}");
        // The second function of mlx5_0's card (a LAG's PF1, an MPV card's second port): the
        // card has its device.
        let mut n = switch_pair();
        if let Fact::Known { value, .. } = &mut n.pci {
            let mut d = nic(
                &format!("{ROOT_PORT}/0000:16:00.0/0000:17:01.0/0000:19:00.1"),
                0,
            );
            d.driver = known(Some("mlx5_core".into()));
            value.push(d);
        }
        assert_eq!(devices(&n).len(), 1);
        // Its device there: all pass.
        let mut n = second_nic(Some("mlx5_core"));
        if let Fact::Known { value, .. } = &mut n.rdma {
            value.push(rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE"));
        }
        let f = devices(&n);
        assert!(f.iter().all(|f| f.status == Status::Pass), "{f:?}");
    }

    #[test]
    fn an_rdma_device_whose_pci_function_is_not_listed_is_an_error() {
        let mut n = switch_pair();
        if let Fact::Known { value, .. } = &mut n.pci {
            value.retain(|d| d.bdf != "0000:19:00.0");
        }
        let f = devices(&n);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[1].status, Status::Error);
        assert_eq!(f[1].subject, "0000:19:00.0");
        assert!(
            f[1].message.starts_with("mlx5_0's pci function"),
            "{}",
            f[1].message
        );
    }

    #[test]
    fn a_port_that_is_down_fails() {
        let mut n = switch_pair();
        n.rdma = known(vec![rdma("mlx5_0", "0000:19:00.0", "1: DOWN")]);
        let f = ports(&n);
        assert!(
            f.iter()
                .any(|f| f.status == Status::Fail && f.subject.starts_with("mlx5_0")),
            "{f:?}"
        );
        let ok = ports(&switch_pair());
        assert!(ok.iter().all(|f| f.status == Status::Pass), "{ok:?}");
    }

    #[test]
    fn a_missing_hca_type_does_not_hide_a_firmware_mismatch() {
        let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
        b.fw_ver = known("28.39.1002".into());
        b.hca_type = Fact::absent("/sys/class/infiniband/mlx5_1/hca_type", "not found");
        let n = two_cx7(b);
        let f = firmware(&n);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].status, Status::Warn, "{f:?}");
        assert_eq!(f[0].subject, "model MT4129");
        // Neither hca_type nor a pci device: said, not silently grouped apart.
        let mut n2 = switch_pair();
        let mut c = rdma("mlx5_2", "0000:99:00.0", "4: ACTIVE");
        c.hca_type = Fact::absent("/sys/class/infiniband/mlx5_2/hca_type", "not found");
        n2.rdma = known(vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE"), c]);
        let f = firmware(&n2);
        assert!(
            f.iter()
                .any(|f| f.status == Status::Error && f.subject == "mlx5_2"),
            "{f:?}"
        );
    }

    /// switch_pair with a second ConnectX-7 (`0000:1a:00.0`, mlx5_1) beside mlx5_0.
    fn two_cx7(b: RdmaDevice) -> Node {
        let mut n = switch_pair();
        let mut pci = n.pci.get().cloned().unwrap_or_default();
        let mut second = pci
            .iter()
            .find(|d| d.bdf == "0000:19:00.0")
            .cloned()
            .expect("the nic of switch_pair");
        second.bdf = "0000:1a:00.0".into();
        second.sysfs_path = second.sysfs_path.replace("0000:19:00.0", "0000:1a:00.0");
        pci.push(second);
        n.pci = known(pci);
        n.rdma = known(vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE"), b]);
        n
    }

    #[test]
    fn a_damaged_hca_type_does_not_split_a_firmware_mismatch_and_is_an_error() {
        // A cut hca_type ("MT41" for MT4129): grouped by the pci device id, said as an error.
        let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
        b.fw_ver = known("28.39.1002".into());
        b.hca_type = known("MT41".into());
        let f = firmware(&two_cx7(b));
        let warn = f.iter().find(|f| f.subject == "model MT4129").unwrap();
        assert_eq!(warn.status, Status::Warn, "{f:?}");
        assert!(warn.evidence[0].observed.contains("mlx5_1"), "{f:?}");
        let bad = f.iter().find(|f| f.subject == "mlx5_1").unwrap();
        assert_eq!(bad.status, Status::Error, "{f:?}");
        assert_eq!(
            bad.evidence[0].source,
            "/sys/class/infiniband/mlx5_1/hca_type"
        );
        assert!(!f.iter().any(|f| f.subject == "model MT41"), "{f:?}");
    }

    #[test]
    fn an_empty_or_cut_fw_ver_is_an_error_not_a_version_of_its_own() {
        for v in ["", "28.39", "28.39.10", "28.39.1002x", "28..1002"] {
            let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
            b.fw_ver = known(v.into());
            let f = firmware(&two_cx7(b));
            assert_eq!(f.len(), 1, "{v:?}: {f:?}");
            assert_eq!(f[0].status, Status::Error, "{v:?}: {f:?}");
            assert!(
                f[0].evidence
                    .iter()
                    .any(|e| e.source == "/sys/class/infiniband/mlx5_1/fw_ver"
                        && e.observed.contains("damaged")),
                "{v:?}: {f:?}"
            );
        }
        // Both intact and equal: a pass, with the versions read.
        let f = firmware(&two_cx7(rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE")));
        assert_eq!(f[0].status, Status::Pass, "{f:?}");
    }

    #[test]
    fn a_nic_beside_an_rdma_device_whose_pci_function_is_unreadable_is_an_error_not_a_lost_rail() {
        // mlx5_1's `device` link is a loop: it may be the NIC at 0000:1a:00.0.
        let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
        b.pci_bdf = Fact::absent(
            "/sys/class/infiniband/mlx5_1/device",
            "symlink loop (more than 40 links)",
        );
        let mut n = two_cx7(b);
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.is_network()) {
                d.driver = known(Some("mlx5_core".into()));
            }
        }
        let f = devices(&n);
        let nic = f.iter().find(|f| f.subject == "0000:1a:00.0").unwrap();
        assert_eq!(nic.status, Status::Error, "{f:?}");
        assert!(nic.evidence[0].observed.contains("symlink loop"), "{f:?}");
        // Placed, it is the lost rail it was.
        let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
        b.pci_bdf = known(None);
        let mut n = two_cx7(b);
        if let Fact::Known { value: pci, .. } = &mut n.pci {
            for d in pci.iter_mut().filter(|d| d.is_network()) {
                d.driver = known(Some("mlx5_core".into()));
            }
        }
        let f = devices(&n);
        let nic = f.iter().find(|f| f.subject == "0000:1a:00.0").unwrap();
        assert_eq!(nic.status, Status::Fail, "{f:?}");
    }

    #[test]
    fn mixed_firmware_of_one_model_warns() {
        let mut n = switch_pair();
        let mut b = rdma("mlx5_1", "0000:1a:00.0", "4: ACTIVE");
        b.fw_ver = known("28.39.1002".into());
        n.rdma = known(vec![rdma("mlx5_0", "0000:19:00.0", "4: ACTIVE"), b]);
        let f = firmware(&n);
        assert_eq!(f[0].status, Status::Warn);
        assert!(f[0]
            .remediation
            .as_deref()
            .is_some_and(|r| r.contains("28.43.1014")));
    }
}
