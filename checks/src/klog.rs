//! Kernel log lines that say a node stopped being fit for GPUDirect RDMA: NVIDIA Xid events,
//! IOMMU faults (Intel DMAR, AMD-Vi) and mlx5 health / firmware-fatal messages. Pure parsing and
//! classification, reusable on pasted `dmesg` text (`gdrdoctor diagnose`).
//!
//! Accepted line shapes: `/dev/kmsg` records (`6,3973,227996636,-;msg`), `dmesg`
//! (`[  227.996636] msg`, `[Sun Feb 23 16:24:18 2025] msg`), `dmesg -x`
//! (`kern  :err   : ... msg`), syslog and journal (`Sep 21 09:59:59 host kernel: msg`,
//! `journalctl -o short-monotonic`), and bare messages.
//!
//! Message formats, from the source that prints them:
//! - Xid: NVIDIA open-gpu-kernel-modules `src/nvidia/src/kernel/diagnostics/journal.c`
//!   (`NVRM: Xid (PCI:%04x:%02x:%02x): %d, ...`); older drivers print `NVRM: Xid (0000:3b:00): 79, ...`.
//! - Intel: Linux `drivers/iommu/intel/dmar.c` `dmar_fault_do_one()` (pr_fmt `DMAR: `):
//!   `[DMA Read NO_PASID] Request device [3b:00.0] fault addr 0x7f000 [fault reason 0x06] ...`;
//!   kernels before 5.x print `[DMA Read] Request device [3b:00.0] fault addr 7f000`.
//! - AMD: Linux `drivers/iommu/amd/iommu.c` `amd_iommu_report_page_fault()` (pr_fmt `AMD-Vi: `):
//!   `<driver> 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=... address=... flags=...]`
//!   with a known device, `AMD-Vi: Event logged [IO_PAGE_FAULT device=0000:07:00.0 ...]` without.
//! - mlx5: Linux `drivers/net/ethernet/mellanox/mlx5/core/health.c` (`poll_health()`: `Fatal
//!   error %u detected`, `device's health compromised - reached miss count`;
//!   `print_health_info()`: `Health issue observed, %s, severity(%d) %s:`, `PCI slot is
//!   unavailable`; `mlx5_health_try_recover()`: `health recovery flow aborted, PCI reads still
//!   not working`, `starting health recovery flow`, `health recovery failed`, `health recovery
//!   succeeded`; `Issuing FW Reset`), prefixed by `mlx5_core 0000:19:00.0: <func>:<line>:(pid
//!   N): `; `en_main.c` `mlx5e_tx_timeout_work()`: `TX timeout on queue`.
//! - Xid meanings and actions: NVIDIA "Xid Errors" catalog
//!   (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid Catalog": resolution
//!   buckets RESTART_APP, RESET_GPU, RESTART_BM, CHECK_MECHANICALS, ...) and "Dynamic Page
//!   Retirement" / "Row Remapping" (Xid 48, 63, 64, 92, 94, 95).

use crate::model::{KernelLog, LogScope};

/// What a kernel log line says, when it matters to gdrdoctor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `NVRM: Xid (PCI:0000:9b:00): 119, ...`: the GPU (as `0000:9b:00.0`), the Xid, the rest.
    Xid {
        gpu: String,
        xid: u32,
        detail: String,
    },
    /// `NVRM: Xid (PCI:0000:9b:00): 7` and nothing after: the driver always writes `, ...`
    /// after the number (`journal.c`: `"%d, %s"`), so the line was cut, maybe inside the
    /// number (`7` of `79`): the Xid is unknown. `shown`: the digits the line kept.
    XidCut { gpu: String, shown: String },
    /// `NVRM: GPU at 0000:01:00.0 has fallen off the bus.` (some drivers print no Xid line).
    FellOffBus { gpu: String },
    /// An IOMMU refused a device's DMA: the device, the IOMMU (`DMAR`, `AMD-Vi`), what.
    IommuFault {
        device: String,
        unit: &'static str,
        detail: String,
    },
    /// An mlx5 health message about a NIC function.
    Mlx5 {
        device: String,
        kind: Mlx5Kind,
        detail: String,
    },
    /// A peer-memory module that could not load (`nv_peer_mem: Unknown symbol
    /// ib_register_peer_memory_client (err -22)`, `nvidia_peermem: disagrees about version of
    /// symbol ...`, modprobe's `could not insert 'nvidia_peermem': Invalid argument`): the
    /// running `ib_core` has no peer-memory API, or another build of it. Judged by
    /// `kmod.nvidia-peermem`.
    PeerMemFailed { module: String, detail: String },
    /// The peer-memory client's invalidation callback (`nv_get_p2p_free_callback`) ran on a
    /// registration it could not use: GPU memory was freed while a NIC still had it registered.
    /// Judged by `kernel.peermem`.
    PeerMemCallback { kind: PeerMemKind, detail: String },
    /// The kernel banner (`Linux version ...`): a boot.
    Boot,
}

/// What the peer-memory client's free callback reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerMemKind {
    /// `nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping
    /// further processing` (drivers 470-5xx): the registration was already being torn down.
    InvalidContext,
    /// `nv_get_p2p_free_callback -- invalid page_table` / `-- invalid dma_mapping`: the callback
    /// found the pages already released. A driver bug fixed in R510 (and R470 from mid-2021)
    /// printed it; so does a race between the invalidation and the MR's teardown.
    InvalidPages,
}

