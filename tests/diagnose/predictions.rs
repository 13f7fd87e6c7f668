//! A matrix with `lsmod` and a log: the predicted decisions agree with what NCCL logged.

use super::*;

/// A whole `lsmod` with nvidia_peermem.
fn lsmod_with_peermem() -> String {
    let mut lsmod = String::from("Module                  Size  Used by\n");
    for i in 0..30 {
        lsmod.push_str(&format!("mod{i:<20} 16384  0\n"));
    }
    lsmod.push_str("nvidia_peermem         16384  0\nnvidia              56598528  147 nvidia_uvm,nvidia_peermem\n");
    lsmod
}

/// Two GPUs, each PIX to its own NIC; `gpu_gpu` is the cell between them.
fn two_gpu_matrix(gpu_gpu: &str) -> String {
    format!(
        "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      {gpu_gpu}    PIX     SYS     0-31    0       N/A
GPU1    {gpu_gpu}     X      SYS     PIX     32-63   1       N/A
NIC0    PIX     SYS      X      SYS
NIC1    SYS     PIX     SYS      X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"
    )
}

/// Every logged pair whose prediction is decided agrees with what NCCL logged, per direction.
fn assert_logged_agree(r: &DiagnoseReport) {
    for p in &r.gdr {
        let Some(l) = &p.logged else { continue };
        if p.gdr == paste::verdict::Gdr::Unknown {
            continue;
        }
        for (what, logged, predicted) in
            [("send", l.send, p.send), ("receive", l.receive, p.receive)]
        {
            if let (Some(a), Some(b)) = (logged, predicted) {
                assert_eq!(
                    a, b,
                    "{} {} {what}: logged {a}, predicted {b}: {p:?}",
                    p.gpu, p.nic
                );
            }
        }
    }
    for f in r.findings.iter().filter(|f| f.id == "nccl.gdr") {
        assert!(
            !f.message.contains("where the paste predicts"),
            "{}: {}",
            f.subject,
            f.message
        );
    }
}

#[test]
fn matrix_with_lsmod_and_log_agrees_with_what_nccl_logged() {
    // A healthy node: NIC legend, every GPU PIX to its NIC, NVLink between the GPUs,
    // nvidia_peermem in a whole lsmod, ports ACTIVE (NCCL's `Using` line), and an NCCL 2.19
    // log whose channels use GDRDMA both ways: prediction and log agree per direction.
    let log = "n1:1:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
n1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>
n1:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x2 - Init START
n1:1:3 [1] NCCL INFO comm 0x3 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 9b000 commId 0x2 - Init START
n1:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA
n1:1:2 [0] NCCL INFO Connected all rings
";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("NV18")),
            input("nccl.log", log.into()),
        ],
        &RunOptions::default(),
    );
    assert_eq!(
        r.nccl_rules.split(' ').nth(1),
        Some("2.19.3"),
        "{}",
        r.nccl_rules
    );
    let p0 = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU0" && p.nic == "mlx5_0")
        .unwrap();
    assert_eq!(p0.by_distance, Some(true));
    assert_eq!(p0.gdr, paste::verdict::Gdr::On);
    assert_eq!(p0.mechanism.as_deref(), Some("peermem"));
    let l = p0.logged.as_ref().unwrap();
    assert_eq!((l.send, l.receive), (Some(true), Some(true)));
    assert_logged_agree(&r);
    let s = statuses(&r, "nccl.gdr");
    assert!(s.contains(&("GPU0|mlx5_0", Status::Pass)), "{s:?}");
    assert!(s.contains(&("GPU1|mlx5_1", Status::Pass)), "{s:?}");
    let g = statuses(&r, "gdr.gpu");
    assert_eq!(g, vec![("GPU0", Status::Pass), ("GPU1", Status::Pass)]);
    assert_eq!(
        statuses(&r, "kmod.nvidia-peermem"),
        vec![("node", Status::Pass)]
    );
    // Every pass cites the block it read.
    for f in r.findings.iter().filter(|f| f.status == Status::Pass) {
        assert!(
            f.evidence.iter().any(|e| e.source.starts_with('b')),
            "{} passes without citing a block: {:?}",
            f.id,
            f.evidence
        );
    }
}

