#![allow(clippy::unwrap_used)]
use super::*;
use crate::probe::common::{HealthCheck, Problem};
use crate::probe::nccl::{NcclFiles, Params, RankGpu};
use gdrdoctor_checks::nccl::rule::{Gpu, Nic, Support};
use gdrdoctor_checks::nccl::PathKind;
use std::collections::BTreeMap;

/// gdrdoctor's view of our two-GPU machine (2 x H200 SXM on NVSwitch, AMD host, no RDMA
/// NIC; knowledge/gdr-ground-truth.md "Observed"): both GPUs on the root bus, NVLink from
/// NVML.
fn two_h200() -> System {
    let gpu = |id: &str| Gpu {
        id: id.into(),
        cc: Some((9, 0)),
        cc_source: "CUDA compute capability".into(),
        c2c: Some(false),
        c2c_source: "x86 CPU".into(),
    };
    System {
        gpus: vec![gpu("0000:00:06.0"), gpu("0000:00:07.0")],
        nvlink: vec![vec![None, Some(true)], vec![Some(true), None]],
        nvlink_source: "NVML NVLink state".into(),
        gpu_paths: vec![vec![Some(PathKind::Phb); 2]; 2],
        paths: vec![vec![], vec![]],
        smi: vec![vec![], vec![]],
        support: vec![vec![], vec![]],
        amd_two_gpus: true,
        ..Default::default()
    }
}

/// NCCL's dump of that machine, in the shape NCCL 2.28.9 wrote it there (the same
/// knowledge entry; `ncclTopoDumpXmlRec()`, src/graph/xml.cc).
const TWO_H200_DUMP: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="-1" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="17">
<pci busid="0000:00:06.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">
  <gpu dev="0" sm="90" rank="0" gdr="1">
    <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
  </gpu>
</pci>
<pci busid="0000:00:07.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">
  <gpu dev="1" sm="90" rank="1" gdr="1">
    <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>
  </gpu>
</pci>
<nic>
  <net name="eth0" dev="0" speed="10000" port="0" latency="0.000000" maxconn="65536" gdr="0"/>
</nic>
  </cpu>
</system>
"#;

fn ranks(bdfs: &[&str]) -> Vec<RankGpu> {
    bdfs.iter()
        .enumerate()
        .map(|(i, b)| RankGpu {
            rank: i as u32,
            cuda: i as i32,
            bdf: b.to_string(),
        })
        .collect()
}

fn run(label: &str, env: &[(&str, &str)], log: &str, dump: &str, bdfs: &[&str]) -> Run {
    let mut e: BTreeMap<String, String> = super::super::BASE_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in env {
        e.insert(k.to_string(), v.to_string());
    }
    Run {
        params: Params {
            label: label.into(),
            library: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
            gpus: None,
            count: 1 << 20,
            env: e.clone(),
        },
        output: Some(Output {
            version: Some("2.28.3".into()),
            version_code: Some(22803),
            ranks: ranks(bdfs),
            env: e,
            init_ms: Some(900.0),
            allreduce_ms: Some(40.0),
            sums: Some(Sums {
                expected: 3.0,
                checked: 8192,
                wrong: 0,
                first_wrong: None,
            }),
            error: None,
        }),
        problem: None,
        health: None,
        files: NcclFiles {
            log: Some(log.into()),
            topo_dump: Some(dump.into()),
            ..Default::default()
        },
    }
}

/// A single-process run of two ranks: NCCL prints `P2P/direct pointer` (both ranks in one
/// process, src/transport/p2p.cc v2.28.9-1 L384-387).
const P2P_LOG: &str = "\
gpu-node:900:910 [0] NCCL INFO NCCL version 2.28.3+cuda12.9
gpu-node:900:911 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
gpu-node:900:912 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer
gpu-node:900:911 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/direct pointer
";

fn ids(f: &[Finding]) -> Vec<(&str, Status, &str)> {
    f.iter()
        .map(|f| (f.id.as_str(), f.status, f.subject.as_str()))
        .collect()
}

