//! Which NCCL is on the node, and its version, read without initialising anything.
//!
//! Where a process would find `libnccl.so.2`, in the loader's order: `LD_LIBRARY_PATH`, the
//! entries of `/etc/ld.so.cache`, the default directories; then the Python environments that
//! carry NCCL as the `nvidia-nccl-cu*` wheel (`site-packages/nvidia/nccl/lib`), including
//! virtual environments under `/opt/*/.venv`, `$VIRTUAL_ENV` and `$CONDA_PREFIX`.
//!
//! The version comes from the library file itself: NCCL keeps its banner
//! `NCCL version 2.28.9+cuda13.0` as one string so that `strings` can show it (src/init.cc
//! v2.30.7-1 L693-696, "Pre-process the string so that running strings on the lib can quickly
//! reveal the version"). Failing that: the versioned file name the symlink points to
//! (`libnccl.so.2.28.9`), the wheel's `dist-info` directory, and last, only inside a worker
//! process, `ncclGetVersion()` through `dlopen` (it initialises nothing but runs the library's
//! constructors, which is why it is last).
//!
//! [`Nccl`] runs the library for `probe --nccl` (in a worker process only): `dlopen`, one
//! communicator per GPU (`ncclCommInitAll`, destroyed on drop) and one all-reduce. Every
//! `unsafe` of that is in this file.

use gdrdoctor_checks::model::Fact;
use gdrdoctor_checks::model::{NcclFacts, NcclLibrary};
use gdrdoctor_checks::nccl::Version;
use std::io::Read;
use std::path::{Path, PathBuf};

const LIB: &str = "libnccl.so.2";
const BANNER: &[u8] = b"NCCL version ";

/// The default library directories of the loader (and CUDA's), x86_64 and aarch64.
pub const DEFAULT_DIRS: &[&str] = &[
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/sbsa-linux-gnu",
    "/usr/lib/sbsa-linux-gnu",
    "/usr/local/lib",
    "/usr/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/nccl/lib",
];

/// Python library directories (globs with one `*` per component) that hold site-packages.
const PYTHON_DIRS: &[&str] = &[
    "/usr/lib/python3*/site-packages",
    "/usr/lib/python3/dist-packages",
    "/usr/local/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/usr/lib64/python3*/site-packages",
    "/opt/conda/lib/python3*/site-packages",
    "/opt/*/.venv/lib/python3*/site-packages",
    "/opt/*/venv/lib/python3*/site-packages",
    "/opt/*/lib/python3*/site-packages",
    "/root/.local/lib/python3*/site-packages",
];

/// Everything found on this node (live). `dlopen`: allow the last-resort `ncclGetVersion`
/// (only in a worker process).
pub fn discover_live(dlopen: bool) -> Fact<NcclFacts> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut extra_python = Vec::new();
    for k in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = env(k) {
            extra_python.push(format!("{v}/lib/python3*/site-packages"));
        }
    }
    if let Some(h) = env("HOME") {
        extra_python.push(format!("{h}/.local/lib/python3*/site-packages"));
    }
    let facts = discover_in(
        Path::new("/"),
        env("LD_LIBRARY_PATH").as_deref(),
        &extra_python,
        dlopen,
    );
    Fact::known(
        facts,
        "libnccl.so.2 files (loader path, ld.so.cache, Python environments)",
    )
}

/// In the worker: everything, with the dlopen fallback.
pub fn discover() -> Fact<NcclFacts> {
    discover_live(true)
}

