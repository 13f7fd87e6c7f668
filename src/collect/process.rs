//! The live-only facts of the process: machine (`uname -m`), RLIMIT_MEMLOCK, effective uid and
//! the NCCL/NVSHMEM/UCX/CUDA environment. Where they come from is the [`Origin`]'s decision:
//! system calls on the live node, `gdrdoctor/meta.json` in a snapshot, and under `--host-root`
//! what of the container is the host's (the kernel: `uname`) plus the container runtime's
//! RLIMIT_MEMLOCK read through the mount (the container's own limit is not the workloads').

use crate::source::meta::Meta;
use crate::source::reader::Root;
use crate::source::Origin;
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;
use std::collections::BTreeMap;

pub(super) struct Process {
    pub arch: Fact<String>,
    pub memlock: Fact<Rlimit>,
    pub euid: Fact<u32>,
    pub env: Fact<BTreeMap<String, String>>,
}

pub(super) fn collect(root: &Root, origin: Origin, meta: Option<&Meta>) -> Process {
    match origin {
        Origin::Live => Process {
            arch: match uname_machine() {
                Some(m) => Fact::known(m, "uname(2)"),
                None => Fact::absent("uname(2)", "uname failed"),
            },
            memlock: live_memlock(),
            euid: Fact::known(geteuid(), "geteuid(2)"),
            env: Fact::known(relevant_env(), "environment"),
        },
        Origin::HostRoot => host_root(root),
        Origin::Snapshot | Origin::Foreign => {
            let arch = from_meta(meta, "arch", |m| m.arch.clone()).unwrap_or_else(|| {
                Fact::absent(
                    "uname(2)",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                )
            });
            let damaged = meta.and_then(|m| m.memlock_damage.clone());
            let memlock = match damaged {
                Some(why) => Some(Fact::absent("gdrdoctor/meta.json", why)),
                None => from_meta(meta, "memlock", |m| m.memlock),
            };
            let memlock = memlock.unwrap_or_else(|| match root.read_text("/proc/self/limits") {
                Ok(t) => match parse::memlock_from_limits(&t) {
                    Some(l) => Fact::known(l, "/proc/self/limits"),
                    None => Fact::absent("/proc/self/limits", "no `Max locked memory` line"),
                },
                Err(_) => Fact::absent(
                    "getrlimit(RLIMIT_MEMLOCK)",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                ),
            });
            let euid = from_meta(meta, "euid", |m| m.euid).unwrap_or_else(|| {
                Fact::absent(
                    "geteuid(2)",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                )
            });
            // The snapshot's environment, overlaid by the NCCL_*/NVSHMEM_* variables gdrdoctor runs
            // with now (so `NCCL_NET_GDR_LEVEL=SYS gdrdoctor topo --sysroot x` asks "what if").
            let now = relevant_env();
            let env = match meta {
                Some(m) => {
                    let mut e = m.env.clone();
                    let overlaid = !now.is_empty();
                    e.extend(now);
                    Fact::known(
                        e,
                        if overlaid {
                            "gdrdoctor/meta.json + current environment"
                        } else {
                            "gdrdoctor/meta.json"
                        },
                    )
                }
                None if !now.is_empty() => Fact::known(now, "current environment"),
                None => Fact::absent(
                    "environment",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                ),
            };
            Process {
                arch,
                memlock,
                euid,
                env,
            }
        }
    }
}

/// The container runtimes whose RLIMIT_MEMLOCK the pods inherit, in the order tried (the
/// process name in `/proc/PID/comm`), and the node agents that start GPU jobs outside pods.
pub const RUNTIMES: &[&str] = &["containerd", "crio", "dockerd", "slurmd"];

/// `--host-root`: the container shares the host's kernel (so `uname` is the host's), but its
/// uid, rlimits and environment are its own. The memlock limit the workloads get is the
/// container runtime's (pods inherit it): read from `/proc/PID/limits` of the runtime, found by
/// name in the host's procfs under the root.
fn host_root(root: &Root) -> Process {
    let arch = match uname_machine() {
        Some(m) => Fact::known(m, "uname(2) (the host's kernel, shared by the container)"),
        None => Fact::absent("uname(2)", "uname failed"),
    };
    let memlock = runtime_memlock(root.base());
    // The reader's identity decides what it could read (config space beyond 64 bytes needs
    // CAP_SYS_ADMIN): the container's euid is the one that matters for the evidence.
    let euid = Fact::known(geteuid(), "geteuid(2) (gdrdoctor's container)");
    let now = relevant_env();
    let env = if now.is_empty() {
        Fact::absent(
            "environment",
            "live-only fact: the workloads' NCCL_*/NVSHMEM_*/UCX_* variables are set in their own pods, not in gdrdoctor's container (set the same ones on the DaemonSet to judge with them)",
        )
    } else {
        Fact::known(
            now,
            "gdrdoctor's container environment (--host-root: the workloads' pods may set others)",
        )
    };
    Process {
        arch,
        memlock,
        euid,
        env,
    }
}

