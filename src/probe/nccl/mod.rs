//! `probe --nccl`: ask NCCL itself. A worker process `dlopen`s the node's `libnccl.so.2` (the
//! one `check` reports, or `--nccl-lib`), makes one communicator per GPU (`ncclCommInitAll`,
//! one thread) and runs one small all-reduce with `NCCL_DEBUG=INFO` and NCCL's topology and
//! graph dumps written into a private directory. The parent reads what NCCL wrote and puts it
//! beside gdrdoctor's prediction for the same node, NCCL version and environment:
//!
//! - `probe.nccl-run`: the all-reduce ran and its sums are right (or NCCL's error, with its
//!   WARN lines);
//! - `probe.nccl-topology`: NCCL's topology dump against gdrdoctor's view of the node (GPUs,
//!   RDMA devices, paths, NVLink, GDR support): one `fail` per disagreement;
//! - `probe.nccl`: the transport NCCL chose per GPU pair (`P2P/...`, `SHM/...`) against
//!   `gpu.p2p`'s prediction, and per GPU x NIC x direction whether it used GDR (`/GDRDMA`)
//!   against the GDR verdict (`compare()` and `compare_p2p()` of `checks/src/nccl/compare.rs`).
//!
//! When the node has RDMA devices a second run sets `NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`:
//! with neither P2P nor shared memory NCCL connects the GPUs of one node through the network,
//! so its channel lines say per GPU whether it used GDR. `NCCL_NVLS_ENABLE=0` always (never
//! NVLink multicast).
//!
//! [`worker`] runs in the worker process; [`verdict`] turns the [`Record`] into findings (pure,
//! replayed from saved reports). NCCL's log is read by the one NCCL log parser
//! (`gdrdoctor_checks::paste::nccl`, the parser of `gdrdoctor diagnose`) and mapped onto the
//! comparison by `gdrdoctor_checks::nccl::compare::observe`.

pub mod allocation;
pub mod allocation_worker;
pub mod verdict;
pub mod worker;

use super::args::{self, CommonArgs};
use super::common::{HealthCheck, Problem, WorkerRecord};
use super::plan::{Plan, Ran};
use gdrdoctor_checks::model::Node;
use gdrdoctor_checks::nccl::rule::System;
use gdrdoctor_checks::report::Finding;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `--nccl` and its options.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// Ask NCCL itself: one small all-reduce over every GPU with NCCL_DEBUG=INFO and NCCL's
    /// topology dump, NCCL's transports and GDR use beside gdrdoctor's prediction (with RDMA
    /// NICs, a second run forces the network transport inside the node)
    #[arg(long)]
    pub nccl: bool,
    /// With --nccl: the libnccl.so.2 to load, e.g. the one in your job's Python environment
    /// (default: the first one the loader finds, as `gdrdoctor check` reports it)
    #[arg(long, value_name = "PATH")]
    pub nccl_lib: Option<PathBuf>,
}

/// Elements (float32) of the all-reduce: 4 MiB per GPU.
pub const COUNT: usize = 1 << 20;

/// What NCCL is always given: its INFO log of initialisation, topology search, network and
/// environment, and never NVLink multicast (NVLS).
pub const BASE_ENV: &[(&str, &str)] = &[
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,NET,ENV"),
    ("NCCL_NVLS_ENABLE", "0"),
    ("NCCL_TOPO_DUMP_FILE_RANK", "0"),
    ("NCCL_GRAPH_DUMP_FILE_RANK", "0"),
];

/// The second run on a node with RDMA devices: neither P2P nor shared memory, so GPUs of one
/// node connect through the network transport.
pub const NET_ONLY_ENV: &[(&str, &str)] = &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")];

/// The files NCCL writes, inside the run's private directory.
pub const LOG_FILE: &str = "nccl-debug.log";
pub const TOPO_FILE: &str = "nccl-topo.xml";
pub const GRAPH_FILE: &str = "nccl-graph.xml";

