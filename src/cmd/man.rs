//! `gdrdoctor man`: the man pages (roff), generated from the CLI definition the caller hands in.

use crate::output::{emit, fail, EXIT_USAGE};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:\n  gdrdoctor man | man -l -\n  \
gdrdoctor man --out-dir /usr/local/share/man/man1   # gdrdoctor.1, gdrdoctor-check.1, ...")]
pub struct Args {
    /// Write gdrdoctor.1 and a gdrdoctor-<command>.1 page per command into DIR instead of
    /// printing gdrdoctor.1
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `gdrdoctor man`: gdrdoctor.1 on stdout, or every page (one per command) into a directory.
pub fn run(args: &Args, cmd: clap::Command) -> i32 {
    let out_dir = args.out_dir.as_deref();
    if let Some(dir) = out_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return fail(format!("{}: {e}", dir.display()));
        }
        return match clap_mangen::generate_to(cmd, dir) {
            Ok(()) => 0,
            Err(e) => fail(format!("writing man pages to {}: {e}", dir.display())),
        };
    }
    let mut buf = Vec::new();
    if let Err(e) = clap_mangen::Man::new(cmd).render(&mut buf) {
        return fail(format!("rendering the man page: {e}"));
    }
    if emit(&String::from_utf8_lossy(&buf)) {
        0
    } else {
        EXIT_USAGE
    }
}
