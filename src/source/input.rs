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
    Ok(Input {
        name: if path.as_os_str() == "-" {
            "stdin".into()
        } else {
            path.display().to_string()
        },
        // UTF-16 (PowerShell, Windows editors) and a UTF-8 byte-order mark are decoded here;
        // what else a paste carries (no-break spaces, zero-width characters, CRLF) is the
        // paste cleaner's.
        text: gdrdoctor_checks::paste::clean::decode(&buf).0,
    })
}
