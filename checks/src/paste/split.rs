//! Cut a pasted text into blocks, one per command output, recognised by shape, never by file
//! name: a `topo -m` matrix by its `GPU0 ..` header or rows, an NCCL log by its `NCCL INFO`
//! lines, `ibv_devinfo` by `hca_id:`, `lsmod` by its `Module Size Used by` header or its rows,
//! and so on. A shell prompt or a bare command line (`$ lsmod | grep peermem`,
//! `[root@n1 ~]# nvidia-smi topo -m`, `lsmod | grep peermem` after a `# ` quote was removed)
//! is kept as the command of the block that follows it; a command whose output is empty
//! (`lsmod | grep nvidia_peermem` printing nothing) becomes an empty block, which is evidence.

use super::clean::Line;
use super::kind::Kind;
use super::topo;

/// One block before parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBlock {
    pub kind: Kind,
    pub lines: Vec<Line>,
    /// The command line shown before the output, when the paste has one.
    pub command: Option<String>,
    /// Line number of the command (the block's first line when there is one).
    pub command_line: Option<usize>,
}

/// Commands whose output we know, as their first word (after `sudo`).
const COMMANDS: &[&str] = &[
    "nvidia-smi",
    "lsmod",
    "lspci",
    "ibv_devinfo",
    "ibstat",
    "ibstatus",
    "cat",
    "dmesg",
    "uname",
    "ulimit",
    "modinfo",
    "journalctl",
    "grep",
    "ibdev2netdev",
    "show_gids",
    "env",
    "printenv",
    "numactl",
    "lscpu",
    "mpirun",
    "torchrun",
    "python",
    "python3",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Class {
    Blank,
    Command(String),
    /// A shell prompt with nothing typed after it.
    Prompt,
    MatrixHeader,
    MatrixRow(String),
    Legend,
    Nccl,
    Env,
    LspciHeader,
    LspciHex,
    /// `ACSCtl: ..` alone (`lspci -vvv | grep ACSCtl`).
    AcsLine,
    LspciTree,
    Indented,
    IbvHca,
    IbstatCa,
    IbstatusDev,
    LsmodHeader,
    LsmodRow,
    ProcModulesRow,
    SmiQ,
    NvrmVersion,
    Dmesg,
    Cmdline,
    Uname,
    Ulimit,
    Other,
}

fn is_hex_byte(s: &str) -> bool {
    s.len() == 2 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `0000:17:00.0` or `17:00.0`.
pub fn bdf_token(t: &str) -> Option<String> {
    let b = t.as_bytes();
    let short = |s: &[u8]| {
        s.len() == 7
            && s[0].is_ascii_hexdigit()
            && s[1].is_ascii_hexdigit()
            && s[2] == b':'
            && s[3].is_ascii_hexdigit()
            && s[4].is_ascii_hexdigit()
            && s[5] == b'.'
            && (b'0'..=b'7').contains(&s[6])
    };
    if short(b) {
        return Some(format!("0000:{}", t.to_ascii_lowercase()));
    }
    if b.len() == 12 && b[4] == b':' && b[..4].iter().all(u8::is_ascii_hexdigit) && short(&b[5..]) {
        return Some(t.to_ascii_lowercase());
    }
    None
}

/// The command after a shell prompt, or a bare known command line.
pub fn command_of(line: &str) -> Option<String> {
    let t = line.trim();
    if t.is_empty() || t.len() > 300 {
        return None;
    }
    // Prompts: `$ cmd`, `# cmd`, `user@host:~$ cmd`, `[root@h ~]# cmd`, `(env) [u@h d]$ cmd`.
    let mut candidates: Vec<&str> = vec![t];
    for sep in ["$ ", "# ", "> "] {
        if let Some(p) = t.find(sep) {
            let prefix = &t[..p];
            let ok = prefix.is_empty()
                || prefix.contains('@')
                || prefix.ends_with(']')
                || prefix.ends_with('~')
                || prefix.ends_with(':')
                || prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.()[] ".contains(c));
            if ok && p < 120 {
                candidates.push(&t[p + sep.len()..]);
            }
        }
    }
    for c in candidates.into_iter().rev() {
        let c = c.trim();
        let mut words = c.split_whitespace();
        let mut first = words.next()?;
        if first == "sudo" {
            first = words.next().unwrap_or("");
        }
        if COMMANDS.contains(&first) && c.split_whitespace().count() <= 16 {
            // `nvidia-smi` alone prints a status table we do not read; still a command.
            return Some(c.to_string());
        }
    }
    None
}

/// The kind a command's output has, when the command says it.
pub fn command_kind(cmd: &str) -> Option<Kind> {
    let c: String = cmd.split_whitespace().collect::<Vec<_>>().join(" ");
    let c = c.strip_prefix("sudo ").unwrap_or(&c);
    if c.starts_with("nvidia-smi topo") {
        Some(Kind::TopoMatrix)
    } else if c.starts_with("nvidia-smi -q") || c.starts_with("nvidia-smi --query") {
        Some(Kind::NvidiaSmiQ)
    } else if c.starts_with("lsmod") {
        Some(Kind::Lsmod)
    } else if c.starts_with("cat /proc/modules") {
        Some(Kind::ProcModules)
    } else if c.starts_with("cat /proc/cmdline") {
        Some(Kind::Cmdline)
    } else if c.starts_with("cat /proc/driver/nvidia/version") {
        Some(Kind::NvidiaVersion)
    } else if c.starts_with("uname") || c.starts_with("cat /proc/version") {
        Some(Kind::Uname)
    } else if c.starts_with("ulimit") {
        Some(Kind::Ulimit)
    } else if c.starts_with("ibv_devinfo") {
        Some(Kind::IbvDevinfo)
    } else if c.starts_with("ibstat") {
        Some(Kind::Ibstat)
    } else if c.starts_with("lspci") && (c.contains("-t") && !c.contains("-v")) {
        Some(Kind::LspciTree)
    } else if c.starts_with("lspci") {
        Some(Kind::Lspci)
    } else if c.starts_with("dmesg") || c.starts_with("journalctl") {
        Some(Kind::Dmesg)
    } else {
        None
    }
}

/// A prompt alone: `[root@gpu3 ~]#`, `user@host:~$`, `(env) [u@h d]$`.
fn is_prompt(t: &str) -> bool {
    let t = t.trim();
    (t.ends_with('#') || t.ends_with('$'))
        && (t.contains('@') || t.ends_with("]#") || t.ends_with("]$"))
        && !t.contains("  ")
        && t.len() < 120
}

fn is_env(t: &str) -> bool {
    let t = t.trim();
    let t = t.strip_prefix("export ").unwrap_or(t).trim();
    let Some((k, _)) = t.split_once('=') else {
        return false;
    };
    [
        "NCCL_",
        "NVSHMEM_",
        "UCX_",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_MAX_CONNECTIONS",
    ]
    .iter()
    .any(|p| k.starts_with(p))
        && k.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn is_dmesg(t: &str) -> bool {
    let s = t.trim_start();
    // A launcher's or collector's prefix (`0: `, `<4>`, an RFC 3339 time) before a kernel log
    // line, or dmesg -x's `kern  :warn  : `: the line behind it decides. (Xid 79 behind such a
    // prefix was dropped, and the paste passed.)
    let bare = crate::klog::strip_log_prefixes(s);
    if bare.len() < s.len() && (is_dmesg_core(bare) || bare.starts_with("NVRM: ")) {
        return true;
    }
    if let Some(rest) = s.strip_prefix("kern") {
        let mut parts = rest.splitn(3, ':');
        if let (Some(gap), Some(level), Some(msg)) = (parts.next(), parts.next(), parts.next()) {
            if gap.trim().is_empty()
                && !level.trim().is_empty()
                && level.trim().chars().all(|c| c.is_ascii_lowercase())
                && is_dmesg_core(msg.trim_start())
            {
                return true;
            }
        }
    }
    is_dmesg_core(s)
}

fn is_dmesg_core(t: &str) -> bool {
    let s = t.trim_start();
    if let Some(r) = s.strip_prefix('[') {
        // `[ 1234.567890] ...` or `[Fri Feb 12 11:47:20 2021] ...`
        if let Some((inner, _)) = r.split_once(']') {
            let inner = inner.trim();
            if inner.contains('.') && inner.chars().all(|c| c.is_ascii_digit() || c == '.') {
                return true;
            }
            if inner.split_whitespace().count() == 5 && inner.contains(':') {
                return true;
            }
        }
    }
    // journalctl -k / syslog: `Feb 14 05:03:41 host kernel: ...`
    s.contains(" kernel: ")
}

fn is_cmdline(t: &str) -> bool {
    let s = t.trim();
    if s.starts_with("BOOT_IMAGE=") || s.starts_with("GRUB_CMDLINE_LINUX") {
        return true;
    }
    let toks: Vec<&str> = s.split_whitespace().collect();
    if toks.len() < 3 {
        return false;
    }
    let known = toks
        .iter()
        .filter(|w| {
            let k = w.split('=').next().unwrap_or("");
            [
                "root",
                "ro",
                "rw",
                "quiet",
                "splash",
                "console",
                "iommu",
                "intel_iommu",
                "amd_iommu",
                "crashkernel",
                "nomodeset",
                "pci",
                "hugepagesz",
                "hugepages",
                "default_hugepagesz",
                "init",
                "rd.driver.blacklist",
                "modprobe.blacklist",
                "iommu.passthrough",
                "iommu.strict",
                "biosdevname",
                "net.ifnames",
                "resume",
            ]
            .contains(&k)
        })
        .count();
    known >= 2 && toks.iter().all(|w| !w.ends_with(':'))
}

fn is_lsmod_row(t: &str) -> bool {
    let toks: Vec<&str> = t.split_whitespace().collect();
    (toks.len() == 3 || toks.len() == 4)
        && toks[0]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && toks[0]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && toks[1].len() >= 4
        && toks[1].bytes().all(|b| b.is_ascii_digit())
        && toks[2].bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

fn is_proc_modules_row(t: &str) -> bool {
    let toks: Vec<&str> = t.split_whitespace().collect();
    toks.len() >= 6
        && toks[1].bytes().all(|b| b.is_ascii_digit())
        && toks[2].bytes().all(|b| b.is_ascii_digit())
        && ["Live", "Loading", "Unloading"].contains(&toks[4])
        && toks[5].starts_with("0x")
}

fn is_smiq(t: &str) -> bool {
    let s = t.trim();
    if s.contains("NVSMI LOG") {
        return true;
    }
    if let Some(r) = s.strip_prefix("GPU ") {
        return r.len() >= 12 && r.contains(':') && r.contains('.') && !r.contains(' ');
    }
    for k in [
        "Driver Version",
        "Attached GPUs",
        "CUDA Version",
        "Timestamp",
    ] {
        if let Some(r) = s.strip_prefix(k) {
            if r.trim_start().starts_with(':') && !t.starts_with(char::is_whitespace) {
                return true;
            }
        }
    }
    false
}

fn is_tree(t: &str) -> bool {
    let s = t.trim_start();
    if s.starts_with("-[") || s.starts_with("+-[") || s.starts_with("\\-[") || s.starts_with("-+-[")
    {
        return true;
    }
    // A device marker `+-dd.f`, `\-dd.f` or `--dd.f` somewhere in a `|`/`+-`/`\-` line.
    let b = s.as_bytes();
    let marker = b.windows(6).any(|w| {
        (w[0] == b'+' || w[0] == b'\\' || w[0] == b'-')
            && w[1] == b'-'
            && w[2].is_ascii_hexdigit()
            && w[3].is_ascii_hexdigit()
            && w[4] == b'.'
            && (b'0'..=b'7').contains(&w[5])
    });
    marker && (s.starts_with('|') || s.starts_with("+-") || s.starts_with("\\-"))
}

fn classify(text: &str) -> Class {
    let t = text.trim_end();
    let s = t.trim_start();
    if s.is_empty() {
        return Class::Blank;
    }
    if s.contains("NCCL INFO")
        || s.contains("NCCL WARN")
        || s.contains("NCCL ERROR")
        || s.contains("ProcessGroupNCCL")
        || s.contains("Watchdog caught collective")
        || s.contains("ncclUnhandled")
        || s.contains("ncclSystemError")
        || s.contains("ncclRemoteError")
        || s.contains("ncclInternalError")
        || s.contains("NCCL error")
        || s.starts_with("NCCL version")
    {
        return Class::Nccl;
    }
    if topo::is_header(s) {
        return Class::MatrixHeader;
    }
    if let Some(l) = topo::row_label(s) {
        // A row has a cell right after its label (`GPU0  X  NV8`, or glued `GPU0X`).
        let after = s[s.find(char::is_whitespace).unwrap_or(s.len())..].trim_start();
        let glued = s
            .split_whitespace()
            .next()
            .is_some_and(|f| f.len() > l.len());
        let first_cell = after.split_whitespace().next().unwrap_or("");
        let cellish = ["X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "P2C", "C2C"]
            .iter()
            .any(|c| first_cell.starts_with(c))
            || first_cell.starts_with("NV");
        if glued || cellish {
            return Class::MatrixRow(l);
        }
    }
    if topo::is_legend_line(s) {
        return Class::Legend;
    }
    if let Some(c) = command_of(s) {
        return Class::Command(c);
    }
    if is_prompt(s) {
        return Class::Prompt;
    }
    if is_env(s) {
        return Class::Env;
    }
    if s.starts_with("ACSCtl:") || s.starts_with("ACSCap:") {
        return Class::AcsLine;
    }
    if s.starts_with("hca_id:") {
        return Class::IbvHca;
    }
    if s.starts_with("CA '") {
        return Class::IbstatCa;
    }
    if s.starts_with("Infiniband device '") {
        return Class::IbstatusDev;
    }
    if s.starts_with("Module") && s.contains("Size") && s.contains("Used by") {
        return Class::LsmodHeader;
    }
    if is_proc_modules_row(s) {
        return Class::ProcModulesRow;
    }
    if s.starts_with("NVRM version:") {
        return Class::NvrmVersion;
    }
    if is_dmesg(s) {
        return Class::Dmesg;
    }
    if is_smiq(t) {
        return Class::SmiQ;
    }
    if is_tree(t) {
        return Class::LspciTree;
    }
    let first = s.split_whitespace().next().unwrap_or("");
    if bdf_token(first).is_some()
        && s[first.len()..].contains(':')
        && !t.starts_with(char::is_whitespace)
    {
        return Class::LspciHeader;
    }
    {
        let toks: Vec<&str> = s.split_whitespace().collect();
        if toks.len() >= 2
            && toks[0].len() >= 3
            && toks[0].ends_with(':')
            && toks[0][..toks[0].len() - 1]
                .bytes()
                .all(|b| b.is_ascii_hexdigit())
            && toks[1..].iter().all(|x| is_hex_byte(x))
        {
            return Class::LspciHex;
        }
    }
    if s.starts_with("Linux version ")
        || (s.starts_with("Linux ") && (s.contains(" SMP") || s.contains("GNU/Linux")))
    {
        return Class::Uname;
    }
    if s.starts_with("max locked memory") {
        return Class::Ulimit;
    }
    if is_cmdline(s) {
        return Class::Cmdline;
    }
    if is_lsmod_row(t) {
        return Class::LsmodRow;
    }
    if t.starts_with(char::is_whitespace) {
        return Class::Indented;
    }
    Class::Other
}

fn starts(c: &Class) -> Option<Kind> {
    Some(match c {
        Class::MatrixHeader | Class::MatrixRow(_) => Kind::TopoMatrix,
        Class::Nccl => Kind::NcclLog,
        Class::Env => Kind::Env,
        Class::LspciHeader | Class::AcsLine => Kind::Lspci,
        Class::LspciTree => Kind::LspciTree,
        Class::IbvHca => Kind::IbvDevinfo,
        Class::IbstatCa | Class::IbstatusDev => Kind::Ibstat,
        Class::LsmodHeader | Class::LsmodRow => Kind::Lsmod,
        Class::ProcModulesRow => Kind::ProcModules,
        Class::SmiQ => Kind::NvidiaSmiQ,
        Class::NvrmVersion => Kind::NvidiaVersion,
        Class::Dmesg => Kind::Dmesg,
        Class::Cmdline => Kind::Cmdline,
        Class::Uname => Kind::Uname,
        Class::Ulimit => Kind::Ulimit,
        _ => return None,
    })
}

/// Whether a line of class `c` continues a block of kind `k`.
fn continues(k: Kind, c: &Class, text: &str) -> bool {
    match k {
        Kind::TopoMatrix => {
            matches!(c, Class::MatrixRow(_) | Class::Legend)
            // wrapped parts of a row or header
            || (matches!(c, Class::Other | Class::Indented | Class::Cmdline)
                && text.split_whitespace().all(|w| w.len() <= 24))
        }
        Kind::NcclLog => matches!(c, Class::Nccl | Class::Other | Class::Indented),
        Kind::Env => matches!(c, Class::Env),
        Kind::Lspci => matches!(
            c,
            Class::LspciHeader | Class::LspciHex | Class::Indented | Class::AcsLine
        ),
        Kind::LspciTree => matches!(c, Class::LspciTree | Class::Indented),
        // ibstat's own failure lines (`ibpanic: ... stat of IB device 'mlx5_8' failed`) belong
        // to its output: a device it could not read.
        Kind::Ibstat | Kind::IbvDevinfo
            if text.trim_start().starts_with("ibpanic:")
                || text.trim_start().starts_with("ibwarn:") =>
        {
            true
        }
        Kind::IbvDevinfo => matches!(c, Class::IbvHca | Class::Indented),
        Kind::Ibstat => matches!(c, Class::IbstatCa | Class::IbstatusDev | Class::Indented),
        Kind::Lsmod => matches!(c, Class::LsmodRow),
        Kind::ProcModules => matches!(c, Class::ProcModulesRow),
        Kind::NvidiaSmiQ => matches!(c, Class::SmiQ | Class::Indented),
        // The driver's multi-line reports continue on indented lines.
        Kind::Dmesg => matches!(c, Class::Dmesg | Class::Indented),
        Kind::NvidiaVersion => matches!(c, Class::Other) && text.trim_start().starts_with("GCC"),
        _ => false,
    }
}

/// Blank lines a block of this kind may contain.
fn blank_ok(k: Kind) -> bool {
    matches!(
        k,
        Kind::TopoMatrix
            | Kind::NcclLog
            | Kind::Lspci
            | Kind::IbvDevinfo
            | Kind::Ibstat
            | Kind::NvidiaSmiQ
    )
}

/// Split cleaned lines into blocks.
pub fn split(lines: &[Line]) -> Vec<RawBlock> {
    let mut out: Vec<RawBlock> = Vec::new();
    let mut cur: Option<RawBlock> = None;
    let mut pending: Option<(String, usize)> = None;
    // A command forces the kind of the output that follows it, until a blank line.
    let mut forced: Option<Kind> = None;
    let close = |cur: &mut Option<RawBlock>, out: &mut Vec<RawBlock>| {
        if let Some(mut b) = cur.take() {
            while b.lines.last().is_some_and(|l| l.text.trim().is_empty()) {
                b.lines.pop();
            }
            if b.kind == Kind::NcclLog {
                // Text after the last NCCL line is not part of the log.
                let last = b
                    .lines
                    .iter()
                    .rposition(|l| classify(&l.text) == Class::Nccl)
                    .unwrap_or(0);
                let tail: Vec<Line> = b.lines.split_off(last + 1);
                let tail: Vec<Line> = tail
                    .into_iter()
                    .filter(|l| !l.text.trim().is_empty())
                    .collect();
                out.push(b);
                if !tail.is_empty() {
                    out.push(RawBlock {
                        kind: Kind::Unrecognised,
                        lines: tail,
                        command: None,
                        command_line: None,
                    });
                }
                return;
            }
            if !b.lines.is_empty() || b.command.is_some() {
                out.push(b);
            }
        }
    };
    let mut blank_run = 0;
    for l in lines {
        let c = classify(&l.text);
        if c == Class::Blank {
            blank_run += 1;
            if let Some(b) = cur.as_mut() {
                if blank_ok(b.kind) && blank_run <= 3 {
                    b.lines.push(l.clone());
                    continue;
                }
                close(&mut cur, &mut out);
            }
            forced = None;
            continue;
        }
        blank_run = 0;
        if c == Class::Prompt {
            close(&mut cur, &mut out);
            if let Some((p, at)) = pending.take() {
                out.push(RawBlock {
                    kind: command_kind(&p).unwrap_or(Kind::Unrecognised),
                    lines: Vec::new(),
                    command: Some(p),
                    command_line: Some(at),
                });
            }
            forced = None;
            continue;
        }
        if let Class::Command(cmd) = &c {
            // Inside an NCCL log a command-like line (`python train.py`) is part of the log.
            if !matches!(cur.as_ref().map(|b| b.kind), Some(Kind::NcclLog))
                || command_kind(cmd).is_some()
            {
                close(&mut cur, &mut out);
                if let Some((p, at)) = pending.take() {
                    // The previous command printed nothing.
                    out.push(RawBlock {
                        kind: command_kind(&p).unwrap_or(Kind::Unrecognised),
                        lines: Vec::new(),
                        command: Some(p),
                        command_line: Some(at),
                    });
                }
                forced = command_kind(cmd);
                pending = Some((cmd.clone(), l.no));
                continue;
            }
        }
        // A command tells what its output is, whatever the shape.
        if let Some(fk) = forced {
            let fits = match &cur {
                Some(b) if b.kind == fk => true,
                Some(_) => false,
                None => true,
            };
            // A line that can only open another tool's output (`hca_id:`, `CA '...'`, a topo
            // header, `NVRM version:`) ends an lsmod listing pasted without a blank line after
            // it: swallowed, an ibv_devinfo's first device (and its PORT_DOWN) was lost.
            let opens_other = matches!(
                c,
                Class::IbvHca
                    | Class::IbstatCa
                    | Class::IbstatusDev
                    | Class::MatrixHeader
                    | Class::NvrmVersion
                    | Class::LsmodHeader
            ) && starts(&c).is_some_and(|k| k != fk);
            let shape_agrees = starts(&c).is_none_or(|k| k == fk)
                || (matches!(fk, Kind::Lsmod | Kind::Uname | Kind::Ulimit | Kind::Cmdline)
                    && !opens_other);
            if fits && shape_agrees && !matches!(c, Class::Nccl) {
                match cur.as_mut() {
                    Some(b) => b.lines.push(l.clone()),
                    None => {
                        let (command, command_line) = match pending.take() {
                            Some((p, at)) => (Some(p), Some(at)),
                            None => (None, None),
                        };
                        cur = Some(RawBlock {
                            kind: fk,
                            lines: vec![l.clone()],
                            command,
                            command_line,
                        });
                    }
                }
                // single-line outputs end at once
                if matches!(
                    fk,
                    Kind::Cmdline | Kind::Uname | Kind::Ulimit | Kind::NvidiaVersion
                ) {
                    close(&mut cur, &mut out);
                    forced = None;
                }
                continue;
            }
            forced = None;
        }
        // Same kind continues; a second matrix header, or a row label seen twice, starts anew.
        if let Some(b) = cur.as_mut() {
            let dup_row = match &c {
                Class::MatrixRow(lab) if b.kind == Kind::TopoMatrix => b
                    .lines
                    .iter()
                    .any(|x| classify(&x.text) == Class::MatrixRow(lab.clone())),
                _ => false,
            };
            let new_header = c == Class::MatrixHeader && b.kind == Kind::TopoMatrix;
            if !dup_row && !new_header && continues(b.kind, &c, &l.text) {
                b.lines.push(l.clone());
                continue;
            }
            if b.kind == Kind::Unrecognised && starts(&c).is_none() {
                b.lines.push(l.clone());
                continue;
            }
            close(&mut cur, &mut out);
        }
        let kind = starts(&c).unwrap_or(Kind::Unrecognised);
        let (command, command_line) = match pending.take() {
            Some((p, at)) => (Some(p), Some(at)),
            None => (None, None),
        };
        cur = Some(RawBlock {
            kind,
            lines: vec![l.clone()],
            command,
            command_line,
        });
    }
    close(&mut cur, &mut out);
    if let Some((p, at)) = pending.take() {
        out.push(RawBlock {
            kind: command_kind(&p).unwrap_or(Kind::Unrecognised),
            lines: Vec::new(),
            command: Some(p),
            command_line: Some(at),
        });
    }
    // Merge an NCCL log broken by unrelated lines into one block per stretch; adjacent NCCL
    // blocks separated only by unrecognised text are one log.
    let mut merged: Vec<RawBlock> = Vec::new();
    for b in out {
        if b.kind == Kind::NcclLog {
            if let Some(prev) = merged.last_mut() {
                if prev.kind == Kind::NcclLog && b.command.is_none() {
                    prev.lines.extend(b.lines);
                    continue;
                }
            }
        }
        merged.push(b);
    }
    merged
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    fn kinds(t: &str) -> Vec<(Kind, Option<String>, usize)> {
        split(&clean(t).lines)
            .into_iter()
            .map(|b| (b.kind, b.command, b.lines.len()))
            .collect()
    }

    #[test]
    fn recognises_blocks_by_shape_and_keeps_commands() {
        let t = "\
$ lsmod | grep peermem
nvidia_peermem         16384  0
ib_core               442368  9 rdma_cm,ib_ipoib,nvidia_peermem
[root@gpu3 ~]# nvidia-smi topo -m
        GPU0    NIC0    CPU Affinity
GPU0     X      PIX     0-31
NIC0    PIX      X

NIC Legend:

  NIC0: mlx5_0
hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)

host:1:2 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
";
        let k = kinds(t);
        assert_eq!(k[0].0, Kind::Lsmod);
        assert_eq!(k[0].1.as_deref(), Some("lsmod | grep peermem"));
        assert_eq!(k[1].0, Kind::TopoMatrix);
        assert_eq!(k[1].1.as_deref(), Some("nvidia-smi topo -m"));
        assert_eq!(k[2].0, Kind::IbvDevinfo);
        assert_eq!(k[3].0, Kind::NcclLog);
        assert_eq!(k[3].2, 2);
    }

    #[test]
    fn empty_grep_output_is_an_empty_block() {
        let t = "(pytorch) [root@gpu3 ~]# lsmod | grep nvidia_peermem\n(pytorch) [root@gpu3 ~]# lsmod | grep nv_peer_mem\n(pytorch) [root@gpu3 ~]#\n";
        let k = kinds(t);
        assert_eq!(k.len(), 2, "{k:?}");
        assert!(k.iter().all(|x| x.0 == Kind::Lsmod && x.2 == 0));
    }

    #[test]
    fn two_matrices_and_a_repeated_row_split() {
        let t = "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X\n\tGPU0\tNIC0\nGPU0\t X \tSYS\nGPU0\t X \tPIX\n";
        let k = kinds(t);
        assert_eq!(
            k.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![Kind::TopoMatrix, Kind::TopoMatrix, Kind::TopoMatrix]
        );
    }

    #[test]
    fn command_forces_single_line_outputs() {
        let t = "$ cat /proc/cmdline\nBOOT_IMAGE=/vmlinuz ro quiet\n$ uname -r\n5.15.0-91-generic\n$ ulimit -l\nunlimited\n";
        let k = kinds(t);
        assert_eq!(
            k.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![Kind::Cmdline, Kind::Uname, Kind::Ulimit]
        );
    }

    #[test]
    fn bdf_tokens() {
        assert_eq!(bdf_token("17:00.0").as_deref(), Some("0000:17:00.0"));
        assert_eq!(bdf_token("0000:AB:00.1").as_deref(), Some("0000:ab:00.1"));
        assert_eq!(bdf_token("17:00.8"), None);
        assert_eq!(bdf_token("x7:00.0"), None);
    }

    proptest! {
        #[test]
        fn never_panics_and_keeps_every_line_once(s in "\\PC{0,400}") {
            let c = clean(&s);
            let blocks = split(&c.lines);
            let mut seen = std::collections::BTreeSet::new();
            for b in &blocks {
                for l in &b.lines {
                    prop_assert!(seen.insert(l.no), "line {} in two blocks", l.no);
                }
            }
        }
    }
}
