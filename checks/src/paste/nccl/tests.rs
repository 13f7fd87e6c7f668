#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::lines::parse_transport;
use super::*;
use proptest::prelude::*;

#[test]
fn version_env_ranks_and_devices() {
    let t = "\
node-1:100:200 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
node-1:100:200 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1
node-1:100:200 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB
node-1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]; OOB ib0:10.0.0.1<0>
node-1:100:200 [0] NCCL INFO comm 0x55cc8aa86c70 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1c000 commId 0x65e0bd6ee7449db4 - Init START
node-1:100:200 [0] NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=0x1 pciPath=/sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0 ar=0
";
    let l = parse(t);
    assert_eq!(
        l.version(),
        Some(Version {
            major: 2,
            minor: 19,
            patch: 3
        })
    );
    assert_eq!(
        l.env.get("NCCL_NET_GDR_LEVEL").map(String::as_str),
        Some("PHB")
    );
    assert_eq!(l.hosts, vec!["node-1"]);
    assert_eq!(l.ranks[0].bus_id.as_deref(), Some("1c000"));
    assert_eq!(l.ranks[0].nranks, Some(16));
    assert_eq!(l.net_devices.len(), 2);
    assert_eq!(l.net_devices[1].link.as_deref(), Some("RoCE"));
    assert_eq!(l.net_devices[1].extras, vec!["SHARP"]);
    assert_eq!(l.net_devices[0].speed_mbps, Some(400000));
    assert!(l.net_devices[0]
        .pci_path
        .as_deref()
        .unwrap()
        .ends_with("1b:00.0"));
}

#[test]
fn gdr_lines_of_every_format() {
    let t = "\
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)
h:1:2 [3] NCCL INFO GPU Direct RDMA Enabled for GPU 86000 / HCA 0 (distance 4 <= 4), read 0
h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance 5 > 4)
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)
h:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 3 / HCA 2 (distance 5 <= 5), read 1 mode Default
";
    let l = parse(t);
    assert_eq!(l.nic_gdr.len(), 3);
    assert_eq!(l.nic_gdr[0].reason.as_deref(), Some("no module"));
    assert!(l.nic_gdr[1].enabled);
    assert_eq!(l.gpu_gdr.len(), 4);
    let g = &l.gpu_gdr[0];
    assert_eq!(
        (g.gpu.as_str(), g.hca.as_str(), g.enabled),
        ("86000", "0", true)
    );
    assert_eq!(
        (g.distance, g.threshold, g.read),
        (Some(4), Some(4), Some(false))
    );
    assert_eq!(l.gpu_gdr[1].op.as_deref(), Some(">"));
    assert_eq!(l.gpu_gdr[2].gpu, "0[0]");
    assert_eq!(l.gpu_gdr[3].mode.as_deref(), Some("Default"));
    assert_eq!(l.gpu_gdr[3].read, Some(true));
}

