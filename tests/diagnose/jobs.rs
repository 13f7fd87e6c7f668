//! Issue 34: NCCL logs as NCCL wrote them: several hosts (each with a device 0), several runs
//! in one paste, host-only transports, lines without NCCL's prefix.

use super::*;

fn finding<'a>(r: &'a DiagnoseReport, id: &str) -> Vec<&'a gdrdoctor_checks::report::Finding> {
    r.findings.iter().filter(|f| f.id == id).collect()
}

#[test]
fn two_hosts_with_the_same_device_0_are_never_one_gpu() {
    let name = "constructed-2host-rank-without-gdr.txt";
    let r = run_on(&[name]);
    let n = r.nccl.as_ref().expect("the log");
    // Every decision is attributed to its host, process, rank and bus id.
    let g = &n.logged_gdr;
    let b = g
        .iter()
        .find(|x| x.host.as_deref() == Some("gpu-b") && x.rank == 2)
        .expect("rank 2 on gpu-b");
    assert_eq!(b.pid, Some(3301));
    assert_eq!(b.bus_id.as_deref(), Some("18000"));
    assert_eq!(b.nvml_dev, Some(0));
    assert!(!b.gdr);
    // GPU0 x mlx5_0: gpu-a's rank 0 used GDRDMA, gpu-b's rank 2 did not; the paste does not
    // say which host the matrix is, so neither is put on the pair.
    let pair = |gpu: &str, nic: &str| {
        r.gdr
            .iter()
            .find(|p| p.gpu == gpu && p.nic == nic)
            .unwrap_or_else(|| panic!("{gpu}|{nic}"))
    };
    assert!(
        pair("GPU0", "mlx5_0").logged.is_none(),
        "{:?}",
        pair("GPU0", "mlx5_0").logged
    );
    assert!(n
        .unplaced
        .iter()
        .any(|u| u.host.as_deref() == Some("gpu-b") && u.rank == 2 && u.why.contains("differ")));
    assert!(n
        .unplaced
        .iter()
        .all(|u| u.bus_id.as_deref() == Some("18000")));
    // GPU1 x mlx5_1: both hosts logged GDRDMA: placed.
    let l = pair("GPU1", "mlx5_1").logged.as_ref().expect("placed");
    assert_eq!(l.send, Some(true));
    // The unplaced decisions are said, not judged.
    let un: Vec<_> = finding(&r, "nccl.gdr")
        .into_iter()
        .filter(|f| f.subject == "unplaced")
        .collect();
    assert_eq!(un.len(), 1);
    assert_eq!(un[0].status, Status::Skip);
    // The job view names the odd rank and the reason its host logged.
    let odd = finding(&r, "nccl.ranks");
    assert_eq!(odd.len(), 1);
    assert_eq!(odd[0].status, Status::Warn);
    assert!(
        odd[0]
            .message
            .starts_with("rank 2 on gpu-b: mlx5_0 without GDRDMA; every other rank uses GDRDMA"),
        "{}",
        odd[0].message
    );
    assert!(odd[0]
        .evidence
        .iter()
        .any(|e| e.observed.contains("distance 7 > 4")));
    type Row<'a> = (u32, Option<&'a str>, Option<&'a str>, Option<bool>);
    let ranks: Vec<Row> = n
        .ranks
        .iter()
        .map(|x| (x.rank, x.host.as_deref(), x.bus_id.as_deref(), x.gdr))
        .collect();
    assert_eq!(
        ranks,
        vec![
            (0, Some("gpu-a"), Some("18000"), Some(true)),
            (1, Some("gpu-a"), Some("2a000"), Some(true)),
            (2, Some("gpu-b"), Some("18000"), Some(false)),
            (3, Some("gpu-b"), Some("2a000"), Some(true)),
        ]
    );
    // Ring, tree and channel summaries are understood, not unreadable.
    assert!(n.ranks[0]
        .peers
        .get(&1)
        .is_some_and(|t| t == &vec!["P2P/CUMEM/read".to_string()]));
    let l = log_of(name);
    assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
    assert_eq!(l.summaries, 3);
}

