//! The one seam to the outside: standard output and `-o FILE` (every command writes through
//! [`write_output`] or [`emit`]), colour, and the exit codes. A command renders with
//! `crate::render` and hands the text here; nothing below this layer prints a report.

pub mod args;

use crate::render::{self, Style};
use args::{ColorChoice, OutputArgs};
use gdrdoctor_checks::report::{FailOn, Report};
use std::io::{IsTerminal, Write};

use std::path::Path;

/// Exit code for "gdrdoctor could not run".
pub const EXIT_USAGE: i32 = 2;

/// Say why gdrdoctor could not run, on stderr, and return [`EXIT_USAGE`].
pub fn fail(msg: impl std::fmt::Display) -> i32 {
    // Error text can quote the node (an archive's entry names, a file's content): escaped,
    // its line breaks kept (a policy error shows the line and a caret under the column).
    eprintln!(
        "gdrdoctor: error: {}",
        render::sanitize::message(&msg.to_string())
    );
    EXIT_USAGE
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) -> bool {
    emit_bytes(text.as_bytes())
}

/// [`emit`] for bytes (a PNG).
pub fn emit_bytes(bytes: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => true,
        Err(e) => {
            eprintln!("gdrdoctor: error: writing to stdout: {e}");
            false
        }
    }
}

/// The one writer behind every `-o FILE` (check, probe, watch): `-` (and `/dev/stdout`,
/// `/dev/fd/1`, `/proc/self/fd/1`) is stdout, written through the process's own descriptor so
/// that `-o /dev/stdout >> log` appends; a path that does not exist or is a regular file is
/// replaced atomically ([`crate::state::atomic::replace`]); anything else that exists (a device such as
/// `/dev/null`, a FIFO, a socket, or a symlink) is written in place through `open(2)`, never
/// replaced: as root, renaming over `/dev/null` would turn the device into a regular file.
pub fn write_output(path: &Path, text: &str) -> Result<(), String> {
    write_output_bytes(path, text.as_bytes())
}

