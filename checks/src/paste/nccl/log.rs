//! What an NCCL log holds, as [`NcclLog`]: its version, environment, ranks and devices, the
//! GDR decisions NCCL logged, its connections and failures.

use serde::Serialize;
use std::collections::BTreeMap;

/// NCCL's version: the one type the rule ([`crate::nccl::rule`]) and every reader share.
pub use crate::nccl::Version;

/// Where an NCCL log line came from: the `host:pid:tid [dev]` prefix of a line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
#[schemars(rename = "origin")]
pub struct Origin {
    /// The host name NCCL's line prefix shows.
    #[schemars(extend("x-required" = true))]
    pub host: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub pid: Option<u32>,
    /// The CUDA device of the printing thread (`[3]`).
    #[schemars(extend("x-required" = true))]
    pub dev: Option<u32>,
    /// Line number in the pasted file (from 1).
    #[schemars(range(min = 1))]
    pub line: usize,
    /// The rank whose process printed the line: the `Init` line of the same host, pid and
    /// device announced it (filled once the whole log is read; absent when no such line, or
    /// when that process announced several ranks on that device).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32", extend("x-optional" = true))]
    pub rank: Option<u32>,
    /// The bus id of the printing process's GPU, from the same `Init` line.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("x-optional" = true))]
    pub bus_id: Option<String>,
    /// Which run of the paste the line belongs to (1 the first), when a block held several.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32", range(min = 1), extend("x-optional" = true))]
    pub run: Option<u32>,
    /// The line had no `NCCL INFO|WARN` marker (a web page, a log aggregator or `grep -o` cut
    /// it off): it was read by its shape alone, with lower confidence, and its host, pid and
    /// device are unknown.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schemars(extend("x-optional" = true), extend("const" = true))]
    pub unprefixed: bool,
}

impl Origin {
    /// `host pid 12` / `host`: who printed the line, as far as its prefix says.
    pub fn who(&self) -> String {
        match (&self.host, self.pid) {
            (Some(h), Some(p)) => format!("{h} pid {p}"),
            (Some(h), None) => h.clone(),
            (None, Some(p)) => format!("pid {p}"),
            (None, None) => "an unnamed host".into(),
        }
    }
}

/// A rank as NCCL announced it (`Init START` / `Init COMPLETE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rank {
    pub origin: Origin,
    pub rank: u32,
    pub nranks: Option<u32>,
    pub cuda_dev: Option<u32>,
    pub nvml_dev: Option<u32>,
    /// PCI bus id as NCCL prints it (`1c000` = 0000:1c:00.0).
    pub bus_id: Option<String>,
}

/// A network device NCCL said it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "net_device")]
pub struct NetDevice {
    pub origin: Origin,
    /// `IB`, `Socket`, a plugin's name.
    pub net: String,
    pub index: u32,
    pub name: String,
    #[schemars(extend("x-required" = true))]
    pub port: Option<u32>,
    /// `IB`, `RoCE`, or the socket address for NET/Socket.
    #[schemars(extend("x-required" = true))]
    pub link: Option<String>,
    /// `SHARP` and other suffixes.
    pub extras: Vec<String>,
    #[schemars(extend("x-required" = true))]
    pub speed_mbps: Option<u64>,
    #[schemars(extend("x-required" = true))]
    pub pci_path: Option<String>,
}

/// NCCL's NIC-level GDR answer (`GPU Direct RDMA Enabled|Disabled for HCA n 'name'`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "nic_gdr")]
pub struct NicGdr {
    pub origin: Origin,
    pub net: String,
    pub index: u32,
    pub name: String,
    pub enabled: bool,
    /// `no module`, `no module or not supported by GPU`.
    #[schemars(extend("x-required" = true))]
    pub reason: Option<String>,
}

