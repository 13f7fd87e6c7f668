//! Issue 16: a live `check` that pays for CUDA only when its answer is not known, never
//! disturbs a running job, and reads only the config space the checks use.
//!
//! * The CUDA cache, end to end: `gdrdoctor check` against the stand-in `libcuda.so.1` and
//!   `libnvidia-ml.so.1` of tests/stubs (`GDRDOCTOR_LIB_DIR`, on this machine's own files).
//!   The scenario has them log every call, with the `CUDA_VISIBLE_DEVICES` and
//!   `CUDA_MPS_PIPE_DIRECTORY` the process had (`log_env`), and catch every context-creating or
//!   allocating call (`forbid contexts`), so a test sees whether a run started CUDA, on which
//!   GPUs, and that no such function was ever called.
//! * The key: a changed driver version, GPU UUID or PCI address makes the next run ask CUDA
//!   again (the boot id and the kernel-module inputs, which a test process cannot change, are
//!   covered by `state::cuda_cache`'s unit tests over the same code).
//! * Partial config-space reads: the decoder's view of every captured config space (fixtures,
//!   the real captures in ../shared/realdata, this machine's own devices, and random mutations
//!   of an H200's) is the same whether the whole file or only the bytes it reads were fetched.
//! * The live-facts path calls no CUDA function that creates a context (a source scan of
//!   `src/live/cuda/`, beside the stand-in's run-time check).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::require;
use gdrdoctor::source::reader::Root;
use gdrdoctor_checks::pci::config::{decode, parse_hex_dump, touched};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------------------------
// Stand-in libraries
// ---------------------------------------------------------------------------------------------

/// The directory holding the stand-in libcuda and libnvidia-ml (with the rest of
/// tests/stubs), or a visible skip.
fn standins() -> Option<&'static Path> {
    common::stand_ins::build().map(|l| l.current.as_path())
}

/// The scenario of the stand-ins for `gpus` ("BDF=UUID=MODE;..."), NVML's driver and a slow
/// `cuInit` (tests/stubs/README.md): every call logged with the environment CUDA reads, and
/// every context-creating or allocating call of libcuda caught.
fn scenario(gpus: &str, driver: &str, cuinit_ms: Option<u32>) -> String {
    let mut s =
        String::from("log_env CUDA_MPS_PIPE_DIRECTORY CUDA_VISIBLE_DEVICES\nforbid contexts\n");
    s.push_str(&format!("nvml driver={driver}\n"));
    if let Some(ms) = cuinit_ms {
        s.push_str(&format!("cuda init_ms={ms}\n"));
    }
    for g in gpus.split(';').filter(|g| !g.is_empty()) {
        let mut f = g.splitn(3, '=');
        let (bdf, uuid) = (f.next().unwrap(), f.next().unwrap());
        let mode = f.next().unwrap_or("default");
        s.push_str(&format!("gpu bdf={bdf} uuid={uuid} mode={mode}\n"));
    }
    s
}

/// One live `check` against the stand-ins: (exit code, stderr, the calls the stand-ins logged).
struct Node {
    state: tempfile::TempDir,
    log: PathBuf,
    gpus: String,
    driver: String,
    /// How long the stand-in's `cuInit` takes (`cuda init_ms=`).
    cuinit_ms: Option<u32>,
    /// More options of the `nvml` line (`attach_ms=`, `gpu_ms=`).
    nvml_opts: String,
}

