//! The live-only facts of the process: machine (`uname -m`), RLIMIT_MEMLOCK, effective uid and
//! the NCCL/NVSHMEM/UCX/CUDA environment. Where they come from is the [`Origin`]'s decision:
//! system calls on the live node, `gdrdoctor/meta.json` in a snapshot.

use crate::meta::Meta;
use crate::reader::Root;
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
        // A container's view of the host (`--host-root`, to come) will have its own arm:
        // the process facts of gdrdoctor's container are not the host's.
        Origin::Snapshot | Origin::Foreign => {
            let arch = from_meta(meta, "arch", |m| m.arch.clone()).unwrap_or_else(|| {
                Fact::absent(
                    "uname(2)",
                    "live-only fact; the sysroot has no gdrdoctor/meta.json",
                )
            });
            let memlock = from_meta(meta, "memlock", |m| m.memlock).unwrap_or_else(|| {
                match root.read_text("/proc/self/limits") {
                    Ok(t) => match parse::memlock_from_limits(&t) {
                        Some(l) => Fact::known(l, "/proc/self/limits"),
                        None => Fact::absent("/proc/self/limits", "no `Max locked memory` line"),
                    },
                    Err(_) => Fact::absent(
                        "getrlimit(RLIMIT_MEMLOCK)",
                        "live-only fact; the sysroot has no gdrdoctor/meta.json",
                    ),
                }
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

pub(super) fn from_meta<T>(
    meta: Option<&Meta>,
    what: &str,
    f: impl FnOnce(&Meta) -> Option<T>,
) -> Option<Fact<T>> {
    let m = meta?;
    f(m).map(|v| Fact::known(v, format!("gdrdoctor/meta.json ({what} at snapshot time)")))
}

fn uname_machine() -> Option<String> {
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
