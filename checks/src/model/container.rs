//! The job container's own view (issue 39 item 1): what a process in this container can use,
//! which is not what the host offers. Host checks pass while the pod has no
//! `/dev/infiniband/uverbs*`, no `CAP_IPC_LOCK`, a small memlock limit or a 64 MiB `/dev/shm`,
//! and NCCL silently falls back to sockets. Collected live only (`src/collect/container.rs`)
//! when gdrdoctor runs inside a container (detected, or `check --in-container`).

use super::fact::Fact;
use serde::{Deserialize, Serialize};

/// What the job's container sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerView {
    /// Why gdrdoctor judges a container: `--in-container`, `/.dockerenv`, `/run/.containerenv`,
    /// `/proc/1/cgroup: ...kubepods...`, `KUBERNETES_SERVICE_HOST`, `container=podman`.
    pub detected_by: Vec<String>,
    /// The device nodes a GPUDirect job opens, each tried `open(O_RDWR)` and closed.
    pub devices: Vec<DeviceNode>,
    /// RDMA devices the kernel has (`/sys/class/infiniband_verbs/uverbs*`, whose `dev` names the
    /// node): `uverbsN` -> the ibdev it serves. sysfs is the host's inside a container, so this
    /// is what the job could have.
    pub verbs_expected: Fact<Vec<(String, String)>>,
    /// GPUs the driver lists (`/proc/driver/nvidia/gpus/*/information` Device Minor).
    pub gpu_minors: Fact<Vec<u32>>,
    /// `CapEff` of `/proc/self/status`.
    pub cap_eff: Fact<u64>,
    /// `/proc/self/uid_map`: `0 0 4294967295` in the initial user namespace. In any other
    /// (rootless podman, Kubernetes `hostUsers: false`) `CapEff` holds capabilities of that
    /// namespace only, and the kernel's pinning checks (`capable(CAP_IPC_LOCK)` in
    /// `ib_umem_get()` and `mlock`) ask for them in the initial one.
    #[serde(default = "uid_map_not_recorded")]
    pub uid_map: Fact<String>,
    /// `statvfs("/dev/shm")`.
    pub shm: Fact<Shm>,
    /// `libnccl-net*.so` net plugins the loader will find, in its order.
    pub net_plugins: Vec<Plugin>,
    /// Where the plugins were looked for.
    pub plugin_searched: Vec<String>,
    /// `gdrdrv` loaded on the host (`/proc/modules`): then `/dev/gdrdrv` is expected.
    pub gdrdrv_loaded: Option<bool>,
}

fn uid_map_not_recorded() -> Fact<String> {
    Fact::absent(
        "/proc/self/uid_map",
        "not recorded (a view from an older gdrdoctor)",
    )
}

/// Whether a `uid_map` is the initial user namespace's (one line `0 0 4294967295`).
pub fn initial_user_ns(uid_map: &str) -> bool {
    let rows: Vec<Vec<&str>> = uid_map
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect();
    matches!(rows.as_slice(), [r] if r.as_slice() == ["0", "0", "4294967295"])
}

/// One device node and what `open(O_RDWR)` said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    pub path: String,
    /// `rdma` (uverbs, rdma_cm), `gpu` (nvidiactl, nvidia-uvm, nvidiaN), `gdrcopy` (gdrdrv).
    pub kind: String,
    pub state: DeviceState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum DeviceState {
    /// Opened read-write and closed.
    Openable,
    /// No such file: the runtime did not pass the device in.
    Missing,
    /// There, but `open` failed: `EPERM` is the device cgroup, `EACCES` the file mode.
    Refused { errno: i32, error: String },
    /// There, but not a character device.
    NotCharDevice,
}

impl DeviceState {
    pub fn openable(&self) -> bool {
        matches!(self, DeviceState::Openable)
    }
    pub fn describe(&self) -> String {
        match self {
            DeviceState::Openable => "present, opened O_RDWR".into(),
            DeviceState::Missing => "missing (no such file)".into(),
            DeviceState::Refused { errno, error } => {
                let who = match *errno {
                    1 => " (EPERM: the container's device cgroup denies it)",
                    13 => " (EACCES: the file's mode or owner)",
                    _ => "",
                };
                format!("present, open failed: {error}{who}")
            }
            DeviceState::NotCharDevice => "present, but not a character device".into(),
        }
    }
}

/// `/dev/shm` as `statvfs` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shm {
    pub total: u64,
    pub free: u64,
}

/// A NCCL net plugin file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plugin {
    pub path: String,
    /// `LD_LIBRARY_PATH`, `ld.so.cache`, `default library directory`.
    pub origin: String,
}

/// `CAP_IPC_LOCK`'s bit in a capability mask.
pub const CAP_IPC_LOCK: u32 = 14;