impl Node {
    fn new(gpus: &str) -> Node {
        let state = tempfile::tempdir().unwrap();
        let log = state.path().join("calls.log");
        Node {
            state,
            log,
            gpus: gpus.into(),
            driver: "580.159.04".into(),
            cuinit_ms: None,
            nvml_opts: String::new(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.state.path().join("state/cuda-facts.json")
    }

    /// Run `gdrdoctor check ARGS`; returns stderr and the calls logged by this run.
    fn check(&self, args: &[&str]) -> (String, Vec<String>) {
        let _ = std::fs::remove_file(&self.log);
        let dir = standins().unwrap();
        let scenario_file = self.state.path().join("scenario");
        std::fs::write(
            &scenario_file,
            scenario(
                &self.gpus,
                &format!("{} {}", self.driver, self.nvml_opts),
                self.cuinit_ms,
            ),
        )
        .unwrap();
        let out = Command::new(common::bin())
            .arg("check")
            .args(["--format", "json", "--only", "gpu"])
            .args(args)
            .env(gdrdoctor::live::stand_in::LIB_DIR_ENV, dir)
            .env("GDRDOCTOR_STATE_DIR", self.state.path().join("state"))
            .env("GDRDOCTOR_STUB_SCENARIO", &scenario_file)
            .env("GDRDOCTOR_STUB_LOG", &self.log)
            .env("GDRDOCTOR_TRACE", "1")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("GDRDOCTOR_COLLECT_TIMING")
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>();
        assert!(
            !calls.iter().any(|c| c.contains("FORBIDDEN")),
            "check called a context-creating or allocating CUDA function: {calls:?}"
        );
        assert!(
            out.status.code().is_some_and(|c| c != 2),
            "check could not run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (String::from_utf8_lossy(&out.stderr).into_owned(), calls)
    }

    fn cached(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.cache()).unwrap()).unwrap()
    }
}

fn cu_inits(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| c.starts_with("libcuda cuInit"))
        .collect()
}

fn cached_bdfs(v: &serde_json::Value) -> Vec<String> {
    v["facts"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["bdf"].as_str().unwrap().to_string())
        .collect()
}

const TWO: &str = "0000:18:00.0=GPU-aaaaaaaa-0000=default;0000:2a:00.0=GPU-bbbbbbbb-0000=default";

#[test]
fn a_cold_run_fills_the_cache_and_a_warm_run_starts_no_cuda() {
    if standins().is_none() {
        return;
    }
    let n = Node::new(TWO);
    let (err, calls) = n.check(&[]);
    assert_eq!(cu_inits(&calls).len(), 1, "cold: {calls:?}\n{err}");
    // Never an MPS client (a root client would make the daemon stop the users' MPS server).
    assert!(
        cu_inits(&calls)[0].contains("CUDA_MPS_PIPE_DIRECTORY=/proc/self/gdrdoctor-no-mps "),
        "{calls:?}"
    );
    assert!(err.contains("cache.load") && err.contains("miss"), "{err}");
    let v = n.cached();
    assert_eq!(cached_bdfs(&v), ["0000:18:00.0", "0000:2a:00.0"]);
    assert_eq!(v["key"]["driver_version"], "580.159.04");
    // Warm: NVML only.
    let (err, calls) = n.check(&[]);
    assert!(
        cu_inits(&calls).is_empty(),
        "warm run started CUDA: {calls:?}"
    );
    assert!(
        calls.iter().any(|c| c.starts_with("libnvidia-ml nvmlInit")),
        "{calls:?}"
    );
    assert!(err.contains("cache.load") && err.contains("hit"), "{err}");
    assert!(!err.contains("live.cuda-worker"), "{err}");
}

