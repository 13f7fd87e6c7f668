//! A snapshot archive's tree held in memory: `--sysroot x.tar.gz` is read from here, entry by
//! entry as the archive gave them, instead of being unpacked to a temporary directory first
//! (writing and walking 1,700 files of an 8-GPU node cost 50 ms; nothing touches the disk).
//!
//! The tree answers what the reader asks of a directory tree (`lstat`, `readlink`, a file's
//! bytes, a directory's entries) with the same errors a directory would give, so a node reads
//! the same from its archive as from the directory it unpacks to (a test holds every fixture to
//! that). Paths are kernel paths (`/sys/bus/pci/devices`); links are kept as written and resolved
//! by the reader, inside the root, like a directory's.

use super::at::Entry;
use super::{DirEntry, EntryKind};
use std::collections::HashMap;
use std::io::{Error, ErrorKind};

#[derive(Debug)]
enum Node {
    File(Vec<u8>),
    Dir(Vec<DirEntry>),
    Link(String),
}

/// The tree; built with [`Builder`].
#[derive(Debug, Default)]
pub struct Tree {
    nodes: HashMap<String, Node, super::PathHash>,
}

/// Entries in archive order: a later entry of the same path replaces the earlier one (as
/// unpacking one over the other would), and parent directories an archive leaves out exist.
#[derive(Debug, Default)]
pub struct Builder {
    nodes: HashMap<String, Node, super::PathHash>,
}

/// The kernel path of an archive entry's name (`./sys/x`, `sys/x/`), or why it is refused: a
/// `..` component or a NUL would leave the tree or name nothing a directory can hold.
pub fn kernel_path(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len() + 1);
    for c in name.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("{name}: a `..` component (refused)")),
            c if c.contains('\0') => return Err(format!("{name}: a NUL in the name (refused)")),
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

impl Builder {
    pub fn file(&mut self, path: String, bytes: Vec<u8>) {
        self.nodes.insert(path, Node::File(bytes));
    }

    pub fn dir(&mut self, path: String) {
        // A directory entry over a directory keeps it (its children come from the paths).
        if !matches!(self.nodes.get(&path), Some(Node::Dir(_))) {
            self.nodes.insert(path, Node::Dir(Vec::new()));
        }
    }

    pub fn link(&mut self, path: String, target: String) {
        self.nodes.insert(path, Node::Link(target));
    }

    /// The finished tree: every entry listed in its parent, parents made directories where the
    /// archive left them out. An entry below a file or a link is refused (unpacking it would
    /// fail on the file, or write through the link), naming the entry.
    pub fn finish(mut self) -> Result<Tree, String> {
        if matches!(self.nodes.get("/"), Some(Node::File(_) | Node::Link(_))) {
            return Err("the archive's root (`.`) is not a directory (refused)".into());
        }
        // In any order: each path is listed in its parent once (below), whichever comes first.
        let paths: Vec<String> = self.nodes.keys().cloned().collect();
        self.nodes
            .entry("/".to_string())
            .or_insert_with(|| Node::Dir(Vec::new()));
        for p in &paths {
            let mut child = p.as_str();
            while let Some((parent, name)) = child.rsplit_once('/') {
                if name.is_empty() {
                    break;
                }
                let parent = if parent.is_empty() { "/" } else { parent };
                let kind = match self.nodes.get(child) {
                    Some(Node::File(_)) => EntryKind::File,
                    Some(Node::Dir(_)) => EntryKind::Dir,
                    Some(Node::Link(_)) => EntryKind::Link,
                    None => EntryKind::Dir,
                };
                let made = !self.nodes.contains_key(parent);
                match self
                    .nodes
                    .entry(parent.to_string())
                    .or_insert_with(|| Node::Dir(Vec::new()))
                {
                    // Each path is listed once: an archive's own when it comes up here, one
                    // this walk made when it is made.
                    Node::Dir(entries) => {
                        entries.push(DirEntry {
                            name: name.to_string(),
                            kind,
                        });
                    }
                    Node::File(_) | Node::Link(_) => {
                        return Err(format!(
                            "{}: below {parent}, which is not a directory in the archive (refused)",
                            p.trim_start_matches('/')
                        ))
                    }
                }
                if !made {
                    break;
                }
                child = parent;
            }
        }
        Ok(Tree { nodes: self.nodes })
    }
}

impl Tree {
    /// The entry at `path`; for a path that is not there, `ENOTDIR` when the nearest entry
    /// above it is a file (as the kernel answers `file/x`), else `ENOENT`.
    fn get(&self, path: &str) -> Result<&Node, Error> {
        if let Some(n) = self.nodes.get(path) {
            return Ok(n);
        }
        let mut up = path;
        while let Some((parent, _)) = up.rsplit_once('/') {
            let parent = if parent.is_empty() { "/" } else { parent };
            match self.nodes.get(parent) {
                Some(Node::File(_)) => return Err(Error::from_raw_os_error(libc::ENOTDIR)),
                Some(_) => break,
                None if parent == "/" => break,
                None => up = parent,
            }
        }
        Err(Error::from(ErrorKind::NotFound))
    }

