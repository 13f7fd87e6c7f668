//! The lines of NCCL's `NCCL_DEBUG=INFO` log that `probe --nccl` reads, and their mapping onto
//! the comparison's [`Observed`] / [`ObservedP2p`].
//!
//! REPLACE WITH `gdrdoctor_checks::paste::nccl` (issue 13) when it is on main: [`channels`],
//! [`net_names`] and [`warnings`] are the small subset of an NCCL log parser this probe needs
//! (the channel lines, the `NET/<net> : Using [n]name` lists and the WARN lines), written
//! before that parser landed. `paste::nccl::parse(text)` gives the same facts
//! (`connections`, `net_devices`, `failures`); [`observe`] stays, fed from it.
//!
//! The channel lines, as NCCL prints them (NVIDIA/nccl v2.28.9-1; the same shapes since 2.19,
//! with the bus id instead of the NVML index in the brackets before):
//!
//! ```text
//! Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read        src/transport/p2p.cc L393 (also P2P/IPC L398,
//! Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer    P2P/direct pointer L386, P2P/indirect/2[2] L406)
//! Channel 00 : 0[0] -> 1[1] via SHM/direct/direct       src/transport/shm.cc L128 (no /conn)
//! Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA       src/transport/net.cc L313
//! Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0(2)/GDRDMA    L317: the proxy rank 2 sends (PXN)
//! Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/0/GDRDMA    L359
//! ```
//!
//! `rank[nvmlDev]`; `/GDRDMA(PCI)` when NCCL maps GPU memory over PCIe on a C2C platform,
//! `/Shared` for shared network buffers. A `[send]` line is printed by the sending rank, a
//! `[receive]` line by the receiving one: the GPU that touches the NIC is the sender's for a
//! send and the receiver's for a receive.

use super::RankGpu;
use gdrdoctor_checks::nccl::compare::{Dir, Observed, ObservedP2p};

/// The transport of one channel line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// `NET/<net>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/Shared]`.
    Net {
        net: String,
        dev: u32,
        proxy: Option<u32>,
        gdr: bool,
        pci: bool,
        shared: bool,
    },
    /// `P2P/<mode>`: `CUMEM`, `CUMEM/read`, `IPC`, `direct pointer`, `indirect/2[2]`, ...
    P2p { mode: String },
    /// `SHM/<mode>` (and the pre-2.19 `direct shared memory`).
    Shm { mode: String },
    /// Anything else after `via`.
    Other { text: String },
}

impl Transport {
    /// `P2P/CUMEM`, `SHM/direct/direct`, `NET/IB/0/GDRDMA`: as NCCL wrote it.
    pub fn label(&self) -> String {
        match self {
            Transport::Net {
                net,
                dev,
                proxy,
                gdr,
                pci,
                shared,
            } => format!(
                "NET/{net}/{dev}{}{}{}{}",
                proxy.map(|p| format!("({p})")).unwrap_or_default(),
                if *gdr { "/GDRDMA" } else { "" },
                if *pci { "(PCI)" } else { "" },
                if *shared { "/Shared" } else { "" }
            ),
            Transport::P2p { mode } => format!("P2P/{mode}"),
            Transport::Shm { mode } => format!("SHM/{mode}"),
            Transport::Other { text } => text.clone(),
        }
    }
}

/// One `Channel ... via ...` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    /// 1-based line number in the log.
    pub line: usize,
    pub channel: u32,
    pub from: u32,
    pub to: u32,
    pub dir: Option<Dir>,
    pub transport: Transport,
    /// The line from `Channel` on.
    pub text: String,
}

impl Channel {
    /// The rank on this side of a network connection: the sender for `[send]`, the receiver
    /// for `[receive]`.
    pub fn local(&self) -> u32 {
        match self.dir {
            Some(Dir::Receive) => self.to,
            _ => self.from,
        }
    }
}

/// The digits at the start of `s` and the rest.
fn digits(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s[..end].parse().ok()?;
    Some((n, &s[end..]))
}

/// `12[3]` (or `12[1c000]`) at the start of `s`: the rank, and the rest after the bracket.
fn rank(s: &str) -> Option<(u32, &str)> {
    let (r, rest) = digits(s.trim_start())?;
    let rest = rest.strip_prefix('[')?;
    let close = rest.find(']')?;
    Some((r, &rest[close + 1..]))
}