#[test]
fn a_changed_driver_gpu_uuid_or_pci_address_asks_cuda_again() {
    if standins().is_none() {
        return;
    }
    let mut n = Node::new(TWO);
    n.check(&[]);
    assert!(cu_inits(&n.check(&[]).1).is_empty());
    // Driver upgrade (reload).
    n.driver = "580.160.01".into();
    let (err, calls) = n.check(&[]);
    assert_eq!(cu_inits(&calls).len(), 1, "{err}");
    assert!(
        err.contains("the driver changed (580.159.04 -> 580.160.01)"),
        "{err}"
    );
    assert_eq!(n.cached()["key"]["driver_version"], "580.160.01");
    assert!(cu_inits(&n.check(&[]).1).is_empty());
    // A GPU swapped for another in the same slot.
    n.gpus = TWO.replace("GPU-bbbbbbbb-0000", "GPU-cccccccc-0000");
    let (err, calls) = n.check(&[]);
    assert_eq!(cu_inits(&calls).len(), 1, "{err}");
    assert!(err.contains("new: 0000:2a:00.0 GPU-cccccccc-0000"), "{err}");
    assert!(cu_inits(&n.check(&[]).1).is_empty());
    // The same GPU at another PCI address.
    n.gpus = n.gpus.replace("0000:2a:00.0", "0000:2b:00.0");
    let (err, calls) = n.check(&[]);
    assert_eq!(cu_inits(&calls).len(), 1, "{err}");
    assert_eq!(cached_bdfs(&n.cached()), ["0000:18:00.0", "0000:2b:00.0"]);
    // A GPU gone.
    n.gpus = "0000:18:00.0=GPU-aaaaaaaa-0000=default".into();
    let (_, calls) = n.check(&[]);
    assert_eq!(cu_inits(&calls).len(), 1);
    assert_eq!(cached_bdfs(&n.cached()), ["0000:18:00.0"]);
}

#[test]
fn a_damaged_cache_is_ignored_and_rewritten() {
    if standins().is_none() {
        return;
    }
    let n = Node::new(TWO);
    n.check(&[]);
    let text = std::fs::read_to_string(n.cache()).unwrap();
    let planted = text.replacen(
        "\"gpu_direct_rdma_supported\": 1",
        "\"gpu_direct_rdma_supported\": 0",
        1,
    );
    assert_ne!(text, planted);
    std::fs::write(n.cache(), &planted).unwrap();
    let (err, calls) = n.check(&[]);
    assert_eq!(
        cu_inits(&calls).len(),
        1,
        "a damaged cache was trusted: {err}"
    );
    assert!(err.contains("checksum"), "{err}");
    assert_eq!(
        std::fs::read_to_string(n.cache()).unwrap().len(),
        text.len()
    );
    assert!(cu_inits(&n.check(&[]).1).is_empty());
}

#[test]
fn no_cache_asks_cuda_every_time_and_keeps_nothing() {
    if standins().is_none() {
        return;
    }
    let n = Node::new(TWO);
    for _ in 0..2 {
        let (_, calls) = n.check(&["--no-cache"]);
        assert_eq!(cu_inits(&calls).len(), 1);
    }
    assert!(!n.cache().exists());
}

#[test]
fn gpus_in_exclusive_or_prohibited_mode_are_hidden_from_cuda() {
    if standins().is_none() {
        return;
    }
    let n = Node::new(
        "0000:18:00.0=GPU-aaaaaaaa-0000=default;0000:2a:00.0=GPU-bbbbbbbb-0000=exclusive-process;0000:3a:00.0=GPU-dddddddd-0000=prohibited",
    );
    let (err, calls) = n.check(&[]);
    let inits = cu_inits(&calls);
    assert_eq!(inits.len(), 1, "{err}");
    // cuInit ran with only the default-mode GPU visible: it never opened the others.
    assert!(
        inits[0].ends_with("CUDA_VISIBLE_DEVICES=GPU-aaaaaaaa-0000"),
        "{inits:?}"
    );
    let v = n.cached();
    assert_eq!(cached_bdfs(&v), ["0000:18:00.0"]);
    let left = v["facts"]["not_asked"].as_object().unwrap();
    assert!(left["0000:2a:00.0"]
        .as_str()
        .unwrap()
        .contains("compute mode exclusive-process"));
    assert!(left["0000:3a:00.0"]
        .as_str()
        .unwrap()
        .contains("compute mode prohibited"));
    // Still exclusive: the partial answer is valid.
    assert!(cu_inits(&n.check(&[]).1).is_empty());
    // Every GPU exclusive: no CUDA at all.
    let all = Node::new(
        "0000:18:00.0=GPU-aaaaaaaa-0000=exclusive-process;0000:2a:00.0=GPU-bbbbbbbb-0000=exclusive-process",
    );
    let (err, calls) = all.check(&[]);
    assert!(cu_inits(&calls).is_empty(), "{calls:?}\n{err}");
    assert!(
        !calls.iter().any(|c| c.starts_with("libcuda ")),
        "{calls:?}"
    );
}