/// Search under `root` (`/` live; a directory in tests).
pub fn discover_in(
    root: &Path,
    ld_library_path: Option<&str>,
    extra_python: &[String],
    dlopen: bool,
) -> NcclFacts {
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    let mut found: Vec<(PathBuf, String)> = Vec::new();
    let mut searched = Vec::new();
    let add = |path: PathBuf, origin: &str, found: &mut Vec<(PathBuf, String)>| {
        if path.exists() && !found.iter().any(|(p, _)| same_file(p, &path)) {
            found.push((path, origin.to_string()));
        }
    };
    if let Some(lp) = ld_library_path {
        searched.push("LD_LIBRARY_PATH".to_string());
        for d in lp.split(':').filter(|d| !d.is_empty()) {
            add(at(d).join(LIB), "LD_LIBRARY_PATH", &mut found);
        }
    }
    searched.push("/etc/ld.so.cache".to_string());
    if let Ok(bytes) = std::fs::read(at("/etc/ld.so.cache")) {
        for p in ld_cache_paths(&bytes) {
            add(at(&p), "ld.so.cache", &mut found);
        }
    }
    searched.push("the default library directories".to_string());
    for d in DEFAULT_DIRS {
        add(at(d).join(LIB), "default library directory", &mut found);
    }
    searched.push("Python environments (nvidia/nccl/lib)".to_string());
    let mut site_dirs: Vec<PathBuf> = Vec::new();
    for pattern in PYTHON_DIRS
        .iter()
        .map(|s| s.to_string())
        .chain(extra_python.iter().cloned())
    {
        for d in glob(&at(&pattern)) {
            if !site_dirs.contains(&d) {
                site_dirs.push(d);
            }
        }
    }
    for d in &site_dirs {
        add(
            d.join("nvidia/nccl/lib").join(LIB),
            "Python wheel nvidia-nccl",
            &mut found,
        );
    }
    let libraries = found
        .into_iter()
        .map(|(path, origin)| {
            let shown = match path.strip_prefix(root) {
                Ok(rel) if root != Path::new("/") => format!("/{}", rel.display()),
                _ => path.display().to_string(),
            };
            let mut lib = NcclLibrary {
                path: shown,
                origin,
                ..Default::default()
            };
            match read_version(&path) {
                Ok(Some((v, how))) => {
                    lib.version = Some(v);
                    lib.how = Some(how);
                }
                Ok(None) => {
                    if let Some(v) = wheel_version(&path) {
                        lib.version = Some(v);
                        lib.how = Some("wheel metadata (dist-info)".into());
                    } else if dlopen {
                        match get_version_dlopen(&path) {
                            Ok(v) => {
                                lib.version = Some(v);
                                lib.how = Some("ncclGetVersion through dlopen".into());
                            }
                            Err(e) => lib.error = Some(e),
                        }
                    } else {
                        lib.error = Some(
                            "no version string in the file, and no versioned file name".into(),
                        );
                    }
                }
                Err(e) => lib.error = Some(e),
            }
            lib
        })
        .collect();
    NcclFacts {
        libraries,
        searched,
        requested: None,
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Absolute paths of `libnccl.so.2` in an `ld.so.cache` (either format): its strings are
/// NUL-terminated; the values are absolute paths.
pub fn ld_cache_paths(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| s.first() == Some(&b'/') && s.ends_with(b"/libnccl.so.2"))
        .filter_map(|s| std::str::from_utf8(s).ok())
        .map(str::to_string)
        .fold(Vec::new(), |mut v, s| {
            if !v.contains(&s) {
                v.push(s);
            }
            v
        })
}

/// Expand a path whose components may contain one `*` each (no `**`).
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("/")];
    for comp in pattern.components() {
        let c = comp.as_os_str().to_string_lossy();
        if c == "/" {
            continue;
        }
        let mut next = Vec::new();
        for base in &out {
            if let Some((pre, post)) = c.split_once('*') {
                let Ok(rd) = std::fs::read_dir(base) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post)
                    })
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
            } else {
                let p = base.join(c.as_ref());
                if p.exists() {
                    next.push(p);
                }
            }
        }
        out = next;
        if out.is_empty() {
            break;
        }
    }
    out
}

/// The version from the banner string in the file, else from the versioned file name. The
/// banner is looked for in the ELF `.rodata` section first (a few MiB of a library of hundreds:
/// a live `check` reads this on every run), then in the whole file.
pub fn read_version(path: &Path) -> Result<Option<(String, String)>, String> {
    use std::io::{Seek, SeekFrom};
    let _t = crate::sys::trace::span("nccl.read-version");
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some((off, len)) = rodata_range(&mut f) {
        if f.seek(SeekFrom::Start(off)).is_ok() {
            let part = (&mut f).take(len);
            if let Ok(Some(v)) = scan_banner(part) {
                return Ok(Some((v, "version string in the file".into())));
            }
        }
    }
    f.seek(SeekFrom::Start(0))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(v) = scan_banner(f).map_err(|e| format!("{}: {e}", path.display()))? {
        return Ok(Some((v, "version string in the file".into())));
    }
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(rest) = name.strip_prefix("libnccl.so.") {
        if let Some(v) = Version::parse(rest) {
            if rest.matches('.').count() >= 2 {
                return Ok(Some((v.to_string(), format!("file name {name}"))));
            }
        }
    }
    Ok(None)
}