/// What the nccl worker is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// `default`, or `net-only` (P2P and shared memory off).
    pub label: String,
    /// The library to `dlopen`.
    pub library: String,
    /// The CUDA devices, rank i on `gpus[i]`; every device when `None`.
    pub gpus: Option<Vec<i32>>,
    /// Float32 elements per GPU.
    pub count: usize,
    /// Variables set before NCCL loads (they override the inherited environment).
    pub env: BTreeMap<String, String>,
}

/// A rank of the communicator and its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankGpu {
    pub rank: u32,
    /// CUDA ordinal.
    pub cuda: i32,
    /// PCI address from `cuDeviceGetPCIBusId` (`0000:18:00.0`).
    pub bdf: String,
}

/// The all-reduce's sums, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sums {
    /// Every element must be this: the sum over ranks of rank + 1.
    pub expected: f32,
    /// Elements read back (the first ones of every GPU's result).
    pub checked: usize,
    pub wrong: usize,
    /// The first wrong one: (rank, element, value).
    pub first_wrong: Option<(u32, usize, f32)>,
}

/// What the nccl worker reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// `ncclGetVersion` as NCCL writes it (`2.28.9`), and the raw code.
    pub version: Option<String>,
    pub version_code: Option<i32>,
    pub ranks: Vec<RankGpu>,
    /// Every `NCCL_*` variable of the worker after NCCL initialised (NCCL adds those of
    /// `/etc/nccl.conf` and `~/.nccl.conf` that the environment did not set).
    pub env: BTreeMap<String, String>,
    pub init_ms: Option<f64>,
    /// Enqueue to the end of every stream's synchronize (the first all-reduce connects the
    /// channels it needs, so connection set-up is included).
    pub allreduce_ms: Option<f64>,
    pub sums: Option<Sums>,
    /// The NCCL call that failed, in NCCL's words (`ncclCommInitAll failed: ...`).
    pub error: Option<String>,
}

/// What NCCL wrote into the private directory, read by the parent after the worker ended
/// (also after it was killed: a hung all-reduce still leaves its log).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NcclFiles {
    /// `NCCL_DEBUG_FILE`.
    pub log: Option<String>,
    /// Lines left out because the log was larger than [`LOG_CAP`].
    #[serde(default)]
    pub log_truncated: bool,
    /// `NCCL_TOPO_DUMP_FILE`.
    pub topo_dump: Option<String>,
    /// `NCCL_GRAPH_DUMP_FILE`.
    pub graph_dump: Option<String>,
    /// Files that could not be read, with why.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The most of NCCL's log a record keeps.
pub const LOG_CAP: usize = 1 << 20;

/// One worker run: what was asked, what the worker reported or what went wrong, the health
/// check after a stopped worker, and NCCL's files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub params: Params,
    pub output: Option<Output>,
    pub problem: Option<Problem>,
    pub health: Option<HealthCheck>,
    pub files: NcclFiles,
}

/// What the report keeps of `probe --nccl` (`probe.nccl`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Why nothing ran (no NCCL found), when nothing ran.
    #[serde(default)]
    pub skipped: Option<String>,
    /// gdrdoctor's view of the node when the probe ran, the rule's inputs (PCI tree, NVML and
    /// CUDA facts, RDMA devices and GDR support): the prediction is made from it at replay.
    #[serde(default)]
    pub view: Option<System>,
    #[serde(default)]
    pub runs: Vec<Run>,
}

/// The validated plan.
#[derive(Debug, Clone)]
pub struct NcclProbe {
    pub library: Option<PathBuf>,
    pub gpus: Option<Vec<i32>>,
    pub deadline: Duration,
}