#[test]
fn a_gpu_back_to_default_mode_is_asked_again() {
    if standins().is_none() {
        return;
    }
    let mut n = Node::new(
        "0000:18:00.0=GPU-aaaaaaaa-0000=default;0000:2a:00.0=GPU-bbbbbbbb-0000=exclusive-process",
    );
    n.check(&[]);
    n.gpus = TWO.into();
    let (err, calls) = n.check(&[]);
    let inits = cu_inits(&calls);
    assert_eq!(inits.len(), 1, "{err}");
    assert!(
        inits[0].ends_with("CUDA_VISIBLE_DEVICES=(unset)"),
        "{inits:?}"
    );
    assert!(err.contains("can be asked now"), "{err}");
    assert_eq!(cached_bdfs(&n.cached()), ["0000:18:00.0", "0000:2a:00.0"]);
}

#[test]
fn the_trace_names_every_phase() {
    if standins().is_none() {
        return;
    }
    let n = Node::new(TWO);
    let (err, _) = n.check(&[]);
    for phase in [
        "process-start",
        "cli.parse",
        "source.open",
        "collect.files",
        "collect.pci",
        "collect.live",
        "worker.spawn",
        "[live-nvml] process-start",
        "[live-nvml] nvml.init",
        "[live-nvml] nvml.identify",
        "[live-nvml] nvml.gpu",
        "cache.files",
        "cuda.ahead",
        "[live-cuda] cuda.load",
        "cache.key",
        "cache.load",
        "[live-cuda] cuda.init",
        "[live-cuda] cuda.attributes",
        "cache.save",
        "checks",
        "render",
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with("gdrdoctor: trace:") && l.contains(&format!("  {phase}"))),
            "no `{phase}` line in the trace:\n{err}"
        );
    }
    // Sorted by start.
    let starts: Vec<f64> = err
        .lines()
        .filter_map(|l| l.strip_prefix("gdrdoctor: trace:"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{err}");
    // Unset: not one line.
    let out = Command::new(common::bin())
        .args(["check", "--static", "--format", "json"])
        .env("GDRDOCTOR_STATE_DIR", n.state.path().join("state"))
        .env_remove("GDRDOCTOR_TRACE")
        .env_remove("GDRDOCTOR_COLLECT_TIMING")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("trace:"));
    // The older name still prints the phases.
    let out = Command::new(common::bin())
        .args(["check", "--static", "--format", "json"])
        .env("GDRDOCTOR_STATE_DIR", n.state.path().join("state"))
        .env_remove("GDRDOCTOR_TRACE")
        .env("GDRDOCTOR_COLLECT_TIMING", "1")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("  collect.pci"));
}