/// Find `NCCL version X.Y.Z` in a stream, 1 MiB at a time (the library is hundreds of MiB;
/// the string sits in .rodata).
pub fn scan_banner(mut r: impl Read) -> std::io::Result<Option<String>> {
    enum Hit {
        Found(String),
        /// A banner cut by the end of the data, at this offset.
        Partial(usize),
        Nothing,
    }
    fn search(data: &[u8], eof: bool) -> Hit {
        let mut from = 0;
        while let Some(i) = find(&data[from..], BANNER) {
            let start = from + i + BANNER.len();
            let tail = &data[start..];
            let end = tail
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')))
                .unwrap_or(tail.len());
            if end == tail.len() && !eof && tail.len() < 64 {
                return Hit::Partial(from + i);
            }
            // The format string "NCCL version %s" has no version after it: skip such hits.
            if let Some(v) = Version::parse(&String::from_utf8_lossy(&tail[..end.min(64)])) {
                return Hit::Found(v.to_string());
            }
            from = start;
        }
        Hit::Nothing
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(match search(&carry, true) {
                Hit::Found(v) => Some(v),
                _ => None,
            });
        }
        carry.extend_from_slice(&buf[..n]);
        match search(&carry, false) {
            Hit::Found(v) => return Ok(Some(v)),
            Hit::Partial(at) => {
                carry.drain(..at);
            }
            Hit::Nothing => {
                // Keep a tail long enough to hold the start of a banner.
                let keep = BANNER.len().min(carry.len());
                let cut = carry.len() - keep;
                carry.drain(..cut);
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(i) = hay.get(from..)?.iter().position(|b| *b == first) {
        let at = from + i;
        if hay.get(at + 1..at + needle.len()) == Some(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Where the `.rodata` section of a 64-bit little-endian ELF file lies (offset, size), or
/// `None` (another format, a damaged header: the caller scans the whole file).
pub fn rodata_range(f: &mut (impl Read + std::io::Seek)) -> Option<(u64, u64)> {
    use std::io::SeekFrom;
    let mut eh = [0u8; 64];
    f.seek(SeekFrom::Start(0)).ok()?;
    f.read_exact(&mut eh).ok()?;
    // \x7fELF, 64-bit, little-endian.
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let shoff = u64_at(&eh, 0x28)?;
    let shentsize = usize::from(u16_at(&eh, 0x3a)?);
    let shnum = usize::from(u16_at(&eh, 0x3c)?);
    let shstrndx = usize::from(u16_at(&eh, 0x3e)?);
    if shentsize < 64 || shnum == 0 || shnum > 4096 || shstrndx >= shnum {
        return None;
    }
    let mut sh = vec![0u8; shentsize.checked_mul(shnum)?];
    f.seek(SeekFrom::Start(shoff)).ok()?;
    f.read_exact(&mut sh).ok()?;
    let sec = |i: usize| {
        let b = sh.get(i * shentsize..(i + 1) * shentsize)?;
        Some((u32_at(b, 0)?, u64_at(b, 24)?, u64_at(b, 32)?))
    };
    let (_, str_off, str_size) = sec(shstrndx)?;
    if str_size > 1 << 20 {
        return None;
    }
    let mut names = vec![0u8; usize::try_from(str_size).ok()?];
    f.seek(SeekFrom::Start(str_off)).ok()?;
    f.read_exact(&mut names).ok()?;
    (0..shnum).find_map(|i| {
        let (name, off, size) = sec(i)?;
        let n = names.get(usize::try_from(name).ok()?..)?;
        let end = n.iter().position(|b| *b == 0)?;
        (&n[..end] == b".rodata").then_some((off, size))
    })
}

/// `site-packages/nvidia_nccl_cu12-2.28.9.dist-info` beside `site-packages/nvidia/nccl/lib`.
fn wheel_version(lib: &Path) -> Option<String> {
    let site = lib.parent()?.parent()?.parent()?.parent()?;
    let mut names: Vec<String> = std::fs::read_dir(site)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nvidia_nccl") && n.ends_with(".dist-info"))
        .collect();
    names.sort();
    names.iter().find_map(|n| {
        let v = n.trim_end_matches(".dist-info").rsplit('-').next()?;
        Version::parse(v).map(|v| v.to_string())
    })
}

/// `ncclGetVersion()` through dlopen: the last resort, in a worker process only.
fn get_version_dlopen(path: &Path) -> Result<String, String> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading a shared library runs its constructors; this is called only inside a
    // worker process, and only when the file carries no readable version.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
        .map_err(|e| format!("dlopen {}: {e}", path.display()))?;
    // SAFETY: ncclGetVersion(int*) -> ncclResult_t (int), src/nccl.h.in.
    let f: libloading::os::unix::Symbol<unsafe extern "C" fn(*mut i32) -> i32> =
        unsafe { lib.get(b"ncclGetVersion\0") }
            .map_err(|e| format!("{}: ncclGetVersion: {e}", path.display()))?;
    let mut code: i32 = 0;
    // SAFETY: a valid pointer to an int.
    let rc = unsafe { f(&mut code) };
    if rc != 0 {
        return Err(format!("{}: ncclGetVersion returned {rc}", path.display()));
    }
    Version::from_code(i64::from(code))
        .map(|v| v.to_string())
        .ok_or_else(|| format!("{}: ncclGetVersion gave {code}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Running NCCL (probe --nccl, in a worker process only)
// ---------------------------------------------------------------------------------------------

use super::cuda::{DeviceBuffer, Stream};
use std::ffi::{c_char, c_int, c_void, CStr};

/// `ncclResult_t` (src/nccl.h.in v2.28.9-1 L42-50): `ncclSuccess` is 0.
const NCCL_SUCCESS: c_int = 0;
/// `ncclFloat32` (src/nccl.h.in v2.28.9-1 L307; the same value since 2.4).
const NCCL_FLOAT32: c_int = 7;
/// `ncclSum` (src/nccl.h.in v2.28.9-1 L282).
const NCCL_SUM: c_int = 0;

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type CommInitAllFn = unsafe extern "C" fn(*mut *mut c_void, c_int, *const c_int) -> c_int;
type CommDestroyFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type GroupFn = unsafe extern "C" fn() -> c_int;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    *mut c_void,
    *mut c_void,
) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type GetUniqueIdFn = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type AsyncErrorFn = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type CommInitRankFn = unsafe extern "C" fn(*mut *mut c_void, c_int, UniqueId, c_int) -> c_int;
type SendFn =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> c_int;
type RecvFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> c_int;

/// `ncclUniqueId` (src/nccl.h.in: `typedef struct { char internal[128]; } ncclUniqueId`): the
/// bootstrap root's address, made by one process and handed to every rank; passed by value.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId(..)")
    }
}
type LastErrorFn = unsafe extern "C" fn(*mut c_void) -> *const c_char;

/// A failed NCCL call: the function, NCCL's result code and its words for it, and the last
/// error NCCL recorded (`ncclGetLastError`, 2.13+: the text of its last WARN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclError {
    pub call: &'static str,
    pub code: i32,
    pub text: String,
    pub last: Option<String>,
}

impl std::fmt::Display for NcclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.text, self.code)?;
        if let Some(l) = self.last.as_deref().filter(|l| !l.is_empty()) {
            write!(f, ": {l}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NcclError {}

/// A `libnccl.so.2` loaded with `dlopen`, and the few entry points the probe uses. NCCL is never
/// unloaded: its proxy threads and exit handlers may outlive the communicators, and the worker
/// process ends soon after.
pub struct Nccl {
    path: String,
    get_version: GetVersionFn,
    comm_init_all: Option<CommInitAllFn>,
    get_unique_id: Option<GetUniqueIdFn>,
    comm_init_rank: Option<CommInitRankFn>,
    send: Option<SendFn>,
    recv: Option<RecvFn>,
    async_error: Option<AsyncErrorFn>,
    comm_destroy: CommDestroyFn,
    group_start: GroupFn,
    group_end: GroupFn,
    all_reduce: AllReduceFn,
    error_string: Option<ErrorStringFn>,
    last_error: Option<LastErrorFn>,
    _lib: std::mem::ManuallyDrop<libloading::os::unix::Library>,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nccl({})", self.path)
    }
}

impl Nccl {
    /// `dlopen` the library at `path` and resolve its entry points. The `NCCL_*` environment
    /// must be set before: NCCL reads it once, at its first initialisation.
    pub fn load(path: &Path) -> Result<Nccl, String> {
        use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
        // SAFETY: loading a shared library runs its constructors; called only inside a worker
        // process that exists to run this library.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }
            .map_err(|e| format!("dlopen {}: {e}", path.display()))?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {
                // SAFETY: the signature is NCCL's (src/nccl.h.in); the pointer is copied out
                // and stays valid because the library is never unloaded.
                match unsafe { lib.get::<$t>(concat!($name, "\0").as_bytes()) } {
                    Ok(s) => Ok(*s),
                    Err(e) => Err(format!("{}: {}: {e}", path.display(), $name)),
                }
            };
        }
        Ok(Nccl {
            path: path.display().to_string(),
            get_version: sym!("ncclGetVersion", GetVersionFn)?,
            // The calls of one process per node (`preflight`), and of one process for every
            // GPU (`probe --nccl`): each is looked for when it is used.
            comm_init_all: sym!("ncclCommInitAll", CommInitAllFn).ok(),
            get_unique_id: sym!("ncclGetUniqueId", GetUniqueIdFn).ok(),
            comm_init_rank: sym!("ncclCommInitRank", CommInitRankFn).ok(),
            send: sym!("ncclSend", SendFn).ok(),
            recv: sym!("ncclRecv", RecvFn).ok(),
            async_error: sym!("ncclCommGetAsyncError", AsyncErrorFn).ok(),
            comm_destroy: sym!("ncclCommDestroy", CommDestroyFn)?,
            group_start: sym!("ncclGroupStart", GroupFn)?,
            group_end: sym!("ncclGroupEnd", GroupFn)?,
            all_reduce: sym!("ncclAllReduce", AllReduceFn)?,
            error_string: sym!("ncclGetErrorString", ErrorStringFn).ok(),
            // ncclGetLastError appeared in 2.13.
            last_error: sym!("ncclGetLastError", LastErrorFn).ok(),
            _lib: std::mem::ManuallyDrop::new(lib),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    fn error(&self, call: &'static str, code: c_int, comm: *mut c_void) -> NcclError {
        let text = self
            .error_string
            // SAFETY: returns a pointer to a static string for any code (or NULL).
            .map(|f| unsafe { f(code) })
            .filter(|p| !p.is_null())
            // SAFETY: a NUL-terminated static string from NCCL.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown result".into());
        let last = self
            .last_error
            // SAFETY: ncclGetLastError accepts NULL (the library-wide last error) or a live comm.
            .map(|f| unsafe { f(comm) })
            .filter(|p| !p.is_null())
            .map(|p| {
                // SAFETY: a non-null result of ncclGetLastError is a NUL-terminated buffer
                // inside NCCL, valid until the next NCCL call on this thread; copied at once.
                unsafe { CStr::from_ptr(p) }
                    .to_string_lossy()
                    .trim()
                    .to_string()
            })
            .filter(|s| !s.is_empty());
        NcclError {
            call,
            code,
            text,
            last,
        }
    }

    fn check(&self, call: &'static str, r: c_int, comm: *mut c_void) -> Result<(), NcclError> {
        if r == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, r, comm))
        }
    }

    /// `ncclGetVersion`: 22809 for 2.28.9 (major * 10000 + minor * 100 + patch since 2.9).
    pub fn version(&self) -> Result<i32, NcclError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        let r = unsafe { (self.get_version)(&mut v) };
        self.check("ncclGetVersion", r, std::ptr::null_mut())?;
        Ok(v)
    }

    /// `ncclCommInitAll`: one communicator per CUDA device of `devices` (rank i on
    /// `devices[i]`), in this thread. The communicators are destroyed when [`Comms`] drops.
    pub fn init_all(&self, devices: &[i32]) -> Result<Comms<'_>, NcclError> {
        let init_all = self
            .comm_init_all
            .ok_or_else(|| self.missing("ncclCommInitAll"))?;
        let mut raw: Vec<*mut c_void> = vec![std::ptr::null_mut(); devices.len()];
        let n = c_int::try_from(devices.len()).unwrap_or(c_int::MAX);
        // SAFETY: `raw` has room for one handle per device; `devices` outlives the call.
        let r = unsafe { init_all(raw.as_mut_ptr(), n, devices.as_ptr()) };
        let comms = Comms {
            nccl: self,
            raw: raw.into_iter().filter(|c| !c.is_null()).collect(),
        };
        self.check("ncclCommInitAll", r, std::ptr::null_mut())?;
        if comms.raw.len() != devices.len() {
            return Err(NcclError {
                call: "ncclCommInitAll",
                code: r,
                text: format!(
                    "{} communicator(s) for {} device(s)",
                    comms.raw.len(),
                    devices.len()
                ),
                last: None,
            });
        }
        Ok(comms)
    }
}

