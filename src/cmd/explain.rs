//! `gdrdoctor explain ID`: the long-form page of a check or finding, laid out for the terminal
//! and paged there, plain Markdown elsewhere.

use crate::output::args::ColorChoice;
use crate::output::{color_enabled, emit, fail, EXIT_USAGE};
use crate::render;
use crate::sys::suggest;
use std::io::IsTerminal;

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "On a terminal the page is laid out for it (headings, lists, code, wrapped \
to its width) and shown through a pager: $PAGER, else `less -R` (PAGER=cat turns paging off). \
Piped or redirected, the page is printed as plain Markdown.\n\nExamples:\n  \
gdrdoctor explain iommu.mode\n  gdrdoctor explain kmod.nvidia-peermem --no-pager\n  \
gdrdoctor explain pcie.acs-redirect > acs.md"
)]
pub struct Args {
    /// A check id, as `gdrdoctor list` shows it (e.g. iommu.mode)
    #[arg(
        value_parser = crate::output::args::Ids(crate::output::args::IdSet::Findings),
        hide_possible_values = true
    )]
    pub id: String,
    /// On a terminal, print the laid-out page directly instead of through a pager
    #[arg(long)]
    pub no_pager: bool,
}

/// The page as plain Markdown when stdout is not a terminal; on a terminal, laid out for its
/// width and shown through the pager (unless `--no-pager`).
pub fn run(args: &Args) -> i32 {
    let (id, no_pager) = (args.id.as_str(), args.no_pager);
    let Some(page) = gdrdoctor_checks::findings::page(id) else {
        let hint = suggest::hint(id, &suggest::explainable());
        return fail(format!(
            "no check `{id}`{hint}; `gdrdoctor list` shows them"
        ));
    };
    if !std::io::stdout().is_terminal() {
        return if emit(page) { 0 } else { EXIT_USAGE };
    }
    let color = color_enabled(ColorChoice::Auto);
    let text = render::markdown::render(page, crate::sys::term::stdout_width(), color);
    if !no_pager && crate::sys::term::page(&text) {
        return 0;
    }
    if emit(&text) {
        0
    } else {
        EXIT_USAGE
    }
}