impl PeerMemKind {
    pub fn describe(self) -> &'static str {
        match self {
            PeerMemKind::InvalidContext => "free callback on an invalid context",
            PeerMemKind::InvalidPages => {
                "free callback on released pages (invalid page_table/dma_mapping)"
            }
        }
    }
}

/// mlx5 health message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mlx5Kind {
    /// `Fatal error N detected` (N: 1 PCI communication, 2 PCI error, 3 NIC disabled,
    /// 4 NIC SW reset, 5 firmware requested reset).
    FatalError(u32),
    HealthCompromised,
    /// `Health issue observed, <syndrome>, severity(N) <LEVEL>`.
    HealthIssue(u8),
    PciUnavailable,
    RecoveryFailed,
    RecoveryStarted,
    Recovered,
    FwReset,
    TxTimeout,
}

impl Mlx5Kind {
    pub fn describe(self) -> String {
        match self {
            Mlx5Kind::FatalError(1) => "fatal error 1 (PCI communication lost)".into(),
            Mlx5Kind::FatalError(2) => "fatal error 2 (PCI channel offline)".into(),
            Mlx5Kind::FatalError(3) => "fatal error 3 (NIC interface disabled)".into(),
            Mlx5Kind::FatalError(4) => "fatal error 4 (NIC software reset)".into(),
            Mlx5Kind::FatalError(5) => "fatal error 5 (firmware requested a reset)".into(),
            Mlx5Kind::FatalError(n) => format!("fatal error {n}"),
            Mlx5Kind::HealthCompromised => "health counter stopped: firmware not responding".into(),
            Mlx5Kind::HealthIssue(s) => format!("firmware health issue, severity {s}"),
            Mlx5Kind::PciUnavailable => "PCI slot unavailable (reads return all ones)".into(),
            Mlx5Kind::RecoveryFailed => "health recovery failed".into(),
            Mlx5Kind::RecoveryStarted => "health recovery started (the device was reset)".into(),
            Mlx5Kind::Recovered => "health recovery succeeded (the device was reset)".into(),
            Mlx5Kind::FwReset => "firmware reset issued".into(),
            Mlx5Kind::TxTimeout => "transmit timeout on a send queue".into(),
        }
    }
    /// `fail`: the NIC is (or was) dead; `warn`: it recovered or stalled.
    pub fn is_fatal(self) -> bool {
        match self {
            Mlx5Kind::FatalError(n) => n != 3 && n != 4,
            Mlx5Kind::HealthCompromised | Mlx5Kind::PciUnavailable | Mlx5Kind::RecoveryFailed => {
                true
            }
            // Kernel log levels: 0 emerg .. 3 err .. 7 debug.
            Mlx5Kind::HealthIssue(s) => s <= 3,
            _ => false,
        }
    }
}

/// `0000:9b:00` / `9b:00` / `9b:00.0` / `0000:9b:00.0` -> `0000:9b:00.0` (lower case).
pub fn normalize_bdf(s: &str) -> Option<String> {
    let s = s.trim().trim_end_matches([',', ':', ']', ')', '.']);
    let (head, func) = match s.rsplit_once('.') {
        Some((h, f)) if f.len() == 1 && f.chars().all(|c| c.is_digit(8)) => (h, f),
        _ => (s, "0"),
    };
    let parts: Vec<&str> = head.split(':').collect();
    let ok = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    let (dom, bus, dev) = match parts.as_slice() {
        [d, b, v] if ok(d, 4) && ok(b, 2) && ok(v, 2) => (*d, *b, *v),
        [b, v] if ok(b, 2) && ok(v, 2) => ("0000", *b, *v),
        _ => return None,
    };
    Some(format!("{dom}:{bus}:{dev}.{func}").to_lowercase())
}

/// Strip the log prefix (kmsg record header, `[ts]`, `kern  :err   :`, syslog `host kernel:`).
/// What collectors and launchers put before a kernel log line, removed: `srun -l`'s task
/// label (`0: `), a syslog level (`<4>`), and an RFC 3339 time (`kubectl logs --timestamps`,
/// `dmesg --time-format iso`), in any order and repeated.
pub fn strip_log_prefixes(line: &str) -> &str {
    let mut s = line;
    loop {
        let t = s.trim_start();
        let b = t.as_bytes();
        // `0: `, `12: ` (srun --label; padded with spaces for wide jobs).
        let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
        if (1..=7).contains(&digits) && t[digits..].starts_with(": ") {
            s = &t[digits + 2..];
            continue;
        }
        // `<4>`
        if b.first() == Some(&b'<') {
            let d = b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if (1..=3).contains(&d) && b.get(1 + d) == Some(&b'>') {
                s = &t[d + 2..];
                continue;
            }
        }
        // `2024-05-01T12:00:00.123456789Z `, `2024-05-01T12:00:00,123456+00:00 `
        if b.len() > 20
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
        {
            if let Some((_, rest)) = t.split_once(' ') {
                s = rest;
                continue;
            }
        }
        return t;
    }
}