#[test]
fn one_host_keeps_its_decisions_on_its_pairs() {
    // The same log cut to gpu-a alone: one host, every decision placed by nvmlDev.
    let t = text("constructed-2host-rank-without-gdr.txt");
    let one: String = t
        .lines()
        .filter(|l| !l.starts_with("gpu-b:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let r = diagnose(&[input("a.txt", one)], &RunOptions::default());
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU0" && p.nic == "mlx5_0")
        .unwrap();
    let l = p.logged.as_ref().expect("placed");
    assert_eq!((l.send, l.receive), (Some(true), Some(true)));
    assert!(r.nccl.as_ref().unwrap().unplaced.is_empty());
}

#[test]
fn two_runs_stay_apart_and_are_shown_side_by_side() {
    let name = "constructed-two-runs-ib-disable.log";
    let p = paste::read(&[input(name, text(name))]);
    assert_eq!(p.nccl.len(), 2, "one log per run");
    let (r1, r2) = (&p.nccl[0].1, &p.nccl[1].1);
    assert_eq!((r1.run, r1.lines), (1, [1, 14]));
    assert_eq!((r2.run, r2.lines), (2, [15, 26]));
    assert!(r2
        .run_start
        .as_deref()
        .is_some_and(|w| w.contains("pid 5520 took GPU 1b000")));
    assert_eq!(r1.env.get("NCCL_IB_DISABLE").map(String::as_str), Some("1"));
    assert_eq!(r2.env.get("NCCL_IB_DISABLE"), None);
    // The verdicts read the last run only: its settings, never run 1's.
    let m = p.nccl_merged().unwrap();
    assert_eq!(m.env.get("NCCL_IB_DISABLE"), None);
    assert!(m.connections.iter().all(|c| c.origin.run == Some(2)));
    let r = run_on(&[name]);
    let f = finding(&r, "nccl.runs");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].status, Status::Warn);
    assert!(f[0]
        .message
        .contains("NCCL_IB_DISABLE: run 1 1 against run 2 unset"));
    assert!(f[0]
        .message
        .contains("run 1 no RDMA connection against run 2 GDRDMA"));
    assert_eq!(f[0].evidence.len(), 2);
    assert!(f[0].evidence[0].source.starts_with("b1 run 1 lines 1-14"));
    assert!(f[0].evidence[1].source.contains("pid 5520 took GPU 1b000"));
    assert_eq!(r.nccl.as_ref().unwrap().runs.len(), 2);
    // Rank 0 only sends and rank 1 only receives: the direction a rank did not log is not
    // "off" (it was "gdr for sends only .. one direction is off").
    assert!(
        finding(&r, "gdr.gpu")
            .iter()
            .all(|f| f.status == Status::Pass && !f.message.contains("only")),
        "{:?}",
        finding(&r, "gdr.gpu")
    );
    // Run 1's sockets are still said, by run 1's lines.
    assert!(
        finding(&r, "nccl.network").is_empty()
            || r.nccl.as_ref().unwrap().runs[0].networks == vec!["Socket"]
    );
}

#[test]
fn a_single_run_with_subgroup_banners_is_one_run() {
    // A sub-group's rank 0 prints a banner too while the others go on logging: one run.
    let t = "\
h:10:10 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
h:10:11 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 18000 commId 0x1 - Init START
h:12:13 [2] NCCL INFO NCCL version 2.21.5+cuda12.4
h:12:13 [2] NCCL INFO comm 0x2 rank 0 nranks 2 cudaDev 2 busId 3a000 commId 0x2 - Init START
h:10:11 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 18000 commId 0x1 - Init COMPLETE
";
    let p = paste::read(&[input("x.log", t.into())]);
    assert_eq!(p.nccl.len(), 1);
    assert_eq!(p.nccl[0].1.run, 0);
    // Concatenated per-rank files (rank 0's, then rank 1's): one run.
    let t = "\
h:10:10 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
h:10:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 18000 commId 0x1 - Init COMPLETE
h:11:12 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 3a000 commId 0x1 - Init COMPLETE
";
    let p = paste::read(&[input("x.log", t.into())]);
    assert_eq!(p.nccl.len(), 1);
}

