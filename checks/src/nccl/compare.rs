//! What NCCL did against what gdrdoctor predicted: one finding per GPU, NIC and direction
//! (and per GPU pair for the GPU-to-GPU transport). A disagreement is `fail` with both sides as
//! evidence; an agreement is `pass`, also with both sides; a prediction that could not be made
//! is `error`.
//!
//! The observations come from NCCL's own channel lines (`Channel 00/0 : 0[0] -> 1[1] [send] via
//! NET/IB/0/GDRDMA`, src/transport/net.cc v2.30.7-1 L323-379; `... via P2P/CUMEM`,
//! `... via SHM/direct/direct`), read by the one NCCL log parser (`paste::nccl`, the parser of
//! `gdrdoctor diagnose`) and turned into [`Observed`] / [`ObservedP2p`] by [`observe`]
//! (`probe --nccl`).

use super::rule::{Decision, System};
use crate::paste::nccl::{NcclLog, Transport};
use crate::report::{Finding, Status};

/// The finding id of the comparison (`probe --nccl`).
pub const ID: &str = "probe.nccl";

/// Send or receive: the direction of the NCCL log parser (one type for both).
pub use crate::paste::nccl::Direction as Dir;

/// One GPU x NIC x direction as NCCL used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The GPU as the prediction names it ([`System`]'s `Gpu::id`: a PCI address).
    pub gpu: String,
    /// The NIC's device name (`mlx5_0`).
    pub nic: String,
    pub dir: Dir,
    /// `/GDRDMA` on the channel line.
    pub gdr: bool,
    /// `NET/IB/0(3)`: the proxy rank's GPU (PXN), as a [`System`] GPU id when known.
    pub via: Option<String>,
    /// The evidence: the log line(s), or `file:line`.
    pub source: String,
}

/// The transport NCCL used between two GPUs of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedP2p {
    pub a: String,
    pub b: String,
    /// `P2P/CUMEM`, `P2P/IPC`, `P2P/direct pointer`, `SHM/direct/direct`, `NET/IB/0`, ...
    pub transport: String,
    pub source: String,
}

/// Whether a network is RDMA (NCCL's IB transport or an IB plugin: `IB`, `IBext`,
/// `IBext_v8`), not sockets: NCCL's `Socket` and socket plugins such as Google's
/// `FastSocket` (which print `NET/FastSocket : GPU Direct RDMA Disabled for HCA 0 'eth0'` for
/// every interface, nccl#1519).
pub fn is_rdma(net: &str) -> bool {
    !net.to_ascii_lowercase().contains("socket")
}

/// NCCL's log turned into the comparison's observations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// GPU x NIC x direction over RDMA networks.
    pub net: Vec<Observed>,
    /// The transport between two GPUs of the node (every connection between two ranks).
    pub pairs: Vec<ObservedP2p>,
    /// Network connections through sockets (`NET/Socket`): their evidence lines.
    pub sockets: Vec<String>,
    /// Channel lines read (connections the parser trusted).
    pub channel_lines: usize,
}