pub fn message(line: &str) -> &str {
    let mut s = strip_log_prefixes(line.trim_end_matches(['\n', '\r']));
    // /dev/kmsg: "pri,seq,usec,flags[,...];msg"
    if let Some((head, rest)) = s.split_once(';') {
        let f: Vec<&str> = head.split(',').collect();
        if f.len() >= 3
            && f[..3]
                .iter()
                .all(|x| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit()))
        {
            s = rest;
        }
    }
    // syslog / journal: "... kernel: msg"
    if let Some(i) = s.find(" kernel: ") {
        s = &s[i + " kernel: ".len()..];
    }
    // dmesg -x: "kern  :err   : msg"
    if let Some(rest) = s.strip_prefix("kern") {
        let mut parts = rest.splitn(3, ':');
        if let (Some(gap), Some(level), Some(msg)) = (parts.next(), parts.next(), parts.next()) {
            if gap.trim().is_empty() && level.trim().chars().all(|c| c.is_ascii_lowercase()) {
                s = msg.trim_start();
            }
        }
    }
    // dmesg -x with ISO times: "2025-02-10T16:28:06,502716+00:00 msg"
    if s.len() > 20 && s.as_bytes().get(4) == Some(&b'-') && s.as_bytes().get(10) == Some(&b'T') {
        if let Some((_, rest)) = s.split_once(' ') {
            s = rest;
        }
    }
    // "[  227.996636] msg" / "[Sun Feb 23 16:24:18 2025] msg"
    let t = s.trim_start();
    if t.starts_with('[') {
        if let Some(i) = t.find("] ") {
            s = &t[i + 2..];
        }
    }
    s.trim()
}

/// When the line was logged, as the line says it (`227.997 s after boot`, `Sep 21 09:59:59`).
pub fn timestamp(line: &str) -> Option<String> {
    if let Some((head, _)) = line.split_once(';') {
        let f: Vec<&str> = head.split(',').collect();
        if f.len() >= 3
            && f[..3]
                .iter()
                .all(|x| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit()))
        {
            let us: u64 = f[2].parse().ok()?;
            return Some(format!("{:.3} s after boot", us as f64 / 1e6));
        }
    }
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        let inner = rest.split(']').next()?.trim();
        return Some(match inner.parse::<f64>() {
            Ok(v) => format!("{v:.3} s after boot"),
            Err(_) => inner.to_string(),
        });
    }
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    if months.iter().any(|m| t.starts_with(m)) && t.len() >= 15 {
        return t.get(..15).map(str::to_string);
    }
    if t.len() > 19 && t.as_bytes().get(4) == Some(&b'-') && t.as_bytes().get(10) == Some(&b'T') {
        return t.get(..19).map(str::to_string);
    }
    // `dmesg --decode --time-format iso`: `kern  :err   : 2025-02-10T16:28:06,570939+00:00 ...`.
    if let Some((head, rest)) = t.split_once(": ") {
        let rest = rest.trim_start();
        // The decoded prefix is `facility:level` (`kern  :err   `).
        if head.contains(':')
            && rest.len() > 19
            && rest.as_bytes().get(4) == Some(&b'-')
            && rest.as_bytes().get(10) == Some(&b'T')
        {
            return rest.get(..19).map(str::to_string);
        }
    }
    None
}

/// The first BDF-looking token before `end` in `s` (the `dev_printk` prefix).
fn bdf_before(s: &str, end: usize) -> Option<String> {
    s.get(..end)?
        .split_whitespace()
        .rev()
        .find_map(normalize_bdf)
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.find(pat).map(|i| &s[i + pat.len()..])
}

fn parse_xid(m: &str) -> Option<Event> {
    let rest = after(m, "NVRM: Xid (")?;
    let (pci, rest) = rest.split_once(')')?;
    let gpu = normalize_bdf(pci.trim().trim_start_matches("PCI:"))?;
    let rest = rest.trim_start_matches(':').trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if !digits.is_empty() && rest[digits.len()..].trim().is_empty() {
        return Some(Event::XidCut { gpu, shown: digits });
    }
    let xid = digits.parse().ok()?;
    let detail = rest[digits.len()..]
        .trim_start_matches([',', ' '])
        .trim()
        .to_string();
    Some(Event::Xid { gpu, xid, detail })
}

/// `NVRM: GPU at 0000:01:00.0 has fallen off the bus.`, and the three-line form of newer
/// drivers (`NVRM: The NVIDIA GPU 0000:b3:00.0` / `NVRM: (PCI ID: 10de:26b5) installed in this
/// system has` / `NVRM: fallen off the bus and is not responding to commands.`), one kmsg record
/// with escaped newlines (`\x0a`) or joined by [`join_continuations`].
fn parse_fell_off(m: &str) -> Option<Event> {
    if !m.contains("NVRM:") || !m.contains("fallen off the bus") || m.contains("Xid") {
        return None;
    }
    let rest = after(m, "GPU at ").or_else(|| after(m, "GPU "))?;
    let tok = rest.split_whitespace().next()?.split("\\x0a").next()?;
    let gpu = normalize_bdf(tok.trim_start_matches("PCI:"))?;
    Some(Event::FellOffBus { gpu })
}

/// The peer-memory modules (`nvidia_peermem`, and the legacy `nv_peer_mem` of
/// Mellanox/nv_peer_memory).
pub const PEERMEM_MODULES: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];

