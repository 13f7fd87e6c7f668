//! The live libraries' facts (NVML, the CUDA driver, libibverbs): asked in worker processes on
//! the live node (a wedged driver cannot hang the parent), read from `gdrdoctor/live.json` in a
//! snapshot.
//!
//! On the live node two workers at most, and CUDA only when its answer is not known:
//!
//! ```text
//!  collect thread ──spawn──> live-nvml worker: nvmlInit, GPUs (address, UUID, compute mode)
//!        │                        │ early message ──┐      then per-GPU queries (one thread
//!        │                        │                 │      per GPU), libibverbs, NCCL files
//!        ├─ the cache cannot hit (no file, another boot or build, --no-cache):
//!        │    spawn live-cuda worker ahead: it loads libcuda (opens no GPU) and waits
//!        │  <───────────────────────────────────────┘
//!        ├─ key (boot id, driver, GPUs, ...) ── cache hit ──> CUDA facts from the cache
//!        └─ miss ── request to the worker (started ahead, or now): cuInit + attributes (no
//!                   context), GPUs in an exclusive or prohibited compute mode left out
//! ```
//!
//! The worker started ahead is given its request only once NVML has named the compute modes,
//! so `CUDA_VISIBLE_DEVICES` is set before its `cuInit` as before; a worker not needed (every
//! GPU left out, NVML hung) is killed.
//!
//! Everything here runs on its own thread, beside the file collectors (`collect::node`).
//!
//! Under `--host-root` the workers ask the container's libraries (the NVIDIA container toolkit
//! injects them); what the container cannot see of the host is said, not judged
//! ([`host_root_visibility`]).

use crate::live::nvml::{Early, EARLY_PREFIX};
use crate::live::CudaParams;
use crate::source::meta;
use crate::source::{Origin, Source};
use crate::state::cuda_cache::{self as cache, Lookup};
use crate::worker::protocol::{self, WorkerError};
use gdrdoctor_checks::model::{CudaFacts, Fact, LiveFacts};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whether to ask the live libraries (`check --static` does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libraries {
    Query,
    Skip,
}

/// How a run uses the CUDA cache ([`crate::state::cuda_cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Read it; start CUDA only when it has no valid answer, then write it (`check`, `topo`,
    /// `snapshot`, `policy init`).
    Use,
    /// Start CUDA; neither read nor write (`--no-cache`, and library callers).
    #[default]
    Off,
}

/// Options of the live query.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub cache: CacheMode,
    /// The state directory (`None`: `GDRDOCTOR_STATE_DIR`, else `/run/gdrdoctor`).
    pub state_dir: Option<PathBuf>,
}

/// How long each live-facts worker may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Compute modes in which gdrdoctor starts no CUDA on a GPU.
pub const HANDS_OFF_MODES: [&str; 3] = ["exclusive-process", "exclusive-thread", "prohibited"];

/// The live-facts worker tasks (`gdrdoctor __worker live-nvml|live-cuda`): NVML (with
/// libibverbs and NCCL's files), then CUDA when needed.
pub fn worker_task(
    task: &str,
    params: serde_json::Value,
) -> Option<Result<serde_json::Value, WorkerError>> {
    match task {
        "live-nvml" => Some(protocol::output(&crate::live::gather_nvml(&|e| {
            if let Ok(j) = serde_json::to_string(e) {
                protocol::progress(&format!("{}{j}", crate::live::nvml::EARLY_PREFIX));
            }
        }))),
        "live-cuda" => Some(protocol::serve(params, |p: CudaParams| {
            crate::live::gather_cuda(&p).map_err(|detail| WorkerError::Failed { detail })
        })),
        _ => None,
    }
}

pub fn collect(src: &Source, libs: Libraries) -> LiveFacts {
    collect_with(src, libs, &Options::default())
}

pub fn collect_with(src: &Source, libs: Libraries, opts: &Options) -> LiveFacts {
    match (src.origin, libs) {
        (Origin::Live | Origin::HostRoot, Libraries::Query) => query_with(opts),
        (Origin::Live | Origin::HostRoot, Libraries::Skip) => {
            let mut l = LiveFacts::absent("not queried (--static)");
            // Reading the NCCL library files is cheap and initialises nothing: no worker needed.
            l.nccl = crate::sys::trace::timed("nccl.discover", || {
                crate::live::nccl::discover_live(false)
            });
            l
        }
        (Origin::Snapshot | Origin::Foreign, _) => meta::read_live(&src.root),
    }
}