#[test]
fn two_h200_agree_on_p2p_over_nvlink() {
    let r = Record {
        skipped: None,
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            P2P_LOG,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
    };
    let f = findings(&r);
    assert_eq!(
        ids(&f),
        vec![
            (ID_RUN, Status::Pass, "node"),
            (ID_TOPO, Status::Pass, "node"),
            (ID, Status::Pass, "0000:00:06.0|0000:00:07.0"),
        ],
        "{f:#?}"
    );
    assert!(f[0]
        .message
        .contains("nccl 2.28.3 ran one all-reduce over 2 gpu(s): all 8192 checked sums are 3"));
    assert!(f[0].evidence[1].observed.contains("NCCL_NVLS_ENABLE=0"));
    assert!(
        f[1].evidence[0]
            .observed
            .contains("0000:00:06.0 18 nvlink(s)"),
        "{:?}",
        f[1].evidence
    );
    assert!(f[1].evidence[1]
        .observed
        .contains("0000:00:06.0|0000:00:07.0 nvlink"));
    assert_eq!(f[2].message, "nccl and gdrdoctor agree: p2p");
    assert!(f[2].evidence[0]
        .observed
        .starts_with("P2P/direct pointer: log line 2"));
    assert!(f[2].evidence[1].source.contains("NCCL 2.28.3 rules"));
    assert!(f[2].evidence[1]
        .observed
        .contains("NVL within NCCL_P2P_LEVEL SYS"));
    // The record survives the report: the same findings after a JSON round trip.
    let v = serde_json::to_value(&r).unwrap();
    let back: Record = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
    assert_eq!(findings(&back), f);
}

#[test]
fn shared_memory_where_p2p_was_predicted_fails_and_the_environment_counts() {
    let shm = P2P_LOG
        .replace("P2P/direct pointer", "SHM/direct/direct")
        .replace("Channel 00/0", "Channel 00");
    let r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            &shm,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let p = f.iter().find(|f| f.id == ID).unwrap();
    assert_eq!(p.status, Status::Fail);
    assert_eq!(
        p.message,
        "nccl used SHM/direct/direct where gdrdoctor predicted p2p"
    );
    // With NCCL_P2P_DISABLE=1 in the worker's environment the prediction is no p2p: agree.
    let r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[("NCCL_P2P_DISABLE", "1")],
            &shm,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let p = f.iter().find(|f| f.id == ID).unwrap();
    assert_eq!(
        (p.status, p.message.as_str()),
        (Status::Pass, "nccl and gdrdoctor agree: no p2p")
    );
    assert!(
        f[0].evidence[1].observed.contains("NCCL_P2P_DISABLE=1"),
        "{:?}",
        f[0].evidence
    );
}

#[test]
fn one_gpu_has_nothing_to_compare() {
    let r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            "gpu-node:1:2 [0] NCCL INFO NCCL version 2.28.3+cuda12.9\n",
            TWO_H200_DUMP,
            &["0000:00:06.0"],
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let s: Vec<(&str, Status)> = f.iter().map(|f| (f.id.as_str(), f.status)).collect();
    assert_eq!(
        s,
        vec![
            (ID_RUN, Status::Pass),
            (ID_TOPO, Status::Pass),
            (ID, Status::Skip)
        ]
    );
}