/// NCCL's per GPU x NIC distance decision (`GPU Direct RDMA Enabled for GPU x / HCA y ..`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "gpu_gdr")]
pub struct GpuGdr {
    pub origin: Origin,
    /// The GPU: a bus id (`1c000`; 2.24-2.28 print the rank, read as its bus id where the log
    /// says, else `rank N`), or `cudaDev[nvmlDev]` (2.4).
    pub gpu: String,
    /// The HCA index (`0`) or NCCL's net id.
    pub hca: String,
    pub enabled: bool,
    #[schemars(extend("x-required" = true))]
    pub distance: Option<u32>,
    #[schemars(extend("x-required" = true))]
    pub threshold: Option<u32>,
    /// The comparison NCCL printed (`<=`, `>`, `<`, `>=`).
    #[schemars(extend("x-required" = true), extend("enum" = ["<=", ">", "<", ">=", null]))]
    pub op: Option<String>,
    /// `read 1`: NCCL lets the NIC read GPU memory directly (the send side).
    #[schemars(extend("x-required" = true))]
    pub read: Option<bool>,
    #[schemars(extend("x-required" = true))]
    pub mode: Option<String>,
}

/// Which side of a network connection a line describes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Direction {
    Send,
    Receive,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Send => "send",
            Direction::Receive => "receive",
        }
    }
}

/// The transport NCCL chose for one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Transport {
    /// `NET/IB/0/GDRDMA`: network device `dev`; `proxy` is the PXN rank (`NET/IB/0(1)`).
    Net {
        net: String,
        dev: u32,
        proxy: Option<u32>,
        gdr: bool,
        /// `/GDRDMA(PCI)` (2.27+: GDR forced over PCIe on a C2C platform).
        gdr_pci: bool,
        shared: bool,
    },
    /// `P2P/CUMEM`, `P2P/IPC`, `P2P/direct pointer`, `P2P/indirect/..`; `read` for `/read`.
    P2p { mode: String, read: bool },
    /// `SHM/direct/direct`, `SHM/CE/direct`, the 2.4-2.18 `direct shared memory`.
    Shm { mode: String },
    /// Anything else, as printed.
    Other { text: String },
}

impl Transport {
    /// The transport as NCCL prints it after `via` (`NET/IB/0(2)/GDRDMA(PCI)/Shared`,
    /// `P2P/CUMEM/read`, `SHM/direct/direct`).
    pub fn label(&self) -> String {
        match self {
            Transport::Net {
                net,
                dev,
                proxy,
                gdr,
                gdr_pci,
                shared,
            } => format!(
                "NET/{net}/{dev}{}{}{}{}",
                proxy.map(|p| format!("({p})")).unwrap_or_default(),
                if *gdr { "/GDRDMA" } else { "" },
                if *gdr_pci { "(PCI)" } else { "" },
                if *shared { "/Shared" } else { "" }
            ),
            Transport::P2p { mode, read } => {
                format!("P2P/{mode}{}", if *read { "/read" } else { "" })
            }
            Transport::Shm { mode } => format!("SHM/{mode}"),
            Transport::Other { text } => text.clone(),
        }
    }
}

/// One `Channel .. via ..` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub origin: Origin,
    pub channel: u32,
    pub conn: Option<u32>,
    pub from_rank: u32,
    /// The bracket after the rank: bus id (2.7-2.18.1) or nvmlDev (2.18.3+).
    pub from_dev: Option<String>,
    pub to_rank: u32,
    pub to_dev: Option<String>,
    pub direction: Option<Direction>,
    pub transport: Transport,
}

impl Connection {
    /// The line as NCCL prints it from `Channel` on (`Channel 00/0 : 0[0] -> 1[1] [send] via
    /// NET/IB/0/GDRDMA`), rebuilt from what was read.
    pub fn describe(&self) -> String {
        let side = |r: u32, d: &Option<String>| match d {
            Some(d) => format!("{r}[{d}]"),
            None => r.to_string(),
        };
        format!(
            "Channel {:02}{} : {} -> {}{} via {}",
            self.channel,
            self.conn.map(|c| format!("/{c}")).unwrap_or_default(),
            side(self.from_rank, &self.from_dev),
            side(self.to_rank, &self.to_dev),
            self.direction
                .map(|d| format!(" [{}]", d.as_str()))
                .unwrap_or_default(),
            self.transport.label()
        )
    }

