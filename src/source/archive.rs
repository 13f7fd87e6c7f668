//! Snapshot archives: a `.tar.gz` packed from a tree ([`pack_tgz`]) and unpacked, within
//! [`Limits`], into a private temporary tree ([`TempTree`], [`unpack`]) that `--sysroot x.tar.gz`
//! reads.

use crate::sys::random::random_u64;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct SnapshotError(pub String);

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Pack the tree `dir` into a gzip-compressed tar (symlinks kept as symlinks), in memory (a
/// snapshot is a few MiB); `out` names it in errors. The caller writes it.
pub fn pack_tgz(dir: &Path, out: &Path) -> Result<Vec<u8>, SnapshotError> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut t = tar::Builder::new(gz);
    t.follow_symlinks(false);
    t.append_dir_all(".", dir)
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    let gz = t
        .into_inner()
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))?;
    gz.finish()
        .map_err(|e| SnapshotError(format!("{}: {e}", out.display())))
}

/// What a `.tar.gz` snapshot may unpack to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of all regular files together.
    pub bytes: u64,
    /// Entries: files, directories and symlinks.
    pub entries: usize,
    /// Bytes of one regular file.
    pub file: u64,
}

impl Limits {
    /// A node's snapshot is a few MiB in a few thousand entries (the 8-GPU, 8-NIC fixtures:
    /// 1,700-1,750 entries, 2 MiB); a compressed bomb of 1 MB would otherwise unpack to 1 GiB.
    /// 50,000 entries is thirty such nodes. No file a snapshot holds is larger than the reader
    /// reads ([`crate::source::reader::MAX_FILE`]).
    pub const SNAPSHOT: Limits = Limits {
        bytes: 256 << 20,
        entries: 50_000,
        file: crate::source::reader::MAX_FILE,
    };
}

/// A private temporary directory with `mkdtemp(3)` semantics: an unpredictable name under the
/// temporary directory, created exclusively (nothing planted under that name is reused or
/// followed), mode 0700. It is removed when dropped, on every error path that drops it, and on
/// SIGINT, SIGTERM and SIGHUP (the probe runner's termination handlers, see
/// [`crate::live::signals::remove_on_termination`]).
#[derive(Debug)]
pub struct TempTree {
    path: PathBuf,
    slot: Option<usize>,
}

impl TempTree {
    pub fn new(prefix: &str) -> Result<TempTree, SnapshotError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = String::new();
        for _ in 0..64 {
            let path = base.join(format!("{prefix}{:016x}", random_u64()));
            // Registered before it exists: a signal between mkdir and here would leak it.
            let slot = crate::live::signals::remove_on_termination(&path);
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(TempTree { path, slot }),
                Err(e) => {
                    if let Some(s) = slot {
                        crate::live::signals::forget_on_termination(s);
                    }
                    last = format!("{}: {e}", path.display());
                    if e.kind() != std::io::ErrorKind::AlreadyExists {
                        break;
                    }
                }
            }
        }
        Err(SnapshotError(format!(
            "cannot create a private temporary directory: {last}"
        )))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        remove_tree(&self.path);
        if let Some(s) = self.slot {
            crate::live::signals::forget_on_termination(s);
        }
    }
}

/// Remove a tree we created, directories made searchable first (an archive may carry
/// directories of mode 000). Symlinks are removed, never followed.
fn remove_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn open_up(p: &Path, depth: usize) {
        if depth > 64 {
            return;
        }
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return;
        };
        if !md.is_dir() {
            return;
        }
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                open_up(&e.path(), depth + 1);
            }
        }
    }
    open_up(dir, 0);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `.tar.gz` snapshot unpacked into a [`TempTree`] (for `--sysroot x.tar.gz`), within
/// [`Limits::SNAPSHOT`]: regular files, directories and symlinks only (no hard links, devices,
/// FIFOs or sparse files), every path inside the tree. Any refusal or read error removes what
/// was unpacked.
pub fn unpack(archive: &Path) -> Result<TempTree, SnapshotError> {
    let open = || {
        std::fs::File::open(archive)
            .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))
    };
    // Every limit is checked on the whole archive before anything is written: a refusal costs
    // a read of the archive, not the unpacking of what came before the entry that broke it.
    check_limits(open()?, &Limits::SNAPSHOT)
        .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))?;
    let f = open()?;
    let tree = TempTree::new("gdrdoctor-sysroot-")?;
    unpack_into(f, tree.path(), &Limits::SNAPSHOT)
        .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))?;
    Ok(tree)
}

/// A `.tar.gz` snapshot read into memory (for `--sysroot x.tar.gz`), within
/// [`Limits::SNAPSHOT`] and under the same rules as [`unpack`]: regular files, directories and
/// symlinks only, no `..` in a name, nothing below a file or a link. Nothing is written.
pub fn read_tree(archive: &Path) -> Result<crate::source::reader::memory::Tree, SnapshotError> {
    // The compressed archive whole (a node's is tens of KiB): one read, no second buffer.
    let gz =
        std::fs::read(archive).map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))?;
    crate::sys::trace::timed("archive.tree", || tree_from(&gz[..], &Limits::SNAPSHOT))
        .map_err(|e| SnapshotError(format!("{}: {e}", archive.display())))
}