impl Nccl {
    fn missing(&self, call: &'static str) -> NcclError {
        NcclError {
            call,
            code: 4,
            text: format!("{} does not export {call}", self.path),
            last: None,
        }
    }

    /// `ncclGetUniqueId`: the id every rank of a communicator across processes initialises
    /// with. It starts NCCL's bootstrap root in this process: the process must live until
    /// every rank has initialised.
    pub fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let f = self
            .get_unique_id
            .ok_or_else(|| self.missing("ncclGetUniqueId"))?;
        let mut id = UniqueId([0u8; 128]);
        // SAFETY: writes one ncclUniqueId.
        let r = unsafe { f(&mut id) };
        self.check("ncclGetUniqueId", r, std::ptr::null_mut())?;
        Ok(id)
    }

    /// One communicator rank per `(rank, context)` of this process, all in one
    /// `ncclGroupStart`/`ncclGroupEnd` (one thread drives every local GPU: NCCL requires the
    /// group for that), for a communicator of `nranks` ranks across processes. Blocks until
    /// every rank of every process has joined (or NCCL fails).
    pub fn init_ranks(
        &self,
        id: &UniqueId,
        nranks: u32,
        ranks: &[(u32, &super::cuda::Context)],
    ) -> Result<Comms<'_>, NcclError> {
        const CALL: &str = "ncclCommInitRank";
        let f = self.comm_init_rank.ok_or_else(|| self.missing(CALL))?;
        let n = c_int::try_from(nranks).unwrap_or(c_int::MAX);
        // Every slot exists before the group starts: NCCL writes the handles at its end.
        let mut raw: Vec<*mut c_void> = vec![std::ptr::null_mut(); ranks.len()];
        // SAFETY: no arguments.
        let started = unsafe { (self.group_start)() };
        self.check("ncclGroupStart", started, std::ptr::null_mut())?;
        let mut first_err = None;
        for (slot, (rank, ctx)) in raw.iter_mut().zip(ranks) {
            if let Err(e) = ctx.make_current() {
                first_err.get_or_insert(NcclError {
                    call: "cuCtxSetCurrent",
                    code: e.code,
                    text: e.to_string(),
                    last: None,
                });
                continue;
            }
            let r = c_int::try_from(*rank).unwrap_or(c_int::MAX);
            // SAFETY: `slot` stays valid until ncclGroupEnd (the vector is never resized);
            // the id is copied by value; the current context names the rank's device.
            let res = unsafe { f(slot, n, *id, r) };
            if first_err.is_none() {
                first_err = self.check(CALL, res, std::ptr::null_mut()).err();
            }
        }
        // SAFETY: closes the group opened above.
        let end = self.check(
            "ncclGroupEnd",
            unsafe { (self.group_end)() },
            std::ptr::null_mut(),
        );
        if let Some(e) = first_err {
            // Communicators that failed to initialise are not destroyed (that may block):
            // the worker process ends soon.
            return Err(e);
        }
        end?;
        if raw.iter().any(|c| c.is_null()) {
            return Err(NcclError {
                call: CALL,
                code: 3,
                text: "a communicator handle is NULL after ncclGroupEnd".into(),
                last: None,
            });
        }
        Ok(Comms { nccl: self, raw })
    }
}

