//! The terminal: how wide stdout is, and showing long text through a pager.
//!
//! Width: the terminal's own size (`ioctl(TIOCGWINSZ)` on stdout) when stdout is one, else the
//! `COLUMNS` variable (shells set it but do not export it, so it is there only when the user
//! exported it), else a fixed default: [`DEFAULT_WIDTH`] when stdout is not a terminal (a pipe,
//! a file, a CI log), [`DEFAULT_TTY_WIDTH`] for a terminal that reports no size.

use std::io::{IsTerminal, Write};
use std::process::{Command, Stdio};

/// Width of the table when stdout is not a terminal and COLUMNS is not exported.
pub const DEFAULT_WIDTH: usize = 120;
/// Width for a terminal that reports a size of 0 (some serial consoles and fresh ptys).
pub const DEFAULT_TTY_WIDTH: usize = 80;
/// Narrower than this is not honoured (the layout would be all indentation).
pub const MIN_WIDTH: usize = 40;

/// The columns of the terminal on `fd`, if `fd` is a terminal that reports a size.
pub fn tty_columns(fd: libc::c_int) -> Option<usize> {
    // SAFETY: `struct winsize` is four integers: all-zero is a valid value.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one `struct winsize` into the pointed-to, properly sized and
    // aligned local; it reads nothing else and fails harmlessly on a non-terminal fd.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws as *mut libc::winsize) };
    (rc == 0 && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

/// The width decision, pure: the terminal's columns (when stdout is a terminal), else COLUMNS,
/// else the default for a terminal or for a pipe.
pub fn width_from(is_tty: bool, tty_cols: Option<usize>, columns_env: Option<&str>) -> usize {
    let env = columns_env
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    let w = match (is_tty, tty_cols, env) {
        (true, Some(c), _) => c,
        (_, _, Some(c)) => c,
        (true, None, None) => DEFAULT_TTY_WIDTH,
        (false, _, None) => DEFAULT_WIDTH,
    };
    w.max(MIN_WIDTH)
}

/// How wide text written to stdout may be.
pub fn stdout_width() -> usize {
    let is_tty = std::io::stdout().is_terminal();
    let cols = if is_tty {
        tty_columns(libc::STDOUT_FILENO)
    } else {
        None
    };
    width_from(is_tty, cols, std::env::var("COLUMNS").ok().as_deref())
}

/// The pager command: `$PAGER` (run by `sh -c`, so it may carry arguments), else `less -R`.
/// `None` when paging is turned off (`PAGER` set to the empty string or `cat`).
pub fn pager_command(pager_env: Option<&str>) -> Option<String> {
    match pager_env.map(str::trim) {
        None => Some("less -R".into()),
        Some("") | Some("cat") => None,
        Some(p) => Some(p.to_string()),
    }
}

/// Show `text` through the pager. Returns false when no pager ran (paging turned off, or the
/// pager could not be started): the caller prints the text itself. Call it only when stdout
/// is a terminal.
pub fn page(text: &str) -> bool {
    let Some(cmd) = pager_command(std::env::var("PAGER").ok().as_deref()) else {
        return false;
    };
    let mut c = Command::new("sh");
    c.arg("-c").arg(&cmd).stdin(Stdio::piped());
    // As git does: quit when the page fits on one screen, pass colors, keep the page on the
    // screen after quitting. Only when the user has not chosen their own less options.
    if std::env::var_os("LESS").is_none() {
        c.env("LESS", "FRX");
    }
    if std::env::var_os("LV").is_none() {
        c.env("LV", "-c");
    }
    let Ok(mut child) = c.spawn() else {
        return false;
    };
    // Ctrl-C belongs to the pager while it runs: gdrdoctor must not die under it and leave the
    // pager fighting the shell for the terminal.
    // SAFETY: setting a signal disposition to SIG_IGN and back has no memory effects.
    let old_int = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    // SAFETY: as for SIGINT: a disposition change, restored below, touches no memory of ours.
    let old_quit = unsafe { libc::signal(libc::SIGQUIT, libc::SIG_IGN) };
    if let Some(mut stdin) = child.stdin.take() {
        // The user may quit the pager before reading everything: a closed pipe is not an error.
        let _ = stdin.write_all(text.as_bytes());
    }
    let status = child.wait();
    // SAFETY: puts back the dispositions signal() returned above (a handler gdrdoctor
    // installed, SIG_DFL or SIG_IGN): no memory effects.
    unsafe {
        libc::signal(libc::SIGINT, old_int);
        libc::signal(libc::SIGQUIT, old_quit);
    }
    // `sh -c` exits 127 when the pager command does not exist: print the text instead.
    !matches!(status, Ok(s) if s.code() == Some(127))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_size_wins_over_columns() {
        assert_eq!(width_from(true, Some(80), Some("200")), 80);
        assert_eq!(width_from(true, Some(200), None), 200);
    }

    #[test]
    fn columns_when_not_a_terminal_or_no_size() {
        assert_eq!(width_from(false, None, Some("80")), 80);
        assert_eq!(width_from(true, None, Some("132")), 132);
        // A pipe never asks the terminal, even if the caller passes a size.
        assert_eq!(width_from(false, Some(80), Some("100")), 100);
    }

    #[test]
    fn defaults() {
        assert_eq!(width_from(false, None, None), DEFAULT_WIDTH);
        assert_eq!(width_from(false, None, Some("")), DEFAULT_WIDTH);
        assert_eq!(width_from(false, None, Some("wide")), DEFAULT_WIDTH);
        assert_eq!(width_from(false, None, Some("0")), DEFAULT_WIDTH);
        assert_eq!(width_from(true, None, None), DEFAULT_TTY_WIDTH);
        assert_eq!(width_from(false, Some(80), None), DEFAULT_WIDTH);
    }

    #[test]
    fn too_narrow_is_raised_to_the_minimum() {
        assert_eq!(width_from(true, Some(12), None), MIN_WIDTH);
        assert_eq!(width_from(false, None, Some("5")), MIN_WIDTH);
    }

    #[test]
    fn pager_choice() {
        assert_eq!(pager_command(None).as_deref(), Some("less -R"));
        assert_eq!(pager_command(Some("")), None);
        assert_eq!(pager_command(Some("cat")), None);
        assert_eq!(pager_command(Some("most -s")).as_deref(), Some("most -s"));
    }

    #[test]
    fn a_pipe_has_no_terminal_size() {
        let mut fds = [0; 2];
        // SAFETY: pipe() fills the two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        assert_eq!(tty_columns(fds[1]), None);
        // SAFETY: closes the two descriptors pipe() just opened, which nothing else owns.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
