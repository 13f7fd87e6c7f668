//! Reading a pasted `nvidia-smi topo -m` matrix (evidence mode): users paste it into tickets,
//! and it is all a support engineer may have. From it we can tell what NCCL's distance rule
//! says per GPU x NIC pair (PIX/PXB within the default threshold; PHB, NODE, SYS not), and
//! whether the rails are balanced. Everything else (peer memory, dma-buf, ports) is unknown.
//!
//! The parser accepts the space- or tab-separated forms of several driver generations, ANSI
//! escapes (nvidia-smi underlines the header on a terminal), CRLF, `NIC Legend` maps
//! (`NIC0: mlx5_0`), and matrices cut short by a terminal. It never panics (property-tested).

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Matrix {
    /// Column names in order (`GPU0`.., `NIC0`.. or `mlx5_0`..).
    pub columns: Vec<String>,
    /// Row name -> cells, one per column (missing cells of a truncated copy are absent).
    pub rows: BTreeMap<String, Vec<String>>,
    /// `NIC0` -> `mlx5_0` from the NIC legend.
    pub nic_names: BTreeMap<String, String>,
    /// NUMA affinity per GPU row, when the row has it.
    pub numa: BTreeMap<String, String>,
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... letter
            if chars.peek() == Some(&'[') {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

fn is_device_name(t: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    t.strip_prefix("GPU").is_some_and(digits)
        || t.strip_prefix("NIC").is_some_and(digits)
        || (t.starts_with("mlx") && t.contains('_'))
        || t.starts_with("bnxt_")
        || t.starts_with("irdma")
}

pub fn parse(text: &str) -> Option<Matrix> {
    let clean = strip_ansi(text);
    let mut lines = clean.lines();
    // The header: the first line whose first token is GPU0.
    let header = lines
        .by_ref()
        .find(|l| l.split_whitespace().next() == Some("GPU0"))?;
    let columns: Vec<String> = header
        .split_whitespace()
        .take_while(|t| is_device_name(t))
        .map(str::to_string)
        .collect();
    if columns.is_empty() {
        return None;
    }
    let mut rows = BTreeMap::new();
    let mut numa = BTreeMap::new();
    let mut nic_names = BTreeMap::new();
    for l in lines {
        let toks: Vec<&str> = l.split_whitespace().collect();
        let Some(first) = toks.first() else { continue };
        if let Some(rest) = first.strip_suffix(':') {
            // NIC legend: "NIC0: mlx5_0"
            if rest.starts_with("NIC") {
                if let Some(name) = toks.get(1) {
                    nic_names.insert(rest.to_string(), name.to_string());
                }
            }
            continue;
        }
        if !is_device_name(first) {
            continue;
        }
        let cells: Vec<String> = toks[1..]
            .iter()
            .take(columns.len())
            .map(|s| s.to_string())
            .collect();
        if first.starts_with("GPU") {
            if let Some(n) = toks.get(1 + columns.len() + 1) {
                numa.insert(first.to_string(), n.to_string());
            }
        }
        rows.insert(first.to_string(), cells);
    }
    Some(Matrix {
        columns,
        rows,
        nic_names,
        numa,
    })
}

/// One GPU x NIC pair read from the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SmiPair {
    pub gpu: String,
    pub nic: String,
    /// The cell as nvidia-smi printed it.
    pub path: String,
    /// Within NCCL's default GDR distance (PIX/PXB); `None` for a cell we cannot read.
    pub gdr_by_distance: Option<bool>,
}

impl Matrix {
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
    pub fn nic_name<'a>(&'a self, col: &'a str) -> &'a str {
        self.nic_names.get(col).map(String::as_str).unwrap_or(col)
    }
    pub fn pairs(&self) -> Vec<SmiPair> {
        let mut out = Vec::new();
        for g in self.gpus() {
            let row = self.rows.get(g);
            for n in self.nics() {
                let idx = self.columns.iter().position(|c| c == n);
                let cell = row.and_then(|r| idx.and_then(|i| r.get(i))).cloned();
                let gdr = cell.as_deref().and_then(|c| match c {
                    "PIX" | "PXB" => Some(true),
                    "PHB" | "NODE" | "SYS" => Some(false),
                    _ => None,
                });
                out.push(SmiPair {
                    gpu: g.clone(),
                    nic: self.nic_name(n).to_string(),
                    path: cell.unwrap_or_else(|| "?".into()),
                    gdr_by_distance: gdr,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_tabs_ansi_and_legend() {
        let t = "\u{1b}[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\u{1b}[0m\r\nGPU0\t X \tNV8\tPIX\t0-31\t0\r\nGPU1\tNV8\t X \tSYS\t32-63\t1\r\nNIC0\tPIX\tSYS\t X\r\n\r\nNIC Legend:\r\n\r\n  NIC0: mlx5_0\r\n";
        let m = parse(t).unwrap();
        assert_eq!(m.columns, vec!["GPU0", "GPU1", "NIC0"]);
        let p = m.pairs();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].nic.as_str(), p[0].path.as_str(), p[0].gdr_by_distance),
            ("mlx5_0", "PIX", Some(true))
        );
        assert_eq!(p[1].gdr_by_distance, Some(false));
        assert_eq!(m.numa.get("GPU1").map(String::as_str), Some("1"));
    }

    #[test]
    fn rejects_text_without_a_matrix() {
        assert!(parse("no matrix here").is_none());
        assert!(parse("").is_none());
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let _ = parse(&s).map(|m| m.pairs());
        }
        #[test]
        fn never_panics_on_matrix_like_text(rows in proptest::collection::vec("(GPU[0-9]|NIC[0-9]|mlx5_[0-9]| X |PIX|SYS|NODE|\\t| )*", 0..12)) {
            let text = format!("\tGPU0\tGPU1\tNIC0\n{}", rows.join("\n"));
            let _ = parse(&text).map(|m| m.pairs());
        }
    }
}
