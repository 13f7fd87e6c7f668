//! `gdrdoctor preflight` end to end: many ranks as local processes (`--rank/--world/--rendezvous
//! --sysroot`, or torchrun's environment), each playing a node of the fixtures, with NCCL
//! played by the stand-in `libnccl.so.2` of tests/stubs over TCP between the processes (and the
//! stand-in libcuda for the GPUs). One fault planted per test, each named with its node and
//! cause, within its deadline, and no process of the run left behind (the test scans /proc for
//! every process carrying the run's tag in its environment).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::stand_ins::{self, StandIns};
use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HEALTHY: &str = "hgx-h200x8-cx7x8-healthy";
const NO_GDR: &str = "hgx-h200x8-cx7x8-no-peermem";
const GPUS: [&str; 8] = ["18", "28", "38", "48", "98", "a8", "b8", "c8"];

fn libs() -> Option<&'static StandIns> {
    stand_ins::build()
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One node of the allocation: its fixture, its name and what the stand-ins play on it.
#[derive(Clone)]
struct NodeSpec {
    fixture: &'static str,
    name: String,
    /// Extra scenario lines (tests/stubs/README.md).
    extra: String,
    /// `gpu` lines' extra options (`dmabuf=0`).
    gpu_opts: String,
    /// Not started at all (a rank that never joins).
    absent: bool,
    /// `--nccl-lib` on this node instead of the stand-in.
    nccl_lib: Option<String>,
}

fn node(i: usize) -> NodeSpec {
    NodeSpec {
        fixture: HEALTHY,
        name: format!("gpu-{:02}", i + 1),
        extra: String::new(),
        gpu_opts: String::new(),
        absent: false,
        nccl_lib: None,
    }
}

fn scenario(n: &NodeSpec) -> String {
    let mut s = String::new();
    for b in GPUS {
        s.push_str(&format!("gpu bdf=0000:{b}:00.0 {}\n", n.gpu_opts));
    }
    for i in 0..8 {
        s.push_str(&format!("device mlx5_{i}\n"));
    }
    s.push_str(&format!("nccl host={}\n", n.name));
    s.push_str(&n.extra);
    s
}

struct Alloc {
    nodes: Vec<NodeSpec>,
    /// Play torchrun's environment instead of the flags.
    torchrun: bool,
    /// The join deadline, seconds.
    timeout: &'static str,
    /// `--format` of every rank (`json`: rank 0's answer is parsed into `Outcome::answer`).
    format: &'static str,
}

struct Outcome {
    answer: Value,
    /// Rank 0's standard output as written.
    text: String,
    codes: Vec<Option<i32>>,
    stderr: Vec<String>,
    elapsed: Duration,
    port: u16,
}

impl Alloc {
    fn new(n: usize) -> Alloc {
        Alloc {
            nodes: (0..n).map(node).collect(),
            torchrun: false,
            timeout: "10",
            format: "json",
        }
    }

    /// Start every present rank; `during` runs while they run (with the rendezvous port).
    fn run_with(&self, l: &StandIns, during: impl FnOnce(u16)) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("job.key");
        std::fs::write(&key, "c2VjcmV0IG9mIHRoZSBqb2IsIDMyIGJ5dGVzIGxvbmc=\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let port = free_port();
        let tag = format!("preflight-test-{}-{port}", std::process::id());
        let world = self.nodes.len().to_string();
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let t0 = Instant::now();
        let mut children: Vec<Option<Child>> = Vec::new();
        for (r, n) in self.nodes.iter().enumerate() {
            if n.absent {
                children.push(None);
                continue;
            }
            let sc = dir.path().join(format!("scenario-{r}"));
            std::fs::write(&sc, scenario(n)).unwrap();
            let nccl_lib = n
                .nccl_lib
                .clone()
                .unwrap_or_else(|| l.current.join("libnccl.so.2").to_str().unwrap().to_string());
            let mut c = Command::new(bin());
            c.arg("preflight");
            if self.torchrun {
                c.env("RANK", r.to_string())
                    .env("WORLD_SIZE", &world)
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", (port - 1).to_string())
                    .env("TORCHELASTIC_RUN_ID", "test");
            } else {
                c.args(["--rank", &r.to_string(), "--world", &world])
                    .args(["--rendezvous", &format!("127.0.0.1:{port}")]);
            }
            c.args(["--secret-file", key.to_str().unwrap()])
                .args(["--sysroot", fixture(n.fixture).to_str().unwrap()])
                .args(["--node-name", &n.name, "--nodes", &names.join(",")])
                .args(["--nccl-lib", &nccl_lib])
                .args(["--timeout", self.timeout, "--nccl-timeout", "8"])
                .args(["--allreduce-bytes", "65536", "--pair-bytes", "262144"])
                // Loopback TCP on a shared machine is neither 50 GB/s nor steady: no
                // threshold from the links, and a slow rail is one at a tenth of the median.
                .args(["--iterations", "3", "--min-pair-fraction", "0"])
                .args(["--min-pair-relative", "0.1"])
                .args(["--format", self.format])
                .env(gdrdoctor::live::stand_in::LIB_DIR_ENV, &l.current)
                .env("GDRDOCTOR_STUB_SCENARIO", &sc)
                .env("GDRDOCTOR_STATE_DIR", dir.path().join("state"))
                .env("GDRDOCTOR_TEST_TAG", &tag)
                .env_remove("SLURM_PROCID")
                .env_remove("OMPI_COMM_WORLD_RANK")
                .env_remove("PMI_RANK")
                .env_remove("JOB_COMPLETION_INDEX")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if !self.torchrun {
                c.env_remove("RANK").env_remove("WORLD_SIZE");
            }
            children.push(Some(c.spawn().expect("start a rank")));
        }
        during(port);
        let mut codes = Vec::new();
        let mut stderr = Vec::new();
        let mut stdout0 = String::new();
        for (r, ch) in children.into_iter().enumerate() {
            match ch {
                None => {
                    codes.push(None);
                    stderr.push(String::new());
                }
                Some(c) => {
                    let o = c.wait_with_output().unwrap();
                    codes.push(o.status.code());
                    stderr.push(String::from_utf8_lossy(&o.stderr).into_owned());
                    if r == 0 {
                        stdout0 = String::from_utf8_lossy(&o.stdout).into_owned();
                    }
                }
            }
        }
        let elapsed = t0.elapsed();
        assert_no_stragglers(&tag);
        let answer: Value = if self.format != "json" {
            Value::Null
        } else {
            serde_json::from_str(&stdout0).unwrap_or_else(|e| {
                panic!(
                    "rank 0's answer is not JSON ({e}):\n{stdout0}\nstderr:\n{}",
                    stderr.join("\n---\n")
                )
            })
        };
        Outcome {
            answer,
            text: stdout0,
            codes,
            stderr,
            elapsed,
            port,
        }
    }

