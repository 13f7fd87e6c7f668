//! The GPU x NIC pairs of the paste with their verdicts (`super::super::verdict`), and NCCL's
//! logged decisions beside them.

use crate::paste::nccl::{Direction, LoggedGdr, NcclLog};
use crate::paste::verdict::{self, Context, Gdr, Logged, PastePair};
use crate::paste::Paste;

/// NCCL bus id (`1c000`) -> PCI address.
pub fn bus_id_bdf(b: &str) -> Option<String> {
    let v = u64::from_str_radix(b.trim(), 16).ok()?;
    let s = format!("{v:09x}");
    if s.len() != 9 {
        return None;
    }
    let bdf = format!("{}:{}:{}.{}", &s[0..4], &s[4..6], &s[6..8], &s[8..9]);
    crate::parse::is_bdf(&bdf).then_some(bdf)
}

/// The matrix label (`GPU3`) of a GPU NCCL logged: by its nvmlDev on its own host (the
/// rank's `Init` line, or a channel line's bracket from 2.18.3: nvidia-smi numbers GPUs as NVML
/// does), or by its bus id against the GPUs `nvidia-smi -q` / `lspci` list in bus order. Never
/// by cudaDev (CUDA_VISIBLE_DEVICES renumbers it, and every host has a device 0). `None` when
/// neither is known.
fn gpu_label(l: &LoggedGdr, log: &NcclLog, p: &Paste) -> Option<String> {
    if let Some(n) = l.nvml_dev {
        return Some(format!("GPU{n}"));
    }
    let v = log.version();
    let dev = l.gpu.as_deref();
    // The bracket of a channel line is the bus id up to 2.18.1 and nvmlDev from 2.18.3
    // (src/transport/net.cc v2.18.1-1 / v2.18.3-1 `myInfo->busId` / `myInfo->nvmlDev`); without
    // a version, a one- or two-digit number is an nvmlDev (bus ids print as `1c000`). A
    // bracket-less line's `gpu` came from the Init line (bus id, nvmlDev or cudaDev): only its
    // bus id is used.
    let bracket = dev.filter(|_| l.bus_id.is_none() || l.gpu != l.bus_id);
    if let Some(dev) = bracket {
        let nvml_bracket = match v {
            Some(v) => v >= crate::paste::nccl::Version::new(2, 18, 3),
            None => dev.len() <= 2 && dev.bytes().all(|b| b.is_ascii_digit()),
        };
        if nvml_bracket {
            if let Ok(n) = dev.parse::<u32>() {
                return Some(format!("GPU{n}"));
            }
        }
    }
    let bus = l
        .bus_id
        .as_deref()
        .or(dev.filter(|d| bus_id_bdf(d).is_some() && d.len() > 2))?;
    let bdf = bus_id_bdf(bus)?;
    let mut gpus: Vec<String> = p
        .smiq
        .iter()
        .flat_map(|(_, q)| q.gpus.iter().map(|g| g.bdf.clone()))
        .collect();
    if gpus.is_empty() {
        gpus = p
            .lspci
            .iter()
            .filter(|(_, d)| {
                d.vendor_id == Some(0x10de) && d.class.is_some_and(|c| c >> 16 == 0x03)
            })
            .map(|(_, d)| d.bdf.clone())
            .collect();
    }
    gpus.sort();
    gpus.dedup();
    gpus.iter()
        .position(|g| *g == bdf)
        .map(|i| format!("GPU{i}"))
}

/// A decision NCCL logged that no pair of the paste can take, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[schemars(rename = "unplaced")]
pub struct Unplaced {
    #[schemars(extend("x-required" = true))]
    pub host: Option<String>,
    pub rank: u32,
    #[schemars(extend("x-required" = true))]
    pub bus_id: Option<String>,
    #[schemars(extend("x-required" = true))]
    pub nic: Option<String>,
    pub gdr: bool,
    pub line: usize,
    pub why: String,
}

