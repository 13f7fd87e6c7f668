//! The `inventory` section of the report, built from the Node.

use crate::derive;
use crate::model::{Fact, Node, PciDevice};
use crate::names;
use crate::parse;
use crate::report::*;

fn hex4(v: &Fact<u16>) -> Option<String> {
    v.get().map(|v| format!("{v:04x}"))
}

fn link(d: &PciDevice) -> Link {
    Link {
        cur_speed_gts: d
            .cur_link_speed
            .get()
            .and_then(|s| parse::link_speed_gts(s)),
        cur_width: d.cur_link_width.get().copied(),
        max_speed_gts: d
            .max_link_speed
            .get()
            .and_then(|s| parse::link_speed_gts(s)),
        max_width: d.max_link_width.get().copied(),
    }
}

fn bars(d: &PciDevice) -> Vec<Bar> {
    d.resources
        .get()
        .map(|r| {
            r.iter()
                .filter(|r| r.index < 6 && r.is_set() && r.is_mem())
                .map(|r| Bar {
                    index: r.index,
                    start: format!("0x{:x}", r.start),
                    size: r.size(),
                    prefetchable: r.prefetchable(),
                    mem64: r.mem64(),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn build(node: &Node) -> Inventory {
    let gpus = derive::gpus(node)
        .into_iter()
        .map(|g| GpuInv {
            bdf: g.bdf.clone(),
            vendor_id: hex4(&g.vendor_id).unwrap_or_default(),
            device_id: hex4(&g.device_id).unwrap_or_default(),
            name: names::device_name(g),
            numa_node: g.numa_node.get().copied(),
            link: link(g),
            bars: bars(g),
        })
        .collect();
    let nics = node
        .rdma
        .get()
        .map(|r| {
            r.iter()
                .map(|d| NicInv {
                    ibdev: d.name.clone(),
                    bdf: d.pci_bdf.get().cloned().flatten(),
                    fw_ver: d.fw_ver.get().cloned(),
                    hca_type: d.hca_type.get().cloned(),
                    board_id: d.board_id.get().cloned(),
                    ports: d
                        .ports
                        .get()
                        .map(|ps| {
                            ps.iter()
                                .map(|p| PortInv {
                                    port: p.port,
                                    state: p.state_name().map(str::to_string),
                                    phys_state: p.phys_state_name().map(str::to_string),
                                    link_layer: p.link_layer.get().cloned(),
                                    rate: p.rate.get().cloned(),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let pci = node
        .pci
        .get()
        .map(|p| {
            p.iter()
                .map(|d| {
                    let cs = d.decoded();
                    PciInv {
                        bdf: d.bdf.clone(),
                        class: d.class.get().map(|c| format!("0x{c:06x}")),
                        vendor_id: hex4(&d.vendor_id),
                        device_id: hex4(&d.device_id),
                        parent: d.parent.clone(),
                        pcie: cs.as_ref().and_then(|c| c.pcie.as_ref()).map(|p| PcieInv {
                            lnkcap_speed_gts: p.lnkcap_speed_gts,
                            lnkcap_width: p.lnkcap_width,
                            lnksta_speed_gts: p.lnksta_speed_gts,
                            lnksta_width: p.lnksta_width,
                            mps: p.mps,
                            mrrs: p.mrrs,
                            relaxed_ordering: p.relaxed_ordering,
                        }),
                        acs: cs.as_ref().and_then(|c| c.acs.as_ref()).map(|a| AcsInv {
                            ctl: format!("0x{:04x}", a.ctl),
                            src_valid: a.src_valid,
                            req_redir: a.req_redir,
                            cmplt_redir: a.cmplt_redir,
                            upstream_fwd: a.upstream_fwd,
                            egress_ctl: a.egress_ctl,
                            direct_trans: a.direct_trans,
                            trans_blocking: a.trans_blocking,
                        }),
                        ats: cs
                            .as_ref()
                            .and_then(|c| c.ats.as_ref())
                            .map(|a| AtsInv { enabled: a.enabled }),
                        config_bytes: d.config.get().map(|b| b.len()),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let drv = derive::nvidia_driver(node);
    let params = node.nvidia.params.get();
    let driver = DriverInv {
        nvidia_version: drv.as_ref().map(|(v, _)| v.clone()),
        flavor: drv.as_ref().map(|(_, f)| match f {
            crate::model::Flavor::Open => "open".to_string(),
            crate::model::Flavor::Proprietary => "proprietary".to_string(),
        }),
        peermem: derive::peermem_path(node).available,
        nv_peer_mem: node.peermem.nv_peer_mem.get().copied(),
        peer_mapping_override: params.map(|p| {
            p.get("RegistryDwords")
                .map(|r| parse::registry_dwords(r))
                .and_then(|m| {
                    m.get("PeerMappingOverride")
                        .and_then(|v| parse::registry_number(v))
                })
                .is_some_and(|v| v == 1)
        }),
        stream_memops: params
            .and_then(|p| p.get("EnableStreamMemOPs"))
            .and_then(|v| parse::registry_number(v))
            .map(|v| v == 1),
        grdma_topo_override: params
            .and_then(|p| p.get("GrdmaPciTopoCheckOverride"))
            .and_then(|v| parse::registry_number(v)),
    };
    let (mode, evidence) = derive::iommu_mode(node);
    Inventory {
        gpus,
        nics,
        pci,
        driver,
        iommu: IommuInv {
            mode: mode.as_str().to_string(),
            evidence,
        },
        cmdline: node.cmdline.get().cloned(),
        env: node.env.get().cloned(),
    }
}