/// A peer-memory module's load failure: `<module>: Unknown symbol <sym> (err N)` and
/// `<module>: disagrees about version of symbol <sym>` (Linux `kernel/module/main.c`
/// `resolve_symbol_wait()`, `check_version()`), or modprobe's `could not insert '<module>'`.
fn parse_peermem(m: &str) -> Option<Event> {
    let failed = m.contains("Unknown symbol")
        || m.contains("disagrees about version of symbol")
        || m.contains("could not insert");
    if !failed {
        return None;
    }
    let module = PEERMEM_MODULES
        .iter()
        .chain(["nvidia-peermem"].iter())
        .find(|x| m.contains(**x))?
        .replace('-', "_");
    Some(Event::PeerMemFailed {
        module,
        detail: m.to_string(),
    })
}

fn parse_peermem_callback(m: &str) -> Option<Event> {
    // `detected invalid context` (nvidia-peermem), `-- invalid nv_mem_context` (nv_peer_mem and
    // nvidia-peermem before the rewording).
    let kind = if m.contains("invalid context") || m.contains("invalid nv_mem_context") {
        PeerMemKind::InvalidContext
    } else if m.contains("invalid page_table") || m.contains("invalid dma_mapping") {
        PeerMemKind::InvalidPages
    } else {
        return None;
    };
    Some(Event::PeerMemCallback {
        kind,
        detail: m.trim().to_string(),
    })
}

fn parse_dmar(m: &str) -> Option<Event> {
    let i = m.find("DMAR:")?;
    let rest = m[i + 5..].trim_start();
    let rest = rest.strip_prefix('[')?;
    let (kind, rest) = rest.split_once(']')?;
    let dev = after(rest, "Request device [")?;
    let (dev, tail) = dev.split_once(']')?;
    let device = normalize_bdf(dev)?;
    let tail = tail.trim();
    let addr = after(tail, "fault addr ").and_then(|a| a.split_whitespace().next());
    let reason = after(tail, "] ").map(str::trim).filter(|r| !r.is_empty());
    let mut detail = kind.trim().to_string();
    if let Some(a) = addr {
        let a = if a.starts_with("0x") {
            a.to_string()
        } else {
            format!("0x{a}")
        };
        detail.push_str(&format!(" at {a}"));
    }
    if let Some(r) = reason {
        detail.push_str(&format!(": {r}"));
    }
    Some(Event::IommuFault {
        device,
        unit: "DMAR",
        detail,
    })
}

fn parse_amdvi(m: &str) -> Option<Event> {
    let i = m.find("AMD-Vi: Event logged [")?;
    let body = &m[i + "AMD-Vi: Event logged [".len()..];
    let body = body.split(']').next()?;
    let kind = body.split_whitespace().next()?.to_string();
    let device = match after(body, "device=") {
        Some(d) => normalize_bdf(d.split_whitespace().next()?)?,
        None => bdf_before(m, i)?,
    };
    let mut detail = kind;
    if let Some(a) = after(body, "address=").and_then(|a| a.split_whitespace().next()) {
        detail.push_str(&format!(" at {a}"));
    }
    if let Some(f) = after(body, "flags=").and_then(|a| a.split_whitespace().next()) {
        detail.push_str(&format!(" flags={f}"));
    }
    Some(Event::IommuFault {
        device,
        unit: "AMD-Vi",
        detail,
    })
}

fn parse_mlx5(m: &str) -> Option<Event> {
    let i = m.find("mlx5_core ")?;
    let rest = &m[i + "mlx5_core ".len()..];
    let tok = rest.split_whitespace().next()?;
    let device = normalize_bdf(tok)?;
    let text = rest[tok.len()..].trim();
    let kind = if let Some(n) = after(text, "Fatal error ") {
        let d: String = n.chars().take_while(|c| c.is_ascii_digit()).collect();
        Mlx5Kind::FatalError(d.parse().ok()?)
    } else if text.contains("device's health compromised") {
        Mlx5Kind::HealthCompromised
    } else if let Some(s) = after(text, "Health issue observed,") {
        let sev = after(s, "severity(")
            .and_then(|v| v.split(')').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(3);
        Mlx5Kind::HealthIssue(sev)
    } else if text.contains("PCI slot is unavailable") {
        Mlx5Kind::PciUnavailable
    } else if text.contains("health recovery flow aborted")
        || text.contains("health recovery failed")
    {
        Mlx5Kind::RecoveryFailed
    } else if text.contains("starting health recovery flow") {
        Mlx5Kind::RecoveryStarted
    } else if text.contains("health recovery succeeded") {
        Mlx5Kind::Recovered
    } else if text.contains("Issuing FW Reset") {
        Mlx5Kind::FwReset
    } else if text.contains("TX timeout on queue") {
        Mlx5Kind::TxTimeout
    } else {
        return None;
    };
    // Drop the "func:line:(pid N): " part of mlx5_core_err().
    let detail = match text.find("): ") {
        Some(j) if text[..j].contains("(pid") => text[j + 3..].trim(),
        _ => text,
    };
    Some(Event::Mlx5 {
        device,
        kind,
        detail: detail.to_string(),
    })
}

/// What a line says, if it matters.
pub fn parse_line(line: &str) -> Option<Event> {
    let m = message(line);
    if m.starts_with("Linux version ") {
        return Some(Event::Boot);
    }
    if m.contains("NVRM:") {
        return parse_xid(m).or_else(|| parse_fell_off(m));
    }
    if m.contains("DMAR:") {
        return parse_dmar(m);
    }
    if m.contains("AMD-Vi:") {
        return parse_amdvi(m);
    }
    if m.contains("mlx5_core ") {
        return parse_mlx5(m);
    }
    if m.contains("nv_get_p2p_free_callback") {
        return parse_peermem_callback(m);
    }
    if m.contains("peer_mem") || m.contains("peermem") {
        return parse_peermem(m);
    }
    None
}

/// `dmesg` text as people paste it: a message the kernel printed with embedded newlines comes
/// out as one stamped line followed by indented unstamped ones (`[ 1843.3] NVRM: The NVIDIA
/// GPU ..` / `               NVRM: fallen off the bus ..`). Join each such continuation to the
/// line before it, so that [`parse_line`] sees the whole message (as in one `/dev/kmsg` record).
pub fn join_continuations<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        let continuation = l.starts_with([' ', '\t'])
            && !l.trim_start().starts_with('[')
            && !l.trim().is_empty()
            && out.last().is_some_and(|p| p.trim_start().starts_with('['));
        match out.last_mut() {
            Some(prev) if continuation => {
                prev.push(' ');
                prev.push_str(l.trim());
            }
            _ => out.push(l.to_string()),
        }
    }
    out
}