/// The adapter from the NCCL log parser to the comparison: every connection line of `log`
/// becomes an [`ObservedP2p`] (one per GPU pair and transport; a network connection between
/// two GPUs is `NET/<net>/<dev>`, GDR or not) and, over an RDMA network, an [`Observed`] for
/// the GPU on this side (the sender's for `[send]`, the receiver's for `[receive]`; a line
/// without a direction counts as a send). `gpu(rank)`: the rank's GPU as the prediction names
/// it, `None` when unknown (then `rank N`); `nic(net, dev)`: the device name of NCCL's net
/// index, `None` when unknown (then `NET/<net>/<dev>`).
pub fn observe(
    log: &NcclLog,
    gpu: &dyn Fn(u32) -> Option<String>,
    nic: &dyn Fn(&str, u32) -> Option<String>,
) -> Observation {
    let gpu = |r: u32| gpu(r).unwrap_or_else(|| format!("rank {r}"));
    let mut o = Observation {
        channel_lines: log.connections.len(),
        ..Default::default()
    };
    for c in &log.connections {
        let source = format!("log line {}: {}", c.origin.line, c.describe());
        let (a, b) = (gpu(c.from_rank), gpu(c.to_rank));
        // One observation per pair and transport: several channels fold into one.
        let label = match &c.transport {
            Transport::Net { net, dev, .. } => format!("NET/{net}/{dev}"),
            t => t.label(),
        };
        let same = |p: &ObservedP2p| {
            p.transport == label && ((p.a == a && p.b == b) || (p.a == b && p.b == a))
        };
        if a != b && !o.pairs.iter().any(same) {
            o.pairs.push(ObservedP2p {
                a: a.clone(),
                b: b.clone(),
                transport: label,
                source: source.clone(),
            });
        }
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
        if !is_rdma(net) {
            if !o.sockets.contains(&source) {
                o.sockets.push(source);
            }
            continue;
        }
        o.net.push(Observed {
            gpu: gpu(c.local().0),
            nic: nic(net, *dev).unwrap_or_else(|| format!("NET/{net}/{dev}")),
            dir: c.direction.unwrap_or(Dir::Send),
            gdr: *gdr,
            via: proxy.map(gpu),
            source,
        });
    }
    o
}

fn pred_text(sys: &System, d: &Decision, g: usize, n: usize, dir: Dir) -> (String, Option<bool>) {
    let Some(v) = d.pair(g, n) else {
        return ("no prediction".into(), None);
    };
    let side = match dir {
        Dir::Send => &v.send,
        Dir::Receive => &v.receive,
    };
    let undecided = !side.gdr && !v.undecided.is_empty();
    let via = v
        .via
        .and_then(|p| sys.gpus.get(p))
        .map(|p| format!(" via {} (PXN)", p.id))
        .unwrap_or_default();
    let text = if side.gdr {
        format!(
            "GDR{}{} ({}; threshold {})",
            if side.pci_mode { "(PCI)" } else { "" },
            if dir == Dir::Send { via.as_str() } else { "" },
            v.path.map(|k| k.as_str()).unwrap_or("?"),
            d.threshold_text()
        )
    } else {
        format!("no GDR: {}", side.reasons.join("; "))
    };
    (text, if undecided { None } else { Some(side.gdr) })
}