/// Issue 37: a run whose cache cannot answer starts CUDA's worker before NVML answers (it loads
/// libcuda and waits for its request); a run the cache may answer does not; a worker started
/// ahead and not needed (every GPU exclusive) is killed without a `cuInit`; and the GPUs NVML
/// names exclusive are still hidden from the `cuInit` of a worker started ahead.
#[test]
fn cuda_starts_ahead_of_nvml_only_when_the_cache_cannot_answer() {
    if standins().is_none() {
        return;
    }
    let ahead = |err: &str| {
        err.lines()
            .find(|l| l.starts_with("gdrdoctor: trace:") && l.contains("  cuda.ahead"))
            .map(str::to_string)
    };
    let n = Node::new(
        "0000:18:00.0=GPU-aaaaaaaa-0000=default;0000:2a:00.0=GPU-bbbbbbbb-0000=exclusive-process",
    );
    let (err, calls) = n.check(&[]);
    let line = ahead(&err).unwrap_or_else(|| panic!("no cuda.ahead on a cold run:\n{err}"));
    assert!(line.contains("no cache file yet"), "{line}");
    let inits = cu_inits(&calls);
    assert_eq!(inits.len(), 1, "{calls:?}");
    assert!(
        inits[0].ends_with("CUDA_VISIBLE_DEVICES=GPU-aaaaaaaa-0000"),
        "{inits:?}"
    );
    // Warm: the cache may answer, so nothing is started ahead, and it does answer.
    let (err, calls) = n.check(&[]);
    assert!(ahead(&err).is_none(), "{err}");
    assert!(!err.contains("[live-cuda]"), "{err}");
    assert!(cu_inits(&calls).is_empty());
    // --no-cache always asks CUDA: started ahead.
    let (err, _) = n.check(&["--no-cache"]);
    assert!(
        ahead(&err).is_some_and(|l| l.contains("--no-cache")),
        "{err}"
    );
    // Every GPU exclusive: started ahead (no cache yet), then killed, never initialised.
    let all = Node::new(
        "0000:18:00.0=GPU-aaaaaaaa-0000=exclusive-process;0000:2a:00.0=GPU-bbbbbbbb-0000=prohibited",
    );
    let (err, calls) = all.check(&[]);
    assert!(ahead(&err).is_some(), "{err}");
    assert!(cu_inits(&calls).is_empty(), "{calls:?}");
    assert!(!err.contains("[live-cuda] cuda.init"), "{err}");
}

/// The duration of the first trace line naming `phase`, in ms.
fn span_ms(err: &str, phase: &str) -> f64 {
    let line = err
        .lines()
        .find(|l| l.starts_with("gdrdoctor: trace:") && l.contains(&format!("  {phase}")))
        .unwrap_or_else(|| panic!("no `{phase}` in the trace:\n{err}"));
    line.trim_start_matches("gdrdoctor: trace:")
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {line}"))
}

/// Issue 37 item 3: NVML's per-GPU work, the GPUs' first handles (the driver attaching each)
/// included, runs one thread per GPU, so that an 8-GPU node costs about what a 1-GPU node does.
/// The stand-in charges 40 ms per GPU for the first handle and 40 ms for its queries: serial,
/// identifying 8 GPUs would take 320 ms and the worker 640 ms.
#[test]
fn nvml_cost_does_not_grow_with_the_gpu_count() {
    if standins().is_none() {
        return;
    }
    let gpus = |n: usize| {
        (0..n)
            .map(|i| format!("0000:{:02x}:00.0=GPU-{i:08x}-0000=default", 0x18 + 0x10 * i))
            .collect::<Vec<_>>()
            .join(";")
    };
    let warm = |n: usize| {
        let mut node = Node::new(&gpus(n));
        node.nvml_opts = "attach_ms=40 gpu_ms=40".into();
        node.check(&[]);
        let (err, _) = node.check(&[]);
        (
            span_ms(&err, "[live-nvml] nvml.identify"),
            span_ms(&err, "live.nvml-worker"),
            err,
        )
    };
    let (id1, w1, _) = warm(1);
    let (id8, w8, err) = warm(8);
    assert!(
        id1 >= 40.0 && w1 >= 80.0,
        "the delays were not charged: {id1} {w1}"
    );
    assert!(
        id8 < 160.0,
        "identifying 8 GPUs took {id8} ms (1 GPU: {id1}):\n{err}"
    );
    assert!(
        w8 < 320.0,
        "the NVML worker took {w8} ms for 8 GPUs (1 GPU: {w1}):\n{err}"
    );
    eprintln!("nvml, 40 + 40 ms per GPU: 1 GPU identify {id1:.1} worker {w1:.1}; 8 GPUs identify {id8:.1} worker {w8:.1} ms");
}