/// [`read_tree`] from any reader of a gzip-compressed tar.
pub fn tree_from(
    input: impl std::io::Read,
    limits: &Limits,
) -> Result<crate::source::reader::memory::Tree, String> {
    use crate::source::reader::memory::{kernel_path, Builder};
    use std::io::Read;
    use tar::EntryType;
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(input));
    let (mut bytes, mut count) = (0u64, 0usize);
    let mut tree = Builder::default();
    for entry in a.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let kind = entry.header().entry_type();
        let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry_size(&entry, &shown)?;
        admit(kind, size, &shown, &mut bytes, &mut count, limits)?;
        let path = kernel_path(&shown)?;
        match kind {
            EntryType::Directory => tree.dir(path),
            EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
                    .ok_or_else(|| format!("{shown}: a symlink without a target"))?;
                tree.link(path, target);
            }
            _ => {
                // `admit` bounded the size; the body is read whole.
                let mut body = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                entry
                    .read_to_end(&mut body)
                    .map_err(|e| format!("{shown}: {e}"))?;
                tree.file(path, body);
            }
        }
    }
    gzip_trailer(a, limits)?;
    crate::sys::trace::timed("archive.finish", || tree.finish())
}

/// After the tar's end: the rest of the gzip stream read to its end, so that the decoder checks
/// the trailer (the CRC-32 and length of everything it gave). The tar reader stops at the
/// end-of-archive blocks and never gets there: a flipped bit inside a file's bytes would
/// otherwise be read as the node's state (`gzip -t` and `tar xzf` refuse such an archive).
fn gzip_trailer<R: std::io::Read>(
    a: tar::Archive<flate2::read::GzDecoder<R>>,
    limits: &Limits,
) -> Result<(), String> {
    use std::io::Read;
    let mut rest = a.into_inner().take(limits.bytes.saturating_add(1));
    let n = std::io::copy(&mut rest, &mut std::io::sink()).map_err(|e| {
        format!("the archive is damaged: its gzip stream does not check out ({e}); `gzip -t` says the same")
    })?;
    if n > limits.bytes {
        return Err(format!(
            "more than {} bytes after the end of the tar: not a gdrdoctor snapshot (refused)",
            limits.bytes
        ));
    }
    Ok(())
}

/// One entry's verdict under `limits`: the running totals updated, or why the archive is
/// refused (naming the entry).
fn admit(
    kind: tar::EntryType,
    size: u64,
    shown: &str,
    bytes: &mut u64,
    count: &mut usize,
    limits: &Limits,
) -> Result<(), String> {
    use tar::EntryType;
    *count += 1;
    if *count > limits.entries {
        return Err(format!(
            "more than {} entries: not a gdrdoctor snapshot (refused)",
            limits.entries
        ));
    }
    match kind {
        EntryType::Regular | EntryType::Continuous => {
            if size > limits.file {
                return Err(format!(
                    "{shown}: {size} bytes, more than any file a snapshot holds ({} bytes)",
                    limits.file
                ));
            }
            *bytes = bytes.saturating_add(size);
            if *bytes > limits.bytes {
                return Err(format!(
                    "more than {} bytes unpacked: not a gdrdoctor snapshot (refused)",
                    limits.bytes
                ));
            }
            Ok(())
        }
        EntryType::Directory | EntryType::Symlink => Ok(()),
        // pax and GNU long-name headers are consumed by the reader; anything else (hard
        // links, devices, FIFOs, sparse files) has no place in a snapshot.
        other => Err(format!(
            "{shown}: {other:?} entry: a snapshot holds only files, directories and symlinks"
        )),
    }
}

/// The size a regular file's header gives (0 for any other entry: its size field is not read).
fn entry_size<R: std::io::Read>(entry: &tar::Entry<R>, shown: &str) -> Result<u64, String> {
    match entry.header().entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            entry.header().size().map_err(|e| format!("{shown}: {e}"))
        }
        _ => Ok(0),
    }
}

/// Read the whole gzip-compressed tar from `input` and hold every entry to `limits`, writing
/// nothing (the first pass of [`unpack`]).
pub fn check_limits(input: impl std::io::Read, limits: &Limits) -> Result<(), String> {
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(input));
    let (mut bytes, mut count) = (0u64, 0usize);
    for entry in a.entries().map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry_size(&entry, &shown)?;
        admit(
            entry.header().entry_type(),
            size,
            &shown,
            &mut bytes,
            &mut count,
            limits,
        )?;
    }
    gzip_trailer(a, limits)
}

/// Unpack the gzip-compressed tar from `input` into the existing directory `dir`, within
/// `limits` (see [`unpack`], which checks them all first; here they hold again entry by
/// entry, for a caller that streams).
pub fn unpack_into(input: impl std::io::Read, dir: &Path, limits: &Limits) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    use tar::EntryType;
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(input));
    a.set_preserve_permissions(false);
    a.set_preserve_mtime(false);
    a.set_unpack_xattrs(false);
    let mut bytes = 0u64;
    let mut count = 0usize;
    let entries = a.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let kind = entry.header().entry_type();
        let shown = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let size = entry_size(&entry, &shown)?;
        admit(kind, size, &shown, &mut bytes, &mut count, limits)?;
        // `unpack_in` refuses entries that would land outside `dir` (`..`, absolute paths,
        // through a symlink unpacked earlier).
        let inside = entry.unpack_in(dir).map_err(|e| format!("{shown}: {e}"))?;
        if !inside {
            return Err(format!("{shown}: outside the snapshot (refused)"));
        }
        if kind == EntryType::Directory {
            // Searchable whatever mode the archive gave it; never through a symlink.
            let p = dir.join(entry.path().map_err(|e| format!("{shown}: {e}"))?);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700));
            }
        }
    }
    gzip_trailer(a, limits)
}
