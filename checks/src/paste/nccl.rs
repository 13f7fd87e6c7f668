//! NCCL_DEBUG=INFO/WARN logs of NCCL 2.4 to 2.30: what NCCL itself decided.
//!
//! Every line NCCL prints starts `host:pid:tid [cudaDev] NCCL INFO|WARN` (a WARN may carry
//! `file.cc:123` before `NCCL`); launchers add their own prefixes (timestamps, `[1,0]<stdout>:`,
//! `(pid=...)`), so the marker is searched anywhere in the line. The formats read here, with the
//! NCCL source lines that print them (NVIDIA/nccl tags v2.4.8-1 .. v2.30.7-1):
//!
//! * `NCCL version 2.18.5+cuda12.2` (`init.cc` VERSION_STRING), and the `NCCL version 2.18.3`
//!   PyTorch appends to its errors;
//! * `<NAME> set by environment to <value>` (`NCCL_PARAM`, `ncclGetEnv` users);
//! * `comm 0x.. rank R nranks N cudaDev C [nvmlDev M] [busId B] .. - Init START|COMPLETE`;
//! * `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ..` (`net_ib.cc`, only ports
//!   that are ACTIVE are listed), `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000
//!   .. pciPath=..` (2.20+), `Using network IB`;
//! * `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)` (2.7-2.18),
//!   `NET/IB : GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'` (2.19+), and in 2.4
//!   `.. Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)`: the
//!   NIC-level answer (a peer-memory client or dma-buf);
//! * `GPU Direct RDMA Enabled for GPU 1c000 / HCA 0 (distance 4 <= 4), read 0` and
//!   `.. Disabled .. (distance 5 > 4)` (`paths.cc` `ncclTopoCheckGdr`, 2.6-2.29; `GPU %d`
//!   is a rank from 2.28, `mode %s` from 2.27; 2.4 prints `NET/IB : .. for GPU 0[0] / HCA 0
//!   (distance 3 >= 2)`; 2.30 moved it to TRACE);
//! * `Channel 00/0 : 0[1c000] -> 8[1c000] [send] via NET/IB/0/GDRDMA` (`net.cc`; `[busId]`
//!   until 2.18.1, `[nvmlDev]` from 2.18.3; `NET/IB/0(1)` names the PXN proxy rank; `/Shared`,
//!   `(PCI)`), `via P2P/CUMEM/read`, `via P2P/IPC`, `via P2P/direct pointer`, `via
//!   SHM/direct/direct`, `via direct shared memory` and the 2.4 `Ring 00 : 3 -> 4 [send] via
//!   NET/IB/0/GDRDMA`;
//! * failures: `Call to ibv_reg_mr failed with error ..`, `ibv_reg_dmabuf_mr failed`,
//!   `unhandled system error`, `Cuda failure 'out of memory'`, `NET/IB : Got completion from
//!   peer .. with error 12` / `status=12`, `remote process exited or there was a network
//!   error`, PyTorch's `Watchdog caught collective operation timeout`.
//!
//! [`NcclLog`] is a public API: `probe --nccl` compares NCCL's own decisions
//! ([`NcclLog::logged_gdr`], [`NcclLog::connections`]) with gdrdoctor's prediction.

use super::clean::Line;
use serde::Serialize;
use std::collections::BTreeMap;

/// NCCL's version: the one type the rule ([`crate::nccl::rule`]) and every reader share.
pub use crate::nccl::Version;

/// The `host:pid:tid [dev]` prefix of a line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Origin {
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// The CUDA device of the printing thread (`[3]`).
    pub dev: Option<u32>,
    /// Line number in the pasted file.
    pub line: usize,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetDevice {
    pub origin: Origin,
    /// `IB`, `Socket`, a plugin's name.
    pub net: String,
    pub index: u32,
    pub name: String,
    pub port: Option<u32>,
    /// `IB`, `RoCE`, or the socket address for NET/Socket.
    pub link: Option<String>,
    /// `SHARP` and other suffixes.
    pub extras: Vec<String>,
    pub speed_mbps: Option<u64>,
    pub pci_path: Option<String>,
}

/// NCCL's NIC-level GDR answer (`GPU Direct RDMA Enabled|Disabled for HCA n 'name'`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicGdr {
    pub origin: Origin,
    pub net: String,
    pub index: u32,
    pub name: String,
    pub enabled: bool,
    /// `no module`, `no module or not supported by GPU`.
    pub reason: Option<String>,
}

/// NCCL's per GPU x NIC distance decision (`GPU Direct RDMA Enabled for GPU x / HCA y ..`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuGdr {
    pub origin: Origin,
    /// The GPU as printed: a bus id (`1c000`), a rank (2.28+), or `cudaDev[nvmlDev]` (2.4).
    pub gpu: String,
    /// The HCA index (`0`) or NCCL's net id.
    pub hca: String,
    pub enabled: bool,
    pub distance: Option<u32>,
    pub threshold: Option<u32>,
    /// The comparison NCCL printed (`<=`, `>`, `<`, `>=`).
    pub op: Option<String>,
    /// `read 1`: NCCL lets the NIC read GPU memory directly (the send side).
    pub read: Option<bool>,
    pub mode: Option<String>,
}

/// Which side of a network connection a line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
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
}