    fn run(&self, l: &StandIns) -> Outcome {
        self.run_with(l, |_| {})
    }
}

/// No process of the run (tagged in its environment) is left.
fn assert_no_stragglers(tag: &str) {
    let needle = format!("GDRDOCTOR_TEST_TAG={tag}");
    let t0 = Instant::now();
    loop {
        let mut left = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                // A zombie waiting for its (gone) parent's reaper is no running process.
                if !stat.contains(") Z ") {
                    left.push(format!(
                        "{pid}: {}",
                        std::fs::read_to_string(e.path().join("cmdline"))
                            .unwrap_or_default()
                            .replace('\0', " ")
                    ));
                }
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "processes of the run left behind:\n{}",
            left.join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn findings<'a>(a: &'a Value, id: &str) -> Vec<&'a Value> {
    a["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

fn take_out(a: &Value) -> Vec<(String, String)> {
    a["take_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["node"].as_str().unwrap_or("").to_string(),
                t["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
                    .join(" | "),
            )
        })
        .collect()
}

fn only_taken_out(o: &Outcome, name: &str) -> String {
    let t = take_out(&o.answer);
    assert_eq!(
        t.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [name],
        "take out: {t:#?}\n{}",
        serde_json::to_string_pretty(&o.answer["findings"]).unwrap()
    );
    t[0].1.clone()
}

/// The schema's strict variant (as tests/contracts uses it): the published file takes unknown
/// members where v1 may grow; here an undocumented field fails.
fn strict(text: &str) -> String {
    text.replace(
        "\"additionalProperties\": true",
        "\"additionalProperties\": false",
    )
}

fn schema_check(a: &Value) {
    let dir = repo().join("docs/schema");
    let s: Value = serde_json::from_str(&strict(
        &std::fs::read_to_string(dir.join("gdrdoctor.preflight.v1.schema.json")).unwrap(),
    ))
    .unwrap();
    struct Beside(PathBuf);
    impl jsonschema::Retrieve for Beside {
        fn retrieve(
            &self,
            uri: &jsonschema::Uri<String>,
        ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
            let name = uri.as_str().rsplit('/').next().unwrap_or("");
            Ok(serde_json::from_str(&strict(&std::fs::read_to_string(
                self.0.join(name),
            )?))?)
        }
    }
    let v = jsonschema::options()
        .with_base_uri(format!(
            "file://{}",
            dir.join("gdrdoctor.preflight.v1.schema.json").display()
        ))
        .with_retriever(Beside(dir.clone()))
        .build(&s)
        .unwrap();
    let errs: Vec<String> = v
        .iter_errors(a)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .take(10)
        .collect();
    assert!(
        errs.is_empty(),
        "the answer does not match its schema:\n{}",
        errs.join("\n")
    );
}

fn every_rank_exits(o: &Outcome, code: i32) {
    for (r, c) in o.codes.iter().enumerate() {
        if let Some(c) = c {
            assert_eq!(*c, code, "rank {r} exit: {}", o.stderr[r]);
        }
    }
}

#[test]
fn four_healthy_nodes_pass_with_every_gpu_on_gdr_and_every_pair_measured() {
    let Some(l) = libs() else { return };
    let o = Alloc::new(4).run(l);
    let a = &o.answer;
    assert_eq!(a["schema"], "gdrdoctor.preflight/v1");
    assert_eq!(
        a["summary"]["exit_code"],
        0,
        "{}",
        serde_json::to_string_pretty(a).unwrap()
    );
    every_rank_exits(&o, 0);
    assert!(take_out(a).is_empty());
    assert_eq!(a["summary"]["joined"], 4);
    // 32 GPUs, each on GDRDMA through the NIC its node's facts predict.
    let rails = a["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 32);
    for r in rails {
        assert_eq!(r["observed"]["gdr"], true, "{r:#}");
        assert_eq!(r["agree"], true, "{r:#}");
        assert_eq!(r["predicted"]["nic"], r["observed"]["nic"], "{r:#}");
    }
    // 3 rounds of 2 disjoint pairs, 8 rails each, all measured and right.
    let pairs = a["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 3 * 2 * 8);
    assert!(pairs
        .iter()
        .all(|p| p["status"] == "pass" && p["wrong"] == 0));
    for run in a["nccl"].as_array().unwrap() {
        assert_eq!(run["nranks"], 32);
        assert!(run["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["status"] == "ok"));
    }
    assert_eq!(findings(a, "preflight.nccl-run").len(), 2);
    assert!(findings(a, "preflight.nccl-run")
        .iter()
        .all(|f| f["status"] == "pass"));
    schema_check(a);
    // The bound for a 4-rank preflight on the CI machine.
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
    eprintln!("4 healthy ranks: {:?}", o.elapsed);
}

#[test]
fn a_rank_that_never_joins_is_named_and_the_others_go_on() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[2].absent = true;
    al.timeout = "4";
    let o = al.run(l);
    let a = &o.answer;
    let f = findings(a, "preflight.rendezvous");
    assert!(
        f.iter()
            .any(|f| f["status"] == "fail"
                && f["message"] == "gpu-03 (rank 2) never joined after 4.0 s"),
        "{f:#?}"
    );
    let why = only_taken_out(&o, "gpu-03");
    assert!(why.contains("never joined"), "{why}");
    // The three others still ran NCCL and their pairs.
    let runs = a["nccl"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["nranks"] == 24), "{runs:#?}");
    assert_eq!(a["summary"]["exit_code"], 1);
    every_rank_exits(&o, 1);
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn a_node_without_gdr_is_named_with_the_cause_from_its_facts() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[2].fixture = NO_GDR;
    al.nodes[2].gpu_opts = "dmabuf=0".into();
    al.nodes[2].extra = "peer_memory no\n".into();
    let o = al.run(l);
    let a = &o.answer;
    let why = only_taken_out(&o, "gpu-03");
    assert!(why.contains("without GDRDMA on 8 GPUs"), "{why}");
    assert!(why.contains("nvidia_peermem is not loaded"), "{why}");
    assert!(
        why.contains("dma-buf export needs the open kernel modules"),
        "{why}"
    );
    let g = findings(a, "preflight.nccl-gdr");
    let bad: Vec<_> = g.iter().filter(|f| f["status"] == "fail").collect();
    assert_eq!(bad.len(), 1, "{g:#?}");
    assert_eq!(bad[0]["subject"], "gpu-03");
    assert!(
        bad[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("gpu-03: NCCL used NET/IB/0 .. NET/IB/7 without GDRDMA on 8 GPUs"),
        "{:#}",
        bad[0]
    );
    // Its own check failed too, and it is the odd node out.
    assert!(findings(a, "preflight.node")
        .iter()
        .any(|f| f["status"] == "fail" && f["subject"] == "gpu-03"));
    assert!(findings(a, "preflight.node")
        .iter()
        .any(|f| f["status"] == "warn" && f["message"].as_str().unwrap().contains("odd node out")));
    // Per GPU: no GDR predicted, none used.
    for r in a["rails"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["node"] == "gpu-03")
    {
        assert_eq!(r["predicted"]["gdr"], false);
        assert_eq!(r["observed"]["gdr"], false);
    }
    every_rank_exits(&o, 1);
    // For docs/guides/preflight.md: the same allocation as a user reads it, table and JSON.
    if let Some(dir) = std::env::var_os("GDRDOCTOR_PREFLIGHT_CAPTURE") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("answer.json"),
            serde_json::to_string_pretty(a).unwrap(),
        )
        .unwrap();
        al.format = "table";
        let t = al.run(l);
        std::fs::write(dir.join("answer.table"), &t.text).unwrap();
        every_rank_exits(&t, 1);
    }
}

#[test]
fn a_slow_rail_is_named_by_its_node_and_nic() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[1].extra = "nccl_throttle rail=1 mbps=1\n".into();
    let o = al.run(l);
    let a = &o.answer;
    let why = only_taken_out(&o, "gpu-02");
    assert!(why.contains("rail 1 (mlx5_1)"), "{why}");
    let p = findings(a, "preflight.pairs");
    let bad: Vec<_> = p.iter().filter(|f| f["status"] == "fail").collect();
    assert_eq!(bad.len(), 1, "{p:#?}");
    assert_eq!(bad[0]["subject"], "gpu-02/rail1");
    let slow: Vec<_> = a["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"] == "fail")
        .collect();
    assert_eq!(slow.len(), 3, "{slow:#?}");
    assert!(slow.iter().all(|p| p["rail"] == 1));
    every_rank_exits(&o, 1);
}

