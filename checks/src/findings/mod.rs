//! Every finding id gdrdoctor reports, one table per family, each row its id, title and page
//! ([`def::FindingDef`], made by one macro): the checks (`crate::checks::CHECKS`, whose rows
//! also hold the check and what a paste must show for it), the probes' verdicts ([`probe`]),
//! `watch` (`crate::watch::FINDINGS`), the site policy (`crate::policy::FINDINGS`) and
//! `diagnose` (`crate::paste::findings::FINDINGS`) and `preflight` (`crate::preflight::FINDINGS`). `gdrdoctor list` and `explain` read them
//! here: there is no second list of pages.

pub mod def;
pub mod probe;

pub use def::FindingDef;

/// Every finding row: the checks in registry order, then the probe findings, then the findings
/// of watch, the site policy, diagnose and preflight.
pub fn all() -> impl Iterator<Item = &'static FindingDef> {
    crate::checks::CHECKS
        .iter()
        .map(|c| &c.def)
        .chain(probe::all())
        .chain(crate::watch::FINDINGS.iter())
        .chain(crate::policy::FINDINGS.iter())
        .chain(crate::paste::findings::FINDINGS.iter())
        .chain(crate::preflight::FINDINGS.iter())
}

/// The row of a finding id, of any family.
pub fn find(id: &str) -> Option<&'static FindingDef> {
    all().find(|f| f.id == id)
}

/// The page of a finding id, of any family (what `gdrdoctor explain` prints).
pub fn page(id: &str) -> Option<&'static str> {
    find(id).map(|f| f.page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_in_one_table_once_and_finds_its_own_row() {
        let mut seen = std::collections::BTreeSet::new();
        for f in all() {
            assert!(seen.insert(f.id), "{} in two rows", f.id);
            assert!(find(f.id).is_some_and(|g| std::ptr::eq(g, f)), "{}", f.id);
            assert!(page(f.id).is_some_and(|p| p.contains(f.id)), "{}", f.id);
        }
        assert_eq!(page("no.such-id"), None);
    }
}