/// NVML, CUDA and libibverbs facts from worker processes, without the cache.
pub fn query() -> LiveFacts {
    query_with(&Options::default())
}

/// NVML, CUDA and libibverbs facts from worker processes; CUDA from the cache when it knows.
pub fn query_with(opts: &Options) -> LiveFacts {
    use crate::worker::runner;
    let progress = runner::Progress::new("querying NVML, CUDA and libibverbs");
    let (tx, rx) = std::sync::mpsc::channel::<Early>();
    let dir = opts
        .state_dir
        .clone()
        .unwrap_or_else(crate::state::default_dir);
    let (nvml_run, cuda) = std::thread::scope(|s| {
        let progress = &progress;
        let nvml = s.spawn(move || {
            let _t = crate::sys::trace::span("live.nvml-worker");
            let on = |m: &str| match m.strip_prefix(EARLY_PREFIX) {
                Some(j) => {
                    if let Ok(e) = serde_json::from_str::<Early>(j) {
                        let _ = tx.send(e);
                    }
                }
                None => progress.update(m),
            };
            // `tx` goes with this closure: the channel closes when the worker is done.
            runner::run("live-nvml", &(), DEADLINE, &on)
        });
        // While NVML starts: the key's file inputs, and CUDA's worker at once when the cache
        // cannot answer. It loads libcuda and waits for its request, which names the GPUs it
        // may open (compute modes come from NVML): no GPU is touched before that.
        let inputs = KeyInputs {
            files: crate::sys::trace::timed("cache.files", || {
                cache::FileInputs::read(Path::new("/"))
            }),
            env: cache::key_env(|k| std::env::var(k).ok()),
        };
        let ahead = match opts.cache {
            CacheMode::Off => Some("--no-cache".to_string()),
            CacheMode::Use => cache::certain_miss(&dir, &inputs.files, &inputs.env),
        }
        .and_then(|why| {
            let mut t = crate::sys::trace::span("cuda.ahead");
            t.detail(|| format!("started before NVML answers: {why}"));
            runner::start("live-cuda").ok()
        });
        match rx.recv_timeout(DEADLINE) {
            // The usual case: decide about CUDA while NVML's per-GPU queries run.
            Ok(e) => {
                let cuda = cuda_facts(opts, &dir, &inputs, Some(&e), ahead, progress);
                (nvml.join(), cuda)
            }
            // No early message: the worker failed before NVML listed the GPUs, or hung.
            Err(_) => {
                let nvml = nvml.join();
                let hung = matches!(&nvml, Ok(Ok(r)) if r.outcome == runner::Outcome::TimedOut)
                    || matches!(&nvml, Ok(Err(runner::RunFailure::TimedOut { .. })));
                let cuda = if hung {
                    if let Some(w) = ahead {
                        w.cancel();
                    }
                    // A driver that does not answer NVML does not answer CUDA either: do not
                    // wait for it twice.
                    Fact::absent(
                        "libcuda.so.1",
                        format!(
                            "not asked: NVML did not answer within its deadline ({} s): is the driver wedged?",
                            DEADLINE.as_secs()
                        ),
                    )
                } else {
                    cuda_facts(opts, &dir, &inputs, None, ahead, progress)
                };
                (nvml, cuda)
            }
        }
    });
    progress.finish();
    let mut live = match nvml_run {
        Ok(run) => match run.and_then(|r| r.output::<LiveFacts>()) {
            Ok(l) => l,
            Err(e) => LiveFacts::absent(&e.to_string()),
        },
        Err(_) => LiveFacts::absent("the NVML worker thread panicked"),
    };
    live.cuda = cuda;
    live
}

/// Why gdrdoctor starts no CUDA on a GPU in this compute mode, or `None` when it may.
fn hands_off(mode: Option<&str>) -> Option<String> {
    let m = mode?;
    HANDS_OFF_MODES.contains(&m).then(|| {
        format!(
            "not asked: compute mode {m} (a job may hold this gpu; gdrdoctor starts no CUDA on it)"
        )
    })
}

/// The GPUs CUDA must leave alone (PCI address -> why).
pub fn left_out(early: &Early) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let any = early
        .gpus
        .iter()
        .any(|g| hands_off(g.compute_mode.as_deref()).is_some());
    for g in &early.gpus {
        if let Some(why) = hands_off(g.compute_mode.as_deref()) {
            out.insert(g.bdf.clone(), why);
        } else if any && g.uuid.is_none() {
            // Selected by UUID only; without one it cannot be selected.
            out.insert(
                g.bdf.clone(),
                "not asked: NVML gave no UUID to select it by while other gpus are left out"
                    .to_string(),
            );
        }
    }
    out
}