#[test]
fn a_socket_only_node_is_a_network_finding_not_a_peer_memory_failure() {
    let name = "constructed-1node-socket-p2p.log";
    let r = run_on(&[name]);
    let net = finding(&r, "nccl.network");
    assert_eq!(net.len(), 1);
    assert_eq!(net[0].status, Status::Pass, "{}", net[0].message);
    assert!(net[0].message.contains("no RDMA network"));
    assert!(
        finding(&r, "nccl.gdr")
            .iter()
            .all(|f| f.status != Status::Fail),
        "{:?}",
        finding(&r, "nccl.gdr")
    );
    assert_eq!(
        r.summary.exit_code,
        0,
        "{:?}",
        r.findings
            .iter()
            .filter(|f| f.status != Status::Pass && f.status != Status::Skip)
            .collect::<Vec<_>>()
    );
    let l = log_of(name);
    assert!(l.nic_gdr.is_empty(), "a socket interface is no HCA");
    assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
    assert_eq!(l.summaries, 5);
    assert_eq!(l.no_rdma.len(), 6);
    // The same node's sockets between two hosts: a warning about the network.
    let t = text(name).replace(
        "dgx-3:801:860 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "dgx-3:801:860 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
    );
    let r = diagnose(&[input("s.log", t)], &RunOptions::default());
    let net = finding(&r, "nccl.network");
    assert_eq!(net[0].status, Status::Warn);
    assert!(net[0].message.contains("GPUDirect RDMA cannot apply"));
}

#[test]
fn lines_without_the_prefix_are_read_with_lower_confidence() {
    let name = "constructed-no-prefix-no-module.txt";
    let r = run_on(&[name]);
    let b = r
        .blocks
        .iter()
        .find(|b| b.kind == Kind::NcclLog)
        .expect("an NCCL block");
    assert!(b.summary.contains("without NCCL's"), "{}", b.summary);
    assert!(b.summary.contains("lower confidence"));
    let fails: Vec<_> = statuses(&r, "nccl.gdr")
        .into_iter()
        .filter(|(_, s)| *s == Status::Fail)
        .collect();
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert_eq!(r.summary.exit_code, 1);
    let l = log_of(name);
    assert_eq!(l.unprefixed, 5);
    assert_eq!(l.connections.len(), 2);
    assert!(l.connections.iter().all(|c| c.origin.unprefixed));
}

#[test]
fn an_ibv_devinfo_cut_inside_a_device_is_an_excerpt_not_a_device_without_ports() {
    // deepep#55's paste ends after `hca_id: mlx5_4`, its transport and an empty `fw_ver:`.
    let r = run_on(&["deepep-55-ibv_devinfo-excerpt.txt"]);
    let ports: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "rdma.ports" && f.subject == "mlx5_4")
        .collect();
    assert_eq!(ports.len(), 1);
    assert_ne!(ports[0].status, Status::Fail, "{:?}", ports[0]);
    assert!(!ports[0].message.contains("no ports"));
    assert_eq!(r.summary.exit_code, 0);
    let p = paste::read(&[input("x", text("deepep-55-ibv_devinfo-excerpt.txt"))]);
    let d = p.ib.iter().find(|(_, d)| d.name == "mlx5_4").unwrap();
    assert!(d.1.cut.as_deref().is_some_and(|w| w.contains("excerpt")));
    // A device that says it has 2 ports and shows one is cut too; one that shows all is not.
    let t = "hca_id:\tmlx5_0\n\tphys_port_cnt:\t\t\t2\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n";
    let p = paste::read(&[input("x", t.into())]);
    assert!(p.ib[0]
        .1
        .cut
        .as_deref()
        .is_some_and(|w| w.contains("1 of its 2")));
    let t = t.replace("phys_port_cnt:\t\t\t2", "phys_port_cnt:\t\t\t1");
    let p = paste::read(&[input("x", t)]);
    assert_eq!(p.ib[0].1.cut, None);
}

