//! The job's secret: a file the engine distributes to every rank (a file in the job's
//! directory written by the batch script, a Kubernetes Secret mounted read-only), at least 16
//! bytes, not readable by every user of the node.

use std::io::Read;
use std::path::Path;

/// The shortest secret accepted, in bytes.
pub const MIN_LEN: usize = 16;
/// The longest file read.
const MAX_LEN: u64 = 4096;

/// Read the secret from `path`: its bytes without trailing white space.
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::PermissionsExt;
    let f =
        std::fs::File::open(path).map_err(|e| format!("secret file {}: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("secret file {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "secret file {}: not a regular file",
            path.display()
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        return Err(format!(
            "secret file {}: readable by every user (mode {:o}): `chmod o-r` it (Kubernetes: defaultMode: 0400)",
            path.display(),
            mode & 0o777
        ));
    }
    let mut buf = Vec::new();
    f.take(MAX_LEN + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("secret file {}: {e}", path.display()))?;
    if buf.len() as u64 > MAX_LEN {
        return Err(format!(
            "secret file {}: longer than {MAX_LEN} bytes",
            path.display()
        ));
    }
    while buf.last().is_some_and(|b| b.is_ascii_whitespace()) {
        buf.pop();
    }
    if buf.len() < MIN_LEN {
        return Err(format!(
            "secret file {}: {} byte(s); at least {MIN_LEN} are needed (e.g. `head -c 32 /dev/urandom | base64 > FILE`)",
            path.display(),
            buf.len()
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn short_open_or_missing_secrets_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read(&p).unwrap(), b"0123456789abcdef0123");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read(&p).unwrap_err().contains("every user"));
        std::fs::write(&p, "short").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read(&p).unwrap_err().contains("at least 16"));
        assert!(read(&d.path().join("none")).unwrap_err().contains("none"));
        assert!(read(d.path()).is_err());
    }
}
