//! Pasted text: `diagnose` and `topo --nvidia-smi` documents, of real and damaged pastes.

use super::*;

/// The files of fixtures/pastes (not their SOURCES.md, nor corpus.md: a list of logs kept
/// elsewhere, no paste).
fn pastes() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo().join("fixtures/pastes"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && !p.ends_with("SOURCES.md") && !p.ends_with("corpus.md"))
        .collect();
    v.sort();
    v
}

/// The captures of ../shared/realdata, each with its files (not its subdirectories: sysfs
/// trees and hwloc XML are no pastes); empty when the directory is absent.
fn real_captures() -> Vec<(String, Vec<std::path::PathBuf>)> {
    let Some(Ok(rd)) = require::realdata(&repo()).map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<std::path::PathBuf>)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let mut files: Vec<_> = std::fs::read_dir(e.path())
                .unwrap()
                .filter_map(|f| f.ok())
                .map(|f| f.path())
                .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "xml"))
                .collect();
            files.sort();
            (e.file_name().to_string_lossy().into_owned(), files)
        })
        .filter(|(_, f)| !f.is_empty())
        .collect();
    out.sort();
    out
}

/// Whether a text holds an `nvidia-smi topo -m` header line (the reader's own test).
fn has_matrix_header(text: &str) -> bool {
    text.lines()
        .any(|l| gdrdoctor_checks::paste::topo::is_header(l.trim()))
}

/// The findings' statuses add up to the summary.
fn summary_counts_findings(doc: &Value, what: &str) {
    let mut n: BTreeMap<&str, u64> = BTreeMap::new();
    for f in doc["findings"].as_array().unwrap() {
        *n.entry(f["status"].as_str().unwrap()).or_default() += 1;
    }
    for k in ["pass", "warn", "fail", "skip", "error"] {
        assert_eq!(
            doc["summary"][k].as_u64(),
            Some(n.get(k).copied().unwrap_or(0)),
            "{what}: summary.{k}"
        );
    }
}

/// `gdrdoctor diagnose FILES -f json`: exit 0, 1 or 3 with a valid report, or 2 with nothing
/// recognised (and no document). Returns the report.
fn diagnose_cli(files: &[&std::path::Path], what: &str) -> Option<Value> {
    let mut args = vec!["diagnose".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["-f".into(), "json".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run(&args);
    match code {
        0 | 1 | 3 => {
            let v: Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("{what}: diagnose -f json is not JSON: {e}"));
            validate(gdrdoctor_checks::paste::report::SCHEMA, &v, what);
            summary_counts_findings(&v, what);
            assert_eq!(v["summary"]["exit_code"], code, "{what}");
            Some(v)
        }
        2 => {
            assert!(
                out.is_empty() && err.starts_with("gdrdoctor: error: "),
                "{what}: {err}"
            );
            None
        }
        other => panic!("{what}: diagnose exited {other}: {err}"),
    }
}

/// `gdrdoctor topo --nvidia-smi FILE -f json`: a valid `gdrdoctor.topo-paste/v1` document when
/// the file holds a matrix (exit 0), else exit 2 with the reason.
fn topo_paste_cli(file: &std::path::Path) -> Option<Value> {
    let what = format!("topo --nvidia-smi {}", file.display());
    let (code, out, err) = run(&[
        "topo",
        "--nvidia-smi",
        &file.display().to_string(),
        "-f",
        "json",
    ]);
    match code {
        0 => {
            let v: Value = serde_json::from_str(&out).unwrap();
            validate(TOPO_PASTE_SCHEMA, &v, &what);
            Some(v)
        }
        2 => {
            assert!(
                out.is_empty() && err.contains("matrix"),
                "{what}: exit 2 without naming the matrix: {err}"
            );
            None
        }
        other => panic!("{what}: exited {other}: {err}"),
    }
}

#[test]
fn topo_nvidia_smi_documents_match_the_topo_paste_schema() {
    // Every paste: a document when it holds a matrix, the reason when it does not.
    let mut n = 0;
    for f in pastes() {
        let text = std::fs::read_to_string(&f).unwrap();
        let doc = topo_paste_cli(&f);
        if has_matrix_header(&text) {
            assert!(doc.is_some(), "{}: a matrix, but no document", f.display());
        }
        n += usize::from(doc.is_some());
    }
    assert!(n >= 9, "only {n} pastes with a matrix");
    // Every real matrix, when ../shared/realdata is present.
    let mut real = 0;
    for (_, files) in real_captures() {
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            if !has_matrix_header(&text) {
                continue;
            }
            let doc = topo_paste_cli(&f);
            assert!(
                doc.is_some(),
                "{}: a real matrix, but no document",
                f.display()
            );
            real += 1;
        }
    }
    assert!(
        real == 0 || real >= 10,
        "only {real} real matrices found in ../shared/realdata"
    );
    // A node's `topo` is not a paste's: the two schemas reject each other's documents.
    let paste = pastes()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("nccl-1435-topo"))
        .unwrap();
    let doc = topo_paste_cli(&paste).unwrap();
    assert!(!validator(TOPO_SCHEMA).is_valid(&doc));
    let (_, out, _) = run(&[
        "topo",
        "--sysroot",
        &fixture("hgx-h200x8-cx7x8-healthy").display().to_string(),
        "-f",
        "json",
    ]);
    let node: Value = serde_json::from_str(&out).unwrap();
    assert!(!validator(TOPO_PASTE_SCHEMA).is_valid(&node));
    // Strict: an undocumented field, or a value out of its set, fails.
    let v = validator(TOPO_PASTE_SCHEMA);
    assert!(v.is_valid(&doc));
    let bad: [Edit; 5] = [
        ("an undocumented pair field", |d| {
            d["pairs"][0]["why"] = Value::from("x")
        }),
        ("a verdict", |d| d["pairs"][0]["gdr"] = Value::from("maybe")),
        ("a cell", |d| d["pairs"][0]["path"] = Value::from("NEAR")),
        ("a source", |d| d["source"] = Value::from("live")),
        ("a close_nics key", |d| {
            d["close_nics"]["mlx5_0"] = Value::from(Vec::<String>::new())
        }),
    ];
    for (what, edit) in bad {
        let mut b = doc.clone();
        edit(&mut b);
        assert!(!v.is_valid(&b), "the topo-paste schema accepts {what}");
    }
}