#[test]
fn nccl_init_failing_on_one_rank_is_named_and_the_rest_measured() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[2].extra = "nccl_fail init\n".into();
    let o = al.run(l);
    let a = &o.answer;
    let why = only_taken_out(&o, "gpu-03");
    assert!(
        why.contains("remote process exited or there was a network error"),
        "{why}"
    );
    assert!(why.contains("`init`"), "{why}");
    // The network-only run went on without it.
    let net = &a["nccl"][1];
    assert_eq!(net["label"], "net-only");
    assert_eq!(net["nranks"], 24, "{net:#}");
    assert!(a["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["status"] == "pass"));
    every_rank_exits(&o, 1);
    // Within the deadlines: the others waited one NCCL deadline (8 s) for it.
    assert!(o.elapsed < Duration::from_secs(40), "took {:?}", o.elapsed);
}

/// Each node's verdict in the answer's table of nodes.
fn verdicts(a: &Value) -> Vec<(String, String)> {
    a["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn nccl_init_failing_alike_on_every_rank_is_the_allocations_and_nobody_is_drained() {
    // Every node fails NCCL's init the same way (a broken NCCL in the job's container): not
    // four culprits, one cause the allocation shares, said once, and exit 1.
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    for n in &mut al.nodes {
        n.extra = "nccl_fail init\n".into();
    }
    let o = al.run(l);
    let a = &o.answer;
    assert!(take_out(a).is_empty(), "{:#?}", take_out(a));
    assert_eq!(a["summary"]["exit_code"], 1);
    every_rank_exits(&o, 1);
    let bad: Vec<_> = findings(a, "preflight.nccl-run")
        .into_iter()
        .filter(|f| f["status"] == "fail")
        .collect();
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert_eq!(bad[0]["subject"], "allocation");
    let msg = bad[0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("every node where NCCL ran failed alike (gpu-01 (rank 0) in the default run, gpu-02 (rank 1) in the default run, gpu-03 (rank 2) in the default run, gpu-04 (rank 3) in the default run): NCCL failed in step `init`"),
        "{msg}"
    );
    assert!(msg.contains("remote process exited"), "{msg}");
    assert!(msg.contains("none is taken out"), "{msg}");
    assert!(
        verdicts(a).iter().all(|(_, v)| v == "shared-failure"),
        "{:?}",
        verdicts(a)
    );
    // A second run would fail the same way: not run, and said why.
    assert_eq!(a["nccl"][1]["label"], "net-only");
    assert!(
        a["nccl"][1]["not_run"]
            .as_str()
            .unwrap()
            .contains("failed alike on every node"),
        "{:#}",
        a["nccl"][1]
    );
    schema_check(a);
}

#[test]
fn a_root_failing_as_every_node_does_blames_nobody_and_the_unstarted_are_not_evaluated() {
    // The reviewer's run on a GPU-less machine: the node that makes NCCL's id fails before it
    // (here: the job's NCCL cannot be loaded), so nobody else starts; the second run, without
    // it, fails the same way on the next node. Two nodes failed alike: the allocation's
    // failure, not theirs to drain; the two NCCL never ran on are not evaluated, never "ok".
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    for n in &mut al.nodes {
        n.nccl_lib = Some("/nonexistent/libnccl.so.2".into());
    }
    let o = al.run(l);
    let a = &o.answer;
    assert!(take_out(a).is_empty(), "{:#?}", take_out(a));
    assert_eq!(a["summary"]["exit_code"], 1);
    every_rank_exits(&o, 1);
    assert_eq!(
        verdicts(a),
        [
            ("gpu-01", "shared-failure"),
            ("gpu-02", "shared-failure"),
            ("gpu-03", "not-evaluated"),
            ("gpu-04", "not-evaluated"),
        ]
        .map(|(n, v)| (n.to_string(), v.to_string()))
    );
    let f = findings(a, "preflight.nccl-run");
    let bad: Vec<_> = f.iter().filter(|f| f["status"] == "fail").collect();
    assert_eq!(bad.len(), 1, "{f:#?}");
    let msg = bad[0]["message"].as_str().unwrap();
    assert!(msg.starts_with("every node where NCCL ran failed alike (gpu-01 (rank 0) in the default run, gpu-02 (rank 1) in the net-only run)"), "{msg}");
    assert!(msg.contains("/nonexistent/libnccl.so.2"), "{msg}");
    assert!(msg.contains("gpu-03 (rank 2), gpu-04 (rank 3)"), "{msg}");
    for n in ["gpu-03", "gpu-04"] {
        let e: Vec<_> = f
            .iter()
            .filter(|f| f["status"] == "error" && f["subject"] == n)
            .collect();
        assert_eq!(e.len(), 1, "{f:#?}");
        assert!(
            e[0]["message"]
                .as_str()
                .unwrap()
                .contains("NCCL never ran on this node, so it is not evaluated"),
            "{:#}",
            e[0]
        );
    }
    schema_check(a);
    // The table says it too: nobody "ok", nobody "TAKE OUT".
    al.format = "table";
    let t = al.run(l);
    every_rank_exits(&t, 1);
    assert!(
        !t.text.contains("TAKE OUT") && !t.text.contains(" ok\n"),
        "{}",
        t.text
    );
    assert_eq!(t.text.matches("NOT EVALUATED").count(), 2, "{}", t.text);
    assert_eq!(t.text.matches("FAILED (shared)").count(), 2, "{}", t.text);
}

#[test]
fn a_root_failing_alone_is_taken_out_and_the_others_are_measured_without_it() {
    // The same first run, but the next node makes NCCL's id: the failure was the first node's.
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[0].nccl_lib = Some("/nonexistent/libnccl.so.2".into());
    let o = al.run(l);
    let a = &o.answer;
    let why = only_taken_out(&o, "gpu-01");
    assert!(why.contains("/nonexistent/libnccl.so.2"), "{why}");
    assert_eq!(
        verdicts(a)
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>(),
        ["take-out", "ok", "ok", "ok"]
    );
    assert_eq!(a["nccl"][1]["nranks"], 24, "{:#}", a["nccl"][1]);
    every_rank_exits(&o, 1);
}

#[test]
fn a_rank_stuck_in_a_collective_is_named_and_killed() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.nodes[3].extra = "nccl_hang allreduce\n".into();
    let o = al.run(l);
    let a = &o.answer;
    let why = only_taken_out(&o, "gpu-04");
    assert!(why.contains("hung in `allreduce`"), "{why}");
    let f = findings(a, "preflight.nccl-run");
    assert!(
        f.iter().any(|f| f["status"] == "fail"
            && f["message"].as_str().unwrap().starts_with(
                "gpu-04 (rank 3) (default) hung in step `allreduce` and was killed at its deadline"
            )),
        "{f:#?}"
    );
    every_rank_exits(&o, 1);
    assert!(o.elapsed < Duration::from_secs(40), "took {:?}", o.elapsed);
}

/// A connection to the rendezvous: retried until rank 0 listens.
fn connect(port: u16) -> std::net::TcpStream {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "rank 0 never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn strangers_are_refused_and_counted_and_change_nothing() {
    let Some(l) = libs() else { return };
    use gdrdoctor::collect::allocation::wire;
    let o = Alloc::new(4).run_with(l, |port| {
        // Garbage.
        let mut s = connect(port);
        use std::io::Write;
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        std::thread::sleep(Duration::from_millis(200));
        drop(s);
        // A well-formed join under another secret.
        let mut s = connect(port);
        let deadline = Instant::now() + Duration::from_secs(5);
        let (_, body) = wire::read_frame(&mut s, 4096, deadline, "rank 0", "hello").unwrap();
        let wire::Message::Hello { nonce, .. } = wire::decode(&body, "rank 0").unwrap() else {
            panic!("no hello")
        };
        let ns = wire::unhex(&nonce).unwrap();
        let join = wire::Message::Join {
            proto: wire::PROTO,
            rank: 1,
            world: 4,
            node: "intruder".into(),
            pid: 1,
            nonce: wire::hex(&[7u8; 32]),
        };
        wire::send_keyed(
            &mut s,
            &join,
            b"not the job's secret at all",
            &wire::join_label(&ns),
            0,
            deadline,
            "rank 0",
        )
        .unwrap();
        let (_, body) = wire::read_frame(&mut s, 4096, deadline, "rank 0", "reply").unwrap();
        assert!(matches!(
            wire::decode(&body, "rank 0").unwrap(),
            wire::Message::Refused { .. }
        ));
    });
    let a = &o.answer;
    let refused = a["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert!(refused.iter().any(|r| r["reason"]
        .as_str()
        .unwrap()
        .starts_with("authentication failed")));
    let f = findings(a, "preflight.rendezvous");
    assert!(f.iter().any(|f| f["status"] == "warn"
        && f["message"]
            .as_str()
            .unwrap()
            .starts_with("2 connection(s) refused")));
    // The intruder took no rank's place: everyone joined, nobody is taken out.
    assert!(take_out(a).is_empty(), "{:#?}", take_out(a));
    assert_eq!(a["summary"]["joined"], 4);
    every_rank_exits(&o, 0);
}