/// One send and one receive of float32 words between a local communicator rank and a peer
/// rank, at once (a pair's rail).
pub struct Exchange<'a> {
    /// Index of the local communicator in [`Comms`].
    pub comm: usize,
    pub send: &'a DeviceBuffer,
    pub recv: &'a DeviceBuffer,
    pub count: usize,
    pub peer: u32,
    pub stream: &'a Stream,
}

impl Comms<'_> {
    /// The first communicator's asynchronous error (`ncclCommGetAsyncError`): NCCL reports a
    /// failure of work already enqueued (a peer gone, a completion error) there, while the
    /// stream may never finish. `ncclInProgress` is not an error.
    pub fn async_error(&self) -> Option<NcclError> {
        let n = self.nccl;
        let f = n.async_error?;
        for c in &self.raw {
            let mut e: c_int = 0;
            // SAFETY: a live communicator; writes one int.
            let r = unsafe { f(*c, &mut e) };
            if r != NCCL_SUCCESS {
                return Some(n.error("ncclCommGetAsyncError", r, *c));
            }
            if e != NCCL_SUCCESS && e != 7 {
                return Some(n.error("ncclCommGetAsyncError", e, *c));
            }
        }
        None
    }

    /// Every exchange's `ncclSend` and `ncclRecv` in one group: enqueued when this returns;
    /// synchronize the streams to wait for them.
    pub fn exchange_f32(&self, ops: &[Exchange<'_>]) -> Result<(), NcclError> {
        let n = self.nccl;
        let send = n.send.ok_or_else(|| n.missing("ncclSend"))?;
        let recv = n.recv.ok_or_else(|| n.missing("ncclRecv"))?;
        let refuse = |text: String| NcclError {
            call: "ncclSend",
            code: 4,
            text,
            last: None,
        };
        let bytes_ok = |o: &Exchange<'_>| {
            let b = o.count.saturating_mul(4);
            b <= o.send.len() && b <= o.recv.len()
        };
        if let Some(o) = ops
            .iter()
            .find(|o| o.comm >= self.raw.len() || !bytes_ok(o))
        {
            return Err(refuse(format!(
                "exchange on communicator {} of {} with {} floats does not fit",
                o.comm,
                self.raw.len(),
                o.count
            )));
        }
        // SAFETY: no arguments.
        let started = unsafe { (n.group_start)() };
        n.check("ncclGroupStart", started, std::ptr::null_mut())?;
        let mut first_err = None;
        for o in ops {
            let comm = self.raw[o.comm];
            let peer = c_int::try_from(o.peer).unwrap_or(c_int::MAX);
            // SAFETY: the ranges lie inside live allocations of `count` floats or more, the
            // communicator is live, the stream is a live CUstream of its device.
            let r = unsafe {
                send(
                    o.send.device_ptr() as *const c_void,
                    o.count,
                    NCCL_FLOAT32,
                    peer,
                    comm,
                    o.stream.raw(),
                )
            };
            if first_err.is_none() {
                first_err = n.check("ncclSend", r, comm).err();
            }
            // SAFETY: as above, into the receive buffer.
            let r = unsafe {
                recv(
                    o.recv.device_ptr() as *mut c_void,
                    o.count,
                    NCCL_FLOAT32,
                    peer,
                    comm,
                    o.stream.raw(),
                )
            };
            if first_err.is_none() {
                first_err = n.check("ncclRecv", r, comm).err();
            }
        }
        // SAFETY: closes the group opened above.
        let end = n.check(
            "ncclGroupEnd",
            unsafe { (n.group_end)() },
            std::ptr::null_mut(),
        );
        match first_err {
            Some(e) => Err(e),
            None => end,
        }
    }
}

