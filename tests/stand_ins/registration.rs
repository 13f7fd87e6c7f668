//! `probe --registration` against the stand-ins: the verbs side (peer memory, dma-buf, memlock,
//! devices that fail, NCCL's dma-buf probe) and the GPU side (export, CUDA failing or hanging).

use super::*;

// ---------------------------------------------------------------------------------------------
// probe --registration
// ---------------------------------------------------------------------------------------------

#[test]
fn registration_on_two_working_nics_passes_through_dma_buf() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(&l.current, TWO_NICS);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let rec = &j["probe"]["registration"];
    assert_eq!(rec["rdma_devices"], serde_json::json!(["mlx5_0", "mlx5_1"]));
    for dev in ["mlx5_0", "mlx5_1"] {
        let f = finding(&r, &j, "probe.verbs-registration", &format!("{GPU0}/{dev}"));
        assert_eq!(status(f), "pass", "{f:#}");
        assert!(
            text(f, "message")
                .contains("peer memory (ibv_reg_mr): ok; dma-buf (ibv_reg_dmabuf_mr): ok"),
            "{f:#}"
        );
        assert!(
            evidence(f).contains(&format!(
                "NCCL registers through dma-buf here (its fd=-1 probe on {dev} answered errno 9)"
            )),
            "{f:#}"
        );
        let p = finding(&r, &j, "probe.nccl-dmabuf", dev);
        assert_eq!(status(p), "pass", "{p:#}");
        assert!(text(p, "message").contains("errno 9"), "{p:#}");
    }
    // The real calls reached the stand-in: GPU memory registered both ways on both NICs, and
    // NCCL's probe (fd -1, length 0) got EBADF from the fd lookup.
    for dev in ["mlx5_0", "mlx5_1"] {
        assert!(
            r.log
                .contains(&format!("libibverbs ibv_reg_mr {dev} gpu 2097152 -> ok")),
            "{}",
            r.log
        );
        assert!(
            r.log.contains(&format!(
                "libibverbs ibv_reg_dmabuf_mr {dev} fd -1 len 0 -> NULL errno 9"
            )),
            "{}",
            r.log
        );
    }
    assert_eq!(
        finding(&r, &j, "probe.dmabuf-export", GPU0)["status"],
        "pass"
    );
}

#[test]
fn peer_memory_absent_is_fine_while_nccl_uses_dma_buf() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(&l.current, &format!("{TWO_NICS}peer_memory no\n"));
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(f), "pass", "{f:#}");
    assert!(
        text(f, "message").contains("peer memory (ibv_reg_mr): errno 14 (Bad address)"),
        "{f:#}"
    );
}

#[test]
fn peer_memory_absent_and_no_dma_buf_fails_with_both_fixes() {
    let Some(l) = libs() else { return };
    // A kernel without ODP (mlx5 returns EOPNOTSUPP for dma-buf MRs) and no nvidia-peermem.
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}peer_memory no\nfail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\n"),
    );
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for dev in ["mlx5_0", "mlx5_1"] {
        let f = finding(&r, &j, "probe.verbs-registration", &format!("{GPU0}/{dev}"));
        assert_eq!(status(f), "fail", "{f:#}");
        let m = text(f, "message");
        assert!(m.contains("ibv_reg_mr: errno 14 (Bad address)"), "{m}");
        assert!(m.contains("no peer-memory client"), "{m}");
        let fix = text(f, "remediation");
        assert!(fix.contains("load nvidia-peermem"), "{fix}");
        assert!(
            evidence(f).contains("its dma-buf probe on") && evidence(f).contains("errno 95"),
            "{f:#}"
        );
        let p = finding(&r, &j, "probe.nccl-dmabuf", dev);
        assert_eq!(status(p), "fail", "{p:#}");
        assert!(text(p, "message").contains("errno 95"), "{p:#}");
        assert!(
            text(p, "message").contains("NCCL turns dma-buf off"),
            "{p:#}"
        );
    }
}

