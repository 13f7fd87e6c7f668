//! The NIC and GPU paths end to end, on a machine without an RDMA NIC or a GPU: gdrdoctor runs
//! as on a live node, with the stand-in libibverbs, libmlx5, libcuda and libnvidia-ml of
//! `tests/stubs/` (GDRDOCTOR_LIB_DIR) playing the libraries and a fixture sysroot playing the
//! node's files (GDRDOCTOR_LIVE_ROOT). Each scenario scripts what a real stack does; the
//! stand-ins' sources cite where the real stack returns each errno (tests/stubs/README.md).
//!
//! Needs `cc` and the rdma-core headers (`gcc libibverbs-dev`); skips visibly without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::stand_ins::{self, Run, Scenario, StandIns};
use common::*;
use serde_json::Value;
use std::path::Path;

/// The HGX fixture: 8 H200 (0000:18:00.0, 0000:28:00.0, ...) and 8 ConnectX-7, mlx5_0 at
/// 0000:19:00.0 with a 64 MiB BAR0 at 0x2e000000000, mlx5_1 at 0000:29:00.0.
const HGX: &str = "hgx-h200x8-cx7x8-healthy";
const MLX5_0_BAR0: u64 = 0x2e0_0000_0000;
const GPU0: &str = "0000:18:00.0";

/// One H200 and two ConnectX-7, everything working.
const TWO_NICS: &str = "gpu bdf=0000:18:00.0\ndevice mlx5_0\ndevice mlx5_1\n";

fn libs() -> Option<&'static StandIns> {
    stand_ins::build()
}

fn findings(j: &Value) -> &Vec<Value> {
    j["findings"].as_array().expect("findings")
}

/// The finding `id` for `subject`, with a readable panic.
fn finding<'a>(r: &Run, j: &'a Value, id: &str, subject: &str) -> &'a Value {
    findings(j)
        .iter()
        .find(|f| f["id"] == id && f["subject"] == subject)
        .unwrap_or_else(|| {
            panic!(
                "no {id} for {subject}:\n{}\nstderr:\n{}\nlog:\n{}",
                serde_json::to_string_pretty(findings(j)).unwrap(),
                r.stderr,
                r.log
            )
        })
}

fn status(f: &Value) -> &str {
    f["status"].as_str().unwrap_or("")
}

fn text(f: &Value, key: &str) -> String {
    f[key].as_str().unwrap_or("").to_string()
}

fn evidence(f: &Value) -> String {
    f["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|x| format!("{}: {}", x["source"], x["observed"]))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn registration(libs: &Path, scenario: &str) -> (Run, Value) {
    let r = Scenario::new(libs, fixture(HGX), scenario).run(&[
        "probe",
        "--registration",
        "--format",
        "json",
    ]);
    let j = r.json();
    (r, j)
}

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

// ---------------------------------------------------------------------------------------------
// probe --doorbell: the real mlx5 UAR path
// ---------------------------------------------------------------------------------------------

fn doorbell(libs: &Path, scenario: &str, env: &[(&str, &str)], extra: &[&str]) -> (Run, Value) {
    let mut s = Scenario::new(libs, fixture(HGX), scenario);
    for (k, v) in env {
        s = s.env(k, v);
    }
    let mut args = vec!["probe", "--doorbell", "--rings", "10", "--format", "json"];
    args.extend_from_slice(extra);
    let r = s.run(&args);
    let j = r.json();
    (r, j)
}

fn mlx5_record<'a>(j: &'a Value, dev: &str) -> &'a Value {
    j["probe"]["doorbell"]["mlx5"]
        .as_array()
        .and_then(|a| a.iter().find(|m| m["device"] == dev))
        .unwrap_or_else(|| panic!("no mlx5 record for {dev}: {:#}", j["probe"]["doorbell"]))
}

