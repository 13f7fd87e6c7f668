//! `gdrdoctor/meta.json` in a snapshot: the facts that only a live call sees (uname, rlimits,
//! euid, environment), so that `check --sysroot` on a snapshot reaches the same findings as
//! `check` on the node did.

use crate::reader::Root;
use gdrdoctor_checks::model::Rlimit;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const META_PATH: &str = "/gdrdoctor/meta.json";
pub const META_SCHEMA: &str = "gdrdoctor.snapshot/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub schema: String,
    pub tool_version: String,
    pub created_unix: u64,
    pub hostname: Option<String>,
    pub kernel_release: Option<String>,
    pub arch: Option<String>,
    pub euid: Option<u32>,
    pub memlock: Option<Rlimit>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Read the metadata of a sysroot; `Ok(None)` when there is none (a foreign capture).
pub fn read(root: &Root) -> Result<Option<Meta>, String> {
    match root.read(META_PATH) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| format!("{META_PATH}: {e}")),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

pub const LIVE_PATH: &str = "/gdrdoctor/live.json";

/// The live library facts stored in a snapshot (`gdrdoctor/live.json`). A file that is there
/// but does not parse (or cannot be read) is damaged evidence: every fact says so
/// ([`LiveFacts::damaged`]), and the checks that need them report an `error`, not a `skip`.
///
/// [`LiveFacts::damaged`]: gdrdoctor_checks::model::LiveFacts::damaged
pub fn read_live(root: &Root) -> gdrdoctor_checks::model::LiveFacts {
    use gdrdoctor_checks::model::LiveFacts;
    match root.read(LIVE_PATH) {
        Ok(b) => serde_json::from_slice(&b)
            .unwrap_or_else(|e| LiveFacts::damaged(&format!("{LIVE_PATH}: {e}"))),
        Err(e) if e.is_not_found() => {
            LiveFacts::absent("live-only fact; not in this snapshot (gdrdoctor/live.json)")
        }
        Err(e) => LiveFacts::damaged(&e.to_string()),
    }
}
