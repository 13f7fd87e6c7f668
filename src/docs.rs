//! The long-form pages (`docs/checks/<id>.md`) for `gdrdoctor explain`, found from the
//! registries: each check row and each probe finding row embeds its own page, so there is no
//! second list to keep in step.

/// Every page: the checks in registry order, then the probe findings, then the findings of
/// watch, the site policy and diagnose.
pub fn pages() -> Vec<(&'static str, &'static str)> {
    gdrdoctor_checks::checks::CHECKS
        .iter()
        .map(|c| (c.id, c.page))
        .chain(crate::probe::finding_defs().map(|f| (f.id, f.page)))
        .chain(crate::collect::watch::PAGES.iter().copied())
        .chain(crate::source::policy::PAGES.iter().copied())
        .chain(crate::cmd::diagnose::PAGES.iter().copied())
        .chain(crate::cmd::preflight::PAGES.iter().copied())
        .collect()
}

/// The page of a check, probe, watch or policy finding id.
pub fn page(id: &str) -> Option<&'static str> {
    pages().into_iter().find(|(i, _)| *i == id).map(|(_, p)| p)
}
