//! Builds the stand-in libraries of `tests/stubs/` (docs/testing.md) with the system C compiler
//! and runs gdrdoctor against them.
//!
//! The libraries are built once per source version into `target/tmp/stand-ins/<hash>/`
//! (concurrent test binaries build into private directories and rename; the first rename
//! wins), in two directories, each a complete set for `GDRDOCTOR_LIB_DIR`:
//!
//! - `current/`: libibverbs.so.1 (IBVERBS_1.1 and 1.12), libmlx5.so.1, libcuda.so.1,
//!   libnvidia-ml.so.1, libnccl.so.2;
//! - `rdma-core-33/`: the same, but a libibverbs without `ibv_reg_dmabuf_mr@IBVERBS_1.12`.
//!
//! Needs `cc` and the rdma-core headers (`gcc libibverbs-dev`); without them [`build`] skips
//! visibly (a failure under `GDRDOCTOR_TEST_REQUIRE_ALL=1`). `GDRDOCTOR_VERBS_CFLAGS` adds
//! compiler flags (e.g. `-I DIR` for another rdma-core's headers), as for the layout oracle.

use super::require;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The built library directories.
#[derive(Debug, Clone)]
pub struct StandIns {
    /// Current rdma-core, libmlx5, libcuda and NVML.
    pub current: PathBuf,
    /// rdma-core 33: no `ibv_reg_dmabuf_mr`.
    pub rdma_core_33: PathBuf,
}

const GROUP: &str = "stand-in libraries (tests/stubs)";
const INSTALL: &str = "apt-get install gcc libibverbs-dev (dnf install gcc rdma-core-devel)";

fn stubs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/stubs")
}

/// The stand-ins, built on first use; `None` (after a visible skip) without a C compiler or
/// the rdma-core headers. A compile error in the sources is a panic, never a skip.
pub fn build() -> Option<&'static StandIns> {
    static BUILT: OnceLock<Result<StandIns, String>> = OnceLock::new();
    match BUILT.get_or_init(build_uncached) {
        Ok(s) => Some(s),
        Err(missing) => {
            require::skip(GROUP, missing, INSTALL);
            None
        }
    }
}

/// The sources' hash: the directory name, so an edit rebuilds.
fn source_hash() -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(stubs())
        .expect("tests/stubs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut h = DefaultHasher::new();
    for f in &files {
        f.file_name().hash(&mut h);
        std::fs::read(f).expect("read a stub source").hash(&mut h);
    }
    std::env::var("GDRDOCTOR_VERBS_CFLAGS")
        .unwrap_or_default()
        .hash(&mut h);
    format!("{:016x}", h.finish())
}

fn build_uncached() -> Result<StandIns, String> {
    require::runs("cc", &["--version"])?;
    let top = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("stand-ins");
    let done = super::build_once(&top, &source_hash(), compile_all)?;
    Ok(StandIns {
        current: done.join("current"),
        rdma_core_33: done.join("rdma-core-33"),
    })
}

/// One shared library: `cc -shared` with the soname and, when given, the version script.
fn compile(out: &Path, src: &str, soname: &str, map: Option<&str>) -> Result<(), String> {
    let dir = stubs();
    let mut c = Command::new("cc");
    c.args([
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O1",
        "-fPIC",
        "-shared",
    ])
    .args(
        std::env::var("GDRDOCTOR_VERBS_CFLAGS")
            .unwrap_or_default()
            .split_whitespace(),
    )
    .arg("-o")
    .arg(out)
    .arg(format!("-Wl,-soname,{soname}"));
    if let Some(m) = map {
        c.arg(format!("-Wl,--version-script={}", dir.join(m).display()));
    }
    c.arg(dir.join(src)).arg("-lpthread").arg("-ldl");
    let o = c
        .output()
        .map_err(|e| format!("`cc` cannot be run ({e})"))?;
    if o.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&o.stderr);
    if stderr.contains("infiniband/") && stderr.contains("No such file") {
        let first = stderr
            .lines()
            .find(|l| l.contains("infiniband/"))
            .unwrap_or("");
        return Err(format!(
            "the rdma-core headers are missing ({})",
            first.trim()
        ));
    }
    panic!("tests/stubs/{src} does not compile:\n{stderr}");
}

