//! What a paste can and cannot show: skips with the command, the model filled from RDMA,
//! module and `nvidia-smi -q` pastes.

use super::*;

#[test]
fn what_a_paste_cannot_show_is_skip_with_the_command() {
    let r = run_on(&["nccl-pr2150-topo-pxb-cut.txt"]);
    let pm = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    assert_eq!(pm.status, Status::Skip);
    assert!(
        pm.message
            .contains("not in the pasted text; run `lsmod | grep"),
        "{}",
        pm.message
    );
    for f in &r.findings {
        assert_ne!(
            (f.id.as_str(), f.status),
            ("gpu.present", Status::Pass),
            "a pasted matrix is not a pci scan"
        );
        if f.status == Status::Pass {
            assert!(!f.evidence.is_empty(), "{} passes without evidence", f.id);
        }
    }
    // Distance known, peer memory not: gdr.gpu is skip, never pass.
    assert!(statuses(&r, "gdr.gpu")
        .iter()
        .filter(|(s, _)| *s != "GPU6" && *s != "GPU7")
        .all(|(_, s)| *s == Status::Skip));
}

#[test]
fn rdma_and_module_pastes_fill_the_model() {
    let r = run_on(&["mooncake-1999-ibstat.txt"]);
    let ports = statuses(&r, "rdma.ports");
    assert!(ports.contains(&("mlx5_0/1", Status::Pass)), "{ports:?}");
    assert!(ports
        .iter()
        .any(|(s, st)| *s == "mlx5_10/1" && *st != Status::Pass));
    let r = run_on(&["deepep-60-ibv_devinfo-excerpt.txt"]);
    let n = r
        .inventory
        .nics
        .iter()
        .find(|n| n.ibdev == "mlx5_12")
        .unwrap();
    assert_eq!(n.ports[0].state.as_deref(), Some("DOWN"));
    let r = run_on(&["rdma-core-847-ibstat-mlx4.txt"]);
    let n = &r.inventory.nics[0];
    assert_eq!(n.ibdev, "mlx4_0");
    assert_eq!(n.ports.len(), 2);
    let r = run_on(&["nccl-1866-legend-ibstatus.txt"]);
    assert!(r.matrices.is_empty(), "a legend alone is not a matrix");
    assert_eq!(r.inventory.nics.len(), 2);
    let r = run_on(&["gpud-39-lsmod-peermem.txt"]);
    assert_eq!(
        statuses(&r, "kmod.nvidia-peermem"),
        vec![("node", Status::Pass)]
    );
    // A pasted dmesg feeds the node's kernel log: issue 17's kernel.xid judges it (the
    // three-line "fallen off the bus" report is Xid 79 for 0000:b3:00.0).
    let r = run_on(&["nvsentinel-155-fallen-off-bus.txt"]);
    assert_eq!(
        statuses(&r, "kernel.xid"),
        vec![("0000:b3:00.0", Status::Fail)]
    );
    // No IOMMU line in the excerpt: not proof of none.
    assert_eq!(
        statuses(&r, "kernel.iommu-fault"),
        vec![("node", Status::Skip)]
    );
    assert_eq!(
        r.inventory.driver.nvidia_version.as_deref(),
        Some("570.158.01")
    );
    assert_eq!(r.inventory.driver.flavor.as_deref(), Some("open"));
    // nv_peer_mem could not load: kmod.nvidia-peermem says why there is no peer-memory client.
    let r = run_on(&["nv_peer_memory-8-disagrees-symbol.txt"]);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "kmod.nvidia-peermem")
        .unwrap();
    assert_eq!(f.status, Status::Fail, "{f:?}");
    assert!(
        f.message.contains("nv_peer_mem could not load"),
        "{}",
        f.message
    );
    assert!(
        f.evidence.iter().any(|e| e.source.starts_with("b1 ")
            && e.observed.contains("Unknown symbol nvidia_p2p_put_pages")),
        "{f:?}"
    );
}

#[test]
fn nvidia_smi_q_gives_driver_and_gpus() {
    let p = paste::read(&[input("q", text("nvidia-docker-954-smi-q.txt"))]);
    let (_, q) = &p.smiq[0];
    assert_eq!(q.driver_version.as_deref(), Some("396.54"));
    assert_eq!(q.gpus[0].bdf, "0000:01:00.0");
    assert_eq!(q.gpus[0].persistence_mode, Some(false));
}
