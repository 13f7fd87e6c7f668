//! `nvidia-smi topo -m` matrices: real ones, and every damaged variant of them.

use super::*;

fn matrix_files() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(pastes())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("topo"))
        .map(|n| (n.clone(), text(&n)))
        .collect();
    if let Some(rd) = realdata() {
        for rel in [
            "sglang-30401-hgx-h100/nvidia-smi-topo-m.txt",
            "llm-action-a800x8-4nic-topo/nvidia-smi-topo-m.txt",
            "oyanghd-a100x8-epyc7742-topo/nvidia-smi-topo-m.txt",
            "stelline-asus-esc8000a-e12/12-nvidia-smi_topo_-m.txt",
            "stelline-puget-threadripper-pro-wrx90/08-nvidia-smi_topo_-m.txt",
            "nccl-1737-h100-gdr-hang-excerpt/nvidia-smi-topo-m.TRUNCATED.txt",
            "blog-8gpu-pcie-switch-cx6-topo/nvidia-smi-topo-mp.host-a.txt",
            "blog-8gpu-pcie-switch-cx6-topo/nvidia-smi-topo-m.host-b.txt",
        ] {
            if let Ok(t) = std::fs::read_to_string(rd.join(rel)) {
                v.push((rel.to_string(), t));
            }
        }
    }
    v
}

/// Every cell (GPU x GPU and GPU x NIC) a matrix holds, by (row, column name).
fn cells(m: &Matrix) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for r in &m.rows {
        for (i, c) in r.cells.iter().enumerate() {
            if let Some(c) = c {
                let col = m.columns[i].clone();
                out.insert((r.label.clone(), col), c.clone());
            }
        }
    }
    out
}

fn first_matrix(t: &str) -> Option<Matrix> {
    let p = paste::read(&[input("x", t.to_string())]);
    p.matrices.into_iter().next().map(|x| x.1)
}