    /// The rank on this host: the sender for `[send]`, the receiver for `[receive]`.
    pub fn local(&self) -> (u32, Option<&str>) {
        match self.direction {
            Some(Direction::Receive) => (self.to_rank, self.to_dev.as_deref()),
            _ => (self.from_rank, self.from_dev.as_deref()),
        }
    }
}

/// Kinds of failure lines, each mapped to a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    RegMr,
    DmabufMr,
    SystemError,
    CudaFailure,
    IbCompletion,
    RemoteError,
    Timeout,
}

impl FailureKind {
    /// The finding id it maps to.
    pub fn id(self) -> &'static str {
        match self {
            FailureKind::RegMr => "nccl.reg-mr",
            FailureKind::DmabufMr => "nccl.dmabuf-mr",
            FailureKind::SystemError => "nccl.system-error",
            FailureKind::CudaFailure => "nccl.cuda-failure",
            FailureKind::IbCompletion => "nccl.ib-completion",
            FailureKind::RemoteError => "nccl.remote-error",
            FailureKind::Timeout => "nccl.timeout",
        }
    }
}

/// A failure line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub origin: Origin,
    /// The line, trimmed to 300 characters.
    pub text: String,
    /// The error NCCL quoted (`Bad address`, `out of memory`), when it quoted one.
    pub error: Option<String>,
    /// `NET/IB : Got completion ..`: the `ibv_wc_status` number and the vendor error.
    pub status: Option<u32>,
    pub vendor_err: Option<u32>,
}

/// A `NCCL WARN` line: NCCL's own words for what went wrong, failure kind or not
/// (`Net : No interface found in the same subnet as remote address`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub origin: Origin,
    /// The text after `NCCL WARN`.
    pub text: String,
}

/// A parsed NCCL log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct NcclLog {
    /// Every distinct version string (`2.18.5+cuda12.2`), in order of appearance.
    pub versions: Vec<String>,
    /// `NCCL_*` variables NCCL said were set by the environment (last value wins).
    pub env: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    pub ranks: Vec<Rank>,
    pub net_devices: Vec<NetDevice>,
    /// `Using network IB` / `IBext_v8` / `Socket`.
    pub networks: Vec<String>,
    pub nic_gdr: Vec<NicGdr>,
    pub gpu_gdr: Vec<GpuGdr>,
    /// `DMA-BUF is available on GPU device N` (host, device).
    pub dmabuf_gpus: Vec<(String, u32)>,
    pub connections: Vec<Connection>,
    pub failures: Vec<Failure>,
    /// Every `NCCL WARN` line, in order.
    pub warnings: Vec<Warning>,
    /// Lines that carried an NCCL marker.
    pub nccl_lines: usize,
    /// Lines with an NCCL decision that cannot be trusted (cut), with the reason: not used.
    pub unreadable: Vec<(usize, String)>,
    /// Lines where NCCL says it has no RDMA network (`NET/IB : No device found`, `Using
    /// network Socket`, `NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'`): (line, text).
    pub no_rdma: Vec<(usize, String)>,
    /// NCCL's ring, tree and channel summary lines (`Ring 00 : 0 -> 1 -> 0`, `Trees [0] ..`,
    /// `Channel 00/24 : 0 1`): understood, and carrying no GDR decision.
    pub summaries: usize,
    /// Lines read by their shape alone, without NCCL's marker ([`Origin::unprefixed`]).
    pub unprefixed: usize,
    /// Which run of its block this log is (1 the first) when the block held several runs
    /// (a retry, a job run twice): each run is its own log; 0 when the block held one.
    pub run: u32,
    /// The first and last line of the run (or of the log) in the pasted file.
    pub lines: [usize; 2],
    /// Why a new run was taken to start at `lines[0]` (runs after the first).
    pub run_start: Option<String>,
}