fn transport(t: &str) -> Transport {
    let t = t.trim();
    if let Some(rest) = t.strip_prefix("NET/") {
        let mut parts = rest.split('/');
        let net = parts.next().unwrap_or("").to_string();
        let devpart = parts.next().unwrap_or("");
        if let Some((dev, after)) = digits(devpart) {
            let proxy = after
                .strip_prefix('(')
                .and_then(|x| digits(x))
                .map(|(p, _)| p);
            let flags: Vec<&str> = parts.collect();
            return Transport::Net {
                net,
                dev,
                proxy,
                gdr: flags.iter().any(|f| f.starts_with("GDRDMA")),
                pci: flags.iter().any(|f| f.contains("(PCI)")),
                shared: flags.iter().any(|f| f.starts_with("Shared")),
            };
        }
        return Transport::Other { text: t.into() };
    }
    if let Some(mode) = t.strip_prefix("P2P/") {
        return Transport::P2p { mode: mode.into() };
    }
    if let Some(mode) = t.strip_prefix("SHM/") {
        return Transport::Shm { mode: mode.into() };
    }
    if t == "direct shared memory" {
        return Transport::Shm { mode: t.into() };
    }
    Transport::Other { text: t.into() }
}

/// One channel line, or `None` when the line is not one.
pub fn channel(line: &str, number: usize) -> Option<Channel> {
    let info = line.find("NCCL INFO ")?;
    let body = line[info + "NCCL INFO ".len()..].trim_end();
    let rest = body.strip_prefix("Channel ")?;
    let (ch, rest) = digits(rest)?;
    // `/<conn>` (P2P and NET lines), absent on SHM lines.
    let rest = match rest.strip_prefix('/') {
        Some(r) => digits(r)?.1,
        None => rest,
    };
    let rest = rest.trim_start().strip_prefix(':')?;
    let (from, rest) = rank(rest)?;
    let rest = rest.trim_start().strip_prefix("->")?;
    let (to, rest) = rank(rest)?;
    let rest = rest.trim_start();
    let (dir, rest) = if let Some(r) = rest.strip_prefix("[send]") {
        (Some(Dir::Send), r)
    } else if let Some(r) = rest.strip_prefix("[receive]") {
        (Some(Dir::Receive), r)
    } else {
        (None, rest)
    };
    let via = rest.trim_start().strip_prefix("via ")?;
    Some(Channel {
        line: number,
        channel: ch,
        from,
        to,
        dir,
        transport: transport(via),
        text: body.to_string(),
    })
}

/// Every channel line of a log.
pub fn channels(text: &str) -> Vec<Channel> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| channel(l, i + 1))
        .collect()
}

/// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ...` (src/transport/net_ib/
/// init.cc) and `NET/Socket : Using [0]eth0:10.0.0.1<0>`: (net, index, device name).
pub fn net_names(text: &str) -> Vec<(String, u32, String)> {
    let mut out: Vec<(String, u32, String)> = Vec::new();
    for l in text.lines() {
        let Some(i) = l.find("NCCL INFO NET/") else {
            continue;
        };
        let body = &l[i + "NCCL INFO NET/".len()..];
        let Some((net, rest)) = body.split_once(" : Using ") else {
            continue;
        };
        let net = net.trim().to_string();
        let list = rest.split(';').next().unwrap_or("");
        for tok in list.split_whitespace() {
            let Some(t) = tok.strip_prefix('[') else {
                continue;
            };
            let Some((idx, name)) = t.split_once(']') else {
                continue;
            };
            let Ok(idx) = idx.parse::<u32>() else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| !matches!(c, ':' | '/' | '<'))
                .collect();
            if !name.is_empty() && !out.iter().any(|(n, x, _)| *n == net && *x == idx) {
                out.push((net.clone(), idx, name));
            }
        }
    }
    out
}

