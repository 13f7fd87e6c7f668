//! The kernel log lines that matter (Xids, IOMMU faults, mlx5 health, peer-memory module load
//! failures), from the best source the node offers:
//!
//! - live: `/dev/kmsg` (non-blocking: the ring buffer as it is now), else `journalctl -k -b 0`
//!   (the journal files, through their own reader), else `/var/log/kern.log`, `messages` or
//!   `syslog` (the part after the last boot banner);
//! - sysroot: `gdrdoctor/kernel-log.txt` (what a gdrdoctor snapshot kept), else the same
//!   `/var/log` files, else `/var/log/dmesg` (a captured `dmesg`).
//!
//! Only the lines [`klog::parse_line`] recognises are kept (plus the boot banner), so a snapshot
//! stores a few lines, not the whole log.

use super::NOT_CAPTURED;
use crate::source::reader::Root;
use gdrdoctor_checks::klog::{self, Keeper};
use gdrdoctor_checks::model::{Fact, KernelLog, LogScope, DAMAGED};
use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

/// Where a snapshot keeps the lines.
pub const SNAPSHOT_PATH: &str = "/gdrdoctor/kernel-log.txt";
/// Text logs tried when `/dev/kmsg` and the journal are not readable.
pub const LOG_FILES: &[&str] = &["/var/log/kern.log", "/var/log/messages", "/var/log/syslog"];
/// The most lines kept (the newest win; the boot banner is always kept).
pub use klog::MAX_LINES;
/// The most `/dev/kmsg` records read (the ring is at most a few MiB; this bounds a log storm).
const MAX_RECORDS: usize = 2_000_000;
/// The tail of a text log that is read.
const TAIL_BYTES: u64 = 64 << 20;

pub fn collect(root: &Root) -> Fact<KernelLog> {
    if root.is_live() {
        live()
    } else {
        sysroot(root)
    }
}

fn live() -> Fact<KernelLog> {
    let kmsg = match read_kmsg("/dev/kmsg") {
        Ok(l) => return Fact::known(l, "/dev/kmsg"),
        Err(e) => e,
    };
    let journal = match journalctl() {
        Ok(l) => return Fact::known(l, "journalctl -k -b 0"),
        Err(e) => e,
    };
    let mut tried = Vec::new();
    for f in LOG_FILES {
        match tail_file(f) {
            Ok(text) => {
                let mut k = Keeper::default();
                for l in text.lines() {
                    k.push(l.to_string());
                }
                return Fact::known(k.finish(f.to_string(), LogScope::Unknown), *f);
            }
            Err(e) => tried.push(format!("{f}: {e}")),
        }
    }
    Fact::absent(
        "/dev/kmsg",
        format!(
            "/dev/kmsg: {kmsg}; journalctl: {journal}; {}",
            tried.join("; ")
        ),
    )
}

/// Parse one `/dev/kmsg` record: (sequence number, dmesg-style line). Continuation lines
/// (` KEY=value`) are dropped.
pub fn kmsg_record(rec: &[u8]) -> Option<(u64, String)> {
    let text = String::from_utf8_lossy(rec);
    let first = text.lines().next()?;
    let (head, msg) = first.split_once(';')?;
    let f: Vec<&str> = head.split(',').collect();
    let seq: u64 = f.get(1)?.parse().ok()?;
    let usec: u64 = f.get(2)?.parse().ok()?;
    Some((
        seq,
        format!("[{:>5}.{:06}] {msg}", usec / 1_000_000, usec % 1_000_000),
    ))
}

pub(crate) fn read_kmsg(path: &str) -> Result<KernelLog, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                format!("{e} (kernel.dmesg_restrict=1 needs root or CAP_SYSLOG)")
            }
            _ => e.to_string(),
        })?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut k = Keeper::default();
    let mut first_seq = None;
    let mut records = 0usize;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                records += 1;
                if let Some((seq, line)) = kmsg_record(&buf[..n]) {
                    first_seq.get_or_insert(seq);
                    k.push(line);
                }
                if records >= MAX_RECORDS {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // EPIPE: records were overwritten while reading; the next read continues.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading: {e}")),
        }
    }
    let scope = if first_seq == Some(0) {
        LogScope::ThisBoot
    } else {
        LogScope::ThisBootPartial
    };
    Ok(k.finish("/dev/kmsg".into(), scope))
}