    /// `lstat`: what the entry itself is (a link is not followed).
    pub(super) fn lstat(&self, path: &str) -> Result<Entry, Error> {
        Ok(match self.get(path)? {
            Node::Link(_) => Entry::Link,
            Node::Dir(_) => Entry::Dir,
            Node::File(_) => Entry::Other,
        })
    }

    /// `readlink`: a link's target as written; `EINVAL` for anything else, as readlink(2).
    pub(super) fn read_link(&self, path: &str) -> Result<String, Error> {
        match self.get(path)? {
            Node::Link(t) => Ok(t.clone()),
            _ => Err(Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// A file's bytes, opened without following a final link (`ELOOP`, as `O_NOFOLLOW`); a
    /// directory opens but does not read (`EISDIR`).
    pub(super) fn read(&self, path: &str) -> Result<Vec<u8>, Error> {
        match self.get(path)? {
            Node::File(b) => Ok(b.clone()),
            Node::Dir(_) => Err(Error::from_raw_os_error(libc::EISDIR)),
            Node::Link(_) => Err(Error::from_raw_os_error(libc::ELOOP)),
        }
    }

    /// A directory's entries (unsorted, as `readdir`); `ENOTDIR` for a file, `ELOOP` for a link
    /// the caller did not resolve.
    pub(super) fn list(&self, path: &str) -> Result<&[DirEntry], Error> {
        match self.get(path)? {
            Node::Dir(e) => Ok(e),
            Node::File(_) => Err(Error::from_raw_os_error(libc::ENOTDIR)),
            Node::Link(_) => Err(Error::from_raw_os_error(libc::ELOOP)),
        }
    }

    /// Entries in the tree (the archive's, with the parents it left out).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `(name, link target, file bytes)`: a directory when neither.
    type Spec<'a> = (&'a str, Option<&'a str>, Option<&'a [u8]>);

    fn tree(entries: &[Spec<'_>]) -> Result<Tree, String> {
        let mut b = Builder::default();
        for (name, link, file) in entries {
            let p = kernel_path(name)?;
            match (link, file) {
                (Some(t), _) => b.link(p, t.to_string()),
                (None, Some(f)) => b.file(p, f.to_vec()),
                (None, None) => b.dir(p),
            }
        }
        b.finish()
    }

    #[test]
    fn names_become_kernel_paths_and_dot_dot_is_refused() {
        assert_eq!(kernel_path("./sys/bus/").unwrap(), "/sys/bus");
        assert_eq!(kernel_path(".").unwrap(), "/");
        assert_eq!(kernel_path("sys//x").unwrap(), "/sys/x");
        assert!(kernel_path("sys/../../etc").unwrap_err().contains("`..`"));
    }

    #[test]
    fn parents_exist_entries_are_listed_once_and_errors_are_the_kernels() {
        let t = tree(&[
            ("./", None, None),
            ("sys/devices/a/vendor", None, Some(b"0x10de\n")),
            ("sys/devices/a", None, None),
            ("sys/bus/pci/devices/a", Some("../../../devices/a"), None),
        ])
        .unwrap();
        let names = |p: &str| -> Vec<String> {
            let mut v: Vec<String> = t.list(p).unwrap().iter().map(|e| e.name.clone()).collect();
            v.sort();
            v
        };
        assert_eq!(names("/"), ["sys"]);
        assert_eq!(names("/sys"), ["bus", "devices"]);
        assert_eq!(names("/sys/devices/a"), ["vendor"]);
        assert_eq!(t.read("/sys/devices/a/vendor").unwrap(), b"0x10de\n");
        assert_eq!(t.lstat("/sys/bus/pci/devices/a").unwrap(), Entry::Link);
        assert_eq!(
            t.read_link("/sys/bus/pci/devices/a").unwrap(),
            "../../../devices/a"
        );
        let os = |e: Error| e.raw_os_error();
        assert_eq!(
            t.read("/sys/devices/a/vendor/x").map_err(os),
            Err(Some(libc::ENOTDIR))
        );
        assert_eq!(t.read("/sys/devices").map_err(os), Err(Some(libc::EISDIR)));
        assert_eq!(
            t.read("/sys/bus/pci/devices/a").map_err(os),
            Err(Some(libc::ELOOP))
        );
        assert_eq!(
            t.read("/sys/nowhere/x").map_err(|e| e.kind()),
            Err(ErrorKind::NotFound)
        );
        assert_eq!(t.read_link("/sys").map_err(os), Err(Some(libc::EINVAL)));
        assert_eq!(
            t.list("/sys/devices/a/vendor").map_err(os),
            Err(Some(libc::ENOTDIR))
        );
    }

    #[test]
    fn a_later_entry_replaces_an_earlier_one_and_nothing_hangs_below_a_file_or_link() {
        let t = tree(&[("f", None, Some(b"1")), ("f", None, Some(b"2"))]).unwrap();
        assert_eq!(t.read("/f").unwrap(), b"2");
        assert_eq!(t.list("/").unwrap().len(), 1);
        let e = tree(&[("f", None, Some(b"1")), ("f/g", None, Some(b"2"))]).unwrap_err();
        assert!(e.contains("f/g: below /f"), "{e}");
        let e = tree(&[("l", Some("/etc"), None), ("l/passwd", None, Some(b"x"))]).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        let e = tree(&[(".", None, Some(b"x"))]).unwrap_err();
        assert!(e.contains("root"), "{e}");
    }
}
