//! The job view of an NCCL log: per host and rank, its GPU, its NICs, whether NCCL used GDR
//! (its own `/GDRDMA` word) and the transport to each peer; the rank whose decisions differ
//! from the others; the runs of a paste side by side; NCCL's word that it has no RDMA network.

use crate::nccl::compare::is_rdma;
use crate::paste::nccl::{NcclLog, Transport};
use crate::paste::Paste;
use crate::report::{Finding, Status};
use serde::Serialize;
use std::collections::BTreeMap;

/// One rank of the job view, as the log shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "rank_view")]
pub struct RankView {
    #[schemars(extend("x-required" = true))]
    pub host: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub pid: Option<u32>,
    pub rank: u32,
    /// From the rank's `Init` line on its host.
    #[schemars(extend("x-required" = true))]
    pub bus_id: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub nvml_dev: Option<u32>,
    #[schemars(extend("x-required" = true))]
    pub cuda_dev: Option<u32>,
    /// The network devices its connections went through (`mlx5_0`, or `NET/IB/3`).
    pub nics: Vec<String>,
    /// NCCL's own word: `true` every network connection of the rank said `/GDRDMA`, `false`
    /// none did, null no network connection (or some did, some did not: `gdr_mixed`).
    #[schemars(extend("x-required" = true))]
    pub gdr: Option<bool>,
    pub gdr_mixed: bool,
    /// The transport to each peer rank (`NET/IB/0/GDRDMA`, `P2P/CUMEM/read`, ..).
    pub peers: BTreeMap<u32, Vec<String>>,
    /// The first line of the log that names the rank.
    pub line: usize,
}

/// One run of a block that held several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "run_view")]
pub struct RunView {
    #[schemars(regex(pattern = super::BLOCK_PATTERN))]
    pub block: String,
    /// 1 the first.
    #[schemars(range(min = 1))]
    pub run: u32,
    /// The first and last line of the run in the pasted file.
    pub lines: [usize; 2],
    /// Why a new run was taken to start at `lines[0]` (runs after the first).
    #[schemars(extend("x-required" = true))]
    pub why: Option<String>,
    pub versions: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub hosts: Vec<String>,
    pub networks: Vec<String>,
    /// Network connection lines with `/GDRDMA`, and all network connection lines.
    pub gdr_lines: usize,
    pub net_lines: usize,
    pub failures: usize,
}

fn key(host: &Option<String>, pid: Option<u32>, rank: u32) -> (Option<String>, Option<u32>, u32) {
    (host.clone(), pid, rank)
}