/// One logged GDR decision: a local GPU (rank) talking through a NIC in one direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoggedGdr {
    pub host: Option<String>,
    pub rank: u32,
    /// Bus id or nvmlDev from the connection line, else from the rank's Init line.
    pub gpu: Option<String>,
    pub net: String,
    pub nic_dev: u32,
    /// The device name by NCCL's `Using [n]name` list on the same host.
    pub nic: Option<String>,
    pub direction: Option<Direction>,
    pub proxy: Option<u32>,
    pub gdr: bool,
    /// Channels that showed this decision.
    pub channels: Vec<u32>,
    /// First line in the paste.
    pub line: usize,
}

fn num(s: &str) -> Option<u32> {
    s.trim().parse().ok()
}

/// The digits a token starts with (`4)` -> 4, `4)\`` -> 4).
fn lead_num(s: &str) -> Option<u32> {
    let d: String = s
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    d.parse().ok()
}

/// Split a line at the NCCL marker: (origin, level, message).
fn split_line(text: &str, line: usize) -> Option<(Origin, &'static str, String)> {
    let (pos, level, mlen) = ["NCCL INFO ", "NCCL WARN ", "NCCL ERROR ", "NCCL TRACE "]
        .iter()
        .filter_map(|m| text.find(m).map(|p| (p, &m[5..m.len() - 1], m.len())))
        .min_by_key(|x| x.0)?;
    let level: &'static str = match level {
        "INFO" => "INFO",
        "WARN" => "WARN",
        "ERROR" => "ERROR",
        _ => "TRACE",
    };
    let prefix = &text[..pos];
    let msg = text[pos + mlen..].trim().to_string();
    Some((origin(prefix, line), level, msg))
}

/// Find `host:pid:tid [dev]` in a prefix.
fn origin(prefix: &str, line: usize) -> Origin {
    let toks: Vec<&str> = prefix.split_whitespace().collect();
    for (i, t) in toks.iter().enumerate() {
        let Some(dev) = toks
            .get(i + 1)
            .and_then(|d| d.strip_prefix('['))
            .and_then(|d| d.strip_suffix(']'))
            .and_then(num)
        else {
            continue;
        };
        let parts: Vec<&str> = t.rsplitn(3, ':').collect();
        if parts.len() == 3 {
            let (tid, pid, host) = (parts[0], parts[1], parts[2]);
            if tid.bytes().all(|b| b.is_ascii_digit()) && pid.bytes().all(|b| b.is_ascii_digit()) {
                return Origin {
                    host: Some(host.to_string()).filter(|h| !h.is_empty()),
                    pid: num(pid),
                    dev: Some(dev),
                    line,
                };
            }
        }
        return Origin {
            host: None,
            pid: None,
            dev: Some(dev),
            line,
        };
    }
    Origin {
        line,
        ..Origin::default()
    }
}

/// `0[1c000]` -> (0, Some("1c000")); `3` -> (3, None).
fn rank_dev(s: &str) -> Option<(u32, Option<String>)> {
    let s = s.trim();
    match s.split_once('[') {
        Some((r, d)) => Some((num(r)?, Some(d.trim_end_matches(']').to_string()))),
        None => Some((num(s)?, None)),
    }
}

fn parse_transport(via: &str) -> Transport {
    let v = via.trim();
    if let Some(rest) = v.strip_prefix("NET/") {
        // NET/<net>/<dev>[(<proxy>)][/GDRDMA][(PCI)][/Shared]
        let parts: Vec<&str> = rest.split('/').collect();
        let net = parts.first().copied().unwrap_or("").to_string();
        let devp = parts.get(1).copied().unwrap_or("");
        let (dev, proxy) = match devp.split_once('(') {
            Some((d, p)) => (num(d), num(p.trim_end_matches(')'))),
            None => (num(devp), None),
        };
        let tail: Vec<&str> = parts.iter().skip(2).copied().collect();
        // Only the suffixes NCCL prints; anything else is a line cut inside its tail
        // (`/GDR` of a wrapped `/GDRDMA`), which must not read as "no GDR".
        let known = |t: &&str| ["GDRDMA", "GDRDMA(PCI)", "Shared", "(PCI)"].contains(t);
        if !tail.iter().all(known) {
            return Transport::Other {
                text: format!("unreadable (cut?): {v}"),
            };
        }
        if let Some(dev) = dev {
            return Transport::Net {
                net,
                dev,
                proxy,
                gdr: tail.iter().any(|t| t.starts_with("GDRDMA")),
                gdr_pci: tail.iter().any(|t| t.contains("(PCI)")),
                shared: tail.contains(&"Shared"),
            };
        }
    }
    if let Some(rest) = v.strip_prefix("P2P/") {
        let read = rest.ends_with("/read");
        let mode = rest.trim_end_matches("/read").to_string();
        let known = ["CUMEM", "IPC", "direct pointer", "common device"].contains(&mode.as_str())
            || mode.starts_with("indirect/");
        if known {
            return Transport::P2p { mode, read };
        }
    }
    if let Some(rest) = v.strip_prefix("SHM/") {
        let ok =
            rest.split('/').all(|m| m == "direct" || m == "CE") && rest.split('/').count() == 2;
        if ok {
            return Transport::Shm {
                mode: rest.to_string(),
            };
        }
    }
    if v == "direct shared memory" {
        return Transport::Shm {
            mode: "direct".into(),
        };
    }
    Transport::Other {
        text: format!("unreadable (cut?): {v}"),
    }
}