/// `journalctl -k -b 0 -o short-monotonic`: the journal files of this boot, through journalctl.
fn journalctl() -> Result<KernelLog, String> {
    let mut child = std::process::Command::new("journalctl")
        .args(["-k", "-b", "0", "-q", "--no-pager", "-o", "short-monotonic"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run: {e}"))?;
    let Some(mut out) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("no stdout".into());
    };
    let reader = std::thread::spawn(move || {
        let mut k = Keeper::default();
        let mut text = String::new();
        let mut buf = std::io::BufReader::new(&mut out);
        let mut total = 0usize;
        loop {
            text.clear();
            match std::io::BufRead::read_line(&mut buf, &mut text) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    total += n;
                    k.push(text.trim_end().to_string());
                    if total > 256 << 20 {
                        break;
                    }
                }
            }
        }
        k
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let k = reader
        .join()
        .map_err(|_| "reader thread failed".to_string())?;
    match status {
        Some(s) if s.success() && k.scanned() > 0 => {
            Ok(k.finish("journalctl -k -b 0".into(), LogScope::ThisBootPartial))
        }
        Some(s) if s.success() => {
            Err("no kernel messages for this boot (journal not persistent?)".into())
        }
        Some(s) => Err(format!("exited with {s}")),
        None => Err("timed out after 20 s".into()),
    }
}

/// The last [`TAIL_BYTES`] of a file, from a line start.
fn tail_file(path: &str) -> Result<String, String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
    let mut b = Vec::new();
    f.take(TAIL_BYTES)
        .read_to_end(&mut b)
        .map_err(|e| e.to_string())?;
    let mut s = String::from_utf8_lossy(&b).into_owned();
    if start > 0 {
        if let Some(i) = s.find('\n') {
            s.drain(..=i);
        }
    }
    Ok(s)
}