/// Every rank the log names (its `Init` lines and the connections it printed).
pub fn ranks(log: &NcclLog) -> Vec<RankView> {
    let mut out: Vec<RankView> = Vec::new();
    // One lookup per line (a whole job's log has a million channel lines).
    type K = (Option<String>, Option<u32>, u32);
    let mut index: std::collections::HashMap<K, usize> = Default::default();
    let mut find =
        |out: &mut Vec<RankView>, host: &Option<String>, pid: Option<u32>, rank: u32, line| {
            if let Some(&i) = index.get(&(host.clone(), pid, rank)) {
                return i;
            }
            index.insert(key(host, pid, rank), out.len());
            out.push(RankView {
                host: host.clone(),
                pid,
                rank,
                bus_id: None,
                nvml_dev: None,
                cuda_dev: None,
                nics: Vec::new(),
                gdr: None,
                gdr_mixed: false,
                peers: BTreeMap::new(),
                line,
            });
            out.len() - 1
        };
    for r in &log.ranks {
        let i = find(
            &mut out,
            &r.origin.host,
            r.origin.pid,
            r.rank,
            r.origin.line,
        );
        let v = &mut out[i];
        v.bus_id = v.bus_id.clone().or_else(|| r.bus_id.clone());
        v.nvml_dev = v.nvml_dev.or(r.nvml_dev);
        v.cuda_dev = v.cuda_dev.or(r.cuda_dev);
    }
    let mut gdr: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut nics: std::collections::HashMap<(Option<String>, String, u32), String> =
        Default::default();
    for c in &log.connections {
        let (rank, _) = c.local();
        let peer = if rank == c.from_rank {
            c.to_rank
        } else {
            c.from_rank
        };
        let i = find(&mut out, &c.origin.host, c.origin.pid, rank, c.origin.line);
        let v = &mut out[i];
        if v.bus_id.is_none() {
            v.bus_id = c.origin.bus_id.clone();
        }
        // The channel line's own bracket (`5[1a000]`: its bus id up to 2.18.1, `5[3]`: its
        // nvmlDev from 2.18.3), and the printing thread's `[dev]`, its cudaDev.
        let (bus, nvml) = log.bracket_gpu(c);
        if v.bus_id.is_none() {
            v.bus_id = bus;
        }
        v.nvml_dev = v.nvml_dev.or(nvml);
        if c.origin.pid.is_some() {
            v.cuda_dev = v.cuda_dev.or(c.origin.dev);
        }
        let label = c.transport.label();
        let t = v.peers.entry(peer).or_default();
        if !t.contains(&label) {
            t.push(label);
        }
        if let Transport::Net {
            net, dev, gdr: g, ..
        } = &c.transport
        {
            let host = c.origin.host.as_deref();
            let nic = nics
                .entry((c.origin.host.clone(), net.clone(), *dev))
                .or_insert_with(|| {
                    log.net_device(host, net, *dev)
                        .filter(|_| is_rdma(net))
                        .map(|d| d.name.clone())
                        .unwrap_or_else(|| format!("NET/{net}/{dev}"))
                })
                .clone();
            if !v.nics.contains(&nic) {
                v.nics.push(nic);
            }
            if is_rdma(net) {
                let e = gdr.entry(i).or_default();
                e.1 += 1;
                if *g {
                    e.0 += 1;
                }
            }
        }
    }
    for (i, (on, all)) in gdr {
        out[i].gdr = if on == all {
            Some(true)
        } else if on == 0 {
            Some(false)
        } else {
            None
        };
        out[i].gdr_mixed = on > 0 && on < all;
    }
    out.sort_by(|a, b| (a.rank, &a.host, a.pid).cmp(&(b.rank, &b.host, b.pid)));
    out
}

/// `rank 12 on gpu-07`.
fn name(r: &RankView) -> String {
    match &r.host {
        Some(h) => format!("rank {} on {h}", r.rank),
        None => format!("rank {}", r.rank),
    }
}