fn parse_connection(msg: &str, o: &Origin) -> Option<Connection> {
    let body = msg
        .strip_prefix("Channel ")
        .or_else(|| msg.strip_prefix("Ring "))?;
    let (head, rest) = body.split_once(" : ")?;
    let (chan, conn) = match head.trim().split_once('/') {
        Some((c, k)) => (num(c)?, num(k)),
        None => (num(head)?, None),
    };
    let (pair, via) = rest.split_once(" via ")?;
    let (lhs, rhs) = pair.split_once("->")?;
    let mut rhs = rhs.trim();
    let mut direction = None;
    for (tag, d) in [
        ("[send]", Direction::Send),
        ("[receive]", Direction::Receive),
    ] {
        if let Some(r) = rhs.strip_suffix(tag) {
            rhs = r.trim();
            direction = Some(d);
        }
    }
    let (from_rank, from_dev) = rank_dev(lhs)?;
    let (to_rank, to_dev) = rank_dev(rhs)?;
    Some(Connection {
        origin: o.clone(),
        channel: chan,
        conn,
        from_rank,
        from_dev,
        to_rank,
        to_dev,
        direction,
        transport: parse_transport(via),
    })
}

/// `[0]mlx5_0:1/IB/SHARP` or `[0]ib0:192.168.1.1<0>`.
fn parse_using(msg: &str, o: &Origin) -> Vec<NetDevice> {
    let net = msg
        .strip_prefix("NET/")
        .and_then(|r| r.split([' ', ':']).next())
        .unwrap_or("")
        .to_string();
    let list = msg
        .split_once("Using")
        .map(|x| x.1)
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("");
    let mut out = Vec::new();
    for tok in list.split_whitespace() {
        let Some(r) = tok.strip_prefix('[') else {
            continue;
        };
        let Some((idx, rest)) = r.split_once(']') else {
            continue;
        };
        let Some(index) = num(idx) else { continue };
        if rest.is_empty() {
            continue;
        }
        if net == "Socket" {
            let (name, addr) = rest.split_once(':').unwrap_or((rest, ""));
            out.push(NetDevice {
                origin: o.clone(),
                net: net.clone(),
                index,
                name: name.to_string(),
                port: None,
                link: Some(addr.to_string()).filter(|a| !a.is_empty()),
                extras: vec![],
                speed_mbps: None,
                pci_path: None,
            });
            continue;
        }
        let (name, after) = rest.split_once(':').unwrap_or((rest, ""));
        let mut parts = after.split('/');
        let port = parts.next().and_then(num);
        let link = parts.next().map(str::to_string);
        let extras = parts.map(str::to_string).collect();
        out.push(NetDevice {
            origin: o.clone(),
            net: net.clone(),
            index,
            name: name.to_string(),
            port,
            link,
            extras,
            speed_mbps: None,
            pci_path: None,
        });
    }
    out
}

/// `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=.. pciPath=.. ar=0`.
fn parse_device_line(msg: &str, o: &Origin) -> Option<NetDevice> {
    let rest = msg.strip_prefix("NET/")?;
    let (net, rest) = rest.split_once(':')?;
    let rest = rest.trim();
    let r = rest.strip_prefix('[')?;
    let (idx, rest) = r.split_once(']')?;
    let index = num(idx)?;
    let mut toks = rest.split_whitespace();
    let first = toks.next()?;
    if !rest.contains("speed=") {
        return None;
    }
    let fields: Vec<&str> = first.split(':').collect();
    let name = fields.first()?.to_string();
    let (port, link) = match fields.last().and_then(|p| p.split_once('/')) {
        Some((p, l)) => (num(p), Some(l.to_string())),
        None => (None, None),
    };
    let mut d = NetDevice {
        origin: o.clone(),
        net: net.trim().to_string(),
        index,
        name,
        port,
        link,
        extras: vec![],
        speed_mbps: None,
        pci_path: None,
    };
    for t in toks {
        if let Some(v) = t.strip_prefix("speed=") {
            d.speed_mbps = v.parse().ok();
        } else if let Some(v) = t.strip_prefix("pciPath=") {
            d.pci_path = Some(v.to_string());
        }
    }
    Some(d)
}

fn quoted(s: &str) -> Option<String> {
    let a = s.find('\'')?;
    let b = s[a + 1..].find('\'')?;
    Some(s[a + 1..a + 1 + b].to_string())
}

fn after_word<'a>(s: &'a str, w: &str) -> Option<&'a str> {
    let p = s.find(w)?;
    s[p + w.len()..].split_whitespace().next()
}

