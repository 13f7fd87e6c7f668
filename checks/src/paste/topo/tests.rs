#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::atoms::is_name;
use super::*;
use proptest::prelude::*;

const HGX: &str = "\
        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    PIX     SYS     0-31,64-95      0               N/A
GPU1    NV18     X      SYS     PIX     32-63,96-127    1               N/A
NIC0    PIX     SYS      X      SYS
NIC1    SYS     PIX     SYS      X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
";

fn cells(m: &Matrix) -> Vec<(String, String, String)> {
    m.pairs()
        .into_iter()
        .map(|p| (p.gpu, p.nic, p.path))
        .collect()
}

#[test]
fn clean_hgx_matrix() {
    let m = parse(HGX).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1", "NIC0", "NIC1"]);
    assert!(m.problems.is_empty(), "{:?}", m.problems);
    assert!(m.repairs.is_empty(), "{:?}", m.repairs);
    assert_eq!(m.nvlinks("GPU0", "GPU1"), Some(18));
    let p = m.pairs();
    assert_eq!(p[0].nic, "mlx5_0");
    assert_eq!(p[0].path, "PIX");
    assert_eq!(p[1].path, "SYS");
    let r = m.row("GPU1").unwrap();
    assert_eq!(r.cpu_affinity.as_deref(), Some("32-63,96-127"));
    assert_eq!(r.numa_affinity.as_deref(), Some("1"));
    assert_eq!(r.gpu_numa_id.as_deref(), Some("N/A"));
}

#[test]
fn glued_cells_and_names_are_split() {
    let t = "\tGPU0\tGPU1\tNIC0NIC1\tCPU Affinity\tNUMA Affinity\n\
                 GPU0\t X \tNV8\tPIXSYS\t0-31\t0\n\
                 GPU1\tNV8\t X \tSYSPIX\t32-63\t1\n";
    let m = parse(t).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1", "NIC0", "NIC1"]);
    assert_eq!(
        cells(&m),
        vec![
            ("GPU0".into(), "NIC0".into(), "PIX".into()),
            ("GPU0".into(), "NIC1".into(), "SYS".into()),
            ("GPU1".into(), "NIC0".into(), "SYS".into()),
            ("GPU1".into(), "NIC1".into(), "PIX".into()),
        ]
    );
    assert!(
        m.repairs.iter().any(|r| r.contains("glued")),
        "{:?}",
        m.repairs
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn nodenode_and_cell_glued_to_cpulist() {
    let t = "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n\
                 GPU0     X      NODENODE0-31 0\n\
                 GPU1    NODE     X      PIX     0-31    0\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "NIC0"), Some("NODE"));
    assert_eq!(m.row("GPU0").unwrap().cpu_affinity.as_deref(), Some("0-31"));
    assert_eq!(m.cell("GPU1", "NIC0"), Some("PIX"));
}

#[test]
fn nv_glued_to_cpulist_is_ambiguous_and_left_unknown() {
    // `NV180-31` is NV18 + 0-31 or NV1 + 80-31: not split, so the row stops early.
    let t = "        GPU0    GPU1    CPU Affinity\nGPU0     X      NV180-31\nGPU1    NV18     X      0-31\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "GPU1"), Some("NV18"), "read from GPU1's row");
    assert!(m.repairs.iter().any(|r| r.contains("symmetric")));
}

#[test]
fn wrapped_row_is_joined() {
    let t = "        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity\n\
                 GPU0     X      NV8     PIX\n\
                 SYS     0-31    0\n\
                 GPU1    NV8      X      SYS     PIX     32-63   1\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "NIC1"), Some("SYS"));
    assert_eq!(m.row("GPU0").unwrap().cpu_affinity.as_deref(), Some("0-31"));
    assert!(
        m.repairs.iter().any(|r| r.contains("wrapped")),
        "{:?}",
        m.repairs
    );
    assert!(m.problems.is_empty(), "{:?}", m.problems);
}

#[test]
fn wrapped_header_is_joined() {
    let t = "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n        GPU NUMA ID\n\
                 GPU0     X      NV8     PIX     0-31    0       N/A\n\
                 GPU1    NV8      X      SYS     32-63   1       N/A\n";
    let m = parse(t).unwrap();
    assert_eq!(m.columns.len(), 3);
    assert_eq!(m.row("GPU1").unwrap().gpu_numa_id.as_deref(), Some("N/A"));
    assert!(m.repairs.iter().any(|r| r.contains("header wrapped")));
}

#[test]
fn cut_rows_are_unknown_not_guessed() {
    let t = "        GPU0    GPU1    GPU2    NIC0    NIC1\n\
                 GPU0     X      NV8     NV8     PIX     SYS\n\
                 GPU1    NV8      X      NV8     NO\n\
                 GPU2    NV8     NV8      X\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "NIC0"), Some("PIX"));
    assert_eq!(m.cell("GPU1", "NIC0"), None, "NO is not a cell value");
    assert_eq!(m.cell("GPU2", "NIC1"), None);
    let p = m.pairs();
    assert_eq!(p.iter().filter(|p| p.path == "?").count(), 4);
    assert!(m
        .problems
        .iter()
        .any(|x| x.contains("GPU1") && x.contains("unreadable")));
}

#[test]
fn nic_row_fills_a_cut_gpu_row() {
    let t = "        GPU0    GPU1    NIC0\n\
                 GPU0     X      NV8     PIX\n\
                 GPU1    NV8      X\n\
                 NIC0    PIX     SYS      X\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU1", "NIC0"), Some("SYS"));
}