#[test]
fn topology_disagreements_fail_one_each() {
    // gdrdoctor without NVLink facts for the pair would say PHB and no NVLink; NCCL's dump
    // says NVLink: one fail. A rank on a GPU gdrdoctor does not see: one fail.
    let mut v = two_h200();
    v.nvlink = vec![vec![None, Some(false)], vec![Some(false), None]];
    let r = Record {
        view: Some(v),
        runs: vec![run(
            "default",
            &[],
            P2P_LOG,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let t: Vec<&Finding> = f.iter().filter(|f| f.id == ID_TOPO).collect();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].status, Status::Fail);
    assert_eq!(
        t[0].message,
        "nccl sees nvlink between 0000:00:06.0 and 0000:00:07.0, gdrdoctor does not"
    );
    assert_eq!(t[0].evidence[0].observed, "nvlink yes");
    // No dump at all: an error, not a pass.
    let mut r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            P2P_LOG,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    r.runs[0].files.topo_dump = None;
    let f = findings(&r);
    assert_eq!(f[1].id, ID_TOPO);
    assert_eq!(f[1].status, Status::Error);
    r.runs[0].files.topo_dump = Some("<graphs/>".into());
    assert_eq!(findings(&r)[1].status, Status::Error);
}

/// An HGX-like node: GPU 0 and mlx5_0 under one switch (PIX), GPU 1 under another with no
/// NIC, NVLink between the GPUs, peer memory loaded.
fn hgx_two() -> (System, String) {
    let gpu = |id: &str| Gpu {
        id: id.into(),
        cc: Some((9, 0)),
        cc_source: "CUDA".into(),
        c2c: Some(false),
        c2c_source: "x86".into(),
    };
    let sup = Support {
        peermem: Some(true),
        dmabuf: Some(true),
        gpu: Some(true),
        ..Default::default()
    };
    let sys = System {
        gpus: vec![gpu("0000:18:00.0"), gpu("0000:28:00.0")],
        nics: vec![Nic {
            name: "mlx5_0".into(),
            ports: Some(vec![(1, true)]),
        }],
        paths: vec![vec![Some(PathKind::Pix)], vec![Some(PathKind::Sys)]],
        smi: vec![vec![None], vec![None]],
        nvlink: vec![vec![None, Some(true)], vec![Some(true), None]],
        nvlink_source: "NVML NVLink state".into(),
        gpu_paths: vec![vec![Some(PathKind::Sys); 2]; 2],
        support: vec![vec![sup.clone()], vec![sup]],
        amd_two_gpus: false,
        cpu: None,
        path_hint: String::new(),
    };
    let dump = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel">
<pci busid="0000:16:00.0" class="0x060400">
  <pci busid="0000:18:00.0" class="0x030200"><gpu dev="0" sm="90" rank="0" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
  <pci busid="0000:19:00.0" class="0x020700"><nic><net name="mlx5_0" dev="0" port="1" gdr="1"/></nic></pci>
</pci>
  </cpu>
  <cpu numaid="1" arch="x86_64" vendor="GenuineIntel">
<pci busid="0000:26:00.0" class="0x060400">
  <pci busid="0000:28:00.0" class="0x030200"><gpu dev="1" sm="90" rank="1" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
</pci>
  </cpu>
</system>"#;
    (sys, dump.into())
}

#[test]
fn the_network_run_compares_gdr_per_gpu_and_direction() {
    // NCCL 2.28 with P2P off: no NVLink peer, so no PXN for GPU 1 (SYS to mlx5_0): its
    // sends and receives go without GDR; GPU 0 is PIX: GDR both ways. The shapes of the
    // lines are NCCL's (src/transport/net.cc v2.28.9-1 L313, L359; NVIDIA/nccl#1357 shows
    // `[send] via NET/IBext/1/GDRDMA` beside `via P2P/CUMEM` in one log).
    let (sys, dump) = hgx_two();
    let log = "\
n:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>
n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
n:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/0
n:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0
n:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
";
    let bdfs = ["0000:18:00.0", "0000:28:00.0"];
    let r = Record {
        view: Some(sys.clone()),
        runs: vec![run(
            "net-only",
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            log,
            &dump,
            &bdfs,
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let cmp: Vec<(Status, &str)> = f
        .iter()
        .filter(|f| f.id == ID)
        .map(|f| (f.status, f.subject.as_str()))
        .collect();
    assert_eq!(
        cmp,
        vec![
            (Status::Pass, "0000:18:00.0|mlx5_0/send"),
            (Status::Pass, "0000:28:00.0|mlx5_0/receive"),
            (Status::Pass, "0000:28:00.0|mlx5_0/send"),
            (Status::Pass, "0000:18:00.0|mlx5_0/receive"),
        ],
        "{f:#?}"
    );
    let g1 = f
        .iter()
        .find(|f| f.subject == "0000:28:00.0|mlx5_0/send")
        .unwrap();
    assert!(g1.evidence.iter().any(|e| e.source == "run"));
    assert_eq!(f[0].subject, "node/net-only");
    // GDR where gdrdoctor predicted none: a fail with both sides.
    let bad = log.replace("[send] via NET/IB/0\n", "[send] via NET/IB/0/GDRDMA\n");
    let r = Record {
        view: Some(sys.clone()),
        runs: vec![run(
            "net-only",
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            &bad,
            &dump,
            &bdfs,
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let g1 = f
        .iter()
        .find(|f| f.subject == "0000:28:00.0|mlx5_0/send")
        .unwrap();
    assert_eq!(g1.status, Status::Fail);
    assert_eq!(g1.message, "nccl used gdr where gdrdoctor predicted no gdr");
    // An IB plugin names its channels `NET/IBext_v8/0` and lists `NET/IB : Using`: the
    // same device.
    let plugin = log.replace("via NET/IB/", "via NET/IBext_v8/");
    let mut r = Record {
        view: Some(sys.clone()),
        runs: vec![run(
            "net-only",
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            &plugin,
            &dump,
            &bdfs,
        )],
        ..Default::default()
    };
    r.runs[0].files.topo_dump = None; // the name comes from the log's list alone
    let f = findings(&r);
    assert_eq!(
        f.iter()
            .filter(|f| f.id == ID && f.status == Status::Pass)
            .count(),
        4,
        "{f:#?}"
    );
    // Sockets instead of the NIC gdrdoctor expected: fail.
    let sock = "n:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n";
    let r = Record {
        view: Some(sys),
        runs: vec![run(
            "net-only",
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            sock,
            &dump,
            &bdfs,
        )],
        ..Default::default()
    };
    let f = findings(&r);
    let last = f.last().unwrap();
    assert_eq!((last.id.as_str(), last.status), (ID, Status::Fail));
    assert!(last
        .message
        .contains("over sockets, not the rdma devices gdrdoctor expects it to use (mlx5_0)"));
}

#[test]
fn topology_checks_paths_nics_and_gdr_support() {
    let (mut sys, dump) = hgx_two();
    let bdfs = ["0000:18:00.0", "0000:28:00.0"];
    sys.paths[0][0] = Some(PathKind::Pxb);
    sys.nics.push(Nic {
        name: "mlx5_1".into(),
        ports: Some(vec![(1, true)]),
    });
    for row in sys.paths.iter_mut() {
        row.push(Some(PathKind::Sys));
    }
    for row in sys.smi.iter_mut() {
        row.push(None);
    }
    for row in sys.support.iter_mut() {
        let mut s = row[0].clone();
        s.peermem = Some(false);
        s.dmabuf = Some(false);
        row[0] = s.clone();
        row.push(s);
    }
    let r = Record {
        view: Some(sys),
        runs: vec![run("default", &[], P2P_LOG, &dump, &bdfs)],
        ..Default::default()
    };
    let f = findings(&r);
    let t: Vec<(&str, Status)> = f
        .iter()
        .filter(|f| f.id == ID_TOPO)
        .map(|f| (f.subject.as_str(), f.status))
        .collect();
    assert_eq!(
        t,
        vec![
            ("mlx5_1", Status::Fail),
            ("0000:18:00.0|mlx5_0", Status::Fail),
            ("mlx5_0", Status::Fail),
        ],
        "{f:#?}"
    );
    let path = f
        .iter()
        .find(|f| f.subject == "0000:18:00.0|mlx5_0")
        .unwrap();
    assert_eq!(
        path.message,
        "the path between 0000:18:00.0 and mlx5_0: nccl says PIX, gdrdoctor says PXB"
    );
    let gdr = f
        .iter()
        .find(|f| f.id == ID_TOPO && f.subject == "mlx5_0")
        .unwrap();
    assert_eq!(
        gdr.message,
        "nccl finds gpudirect rdma usable on mlx5_0, gdrdoctor does not"
    );
}

#[test]
fn nccl_failures_and_stopped_workers_are_errors_with_nccl_s_words() {
    let mut r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            "",
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    r.runs[0].files.log = Some("n:1:2 [0] misc/socket.cc:50 NCCL WARN Net : No interface found in the same subnet as remote address\n".into());
    if let Some(o) = r.runs[0].output.as_mut() {
        o.error = Some("ncclCommInitAll failed: unhandled system error (run with NCCL_DEBUG=INFO for details) (2)".into());
        o.sums = None;
    }
    let f = findings(&r);
    assert_eq!(f[0].id, ID_RUN);
    assert_eq!(f[0].status, Status::Error);
    assert!(f[0]
        .message
        .starts_with("nccl 2.28.3 failed: ncclCommInitAll failed: unhandled system error"));
    assert_eq!(f[0].evidence[0].source, "nccl WARN");
    assert!(f[0].evidence[0].observed.contains("No interface found"));
    assert!(
        !f.iter().any(|f| f.id == ID),
        "no channel lines after a failed init: no comparison finding"
    );
    // Wrong sums fail.
    let mut r = Record {
        view: Some(two_h200()),
        runs: vec![run(
            "default",
            &[],
            P2P_LOG,
            TWO_H200_DUMP,
            &["0000:00:06.0", "0000:00:07.0"],
        )],
        ..Default::default()
    };
    if let Some(Output { sums: Some(s), .. }) = r.runs[0].output.as_mut() {
        s.wrong = 3;
        s.first_wrong = Some((1, 17, 2.0));
    }
    let f = findings(&r);
    assert_eq!(f[0].status, Status::Fail);
    assert!(f[0]
        .message
        .contains("3 of 8192 checked elements differ from 3 (first: rank 1, element 17 = 2)"));
    // A worker killed at its deadline: probe.cuda error, the health check, nccl's last WARN.
    let mut run = run("default", &[], "", TWO_H200_DUMP, &[]);
    run.output = None;
    run.problem = Some(Problem::Run {
        message: "worker `nccl` did not finish within its deadline (300.0 s) and was killed".into(),
    });
    run.health = Some(HealthCheck::Healthy { ms: 250.0 });
    run.files.log = Some(
        "n:1:2 [1] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with status=12\n".into(),
    );
    let f = findings(&Record {
        view: Some(two_h200()),
        runs: vec![run],
        ..Default::default()
    });
    assert_eq!(
        ids(&f),
        vec![
            ("probe.cuda", Status::Error, "node"),
            ("probe.gpu-health", Status::Pass, "node")
        ]
    );
    assert!(f[0].evidence[0].observed.contains("status=12"));
    // NCCL that cannot be loaded.
    let mut run = super::tests::run("default", &[], "", TWO_H200_DUMP, &[]);
    run.output = None;
    run.problem = Some(Problem::Worker {
        error: WorkerError::LibraryMissing {
            library: "/opt/x/libnccl.so.2".into(),
            detail: "dlopen /opt/x/libnccl.so.2: cannot open shared object file".into(),
        },
    });
    let f = findings(&Record {
        view: None,
        runs: vec![run],
        ..Default::default()
    });
    assert_eq!(ids(&f), vec![(ID_RUN, Status::Error, "node")]);
    assert!(f[0]
        .remediation
        .as_deref()
        .unwrap_or("")
        .contains("--nccl-lib"));
}

#[test]
fn no_nccl_on_the_node_skips_with_the_reason() {
    let r = Record {
        skipped: Some("no libnccl.so.2 found on this node (searched ...)".into()),
        ..Default::default()
    };
    let f = findings(&r);
    assert_eq!(ids(&f), vec![(ID, Status::Skip, "node")]);
    assert!(f[0].message.starts_with("no libnccl.so.2 found"));
}