fn parse_gdr(msg: &str, o: &Origin) -> (Option<NicGdr>, Option<GpuGdr>) {
    let Some(p) = msg.find("GPU Direct RDMA ") else {
        return (None, None);
    };
    let net = msg
        .strip_prefix("NET/")
        .and_then(|r| r.split([' ', ':']).next())
        .unwrap_or("IB")
        .to_string();
    let rest = &msg[p + "GPU Direct RDMA ".len()..];
    let enabled = rest.starts_with("Enabled") || rest.starts_with("enabled");
    if !enabled && !rest.starts_with("Disabled") && !rest.starts_with("disabled") {
        return (None, None);
    }
    let hca_name = quoted(rest);
    let has_gpu = rest.contains("for GPU");
    // NIC level: `for HCA n 'name'`, and 2.4's `for GPU c[n] / HCA n 'name' (no module ..)`.
    if let Some(name) = hca_name {
        let index = after_word(rest, "HCA ").and_then(num).unwrap_or(0);
        let reason = rest
            .rsplit_once('(')
            .map(|(_, r)| r.trim_end_matches(')').to_string())
            .filter(|r| r.contains("module") || r.contains("support"));
        if !has_gpu || reason.is_some() {
            return (
                Some(NicGdr {
                    origin: o.clone(),
                    net,
                    index,
                    name,
                    enabled,
                    reason,
                }),
                None,
            );
        }
    }
    if !has_gpu {
        return (None, None);
    }
    let gpu = after_word(rest, "for GPU ").unwrap_or("?").to_string();
    let hca = after_word(rest, "HCA ")
        .unwrap_or("?")
        .trim_end_matches(',')
        .to_string();
    let (mut distance, mut threshold, mut op) = (None, None, None);
    if let Some(d) = rest.split("distance ").nth(1) {
        let mut t = d.split_whitespace();
        distance = t.next().and_then(lead_num);
        op = t.next().map(str::to_string);
        threshold = t.next().and_then(lead_num);
    }
    let read = rest
        .split("read ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(lead_num)
        .map(|r| r != 0);
    let mode = after_word(rest, "mode ").map(str::to_string);
    (
        None,
        Some(GpuGdr {
            origin: o.clone(),
            gpu,
            hca,
            enabled,
            distance,
            threshold,
            op,
            read,
            mode,
        }),
    )
}

fn parse_rank(msg: &str, o: &Origin) -> Option<Rank> {
    if !msg.contains("comm 0x") || !(msg.contains("Init START") || msg.contains("Init COMPLETE")) {
        return None;
    }
    let toks: Vec<&str> = msg.split_whitespace().collect();
    let get = |k: &str| -> Option<&str> {
        toks.iter()
            .position(|t| *t == k)
            .and_then(|i| toks.get(i + 1))
            .copied()
    };
    Some(Rank {
        origin: o.clone(),
        rank: get("rank").and_then(num)?,
        nranks: get("nranks").and_then(num),
        cuda_dev: get("cudaDev").and_then(num),
        nvml_dev: get("nvmlDev").and_then(num),
        bus_id: get("busId").map(str::to_string),
    })
}

fn classify_failure(text: &str) -> Option<FailureKind> {
    let t = text;
    if t.contains("ibv_reg_dmabuf_mr") && t.contains("fail") {
        Some(FailureKind::DmabufMr)
    } else if (t.contains("ibv_reg_mr") || t.contains("ibv_reg_mr_iova2")) && t.contains("fail") {
        Some(FailureKind::RegMr)
    } else if t.contains("Got completion") && (t.contains("with error") || t.contains("status=")) {
        Some(FailureKind::IbCompletion)
    } else if t.contains("Cuda failure") {
        Some(FailureKind::CudaFailure)
    } else if t.contains("Watchdog caught collective operation timeout")
        || (t.contains("NCCL WARN") && (t.contains("timeout") || t.contains("Timeout")))
        || t.contains("timed out")
    {
        Some(FailureKind::Timeout)
    } else if t.contains("remote process exited or there was a network error")
        || t.contains("ncclRemoteError")
        || t.contains("Connection closed by remote peer")
        || (t.contains("NCCL WARN") && t.contains("remote error"))
    {
        Some(FailureKind::RemoteError)
    } else if t.contains("unhandled system error") || t.contains("ncclSystemError") {
        Some(FailureKind::SystemError)
    } else {
        None
    }
}

fn failure(kind: FailureKind, text: &str, o: &Origin) -> Failure {
    let short: String = text.trim().chars().take(300).collect();
    let mut f = Failure {
        kind,
        origin: o.clone(),
        text: short,
        error: None,
        status: None,
        vendor_err: None,
    };
    match kind {
        FailureKind::RegMr | FailureKind::DmabufMr => {
            f.error = text
                .split_once("failed with error ")
                .map(|(_, e)| e.trim().to_string());
        }
        FailureKind::CudaFailure => {
            f.error = text.split_once("Cuda failure").and_then(|(_, r)| quoted(r));
        }
        FailureKind::IbCompletion => {
            f.status = text
                .split_once("with error ")
                .and_then(|(_, r)| r.split([',', ' ']).next())
                .and_then(num)
                .or_else(|| {
                    text.split_once("status=").and_then(|(_, r)| {
                        let v = r.split([' ', ',']).next().unwrap_or("");
                        // `status=12` or `status=NAME(12)`
                        num(v).or_else(|| {
                            v.split_once('(')
                                .and_then(|(_, n)| num(n.trim_end_matches(')')))
                        })
                    })
                });
            f.vendor_err = text
                .split_once("vendor err ")
                .or_else(|| text.split_once("vendor_err="))
                .and_then(|(_, r)| r.split([' ', ',', '(']).next())
                .and_then(num);
        }
        _ => {}
    }
    f
}

/// `NCCL version 2.18.5+cuda12.2` anywhere in a line.
fn version_in(text: &str) -> Option<String> {
    let p = text.find("NCCL version ")?;
    let v = text[p + "NCCL version ".len()..]
        .split([' ', ',', ')'])
        .next()?
        .trim_end_matches('.');
    Version::parse(v).map(|_| v.to_string())
}

/// Parse the lines of an NCCL log block.
/// Whether `next` completes a transport cut by a hard wrap at the end of `cur`
/// (`.. via NET/IB/0/GDR` + `DMA`, `.. via NET/IB/0` + `/GDRDMA`).
fn completes_transport(cur: &str, next: &str) -> Option<String> {
    if !cur.contains(" via ") || next.contains("NCCL ") || next.starts_with(char::is_whitespace) {
        return None;
    }
    let tok = next.split_whitespace().next()?;
    let joined = format!("{cur}{tok}");
    let before = cur.rsplit_once(" via ")?.1;
    let after = joined.rsplit_once(" via ")?.1;
    let (t0, t1) = (parse_transport(before), parse_transport(after));
    let readable = |t: &Transport| !matches!(t, Transport::Other { .. });
    (readable(&t1) && t0 != t1).then(|| format!("{joined}{}", &next[tok.len()..]))
}

pub fn parse_lines(lines: &[Line]) -> NcclLog {
    parse_lines_with(lines, false)
}

/// `last_complete`: the block's last line is known to be whole (more text follows it, or the
/// file ends with a newline); otherwise a last `via NET/..` line without `/GDRDMA` may have been
/// cut by the excerpt and is not trusted.
pub fn parse_lines_with(lines: &[Line], last_complete: bool) -> NcclLog {
    let mut log = NcclLog::default();
    // Join transports a hard wrap cut (the continuation has no NCCL prefix).
    let mut joined: Vec<Line> = Vec::with_capacity(lines.len());
    let mut k = 0;
    while k < lines.len() {
        let l = &lines[k];
        if let Some(next) = lines.get(k + 1) {
            if let Some(t) = completes_transport(&l.text, &next.text) {
                joined.push(Line { no: l.no, text: t });
                k += 2;
                continue;
            }
        }
        joined.push(l.clone());
        k += 1;
    }
    let last_no = joined
        .iter()
        .rev()
        .find(|l| !l.text.trim().is_empty())
        .map(|l| l.no);
    for l in &joined {
        let text = l.text.as_str();
        if let Some(v) = version_in(text) {
            if !log.versions.contains(&v) {
                log.versions.push(v);
            }
        }
        let parsed = split_line(text, l.no);
        let o = parsed
            .as_ref()
            .map(|p| p.0.clone())
            .unwrap_or_else(|| origin(text, l.no));
        if let Some(k) = classify_failure(text) {
            log.failures.push(failure(k, text, &o));
        }
        let Some((o, level, msg)) = parsed else {
            continue;
        };
        log.nccl_lines += 1;
        if level == "WARN" && !msg.is_empty() {
            log.warnings.push(Warning {
                origin: o.clone(),
                text: msg.clone(),
            });
        }
        if let Some(h) = &o.host {
            if !log.hosts.contains(h) {
                log.hosts.push(h.clone());
            }
        }
        if let Some((k, v)) = msg.split_once(" set by environment to ") {
            let k = k.trim();
            if k.starts_with("NCCL_") && !k.contains(' ') {
                log.env
                    .insert(k.to_string(), v.trim().trim_end_matches('.').to_string());
            }
            continue;
        }
        if let Some(r) = parse_rank(&msg, &o) {
            log.ranks.push(r);
            continue;
        }
        if msg.starts_with("NET/") && msg.contains("Using") && msg.contains('[') {
            log.net_devices.extend(parse_using(&msg, &o));
            continue;
        }
        if let Some(d) = parse_device_line(&msg, &o) {
            // Speed and PCI path for a device the `Using` line lists (or will list).
            match log
                .net_devices
                .iter_mut()
                .find(|x| x.name == d.name && x.origin.host == d.origin.host)
            {
                Some(x) => {
                    x.speed_mbps = d.speed_mbps;
                    x.pci_path = d.pci_path;
                }
                None => log.net_devices.push(d),
            }
            continue;
        }
        if let Some(n) = msg.strip_prefix("Using network ") {
            let n = n.trim().to_string();
            if !log.networks.contains(&n) {
                log.networks.push(n);
            }
            continue;
        }
        if msg.contains("GPU Direct RDMA ") {
            match parse_gdr(&msg, &o) {
                (Some(n), _) => log.nic_gdr.push(n),
                (_, Some(g)) => log.gpu_gdr.push(g),
                _ => {}
            }
            continue;
        }
        if let Some(r) = msg.strip_prefix("DMA-BUF is available on GPU device ") {
            if let (Some(h), Some(d)) = (o.host.clone(), num(r)) {
                log.dmabuf_gpus.push((h, d));
            }
            continue;
        }
        let channel_line =
            (msg.starts_with("Channel ") || msg.starts_with("Ring ")) && msg.contains("->");
        if channel_line && !msg.contains(" via ") {
            log.unreadable
                .push((l.no, "a channel line cut short".into()));
        }
        if msg.contains(" via ") {
            match parse_connection(&msg, &o) {
                Some(c) => {
                    let cut_tail = matches!(&c.transport, Transport::Other { .. });
                    // The last line of a paste may be cut right after `NET/IB/0`, before `/GDRDMA`.
                    let last_net = !last_complete
                        && Some(l.no) == last_no
                        && matches!(&c.transport, Transport::Net { gdr: false, .. });
                    if cut_tail || last_net {
                        log.unreadable.push((
                            l.no,
                            if last_net {
                                "the last line of the paste may be cut before `/GDRDMA`".to_string()
                            } else {
                                "the transport is cut or unknown".to_string()
                            },
                        ));
                    } else {
                        log.connections.push(c);
                    }
                }
                None if msg.starts_with("Channel ") || msg.starts_with("Ring ") => {
                    log.unreadable
                        .push((l.no, "a channel line cut short".into()));
                }
                None => {}
            }
        }
    }
    // Devices listed twice (every rank prints the `Using` line) are one device per host.
    let mut seen = std::collections::BTreeSet::new();
    log.net_devices.retain(|d| {
        seen.insert((
            d.origin.host.clone(),
            d.net.clone(),
            d.index,
            d.name.clone(),
        ))
    });
    let mut seen = std::collections::BTreeSet::new();
    log.nic_gdr.retain(|d| {
        seen.insert((
            d.origin.host.clone(),
            d.index,
            d.name.clone(),
            d.enabled,
            d.reason.clone(),
        ))
    });
    log
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
        let r = self
            .ranks
            .iter()
            .find(|r| r.rank == rank && (host.is_none() || r.origin.host.as_deref() == host))?;
        r.bus_id
            .clone()
            .or_else(|| r.nvml_dev.map(|d| d.to_string()))
            .or_else(|| r.cuda_dev.map(|d| d.to_string()))
    }

    /// NCCL's GDR decision per local GPU (rank), NIC and direction, from the connection lines.
    pub fn logged_gdr(&self) -> Vec<LoggedGdr> {
        let mut out: Vec<LoggedGdr> = Vec::new();
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
            let host = c.origin.host.clone();
            let gpu = gpu
                .map(str::to_string)
                .or_else(|| self.rank_gpu(host.as_deref(), rank));
            match out.iter_mut().find(|x| {
                x.host == host
                    && x.rank == rank
                    && x.nic_dev == *dev
                    && x.direction == c.direction
                    && x.proxy == *proxy
                    && x.gdr == *gdr
                    && x.net == *net
            }) {
                Some(x) => {
                    if !x.channels.contains(&c.channel) {
                        x.channels.push(c.channel);
                    }
                }
                None => out.push(LoggedGdr {
                    nic: self
                        .net_device(host.as_deref(), net, *dev)
                        .map(|d| d.name.clone()),
                    host,
                    rank,
                    gpu,
                    net: net.clone(),
                    nic_dev: *dev,
                    direction: c.direction,
                    proxy: *proxy,
                    gdr: *gdr,
                    channels: vec![c.channel],
                    line: c.origin.line,
                }),
            }
        }
        out
    }

    /// Whether the log shows NCCL using a network at all (NET connections or a `Using` line).
    pub fn uses_net(&self) -> bool {
        self.connections
            .iter()
            .any(|c| matches!(c.transport, Transport::Net { .. }))
    }
}