#[test]
fn contradicting_rows_are_not_trusted() {
    let t = "        GPU0    NIC0\nGPU0     X      PIX\nNIC0    SYS      X\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "NIC0"), None);
    assert!(m.problems.iter().any(|p| p.contains("not trusted")));
}

#[test]
fn misaligned_row_is_not_trusted() {
    let t =
        "        GPU0    GPU1    NIC0\nGPU0     X      NV8     PIX\nGPU1     X      NV8     SYS\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU1", "NIC0"), None);
    assert!(m.problems.iter().any(|p| p.contains("diagonal")));
}

#[test]
fn lost_header_rebuilt_from_nic_rows() {
    let t = "GPU0     X      NV8     PIX     SYS     0-31    0\n\
                 GPU1    NV8      X      SYS     PIX     32-63   1\n\
                 NIC0    PIX     SYS      X      SYS\n\
                 NIC1    SYS     PIX     SYS      X\n\
                 NIC Legend:\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n";
    let m = parse(t).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1", "NIC0", "NIC1"]);
    assert!(m.repairs.iter().any(|r| r.contains("header line missing")));
    assert_eq!(m.pairs()[0].nic, "mlx5_0");
    assert_eq!(m.cell("GPU1", "NIC1"), Some("PIX"));
}

#[test]
fn lost_header_without_nic_names_reads_what_the_rows_show() {
    // Only the GPU rows, no header, no NIC rows, no legend: the GPU columns are named by the
    // rows' X diagonal; the columns after them (GPUs whose rows are cut, or NICs) are unknown.
    let t =
        "GPU0     X      NV8     PIX     0-31    0\nGPU1    NV8      X      SYS     32-63   1\n";
    let m = parse(t).unwrap();
    assert_eq!(m.columns, vec!["GPU0", "GPU1"]);
    assert_eq!(m.nvlinks("GPU0", "GPU1"), Some(8));
    assert_eq!(m.cell("GPU1", "GPU0"), Some("NV8"));
    assert!(m.nics().is_empty());
    assert!(m.repairs.iter().any(|r| r.contains("header line missing")));
    assert!(
        m.problems
            .iter()
            .any(|p| p.contains("header line missing") && p.contains("1 column(s) after GPU1")),
        "{:?}",
        m.problems
    );
    assert_eq!(
        m.row("GPU1").unwrap().cpu_affinity.as_deref(),
        Some("32-63")
    );
    // One GPU row alone: GPU0's own column, the rest unknown.
    let m = parse("GPU0     X      PXB     SYS     0-31,64-95      0               N/A\n").unwrap();
    assert_eq!(m.columns, vec!["GPU0"]);
    assert!(m
        .problems
        .iter()
        .any(|p| p.contains("2 column(s) after GPU0")));
}

