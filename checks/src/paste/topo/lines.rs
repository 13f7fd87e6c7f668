//! The shapes of a matrix's lines: the header (and its wrapped continuation), a row (and its
//! hard-wrapped continuation), the NIC legend, the affinity fields.

use super::atoms::{atoms, is_cpulist, Atom};

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
pub(super) fn header_continuation(line: &str) -> bool {
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
pub(super) fn header_score(text: &str) -> (usize, usize) {
    let (a, _) = atoms(text);
    let n = a.iter().take_while(|x| matches!(x, Atom::Name(_))).count();
    (n, trailing_fields(&a[n..]).len())
}

/// Join a hard-wrapped continuation: with a space (the break fell between tokens) or without
/// (the break cut a token). `None` when neither reading is clean or they disagree on the cells.
pub(super) fn join_row(cur: &str, next: &str, ncols: usize) -> Option<(String, bool)> {
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
pub(super) fn trailing_fields(header_rest: &[Atom]) -> Vec<&'static str> {
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

pub(super) fn normalise_cell(c: &str) -> String {
    if c == "SOC" {
        "SYS".to_string()
    } else {
        c.to_string()
    }
}

pub(super) struct RawRow {
    pub(super) label: String,
    pub(super) line: usize,
    pub(super) cells: Vec<String>,
    pub(super) rest: Vec<String>,
    /// Cells stopped at something that is not a cell nor an affinity value.
    pub(super) junk: bool,
}

pub(super) fn raw_row(a: &[Atom], line: usize) -> Option<RawRow> {
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