/// Parse a whole text as an NCCL log (every line is looked at). The last line is taken as
/// possibly cut (a paste may end inside it).
pub fn parse(text: &str) -> NcclLog {
    parse_lines(&super::clean::clean(text).lines)
}

/// Parse a log NCCL wrote itself (`NCCL_DEBUG_FILE`, read whole by `probe --nccl`): as
/// [`parse`], but the last line is whole when the text ends with a newline, as `diagnose`
/// takes a pasted file that ends with one.
pub fn parse_file(text: &str) -> NcclLog {
    parse_lines_with(&super::clean::clean(text).lines, text.ends_with('\n'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn version_env_ranks_and_devices() {
        let t = "\
node-1:100:200 [0] NCCL INFO NCCL version 2.19.3+cuda12.3
node-1:100:200 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1
node-1:100:200 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB
node-1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE/SHARP [RO]; OOB ib0:10.0.0.1<0>
node-1:100:200 [0] NCCL INFO comm 0x55cc8aa86c70 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1c000 commId 0x65e0bd6ee7449db4 - Init START
node-1:100:200 [0] NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=0x1 pciPath=/sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0 ar=0
";
        let l = parse(t);
        assert_eq!(
            l.version(),
            Some(Version {
                major: 2,
                minor: 19,
                patch: 3
            })
        );
        assert_eq!(
            l.env.get("NCCL_NET_GDR_LEVEL").map(String::as_str),
            Some("PHB")
        );
        assert_eq!(l.hosts, vec!["node-1"]);
        assert_eq!(l.ranks[0].bus_id.as_deref(), Some("1c000"));
        assert_eq!(l.ranks[0].nranks, Some(16));
        assert_eq!(l.net_devices.len(), 2);
        assert_eq!(l.net_devices[1].link.as_deref(), Some("RoCE"));
        assert_eq!(l.net_devices[1].extras, vec!["SHARP"]);
        assert_eq!(l.net_devices[0].speed_mbps, Some(400000));
        assert!(l.net_devices[0]
            .pci_path
            .as_deref()
            .unwrap()
            .ends_with("1b:00.0"));
    }

    #[test]
    fn gdr_lines_of_every_format() {
        let t = "\
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)
h:1:2 [3] NCCL INFO GPU Direct RDMA Enabled for GPU 86000 / HCA 0 (distance 4 <= 4), read 0
h:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 0 (distance 5 > 4)
h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)
h:1:2 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 3 / HCA 2 (distance 5 <= 5), read 1 mode Default
";
        let l = parse(t);
        assert_eq!(l.nic_gdr.len(), 3);
        assert_eq!(l.nic_gdr[0].reason.as_deref(), Some("no module"));
        assert!(l.nic_gdr[1].enabled);
        assert_eq!(l.gpu_gdr.len(), 4);
        let g = &l.gpu_gdr[0];
        assert_eq!(
            (g.gpu.as_str(), g.hca.as_str(), g.enabled),
            ("86000", "0", true)
        );
        assert_eq!(
            (g.distance, g.threshold, g.read),
            (Some(4), Some(4), Some(false))
        );
        assert_eq!(l.gpu_gdr[1].op.as_deref(), Some(">"));
        assert_eq!(l.gpu_gdr[2].gpu, "0[0]");
        assert_eq!(l.gpu_gdr[3].mode.as_deref(), Some("Default"));
        assert_eq!(l.gpu_gdr[3].read, Some(true));
    }

    #[test]
    fn channel_transports() {
        let t = "\
a:1:2 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA
a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0
a:1:2 [0] NCCL INFO Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/1(1)/GDRDMA/Shared
a:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 9[1] [send] via NET/IB/1/GDRDMA(PCI)
a:1:2 [7] NCCL INFO Channel 02/0 : 7[7] -> 0[0] via P2P/CUMEM/read
a:1:2 [2] NCCL INFO Channel 00/1 : 2[2] -> 3[3] via P2P/direct pointer
a:1:2 [2] NCCL INFO Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct
a:1:2 [0] NCCL INFO Ring 00 : 3 -> 4 [send] via NET/IB/0/GDRDMA
a:1:2 [4] NCCL INFO Channel 06/0 : 36[4] -> 20[4] [send] via NET/IBext_v8/3
a:1:2 [0] NCCL INFO Channel 00/02 :    0   1
";
        let l = parse(t);
        assert_eq!(l.connections.len(), 9);
        let c = &l.connections[0];
        assert_eq!(c.direction, Some(Direction::Receive));
        assert_eq!(c.local(), (0, Some("87000")));
        assert!(matches!(
            &c.transport,
            Transport::Net {
                dev: 5,
                gdr: true,
                ..
            }
        ));
        assert!(matches!(
            &l.connections[1].transport,
            Transport::Net {
                dev: 0,
                gdr: false,
                ..
            }
        ));
        assert!(matches!(
            &l.connections[2].transport,
            Transport::Net {
                dev: 1,
                proxy: Some(1),
                gdr: true,
                shared: true,
                ..
            }
        ));
        assert!(matches!(
            &l.connections[3].transport,
            Transport::Net {
                gdr: true,
                gdr_pci: true,
                ..
            }
        ));
        assert_eq!(
            l.connections[4].transport,
            Transport::P2p {
                mode: "CUMEM".into(),
                read: true
            }
        );
        assert_eq!(
            l.connections[5].transport,
            Transport::P2p {
                mode: "direct pointer".into(),
                read: false
            }
        );
        assert_eq!(
            l.connections[6].transport,
            Transport::Shm {
                mode: "direct/direct".into()
            }
        );
        assert_eq!(
            (
                l.connections[7].from_rank,
                l.connections[7].from_dev.as_deref()
            ),
            (3, None)
        );
        assert!(
            matches!(&l.connections[8].transport, Transport::Net { net, dev: 3, gdr: false, .. } if net == "IBext_v8")
        );
        let g = l.logged_gdr();
        assert_eq!(g.iter().filter(|x| x.gdr).count(), 4);
    }

    #[test]
    fn failures_map_to_kinds() {
        let t = "\
x:1:2 [0] misc/ibvwrap.cc:288 NCCL WARN Call to ibv_reg_dmabuf_mr failed with error Operation not supported
x:1:2 [0] NCCL WARN Call to ibv_reg_mr failed with error Bad address
H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::1%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)
hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 (Recv)
y:1:2 [0] NCCL WARN NET/IB: Got completion from peer 1.2.3.4<5> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_0
ins:3:4 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'
n:1:2 [0] include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1197, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3
[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE) ran for 600061 milliseconds before timing out.
ng:3:4 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer ng-ib<51159>
";
        let l = parse(t);
        let k: Vec<FailureKind> = l.failures.iter().map(|f| f.kind).collect();
        assert_eq!(
            k,
            vec![
                FailureKind::DmabufMr,
                FailureKind::RegMr,
                FailureKind::IbCompletion,
                FailureKind::IbCompletion,
                FailureKind::IbCompletion,
                FailureKind::CudaFailure,
                FailureKind::CudaFailure,
                FailureKind::SystemError,
                FailureKind::Timeout,
                FailureKind::RemoteError,
            ]
        );
        assert_eq!(
            l.failures[0].error.as_deref(),
            Some("Operation not supported")
        );
        assert_eq!(
            (l.failures[2].status, l.failures[2].vendor_err),
            (Some(4), Some(81))
        );
        assert_eq!(
            (l.failures[3].status, l.failures[3].vendor_err),
            (Some(12), Some(129))
        );
        assert_eq!(
            (l.failures[4].status, l.failures[4].vendor_err),
            (Some(12), Some(129))
        );
        assert_eq!(l.failures[5].error.as_deref(), Some("out of memory"));
        assert_eq!(l.failures[6].error.as_deref(), Some("invalid argument"));
        assert_eq!(l.versions, vec!["2.18.3"]);
    }

    #[test]
    fn wrapped_and_cut_transports_are_joined_or_not_trusted() {
        // A hard wrap inside `/GDRDMA`: joined.
        let t = "a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDR\nDMA\na:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0\n/GDRDMA\na:1:2 [0] NCCL INFO x\n";
        let l = parse(t);
        assert_eq!(l.connections.len(), 2, "{:?}", l.unreadable);
        assert!(l
            .connections
            .iter()
            .all(|c| matches!(c.transport, Transport::Net { gdr: true, .. })));
        // A tail fragment that nothing completes is not read as "no GDR".
        let l = parse("a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GD\nTraceback (most recent call last):\n");
        assert!(l.connections.is_empty());
        assert_eq!(l.unreadable.len(), 1);
        // The last line may be cut right after the device number.
        let l = parse("a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\na:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0");
        assert_eq!(l.connections.len(), 1);
        assert_eq!(l.unreadable.len(), 1);
    }

    #[test]
    fn launcher_prefixes_do_not_hide_the_origin() {
        let t = "(train pid=26) 2024-05-11 14:10:52.224 n176:2657296:2658229 [1] NCCL INFO Connected all rings\n 2025-02-18 12:54 ncivk:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3\n";
        let l = parse(t);
        assert_eq!(l.hosts, vec!["n176", "ncivk"]);
        assert_eq!(l.nccl_lines, 2);
    }

    #[test]
    fn warnings_and_a_file_s_last_line() {
        let t = "\
h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>
h:1:2 [0] init.cc:1234 NCCL WARN Cuda failure 'out of memory'
n:1:2 [0] misc/socket.cc:50 NCCL WARN Net : No interface found in the same subnet as remote address
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0
";
        let l = parse_file(t);
        let w: Vec<&str> = l.warnings.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(
            w,
            vec![
                "Cuda failure 'out of memory'",
                "Net : No interface found in the same subnet as remote address"
            ],
            "every WARN line, a failure kind or not"
        );
        assert_eq!(l.warnings[1].origin.line, 3);
        // A file that ends with a newline holds its last line whole; a paste may be cut.
        assert_eq!((l.connections.len(), l.unreadable.len()), (1, 0));
        assert_eq!(parse(t).connections.len(), 0);
        assert_eq!(parse_file(t.trim_end()).connections.len(), 0);
        assert_eq!(
            l.connections[0].describe(),
            "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0"
        );
    }

    #[test]
    fn transports_print_back_as_nccl_wrote_them() {
        for t in [
            "NET/IB/3(2)/GDRDMA(PCI)/Shared",
            "NET/IBext_v8/0",
            "P2P/CUMEM/read",
            "P2P/direct pointer",
            "P2P/indirect/2[2]",
            "SHM/direct/direct",
        ] {
            assert_eq!(parse_transport(t).label(), t);
        }
        let l =
            parse("a:1:2 [2] NCCL INFO Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct\n");
        assert_eq!(
            l.connections[0].describe(),
            "Channel 01 : 2[1040] -> 0[1020] via SHM/direct/direct"
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let l = parse(&s);
            let _ = l.logged_gdr();
            for c in &parse_file(&s).connections {
                let _ = c.describe();
            }
        }

        #[test]
        fn channel_lines_read_back_what_was_written(
            ch in 0u32..64, conn in 0u32..2, a in 0u32..512, b in 0u32..512,
            dev in 0u32..32, proxy in proptest::option::of(0u32..512), gdr: bool, send: bool,
        ) {
            let dir = if send { "send" } else { "receive" };
            let line = format!(
                "Channel {ch:02}/{conn} : {a}[{a}] -> {b}[{b}] [{dir}] via NET/IB/{dev}{}{}",
                proxy.map(|p| format!("({p})")).unwrap_or_default(),
                if gdr { "/GDRDMA" } else { "" }
            );
            let l = parse_file(&format!("h:1:2 [0] NCCL INFO {line}\n"));
            prop_assert_eq!(l.connections.len(), 1);
            let c = &l.connections[0];
            prop_assert_eq!((c.channel, c.conn, c.from_rank, c.to_rank), (ch, Some(conn), a, b));
            prop_assert_eq!(c.local().0, if send { a } else { b });
            prop_assert_eq!(
                &c.transport,
                &Transport::Net { net: "IB".into(), dev, proxy, gdr, gdr_pci: false, shared: false }
            );
            prop_assert_eq!(c.describe(), line);
        }

        #[test]
        fn never_panics_on_nccl_like_lines(lines in proptest::collection::vec("(h:1:2 \\[[0-9]\\] NCCL (INFO|WARN) )?(Channel [0-9]{2}(/[0-9])? : [0-9]+(\\[[0-9a-f]*\\])? -> [0-9]*(\\[[0-9]\\])? (\\[send\\] |\\[receive\\] )?via (NET/IB/[0-9]*(\\([0-9]\\))?(/GDRDMA)?|P2P/CUMEM|SHM/direct/direct)|GPU Direct RDMA (Enabled|Disabled) for (GPU [0-9a-f]+ / )?HCA [0-9]* ?('mlx5_0')? ?(\\(distance [0-9] [<>=]+ [0-9]\\))?(, read [01])?|NET/IB : Using (\\[[0-9]\\][a-z0-9_:/]*)*|Got completion with (error|status=)[0-9a-zA-Z_()]*)", 0..20)) {
            let l = parse(&lines.join("\n"));
            let g = l.logged_gdr();
            // Every logged decision comes from a connection line that said NET.
            prop_assert!(g.len() <= l.connections.len());
            for c in &l.connections {
                if let Transport::Net { gdr, .. } = &c.transport {
                    prop_assert!(lines.iter().any(|x| x.contains("via NET")));
                    if *gdr { prop_assert!(lines.iter().any(|x| x.contains("GDRDMA"))); }
                }
            }
        }
    }
}