fn compile_all(tmp: &Path) -> Result<(), String> {
    let cur = tmp.join("current");
    let old = tmp.join("rdma-core-33");
    std::fs::create_dir_all(&cur).expect("create the build directory");
    std::fs::create_dir_all(&old).expect("create the build directory");
    compile(
        &cur.join("libibverbs.so.1"),
        "libibverbs.c",
        "libibverbs.so.1",
        Some("libibverbs.map"),
    )?;
    compile(
        &old.join("libibverbs.so.1"),
        "libibverbs.c",
        "libibverbs.so.1",
        Some("libibverbs-old.map"),
    )?;
    compile(
        &cur.join("libmlx5.so.1"),
        "libmlx5.c",
        "libmlx5.so.1",
        Some("libmlx5.map"),
    )?;
    // The soname the CUDA bindings ask for first (tests/stubs/libcuda.c explains).
    compile(&cur.join("libcuda.so.1"), "libcuda.c", "libcuda.so", None)?;
    compile(
        &cur.join("libnvidia-ml.so.1"),
        "libnvidia-ml.c",
        "libnvidia-ml.so.1",
        None,
    )?;
    // NCCL is not loaded by soname (gdrdoctor is given its path: `--nccl-lib`).
    compile(&cur.join("libnccl.so.2"), "libnccl.c", "libnccl.so.2", None)?;
    for lib in [
        "libmlx5.so.1",
        "libcuda.so.1",
        "libnvidia-ml.so.1",
        "libnccl.so.2",
    ] {
        std::fs::copy(cur.join(lib), old.join(lib)).expect("copy a stand-in library");
    }
    Ok(())
}

/// What one run of gdrdoctor against the stand-ins gave.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The stand-ins' call log (GDRDOCTOR_STUB_LOG).
    pub log: String,
}

impl Run {
    /// stdout as JSON (the command must have been given `--format json`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not json ({e}): stdout:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// A scenario for the stand-ins and the node they play.
pub struct Scenario<'a> {
    /// The library directory (`StandIns::current` or `::rdma_core_33`).
    pub libs: &'a Path,
    /// The node's files (`GDRDOCTOR_LIVE_ROOT`), normally a fixture sysroot.
    pub root: PathBuf,
    /// The scenario text (tests/stubs/README.md).
    pub text: String,
    /// More environment.
    pub env: Vec<(String, String)>,
}

impl<'a> Scenario<'a> {
    pub fn new(libs: &'a Path, root: PathBuf, text: &str) -> Scenario<'a> {
        Scenario {
            libs,
            root,
            text: text.to_string(),
            env: Vec::new(),
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Run `gdrdoctor args...` against the stand-ins, in a scratch directory that holds the
    /// scenario file and the call log.
    pub fn run(&self, args: &[&str]) -> Run {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = self
            .command(dir.path(), args)
            .output()
            .expect("run gdrdoctor");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            log: std::fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default(),
        }
    }

    /// The command for `gdrdoctor args...` against the stand-ins, with the scenario written to
    /// `dir/scenario` and the call log at `dir/calls.log`.
    pub fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let scenario = dir.join("scenario");
        let log = dir.join("calls.log");
        std::fs::write(&scenario, &self.text).expect("write the scenario");
        let mut c = Command::new(super::bin());
        c.args(args)
            .env(gdrdoctor::live::stand_in::LIB_DIR_ENV, self.libs)
            .env(gdrdoctor::live::stand_in::LIVE_ROOT_ENV, &self.root)
            .env("GDRDOCTOR_STUB_SCENARIO", &scenario)
            .env("GDRDOCTOR_STUB_LOG", &log)
            // A state directory per scenario: the CUDA answers one scenario's libcuda gave
            // (kept per boot, driver and GPU set, all the same across scenarios) must not
            // answer for the next scenario's.
            .env("GDRDOCTOR_STATE_DIR", dir.join("state"))
            .env_remove(gdrdoctor::live::stand_in::PAGE_SIZE_ENV)
            .env_remove("NO_COLOR")
            .env_remove("COLUMNS")
            .env_remove("NCCL_DMABUF_ENABLE")
            // The stand-in libcuda reads it as CUDA does; gdrdoctor sets it for its CUDA worker.
            .env_remove("CUDA_VISIBLE_DEVICES");
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }
}
