//! `gdrdoctor fleet`: checks x nodes, the nodes failing each check, drift that names the odd node
//! out for each planted defect (a GPU gone, a slow port, one odd firmware, a changed command
//! line), damaged reports named and never dropped, stdin (concatenated and `srun --label`), and
//! the exit-code contract.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::plant::{self, Defect};
use common::*;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const HEALTHY: &str = "hgx-h200x8-cx7x8-healthy";

/// The report of a fixture (optionally with a planted defect) under another hostname, as
/// `check -f json` writes it.
fn report_json(fixture_name: &str, defect: Option<Defect>, host: &str) -> String {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture(fixture_name), t.path());
    if let Some(d) = defect {
        plant::plant(t.path(), d);
    }
    let mut r = report_for(t.path());
    r.host.hostname = Some(host.to_string());
    r.timestamp = Some("2026-11-30T12:00:00Z".into());
    serde_json::to_string_pretty(&r).unwrap()
}

fn fleet(args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut a = vec!["fleet", "-f", "json"];
    a.extend_from_slice(args);
    let (code, out, err) = run(&a);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v, err)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Five healthy nodes and one node per planted defect, one file each.
fn planted_fleet(dir: &Path) -> Vec<(String, Option<Defect>)> {
    let mut nodes: Vec<(String, Option<Defect>)> =
        (0..5).map(|i| (format!("node0{i}"), None)).collect();
    for (i, d) in plant::ALL.iter().enumerate() {
        nodes.push((format!("node1{i}"), Some(*d)));
    }
    for (host, d) in &nodes {
        std::fs::write(
            dir.join(format!("{host}.json")),
            report_json(HEALTHY, *d, host),
        )
        .unwrap();
    }
    nodes
}