/// A slow `cuInit` (the first CUDA client of an idle GPU: UVM registers it, ~170 ms per GPU on
/// an H200) says why in the trace; a fast one says nothing more.
#[test]
fn a_slow_cuinit_says_why_in_the_trace() {
    if standins().is_none() {
        return;
    }
    let init_line = |err: &str| {
        err.lines()
            .find(|l| l.starts_with("gdrdoctor: trace:") && l.contains("[live-cuda] cuda.init"))
            .unwrap_or_else(|| panic!("no cuda.init line:\n{err}"))
            .to_string()
    };
    let fast = Node::new(TWO);
    let (err, _) = fast.check(&[]);
    assert!(!init_line(&err).contains("slow"), "{err}");
    let mut slow = Node::new(TWO);
    slow.cuinit_ms = Some(150);
    let (err, _) = slow.check(&[]);
    let line = init_line(&err);
    assert!(
        line.contains("slow: the first CUDA client of an idle GPU waits for the UVM driver"),
        "{line}"
    );
    // The cache answers the next run: no cuInit at all.
    let (err, calls) = slow.check(&[]);
    assert!(
        cu_inits(&calls).is_empty() && !err.contains("cuda.init"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// No context in the live-facts path (source scan)
// ---------------------------------------------------------------------------------------------

/// The driver calls `check` may make: none creates a context, allocates, or launches.
const CHECK_MAY_CALL: [&str; 10] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDeviceGetP2PAttribute",
];

/// The body of `fn name` in `src` (from its line to the matching closing brace).
fn body<'a>(src: &'a str, sig: &str) -> &'a str {
    let start = src
        .find(sig)
        .unwrap_or_else(|| panic!("`{sig}` not found in src/live/cuda/"));
    let mut depth = 0i32;
    let mut seen = false;
    for (i, c) in src[start..].char_indices() {
        match c {
            '{' => {
                depth += 1;
                seen = true;
            }
            '}' => {
                depth -= 1;
                if seen && depth == 0 {
                    return &src[start..start + i + 1];
                }
            }
            _ => {}
        }
    }
    &src[start..]
}