/// Build the plan from the command line; `None` without `--nccl`.
pub fn plan(m: &clap::ArgMatches, c: &CommonArgs) -> Result<Option<Box<dyn Plan>>, String> {
    let a: Args = args::own(m)?;
    if !a.nccl {
        if a.nccl_lib.is_some() {
            return Err("--nccl-lib needs --nccl".into());
        }
        return Ok(None);
    }
    let mut gpus: Vec<i32> = Vec::new();
    for g in [c.gpu, c.peer].into_iter().flatten() {
        if !gpus.contains(&(g as i32)) {
            gpus.push(g as i32);
        }
    }
    Ok(Some(Box::new(NcclProbe {
        library: a.nccl_lib,
        gpus: (!gpus.is_empty()).then_some(gpus),
        deadline: Duration::from_secs(c.timeout),
    })))
}

/// The library to load: `--nccl-lib`, else the first NCCL found on the node (the loader's
/// order). `Err`: why there is none.
pub fn choose_library(node: &Node, given: Option<&Path>) -> Result<String, String> {
    if let Some(p) = given {
        return Ok(p.display().to_string());
    }
    let facts = node.live.nccl.get();
    match facts.and_then(|f| f.libraries.first()) {
        Some(l) => Ok(l.path.clone()),
        None => {
            let searched = facts
                .map(|f| f.searched.join(", "))
                .filter(|s| !s.is_empty())
                .or_else(|| node.live.nccl.reason().map(str::to_string))
                .unwrap_or_else(|| "nowhere".into());
            Err(format!(
                "no libnccl.so.2 found on this node (searched {searched}): nothing to ask; pass --nccl-lib PATH for the NCCL your job loads (a container's, or a Python environment's nvidia/nccl/lib)"
            ))
        }
    }
}

/// A private directory for NCCL's files (mode 0700), removed on drop.
pub(crate) struct PrivateDir(pub(crate) PathBuf);