/// [`write_output`] for bytes (a PNG).
pub fn write_output_bytes(path: &Path, text: &[u8]) -> Result<(), String> {
    let shown = path.display();
    let as_str = path.to_str().unwrap_or("");
    if matches!(
        as_str,
        "-" | "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1"
    ) {
        return if emit_bytes(text) {
            Ok(())
        } else {
            Err("writing to stdout failed".to_string())
        };
    }
    if matches!(as_str, "/dev/stderr" | "/dev/fd/2" | "/proc/self/fd/2") {
        let mut e = std::io::stderr().lock();
        return e
            .write_all(text)
            .and_then(|_| e.flush())
            .map_err(|e| format!("{shown}: {e}"));
    }
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return crate::state::atomic::replace(path, text, crate::state::atomic::Kind::Output)
        }
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let ft = md.file_type();
    if ft.is_file() {
        return crate::state::atomic::replace(path, text, crate::state::atomic::Kind::Output);
    }
    if ft.is_dir() {
        return Err(format!("{shown}: is a directory"));
    }
    // A device, a FIFO, a socket or a symlink: write through it. Truncate only what is (or
    // links to) a regular file; a dangling link is not followed into a new file.
    let target = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if target.is_dir() {
        return Err(format!("{shown}: is a directory"));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(target.is_file())
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    match f.write_all(text).and_then(|_| f.flush()) {
        Ok(()) => Ok(()),
        // A reader that went away (a FIFO's, `| head`) is not an error, as for stdout.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// Render a report as `--format` and the output flags say, write it ([`deliver_bytes`]), and
/// return its exit code (or [`EXIT_USAGE`] when it could not be written).
pub fn deliver(report: &Report, format: render::Format, out: &OutputArgs) -> i32 {
    // `-o -` is stdout, laid out and coloured as stdout is.
    let output = out.file();
    let color = output.is_none() && color_enabled(out.color);
    let style = Style {
        color,
        verbose: out.verbose,
        warn_is_failure: out.fail_on() == FailOn::Warn,
    };
    let text = match format {
        render::Format::Table => render::table::render_width(report, &style, text_width(output)),
        _ => render::render(report, format, &style),
    };
    match deliver_bytes(text.as_bytes(), output, false) {
        0 => report.summary.exit_code,
        code => code,
    }
}

/// How wide a text table may be when written to `output`: a file (or a device, or a FIFO) is
/// not the terminal and gets the fixed width ([`crate::sys::term::DEFAULT_WIDTH`]); stdout (no
/// `-o`, or `-o -`) gets the terminal's ([`crate::sys::term::stdout_width`]).
pub fn text_width(output: Option<&Path>) -> usize {
    match output.filter(|p| p.as_os_str() != "-") {
        Some(_) => crate::sys::term::DEFAULT_WIDTH,
        None => crate::sys::term::stdout_width(),
    }
}

/// `--color`: always, never, or auto. Auto follows the conventions every command shares, each
/// read by anstyle-query (the crate under anstream): `NO_COLOR` (not empty) turns colour off;
/// `CLICOLOR_FORCE` (not empty, not `0`) forces it; `CLICOLOR=0` and `TERM=dumb` (or no `TERM`)
/// turn it off; otherwise colour when stdout is a terminal. Unlike anstream's own `auto`, a CI
/// environment (`CI=...`) does not colour a `TERM=dumb` terminal.
pub fn color_enabled(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => auto_color(
            Conventions {
                no_color: anstyle_query::no_color(),
                force: anstyle_query::clicolor_force()
                    && std::env::var_os("CLICOLOR_FORCE").is_some_and(|v| v != "0"),
                clicolor: anstyle_query::clicolor(),
                term_supports_color: anstyle_query::term_supports_color(),
            },
            std::io::stdout().is_terminal(),
        ),
    }
}

/// What the environment says of colour (see [`color_enabled`]).
struct Conventions {
    no_color: bool,
    force: bool,
    clicolor: Option<bool>,
    term_supports_color: bool,
}

/// The `auto` rule of [`color_enabled`].
fn auto_color(c: Conventions, is_tty: bool) -> bool {
    if c.no_color {
        false
    } else if c.force {
        true
    } else if c.clicolor == Some(false) || !c.term_supports_color {
        false
    } else {
        is_tty
    }
}

/// Write `out` to `output`, or to stdout (`-` or none); a `binary` (a PNG) is not written to a
/// terminal. 0, or [`EXIT_USAGE`] with the reason on stderr.
pub fn deliver_bytes(out: &[u8], output: Option<&Path>, binary: bool) -> i32 {
    // `-o -` is stdout (and a png is still not written to a terminal).
    match output.filter(|p| p.as_os_str() != "-") {
        Some(p) => match write_output_bytes(p, out) {
            Ok(()) => 0,
            Err(e) => fail(e),
        },
        None if binary && std::io::stdout().is_terminal() => {
            fail("not writing a png to a terminal: pass -o FILE (or redirect stdout to a file)")
        }
        None => {
            let mut o = std::io::stdout().lock();
            match o.write_all(out).and_then(|_| o.flush()) {
                Ok(()) => 0,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                Err(e) => fail(format!("writing to stdout: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod color_tests {
    use super::{auto_color, Conventions};

    fn c(no_color: bool, force: bool, clicolor: Option<bool>, term: bool) -> Conventions {
        Conventions {
            no_color,
            force,
            clicolor,
            term_supports_color: term,
        }
    }

    #[test]
    fn the_conventions_decide_auto() {
        assert!(auto_color(c(false, false, None, true), true));
        assert!(!auto_color(c(false, false, None, true), false));
        // TERM=dumb is off on a terminal, whatever CI says (the CI failure of fac82a6).
        assert!(!auto_color(c(false, false, None, false), true));
        assert!(!auto_color(c(false, false, Some(true), false), true));
        assert!(!auto_color(c(true, false, None, true), true));
        assert!(!auto_color(c(false, false, Some(false), true), true));
        assert!(auto_color(c(false, true, None, false), false));
        assert!(!auto_color(c(true, true, None, true), true));
    }
}