#[test]
fn a_nic_level_gdr_failure_of_a_job_log_names_the_host_that_logged_it() {
    // gpu-a's NCCL found a peer-memory client, gpu-b's did not: each host has its own mlx5_0,
    // and the fix is gpu-b's.
    let log = "\
gpu-a:2101:2101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a:2101:2180 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.1.0.11<0>
gpu-a:2101:2180 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-a:2101:2180 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'
gpu-b:3301:3380 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.1.0.12<0>
gpu-b:3301:3380 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
gpu-b:3301:3380 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1' (no module)
";
    let r = diagnose(&[input("job.log", log.into())], &RunOptions::default());
    let mut fails: Vec<(&str, &str)> = finding(&r, "nccl.gdr")
        .into_iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| (f.subject.as_str(), f.message.as_str()))
        .collect();
    fails.sort();
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert_eq!(fails[0].0, "mlx5_0 on gpu-b");
    assert_eq!(fails[1].0, "mlx5_1 on gpu-b");
    assert!(
        fails[0].1.contains("mlx5_0 on gpu-b at the nic level"),
        "{}",
        fails[0].1
    );
    // One host: the NIC's name alone, as before.
    let one: String = log
        .lines()
        .filter(|l| l.starts_with("gpu-b"))
        .map(|l| format!("{l}\n"))
        .collect();
    let r = diagnose(&[input("b.log", one)], &RunOptions::default());
    let subjects: Vec<&str> = finding(&r, "nccl.gdr")
        .into_iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| f.subject.as_str())
        .collect();
    assert_eq!(subjects, ["mlx5_0", "mlx5_1"]);
}

/// A one-GPU, one-NIC `nvidia-smi topo -m` as pasted before a job's log.
const ONE_GPU_MATRIX: &str = "\
$ nvidia-smi topo -m
\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPIX\t0-47\t0
NIC0\tPIX\t X 

NIC Legend:

  NIC0: mlx5_0

";

#[test]
fn hosts_that_disagree_about_a_nic_say_nothing_about_the_matrix_host() {
    // The matrix is one host's; the paste does not say whose. gpu-a's NCCL enabled GDR on
    // mlx5_0 and gpu-b's did not: neither answer is applied to the matrix's pair.
    let text = format!(
        "{ONE_GPU_MATRIX}\
$ grep NCCL job.out
gpu-a:2101:2101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a:2101:2180 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.11<0>
gpu-a:2101:2180 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
gpu-b:3301:3380 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.12<0>
gpu-b:3301:3380 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
"
    );
    let r = diagnose(&[input("mixed.txt", text.clone())], &RunOptions::default());
    let gpu = finding(&r, "gdr.gpu");
    assert!(
        gpu.iter().all(|f| f.status != Status::Fail),
        "gpu-b's line failed the matrix's GPU: {gpu:?}"
    );
    // gpu-b's failure is still its own finding.
    assert!(finding(&r, "nccl.gdr")
        .iter()
        .any(|f| f.status == Status::Fail && f.subject == "mlx5_0 on gpu-b"));
    // Both hosts disabled it: the matrix's host did too, whichever it is.
    let both = text.replace(
        "Enabled for HCA 0 'mlx5_0'",
        "Disabled for HCA 0 'mlx5_0' (no module)",
    );
    let r = diagnose(&[input("both.txt", both)], &RunOptions::default());
    assert!(finding(&r, "gdr.gpu")
        .iter()
        .any(|f| f.status == Status::Fail));
}