#[test]
fn diagnose_documents_match_the_diagnose_schema() {
    let files = pastes();
    let mut n = 0;
    for f in &files {
        n += usize::from(diagnose_cli(&[f], &f.display().to_string()).is_some());
    }
    assert!(n >= 35, "only {n} pastes diagnosed");
    // All of them at once: many blocks, several matrices and logs.
    let all: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let v = diagnose_cli(&all, "every paste at once").unwrap();
    assert!(v["matrices"].as_array().unwrap().len() >= 9);
    // Each real capture, its files together, when ../shared/realdata is present.
    for (name, files) in real_captures() {
        let fs: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
        diagnose_cli(&fs, &format!("realdata {name}"));
    }
    // A paste whose verdicts are on and whose NCCL log covers the pairs: `logged`, the
    // mechanism and the per-direction fields are in the document, and match the schema.
    let t = tempfile::tempdir().unwrap();
    let mut lsmod = String::from("Module                  Size  Used by\n");
    for i in 0..30 {
        lsmod.push_str(&format!("mod{i:<20} 16384  0\n"));
    }
    lsmod.push_str("nvidia_peermem         16384  0\nnvidia              56598528  147 nvidia_uvm,nvidia_peermem\n");
    let topo = "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    PIX     SYS     0-31    0       N/A
GPU1    NV18     X      SYS     PIX     32-63   1       N/A
NIC0    PIX     SYS      X      SYS
NIC1    SYS     PIX     SYS      X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
";
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
    let mut paths = Vec::new();
    for (name, text) in [
        ("lsmod.txt", lsmod.as_str()),
        ("topo.txt", topo),
        ("nccl.log", log),
    ] {
        let p = t.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p);
    }
    let ps: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let v = diagnose_cli(&ps, "matrix, lsmod and nccl log").unwrap();
    let p0 = v["gdr"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gpu"] == "GPU0" && p["nic"] == "mlx5_0")
        .unwrap();
    assert_eq!(p0["gdr"], "on", "{p0}");
    assert_eq!(p0["mechanism"], "peermem", "{p0}");
    assert_eq!(p0["logged"]["send"], true, "{p0}");
    assert!(!v["nccl"]["logged_gdr"].as_array().unwrap().is_empty());
    // Strict: through the references into gdrdoctor.report.v1 too.
    let s = validator(gdrdoctor_checks::paste::report::SCHEMA);
    assert!(s.is_valid(&v));
    let bad: [Edit; 11] = [
        ("an undocumented top-level field", |v| {
            v["timestamp"] = Value::from("2026-11-30T12:00:00Z")
        }),
        ("a host that is not evidence", |v| {
            v["host"]["source"] = Value::from("live")
        }),
        ("exit code 2", |v| {
            v["summary"]["exit_code"] = Value::from(2)
        }),
        ("an evidence field the report lacks", |v| {
            v["findings"][0]["evidence"][0]["why"] = Value::from("x")
        }),
        ("a driver flavor", |v| {
            v["inventory"]["driver"]["flavor"] = Value::from("closed")
        }),
        ("a verdict", |v| v["gdr"][0]["gdr"] = Value::from("maybe")),
        ("a logged field", |v| {
            v["gdr"][0]["logged"]["via"] = Value::Null
        }),
        ("a matrix cell", |v| {
            v["matrices"][0]["rows"][0]["cells"][1] = Value::from("NV")
        }),
        ("a block kind", |v| {
            v["blocks"][0]["kind"] = Value::from("topo")
        }),
        // Left out when NCCL logged nothing for the pair: never null.
        ("a null logged", |v| v["gdr"][0]["logged"] = Value::Null),
        ("a peer that is no rank", |v| {
            v["nccl"]["ranks"][0]["peers"]["GPU1"] = serde_json::json!(["P2P/CUMEM"])
        }),
    ];
    for (what, edit) in bad {
        let mut b = v.clone();
        edit(&mut b);
        assert!(!s.is_valid(&b), "the diagnose schema accepts {what}");
    }
}

