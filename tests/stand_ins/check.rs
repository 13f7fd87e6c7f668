//! `check` and `topo` against the stand-ins: the GDR verdict from the live verbs facts, and the
//! live facts' error paths.

use super::*;

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
    // Nothing hides it (no CUDA_VISIBLE_DEVICES, no compute mode): an error, not a skip.
    assert_eq!(status(f), "error", "{f:#}");
    assert!(
        text(f, "message").contains("cuda did not enumerate it"),
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
