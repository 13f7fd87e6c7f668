//! `gdrcopy.gdrdrv`: gdrcopy's kernel module and the device node a job opens (issue 39 item 4).
//!
//! NCCL uses gdrcopy only when asked (`NCCL_GDRCOPY_ENABLE=1`, default 0: `init.cc`), through
//! `libgdrapi.so` (`gdrwrap.cc`, dlopen at run time), and only with a library and a `gdrdrv`
//! of 2.1 or later (`gdrwrap.h`, `ncclGdrInit`: "Only support GDRAPI 2.1 and later"); when
//! `gdr_open` fails (no `/dev/gdrdrv`, or one the job cannot open) it goes on without gdrcopy,
//! with an INFO line only. NVSHMEM uses gdrcopy unless `NVSHMEM_DISABLE_GDRCOPY` is set.

use crate::checks::Needs;
use crate::model::{Fact, Flavor, ModuleState, Node};
use crate::report::{Finding, Status};

pub const ID: &str = "gdrcopy.gdrdrv";

/// What a paste cannot show: the module and the device node's mode.
pub const NEEDS: Needs = Needs {
    kinds: &[],
    what: "gdrcopy's gdrdrv module and /dev/gdrdrv",
    command: "lsmod | grep gdrdrv; cat /sys/module/gdrdrv/version; ls -l /dev/gdrdrv",
};

const FIX_LOAD: &str = "install gdrcopy's kernel module for this kernel (the gdrdrv-dkms / gdrcopy-kmod package, or `make driver && sudo ./insmod.sh` in gdrcopy's tree) and load it after the nvidia module: `sudo modprobe gdrdrv`; gdrcopy's insmod.sh creates /dev/gdrdrv with mode 0666";
const FIX_MODE: &str = "`sudo chmod 0666 /dev/gdrdrv` now; for good, a udev rule `KERNEL==\"gdrdrv\", MODE=\"0666\"` in /etc/udev/rules.d/ (or load the module with gdrcopy's insmod.sh, which sets the mode); in a container, pass the device in (`--device /dev/gdrdrv`, the GPU operator's gdrcopy option)";

/// Who asks for gdrcopy: the environment gdrdoctor ran with (the job's, when run inside it).
fn asked(node: &Node) -> Vec<String> {
    let Some(env) = node.env.get() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(v) = env.get("NCCL_GDRCOPY_ENABLE") {
        if v.trim().parse::<i64>() == Ok(1) {
            out.push(format!("NCCL_GDRCOPY_ENABLE={v}"));
        }
    }
    out
}

/// `major.minor` of a version string (`2.4`, `2.5.1`, `v2.4-1`).
pub fn major_minor(v: &str) -> Option<(u32, u32)> {
    let v = v.trim().trim_start_matches('v');
    let mut it = v.split(['.', '-']);
    let major = it.next()?.trim().parse().ok()?;
    let minor = it
        .next()
        .map(|m| m.trim().parse().ok())
        .unwrap_or(Some(0))?;
    Some((major, minor))
}

