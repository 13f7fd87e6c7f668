//! A read that failed, with the kernel path it was for and why.

use super::{MAX_FILE, MAX_LINKS};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    PermissionDenied,
    Loop,
    NotADirectory,
    TooLarge,
    Io(String),
}

/// A read that failed, with the kernel path it was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub path: String,
    pub kind: ErrorKind,
}

impl ReadError {
    pub(super) fn new(path: &str, kind: ErrorKind) -> Self {
        ReadError {
            path: path.to_string(),
            kind,
        }
    }
    pub(super) fn io(path: &str, e: &std::io::Error) -> Self {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            _ if e.raw_os_error() == Some(libc::ELOOP) => ErrorKind::Loop,
            _ if e.raw_os_error() == Some(libc::ENOTDIR) => ErrorKind::NotADirectory,
            _ => ErrorKind::Io(e.to_string()),
        };
        ReadError::new(path, kind)
    }
    /// A definite "does not exist". `ENOTDIR` (a path component that is a file) is not: in
    /// sysfs and procfs it cannot happen, so it means a damaged capture, and an absent fact
    /// says so instead of turning into "absent on the node".
    pub fn is_not_found(&self) -> bool {
        matches!(self.kind, ErrorKind::NotFound)
    }
    /// The reason alone, for a [`Fact::Absent`](gdrdoctor_checks::model::Fact).
    pub fn reason(&self) -> String {
        match &self.kind {
            ErrorKind::NotFound => "not found".into(),
            ErrorKind::PermissionDenied => "permission denied (run as root)".into(),
            ErrorKind::Loop => format!("symlink loop (more than {MAX_LINKS} links)"),
            ErrorKind::NotADirectory => "not a directory".into(),
            ErrorKind::TooLarge => format!("larger than {MAX_FILE} bytes"),
            ErrorKind::Io(e) => e.clone(),
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason())
    }
}

impl std::error::Error for ReadError {}
