//! A parsed matrix: its columns, rows, legend, what was repaired and what is not trusted.

use serde::Serialize;
use std::collections::BTreeMap;

/// A matrix cell as nvidia-smi prints it (`SOC` is the pre-2017 name of `SYS`).
pub const CELL_PATTERN: &str = "^(PIX|PXB|PHB|NODE|SYS|SOC|P2C|C2C|X|NV[0-9]+)$";

/// One row of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "row")]
pub struct Row {
    /// `GPU0`, `NIC3`, `mlx5_0`.
    pub label: String,
    /// Line of the row in its file, from 1 (the first line, when a wrapped row was joined).
    #[schemars(range(min = 1))]
    pub line: usize,
    /// One per column; null where the paste does not hold a trustworthy value.
    #[schemars(inner(regex(pattern = CELL_PATTERN)))]
    pub cells: Vec<Option<String>>,
    #[schemars(extend("x-required" = true))]
    pub cpu_affinity: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub numa_affinity: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub gpu_numa_id: Option<String>,
}

/// A parsed matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Matrix {
    /// Device columns in order (`GPU0`.., then `NIC0`.. or RDMA device names).
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    /// `NIC0` -> `mlx5_0` from the NIC legend.
    pub nic_names: BTreeMap<String, String>,
    /// What was repaired, one line each.
    pub repairs: Vec<String>,
    /// What could not be trusted, one line each (cells without a verdict).
    pub problems: Vec<String>,
}

/// One GPU x NIC pair read from the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SmiPair {
    pub gpu: String,
    pub nic: String,
    /// The cell as nvidia-smi printed it (`SOC` read as `SYS`); `?` when the paste does not
    /// hold a trustworthy value. GDR verdicts are `super::verdict`'s, by NCCL's rule.
    pub path: String,
    /// Where the cell came from when it is not the GPU's own row (`NIC2 row`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

impl Matrix {
    /// A GPU x NIC cell missing from a cut GPU row but present in the NIC row is taken from
    /// there (PCIe paths are symmetric); two different values make both untrusted.
    pub(super) fn symmetry(&mut self) {
        let cols = self.columns.clone();
        let mut fills: Vec<(usize, usize, String)> = Vec::new();
        let mut clash: Vec<(usize, usize, usize, usize)> = Vec::new();
        for (ri, r) in self.rows.iter().enumerate() {
            let Some(ci) = cols.iter().position(|c| *c == r.label) else {
                continue;
            };
            for (cj, c) in cols.iter().enumerate() {
                let Some(rj) = self.rows.iter().position(|x| x.label == *c) else {
                    continue;
                };
                if ri >= rj {
                    continue;
                }
                let a = self.rows[ri].cells.get(cj).cloned().flatten();
                let b = self.rows[rj].cells.get(ci).cloned().flatten();
                match (a, b) {
                    (Some(x), Some(y)) if x != y => clash.push((ri, cj, rj, ci)),
                    (None, Some(y)) => fills.push((ri, cj, y)),
                    (Some(x), None) => fills.push((rj, ci, x)),
                    _ => {}
                }
            }
        }
        for (ri, cj, rj, ci) in clash {
            let (a, b) = (self.rows[ri].label.clone(), self.rows[rj].label.clone());
            self.problems.push(format!(
                "{a} x {b} reads {} in {a}'s row but {} in {b}'s: not trusted",
                self.rows[ri].cells[cj].clone().unwrap_or_default(),
                self.rows[rj].cells[ci].clone().unwrap_or_default()
            ));
            self.rows[ri].cells[cj] = None;
            self.rows[rj].cells[ci] = None;
        }
        let mut filled = 0;
        for (r, c, v) in fills {
            if let Some(cell) = self.rows.get_mut(r).and_then(|x| x.cells.get_mut(c)) {
                *cell = Some(v);
                filled += 1;
            }
        }
        if filled > 0 {
            self.repairs.push(format!(
                "{filled} cell(s) missing from one row read from the other device's row (the matrix is symmetric)"
            ));
        }
    }

    pub fn gpus(&self) -> Vec<&String> {
        self.columns
            .iter()
            .filter(|c| c.starts_with("GPU"))
            .collect()
    }
    pub fn nics(&self) -> Vec<&String> {
        self.columns
            .iter()
            .filter(|c| !c.starts_with("GPU"))
            .collect()
    }
    /// The RDMA device behind a column (`NIC0` -> `mlx5_0` by the legend), else the column.
    pub fn nic_name<'a>(&'a self, col: &'a str) -> &'a str {
        self.nic_names.get(col).map(String::as_str).unwrap_or(col)
    }
    pub fn row(&self, label: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.label == label)
    }
    /// The trusted cell at (row, column).
    pub fn cell(&self, row: &str, col: &str) -> Option<&str> {
        let ci = self.columns.iter().position(|c| c == col)?;
        self.row(row)?.cells.get(ci)?.as_deref()
    }
    /// NVLink count between two GPUs (`NV12` -> 12), when the cell says NV.
    pub fn nvlinks(&self, a: &str, b: &str) -> Option<u32> {
        self.cell(a, b)?.strip_prefix("NV")?.parse().ok()
    }
    pub fn pairs(&self) -> Vec<SmiPair> {
        let mut out = Vec::new();
        for g in self.gpus() {
            for n in self.nics() {
                let cell = self.cell(g, n).map(str::to_string);
                out.push(SmiPair {
                    gpu: g.clone(),
                    nic: self.nic_name(n).to_string(),
                    path: cell.unwrap_or_else(|| "?".into()),
                    from: None,
                });
            }
        }
        out
    }
    /// Cells with no trustworthy value, as `GPU3 x NIC2`.
    pub fn unknown_cells(&self) -> Vec<String> {
        let mut out = Vec::new();
        for g in self.gpus() {
            for n in self.nics() {
                if self.cell(g, n).is_none() {
                    out.push(format!("{g} x {n}"));
                }
            }
        }
        out
    }
}