/// `nccl.ranks`: the ranks whose GDR differs from the others' (NCCL's own `/GDRDMA` word),
/// with the reason when the log says it for that host (`GPU Direct RDMA Disabled for HCA`, a
/// distance line). `None` when fewer than two ranks used an RDMA network.
pub fn odd_ranks(
    log: &NcclLog,
    label: &str,
    reports: &[(String, crate::report::Report)],
) -> Option<Finding> {
    const ID: &str = "nccl.ranks";
    let all = ranks(log);
    let net: Vec<&RankView> = all
        .iter()
        .filter(|r| r.gdr.is_some() || r.gdr_mixed)
        .collect();
    if net.len() < 2 {
        return None;
    }
    let on = net.iter().filter(|r| r.gdr == Some(true)).count();
    let off = net.iter().filter(|r| r.gdr == Some(false)).count();
    let hosts = {
        let mut h: Vec<&str> = net.iter().filter_map(|r| r.host.as_deref()).collect();
        h.sort();
        h.dedup();
        h.len()
    };
    if on == net.len() || off == net.len() {
        // The job's size from its `Init` lines (`nranks 16`): a paste of some ranks' lines
        // says nothing of the others.
        let nranks = log.ranks.iter().filter_map(|r| r.nranks).max();
        let mut seen: Vec<u32> = log.ranks.iter().map(|r| r.rank).collect();
        seen.extend(net.iter().map(|r| r.rank));
        seen.sort_unstable();
        seen.dedup();
        let what = if on > 0 {
            "uses GDRDMA"
        } else {
            "uses the network without GDRDMA"
        };
        let (status, message) = match nranks {
            Some(n) if (seen.len() as u64) < u64::from(n) => (
                Status::Skip,
                format!(
                    "every one of {} rank(s) in the paste, on {hosts} host(s), {what}, but the job has {n} ranks (`nranks {n}` in its Init lines): the other ranks' lines are not in the paste",
                    net.len()
                ),
            ),
            _ => (
                Status::Pass,
                format!(
                    "every one of {} rank(s) on {hosts} host(s) {what} (NCCL's own word)",
                    net.len()
                ),
            ),
        };
        return Some(Finding::new(ID, status, "job", message).evidence(
            format!("{label} line {}", net[0].line),
            format!("{}: {}", name(net[0]), net[0].nics.join(", ")),
        ));
    }
    // The minority differs; with a tie, the ranks without GDR are named.
    let odd_is_off = off <= on;
    let odd: Vec<&&RankView> = net
        .iter()
        .filter(|r| {
            if odd_is_off {
                r.gdr != Some(true)
            } else {
                r.gdr == Some(true)
            }
        })
        .collect();
    let describe = |r: &RankView| {
        format!(
            "{}: {} {}",
            name(r),
            r.nics.join(", "),
            match (r.gdr, r.gdr_mixed) {
                (_, true) => "with and without GDRDMA",
                (Some(true), _) => "with GDRDMA",
                _ => "without GDRDMA",
            }
        )
    };
    let others = if odd_is_off {
        "every other rank uses GDRDMA"
    } else {
        "every other rank goes without GDRDMA"
    };
    let msg = format!(
        "{}; {others}",
        odd.iter()
            .take(4)
            .map(|r| describe(r))
            .collect::<Vec<_>>()
            .join("; ")
    ) + &if odd.len() > 4 {
        format!(" ({} ranks in all)", odd.len())
    } else {
        String::new()
    };
    let mut f = Finding::new(ID, Status::Warn, "job", msg);
    for r in odd.iter().take(6) {
        f = f.evidence(format!("{label} line {}", r.line), describe(r));
        // The reason, when the log gives one for that host.
        for n in log
            .nic_gdr
            .iter()
            .filter(|n| !n.enabled && n.origin.host == r.host)
            .take(2)
        {
            f = f.evidence(
                format!("{label} line {}", n.origin.line),
                format!(
                    "why: GPU Direct RDMA Disabled for HCA {} '{}'{} on {}",
                    n.index,
                    n.name,
                    n.reason
                        .as_ref()
                        .map(|x| format!(" ({x})"))
                        .unwrap_or_default(),
                    n.origin.who()
                ),
            );
        }
        for g in log
            .gpu_gdr
            .iter()
            .filter(|g| !g.enabled && g.origin.host == r.host)
            .filter(|g| {
                r.bus_id
                    .as_deref()
                    .is_none_or(|b| g.gpu == b || g.origin.bus_id.as_deref() == Some(b))
            })
            .take(2)
        {
            f = f.evidence(
                format!("{label} line {}", g.origin.line),
                format!(
                    "why: GPU Direct RDMA Disabled for GPU {} / HCA {} (distance {} {} {})",
                    g.gpu,
                    g.hca,
                    g.distance
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "?".into()),
                    g.op.as_deref().unwrap_or("?"),
                    g.threshold
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "?".into())
                ),
            );
        }
    }
    // The nodes' own facts, when their reports were given (`--node-report`).
    if !reports.is_empty() {
        let mut hosts: Vec<&str> = odd.iter().filter_map(|r| r.host.as_deref()).collect();
        hosts.dedup();
        for h in hosts {
            f = node_evidence(f, h, reports);
        }
    }
    Some(f.fix("run `gdrdoctor check` on that host (peer memory, ACS on its GPU-NIC path, the NIC's port) and compare its report with a healthy host's (`gdrdoctor fleet a.json b.json`), or give the hosts' reports to `diagnose --node-report DIR`"))
}

