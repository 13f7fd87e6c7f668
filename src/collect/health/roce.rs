//! RoCE ports: the GID table (`ports/<p>/gids/*`, `gid_attrs/types/*`, `gid_attrs/ndevs/*`)
//! and the netdevs behind each port (`/sys/class/net/<if>/{operstate,mtu,ecn}`).

use super::reason;
use crate::source::reader::{EntryKind, ErrorKind, ReadError, Root};
use gdrdoctor_checks::model::{Fact, GidEntry, Netdev, RdmaDevice, RocePort};
use gdrdoctor_checks::parse;
use std::collections::BTreeMap;

const CLASS: &str = "/sys/class/infiniband";

/// A read that failed with EINVAL (what a GID not mapped into a container's sysfs returns).
fn is_einval(e: &ReadError) -> bool {
    matches!(&e.kind, ErrorKind::Io(s) if s.contains("os error 22"))
}

pub fn collect(root: &Root, rdma: &Fact<Vec<RdmaDevice>>) -> Fact<Vec<RocePort>> {
    let devs = match rdma {
        Fact::Known { value, .. } => value,
        Fact::Absent { source, reason } => return Fact::absent(source.clone(), reason.clone()),
    };
    let mut out = Vec::new();
    for d in devs {
        let Some(ports) = d.ports.get() else { continue };
        for p in ports {
            if p.link_layer.get().map(String::as_str) != Some("Ethernet") {
                continue;
            }
            out.push(port(root, &d.name, p.port));
        }
    }
    Fact::known(out, CLASS)
}

fn port(root: &Root, dev: &str, port: u32) -> RocePort {
    let pb = format!("{CLASS}/{dev}/ports/{port}");
    let gids_dir = format!("{pb}/gids");
    let (tbl_len, gids) = match root.read_dir(&gids_dir) {
        Ok(list) => {
            let idx: Vec<u32> = list.iter().filter_map(|e| e.name.parse().ok()).collect();
            let mut entries = Vec::new();
            let mut sorted = idx.clone();
            sorted.sort_unstable();
            for i in sorted {
                let Ok(text) = root.read_trimmed(&format!("{gids_dir}/{i}")) else {
                    continue;
                };
                if !parse::gid_is_set(&text) {
                    continue;
                }
                let tp = format!("{pb}/gid_attrs/types/{i}");
                let kind = match root.read_trimmed(&tp) {
                    Ok(t) => Fact::known(t, tp),
                    Err(e) if is_einval(&e) => Fact::absent(tp, "EINVAL"),
                    Err(e) => Fact::absent(tp, reason(root, &e, "not found")),
                };
                let ndev = root
                    .read_trimmed(&format!("{pb}/gid_attrs/ndevs/{i}"))
                    .ok()
                    .filter(|s| !s.is_empty());
                entries.push(GidEntry {
                    index: i,
                    gid: text,
                    kind,
                    ndev,
                });
            }
            (idx.len(), Fact::known(entries, gids_dir.clone()))
        }
        Err(e) => (
            0,
            Fact::absent(gids_dir.clone(), reason(root, &e, "not found")),
        ),
    };
    // The netdevs: those the GIDs name, else the PCI function's own.
    let mut names: Vec<String> = Vec::new();
    if let Some(list) = gids.get() {
        for g in list {
            if let Some(n) = &g.ndev {
                if !names.contains(n) {
                    names.push(n.clone());
                }
            }
        }
    }
    let net_dir = format!("{CLASS}/{dev}/device/net");
    let mut source = format!("{pb}/gid_attrs/ndevs");
    if names.is_empty() {
        source = net_dir.clone();
        if let Ok(list) = root.read_dir(&net_dir) {
            names.extend(list.into_iter().map(|e| e.name));
        }
    }
    let netdevs = if names.is_empty() && !root.is_complete() {
        Fact::absent(source, super::NOT_CAPTURED)
    } else {
        Fact::known(names.iter().map(|n| netdev(root, n)).collect(), source)
    };
    RocePort {
        device: dev.to_string(),
        port,
        gid_tbl_len: tbl_len,
        gids,
        netdevs,
    }
}

fn netdev(root: &Root, name: &str) -> Netdev {
    let base = format!("/sys/class/net/{name}");
    let attr = |a: &str| {
        let p = format!("{base}/{a}");
        match root.read_trimmed(&p) {
            Ok(v) => Fact::known(v, p),
            Err(e) => Fact::absent(p, reason(root, &e, "not found")),
        }
    };
    let mtu = match attr("mtu") {
        Fact::Known { value, source } => match value.parse::<u32>() {
            Ok(m) => Fact::known(m, source),
            Err(_) => Fact::absent(source, format!("unrecognised content {value:?}")),
        },
        Fact::Absent { source, reason } => Fact::absent(source, reason),
    };
    Netdev {
        name: name.to_string(),
        operstate: attr("operstate"),
        mtu,
        ecn_np: ecn(root, &base, "roce_np"),
        ecn_rp: ecn(root, &base, "roce_rp"),
    }
}

/// `ecn/<algo>/enable/<prio>` (MOFED / DOCA-OFED mlx5). `None` inside `Known` when the
/// netdev exists but has no `ecn` directory (upstream drivers).
fn ecn(root: &Root, base: &str, algo: &str) -> Fact<Option<BTreeMap<u8, bool>>> {
    let dir = format!("{base}/ecn/{algo}/enable");
    match root.read_dir(&dir) {
        Ok(list) => {
            let mut m = BTreeMap::new();
            for e in list.iter().filter(|e| e.kind != EntryKind::Dir) {
                let Ok(prio) = e.name.parse::<u8>() else {
                    continue;
                };
                if let Ok(v) = root.read_trimmed(&format!("{dir}/{}", e.name)) {
                    m.insert(prio, v == "1");
                }
            }
            Fact::known(Some(m), dir)
        }
        Err(e) if e.is_not_found() && root.is_complete() => match root.exists(base) {
            Ok(true) => Fact::known(None, dir),
            _ => Fact::absent(dir, format!("{base} missing")),
        },
        Err(e) => Fact::absent(dir, reason(root, &e, "not found")),
    }
}
