//! `gdrdoctor preflight`: one process per node of a job's allocation, started by the engine the
//! site runs (Slurm, Open MPI or PMI, torchrun, a Kubernetes Indexed Job). Every rank checks its
//! node and reports to rank 0; rank 0 rolls the reports up, has every node run NCCL across the
//! allocation (as NCCL chooses, then network-only with the node pairs' rounds), and answers:
//! per node and per (node, GPU, NIC) what the node's facts predicted beside what NCCL did, the
//! pairs' bandwidth, and the nodes to take out with the reason from that node's facts.
//!
//! This file holds the arguments and the stages' order; the rendezvous, the coordinator and
//! the engines are `collect::allocation`, the NCCL workers `probe::nccl::allocation`, the
//! judgement the pure crate's `preflight`, the answer's formats `render::preflight`.

use crate::collect::allocation::coordinator::{Coordinator, Plan};
use crate::collect::allocation::{client, engine, secret, wire};
use crate::collect::{self, Libraries};
use crate::output::args::OutputArgs;
use crate::output::{emit, fail, write_output, EXIT_USAGE};
use crate::source::Location;
use gdrdoctor_checks::preflight::model::{Answer, Thresholds};
use gdrdoctor_checks::report::Report;
use gdrdoctor_checks::RunOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreflightFormat {
    Table,
    Json,
    Junit,
    Prometheus,
    Oneline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StageArg {
    Check,
    Nccl,
    Pairs,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = concat!(
    "Each rank reads its rank, the world size and rank 0's address from its engine (Slurm, Open \
MPI, PMI, torchrun, a Kubernetes Indexed Job) or from --rank, --world, --rendezvous; rank 0 \
answers for the allocation. Every message is authenticated with the job's secret; a stranger is \
refused and counted. gdrdoctor changes nothing on a node: the Slurm and Kubernetes recipes drain \
or taint the nodes it names.\n\n",
    "Examples:\n",
    "  umask 077; head -c 32 /dev/urandom | base64 > ~/.gdrdoctor-$SLURM_JOB_ID.key\n",
    "  srun --ntasks-per-node=1 gdrdoctor preflight --secret-file ~/.gdrdoctor-$SLURM_JOB_ID.key\n",
    "  mpirun -N 1 gdrdoctor preflight --rendezvous node01:29400 --secret-file job.key -f json\n",
    "  torchrun --nnodes 4 --nproc-per-node 1 --rdzv-endpoint node01:29500 --no-python \\\n",
    "      gdrdoctor preflight --secret-file /shared/job.key\n",
    "  gdrdoctor preflight --rank 0 --world 2 --rendezvous node01:29400 --secret-file k \\\n",
    "      --sysroot 'captures/node-{rank}.tar.gz'          # rehearse on captures\n\n",
    "Exit codes (as check's):\n",
    "  0  every node passed\n",
    "  1  a node to take out (it is named, with why, under \"take out\")\n",
    "  2  gdrdoctor could not run (usage error, no engine, no secret, rank 0 unreachable)\n",
    "  3  nothing to take out, but something could not be evaluated (unless --allow-incomplete)\n",
    "Every rank exits with rank 0's answer's code."
))]
pub struct Args {
    /// This process' rank (wins over the engine's)
    #[arg(long, value_name = "R", env = "GDRDOCTOR_RANK")]
    pub rank: Option<u32>,
    /// The number of ranks: one per node (wins over the engine's; needed under Kubernetes)
    #[arg(long, value_name = "N", env = "GDRDOCTOR_WORLD")]
    pub world: Option<u32>,
    /// Rank 0's address: rank 0 listens on PORT, the others connect to HOST:PORT (default: from
    /// the engine: Slurm's first node, torchrun's MASTER_ADDR)
    #[arg(long, value_name = "HOST:PORT", env = "GDRDOCTOR_RENDEZVOUS")]
    pub rendezvous: Option<String>,
    /// The port, when the engine gives rank 0's host (Slurm: derived from the job and step)
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// The job's secret: the same file on every rank, not readable by other users, at least
    /// 16 bytes (`head -c 32 /dev/urandom | base64`)
    #[arg(long, value_name = "FILE", env = "GDRDOCTOR_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Seconds for every rank to join rank 0 and report its check; a rank not in by then is
    /// named and the others go on
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub timeout: f64,
    /// This node's name in the answer (default: the engine's, e.g. SLURMD_NODENAME; `{rank}` is
    /// replaced by the rank)
    #[arg(long, value_name = "NAME", env = "GDRDOCTOR_NODE_NAME")]
    pub node_name: Option<String>,
    /// The nodes' names in rank order (comma-separated), so that a rank that never joins is
    /// named by its node (Slurm: from the node list when there is one task per node)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub nodes: Vec<String>,
    /// Read a capture (directory or .tar.gz) as this node (to rehearse on captures); `{rank}` is
    /// replaced by the rank
    #[arg(long, value_name = "DIR|TAR.GZ")]
    pub sysroot: Option<String>,
    /// Read the host through DIR where a container mounts the host's `/` (a Kubernetes pod:
    /// hostPath `/` at /host), as `check --host-root`
    #[arg(long, value_name = "DIR", conflicts_with = "sysroot")]
    pub host_root: Option<PathBuf>,
    /// Which stages to run: check (each node's own; always), nccl (every GPU of every node, as
    /// NCCL chooses, then network-only), pairs (node pairs per GPU/NIC rail; needs nccl)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![StageArg::Check, StageArg::Nccl, StageArg::Pairs])]
    pub stages: Vec<StageArg>,
    /// The libnccl.so.2 to load, e.g. the one in your job's Python environment (default: the
    /// first one the loader would find)
    #[arg(long, value_name = "PATH")]
    pub nccl_lib: Option<PathBuf>,
    /// Seconds each node's NCCL worker may run (per run); a node that hangs is killed then
    #[arg(long, value_name = "S", default_value_t = 120.0)]
    pub nccl_timeout: f64,
    /// GPUs this node brings to NCCL, CUDA ordinals 0..N after CUDA_VISIBLE_DEVICES (default:
    /// the node's NVIDIA GPUs)
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Bytes per GPU of the all-reduce
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    pub allreduce_bytes: u64,
    /// Bytes per rail and direction of a pair's exchange
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub pair_bytes: u64,
    /// Timed repetitions of the all-reduce and of each exchange (after one warm-up)
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub iterations: u32,
    /// A pair rail below this fraction of what the slower end's links allow (NIC port rate,
    /// PCIe links of the GPU and NIC) fails; 0 turns it off
    #[arg(long, value_name = "F", default_value_t = 0.6)]
    pub min_pair_fraction: f64,
    /// A pair rail below this fraction of the median rail fails; 0 turns it off
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    pub min_pair_relative: f64,
    /// Leave fields out of the odd-node-out comparison (as `fleet --ignore`)
    #[arg(long, value_delimiter = ',', value_name = "FIELD", value_parser = crate::output::args::parse_field_prefix)]
    pub ignore_drift: Vec<String>,
    /// Judge each node against this site policy (as `check --policy`)
    #[arg(long, value_name = "FILE", env = "GDRDOCTOR_POLICY")]
    pub policy: Option<PathBuf>,
    /// Apply no policy at all, not even /etc/gdrdoctor/policy.toml
    #[arg(long)]
    pub no_policy: bool,
    /// Do not query NVML, the CUDA driver and libibverbs in each node's check (files only)
    #[arg(long = "static")]
    pub static_only: bool,
    /// Judge GDR with this NCCL version's rules in each node's check
    #[arg(long, value_name = "X.Y.Z", value_parser = crate::output::args::parse_nccl_version)]
    pub nccl_version: Option<String>,
    /// Where each node's check keeps CUDA's answers for the boot
    #[arg(long, value_name = "DIR", env = "GDRDOCTOR_STATE_DIR", default_value = crate::state::DEFAULT_DIR)]
    pub state_dir: PathBuf,
    /// Output format of rank 0's answer (the other ranks print one line on stderr): table (per
    /// node a row, the GPUs where NCCL and the facts disagree, the slow pairs, the nodes to take
    /// out), json (schema gdrdoctor.preflight/v1), junit, prometheus or oneline
    #[arg(long, short = 'f', value_enum, default_value_t = PreflightFormat::Table)]
    pub format: PreflightFormat,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// How long a rank waits for rank 0 after it reported: every stage's deadline and some room.
fn overall(args: &Args, nccl: bool) -> Duration {
    let t = Duration::from_secs_f64(args.timeout);
    let n = if nccl {
        2 * (Duration::from_secs_f64(args.nccl_timeout) + Duration::from_secs(25))
    } else {
        Duration::ZERO
    };
    t + n + Duration::from_secs(30)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub fn run(args: &Args) -> i32 {
    let secs_ok = |v: f64| v > 0.0 && v <= 86_400.0;
    if !secs_ok(args.timeout) || !secs_ok(args.nccl_timeout) {
        return fail("--timeout and --nccl-timeout are seconds, above 0 and at most a day");
    }
    for (name, v) in [
        ("--min-pair-fraction", args.min_pair_fraction),
        ("--min-pair-relative", args.min_pair_relative),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return fail(format!("{name} {v} is not a fraction between 0 and 1"));
        }
    }
    // A rehearsal on captures (`--sysroot`) has no nodes to run NCCL on: NCCL would run on
    // this machine's GPUs and judge them, not the captures (the review of 2026-12-07: a
    // healthy capture was taken out because the rehearsal machine had no libnccl.so.2). Only
    // the check stage runs, and the answer says so; naming an NCCL (`--nccl-lib`, e.g. a
    // stand-in) runs the other stages against it on purpose.
    let rehearsal = args.sysroot.is_some() && args.nccl_lib.is_none();
    if rehearsal && args.stages.iter().any(|s| *s != StageArg::Check) {
        eprintln!(
            "gdrdoctor preflight: --sysroot rehearses on captures: only the check stage runs (nccl and pairs need the nodes themselves, or an NCCL named with --nccl-lib)"
        );
    }
    let nccl = !rehearsal && args.stages.contains(&StageArg::Nccl);
    let pairs = !rehearsal && args.stages.contains(&StageArg::Pairs);
    if pairs && !nccl {
        return fail("--stages pairs needs nccl (the pairs run inside the network-only NCCL run)");
    }
    let Some(secret_path) = &args.secret_file else {
        return fail("--secret-file FILE is needed: the job's secret, the same file on every rank (`umask 077; head -c 32 /dev/urandom | base64 > FILE` in the job's directory); only the job's own ranks may join");
    };
    let secret = match secret::read(secret_path) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let given = engine::Given {
        rank: args.rank,
        world: args.world,
        rendezvous: args.rendezvous.clone(),
        node: None,
        nodes: args.nodes.clone(),
        port: args.port,
    };
    let mut id = match engine::detect(&env, &given, &hostname()) {
        Ok(i) => i,
        Err(e) => return fail(e),
    };
    let rank_s = id.rank.to_string();
    if let Some(n) = &args.node_name {
        id.node = n.replace("{rank}", &rank_s);
    } else if let Some(n) = id.expected_nodes.get(id.rank as usize) {
        id.node = n.clone();
    } else if let Some(s) = &args.sysroot {
        // A rehearsal: the rank's capture names its node (this machine's name would name every
        // rank alike: "take out 2: vm, vm").
        let path = s.replace("{rank}", &rank_s);
        let file = Path::new(&path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or(path.clone());
        id.node = file
            .strip_suffix(".tar.gz")
            .or_else(|| file.strip_suffix(".tgz"))
            .unwrap_or(&file)
            .to_string();
    }
    let (_, port) = match engine::split_addr(&id.rendezvous) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let t0 = Instant::now();
    let until = t0 + overall(args, nccl);
    // Rank 0 listens before its own node joins (as the others, through the socket).
    let coordinator = if id.rank == 0 {
        let plan = Plan {
            identity: id.clone(),
            timeout: Duration::from_secs_f64(args.timeout),
            nccl,
            pairs,
            nccl_timeout: Duration::from_secs_f64(args.nccl_timeout),
            count: (args.allreduce_bytes / 4).max(1),
            iterations: args.iterations.clamp(1, 1000),
            pair_bytes: args.pair_bytes.max(4),
            thresholds: Thresholds {
                min_fraction: args.min_pair_fraction,
                min_relative: args.min_pair_relative,
            },
            fail_on: args.out.fail_on(),
            allow_incomplete: args.out.allow_incomplete,
            ignore_drift: args.ignore_drift.clone(),
        };
        match Coordinator::start(plan, secret.clone(), &format!("0.0.0.0:{port}"), until) {
            Ok(c) => Some(c),
            Err(e) => return fail(e),
        }
    } else {
        None
    };
    let handle = coordinator.map(|c| {
        let p = c.port();
        let out = Delivery {
            format: args.format,
            verbose: args.out.verbose,
            file: args.out.file().map(Path::to_path_buf),
        };
        (
            p,
            std::thread::spawn(move || c.run(move |a| out.deliver(a))),
        )
    });
    let connect_to = match &handle {
        Some((p, _)) => format!("127.0.0.1:{p}"),
        None => id.rendezvous.clone(),
    };
    let node_code = node_part(args, &id, &secret, &connect_to, t0, until);
    let Some((_, h)) = handle else {
        return node_code;
    };
    match h.join() {
        // The answer went out before the ranks were told (Delivery): rank 0's own node part
        // has the code it gave, or 2 when it could not be written.
        Ok(_) => node_code,
        Err(_) => fail("rank 0's coordinator panicked"),
    }
}

/// This node's part (every rank, rank 0 too): join, check, report, run what rank 0 asks.
fn node_part(
    args: &Args,
    id: &engine::Identity,
    secret: &[u8],
    addr: &str,
    t0: Instant,
    until: Instant,
) -> i32 {
    let who = format!("gdrdoctor preflight: rank {} ({})", id.rank, id.node);
    // The check runs while the rank joins.
    let check = std::thread::spawn({
        let sysroot = args
            .sysroot
            .as_ref()
            .map(|s| s.replace("{rank}", &id.rank.to_string()));
        let host_root = args.host_root.clone();
        let policy = args.policy.clone();
        let no_policy = args.no_policy;
        let static_only = args.static_only;
        let nccl_version = args.nccl_version.clone();
        let state_dir = args.state_dir.clone();
        let gpus = args.gpus;
        move || {
            let t = Instant::now();
            let r = check_node(
                sysroot.as_deref().map(Path::new),
                host_root.as_deref(),
                policy.as_deref(),
                no_policy,
                static_only,
                nccl_version.as_deref(),
                &state_dir,
                gpus,
            );
            (r, t.elapsed())
        }
    });
    let session = match client::join(addr, id, secret, t0 + Duration::from_secs_f64(args.timeout)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{who}: {e}");
            return EXIT_USAGE;
        }
    };
    let (report, took) = match check.join() {
        Ok(x) => x,
        Err(_) => (Err("the check panicked".to_string()), Duration::ZERO),
    };
    let msg = match report {
        Ok((r, gpus)) => match serde_json::to_string(&r) {
            Ok(t) => wire::Message::Report {
                report: Some(t),
                error: None,
                gpus,
                check_ms: took.as_secs_f64() * 1e3,
            },
            Err(e) => wire::Message::Report {
                report: None,
                error: Some(format!("the report could not be written: {e}")),
                gpus: 0,
                check_ms: took.as_secs_f64() * 1e3,
            },
        },
        Err(e) => wire::Message::Report {
            report: None,
            error: Some(format!("the check could not run: {e}")),
            gpus: 0,
            check_ms: took.as_secs_f64() * 1e3,
        },
    };
    if let Err(e) = session.send(&msg, Duration::from_secs(30)) {
        eprintln!("{who}: sending the report to {}: {e}", session.peer);
        return EXIT_USAGE;
    }
    let library = nccl_library(args.nccl_lib.as_deref());
    let mut reader = session.reader;
    let writer = session.writer;
    loop {
        let m = match reader.recv(wire::MAX_FRAME, until, "rank 0's next step") {
            Ok(m) => m,
            Err(e) => {
                eprintln!("{who}: {e}");
                return EXIT_USAGE;
            }
        };
        match m {
            wire::Message::Nccl { spec, deadline_ms } => {
                let label = spec.label.clone();
                let send = |m: &wire::Message| {
                    let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
                    w.send(m, Instant::now() + Duration::from_secs(30))
                };
                let run = match &library {
                    Ok(lib) => {
                        let on_id = |hex: &str| {
                            let _ = send(&wire::Message::NcclId {
                                label: label.clone(),
                                id: hex.to_string(),
                            });
                        };
                        crate::probe::nccl::allocation::run(
                            &spec,
                            lib,
                            Duration::from_millis(deadline_ms),
                            &on_id,
                        )
                    }
                    Err(e) => gdrdoctor_checks::preflight::model::NodeRun {
                        first_rank: spec.first_rank,
                        gpus: spec.gpus,
                        problem: Some(e.clone()),
                        ..Default::default()
                    },
                };
                if let Err(e) = send(&wire::Message::NcclDone {
                    label,
                    run: Box::new(run),
                }) {
                    eprintln!("{who}: {e}");
                    return EXIT_USAGE;
                }
            }
            wire::Message::Done { exit_code, line } => {
                if id.rank != 0 {
                    eprintln!(
                        "{who}: rank 0's answer: {}",
                        crate::render::sanitize::text(&line)
                    );
                }
                return exit_code;
            }
            other => {
                eprintln!("{who}: rank 0 sent `{}` out of turn", other.kind());
                return EXIT_USAGE;
            }
        }
    }
}

/// The NCCL to load: `--nccl-lib`, else the first the loader would find on this node.
fn nccl_library(given: Option<&Path>) -> Result<String, String> {
    if let Some(p) = given {
        return Ok(p.display().to_string());
    }
    let f = crate::live::nccl::discover_live(false);
    match f.get().and_then(|f| f.libraries.first()) {
        Some(l) => Ok(l.path.clone()),
        None => Err("no libnccl.so.2 found on this node: pass --nccl-lib PATH (the job's own NCCL: a container's, or a Python environment's nvidia/nccl/lib)".into()),
    }
}

/// The node's `check`: its report and the GPUs it brings to NCCL.
#[allow(clippy::too_many_arguments)]
fn check_node(
    sysroot: Option<&Path>,
    host_root: Option<&Path>,
    policy: Option<&Path>,
    no_policy: bool,
    static_only: bool,
    nccl_version: Option<&str>,
    state_dir: &Path,
    gpus: Option<u32>,
) -> Result<(Report, u32), String> {
    let policy = crate::source::policy::resolve(policy, no_policy, sysroot.is_none())?;
    let location = Location::from_args(sysroot, host_root);
    let libs = if static_only {
        Libraries::Skip
    } else {
        Libraries::Query
    };
    let live_opts = collect::live::Options {
        cache: collect::live::CacheMode::Use,
        state_dir: Some(state_dir.to_path_buf()),
    };
    let (src, mut node) = collect::load_node_with(location, libs, &live_opts)?;
    collect::apply_nccl_version(&mut node, nccl_version);
    // One reading: the counters are judged without a baseline (no state file of preflight's).
    let rate_opts = crate::state::counters::RateOptions::default();
    let again = || Err::<gdrdoctor_checks::model::Node, String>("no second reading".into());
    crate::state::counters::Rates::start(src.origin, &mut node, &rate_opts, &again, None)?;
    let opts = RunOptions::default();
    let mut report = gdrdoctor_checks::build_report(&node, &opts);
    if let Some(l) = &policy {
        let cx = gdrdoctor_checks::policy::Context {
            path: l.path.display().to_string(),
            today: crate::sys::clock::today(),
        };
        gdrdoctor_checks::policy::apply(&mut report, &node, &l.policy, &cx, &opts);
    }
    report.timestamp = Some(crate::sys::clock::now_rfc3339());
    let n = gpus.unwrap_or_else(|| gdrdoctor_checks::derive::gpus(&node).len() as u32);
    Ok((report, n))
}

/// Where and how rank 0 writes the answer.
struct Delivery {
    format: PreflightFormat,
    verbose: bool,
    file: Option<PathBuf>,
}

impl Delivery {
    /// Write the answer; its exit code, or 2 when it could not be written.
    fn deliver(&self, a: &Answer) -> i32 {
        let text = match self.format {
            PreflightFormat::Table => crate::render::preflight::table(
                a,
                self.verbose,
                crate::sys::term::stdout_width().max(60),
            ),
            PreflightFormat::Json => crate::render::preflight::json(a),
            PreflightFormat::Junit => crate::render::preflight::junit(a),
            PreflightFormat::Prometheus => crate::render::preflight::prometheus(a),
            PreflightFormat::Oneline => crate::render::preflight::oneline(a),
        };
        match &self.file {
            Some(p) => {
                if let Err(e) = write_output(p, &text) {
                    eprintln!("gdrdoctor: error: {e}");
                    return EXIT_USAGE;
                }
            }
            None => {
                if !emit(&text) {
                    return EXIT_USAGE;
                }
            }
        }
        a.summary.exit_code
    }
}