/// `CUDA_VISIBLE_DEVICES` for the CUDA worker: the user's value with the left-out GPUs taken
/// out, or `None` (inherit) when none is left out. A value of UUIDs (`GPU-...`) is filtered; a
/// value CUDA numbers (`0,1`) or MIG instances cannot be mapped to GPUs without starting CUDA,
/// so it is replaced by the UUIDs of the GPUs that may be asked. `Some("")`: none may.
pub fn visible_devices(
    user: Option<&str>,
    early: &Early,
    left_out: &BTreeMap<String, String>,
) -> Option<String> {
    if left_out.is_empty() {
        return None;
    }
    let out_uuids: Vec<&str> = early
        .gpus
        .iter()
        .filter(|g| left_out.contains_key(&g.bdf))
        .filter_map(|g| g.uuid.as_deref())
        .collect();
    let allowed: Vec<&str> = early
        .gpus
        .iter()
        .filter(|g| !left_out.contains_key(&g.bdf))
        .filter_map(|g| g.uuid.as_deref())
        .collect();
    let entries: Vec<&str> = user
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if user.is_some() && entries.iter().all(|e| e.starts_with("GPU-")) {
        let kept: Vec<&str> = entries
            .into_iter()
            .filter(|e| !out_uuids.iter().any(|u| u.starts_with(e)))
            .collect();
        return Some(kept.join(","));
    }
    Some(allowed.join(","))
}

fn now_ms() -> u64 {
    crate::sys::clock::now_ms()
}

/// The cache key's inputs that do not come from NVML.
struct KeyInputs {
    files: cache::FileInputs,
    env: BTreeMap<String, String>,
}

/// CUDA's facts: from the cache when it holds a valid answer, else from a `live-cuda` worker
/// (`ahead`, when one was started before NVML answered; it is killed when not needed).
fn cuda_facts(
    opts: &Options,
    dir: &Path,
    inputs: &KeyInputs,
    early: Option<&Early>,
    ahead: Option<crate::worker::runner::Started>,
    progress: &crate::worker::runner::Progress,
) -> Fact<CudaFacts> {
    let left = early.map(left_out).unwrap_or_default();
    let key = crate::sys::trace::timed("cache.key", || match early {
        Some(e) => cache::key(&inputs.files, e, inputs.env.clone()),
        None => Err("NVML did not list the GPUs".to_string()),
    });
    let mut note = None;
    if opts.cache == CacheMode::Use {
        if let Ok(k) = &key {
            let set: BTreeSet<String> = left.keys().cloned().collect();
            let mut t = crate::sys::trace::span("cache.load");
            match cache::load(dir, k, &set, now_ms()) {
                Lookup::Hit { facts, source } => {
                    t.detail(|| "hit".into());
                    return Fact::known(facts, source);
                }
                Lookup::Miss(w) => {
                    t.detail(|| format!("miss: {w}"));
                    note = Some(w);
                }
            }
        }
    }
    let visible = early.and_then(|e| {
        visible_devices(
            std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
            e,
            &left,
        )
    });
    if visible.as_deref() == Some("") {
        // Every GPU is left out: no CUDA at all.
        if let Some(w) = ahead {
            w.cancel();
        }
        return Fact::known(
            CudaFacts {
                not_asked: left,
                ..Default::default()
            },
            "not asked: every gpu is in an exclusive or prohibited compute mode (nvmlDeviceGetComputeMode)",
        );
    }
    let params = CudaParams {
        visible_devices: visible,
        not_asked: left,
    };
    let run = {
        let _t = crate::sys::trace::span("live.cuda-worker");
        let on = |m: &str| progress.update(m);
        match ahead {
            Some(w) => w.send_params(&params, DEADLINE, &on),
            None => crate::worker::runner::run("live-cuda", &params, DEADLINE, &on),
        }
    };
    match run.and_then(|r| r.output::<CudaFacts>()) {
        Ok(f) => {
            let mut source = "CUDA driver API (cuDeviceGetAttribute, asked in this run".to_string();
            match (opts.cache, &key) {
                (CacheMode::Off, _) => {}
                (_, Ok(k)) => {
                    let _t = crate::sys::trace::span("cache.save");
                    match cache::save(dir, k, &f, now_ms()) {
                        Ok(p) => {
                            source.push_str(&format!("; kept in {} for this boot", p.display()))
                        }
                        Err(e) => source.push_str(&format!("; not cached: {e}")),
                    }
                }
                (_, Err(why)) => source.push_str(&format!("; not cached: {why}")),
            }
            if let Some(n) = note {
                source.push_str(&format!("; the cache had no valid answer: {n}"));
            }
            source.push(')');
            Fact::known(f, source)
        }
        Err(e) => Fact::absent("libcuda.so.1", e.to_string()),
    }
}

