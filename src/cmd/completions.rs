//! `gdrdoctor completions SHELL`: the completion script, generated from the CLI definition the
//! caller hands in.

use crate::output::{emit, EXIT_USAGE};

#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:\n  \
gdrdoctor completions bash > /etc/bash_completion.d/gdrdoctor\n  \
gdrdoctor completions bash > ~/.local/share/bash-completion/completions/gdrdoctor\n  \
gdrdoctor completions zsh > \"${fpath[1]}/_gdrdoctor\"\n  \
gdrdoctor completions fish > ~/.config/fish/completions/gdrdoctor.fish")]
pub struct Args {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `gdrdoctor completions SHELL`: the completion script, generated from the CLI definition.
pub fn run(args: &Args, mut cmd: clap::Command) -> i32 {
    let shell = args.shell;
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "gdrdoctor", &mut buf);
    if emit(&String::from_utf8_lossy(&buf)) {
        0
    } else {
        EXIT_USAGE
    }
}