/// One logged GDR decision: a local GPU (rank) talking through a NIC in one direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "logged_gdr")]
pub struct LoggedGdr {
    #[schemars(extend("x-required" = true))]
    pub host: Option<String>,
    /// The process that printed the line.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32", extend("x-optional" = true))]
    pub pid: Option<u32>,
    pub rank: u32,
    /// The local GPU's bus id from its rank's `Init` line on the same host (or the channel
    /// line's bracket up to 2.18.1): what joins the decision to a matrix or a node.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("x-optional" = true))]
    pub bus_id: Option<String>,
    /// The local GPU's nvmlDev from its rank's `Init` line on the same host.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32", extend("x-optional" = true))]
    pub nvml_dev: Option<u32>,
    /// Bus id or nvmlDev from the connection line, else from the rank's Init line.
    #[schemars(extend("x-required" = true))]
    pub gpu: Option<String>,
    pub net: String,
    pub nic_dev: u32,
    /// The device name by NCCL's `Using [n]name` list on the same host.
    #[schemars(extend("x-required" = true))]
    pub nic: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub direction: Option<Direction>,
    #[schemars(extend("x-required" = true))]
    pub proxy: Option<u32>,
    pub gdr: bool,
    /// Channels that showed this decision.
    pub channels: Vec<u32>,
    /// First line in the paste (from 1).
    #[schemars(range(min = 1))]
    pub line: usize,
}

impl NcclLog {
    /// The NCCL version (the first one logged).
    pub fn version(&self) -> Option<Version> {
        self.versions.first().and_then(|v| Version::parse(v))
    }

    /// The device NCCL lists at `index` for a host (`NET/IB : Using [index]name`).
    pub fn net_device(&self, host: Option<&str>, net: &str, index: u32) -> Option<&NetDevice> {
        let same_net = |d: &&NetDevice| {
            d.index == index && (d.net == net || net.starts_with(&d.net) || d.net.starts_with(net))
        };
        self.net_devices
            .iter()
            .filter(same_net)
            .find(|d| d.origin.host.as_deref() == host)
            .or_else(|| {
                // One host's listing stands for all when every host lists the same device.
                let all: Vec<&NetDevice> = self.net_devices.iter().filter(same_net).collect();
                let first = all.first()?;
                all.iter().all(|d| d.name == first.name).then_some(*first)
            })
    }

    /// The GPU of a rank on a host, from its Init line (bus id, else nvmlDev, else cudaDev).
    pub fn rank_gpu(&self, host: Option<&str>, rank: u32) -> Option<String> {
        let r = self.rank_line(host, rank)?;
        r.bus_id
            .clone()
            .or_else(|| r.nvml_dev.map(|d| d.to_string()))
            .or_else(|| r.cuda_dev.map(|d| d.to_string()))
    }

    /// The `Init` line of a rank on a host, when the log has exactly one GPU for it there
    /// (several communicators may reuse a rank number for other GPUs: then `None`). A line
    /// without a host matches a rank only when the log names at most one host.
    pub fn rank_line(&self, host: Option<&str>, rank: u32) -> Option<&Rank> {
        let one_host = self.hosts.len() <= 1;
        let mine: Vec<&Rank> = self
            .ranks
            .iter()
            .filter(|r| {
                r.rank == rank && (r.origin.host.as_deref() == host || (host.is_none() && one_host))
            })
            .collect();
        let first = *mine.first()?;
        let key = |r: &Rank| (r.bus_id.clone(), r.nvml_dev, r.origin.host.clone());
        mine.iter().all(|r| key(r) == key(first)).then_some(first)
    }