#[test]
fn channel_transports() {
    let t = "\
a:1:2 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA
a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
a:1:2 [0] NCCL INFO Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA/Shared
a:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 9[1] [send] via NET/IB/1/GDRDMA(PCI)
a:1:2 [7] NCCL INFO Channel 02/0 : 7[7] -> 0[0] via P2P/CUMEM/read
a:1:2 [2] NCCL INFO Channel 00/1 : 2[2] -> 3[3] via P2P/direct pointer
a:1:2 [2] NCCL INFO Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct
a:1:2 [0] NCCL INFO Ring 00 : 3 -> 4 [send] via NET/IB/0/GDRDMA
a:1:2 [4] NCCL INFO Channel 06/0 : 36[4] -> 20[4] [send] via NET/IBext_v8/3
a:1:2 [0] NCCL INFO Channel 00/02 :    0   1
";
    let l = parse(t);
    assert_eq!(l.connections.len(), 9);
    let c = &l.connections[0];
    assert_eq!(c.direction, Some(Direction::Receive));
    assert_eq!(c.local(), (0, Some("87000")));
    assert!(matches!(
        &c.transport,
        Transport::Net {
            dev: 5,
            gdr: true,
            ..
        }
    ));
    assert!(matches!(
        &l.connections[1].transport,
        Transport::Net {
            dev: 0,
            gdr: false,
            ..
        }
    ));
    assert!(matches!(
        &l.connections[2].transport,
        Transport::Net {
            dev: 1,
            proxy: Some(1),
            gdr: true,
            shared: true,
            ..
        }
    ));
    assert!(matches!(
        &l.connections[3].transport,
        Transport::Net {
            gdr: true,
            gdr_pci: true,
            ..
        }
    ));
    assert_eq!(
        l.connections[4].transport,
        Transport::P2p {
            mode: "CUMEM".into(),
            read: true
        }
    );
    assert_eq!(
        l.connections[5].transport,
        Transport::P2p {
            mode: "direct pointer".into(),
            read: false
        }
    );
    assert_eq!(
        l.connections[6].transport,
        Transport::Shm {
            mode: "direct/direct".into()
        }
    );
    assert_eq!(
        (
            l.connections[7].from_rank,
            l.connections[7].from_dev.as_deref()
        ),
        (3, None)
    );
    assert!(
        matches!(&l.connections[8].transport, Transport::Net { net, dev: 3, gdr: false, .. } if net == "IBext_v8")
    );
    let g = l.logged_gdr();
    assert_eq!(g.iter().filter(|x| x.gdr).count(), 4);
}

#[test]
fn failures_map_to_kinds() {
    let t = "\
x:1:2 [0] misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported
x:1:2 [0] NCCL WARN Call to ibv_reg_mr failed with error Bad address
H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::1%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)
hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 (Recv)
y:1:2 [0] NCCL WARN NET/IB: Got completion from peer 1.2.3.4<5> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_0
ins:3:4 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'
n:1:2 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1197, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3
[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE) ran for 600061 milliseconds before timing out.
ng:3:4 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer ng-ib<51159>
";
    let l = parse(t);
    let k: Vec<FailureKind> = l.failures.iter().map(|f| f.kind).collect();
    assert_eq!(
        k,
        vec![
            FailureKind::DmabufMr,
            FailureKind::RegMr,
            FailureKind::IbCompletion,
            FailureKind::IbCompletion,
            FailureKind::IbCompletion,
            FailureKind::CudaFailure,
            FailureKind::CudaFailure,
            FailureKind::SystemError,
            FailureKind::Timeout,
            FailureKind::RemoteError,
        ]
    );
    assert_eq!(
        l.failures[0].error.as_deref(),
        Some("Operation not supported")
    );
    assert_eq!(
        (l.failures[2].status, l.failures[2].vendor_err),
        (Some(4), Some(81))
    );
    assert_eq!(
        (l.failures[3].status, l.failures[3].vendor_err),
        (Some(12), Some(129))
    );
    assert_eq!(
        (l.failures[4].status, l.failures[4].vendor_err),
        (Some(12), Some(129))
    );
    assert_eq!(l.failures[5].error.as_deref(), Some("out of memory"));
    assert_eq!(l.failures[6].error.as_deref(), Some("invalid argument"));
    assert_eq!(l.versions, vec!["2.18.3"]);
}

#[test]
fn wrapped_and_cut_transports_are_joined_or_not_trusted() {
    // A hard wrap inside `/GDRDMA`: joined.
    let t = "a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDR\nDMA\na:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0\n/GDRDMA\na:1:2 [0] NCCL INFO x\n";
    let l = parse(t);
    assert_eq!(l.connections.len(), 2, "{:?}", l.unreadable);
    assert!(l
        .connections
        .iter()
        .all(|c| matches!(c.transport, Transport::Net { gdr: true, .. })));
    // A tail fragment that nothing completes is not read as "no GDR".
    let l = parse("a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GD\nTraceback (most recent call last):\n");
    assert!(l.connections.is_empty());
    assert_eq!(l.unreadable.len(), 1);
    // The last line may be cut right after the device number.
    let l = parse("a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\na:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0");
    assert_eq!(l.connections.len(), 1);
    assert_eq!(l.unreadable.len(), 1);
}