pub fn gdrdrv(node: &Node) -> Vec<Finding> {
    let g = &node.addons.gdrcopy;
    let wanted = asked(node);
    let module = node.modules.state("gdrdrv");
    let modules_src = node.modules.source();
    let dev_src = g.dev.source().to_string();
    let module_text = match module {
        ModuleState::Loaded => "loaded",
        ModuleState::SysModule => "in /sys/module only",
        ModuleState::NotLoaded => "not loaded",
        ModuleState::Unknown => "unknown (module lists unreadable)",
    };
    let dev_text = g.dev.describe(|d| match d {
        None => "no such node".into(),
        Some(d) => format!(
            "{} mode {:04o} uid {} gid {}",
            if d.char_device {
                "character device"
            } else {
                "not a character device:"
            },
            d.mode,
            d.uid,
            d.gid
        ),
    });
    let base = |status, msg: String| {
        let mut f = Finding::new(ID, status, "node", msg)
            .evidence(modules_src.clone(), format!("gdrdrv {module_text}"))
            .evidence(dev_src.clone(), dev_text.clone());
        for w in &wanted {
            f = f.evidence("environment", w.clone());
        }
        f
    };
    let loaded = matches!(module, ModuleState::Loaded | ModuleState::SysModule);
    let dev = g.dev.get();
    if let Some(why) = g.dev.reason().filter(|r| crate::model::is_damaged(r)) {
        return vec![base(
            Status::Error,
            format!("the record of /dev/gdrdrv is damaged: {why}"),
        )];
    }
    let present = loaded || matches!(dev, Some(Some(_)));
    if !present {
        // Nothing of gdrcopy seen: whether that matters depends on who asks.
        let unknown = module == ModuleState::Unknown || dev.is_none();
        return vec![match (wanted.is_empty(), unknown) {
            (true, false) => base(
                Status::Skip,
                "gdrcopy is not installed (no gdrdrv module, no /dev/gdrdrv) and nothing here asks for it (NCCL_GDRCOPY_ENABLE unset)".into(),
            ),
            (true, true) => base(
                Status::Skip,
                format!(
                    "whether gdrcopy is installed is not shown ({}); nothing here asks for it",
                    g.dev.reason().unwrap_or("gdrdrv module state unknown")
                ),
            ),
            (false, false) => base(
                Status::Fail,
                format!(
                    "{} asks for gdrcopy, but gdrdrv is not loaded and there is no /dev/gdrdrv: gdr_open fails, NCCL goes on without gdrcopy and says so only at NCCL_DEBUG=INFO",
                    wanted.join(", ")
                ),
            )
            .fix(FIX_LOAD),
            (false, true) => base(
                Status::Error,
                format!(
                    "{} asks for gdrcopy, and whether gdrdrv is loaded with its /dev/gdrdrv cannot be read ({})",
                    wanted.join(", "),
                    g.dev.reason().unwrap_or("gdrdrv module state unknown")
                ),
            ),
        }];
    }
    if !loaded {
        return vec![base(
            if module == ModuleState::Unknown {
                Status::Error
            } else {
                Status::Fail
            },
            if module == ModuleState::Unknown {
                "/dev/gdrdrv exists, but whether gdrdrv is loaded cannot be read".into()
            } else {
                "/dev/gdrdrv exists but gdrdrv is not loaded: a stale node, gdr_open fails (ENXIO)"
                    .into()
            },
        )
        .fix(FIX_LOAD)];
    }
    // Loaded: the node, its mode, the version.
    let d = match dev {
        None => {
            return vec![base(
                if wanted.is_empty() {
                    Status::Skip
                } else {
                    Status::Error
                },
                format!(
                    "gdrdrv is loaded; /dev/gdrdrv cannot be judged: {}",
                    g.dev.reason().unwrap_or("unreadable")
                ),
            )]
        }
        Some(None) => {
            return vec![base(
                Status::Fail,
                "gdrdrv is loaded but /dev/gdrdrv does not exist (loaded with modprobe or insmod without gdrcopy's insmod.sh or a udev rule): gdr_open fails and NCCL, NVSHMEM and UCX go on without gdrcopy".into(),
            )
            .fix("create the node as gdrcopy's insmod.sh does: `major=$(awk '$2==\"gdrdrv\" {print $1}' /proc/devices); sudo mknod /dev/gdrdrv c $major 0; sudo chmod 0666 /dev/gdrdrv`, or reload with insmod.sh")];
        }
        Some(Some(d)) => *d,
    };
    if !d.char_device {
        return vec![base(
            Status::Fail,
            "/dev/gdrdrv is not a character device: gdr_open cannot reach gdrdrv".into(),
        )
        .fix(FIX_LOAD)];
    }
    let mut problems: Vec<(Status, String)> = Vec::new();
    if !d.world_rw() {
        if d.group_rw() {
            problems.push((
                Status::Warn,
                format!(
                    "/dev/gdrdrv is mode {:04o}: only root and members of group {} can open it; a job of another user runs without gdrcopy",
                    d.mode, d.gid
                ),
            ));
        } else {
            problems.push((
                Status::Fail,
                format!(
                    "/dev/gdrdrv is mode {:04o}: only its owner (uid {}) can open it; gdr_open fails in every job of another user and NCCL goes on without gdrcopy",
                    d.mode, d.uid
                ),
            ));
        }
    }
    let version = &g.module_version;
    let vtext = version.describe(|v| v.clone().unwrap_or_else(|| "no version file".into()));
    match version.get() {
        Some(Some(v)) => match major_minor(v) {
            Some(mm) if mm < (2, 1) => problems.push((
                Status::Fail,
                format!("gdrdrv {v} is older than 2.1: NCCL's ncclGdrInit refuses a gdrdrv (and a libgdrapi) before 2.1 and runs without gdrcopy"),
            )),
            Some(_) => {}
            None => problems.push((
                Status::Warn,
                format!("gdrdrv's version {v:?} does not read as major.minor"),
            )),
        },
        Some(None) => problems.push((
            Status::Warn,
            "gdrdrv is loaded without a version (/sys/module/gdrdrv/version missing: gdrcopy before 2.0); NCCL needs 2.1 or later".into(),
        )),
        // There and unreadable: whether it is older than NCCL accepts is unknown.
        None => {
            let why = version.reason().unwrap_or("unreadable");
            problems.push((
                // A capture that did not take the file is a gap, not damage.
                if why.contains("not in this capture") {
                    Status::Warn
                } else {
                    Status::Error
                },
                format!("gdrdrv's version cannot be read ({why}): NCCL refuses one before 2.1"),
            ))
        }
    }
    // The flavor it was built for against the one loaded (gdrcopy's README: built for the open
    // flavor it cannot load under the proprietary driver; built for the proprietary one it
    // loads under both, slower on coherent platforms such as Grace Hopper).
    let built_for = g
        .params
        .get()
        .and_then(|p| p.as_ref())
        .and_then(|p| p.get("Built for NVIDIA driver flavor"))
        .cloned();
    let driver = crate::derive::nvidia_driver(node);
    if let (Some(b), Some((_, flavor))) = (&built_for, &driver) {
        let arm = node.arch.get().is_some_and(|a| a == "aarch64");
        match (b.as_str(), flavor) {
            ("opensource", Flavor::Proprietary) => problems.push((
                Status::Fail,
                "gdrdrv was built for the open NVIDIA kernel modules but the proprietary driver is loaded: gdrcopy says such a gdrdrv cannot work with it".into(),
            )),
            ("proprietary", Flavor::Open) if arm => problems.push((
                Status::Warn,
                "gdrdrv was built for the proprietary NVIDIA driver and runs under the open one on a coherent platform (aarch64): gdrcopy says it may be slow there; rebuild it against the open driver's source".into(),
            )),
            _ => {}
        }
    }
    // Built for and loaded against the running NVIDIA driver: gdrdrv takes the nvidia_p2p_*
    // symbols of nvidia.ko, so it is one of nvidia's users.
    let nvidia_users = node
        .modules
        .proc_modules
        .get()
        .and_then(|m| m.get("nvidia"))
        .map(|m| m.used_by.iter().any(|u| u == "gdrdrv"));
    if nvidia_users == Some(false) {
        problems.push((
            Status::Warn,
            "gdrdrv is loaded but is not a user of the nvidia module (/proc/modules): it was built against another NVIDIA driver (its nv-p2p-dummy stand-in) or loaded before nvidia; gdr_pin_buffer fails".into(),
        ));
    }
    let mut f = if let Some(worst) = problems.iter().map(|(s, _)| *s).max() {
        let msg = problems
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let f = base(worst, msg);
        let mode_bad = !d.world_rw();
        f.fix(if mode_bad {
            FIX_MODE
        } else {
            "install gdrcopy 2.1 or later built for this NVIDIA driver (gdrdrv-dkms rebuilds it at each driver or kernel upgrade) and load it after the nvidia module"
        })
    } else {
        base(
            Status::Pass,
            format!(
                "gdrdrv {} loaded, /dev/gdrdrv mode {:04o}: every job can open it{}",
                version.get().cloned().flatten().unwrap_or_default(),
                d.mode,
                if wanted.is_empty() {
                    " (NCCL uses gdrcopy only with NCCL_GDRCOPY_ENABLE=1)"
                } else {
                    ""
                }
            ),
        )
    };
    f = f.evidence(version.source().to_string(), vtext);
    f = f.evidence(
        g.params.source().to_string(),
        g.params.describe(|p| match p {
            None => "no such file".into(),
            Some(m) => format!(
                "built for {} nvidia driver; persistent mapping {}",
                m.get("Built for NVIDIA driver flavor")
                    .map(String::as_str)
                    .unwrap_or("(not said)"),
                m.get("Use persistent mapping")
                    .map(String::as_str)
                    .unwrap_or("(not said)")
            ),
        }),
    );
    if let Some((v, fl)) = &driver {
        f = f.evidence(
            "/proc/driver/nvidia/version",
            format!("{v} ({})", crate::derive::flavor_name(*fl)),
        );
    }
    if matches!(node.modules.proc_modules, Fact::Known { .. }) {
        f = f.evidence(
            "/proc/modules",
            format!(
                "nvidia used by gdrdrv: {}",
                match nvidia_users {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "nvidia not loaded",
                }
            ),
        );
    }
    vec![f]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::*;
    use crate::testing::*;
    use std::collections::BTreeMap;

    fn with_gdrdrv(mode: u32, version: Option<&str>) -> Node {
        let mut n = switch_pair();
        let mut m = BTreeMap::new();
        for (name, users) in [("nvidia", vec!["nvidia_uvm", "gdrdrv"]), ("gdrdrv", vec![])] {
            m.insert(
                name.to_string(),
                LoadedModule {
                    state: "Live".into(),
                    used_by: users.into_iter().map(String::from).collect(),
                },
            );
        }
        n.modules.proc_modules = known(m);
        n.addons.gdrcopy.module_version = known(version.map(String::from));
        n.addons.gdrcopy.dev = known(Some(DevNode {
            char_device: true,
            mode,
            uid: 0,
            gid: 0,
        }));
        n
    }

    fn one(n: &Node) -> Finding {
        let f = gdrdrv(n);
        assert_eq!(f.len(), 1, "{f:?}");
        f.into_iter().next().unwrap()
    }

    #[test]
    fn loaded_and_open_to_all_passes_with_its_evidence() {
        let f = one(&with_gdrdrv(0o666, Some("2.4")));
        assert_eq!(f.status, Status::Pass, "{f:?}");
        assert!(f.message.contains("gdrdrv 2.4"), "{}", f.message);
        assert!(f.has_evidence());
    }

    #[test]
    fn a_root_only_node_fails_with_the_mode() {
        let f = one(&with_gdrdrv(0o600, Some("2.4")));
        assert_eq!(f.status, Status::Fail);
        assert!(f.message.contains("mode 0600"), "{}", f.message);
        assert!(f.remediation.unwrap().contains("chmod 0666"));
        let g = one(&with_gdrdrv(0o660, Some("2.4")));
        assert_eq!(g.status, Status::Warn, "{g:?}");
    }

    #[test]
    fn an_unreadable_version_is_an_error_not_a_pass() {
        let mut n = with_gdrdrv(0o666, Some("2.4"));
        n.addons.gdrcopy.module_version =
            Fact::absent("/sys/module/gdrdrv/version", "is a directory");
        let f = gdrdrv(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("is a directory"), "{}", f[0].message);
    }

    #[test]
    fn versions_before_2_1_fail_for_nccl() {
        let f = one(&with_gdrdrv(0o666, Some("2.0")));
        assert_eq!(f.status, Status::Fail);
        assert!(f.message.contains("older than 2.1"), "{}", f.message);
        assert_eq!(major_minor("2.5.1"), Some((2, 5)));
        assert_eq!(major_minor("v2.4-1"), Some((2, 4)));
        assert_eq!(major_minor("x"), None);
    }

    #[test]
    fn not_installed_skips_unless_nccl_asks() {
        let mut n = switch_pair();
        n.modules.proc_modules = known(BTreeMap::new());
        n.addons.gdrcopy.dev = known(None);
        n.addons.gdrcopy.module_version = known(None);
        assert_eq!(one(&n).status, Status::Skip);
        let mut env = BTreeMap::new();
        env.insert("NCCL_GDRCOPY_ENABLE".to_string(), "1".to_string());
        n.env = known(env);
        let f = one(&n);
        assert_eq!(f.status, Status::Fail);
        assert!(f.message.contains("NCCL_GDRCOPY_ENABLE=1"), "{}", f.message);
    }

    #[test]
    fn loaded_without_its_node_fails_and_unknown_node_is_not_a_pass() {
        let mut n = with_gdrdrv(0o666, Some("2.4"));
        n.addons.gdrcopy.dev = known(None);
        let f = one(&n);
        assert_eq!(f.status, Status::Fail);
        assert!(f.message.contains("does not exist"), "{}", f.message);
        n.addons.gdrcopy.dev = Fact::absent("/dev/gdrdrv", "not in this capture");
        assert_eq!(one(&n).status, Status::Skip);
    }

    #[test]
    fn built_for_the_open_flavor_under_the_proprietary_driver_fails() {
        let mut n = with_gdrdrv(0o666, Some("2.5"));
        n.addons.gdrcopy.params = known(Some(crate::parse::colon_map(
            "Version: 2.5\nBuilt for NVIDIA driver flavor: opensource\nUse persistent mapping: yes\n",
        )));
        assert_eq!(one(&n).status, Status::Pass);
        n.nvidia.version_file = known(Some(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023".into(),
        ));
        let f = one(&n);
        assert_eq!(f.status, Status::Fail, "{f:?}");
        assert!(f.message.contains("built for the open"), "{}", f.message);
    }

    #[test]
    fn a_damaged_record_is_an_error() {
        let mut n = with_gdrdrv(0o666, Some("2.4"));
        n.addons.gdrcopy.dev = Fact::absent(
            "/dev/gdrdrv",
            format!(
                "{}gdrdoctor/dev-nodes.json: expected value",
                crate::model::DAMAGED
            ),
        );
        assert_eq!(one(&n).status, Status::Error);
    }

    #[test]
    fn not_a_user_of_nvidia_warns() {
        let mut n = with_gdrdrv(0o666, Some("2.4"));
        if let Fact::Known { value, .. } = &mut n.modules.proc_modules {
            value.get_mut("nvidia").unwrap().used_by = vec!["nvidia_uvm".into()];
        }
        let f = one(&n);
        assert_eq!(f.status, Status::Warn);
        assert!(f.message.contains("not a user of the nvidia module"));
    }
}