    /// NCCL's GDR decision per local GPU (rank), NIC and direction, from the connection lines.
    pub fn logged_gdr(&self) -> Vec<LoggedGdr> {
        type Key<'a> = (
            Option<&'a str>,
            Option<u32>,
            u32,
            u32,
            Option<Direction>,
            Option<u32>,
            bool,
            &'a str,
        );
        let mut out: Vec<LoggedGdr> = Vec::new();
        // One lookup per line (a whole job's log has a million channel lines).
        let mut index: std::collections::HashMap<Key, usize> = Default::default();
        for c in &self.connections {
            let Transport::Net {
                net,
                dev,
                proxy,
                gdr,
                ..
            } = &c.transport
            else {
                continue;
            };
            let (rank, gpu) = c.local();
            let key: Key = (
                c.origin.host.as_deref(),
                c.origin.pid,
                rank,
                *dev,
                c.direction,
                *proxy,
                *gdr,
                net.as_str(),
            );
            if let Some(&i) = index.get(&key) {
                let x = &mut out[i];
                if !x.channels.contains(&c.channel) {
                    x.channels.push(c.channel);
                }
                continue;
            }
            let host = c.origin.host.clone();
            // The printing process's own GPU (its host, pid and device), else the rank's.
            let init = self.rank_line(host.as_deref(), rank);
            let (bracket_bus, bracket_nvml) = self.bracket_gpu(c);
            let bus_id = c
                .origin
                .bus_id
                .clone()
                .or_else(|| init.and_then(|r| r.bus_id.clone()))
                .or(bracket_bus);
            let nvml_dev = init
                .filter(|r| bus_id.is_none() || r.bus_id == bus_id)
                .and_then(|r| r.nvml_dev)
                .or(bracket_nvml);
            // As the channel line printed it, else the Init line's bus id or nvmlDev (never
            // its cudaDev: CUDA_VISIBLE_DEVICES renumbers it and every host has a device 0).
            let gpu = gpu
                .map(str::to_string)
                .or_else(|| bus_id.clone())
                .or_else(|| nvml_dev.map(|d| d.to_string()));
            index.insert(key, out.len());
            out.push(LoggedGdr {
                nic: self
                    .net_device(host.as_deref(), net, *dev)
                    .map(|d| d.name.clone()),
                host,
                pid: c.origin.pid,
                rank,
                bus_id,
                nvml_dev,
                gpu,
                net: net.clone(),
                nic_dev: *dev,
                direction: c.direction,
                proxy: *proxy,
                gdr: *gdr,
                channels: vec![c.channel],
                line: c.origin.line,
            });
        }
        out
    }

    /// The local GPU a connection line's bracket names (`5[1a000]`, `5[3]`): (bus id, nvmlDev).
    /// NCCL 2.5 to 2.18.1 print the `busId` there (`%lx`: `1a000` is 0000:1a:00.0, `40` a VM's
    /// 0000:00:04.0), 2.18.3 and later the nvmlDev, 2.4 the cudaDev (which names no GPU).
    /// Without the version: four or more hex digits, or a hex letter, are a bus id (no nvmlDev
    /// has them); a short decimal in a `Channel NN/c` line (a 2.12+ shape, so 2.18.3+ when it
    /// is no bus id) is an nvmlDev when no bus id of bus 00 reads the same (`3`, `12`; not
    /// `10` or `40`); anything else names nothing.
    pub fn bracket_gpu(&self, c: &Connection) -> (Option<String>, Option<u32>) {
        let Some(b) = c.local().1 else {
            return (None, None);
        };
        if b.is_empty() || !b.bytes().all(|x| x.is_ascii_hexdigit()) {
            return (None, None);
        }
        let bus = || (Some(b.to_ascii_lowercase()), None);
        match self.version() {
            Some(v) if v >= Version::new(2, 18, 3) => (None, b.parse().ok()),
            Some(v) if v >= Version::new(2, 5, 0) => bus(),
            Some(_) => (None, None),
            None if b.len() >= 4 || b.bytes().any(|x| x.is_ascii_alphabetic()) => bus(),
            None => match b.parse::<u32>() {
                Ok(n) if c.conn.is_some() && (n < 10 || (n < 16 && !b.ends_with('0'))) => {
                    (None, Some(n))
                }
                _ => (None, None),
            },
        }
    }

    /// Whether the log shows NCCL using a network at all (NET connections or a `Using` line).
    pub fn uses_net(&self) -> bool {
        self.connections
            .iter()
            .any(|c| matches!(c.transport, Transport::Net { .. }))
    }
}
