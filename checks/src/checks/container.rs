//! `container.*`: the job container's own view (issue 39 item 1). Host checks pass while the
//! pod has no `/dev/infiniband/uverbs*`, no `CAP_IPC_LOCK` with a small memlock limit, a 64 MiB
//! `/dev/shm`, or an environment that turns NCCL's IB transport off: NCCL then falls back to
//! sockets without an error. These checks judge what a process in this container can use; they
//! skip outside a container (or in a snapshot), saying how to run them.
//!
//! `container.host-diff` compares this container's report with the host's
//! (`check --compare-host HOST.json`): [`compare_host`].

use crate::model::{ContainerView, DeviceNode, Fact, Node, CAP_IPC_LOCK};
use crate::parse::human_bytes;
use crate::report::{Finding, Report, Status};

/// The container view, or the one skip finding that says why there is none.
fn view<'a>(id: &str, node: &'a Node) -> Result<&'a ContainerView, Vec<Finding>> {
    match &node.container {
        Fact::Known { value, .. } => Ok(value),
        Fact::Absent { source, reason } => Err(vec![Finding::new(
            id,
            Status::Skip,
            "node",
            format!("no container view: {reason}"),
        )
        .evidence(source.clone(), reason.clone())]),
    }
}

fn detected(v: &ContainerView) -> String {
    v.detected_by.join(", ")
}