#[test]
fn two_hosts_ibstat_that_disagree_fail_no_pair_of_the_matrix() {
    let name = "constructed-2host-ibstat-disagree.txt";
    let r = run_on(&[name]);
    let ports = finding(&r, "rdma.ports");
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0].status, Status::Error);
    assert!(
        ports[0].message.contains("mlx5_0 twice") && ports[0].message.contains("two nodes"),
        "{}",
        ports[0].message
    );
    // The state is unsettled, not down: the matrix's GPU is not failed for it.
    let gpu = finding(&r, "gdr.gpu");
    assert!(
        gpu.iter().all(|f| f.status != Status::Fail),
        "an unsettled port state failed GDR: {gpu:?}"
    );
    // Either host alone decides: gpu-b's (Down) fails, gpu-a's (Active) does not.
    let t = text(name);
    let cut = t.find("root@gpu-b").unwrap();
    let a = diagnose(
        &[input("a.txt", t[..cut].to_string())],
        &RunOptions::default(),
    );
    assert!(finding(&a, "gdr.gpu")
        .iter()
        .all(|f| f.status != Status::Fail));
    let b_only = format!("{}{}", &t[..t.find("root@gpu-a").unwrap()], &t[cut..]);
    let b = diagnose(&[input("b.txt", b_only)], &RunOptions::default());
    assert!(finding(&b, "gdr.gpu")
        .iter()
        .any(|f| f.status == Status::Fail));
}

#[test]
fn a_host_silent_about_a_nic_leaves_the_matrix_undecided_and_mpi_tags_keep_hosts() {
    // gpu-a's NCCL listed mlx5_0 and said nothing about its GDR; gpu-b's disabled it. The
    // matrix may be gpu-a's: gpu-b's line does not decide it. The lines carry Open MPI's
    // `--tag-output` prefix, which is not part of the host name.
    let text = format!(
        "{ONE_GPU_MATRIX}\
$ grep NCCL job.out
[1,0]<stdout>:gpu-a:2101:2101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[1,0]<stdout>:gpu-a:2101:2180 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.11<0>
[1,1]<stdout>:gpu-b:3301:3380 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.12<0>
[1,1]<stdout>:gpu-b:3301:3380 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
"
    );
    let r = diagnose(&[input("silent.txt", text)], &RunOptions::default());
    let n = r.nccl.as_ref().expect("the log");
    assert_eq!(n.hosts, ["gpu-a", "gpu-b"]);
    assert!(
        finding(&r, "gdr.gpu")
            .iter()
            .all(|f| f.status != Status::Fail),
        "{:?}",
        finding(&r, "gdr.gpu")
    );
    assert!(finding(&r, "nccl.gdr")
        .iter()
        .any(|f| f.status == Status::Fail && f.subject == "mlx5_0 on gpu-b"));
}

#[test]
fn a_gh200_paste_of_uname_m_and_a_grepped_product_name_is_c2c() {
    let name = "constructed-gh200-uname-m-grep-product.txt";
    let r = run_on(&[name]);
    // Every block read (`uname -m` was "recognised but not readable").
    assert!(
        finding(&r, "paste.blocks")
            .iter()
            .all(|f| f.status == Status::Pass),
        "{:?}",
        finding(&r, "paste.blocks")
    );
    // The product name makes GPU0 a Grace GPU: its NODE NIC is P2C, within NCCL 2.30's default.
    let dist = finding(&r, "topo.nic-distance");
    assert_eq!(dist.len(), 1);
    assert_eq!(dist[0].status, Status::Pass, "{}", dist[0].message);
    let p = paste::read(&[input(name, text(name))]);
    assert_eq!(p.smiq.len(), 1);
    assert_eq!(
        p.smiq[0].1.gpus[0].product_name.as_deref(),
        Some("NVIDIA GH200 480GB")
    );
}
