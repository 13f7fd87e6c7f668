//! `nvidia-smi topo -m` / `topo -mp` / `topo --matrix`, as printed by every driver generation
//! and as it arrives after a trip through a terminal and an issue tracker.
//!
//! The matrix has one header line naming the device columns (`GPU0 .. GPUn`, then `NIC0 ..`
//! with a `NIC Legend` mapping them to RDMA devices, or, on older drivers, the RDMA device
//! names themselves: `mlx5_0`, `rocep1s0f0`, `ibp12s0`, `hfi1_0`, `bnxt_re0`, `irdma0`,
//! `qedr0`, `efa_0`, `erdma_0`, `ionic_0`), then `CPU Affinity`, `NUMA Affinity` and (from
//! R525 or so) `GPU NUMA ID`. Each row repeats a device name, one cell per column (`X` on the
//! diagonal, `NV<n>`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, `P2C`, and `SOC`, the pre-2017 name
//! of `SYS`), then the row's affinities.
//!
//! Repairs, each only when the result is unambiguous, each recorded in [`Matrix::repairs`]:
//! cells or names glued together when tabs were lost (`NODENODE`, `PIXPIX`, `NIC7NIC8`); a
//! header or a row hard-wrapped onto the next line (joined only when the joined row has exactly
//! one cell per column); a lost header line (columns rebuilt from the GPU rows' `X` diagonal
//! and the NIC rows or the legend); a GPU x NIC cell missing from a cut GPU row but present in
//! the NIC's row (the matrix is symmetric). What cannot be repaired is `None`: a cell cut off
//! or unreadable, a row whose `X` is not on its diagonal, a row with more cells than the header
//! has columns. Such cells get no verdict. The parser never panics (property-tested).

use super::clean::Line;
use serde::Serialize;
use std::collections::BTreeMap;

/// Known RDMA device name prefixes (legacy headers name the devices directly).
pub const RDMA_PREFIXES: &[&str] = &[
    "mlx5_bond_",
    "mlx5_",
    "mlx4_",
    "rocep",
    "roceP",
    "ibp",
    "hfi1_",
    "bnxt_re",
    "irdma",
    "qedr",
    "efa_",
    "erdma_",
    "ionic_",
    "rxe",
    "siw",
    "mana_",
    "cxgb4_",
    "i40iw",
    "hns_",
    "vmw_pvrdma",
    "ocrdma",
];

/// A cell value nvidia-smi prints, or an RDMA device name, or something else.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Atom {
    Name(String),
    Cell(String),
    Other(String),
}

const CELLS: &[&str] = &["NODE", "SYS", "SOC", "PIX", "PXB", "PHB", "P2C", "C2C", "X"];

fn digits_len(s: &str) -> usize {
    s.bytes().take_while(|b| b.is_ascii_digit()).count()
}

/// The longest cell value at the start of `s`: `(value, bytes used)`.
fn cell_prefix(s: &str) -> Option<(String, usize)> {
    if let Some(r) = s.strip_prefix("NV") {
        let n = digits_len(r);
        if n > 0 {
            return Some((s[..2 + n].to_string(), 2 + n));
        }
        return None;
    }
    CELLS
        .iter()
        .find(|c| s.starts_with(**c))
        .map(|c| (c.to_string(), c.len()))
}