fn odd_fields(v: &serde_json::Value, node: &str) -> Vec<(String, String)> {
    v["odd_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["node"] == node)
        .map(|o| {
            o["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["field"].as_str().unwrap().to_string(),
                        f["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn drift_names_the_odd_node_out_for_each_planted_defect() {
    let t = tempfile::tempdir().unwrap();
    planted_fleet(t.path());
    let (code, v, err) = fleet(&[&s(t.path())]);
    assert_eq!(code, 1, "drift fails the roll-up: {err}");
    assert_eq!(v["schema"], "gdrdoctor.fleet/v1");
    assert_eq!(v["summary"]["nodes"], 9);
    assert_eq!(v["summary"]["unreadable"], 0);
    let odd: Vec<&str> = v["odd_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["node"].as_str().unwrap())
        .collect();
    assert_eq!(odd, vec!["node10", "node11", "node12", "node13"]);
    let has = |node: &str, field: &str, value: &str| {
        let f = odd_fields(&v, node);
        assert!(
            f.iter().any(|(a, b)| a == field && b == value),
            "{node}: no {field}={value} in {f:#?}"
        );
    };
    // A GPU gone: the count, the GPU, its PCI function and its GDR pairs.
    has("node10", "gpus.count", "7");
    has("node10", "gpus[0000:48:00.0]", "(absent)");
    has("node10", "pci[0000:48:00.0]", "(absent)");
    has("node10", "gdr[0000:48:00.0]", "(absent)");
    // A slow port, one odd firmware, a changed command line.
    has(
        "node11",
        "nics[mlx5_3].ports[1].rate",
        "200 Gb/sec (2X NDR)",
    );
    assert_eq!(odd_fields(&v, "node11").len(), 1);
    has("node12", "nics[mlx5_5].fw_ver", "28.39.1002");
    has("node13", "cmdline.quiet", "(absent)");
    has("node13", "cmdline.pci", "noats");
    // Each drift row says what the majority holds.
    let row = v["drift"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["field"] == "nics[mlx5_5].fw_ver")
        .unwrap();
    assert_eq!(row["kind"], "odd");
    assert_eq!(row["majority"]["value"], "28.43.1014");
    assert_eq!(row["majority"]["count"], 8);
    assert_eq!(row["values"][0]["nodes"][0], "node12");
    // The odd firmware is also a check warning on that node, in the checks table.
    let fw = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "rdma.firmware")
        .unwrap();
    assert_eq!(
        (fw["pass"].as_u64(), fw["warn"].as_u64()),
        (Some(8), Some(1))
    );
    assert_eq!(fw["not_passing"][0]["node"], "node12");
    // --allow-drift: only the nodes' own exit codes count.
    let failed = v["summary"]["failed"].as_u64().unwrap();
    let (code, _, _) = fleet(&["--allow-drift", &s(t.path())]);
    assert_eq!(code, if failed > 0 { 1 } else { 0 });
    // The table names them too.
    let (_, table, _) = run(&["fleet", &s(t.path())]);
    assert!(table.contains("ODD NODES OUT"), "{table}");
    assert!(
        table.contains("nics[mlx5_5].fw_ver") && table.contains("node12=28.39.1002"),
        "{table}"
    );
    // --ignore leaves fields out.
    let (_, v2, _) = fleet(&["--ignore", "cmdline.,nics[mlx5_5]", &s(t.path())]);
    let odd2: Vec<&str> = v2["odd_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["node"].as_str().unwrap())
        .collect();
    assert_eq!(odd2, vec!["node10", "node11"]);
}

#[test]
fn the_checks_table_names_the_failing_nodes_and_subjects() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let host = format!("ok{i}");
        std::fs::write(
            t.path().join(format!("{host}.json")),
            report_json(HEALTHY, None, &host),
        )
        .unwrap();
    }
    std::fs::write(
        t.path().join("bad.json"),
        report_json("hgx-h200x8-cx7x8-port-down", None, "bad"),
    )
    .unwrap();
    let (code, v, _) = fleet(&[&s(t.path())]);
    assert_eq!(code, 1);
    assert_eq!(v["summary"]["failed"], 1);
    assert_eq!(v["summary"]["ok"], 3);
    let ports = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "rdma.ports")
        .unwrap();
    assert_eq!(
        (ports["pass"].as_u64(), ports["fail"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(ports["nodes"], 4);
    assert_eq!(ports["not_passing"][0]["node"], "bad");
    assert_eq!(ports["not_passing"][0]["status"], "fail");
    assert_eq!(ports["not_passing"][0]["subjects"][0], "mlx5_3/1");
    let (_, table, _) = run(&["fleet", &s(t.path())]);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("rdma.ports"))
        .unwrap();
    assert!(row.contains("fail: bad (mlx5_3/1)"), "{row}");
}

#[test]
fn damaged_reports_are_named_never_dropped() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let host = format!("ok{i}");
        std::fs::write(
            t.path().join(format!("{host}.json")),
            report_json(HEALTHY, None, &host),
        )
        .unwrap();
    }
    let good = report_json(HEALTHY, None, "x");
    std::fs::write(t.path().join("truncated.json"), &good[..good.len() / 2]).unwrap();
    std::fs::write(t.path().join("empty.json"), "").unwrap();
    std::fs::write(t.path().join("other.json"), "{\"a\": 1}").unwrap();
    std::fs::write(
        t.path().join("future.json"),
        good.replace("gdrdoctor.report/v1", "gdrdoctor.report/v9"),
    )
    .unwrap();
    std::fs::write(t.path().join("notes.txt"), "not a report, not read").unwrap();
    let missing = t.path().join("gone.json");
    let (code, v, _) = fleet(&[&s(t.path()), &s(&missing)]);
    assert_eq!(code, 3, "unreadable reports make the roll-up incomplete");
    assert_eq!(v["summary"]["nodes"], 3);
    assert_eq!(v["summary"]["unreadable"], 5);
    assert_eq!(v["summary"]["reports"], 8);
    let bad: Vec<(String, String)> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["input"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                u["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let err_of = |name: &str| {
        bad.iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{name} not named: {bad:#?}"))
    };
    assert!(err_of("gone.json").contains("No such file"));
    assert!(err_of("truncated.json").contains("EOF while parsing"));
    assert_eq!(err_of("empty.json"), "empty file");
    assert!(err_of("other.json").contains("missing field `schema`"));
    assert!(err_of("future.json").contains("gdrdoctor.report/v9"));
    let (code, _, _) = fleet(&["--allow-incomplete", &s(t.path()), &s(&missing)]);
    assert_eq!(code, 0);
    let (_, table, _) = run(&["fleet", &s(t.path())]);
    assert!(
        table.contains("UNREADABLE (4)") && table.contains("truncated.json"),
        "{table}"
    );
    // Nothing readable at all: gdrdoctor could not run.
    let (code, _, err) = run(&["fleet", &s(&missing)]);
    assert_eq!(code, 2);
    assert!(err.contains("no report could be read"), "{err}");
}

fn fleet_stdin(input: &str) -> (i32, serde_json::Value) {
    let mut child = Command::new(bin())
        .args(["fleet", "-f", "json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn stdin_takes_concatenated_reports_and_srun_label_output() {
    let a = report_json(HEALTHY, None, "a");
    let b = report_json(HEALTHY, Some(Defect::OddFirmware), "b");
    let c = report_json(HEALTHY, None, "c");
    // Concatenated documents.
    let (code, v) = fleet_stdin(&format!("{a}{b}\n{c}"));
    assert_eq!(v["summary"]["nodes"], 3);
    assert_eq!(code, 1);
    assert_eq!(v["odd_nodes"][0]["node"], "b");
    // `srun --label`: every line prefixed with its task id, tasks interleaved line by line.
    let docs = [&a, &b, &c];
    let lines: Vec<Vec<&str>> = docs.iter().map(|d| d.lines().collect()).collect();
    let mut mixed = String::new();
    let longest = lines.iter().map(Vec::len).max().unwrap();
    for i in 0..longest {
        for (task, l) in lines.iter().enumerate() {
            if let Some(line) = l.get(i) {
                mixed.push_str(&format!("{task}: {line}\n"));
            }
        }
    }
    let (_, v) = fleet_stdin(&mixed);
    assert_eq!(v["summary"]["nodes"], 3, "{}", v["unreadable"]);
    // Streamed: a task's report is handed on when its last line arrives (b's is longer).
    let inputs: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["input"].as_str().unwrap())
        .collect();
    assert_eq!(
        inputs,
        vec!["stdin[task 0]", "stdin[task 2]", "stdin[task 1]"]
    );
    assert_eq!(v["odd_nodes"][0]["node"], "b");
    // A damaged stream: what parsed is kept, the rest is named.
    let (code, v) = fleet_stdin(&format!("{a}{}", &b[..200]));
    assert_eq!(v["summary"]["nodes"], 1);
    assert_eq!(v["unreadable"][0]["input"], "stdin#2");
    assert_eq!(code, 3);
}

/// `fleet -` with the file `input` on stdin: its exit code, the number of nodes, and its peak
/// resident memory in KiB (from wait4: this child's own; the test holds no input in memory
/// when it forks, since a forked child's high-water mark starts from its parent's).
// wait4 below reaps the child (Child::wait would not give its rusage).
#[allow(clippy::zombie_processes)]
fn fleet_stdin_rss(input: &Path) -> (i32, u64, u64) {
    let child = Command::new(bin())
        .args(["fleet", "-f", "json", "-"])
        .stdin(std::fs::File::open(input).unwrap())
        .stdout(std::fs::File::create(input.with_extension("out")).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, with valid pointers to our locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as libc::pid_t);
    let out = std::fs::read(input.with_extension("out")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    (
        libc::WEXITSTATUS(status),
        v["summary"]["nodes"].as_u64().unwrap(),
        ru.ru_maxrss as u64,
    )
}

/// `fleet -` streams its input: 400 reports (about 90 MiB) cost about what one does, where it
/// held three copies of its input (270 MiB more).
#[test]
fn stdin_is_streamed_not_held() {
    let t = tempfile::tempdir().unwrap();
    let (small, large) = (t.path().join("one.json"), t.path().join("many.json"));
    let n = 400;
    let input_kib = {
        let one = report_json(HEALTHY, None, "n");
        std::fs::write(&small, &one).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&large).unwrap());
        for i in 0..n {
            let r = one.replacen("\"hostname\": \"n\"", &format!("\"hostname\": \"n{i}\""), 1);
            f.write_all(r.as_bytes()).unwrap();
        }
        f.flush().unwrap();
        (one.len() * n) as u64 / 1024
    };
    let (_, nodes, base) = fleet_stdin_rss(&small);
    assert_eq!(nodes, 1);
    let (code, nodes, rss) = fleet_stdin_rss(&large);
    assert_eq!((code, nodes), (0, n as u64));
    let grew = rss.saturating_sub(base);
    assert!(
        grew < input_kib / 4,
        "fleet - grew by {grew} KiB for {input_kib} KiB of input (one report: {base} KiB)"
    );
}

#[test]
fn duplicate_hostnames_stay_distinct_and_prometheus_is_well_formed() {
    let t = tempfile::tempdir().unwrap();
    for f in ["a.json", "b.json"] {
        std::fs::write(t.path().join(f), report_json(HEALTHY, None, "same")).unwrap();
    }
    let (code, v, _) = fleet(&[&s(t.path())]);
    assert_eq!(code, 0, "two identical healthy nodes: no failure, no drift");
    let names: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1]);
    assert!(names[0].starts_with("same@"));
    let (code, p, _) = run(&["fleet", "-f", "prometheus", &s(t.path())]);
    assert_eq!(code, 0);
    assert!(p.contains("gdrdoctor_fleet_nodes{outcome=\"ok\"} 2"), "{p}");
    assert!(p.contains("gdrdoctor_fleet_check_nodes{check=\"rdma.ports\",status=\"pass\"} 2"));
    assert!(p.contains("gdrdoctor_fleet_exit_code 0"));
    common::tools::promtool_check(&p);
}

/// `--format html`: the page holds what the JSON roll-up holds (every node, every check as a
/// column, one drift row per drift field with the odd node out and its value), each node's
/// non-passing findings, a link to its report relative to the page, and the topology picture
/// of `--svg-dir` (a foreign picture is refused and named, a missing one counted).
#[test]
fn html_page_holds_the_roll_up_reports_and_pictures() {
    let t = tempfile::tempdir().unwrap();
    let reports = t.path().join("reports");
    let svgs = t.path().join("svgs");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&svgs).unwrap();
    let nodes = planted_fleet(&reports);
    let (code, _, err) = run(&[
        "topo",
        "--sysroot",
        &s(&fixture(HEALTHY)),
        "--format",
        "svg",
        "-o",
        &s(&svgs.join("node00.svg")),
    ]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(
        svgs.join("node01.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>",
    )
    .unwrap();
    let page = t.path().join("out/fleet.html");
    std::fs::create_dir_all(page.parent().unwrap()).unwrap();
    let (code, out, err) = run(&[
        "fleet",
        &s(&reports),
        "-f",
        "html",
        "--svg-dir",
        &s(&svgs),
        "-o",
        &s(&page),
    ]);
    let (jcode, v, _) = fleet(&[&s(&reports)]);
    assert_eq!(code, jcode, "the same exit code as every format: {err}");
    assert!(out.is_empty(), "-o writes the page, not stdout");
    let h = std::fs::read_to_string(&page).unwrap();
    assert!(h.starts_with("<!DOCTYPE html>") && h.trim_end().ends_with("</html>"));
    assert!(
        !h.contains("src=\"http") && !h.contains("href=\"http"),
        "no network"
    );

    // Heat map: every node a row, every check of the roll-up a column, every cell filled.
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(h.matches("<tr data-i=").count(), nodes.len());
    assert_eq!(h.matches("<th class=\"fl-check\"").count(), checks.len());
    for c in checks {
        let id = c["id"].as_str().unwrap();
        assert!(h.contains(&format!("data-check=\"{id}\"")), "{id}");
    }
    assert_eq!(
        h.matches("<td class=\"fl-cell st-").count(),
        nodes.len() * checks.len()
    );
    // A cell is empty only where the node's report lacks the check.
    let absent: usize = checks
        .iter()
        .map(|c| nodes.len() - c["nodes"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(h.matches("<td class=\"fl-cell st-none").count(), absent);

    // Drift: one row per cause (the nodes that differ and every field in which they do), each
    // field of the roll-up in exactly one of them, the odd node out named with its value.
    let drift = v["drift"].as_array().unwrap();
    assert!(!drift.is_empty());
    let table = h.split("<table class=\"fl-drift\"").nth(1).unwrap();
    let table = table.split("</table>").next().unwrap();
    let groups: Vec<&str> = table.split("<tr class=\"fl-cause\"").skip(1).collect();
    for d in drift {
        let f = d["field"].as_str().unwrap();
        let n = d["values"].as_array().unwrap().len() - usize::from(d["majority"].is_null());
        let tag = format!("<li data-field=\"{f}\">");
        assert_eq!(table.matches(&tag).count(), n, "{f}: once per odd value");
    }
    // Each planted defect on its own node: one group per odd node, no more.
    let odd = v["odd_nodes"].as_array().unwrap().len();
    assert_eq!(groups.len(), odd, "{table}");
    let fw = groups
        .iter()
        .find(|r| r.contains("<li data-field=\"nics[mlx5_5].fw_ver\">"))
        .expect("the odd firmware's drift group");
    assert!(fw.contains(">node12</a></td>"), "{fw}");
    assert!(
        fw.contains("<code>nics[mlx5_5].fw_ver</code>: <code>28.43.1014</code> (8 of 9) &rarr; <code>28.39.1002</code>"),
        "{fw}"
    );

    // Nodes: their non-passing findings, their report, their picture.
    let sections: Vec<&str> = h.split("<details class=\"fl-node\"").skip(1).collect();
    assert_eq!(sections.len(), nodes.len());
    for (sec, n) in sections.iter().zip(v["nodes"].as_array().unwrap()) {
        let name = n["name"].as_str().unwrap();
        assert!(sec.contains(&format!("data-node=\"{name}\"")), "node order");
        let bad = ["warn", "fail", "error"]
            .iter()
            .map(|k| n[k].as_u64().unwrap() as usize)
            .sum::<usize>();
        assert_eq!(sec.matches("<li>").count(), bad, "{name}: its findings");
        let href = format!("href=\"../reports/{name}.json\"");
        assert!(sec.contains(&href), "{name}: {href}");
        let pic = picture_of(sec);
        assert_eq!(
            pic.is_some(),
            name == "node00",
            "{name}: only node00 has a picture"
        );
        if let Some(p) = pic {
            assert!(
                p.contains("data-generator=\"gdrdoctor topo\""),
                "the picture's bytes, as an image"
            );
        }
        assert!(
            !sec.contains("<svg"),
            "{name}: a picture is never inlined as markup"
        );
        assert!(
            !sec.contains("alert(1)"),
            "a refused picture is not inlined"
        );
    }
    assert!(
        h.contains("1 embedded as images, 7 node(s) without one"),
        "pictures are counted"
    );
    assert!(
        h.contains("node01: topology picture not used:")
            && h.contains("node01.svg: not written by `gdrdoctor topo --format svg`"),
        "a foreign picture is named with its path"
    );

    // --svg-dir belongs to html, and must be a directory.
    let (code, _, err) = run(&["fleet", &s(&reports), "--svg-dir", &s(&svgs)]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--svg-dir only applies to --format html"),
        "{err}"
    );
    let nowhere = s(&t.path().join("nowhere"));
    let (code, _, err) = run(&["fleet", &s(&reports), "-f", "html", "--svg-dir", &nowhere]);
    assert_eq!(code, 2);
    assert!(err.contains("nowhere: not a directory"), "{err}");
}

/// The topology picture embedded in a node's section of the fleet page: the bytes of its
/// `<img src="data:image/svg+xml;base64,...">`, or `None`.
fn picture_of(section: &str) -> Option<String> {
    use base64::Engine as _;
    const SRC: &str = "src=\"data:image/svg+xml;base64,";
    let start = section.find(SRC)? + SRC.len();
    let end = start + section[start..].find('"')?;
    let b = base64::engine::general_purpose::STANDARD
        .decode(&section[start..end])
        .unwrap();
    Some(String::from_utf8(b).unwrap())
}

/// Pictures that would run a script if they were inlined (an `onload` handler, a
/// `javascript:` link written with an entity, a `</svg>` that closes the picture early and
/// plants an `<img onerror>`) pass the picture check (they are "ours" by their root) but only
/// ever reach the page as images: not one handler is in the page's markup, and the page's
/// Content-Security-Policy allows no script but its own. (Before, they were inlined as they
/// were; tests/pictures.rs proves in Chromium that none of them runs.)
#[test]
fn hostile_pictures_reach_the_page_only_as_images() {
    let t = tempfile::tempdir().unwrap();
    let reports = t.path().join("reports");
    let svgs = t.path().join("svgs");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&svgs).unwrap();
    let hostile = common::hostile_svg::hostile_svgs();
    for (i, (_, svg)) in hostile.iter().enumerate() {
        let host = format!("node{i}");
        std::fs::write(
            reports.join(format!("{host}.json")),
            report_json(HEALTHY, None, &host),
        )
        .unwrap();
        std::fs::write(svgs.join(format!("{host}.svg")), svg).unwrap();
    }
    let (_, h, err) = run(&["fleet", &s(&reports), "-f", "html", "--svg-dir", &s(&svgs)]);
    assert!(
        h.contains(&format!(
            "{} embedded as images, 0 node(s) without one",
            hostile.len()
        )),
        "{err}"
    );
    for bad in [
        "onload",
        "onerror",
        "javascript",
        "java&#115;",
        "<svg",
        "pwned",
    ] {
        assert!(!h.contains(bad), "`{bad}` reached the page's markup");
    }
    let sections: Vec<&str> = h.split("<details class=\"fl-node\"").skip(1).collect();
    for ((what, svg), sec) in hostile.iter().zip(&sections) {
        assert_eq!(
            picture_of(sec).as_deref(),
            Some(svg.as_str()),
            "{what}: the picture is the file's bytes, as an image"
        );
    }
    let csp = h
        .split("<meta http-equiv=\"Content-Security-Policy\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a Content-Security-Policy");
    let csp = csp.replace("&#39;", "'");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("img-src data:"), "{csp}");
    let script = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src "))
        .expect("a script-src directive");
    assert!(
        script.starts_with("script-src 'sha256-") && !script.contains("unsafe"),
        "only the page's own script, by its hash: {csp}"
    );
}

/// A directory can hold anything: a link to /dev/zero or a FIFO named `*.json` is named as
/// unreadable, never read (it hung the roll-up, using 8 GB), and a node is judged by its own
/// findings, not only by its exit code: `check --fail-on never` and `--allow-incomplete` write
/// reports that exit 0 with failures or errors in them, and a report without a single finding
/// shows nothing of its node.
#[test]
fn hostile_files_are_not_read_and_nodes_are_judged_by_their_findings() {
    use gdrdoctor_checks::report::Report;
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("ok.json"), report_json(HEALTHY, None, "ok")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", t.path().join("zero.json")).unwrap();
    let fifo = t.path().join("fifo.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let t0 = std::time::Instant::now();
    let (code, v, _) = fleet(&[&s(t.path())]);
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
    assert_eq!(code, 3, "{v}");
    let errs: Vec<String> = v["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs.iter().all(|e| e.contains("not a regular file")),
        "{errs:?}"
    );
    // Judged by the findings.
    let d = tempfile::tempdir().unwrap();
    let healthy = report_json(HEALTHY, None, "a");
    let mut failing: Report =
        serde_json::from_str(&report_json("hgx-h200x8-cx7x8-port-down", None, "b")).unwrap();
    failing.summary.exit_code = 0; // as --fail-on never writes it
    let mut errors: Report = serde_json::from_str(&healthy).unwrap();
    errors.host.hostname = Some("c".into());
    errors.findings[0].status = gdrdoctor_checks::report::Status::Error;
    let mut none: Report = serde_json::from_str(&healthy).unwrap();
    none.host.hostname = Some("d".into());
    none.findings.clear();
    std::fs::write(d.path().join("a.json"), &healthy).unwrap();
    for (n, r) in [("b", &failing), ("c", &errors), ("d", &none)] {
        std::fs::write(
            d.path().join(format!("{n}.json")),
            serde_json::to_string(r).unwrap(),
        )
        .unwrap();
    }
    let (code, v, _) = fleet(&["--allow-drift", &s(d.path())]);
    assert_eq!(code, 1, "{v}");
    let sm = &v["summary"];
    assert_eq!(
        (
            sm["ok"].as_u64(),
            sm["failed"].as_u64(),
            sm["incomplete"].as_u64()
        ),
        (Some(1), Some(1), Some(2)),
        "{sm}"
    );
}

/// A line break in a report's field name or value (a hostile or damaged report) stays inside
/// its row of the table: every line of the table is one of its rows, escaped.
#[test]
fn a_line_break_in_a_report_stays_in_its_row() {
    let t = tempfile::tempdir().unwrap();
    let reports = t.path().join("r");
    std::fs::create_dir(&reports).unwrap();
    for i in 0..3 {
        let text = report_json("hgx-h200x8-cx7x8-healthy", None, &format!("node{i}"));
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if i == 2 {
            v["inventory"]["driver"]["nvidia_version"] =
                serde_json::Value::from("580.1\nINJECTED ROW");
            v["inventory"]["driver"]["x\nINJECTED FIELD"] = serde_json::Value::from("y");
            v["host"]["hostname"] = serde_json::Value::from("node2\nINJECTED HOST");
        }
        std::fs::write(reports.join(format!("n{i}.json")), v.to_string()).unwrap();
    }
    let (_, out, err) = run(&["fleet", &s(&reports), "--allow-drift"]);
    assert!(out.contains("INJECTED"), "shown: {out}\n{err}");
    for line in out.lines() {
        assert!(
            !line.starts_with("INJECTED"),
            "a row of its own: {line}\n{out}"
        );
    }
}

/// An empty `--ignore` entry (`--ignore ""`, `--ignore env.,`) was a prefix of every field and
/// hid all drift (exit 0 on a fleet with an odd firmware): it is a usage error naming the
/// argument, for `fleet --ignore` and `preflight --ignore-drift` alike.
#[test]
fn an_empty_ignore_entry_is_a_usage_error_not_a_blindfold() {
    let t = tempfile::tempdir().unwrap();
    for (host, d) in [("a", None), ("b", None), ("c", Some(Defect::OddFirmware))] {
        std::fs::write(
            t.path().join(format!("{host}.json")),
            report_json(HEALTHY, d, host),
        )
        .unwrap();
    }
    let (code, v, _) = fleet(&["--ignore", "env.", &s(t.path())]);
    assert_eq!(code, 1, "the odd firmware is drift: {}", v["summary"]);
    for bad in ["", "env.,", ",env.", "env.,,pci."] {
        let (code, out, err) = run(&["fleet", "--ignore", bad, &s(t.path())]);
        assert_eq!(code, 2, "--ignore {bad:?}: {out}\n{err}");
        assert!(out.is_empty(), "--ignore {bad:?}: {out}");
        assert!(err.contains("--ignore") && err.contains("empty"), "{err}");
    }
    let (code, _, err) = run(&["fleet", "--ignore=", &s(t.path())]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&[
        "preflight",
        "--ignore-drift",
        "env.,",
        "--secret-file",
        &s(&t.path().join("k")),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--ignore-drift") && err.contains("empty"),
        "{err}"
    );
}

/// A report that holds a `fail` finding is failed whatever its exit code (docs/guides/fleet.md):
/// one whose summary says 3 (incomplete) was counted as incomplete, and with
/// `--allow-incomplete` the fleet passed it.
#[test]
fn a_fail_finding_fails_the_node_whatever_its_exit_code() {
    use gdrdoctor_checks::report::{Report, Status};
    let d = tempfile::tempdir().unwrap();
    let healthy = report_json(HEALTHY, None, "a");
    let mut failing: Report =
        serde_json::from_str(&report_json("hgx-h200x8-cx7x8-port-down", None, "b")).unwrap();
    assert!(failing.findings.iter().any(|f| f.status == Status::Fail));
    failing.summary.exit_code = 3;
    let mut errors: Report = serde_json::from_str(&healthy).unwrap();
    errors.host.hostname = Some("c".into());
    errors.findings[0].status = Status::Error;
    errors.summary.exit_code = 3;
    std::fs::write(d.path().join("a.json"), &healthy).unwrap();
    for (n, r) in [("b", &failing), ("c", &errors)] {
        std::fs::write(
            d.path().join(format!("{n}.json")),
            serde_json::to_string(r).unwrap(),
        )
        .unwrap();
    }
    for extra in [
        &["--allow-drift"][..],
        &["--allow-drift", "--allow-incomplete"],
    ] {
        let mut a = extra.to_vec();
        let dir = s(d.path());
        a.push(&dir);
        let (code, v, _) = fleet(&a);
        let sm = &v["summary"];
        assert_eq!(
            (
                sm["ok"].as_u64(),
                sm["failed"].as_u64(),
                sm["incomplete"].as_u64()
            ),
            (Some(1), Some(1), Some(1)),
            "{extra:?}: {sm}"
        );
        assert_eq!(code, 1, "{extra:?}: {sm}");
    }
}

/// The same report file named twice (`fleet a.json a.json b.json`, `fleet reports/
/// reports/a.json`, a link to a report beside it) is one node, read once and said once on
/// stderr: it was two nodes, and the same Prometheus series twice (an invalid exposition).
#[test]
fn a_report_given_twice_is_one_node() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("reports");
    std::fs::create_dir(&dir).unwrap();
    for host in ["a", "b"] {
        std::fs::write(
            dir.join(format!("{host}.json")),
            report_json(HEALTHY, None, host),
        )
        .unwrap();
    }
    let (a, b) = (s(&dir.join("a.json")), s(&dir.join("b.json")));
    let dots = format!("{}/./a.json", s(&dir));
    let d = s(&dir);
    for args in [
        vec![a.as_str(), a.as_str(), b.as_str()],
        vec![a.as_str(), b.as_str(), a.as_str(), dots.as_str()],
        vec![d.as_str(), a.as_str()],
    ] {
        let (code, v, err) = fleet(&args);
        assert_eq!(code, 0, "{args:?}: {}\n{err}", v["summary"]);
        assert_eq!(
            (
                v["summary"]["nodes"].as_u64(),
                v["summary"]["reports"].as_u64()
            ),
            (Some(2), Some(2)),
            "{args:?}: {}",
            v["summary"]
        );
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("given more than once"))
            .collect();
        assert_eq!(said.len(), 1, "{args:?}: {err}");
        assert!(said[0].contains("a.json"), "{err}");
    }
    // A link to a report beside it is the same file.
    std::os::unix::fs::symlink(dir.join("a.json"), dir.join("c.json")).unwrap();
    let (_, v, err) = fleet(&[&s(&dir)]);
    assert_eq!(v["summary"]["nodes"], 2, "{err}");
    assert!(
        err.contains("c.json") && err.contains("given more than once"),
        "{err}"
    );
    // Prometheus: every series once.
    let (code, p, _) = run(&["fleet", "-f", "prometheus", &s(&dir), &a]);
    assert_eq!(code, 0);
    let series: Vec<&str> = p
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').unwrap().0)
        .collect();
    let unique: std::collections::BTreeSet<&str> = series.iter().copied().collect();
    assert_eq!(series.len(), unique.len(), "a series twice:\n{p}");
    assert!(p.contains("gdrdoctor_fleet_nodes{outcome=\"ok\"} 2"), "{p}");
    common::tools::promtool_check(&p);
}

/// `check -f json | head -c` leaves a report cut short; on stdin it swallowed every report
/// after it (4 reports in, "3 report(s)", the failing nodes after it gone). Each cut anywhere
/// (inside a string or not): the damaged one is unreadable, every later report is read, and a
/// failing node beats an incomplete roll-up (exit 1, docs/guides/fleet.md).
#[test]
fn a_report_cut_short_on_stdin_does_not_swallow_the_ones_after_it() {
    let a = report_json(HEALTHY, None, "a");
    let cut = report_json(HEALTHY, None, "cut");
    let c = report_json("hgx-h200x8-cx7x8-port-down", None, "c");
    let d = report_json("hgx-h200x8-cx7x8-port-down", None, "d");
    // A cut outside a string and one inside a string (its quotes then pair up wrongly).
    let inside = cut.find("\"hostname\"").unwrap() + 3;
    // As `cat` writes them: the next report right after the cut, on the same line or not.
    let at_line = cut[..cut.len() / 3].rfind('\n').unwrap() + 1;
    for (at, sep) in [
        (cut.len() / 2, ""),
        (inside, ""),
        (100_000.min(cut.len() - 1), ""),
        (at_line, ""),
        (cut.len() / 2, "\n"),
    ] {
        let (code, v) = fleet_stdin(&format!("{a}{}{sep}{c}{d}", &cut[..at]));
        let sm = &v["summary"];
        assert_eq!(sm["reports"], 4, "cut at {at}: {sm}\n{}", v["unreadable"]);
        assert_eq!(sm["nodes"], 3, "cut at {at}: {sm}");
        assert_eq!(sm["unreadable"], 1, "cut at {at}: {}", v["unreadable"]);
        assert_eq!(sm["failed"], 2, "cut at {at}: {sm}");
        assert_eq!(v["unreadable"][0]["input"], "stdin#2");
        assert!(
            v["unreadable"][0]["error"]
                .as_str()
                .unwrap()
                .contains("cut short"),
            "{}",
            v["unreadable"]
        );
        let failing: Vec<&str> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["not_passing"].as_array().unwrap())
            .filter(|n| n["status"] == "fail")
            .map(|n| n["node"].as_str().unwrap())
            .collect();
        assert!(
            failing.contains(&"c") && failing.contains(&"d"),
            "{failing:?}"
        );
        assert_eq!(code, 1, "a failed node beats an unreadable report: {sm}");
    }
}
