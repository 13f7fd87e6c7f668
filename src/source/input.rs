//! What the user hands gdrdoctor besides a node: pasted text (`diagnose`, `topo --nvidia-smi`),
//! reports (`fleet`), a policy file; read with a bound, the file named in every error.

use gdrdoctor_checks::paste::Input;
use std::io::Read;
use std::path::Path;

/// Pastes larger than this are refused (a whole `lspci -vvvxxxx` of a big node is ~3 MiB; a
/// whole job's NCCL_DEBUG=INFO log of 512 ranks ~5 MiB). `diagnose` also refuses inputs that
/// together exceed it: its reader takes linear time and about 12 bytes of memory per byte of
/// paste (docs/performance.md), so this bounds it under 1 GiB.
pub const MAX_INPUT: u64 = 64 << 20;

/// The most rows, or columns, of a pasted `nvidia-smi topo -m` matrix. The largest real nodes
/// show about 30 (8 GPUs and up to 20 NIC ports, DPUs included); reading a matrix costs more
/// than the square of its size (1,024 x 1,024 took 7.5 GB), so one far beyond any node is
/// refused before it is parsed.
pub const MAX_MATRIX: usize = 128;

/// Open `path` for reading only if it is a regular file (a link to one is followed): opened
/// without blocking (a FIFO without a writer would block for ever) and judged by what was
/// opened, not by a look before (nothing can be swapped in between). A FIFO, a device (a link
/// to `/dev/zero` never ends), a socket or a directory is refused, naming the path.
pub fn open_regular(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let md = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !md.is_file() {
        return Err(format!(
            "{}: not a regular file (a FIFO, device, socket or directory): not read",
            path.display()
        ));
    }
    Ok(f)
}

/// Read at most `cap` bytes of `r`; more is an error naming `what`.
pub fn read_capped(mut r: impl Read, cap: u64, what: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    r.by_ref()
        .take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("{what}: {e}"))?;
    if buf.len() as u64 > cap {
        return Err(format!("{what}: larger than {} MiB: not read", cap >> 20));
    }
    Ok(buf)
}

/// Read a file (or stdin for `-`) as text, invalid UTF-8 replaced.
pub fn read_input(path: &Path) -> Result<Input, String> {
    use std::io::Read;
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("stdin: {e}"))?;
    } else {
        let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.take(MAX_INPUT + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if buf.len() as u64 > MAX_INPUT {
        return Err(format!(
            "{}: larger than {} MiB; paste the relevant command outputs only",
            path.display(),
            MAX_INPUT >> 20
        ));
    }
    let name = if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    // UTF-16 (PowerShell, Windows editors) and a UTF-8 byte-order mark are decoded here; what
    // else a paste carries (no-break spaces, zero-width characters, CRLF) is the paste
    // cleaner's.
    let text = gdrdoctor_checks::paste::clean::decode(&buf).0;
    matrix_size(&text).map_err(|e| format!("{name}: {e}"))?;
    Ok(Input { name, text })
}

/// A device name of `nvidia-smi topo -m` (a row label or a column head): `GPU3`, `NIC11`,
/// `mlx5_2`.
fn device_name(t: &str) -> bool {
    (t.starts_with("GPU") || t.starts_with("NIC") || t.starts_with("mlx"))
        && t.ends_with(|c: char| c.is_ascii_digit())
}

/// Refuse a pasted `nvidia-smi topo -m` matrix of more than [`MAX_MATRIX`] rows or columns:
/// a header line with that many device names, a row with that many cells, or that many rows
/// in a run. Counted on the raw lines, before anything is parsed.
pub fn matrix_size(text: &str) -> Result<(), String> {
    let mut run = 0usize;
    for (n, line) in text.lines().enumerate() {
        let mut tokens = line.split_whitespace();
        let Some(first) = tokens.next() else {
            run = 0;
            continue;
        };
        let second = tokens.clone().next().unwrap_or("");
        let (columns, cells) = if device_name(first) && device_name(second) {
            // A header: GPU0 GPU1 ... NIC0 ... CPU Affinity ...
            let heads = 1 + tokens.filter(|t| device_name(t)).count();
            run = 0;
            (heads, 0)
        } else if device_name(first) {
            // A row: its device, then a cell per column.
            run += 1;
            (0, tokens.count())
        } else {
            run = 0;
            (0, 0)
        };
        // A row holds its cells and up to four affinity columns (`0-63 0 N/A`, split).
        if columns > MAX_MATRIX || cells > MAX_MATRIX + 8 || run > MAX_MATRIX {
            return Err(format!(
                "line {}: an `nvidia-smi topo -m` matrix of more than {MAX_MATRIX} rows or columns \
(real nodes show about 30); refused before it is read. Paste the matrix of one node",
                n + 1
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A square `nvidia-smi topo -m` of `n` devices, as the tool prints it.
    fn matrix(n: usize) -> String {
        let names: Vec<String> = (0..n)
            .map(|i| {
                if i < n / 2 {
                    format!("GPU{i}")
                } else {
                    format!("NIC{}", i - n / 2)
                }
            })
            .collect();
        let mut t = format!(
            "\t{}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n",
            names.join("\t")
        );
        for (i, a) in names.iter().enumerate() {
            let cells: Vec<&str> = (0..n).map(|j| if i == j { " X " } else { "SYS" }).collect();
            t.push_str(&format!("{a}\t{}\t0-63\t0\t\tN/A\n", cells.join("\t")));
        }
        t
    }

    #[test]
    fn a_matrix_far_beyond_any_node_is_refused_before_it_is_read() {
        assert!(matrix_size(&matrix(32)).is_ok());
        assert!(matrix_size(&matrix(MAX_MATRIX)).is_ok());
        let e = matrix_size(&matrix(MAX_MATRIX + 1)).unwrap_err();
        assert!(
            e.contains("line 1:") && e.contains("128 rows or columns"),
            "{e}"
        );
        // Rows without their header, and a header without rows.
        let rows: String = matrix(1024)
            .lines()
            .skip(1)
            .take(200)
            .map(|l| format!("{}\n", &l[..l.len().min(30)]))
            .collect();
        assert!(matrix_size(&rows).unwrap_err().contains("line 129:"));
        let head = matrix(1024).lines().next().unwrap().to_string();
        assert!(matrix_size(&head).is_err());
        // At the entry: the file is named, nothing is parsed.
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("topo.txt");
        std::fs::write(&p, matrix(1024)).unwrap();
        let t0 = std::time::Instant::now();
        let e = read_input(&p).unwrap_err();
        assert!(e.starts_with(&format!("{}: line 1:", p.display())), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }

    /// Every real paste in fixtures/pastes passes.
    #[test]
    fn real_pastes_are_within_the_bound() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pastes");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                let t = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                assert!(matrix_size(&t).is_ok(), "{}", p.display());
                n += 1;
            }
        }
        assert!(n > 10);
    }
}
