//! Completeness: every registered check has a doc page (and every page a check), the generated
//! docs/checks.md is current, and every fixture scenario is documented.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use gdrdoctor_checks::checks::CHECKS;

#[test]
fn every_check_has_a_page_and_every_page_a_check() {
    // The pages come from the registries (each row embeds its own page): every check and probe
    // finding id has one, and every page in docs/checks belongs to one of them.
    let pages = gdrdoctor_checks::findings::all()
        .map(|f| (f.id, f.page))
        .collect::<Vec<_>>();
    let ids: Vec<&str> = pages.iter().map(|(i, _)| *i).collect();
    let checks: Vec<&str> = CHECKS.iter().map(|c| c.id).collect();
    let probes: Vec<&str> = gdrdoctor::probe::finding_defs().map(|f| f.id).collect();
    let watch: Vec<&str> = gdrdoctor_checks::watch::FINDINGS
        .iter()
        .map(|f| f.id)
        .collect();
    let policy: Vec<&str> = gdrdoctor_checks::policy::FINDINGS
        .iter()
        .map(|f| f.id)
        .collect();
    let pastes: Vec<&str> = gdrdoctor_checks::paste::findings::FINDINGS
        .iter()
        .map(|f| f.id)
        .collect();
    let preflight: Vec<&str> = gdrdoctor_checks::preflight::FINDINGS
        .iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(
        ids,
        [checks, probes, watch, policy, pastes, preflight].concat(),
        "checks first, then probe findings, then watch, policy, diagnose and preflight findings"
    );
    let mut files: Vec<String> = std::fs::read_dir(repo().join("docs/checks"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".md")
                .to_string()
        })
        .collect();
    files.sort();
    let mut sorted: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(files, sorted, "docs/checks/*.md must match the registries");
    for (id, page) in &pages {
        assert_eq!(
            Some(*page),
            gdrdoctor_checks::findings::page(id),
            "{id}: explain finds its page"
        );
        assert!(page.len() > 400, "{id}: page too short to teach anything");
        assert!(
            page.contains("## How to fix") || page.contains("## Fix"),
            "{id}: no fix section"
        );
        assert!(page.contains("## Sources"), "{id}: no sources section");
    }
}

#[test]
fn generated_check_list_is_current() {
    let want = gdrdoctor::cmd::list::markdown_list();
    let path = repo().join("docs/checks.md");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if std::env::var("GDRDOCTOR_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    assert_eq!(
        have, want,
        "docs/checks.md is stale: `gdrdoctor list --format markdown > docs/checks.md`"
    );
}

#[test]
fn every_fixture_is_documented() {
    let readme = std::fs::read_to_string(repo().join("fixtures/README.md")).unwrap();
    for s in scenarios() {
        assert!(
            readme.contains(&s),
            "fixtures/README.md does not describe {s}"
        );
    }
}

/// `list --format json` names every id the table lists and every page in docs/checks/ (it gave
/// the 50 checks of the registry and left out the probes', watch's, diagnose's, preflight's
/// and the policy's findings, which `explain` and the table cover).
#[test]
fn the_json_list_names_every_documented_id() {
    let (code, out, _) = run(&["list", "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: std::collections::BTreeSet<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    let pages: std::collections::BTreeSet<String> = std::fs::read_dir(repo().join("docs/checks"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".md"))
                .map(String::from)
        })
        .collect();
    assert_eq!(ids, pages);
}