/// The communicators of one [`Nccl::init_all`] or [`Nccl::init_ranks`], destroyed (`ncclCommDestroy`) on drop unless a
/// GPU may be wedged (`cuda::abandon`).
pub struct Comms<'n> {
    nccl: &'n Nccl,
    raw: Vec<*mut c_void>,
}

impl Comms<'_> {
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// One `ncclAllReduce` (float32, sum) of `count` elements per communicator, all inside one
    /// `ncclGroupStart`/`ncclGroupEnd` (one thread driving every GPU): communicator i reduces
    /// `bufs[i].0` into `bufs[i].1` on the stream `bufs[i].2`. Returns when the work is
    /// enqueued; synchronize the streams to wait for it.
    pub fn all_reduce_sum_f32(
        &self,
        bufs: &[(&DeviceBuffer, &DeviceBuffer, &Stream)],
        count: usize,
    ) -> Result<(), NcclError> {
        const CALL: &str = "ncclAllReduce";
        let refuse = |text: String| NcclError {
            call: CALL,
            code: 4, // ncclInvalidArgument
            text,
            last: None,
        };
        if bufs.len() != self.raw.len() {
            return Err(refuse(format!(
                "{} buffer sets for {} communicators",
                bufs.len(),
                self.raw.len()
            )));
        }
        let bytes = count.saturating_mul(4);
        if bufs
            .iter()
            .any(|(s, r, _)| bytes > s.len() || bytes > r.len())
        {
            return Err(refuse(format!("{count} floats do not fit a buffer")));
        }
        let n = self.nccl;
        n.check(
            "ncclGroupStart",
            // SAFETY: ncclGroupStart takes no arguments; it only opens this thread's group,
            // which the ncclGroupEnd below closes on every path.
            unsafe { (n.group_start)() },
            std::ptr::null_mut(),
        )?;
        let mut first_err = None;
        for (comm, (send, recv, stream)) in self.raw.iter().zip(bufs) {
            // SAFETY: both ranges lie inside live allocations of `count` floats or more, the
            // communicator is live, and the stream is a live CUstream (a cudaStream_t) of the
            // communicator's device.
            let r = unsafe {
                (n.all_reduce)(
                    send.device_ptr() as *const c_void,
                    recv.device_ptr() as *mut c_void,
                    count,
                    NCCL_FLOAT32,
                    NCCL_SUM,
                    *comm,
                    stream.raw(),
                )
            };
            if first_err.is_none() {
                first_err = n.check(CALL, r, *comm).err();
            }
        }
        // The group must be closed whatever happened inside it.
        // SAFETY: no arguments; closes the group opened above.
        let end = n.check(
            "ncclGroupEnd",
            unsafe { (n.group_end)() },
            std::ptr::null_mut(),
        );
        match first_err {
            Some(e) => Err(e),
            None => end,
        }
    }
}

