//! The contrib/ seats without their engines (contrib/slurm/test.sh runs the real Slurm in CI):
//! the Slurm health check's drain/resume logic against stub `sinfo`/`scontrol`, the
//! node-problem-detector plugin config against NPD's own rules and the plugin's exit codes, and
//! the Kubernetes manifests' gdrdoctor flags, and the DaemonSet's and NPD's command lines run as
//! written against a constructed host root (`--host-root`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::host_root::host_tree;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn write_exec(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Run contrib/slurm/gdrdoctor-healthcheck with stub `sinfo` and `scontrol` that keep the node's
/// drain reason in a file; returns (exit code, reason after the run, scontrol calls).
fn healthcheck(args: &str, reason_before: &str, gdrdoctor: Option<&str>) -> (i32, String, String) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::write(d.join("reason"), reason_before).unwrap();
    write_exec(
        &d.join("sinfo"),
        &format!("#!/bin/sh\ncat {}/reason\n", d.display()),
    );
    write_exec(
        &d.join("scontrol"),
        &format!(
            "#!/bin/sh\necho \"$@\" >>{dir}/calls\ncase \"$*\" in\n  *State=DRAIN*) r=$(echo \"$*\" | sed -n 's/.*Reason=//p'); printf '%s' \"$r\" >{dir}/reason ;;\n  *State=RESUME*) printf none >{dir}/reason ;;\nesac\n",
            dir = d.display()
        ),
    );
    std::fs::write(
        d.join("conf"),
        format!(
            "GDRDOCTOR={}\nGDRDOCTOR_ARGS=\"{args}\"\nGDRDOCTOR_NODE=n1\n",
            gdrdoctor.unwrap_or(bin())
        ),
    )
    .unwrap();
    let out = Command::new(repo().join("contrib/slurm/gdrdoctor-healthcheck"))
        .env("PATH", format!("{}:/usr/bin:/bin", d.display()))
        .env("GDRDOCTOR_HEALTHCHECK_CONF", d.join("conf"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        std::fs::read_to_string(d.join("reason")).unwrap(),
        std::fs::read_to_string(d.join("calls")).unwrap_or_default(),
    )
}

#[test]
fn slurm_healthcheck_drains_resumes_and_respects_operators() {
    let down = format!(
        "--sysroot {}",
        fixture("hgx-h200x8-cx7x8-port-down").display()
    );
    let healthy = format!(
        "--sysroot {}",
        fixture("hgx-h200x8-cx7x8-healthy").display()
    );
    // A failing node is drained with the failing ids as the reason.
    let (code, reason, calls) = healthcheck(&down, "none", None);
    assert_eq!(code, 0, "healthcheck mode: the drain is the signal");
    assert!(
        reason.starts_with("gdrdoctor: FAIL rdma.ports: mlx5_3/1: "),
        "{reason}"
    );
    assert!(calls.contains("update NodeName=n1 State=DRAIN"), "{calls}");
    // Drained by gdrdoctor, now healthy: resumed.
    let (_, reason, calls) = healthcheck(&healthy, "gdrdoctor: FAIL rdma.ports: old", None);
    assert_eq!(reason, "none");
    assert!(calls.contains("State=RESUME"), "{calls}");
    // An operator's drain survives a passing check, and a failing one does not overwrite it.
    for args in [&healthy, &down] {
        let (_, reason, calls) = healthcheck(args, "maintenance: new cables", None);
        assert_eq!(reason, "maintenance: new cables");
        assert!(calls.is_empty(), "{calls}");
    }
    // Already drained for the same reason: no second update.
    let (_, first, _) = healthcheck(&down, "none", None);
    let (_, again, calls) = healthcheck(&down, &first, None);
    assert_eq!(again, first);
    assert!(calls.is_empty(), "{calls}");
    // A checker that cannot run must not say healthy.
    let (_, reason, _) = healthcheck(&healthy, "none", Some("/nonexistent/gdrdoctor"));
    assert!(reason.starts_with("gdrdoctor: could not run"), "{reason}");
    let (_, reason, _) = healthcheck("--sysroot /nonexistent", "none", None);
    assert!(
        reason.starts_with("gdrdoctor: could not run (exit 2): --sysroot"),
        "{reason}"
    );
}

fn go_duration_secs(s: &str) -> f64 {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap());
    let n: f64 = num.parse().unwrap();
    match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => panic!("{s}: unit {other}"),
    }
}

