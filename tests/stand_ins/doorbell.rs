//! `probe --doorbell`: the real mlx5 UAR path against the stand-in libmlx5 and libcuda.

use super::*;

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
