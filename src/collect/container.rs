//! The job container's own view (issue 39 item 1), collected live by the process inside the
//! container: the device nodes a GPUDirect job opens (each opened `O_RDWR` and closed: the
//! device cgroup refuses with `EPERM`), `CapEff`, `statvfs("/dev/shm")`, the NCCL net plugins
//! the loader will find. The memlock limit, the environment and the `libnccl.so.2` the loader
//! finds are the node's own live facts (`process`, `live::nccl`).
//!
//! Never read through a sysroot: what a snapshot holds is the host's files, not a process's
//! view. [`detect`] says whether this process looks like it runs in a container.

use gdrdoctor_checks::model::*;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Why this process looks like it runs in a container (empty: it does not look like it):
/// `/.dockerenv`, `/run/.containerenv` (podman), a container runtime's cgroup in
/// `/proc/1/cgroup`, `KUBERNETES_SERVICE_HOST`, `container=` (podman, systemd-nspawn).
pub fn detect() -> Vec<String> {
    detect_in(Path::new("/"), |k| std::env::var(k).ok())
}

/// [`detect`] under `base`, with `env` for the environment (tests).
pub fn detect_in(base: &Path, env: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut why = Vec::new();
    for f in [".dockerenv", "run/.containerenv"] {
        if base.join(f).exists() {
            why.push(format!("/{f} exists"));
        }
    }
    if let Ok(t) = std::fs::read_to_string(base.join("proc/1/cgroup")) {
        if let Some(l) = t.lines().find(|l| {
            ["docker", "kubepods", "containerd", "libpod", "crio", "lxc"]
                .iter()
                .any(|k| l.contains(k))
        }) {
            why.push(format!("/proc/1/cgroup: {}", l.trim()));
        }
    }
    if env("KUBERNETES_SERVICE_HOST").is_some_and(|v| !v.is_empty()) {
        why.push("KUBERNETES_SERVICE_HOST is set".into());
    }
    if let Some(c) = env("container").filter(|v| !v.is_empty()) {
        why.push(format!("container={c}"));
    }
    why
}

/// Open `path` read-write and close it.
fn try_open(path: &Path) -> DeviceState {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return DeviceState::Missing,
        Err(e) => {
            return DeviceState::Refused {
                errno: e.raw_os_error().unwrap_or(0),
                error: e.to_string(),
            }
        }
        Ok(m) if !m.file_type().is_char_device() => return DeviceState::NotCharDevice,
        Ok(_) => {}
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => DeviceState::Openable,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => DeviceState::Missing,
        Err(e) => DeviceState::Refused {
            errno: e.raw_os_error().unwrap_or(0),
            error: e.to_string(),
        },
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `uverbsN` -> ibdev from `/sys/class/infiniband_verbs`.
fn verbs_expected(base: &Path) -> Fact<Vec<(String, String)>> {
    let dir = base.join("sys/class/infiniband_verbs");
    let src = "/sys/class/infiniband_verbs/uverbs*/ibdev";
    match std::fs::read_dir(&dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Fact::known(Vec::new(), src);
        }
        Err(e) => return Fact::absent(src, format!("{}: {e}", dir.display())),
    }
    let v = names_in(&dir)
        .into_iter()
        .filter(|n| n.starts_with("uverbs"))
        .map(|n| {
            let ib = std::fs::read_to_string(dir.join(&n).join("ibdev"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|e| format!("? ({e})"));
            (n, ib)
        })
        .collect();
    Fact::known(v, src)
}

/// GPU minors from `/proc/driver/nvidia/gpus/*/information`.
fn gpu_minors(base: &Path) -> Fact<Vec<u32>> {
    let dir = base.join("proc/driver/nvidia/gpus");
    let src = "/proc/driver/nvidia/gpus/*/information (Device Minor)";
    if !dir.exists() {
        return Fact::known(Vec::new(), src);
    }
    let mut v = Vec::new();
    for g in names_in(&dir) {
        let Ok(t) = std::fs::read_to_string(dir.join(&g).join("information")) else {
            continue;
        };
        if let Some(m) = t.lines().find_map(|l| {
            l.strip_prefix("Device Minor:")
                .and_then(|x| x.trim().parse().ok())
        }) {
            v.push(m);
        }
    }
    v.sort_unstable();
    Fact::known(v, src)
}

fn cap_eff(base: &Path) -> Fact<u64> {
    let src = "/proc/self/status (CapEff)";
    match std::fs::read_to_string(base.join("proc/self/status")) {
        Ok(t) => match t
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|x| u64::from_str_radix(x.trim(), 16))
        {
            Some(Ok(v)) => Fact::known(v, src),
            Some(Err(e)) => Fact::absent(src, format!("CapEff is not hexadecimal: {e}")),
            None => Fact::absent(src, "no CapEff line"),
        },
        Err(e) => Fact::absent(src, e.to_string()),
    }
}

