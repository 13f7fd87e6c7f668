//! `probe.nccl-topology`: NCCL's topology dump against gdrdoctor's view of the node, for the
//! communicator's GPUs and the RDMA devices: one `fail` per disagreement (a GPU or RDMA device
//! one side lacks, NVLink or the PCIe path between two GPUs, the path between a GPU and a NIC,
//! GDR support of a NIC), else one `pass` with both sides.

use super::{Output, ID_TOPO};
use gdrdoctor_checks::nccl::rule::{Decision, System};
use gdrdoctor_checks::nccl::topo_dump::Dump;
use gdrdoctor_checks::report::{Finding, Status};

/// A GPU or NIC in both: its name, its index in NCCL's dump, its index in gdrdoctor's view.
type Both = (String, usize, usize);

fn pos(sys: &System, id: &str) -> Option<usize> {
    sys.gpus.iter().position(|g| g.id == id)
}

fn cell<T: Copy>(m: &[Vec<Option<T>>], a: usize, b: usize) -> Option<T> {
    m.get(a).and_then(|r| r.get(b)).copied().flatten()
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// A finding with what each side says.
fn both(f: Finding, nccl: String, ours: String) -> Finding {
    f.evidence("nccl (NCCL_TOPO_DUMP_FILE)", nccl)
        .evidence("gdrdoctor", ours)
}

pub(super) fn topology(
    view: &System,
    text: Option<&str>,
    dump: Option<&Dump>,
    o: &Output,
    nccl_rdma: &[&str],
    d: &Decision,
) -> Vec<Finding> {
    let dump = match (text, dump) {
        (None, _) => {
            return vec![Finding::new(ID_TOPO, Status::Error, "node", "nccl wrote no topology dump (NCCL_TOPO_DUMP_FILE): nothing to compare with gdrdoctor's view")]
        }
        (Some(_), None) => {
            return vec![Finding::new(ID_TOPO, Status::Error, "node", "nccl's topology dump holds no <system> element: nothing to compare with gdrdoctor's view")]
        }
        (Some(_), Some(x)) => x,
    };
    let ds = dump.system();
    let mut out = Vec::new();
    let gpus = communicator_gpus(view, &ds, o, &mut out);
    let nics = rdma_devices(view, dump, nccl_rdma, d, &mut out);
    gpu_pairs(view, &ds, &gpus, &mut out);
    gpu_nic_paths(view, &ds, &gpus, &nics, &mut out);
    gdr_support(view, dump, &nics, &mut out);
    if out.is_empty() {
        out.push(agreement(view, dump, &ds, &gpus, &nics));
    }
    out
}

/// The communicator's GPUs, in both; a `fail` for one either side lacks.
fn communicator_gpus(view: &System, ds: &System, o: &Output, out: &mut Vec<Finding>) -> Vec<Both> {
    let mut gpus: Vec<Both> = Vec::new();
    for r in &o.ranks {
        match (pos(ds, &r.bdf), pos(view, &r.bdf)) {
            (Some(a), Some(b)) => gpus.push((r.bdf.clone(), a, b)),
            (None, _) => out.push(Finding::new(ID_TOPO, Status::Fail, &r.bdf, format!(
                "nccl's topology dump has no gpu {} although rank {} runs on it",
                r.bdf, r.rank
            ))),
            (Some(_), None) => out.push(both(
                Finding::new(ID_TOPO, Status::Fail, &r.bdf, format!("nccl runs rank {} on gpu {}, which gdrdoctor does not see on this node", r.rank, r.bdf))
                    .fix("compare `lspci -d 10de:` with `nvidia-smi -L`; a gpu behind a bridge gdrdoctor cannot read shows in `gdrdoctor snapshot`"),
                "present".into(),
                "absent from the PCI tree".into(),
            )),
        }
    }
    gpus
}

/// RDMA devices: those gdrdoctor expects NCCL to use, and those NCCL lists; the ones in both.
fn rdma_devices(
    view: &System,
    dump: &Dump,
    nccl_rdma: &[&str],
    d: &Decision,
    out: &mut Vec<Finding>,
) -> Vec<Both> {
    let dump_net = |name: &str| dump.nets.iter().position(|n| n.name == name);
    let mut nics: Vec<Both> = Vec::new();
    for (i, nic) in view.nics.iter().enumerate() {
        let used = d.verdicts.iter().any(|v| v.nic == i && v.used);
        match (dump_net(&nic.name), used) {
            (Some(k), _) => nics.push((nic.name.clone(), k, i)),
            (None, true) => out.push(
                Finding::new(ID_TOPO, Status::Fail, &nic.name, format!(
                    "gdrdoctor expects nccl to use {} (an ACTIVE port, not excluded by the environment), but nccl's topology does not list it",
                    nic.name
                ))
                .fix("look for `NET/IB` lines in nccl's log (`No device found`, a port nccl skipped) and NCCL_IB_HCA / NCCL_IB_DISABLE in the job's environment"),
            ),
            (None, false) => {}
        }
    }
    for name in nccl_rdma {
        if !view.nics.iter().any(|n| n.name == *name) {
            out.push(Finding::new(ID_TOPO, Status::Fail, *name, format!(
                "nccl uses the rdma device {name}, which gdrdoctor does not see on this node"
            )).fix("compare `ibv_devices` with `ls /sys/class/infiniband`; a device missing from sysfs cannot be judged"));
        }
    }
    nics
}

/// GPU pairs: NVLink, and the PCIe path where neither side has NVLink.
fn gpu_pairs(view: &System, ds: &System, gpus: &[Both], out: &mut Vec<Finding>) {
    for (x, (ga, da, va)) in gpus.iter().enumerate() {
        for (gb, db, vb) in gpus.iter().skip(x + 1).map(|g| (&g.0, g.1, g.2)) {
            let (n_nv, v_nv) = (cell(&ds.nvlink, *da, db), cell(&view.nvlink, *va, vb));
            if let (Some(a), Some(b)) = (n_nv, v_nv) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{ga}|{gb}"), format!(
                            "nccl {} nvlink between {ga} and {gb}, gdrdoctor {}",
                            if a { "sees" } else { "sees no" },
                            if b { "does" } else { "does not" }
                        ))
                        .fix("`nvidia-smi topo -m` and `nvidia-smi nvlink -s` show the links; on nvswitch systems the fabric manager must be running (`gdrdoctor check --only gpu.nvlink,gpu.p2p`)"),
                        format!("nvlink {}", yes_no(n_nv)),
                        format!("nvlink {} ({})", yes_no(v_nv), view.nvlink_source),
                    ));
                    continue;
                }
            }
            if n_nv == Some(true) || v_nv == Some(true) {
                continue;
            }
            let (np, vp) = (cell(&ds.gpu_paths, *da, db), cell(&view.gpu_paths, *va, vb));
            if let (Some(a), Some(b)) = (np, vp) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{ga}|{gb}"), format!(
                            "the pcie path between {ga} and {gb}: nccl says {a}, gdrdoctor says {b}"
                        ))
                        .fix("report it with the json report (it holds nccl's dump) and a `gdrdoctor snapshot`: gdrdoctor reads the pci tree differently from nccl here"),
                        a.as_str().into(),
                        b.as_str().into(),
                    ));
                }
            }
        }
    }
}

