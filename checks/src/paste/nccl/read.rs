//! A whole NCCL log, line by line, into an [`NcclLog`].

use super::lines::*;
use super::log::*;
use crate::paste::block::{status, Block, RawBlock, Whole};
use crate::paste::clean::Line;

pub fn parse_lines(lines: &[Line]) -> NcclLog {
    parse_lines_with(lines, false)
}

/// Join transports a hard wrap cut (the continuation has no NCCL prefix); first, lines that
/// hold several NCCL lines are split ([`unglue`]).
fn join_wraps(lines: &[Line]) -> Vec<Line> {
    let unglued = unglue(lines);
    let lines: &[Line] = unglued.as_deref().unwrap_or(lines);
    let mut joined: Vec<Line> = Vec::with_capacity(lines.len());
    let mut k = 0;
    while k < lines.len() {
        let l = &lines[k];
        if let Some(next) = lines.get(k + 1) {
            if let Some(t) = completes_transport(&l.text, &next.text)
                .or_else(|| completes_gdr(&l.text, &next.text))
            {
                joined.push(Line { no: l.no, text: t });
                k += 2;
                continue;
            }
        }
        joined.push(l.clone());
        k += 1;
    }
    joined
}

/// Lines that hold several NCCL lines, as a web page, a chat or a terminal without line breaks
/// shows a log (`h:1:2 [0] NCCL INFO Channel .. via NET/IB/0/GDRDMA     h:1:3 [1] NCCL INFO
/// ..`, the page wrapping the result wherever it liked): each NCCL line is cut out at the start
/// of its `host:pid:tid [dev]` prefix ([`glued_starts`]), and where the page wrapped a line
/// that held several, the last piece is joined to the piece the next line starts with (until
/// that line's first prefix), as the page cut it (`.. [receive] via` + ` NET/IB/4/GDRDMA`,
/// `.. commId 0x` + `599e.. - Init COMPLETE`). Every piece keeps its physical line's number.
/// `None` when no line holds two NCCL markers (nothing to do).
fn unglue(lines: &[Line]) -> Option<Vec<Line>> {
    // A whole job's log has millions of lines, each with one marker: look before allocating.
    let glued = |t: &str| {
        ["NCCL INFO", "NCCL WARN"]
            .iter()
            .map(|m| t.matches(m).count())
            .sum::<usize>()
            >= 2
    };
    if !lines.iter().any(|l| glued(&l.text)) {
        return None;
    }
    let starts: Vec<Vec<usize>> = lines.iter().map(|l| glued_starts(&l.text)).collect();
    let mut out: Vec<Line> = Vec::with_capacity(lines.len() * 2);
    // Whether the last piece pushed may go on in the next line (its line held several).
    let mut open = false;
    for (l, st) in lines.iter().zip(&starts) {
        let mut cuts: Vec<usize> = st.iter().copied().filter(|&p| p > 0).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces: Vec<&str> = Vec::with_capacity(cuts.len() + 1);
        let mut from = 0;
        for &c in &cuts {
            pieces.push(&l.text[from..c]);
            from = c;
        }
        pieces.push(&l.text[from..]);
        let mut rest = pieces.as_slice();
        // The head of this line, before its first prefix, continues the previous line's last
        // piece when that line was a glued one and the head has no prefix of its own.
        if open && st.first() != Some(&0) {
            if let (Some(head), Some(prev)) = (rest.first(), out.last_mut()) {
                if !head.trim().is_empty() {
                    // As the page cut it (`.. commId 0x` + `599e..`), but the space a line
                    // ended with is gone once pasted: put it back after a marker or `via`
                    // (`.. NCCL INFO` + `Using network IBext`).
                    let word_end = ["NCCL INFO", "NCCL WARN", " via"]
                        .iter()
                        .any(|w| prev.text.trim_end().ends_with(w));
                    if word_end && !head.starts_with(char::is_whitespace) {
                        prev.text.truncate(prev.text.trim_end().len());
                        prev.text.push(' ');
                    }
                    prev.text.push_str(head);
                    rest = &rest[1..];
                }
            }
        }
        for piece in rest {
            if piece.trim().is_empty() {
                continue;
            }
            out.push(Line {
                no: l.no,
                text: piece.to_string(),
            });
        }
        open = st.len() >= 2;
    }
    for l in &mut out {
        l.text.truncate(l.text.trim_end().len());
    }
    Some(out)
}