#[test]
fn npd_plugin_config_follows_npd_rules_and_the_plugin_protocol() {
    let text = std::fs::read_to_string(
        repo().join("contrib/node-problem-detector/gdrdoctor-plugin-monitor.json"),
    )
    .unwrap();
    let c: serde_json::Value = serde_json::from_str(&text).unwrap();
    // pkg/custompluginmonitor/types/config.go Validate(): plugin "custom", rule timeouts within
    // the global one, a default condition for every permanent rule.
    assert_eq!(c["plugin"], "custom");
    let global = go_duration_secs(c["pluginConfig"]["timeout"].as_str().unwrap());
    go_duration_secs(c["pluginConfig"]["invoke_interval"].as_str().unwrap());
    assert_eq!(c["pluginConfig"]["max_output_length"], 80);
    assert_eq!(
        c["pluginConfig"]["skip_initial_status"], true,
        "no healthy condition before the first run (kubernetes/node-problem-detector#407)"
    );
    let conditions: Vec<&str> = c["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["type"].as_str().unwrap())
        .collect();
    let rules = c["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert!(go_duration_secs(rule["timeout"].as_str().unwrap()) <= global);
    assert_eq!(rule["type"], "permanent");
    assert!(conditions.contains(&rule["condition"].as_str().unwrap()));
    assert!(rule["path"].as_str().unwrap().ends_with("/gdrdoctor"));
    // The ConfigMap carries the same JSON.
    let cm = std::fs::read_to_string(
        repo().join("contrib/kubernetes/node-problem-detector-gdrdoctor.yaml"),
    )
    .unwrap();
    let embedded: String = cm
        .lines()
        .skip_while(|l| !l.contains("gdrdoctor-plugin-monitor.json: |"))
        .skip(1)
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&embedded).unwrap(),
        c
    );
    // Run the rule's command line on fixtures made host roots (the policy swapped for a
    // temporary one): NPD reads exit 0 as OK, 1 as NonOK, anything else as Unknown, and keeps
    // max_output_length bytes of stdout.
    let t = tempfile::tempdir().unwrap();
    let policy = t.path().join("policy.toml");
    std::fs::write(&policy, "[gpu]\ncount = 8\n").unwrap();
    let args: Vec<String> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    for (sc, want) in [
        ("hgx-h200x8-cx7x8-healthy", 0),
        ("hgx-h200x8-cx7x8-port-down", 1),
        ("h200-vm-live", 1),
    ] {
        let host = t.path().join(sc);
        host_tree(sc, &host, "unlimited");
        let mut a = Vec::new();
        let mut it = args.iter();
        while let Some(x) = it.next() {
            match x.as_str() {
                "--host-root" => {
                    assert_eq!(it.next().map(String::as_str), Some("/host"));
                    a.push("--host-root".to_string());
                    a.push(host.display().to_string());
                }
                "--policy" => {
                    it.next();
                    a.push("--policy".into());
                    a.push(policy.display().to_string());
                }
                _ => a.push(x.clone()),
            }
        }
        // A host root is live: each host keeps its own counter state (never /run/gdrdoctor).
        let out = Command::new(bin())
            .args(&a)
            .env("GDRDOCTOR_STATE_DIR", t.path().join(format!("state-{sc}")))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(want), "{sc}: {stdout}");
        assert!(
            stdout.trim().len() <= 80,
            "{sc}: {} bytes",
            stdout.trim().len()
        );
    }
}