fn list(nodes: &[&DeviceNode]) -> String {
    nodes
        .iter()
        .map(|d| format!("{}: {}", d.path, d.state.describe()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `container.devices`: the RDMA and GPU device nodes are present and openable.
pub fn devices(node: &Node) -> Vec<Finding> {
    const ID: &str = "container.devices";
    let v = match view(ID, node) {
        Ok(v) => v,
        Err(f) => return f,
    };
    let mut out = Vec::new();
    // RDMA: one uverbs node per RDMA device the kernel has.
    let uverbs: Vec<&DeviceNode> = v
        .devices
        .iter()
        .filter(|d| d.kind == "rdma" && d.path.contains("/uverbs"))
        .collect();
    let open: Vec<&&DeviceNode> = uverbs.iter().filter(|d| d.state.openable()).collect();
    match &v.verbs_expected {
        Fact::Known { value: exp, source } if exp.is_empty() && uverbs.is_empty() => {
            out.push(
                Finding::new(ID, Status::Skip, "/dev/infiniband", "the kernel has no rdma device (no uverbs in sysfs): nothing to pass into the container")
                    .evidence(source.clone(), "none"),
            );
        }
        Fact::Absent { source, reason } if uverbs.is_empty() => {
            out.push(
                Finding::new(ID, Status::Error, "/dev/infiniband", "no rdma device node here, and whether the kernel has rdma devices cannot be read")
                    .evidence(source.clone(), format!("unknown ({reason})"))
                    .fix("`ls /sys/class/infiniband_verbs` on the host says which uverbs nodes the job should get"),
            );
        }
        exp => {
            let expected = exp.get().map(|e| e.len()).unwrap_or(uverbs.len());
            let f = if open.is_empty() {
                Finding::new(ID, Status::Fail, "/dev/infiniband", format!("no rdma device node can be opened in this container ({} expected): nccl cannot open any hca and falls back to sockets (NET/Socket), ibv_get_device_list returns nothing", expected.max(1)))
                    .fix("pass the RDMA devices into the container: Kubernetes: the RDMA shared device plugin or the NVIDIA network operator's resource (`rdma/...` in the pod's resources.limits), or a privileged pod; docker/podman: `--device=/dev/infiniband` (and `--cap-add=IPC_LOCK`); a device cgroup that refuses them (EPERM) needs the runtime's device rule (`c 231:* rwm`)")
            } else if open.len() < expected {
                Finding::new(ID, Status::Warn, "/dev/infiniband", format!("{} of {} rdma devices can be opened in this container: nccl uses only those (fine if the pod was given a subset on purpose)", open.len(), expected))
                    .fix("request every rail's RDMA resource for the pod, or pass all of /dev/infiniband")
            } else {
                Finding::new(
                    ID,
                    Status::Pass,
                    "/dev/infiniband",
                    format!(
                        "all {} rdma device nodes are present and open read-write",
                        open.len()
                    ),
                )
            };
            let mut f = f.evidence(
                "open(O_RDWR)",
                list(&uverbs).if_empty("no /dev/infiniband/uverbs* node"),
            );
            if let Fact::Known { value, source } = &v.verbs_expected {
                f = f.evidence(
                    source.clone(),
                    value
                        .iter()
                        .map(|(u, i)| format!("{u} -> {i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                        .if_empty("none"),
                );
            }
            if let Some(cm) = v.devices.iter().find(|d| d.path.ends_with("/rdma_cm")) {
                f = f.evidence(cm.path.clone(), cm.state.describe());
            }
            out.push(f.evidence("container", detected(v)));
        }
    }
    // GPUs: the control nodes and one node per GPU.
    let gpu: Vec<&DeviceNode> = v.devices.iter().filter(|d| d.kind == "gpu").collect();
    let ctl_bad: Vec<&DeviceNode> = gpu
        .iter()
        .copied()
        .filter(|d| {
            (d.path.ends_with("/nvidiactl") || d.path.ends_with("/nvidia-uvm"))
                && !d.state.openable()
        })
        .collect();
    let per_gpu: Vec<&DeviceNode> = gpu
        .iter()
        .copied()
        .filter(|d| {
            d.path
                .trim_start_matches("/dev/nvidia")
                .chars()
                .all(|c| c.is_ascii_digit())
                && d.path.len() > "/dev/nvidia".len()
        })
        .collect();
    let gpu_open = per_gpu.iter().filter(|d| d.state.openable()).count();
    let minors = v.gpu_minors.get().map(|m| m.len()).unwrap_or(0);
    if minors == 0 && per_gpu.is_empty() {
        out.push(
            Finding::new(
                ID,
                Status::Skip,
                "/dev/nvidia*",
                "the nvidia driver lists no gpu: nothing to pass into the container",
            )
            .evidence(
                v.gpu_minors.source().to_string(),
                v.gpu_minors.describe(|_| "no gpu".into()),
            ),
        );
    } else {
        let f = if gpu_open == 0 || !ctl_bad.is_empty() {
            Finding::new(ID, Status::Fail, "/dev/nvidia*", format!("the gpus cannot be used in this container: {}", if gpu_open == 0 { "no /dev/nvidiaN node opens".to_string() } else { format!("{} cannot be opened", ctl_bad.iter().map(|d| d.path.as_str()).collect::<Vec<_>>().join(", ")) }))
                .fix("run the job with the NVIDIA container runtime (`--gpus all` / `--runtime=nvidia`, Kubernetes: `nvidia.com/gpu` in resources.limits with the device plugin); a device cgroup that refuses them (EPERM) needs `c 195:* rwm` and the nvidia-uvm major")
        } else {
            Finding::new(ID, Status::Pass, "/dev/nvidia*", format!("{gpu_open} gpu device node(s) of the driver's {minors} open read-write, with nvidiactl and nvidia-uvm (a pod sees the gpus it was given)"))
        };
        out.push(f.evidence("open(O_RDWR)", list(&gpu)));
    }
    // gdrcopy's device, where the host runs gdrdrv.
    if let Some(g) = v.devices.iter().find(|d| d.kind == "gdrcopy") {
        let wanted = node
            .env
            .get()
            .and_then(|e| e.get("NCCL_GDRCOPY_ENABLE"))
            .is_some_and(|x| x.trim() == "1");
        let f = match (g.state.openable(), v.gdrdrv_loaded, wanted) {
            (true, _, _) => Finding::new(ID, Status::Pass, "/dev/gdrdrv", "gdrcopy's device opens read-write"),
            (false, _, true) => Finding::new(ID, Status::Fail, "/dev/gdrdrv", "NCCL_GDRCOPY_ENABLE=1 but /dev/gdrdrv cannot be opened here: nccl's gdrcopy path is off")
                .fix("pass /dev/gdrdrv into the container (`--device=/dev/gdrdrv`; the GPU operator's gdrcopy option mounts it)"),
            (false, Some(true), false) => Finding::new(ID, Status::Warn, "/dev/gdrdrv", "the host runs gdrdrv but /dev/gdrdrv cannot be opened here: gdrcopy (nccl's NCCL_GDRCOPY_ENABLE, ucx gdr_copy, nvshmem) is unusable in this container")
                .fix("pass /dev/gdrdrv into the container if the job uses gdrcopy"),
            (false, _, false) => Finding::new(ID, Status::Skip, "/dev/gdrdrv", "gdrdrv is not loaded and NCCL_GDRCOPY_ENABLE is not set: gdrcopy is not in use"),
        };
        out.push(f.evidence(g.path.clone(), g.state.describe()));
    }
    out
}

trait IfEmpty {
    fn if_empty(self, other: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, other: &str) -> String {
        if self.is_empty() {
            other.to_string()
        } else {
            self
        }
    }
}

/// `container.ipc-lock`: RDMA registration can pin the job's memory: `CAP_IPC_LOCK` (which
/// lifts RLIMIT_MEMLOCK for `ib_umem_get`), or an unlimited memlock limit.
pub fn ipc_lock(node: &Node) -> Vec<Finding> {
    const ID: &str = "container.ipc-lock";
    let v = match view(ID, node) {
        Ok(v) => v,
        Err(f) => return f,
    };
    let (cap, cap_src) = match &v.cap_eff {
        Fact::Known { value, source } => (*value, source.clone()),
        Fact::Absent { source, reason } => {
            return vec![Finding::new(
                ID,
                Status::Error,
                "node",
                "cannot read the effective capabilities",
            )
            .evidence(source.clone(), format!("unknown ({reason})"))]
        }
    };
    let set = cap & (1u64 << CAP_IPC_LOCK) != 0;
    // The capability lifts the limit only in the initial user namespace: in another one
    // (rootless podman, Kubernetes `hostUsers: false`) `capable(CAP_IPC_LOCK)` in
    // `ib_umem_get()` is false whatever CapEff says.
    let ns = match &v.uid_map {
        Fact::Known { value, .. } => Some(crate::model::container::initial_user_ns(value)),
        Fact::Absent { .. } => None,
    };
    let has = set && ns == Some(true);
    let cap_text = format!(
        "CapEff {cap:016x}: CAP_IPC_LOCK {}",
        match (set, ns) {
            (false, _) => "not set",
            (true, Some(true)) => "set, in the initial user namespace",
            (true, Some(false)) => "set, but only in a user namespace of its own (uid_map is not `0 0 4294967295`): it does not lift RLIMIT_MEMLOCK for pinning",
            (true, None) => "set, in a user namespace that cannot be told (uid_map unreadable)",
        }
    );
    let f = match (&node.memlock, has) {
        (_, true) => Finding::new(
            ID,
            Status::Pass,
            "node",
            "CAP_IPC_LOCK is effective: rdma registrations are not bounded by RLIMIT_MEMLOCK",
        ),
        (Fact::Known { value, .. }, false) if set && ns.is_none() && value.soft.is_some() => {
            Finding::new(
                ID,
                Status::Error,
                "node",
                "CAP_IPC_LOCK is set, but whether it counts (the initial user namespace) cannot be told and RLIMIT_MEMLOCK is finite",
            )
        }
        (Fact::Known { value, .. }, false) if value.soft.is_none() => Finding::new(
            ID,
            Status::Pass,
            "node",
            "no CAP_IPC_LOCK, but RLIMIT_MEMLOCK is unlimited: rdma registrations can pin memory",
        ),
        (Fact::Known { value, .. }, false) if set => {
            let lim = value.soft.unwrap_or(0);
            Finding::new(ID, Status::Fail, "node", format!("CAP_IPC_LOCK is set only in the container's own user namespace and RLIMIT_MEMLOCK is {}: the kernel asks for the capability in the initial namespace, so ibv_reg_mr fails with ENOMEM beyond the limit", human_bytes(lim)))
                .fix("raise the memlock limit, which counts in any user namespace (`--ulimit memlock=-1:-1` for podman/docker; `LimitMEMLOCK=infinity` for the container runtime's unit), or run the pod in the host's user namespace (Kubernetes `hostUsers: true`; podman without `--userns`/rootless)")
        }
        (Fact::Known { value, .. }, false) => {
            let lim = value.soft.unwrap_or(0);
            Finding::new(ID, Status::Fail, "node", format!("no CAP_IPC_LOCK and RLIMIT_MEMLOCK is {}: ibv_reg_mr fails with ENOMEM beyond it (NCCL: `NET/IB : ... ibv_reg_mr failed`, or it falls back to sockets)", human_bytes(lim)))
                .fix("give the job's container CAP_IPC_LOCK (Kubernetes: `securityContext.capabilities.add: [\"IPC_LOCK\"]`; docker/podman: `--cap-add=IPC_LOCK`) or an unlimited memlock limit (`--ulimit memlock=-1:-1`; containerd and dockerd pass their own `LimitMEMLOCK` to pods)")
        }
        (Fact::Absent { reason, .. }, false) => Finding::new(
            ID,
            Status::Error,
            "node",
            format!("no CAP_IPC_LOCK and the memlock limit cannot be read ({reason})"),
        ),
    };
    vec![f.evidence(cap_src, cap_text).evidence(
        node.memlock.source().to_string(),
        node.memlock.describe(|r| {
            format!(
                "soft {} / hard {}",
                r.soft
                    .map(human_bytes)
                    .unwrap_or_else(|| "unlimited".into()),
                r.hard
                    .map(human_bytes)
                    .unwrap_or_else(|| "unlimited".into())
            )
        }),
    )]
}

/// `/dev/shm` at or below Docker's default: NCCL's shared-memory transport fails.
pub const SHM_FAIL: u64 = 64 << 20;
/// Below this, a warning: several GPUs' NCCL buffers and data-loader workers share it.
pub const SHM_WARN: u64 = 1 << 30;

/// `container.shm`: `/dev/shm` is large enough for NCCL's shared-memory transport.
pub fn shm(node: &Node) -> Vec<Finding> {
    const ID: &str = "container.shm";
    let v = match view(ID, node) {
        Ok(v) => v,
        Err(f) => return f,
    };
    let (s, src) = match &v.shm {
        Fact::Known { value, source } => (*value, source.clone()),
        Fact::Absent { source, reason } => {
            return vec![Finding::new(ID, Status::Fail, "/dev/shm", format!("/dev/shm cannot be used: {reason}: nccl's shm transport and cuda ipc need it"))
                .evidence(source.clone(), reason.clone())
                .fix("mount a tmpfs at /dev/shm (Kubernetes: an `emptyDir: {medium: Memory}` volume at /dev/shm; docker: `--shm-size=16g` or `--ipc=host`)")]
        }
    };
    let observed = format!(
        "size {}, free {}",
        human_bytes(s.total),
        human_bytes(s.free)
    );
    let fix = "give the container a larger /dev/shm: Kubernetes: an `emptyDir: {medium: Memory, sizeLimit: 16Gi}` volume mounted at /dev/shm; docker/podman: `--shm-size=16g` (or `--ipc=host`)";
    let f = if s.total <= SHM_FAIL {
        Finding::new(ID, Status::Fail, "/dev/shm", format!("/dev/shm is only {}: nccl's shared-memory transport between the job's gpus fails (`NCCL WARN Error while creating shared memory segment`, bus errors)", human_bytes(s.total)))
            .expected(src, observed, format!("> {} (>= {} recommended)", human_bytes(SHM_FAIL), human_bytes(SHM_WARN)))
            .fix(fix)
    } else if s.total < SHM_WARN {
        Finding::new(ID, Status::Warn, "/dev/shm", format!("/dev/shm is {}: enough for a few nccl peers, tight for 8 gpus plus data-loader workers", human_bytes(s.total)))
            .expected(src, observed, format!(">= {}", human_bytes(SHM_WARN)))
            .fix(fix)
    } else {
        Finding::new(
            ID,
            Status::Pass,
            "/dev/shm",
            format!("/dev/shm is {}", human_bytes(s.total)),
        )
        .evidence(src, observed)
    };
    vec![f]
}

/// An `NCCL_*` setting that turns a GPUDirect path off, and whether it costs GDR (a `fail`).
fn disabling(k: &str, val: &str) -> Option<(bool, &'static str)> {
    let v = val.trim();
    let on = |x: &str| x.parse::<i64>().is_ok_and(|n| n != 0);
    match k {
        "NCCL_IB_DISABLE" if on(v) => Some((
            true,
            "nccl's ib/roce transport is off: inter-node traffic goes over sockets",
        )),
        "NCCL_NET" if v.eq_ignore_ascii_case("socket") => Some((
            true,
            "nccl is told to use its socket transport: no rdma, no gdr",
        )),
        "NCCL_NET_GDR_LEVEL" if crate::topo::parse_level(v) == Some(0) => Some((
            true,
            "gpudirect rdma is off for every gpu-nic pair (level LOC)",
        )),
        "NCCL_DMABUF_ENABLE" if v == "0" => Some((
            false,
            "nccl's dma-buf gdr path is off: gdr needs a peer-memory client (nvidia_peermem)",
        )),
        "NCCL_P2P_DISABLE" if on(v) => Some((
            false,
            "gpu-to-gpu p2p is off: nccl stages intra-node traffic through host memory",
        )),
        "NCCL_P2P_LEVEL" if crate::topo::parse_level(v) == Some(0) => {
            Some((false, "gpu-to-gpu p2p is off (level LOC)"))
        }
        "NCCL_SHM_DISABLE" if on(v) => Some((false, "nccl's shared-memory transport is off")),
        _ => None,
    }
}

/// `container.nccl`: the NCCL library and net plugins the job's loader finds, and the `NCCL_*`
/// settings that turn GPUDirect off.
pub fn nccl(node: &Node) -> Vec<Finding> {
    const ID: &str = "container.nccl";
    let v = match view(ID, node) {
        Ok(v) => v,
        Err(f) => return f,
    };
    let env = node.env.get().cloned().unwrap_or_default();
    let nccl_vars: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .map(|(k, x)| (k.clone(), x.clone()))
        .collect();
    let mut costs = Vec::new();
    let mut limits = Vec::new();
    for (k, x) in &nccl_vars {
        if let Some((gdr, why)) = disabling(k, x) {
            let line = format!("{k}={x}: {why}");
            if gdr {
                costs.push(line)
            } else {
                limits.push(line)
            }
        }
    }
    // The net plugin NCCL_NET_PLUGIN names (NCCL loads `libnccl-net-<name>.so`, or the name
    // itself when it is a file name; `none` loads none), else `libnccl-net.so`.
    let wanted = env.get("NCCL_NET_PLUGIN").map(|s| s.trim().to_string());
    let plugin_missing = match wanted.as_deref() {
        Some("none") | Some("") => None,
        Some(w) => {
            let names = [format!("libnccl-net-{w}.so"), w.to_string()];
            let found = v.net_plugins.iter().any(|p| {
                names
                    .iter()
                    .any(|n| p.path.ends_with(&format!("/{n}")) || p.path == *n)
            });
            (!found).then(|| format!("NCCL_NET_PLUGIN={w}: no {} in the loader's paths: nccl warns and uses its internal ib transport", names[0]))
        }
        None => None,
    };
    let lib = node.live.nccl.get().and_then(|f| f.libraries.first());
    let lib_text = match (&node.live.nccl, lib) {
        (_, Some(l)) => format!(
            "{} {} ({}): NCCL's GDR rules of that version apply (gdr.gpu)",
            l.path,
            l.version.as_deref().unwrap_or("version unknown"),
            l.origin
        ),
        (Fact::Known { value, .. }, None) => format!(
            "no libnccl.so.2 found ({}): the job brings its own, or NCCL is linked statically",
            value.searched.join(", ")
        ),
        (Fact::Absent { reason, .. }, None) => format!("unknown ({reason})"),
    };
    // NCCL_IB_HCA naming HCAs this container cannot open: NCCL filters its device list by it,
    // so none left is no IB transport at all (sockets).
    if let Some((hca, none)) = hca_filter(v, env.get("NCCL_IB_HCA").map(String::as_str)) {
        if none {
            costs.push(hca);
        } else {
            limits.push(hca);
        }
    }
    let f = if !costs.is_empty() {
        Finding::new(ID, Status::Fail, "node", format!("the job's environment turns gpudirect rdma off: {}", costs.join("; ")))
            .fix(format!("remove {} from the job's environment (pod spec, image ENV, launcher script) unless you meant to run without rdma", costs.iter().filter_map(|c| c.split(':').next()).collect::<Vec<_>>().join(", ")))
    } else if let Some(m) = &plugin_missing {
        Finding::new(ID, Status::Warn, "node", m.clone())
            .fix("install the plugin in the image (e.g. /usr/lib/x86_64-linux-gnu or a LD_LIBRARY_PATH directory), or unset NCCL_NET_PLUGIN")
    } else if !limits.is_empty() {
        Finding::new(
            ID,
            Status::Warn,
            "node",
            format!("the job's environment limits nccl: {}", limits.join("; ")),
        )
        .fix("remove the variable unless it is a deliberate workaround")
    } else if lib.is_none() {
        Finding::new(ID, Status::Warn, "node", "no libnccl.so.2 is on this container's loader paths or python environments: gdrdoctor judges gdr with the newest nccl rules it knows")
            .fix("run gdrdoctor in the job's own image (the one with the framework's NCCL), or pass `--nccl-version X.Y.Z`")
    } else {
        Finding::new(
            ID,
            Status::Pass,
            "node",
            "no NCCL_* setting turns gpudirect off, and the loader finds libnccl.so.2",
        )
    };
    let plugins = v
        .net_plugins
        .iter()
        .map(|p| format!("{} ({})", p.path, p.origin))
        .collect::<Vec<_>>()
        .join(", ");
    vec![f
        .evidence(node.live.nccl.source().to_string(), lib_text)
        .evidence(
            "libnccl-net*.so",
            if plugins.is_empty() {
                format!("none in {}", v.plugin_searched.join(", "))
            } else {
                plugins
            },
        )
        .evidence(
            node.env.source().to_string(),
            if nccl_vars.is_empty() {
                "no NCCL_* variable set".to_string()
            } else {
                nccl_vars
                    .iter()
                    .map(|(k, x)| format!("{k}={x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        )]
}

/// `NCCL_IB_HCA` against the RDMA devices whose uverbs node opens here: a line naming what
/// it selects that is missing, and whether nothing it selects is usable. An exclude list (`^`)
/// is not judged.
fn hca_filter(v: &ContainerView, hca: Option<&str>) -> Option<(String, bool)> {
    let raw = hca?.trim();
    if raw.is_empty() || raw.starts_with('^') {
        return None;
    }
    let exact = raw.starts_with('=');
    let names: Vec<&str> = raw
        .trim_start_matches('=')
        .split(',')
        .map(|e| e.split(':').next().unwrap_or("").trim())
        .filter(|e| !e.is_empty())
        .collect();
    let usable: Vec<&str> = v
        .verbs_expected
        .get()
        .into_iter()
        .flatten()
        .filter(|(u, _)| {
            v.devices
                .iter()
                .any(|d| d.path.ends_with(&format!("/{u}")) && d.state.openable())
        })
        .map(|(_, ib)| ib.as_str())
        .collect();
    let matches = |n: &str, ib: &str| if exact { ib == n } else { ib.starts_with(n) };
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !usable.iter().any(|ib| matches(n, ib)))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let none = missing.len() == names.len();
    Some((
        format!(
            "NCCL_IB_HCA={raw}: {} not usable in this container (usable: {}){}",
            missing.join(", "),
            if usable.is_empty() {
                "none".to_string()
            } else {
                usable.join(", ")
            },
            if none {
                ": nccl finds no ib device and uses sockets"
            } else {
                ""
            }
        ),
        none,
    ))
}

/// `container.host-diff` in the registry: the comparison needs the host's report, which only
/// `check --compare-host` has ([`compare_host`]).
pub fn host_diff(_node: &Node) -> Vec<Finding> {
    vec![Finding::new(
        "container.host-diff",
        Status::Skip,
        "node",
        "no host report to compare with: `gdrdoctor check --in-container --compare-host HOST.json` (HOST.json: `gdrdoctor check --format json` on the host)",
    )]
}

/// Findings whose change costs GPUDirect RDMA (the GDR path itself, or what it stands on).
const GDR_IDS: &[&str] = &[
    "gdr.gpu",
    "rdma.devices",
    "rdma.ports",
    "mem.memlock",
    "kmod.nvidia-peermem",
    "kmod.dmabuf",
    "gpu.gdr-support",
    "container.devices",
    "container.ipc-lock",
    "container.nccl",
];

fn rank(s: Status) -> u8 {
    match s {
        Status::Pass => 0,
        Status::Skip => 1,
        Status::Warn => 2,
        Status::Error => 3,
        Status::Fail => 4,
    }
}

/// What differs between the host's report and this container's: every finding that is worse
/// here than on the host (or only here, not passing), and every GPU-NIC pair with GDR on the
/// host but not here. A difference in a finding GDR stands on, or a pair that lost GDR, is a
/// `fail`; others `warn`. No difference: one `pass` counting what was compared.
pub fn compare_host(host: &Report, here: &Report, host_source: &str) -> Vec<Finding> {
    const ID: &str = "container.host-diff";
    let mut out = Vec::new();
    let mut compared = 0;
    for f in here.findings.iter().filter(|f| f.id != ID) {
        let h = host
            .findings
            .iter()
            .find(|h| h.id == f.id && h.subject == f.subject);
        let worse = match h {
            Some(h) => {
                compared += 1;
                rank(f.status) > rank(h.status) && f.status != Status::Skip
            }
            None => matches!(f.status, Status::Fail | Status::Warn | Status::Error),
        };
        if !worse {
            continue;
        }
        let gdr = GDR_IDS.contains(&f.id.as_str()) && f.status != Status::Warn;
        let was = match h {
            Some(h) => format!("{}: {}", h.status.as_str(), h.message),
            None => "not judged on the host".to_string(),
        };
        let mut d = Finding::new(
            ID,
            if gdr { Status::Fail } else { Status::Warn },
            format!("{} {}", f.id, f.subject),
            format!(
                "{} here, {} on the host{}: {}",
                f.status.as_str(),
                h.map(|h| h.status.as_str()).unwrap_or("not judged"),
                if gdr { " (costs gpudirect rdma)" } else { "" },
                f.message
            ),
        )
        .expected(
            format!("{} in this container", f.id),
            format!("{}: {}", f.status.as_str(), f.message),
            format!("as on the host ({host_source}): {was}"),
        );
        if let Some(r) = &f.remediation {
            d = d.fix(r.clone());
        }
        out.push(d);
    }
    for p in &here.gdr {
        let Some(h) = host.gdr.iter().find(|h| h.gpu == p.gpu && h.nic == p.nic) else {
            continue;
        };
        compared += 1;
        if h.enabled && !p.enabled {
            out.push(
                Finding::new(
                    ID,
                    Status::Fail,
                    format!("{}|{}", p.gpu, p.nic),
                    format!(
                        "gpudirect rdma is on for this pair on the host but off in this container: {}",
                        p.reasons.join("; ")
                    ),
                )
                .expected(
                    "gdr (this container)",
                    "off",
                    format!("on, as on the host ({host_source})"),
                ),
            );
        }
    }
    // A pair with GDR on the host that this container does not have at all (its RDMA device
    // or GPU is not in the container: RDMA exclusive netns mode, a device plugin that gave
    // fewer devices) is worse too.
    for h in host.gdr.iter().filter(|h| h.enabled) {
        if here.gdr.iter().any(|p| p.gpu == h.gpu && p.nic == h.nic) {
            continue;
        }
        compared += 1;
        out.push(
            Finding::new(
                ID,
                Status::Fail,
                format!("{}|{}", h.gpu, h.nic),
                "gpudirect rdma is on for this pair on the host, and this container does not have the pair (its gpu or rdma device is not visible here)",
            )
            .expected(
                "gdr (this container)",
                "no such pair",
                format!("on, as on the host ({host_source})"),
            )
            .fix("give the container the GPU and the RDMA device (the RDMA device plugin / `--device /dev/infiniband/uverbsN`; in RDMA exclusive netns mode, move the device into the pod's namespace); `container.devices` names the device nodes that are missing"),
        );
    }
    if out.is_empty() {
        out.push(
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!("nothing is worse in this container than on the host ({compared} findings and gdr pairs compared)"),
            )
            .evidence(host_source.to_string(), format!("{} findings, {} gdr pairs, host {}", host.findings.len(), host.gdr.len(), host.host.hostname.as_deref().unwrap_or("?"))),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{DeviceState, Rlimit, Shm};
    use crate::testing::*;

    fn dev(path: &str, kind: &str, state: DeviceState) -> DeviceNode {
        DeviceNode {
            path: path.into(),
            kind: kind.into(),
            state,
        }
    }

    fn in_container(devs: Vec<DeviceNode>) -> Node {
        let mut n = switch_pair();
        n.container = known(ContainerView {
            detected_by: vec!["--in-container".into()],
            devices: devs,
            verbs_expected: known(vec![("uverbs0".into(), "mlx5_0".into())]),
            gpu_minors: known(vec![0]),
            cap_eff: known(0x00000000a80425fb),
            uid_map: known("         0          0 4294967295".to_string()),
            shm: known(Shm {
                total: 64 << 20,
                free: 64 << 20,
            }),
            net_plugins: vec![],
            plugin_searched: vec!["LD_LIBRARY_PATH".into()],
            gdrdrv_loaded: Some(false),
        });
        n
    }

    fn healthy_devs() -> Vec<DeviceNode> {
        vec![
            dev("/dev/infiniband/uverbs0", "rdma", DeviceState::Openable),
            dev("/dev/infiniband/rdma_cm", "rdma", DeviceState::Openable),
            dev("/dev/nvidiactl", "gpu", DeviceState::Openable),
            dev("/dev/nvidia-uvm", "gpu", DeviceState::Openable),
            dev("/dev/nvidia0", "gpu", DeviceState::Openable),
        ]
    }

    #[test]
    fn outside_a_container_every_check_skips_with_the_reason() {
        let n = switch_pair();
        for f in [devices(&n), ipc_lock(&n), shm(&n), nccl(&n), host_diff(&n)] {
            assert_eq!(f[0].status, Status::Skip, "{f:?}");
        }
    }

    #[test]
    fn missing_or_refused_rdma_nodes_fail_and_say_the_device_cgroup() {
        let n = in_container(healthy_devs());
        let f = devices(&n);
        assert!(f.iter().all(|x| x.status == Status::Pass), "{f:#?}");
        let mut d = healthy_devs();
        d[0].state = DeviceState::Refused {
            errno: 1,
            error: "Operation not permitted (os error 1)".into(),
        };
        let f = devices(&in_container(d));
        let r = f.iter().find(|x| x.subject == "/dev/infiniband").unwrap();
        assert_eq!(r.status, Status::Fail);
        assert!(r.message.contains("falls back to sockets"), "{}", r.message);
        assert!(
            r.evidence[0]
                .observed
                .contains("EPERM: the container's device cgroup denies it"),
            "{:?}",
            r.evidence
        );
        // sysfs unreadable and no node: cannot tell, never a fail or a pass.
        let mut n = in_container(vec![]);
        if let Fact::Known { value, .. } = &mut n.container {
            value.verbs_expected = Fact::absent("/sys/class/infiniband_verbs", "permission denied");
        }
        let f = devices(&n);
        assert_eq!(f[0].status, Status::Error, "{f:#?}");
        let mut d = healthy_devs();
        d[4].state = DeviceState::Missing;
        let f = devices(&in_container(d));
        let g = f.iter().find(|x| x.subject == "/dev/nvidia*").unwrap();
        assert_eq!(g.status, Status::Fail, "{g:#?}");
    }

    #[test]
    fn ipc_lock_or_unlimited_memlock() {
        let mut n = in_container(healthy_devs());
        // Docker's default set (no IPC_LOCK) with memlock 64 KiB: fail.
        n.memlock = known(Rlimit {
            soft: Some(64 << 10),
            hard: Some(64 << 10),
        });
        let f = ipc_lock(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(f[0].message.contains("64 KiB"), "{}", f[0].message);
        assert!(f[0].evidence[0].observed.ends_with("CAP_IPC_LOCK not set"));
        // With CAP_IPC_LOCK (bit 14) the limit does not bind.
        if let Fact::Known { value, .. } = &mut n.container {
            value.cap_eff = known(0x00000000a80425fb | (1 << 14));
        }
        assert_eq!(ipc_lock(&n)[0].status, Status::Pass);
        // ... but not in a user namespace of its own (rootless podman, `hostUsers: false`):
        // the kernel asks for CAP_IPC_LOCK in the initial namespace.
        if let Fact::Known { value, .. } = &mut n.container {
            value.uid_map = known(
                "         0       1000          1\n         1     100000      65536".to_string(),
            );
        }
        let f = ipc_lock(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(f[0].message.contains("user namespace"), "{}", f[0].message);
        assert!(f[0].evidence[0].observed.contains("does not lift"));
        // Unlimited memlock still passes there.
        n.memlock = known(Rlimit {
            soft: None,
            hard: None,
        });
        assert_eq!(ipc_lock(&n)[0].status, Status::Pass);
        // An unreadable uid_map with a finite limit: not a pass.
        n.memlock = known(Rlimit {
            soft: Some(64 << 10),
            hard: Some(64 << 10),
        });
        if let Fact::Known { value, .. } = &mut n.container {
            value.uid_map = Fact::absent("/proc/self/uid_map", "No such file or directory");
        }
        assert_eq!(ipc_lock(&n)[0].status, Status::Error);
        assert!(crate::model::container::initial_user_ns("0 0 4294967295\n"));
        assert!(!crate::model::container::initial_user_ns("0 1000 1"));
        assert!(!crate::model::container::initial_user_ns(""));
    }

    #[test]
    fn shm_thresholds() {
        let mut n = in_container(healthy_devs());
        assert_eq!(shm(&n)[0].status, Status::Fail);
        for (total, want) in [(512u64 << 20, Status::Warn), (16 << 30, Status::Pass)] {
            if let Fact::Known { value, .. } = &mut n.container {
                value.shm = known(Shm { total, free: total });
            }
            assert_eq!(shm(&n)[0].status, want);
        }
    }

    #[test]
    fn nccl_variables_that_turn_gdr_off_fail() {
        let mut n = in_container(healthy_devs());
        n.env = known(
            [("NCCL_IB_DISABLE".to_string(), "1".to_string())]
                .into_iter()
                .collect(),
        );
        let f = nccl(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(
            f[0].message.contains("NCCL_IB_DISABLE=1"),
            "{}",
            f[0].message
        );
        n.env = known(
            [("NCCL_NET_GDR_LEVEL".to_string(), "LOC".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(nccl(&n)[0].status, Status::Fail);
        // NCCL_IB_HCA naming an HCA the container cannot open (mlx5_0 opens, mlx5_4 is absent).
        n.env = known(
            [("NCCL_IB_HCA".to_string(), "=mlx5_4:1".to_string())]
                .into_iter()
                .collect(),
        );
        let f = nccl(&n);
        assert_eq!(f[0].status, Status::Fail, "{f:#?}");
        assert!(f[0].message.contains("NCCL_IB_HCA==mlx5_4:1: mlx5_4 not usable in this container (usable: mlx5_0): nccl finds no ib device"), "{}", f[0].message);
        n.env = known(
            [("NCCL_IB_HCA".to_string(), "mlx5".to_string())]
                .into_iter()
                .collect(),
        );
        // A prefix that selects mlx5_0: nothing to say about it (the warning is the missing
        // library of this test node).
        assert!(
            !nccl(&n)[0].message.contains("NCCL_IB_HCA"),
            "{:#?}",
            nccl(&n)
        );
        n.env = known(
            [("NCCL_NET_PLUGIN".to_string(), "aws-ofi".to_string())]
                .into_iter()
                .collect(),
        );
        let f = nccl(&n);
        assert_eq!(f[0].status, Status::Warn);
        assert!(
            f[0].message.contains("libnccl-net-aws-ofi.so"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn compare_names_what_is_worse_here_and_what_costs_gdr() {
        let mk = |st: Status| {
            let mut n = in_container(healthy_devs());
            n.memlock = known(Rlimit {
                soft: if st == Status::Pass {
                    None
                } else {
                    Some(64 << 10)
                },
                hard: None,
            });
            crate::build_report(&n, &crate::RunOptions::default())
        };
        let host = mk(Status::Pass);
        let here = mk(Status::Warn);
        let d = compare_host(&host, &here, "host.json");
        let m = d.iter().find(|f| f.subject == "mem.memlock node").unwrap();
        assert_eq!(m.status, Status::Warn, "{m:#?}");
        let c = d
            .iter()
            .find(|f| f.subject == "container.ipc-lock node")
            .unwrap();
        assert_eq!(c.status, Status::Fail, "{c:#?}");
        assert!(c.message.contains("costs gpudirect rdma"), "{}", c.message);
        let same = compare_host(&host, &host, "host.json");
        assert_eq!(same.len(), 1);
        assert_eq!(same[0].status, Status::Pass, "{same:#?}");
        // Pairs with GDR on the host that the container does not have at all: worse, named.
        assert!(host.gdr.iter().any(|p| p.enabled), "{:#?}", host.gdr);
        let mut fewer = host.clone();
        fewer.gdr.clear();
        let d = compare_host(&host, &fewer, "host.json");
        let gone: Vec<&Finding> = d.iter().filter(|f| f.status == Status::Fail).collect();
        assert_eq!(
            gone.len(),
            host.gdr.iter().filter(|p| p.enabled).count(),
            "{d:#?}"
        );
        assert!(gone[0].message.contains("does not have the pair"));
    }
}