fn sysroot(root: &Root) -> Fact<KernelLog> {
    match root.read_text(SNAPSHOT_PATH) {
        Ok(t) => return parse_snapshot(&t),
        // There but unreadable: damaged evidence (an error), not "not in this snapshot".
        Err(e) if !e.is_not_found() => {
            return Fact::absent(SNAPSHOT_PATH, format!("{DAMAGED}{}", e.reason()))
        }
        Err(_) => {}
    }
    let mut tried = Vec::new();
    for f in LOG_FILES.iter().chain(["/var/log/dmesg"].iter()) {
        match root.read_text(f) {
            Ok(text) => {
                let mut k = Keeper::default();
                for l in text.lines() {
                    k.push(l.to_string());
                }
                let scope = if *f == "/var/log/dmesg" {
                    LogScope::ThisBootPartial
                } else {
                    LogScope::Unknown
                };
                return Fact::known(k.finish(f.to_string(), scope), *f);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => tried.push(format!("{f}: {}", e.reason())),
        }
    }
    let why = if root.is_complete() {
        "not in this snapshot (gdrdoctor/kernel-log.txt: taken before gdrdoctor captured the kernel log, or the log was unreadable)".to_string()
    } else {
        format!("{NOT_CAPTURED} (no gdrdoctor/kernel-log.txt, /var/log/kern.log, messages, syslog or dmesg)")
    };
    let why = if tried.is_empty() {
        why
    } else {
        format!("{why}; {}", tried.join("; "))
    };
    Fact::absent(SNAPSHOT_PATH, why)
}

/// `gdrdoctor/kernel-log.txt`: the title, `# lines: N` (the lines kept), `# origin: ...`,
/// `# scope: ...`, `# scanned: N`, the lines, then `# end`. The count comes right after the
/// title and the end marker last, so that a truncated file is known as one: its lines are
/// fewer than declared, or its end is missing (a lost Xid 79 line must not read as a healthy
/// log). Files without `# lines:` (older gdrdoctor) are read as they are.
pub fn render(log: &KernelLog) -> String {
    let mut s = format!(
        "# gdrdoctor kernel log lines (only those about Xids, IOMMU faults and mlx5 health)\n# lines: {}\n# origin: {}\n# scope: {}\n# scanned: {}\n",
        log.lines.len(),
        log.origin,
        log.scope.as_str(),
        log.scanned
    );
    for l in &log.lines {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("# end\n");
    s
}

pub fn parse_snapshot(text: &str) -> Fact<KernelLog> {
    let mut origin = None;
    let mut scope = None;
    let mut scanned = None;
    let mut declared: Option<Option<usize>> = None;
    let mut ended = false;
    let mut after_end = false;
    let mut lines = Vec::new();
    for l in text.lines() {
        if ended && !l.trim().is_empty() {
            after_end = true;
        }
        if let Some(h) = l.strip_prefix("# ") {
            if h == "end" {
                ended = true;
            } else if let Some(v) = h.strip_prefix("lines: ") {
                declared = Some(v.trim().parse().ok());
            } else if let Some(v) = h.strip_prefix("origin: ") {
                origin = Some(v.to_string());
            } else if let Some(v) = h.strip_prefix("scope: ") {
                scope = LogScope::parse(v);
            } else if let Some(v) = h.strip_prefix("scanned: ") {
                scanned = v.trim().parse().ok();
            }
            continue;
        }
        if !l.trim().is_empty() {
            lines.push(l.to_string());
        }
    }
    let src = format!(
        "{SNAPSHOT_PATH} (from {})",
        origin.as_deref().unwrap_or("?")
    );
    let Some(scope) = scope else {
        return Fact::absent(
            SNAPSHOT_PATH,
            format!("{DAMAGED}no `# scope:` header: not a gdrdoctor kernel log"),
        );
    };
    // A log that declares its length (this gdrdoctor's) must hold all of it, then its end.
    if let Some(d) = declared {
        let problem = match d {
            None => Some("its `# lines:` count is not a number".to_string()),
            Some(n) if lines.len() != n => Some(format!(
                "it declares {n} line(s) and holds {}: truncated or altered",
                lines.len()
            )),
            Some(_) if !ended => Some("its `# end` marker is missing: truncated".to_string()),
            Some(_) if after_end => Some("it has lines after its `# end` marker".to_string()),
            Some(_) => None,
        };
        if let Some(p) = problem {
            return Fact::absent(SNAPSHOT_PATH, format!("{DAMAGED}{p}"));
        }
    }
    Fact::known(
        KernelLog {
            origin: origin.unwrap_or_else(|| "unknown".into()),
            scope,
            scanned: scanned.unwrap_or(lines.len()),
            lines,
        },
        src,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_truncated_snapshot_log_is_damaged_and_an_old_one_is_read() {
        let log = KernelLog {
            origin: "/dev/kmsg".into(),
            scope: LogScope::ThisBoot,
            scanned: 2113,
            lines: vec![
                "[    0.000000] Linux version 6.8.0".into(),
                "[ 8613.402263] NVRM: Xid (PCI:0000:48:00): 79, GPU has fallen off the bus.".into(),
            ],
        };
        let text = render(&log);
        assert_eq!(parse_snapshot(&text).get(), Some(&log));
        // Cut anywhere before the final newline: never read as a whole log.
        for cut in 1..text.len() - 1 {
            let Some(part) = text.get(..cut) else {
                continue;
            };
            match parse_snapshot(part) {
                Fact::Known { value, .. } => {
                    panic!("cut at {cut} read as known: {value:?}")
                }
                Fact::Absent { reason, .. } => {
                    assert!(
                        gdrdoctor_checks::model::is_damaged(&reason),
                        "{cut}: {reason}"
                    )
                }
            }
        }
        // A line added after the end, or a count that lies.
        assert!(parse_snapshot(&format!("{text}[ 1.0] NVRM: Xid 13\n"))
            .get()
            .is_none());
        let lying = text.replace("# lines: 2", "# lines: 1");
        assert!(parse_snapshot(&lying).get().is_none());
        let nan = text.replace("# lines: 2", "# lines: two");
        assert!(parse_snapshot(&nan).get().is_none());
        // An older gdrdoctor's log (no count, no end) is read as it is.
        let old = "# gdrdoctor kernel log lines\n# origin: /dev/kmsg\n# scope: this-boot\n# scanned: 9\n[ 1.0] a\n";
        assert_eq!(parse_snapshot(old).get().map(|l| l.lines.len()), Some(1));
    }

    #[test]
    fn kmsg_records_become_dmesg_lines() {
        let (seq, l) = kmsg_record(b"4,3973,227996636,-;NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n SUBSYSTEM=pci\n").unwrap();
        assert_eq!(seq, 3973);
        assert_eq!(
            l,
            "[  227.996636] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus."
        );
        assert!(kmsg_record(b"garbage").is_none());
    }

    #[test]
    fn a_multi_boot_file_keeps_the_last_boot() {
        let mut k = Keeper::default();
        for l in [
            "Sep 20 09:00:00 h kernel: Linux version 6.8.0",
            "Sep 20 10:00:00 h kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
            "Sep 21 09:00:00 h kernel: Linux version 6.8.0",
            "Sep 21 09:00:01 h kernel: usb 1-1: new device",
            "Sep 21 09:59:59 h kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0003 address=0x80 flags=0x0020]",
        ] {
            k.push(l.into());
        }
        let log = k.finish("/var/log/kern.log".into(), LogScope::Unknown);
        assert_eq!(log.scope, LogScope::ThisBoot);
        assert_eq!(log.scanned, 5);
        assert_eq!(log.lines.len(), 2);
        assert!(log.lines[0].contains("Linux version"));
        assert!(log.lines[1].contains("AMD-Vi"));
    }

    #[test]
    fn snapshot_file_round_trips() {
        let log = KernelLog {
            origin: "/dev/kmsg".into(),
            scope: LogScope::ThisBootPartial,
            scanned: 1234,
            lines: vec!["[    1.000000] NVRM: Xid (PCI:0000:18:00): 13, x".into()],
        };
        let back = parse_snapshot(&render(&log));
        assert_eq!(back.get(), Some(&log));
        assert!(parse_snapshot("just text\n").get().is_none());
    }

    #[test]
    fn live_kmsg_reads_without_blocking() {
        // On a machine where /dev/kmsg is readable the read ends (EAGAIN), it never blocks.
        let t0 = Instant::now();
        let r = read_kmsg("/dev/kmsg");
        assert!(t0.elapsed() < Duration::from_secs(30));
        if let Ok(l) = r {
            assert!(l.scanned > 0);
        }
    }
}
