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
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if shell == clap_complete::Shell::Fish {
        text.push_str(&fish_explain_ids());
    }
    if emit(&text) {
        0
    } else {
        EXIT_USAGE
    }
}

/// clap_complete's fish script completes no positional argument: `gdrdoctor explain <TAB>` gave
/// file names. The check and finding ids, each with its one-line summary, as bash and zsh have
/// them.
fn fish_explain_ids() -> String {
    let mut out = String::from("# gdrdoctor explain ID: the check and finding ids\n");
    for f in gdrdoctor_checks::findings::all() {
        let summary: String = f
            .title
            .chars()
            .map(|c| if c == '\'' || c == '\\' { ' ' } else { c })
            .collect();
        out.push_str(&format!(
            "complete -c gdrdoctor -n \"__fish_gdrdoctor_using_subcommand explain\" -f -a \"{}\" -d '{}'\n",
            f.id, summary
        ));
    }
    out
}
