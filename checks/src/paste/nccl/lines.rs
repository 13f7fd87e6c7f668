//! One line of an NCCL log: its origin (host, pid, device) and what it says, one parser per
//! format (the NCCL source lines that print each are listed in [`super`]).

use super::log::*;

pub(super) fn num(s: &str) -> Option<u32> {
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
pub(super) fn split_line(text: &str, line: usize) -> Option<(Origin, &'static str, String)> {
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
pub(super) fn origin(prefix: &str, line: usize) -> Origin {
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
        let parts: Vec<&str> = strip_mpi_tag(t).rsplitn(3, ':').collect();
        if parts.len() == 3 {
            let (tid, pid, host) = (parts[0], parts[1], parts[2]);
            if tid.bytes().all(|b| b.is_ascii_digit()) && pid.bytes().all(|b| b.is_ascii_digit()) {
                return Origin {
                    host: Some(host.to_string()).filter(|h| !h.is_empty()),
                    pid: num(pid),
                    dev: Some(dev),
                    line,
                    ..Origin::default()
                };
            }
        }
        return Origin {
            host: None,
            pid: None,
            dev: Some(dev),
            line,
            ..Origin::default()
        };
    }
    Origin {
        line,
        ..Origin::default()
    }
}

/// `gpu-a:2101:2180` of a launcher's tagged line: Open MPI's `--tag-output`
/// (`[1,0]<stdout>:gpu-a:2101:2180`: the job and rank, the stream) and torchrun's `--tee`
/// (`[default0]:gpu-a:..`, `[rank3]:gpu-a:..` with `--role rank`: the local rank); anything
/// else as it is.
fn strip_mpi_tag(t: &str) -> &str {
    let Some(rest) = t.strip_prefix('[') else {
        return t;
    };
    let Some((tag, after)) = rest.split_once(']') else {
        return t;
    };
    let numbers = tag
        .split(',')
        .all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()));
    if numbers {
        if let Some((stream, host)) = after.strip_prefix('<').and_then(|a| a.split_once(">:")) {
            if stream.bytes().all(|b| b.is_ascii_alphabetic()) {
                return host;
            }
        }
    }
    // torchrun: a role name (letters, `_`, `-`) and the local rank, then `:`.
    let role = tag.trim_end_matches(|c: char| c.is_ascii_digit());
    let torchrun = role.len() < tag.len()
        && !role.is_empty()
        && role
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'-');
    match after.strip_prefix(':') {
        Some(host) if torchrun => host,
        _ => t,
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

pub(super) fn parse_transport(via: &str) -> Transport {
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

pub(super) fn parse_connection(msg: &str, o: &Origin) -> Option<Connection> {
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
pub(super) fn parse_using(msg: &str, o: &Origin) -> Vec<NetDevice> {
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
    if list.contains("={") {
        return parse_merged(list, &net, o);
    }
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

/// The `Using` list of NCCL 2.20+ when it merges ports into virtual devices
/// (`NCCL_IB_MERGE_NICS`, dual-port NICs): `[0]={[0] mlx5_7:1/RoCE, [1] mlx5_6:1/RoCE} [1]={..}`.
/// Each virtual device is one device named as NCCL names it, its ports joined by `+`
/// (`mlx5_7+mlx5_6`), with the port and link of its first member.
fn parse_merged(list: &str, net: &str, o: &Origin) -> Vec<NetDevice> {
    let mut out = Vec::new();
    let mut rest = list;
    while let Some(open) = rest.find("]={") {
        let Some(lb) = rest[..open].rfind('[') else {
            break;
        };
        let index = num(&rest[lb + 1..open]);
        let body_start = open + 3;
        let Some(close) = rest[body_start..].find('}') else {
            break;
        };
        let body = &rest[body_start..body_start + close];
        rest = &rest[body_start + close + 1..];
        let members: Vec<(String, Option<u32>, Option<String>)> = body
            .split(',')
            .filter_map(|m| {
                let m = m.trim();
                let m = m.split_once(']').map(|x| x.1).unwrap_or(m).trim();
                let (name, after) = m.split_once(':')?;
                let mut parts = after.split('/');
                let port = parts.next().and_then(num);
                Some((name.to_string(), port, parts.next().map(str::to_string)))
            })
            .collect();
        let (Some(index), Some(first)) = (index, members.first()) else {
            continue;
        };
        out.push(NetDevice {
            origin: o.clone(),
            net: net.to_string(),
            index,
            name: members
                .iter()
                .map(|m| m.0.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            port: first.1,
            link: first.2.clone(),
            extras: vec![],
            speed_mbps: None,
            pci_path: None,
        });
    }
    out
}

/// `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=.. pciPath=.. ar=0`.
pub(super) fn parse_device_line(msg: &str, o: &Origin) -> Option<NetDevice> {
    let rest = msg.strip_prefix("NET/")?;
    let (net, rest) = rest.split_once(':')?;
    let rest = rest.trim();
    let r = rest.strip_prefix('[')?;
    let (idx, rest) = r.split_once(']')?;
    let index = num(idx)?;
    let mut toks = rest.split_whitespace();
    let first = toks.next()?;
    // 2.20+ lists each device with its properties; 2.3 listed `NET/IB: [0] mlx5_3:1/IB` alone.
    let bare = toks.clone().next().is_none() && first.contains(':') && first.contains('/');
    if !rest.contains("speed=") && !bare {
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

pub(super) fn quoted(s: &str) -> Option<String> {
    let a = s.find('\'')?;
    let b = s[a + 1..].find('\'')?;
    Some(s[a + 1..a + 1 + b].to_string())
}

fn after_word<'a>(s: &'a str, w: &str) -> Option<&'a str> {
    let p = s.find(w)?;
    s[p + w.len()..].split_whitespace().next()
}

pub(super) fn parse_gdr(msg: &str, o: &Origin) -> (Option<NicGdr>, Option<GpuGdr>) {
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
    // 2.29: `for GPU/0-98304 (rank 4) - NET/0-0 (distance 9 > 5)`: NCCL's topology ids, the
    // GPU's local id being its bus id (printed in decimal; earlier versions print it in hex).
    let topo_id = |after: &str| -> Option<String> {
        let id = rest.split(after).nth(1)?.split_whitespace().next()?;
        let local: u64 = id.split_once('-')?.1.trim_end_matches(',').parse().ok()?;
        Some(format!("{local:x}"))
    };
    let (gpu, hca) = if rest.contains("for GPU/") {
        (
            topo_id("for GPU/").unwrap_or_else(|| "?".into()),
            topo_id(" NET/").unwrap_or_else(|| "?".into()),
        )
    } else {
        (
            after_word(rest, "for GPU ").unwrap_or("?").to_string(),
            after_word(rest, "HCA ")
                .unwrap_or("?")
                .trim_end_matches(',')
                .to_string(),
        )
    };
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
    let mode = after_word(rest, "mode ").map(|m| m.trim_end_matches(')').to_string());
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

pub(super) fn parse_rank(msg: &str, o: &Origin) -> Option<Rank> {
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

pub(super) fn classify_failure(text: &str) -> Option<FailureKind> {
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

pub(super) fn failure(kind: FailureKind, text: &str, o: &Origin) -> Failure {
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
pub(super) fn version_in(text: &str) -> Option<String> {
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
pub(crate) fn completes_transport(cur: &str, next: &str) -> Option<String> {
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

/// `cur` joined with `next` where a hard wrap cut a `GPU Direct RDMA` line (a terminal or
/// `fold` at 80 columns cuts `.. Disabled for HCA 0 ` from `'mlx5_0'`, or `.. (distance 7 >`
/// from `4)`): the continuation has no NCCL prefix and does not start with a blank, and the
/// joined message says more than the cut one (a NIC name, a GPU or its distance where there
/// was none). `None` otherwise.
pub(crate) fn completes_gdr(cur: &str, next: &str) -> Option<String> {
    if next.trim().is_empty() || next.contains("NCCL ") {
        return None;
    }
    let at = cur.find("NCCL INFO ")?;
    let msg = &cur[at + "NCCL INFO ".len()..];
    // A wrap at a fixed column may leave the blank before the next word on the next line;
    // indented text is joined only to a line that is visibly cut.
    if next.starts_with(char::is_whitespace) && !gdr_cut(msg.trim()) {
        return None;
    }
    // The cut may have been at a blank that the paste's cleaning then dropped (`.. Disabled`
    // + `for HCA 0 ..`): joined with and without one, the one that reads better.
    let glued = format!("{msg}{next}");
    let spaced = format!("{msg} {}", next.trim_start());
    let o = Origin::default();
    let score = |m: &str| -> usize {
        if gdr_cut(m.trim()) {
            return 0;
        }
        match parse_gdr(m.trim(), &o) {
            (Some(n), _) => 2 + usize::from(!n.name.is_empty()),
            (_, Some(g)) => {
                1 + usize::from(g.gpu != "?")
                    + usize::from(g.hca != "?")
                    + usize::from(g.distance.is_some())
                    + usize::from(g.threshold.is_some())
            }
            _ => 0,
        }
    };
    let before = score(msg);
    let (a, b) = (score(&glued), score(&spaced));
    if a > before && a >= b {
        Some(format!("{cur}{next}"))
    } else if b > before {
        Some(format!("{cur} {}", next.trim_start()))
    } else {
        None
    }
}

/// A `GPU Direct RDMA` message that is cut (the paste ends inside it, or a wrap that could not
/// be joined): no `Enabled`/`Disabled`, a NIC-level line without its quoted name, a GPU-level
/// line without its GPU, NIC or distance. Such a line is NCCL's answer for a NIC or a GPU, and
/// reading it as nothing would read a disabled NIC as unmentioned.
pub(super) fn gdr_cut(msg: &str) -> bool {
    let Some(p) = msg.find("GPU Direct RDMA") else {
        // `NET/IB : GPU Dir`: cut before the words are whole.
        let tail = msg.rsplit(" : ").next().unwrap_or("").trim();
        return msg.starts_with("NET/") && !tail.is_empty() && "GPU Direct RDMA".starts_with(tail);
    };
    let rest = msg[p + "GPU Direct RDMA".len()..].trim_start();
    let word = rest.split_whitespace().next().unwrap_or("");
    if !["Enabled", "enabled", "Disabled", "disabled"].contains(&word) {
        return true;
    }
    match parse_gdr(msg, &Origin::default()) {
        (Some(_), _) => false,
        (_, Some(g)) => g.gpu == "?" || g.hca == "?" || g.distance.is_none(),
        // `for HCA 1 'mlx5_` (no closing quote), or `for HC`.
        _ => rest.contains(" for ") || rest.trim_end() == word || rest.ends_with(" for"),
    }
}

/// The messages NCCL prints that a line may start with once its `host:pid:tid [dev] NCCL
/// INFO` prefix is gone (a web page, a log aggregator, `grep -o`): each must also have the
/// shape of its format, so that prose starting with `Channel` is not taken for NCCL's.
pub fn message_shape(s: &str) -> bool {
    let s = s.trim();
    let conn = (s.starts_with("Channel ") || s.starts_with("Ring "))
        && s.contains(" : ")
        && s.contains("->")
        && s.contains(" via ");
    let net = s.starts_with("NET/")
        && (s.contains(" : Using [")
            || s.contains(": [")
            || s.contains("GPU Direct RDMA ")
            || s.contains("No device found"));
    let gdr = s.starts_with("GPU Direct RDMA ") && s.contains(" for ") && s.contains("HCA");
    let init = s.starts_with("comm 0x") && s.contains(" rank ") && s.contains(" - Init ");
    let env = s.starts_with("NCCL_") && s.contains(" set by environment to ");
    conn || net || gdr || init || env || s.starts_with("Using network ")
}

/// A line without NCCL's marker read by its shape ([`message_shape`]): the message from the
/// first word NCCL prints (a timestamp or other prefix before it is dropped), its origin
/// marked [`Origin::unprefixed`].
pub(super) fn unprefixed(text: &str, line: usize) -> Option<(Origin, &'static str, String)> {
    const STARTS: [&str; 7] = [
        "Channel ",
        "Ring ",
        "NET/",
        "GPU Direct RDMA ",
        "comm 0x",
        "NCCL_",
        "Using network ",
    ];
    let pos = STARTS
        .iter()
        .filter_map(|w| {
            let p = text.find(w)?;
            // At the line's start or after a space or bracket: not inside another word.
            let before = text[..p].chars().next_back();
            (before.is_none() || before.is_some_and(|c| c.is_whitespace() || c == ']')).then_some(p)
        })
        .min()?;
    let msg = text[pos..].trim();
    if !message_shape(msg) {
        return None;
    }
    let mut o = origin(&text[..pos], line);
    o.unprefixed = true;
    Some((o, "INFO", msg.to_string()))
}

/// `NET/IB : No device found.`, `NET/IB : No device found` (NCCL has no RDMA device).
pub(super) fn no_rdma_device(msg: &str) -> bool {
    msg.starts_with("NET/") && msg.contains("No device found")
}

/// NCCL's ring, tree and channel summaries: `Ring 00 : 0 -> 1 -> 0`, `Ring 00 :    0   1`,
/// `Channel 00/24 :    0   1`, `Channel 00/02 : 0 1 2 3`, `Trees [0] 1/-1/-1->0->-1 ..`,
/// `Tree 0 : 0 -> 1 -> -1/-1/-1`: no transport, nothing cut.
pub(super) fn is_summary(msg: &str) -> bool {
    if msg.starts_with("Trees ") || msg.starts_with("Tree ") {
        return true;
    }
    let Some(body) = msg
        .strip_prefix("Channel ")
        .or_else(|| msg.strip_prefix("Ring "))
    else {
        return false;
    };
    let Some((_, rest)) = body.split_once(" : ") else {
        return false;
    };
    if rest.contains(" via ") || rest.contains('[') {
        return false;
    }
    let arrows = rest.matches("->").count();
    let numbers = rest
        .split(|c: char| c.is_whitespace() || c == '-' || c == '>')
        .filter(|t| !t.is_empty())
        .all(|t| t.parse::<i64>().is_ok());
    numbers && arrows != 1
}
