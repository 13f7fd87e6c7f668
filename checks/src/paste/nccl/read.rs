//! A whole NCCL log, line by line, into an [`NcclLog`].

use super::lines::*;
use super::log::*;
use crate::paste::block::{status, Block, RawBlock, Whole};
use crate::paste::clean::Line;

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

/// Parse a whole text as an NCCL log (every line is looked at). The last line is taken as
/// possibly cut (a paste may end inside it).
pub fn parse(text: &str) -> NcclLog {
    parse_lines(&crate::paste::clean::clean(text).lines)
}

/// Parse a log NCCL wrote itself (`NCCL_DEBUG_FILE`, read whole by `probe --nccl`): as
/// [`parse`], but the last line is whole when the text ends with a newline, as `diagnose`
/// takes a pasted file that ends with one.
pub fn parse_file(text: &str) -> NcclLog {
    parse_lines_with(
        &crate::paste::clean::clean(text).lines,
        text.ends_with('\n'),
    )
}

/// An NCCL log block (`w`: the input it was cut from; its last line is whole when the input
/// goes on after it or ends with a newline).
pub fn block(b: &mut Block, raw: &RawBlock, w: &Whole) -> NcclLog {
    let file_last = w
        .lines
        .iter()
        .rev()
        .find(|l| !l.text.trim().is_empty())
        .map(|l| l.no)
        .unwrap_or(0);
    let complete = b.lines[1] < file_last || w.text.ends_with('\n');
    let l = parse_lines_with(&raw.lines, complete);
    b.summary = format!(
        "NCCL {}: {} NCCL line(s), {} host(s), {} connection line(s), {} failure line(s)",
        l.versions
            .first()
            .map(String::as_str)
            .unwrap_or("(version not logged)"),
        l.nccl_lines,
        l.hosts.len(),
        l.connections.len(),
        l.failures.len()
    );
    for (no, why) in &l.unreadable {
        b.problems.push(format!("line {no}: {why}"));
    }
    b.status = status(&b.repairs, &b.problems);
    l
}