#[test]
fn launcher_prefixes_do_not_hide_the_origin() {
    let t = "(train pid=26) 2024-05-11 14:10:52.224 n176:2657296:2658229 [1] NCCL INFO Connected all rings\n 2025-02-18 12:54 ncivk:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3\n";
    let l = parse(t);
    assert_eq!(l.hosts, vec!["n176", "ncivk"]);
    assert_eq!(l.nccl_lines, 2);
}

#[test]
fn warnings_and_a_file_s_last_line() {
    let t = "\
h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>
h:1:2 [0] init.cc:1234 NCCL WARN Cuda failure 'out of memory'
n:1:2 [0] misc/socket.cc:50 NCCL WARN Net : No interface found in the same subnet as remote address
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0
";
    let l = parse_file(t);
    let w: Vec<&str> = l.warnings.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(
        w,
        vec![
            "Cuda failure 'out of memory'",
            "Net : No interface found in the same subnet as remote address"
        ],
        "every WARN line, a failure kind or not"
    );
    assert_eq!(l.warnings[1].origin.line, 3);
    // A file that ends with a newline holds its last line whole; a paste may be cut.
    assert_eq!((l.connections.len(), l.unreadable.len()), (1, 0));
    assert_eq!(parse(t).connections.len(), 0);
    assert_eq!(parse_file(t.trim_end()).connections.len(), 0);
    assert_eq!(
        l.connections[0].describe(),
        "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0"
    );
}

#[test]
fn transports_print_back_as_nccl_wrote_them() {
    for t in [
        "NET/IB/3(2)/GDRDMA(PCI)/Shared",
        "NET/IBext_v8/0",
        "P2P/CUMEM/read",
        "P2P/direct pointer",
        "P2P/indirect/2[2]",
        "SHM/direct/direct",
    ] {
        assert_eq!(parse_transport(t).label(), t);
    }
    let l = parse("a:1:2 [2] NCCL INFO Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct\n");
    assert_eq!(
        l.connections[0].describe(),
        "Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct"
    );
}

proptest! {
    #[test]
    fn never_panics(s in "\\PC{0,400}") {
        let l = parse(&s);
        let _ = l.logged_gdr();
        for c in &parse_file(&s).connections {
            let _ = c.describe();
        }
    }

    #[test]
    fn channel_lines_read_back_what_was_written(
        ch in 0u32..64, conn in 0u32..2, a in 0u32..512, b in 0u32..512,
        dev in 0u32..32, proxy in proptest::option::of(0u32..512), gdr: bool, send: bool,
    ) {
        let dir = if send { "send" } else { "receive" };
        let line = format!(
            "Channel {ch:02}/{conn} : {a}[{a}] -> {b}[{b}] [{dir}] via NET/IB/{dev}{}{}",
            proxy.map(|p| format!("({p})")).unwrap_or_default(),
            if gdr { "/GDRDMA" } else { "" }
        );
        let l = parse_file(&format!("h:1:2 [0] NCCL INFO {line}\n"));
        prop_assert_eq!(l.connections.len(), 1);
        let c = &l.connections[0];
        prop_assert_eq!((c.channel, c.conn, c.from_rank, c.to_rank), (ch, Some(conn), a, b));
        prop_assert_eq!(c.local().0, if send { a } else { b });
        prop_assert_eq!(
            &c.transport,
            &Transport::Net { net: "IB".into(), dev, proxy, gdr, gdr_pci: false, shared: false }
        );
        prop_assert_eq!(c.describe(), line);
    }

    #[test]
    fn never_panics_on_nccl_like_lines(lines in proptest::collection::vec("(h:1:2 \\[[0-9]\\] NCCL (INFO|WARN) )?(Channel [0-9]{2}(/[0-9])? : [0-9]+(\\[[0-9a-f]*\\])? -> [0-9]*(\\[[0-9]\\])? (\\[send\\] |\\[receive\\] )?via (NET/IB/[0-9]*(\\([0-9]\\))?(/GDRDMA)?|P2P/CUMEM|SHM/direct/direct)|GPU Direct RDMA (Enabled|Disabled) for (GPU [0-9a-f]+ / )?HCA [0-9]* ?('mlx5_0')? ?(\\(distance [0-9] [<>=]+ [0-9]\\))?(, read [01])?|NET/IB : Using (\\[[0-9]\\][a-z0-9_:/]*)*|Got completion with (error|status=)[0-9a-zA-Z_()]*)", 0..20)) {
        let l = parse(&lines.join("\n"));
        let g = l.logged_gdr();
        // Every logged decision comes from a connection line that said NET.
        prop_assert!(g.len() <= l.connections.len());
        for c in &l.connections {
            if let Transport::Net { gdr, .. } = &c.transport {
                prop_assert!(lines.iter().any(|x| x.contains("via NET")));
                if *gdr { prop_assert!(lines.iter().any(|x| x.contains("GDRDMA"))); }
            }
        }
    }
}

