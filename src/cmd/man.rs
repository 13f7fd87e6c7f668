//! `gdrdoctor man`: the man pages (roff), generated from the CLI definition the caller hands in.
//!
//! clap_mangen writes the title, NAME, SYNOPSIS, DESCRIPTION, OPTIONS, SUBCOMMANDS and VERSION
//! sections. A command's long help ends with prose, `Examples:` and `Exit codes ...:` blocks
//! (its `after_long_help`); clap_mangen would reflow all of it into one paragraph, so they are
//! written here instead: the prose after the description, the examples in an EXAMPLES section
//! with their lines kept as they are, the exit codes in an EXIT STATUS section, one tagged
//! paragraph per code (man-pages(7)'s order of sections).

use crate::output::{emit, fail, EXIT_USAGE};
use clap_mangen::Man;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:\n  gdrdoctor man | man -l -\n  \
gdrdoctor man --out-dir /usr/local/share/man/man1   # gdrdoctor.1, gdrdoctor-check.1, ...")]
pub struct Args {
    /// Write gdrdoctor.1 and a gdrdoctor-<command>.1 page per command into DIR instead of
    /// printing gdrdoctor.1
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// The blocks of a command's `after_long_help`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// Paragraphs of prose, in order.
    pub prose: Vec<String>,
    /// The example lines, as written (indentation and comments kept).
    pub examples: Vec<String>,
    /// What the exit-code heading says beyond "Exit codes" (`(as check)`), if anything.
    pub exit_note: Option<String>,
    /// The exit codes: (code, meaning); a meaning's continuation lines joined.
    pub exit_codes: Vec<(String, String)>,
}

/// Split an `after_long_help` into its prose, its examples and its exit codes. A heading is an
/// unindented line that starts with `Examples` or `Exit codes` and ends with `:`.
pub fn split_extra(text: &str) -> Extra {
    #[derive(PartialEq)]
    enum In {
        Prose,
        Examples,
        Exit,
    }
    let mut e = Extra::default();
    let mut at = In::Prose;
    let mut para = String::new();
    let flush = |para: &mut String, e: &mut Extra| {
        if !para.trim().is_empty() {
            e.prose.push(para.trim().to_string());
        }
        para.clear();
    };
    for line in text.lines() {
        let heading = !line.starts_with(' ') && line.trim_end().ends_with(':');
        if heading && line.starts_with("Examples") {
            flush(&mut para, &mut e);
            at = In::Examples;
            continue;
        }
        if heading && line.starts_with("Exit codes") {
            flush(&mut para, &mut e);
            at = In::Exit;
            let note = line
                .trim_end()
                .trim_end_matches(':')
                .trim_start_matches("Exit codes")
                .trim();
            if !note.is_empty() {
                e.exit_note = Some(note.to_string());
            }
            continue;
        }
        match at {
            In::Prose => {
                if line.trim().is_empty() {
                    flush(&mut para, &mut e);
                } else {
                    if !para.is_empty() {
                        para.push(' ');
                    }
                    para.push_str(line.trim());
                }
            }
            In::Examples => {
                if line.trim().is_empty() {
                    at = In::Prose;
                } else {
                    e.examples.push(line.trim_end().to_string());
                }
            }
            In::Exit => {
                let t = line.trim();
                if t.is_empty() {
                    at = In::Prose;
                    continue;
                }
                // `  0  meaning`: a code (digits) then the meaning; other lines continue it.
                let (code, rest) = t.split_once(char::is_whitespace).unwrap_or((t, ""));
                if code
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '-' || c == ',')
                {
                    e.exit_codes
                        .push((code.to_string(), rest.trim().to_string()));
                } else if let Some(last) = e.exit_codes.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(t);
                } else {
                    e.exit_codes.push((String::new(), t.to_string()));
                }
            }
        }
    }
    flush(&mut para, &mut e);
    e
}