/// Compare NCCL's observed GPU x NIC decisions with the prediction `d` for `sys`.
pub fn compare(sys: &System, d: &Decision, observed: &[Observed]) -> Vec<Finding> {
    // One finding per (gpu, nic, dir); several channel lines fold into one.
    let mut groups: Vec<(&str, &str, Dir, Vec<&Observed>)> = Vec::new();
    for o in observed {
        match groups
            .iter_mut()
            .find(|(g, n, dir, _)| *g == o.gpu && *n == o.nic && *dir == o.dir)
        {
            Some(x) => x.3.push(o),
            None => groups.push((&o.gpu, &o.nic, o.dir, vec![o])),
        }
    }
    let mut out = Vec::new();
    for (gpu, nic, dir, obs) in groups {
        let subject = format!("{gpu}|{nic}/{}", dir.as_str());
        let g = sys.gpus.iter().position(|x| x.id == gpu);
        let n = sys.nics.iter().position(|x| x.name == nic);
        let gdr_lines = obs.iter().filter(|o| o.gdr).count();
        let seen = if gdr_lines == obs.len() {
            "GDR (/GDRDMA)".to_string()
        } else if gdr_lines == 0 {
            "no GDR (no /GDRDMA)".to_string()
        } else {
            format!(
                "mixed: {gdr_lines} of {} channel lines with /GDRDMA",
                obs.len()
            )
        };
        let via = obs.iter().find_map(|o| o.via.clone());
        let seen = match &via {
            Some(p) => format!("{seen} through proxy {p} (PXN)"),
            None => seen,
        };
        let sources = obs
            .iter()
            .take(3)
            .map(|o| o.source.as_str())
            .collect::<Vec<_>>()
            .join(" | ");
        let (Some(g), Some(n)) = (g, n) else {
            out.push(
                Finding::new(
                    ID,
                    Status::Error,
                    subject,
                    format!(
                        "nccl used {nic} for {gpu}, which gdrdoctor does not see on this node: no prediction to compare"
                    ),
                )
                .evidence("nccl", format!("{seen}: {sources}")),
            );
            continue;
        };
        let (pred, p) = pred_text(sys, d, g, n, dir);
        let observed_gdr = if gdr_lines == obs.len() {
            Some(true)
        } else if gdr_lines == 0 {
            Some(false)
        } else {
            None
        };
        let rules = d.rules.describe();
        let f = match (p, observed_gdr) {
            (None, _) => Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("nccl: {seen}; gdrdoctor could not decide this pair"),
            ),
            (Some(x), Some(y)) if x == y => Finding::new(
                ID,
                Status::Pass,
                &subject,
                format!("nccl and gdrdoctor agree: {}", if x { "gdr" } else { "no gdr" }),
            ),
            (Some(x), _) => Finding::new(
                ID,
                Status::Fail,
                &subject,
                format!(
                    "nccl {} where gdrdoctor predicted {}",
                    if observed_gdr == Some(true) {
                        "used gdr".to_string()
                    } else if observed_gdr == Some(false) {
                        "used no gdr".to_string()
                    } else {
                        seen.clone()
                    },
                    if x { "gdr" } else { "no gdr" }
                ),
            )
            .fix("report it with the NCCL log, NCCL_TOPO_DUMP_FILE and a `gdrdoctor snapshot`: a rule gdrdoctor models differs from this NCCL; until then trust the /GDRDMA lines"),
        };
        out.push(
            f.evidence("nccl (observed)", format!("{seen}: {sources}"))
                .evidence(format!("gdrdoctor ({rules})"), pred),
        );
    }
    out
}

