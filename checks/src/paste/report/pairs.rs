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

/// The matrix label (`GPU3`) of a GPU NCCL logged, by nvmlDev (nvidia-smi numbers GPUs as NVML
/// does) or by PCI address against the GPUs `nvidia-smi -q` / `lspci` list in bus order.
fn gpu_label(l: &LoggedGdr, log: &NcclLog, p: &Paste) -> Option<String> {
    let v = log.version();
    let rank_nvml = log
        .ranks
        .iter()
        .find(|r| r.rank == l.rank && r.origin.host == l.host)
        .and_then(|r| r.nvml_dev);
    let dev = l.gpu.as_deref()?;
    // The bracket of a channel line is the bus id up to 2.18.1 and nvmlDev from 2.18.3
    // (src/transport/net.cc v2.18.1-1 / v2.18.3-1 `myInfo->busId` / `myInfo->nvmlDev`); without
    // a version, a one- or two-digit number is an nvmlDev (bus ids print as `1c000`).
    let nvml_bracket = match v {
        Some(v) => v >= crate::paste::nccl::Version::new(2, 18, 3),
        None => dev.len() <= 2 && dev.bytes().all(|b| b.is_ascii_digit()),
    };
    let nvml = if nvml_bracket {
        dev.parse::<u32>().ok()
    } else {
        None
    };
    if let Some(n) = nvml.or(rank_nvml) {
        return Some(format!("GPU{n}"));
    }
    let bdf = bus_id_bdf(dev)?;
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
) -> (Vec<PastePair>, Option<crate::nccl::rule::Decision>) {
    let entries: Vec<(String, LoggedGdr)> = match log {
        Some(l) => l
            .logged_gdr()
            .into_iter()
            .filter_map(|e| gpu_label(&e, l, p).map(|g| (g, e)))
            .collect(),
        None => Vec::new(),
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
    (out, first)
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
        Some(l) if l.any().is_some() => match (l.send, l.receive, l.undirected) {
            (None, None, u) => (u, u),
            (s, r, _) => (s, r),
        },
        _ if x.gdr == Gdr::On => (x.send, x.receive),
        _ => (None, None),
    }
}
