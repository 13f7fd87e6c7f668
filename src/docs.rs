//! The long-form pages (`docs/checks/<id>.md`) for `gdrdoctor explain`: every finding family's
//! rows embed their own pages in the pure crate (`gdrdoctor_checks::findings`), so there is no
//! second list to keep in step.

/// Every page: the checks in registry order, then the probe findings, then the findings of
/// watch, the site policy and diagnose.
pub fn pages() -> Vec<(&'static str, &'static str)> {
    gdrdoctor_checks::findings::all()
        .map(|f| (f.id, f.page))
        .collect()
}

/// The page of a check, probe, watch, policy or diagnose finding id.
pub fn page(id: &str) -> Option<&'static str> {
    gdrdoctor_checks::findings::page(id)
}
