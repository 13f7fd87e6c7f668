//! The tokens of a matrix line: device names, cells and the rest, split where tabs were lost
//! and names or cells were glued together.

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
pub(super) enum Atom {
    Name(String),
    Cell(String),
    Other(String),
}

pub(super) const CELLS: &[&str] = &["NODE", "SYS", "SOC", "PIX", "PXB", "PHB", "P2C", "C2C", "X"];

pub(super) fn digits_len(s: &str) -> usize {
    s.bytes().take_while(|b| b.is_ascii_digit()).count()
}

/// The longest cell value at the start of `s`: `(value, bytes used)`.
pub(super) fn cell_prefix(s: &str) -> Option<(String, usize)> {
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
pub(super) fn name_starts(s: &str) -> Vec<usize> {
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
pub(super) fn split_names(tok: &str) -> Option<(Vec<String>, Option<String>)> {
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
pub(super) fn split_cells(tok: &str) -> Option<(Vec<String>, Option<String>)> {
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
pub(super) fn is_cpulist(s: &str) -> bool {
    s == "N/A"
        || (!s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars()
                .all(|c| c.is_ascii_digit() || c == '-' || c == ','))
}

pub(super) fn atoms(line: &str) -> (Vec<Atom>, bool) {
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