#[test]
fn doorbell_on_a_4k_page_host_computes_and_maps_the_uar() {
    let Some(l) = libs() else { return };
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=0x1d index=0 offset=0x800 sys_page=4096\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    // The GPU side ran on the stand-in's host threads.
    assert_eq!(
        status(finding(&r, &j, "probe.doorbell-layout", GPU0)),
        "pass"
    );
    assert_eq!(
        status(finding(&r, &j, "probe.doorbell-latency", GPU0)),
        "pass"
    );
    let m = mlx5_record(&j, "mlx5_0");
    assert_eq!(m["pci"], "0000:19:00.0");
    assert_eq!(m["uar_type"], "non-cached dedicated");
    assert_eq!(m["page_id"], 0x1d);
    assert_eq!(m["reg_offset"], 0x800);
    assert_eq!(
        m["bar0_resource"],
        serde_json::json!([MLX5_0_BAR0, 64u64 << 20])
    );
    assert_eq!(m["doorbell_phys"], MLX5_0_BAR0 + 0x1d * 4096 + 0x800);
    assert_eq!(m["issues"], serde_json::json!([]));
    assert_eq!(m["gpu_map_ok"], true);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "pass", "{f:#}");
    assert!(
        text(f, "message").contains(&format!("0x{:x}", MLX5_0_BAR0 + 0x1d * 4096 + 0x800)),
        "{f:#}"
    );
    assert!(
        r.log
            .contains("mlx5dv_devx_alloc_uar mlx5_0 nc_dedicated -> page_id 29"),
        "{}",
        r.log
    );
    assert!(
        r.log.contains("cuMemHostRegister iomemory 4096 -> 0"),
        "{}",
        r.log
    );
}

#[test]
fn doorbell_on_a_64k_page_host_counts_page_id_in_4k_uars() {
    let Some(l) = libs() else { return };
    // aarch64 with 64 KiB pages: UAR 21 is the 6th 4 KiB UAR of its system page.
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=21 index=5 offset=0x800 sys_page=65536\n",
        &[("GDRDOCTOR_PAGE_SIZE", "65536")],
        &[],
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(j["probe"]["doorbell"]["page_size"], 65536);
    let m = mlx5_record(&j, "mlx5_0");
    assert_eq!(m["reg_offset"], 5 * 4096 + 0x800);
    let right = MLX5_0_BAR0 + 21 * 4096 + 0x800;
    assert_eq!(m["doorbell_phys"], right);
    assert_eq!(m["issues"], serde_json::json!([]), "{m:#}");
    // The trap of counting page_id in system pages is shown with its address.
    let wrong = MLX5_0_BAR0 + 21 * 65536 + 0x800;
    let traps: Vec<String> = m["trap_addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert!(
        traps.contains(&format!("page-size-units: 0x{wrong:x}")),
        "{traps:?}"
    );
    assert!(
        traps.contains(&format!(
            "double-counted-subpage: 0x{:x}",
            MLX5_0_BAR0 + 21 * 4096 + 5 * 4096 + 0x800
        )),
        "{traps:?}"
    );
    assert_eq!(
        status(finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0")),
        "pass"
    );
    assert!(
        r.log.contains("cuMemHostRegister iomemory 65536 -> 0"),
        "{}",
        r.log
    );
}

#[test]
fn doorbell_page_id_that_disagrees_with_the_sub_page_is_a_failure() {
    let Some(l) = libs() else { return };
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=18 index=5 sys_page=65536\n",
        &[("GDRDOCTOR_PAGE_SIZE", "65536")],
        &[],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(text(f, "message").contains("sub-page"), "{f:#}");
}

#[test]
fn doorbell_outside_bar0_is_a_failure() {
    let Some(l) = libs() else { return };
    // page 0x5000 * 4 KiB = 80 MiB into a 64 MiB BAR0.
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=0x5000\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(text(f, "message").contains("outside-bar0"), "{f:#}");
    assert!(text(f, "message").contains("is outside BAR0"), "{f:#}");
}

#[test]
fn doorbell_on_an_older_libmlx5_falls_back_to_blueflame() {
    let Some(l) = libs() else { return };
    // rdma-core < 45 does not know NC_DEDICATED (providers/mlx5/verbs.c:6557-6562).
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=0x1d\nfail mlx5dv_devx_alloc_uar type=nc_dedicated errno=EOPNOTSUPP\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(mlx5_record(&j, "mlx5_0")["uar_type"], "BlueFlame");
    assert_eq!(
        status(finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0")),
        "pass"
    );
}

#[test]
fn doorbell_with_devx_refused_is_an_error_with_the_devx_fix() {
    let Some(l) = libs() else { return };
    // No write combining: the BF UAR's mmap is refused (EPERM, mlx5/main.c:2316-2318) after
    // NC_DEDICATED is unknown.
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nfail mlx5dv_devx_alloc_uar type=nc_dedicated errno=EOPNOTSUPP\nfail mlx5dv_devx_alloc_uar type=bf errno=EPERM\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").contains("BlueFlame: Operation not permitted"),
        "{f:#}"
    );
    assert!(text(f, "remediation").contains("DEVX"), "{f:#}");
}

#[test]
fn doorbell_on_a_device_that_cannot_be_opened_keeps_the_errno() {
    let Some(l) = libs() else { return };
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nfail ibv_open_device errno=EACCES\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").contains("cannot open the device: ibv_open_device: Permission denied"),
        "{f:#}"
    );
    assert!(text(f, "remediation").contains("/dev/infiniband"), "{f:#}");
}

