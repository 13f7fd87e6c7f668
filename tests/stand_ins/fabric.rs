//! The GPUs' NVLink fabric state through the stand-in NVML (issue 39): gdrdoctor's own call
//! (`nvmlDeviceGetGpuFabricInfoV`, version 3) and the verdict of `gpu.fabric-state`.

use super::*;

fn scenario(gpu: &str) -> String {
    let mut s = String::new();
    for b in ["18", "28", "38", "48", "98", "a8", "b8", "c8"] {
        s.push_str(&format!("gpu bdf=0000:{b}:00.0 {gpu}\n"));
    }
    s
}

fn fabric(run: &Run) -> Vec<(String, String, String)> {
    let j = run.json();
    j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["id"] == "gpu.fabric-state")
        .map(|f| {
            (
                f["subject"].as_str().unwrap_or_default().to_string(),
                f["status"].as_str().unwrap_or_default().to_string(),
                f["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_fabric_state_comes_from_nvml_and_in_progress_fails() {
    let Some(l) = libs() else { return };
    let root = fixture("hgx-h200x8-cx7x8-healthy");
    let args = [
        "check",
        "--format",
        "json",
        "--allow-incomplete",
        "--no-cache",
    ];
    let done = Scenario::new(
        &l.current,
        root.clone(),
        &scenario("fabric=completed clique=7"),
    )
    .run(&args);
    let f = fabric(&done);
    assert!(
        done.log
            .contains("nvmlDeviceGetGpuFabricInfoV v3 -> state 3 status 0"),
        "{}",
        done.log
    );
    let g0 = f.iter().find(|x| x.0 == "0000:18:00.0").expect("gpu 0");
    assert_eq!(g0.1, "pass", "{f:?}\n{}", done.stderr);
    assert!(g0.2.contains("clique 7"), "{g0:?}");

    let busy = Scenario::new(&l.current, root.clone(), &scenario("fabric=in-progress")).run(&args);
    let f = fabric(&busy);
    let g0 = f.iter().find(|x| x.0 == "0000:18:00.0").expect("gpu 0");
    assert_eq!(g0.1, "fail", "{f:?}");
    assert!(
        g0.2.contains("in-progress") && g0.2.contains("802"),
        "{g0:?}"
    );

    let failed = Scenario::new(
        &l.current,
        root.clone(),
        &scenario("fabric=completed fabric_status=NVML_ERROR_UNKNOWN"),
    )
    .run(&args);
    let g0 = fabric(&failed)
        .into_iter()
        .find(|x| x.0 == "0000:18:00.0")
        .expect("gpu 0");
    assert_eq!(g0.1, "fail", "{g0:?}");

    // An NVML without the calls (a driver before 525): skipped, naming the call.
    let gone = Scenario::new(
        &l.current,
        root,
        &format!(
            "{}fail nvmlDeviceGetGpuFabricInfoV result=NVML_ERROR_NOT_SUPPORTED\n",
            scenario("fabric=completed")
        ),
    )
    .run(&args);
    let g0 = fabric(&gone)
        .into_iter()
        .find(|x| x.0 == "0000:18:00.0")
        .expect("gpu 0");
    assert_eq!(g0.1, "skip", "{g0:?}");
    assert!(g0.2.contains("nvmlDeviceGetGpuFabricInfoV"), "{g0:?}");
}