impl PrivateDir {
    pub(crate) fn create(label: &str) -> Result<PrivateDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = base.join(format!(
            "gdrdoctor-nccl-{}-{stamp}-{label}",
            std::process::id()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(PrivateDir(p))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Read one of NCCL's files (capped), or say why not.
pub(crate) fn read_capped(
    path: &Path,
    cap: usize,
    errors: &mut Vec<String>,
) -> Option<(String, bool)> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            errors.push(format!("{}: {e}", path.display()));
            return None;
        }
    };
    let mut buf = Vec::new();
    if let Err(e) = f.take(4 * cap as u64).read_to_end(&mut buf) {
        errors.push(format!("{}: {e}", path.display()));
        return None;
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    Some(keep(&text, cap))
}

/// A log kept whole up to `cap` bytes; a longer one keeps the lines the verdict and a reader
/// need (version, environment, network lists, channel lines, WARN lines, Init lines), then is
/// cut at a line boundary. The flag says whether anything was left out.
pub fn keep(text: &str, cap: usize) -> (String, bool) {
    if text.len() <= cap {
        return (text.to_string(), false);
    }
    let wanted = [
        "NCCL version",
        "set by environment",
        " : Using ",
        "Channel ",
        "NCCL WARN",
        "Init COMPLETE",
        "Init START",
        "GPU Direct RDMA",
    ];
    let mut out = String::new();
    for l in text
        .lines()
        .filter(|l| wanted.iter().any(|w| l.contains(w)))
    {
        if out.len() + l.len() + 1 > cap {
            break;
        }
        out.push_str(l);
        out.push('\n');
    }
    (out, true)
}

impl NcclProbe {
    /// One worker run with NCCL's files in a private directory (parent side; I/O).
    fn run(&self, label: &str, library: &str, extra: &[(&str, &str)]) -> Run {
        let mut env: BTreeMap<String, String> = BASE_ENV
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dir = match PrivateDir::create(label) {
            Ok(d) => Some(d),
            Err(e) => {
                // Without its files NCCL's decisions cannot be read: do not run.
                return Run {
                    params: Params {
                        label: label.into(),
                        library: library.into(),
                        gpus: self.gpus.clone(),
                        count: COUNT,
                        env,
                    },
                    output: None,
                    problem: Some(Problem::Start {
                        message: format!("cannot make a private directory for nccl's files: {e}"),
                    }),
                    health: None,
                    files: NcclFiles::default(),
                };
            }
        };
        let at = |f: &str| {
            dir.as_ref()
                .map(|d| d.0.join(f).display().to_string())
                .unwrap_or_default()
        };
        env.insert("NCCL_DEBUG_FILE".into(), at(LOG_FILE));
        env.insert("NCCL_TOPO_DUMP_FILE".into(), at(TOPO_FILE));
        env.insert("NCCL_GRAPH_DUMP_FILE".into(), at(GRAPH_FILE));
        let params = Params {
            label: label.into(),
            library: library.into(),
            gpus: self.gpus.clone(),
            count: COUNT,
            env,
        };
        let w: WorkerRecord<Params, Output> =
            WorkerRecord::run("nccl", params.clone(), self.deadline, true);
        let mut files = NcclFiles::default();
        if let Some(d) = &dir {
            if let Some((t, cut)) = read_capped(&d.0.join(LOG_FILE), LOG_CAP, &mut files.errors) {
                files.log = Some(t);
                files.log_truncated = cut;
            }
            files.topo_dump =
                read_capped(&d.0.join(TOPO_FILE), LOG_CAP, &mut files.errors).map(|x| x.0);
            files.graph_dump =
                read_capped(&d.0.join(GRAPH_FILE), LOG_CAP, &mut files.errors).map(|x| x.0);
        }
        Run {
            params,
            output: w.output,
            problem: w.problem,
            health: w.health,
            files,
        }
    }
}

impl Plan for NcclProbe {
    fn execute(&self, node: &Node) -> Ran {
        if let Some(f) = super::common::no_gpu(node) {
            return Ran::findings(vec![f]);
        }
        let mut record = Record::default();
        match choose_library(node, self.library.as_deref()) {
            Err(why) => record.skipped = Some(why),
            Ok(lib) => {
                // gdrdoctor's view needs the live facts (NVLink from NVML, GDR support from
                // CUDA and libibverbs), as `check` asks them: in a worker of their own.
                let mut full = node.clone();
                full.live = crate::collect::live::query();
                let cx = gdrdoctor_checks::gdr::Context::new(&full);
                let view = gdrdoctor_checks::gdr::system(&full, &cx);
                let has_nics = !view.nics.is_empty();
                record.view = Some(view);
                record.runs.push(self.run("default", &lib, &[]));
                if has_nics {
                    record.runs.push(self.run("net-only", &lib, NET_ONLY_ENV));
                }
            }
        }
        Ran {
            findings: verdict::findings(&record),
            record: serde_json::to_value(&record).ok(),
        }
    }
}

/// The worker side, for the registry.
pub fn serve(
    v: serde_json::Value,
) -> Result<serde_json::Value, crate::worker::protocol::WorkerError> {
    crate::worker::protocol::serve(v, worker::worker)
}

/// The verdict from a saved record, for the registry.
pub fn replay(_node: &Node, v: &serde_json::Value) -> Result<Vec<Finding>, String> {
    let r: Record = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    Ok(verdict::findings(&r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_long_log_keeps_the_lines_that_matter() {
        let mut t = String::new();
        for i in 0..2000 {
            t.push_str(&format!("h:1:2 [0] NCCL INFO graph search line {i}\n"));
        }
        t.push_str("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n");
        let (k, cut) = keep(&t, 4096);
        assert!(cut);
        assert!(k.len() <= 4096);
        assert_eq!(
            gdrdoctor_checks::paste::nccl::parse_file(&k)
                .connections
                .len(),
            1
        );
        assert_eq!(keep("short", 4096), ("short".to_string(), false));
    }

    proptest! {
        #[test]
        fn keep_never_panics_and_stays_under_the_cap(s in "\\PC{0,300}", cap in 0usize..64) {
            let (k, cut) = keep(&s, cap);
            prop_assert!(k.len() <= cap.max(s.len()));
            prop_assert_eq!(cut, s.len() > cap);
        }
    }
}