/// The most lines a [`Keeper`] keeps (the newest win; the boot banner is always kept).
pub const MAX_LINES: usize = 4000;

/// Keeps the lines that matter ([`parse_line`] recognises them) from a kernel log read line by
/// line, the way every source of one does it: `/dev/kmsg`, the journal, a text log, a snapshot's
/// `dmesg`, and pasted `dmesg` text (`gdrdoctor diagnose`). A boot banner starts over: what
/// came before belongs to another boot.
#[derive(Debug, Default)]
pub struct Keeper {
    lines: Vec<String>,
    boot: Option<String>,
    scanned: usize,
    dropped: usize,
}

impl Keeper {
    pub fn push(&mut self, line: String) {
        self.scanned += 1;
        match parse_line(&line) {
            Some(Event::Boot) => {
                self.boot = Some(line);
                self.lines.clear();
                self.dropped = 0;
            }
            Some(_) => {
                self.lines.push(line);
                if self.lines.len() > MAX_LINES {
                    self.lines.remove(0);
                    self.dropped += 1;
                }
            }
            None => {}
        }
    }
    /// Lines looked at so far.
    pub fn scanned(&self) -> usize {
        self.scanned
    }
    /// The log: [`LogScope::ThisBoot`] when a boot banner was seen, else `scope_if_no_boot`.
    pub fn finish(self, origin: String, scope_if_no_boot: LogScope) -> KernelLog {
        let scope = if self.boot.is_some() {
            LogScope::ThisBoot
        } else {
            scope_if_no_boot
        };
        let mut lines: Vec<String> = self.boot.into_iter().collect();
        lines.extend(self.lines);
        let origin = if self.dropped > 0 {
            format!("{origin} (the oldest {} event lines dropped)", self.dropped)
        } else {
            origin
        };
        KernelLog {
            origin,
            scope,
            scanned: self.scanned,
            lines,
        }
    }
}

/// Every event in a block of log text, with its line.
pub fn events(text: &str) -> Vec<(&str, Event)> {
    text.lines()
        .filter_map(|l| parse_line(l).map(|e| (l, e)))
        .collect()
}

/// What an Xid asks of the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum XidAction {
    /// The application's own fault (NVIDIA: RESTART_APP, IGNORE): the node is fine.
    Application,
    /// Watch it; act if it repeats.
    Investigate,
    /// Take the node out of service and reset the GPU (or reboot).
    DrainResetGpu,
    /// Take the node out of service and reboot it.
    DrainReboot,
}

impl XidAction {
    pub fn is_drain(self) -> bool {
        matches!(self, XidAction::DrainResetGpu | XidAction::DrainReboot)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            XidAction::Application => "application error",
            XidAction::Investigate => "investigate",
            XidAction::DrainResetGpu => "drain: reset the gpu",
            XidAction::DrainReboot => "drain: reboot the node",
        }
    }
}

/// One row of the Xid table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidInfo {
    pub xid: u32,
    pub meaning: &'static str,
    pub action: XidAction,
    /// What to do, beyond the action.
    pub fix: &'static str,
}

use XidAction::*;

const ECC_FIX: &str = "drain the node, then reset the GPU (`nvidia-smi -r -i <gpu>`, with no process on it) or reboot so the row remap / page retirement takes effect; `nvidia-smi -q -d ROW_REMAPPER` shows pending remaps; a remapping failure (Xid 64) or repeated uncorrectable errors mean RMA";

