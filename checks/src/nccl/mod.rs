//! Agreeing with NCCL: its GDR rule per version ([`rule`]), the environment that changes it
//! ([`env`]), which NCCL is on the node (from the model's [`NcclFacts`], found by `src/live/nccl.rs`), NCCL's
//! own topology dump ([`topo_dump`]) and the comparison of what NCCL did with what gdrdoctor
//! predicted ([`compare`]).

pub mod compare;
pub mod env;
pub mod rule;
pub mod topo_dump;
pub mod version;

use crate::model::{NcclFacts, NcclLibrary};
pub use version::{Chosen, PathKind, Version};

/// The rules of version `v`, found through `source`: clamped to the versions gdrdoctor models
/// (a newer NCCL gets the newest rules, an older one 2.4's), and said so.
pub fn clamp(v: Version, source: String) -> Chosen {
    if v > version::NEWEST {
        Chosen {
            version: version::NEWEST,
            source: format!(
                "{source}; NCCL {v} is newer than the rules gdrdoctor knows, so {}'s apply",
                version::NEWEST
            ),
            assumed: false,
        }
    } else if v < version::OLDEST {
        Chosen {
            version: version::OLDEST,
            source: format!(
                "{source}; NCCL {v} predates the rules gdrdoctor models, so 2.4's apply"
            ),
            assumed: false,
        }
    } else {
        Chosen {
            version: v,
            source,
            assumed: false,
        }
    }
}

/// The version whose rules apply, and why. `facts` `None` (or absent): nothing is known, the
/// newest rules apply and the source says so.
pub fn choose(facts: Option<&NcclFacts>, absent: Option<&str>) -> Chosen {
    let Some(f) = facts else {
        return Chosen::newest(absent.unwrap_or("no NCCL version known"));
    };
    if let Some(r) = &f.requested {
        if let Some(v) = Version::parse(r) {
            return clamp(v, format!("--nccl-version {r}"));
        }
    }
    let found: Vec<(Version, &NcclLibrary)> = f
        .libraries
        .iter()
        .filter_map(|l| {
            l.version
                .as_deref()
                .and_then(Version::parse)
                .map(|v| (v, l))
        })
        .collect();
    match found.first() {
        Some((v, l)) => {
            let mut source = format!(
                "libnccl.so.2 {v} at {} ({}{})",
                l.path,
                l.origin,
                l.how
                    .as_deref()
                    .map(|h| format!(", {h}"))
                    .unwrap_or_default()
            );
            let others: Vec<String> = found
                .iter()
                .skip(1)
                .filter(|(w, _)| w != v)
                .map(|(w, o)| format!("{w} at {}", o.path))
                .collect();
            if !others.is_empty() {
                source.push_str(&format!(
                    "; also on this node: {} (pass --nccl-version for the one your job loads)",
                    others.join(", ")
                ));
            }
            clamp(*v, source)
        }
        None => {
            let why = if f.libraries.is_empty() {
                if f.searched.is_empty() {
                    "no libnccl.so.2 found".to_string()
                } else {
                    format!("no libnccl.so.2 found in {}", f.searched.join(", "))
                }
            } else {
                format!(
                    "the version of {} could not be read: {}",
                    f.libraries
                        .iter()
                        .map(|l| l.path.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    f.libraries
                        .iter()
                        .filter_map(|l| l.error.as_deref())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            };
            Chosen::newest(&why)
        }
    }
}

/// The version and environment a node's verdicts use.
pub fn config(node: &crate::model::Node) -> rule::Config {
    let rules = match &node.live.nccl {
        crate::model::Fact::Known { value, .. } => choose(Some(value), None),
        crate::model::Fact::Absent { reason, .. } => choose(None, Some(reason)),
    };
    let origin = match &node.env {
        crate::model::Fact::Known { source, .. } => source.clone(),
        crate::model::Fact::Absent { reason, .. } => format!("no environment known: {reason}"),
    };
    let env = env::NcclEnv::parse(node.env.get(), &origin, rules.version);
    rule::Config { rules, env }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(path: &str, v: Option<&str>) -> NcclLibrary {
        NcclLibrary {
            path: path.into(),
            version: v.map(str::to_string),
            how: Some("version string in the file".into()),
            origin: "ld.so.cache".into(),
            error: None,
        }
    }

    #[test]
    fn requested_version_wins_then_the_first_found() {
        let f = NcclFacts {
            libraries: vec![
                lib("/a/libnccl.so.2", Some("2.28.3")),
                lib("/b/libnccl.so.2", Some("2.28.9")),
            ],
            searched: vec![],
            requested: None,
        };
        let c = choose(Some(&f), None);
        assert_eq!(c.version, Version::new(2, 28, 3));
        assert!(!c.assumed);
        assert!(c
            .source
            .contains("also on this node: 2.28.9 at /b/libnccl.so.2"));
        let f = NcclFacts {
            requested: Some("2.18.6".into()),
            ..f
        };
        let c = choose(Some(&f), None);
        assert_eq!(c.version, Version::new(2, 18, 6));
        assert_eq!(c.source, "--nccl-version 2.18.6");
    }

    #[test]
    fn nothing_known_means_newest_rules_and_saying_so() {
        let c = choose(None, Some("not recorded in this snapshot"));
        assert_eq!(c.version, version::NEWEST);
        assert!(c.assumed);
        assert!(c.source.contains("not recorded in this snapshot"));
        let f = NcclFacts {
            libraries: vec![],
            searched: vec!["/usr/lib".into()],
            requested: None,
        };
        assert!(choose(Some(&f), None)
            .source
            .contains("no libnccl.so.2 found in /usr/lib"));
    }

    #[test]
    fn versions_outside_the_known_range_are_clamped_and_said() {
        let f = NcclFacts {
            requested: Some("2.99.1".into()),
            ..Default::default()
        };
        let c = choose(Some(&f), None);
        assert_eq!(c.version, version::NEWEST);
        assert!(c.source.contains("newer than the rules"));
    }
}
