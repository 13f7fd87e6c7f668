//! Fact helpers shared by the collectors: a read becomes a known fact with its source or an
//! absent one with the reason, and a missing file means "absent on the node" only on a complete
//! root whose anchor directory exists.

use crate::source::reader::{ReadError, Root};
use gdrdoctor_checks::model::Fact;

pub(super) const NOT_CAPTURED: &str = "not in this capture";

pub(super) fn fact<T>(path: &str, r: Result<T, ReadError>) -> Fact<T> {
    match r {
        Ok(v) => Fact::known(v, path),
        Err(e) => Fact::absent(path, e.reason()),
    }
}

/// Parse a file read through the root; a parse failure is an absent fact naming the content.
pub(super) fn parsed<T>(root: &Root, path: &str, f: impl FnOnce(&str) -> Option<T>) -> Fact<T> {
    match root.read_trimmed(path) {
        Ok(s) => match f(&s) {
            Some(v) => Fact::known(v, path),
            None => Fact::absent(path, format!("unrecognised content {:?}", truncate(&s, 60))),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// A file whose absence is itself an answer, when `anchor` exists.
pub(super) fn optional_file(root: &Root, path: &str, anchor: &str) -> Fact<Option<String>> {
    match root.read_trimmed(path) {
        Ok(s) => Fact::known(Some(s), path),
        Err(e) if e.is_not_found() && !root.is_complete() => Fact::absent(path, NOT_CAPTURED),
        Err(e) if e.is_not_found() => match root.exists(anchor) {
            Ok(true) => Fact::known(None, path),
            Ok(false) => Fact::absent(path, format!("{NOT_CAPTURED} ({anchor} missing)")),
            Err(e) => Fact::absent(path, e.to_string()),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

/// A directory listing whose absence means "empty" when `anchor` exists.
pub(super) fn optional_dir(root: &Root, path: &str, anchor: &str) -> Fact<Option<Vec<String>>> {
    match root.read_dir(path) {
        Ok(v) => Fact::known(Some(v.into_iter().map(|e| e.name).collect()), path),
        Err(e) if e.is_not_found() && !root.is_complete() => Fact::absent(path, NOT_CAPTURED),
        Err(e) if e.is_not_found() => match root.exists(anchor) {
            Ok(true) => Fact::known(None, path),
            Ok(false) => Fact::absent(path, format!("{NOT_CAPTURED} ({anchor} missing)")),
            Err(e) => Fact::absent(path, e.to_string()),
        },
        Err(e) => Fact::absent(path, e.reason()),
    }
}

pub(super) fn list_or_empty(root: &Root, path: &str, anchor: &str) -> Fact<Vec<String>> {
    match optional_dir(root, path, anchor) {
        Fact::Known { value, source } => Fact::Known {
            value: value.unwrap_or_default(),
            source,
        },
        Fact::Absent { source, reason } => Fact::Absent { source, reason },
    }
}

pub(super) fn basename(s: &str) -> String {
    s.rsplit('/').next().unwrap_or(s).to_string()
}