/// Whether `s` is a device name as a whole: `GPU3`, `NIC12`, `mlx5_0`, `rocep1s0f0`.
pub fn is_name(s: &str) -> bool {
    let num = |p: &str| {
        s.strip_prefix(p)
            .is_some_and(|r| !r.is_empty() && digits_len(r) == r.len())
    };
    if num("GPU") || num("NIC") {
        return true;
    }
    RDMA_PREFIXES.iter().any(|p| {
        s.strip_prefix(p).is_some_and(|r| {
            (!r.is_empty() || p.ends_with(|c: char| c.is_ascii_digit()))
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

/// Positions in `s` where a device name starts (`GPU<d>`, `NIC<d>`, an RDMA prefix).
fn name_starts(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let gpu_nic = (rest.starts_with("GPU") || rest.starts_with("NIC"))
            && b.get(i + 3).is_some_and(|c| c.is_ascii_digit());
        let rdma = RDMA_PREFIXES.iter().find(|p| rest.starts_with(**p));
        if gpu_nic {
            out.push(i);
            i += 3;
        } else if let Some(p) = rdma {
            out.push(i);
            i += p.len();
        } else {
            i += rest.chars().next().map(char::len_utf8).unwrap_or(1);
        }
    }
    out
}

/// Split a whitespace token into names glued together (`NIC7NIC8`, `mlx5_0mlx5_1`), and the
/// header word glued after the last one (`NIC5CPU`). `None` when the token does not start with
/// names.
fn split_names(tok: &str) -> Option<(Vec<String>, Option<String>)> {
    let starts = name_starts(tok);
    if starts.first() != Some(&0) {
        return None;
    }
    let mut out = Vec::new();
    for (k, s) in starts.iter().enumerate() {
        let e = starts.get(k + 1).copied().unwrap_or(tok.len());
        let piece = &tok[*s..e];
        if is_name(piece) {
            out.push(piece.to_string());
            continue;
        }
        // The last piece may carry a glued header word: `NIC5CPU` -> NIC5 + CPU.
        let last = k + 1 == starts.len();
        let head = if piece.starts_with("GPU") || piece.starts_with("NIC") {
            3 + digits_len(&piece[3..])
        } else {
            0
        };
        if last && head > 3 && piece[head..].starts_with(|c: char| c.is_ascii_uppercase()) {
            out.push(piece[..head].to_string());
            return Some((out, Some(piece[head..].to_string())));
        }
        return None;
    }
    Some((out, None))
}

/// Split a token into cell values glued together (`NODENODE`, `PIXSYS`, `NV8NV8`). A cell may
/// be followed by a CPU list (`SYS0-31`) unless it ends in digits (`NV180-31` is ambiguous).
fn split_cells(tok: &str) -> Option<(Vec<String>, Option<String>)> {
    let mut rest = tok;
    let mut cells = Vec::new();
    while !rest.is_empty() {
        match cell_prefix(rest) {
            Some((c, n)) => {
                rest = &rest[n..];
                let ends_digit = c.ends_with(|ch: char| ch.is_ascii_digit());
                cells.push(c);
                if !rest.is_empty() && is_cpulist(rest) && !ends_digit {
                    return Some((cells, Some(rest.to_string())));
                }
            }
            None => return None,
        }
    }
    Some((cells, None))
}

/// A CPU or NUMA affinity value: `0-31,64-95`, `0`, `N/A`.
fn is_cpulist(s: &str) -> bool {
    s == "N/A"
        || (!s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_digit() || c == '-' || c == ','))
}

fn atoms(line: &str) -> (Vec<Atom>, bool) {
    let mut out = Vec::new();
    let mut glued = false;
    for tok in line.split_whitespace() {
        if is_name(tok) {
            out.push(Atom::Name(tok.to_string()));
            continue;
        }
        if let Some((c, n)) = cell_prefix(tok) {
            if n == tok.len() {
                out.push(Atom::Cell(c));
                continue;
            }
        }
        if let Some((names, None)) = split_names(tok) {
            glued = true;
            out.extend(names.into_iter().map(Atom::Name));
            continue;
        }
        if let Some((cells, tail)) = split_cells(tok) {
            glued = true;
            out.extend(cells.into_iter().map(Atom::Cell));
            if let Some(t) = tail {
                out.push(Atom::Other(t));
            }
            continue;
        }
        // A name glued to a cell (`GPU0X`, `NIC3PIX`): the name's digits end where a cell
        // value begins, which is unambiguous because no cell value starts with a digit.
        let starts = name_starts(tok);
        if starts.first() == Some(&0) && starts.len() == 1 {
            let head_len = if tok.starts_with("GPU") || tok.starts_with("NIC") {
                3 + digits_len(&tok[3..])
            } else {
                0
            };
            if head_len > 3 {
                if let Some((cells, tail)) = split_cells(&tok[head_len..]) {
                    glued = true;
                    out.push(Atom::Name(tok[..head_len].to_string()));
                    out.extend(cells.into_iter().map(Atom::Cell));
                    if let Some(t) = tail {
                        out.push(Atom::Other(t));
                    }
                    continue;
                }
            }
        }
        // Names with a header word glued after them (`NIC5CPU`).
        if let Some((names, Some(tail))) = split_names(tok) {
            glued = true;
            out.extend(names.into_iter().map(Atom::Name));
            out.push(Atom::Other(tail));
            continue;
        }
        out.push(Atom::Other(tok.to_string()));
    }
    (out, glued)
}

/// One row of the matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// `GPU0`, `NIC3`, `mlx5_0`.
    pub label: String,
    /// Line of the row in its file (the first line, when a wrapped row was joined).
    pub line: usize,
    /// One per column; `None` where the paste does not hold a trustworthy value.
    pub cells: Vec<Option<String>>,
    pub cpu_affinity: Option<String>,
    pub numa_affinity: Option<String>,
    pub gpu_numa_id: Option<String>,
}

/// A parsed matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// Whether a first token starts a matrix row (a device name, possibly glued to a cell).
pub fn row_label(line: &str) -> Option<String> {
    let (a, _) = atoms(line);
    match a.first() {
        Some(Atom::Name(n)) => Some(n.clone()),
        _ => None,
    }
}

/// Whether a line is the matrix header: starts with `GPU0` (possibly glued to more names) and
/// every token until the affinity columns is a device name.
pub fn is_header(line: &str) -> bool {
    let (a, _) = atoms(line);
    if a.first() != Some(&Atom::Name("GPU0".into())) {
        return false;
    }
    // A header has no cell values; a row `GPU0 X NV8 ..` does.
    !a.iter().any(|x| matches!(x, Atom::Cell(_)))
}

/// Whether a line is a continuation of a wrapped header: names and affinity words only.
fn header_continuation(line: &str) -> bool {
    let (a, _) = atoms(line);
    // Words of the affinity columns, or pieces of them cut by a hard wrap (`NUMA Aff` + `inity`).
    // A name cut by the wrap leaves its tail first (`NI` + `C2`): short alphanumeric pieces.
    let fragment = |o: &str| {
        ["CPU", "Affinity", "NUMA", "GPU", "ID"]
            .iter()
            .any(|w| w.starts_with(o) || w.ends_with(o))
            || (o.len() <= 8 && o.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    };
    !a.is_empty()
        && a.iter().all(|x| match x {
            Atom::Name(_) => true,
            Atom::Other(o) => fragment(o),
            Atom::Cell(_) => false,
        })
        && !matches!(a.first(), Some(Atom::Name(n)) if n == "GPU0")
        && !is_legend_line(line)
}

/// How much of a header a text reads: (device names in sequence, affinity fields).
fn header_score(text: &str) -> (usize, usize) {
    let (a, _) = atoms(text);
    let n = a.iter().take_while(|x| matches!(x, Atom::Name(_))).count();
    (n, trailing_fields(&a[n..]).len())
}

/// Join a hard-wrapped continuation: with a space (the break fell between tokens) or without
/// (the break cut a token). `None` when neither reading is clean or they disagree on the cells.
fn join_row(cur: &str, next: &str, ncols: usize) -> Option<(String, bool)> {
    let cands = [
        format!("{cur} {}", next.trim()),
        format!("{cur}{}", next.trim_start()),
    ];
    let ok: Vec<(String, RawRow)> = cands
        .into_iter()
        .filter_map(|c| {
            let (a, _) = atoms(&c);
            let r = raw_row(&a, 0)?;
            // A reading is clean when everything after the cells is an affinity value, or
            // when the cells are still short of the columns and only the last token is odd
            // (it may continue on the next line).
            let clean = !r.junk || (r.cells.len() < ncols && r.rest.len() <= 1);
            (clean && r.cells.len() <= ncols).then_some((c, r))
        })
        .collect();
    match ok.as_slice() {
        [] => None,
        [(c, _)] => Some((c.clone(), false)),
        [(c1, r1), (c2, r2)] => {
            if r1.cells != r2.cells {
                return None;
            }
            // Same cells; affinity values may differ (`..,96-143` + `0` is `96-143 0` or
            // `96-1430`): keep the spaced reading and mark the affinities uncertain.
            let _ = c2;
            Some((c1.clone(), r1.rest != r2.rest))
        }
        _ => None,
    }
}

/// `NIC0: mlx5_0` legend entries.
pub fn legend_entry(line: &str) -> Option<(String, String)> {
    let t = line.trim();
    let (k, v) = t.split_once(':')?;
    let k = k.trim();
    let v = v.trim();
    if k.strip_prefix("NIC")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        && !v.is_empty()
        && !v.contains(char::is_whitespace)
    {
        Some((k.to_string(), v.to_string()))
    } else {
        None
    }
}

/// Whether a line belongs to the legend nvidia-smi prints under the matrix.
pub fn is_legend_line(line: &str) -> bool {
    let t = line.trim();
    t == "Legend:"
        || t == "NIC Legend:"
        || legend_entry(t).is_some()
        || t.split_once('=').is_some_and(|(k, _)| {
            let k = k.trim();
            [
                "X", "SYS", "SOC", "NODE", "PHB", "PXB", "PIX", "NV#", "P2C", "PSB", "C2C",
            ]
            .contains(&k)
        })
}

/// Trailing affinity fields of a header, in order.
fn trailing_fields(header_rest: &[Atom]) -> Vec<&'static str> {
    let words: Vec<&str> = header_rest
        .iter()
        .filter_map(|a| match a {
            Atom::Other(o) => Some(o.as_str()),
            _ => None,
        })
        .collect();
    // Compared without spaces, so `CPU AffinityNUMA Affinity` (tabs lost) reads too.
    let joined: String = words.concat();
    let mut out = Vec::new();
    let mut rest = joined.as_str();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("CPUAffinity") {
            out.push("cpu");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("NUMAAffinity") {
            out.push("numa");
            rest = r;
        } else if let Some(r) = rest.strip_prefix("GPUNUMAID") {
            out.push("gpunuma");
            rest = r;
        } else {
            break;
        }
    }
    out
}

fn normalise_cell(c: &str) -> String {
    if c == "SOC" {
        "SYS".to_string()
    } else {
        c.to_string()
    }
}

struct RawRow {
    label: String,
    line: usize,
    cells: Vec<String>,
    rest: Vec<String>,
    /// Cells stopped at something that is not a cell nor an affinity value.
    junk: bool,
}

fn raw_row(a: &[Atom], line: usize) -> Option<RawRow> {
    let label = match a.first() {
        Some(Atom::Name(n)) => n.clone(),
        _ => return None,
    };
    let mut cells = Vec::new();
    let mut i = 1;
    while let Some(Atom::Cell(c)) = a.get(i) {
        cells.push(c.clone());
        i += 1;
    }
    let rest: Vec<String> = a[i..]
        .iter()
        .map(|x| match x {
            Atom::Name(s) | Atom::Cell(s) | Atom::Other(s) => s.clone(),
        })
        .collect();
    let junk = a[i..]
        .iter()
        .any(|x| !matches!(x, Atom::Other(o) if is_cpulist(o)));
    Some(RawRow {
        label,
        line,
        cells,
        rest,
        junk,
    })
}

/// Parse the lines of one matrix block.
pub fn parse_lines(lines: &[Line]) -> Option<Matrix> {
    let mut repairs: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut glued_any = false;
    let mut nic_names = BTreeMap::new();
    let header_at = lines.iter().position(|l| is_header(&l.text));
    // Header columns (possibly continued on the next line).
    let mut columns: Vec<String> = Vec::new();
    let mut fields: Vec<&'static str> = Vec::new();
    let mut body_start = 0;
    if let Some(h) = header_at {
        let mut text = lines[h].text.clone();
        body_start = h + 1;
        while let Some(next) = lines.get(body_start) {
            if !header_continuation(&next.text) {
                break;
            }
            let spaced = format!("{text} {}", next.text.trim());
            let tight = format!("{text}{}", next.text.trim_start());
            text = if header_score(&tight) > header_score(&spaced) {
                tight
            } else {
                spaced
            };
            repairs.push(format!("header wrapped onto line {}: joined", next.no));
            body_start += 1;
        }
        let (a, g) = atoms(&text);
        glued_any |= g;
        let n = a.iter().take_while(|x| matches!(x, Atom::Name(_))).count();
        columns = a[..n]
            .iter()
            .map(|x| match x {
                Atom::Name(s) => s.clone(),
                _ => String::new(),
            })
            .collect();
        fields = trailing_fields(&a[n..]);
    }
    // Rows, joining hard-wrapped continuations.
    let mut raws: Vec<RawRow> = Vec::new();
    let body: Vec<&Line> = lines.iter().skip(body_start).collect();
    let mut i = 0;
    while i < body.len() {
        let l = body[i];
        if let Some((k, v)) = legend_entry(&l.text) {
            nic_names.insert(k, v);
            i += 1;
            continue;
        }
        if is_legend_line(&l.text) {
            i += 1;
            continue;
        }
        let (a, g) = atoms(&l.text);
        let Some(mut r) = raw_row(&a, l.no) else {
            i += 1;
            continue;
        };
        glued_any |= g;
        // A row shorter than the header continued on the following lines (a hard wrap at 80
        // or 120 columns, possibly inside a token): joined line by line while exactly one
        // reading fits; the affinities are dropped when two readings disagree on them only.
        let nfields = if r.label.starts_with("GPU") {
            fields.len()
        } else {
            0
        };
        if !columns.is_empty()
            && (r.cells.len() < columns.len() || (r.junk && r.rest.len() < nfields + 1))
        {
            let mut text = l.text.clone();
            let mut uncertain = false;
            let mut joined_to = None;
            while let Some(next) = body.get(i + 1) {
                let nt = next.text.trim_start();
                let (cur_a, _) = atoms(&text);
                let cur = raw_row(&cur_a, l.no);
                let done = cur.as_ref().is_some_and(|c| {
                    c.cells.len() >= columns.len() && !c.junk && c.rest.len() >= nfields
                });
                if done
                    || nt.is_empty()
                    || row_label(nt).is_some()
                    || is_legend_line(nt)
                    || is_header(nt)
                {
                    break;
                }
                match join_row(&text, &next.text, columns.len()) {
                    Some((t, u)) => {
                        text = t;
                        uncertain |= u;
                        joined_to = Some(next.no);
                        i += 1;
                    }
                    None => {
                        problems.push(format!(
                            "row {} continues on line {} in a way that can be read twice: not joined",
                            r.label, next.no
                        ));
                        break;
                    }
                }
            }
            if let Some(to) = joined_to {
                let (ja, g2) = atoms(&text);
                if let Some(mut j) = raw_row(&ja, l.no) {
                    glued_any |= g2;
                    repairs.push(format!(
                        "row {} wrapped over lines {}-{to}: joined",
                        r.label, l.no
                    ));
                    if uncertain {
                        problems.push(format!(
                            "row {}: its affinity values were cut by the wrap and are not trusted",
                            r.label
                        ));
                        j.rest.clear();
                    }
                    r = j;
                }
            }
        }
        // A row that ends early may end inside a token: `NV18` cut to `NV1` still reads as a
        // cell, so the last NV cell of a short row is not trusted.
        if !columns.is_empty()
            && r.cells.len() < columns.len()
            && r.rest.is_empty()
            && r.cells.last().is_some_and(|c| c.starts_with("NV"))
        {
            if let Some(c) = r.cells.pop() {
                problems.push(format!(
                    "row {} (line {}) ends with {c}, possibly cut inside the number: not trusted",
                    r.label, r.line
                ));
            }
        }
        raws.push(r);
        i += 1;
    }
    if raws.is_empty() {
        if columns.is_empty() {
            return None;
        }
        problems.push("the matrix has a header but no rows".into());
    }
    if glued_any {
        repairs.push("cells or names glued together (tabs lost in the paste): split".into());
    }
    // No header: rebuild the columns from the rows.
    if columns.is_empty() {
        match rebuild_columns(&raws, &nic_names) {
            Ok(c) => {
                repairs.push(format!(
                    "header line missing: {} columns rebuilt from the rows' X diagonal{}",
                    c.len(),
                    if c.iter().any(|x| x.starts_with("NIC")) {
                        " and the NIC rows or legend"
                    } else {
                        ""
                    }
                ));
                columns = c;
                fields = vec!["cpu", "numa", "gpunuma"];
            }
            Err(e) => {
                problems.push(format!(
                    "header line missing and the columns cannot be rebuilt: {e}"
                ));
                return Some(Matrix {
                    columns: Vec::new(),
                    rows: Vec::new(),
                    nic_names,
                    repairs,
                    problems,
                });
            }
        }
    }
    // The header must name GPUs and NICs in sequence; a gap means a name was lost.
    let mut trusted_cols = columns.len();
    for (prefix, what) in [("GPU", "GPU"), ("NIC", "NIC")] {
        let idx: Vec<(usize, u32)> = columns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.strip_prefix(prefix)
                    .and_then(|d| d.parse::<u32>().ok())
                    .map(|n| (i, n))
            })
            .collect();
        for (k, (ci, n)) in idx.iter().enumerate() {
            if *n != k as u32 {
                problems.push(format!(
                    "the header skips from {what}{} to {what}{n}: a column name was lost, columns from {} on are not trusted",
                    k.saturating_sub(1),
                    columns[*ci]
                ));
                trusted_cols = trusted_cols.min(*ci);
                break;
            }
        }
    }
    // Every full row must carry one cell per column; a surplus means the header lost a name.
    let full: Vec<usize> = raws.iter().map(|r| r.cells.len()).collect();
    if !full.is_empty() && full.iter().all(|n| *n > columns.len()) {
        problems.push(format!(
            "the header names {} devices but every row carries more cells ({}): a header name was lost; the columns cannot be matched",
            columns.len(),
            full.iter().max().copied().unwrap_or(0)
        ));
        return Some(Matrix {
            columns,
            rows: Vec::new(),
            nic_names,
            repairs,
            problems,
        });
    }
    let mut rows: Vec<Row> = Vec::new();
    if raws.iter().any(|r| r.cells.iter().any(|c| c == "SOC")) {
        repairs.push("SOC (the pre-2017 name) read as SYS".into());
    }
    for r in raws {
        let own = columns.iter().position(|c| *c == r.label);
        let mut cells: Vec<Option<String>> = vec![None; columns.len()];
        let n = r.cells.len();
        if rows.iter().any(|x| x.label == r.label) {
            problems.push(format!(
                "row {} appears twice (line {}): the second is ignored",
                r.label, r.line
            ));
            continue;
        }
        let Some(own) = own else {
            problems.push(format!(
                "row {} (line {}) has no column in the header: ignored",
                r.label, r.line
            ));
            continue;
        };
        if n > columns.len() {
            problems.push(format!(
                "row {} (line {}) has {n} cells for {} columns: not trusted",
                r.label,
                r.line,
                columns.len()
            ));
        } else if own < n && r.cells[own] != "X" {
            problems.push(format!(
                "row {} (line {}) does not have X on its diagonal: its cells are misaligned, not trusted",
                r.label, r.line
            ));
        } else if own >= n && n > 0 && r.cells.iter().any(|c| c == "X") {
            problems.push(format!(
                "row {} (line {}) has X off its diagonal: not trusted",
                r.label, r.line
            ));
        } else {
            for (k, c) in r.cells.iter().enumerate() {
                if k < trusted_cols && (k == own || c != "X") {
                    cells[k] = Some(normalise_cell(c));
                }
            }
            if n < columns.len() {
                let cut_at = columns.get(n).cloned().unwrap_or_default();
                let why = if r.junk {
                    "unreadable text"
                } else {
                    "the end of the line"
                };
                problems.push(format!(
                    "row {} (line {}) stops after {n} of {} cells ({why}): {cut_at} onwards unknown",
                    r.label,
                    r.line,
                    columns.len()
                ));
            }
        }
        let mut cpu = None;
        let mut numa = None;
        let mut gnuma = None;
        if n == columns.len() && !r.junk {
            // Fewer affinity values than the header names: the last one may be cut.
            let usable = if r.rest.len() < fields.len() {
                r.rest.len().saturating_sub(1)
            } else {
                fields.len()
            };
            for (k, f) in fields.iter().enumerate().take(usable) {
                let v = r.rest.get(k).cloned();
                match *f {
                    "cpu" => cpu = v,
                    "numa" => numa = v,
                    _ => gnuma = v,
                }
            }
        }
        rows.push(Row {
            label: r.label,
            line: r.line,
            cells,
            cpu_affinity: cpu,
            numa_affinity: numa,
            gpu_numa_id: gnuma,
        });
    }
    let mut m = Matrix {
        columns,
        rows,
        nic_names,
        repairs,
        problems,
    };
    m.symmetry();
    Some(m)
}

