//! `gdrdoctor/meta.json` in a snapshot: the facts that only a live call sees (uname, rlimits,
//! euid, environment), so that `check --sysroot` on a snapshot reaches the same findings as
//! `check` on the node did.

use crate::source::reader::Root;
use gdrdoctor_checks::model::Rlimit;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const META_PATH: &str = "/gdrdoctor/meta.json";
pub const META_SCHEMA: &str = "gdrdoctor.snapshot/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Meta {
    pub schema: String,
    /// The gdrdoctor version that took the snapshot.
    pub tool_version: String,
    /// When the snapshot was taken, seconds since the Unix epoch.
    pub created_unix: u64,
    /// `uname -n`; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub hostname: Option<String>,
    /// `uname -r`; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub kernel_release: Option<String>,
    /// `uname -m`; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub arch: Option<String>,
    /// The effective user id of the snapshot; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub euid: Option<u32>,
    /// RLIMIT_MEMLOCK of the snapshot's process; null when unknown.
    #[schemars(extend("x-required" = true))]
    pub memlock: Option<Rlimit>,
    /// The `NCCL_*`, `NVSHMEM_*` and `CUDA_*` environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Why `memlock` as written cannot be used (a member left out: serde reads a missing
    /// `Option` as `None`, which is "unlimited"), found by [`read`]; never written.
    #[serde(skip)]
    #[schemars(skip)]
    pub memlock_damage: Option<String>,
}

/// The published JSON Schema of `gdrdoctor/meta.json` (docs/schema/gdrdoctor.snapshot.v1.schema.json),
/// derived from [`Meta`].
pub fn json_schema() -> serde_json::Value {
    gdrdoctor_checks::schema::published::<Meta>(
        META_SCHEMA,
        "`gdrdoctor/meta.json` in a snapshot: the live-only facts (uname, rlimits, euid, environment).",
        true,
    )
}

/// Read the metadata of a sysroot; `Ok(None)` when there is none (a foreign capture).
/// Errors name the file inside the snapshot (`<sysroot>/gdrdoctor/meta.json`); a schema other
/// than [`META_SCHEMA`] is refused (a snapshot of a later, incompatible format).
pub fn read(root: &Root) -> Result<Option<Meta>, String> {
    let shown = format!("{}{META_PATH}", root.base().display());
    match root.read(META_PATH) {
        Ok(b) => {
            let mut m: Meta = serde_json::from_slice(&b)
                .map_err(|e| format!("{shown}: not a gdrdoctor snapshot's metadata: {e}"))?;
            if m.schema != META_SCHEMA {
                return Err(format!(
                    "{shown}: schema `{}`: this gdrdoctor reads {META_SCHEMA} snapshots",
                    m.schema
                ));
            }
            m.memlock_damage = serde_json::from_slice::<serde_json::Value>(&b)
                .map_err(|e| e.to_string())
                .and_then(|v| memlock_written(&v))
                .err()
                .map(|why| {
                    format!(
                        "{}gdrdoctor/meta.json: {why}",
                        gdrdoctor_checks::model::DAMAGED
                    )
                });
            Ok(Some(m))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// `memlock` as the snapshot writes it: `null` (unknown) or `{"soft": N | null, "hard": N |
/// null}`, where `null` is unlimited (RLIM_INFINITY). A member left out is no value at all, not
/// unlimited.
fn memlock_written(v: &serde_json::Value) -> Result<(), String> {
    let Some(m) = v.get("memlock") else {
        return Err(
            "no `memlock` member (the snapshot writes null when the limit is unknown)".into(),
        );
    };
    if m.is_null() {
        return Ok(());
    }
    let missing: Vec<&str> = ["soft", "hard"]
        .into_iter()
        .filter(|k| m.get(k).is_none())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "memlock has no `{}` (null is unlimited; a limit left out is not)",
            missing.join("` and no `")
        ))
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
        Ok(b) => parse_live(&b),
        Err(e) if e.is_not_found() => {
            LiveFacts::absent("live-only fact; not in this snapshot (gdrdoctor/live.json)")
        }
        Err(e) => LiveFacts::damaged(&e.to_string()),
    }
}

/// `live.json`'s bytes, one library at a time: a file that is not a JSON object damages every
/// fact; a member that is missing or does not read as its library's facts (a value retyped by
/// hand, a half-migrated file) damages that library's fact alone, and the others are judged
/// (a retyped NVML memory size no longer hides what CUDA said of GPUDirect RDMA). A snapshot
/// without `nccl` predates it: not recorded, as before.
pub fn parse_live(bytes: &[u8]) -> gdrdoctor_checks::model::LiveFacts {
    use gdrdoctor_checks::model::{Fact, LiveFacts, DAMAGED};
    use serde::de::DeserializeOwned;
    let v: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return LiveFacts::damaged(&format!("{LIVE_PATH}: {e}")),
    };
    let Some(obj) = v.as_object() else {
        return LiveFacts::damaged(&format!("{LIVE_PATH}: not a JSON object"));
    };
    fn part<T: DeserializeOwned>(
        obj: &serde_json::Map<String, serde_json::Value>,
        key: &str,
        library: &str,
    ) -> Option<Fact<T>> {
        let x = obj.get(key)?;
        Some(
            Fact::<T>::deserialize(x).unwrap_or_else(|e| {
                Fact::absent(library, format!("{DAMAGED}{LIVE_PATH}: {key}: {e}"))
            }),
        )
    }
    fn missing<T>(library: &str, key: &str) -> Fact<T> {
        Fact::absent(library, format!("{DAMAGED}{LIVE_PATH}: no `{key}` member"))
    }
    let mut live = LiveFacts {
        nvml: part(obj, "nvml", "libnvidia-ml.so.1")
            .unwrap_or_else(|| missing("libnvidia-ml.so.1", "nvml")),
        cuda: part(obj, "cuda", "libcuda.so.1").unwrap_or_else(|| missing("libcuda.so.1", "cuda")),
        verbs: part(obj, "verbs", "libibverbs.so.1")
            .unwrap_or_else(|| missing("libibverbs.so.1", "verbs")),
        nccl: part(obj, "nccl", "libnccl.so.2")
            .unwrap_or_else(|| Fact::absent("libnccl.so.2", "not recorded in this snapshot")),
    };
    // One GPU listed twice says two things of it: neither entry is used.
    if let Fact::Known { value, .. } = &mut live.nvml {
        value.set_aside_duplicates(LIVE_PATH);
    }
    if let Fact::Known { value, .. } = &mut live.cuda {
        value.set_aside_duplicates(LIVE_PATH);
    }
    live
}