/// A pasted text damaged as terminals, trackers and mail clients damage it.
fn damaged(t: &str) -> Vec<(&'static str, String)> {
    let lines: Vec<&str> = t.lines().collect();
    let join = |v: Vec<String>| v.join("\n");
    let chars: Vec<char> = t.chars().collect();
    vec![
        ("crlf", t.replace('\n', "\r\n")),
        ("cut in half", chars[..chars.len() / 2].iter().collect()),
        (
            "every other line lost",
            join(lines.iter().step_by(2).map(|l| l.to_string()).collect()),
        ),
        (
            "lines cut at 50 columns",
            join(lines.iter().map(|l| l.chars().take(50).collect()).collect()),
        ),
        (
            "wrapped at 70 columns",
            join(
                lines
                    .iter()
                    .flat_map(|l| {
                        let c: Vec<char> = l.chars().collect();
                        c.chunks(70)
                            .map(|x| x.iter().collect::<String>())
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            ),
        ),
        (
            "control characters and colour codes",
            join(
                lines
                    .iter()
                    .enumerate()
                    .map(|(i, l)| match i % 3 {
                        0 => format!("\u{1b}[1m{l}\u{1b}[0m"),
                        1 => format!("{l}\u{0}\u{7}\u{fffd}"),
                        _ => l.replace(' ', "\u{a0}"),
                    })
                    .collect(),
            ),
        ),
        (
            "lines reversed",
            join(lines.iter().rev().map(|l| l.to_string()).collect()),
        ),
        ("doubled", format!("{t}\n{t}")),
    ]
}

#[test]
fn damaged_pastes_still_give_documents_that_match_their_schemas() {
    use gdrdoctor_checks::paste::{self, report::diagnose_paste, report::Assume, Input};
    let diag = validator(gdrdoctor_checks::paste::report::SCHEMA);
    let topo = validator(TOPO_PASTE_SCHEMA);
    let mut n = 0;
    for f in pastes() {
        let text = std::fs::read_to_string(&f).unwrap();
        for (how, t) in damaged(&text) {
            let what = format!("{} ({how})", f.display());
            let inputs = vec![Input {
                name: f.file_name().unwrap().to_string_lossy().into_owned(),
                text: t,
            }];
            let p = paste::read(&inputs);
            if !paste::report::recognised(&p) {
                continue;
            }
            // As `diagnose -f json` and `topo --nvidia-smi -f json` write them.
            let r = diagnose_paste(
                &p,
                &inputs,
                &gdrdoctor_checks::RunOptions::default(),
                &Assume::default(),
            );
            let v = serde_json::to_value(&r).unwrap();
            let e = errors(&diag, &v);
            assert!(e.is_empty(), "{what}: diagnose:\n{}", e.join("\n"));
            summary_counts_findings(&v, &what);
            if let Some(tp) = gdrdoctor::render::topo_paste::build(&r) {
                let v = serde_json::to_value(&tp).unwrap();
                let e = errors(&topo, &v);
                assert!(e.is_empty(), "{what}: topo --nvidia-smi:\n{}", e.join("\n"));
            }
            n += 1;
        }
    }
    assert!(n >= 200, "only {n} damaged variants read");
}