/// Where each NCCL line in `text` starts: at the `host:pid:tid [dev]` prefix before each
/// `NCCL INFO|WARN` marker (or before its `file.cc:123`), else at the `[dev]`, else at the
/// marker itself.
fn glued_starts(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = ["NCCL INFO", "NCCL WARN"]
        .iter()
        .filter_map(|m| text[at..].find(m).map(|x| x + at))
        .min()
    {
        out.push(prefix_start(text, p));
        at = p + "NCCL INFO".len();
    }
    out
}

/// The start of the prefix of the marker at `p` (see [`glued_starts`]).
fn prefix_start(text: &str, p: usize) -> usize {
    // Tokens to the left of the marker: `[file.cc:123]` `[dev]` `host:pid:tid`.
    let mut end = p;
    let mut start = p;
    let mut tok = || -> Option<(usize, &str)> {
        let before = text[..end].trim_end();
        let s = before
            .rfind(char::is_whitespace)
            .map(|i| i + before[i..].chars().next().map_or(1, char::len_utf8))
            .unwrap_or(0);
        end = s;
        (s < before.len()).then(|| (s, &before[s..]))
    };
    let Some((s, mut t)) = tok() else { return p };
    let mut s = s;
    if t.contains(".c")
        && t.rsplit(':')
            .next()
            .is_some_and(|n| n.parse::<u32>().is_ok())
    {
        start = s;
        let Some((s2, t2)) = tok() else { return start };
        s = s2;
        t = t2;
    }
    let dev = t
        .strip_prefix('[')
        .and_then(|d| d.strip_suffix(']'))
        .is_some_and(|d| d.parse::<u32>().is_ok());
    if !dev {
        return start;
    }
    start = s;
    let Some((s, t)) = tok() else { return start };
    let parts: Vec<&str> = t.rsplitn(3, ':').collect();
    if parts.len() == 3
        && parts[..2]
            .iter()
            .all(|x| x.bytes().all(|b| b.is_ascii_digit()))
    {
        start = s;
    }
    start
}

/// One process of the log: its host and pid (`host:pid:tid` of the prefix).
type Key = (String, u32);

/// Where each run of a log starts: (index into `lines`, why). The first run starts at 0.
///
/// Runs follow one another in time (a retry, a job run twice, `NCCL_*` changed between
/// runs); each process (host and pid) belongs to the run it first logged in. A new run starts
/// at the first line of a new process when
/// * it announces (`Init START|COMPLETE .. busId B`) a GPU of its host that another process of
///   the current run already announced (one job drives each GPU from one process), or
/// * it prints NCCL's version banner, the current run already had one, and no process of the
///   current run logs anything after that line (a communicator of the same job, as a
///   sub-group's rank 0, prints a banner too, while the others go on logging).
fn run_starts(lines: &[Line]) -> Vec<(usize, String)> {
    struct Proc {
        first: usize,
        last: usize,
        banner: bool,
        gpus: Vec<String>,
    }
    let mut procs: Vec<(Key, Proc)> = Vec::new();
    let mut index: std::collections::HashMap<Key, usize> = Default::default();
    for (i, l) in lines.iter().enumerate() {
        let Some((o, level, msg)) = split_line(&l.text, l.no) else {
            continue;
        };
        let Some(pid) = o.pid else { continue };
        let key: Key = (o.host.clone().unwrap_or_default(), pid);
        let at = *index.entry(key.clone()).or_insert_with(|| {
            procs.push((
                key.clone(),
                Proc {
                    first: i,
                    last: i,
                    banner: false,
                    gpus: Vec::new(),
                },
            ));
            procs.len() - 1
        });
        let p = &mut procs[at].1;
        p.last = i;
        p.banner |= level == "INFO" && msg.starts_with("NCCL version ");
        if let Some(b) = parse_rank(&msg, &o).and_then(|r| r.bus_id) {
            if !p.gpus.contains(&b) {
                p.gpus.push(b);
            }
        }
    }
    let mut starts: Vec<(usize, String)> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut banner = false;
    for (k, (key, p)) in procs.iter().enumerate() {
        let who = format!(
            "{} pid {}",
            if key.0.is_empty() { "a host" } else { &key.0 },
            key.1
        );
        let reused = p.gpus.iter().find_map(|g| {
            current
                .iter()
                .map(|&c| &procs[c])
                .find(|(ck, cp)| ck.0 == key.0 && cp.gpus.contains(g))
                .map(|(ck, _)| (g.clone(), ck.1))
        });
        let why = match reused {
            Some((g, old)) => Some(format!(
                "{who} took GPU {g}, which pid {old} of the run before had used"
            )),
            None if p.banner
                && banner
                && current.iter().all(|&c| procs[c].1.last < p.first) =>
            {
                Some(format!(
                    "{who} printed a new NCCL version banner after every process of the run before had stopped logging"
                ))
            }
            None => None,
        };
        if let Some(why) = why {
            starts.push((p.first, why));
            current.clear();
            banner = false;
        }
        current.push(k);
        banner |= p.banner;
    }
    starts
}