fn shm(path: &Path) -> Fact<Shm> {
    let src = format!("statvfs({})", path.display());
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Fact::absent(src, format!("{}: {e}", path.display())),
    };
    if !meta.is_dir() {
        return Fact::absent(src, format!("{} is not a directory", path.display()));
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return Fact::absent(src, "path holds a NUL byte");
    };
    // SAFETY: `struct statvfs` is plain integers: all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs reads the NUL-terminated path we own and fills the struct we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Fact::absent(src, std::io::Error::last_os_error().to_string());
    }
    let unit = st.f_frsize as u64;
    Fact::known(
        Shm {
            total: (st.f_blocks as u64).saturating_mul(unit),
            free: (st.f_bavail as u64).saturating_mul(unit),
        },
        src,
    )
}

/// `libnccl-net*.so` files in the loader's order: `LD_LIBRARY_PATH`, `ld.so.cache`, the
/// default directories.
pub fn net_plugins(base: &Path, ld_library_path: Option<&str>) -> (Vec<Plugin>, Vec<String>) {
    let at = |p: &str| base.join(p.trim_start_matches('/'));
    let is_plugin = |n: &str| n.starts_with("libnccl-net") && n.contains(".so");
    let mut out: Vec<Plugin> = Vec::new();
    let mut searched = Vec::new();
    let add = |path: String, origin: &str, out: &mut Vec<Plugin>| {
        if !out.iter().any(|p| p.path == path) {
            out.push(Plugin {
                path,
                origin: origin.into(),
            });
        }
    };
    let scan = |dir: &str, origin: &str, out: &mut Vec<Plugin>| {
        for n in names_in(&at(dir)) {
            if is_plugin(&n) {
                add(
                    format!("{}/{n}", dir.trim_end_matches('/')),
                    origin,
                    &mut *out,
                );
            }
        }
    };
    if let Some(lp) = ld_library_path {
        searched.push("LD_LIBRARY_PATH".into());
        for d in lp.split(':').filter(|d| !d.is_empty()) {
            scan(d, "LD_LIBRARY_PATH", &mut out);
        }
    }
    searched.push("/etc/ld.so.cache".into());
    if let Ok(bytes) = std::fs::read(at("/etc/ld.so.cache")) {
        for s in bytes.split(|b| *b == 0) {
            let Ok(s) = std::str::from_utf8(s) else {
                continue;
            };
            let name = s.rsplit('/').next().unwrap_or("");
            if s.starts_with('/') && is_plugin(name) && at(s).exists() {
                let p = s.to_string();
                if !out.iter().any(|x| x.path == p) {
                    out.push(Plugin {
                        path: p,
                        origin: "ld.so.cache".into(),
                    });
                }
            }
        }
    }
    searched.push("the default library directories".into());
    for d in crate::live::nccl::DEFAULT_DIRS {
        scan(d, "default library directory", &mut out);
    }
    (out, searched)
}

/// The view of this process, live.
pub fn collect(detected_by: Vec<String>) -> ContainerView {
    collect_in(
        Path::new("/"),
        detected_by,
        std::env::var("LD_LIBRARY_PATH").ok().as_deref(),
    )
}