/// The Xids gdrdoctor knows. Others are `Investigate`, with NVIDIA's catalog as the reference.
pub static XIDS: &[XidInfo] = &[
    XidInfo { xid: 8, meaning: "GPU stopped processing (channel idle timeout)", action: Investigate, fix: "restart the application; if it repeats on this GPU, drain and reset it" },
    XidInfo { xid: 13, meaning: "graphics engine exception (an illegal instruction or address in a kernel)", action: Application, fix: "an application bug (run it under compute-sanitizer); the node is fine" },
    XidInfo { xid: 31, meaning: "GPU memory page fault (a kernel touched an unmapped address)", action: Application, fix: "an application bug or a freed buffer still in use; the node is fine" },
    XidInfo { xid: 32, meaning: "invalid or corrupted push buffer stream", action: Investigate, fix: "restart the application; if it repeats, check the PCIe link (counters.aer, pcie.link) and the driver" },
    XidInfo { xid: 38, meaning: "driver firmware error", action: Investigate, fix: "update the driver; reset the GPU if it repeats" },
    XidInfo { xid: 43, meaning: "GPU stopped processing (the channel was reset after an application fault)", action: Application, fix: "follows an application fault; the node is fine" },
    XidInfo { xid: 45, meaning: "preemptive cleanup after earlier errors (processes killed)", action: Application, fix: "a consequence of another Xid or of a killed process; look at the Xids before it" },
    XidInfo { xid: 48, meaning: "double-bit (uncorrectable) ECC error", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 61, meaning: "internal micro-controller breakpoint/warning", action: DrainResetGpu, fix: "drain the node and reset the GPU; collect `nvidia-bug-report.sh` if it repeats" },
    XidInfo { xid: 62, meaning: "internal micro-controller halt", action: DrainResetGpu, fix: "drain the node and reset the GPU; collect `nvidia-bug-report.sh` if it repeats" },
    XidInfo { xid: 63, meaning: "ECC page retirement or row remapping recorded: needs a GPU reset to take effect", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 64, meaning: "ECC page retirement or row remapping failed", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 68, meaning: "video decoder (NVDEC) exception", action: Application, fix: "an application/codec fault; the node is fine" },
    XidInfo { xid: 69, meaning: "graphics engine class error", action: Investigate, fix: "restart the application; reset the GPU if it repeats" },
    XidInfo { xid: 74, meaning: "NVLink error", action: DrainResetGpu, fix: "drain the node; read the link errors (`nvidia-smi nvlink -e -i <gpu>`), reset the GPUs (on NVSwitch systems restart nvidia-fabricmanager), then `dcgmi diag -r 2`; reseat or RMA if it repeats" },
    XidInfo { xid: 79, meaning: "GPU has fallen off the bus", action: DrainReboot, fix: "drain the node and reboot it (the GPU cannot be reset from here); if it repeats, reseat the GPU/riser and cables, check power and the PCIe AER counters of its bridges (NVIDIA: CHECK_MECHANICALS)" },
    XidInfo { xid: 92, meaning: "high single-bit ECC error rate", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 94, meaning: "contained ECC error: the affected application was stopped, the GPU needs a reset to remap the row", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 95, meaning: "uncontained ECC error: every application on the GPU is affected", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 109, meaning: "context switch timeout", action: Investigate, fix: "restart the application; reset the GPU if it repeats" },
    XidInfo { xid: 119, meaning: "GSP RPC timeout: the GPU's system processor stopped answering", action: DrainResetGpu, fix: "drain the node and reset the GPU (or reboot); update the driver if it repeats (collect `nvidia-bug-report.sh`)" },
    XidInfo { xid: 120, meaning: "GSP error", action: DrainResetGpu, fix: "drain the node and reset the GPU (or reboot); update the driver if it repeats" },
    XidInfo { xid: 121, meaning: "C2C link corrected error", action: Investigate, fix: "corrected; watch for repeats" },
    XidInfo { xid: 140, meaning: "unrecovered ECC error", action: DrainResetGpu, fix: ECC_FIX },
    XidInfo { xid: 143, meaning: "GPU initialization failure", action: DrainReboot, fix: "drain and reboot; RMA if it repeats" },
    XidInfo { xid: 154, meaning: "GPU recovery action changed (the driver says what the GPU needs)", action: Investigate, fix: "do what the message says: GPU reset, node reboot, or drain" },
];

/// The table row of an Xid (an `Investigate` row for numbers gdrdoctor does not know).
pub fn xid_info(xid: u32) -> XidInfo {
    XIDS.iter()
        .copied()
        .find(|x| x.xid == xid)
        .unwrap_or(XidInfo {
            xid,
            meaning: "not in gdrdoctor's table",
            action: Investigate,
            fix: "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
        })
}

/// Xid 154's action (`... changed from 0x0 (None) to 0x2 (Node Reboot Required)`): 0 none,
/// 1 GPU reset required, 2 node reboot required, 3 drain P2P, 4 drain and reset.
pub fn xid154_action(detail: &str) -> Option<XidAction> {
    let to = after(detail, " to 0x").or_else(|| after(detail, " to "))?;
    let code: String = to.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    match u32::from_str_radix(&code, 16).ok()? {
        0 => Some(Application),
        2 => Some(DrainReboot),
        1 | 3 | 4 => Some(DrainResetGpu),
        _ => Some(Investigate),
    }
}