/// Play rank `rank` with the job's secret from the test itself.
fn rogue(port: u16, rank: u32, key: &[u8]) -> gdrdoctor::collect::allocation::client::Session {
    use gdrdoctor::collect::allocation::{client, engine};
    let id = engine::Identity {
        engine: "flags".into(),
        rank,
        world: 4,
        node: format!("rogue-{rank}"),
        rendezvous: format!("127.0.0.1:{port}"),
        job: None,
        expected_nodes: Vec::new(),
    };
    client::join(
        &id.rendezvous,
        &id,
        key,
        Instant::now() + Duration::from_secs(10),
    )
    .unwrap()
}

#[test]
fn a_report_too_big_or_malformed_is_refused_and_the_rank_named() {
    let Some(l) = libs() else { return };
    use gdrdoctor::collect::allocation::wire;
    let mut al = Alloc::new(4);
    al.nodes[2].absent = true;
    al.nodes[3].absent = true;
    let key = b"c2VjcmV0IG9mIHRoZSBqb2IsIDMyIGJ5dGVzIGxvbmc=".to_vec();
    let o = al.run_with(l, |port| {
        let big = rogue(port, 2, &key);
        let bad = rogue(port, 3, &key);
        {
            // A frame announcing 5 MiB: refused before its body is read.
            use std::io::Write;
            let mut w = big.writer.lock().unwrap();
            let mut head = (5u32 << 20).to_be_bytes().to_vec();
            head.extend_from_slice(&[0u8; 32]);
            w.stream.write_all(&head).unwrap();
            let _ = w.stream.write_all(&vec![b' '; 1 << 16]);
        }
        bad.send(
            &wire::Message::Report {
                report: Some("{\"schema\": \"gdrdoctor.report/v1\", broken".into()),
                error: None,
                gpus: 8,
                check_ms: 1.0,
            },
            Duration::from_secs(5),
        )
        .unwrap();
        // The malformed one waits for the answer like any rank.
        let mut r = bad.reader;
        let m = r.recv(
            wire::MAX_FRAME,
            Instant::now() + Duration::from_secs(60),
            "done",
        );
        // Two nodes could not be judged: taken out (nobody can vouch for them), so 1 (it
        // was 3, with the nodes named under "take out").
        assert!(
            matches!(m, Ok(wire::Message::Done { exit_code: 1, .. })),
            "{m:?}"
        );
    });
    let a = &o.answer;
    let f = findings(a, "preflight.node");
    let msg = |s: &str| {
        f.iter()
            .find(|f| f["subject"] == s)
            .map(|f| {
                (
                    f["status"].as_str().unwrap().to_string(),
                    f["message"].as_str().unwrap().to_string(),
                )
            })
            .unwrap_or_default()
    };
    let (st, m) = msg("rogue-2");
    assert_eq!(st, "fail", "{f:#?}");
    assert!(m.contains("5242880 bytes, above the 4 MiB cap"), "{m}");
    let (st, m) = msg("rogue-3");
    assert_eq!(st, "fail", "{f:#?}");
    assert!(m.contains("a malformed report"), "{m}");
    let t: Vec<String> = take_out(a).into_iter().map(|(n, _)| n).collect();
    assert_eq!(t, ["rogue-2", "rogue-3"]);
    // The two real nodes still ran NCCL and a pair.
    assert_eq!(a["nccl"][1]["nranks"], 16);
    assert_eq!(a["pairs"].as_array().unwrap().len(), 8);
    assert_eq!(a["summary"]["exit_code"], 1);
    every_rank_exits(&o, 1);
}

