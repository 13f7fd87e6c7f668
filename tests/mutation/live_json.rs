//! `live.json` with single values retyped: a snapshot that still parses.

use super::*;

/// A JSON path to one value of `live.json`.
type JsonPath = Vec<serde_json::Value>;

fn json_leaves(v: &serde_json::Value, at: &mut JsonPath, out: &mut Vec<JsonPath>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                at.push(serde_json::Value::String(k.clone()));
                json_leaves(x, at, out);
                at.pop();
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(serde_json::Value::from(i));
                json_leaves(x, at, out);
                at.pop();
            }
        }
        serde_json::Value::Null => {}
        _ => out.push(at.clone()),
    }
}

fn json_at<'a>(v: &'a mut serde_json::Value, path: &JsonPath) -> &'a mut serde_json::Value {
    let mut cur = v;
    for p in path {
        cur = match p {
            serde_json::Value::String(k) => cur.get_mut(k.as_str()).unwrap(),
            n => cur.get_mut(n.as_u64().unwrap() as usize).unwrap(),
        };
    }
    cur
}

/// `live.json` with one value replaced by a value of another type (or a `null`): what a
/// hand-edited, half-migrated or hostile snapshot holds. The file still parses as JSON, so
/// this reaches the fact readers and the checks, where byte damage mostly stops at the
/// parser. Invariants as for byte damage: no pass without evidence, the exit code never gets
/// better, and nothing that was not a pass becomes one. `GDRDOCTOR_MUTATION_RUNS` scales the
/// sample (a quarter of it here), `GDRDOCTOR_MUTATION_SEED` changes it.
#[test]
fn live_facts_of_the_wrong_type_are_never_good_news() {
    let runs = (env_num("GDRDOCTOR_MUTATION_RUNS", 150) as usize / 4).max(26);
    let seed = env_num("GDRDOCTOR_MUTATION_SEED", 0x18_0018) ^ 0x11fe;
    let mut rng = Rng(seed | 1);
    let with_live: Vec<String> = scenarios()
        .into_iter()
        .filter(|s| fixture(s).join("gdrdoctor/live.json").is_file())
        .collect();
    assert!(!with_live.is_empty());
    let per = runs.div_ceil(with_live.len()).max(1);
    let mut problems: Vec<String> = Vec::new();
    let mut done = 0usize;
    let t0 = std::time::Instant::now();
    for s in &with_live {
        let t = tempfile::tempdir().unwrap();
        copy_tree(&fixture(s), t.path());
        let file = t.path().join("gdrdoctor/live.json");
        let original = std::fs::read_to_string(&file).unwrap();
        let live: serde_json::Value = serde_json::from_str(&original).unwrap();
        let base = report(t.path()).expect("every fixture is readable");
        let base_status = statuses(&base);
        let base_exit = base.summary.exit_code;
        let mut leaves = Vec::new();
        json_leaves(&live, &mut Vec::new(), &mut leaves);
        for _ in 0..per {
            let path = &leaves[rng.below(leaves.len())];
            let mut v = live.clone();
            let slot = json_at(&mut v, path);
            let old = slot.clone();
            let candidates = [
                serde_json::Value::Null,
                serde_json::json!("garbage"),
                serde_json::json!(-1),
                serde_json::json!(1.5e300),
                serde_json::json!(true),
                serde_json::json!({}),
                serde_json::json!([]),
            ];
            let same_kind = |a: &serde_json::Value, b: &serde_json::Value| {
                std::mem::discriminant(a) == std::mem::discriminant(b)
            };
            let pool: Vec<&serde_json::Value> =
                candidates.iter().filter(|c| !same_kind(c, &old)).collect();
            let new = pool[rng.below(pool.len())].clone();
            *slot = new.clone();
            std::fs::write(&file, serde_json::to_string_pretty(&v).unwrap()).unwrap();
            let where_ = path
                .iter()
                .map(|p| match p {
                    serde_json::Value::String(k) => k.clone(),
                    n => n.to_string(),
                })
                .collect::<Vec<_>>()
                .join(".");
            let what = format!("{s}: live.json {where_}: {old} -> {new}");
            if let Some(r) = report(t.path()) {
                check_invariants(
                    &what,
                    &r,
                    (&base_status, base_exit),
                    true,
                    true,
                    &mut problems,
                );
            }
            done += 1;
        }
        std::fs::write(&file, &original).unwrap();
    }
    eprintln!(
        "live mutation: {done} retyped values over {} fixtures in {:.1} s (seed {seed:#x})",
        with_live.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Found by the retyping test: on the node whose GPUs say GPU_DIRECT_RDMA_SUPPORTED=0, any
/// value of the wrong type anywhere in live.json made the whole file unreadable, and the
/// pair verdicts then assumed the attribute was 1: `gdr.gpu` went fail -> pass. A recorded
/// fact that cannot be read is not assumed: the pairs that would use GDR are undecided. Since
/// live.json is read one library at a time, damage in NVML's part leaves CUDA's answer (the
/// GPUs still fail), and damage in CUDA's own part makes them errors.
#[test]
fn damaged_live_facts_do_not_hide_a_gpu_without_gdr() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("hgx-h200x8-cx7x8-gdr-attr-off"), t.path());
    let base = report(t.path()).unwrap();
    let gdr_gpu = |r: &Report| -> Vec<Status> {
        r.findings
            .iter()
            .filter(|f| f.id == "gdr.gpu")
            .map(|f| f.status)
            .collect()
    };
    assert!(
        gdr_gpu(&base).contains(&Status::Fail),
        "the fixture fails gdr.gpu"
    );
    let file = t.path().join("gdrdoctor/live.json");
    let original: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // A value unrelated to GDR in NVML's part: NVML's memory size of one GPU.
    let mut live = original.clone();
    live["nvml"]["value"]["gpus"][0]["memory_total"] = serde_json::json!("garbage");
    std::fs::write(&file, serde_json::to_string(&live).unwrap()).unwrap();
    let r = report(t.path()).unwrap();
    assert_eq!(
        gdr_gpu(&r),
        gdr_gpu(&base),
        "NVML damaged, CUDA's answer kept"
    );
    assert!(r.summary.exit_code != 0);
    // NVML's facts are damaged: what needs them is an error, naming the file and member.
    let nvml_errors: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Error && f.message.contains("live.json: nvml"))
        .map(|f| f.id.as_str())
        .collect();
    assert!(!nvml_errors.is_empty(), "{:?}", statuses(&r));
    // The same kind of damage in CUDA's part: gdr.gpu cannot be decided, an error each.
    let mut live = original.clone();
    live["cuda"]["value"]["devices"][0]["name"] = serde_json::json!(7);
    std::fs::write(&file, serde_json::to_string(&live).unwrap()).unwrap();
    let r = report(t.path()).unwrap();
    let after = gdr_gpu(&r);
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|s| *s == Status::Error),
        "gdr.gpu with live.json's cuda part unreadable: {after:?}"
    );
    let f = r.findings.iter().find(|f| f.id == "gdr.gpu").unwrap();
    assert!(
        f.message.contains("GPU_DIRECT_RDMA_SUPPORTED"),
        "{}",
        f.message
    );
    assert!(r
        .gdr
        .iter()
        .all(|p| !p.enabled || !p.assumptions.iter().any(|a| a.contains("not known here"))));
    // A member missing altogether is damage too, not "not recorded".
    let mut live = original.clone();
    live.as_object_mut().unwrap().remove("cuda");
    std::fs::write(&file, serde_json::to_string(&live).unwrap()).unwrap();
    let r = report(t.path()).unwrap();
    assert!(gdr_gpu(&r).iter().all(|s| *s == Status::Error));
    // Not an object at all: everything live is damaged.
    std::fs::write(&file, "[1, 2]").unwrap();
    let r = report(t.path()).unwrap();
    assert!(gdr_gpu(&r).iter().all(|s| *s == Status::Error));
    assert!(r.summary.exit_code != 0);
}