/// [`collect`] under `base` (tests give a directory; device nodes are opened there).
pub fn collect_in(
    base: &Path,
    detected_by: Vec<String>,
    ld_library_path: Option<&str>,
) -> ContainerView {
    let shown = |p: &Path| match p.strip_prefix(base) {
        Ok(r) => format!("/{}", r.display()),
        Err(_) => p.display().to_string(),
    };
    let mut devices = Vec::new();
    let verbs = verbs_expected(base);
    let ib = base.join("dev/infiniband");
    let mut ib_names: Vec<String> = names_in(&ib)
        .into_iter()
        .filter(|n| n.starts_with("uverbs") || n == "rdma_cm")
        .collect();
    if let Some(v) = verbs.get() {
        for (u, _) in v {
            if !ib_names.contains(u) {
                ib_names.push(u.clone());
            }
        }
    }
    ib_names.sort();
    if !ib_names.is_empty() && !ib_names.iter().any(|n| n == "rdma_cm") {
        ib_names.push("rdma_cm".into());
    }
    for n in ib_names {
        let p = ib.join(&n);
        devices.push(DeviceNode {
            path: shown(&p),
            kind: "rdma".into(),
            state: try_open(&p),
        });
    }
    let minors = gpu_minors(base);
    let dev = base.join("dev");
    let mut gpu_nodes: Vec<String> = names_in(&dev)
        .into_iter()
        .filter(|n| {
            n.strip_prefix("nvidia")
                .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    for m in minors.get().into_iter().flatten() {
        let n = format!("nvidia{m}");
        if !gpu_nodes.contains(&n) {
            gpu_nodes.push(n);
        }
    }
    if !gpu_nodes.is_empty() {
        gpu_nodes.sort();
        gpu_nodes.insert(0, "nvidia-uvm".into());
        gpu_nodes.insert(0, "nvidiactl".into());
    }
    for n in gpu_nodes {
        let p = dev.join(&n);
        devices.push(DeviceNode {
            path: shown(&p),
            kind: "gpu".into(),
            state: try_open(&p),
        });
    }
    let gdrdrv_loaded = std::fs::read_to_string(base.join("proc/modules"))
        .ok()
        .map(|t| {
            t.lines()
                .any(|l| l.split_whitespace().next() == Some("gdrdrv"))
        });
    let gdr = dev.join("gdrdrv");
    if gdrdrv_loaded == Some(true) || gdr.exists() {
        devices.push(DeviceNode {
            path: shown(&gdr),
            kind: "gdrcopy".into(),
            state: try_open(&gdr),
        });
    }
    let (net_plugins, plugin_searched) = net_plugins(base, ld_library_path);
    ContainerView {
        detected_by,
        devices,
        verbs_expected: verbs,
        gpu_minors: minors,
        cap_eff: cap_eff(base),
        uid_map: match std::fs::read_to_string(base.join("proc/self/uid_map")) {
            Ok(t) => Fact::known(t.trim_end().to_string(), "/proc/self/uid_map"),
            Err(e) => Fact::absent("/proc/self/uid_map", e.to_string()),
        },
        shm: shm(&base.join("dev/shm")),
        net_plugins,
        plugin_searched,
        gdrdrv_loaded,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn detection_names_its_evidence() {
        let d = std::env::temp_dir().join(format!("gdrdoctor-ctr-{}", std::process::id()));
        std::fs::create_dir_all(d.join("proc/1")).unwrap();
        std::fs::write(d.join("proc/1/cgroup"), "0::/\n").unwrap();
        assert!(detect_in(&d, |_| None).is_empty());
        std::fs::write(
            d.join("proc/1/cgroup"),
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n",
        )
        .unwrap();
        std::fs::write(d.join(".dockerenv"), "").unwrap();
        let why = detect_in(&d, |k| {
            (k == "KUBERNETES_SERVICE_HOST").then(|| "10.0.0.1".into())
        });
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(
            why[1].starts_with("/proc/1/cgroup: 0::/kubepods"),
            "{why:?}"
        );
        // Plugins in the loader's order, once each; a regular file is not a device.
        std::fs::create_dir_all(d.join("opt/lib")).unwrap();
        std::fs::write(d.join("opt/lib/libnccl-net-ofi.so"), "").unwrap();
        std::fs::create_dir_all(d.join("dev/infiniband")).unwrap();
        std::fs::write(d.join("dev/infiniband/uverbs0"), "").unwrap();
        let v = collect_in(&d, vec!["test".into()], Some("/opt/lib"));
        assert_eq!(v.net_plugins.len(), 1);
        assert_eq!(v.net_plugins[0].path, "/opt/lib/libnccl-net-ofi.so");
        let u = v
            .devices
            .iter()
            .find(|x| x.path == "/dev/infiniband/uverbs0")
            .unwrap();
        assert_eq!(u.state, DeviceState::NotCharDevice);
        let cm = v
            .devices
            .iter()
            .find(|x| x.path == "/dev/infiniband/rdma_cm")
            .unwrap();
        assert_eq!(cm.state, DeviceState::Missing);
        assert!(v.shm.get().is_none(), "{:?}", v.shm);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