/// Rebuild the device columns of a matrix whose header line was lost.
fn rebuild_columns(
    raws: &[RawRow],
    legend: &BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let gpu_rows: Vec<&RawRow> = raws.iter().filter(|r| r.label.starts_with("GPU")).collect();
    let nic_rows: Vec<&RawRow> = raws
        .iter()
        .filter(|r| !r.label.starts_with("GPU"))
        .collect();
    let width = raws.iter().map(|r| r.cells.len()).max().unwrap_or(0);
    if width == 0 {
        return Err("no row carries cells".into());
    }
    // Every row's X must sit at its own index; GPU rows are GPU0.. in order.
    for (i, r) in gpu_rows.iter().enumerate() {
        if r.label != format!("GPU{i}") {
            return Err(format!(
                "GPU rows are not GPU0..GPU{} in order",
                gpu_rows.len() - 1
            ));
        }
        if r.cells.get(i).map(String::as_str) != Some("X") {
            return Err(format!("{} has no X at position {i}", r.label));
        }
    }
    let n_gpu = gpu_rows.len();
    let mut cols: Vec<String> = (0..n_gpu).map(|i| format!("GPU{i}")).collect();
    if !nic_rows.is_empty() {
        for (j, r) in nic_rows.iter().enumerate() {
            if r.cells.get(n_gpu + j).map(String::as_str) != Some("X") {
                return Err(format!("{} has no X at position {}", r.label, n_gpu + j));
            }
            cols.push(r.label.clone());
        }
    } else if width > n_gpu {
        let k = width - n_gpu;
        if legend.len() != k || (0..k).any(|j| !legend.contains_key(&format!("NIC{j}"))) {
            return Err(format!(
                "{k} NIC column(s) without NIC rows or a matching legend"
            ));
        }
        cols.extend((0..k).map(|j| format!("NIC{j}")));
    }
    if cols.len() != width {
        return Err(format!(
            "the rows carry {width} cells but {} devices are named",
            cols.len()
        ));
    }
    Ok(cols)
}

impl Matrix {
    /// A GPU x NIC cell missing from a cut GPU row but present in the NIC row is taken from
    /// there (PCIe paths are symmetric); two different values make both untrusted.
    fn symmetry(&mut self) {
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

/// Parse the first matrix found in a text, without the block splitter (`super::read`, which
/// `diagnose` and `topo --nvidia-smi` use, cuts a paste into blocks first).
pub fn parse(text: &str) -> Option<Matrix> {
    let c = super::clean::clean(text);
    let start = c
        .lines
        .iter()
        .position(|l| is_header(&l.text) || row_label(&l.text).is_some_and(|n| n == "GPU0"))?;
    parse_lines(&c.lines[start..])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
        let t =
            "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n        GPU NUMA ID\n\
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
        let t = "        GPU0    GPU1    NIC0\nGPU0     X      NV8     PIX\nGPU1     X      NV8     SYS\n";
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
    fn lost_header_without_nic_names_is_refused() {
        let t = "GPU0     X      NV8     PIX     0-31    0\nGPU1    NV8      X      SYS     32-63   1\n";
        let m = parse(t).unwrap();
        assert!(m.columns.is_empty());
        assert!(m.problems.iter().any(|p| p.contains("cannot be rebuilt")));
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
}
