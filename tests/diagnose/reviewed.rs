//! NCCL logs of multi-host jobs as users paste them, the cases a review of 2026-12-07 found
//! read wrongly: a `GPU Direct RDMA Disabled for HCA` line wrapped or cut, torchrun's `--tee`
//! prefixes, NCCL 2.24-2.29's forms of the distance line, a paste of some ranks of a job, two
//! hosts whose GPU0 used different NICs, a module list of an unknown host, a host name glued
//! to a line cut inside `/GDRDMA`.

use super::*;

fn run_text(name: &str, text: &str) -> DiagnoseReport {
    diagnose(&[input(name, text.to_string())], &RunOptions::default())
}

fn fold(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let chars: Vec<char> = line.chars().collect();
        if chars.is_empty() {
            out.push('\n');
        }
        for piece in chars.chunks(width) {
            out.extend(piece);
            out.push('\n');
        }
    }
    out
}

fn nic_fails(r: &DiagnoseReport) -> Vec<String> {
    r.findings
        .iter()
        .filter(|f| f.id == "nccl.gdr" && f.status == Status::Fail)
        .map(|f| f.subject.clone())
        .collect()
}

/// NVIDIA/nccl#1537's log (NCCL disabled GDR on both HCAs) hard-wrapped by a terminal or
/// `fold`: the NIC name lands on a line of its own. The wrap is joined and both NICs fail as in
/// the clean log; cut inside the name (an excerpt that ends there), the log is partly
/// unreadable, never a clean pass; with the first NIC's line cut, nothing is judged on it.
#[test]
fn a_wrapped_or_cut_gdr_disabled_line_is_never_dropped() {
    let Some(rd) = realdata() else { return };
    let log = std::fs::read_to_string(
        rd.join("nccl-1537-gdr-disabled-roce-excerpt/nccl-debug-excerpt.log"),
    )
    .unwrap();
    let clean = run_text("1537.log", &log);
    let mut want = nic_fails(&clean);
    want.sort();
    assert_eq!(want, ["mlx5_0", "mlx5_1"], "{:?}", clean.findings);
    assert_eq!(clean.summary.exit_code, 1);
    for width in [60, 70, 80, 90, 100] {
        let r = run_text("1537-folded.log", &fold(&log, width));
        let mut got = nic_fails(&r);
        got.sort();
        assert_eq!(got, want, "folded at {width}: {:?}", r.findings);
        assert_eq!(r.summary.exit_code, 1, "folded at {width}");
    }
    let cut_at = log.rfind("'mlx5_1'").unwrap() + "'mlx5_".len();
    for end in [cut_at, cut_at - 4, log.rfind("Disabled").unwrap() + 5] {
        let r = run_text("1537-cut.log", &log[..end]);
        // mlx5_0's line is whole and fails (exit 1 before 3); mlx5_1's is unreadable.
        assert_eq!(nic_fails(&r), ["mlx5_0"], "cut at {end}");
        assert_eq!(r.summary.exit_code, 1, "cut at {end}: {:?}", r.findings);
        assert!(
            r.findings
                .iter()
                .any(|f| f.id == "paste.blocks" && f.status == Status::Error),
            "cut at {end}"
        );
    }
    let first = log.find("'mlx5_0'").unwrap() + 4;
    let only_first: String = log[..first].to_string();
    let r = run_text("1537-cut.log", &only_first);
    assert!(nic_fails(&r).is_empty());
    assert_eq!(r.summary.exit_code, 3, "{:?}", r.findings);
}