#[test]
fn torchruns_environment_is_an_engine() {
    let Some(l) = libs() else { return };
    let mut al = Alloc::new(4);
    al.torchrun = true;
    let o = al.run(l);
    let a = &o.answer;
    assert_eq!(a["allocation"]["engine"], "torchrun");
    assert_eq!(
        a["allocation"]["rendezvous"],
        format!("127.0.0.1:{}", o.port)
    );
    assert_eq!(a["summary"]["exit_code"], 0, "{:#?}", a["findings"]);
    every_rank_exits(&o, 0);
}

/// Debian's Open MPI launches the ranks (`mpirun -n 4 --oversubscribe`): each reads its rank
/// from OMPI_COMM_WORLD_RANK.
#[test]
fn open_mpi_launches_the_ranks() {
    let Some(l) = libs() else { return };
    if let Err(e) = require::runs("mpirun", &["--version"]) {
        require::skip(
            "open mpi",
            &e,
            "apt-get install openmpi-bin (scripts/ci-seats.sh install does)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("job.key");
    std::fs::write(&key, "c2VjcmV0IG9mIHRoZSBqb2IsIDMyIGJ5dGVzIGxvbmc=\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    for r in 0..4 {
        std::fs::write(dir.path().join(format!("scenario-{r}")), scenario(&node(r))).unwrap();
    }
    let port = free_port();
    let tag = format!("preflight-mpi-{}-{port}", std::process::id());
    let script = format!(
        "GDRDOCTOR_STUB_SCENARIO={d}/scenario-$OMPI_COMM_WORLD_RANK exec {bin} preflight --rendezvous 127.0.0.1:{port} --secret-file {key} --sysroot {fx} --node-name 'gpu-{{rank}}' --nccl-lib {nccl} --timeout 20 --nccl-timeout 10 --allreduce-bytes 65536 --pair-bytes 262144 --iterations 3 --min-pair-fraction 0 --min-pair-relative 0.1 --format json -o {d}/answer-$OMPI_COMM_WORLD_RANK.json",
        d = dir.path().display(),
        bin = bin(),
        key = key.display(),
        fx = fixture(HEALTHY).display(),
        nccl = l.current.join("libnccl.so.2").display(),
    );
    let mut c = Command::new("mpirun");
    if nix_is_root() {
        c.arg("--allow-run-as-root");
    }
    let out = c
        .args(["-n", "4", "--oversubscribe", "sh", "-c", &script])
        .env(gdrdoctor::live::stand_in::LIB_DIR_ENV, &l.current)
        .env("GDRDOCTOR_STATE_DIR", dir.path().join("state"))
        .env("GDRDOCTOR_TEST_TAG", &tag)
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .env("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
        .output()
        .unwrap();
    assert_no_stragglers(&tag);
    let answer = std::fs::read_to_string(dir.path().join("answer-0.json")).unwrap_or_else(|e| {
        panic!(
            "no answer ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let a: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(a["allocation"]["engine"], "openmpi");
    assert_eq!(a["summary"]["joined"], 4);
    assert_eq!(a["summary"]["exit_code"], 0, "{:#?}", a["findings"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Many ranks on one machine: `GDRDOCTOR_PREFLIGHT_RANKS` (default 32; .ci/run runs 256) play
/// the one-GPU fixture node, rendezvous, roll up and run NCCL's two runs, within 60 s.
#[test]
fn many_ranks_rendezvous_and_roll_up_in_time() {
    let Some(l) = libs() else { return };
    let n: usize = std::env::var("GDRDOCTOR_PREFLIGHT_RANKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("job.key");
    std::fs::write(&key, "c2VjcmV0IG9mIHRoZSBqb2IsIDMyIGJ5dGVzIGxvbmc=\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let port = free_port();
    let tag = format!("preflight-scale-{}-{port}", std::process::id());
    let fx = fixture("h200-vm-live");
    let t0 = Instant::now();
    let mut kids = Vec::new();
    for r in 0..n {
        let sc = dir.path().join(format!("scenario-{r}"));
        std::fs::write(
            &sc,
            format!("gpu bdf=0000:00:06.0\nnccl host=node-{r:04}\n"),
        )
        .unwrap();
        let c = Command::new(bin())
            .args([
                "preflight",
                "--rank",
                &r.to_string(),
                "--world",
                &n.to_string(),
            ])
            .args(["--rendezvous", &format!("127.0.0.1:{port}")])
            .args(["--secret-file", key.to_str().unwrap()])
            .args([
                "--sysroot",
                fx.to_str().unwrap(),
                "--node-name",
                &format!("node-{r:04}"),
            ])
            .args([
                "--nccl-lib",
                l.current.join("libnccl.so.2").to_str().unwrap(),
            ])
            .args([
                "--stages",
                "check,nccl",
                "--timeout",
                "60",
                "--nccl-timeout",
                "60",
            ])
            .args([
                "--allreduce-bytes",
                "4096",
                "--iterations",
                "1",
                "--format",
                "json",
            ])
            .env(gdrdoctor::live::stand_in::LIB_DIR_ENV, &l.current)
            .env("GDRDOCTOR_STUB_SCENARIO", &sc)
            .env("GDRDOCTOR_STATE_DIR", dir.path().join("state"))
            .env("GDRDOCTOR_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .stdout(if r == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        kids.push(c);
    }
    let mut it = kids.into_iter();
    let first = it.next().unwrap().wait_with_output().unwrap();
    for mut k in it {
        k.wait().unwrap();
    }
    let took = t0.elapsed();
    assert_no_stragglers(&tag);
    let a: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(a["summary"]["joined"], n, "{:#?}", a["findings"]);
    assert_eq!(a["nccl"][0]["nranks"], n);
    let stage = |name: &str| {
        a["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["ms"].as_f64().unwrap())
            .unwrap()
    };
    eprintln!(
        "{n} ranks: {:?} in all; rendezvous and check {:.0} ms, roll-up {:.0} ms, nccl {:.0} + {:.0} ms, judgement {:.0} ms",
        took,
        stage("rendezvous and check"),
        stage("roll-up"),
        stage("nccl (default)"),
        stage("nccl (net-only) and pairs"),
        stage("judgement")
    );
    assert!(took < Duration::from_secs(60), "{n} ranks took {took:?}");
}

/// `preflight --sysroot 'captures/node-{rank}.tar.gz'` (the help's rehearsal) judges the
/// captures, not this machine: without `--nccl-lib` only the check stage runs, every rank is
/// named by its capture, the healthy one is kept and the broken one taken out (it took out the
/// healthy capture too, for this machine's missing libnccl.so.2, and named both ranks "vm").
#[test]
fn a_rehearsal_on_captures_judges_the_captures_and_names_them() {
    let d = tempfile::tempdir().unwrap();
    let caps = d.path().join("captures");
    std::fs::create_dir(&caps).unwrap();
    std::fs::copy(
        common::nodes::archive("hgx-h200x8-cx7x8-healthy"),
        caps.join("node-0.tar.gz"),
    )
    .unwrap();
    std::fs::copy(
        common::nodes::archive("hgx-h200x8-cx7x8-no-peermem"),
        caps.join("node-1.tar.gz"),
    )
    .unwrap();
    let key = d.path().join("k");
    std::fs::write(&key, "c2VjcmV0LWtleS1mb3ItdGhlLXJlaGVhcnNhbC10ZXN0Cg==\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let port = free_port().to_string();
    let pattern = caps.join("node-{rank}.tar.gz");
    let rank = |r: &str| {
        let mut c = Command::new(bin());
        c.args(["preflight", "--rank", r, "--world", "2"])
            .args(["--rendezvous", &format!("127.0.0.1:{port}")])
            .args(["--secret-file", key.to_str().unwrap()])
            .args(["--sysroot", pattern.to_str().unwrap()])
            .args(["--timeout", "30", "--format", "json"])
            .env("PATH", "/nonexistent")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    let one = rank("1");
    let zero = rank("0");
    let z = zero.wait_with_output().unwrap();
    let o = one.wait_with_output().unwrap();
    assert_eq!(
        z.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&z.stderr)
    );
    assert_eq!(o.status.code(), Some(1));
    let a: Value = serde_json::from_slice(&z.stdout).unwrap();
    assert_eq!(
        take_out(&a)
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["node-1"],
        "{a:#}"
    );
    assert!(
        String::from_utf8_lossy(&z.stderr).contains("only the check stage runs"),
        "{}",
        String::from_utf8_lossy(&z.stderr)
    );
}

/// A node whose check report could not be read (here: its check could not run, an invalid
/// `--policy` on that rank) is named under "take out", and a node to take out makes every rank
/// exit 1 (`--help`): the answer exited 3, or 0 with `--allow-incomplete`.
#[test]
fn a_node_without_a_check_report_is_taken_out_and_the_answer_exits_1() {
    let d = tempfile::tempdir().unwrap();
    let cap = d.path().join("node.tar.gz");
    std::fs::copy(common::nodes::archive(HEALTHY), &cap).unwrap();
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, "schema = \"gdrdoctor.policy/v1\"\n[gpu]\ncuont = 9\n").unwrap();
    let key = d.path().join("k");
    std::fs::write(&key, "c2VjcmV0LWtleS1mb3ItdGhlLXJlaGVhcnNhbC10ZXN0Cg==\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for extra in [&[][..], &["--allow-incomplete"][..]] {
        let port = free_port().to_string();
        let rank = |r: &str, name: &str, policy: &[&str]| {
            let mut c = Command::new(bin());
            c.args(["preflight", "--rank", r, "--world", "2"])
                .args(["--rendezvous", &format!("127.0.0.1:{port}")])
                .args(["--secret-file", key.to_str().unwrap()])
                .args(["--sysroot", cap.to_str().unwrap(), "--node-name", name])
                .args(["--timeout", "30", "--format", "json"])
                .args(policy)
                .args(extra)
                .env("PATH", "/nonexistent")
                .env_remove("GDRDOCTOR_POLICY")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        };
        let one = rank("1", "node-1", &["--policy", bad.to_str().unwrap()]);
        let zero = rank("0", "node-0", &["--no-policy"]);
        let z = zero.wait_with_output().unwrap();
        let o = one.wait_with_output().unwrap();
        let a: Value = serde_json::from_slice(&z.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&z.stderr)));
        let t = take_out(&a);
        assert_eq!(
            t.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["node-1"],
            "{extra:?}: {a:#}"
        );
        assert!(t[0].1.contains("could not be read"), "{t:?}");
        let f = findings(&a, "preflight.node");
        assert!(
            f.iter()
                .any(|f| f["subject"] == "node-1" && f["status"] == "fail"),
            "{f:#?}"
        );
        assert_eq!(a["summary"]["exit_code"], 1, "{extra:?}: {}", a["summary"]);
        assert_eq!(
            z.status.code(),
            Some(1),
            "{extra:?}: {}",
            String::from_utf8_lossy(&z.stderr)
        );
        assert_eq!(
            o.status.code(),
            Some(1),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