#[test]
fn header_gap_distrusts_later_columns() {
    let t = "        GPU0    GPU1    NIC0    NIC2\nGPU0     X      NV8     PIX     SYS\nGPU1    NV8      X      SYS     PIX\n";
    let m = parse(t).unwrap();
    assert_eq!(m.cell("GPU0", "NIC0"), Some("PIX"));
    assert_eq!(m.cell("GPU0", "NIC2"), None);
    assert!(m.problems.iter().any(|p| p.contains("skips")));
}

#[test]
fn surplus_cells_refuse_the_matrix() {
    let t = "        GPU0    NIC0\nGPU0     X      PIX     SYS\n";
    let m = parse(t).unwrap();
    assert!(m.rows.is_empty());
    assert!(m.problems.iter().any(|p| p.contains("more cells")));
}

#[test]
fn legacy_header_with_rdma_names_and_soc() {
    let t = "        GPU0    GPU1    mlx5_0  rocep1s0f0  CPU Affinity\n\
                 GPU0     X      PHB     SOC     PIX     0-11\n\
                 GPU1    PHB      X      SOC     PIX     0-11\n\
                 mlx5_0  SOC     SOC      X      SOC\n\
                 rocep1s0f0 PIX  PIX     SOC      X\n";
    let m = parse(t).unwrap();
    assert_eq!(m.nics(), vec!["mlx5_0", "rocep1s0f0"]);
    assert_eq!(m.cell("GPU0", "mlx5_0"), Some("SYS"));
    assert!(m.repairs.iter().any(|r| r.contains("SOC")));
    assert_eq!(m.cell("GPU1", "rocep1s0f0"), Some("PIX"));
}

#[test]
fn every_rdma_name_family_is_a_name() {
    for n in [
        "mlx5_0",
        "mlx5_bond_0",
        "mlx4_1",
        "rocep1s0f0",
        "ibp12s0",
        "hfi1_0",
        "bnxt_re0",
        "irdma0",
        "qedr0",
        "efa_0",
        "erdma_0",
        "ionic_0",
    ] {
        assert!(is_name(n), "{n}");
    }
    for n in ["GPU", "NIC", "CPU", "PIX", "0-31", "mlx5"] {
        assert!(!is_name(n), "{n}");
    }
}

#[test]
fn rejects_text_without_a_matrix() {
    assert!(parse("no matrix here").is_none());
    assert!(parse("").is_none());
}

proptest! {
    #[test]
    fn never_panics(s in "\\PC{0,400}") {
        let _ = parse(&s).map(|m| (m.pairs(), m.unknown_cells()));
    }

    #[test]
    fn never_invents_a_cell(rows in proptest::collection::vec("(GPU[0-3]|NIC[0-2]|mlx5_[0-9]| X |PIX|SYS|NODE|NV4|PXB|\\t| |0-31|N/A|junk)*", 0..10)) {
        let text = format!("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n{}", rows.join("\n"));
        if let Some(m) = parse(&text) {
            // Every trusted cell is a value some line of the text holds, at some place.
            for p in m.pairs() {
                if p.path != "?" {
                    prop_assert!(text.contains(&p.path) || (p.path == "SYS" && text.contains("SOC")), "{} not in the text", p.path);
                }
            }
        }
    }

    #[test]
    fn damage_never_turns_a_cell_into_another(cut in 0usize..200, glue in proptest::bool::ANY) {
        // Cut the clean HGX matrix anywhere and optionally glue its cells: every cell that
        // survives with a value has the value of the clean matrix.
        let clean = parse(HGX).unwrap();
        let mut t: String = HGX.chars().take(cut.min(HGX.len())).collect();
        if glue { t = t.replace("    PIX     SYS", "PIXSYS"); }
        if let Some(m) = parse(&t) {
            for p in m.pairs() {
                if p.path != "?" {
                    let want = clean.pairs().into_iter().find(|q| q.gpu == p.gpu && q.nic == p.nic);
                    if let Some(w) = want {
                        prop_assert_eq!(&p.path, &w.path);
                    }
                }
            }
            if let Some(n) = m.nvlinks("GPU0", "GPU1") {
                prop_assert_eq!(n, 18);
            }
            for r in &m.rows {
                if let (Some(a), Some(b)) = (&r.cpu_affinity, clean.row(&r.label).and_then(|x| x.cpu_affinity.clone())) {
                    prop_assert_eq!(a, &b);
                }
            }
        }
    }
}