/// `--host-root`: the container's libraries see the GPUs and RDMA devices given to the pod, not
/// necessarily all of the host's. A library that sees fewer than the host's sysfs lists would
/// make the checks judge a partial view: its facts become absent with the counts (the checks
/// then skip with that reason). A library that could not be loaded keeps its own reason.
pub fn host_root_visibility(live: &mut LiveFacts, node: &gdrdoctor_checks::model::Node) {
    use gdrdoctor_checks::model::Fact;
    let gpus = gdrdoctor_checks::derive::gpus(node).len();
    let rdma = node.rdma.get().map(Vec::len);
    let fewer = |what: &str, seen: usize, host: usize, how: &str| {
        format!(
            "gdrdoctor's container sees {seen} of the host's {host} {what} ({how}); its view is not the host's"
        )
    };
    let gpu_how = "run the pod with NVIDIA_VISIBLE_DEVICES=all, or request the GPUs";
    if let Some(n) = live.nvml.get().map(|n| n.gpus.len()) {
        if n < gpus {
            live.nvml = Fact::absent("libnvidia-ml.so.1", fewer("gpus", n, gpus, gpu_how));
        }
    }
    if let Some(n) = live.cuda.get().map(|c| c.devices.len()) {
        if n < gpus {
            live.cuda = Fact::absent("libcuda.so.1", fewer("gpus", n, gpus, gpu_how));
        }
    }
    if let (Some(n), Some(host)) = (live.verbs.get().map(|v| v.devices.len()), rdma) {
        if n < host {
            live.verbs = Fact::absent(
                "libibverbs.so.1",
                fewer(
                    "rdma devices",
                    n,
                    host,
                    "mount /dev/infiniband into the pod",
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::live::nvml::EarlyGpu;

    fn early(modes: &[&str]) -> Early {
        Early {
            driver_version: Some("580.159.04".into()),
            gpus: modes
                .iter()
                .enumerate()
                .map(|(i, m)| EarlyGpu {
                    bdf: format!("0000:{:02x}:00.0", 0x18 + i),
                    uuid: Some(format!("GPU-{i}{i}{i}{i}-aaaa")),
                    compute_mode: Some(m.to_string()),
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn exclusive_and_prohibited_gpus_are_left_out() {
        let e = early(&[
            "default",
            "exclusive-process",
            "prohibited",
            "exclusive-thread",
        ]);
        let l = left_out(&e);
        assert_eq!(
            l.keys().collect::<Vec<_>>(),
            ["0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"]
        );
        assert!(l["0000:19:00.0"].contains("compute mode exclusive-process"));
        assert!(left_out(&early(&["default", "default"])).is_empty());
        // Unknown compute mode: CUDA may be started (cuInit creates no context).
        let mut u = early(&["default"]);
        u.gpus[0].compute_mode = None;
        assert!(left_out(&u).is_empty());
    }

    #[test]
    fn visible_devices_leave_the_exclusive_gpus_out() {
        let e = early(&["default", "exclusive-process", "default"]);
        let l = left_out(&e);
        // Nothing left out: inherit whatever the user set.
        assert_eq!(
            visible_devices(Some("1"), &early(&["default"]), &BTreeMap::new()),
            None
        );
        // Unset: the UUIDs of the others.
        assert_eq!(
            visible_devices(None, &e, &l).as_deref(),
            Some("GPU-0000-aaaa,GPU-2222-aaaa")
        );
        // The user's UUID list (prefixes too), filtered.
        assert_eq!(
            visible_devices(Some("GPU-1111,GPU-2222-aaaa"), &e, &l).as_deref(),
            Some("GPU-2222-aaaa")
        );
        // Numbers cannot be mapped without CUDA: the GPUs that may be asked.
        assert_eq!(
            visible_devices(Some("0,1"), &e, &l).as_deref(),
            Some("GPU-0000-aaaa,GPU-2222-aaaa")
        );
        // Every GPU left out: nothing to ask.
        let all = early(&["exclusive-process", "prohibited"]);
        assert_eq!(
            visible_devices(None, &all, &left_out(&all)).as_deref(),
            Some("")
        );
    }
}
