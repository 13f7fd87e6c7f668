//! Symlinks resolved inside the root, component by component, with chroot semantics: an
//! absolute target restarts at the root, `..` stops there, more than [`MAX_LINKS`] links is a
//! loop. Resolved directories are cached (kernel path -> components, and a descriptor).

use super::at::{lstat_at, read_link_at, Entry};
use super::{join, ErrorKind, ReadError, Recorded, ResolvedDir, Root, MAX_LINKS};
use std::path::PathBuf;

impl Root {
    pub(super) fn host_path(&self, comps: &[String]) -> PathBuf {
        let mut p = self.base.clone();
        for c in comps {
            p.push(c);
        }
        p
    }

    /// Resolve `path` inside the root; returns the components of the resolved kernel path.
    /// With `follow_last` false the final component is not dereferenced (for `read_link`).
    pub(super) fn resolve_comps(
        &self,
        path: &str,
        follow_last: bool,
    ) -> Result<Vec<String>, ReadError> {
        // Fast path: `<dir>/<name>` with `<dir>` already resolved.
        if let Some((dir, name)) = path.rsplit_once('/') {
            if !dir.is_empty() && !matches!(name, "" | "." | "..") {
                let cached = match self.dir_cache.lock() {
                    Ok(c) => c.get(dir).cloned(),
                    Err(p) => p.into_inner().get(dir).cloned(),
                };
                let (parent, base) = match cached {
                    Some(d) => (d.comps.clone(), Some(d)),
                    None => {
                        let c = self.resolve_comps(dir, true).map_err(|e| ReadError {
                            path: path.to_string(),
                            kind: e.kind,
                        })?;
                        let d = std::sync::Arc::new(ResolvedDir {
                            comps: c.clone(),
                            fd: std::sync::OnceLock::new(),
                        });
                        match self.dir_cache.lock() {
                            Ok(mut m) => m.insert(dir.to_string(), d.clone()),
                            Err(p) => p.into_inner().insert(dir.to_string(), d.clone()),
                        };
                        (c, Some(d))
                    }
                };
                return self.resolve_from(
                    parent,
                    std::iter::once(name.to_string()).collect(),
                    path,
                    follow_last,
                    base.as_deref(),
                );
            }
        }
        let pending: std::collections::VecDeque<String> =
            path.split('/').map(str::to_string).collect();
        self.resolve_from(Vec::new(), pending, path, follow_last, None)
    }

    /// Resolve `pending` on top of `stack`. `base`: the resolved directory `stack` is, while
    /// the walk has not left it its direct entries are looked at relative to its descriptor
    /// (one component for the kernel to walk, not the whole host path).
    pub(super) fn resolve_from(
        &self,
        mut stack: Vec<String>,
        mut pending: std::collections::VecDeque<String>,
        path: &str,
        follow_last: bool,
        base: Option<&ResolvedDir>,
    ) -> Result<Vec<String>, ReadError> {
        let mut base = base.map(|d| (d, stack.len()));
        let mut links = 0usize;
        // The kernel path of `stack`, kept beside it (no join per component).
        let mut key = join(&stack);
        while let Some(c) = pending.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    base = None;
                    if let Some(last) = stack.pop() {
                        key.truncate(key.len() - last.len() - 1);
                        if key.is_empty() {
                            key.push('/');
                        }
                    }
                    continue;
                }
                _ => {}
            }
            if key != "/" {
                key.push('/');
            }
            key.push_str(&c);
            stack.push(c);
            let is_last = pending.iter().all(|p| p.is_empty() || p == ".");
            if is_last && !follow_last {
                break;
            }
            // A component seen as a real directory before (`/sys`, `/sys/devices/pci0000:00`,
            // every bridge above a device): no second lstat.
            if self.is_known_dir(&key) {
                continue;
            }
            // The entry relative to the base directory's descriptor when it is one of its
            // direct entries, else by its whole host path.
            let rel = match base {
                Some((d, n)) if stack.len() == n + 1 && self.mem.is_none() => {
                    self.dir_fd(d).zip(stack.last())
                }
                _ => None,
            };
            let kind = match (&self.mem, rel) {
                (Some(m), _) => m.lstat(&key),
                (None, Some((fd, name))) => lstat_at(fd, name),
                (None, None) => {
                    std::fs::symlink_metadata(self.host_path(&stack)).map(|md| Entry::of(&md))
                }
            };
            let kind = match kind {
                Ok(k) => k,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if is_last {
                        return Ok(stack);
                    }
                    return Err(ReadError::new(path, ErrorKind::NotFound));
                }
                Err(e) => return Err(ReadError::io(path, &e)),
            };
            if kind == Entry::Link {
                links += 1;
                if links > MAX_LINKS {
                    return Err(ReadError::new(path, ErrorKind::Loop));
                }
                let target = match (&self.mem, rel) {
                    (Some(m), _) => m.read_link(&key),
                    (None, Some((fd, name))) => read_link_at(fd, name),
                    (None, None) => std::fs::read_link(self.host_path(&stack))
                        .map(|t| t.to_string_lossy().into_owned()),
                }
                .map_err(|e| ReadError::io(path, &e))?;
                self.record(&key, Recorded::Link(target.clone()));
                base = None;
                stack.pop();
                if target.starts_with('/') {
                    stack.clear();
                }
                key = join(&stack);
                for (i, t) in target.split('/').enumerate() {
                    pending.insert(i, t.to_string());
                }
            } else if kind == Entry::Dir {
                self.known_dir(key.clone());
            } else if !is_last {
                return Err(ReadError::new(path, ErrorKind::NotADirectory));
            }
        }
        Ok(stack)
    }

    pub(super) fn is_known_dir(&self, key: &str) -> bool {
        match self.known_dirs.lock() {
            Ok(k) => k.contains(key),
            Err(p) => p.into_inner().contains(key),
        }
    }

    pub(super) fn known_dir(&self, key: String) {
        match self.known_dirs.lock() {
            Ok(mut k) => k.insert(key),
            Err(p) => p.into_inner().insert(key),
        };
    }
}
