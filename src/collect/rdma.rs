//! RDMA devices and ports: `/sys/class/infiniband`.

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;

pub(super) fn collect(root: &Root) -> Fact<Vec<RdmaDevice>> {
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
                let p = crate::source::reader::child(&base, a);
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
                let p = crate::source::reader::child(&pb, a);
                fact(&p, root.read_trimmed(&p))
            };
            let gids = format!("{pb}/gids");
            let gid_count = match root.read_dir(&gids) {
                Ok(list) => Fact::known(
                    list.iter()
                        .filter(|g| {
                            root.read_trimmed(&crate::source::reader::child(&gids, &g.name))
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