/// Each run of every block that held several.
pub fn runs(p: &Paste) -> Vec<RunView> {
    p.nccl_runs()
        .into_iter()
        .map(|(b, l)| {
            let net: Vec<bool> = l
                .connections
                .iter()
                .filter_map(|c| match &c.transport {
                    Transport::Net { net, gdr, .. } if is_rdma(net) => Some(*gdr),
                    _ => None,
                })
                .collect();
            RunView {
                block: p.blocks.get(b).map(|x| x.id.clone()).unwrap_or_default(),
                run: l.run,
                lines: l.lines,
                why: l.run_start.clone(),
                versions: l.versions.clone(),
                env: l.env.clone(),
                hosts: l.hosts.clone(),
                networks: l.networks.clone(),
                gdr_lines: net.iter().filter(|g| **g).count(),
                net_lines: net.len(),
                failures: l.failures.len(),
            }
        })
        .collect()
}

fn run_text(r: &RunView) -> String {
    format!(
        "NCCL {}; {}; network {}; {} of {} RDMA connection line(s) with /GDRDMA; {} failure line(s); hosts {}",
        if r.versions.is_empty() {
            "(version not logged)".to_string()
        } else {
            r.versions.join(", ")
        },
        if r.env.is_empty() {
            "no NCCL_* setting logged".to_string()
        } else {
            r.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        },
        if r.networks.is_empty() {
            "not logged".to_string()
        } else {
            r.networks.join(", ")
        },
        r.gdr_lines,
        r.net_lines,
        r.failures,
        if r.hosts.is_empty() {
            "not named".to_string()
        } else {
            r.hosts.join(", ")
        }
    )
}

/// `nccl.runs`: the runs of a block side by side, never merged; what differs between them.
pub fn runs_finding(runs: &[RunView]) -> Vec<Finding> {
    const ID: &str = "nccl.runs";
    let mut blocks: Vec<&str> = runs.iter().map(|r| r.block.as_str()).collect();
    blocks.dedup();
    let mut out = Vec::new();
    for b in blocks {
        let mine: Vec<&RunView> = runs.iter().filter(|r| r.block == b).collect();
        let Some(first) = mine.first() else { continue };
        let Some(last) = mine.last() else { continue };
        let gdr = |r: &RunView| match (r.gdr_lines, r.net_lines) {
            (_, 0) => "no RDMA connection",
            (g, n) if g == n => "GDRDMA",
            (0, _) => "no GDRDMA",
            _ => "GDRDMA on some connections",
        };
        let mut differ: Vec<String> = Vec::new();
        for r in &mine[1..] {
            if r.versions != first.versions {
                differ.push(format!(
                    "run {} NCCL {} against run 1 {}",
                    r.run,
                    r.versions.join(", "),
                    first.versions.join(", ")
                ));
            }
            let keys: std::collections::BTreeSet<&String> =
                r.env.keys().chain(first.env.keys()).collect();
            for k in keys {
                if r.env.get(k) != first.env.get(k) {
                    differ.push(format!(
                        "{k}: run 1 {} against run {} {}",
                        first.env.get(k).map(String::as_str).unwrap_or("unset"),
                        r.run,
                        r.env.get(k).map(String::as_str).unwrap_or("unset")
                    ));
                }
            }
            if gdr(r) != gdr(first) {
                differ.push(format!(
                    "run 1 {} against run {} {}",
                    gdr(first),
                    r.run,
                    gdr(r)
                ));
            }
        }
        let lines = mine
            .iter()
            .map(|r| format!("{}-{}", r.lines[0], r.lines[1]))
            .collect::<Vec<_>>()
            .join(", ");
        let mut f = if differ.is_empty() {
            Finding::new(
                ID,
                Status::Pass,
                b,
                format!(
                    "{} runs in {b} (lines {lines}) agree; the verdicts follow run {} (the last)",
                    mine.len(),
                    last.run
                ),
            )
        } else {
            Finding::new(
                ID,
                Status::Warn,
                b,
                format!(
                    "{} runs in {b} (lines {lines}) disagree: {}; they are shown side by side, and the verdicts follow run {} (the last)",
                    mine.len(),
                    differ.join("; "),
                    last.run
                ),
            )
            .fix("say which run the question is about (paste that run alone), or compare the runs' NCCL_* settings and versions: one of them changed what NCCL did")
        };
        for r in &mine {
            f = f.evidence(
                format!(
                    "{b} run {} lines {}-{}{}",
                    r.run,
                    r.lines[0],
                    r.lines[1],
                    r.why
                        .as_ref()
                        .map(|w| format!(" ({w})"))
                        .unwrap_or_default()
                ),
                run_text(r),
            );
        }
        out.push(f);
    }
    out
}