/// torchrun's `--tee` prefix (`[default0]:`, `[rank0]:` with `--role rank`) before
/// `host:pid:tid`: the hosts are read as without it, and the rank without GDRDMA on gpu-b is
/// named as in the unprefixed log.
#[test]
fn torchrun_prefixes_keep_the_hosts_apart() {
    let name = "constructed-2host-rank-without-gdr.txt";
    let plain = text(name);
    let want = run_on(&[name]);
    let want_odd: Vec<&str> = want
        .findings
        .iter()
        .filter(|f| f.id == "nccl.ranks")
        .map(|f| f.message.as_str())
        .collect();
    assert!(want_odd.iter().any(|m| m.contains("gpu-b")), "{want_odd:?}");
    for role in ["default", "rank", "trainer_role"] {
        let mut n = 0;
        let tagged: String = plain
            .lines()
            .map(|l| {
                if l.contains("NCCL ") && l.starts_with("gpu-") {
                    n += 1;
                    format!("[{role}{}]:{l}\n", n % 4)
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let r = run_text(name, &tagged);
        let log = r.nccl.as_ref().expect("the log");
        let mut hosts: Vec<&str> = log
            .logged_gdr
            .iter()
            .filter_map(|g| g.host.as_deref())
            .collect();
        hosts.sort();
        hosts.dedup();
        assert_eq!(hosts, ["gpu-a", "gpu-b"], "[{role}N]:");
        let odd: Vec<&str> = r
            .findings
            .iter()
            .filter(|f| f.id == "nccl.ranks")
            .map(|f| f.message.as_str())
            .collect();
        assert_eq!(odd, want_odd, "[{role}N]:");
        assert_eq!(r.summary.exit_code, want.summary.exit_code);
    }
}

/// A logged distance decision: GPU, HCA, enabled, distance, threshold.
type Decision<'a> = (&'a str, &'a str, bool, Option<u32>, Option<u32>);

const V225: &str = "\
node-b:2000:2000 [0] NCCL INFO NCCL version 2.25.1+cuda12.8
node-b:2000:2080 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.4<0>
node-b:2000:2080 [0] NCCL INFO comm 0x55d0c1a0 rank 4 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
node-b:2001:2081 [1] NCCL INFO comm 0x55d0c1a1 rank 5 nranks 8 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7a1c0de5 - Init START
node-b:2000:2080 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
node-b:2000:2080 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 4 / HCA 0 (distance 7 > 4)
node-b:2001:2081 [1] NCCL INFO GPU Direct RDMA Enabled for GPU 5 / HCA 1 (distance 3 <= 4), read 1
node-b:2000:2080 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [send] via NET/IB/0
node-b:2001:2081 [1] NCCL INFO Channel 00/0 : 5[1] -> 1[1] [send] via NET/IB/1/GDRDMA
";

/// NCCL 2.24-2.28 print the rank where `GPU` stands (`paths.cc`: `for GPU %d`, rank), 2.29
/// prints `GPU/<system>-<bus id in decimal> (rank r) - NET/<system>-<n>`: both are read as the
/// GPU's bus id, with the distance, and the GPU NCCL turned GDR off for is rank 4's, 18000.
#[test]
fn nccl_2_24_to_2_29_distance_lines_name_the_gpu_by_bus_id() {
    let v229 = V225
        .replace("2.25.1+cuda12.8", "2.29.7+cuda13.0")
        .replace(
            "GPU 4 / HCA 0 (distance 7 > 4)",
            "GPU/0-98304 (rank 4) - NET/0-0 (distance 9 > 5)",
        )
        .replace(
            "GPU 5 / HCA 1 (distance 3 <= 4), read 1",
            "GPU/0-172032 (rank 5) - NET/0-1 (distance 4 <= 5, read 1, mode Default)",
        );
    for (text, d, t) in [(V225, 7, 4), (v229.as_str(), 9, 5)] {
        let r = run_text("log.txt", text);
        let log = paste::nccl::parse(text);
        let g: Vec<Decision> = log
            .gpu_gdr
            .iter()
            .map(|g| {
                (
                    g.gpu.as_str(),
                    g.hca.as_str(),
                    g.enabled,
                    g.distance,
                    g.threshold,
                )
            })
            .collect();
        assert_eq!(g[0], ("18000", "0", false, Some(d), Some(t)), "{text}");
        assert_eq!((g[1].0, g[1].1, g[1].2), ("2a000", "1", true), "{text}");
        let off: Vec<&str> = r
            .findings
            .iter()
            .filter(|f| f.id == "nccl.gdr" && f.status == Status::Warn)
            .map(|f| f.subject.as_str())
            .collect();
        assert!(off.contains(&"gpu 18000"), "{off:?}");
        assert!(!r.findings.iter().any(|f| f.message.contains("gpu ?")));
        // GDR off for GPU0 says why, not an empty reason after the colon.
        let g0 = r
            .findings
            .iter()
            .find(|f| f.id == "gdr.gpu" && f.subject == "GPU0")
            .expect("gdr.gpu GPU0");
        assert_eq!(g0.status, Status::Fail);
        assert!(!g0.message.trim_end().ends_with(':'), "{}", g0.message);
        assert!(!g0.message.contains("nearest ? (?)"), "{}", g0.message);
    }
    // A 2.24-2.28 rank that no Init line names stays a rank, never a bus id.
    let no_init: String = V225
        .lines()
        .filter(|l| !l.contains("Init START"))
        .map(|l| format!("{l}\n"))
        .collect();
    let log = paste::nccl::parse(&no_init);
    assert_eq!(log.gpu_gdr[0].gpu, "rank 4");
}

/// Two hosts whose GPU0 used different NICs (gpu-a: mlx5_0 with GDRDMA, gpu-b: mlx5_1
/// without): no per-GPU verdict merges them into "GPU0 gdr on".
#[test]
fn two_hosts_gpu0_on_different_nics_are_not_one_verdict() {
    let t = "\
gpu-a:2101:2101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a:2101:2180 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB eth0:10.1.0.11<0>
gpu-b:3301:3380 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB [RO]; OOB eth0:10.1.0.12<0>
gpu-a:2101:2180 [0] NCCL INFO comm 0x55d0c1a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
gpu-b:3301:3380 [0] NCCL INFO comm 0x5612a1c0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
gpu-a:2101:2180 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:2101:2180 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
gpu-b:3301:3380 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0
gpu-b:3301:3380 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0
";
    let r = run_text("shift.log", t);
    assert!(
        !r.findings
            .iter()
            .any(|f| f.id == "gdr.gpu" && f.status == Status::Pass),
        "{:#?}",
        r.findings
    );
    let odd: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.id == "nccl.ranks")
        .map(|f| f.message.as_str())
        .collect();
    assert!(odd.iter().any(|m| m.contains("gpu-b")), "{odd:?}");
}

/// Two of a job's four ranks in the paste, both with GDRDMA: the job is not passed on them.
#[test]
fn some_ranks_of_a_job_do_not_pass_the_job() {
    let name = "constructed-2host-rank-without-gdr.txt";
    let only_a: String = text(name)
        .lines()
        .filter(|l| !l.starts_with("gpu-b"))
        .map(|l| format!("{l}\n"))
        .collect();
    let r = run_text(name, &only_a);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.ranks")
        .expect("nccl.ranks");
    assert_eq!(f.status, Status::Skip, "{}", f.message);
    assert!(f.message.contains("nranks 4"), "{}", f.message);
}

/// A module list of an unknown host beside a two-host log where one host had NIC-level GDR
/// and the other did not: the other host's failure is not blamed on NCCL < 2.23 missing a
/// loaded nvidia_peermem (the same NCCL found it on the first host).
#[test]
fn a_hostless_lsmod_does_not_explain_another_hosts_nic() {
    let mut t = String::from(
        "nvidia_peermem         16384  0\nnvidia              56070144  310 nvidia_uvm,nvidia_peermem\n\n",
    );
    // Rank 0 prints the version (NCCL's `init.cc`), every process its NICs.
    t.push_str("node-a:1000:1080 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n");
    for (h, state) in [("node-a", "Enabled"), ("node-b", "Disabled")] {
        t.push_str(&format!(
            "{h}:1000:1080 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>\n\
             {h}:1000:1080 [0] NCCL INFO NET/IB : GPU Direct RDMA {state} for HCA 0 'mlx5_0'\n"
        ));
    }
    let r = run_text("lsmod-and-log.txt", &t);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.gdr" && f.status == Status::Fail)
        .expect("node-b's NIC fails");
    assert!(f.subject.contains("node-b"), "{}", f.subject);
    assert!(!f.message.contains("2.23"), "{}", f.message);
}

/// A line cut inside `/GDRDMA` with the next process's line glued on: the host is the one
/// the glued line names, not `NET/IB/0/GDRnode-x`.
#[test]
fn a_host_glued_after_a_cut_transport_is_not_a_host_of_its_own() {
    let t = "\
node-x:5001:5101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-x:5001:5101 [0] NCCL INFO comm 0x55d0c1a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
node-x:5002:5102 [1] NCCL INFO comm 0x55d0c1a1 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7a1c0de5 - Init START
node-x:5001:5101 [0] NCCL INFO Channel 02/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRnode-x:5002:5102 [1] NCCL INFO Channel 02/0 : 9[1] -> 1[1] [receive] via NET/IB/1/GDRDMA
node-x:5002:5102 [1] NCCL INFO Channel 03/0 : 1[1] -> 9[1] [send] via NET/IB/1/GDRDMA
";
    let log = paste::nccl::parse(t);
    assert_eq!(log.hosts, ["node-x"]);
}

/// One host of two over NET/Socket: `nccl.network` names it.
#[test]
fn the_host_whose_ranks_used_sockets_is_named() {
    let t = "\
gpu-a:2101:2101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a:2101:2180 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.1.0.11<0>
gpu-b:3301:3380 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.0.12<0>
gpu-a:2101:2180 [0] NCCL INFO comm 0x55d0c1a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
gpu-b:3301:3380 [0] NCCL INFO comm 0x5612a1c0 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1c0de5 - Init START
gpu-a:2101:2180 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:2101:2180 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
gpu-b:3301:3380 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0
gpu-b:3301:3380 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0
";
    let r = run_text("sockmix.log", t);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nccl.network")
        .expect("nccl.network");
    assert_eq!(f.status, Status::Warn);
    assert!(f.message.contains("(on gpu-b)"), "{}", f.message);
    assert!(!f.message.contains("gpu-a"), "{}", f.message);
}

/// A matrix of two GPUs and no NIC (the H200 pair on NVSwitch): the GDR checks say the matrix
/// has no NIC, not "no nvidia gpu".
#[test]
fn a_matrix_without_nics_is_not_no_gpu() {
    let Some(rd) = realdata() else { return };
    let t = std::fs::read_to_string(rd.join("h200x2-nvswitch-2026-11-30/nvsmi-topo.txt")).unwrap();
    let r = run_text("nvsmi-topo.txt", &t);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "gdr.gpu")
        .expect("gdr.gpu");
    assert_eq!(f.status, Status::Skip);
    assert!(!f.message.contains("no nvidia gpu"), "{}", f.message);
    assert!(f.message.contains("2 GPU(s) and no NIC"), "{}", f.message);
}
