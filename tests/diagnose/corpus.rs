//! Issue 34's corpus (fixtures/pastes/corpus.md): situations that real public NCCL logs showed
//! gdrdoctor reading wrongly, each kept as a constructed fixture in the same line shapes
//! (fixtures/pastes/SOURCES.md names the thread each models).

use super::*;

fn finding<'a>(r: &'a DiagnoseReport, id: &str) -> Vec<&'a gdrdoctor_checks::report::Finding> {
    r.findings.iter().filter(|f| f.id == id).collect()
}

fn rank<'a>(
    r: &'a DiagnoseReport,
    host: &str,
    rank: u32,
) -> &'a gdrdoctor_checks::paste::report::job::RankView {
    r.nccl
        .as_ref()
        .expect("the log")
        .ranks
        .iter()
        .find(|x| x.host.as_deref() == Some(host) && x.rank == rank)
        .unwrap_or_else(|| panic!("rank {rank} on {host}"))
}

#[test]
fn several_nccl_lines_on_one_line_are_each_read() {
    // A web page showed the log without line breaks and wrapped it anywhere (DeepEP#106):
    // every line is read, including those the wrap cut (`via` | `NET/IB/1/GDRDMA`, a commId,
    // `NCCL INFO` | `Using network IB`).
    let name = "constructed-flattened-lines.txt";
    let l = log_of(name);
    assert_eq!(l.connections.len(), 3, "{:?}", l.unreadable);
    assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
    assert_eq!(l.ranks.len(), 2);
    assert_eq!(l.networks, vec!["IB"]);
    assert_eq!(l.hosts, vec!["gpu-a"]);
    let r = run_on(&[name]);
    let r1 = rank(&r, "gpu-a", 1);
    assert_eq!(r1.bus_id.as_deref(), Some("2a000"));
    assert_eq!(r1.gdr, Some(true));
    assert_eq!(r1.peers.get(&3), Some(&vec!["NET/IB/1/GDRDMA".to_string()]));
    let r0 = rank(&r, "gpu-a", 0);
    assert_eq!(r0.gdr, Some(true));
    assert_eq!(r0.peers.get(&2), Some(&vec!["NET/IB/0/GDRDMA".to_string()]));
    assert_eq!(r.summary.exit_code, 0);
}

#[test]
fn lines_two_writers_ran_into_each_other_keep_their_host() {
    // Two processes wrote the terminal at once (ms-swift#3934): `h:1:2h:3:4 [0] NCCL INFO ..`
    // and `.. -> 1[h:3:4 [1] NCCL INFO ..`. There is one host; the cut line says so.
    let name = "constructed-interleaved-writers.log";
    let l = log_of(name);
    assert_eq!(l.hosts, vec!["node-x"]);
    assert!(
        l.connections
            .iter()
            .all(|c| c.origin.host.as_deref() == Some("node-x")),
        "{:?}",
        l.connections
            .iter()
            .map(|c| &c.origin.host)
            .collect::<Vec<_>>()
    );
    assert_eq!(l.connections.len(), 5);
    assert_eq!(l.unreadable.len(), 1, "the line cut after `1[`");
    let r = run_on(&[name]);
    let n = r.nccl.as_ref().unwrap();
    assert_eq!(n.ranks.len(), 2, "{:?}", n.ranks);
    let r0 = rank(&r, "node-x", 0);
    assert_eq!(r0.gdr, Some(true));
    assert_eq!(r0.pid, Some(5001));
    let g: Vec<_> = n.logged_gdr.iter().filter(|g| g.rank == 0).collect();
    assert_eq!(g.len(), 2, "send and receive: {g:?}");
}

#[test]
fn the_channel_bracket_names_the_local_gpu() {
    // Up to 2.18.1 the bracket is the GPU's bus id (nccl-tests#133, DeepSpeed#2931); with
    // two hosts, each rank's GPU is its own host's, joined by bus id.
    let name = "constructed-2host-busid-brackets.log";
    let r = run_on(&[name]);
    for (host, rk, bus, gdr) in [
        ("gpu-c", 0, "1b000", true),
        ("gpu-c", 1, "3d000", false),
        ("gpu-d", 2, "1b000", true),
        ("gpu-d", 3, "3d000", false),
    ] {
        let x = rank(&r, host, rk);
        assert_eq!(x.bus_id.as_deref(), Some(bus), "rank {rk}");
        assert_eq!(x.gdr, Some(gdr), "rank {rk}");
        assert_eq!(x.nvml_dev, None, "a 2.14 bracket is no nvmlDev");
    }
    let n = r.nccl.as_ref().unwrap();
    let d = n
        .logged_gdr
        .iter()
        .find(|g| g.host.as_deref() == Some("gpu-d") && g.rank == 3)
        .unwrap();
    assert_eq!(d.bus_id.as_deref(), Some("3d000"));
    let odd = finding(&r, "nccl.ranks");
    assert_eq!(odd[0].status, Status::Warn);
    assert!(
        odd[0].message.contains("rank 3 on gpu-d"),
        "{}",
        odd[0].message
    );
    // From 2.18.3 the bracket is the nvmlDev (DeepSpeed#4715, nccl#1412); 2.4's `Ring` lines
    // print the cudaDev there, which names no GPU across hosts.
    let t = "\
NCCL version 2.21.5+cuda12.4
h1:10:11 [2] NCCL INFO Channel 00/0 : 2[2] -> 6[2] [send] via NET/IB/2/GDRDMA
";
    let r = diagnose(&[input("x.log", t.into())], &RunOptions::default());
    let x = rank(&r, "h1", 2);
    assert_eq!(
        (x.nvml_dev, x.bus_id.as_deref(), x.cuda_dev),
        (Some(2), None, Some(2))
    );
    // A VM's GPU on bus 00 (0000:00:04.0 prints `40`): a bus id in 2.14, nothing without the
    // version (it could be nvmlDev 40 of no real node, or that bus id).
    for (version, bus) in [("NCCL version 2.14.3+cuda11.8\n", Some("40")), ("", None)] {
        let t = format!(
            "{version}vm-1:10:11 [0] NCCL INFO Channel 00/0 : 0[40] -> 1[40] [send] via NET/IB/0\n"
        );
        let r = diagnose(&[input("x.log", t)], &RunOptions::default());
        let x = rank(&r, "vm-1", 0);
        assert_eq!((x.bus_id.as_deref(), x.nvml_dev), (bus, None), "{version}");
    }
    let t = "\
h1:10:11 [3] NCCL INFO Ring 01 : 3 -> 6 [send] via NET/IB/0
h1:10:11 [3] NCCL INFO Ring 00 : 3[3] -> 1[1] via P2P/IPC
";
    let r = diagnose(&[input("x.log", t.into())], &RunOptions::default());
    let x = rank(&r, "h1", 3);
    assert_eq!(
        (x.nvml_dev, x.bus_id.as_deref(), x.cuda_dev),
        (None, None, Some(3))
    );
}