/// Which logged decisions go on which matrix GPU. One host (or none named): each decision
/// by its GPU's label. Several hosts: the paste does not say which host a matrix is, so a
/// decision goes on a pair only when every host that logged that GPU (by bus id or nvmlDev)
/// and NIC logged the same in that direction (then it holds for the matrix's host whichever
/// it is); the others stay unplaced, with the hosts that differ named.
fn place(log: &NcclLog, p: &Paste) -> (Vec<(String, LoggedGdr)>, Vec<Unplaced>) {
    let all = log.logged_gdr();
    let mut hosts: Vec<Option<&str>> = all.iter().map(|e| e.host.as_deref()).collect();
    hosts.sort();
    hosts.dedup();
    let mut placed = Vec::new();
    let mut unplaced = Vec::new();
    let unplace = |e: &LoggedGdr, why: String| Unplaced {
        host: e.host.clone(),
        rank: e.rank,
        bus_id: e.bus_id.clone(),
        nic: e.nic.clone(),
        gdr: e.gdr,
        line: e.line,
        why,
    };
    let labelled: Vec<(Option<String>, &LoggedGdr)> =
        all.iter().map(|e| (gpu_label(e, log, p), e)).collect();
    for (label, e) in &labelled {
        let Some(label) = label else {
            let bus = e
                .bus_id
                .as_deref()
                .or(e.gpu.as_deref().filter(|g| g.len() > 2));
            unplaced.push(unplace(
                e,
                match bus {
                    Some(b) => format!(
                        "the log names its GPU by bus id {b}, but the paste has no nvmlDev for it and no GPU list (`nvidia-smi -q`, `lspci`) to name it as nvidia-smi does (GPU0, GPU1, ..)"
                    ),
                    None => "the log names its GPU by neither a bus id nor an nvmlDev".into(),
                },
            ));
            continue;
        };
        if hosts.len() > 1 {
            // The same GPU label and direction: with the same NIC, or on another host (whose
            // GPU of that label may use another NIC; merged, one host's GDR would stand for
            // the other's GPU).
            let same = |x: &&(Option<String>, &LoggedGdr)| {
                x.0.as_deref() == Some(label.as_str())
                    && x.1.direction == e.direction
                    && (x.1.nic == e.nic || x.1.host != e.host)
            };
            let differ: Vec<String> = labelled
                .iter()
                .filter(same)
                .filter(|x| x.1.gdr != e.gdr)
                .map(|x| {
                    format!(
                        "{} rank {} ({}, line {})",
                        x.1.host.as_deref().unwrap_or("an unnamed host"),
                        x.1.rank,
                        if x.1.gdr { "GDRDMA" } else { "no GDRDMA" },
                        x.1.line
                    )
                })
                .collect();
            if !differ.is_empty() {
                unplaced.push(unplace(
                    e,
                    format!(
                        "the log holds {} hosts and they differ for {label} and {}: {}; the paste does not say which host the matrix is",
                        hosts.len(),
                        e.nic.as_deref().unwrap_or("this NIC"),
                        differ.join(", ")
                    ),
                ));
                continue;
            }
        }
        placed.push((label.clone(), (*e).clone()));
    }
    (placed, unplaced)
}

fn logged_for(gpu: &str, nic: &str, entries: &[(String, &LoggedGdr)]) -> Option<Logged> {
    let mine: Vec<&&LoggedGdr> = entries
        .iter()
        .filter(|(g, l)| g == gpu && l.nic.as_deref() == Some(nic))
        .map(|(_, l)| l)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let dir = |d: Option<Direction>| -> Option<bool> {
        let v: Vec<bool> = mine
            .iter()
            .filter(|l| l.direction == d)
            .map(|l| l.gdr)
            .collect();
        if v.is_empty() {
            None
        } else {
            Some(v.iter().any(|x| *x))
        }
    };
    Some(Logged {
        send: dir(Some(Direction::Send)),
        receive: dir(Some(Direction::Receive)),
        undirected: dir(None),
        proxy: mine.iter().find_map(|l| l.proxy),
        line: mine.iter().map(|l| l.line).min().unwrap_or(0),
    })
}