#[test]
fn the_read_gate_of_nccl_2_18_is_predicted_per_direction() {
    // NCCL 2.18 without NVLink between the GPUs: sends are staged through host memory, receives
    // use GDR (src/graph/paths.cc v2.18.6-1 ncclTopoCheckGdr(), read gate without an NVLink
    // peer); 2.18.6 prints nvmlDev in the channel brackets (src/transport/net.cc v2.18.3-1).
    let log = "n1:1:2 [0] NCCL INFO NCCL version 2.18.6+cuda12.2
n1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
n1:1:2 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0
n1:1:3 [1] NCCL INFO Channel 01/0 : 3[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
n1:1:3 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1
";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("SYS ")),
            input("nccl.log", log.into()),
        ],
        &RunOptions::default(),
    );
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU1" && p.nic == "mlx5_1")
        .unwrap();
    assert_eq!((p.send, p.receive), (Some(false), Some(true)), "{p:?}");
    assert!(p.reasons[0].starts_with("read gate: NCCL 2.18.6"), "{p:?}");
    assert_logged_agree(&r);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.subject == "GPU1|mlx5_1")
        .unwrap();
    assert_eq!(f.status, Status::Warn);
    assert!(
        f.message.contains("as nccl's read gate predicts"),
        "{}",
        f.message
    );
    assert_eq!(
        statuses(&r, "gdr.gpu"),
        vec![("GPU0", Status::Warn), ("GPU1", Status::Warn)]
    );
    // With NCCL 2.19 (the gate only for GPUs below compute capability 8.0) and H100s, the
    // same paste predicts GDR for sends: the log above then disagrees, and says so.
    let smiq = "==============NVSMI LOG==============\n\nDriver Version                            : 550.54.15\n\nAttached GPUs                             : 2\nGPU 00000000:1B:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\nGPU 00000000:9B:00.0\n    Product Name                          : NVIDIA H100 80GB HBM3\n";
    let r = diagnose(
        &[
            input("lsmod.txt", lsmod_with_peermem()),
            input("topo.txt", two_gpu_matrix("SYS ")),
            input("smiq.txt", smiq.into()),
            input(
                "nccl.log",
                log.replace("2.18.6+cuda12.2", "2.19.3+cuda12.3"),
            ),
        ],
        &RunOptions::default(),
    );
    let p = r
        .gdr
        .iter()
        .find(|p| p.gpu == "GPU1" && p.nic == "mlx5_1")
        .unwrap();
    assert_eq!((p.send, p.receive), (Some(true), Some(true)), "{p:?}");
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.subject == "GPU1|mlx5_1")
        .unwrap();
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source == "nccl rule" && e.observed.contains("gdr both ways")),
        "{f:?}"
    );
}

#[test]
fn every_logged_decision_in_the_fixtures_agrees() {
    // Each real paste, alone and with the fixtures that come from the same issue.
    let mut runs: Vec<Vec<String>> = std::fs::read_dir(pastes())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log") || n.ends_with(".txt"))
        .map(|n| vec![n])
        .collect();
    runs.push(vec![
        "nccl-1814-ibext-channels.log".into(),
        "nccl-1814-status12-warn.log".into(),
    ]);
    for names in runs {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = run_on(&refs);
        assert_logged_agree(&r);
    }
    if let Some(rd) = realdata() {
        let dir = rd.join("nccl-1537-gdr-disabled-roce-excerpt");
        let inputs: Vec<Input> = ["env-and-lsmod.txt", "nccl-debug-excerpt.log"]
            .iter()
            .map(|n| input(n, std::fs::read_to_string(dir.join(n)).unwrap()))
            .collect();
        assert_logged_agree(&diagnose(&inputs, &RunOptions::default()));
    }
}