/// The run (0-based) of each line, by [`run_starts`]: a process's lines stay in the run of its
/// first line; a line without a pid goes to the run it falls in.
fn runs_of_lines(lines: &[Line], starts: &[(usize, String)]) -> Vec<u32> {
    let by_pos = |i: usize| starts.iter().filter(|(s, _)| *s <= i).count() as u32;
    let mut first: std::collections::HashMap<Key, u32> = Default::default();
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            match split_line(&l.text, l.no).and_then(|(o, _, _)| Some((o.host?, o.pid?))) {
                Some(k) => *first.entry(k).or_insert_with(|| by_pos(i)),
                None => by_pos(i),
            }
        })
        .collect()
}

/// Every run of a log, each its own [`NcclLog`] (one log with `run` 0 when the lines hold one
/// run). `last_complete`: as [`parse_lines_with`].
pub fn parse_runs(lines: &[Line], last_complete: bool) -> Vec<NcclLog> {
    let joined = join_wraps(lines);
    let last_no = last_line(&joined);
    let starts = run_starts(&joined);
    if starts.is_empty() {
        return vec![parse_one(&joined, last_complete, last_no)];
    }
    let runs = runs_of_lines(&joined, &starts);
    (0..=starts.len() as u32)
        .filter_map(|r| {
            let mine: Vec<Line> = joined
                .iter()
                .zip(&runs)
                .filter(|(_, x)| **x == r)
                .map(|(l, _)| l.clone())
                .collect();
            if mine.is_empty() {
                return None;
            }
            let mut log = parse_one(&mine, last_complete, last_no);
            log.run = r + 1;
            log.run_start = r
                .checked_sub(1)
                .and_then(|i| starts.get(i as usize))
                .map(|(_, why)| why.clone());
            for o in origins_mut(&mut log) {
                o.run = Some(r + 1);
            }
            Some(log)
        })
        .collect()
}

/// `last_complete`: the block's last line is known to be whole (more text follows it, or the
/// file ends with a newline); otherwise a last `via NET/..` line without `/GDRDMA` may have been
/// cut by the excerpt and is not trusted. Several runs in the lines are read as one log here
/// (`probe --nccl` reads its own run), each line's origin naming its run; [`parse_runs`] keeps
/// them apart.
pub fn parse_lines_with(lines: &[Line], last_complete: bool) -> NcclLog {
    let joined = join_wraps(lines);
    let last_no = last_line(&joined);
    let mut log = parse_one(&joined, last_complete, last_no);
    let starts = run_starts(&joined);
    if !starts.is_empty() {
        let runs = runs_of_lines(&joined, &starts);
        let of: std::collections::HashMap<usize, u32> = joined
            .iter()
            .zip(&runs)
            .map(|(l, r)| (l.no, r + 1))
            .collect();
        for o in origins_mut(&mut log) {
            o.run = of.get(&o.line).copied();
        }
    }
    log
}

fn last_line(joined: &[Line]) -> Option<usize> {
    joined
        .iter()
        .rev()
        .find(|l| !l.text.trim().is_empty())
        .map(|l| l.no)
}

/// Every line origin a log holds.
fn origins_mut(log: &mut NcclLog) -> impl Iterator<Item = &mut Origin> {
    log.ranks
        .iter_mut()
        .map(|r| &mut r.origin)
        .chain(log.net_devices.iter_mut().map(|d| &mut d.origin))
        .chain(log.nic_gdr.iter_mut().map(|d| &mut d.origin))
        .chain(log.gpu_gdr.iter_mut().map(|d| &mut d.origin))
        .chain(log.connections.iter_mut().map(|d| &mut d.origin))
        .chain(log.failures.iter_mut().map(|d| &mut d.origin))
        .chain(log.warnings.iter_mut().map(|d| &mut d.origin))
}