#[test]
fn rdma_core_without_ibv_reg_dmabuf_mr_reads_as_nccl_does() {
    let Some(l) = libs() else { return };
    // rdma-core 33: NCCL's wrapper answers EOPNOTSUPP for the missing symbol.
    let (r, j) = registration(&l.rdma_core_33, TWO_NICS);
    let p = finding(&r, &j, "probe.nccl-dmabuf", "mlx5_0");
    assert_eq!(status(p), "fail", "{p:#}");
    assert!(text(p, "message").contains("errno 95"), "{p:#}");
    // Peer memory works: NCCL registers through it, and so the pair passes.
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(f), "pass", "{f:#}");
    assert!(
        text(f, "message").contains("dma-buf (ibv_reg_dmabuf_mr): errno 95"),
        "{f:#}"
    );
    assert!(
        evidence(f).contains("lacks ibv_reg_dmabuf_mr") || evidence(f).contains("rdma-core < 34"),
        "{f:#}"
    );
    assert!(!r.log.contains("ibv_reg_dmabuf_mr"), "{}", r.log);
}

#[test]
fn a_small_memlock_limit_is_enomem_with_the_ulimit_fix() {
    let Some(l) = libs() else { return };
    // NCCL uses peer memory (no dma-buf), and the kernel pins at most 64 KiB.
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\nmemlock 65536\n"),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "message").contains("errno 12 (Cannot allocate memory)"),
        "{f:#}"
    );
    assert!(text(f, "message").contains("RLIMIT_MEMLOCK"), "{f:#}");
    assert!(
        text(f, "remediation").contains("ulimit -l unlimited"),
        "{f:#}"
    );
    // The 4 KiB registration fitted under the limit, the 2 MiB one did not.
    let e = evidence(f);
    assert!(e.contains("ibv_reg_mr mlx5_0 4 KiB: ok"), "{e}");
    assert!(e.contains("ibv_reg_mr mlx5_0 2 MiB: errno 12"), "{e}");
}

#[test]
fn a_memlock_limit_of_zero_is_eperm_and_still_the_ulimit_fix() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\nmemlock 0\n"),
    );
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_1"),
    );
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "message").contains("errno 1 (Operation not permitted)"),
        "{f:#}"
    );
    // EPERM from ibv_reg_mr is the memlock limit (can_do_mlock), not a device permission.
    assert!(
        text(f, "remediation").contains("ulimit -l unlimited"),
        "{f:#}"
    );
    assert!(!text(f, "remediation").contains("/dev/infiniband"), "{f:#}");
}

#[test]
fn a_device_that_cannot_be_opened_fails_alone_with_its_errno() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_open_device device=mlx5_1 errno=EACCES\n"),
    );
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let ok = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(ok), "pass", "{ok:#}");
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_1"),
    );
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "message").contains("ibv_open_device: errno 13 (Permission denied)"),
        "{f:#}"
    );
    assert!(text(f, "remediation").contains("/dev/infiniband"), "{f:#}");
    // NCCL's probe could not run there: an error, not a silent absence.
    let p = finding(&r, &j, "probe.nccl-dmabuf", "mlx5_1");
    assert_eq!(status(p), "error", "{p:#}");
}

#[test]
fn one_nic_that_fails_is_not_hidden_by_another_that_works() {
    let Some(l) = libs() else { return };
    // The NVIDIA exporter refuses mlx5_1 (ENOTSUPP: not under the GPU's PCIe switch) and
    // there is no peer memory: NCCL chose dma-buf for mlx5_1 and its registrations fail.
    let (r, j) = registration(
        &l.current,
        &format!(
            "{TWO_NICS}peer_memory no\nfail ibv_reg_dmabuf_mr device=mlx5_1 min_len=1 errno=ENOTSUPP\n"
        ),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let ok = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(ok), "pass", "{ok:#}");
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_1"),
    );
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(text(f, "message").contains("errno 524"), "{f:#}");
    assert!(text(f, "message").contains("PCI topology"), "{f:#}");
    assert!(
        text(f, "remediation").contains("GrdmaPciTopoCheckOverride"),
        "{f:#}"
    );
}

#[test]
fn dma_buf_failing_where_nccl_chose_it_fails_even_with_peer_memory() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_reg_dmabuf_mr device=mlx5_0 min_len=1 errno=ENOTSUPP\n"),
    );
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "remediation").contains("NCCL_DMABUF_ENABLE=0"),
        "{f:#}"
    );
}

#[test]
fn an_errno_gdrdoctor_does_not_know_is_an_error_naming_it() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\nfail ibv_reg_mr errno=EIO\n"),
    );
    assert_eq!(r.code, 1, "{}", r.stderr); // probe.nccl-dmabuf fails (errno 95)
    let f = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message")
            .contains("errno 5 (Input/output error), which gdrdoctor does not recognise"),
        "{f:#}"
    );
}