#[test]
fn doorbell_gpu_mapping_refused_names_peer_mapping_override() {
    let Some(l) = libs() else { return };
    let (r, j) = doorbell(
        &l.current,
        "gpu bdf=0000:18:00.0\ndevice mlx5_0\nfail cuMemHostRegister type=iomemory result=CUDA_ERROR_NOT_PERMITTED\n",
        &[],
        &[],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let f = finding(&r, &j, "probe.doorbell-mlx5", "mlx5_0");
    assert_eq!(status(f), "fail", "{f:#}");
    assert!(
        text(f, "message").contains("CUDA_ERROR_NOT_PERMITTED"),
        "{f:#}"
    );
    assert!(
        text(f, "remediation").contains("PeerMappingOverride=1"),
        "{f:#}"
    );
}

#[test]
fn doorbell_mmio_write_reaches_the_uar_only_when_allowed() {
    let Some(l) = libs() else { return };
    let s = "gpu bdf=0000:18:00.0\ndevice mlx5_0\nuar mlx5_0 page_id=0x1d\n";
    let (r, j) = doorbell(&l.current, s, &[], &[]);
    assert_eq!(mlx5_record(&j, "mlx5_0")["mmio_write"], Value::Null);
    assert!(!r.log.contains("db_poke"), "{}", r.log);
    let (r, j) = doorbell(&l.current, s, &[], &["--allow-mmio-write"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = mlx5_record(&j, "mlx5_0")["mmio_write"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(w.contains("the GPU wrote the doorbell register"), "{w}");
    assert!(r.log.contains("cuLaunchKernel db_poke -> 0"), "{}", r.log);
}

// ---------------------------------------------------------------------------------------------
// check and topo: the GDR verdict from the live verbs facts
// ---------------------------------------------------------------------------------------------

/// Eight H200 and eight ConnectX-7 as on the HGX fixtures.
fn hgx_scenario(extra: &str) -> String {
    let mut s = String::new();
    for b in ["18", "28", "38", "48", "98", "a8", "b8", "c8"] {
        s.push_str(&format!("gpu bdf=0000:{b}:00.0\n"));
    }
    for i in 0..8 {
        s.push_str(&format!("device mlx5_{i}\n"));
    }
    s.push_str(extra);
    s
}

fn gdr_pairs(j: &Value) -> Vec<&Value> {
    j["gdr"].as_array().expect("gdr").iter().collect()
}

#[test]
fn gdr_verdict_follows_ncclss_live_dma_buf_probe() {
    let Some(l) = libs() else { return };
    // No nvidia_peermem on this node: GDR depends on dma-buf, which only the live verbs facts
    // can tell.
    let root = fixture("hgx-h200x8-cx7x8-nic-no-dmabuf");
    let on = Scenario::new(&l.current, root.clone(), &hgx_scenario("")).run(&[
        "check",
        "--format",
        "json",
        "--allow-incomplete",
    ]);
    let j = on.json();
    let pairs = gdr_pairs(&j);
    assert_eq!(pairs.len(), 64, "{}", on.stderr);
    let pix: Vec<&&Value> = pairs.iter().filter(|p| p["path"] == "PIX").collect();
    assert_eq!(pix.len(), 8);
    for p in &pix {
        assert_eq!(p["enabled"], true, "{p:#}");
        assert_eq!(p["mechanism"], "dmabuf", "{p:#}");
    }
    assert!(
        on.log
            .contains("ibv_reg_dmabuf_mr mlx5_7 fd -1 len 0 -> NULL errno 9"),
        "{}",
        on.log
    );

    let off = Scenario::new(
        &l.current,
        root,
        &hgx_scenario("fail ibv_reg_dmabuf_mr errno=EOPNOTSUPP\n"),
    )
    .run(&["check", "--format", "json", "--allow-incomplete"]);
    let j = off.json();
    for p in gdr_pairs(&j).iter().filter(|p| p["path"] == "PIX") {
        assert_eq!(p["enabled"], false, "{p:#}");
        let reasons = p["reasons"].to_string();
        assert!(reasons.contains("errno 95"), "{reasons}");
    }
    assert!(off.code == 1, "{}", off.stderr);
}

#[test]
fn topo_json_reads_the_same_live_facts() {
    let Some(l) = libs() else { return };
    let root = fixture("hgx-h200x8-cx7x8-nic-no-dmabuf");
    let r = Scenario::new(
        &l.current,
        root,
        &hgx_scenario("fail ibv_reg_dmabuf_mr device=mlx5_0 errno=EPROTONOSUPPORT\n"),
    )
    .run(&["topo", "--format", "json"]);
    let j = r.json();
    let pairs = j["pairs"].as_array().unwrap_or_else(|| panic!("{j:#}"));
    let p = pairs
        .iter()
        .find(|p| p["gpu"] == GPU0 && p["nic"] == "mlx5_0")
        .unwrap();
    assert_eq!(p["enabled"], false, "{p:#}");
    assert!(p["reasons"].to_string().contains("errno 93"), "{p:#}");
    let q = pairs
        .iter()
        .find(|p| p["gpu"] == "0000:28:00.0" && p["nic"] == "mlx5_1")
        .unwrap();
    assert_eq!(q["enabled"], true, "{q:#}");
}

// ---------------------------------------------------------------------------------------------
// The live facts' error paths (check)
// ---------------------------------------------------------------------------------------------

#[test]
fn check_makes_no_cuda_context_and_allocates_nothing() {
    let Some(l) = libs() else { return };
    let r = Scenario::new(&l.current, fixture(HGX), &hgx_scenario("")).run(&[
        "check",
        "--format",
        "json",
        "--allow-incomplete",
    ]);
    assert!(r.log.contains("libcuda cuInit 0 -> 0"), "{}", r.log);
    assert!(
        r.log
            .contains("libcuda cuDeviceGetAttribute 116 gpu 7 -> 1"),
        "{}",
        r.log
    );
    for call in [
        "cuDevicePrimaryCtxRetain",
        "cuMemAlloc",
        "cuMemHostRegister",
        "cuLaunchKernel",
        "ibv_reg_mr ",
    ] {
        assert!(!r.log.contains(call), "check called {call}:\n{}", r.log);
    }
    let j = r.json();
    for b in ["0000:18:00.0", "0000:c8:00.0"] {
        assert_eq!(status(finding(&r, &j, "gpu.gdr-support", b)), "pass");
        assert_eq!(status(finding(&r, &j, "gpu.persistence", b)), "pass");
    }
}

#[test]
fn each_documented_cuinit_error_is_an_error_naming_it() {
    let Some(l) = libs() else { return };
    for code in [
        "CUDA_ERROR_NO_DEVICE",
        "CUDA_ERROR_STUB_LIBRARY",
        "CUDA_ERROR_SYSTEM_NOT_READY",
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "CUDA_ERROR_OPERATING_SYSTEM",
        "CUDA_ERROR_INVALID_DEVICE",
        "CUDA_ERROR_UNKNOWN",
    ] {
        let r = Scenario::new(
            &l.current,
            fixture(HGX),
            &hgx_scenario(&format!("fail cuInit result={code}\n")),
        )
        .run(&["check", "--only", "gpu.gdr-support", "--format", "json"]);
        let j = r.json();
        let f = finding(&r, &j, "gpu.gdr-support", "node");
        assert_eq!(status(f), "error", "{code}: {f:#}");
        assert!(text(f, "message").contains(code), "{code}: {f:#}");
        assert_eq!(r.code, 3, "{code}: {}", r.stderr);
    }
}

#[test]
fn nvml_that_will_not_initialise_is_an_error_naming_it() {
    let Some(l) = libs() else { return };
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        &hgx_scenario("fail nvmlInit result=NVML_ERROR_DRIVER_NOT_LOADED\n"),
    )
    .run(&[
        "check",
        "--only",
        "gpu.persistence,gpu.gdr-support",
        "--format",
        "json",
    ]);
    let j = r.json();
    let f = finding(&r, &j, "gpu.persistence", "node");
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").to_lowercase().contains("driver"),
        "{f:#}"
    );
    // CUDA's facts are unaffected.
    assert_eq!(status(finding(&r, &j, "gpu.gdr-support", GPU0)), "pass");
}

#[test]
fn a_gpu_cuda_does_not_see_is_not_a_pass() {
    let Some(l) = libs() else { return };
    // Eight GPUs on the bus, one visible to CUDA.
    let r = Scenario::new(&l.current, fixture(HGX), "gpu bdf=0000:18:00.0\n").run(&[
        "check",
        "--only",
        "gpu.gdr-support",
        "--format",
        "json",
    ]);
    let j = r.json();
    assert_eq!(status(finding(&r, &j, "gpu.gdr-support", GPU0)), "pass");
    let f = finding(&r, &j, "gpu.gdr-support", "0000:c8:00.0");
    assert_ne!(status(f), "pass", "{f:#}");
    assert!(
        text(f, "message").contains("cuda does not see this gpu"),
        "{f:#}"
    );
}

#[test]
fn nics_libibverbs_cannot_list_get_no_gdr() {
    let Some(l) = libs() else { return };
    // A container without /sys/class/infiniband_verbs: sysfs shows eight NICs, libibverbs
    // lists none (ENOSYS), NCCL falls back to sockets.
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        &hgx_scenario("list errno=ENOSYS\n"),
    )
    .run(&["check", "--format", "json", "--allow-incomplete"]);
    let j = r.json();
    assert!(
        r.log.contains("ibv_get_device_list -> NULL errno 38"),
        "{}",
        r.log
    );
    for p in gdr_pairs(&j) {
        assert_eq!(p["enabled"], false, "{p:#}");
        assert!(p["reasons"].to_string().contains("errno 38"), "{p:#}");
    }
    let f = finding(&r, &j, "gdr.gpu", GPU0);
    assert_ne!(status(f), "pass", "{f:#}");
    // One NIC without a user-space provider: only that NIC is lost.
    let mut s = String::new();
    for b in ["18", "28", "38", "48", "98", "a8", "b8", "c8"] {
        s.push_str(&format!("gpu bdf=0000:{b}:00.0\n"));
    }
    for i in 1..8 {
        s.push_str(&format!("device mlx5_{i}\n"));
    }
    let r = Scenario::new(&l.current, fixture(HGX), &s).run(&[
        "check",
        "--format",
        "json",
        "--allow-incomplete",
    ]);
    let j = r.json();
    let pairs = gdr_pairs(&j);
    let p0 = pairs
        .iter()
        .find(|p| p["gpu"] == GPU0 && p["nic"] == "mlx5_0")
        .unwrap();
    assert_eq!(p0["enabled"], false, "{p0:#}");
    assert!(
        p0["reasons"]
            .to_string()
            .contains("libibverbs does not list mlx5_0"),
        "{p0:#}"
    );
    let p1 = pairs
        .iter()
        .find(|p| p["gpu"] == "0000:28:00.0" && p["nic"] == "mlx5_1")
        .unwrap();
    assert_eq!(p1["enabled"], true, "{p1:#}");
}

#[test]
fn nvml_that_hangs_on_load_costs_the_live_facts_their_deadline_not_a_pass() {
    let Some(l) = libs() else { return };
    let t0 = std::time::Instant::now();
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        &hgx_scenario("hang libnvidia-ml\n"),
    )
    .run(&["check", "--only", "gpu", "--format", "json"]);
    let j = r.json();
    assert!(t0.elapsed().as_secs() < 60, "{:?}", t0.elapsed());
    // One wedged library costs every live fact (one worker asks them all): each check that
    // needs one is an error saying so, none passes.
    for id in ["gpu.persistence", "gpu.gdr-support"] {
        let f = finding(&r, &j, id, "node");
        assert_eq!(status(f), "error", "{f:#}");
        assert!(text(f, "message").contains("deadline"), "{f:#}");
    }
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.log.contains("libnvidia-ml load -> hang"), "{}", r.log);
}