/// Hosts read from two prefixes that ran into each other (processes writing the same terminal
/// at once: `g183:161258:16169g183:161264:161695 [7] NCCL INFO ..`, or a line cut after `6[`
/// and the next one glued on: `6[g183:161258:161696 [1]`): a host name holds no `:` or `[`,
/// so the host is the name of another line that the glued text ends with (`g183`), and none
/// (the line stays unplaced) when no other line names such a host.
fn repair_glued_hosts(log: &mut NcclLog) {
    // A host name holds none of `:`, `[` or `/` (`NET/IB/0/GDRnode-x`: a line cut inside
    // `/GDRDMA` with the next process's line glued on).
    let glued = |h: &str| h.contains([':', '[', '/']);
    if !log.hosts.iter().any(|h| glued(h)) {
        return;
    }
    let known: Vec<String> = log.hosts.iter().filter(|h| !glued(h)).cloned().collect();
    let fix = |h: &str| -> Option<String> {
        let tail = h.rsplit([':', '[', '/']).next().unwrap_or("");
        known
            .iter()
            .filter(|k| tail.ends_with(k.as_str()))
            .max_by_key(|k| k.len())
            .cloned()
    };
    for o in origins_mut(log) {
        if o.host.as_deref().is_some_and(glued) {
            o.host = o.host.as_deref().and_then(fix);
        }
    }
    for d in &mut log.dmabuf_gpus {
        if glued(&d.0) {
            d.0 = fix(&d.0).unwrap_or_default();
        }
    }
    log.dmabuf_gpus.retain(|d| !d.0.is_empty());
    log.hosts = known;
}

/// Each line's rank and GPU from the `Init` line of the same host, pid and device.
fn attribute(log: &mut NcclLog) {
    type At = (Option<String>, Option<u32>, Option<u32>);
    let mut by: std::collections::HashMap<At, (Vec<u32>, Vec<String>)> = Default::default();
    for r in &log.ranks {
        if r.origin.pid.is_none() {
            continue;
        }
        let dev = r.cuda_dev.or(r.origin.dev);
        let e = by
            .entry((r.origin.host.clone(), r.origin.pid, dev))
            .or_default();
        if !e.0.contains(&r.rank) {
            e.0.push(r.rank);
        }
        if let Some(b) = &r.bus_id {
            if !e.1.contains(b) {
                e.1.push(b.clone());
            }
        }
    }
    if by.is_empty() {
        return;
    }
    for o in origins_mut(log) {
        if let Some((ranks, buses)) = by.get(&(o.host.clone(), o.pid, o.dev)) {
            o.rank = match ranks.as_slice() {
                [r] => Some(*r),
                _ => None,
            };
            o.bus_id = match buses.as_slice() {
                [b] => Some(b.clone()),
                _ => None,
            };
        }
    }
}