/// Every pair's verdict, through [`verdict::decide`]: one decision per pasted matrix (a node),
/// or, without a matrix, one over the GPU x NIC pairs NCCL logged. The log is matched with the
/// first matrix's node. Also the first decision (for its threshold, rules and notes).
pub(super) fn pairs(
    p: &Paste,
    cx: &Context,
    log: Option<&NcclLog>,
) -> (
    Vec<PastePair>,
    Option<crate::nccl::rule::Decision>,
    Vec<Unplaced>,
) {
    let (entries, unplaced) = match log {
        Some(l) => place(l, p),
        None => (Vec::new(), Vec::new()),
    };
    let refs: Vec<(String, &LoggedGdr)> = entries.iter().map(|(g, e)| (g.clone(), e)).collect();
    let mut out = Vec::new();
    let mut first = None;
    for (bi, m) in &p.matrices {
        let block = p.blocks.get(*bi).map(|b| b.id.clone()).unwrap_or_default();
        let sys = verdict::system(cx, p, *bi, m);
        let (d, mut v) = verdict::decide(cx, &block, &sys);
        if first.is_none() {
            for pair in &mut v {
                pair.logged = logged_for(&pair.gpu, &pair.nic, &refs);
            }
            first = Some(d);
        }
        out.extend(v);
    }
    if p.matrices.is_empty() {
        // No matrix: the pairs NCCL logged, their paths unknown.
        let block = p
            .nccl
            .first()
            .and_then(|(i, _)| p.blocks.get(*i))
            .map(|b| b.id.clone())
            .unwrap_or_default();
        let mut gpus: Vec<String> = Vec::new();
        let mut nics: Vec<String> = Vec::new();
        let mut seen: Vec<(String, String)> = Vec::new();
        for (g, e) in &refs {
            let Some(nic) = e.nic.clone() else { continue };
            if !gpus.contains(g) {
                gpus.push(g.clone());
            }
            if !nics.contains(&nic) {
                nics.push(nic.clone());
            }
            if !seen.contains(&(g.clone(), nic.clone())) {
                seen.push((g.clone(), nic));
            }
        }
        if !seen.is_empty() {
            let sys = verdict::system_of_pairs(cx, &gpus, &nics);
            let (d, v) = verdict::decide(cx, &block, &sys);
            for mut pair in v {
                if !seen.contains(&(pair.gpu.clone(), pair.nic.clone())) {
                    continue;
                }
                pair.logged = logged_for(&pair.gpu, &pair.nic, &refs);
                out.push(pair);
            }
            first = Some(d);
        }
    }
    (out, first, unplaced)
}

/// `route` of a pair for messages: `PIX`, `NODE to it, sends through GPU1 via PXN`.
pub(super) fn route(x: &PastePair) -> String {
    match (&x.via, x.nccl_path.as_deref()) {
        (Some(v), _) => format!("{} to it, sends through {v} via PXN", x.nvidia_smi),
        (None, Some(n)) => format!("{} counted as {n}", x.nvidia_smi),
        _ => x.nvidia_smi.clone(),
    }
}

/// What NCCL did for a pair when the log says, else what the rule predicts: (send, receive).
pub(super) fn effective(x: &PastePair) -> (Option<bool>, Option<bool>) {
    match &x.logged {
        Some(l) if l.any().is_some() => {
            // A direction the log does not show is the rule's, when it decided GDR on.
            let pred = |d: Option<bool>| if x.gdr == Gdr::On { d } else { None };
            match (l.send, l.receive, l.undirected) {
                (None, None, u) => (u, u),
                (s, r, _) => (s.or(pred(x.send)), r.or(pred(x.receive))),
            }
        }
        _ if x.gdr == Gdr::On => (x.send, x.receive),
        _ => (None, None),
    }
}