/// GPU x NIC: the path.
fn gpu_nic_paths(view: &System, ds: &System, gpus: &[Both], nics: &[Both], out: &mut Vec<Finding>) {
    for (g, dg, vg) in gpus {
        for (n, dn, vn) in nics {
            let (np, vp) = (cell(&ds.paths, *dg, *dn), cell(&view.paths, *vg, *vn));
            if let (Some(a), Some(b)) = (np, vp) {
                if a != b {
                    out.push(both(
                        Finding::new(ID_TOPO, Status::Fail, format!("{g}|{n}"), format!(
                            "the path between {g} and {n}: nccl says {a}, gdrdoctor says {b}"
                        ))
                        .fix("report it with the json report (it holds nccl's dump) and a `gdrdoctor snapshot`: the gdr verdict depends on this path"),
                        a.as_str().into(),
                        b.as_str().into(),
                    ));
                }
            }
        }
    }
}

/// GDR support of each NIC as NCCL wrote it (`gdr=` of its `<net>`) and as gdrdoctor reads it
/// (a peer-memory client or dma-buf for some GPU).
fn gdr_support(view: &System, dump: &Dump, nics: &[Both], out: &mut Vec<Finding>) {
    for (n, dn, vn) in nics {
        let nccl_gdr = dump.nets.get(*dn).and_then(|x| x.gdr);
        let ours: Vec<&gdrdoctor_checks::nccl::rule::Support> =
            view.support.iter().filter_map(|row| row.get(*vn)).collect();
        let ours_gdr = if ours
            .iter()
            .any(|s| s.peermem == Some(true) || s.dmabuf == Some(true))
        {
            Some(true)
        } else if !ours.is_empty()
            && ours
                .iter()
                .all(|s| s.peermem == Some(false) && s.dmabuf == Some(false))
        {
            Some(false)
        } else {
            None
        };
        if let (Some(a), Some(b)) = (nccl_gdr, ours_gdr) {
            if a != b {
                out.push(both(
                    Finding::new(ID_TOPO, Status::Fail, n.as_str(), format!(
                        "nccl {} gpudirect rdma usable on {n}, gdrdoctor {}",
                        if a { "finds" } else { "does not find" },
                        if b { "does (a peer-memory client or dma-buf)" } else { "does not" }
                    ))
                    .fix("`gdrdoctor check --only kmod,driver,rdma` says what gdrdoctor read; nccl's log says `GPU Direct RDMA Enabled|Disabled for HCA` with its reason"),
                    format!("gdr=\"{}\" on <net name=\"{n}\">", u8::from(a)),
                    format!("peer memory or dma-buf: {}", yes_no(Some(b))),
                ));
            }
        }
    }
}