/// The lines of one run into an [`NcclLog`].
fn parse_one(joined: &[Line], last_complete: bool, last_no: Option<usize>) -> NcclLog {
    let mut log = NcclLog {
        lines: [
            joined.first().map(|l| l.no).unwrap_or(0),
            joined.last().map(|l| l.no).unwrap_or(0),
        ],
        ..NcclLog::default()
    };
    for l in joined {
        let text = l.text.as_str();
        if let Some(v) = version_in(text) {
            if !log.versions.contains(&v) {
                log.versions.push(v);
            }
        }
        let parsed = split_line(text, l.no).or_else(|| unprefixed(text, l.no));
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
        if o.unprefixed {
            log.unprefixed += 1;
        }
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
        if no_rdma_device(&msg) {
            log.no_rdma.push((l.no, msg.clone()));
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
        // `Using internal Network IB`: NCCL 2.3's word for the same.
        if let Some(n) = msg
            .strip_prefix("Using network ")
            .or_else(|| msg.strip_prefix("Using internal Network "))
        {
            let n = n.trim().to_string();
            if !crate::nccl::compare::is_rdma(&n) {
                log.no_rdma.push((l.no, msg.clone()));
            }
            if !log.networks.contains(&n) {
                log.networks.push(n);
            }
            continue;
        }
        if msg.contains("GPU Direct RDMA ") {
            match parse_gdr(&msg, &o) {
                // A socket "HCA" is a TCP interface: NCCL has no RDMA network there, which
                // is no peer-memory answer.
                (Some(n), _) if !crate::nccl::compare::is_rdma(&n.net) => {
                    log.no_rdma.push((l.no, msg.clone()));
                }
                _ if gdr_cut(&msg) => {
                    log.unreadable
                        .push((l.no, "a GPU Direct RDMA line cut short".into()));
                }
                (Some(n), _) => log.nic_gdr.push(n),
                (_, Some(g)) => log.gpu_gdr.push(g),
                _ => {}
            }
            continue;
        }
        if gdr_cut(&msg) {
            log.unreadable
                .push((l.no, "a GPU Direct RDMA line cut short".into()));
            continue;
        }
        if let Some(r) = msg.strip_prefix("DMA-BUF is available on GPU device ") {
            if let (Some(h), Some(d)) = (o.host.clone(), num(r)) {
                log.dmabuf_gpus.push((h, d));
            }
            continue;
        }
        if is_summary(&msg) {
            log.summaries += 1;
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
    repair_glued_hosts(&mut log);
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
    attribute(&mut log);
    gdr_ranks_to_gpus(&mut log);
    log
}

/// NCCL 2.24-2.28 print `GPU Direct RDMA .. for GPU %d` with the *rank* where earlier versions
/// print the GPU's bus id: each such number becomes the bus id of that rank on the same host
/// (its `Init` line), or `rank N` when the log does not say which GPU it is (no Init line, or
/// communicators that give the number to different GPUs). Unknown version: as printed.
fn gdr_ranks_to_gpus(log: &mut NcclLog) {
    use crate::nccl::Version;
    let Some(v) = log.version() else { return };
    if v < Version::new(2, 24, 0) || v >= Version::new(2, 29, 0) {
        return;
    }
    let ranks = log.ranks.clone();
    for g in &mut log.gpu_gdr {
        let Some(n) = num(&g.gpu) else { continue };
        let mut buses: Vec<&str> = ranks
            .iter()
            .filter(|r| r.rank == n && r.origin.host == g.origin.host)
            .filter_map(|r| r.bus_id.as_deref())
            .collect();
        buses.sort_unstable();
        buses.dedup();
        g.gpu = match buses.as_slice() {
            [b] => b.to_string(),
            _ => format!("rank {n}"),
        };
    }
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
/// goes on after it or ends with a newline): one log per run ([`parse_runs`]).
pub fn block(b: &mut Block, raw: &RawBlock, w: &Whole) -> Vec<NcclLog> {
    let file_last = w
        .lines
        .iter()
        .rev()
        .find(|l| !l.text.trim().is_empty())
        .map(|l| l.no)
        .unwrap_or(0);
    let complete = b.lines[1] < file_last || w.text.ends_with('\n');
    let runs = parse_runs(&raw.lines, complete);
    let count = |f: &dyn Fn(&NcclLog) -> usize| runs.iter().map(f).sum::<usize>();
    let mut versions: Vec<&str> = Vec::new();
    let mut hosts: Vec<&str> = Vec::new();
    for l in &runs {
        for v in &l.versions {
            if !versions.contains(&v.as_str()) {
                versions.push(v);
            }
        }
        for h in &l.hosts {
            if !hosts.contains(&h.as_str()) {
                hosts.push(h);
            }
        }
    }
    b.summary = format!(
        "NCCL {}: {} NCCL line(s), {} host(s), {} connection line(s), {} failure line(s)",
        if versions.is_empty() {
            "(version not logged)".to_string()
        } else {
            versions.join(", ")
        },
        count(&|l| l.nccl_lines),
        hosts.len(),
        count(&|l| l.connections.len()),
        count(&|l| l.failures.len())
    );
    if runs.len() > 1 {
        b.summary.push_str(&format!(
            "; {} runs (lines {})",
            runs.len(),
            runs.iter()
                .map(|l| format!("{}-{}", l.lines[0], l.lines[1]))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let unprefixed = count(&|l| l.unprefixed);
    if unprefixed > 0 {
        b.summary.push_str(&format!(
            "; {unprefixed} line(s) without NCCL's `host:pid:tid [dev] NCCL INFO` prefix read by their shape alone (lower confidence: their host, process and GPU are unknown)"
        ));
    }
    for l in &runs {
        for (no, why) in &l.unreadable {
            b.problems.push(format!("line {no}: {why}"));
        }
    }
    b.status = status(&b.repairs, &b.problems);
    runs
}