#[test]
fn a_socket_only_job_of_several_hosts_is_a_network_warning_never_a_pass() {
    // nccl#226: 8 hosts, `NET/IB : No device found`, sockets, and no connection line in the
    // paste. That was a pass saying "this run used none".
    let name = "constructed-socket-3hosts-no-channels.log";
    let r = run_on(&[name]);
    let net = finding(&r, "nccl.network");
    assert_eq!(net.len(), 1);
    assert_eq!(net[0].status, Status::Warn, "{}", net[0].message);
    assert!(net[0].message.contains("3 hosts"), "{}", net[0].message);
    assert!(!net[0].message.contains("used none"));
    assert!(finding(&r, "nccl.gdr")
        .iter()
        .all(|f| f.status != Status::Fail));
    // One host and no connection line (vllm#6370): what the run used is not shown.
    let one: String = text(name)
        .lines()
        .filter(|l| !l.contains("cpu-gpu-2") && !l.contains("cpu-gpu-3"))
        .map(|l| format!("{l}\n"))
        .collect();
    let r = diagnose(&[input("one.log", one)], &RunOptions::default());
    let net = finding(&r, "nccl.network");
    assert_eq!(net[0].status, Status::Warn, "{}", net[0].message);
    assert!(net[0].message.contains("not shown"), "{}", net[0].message);
    assert_eq!(r.summary.exit_code, 0);
}

#[test]
fn merged_virtual_nics_are_named_as_nccl_names_them() {
    // NCCL 2.20+ merging two ports into one device (vllm#6201): `[0]={[0] mlx5_7:1/RoCE, ..}`.
    let name = "constructed-merged-nics.log";
    let l = log_of(name);
    let names: Vec<(u32, &str)> = l
        .net_devices
        .iter()
        .map(|d| (d.index, d.name.as_str()))
        .collect();
    assert_eq!(names, vec![(0, "mlx5_2+mlx5_3"), (1, "mlx5_4+mlx5_5")]);
    assert!(l
        .net_devices
        .iter()
        .all(|d| d.link.as_deref() == Some("RoCE")));
    let r = run_on(&[name]);
    assert_eq!(rank(&r, "infer-1", 0).nics, vec!["mlx5_4+mlx5_5"]);
}

#[test]
fn nccl_2_3_device_listing_is_read() {
    // nccl#147, nccl#179: `NET/IB: [0] mlx5_3:1/IB` and `Using internal Network IB`.
    let l = log_of("constructed-nccl-2.3-ib-listing.log");
    let names: Vec<&str> = l.net_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["mlx5_0", "mlx5_1"]);
    assert_eq!(l.net_devices[1].port, Some(1));
    assert_eq!(l.networks, vec!["IB"]);
}

#[test]
fn a_nic_level_gdr_off_is_said_as_nccl_found_it() {
    // 2.19+ prints no reason (nccl#1537): the verdict is what NCCL found, not a node fact.
    let r = run_on(&["nccl-899-no-module-channels.log"]);
    let f = finding(&r, "nccl.gdr");
    // Two hosts (containers) logged: the NIC is named with the host that logged it.
    let nic = f
        .iter()
        .find(|f| f.subject == "mlx5_1 on 21346d5cefce")
        .unwrap();
    assert!(
        nic.message.contains("nccl found no peer-memory client"),
        "{}",
        nic.message
    );
}

#[test]
fn a_socket_plugin_interface_is_no_hca_without_peer_memory() {
    // Google's FastSocket plugin prints `NET/FastSocket : GPU Direct RDMA Disabled for HCA 0
    // 'eth0'` for each interface (nccl#1519): no RDMA network, never a peer-memory failure.
    let name = "constructed-fastsocket-gdr-disabled.log";
    let r = run_on(&[name]);
    assert!(
        finding(&r, "nccl.gdr")
            .iter()
            .all(|f| f.status != Status::Fail),
        "{:?}",
        finding(&r, "nccl.gdr")
    );
    let net = finding(&r, "nccl.network");
    assert_eq!(net.len(), 1);
    assert_eq!(net[0].status, Status::Pass, "{}", net[0].message);
    assert!(net[0].message.contains("no RDMA network"));
    assert_eq!(r.summary.exit_code, 0);
    let l = log_of(name);
    assert!(l.nic_gdr.is_empty(), "{:?}", l.nic_gdr);
    assert_eq!(l.no_rdma.len(), 3);
}