#[test]
fn lines_run_together_split_at_each_prefix_and_never_panic() {
    // Two NCCL lines on one line, the page's wrap cutting the second after `via`.
    let l = parse(
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA     h:1:3 [1] NCCL INFO Channel 00/0 : 3[1] -> 1[1] [receive] via\n NET/IB/1   h:1:2 [0] NCCL INFO Using network IB\n",
    );
    assert_eq!(l.connections.len(), 2, "{:?}", l.unreadable);
    assert_eq!(l.networks, vec!["IB"]);
    assert!(l
        .connections
        .iter()
        .all(|c| c.origin.host.as_deref() == Some("h")));
    // Markers without prefixes, prefixes without messages, multibyte text: no panic.
    for t in [
        "NCCL INFO NCCL INFO [1] NCCL WARN x:1:2 [3] a.cc:1 NCCL WARN é h:é:1 [2] NCCL INFO\nNCCL INFO\n",
        "  NCCL WARN [0] NCCL INFO Channel 00/0 : 0[0] -> 1[ é h:1:2 [0] NCCL INFO via\n NET/IB/0/GDRDMA x\n",
        "é NCCL INFO\u{a0}NCCL INFO é\n",
    ] {
        let _ = parse(t);
    }
}

/// A `GPU Direct RDMA` line wrapped at a fixed column, with the blank at the cut kept on
/// either side or dropped: joined, and read as the whole line.
#[test]
fn a_wrapped_gdr_line_is_joined() {
    let whole = "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'";
    for cut in [
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled \nfor HCA 0 'mlx5_0'\n",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled\nfor HCA 0 'mlx5_0'\n",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA\n Disabled for HCA 0 'mlx5_0'\n",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 \n'mlx5_0'\n",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx\n5_0'\n",
    ] {
        let l = parse(cut);
        assert_eq!(l.nic_gdr.len(), 1, "{cut:?} -> {l:?}");
        assert_eq!(l.nic_gdr[0].name, "mlx5_0");
        assert!(!l.nic_gdr[0].enabled);
        assert!(l.unreadable.is_empty(), "{cut:?}: {:?}", l.unreadable);
    }
    assert_eq!(parse(whole).nic_gdr.len(), 1);
    // Cut and not continued: unreadable, never nothing.
    for cut in [
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disab",
        "h:1:2 [0] NCCL INFO NET/IB : GPU Dir",
        "h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance",
    ] {
        let l = parse(cut);
        assert!(l.nic_gdr.is_empty() && l.gpu_gdr.is_empty(), "{cut:?}");
        assert_eq!(l.unreadable.len(), 1, "{cut:?}");
    }
}