/// The action an Xid event asks for (Xid 154 carries its own).
pub fn action(xid: u32, detail: &str) -> XidAction {
    if xid == 154 {
        if let Some(a) = xid154_action(detail) {
            return a;
        }
    }
    xid_info(xid).action
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn xid_lines_in_every_shape() {
        for l in [
            "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s",
            "6,1234,227996636,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout",
            "Sep 21 09:59:59 host kernel: [ 1936.510073] NVRM: Xid (PCI:0000:9b:00): 119, pid=1",
            "kern  :err   : 2025-02-10T16:28:06,502716+00:00 NVRM: Xid (PCI:0000:9b:00): 119, x",
            "NVRM: Xid (0000:9b:00): 119, GSP",
        ] {
            match parse_line(l) {
                Some(Event::Xid { gpu, xid, .. }) => {
                    assert_eq!((gpu.as_str(), xid), ("0000:9b:00.0", 119), "{l}");
                }
                e => panic!("{l}: {e:?}"),
            }
        }
        // Cut after (or inside) the number: unknown, not Xid 7.
        assert_eq!(
            parse_line("[ 1843.3] NVRM: Xid (PCI:0000:44:00): 7"),
            Some(Event::XidCut {
                gpu: "0000:44:00.0".into(),
                shown: "7".into()
            })
        );
        assert_eq!(
            parse_line("[ 5.1] NVRM: GPU at 0000:01:00.0 has fallen off the bus."),
            Some(Event::FellOffBus {
                gpu: "0000:01:00.0".into()
            })
        );
        assert_eq!(
            timestamp("6,1,227996636,-;x").as_deref(),
            Some("227.997 s after boot")
        );
        assert_eq!(
            timestamp("Sep 21 09:59:59 h kernel: x").as_deref(),
            Some("Sep 21 09:59:59")
        );
        // `dmesg --decode --time-format iso` (gpud's dmesg.peermem.log.0).
        assert_eq!(
            timestamp("kern  :err   : 2025-02-10T16:28:06,570939+00:00 nvidia-peermem x")
                .as_deref(),
            Some("2025-02-10T16:28:06")
        );
        assert_eq!(
            timestamp("2025-02-10T16:28:06,570939+00:00 nvidia-peermem x").as_deref(),
            Some("2025-02-10T16:28:06")
        );
        // A message that merely holds a date is not stamped with it.
        assert_eq!(
            timestamp("nvidia: loaded: 2025-02-10T16:28:06 build").as_deref(),
            None
        );
    }

    #[test]
    fn iommu_faults_name_the_device() {
        let amd = "Sep 21 09:59:59 runtime kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0003 address=0x80000040 flags=0x0020]";
        match parse_line(amd) {
            Some(Event::IommuFault {
                device,
                unit,
                detail,
            }) => {
                assert_eq!((device.as_str(), unit), ("0000:07:00.0", "AMD-Vi"));
                assert!(detail.contains("IO_PAGE_FAULT at 0x80000040"), "{detail}");
            }
            e => panic!("{e:?}"),
        }
        let old = "AMD-Vi: Event logged [IO_PAGE_FAULT device=3b:00.0 domain=0x000f address=0x1000 flags=0x0050]";
        assert!(
            matches!(parse_line(old), Some(Event::IommuFault { device, .. }) if device == "0000:3b:00.0")
        );
        let dmar = "[  412.1] DMAR: [DMA Write NO_PASID] Request device [39:00.0] fault addr 0x2c000000000 [fault reason 0x05] PTE Write access is not set";
        match parse_line(dmar) {
            Some(Event::IommuFault {
                device,
                unit,
                detail,
            }) => {
                assert_eq!((device.as_str(), unit), ("0000:39:00.0", "DMAR"));
                assert_eq!(
                    detail,
                    "DMA Write NO_PASID at 0x2c000000000: PTE Write access is not set"
                );
            }
            e => panic!("{e:?}"),
        }
        let older = "DMAR:[DMA Read] Request device [00:02.0] fault addr 6df084000";
        assert!(
            matches!(parse_line(older), Some(Event::IommuFault { detail, .. }) if detail == "DMA Read at 0x6df084000")
        );
    }

    #[test]
    fn mlx5_health_messages() {
        let l = "mlx5_core 0000:19:00.0: poll_health:800:(pid 0): Fatal error 1 detected";
        match parse_line(l) {
            Some(Event::Mlx5 {
                device,
                kind,
                detail,
            }) => {
                assert_eq!(device, "0000:19:00.0");
                assert_eq!(kind, Mlx5Kind::FatalError(1));
                assert!(kind.is_fatal());
                assert_eq!(detail, "Fatal error 1 detected");
            }
            e => panic!("{e:?}"),
        }
        let l = "mlx5_core 0000:19:00.0: print_health_info:431:(pid 0): Health issue observed, firmware internal error, severity(3) ERROR:";
        assert!(matches!(
            parse_line(l),
            Some(Event::Mlx5 {
                kind: Mlx5Kind::HealthIssue(3),
                ..
            })
        ));
        let l = "mlx5_core 0000:19:00.0: poll_health:1: Fatal error 3 detected";
        assert!(matches!(parse_line(l), Some(Event::Mlx5 { kind, .. }) if !kind.is_fatal()));
        assert_eq!(
            parse_line("mlx5_core 0000:19:00.0: Port module event: module 0, Cable plugged"),
            None
        );
    }

    #[test]
    fn peer_memory_load_failures() {
        for (l, m) in [
            ("[ 4724.350488] nv_peer_mem: Unknown symbol nvidia_p2p_put_pages (err -22)", "nv_peer_mem"),
            ("[Fri Feb 12 11:47:20 2021] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err 0)", "nv_peer_mem"),
            ("[ 9.1] nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client", "nvidia_peermem"),
            ("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument", "nvidia_peermem"),
        ] {
            assert!(
                matches!(parse_line(l), Some(Event::PeerMemFailed { module, .. }) if module == m),
                "{l}"
            );
        }
        // Runtime messages of a loaded module are not load failures (gpud-testdata kmsg):
        // they are kernel.peermem's.
        assert!(matches!(
            parse_line("[ 5.0] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing"),
            Some(Event::PeerMemCallback { kind: PeerMemKind::InvalidContext, .. })
        ));
        assert!(matches!(
            parse_line("[ 5.0] nv_mem nv_get_p2p_free_callback:144 nv_get_p2p_free_callback -- invalid page_table"),
            Some(Event::PeerMemCallback { kind: PeerMemKind::InvalidPages, .. })
        ));
        assert!(matches!(
            parse_line("[ 5.0] nv_peer_mem nv_get_p2p_free_callback:144 nv_get_p2p_free_callback -- invalid nv_mem_context"),
            Some(Event::PeerMemCallback { kind: PeerMemKind::InvalidContext, .. })
        ));
        assert_eq!(
            parse_line("[ 5.0] nv_mem nv_get_p2p_free_callback:150 something else"),
            None
        );
    }

    #[test]
    fn continuation_lines_join_and_the_three_line_fallen_off_report_is_xid_79() {
        let t = "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n               NVRM: (PCI ID: 10de:26b5) installed in this system has\n               NVRM: fallen off the bus and is not responding to commands.\n[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n";
        let j = join_continuations(t.lines());
        assert_eq!(j.len(), 2, "{j:?}");
        assert_eq!(
            parse_line(&j[0]),
            Some(Event::FellOffBus {
                gpu: "0000:b3:00.0".into()
            })
        );
        // The same message as one /dev/kmsg record (newlines escaped).
        let k = "6,1,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0a NVRM: (PCI ID: 10de:26b5) installed in this system has\\x0a NVRM: fallen off the bus and is not responding to commands.";
        assert_eq!(
            parse_line(k),
            Some(Event::FellOffBus {
                gpu: "0000:b3:00.0".into()
            })
        );
        // Indented lines after an unstamped line are not continuations.
        assert_eq!(join_continuations(["a", "  b"]).len(), 2);
    }

    #[test]
    fn the_keeper_keeps_events_and_starts_over_at_a_boot() {
        let mut k = Keeper::default();
        for l in [
            "[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, old boot",
            "[ 0.0] Linux version 6.8.0-45-generic (buildd@lcy02)",
            "[ 2.0] something else",
            "[ 3.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1",
        ] {
            k.push(l.to_string());
        }
        assert_eq!(k.scanned(), 4);
        let log = k.finish("b1".into(), LogScope::Excerpt);
        assert_eq!(log.scope, LogScope::ThisBoot);
        assert_eq!(log.lines.len(), 2, "{:?}", log.lines);
        assert!(log.lines[1].contains("13, pid=1"));
    }

    #[test]
    fn xid_table_classifies() {
        assert!(xid_info(79).action.is_drain());
        for x in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120] {
            assert!(xid_info(x).action.is_drain(), "{x}");
        }
        for x in [13, 31, 43, 45] {
            assert_eq!(xid_info(x).action, XidAction::Application, "{x}");
        }
        assert_eq!(xid_info(9999).action, XidAction::Investigate);
        assert_eq!(
            action(
                154,
                "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
            ),
            XidAction::DrainReboot
        );
        assert_eq!(
            action(154, "changed from 0x1 (GPU Reset Required) to 0x0 (None)"),
            XidAction::Application
        );
    }

    #[test]
    fn bdfs_normalize() {
        assert_eq!(
            normalize_bdf("PCI:0000:9B:00".trim_start_matches("PCI:")).as_deref(),
            Some("0000:9b:00.0")
        );
        assert_eq!(normalize_bdf("3b:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(
            normalize_bdf("0000:3b:00.0:").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(normalize_bdf("nvidia"), None);
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in "(?s).{0,160}") {
            let _ = parse_line(&s);
            let _ = timestamp(&s);
            let _ = message(&s);
        }

        #[test]
        fn joining_keeps_every_character(lines in proptest::collection::vec("[ \\[\\]a-z0-9.:]{0,30}", 0..12)) {
            let j = join_continuations(lines.iter().map(String::as_str));
            prop_assert!(j.len() <= lines.len());
            let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(squash(&j.concat()), squash(&lines.concat()));
        }

        #[test]
        fn parsing_prefixed_noise_never_panics(
            pre in prop_oneof![Just("NVRM: Xid ("), Just("DMAR: ["), Just("AMD-Vi: Event logged ["), Just("mlx5_core "), Just("6,1,2,-;")],
            s in ".{0,80}",
        ) {
            let _ = parse_line(&format!("{pre}{s}"));
        }
    }
}