/// The RLIMIT_MEMLOCK of the first of [`RUNTIMES`] running on the host whose procfs is at
/// `base/proc`. Read with plain file calls, never through the recording reader (a snapshot
/// would otherwise copy the whole process table); nothing followed out of `base`.
pub(super) fn runtime_memlock(base: &std::path::Path) -> Fact<Rlimit> {
    let proc_dir = base.join("proc");
    let is_real_dir =
        |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir());
    let source = format!(
        "{}/PID/limits of the container runtime ({})",
        proc_dir.display(),
        RUNTIMES.join(", ")
    );
    let why_not = |detail: String| {
        Fact::absent(
            source.as_str(),
            format!("live-only fact: gdrdoctor's container has its own limit, not the workloads'; {detail}"),
        )
    };
    if !is_real_dir(&proc_dir) {
        return why_not(format!("{} is not a directory", proc_dir.display()));
    }
    let entries = match std::fs::read_dir(&proc_dir) {
        Ok(rd) => rd,
        Err(e) => return why_not(format!("{}: {e}", proc_dir.display())),
    };
    let mut found: Vec<(usize, u32)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = proc_dir.join(name);
        if !is_real_dir(&dir) {
            continue;
        }
        let Ok(comm) = read_small(&dir.join("comm")) else {
            continue;
        };
        if let Some(rank) = RUNTIMES.iter().position(|r| comm.trim_end() == *r) {
            found.push((rank, pid));
        }
    }
    // The most preferred runtime, its oldest (lowest) pid: the daemon, not a shim.
    found.sort();
    let Some(&(rank, pid)) = found.first() else {
        return why_not(format!(
            "no {} process found in {} to read the limit the workloads inherit",
            RUNTIMES.join(", "),
            proc_dir.display()
        ));
    };
    let path = format!("/proc/{pid}/limits");
    let what = RUNTIMES.get(rank).copied().unwrap_or("runtime");
    let source = format!("{path} ({what}: the workloads inherit its limit)");
    match read_small(&proc_dir.join(pid.to_string()).join("limits")) {
        Ok(t) => match parse::memlock_from_limits(&t) {
            Some(l) => Fact::known(l, source),
            None => Fact::absent(source, "no `Max locked memory` line"),
        },
        Err(e) => Fact::absent(source, e),
    }
}

/// A procfs file (refusing a symlink as the last component), at most 64 KiB.
fn read_small(p: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let mut s = String::new();
    f.take(64 << 10)
        .read_to_string(&mut s)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(s)
}

pub(super) fn from_meta<T>(
    meta: Option<&Meta>,
    what: &str,
    f: impl FnOnce(&Meta) -> Option<T>,
) -> Option<Fact<T>> {
    let m = meta?;
    f(m).map(|v| Fact::known(v, format!("gdrdoctor/meta.json ({what} at snapshot time)")))
}

fn uname_machine() -> Option<String> {
    // SAFETY: `struct utsname` is arrays of C chars: all-zero is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct we own; the fields are NUL-terminated C strings.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = u
        .machine
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn live_memlock() -> Fact<Rlimit> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return Fact::absent(
            "getrlimit(RLIMIT_MEMLOCK)",
            std::io::Error::last_os_error().to_string(),
        );
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            None
        } else {
            Some(v)
        }
    };
    Fact::known(
        Rlimit {
            soft: conv(r.rlim_cur),
            hard: conv(r.rlim_max),
        },
        "getrlimit(RLIMIT_MEMLOCK)",
    )
}

/// The environment variables that change GDR decisions (NCCL, NVSHMEM, UCX, CUDA).
pub fn relevant_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| {
            [
                "NCCL_",
                "NVSHMEM_",
                "UCX_",
                "CUDA_VISIBLE_DEVICES",
                "CUDA_MODULE_LOADING",
            ]
            .iter()
            .any(|p| k.starts_with(p))
        })
        .collect()
}