fn sys_calls(text: &str) -> Vec<String> {
    text.match_indices("sys::cu")
        .map(|(i, _)| {
            text[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn the_live_facts_path_creates_no_context() {
    // The safe CUDA layer: every file of src/live/cuda/, in name order.
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("src/live/cuda"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    let src: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let facts = body(&src, "pub fn facts() -> Result<CudaFacts, String>");
    let peer = body(&src, "fn peer(drv: &Driver");
    // Every function of the safe layer these two call, by name, and what each calls.
    let mut reached = String::new();
    for f in [facts, peer] {
        reached.push_str(f);
        for m in [
            "pub fn init()",
            "pub fn version(&self)",
            "pub fn device_count(&self)",
            "pub fn device(&self, ordinal: i32)",
            "pub fn attribute(&self, a: Attribute)",
            "pub fn compute_capability(&self)",
            "pub fn bdf(&self)",
            "pub fn name(&self)",
            "pub fn total_mem(&self)",
            "pub fn can_access_peer(&self, peer: &Device)",
            "pub fn p2p_attribute(&self, peer: &Device, a: P2pAttribute)",
            "pub fn library_problem()",
        ] {
            let name = m
                .trim_start_matches("pub fn ")
                .split('(')
                .next()
                .unwrap()
                .to_string();
            if f.contains(&format!(".{name}(")) || f.contains(&format!("::{name}")) {
                reached.push_str(body(&src, m));
            }
        }
    }
    // The layer's methods that facts() must not reach.
    for forbidden in [
        ".primary_context(",
        "Context",
        "DeviceBuffer",
        "MappedHost",
        "Stream",
    ] {
        assert!(
            !facts.contains(forbidden) && !peer.contains(forbidden),
            "the live-facts path uses {forbidden}"
        );
    }
    let calls = sys_calls(&reached);
    assert!(calls.contains(&"cuInit".to_string()), "{calls:?}");
    for c in &calls {
        if c == "is_culib_present" {
            continue;
        }
        assert!(
            CHECK_MAY_CALL.contains(&c.as_str()),
            "the live-facts path calls {c}, which is not on the list of calls that create no context"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Partial config-space reads
// ---------------------------------------------------------------------------------------------

/// `bytes` as `/sys/bus/pci/devices/<bdf>/config` of a scratch root.
fn config_root(bytes: &[u8]) -> (tempfile::TempDir, String) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("sys/bus/pci/devices/0000:01:00.0");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("config"), bytes).unwrap();
    (t, "/sys/bus/pci/devices/0000:01:00.0/config".into())
}

/// The partial read decodes as the whole: returns (bytes fetched, length).
fn same_decode(bytes: &[u8], what: &str) -> (usize, usize) {
    let (t, path) = config_root(bytes);
    let root = Root::sysroot(t.path()).unwrap().with_partial_reads(true);
    let p = root.read_partial(&path, &touched).unwrap();
    assert_eq!(p.bytes.len(), bytes.len(), "{what}: length");
    assert_eq!(decode(&p.bytes), decode(bytes), "{what}: decode differs");
    // And through the collectors' entry point.
    assert_eq!(
        decode(&root.read_config(&path).unwrap()),
        decode(bytes),
        "{what}"
    );
    (p.fetched, p.len)
}

#[test]
fn partial_config_reads_decode_as_the_whole_space() {
    let mut n = 0;
    for e in std::fs::read_dir(repo().join("fixtures/configspace")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "hex") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (bdf, bytes) in parse_hex_dump(&text) {
                same_decode(&bytes, &format!("{} {bdf}", p.display()));
                n += 1;
            }
        }
    }
    assert!(n >= 8, "{n} captured config spaces");
    // The H200's 4 KiB: a fraction of it is read.
    let text =
        std::fs::read_to_string(repo().join("fixtures/configspace/gpu-h200-endpoint.hex")).unwrap();
    let (_, h200) = parse_hex_dump(&text).remove(0);
    let (fetched, len) = same_decode(&h200, "h200");
    assert_eq!(len, 4096);
    assert!(fetched < 1024, "{fetched} of 4096 bytes fetched");
}

#[test]
fn partial_config_reads_of_every_fixture_sysroot_and_real_capture() {
    use std::collections::BTreeSet;
    let mut seen = BTreeSet::new();
    let mut stack: Vec<_> = common::scenarios()
        .iter()
        .map(|s| common::fixture(s))
        .collect();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() && p.file_name().is_some_and(|n| n == "config") {
                let b = std::fs::read(&p).unwrap();
                if seen.insert(b.clone()) {
                    same_decode(&b, &p.display().to_string());
                }
            }
        }
    }
    assert!(seen.len() >= 10, "{} distinct config spaces", seen.len());
    let Some(rd) = require::realdata(&repo()) else {
        return;
    };
    let real = rd.join("pciutils-haswell-cx3pro-configspace/lspci-vvv-xxxx.txt");
    match std::fs::read_to_string(&real) {
        Ok(t) => {
            let dumps = parse_hex_dump(&t);
            assert!(!dumps.is_empty());
            for (bdf, b) in dumps {
                same_decode(&b, &format!("realdata {bdf}"));
            }
        }
        Err(e) => require::skip(
            "partial config reads of the real lspci -xxxx capture",
            &format!("{}: {e}", real.display()),
            "the shared captures at ../shared/realdata",
        ),
    }
}

#[test]
fn partial_config_reads_of_this_machine() {
    let root = Root::live();
    let Ok(devs) = std::fs::read_dir("/sys/bus/pci/devices") else {
        return;
    };
    for e in devs.flatten() {
        let path = format!(
            "/sys/bus/pci/devices/{}/config",
            e.file_name().to_string_lossy()
        );
        let Ok(whole) = std::fs::read(&path) else {
            continue;
        };
        let part = root.read_config(&path).unwrap();
        assert_eq!(part.len(), whole.len(), "{path}");
        assert_eq!(decode(&part), decode(&whole), "{path}");
    }
}

#[test]
fn a_non_root_reader_gets_the_same_length() {
    // sysfs gives a non-root reader 64 bytes of a 4096-byte file; a plain file cannot show
    // that, so the length probe is checked on a file that is what it claims.
    let (t, path) = config_root(&[0u8; 64]);
    let root = Root::sysroot(t.path()).unwrap().with_partial_reads(true);
    let p = root.read_partial(&path, &touched).unwrap();
    assert_eq!(p.len, 64);
    assert!(decode(&p.bytes).limited);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    fn h200() -> Vec<u8> {
        let text =
            std::fs::read_to_string(repo().join("fixtures/configspace/gpu-h200-endpoint.hex"))
                .unwrap();
        parse_hex_dump(&text).remove(0).1
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
        /// Damaged chains (pointers, ids, truncation) decode the same read whole or in part.
        #[test]
        fn mutated_config_spaces(
            flips in proptest::collection::vec((0usize..4096, any::<u8>()), 0..12),
            cut in prop_oneof![Just(4096usize), 0usize..4096],
        ) {
            let mut b = h200();
            for (at, v) in flips {
                b[at] = v;
            }
            b.truncate(cut);
            same_decode(&b, "mutated h200");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The NCCL version from the library's .rodata, not the whole file
// ---------------------------------------------------------------------------------------------

#[test]
fn the_nccl_banner_is_found_in_rodata_without_reading_the_whole_library() {
    use gdrdoctor::live::nccl::{read_version, rodata_range};
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("nccl.c");
    // A library like NCCL's: the banner in .rodata, a large blob after it (NCCL's device code
    // is hundreds of MiB).
    std::fs::write(
        &src,
        "const char banner[] = \"NCCL version 2.99.1+cuda13.0\";\n\
         __attribute__((section(\".nv_fatbin\"))) const char blob[4 << 20] = {1};\n\
         const char *v(void) { return banner; }\n",
    )
    .unwrap();
    let lib = t.path().join("libnccl.so.2");
    match Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("cc: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            require::skip(
                "the NCCL banner in .rodata",
                &format!("`cc` cannot be run ({e})"),
                "apt-get install gcc",
            );
            return;
        }
    }
    let bytes = std::fs::read(&lib).unwrap();
    let at = bytes
        .windows(13)
        .position(|w| w == b"NCCL version ")
        .unwrap() as u64;
    let (off, len) = rodata_range(&mut std::fs::File::open(&lib).unwrap()).unwrap();
    assert!(
        off <= at && at < off + len,
        ".rodata {off}+{len}, banner at {at}"
    );
    assert!(
        len < bytes.len() as u64 / 4,
        ".rodata is {len} of {} bytes",
        bytes.len()
    );
    assert_eq!(
        read_version(&lib).unwrap().map(|(v, _)| v).as_deref(),
        Some("2.99.1")
    );
    // Not an ELF file: the whole file is scanned, as before.
    let plain = t.path().join("plain");
    std::fs::write(&plain, b"junk NCCL version 2.18.3 junk").unwrap();
    assert!(rodata_range(&mut std::fs::File::open(&plain).unwrap()).is_none());
    assert_eq!(
        read_version(&plain).unwrap().map(|(v, _)| v).as_deref(),
        Some("2.18.3")
    );
}
