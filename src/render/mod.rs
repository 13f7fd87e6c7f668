//! Renderers: one [`Report`] in, text out. The JSON is the contract; the table is for people.

use gdrdoctor_checks::report::Report;

pub mod diagnose;
pub mod diagnose_job;
pub mod fleet;
pub mod fleet_html;
pub mod fleet_page;
pub mod fold;
pub mod grid;
pub mod junit;
pub mod markdown;
pub mod oneline;
pub mod paste_md;
pub mod preflight;
pub mod prometheus;
pub mod sanitize;
pub mod svg;
pub mod svg_layout;
pub mod svg_png;
pub mod table;
pub mod topo;
pub mod topo_paste;
pub mod wrap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prometheus,
    Oneline,
}

/// `text` painted with `style`: anstyle's escape sequences, then a reset. Callers paint only
/// when colour is on (`--color`, whose `auto` reads NO_COLOR, CLICOLOR,
/// CLICOLOR_FORCE and TERM); table cells are painted by comfy-table ([`grid::Paint`]).
pub fn paint(text: &str, style: anstyle::Style) -> String {
    if style == anstyle::Style::new() {
        return text.to_string();
    }
    format!("{}{text}{}", style.render(), style.render_reset())
}

pub struct Style {
    pub color: bool,
    pub verbose: bool,
    /// With `--fail-on warn`, JUnit shows warnings as failures.
    pub warn_is_failure: bool,
}

pub fn render(report: &Report, format: Format, style: &Style) -> String {
    match format {
        Format::Table => table::render(report, style),
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            s.push('\n');
            s
        }
        Format::Junit => junit::render(report, style),
        Format::Prometheus => prometheus::render(report),
        Format::Oneline => oneline::render(report, style),
    }
}