/// NCCL's WARN lines (the text after `NCCL WARN`), in order.
pub fn warnings(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.find("NCCL WARN")
                .map(|i| l[i + "NCCL WARN".len()..].trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether a network is RDMA (NCCL's IB transport or an IB plugin: `IB`, `IBext`,
/// `IBext_v8`), not sockets.
pub fn is_rdma(net: &str) -> bool {
    !net.eq_ignore_ascii_case("Socket")
}

/// NCCL's log turned into the comparison's observations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// GPU x NIC x direction over RDMA networks.
    pub net: Vec<Observed>,
    /// The transport between two GPUs of the node (every connection between two ranks).
    pub pairs: Vec<ObservedP2p>,
    /// Network connections through sockets (`NET/Socket`).
    pub sockets: Vec<String>,
    pub channel_lines: usize,
}

/// Fold the channel lines into observations. `ranks`: the communicator's ranks and GPUs;
/// `nic_name(net, dev)`: the device name of NCCL's net index.
pub fn observe(
    chans: &[Channel],
    ranks: &[RankGpu],
    nic_name: &dyn Fn(&str, u32) -> Option<String>,
) -> Observation {
    let gpu = |r: u32| -> String {
        ranks
            .iter()
            .find(|x| x.rank == r)
            .map(|x| x.bdf.clone())
            .unwrap_or_else(|| format!("rank {r}"))
    };
    let mut o = Observation {
        channel_lines: chans.len(),
        ..Default::default()
    };
    for c in chans {
        let source = format!("log line {}: {}", c.line, c.text);
        let (a, b) = (gpu(c.from), gpu(c.to));
        // One observation per pair and transport: several channels fold into one.
        let label = match &c.transport {
            // The GPU pair sees the network, GDR or not: `NET/IB/0`.
            Transport::Net { net, dev, .. } => format!("NET/{net}/{dev}"),
            t => t.label(),
        };
        let same = |p: &ObservedP2p| {
            p.transport == label && ((p.a == a && p.b == b) || (p.a == b && p.b == a))
        };
        if !o.pairs.iter().any(same) && a != b {
            o.pairs.push(ObservedP2p {
                a: a.clone(),
                b: b.clone(),
                transport: label,
                source: source.clone(),
            });
        }
        if let Transport::Net {
            net,
            dev,
            proxy,
            gdr,
            ..
        } = &c.transport
        {
            if !is_rdma(net) {
                if !o.sockets.contains(&source) {
                    o.sockets.push(source);
                }
                continue;
            }
            o.net.push(Observed {
                gpu: gpu(c.local()),
                nic: nic_name(net, *dev).unwrap_or_else(|| format!("NET/{net}/{dev}")),
                dir: c.dir.unwrap_or(Dir::Send),
                gdr: *gdr,
                via: proxy.map(gpu),
                source,
            });
        }
    }
    o
}

/// A log kept whole up to `cap` bytes; a longer one keeps the lines the verdict and a reader
/// need (version, environment, network lists, channel lines, WARN lines, Init lines), then is
/// cut at a line boundary. The flag says whether anything was left out.
pub fn keep(text: &str, cap: usize) -> (String, bool) {
    if text.len() <= cap {
        return (text.to_string(), false);
    }
    let wanted = [
        "NCCL version",
        "set by environment",
        " : Using ",
        "Channel ",
        "NCCL WARN",
        "Init COMPLETE",
        "Init START",
        "GPU Direct RDMA",
    ];
    let mut out = String::new();
    for l in text
        .lines()
        .filter(|l| wanted.iter().any(|w| l.contains(w)))
    {
        if out.len() + l.len() + 1 > cap {
            break;
        }
        out.push_str(l);
        out.push('\n');
    }
    (out, true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_channel_line_shape() {
        // The shapes of NVIDIA/nccl v2.28.9-1 (module comment), with the line prefix NCCL
        // writes into NCCL_DEBUG_FILE (`host:pid:tid [cudaDev] NCCL INFO `).
        let p = "node1:4242:4250 [0] NCCL INFO ";
        let c = channel(
            &format!("{p}Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"),
            7,
        )
        .unwrap();
        assert_eq!((c.line, c.channel, c.from, c.to, c.dir), (7, 0, 0, 1, None));
        assert_eq!(c.transport.label(), "P2P/CUMEM/read");
        let c = channel(
            &format!("{p}Channel 03/0 : 1[1] -> 0[0] via P2P/direct pointer"),
            1,
        )
        .unwrap();
        assert_eq!(
            c.transport,
            Transport::P2p {
                mode: "direct pointer".into()
            }
        );
        let c = channel(
            &format!("{p}Channel 01 : 0[0] -> 1[1] via SHM/direct/direct"),
            1,
        )
        .unwrap();
        assert_eq!(
            c.transport,
            Transport::Shm {
                mode: "direct/direct".into()
            }
        );
        let c = channel(
            &format!("{p}Channel 02/0 : 0[0] -> 1[1] [send] via NET/IB/3(2)/GDRDMA(PCI)/Shared"),
            1,
        )
        .unwrap();
        assert_eq!(
            c.transport,
            Transport::Net {
                net: "IB".into(),
                dev: 3,
                proxy: Some(2),
                gdr: true,
                pci: true,
                shared: true
            }
        );
        assert_eq!(c.transport.label(), "NET/IB/3(2)/GDRDMA(PCI)/Shared");
        assert_eq!((c.dir, c.local()), (Some(Dir::Send), 0));
        let c = channel(
            &format!("{p}Channel 02/1 : 0[0] -> 1[1] [receive] via NET/IBext_v8/0"),
            1,
        )
        .unwrap();
        assert_eq!((c.dir, c.local()), (Some(Dir::Receive), 1));
        assert!(matches!(c.transport, Transport::Net { gdr: false, .. }));
        // Before 2.19 the brackets hold the bus id (NVIDIA/nccl#707 shows this shape).
        let c = channel(
            &format!("{p}Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA"),
            1,
        )
        .unwrap();
        assert_eq!((c.from, c.to, c.local()), (2, 0, 0));
        // Not channel lines.
        for l in [
            "node1:1:1 [0] NCCL INFO Channel 00/02 :    0   1",
            "node1:1:1 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/IB/0",
            "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
            "node1:1:1 [0] NCCL INFO Connected all rings",
        ] {
            assert_eq!(channel(l, 1), None, "{l}");
        }
    }

    #[test]
    fn network_lists_and_warnings() {
        let t = "\
h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>
h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>
h:1:2 [0] init.cc:1234 NCCL WARN Cuda failure 'out of memory'
";
        assert_eq!(
            net_names(t),
            vec![
                ("IB".to_string(), 0, "mlx5_0".to_string()),
                ("IB".to_string(), 1, "mlx5_1".to_string()),
                ("Socket".to_string(), 0, "eth0".to_string()),
            ]
        );
        assert_eq!(
            warnings(t),
            vec!["Cuda failure 'out of memory'".to_string()]
        );
    }

    fn ranks() -> Vec<RankGpu> {
        vec![
            RankGpu {
                rank: 0,
                cuda: 0,
                bdf: "0000:18:00.0".into(),
            },
            RankGpu {
                rank: 1,
                cuda: 1,
                bdf: "0000:28:00.0".into(),
            },
        ]
    }

    #[test]
    fn channels_fold_into_pairs_and_gpu_nic_directions() {
        let t = "\
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
h:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/1
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0(0)/GDRDMA
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0
";
        let names = |net: &str, dev: u32| (net == "IB").then(|| format!("mlx5_{dev}"));
        let o = observe(&channels(t), &ranks(), &names);
        assert_eq!(o.channel_lines, 5);
        assert_eq!(o.net.len(), 4);
        assert_eq!(
            (o.net[0].gpu.as_str(), o.net[0].nic.as_str(), o.net[0].gdr),
            ("0000:18:00.0", "mlx5_0", true)
        );
        assert_eq!(
            (
                o.net[2].gpu.as_str(),
                o.net[2].nic.as_str(),
                o.net[2].dir,
                o.net[2].gdr
            ),
            ("0000:28:00.0", "mlx5_1", Dir::Receive, false)
        );
        assert_eq!(
            o.net[3].via.as_deref(),
            Some("0000:18:00.0"),
            "PXN through rank 0's GPU"
        );
        assert_eq!(o.sockets.len(), 1);
        let pairs: Vec<&str> = o.pairs.iter().map(|p| p.transport.as_str()).collect();
        assert_eq!(pairs, vec!["NET/IB/0", "NET/IB/1", "NET/Socket/0"]);
    }

    #[test]
    fn a_long_log_keeps_the_lines_that_matter() {
        let mut t = String::new();
        for i in 0..2000 {
            t.push_str(&format!("h:1:2 [0] NCCL INFO graph search line {i}\n"));
        }
        t.push_str("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n");
        let (k, cut) = keep(&t, 4096);
        assert!(cut);
        assert_eq!(channels(&k).len(), 1);
        assert_eq!(keep("short", 4096), ("short".to_string(), false));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = channels(&s);
            let _ = net_names(&s);
            let _ = warnings(&s);
            let _ = keep(&s, 16);
        }

        #[test]
        fn channel_lines_read_back_what_was_written(
            ch in 0u32..64, conn in 0u32..2, a in 0u32..512, b in 0u32..512,
            dev in 0u32..32, gdr: bool, send: bool,
        ) {
            let dir = if send { "send" } else { "receive" };
            let l = format!(
                "h:1:2 [0] NCCL INFO Channel {ch:02}/{conn} : {a}[{a}] -> {b}[{b}] [{dir}] via NET/IB/{dev}{}",
                if gdr { "/GDRDMA" } else { "" }
            );
            let c = channel(&l, 1).unwrap();
            prop_assert_eq!((c.channel, c.from, c.to), (ch, a, b));
            prop_assert_eq!(c.local(), if send { a } else { b });
            prop_assert_eq!(c.transport, Transport::Net { net: "IB".into(), dev, proxy: None, gdr, pci: false, shared: false });
        }
    }
}