/// Compare NCCL's GPU-to-GPU transports with the P2P prediction of `d`.
pub fn compare_p2p(sys: &System, d: &Decision, observed: &[ObservedP2p]) -> Vec<Finding> {
    let mut out = Vec::new();
    for o in observed {
        let subject = format!("{}|{}", o.a, o.b);
        let ia = sys.gpus.iter().position(|x| x.id == o.a);
        let ib = sys.gpus.iter().position(|x| x.id == o.b);
        let pred = match (ia, ib) {
            (Some(a), Some(b)) => d
                .p2p
                .iter()
                .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a)),
            _ => None,
        };
        let p2p_seen = o.transport.starts_with("P2P");
        let f = match pred {
            None => Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("nccl used {} between gpus gdrdoctor cannot pair", o.transport),
            ),
            Some(p) => match p.p2p {
                None => Finding::new(
                    ID,
                    Status::Error,
                    &subject,
                    format!("nccl used {}; gdrdoctor could not decide: {}", o.transport, p.reason),
                ),
                Some(x) if x == p2p_seen => Finding::new(
                    ID,
                    Status::Pass,
                    &subject,
                    format!(
                        "nccl and gdrdoctor agree: {}",
                        if x { "p2p" } else { "no p2p" }
                    ),
                ),
                Some(x) => Finding::new(
                    ID,
                    Status::Fail,
                    &subject,
                    format!(
                        "nccl used {} where gdrdoctor predicted {}",
                        o.transport,
                        if x { "p2p" } else { "no p2p" }
                    ),
                )
                .fix("check `gdrdoctor check --only gpu.p2p` and NCCL_P2P_LEVEL / NCCL_P2P_DISABLE in the job's environment"),
            },
        };
        let pred_text = pred
            .map(|p| {
                format!(
                    "{} over {}: {}",
                    match p.p2p {
                        Some(true) => "p2p",
                        Some(false) => "no p2p",
                        None => "unknown",
                    },
                    p.path.map(|k| k.as_str()).unwrap_or("?"),
                    p.reason
                )
            })
            .unwrap_or_else(|| "no prediction".into());
        out.push(
            f.evidence("nccl (observed)", format!("{}: {}", o.transport, o.source))
                .evidence(format!("gdrdoctor ({})", d.rules.describe()), pred_text),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::nccl::env::NcclEnv;
    use crate::nccl::rule::{decide, Config};
    use crate::nccl::{topo_dump, Chosen, Version};

    const DUMP: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel">
    <pci busid="0000:16:00.0" class="0x060400">
      <pci busid="0000:18:00.0" class="0x030200"><gpu dev="0" sm="90" rank="0" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
      <pci busid="0000:19:00.0" class="0x020700"><nic><net name="mlx5_0" dev="0" port="1" gdr="1"/></nic></pci>
    </pci>
    <pci busid="0000:26:00.0" class="0x060400">
      <pci busid="0000:28:00.0" class="0x030200"><gpu dev="1" sm="90" rank="1" gdr="1"><nvlink target="0000:05:00.0" count="18" tclass="0x068000"/></gpu></pci>
    </pci>
  </cpu>
</system>"#;

    fn decided(env: &[(&str, &str)]) -> (System, Decision) {
        let s = topo_dump::parse(DUMP).unwrap().system();
        let v = Version::new(2, 28, 9);
        let m = env
            .iter()
            .map(|(k, x)| (k.to_string(), x.to_string()))
            .collect();
        let d = decide(
            &s,
            &Config {
                rules: Chosen {
                    version: v,
                    source: "test".into(),
                    assumed: false,
                },
                env: NcclEnv::parse(Some(&m), "env", v),
            },
        );
        (s, d)
    }

    fn obs(gpu: &str, dir: Dir, gdr: bool, via: Option<&str>) -> Observed {
        Observed {
            gpu: gpu.into(),
            nic: "mlx5_0".into(),
            dir,
            gdr,
            via: via.map(str::to_string),
            source: format!("Channel 00/0 [{}]", dir.as_str()),
        }
    }

    #[test]
    fn agreement_passes_and_disagreement_fails_with_both_sides() {
        let (s, d) = decided(&[]);
        // GPU 1 has no NIC of its own: PXN through GPU 0 (NET/IB/0(0)/GDRDMA).
        let f = compare(
            &s,
            &d,
            &[
                obs("0000:18:00.0", Dir::Send, true, None),
                obs("0000:18:00.0", Dir::Send, true, None),
                obs("0000:28:00.0", Dir::Send, true, Some("0000:18:00.0")),
                obs("0000:28:00.0", Dir::Receive, false, None),
                obs("0000:99:00.0", Dir::Receive, false, None),
            ],
        );
        assert_eq!(f.len(), 4, "two lines of one pair fold into one finding");
        assert_eq!(f[0].status, Status::Pass);
        assert_eq!(f[0].evidence.len(), 2);
        assert!(f[0].evidence[1].source.contains("NCCL 2.28.9 rules"));
        assert_eq!(f[1].status, Status::Pass, "{:?}", f[1]);
        assert!(f[1].evidence[1].observed.contains("via 0000:18:00.0 (PXN)"));
        assert_eq!(f[2].status, Status::Fail, "{:?}", f[2]);
        assert!(f[2]
            .message
            .contains("used no gdr where gdrdoctor predicted gdr"));
        assert!(f[2].remediation.is_some());
        assert_eq!(f[3].status, Status::Error);
    }

    #[test]
    fn gpu_pair_transport_against_the_p2p_prediction() {
        // Our two-GPU machine: NCCL ran `via P2P/CUMEM`, and `via SHM/direct/direct` with
        // NCCL_P2P_DISABLE=1 (knowledge/gdr-ground-truth.md, "Observed").
        let (s, d) = decided(&[]);
        let o = |t: &str| ObservedP2p {
            a: "0000:18:00.0".into(),
            b: "0000:28:00.0".into(),
            transport: t.into(),
            source: "log".into(),
        };
        assert_eq!(
            compare_p2p(&s, &d, &[o("P2P/CUMEM")])[0].status,
            Status::Pass
        );
        assert_eq!(
            compare_p2p(&s, &d, &[o("SHM/direct/direct")])[0].status,
            Status::Fail
        );
        let (s, d) = decided(&[("NCCL_P2P_DISABLE", "1")]);
        assert_eq!(
            compare_p2p(&s, &d, &[o("SHM/direct/direct")])[0].status,
            Status::Pass
        );
    }

    #[test]
    fn the_log_parser_s_connections_become_observations() {
        // The shapes of src/transport/net.cc v2.28.9-1 (L313 send, L317 PXN proxy, L359
        // receive), read by the one NCCL log parser (paste::nccl::parse_file).
        let t = "\
h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA
h:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/1
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0(0)/GDRDMA
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0
h:1:3 [1] NCCL INFO Channel 02/0 : 1[1] -> 0[0] via P2P/CUMEM/read
h:1:3 [1] NCCL INFO Channel 03/0 : 1[1] -> 2[2] via P2P/CUMEM/read
";
        let log = crate::paste::nccl::parse_file(t);
        let gpus = ["0000:18:00.0", "0000:28:00.0"];
        let gpu = |r: u32| gpus.get(r as usize).map(|g| g.to_string());
        let nic = |net: &str, dev: u32| {
            log.net_device(None, net, dev)
                .filter(|_| is_rdma(net))
                .map(|d| d.name.clone())
        };
        let o = observe(&log, &gpu, &nic);
        assert_eq!(o.channel_lines, 7);
        let net: Vec<(&str, &str, Dir, bool, Option<&str>)> = o
            .net
            .iter()
            .map(|x| {
                (
                    x.gpu.as_str(),
                    x.nic.as_str(),
                    x.dir,
                    x.gdr,
                    x.via.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            net,
            vec![
                ("0000:18:00.0", "mlx5_0", Dir::Send, true, None),
                ("0000:18:00.0", "mlx5_0", Dir::Send, true, None),
                ("0000:28:00.0", "mlx5_1", Dir::Receive, false, None),
                (
                    "0000:28:00.0",
                    "mlx5_0",
                    Dir::Send,
                    true,
                    Some("0000:18:00.0")
                ),
            ],
            "the receiver's gpu for [receive], the proxy rank's gpu for PXN"
        );
        assert_eq!(
            o.net[0].source,
            "log line 2: Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA"
        );
        assert_eq!(o.sockets.len(), 1);
        assert!(
            o.sockets[0].ends_with("via NET/Socket/0"),
            "{:?}",
            o.sockets
        );
        let pairs: Vec<(&str, &str, &str)> = o
            .pairs
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str(), p.transport.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("0000:18:00.0", "0000:28:00.0", "NET/IB/0"),
                ("0000:18:00.0", "0000:28:00.0", "NET/IB/1"),
                ("0000:28:00.0", "0000:18:00.0", "NET/Socket/0"),
                ("0000:28:00.0", "0000:18:00.0", "P2P/CUMEM/read"),
                ("0000:28:00.0", "rank 2", "P2P/CUMEM/read"),
            ],
            "channels fold into one pair per transport; an unknown rank is named"
        );
        // A device NCCL did not list stays NCCL's index.
        let none = |_: &str, _: u32| None;
        assert_eq!(observe(&log, &gpu, &none).net[0].nic, "NET/IB/0");
    }
}
