//! "Did you mean": the known names closest to a mistyped check id or category, for `--only`,
//! `--skip` and `explain`. Jaro-Winkler similarity (what clap uses for subcommands) on the
//! whole id and on the part after the category, plus "contains": `peermem` finds
//! `kmod.nvidia-peermem`.

use gdrdoctor_checks::checks::CHECKS;

/// Similarity at or above which a name is suggested.
const THRESHOLD: f64 = 0.85;
/// Names further than this below the best are not listed beside it.
const MARGIN: f64 = 0.05;

/// The names `--only` and `--skip` accept: every check id and every category.
pub fn selectable() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = CHECKS.iter().map(|c| c.id).collect();
    for c in CHECKS {
        if !v.contains(&c.category()) {
            v.push(c.category());
        }
    }
    v
}

/// The ids `explain` knows: checks, probe and watch findings.
pub fn explainable() -> Vec<&'static str> {
    gdrdoctor_checks::findings::all().map(|f| f.id).collect()
}

fn after_dot(s: &str) -> &str {
    s.split_once('.').map_or(s, |(_, n)| n)
}

fn score(input: &str, cand: &str) -> f64 {
    let mut s = strsim::jaro_winkler(input, cand);
    if input.contains('.') == cand.contains('.') {
        s = s.max(strsim::jaro_winkler(after_dot(input), after_dot(cand)) - 0.05);
    } else {
        s = s.max(strsim::jaro_winkler(input, after_dot(cand)) - 0.02);
    }
    // A word of the id (`peermem` in `kmod.nvidia-peermem`), not any substring (`port` is
    // not in `gdr-support`).
    let name = after_dot(input);
    if name.len() >= 4 && after_dot(cand).split('-').any(|w| w.starts_with(name)) {
        s = s.max(0.9);
    }
    // The whole word (`kmod.peermem` is `kmod.nvidia-peermem` as much as the start of
    // `kmod.peermem-abi`).
    let same_category = match (input.split_once('.'), cand.split_once('.')) {
        (Some((ic, _)), Some((cc, _))) => ic == cc,
        _ => true,
    };
    if same_category && name.len() >= 4 && after_dot(cand).split('-').any(|w| w == name) {
        s = s.max(0.97);
    }
    // The start of an id of the same category (`pcie.acs` for `pcie.acs-redirect`).
    if let (Some((ic, iname)), Some((cc, cname))) = (input.split_once('.'), cand.split_once('.')) {
        if ic == cc && iname.len() >= 3 && cname.starts_with(iname) {
            s = s.max(0.99);
        }
    }
    s
}

/// Up to three candidates closest to `input`, best first; empty when none is close.
pub fn similar<'a>(input: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let input = input.trim().to_lowercase();
    if input.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(f64, &'a str)> = candidates
        .iter()
        .map(|c| (score(&input, c), *c))
        .filter(|(s, _)| *s >= THRESHOLD)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    // Only the names about as close as the best one.
    let best = scored.first().map_or(0.0, |x| x.0);
    scored
        .into_iter()
        .filter(|(s, _)| *s >= best - MARGIN)
        .take(3)
        .map(|(_, c)| c)
        .collect()
}

/// ` (did you mean `a` or `b`?)`, or the empty string.
pub fn hint(input: &str, candidates: &[&str]) -> String {
    let near = similar(input, candidates);
    if near.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = near.iter().map(|n| format!("`{n}`")).collect();
    let list = match quoted.len() {
        1 => quoted[0].clone(),
        n => format!("{} or {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    };
    format!(" (did you mean {list}?)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(input: &str) -> Option<&'static str> {
        similar(input, &selectable()).first().copied()
    }

    #[test]
    fn typos_find_the_id() {
        assert_eq!(first("rdma.port"), Some("rdma.ports"));
        assert_eq!(first("iommu.mdoe"), Some("iommu.mode"));
        assert_eq!(first("pcie.acs"), Some("pcie.acs-redirect"));
        // `kmod.peermem` is now nearest to `kmod.peermem-abi` (issue 39), a check of its own.
        assert_eq!(first("kmod.peermem"), Some("kmod.peermem-abi"));
        for typo in ["kmod.peermem", "peermem", "nvidia-peermem"] {
            let near = similar(typo, &selectable());
            assert!(near.contains(&"kmod.nvidia-peermem"), "{typo}: {near:?}");
        }
        assert_eq!(first("gpu.bar"), Some("gpu.bar1"));
        assert_eq!(first("RDMA.DEVICES"), Some("rdma.devices"));
    }

    #[test]
    fn only_the_close_ones_are_listed() {
        assert_eq!(similar("rdma.port", &selectable()), vec!["rdma.ports"]);
        assert_eq!(similar("iommu.mdoe", &selectable()), vec!["iommu.mode"]);
    }

    #[test]
    fn typos_find_the_category() {
        assert_eq!(first("rdam"), Some("rdma"));
        assert_eq!(first("gpus"), Some("gpu"));
        assert_eq!(first("iommus"), Some("iommu"));
    }

    #[test]
    fn nonsense_finds_nothing() {
        for s in [
            "no.such-check",
            "frobnicate",
            "nope.nothing",
            "x",
            "",
            "zzzz",
        ] {
            assert_eq!(similar(s, &selectable()), Vec::<&str>::new(), "{s}");
        }
    }

    #[test]
    fn explain_knows_probe_ids() {
        assert_eq!(
            similar("probe.hang-injct", &explainable()).first(),
            Some(&"probe.hang-inject")
        );
    }

    #[test]
    fn hint_wording() {
        assert_eq!(hint("zzzz", &selectable()), "");
        assert_eq!(
            hint("rdma.port", &["rdma.ports"]),
            " (did you mean `rdma.ports`?)"
        );
        assert_eq!(
            hint("abcd", &["abcde", "abcdf"]),
            " (did you mean `abcde` or `abcdf`?)"
        );
        assert_eq!(
            hint("abcd", &["abcde", "abcdf", "abcdg"]),
            " (did you mean `abcde`, `abcdf` or `abcdg`?)"
        );
    }
}