/// `nccl.network`: NCCL said it has no RDMA network (`NET/IB : No device found`, `Using
/// network Socket`, a socket interface's `GPU Direct RDMA Disabled`): a finding about the
/// network, not about peer memory. A warning when connections crossed hosts over sockets or
/// the log names several hosts, and when no connection line shows what the run used; a pass
/// when the run of one host used no network at all (its GPUs talked over P2P or shared
/// memory, as its connection lines show).
pub fn network(log: &NcclLog, label: &str) -> Option<Finding> {
    const ID: &str = "nccl.network";
    let sockets: Vec<&crate::paste::nccl::Connection> = log
        .connections
        .iter()
        .filter(|c| matches!(&c.transport, Transport::Net { net, .. } if !is_rdma(net)))
        .collect();
    if log.no_rdma.is_empty() && sockets.is_empty() {
        return None;
    }
    let rdma = log
        .connections
        .iter()
        .filter(|c| matches!(&c.transport, Transport::Net { net, .. } if is_rdma(net)))
        .count();
    let local = log
        .connections
        .iter()
        .filter(|c| !matches!(c.transport, Transport::Net { .. }))
        .count();
    let mut f = if !sockets.is_empty() {
        Finding::new(
            ID,
            Status::Warn,
            "network",
            format!(
                "no RDMA NIC used{}{}: {} connection line(s) go over TCP sockets (NET/Socket), so GPUDirect RDMA cannot apply to them",
                if rdma > 0 { " by some ranks" } else { "" },
                {
                    // Which hosts: in a multi-host log the one without RDMA is the finding.
                    let mut h: Vec<&str> =
                        sockets.iter().filter_map(|c| c.origin.host.as_deref()).collect();
                    h.sort_unstable();
                    h.dedup();
                    if h.is_empty() || log.hosts.len() < 2 {
                        String::new()
                    } else {
                        format!(" (on {})", h.join(", "))
                    }
                },
                sockets.len()
            ),
        )
        .fix("if the nodes have InfiniBand or RoCE NICs: NCCL did not find or was told not to use them (NCCL_IB_DISABLE=1, NCCL_NET=Socket, no libibverbs or rdma-core in the container, no /dev/infiniband, ports down: `ibv_devinfo`); if they have none, sockets are the only path and GDR does not apply")
    } else if rdma == 0 && log.hosts.len() >= 2 {
        // Several hosts and no RDMA network: whatever crossed hosts went over sockets, shown
        // in a connection line or not.
        Finding::new(
            ID,
            Status::Warn,
            "network",
            format!(
                "nccl found no RDMA network and the log names {} hosts: traffic between them goes over TCP sockets, where GPUDirect RDMA cannot apply{}",
                log.hosts.len(),
                if local == 0 {
                    " (the paste shows no connection line)"
                } else {
                    ""
                }
            ),
        )
        .fix("if the nodes have InfiniBand or RoCE NICs: NCCL did not find or was told not to use them (NCCL_IB_DISABLE=1, NCCL_NET=Socket, no libibverbs or rdma-core in the container, no /dev/infiniband, ports down: `ibv_devinfo`); if they have none, sockets are the only path and GDR does not apply")
    } else if rdma == 0 && local == 0 {
        // No connection line: what the run used is not shown, so no pass.
        Finding::new(
            ID,
            Status::Warn,
            "network",
            "nccl found no RDMA network: any traffic between nodes goes over TCP sockets, where GPUDirect RDMA cannot apply; the paste shows no connection line, so whether this job left the node is not shown",
        )
        .fix("if the job spans several nodes and they have InfiniBand or RoCE NICs: NCCL did not find or was told not to use them (NCCL_IB_DISABLE=1, NCCL_NET=Socket, no libibverbs or rdma-core in the container, no /dev/infiniband, ports down: `ibv_devinfo`); a job on one node needs no network")
    } else if rdma == 0 {
        Finding::new(
            ID,
            Status::Pass,
            "network",
            format!(
                "nccl found no RDMA network (traffic between nodes would go over TCP sockets, where GPUDirect RDMA cannot apply), and this run used none: {local} connection line(s) over P2P or shared memory"
            ),
        )
    } else {
        Finding::new(
            ID,
            Status::Pass,
            "network",
            format!("nccl logged a socket network beside {rdma} RDMA connection line(s)"),
        )
    };
    for (no, text) in log.no_rdma.iter().take(3) {
        f = f.evidence(format!("{label} line {no}"), text.clone());
    }
    for c in sockets.iter().take(2) {
        f = f.evidence(format!("{label} line {}", c.origin.line), c.describe());
    }
    if let Some(v) = log.env.get("NCCL_IB_DISABLE") {
        f = f.evidence(
            format!("{label} environment"),
            format!("NCCL_IB_DISABLE={v}"),
        );
    }
    Some(f)
}