/// Damage a text the way terminals and trackers do.
fn damaged(t: &str) -> Vec<(&'static str, String, bool)> {
    // (name, text, whether every cell must survive)
    let lines: Vec<&str> = t.lines().collect();
    let wrap = |w: usize| -> String {
        lines
            .iter()
            .flat_map(|l| {
                let c: Vec<char> = l.chars().collect();
                c.chunks(w)
                    .map(|x| x.iter().collect::<String>())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let header = lines
        .iter()
        .position(|l| gdrdoctor_checks::paste::topo::is_header(l.trim()));
    let mut v = vec![
        ("crlf", t.replace('\n', "\r\n"), true),
        (
            "ansi header",
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    if Some(i) == header {
                        format!("\u{1b}[4m{l}\u{1b}[0m")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        (
            "markdown quote",
            lines
                .iter()
                .map(|l| format!("> {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        (
            "code comment",
            lines
                .iter()
                .map(|l| format!("// {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            true,
        ),
        ("tabs to one space", t.replace('\t', " "), true),
        ("tabs lost", t.replace('\t', "").replace("    ", ""), true),
        ("wrap 80", wrap(80), true),
        ("wrap 120", wrap(120), true),
        (
            "rows cut at 60 columns",
            lines
                .iter()
                .map(|l| l.chars().take(60).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
        (
            "header lost",
            lines
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != header)
                .map(|(_, l)| *l)
                .collect::<Vec<_>>()
                .join("\n"),
            false,
        ),
        ("doubled (two nodes)", format!("{t}\n{t}"), true),
    ];
    // Glued cells: two spaces of padding lost between every pair of cells.
    v.push((
        "cells glued",
        t.replace("    PIX", "PIX").replace("    NODE", "NODE"),
        true,
    ));
    v
}

#[test]
fn every_real_matrix_parses_or_is_refused_with_a_reason() {
    let files = matrix_files();
    assert!(files.len() >= 9, "{}", files.len());
    for (name, t) in &files {
        let p = paste::read(&[input(name, t.clone())]);
        let blocks: Vec<_> = p
            .blocks
            .iter()
            .filter(|b| b.kind == Kind::TopoMatrix)
            .collect();
        assert!(!blocks.is_empty(), "{name}: no matrix block");
        for b in blocks {
            match b.status {
                BlockStatus::Refused | BlockStatus::Incomplete => {
                    assert!(
                        !b.problems.is_empty(),
                        "{name}: {:?} without a reason",
                        b.status
                    )
                }
                _ => {}
            }
        }
    }
}

#[test]
fn damaged_variants_never_change_a_cell() {
    for (name, t) in matrix_files() {
        let Some(clean) = first_matrix(&t) else {
            continue;
        };
        let want = cells(&clean);
        for (how, d, keep_all) in damaged(&t) {
            let Some(m) = first_matrix(&d) else {
                assert!(!keep_all, "{name} / {how}: the matrix was lost");
                continue;
            };
            let got = cells(&m);
            for (k, v) in &got {
                if let Some(w) = want.get(k) {
                    assert_eq!(v, w, "{name} / {how}: cell {k:?} changed");
                } else {
                    // A cell the clean paste does not hold may only appear from the symmetric
                    // row (the clean one has it there too).
                    let sym = (k.1.clone(), k.0.clone());
                    assert!(
                        want.get(&sym).is_some_and(|w| w == v),
                        "{name} / {how}: invented cell {k:?} = {v}"
                    );
                }
            }
            if keep_all {
                let lost: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
                assert!(lost.is_empty(), "{name} / {how}: cells lost: {lost:?}");
            }
        }
    }
}

#[test]
fn glued_and_wrapped_cells_are_repaired_not_lost() {
    let t = text("nccl-pr2150-topo-pxb-cut.txt");
    let clean = cells(&first_matrix(&t).unwrap());
    // Tabs lost between cells: PXBNODE, NODENODE.
    let glued = t
        .replace("PXB     NODE", "PXBNODE")
        .replace("NODE    NODE", "NODENODE");
    let m = first_matrix(&glued).unwrap();
    assert_eq!(cells(&m), clean);
    let p = paste::read(&[input("g", glued)]);
    assert!(p.blocks[0].repairs.iter().any(|r| r.contains("glued")));
    // A row wrapped onto the next line is joined.
    let t = text("nccl-933-topo-9nic-cut.txt");
    let clean = cells(&first_matrix(&t).unwrap());
    let wrapped = t.replace(
        "NODE    SYS     PIX     SYS     NODE    SYS     NODE    SYS     NODE    0-47",
        "NODE    SYS     PIX     SYS\nNODE    SYS     NODE    SYS     NODE    0-47",
    );
    assert_ne!(wrapped, t);
    assert_eq!(cells(&first_matrix(&wrapped).unwrap()), clean);
}

#[test]
fn two_matrices_are_two_blocks_with_their_own_pairs() {
    let a = text("nccl-1435-topo-pxb-numa.txt");
    let b = text("nccl-pr2150-topo-pxb-cut.txt");
    let r = diagnose(
        &[input("two.txt", format!("{a}\n\n{b}"))],
        &RunOptions::default(),
    );
    assert_eq!(r.matrices.len(), 2);
    let blocks: std::collections::BTreeSet<&str> = r.gdr.iter().map(|p| p.block.as_str()).collect();
    assert_eq!(blocks.len(), 2);
    // Subjects say which block they are about.
    assert!(r
        .findings
        .iter()
        .any(|f| f.id == "topo.nic-distance" && f.subject.starts_with("b1:")));
}

#[test]
fn real_matrices_give_the_expected_cells() {
    let m = first_matrix(&text("nccl-2157-topo-18nic-cut.txt")).unwrap();
    for n in ["NIC5", "NIC6", "NIC7", "NIC8"] {
        assert_eq!(m.cell("GPU0", n), Some("PXB"), "{n}");
    }
    assert_eq!(m.cell("GPU2", "NIC1"), Some("PXB"));
    assert_eq!(m.cell("GPU4", "NIC0"), Some("SYS"));
    assert_eq!(m.cell("GPU4", "NIC8"), None, "cut");
    assert_eq!(m.nvlinks("GPU0", "GPU7"), Some(12));
    let m = first_matrix(&text("deepep-60-topo-mp-14nic-cut.txt")).unwrap();
    assert_eq!(m.cell("GPU3", "NIC7"), Some("PIX"));
    assert_eq!(m.cell("GPU4", "NIC7"), None, "`SY` is cut, not read");
    let m = first_matrix(&text("sglang-13973-topo-nv18-cut.txt")).unwrap();
    assert_eq!(m.cell("GPU3", "NIC4"), Some("PIX"));
    assert_eq!(m.cell("GPU6", "NIC0"), None);
    let m = first_matrix(&text("club3090-1229-topo-tabs-no-nic.txt")).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1"]);
    assert_eq!(m.cell("GPU0", "GPU1"), Some("PHB"));
    assert!(m.pairs().is_empty());
}