#[test]
fn kernel_without_the_dma_buf_method_is_eprotonosupport() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}peer_memory no\nfail ibv_reg_dmabuf_mr errno=EPROTONOSUPPORT\n"),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let p = finding(&r, &j, "probe.nccl-dmabuf", "mlx5_1");
    assert_eq!(status(p), "fail", "{p:#}");
    assert!(text(p, "message").contains("errno 93"), "{p:#}");
    assert!(text(p, "remediation").contains("5.12"), "{p:#}");
}

#[test]
fn nccl_probe_answers_other_than_ebadf_are_errors_with_nccl_decision() {
    let Some(l) = libs() else { return };
    // mlx5 without UMR support for the length: EINVAL before the fd is looked at
    // (drivers/infiniband/hw/mlx5/mr.c:1484-1485).
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail ibv_reg_dmabuf_mr max_len=0 errno=EINVAL\n"),
    );
    for dev in ["mlx5_0", "mlx5_1"] {
        let p = finding(&r, &j, "probe.nccl-dmabuf", dev);
        assert_eq!(status(p), "error", "{p:#}");
        let m = text(p, "message");
        assert!(m.contains("errno 22 (Invalid argument)"), "{m}");
        assert!(m.contains("NCCL would enable dma-buf"), "{m}");
    }
    assert_eq!(r.code, 3, "{}", r.stderr);
}

#[test]
fn no_kernel_rdma_support_skips_the_verbs_part() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(&l.current, &format!("{TWO_NICS}list errno=ENOSYS\n"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let f = finding(&r, &j, "probe.verbs-registration", GPU0);
    assert_eq!(status(f), "skip", "{f:#}");
    assert!(
        text(f, "message").contains("no kernel RDMA support"),
        "{f:#}"
    );
    assert_eq!(status(finding(&r, &j, "probe.nccl-dmabuf", "node")), "skip");
}

// ---------------------------------------------------------------------------------------------
// The GPU side of registration
// ---------------------------------------------------------------------------------------------

#[test]
fn a_gpu_without_dma_buf_fails_the_export_with_its_cause() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        "gpu bdf=0000:18:00.0 dmabuf=0\ndevice mlx5_0\nfail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\n",
    );
    let f = finding(&r, &j, "probe.dmabuf-export", GPU0);
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "message").contains("CUDA_ERROR_NOT_SUPPORTED"),
        "{f:#}"
    );
    assert!(
        text(f, "remediation").contains("open kernel modules")
            || text(f, "remediation").contains("proprietary"),
        "{f:#}"
    );
    // No dma-buf to register: NCCL uses peer memory, which works.
    let v = finding(
        &r,
        &j,
        "probe.verbs-registration",
        &format!("{GPU0}/mlx5_0"),
    );
    assert_eq!(status(v), "pass", "{v:#}");
}

#[test]
fn cuda_with_no_gpu_is_an_error_not_a_pass() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(&l.current, "device mlx5_0\n");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let f = finding(&r, &j, "probe.cuda", "node");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(text(f, "message").contains("cuda sees no gpu"), "{f:#}");
}

#[test]
fn cuinit_failing_is_a_probe_error_naming_the_code() {
    let Some(l) = libs() else { return };
    let (r, j) = registration(
        &l.current,
        &format!("{TWO_NICS}fail cuInit result=CUDA_ERROR_STUB_LIBRARY\n"),
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    let f = finding(&r, &j, "probe.cuda", "node");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").contains("CUDA_ERROR_STUB_LIBRARY"),
        "{f:#}"
    );
    assert!(text(f, "remediation").contains("stubs"), "{f:#}");
}

#[test]
fn a_libcuda_that_hangs_on_load_meets_the_deadline_then_the_health_check() {
    let Some(l) = libs() else { return };
    let t0 = std::time::Instant::now();
    // Only the first process that loads libcuda hangs: the health check's fresh process runs.
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        &format!("{TWO_NICS}hang libcuda once\n"),
    )
    .run(&[
        "probe",
        "--registration",
        "--timeout",
        "2",
        "--format",
        "json",
    ]);
    let j = r.json();
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
    assert_eq!(r.code, 3, "{}", r.stderr);
    let f = finding(&r, &j, "probe.cuda", "node");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").contains("did not finish within its deadline"),
        "{f:#}"
    );
    let h = finding(&r, &j, "probe.gpu-health", "node");
    assert_eq!(status(h), "pass", "{h:#}");
    assert!(r.log.contains("libcuda load -> hang"), "{}", r.log);
}
