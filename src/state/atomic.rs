//! The one atomic writer of gdrdoctor's files, and the validating reader of its own state.
//!
//! [`replace`] writes a new file with an unpredictable name beside the target, created
//! exclusively (`O_EXCL|O_NOFOLLOW`: nothing planted under that name is followed or reused),
//! then renames it over the target: a reader sees the old file or the new one, never half of
//! one. Every `-o FILE` of every command ([`Kind::Output`], through `output::write_output`) and
//! every state file ([`Kind::State`]: the counter baseline, the CUDA cache) goes through it.

use std::io::Write;
use std::path::Path;

/// What is being written, which decides the file's mode and durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A user's output file: mode 0666 less the umask, as any tool's output; no fsync.
    Output,
    /// A state file: the directory is created (0755) if needed; the file is 0644 whatever the
    /// umask (`read_trusted` refuses what others could write); fsync before the rename when
    /// `durable` (the CUDA cache skips it: it is worthless after a crash, the next boot has
    /// another id, and an fsync outside a tmpfs costs milliseconds of every cold `check`).
    State { durable: bool },
}

/// Replace the regular file `path` (or create it) atomically with `bytes` (see the module).
pub fn replace(path: &Path, bytes: &[u8], kind: Kind) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Kind::State { .. } = kind {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let mode = match kind {
        Kind::Output => 0o666,
        Kind::State { .. } => 0o644,
    };
    let mut last = String::new();
    for attempt in 0..16u32 {
        let tmp = dir.join(format!(
            ".{name}.tmp.{}.{:016x}",
            std::process::id(),
            crate::sys::random::random_u64() ^ u64::from(attempt)
        ));
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = format!("{}: {e}", tmp.display());
                continue;
            }
            // The temporary's name means nothing to the user: name the file they asked for,
            // and the directory when it is the directory that is missing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "{}: the directory {} does not exist (create it first: `mkdir -p {}`)",
                    path.display(),
                    dir.display(),
                    dir.display()
                ))
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut write = || -> std::io::Result<()> {
            if let Kind::State { durable } = kind {
                f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
                f.write_all(bytes)?;
                if durable {
                    f.sync_all()?;
                }
                Ok(())
            } else {
                f.write_all(bytes)?;
                f.flush()
            }
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{}: {e}", path.display()));
        }
        drop(f);
        return std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("{}: {e}", path.display())
        });
    }
    Err(last)
}

/// Read `dir/name` for validation: `Ok(None)` when it does not exist. Refused (`Err`, the
/// caller ignores the file and the next write replaces it): a file another user could have
/// written (owned by neither root nor us, or writable by group or others; the same for its
/// directory, where another user could swap the file), something that is not a regular file,
/// a file larger than `max` bytes.
pub fn read_trusted(dir: &Path, name: &str, max: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = dir.join(name);
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => trusted_dir(dir)?,
    }
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}: ignored", path.display())),
    };
    let md = f
        .metadata()
        .map_err(|e| format!("{}: {e}: ignored", path.display()))?;
    if !md.is_file() {
        return Err(format!("{}: not a regular file: ignored", path.display()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if md.uid() != 0 && md.uid() != euid {
        return Err(format!(
            "{}: owned by uid {}, neither root nor this user: ignored",
            path.display(),
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: writable by group or others (mode {:o}): ignored",
            path.display(),
            md.mode() & 0o7777
        ));
    }
    if md.len() > max {
        return Err(format!(
            "{}: {} bytes, more than {max}: ignored",
            path.display(),
            md.len()
        ));
    }
    let mut b = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut b)
        .map_err(|e| format!("{}: {e}: ignored", path.display()))?;
    if b.len() as u64 > max {
        return Err(format!(
            "{}: more than {max} bytes: ignored",
            path.display()
        ));
    }
    Ok(Some(b))
}

/// A state directory gdrdoctor may trust: a directory owned by root or this user and writable
/// by neither group nor others (where another user could plant or swap a state file).
pub fn trusted_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dir).map_err(|e| format!("{}: {e}: ignored", dir.display()))?;
    if !md.is_dir() {
        return Err(format!("{}: not a directory: ignored", dir.display()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if md.uid() != 0 && md.uid() != euid {
        return Err(format!(
            "{}: owned by uid {}, neither root nor this user: ignored",
            dir.display(),
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: writable by group or others (mode {:o}): ignored",
            dir.display(),
            md.mode() & 0o7777
        ));
    }
    Ok(())
}