/// A worker wedged for real (inside libcuda's initialiser, not the test hook of tests/probe.rs)
/// dies with its parent.
#[test]
fn a_worker_wedged_in_libcuda_dies_with_its_parent() {
    let Some(l) = libs() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut parent = Scenario::new(
        &l.current,
        fixture(HGX),
        &format!("{TWO_NICS}hang libcuda\n"),
    )
    .command(dir.path(), &["probe", "--registration", "--timeout", "60"])
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let log = dir.path().join("calls.log");
    let t0 = std::time::Instant::now();
    let worker: i32 = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(pid) = text
            .lines()
            .find_map(|l| l.strip_prefix("libcuda load -> hang (pid "))
            .and_then(|rest| rest.trim_end_matches(')').parse().ok())
        {
            break pid;
        }
        if t0.elapsed().as_secs() > 20 {
            let _ = parent.kill();
            let _ = parent.wait();
            panic!("the worker never reached libcuda: {text}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    parent.kill().unwrap();
    parent.wait().unwrap();
    let t0 = std::time::Instant::now();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|x| x.1.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    };
    while !gone(worker) && t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gone(worker), "worker {worker} outlived its parent");
}

// ---------------------------------------------------------------------------------------------
// The stand-ins against the bindings
// ---------------------------------------------------------------------------------------------