/// The report of a host: its `host.hostname` is the log's name, or that name's first label
/// (`gpu-07.cluster` for `gpu-07`, and the reverse).
fn report_of<'a>(
    host: &str,
    reports: &'a [(String, crate::report::Report)],
) -> Option<&'a (String, crate::report::Report)> {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    reports.iter().find(|(_, r)| {
        r.host
            .hostname
            .as_deref()
            .is_some_and(|n| n == host || short(n) == short(host))
    })
}

/// What a host's report says that explains a GDR decision: its failed and warned findings of
/// peer memory, dma-buf, PCIe, IOMMU, the RDMA devices and GDR, or that no report names it.
fn node_evidence(
    mut f: Finding,
    host: &str,
    reports: &[(String, crate::report::Report)],
) -> Finding {
    let Some((name, r)) = report_of(host, reports) else {
        return f.evidence(
            "node reports",
            format!(
                "no report for {host} among the {} given (their hostnames: {})",
                reports.len(),
                reports
                    .iter()
                    .map(|(_, r)| r.host.hostname.as_deref().unwrap_or("?"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    };
    const FAMILIES: [&str; 8] = [
        "kmod.", "driver.", "pcie.", "iommu.", "rdma.", "gdr.", "dmabuf.", "topo.",
    ];
    let bad: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|x| matches!(x.status, Status::Fail | Status::Warn))
        .filter(|x| FAMILIES.iter().any(|p| x.id.starts_with(p)))
        .collect();
    if bad.is_empty() {
        return f.evidence(
            format!("node report {name}"),
            format!("{host}: no failed or warned peer-memory, PCIe, IOMMU, RDMA or GDR check"),
        );
    }
    for x in bad.iter().take(4) {
        f = f.evidence(
            format!("node report {name}"),
            format!(
                "why on {host}: {} {} ({}): {}",
                x.status.as_str(),
                x.id,
                x.subject,
                x.message
            ),
        );
    }
    f
}