#[test]
fn manifests_use_flags_gdrdoctor_has() {
    let (_, help, _) = run(&["check", "--help"]);
    for f in [
        "contrib/kubernetes/gdrdoctor-daemonset.yaml",
        "contrib/prometheus/gdrdoctor-textfile.service",
        "contrib/node-problem-detector/gdrdoctor-plugin-monitor.json",
    ] {
        let text = std::fs::read_to_string(repo().join(f)).unwrap();
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for flag in code
            .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
            .filter(|w| {
                w.starts_with("--")
                    && w.len() > 2
                    && w[2..].starts_with(|c: char| c.is_ascii_lowercase())
                    && !w.contains(['.', '='])
            })
        {
            assert!(help.contains(flag), "{f}: `gdrdoctor check` has no {flag}");
        }
    }
    let script =
        std::fs::read_to_string(repo().join("contrib/slurm/gdrdoctor-healthcheck")).unwrap();
    assert!(script.contains("check --format oneline"));
    let st = Command::new("sh")
        .args([
            "-n",
            &repo()
                .join("contrib/slurm/gdrdoctor-healthcheck")
                .display()
                .to_string(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

/// The DaemonSet's loop, run once as written (its policy from its own ConfigMap) against
/// constructed host roots: the textfile lands in the host's node_exporter directory and the
/// one-line verdict on stdout.
#[test]
fn daemonset_script_runs_against_a_host_root() {
    let yaml = std::fs::read_to_string(repo().join("contrib/kubernetes/gdrdoctor-daemonset.yaml"))
        .unwrap();
    let block = |start: &str, indent: &str| -> String {
        yaml.lines()
            .skip_while(|l| !l.trim_end().ends_with(start))
            .skip(1)
            .take_while(|l| l.starts_with(indent) || l.trim().is_empty())
            .map(|l| format!("{}\n", l.strip_prefix(indent).unwrap_or(l)))
            .collect()
    };
    let policy = block("policy.toml: |", "    ");
    let script = block("- |", "              ");
    assert!(
        script.contains("gdrdoctor check --host-root /host"),
        "{script}"
    );
    assert!(policy.contains("[gpu]"), "{policy}");
    let t = tempfile::tempdir().unwrap();
    let policy_file = t.path().join("policy.toml");
    std::fs::write(&policy_file, &policy).unwrap();
    for (sc, status) in [
        ("hgx-h200x8-cx7x8-healthy", "OK "),
        ("hgx-h200x8-cx7x8-port-down", "FAIL rdma.ports"),
    ] {
        let host = t.path().join(sc);
        host_tree(sc, &host, "unlimited");
        std::fs::create_dir_all(host.join("var/lib/node_exporter/textfile_collector")).unwrap();
        // Once instead of forever; the paths of this test instead of the pod's.
        let once = script
            .replace("while true; do", "for _once in 1; do")
            .replace("sleep 300", ":")
            .replace(
                "/etc/gdrdoctor/policy.toml",
                &policy_file.display().to_string(),
            )
            .replace("/host", &host.display().to_string())
            .replace(
                "/run/gdrdoctor",
                &t.path().join(format!("state-{sc}")).display().to_string(),
            )
            .replace("gdrdoctor check", &format!("{} check", bin()));
        assert_ne!(once, script);
        let out = Command::new("sh")
            .args(["-c", &once])
            .env("GDRDOCTOR_STATE_DIR", t.path().join(format!("state-{sc}")))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stdout.starts_with(status), "{sc}: {stdout}{stderr}");
        assert!(stdout.trim().len() <= 80, "{sc}: {stdout}");
        let prom = std::fs::read_to_string(
            host.join("var/lib/node_exporter/textfile_collector/gdrdoctor.prom"),
        )
        .unwrap();
        assert!(prom.contains("gdrdoctor_check_status"), "{prom}");
        assert!(
            prom.contains("policy."),
            "the ConfigMap's policy was applied: {prom}"
        );
    }
}

/// Every seat keeps its own counter baseline: two consumers on one node (the Slurm health check
/// and a Prometheus timer, or the DaemonSet's two runs) must each see every counter that grew
/// since their own last run, which one shared state file cannot give.
#[test]
fn every_seat_keeps_its_own_counter_baseline() {
    let read = |f: &str| std::fs::read_to_string(repo().join(f)).unwrap();
    let dirs_after_flag = |text: &str| -> Vec<String> {
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .filter(|w| w[0] == "--state-dir")
            .map(|w| w[1].to_string())
            .collect()
    };
    let mut dirs = Vec::new();
    let ds = dirs_after_flag(&read("contrib/kubernetes/gdrdoctor-daemonset.yaml"));
    assert_eq!(ds.len(), 2, "the DaemonSet's two runs: {ds:?}");
    dirs.extend(ds);
    for f in [
        "contrib/node-problem-detector/gdrdoctor-plugin-monitor.json",
        "contrib/prometheus/gdrdoctor-textfile.service",
    ] {
        let d = dirs_after_flag(&read(f));
        assert_eq!(d.len(), 1, "{f}: {d:?}");
        dirs.extend(d);
    }
    let slurm = read("contrib/slurm/gdrdoctor-healthcheck");
    let line = slurm
        .lines()
        .find(|l| l.starts_with("GDRDOCTOR_STATE_DIR=${GDRDOCTOR_STATE_DIR:-"))
        .expect("the Slurm seat sets its state directory");
    dirs.push(
        line.trim_start_matches("GDRDOCTOR_STATE_DIR=${GDRDOCTOR_STATE_DIR:-")
            .trim_end_matches('}')
            .to_string(),
    );
    assert!(slurm.contains("export GDRDOCTOR_STATE_DIR"));
    let mut unique = dirs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        dirs.len(),
        "shared state directories: {dirs:?}"
    );
    for d in &dirs {
        assert!(
            d.starts_with("/run/gdrdoctor/") && d != gdrdoctor::state::DEFAULT_DIR,
            "{d}: not a seat's own directory under /run/gdrdoctor"
        );
    }
    // The DaemonSet's directory is writable in a read-only root: a hostPath volume mounted there.
    let yaml = read("contrib/kubernetes/gdrdoctor-daemonset.yaml");
    assert!(yaml.contains("mountPath: /run/gdrdoctor") && yaml.contains("path: /run/gdrdoctor"));
}

/// The image carries the release binary (glibc >= 2.17, from scripts/release.sh), not the one a
/// plain `cargo build` ties to the build host's glibc.
#[test]
fn the_container_image_takes_the_release_binary() {
    let docker = std::fs::read_to_string(repo().join("contrib/kubernetes/Dockerfile")).unwrap();
    let release = std::fs::read_to_string(repo().join("scripts/release.sh")).unwrap();
    assert!(!docker.contains("target/release/"), "{docker}");
    assert!(docker.contains("COPY target/dist/"), "{docker}");
    assert!(
        docker.contains("gdrdoctor-$VERSION-$arch-linux-gnu"),
        "{docker}"
    );
    assert!(release.contains("OUT=target/dist"));
    assert!(release.contains("name=\"gdrdoctor-$VERSION-$arch-linux-gnu\""));
    assert!(docker.contains(&format!("ARG VERSION={}", env!("CARGO_PKG_VERSION"))));
}