/// The CUDA attribute numbers and result codes the stand-in libcuda uses are the bindings'
/// (a code outside cudarc's enum would be undefined behaviour in gdrdoctor).
#[test]
fn stand_in_cuda_numbers_are_the_bindings_numbers() {
    let Some(l) = libs() else { return };
    use cudarc::driver::sys::{CUdevice_attribute as A, CUresult as R};
    // SAFETY: loads the stand-in (no scenario: it neither hangs nor reads one).
    let lib = unsafe { libloading::Library::new(l.current.join("libcuda.so.1")) }.unwrap();
    type Q = unsafe extern "C" fn(*const std::ffi::c_char) -> i32;
    // SAFETY: the helpers are C functions taking a string and returning an int.
    let attr: libloading::Symbol<Q> = unsafe { lib.get(b"gdrstub_cuda_attribute\0") }.unwrap();
    let res: libloading::Symbol<Q> = unsafe { lib.get(b"gdrstub_cuda_result\0") }.unwrap();
    let q = |f: &libloading::Symbol<Q>, s: &str| {
        let c = std::ffi::CString::new(s).unwrap();
        // SAFETY: c is a NUL-terminated string alive across the call.
        unsafe { f(c.as_ptr()) }
    };
    for (opt, a) in [
        ("sms", A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        ("cc_major", A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        ("cc_minor", A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        (
            "host_ptr",
            A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
        ),
        (
            "host_register",
            A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED,
        ),
        (
            "vmm",
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        ),
        (
            "vmm_gdr",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
        ),
        ("gdr", A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
        (
            "flush",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        ),
        (
            "ordering",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
        ),
        ("dmabuf", A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
    ] {
        assert_eq!(q(&attr, opt), a as i32, "{opt}");
    }
    for (name, r) in [
        ("CUDA_SUCCESS", R::CUDA_SUCCESS),
        ("CUDA_ERROR_INVALID_VALUE", R::CUDA_ERROR_INVALID_VALUE),
        ("CUDA_ERROR_OUT_OF_MEMORY", R::CUDA_ERROR_OUT_OF_MEMORY),
        ("CUDA_ERROR_NOT_INITIALIZED", R::CUDA_ERROR_NOT_INITIALIZED),
        ("CUDA_ERROR_DEINITIALIZED", R::CUDA_ERROR_DEINITIALIZED),
        ("CUDA_ERROR_STUB_LIBRARY", R::CUDA_ERROR_STUB_LIBRARY),
        (
            "CUDA_ERROR_DEVICE_UNAVAILABLE",
            R::CUDA_ERROR_DEVICE_UNAVAILABLE,
        ),
        ("CUDA_ERROR_NO_DEVICE", R::CUDA_ERROR_NO_DEVICE),
        ("CUDA_ERROR_INVALID_DEVICE", R::CUDA_ERROR_INVALID_DEVICE),
        ("CUDA_ERROR_INVALID_IMAGE", R::CUDA_ERROR_INVALID_IMAGE),
        ("CUDA_ERROR_INVALID_CONTEXT", R::CUDA_ERROR_INVALID_CONTEXT),
        ("CUDA_ERROR_INVALID_PTX", R::CUDA_ERROR_INVALID_PTX),
        (
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
            R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        ),
        (
            "CUDA_ERROR_OPERATING_SYSTEM",
            R::CUDA_ERROR_OPERATING_SYSTEM,
        ),
        ("CUDA_ERROR_INVALID_HANDLE", R::CUDA_ERROR_INVALID_HANDLE),
        ("CUDA_ERROR_NOT_FOUND", R::CUDA_ERROR_NOT_FOUND),
        ("CUDA_ERROR_ILLEGAL_ADDRESS", R::CUDA_ERROR_ILLEGAL_ADDRESS),
        ("CUDA_ERROR_LAUNCH_FAILED", R::CUDA_ERROR_LAUNCH_FAILED),
        ("CUDA_ERROR_NOT_PERMITTED", R::CUDA_ERROR_NOT_PERMITTED),
        ("CUDA_ERROR_NOT_SUPPORTED", R::CUDA_ERROR_NOT_SUPPORTED),
        (
            "CUDA_ERROR_SYSTEM_NOT_READY",
            R::CUDA_ERROR_SYSTEM_NOT_READY,
        ),
        (
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        ),
        (
            "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
            R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        ),
        ("CUDA_ERROR_UNKNOWN", R::CUDA_ERROR_UNKNOWN),
    ] {
        assert_eq!(q(&res, name), r as i32, "{name}");
    }
    assert_eq!(q(&res, "CUDA_ERROR_MADE_UP"), -1);
}

#[test]
fn a_scenario_with_a_typo_aborts_loudly() {
    let Some(l) = libs() else { return };
    let r = Scenario::new(
        &l.current,
        fixture(HGX),
        "gpu bdf=0000:18:00.0\ndevcie mlx5_0\n",
    )
    .run(&["probe", "--registration", "--format", "json"]);
    // The worker aborts with the stand-in's message: a run that cannot pass.
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert!(
        r.stdout.contains("unknown directive `devcie`"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}