/// Text for roff: backslashes and hyphens escaped, a line never starting with a control
/// character (`.` or `'`).
fn roff_text(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// One man page: clap_mangen's sections, with the `after_long_help` as prose, EXAMPLES and
/// EXIT STATUS sections of their own.
pub fn page(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let extra = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|t| split_extra(&t.to_string()))
        .unwrap_or_default();
    let man = Man::new(cmd.clone());
    let mut w: Vec<u8> = Vec::new();
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    man.render_description_section(&mut w)?;
    if !extra.prose.is_empty() && cmd.get_about().is_none() && cmd.get_long_about().is_none() {
        // clap_mangen writes no DESCRIPTION without an about text: the prose needs one.
        writeln!(w, ".SH DESCRIPTION")?;
    }
    for p in &extra.prose {
        writeln!(w, ".PP\n{}", roff_text(p))?;
    }
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut w)?;
    }
    if !extra.examples.is_empty() {
        writeln!(w, ".SH EXAMPLES\n.PP\n.nf\n.RS 4")?;
        for l in &extra.examples {
            writeln!(w, "{}", roff_text(l.trim_start()))?;
        }
        writeln!(w, ".RE\n.fi")?;
    }
    if !extra.exit_codes.is_empty() {
        writeln!(w, ".SH \"EXIT STATUS\"")?;
        if let Some(n) = &extra.exit_note {
            writeln!(w, ".PP\n{}", roff_text(n))?;
        }
        for (code, meaning) in &extra.exit_codes {
            writeln!(w, ".TP\n.B {}\n{}", roff_text(code), roff_text(meaning))?;
        }
    }
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        man.render_version_section(&mut w)?;
    }
    Ok(w)
}

/// Every page: `cmd`'s and, recursively, one per visible subcommand, named as clap_mangen
/// names them (`gdrdoctor-check.1`).
fn write_all(cmd: &clap::Command, dir: &Path) -> Result<(), String> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub, dir)?;
    }
    let path = dir.join(Man::new(cmd.clone()).get_filename());
    let bytes = page(cmd).map_err(|e| format!("rendering {}: {e}", path.display()))?;
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// `gdrdoctor man`: gdrdoctor.1 on stdout, or every page (one per command) into a directory.
pub fn run(args: &Args, cmd: clap::Command) -> i32 {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = args.out_dir.as_deref() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return fail(format!("{}: {e}", dir.display()));
        }
        return match write_all(&cmd, dir) {
            Ok(()) => 0,
            Err(e) => fail(format!("writing man pages to {}: {e}", dir.display())),
        };
    }
    let buf = match page(&cmd) {
        Ok(b) => b,
        Err(e) => return fail(format!("rendering the man page: {e}")),
    };
    if emit(&String::from_utf8_lossy(&buf)) {
        0
    } else {
        EXIT_USAGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_examples_and_exit_codes_apart() {
        let e = split_extra(
            "Reads the areas.\nSecond line.\n\nExamples:\n  gdrdoctor watch --pid 1   # one job\n  \
             gdrdoctor watch --all\n\nExit codes (as check):\n  0  no stall\n  3  an area could \
             not be read;\n     status error\n",
        );
        assert_eq!(e.prose, ["Reads the areas. Second line."]);
        assert_eq!(
            e.examples,
            [
                "  gdrdoctor watch --pid 1   # one job",
                "  gdrdoctor watch --all"
            ]
        );
        assert_eq!(e.exit_note.as_deref(), Some("(as check)"));
        assert_eq!(
            e.exit_codes,
            [
                ("0".to_string(), "no stall".to_string()),
                (
                    "3".to_string(),
                    "an area could not be read; status error".to_string()
                )
            ]
        );
    }

    #[test]
    fn roff_control_characters_are_escaped() {
        assert_eq!(roff_text(".hidden"), "\\&.hidden");
        assert_eq!(roff_text("a-b \\n"), "a\\-b \\en");
    }
}