/// The GPU pairs of one side, each as NVLink or its PCIe path.
fn pair_list(sys: &System, list: &[Both], dump_side: bool) -> String {
    let mut v = Vec::new();
    for (x, a) in list.iter().enumerate() {
        for b in list.iter().skip(x + 1) {
            let (i, j) = if dump_side { (a.1, b.1) } else { (a.2, b.2) };
            v.push(format!(
                "{}|{} {}",
                a.0,
                b.0,
                match cell(&sys.nvlink, i, j) {
                    Some(true) => "nvlink".to_string(),
                    _ => cell(&sys.gpu_paths, i, j)
                        .map(|k| k.as_str().to_string())
                        .unwrap_or_else(|| "?".into()),
                }
            ));
        }
    }
    v.join(", ")
}

/// The `pass` when nothing disagrees, with both sides.
fn agreement(view: &System, dump: &Dump, ds: &System, gpus: &[Both], nics: &[Both]) -> Finding {
    let links: Vec<String> = dump
        .gpus
        .iter()
        .filter(|g| gpus.iter().any(|x| x.0 == g.busid))
        .map(|g| {
            let n: i64 = g.nvlinks.iter().map(|l| l.1).sum();
            format!("{} {n} nvlink(s)", g.busid)
        })
        .collect();
    let gpu_list = gpus
        .iter()
        .map(|g| g.0.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let nic_list = if nics.is_empty() {
        "none".to_string()
    } else {
        nics.iter()
            .map(|n| n.0.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    both(
        Finding::new(ID_TOPO, Status::Pass, "node", format!(
            "nccl's topology agrees with gdrdoctor's view: {} gpu(s), rdma devices used: {nic_list}",
            gpus.len()
        )),
        format!("gpus {gpu_list}; pairs: {}; {}", pair_list(ds, gpus, true), links.join(", ")),
        format!("gpus {gpu_list}; pairs: {} ({})", pair_list(view, gpus, false), view.nvlink_source),
    )
}