impl Drop for Comms<'_> {
    fn drop(&mut self) {
        if super::cuda::abandoned() {
            return;
        }
        for c in self.raw.drain(..) {
            // SAFETY: destroys each communicator of this init exactly once.
            unsafe { (self.nccl.comm_destroy)(c) };
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn banner_found_across_chunk_boundaries_and_format_strings_skipped() {
        let mut data = vec![b'x'; (1 << 20) - 8];
        data.extend_from_slice(b"\0NCCL version %s\0");
        data.extend_from_slice(b"NCCL version 2.28.9+cuda13.0\0tail");
        assert_eq!(scan_banner(&data[..]).unwrap().as_deref(), Some("2.28.9"));
        let mut data = vec![b'y'; (1 << 20) - 5];
        data.extend_from_slice(b"NCCL version 2.30.7+cuda12.9\0");
        assert_eq!(scan_banner(&data[..]).unwrap().as_deref(), Some("2.30.7"));
        assert_eq!(scan_banner(&b"no banner here"[..]).unwrap(), None);
    }

    #[test]
    fn cache_entries_are_the_absolute_paths() {
        let cache = b"glibc-ld.so.cache1.1\0\0libnccl.so.2\0/usr/lib/x86_64-linux-gnu/libnccl.so.2\0libc.so.6\0/lib/libc.so.6\0";
        assert_eq!(
            ld_cache_paths(cache),
            vec!["/usr/lib/x86_64-linux-gnu/libnccl.so.2"]
        );
    }

    #[test]
    fn finds_system_and_wheel_libraries_in_loader_order() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let sys = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::write(
            sys.join("libnccl.so.2.28.3"),
            b"\x7fELF....NCCL version 2.28.3+cuda12.9\0",
        )
        .unwrap();
        std::os::unix::fs::symlink("libnccl.so.2.28.3", sys.join("libnccl.so.2")).unwrap();
        let site = root.join("opt/app/.venv/lib/python3.12/site-packages");
        let lib = site.join("nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnccl.so.2"), b"stripped, no banner").unwrap();
        std::fs::create_dir_all(site.join("nvidia_nccl_cu12-2.28.9.dist-info")).unwrap();
        let byname = root.join("usr/local/lib");
        std::fs::create_dir_all(&byname).unwrap();
        std::fs::write(byname.join("libnccl.so.2.18.6"), b"no banner").unwrap();
        std::os::unix::fs::symlink("libnccl.so.2.18.6", byname.join("libnccl.so.2")).unwrap();
        let f = discover_in(root, None, &[], false);
        let got: Vec<(String, Option<String>, String)> = f
            .libraries
            .iter()
            .map(|l| (l.path.clone(), l.version.clone(), l.origin.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "/usr/lib/x86_64-linux-gnu/libnccl.so.2".to_string(),
                    Some("2.28.3".to_string()),
                    "default library directory".to_string()
                ),
                (
                    "/usr/local/lib/libnccl.so.2".to_string(),
                    Some("2.18.6".to_string()),
                    "default library directory".to_string()
                ),
                (
                    "/opt/app/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
                        .to_string(),
                    Some("2.28.9".to_string()),
                    "Python wheel nvidia-nccl".to_string()
                ),
            ]
        );
        assert_eq!(
            f.libraries[1].how.as_deref(),
            Some("file name libnccl.so.2.18.6")
        );
        assert_eq!(
            f.libraries[2].how.as_deref(),
            Some("wheel metadata (dist-info)")
        );
        let c = gdrdoctor_checks::nccl::choose(Some(&f), None);
        assert_eq!(c.version.to_string(), "2.28.3");
        assert!(c.source.contains("also on this node: 2.18.6"));
    }

    #[test]
    fn ld_library_path_comes_first_and_nothing_found_is_said() {
        let t = tempfile::tempdir().unwrap();
        let f = discover_in(t.path(), Some("/nowhere"), &[], false);
        assert!(f.libraries.is_empty());
        assert_eq!(f.searched[0], "LD_LIBRARY_PATH");
        let c = gdrdoctor_checks::nccl::choose(Some(&f), None);
        assert!(c.assumed && c.source.contains("no libnccl.so.2 found"));
    }
}
