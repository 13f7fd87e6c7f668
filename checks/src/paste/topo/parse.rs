//! One matrix block's lines into a [`Matrix`]: the header, the rows (wrapped ones joined),
//! the columns rebuilt when the header was lost, then every row placed under its columns.

use super::atoms::{atoms, Atom};
use super::lines::*;
use super::matrix::{Matrix, Row};
use crate::paste::clean::Line;
use std::collections::BTreeMap;

/// What was repaired and what is not trusted, in the order it was found.
#[derive(Default)]
struct Notes {
    repairs: Vec<String>,
    problems: Vec<String>,
}

/// Parse the lines of one matrix block.
pub fn parse_lines(lines: &[Line]) -> Option<Matrix> {
    let mut notes = Notes::default();
    let mut nic_names = BTreeMap::new();
    // Header columns (possibly continued on the next line).
    let (mut columns, mut fields, body_start, mut glued_any) = header(lines, &mut notes);
    // Rows, joining hard-wrapped continuations.
    let body: Vec<&Line> = lines.iter().skip(body_start).collect();
    let raws = raw_rows(
        &body,
        &columns,
        &fields,
        &mut nic_names,
        &mut notes,
        &mut glued_any,
    );
    let Notes {
        mut repairs,
        mut problems,
    } = notes;
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
    let mut raws = raws;
    if columns.is_empty() {
        match rebuild_columns(&raws, &nic_names) {
            Ok((c, unnamed)) if unnamed > 0 => {
                // The GPU columns are named by the GPU rows' X diagonal (GPU0.. come first);
                // what the columns after them are, the paste does not say.
                let n = c.len();
                repairs.push(format!(
                    "header line missing: {n} GPU column(s) rebuilt from the rows' X diagonal"
                ));
                problems.push(format!(
                    "header line missing: the rows carry {} cells but only {} are named by their own rows; the {unnamed} column(s) after {} are GPUs whose rows are not in the paste or NICs without rows or a NIC legend: their cells are unknown (paste `nvidia-smi topo -m` whole, with its header)",
                    n + unnamed,
                    c.join(", "),
                    c.last().map(String::as_str).unwrap_or("them")
                ));
                for r in &mut raws {
                    r.cells.truncate(n);
                }
                columns = c;
                fields = vec!["cpu", "numa", "gpunuma"];
            }
            Ok((c, _)) => {
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
    let trusted_cols = trusted_columns(&columns, &mut problems);
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
    if raws.iter().any(|r| r.cells.iter().any(|c| c == "SOC")) {
        repairs.push("SOC (the pre-2017 name) read as SYS".into());
    }
    let rows = place_rows(raws, &columns, trusted_cols, &fields, &mut problems);
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

/// The header's device columns and affinity fields, where the rows start, and whether names
/// were glued; nothing when the block has no header line.
fn header(lines: &[Line], notes: &mut Notes) -> (Vec<String>, Vec<&'static str>, usize, bool) {
    let mut columns: Vec<String> = Vec::new();
    let mut fields: Vec<&'static str> = Vec::new();
    let mut body_start = 0;
    let mut glued_any = false;
    let header_at = lines.iter().position(|l| is_header(&l.text));
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
            notes
                .repairs
                .push(format!("header wrapped onto line {}: joined", next.no));
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
    (columns, fields, body_start, glued_any)
}

/// The rows of the body, hard-wrapped continuations joined; the NIC legend's entries go into
/// `nic_names`.
fn raw_rows(
    body: &[&Line],
    columns: &[String],
    fields: &[&'static str],
    nic_names: &mut BTreeMap<String, String>,
    notes: &mut Notes,
    glued_any: &mut bool,
) -> Vec<RawRow> {
    let mut raws: Vec<RawRow> = Vec::new();
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
        *glued_any |= g;
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
                        notes.problems.push(format!(
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
                    *glued_any |= g2;
                    notes.repairs.push(format!(
                        "row {} wrapped over lines {}-{to}: joined",
                        r.label, l.no
                    ));
                    if uncertain {
                        notes.problems.push(format!(
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
                notes.problems.push(format!(
                    "row {} (line {}) ends with {c}, possibly cut inside the number: not trusted",
                    r.label, r.line
                ));
            }
        }
        raws.push(r);
        i += 1;
    }
    raws
}

/// The columns the header names in sequence (`GPU0`.., `NIC0`..): those from a gap on are
/// not trusted.
fn trusted_columns(columns: &[String], problems: &mut Vec<String>) -> usize {
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
    trusted_cols
}

/// Every row under its columns: the cells that can be trusted, the affinities.
fn place_rows(
    raws: Vec<RawRow>,
    columns: &[String],
    trusted_cols: usize,
    fields: &[&'static str],
    problems: &mut Vec<String>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
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
    rows
}

/// Rebuild the device columns of a matrix whose header line was lost.
/// The columns, and how many columns after them no row or legend names (their cells unknown).
fn rebuild_columns(
    raws: &[RawRow],
    legend: &BTreeMap<String, String>,
) -> Result<(Vec<String>, usize), String> {
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
            if n_gpu == 0 {
                return Err(format!(
                    "{k} NIC column(s) without NIC rows or a matching legend"
                ));
            }
            return Ok((cols, k));
        }
        cols.extend((0..k).map(|j| format!("NIC{j}")));
    }
    if cols.len() != width {
        return Err(format!(
            "the rows carry {width} cells but {} devices are named",
            cols.len()
        ));
    }
    Ok((cols, 0))
}

/// Parse the first matrix found in a text, without the block splitter (`super::read`, which
/// `diagnose` and `topo --nvidia-smi` use, cuts a paste into blocks first).
pub fn parse(text: &str) -> Option<Matrix> {
    let c = crate::paste::clean::clean(text);
    let start = c
        .lines
        .iter()
        .position(|l| is_header(&l.text) || row_label(&l.text).is_some_and(|n| n == "GPU0"))?;
    parse_lines(&c.lines[start..])
}
