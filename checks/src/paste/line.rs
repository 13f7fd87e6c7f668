//! The shape of one pasted line ([`Class`]): a command or a prompt, a matrix header or row, an
//! NCCL line, an `lspci` header, an `lsmod` row, a kernel log line, ... The order of the
//! questions [`classify`] asks is the order of recognition: the first shape that fits wins.

use super::topo;

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
pub enum Class {
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

/// `2025-02-10T16:28:06,502716+00:00`: `dmesg --time-format iso`'s stamp (a comma before the
/// microseconds, then the zone), at the start of `t`.
fn dmesg_iso_stamp(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() > 32
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b','
        && b[20..26].iter().all(u8::is_ascii_digit)
        && matches!(b[26], b'+' | b'-')
}

/// A `/dev/kmsg` record as read raw: `6,3973,227996636,-;message` (level/facility, sequence,
/// microseconds, flags).
fn is_kmsg_record(t: &str) -> bool {
    let Some((head, _)) = t.split_once(';') else {
        return false;
    };
    let f: Vec<&str> = head.split(',').collect();
    f.len() >= 4
        && f[..3]
            .iter()
            .all(|x| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit()))
}

fn is_dmesg_core(t: &str) -> bool {
    let s = t.trim_start();
    if dmesg_iso_stamp(s) || is_kmsg_record(s) {
        return true;
    }
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

/// A line of `ulimit -a` (or of `ulimit` with several flags): `open files   (-n) 1024`,
/// `max locked memory   (kbytes, -l) 8192`: the flag and the value.
pub fn ulimit_labelled(s: &str) -> Option<(char, &str)> {
    let t = s.trim();
    if !t.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    let close = t.rfind(')')?;
    let open = t[..close].rfind('(')?;
    let inside = &t[open + 1..close];
    let flag = inside.rsplit([',', ' ']).next()?.strip_prefix('-')?;
    let mut fc = flag.chars();
    let (Some(f), None) = (fc.next(), fc.next()) else {
        return None;
    };
    let value = t[close + 1..].trim();
    let one_word = !value.is_empty() && !value.contains(char::is_whitespace);
    let label_ok = t[..open]
        .chars()
        .all(|c| c.is_ascii_lowercase() || c == ' ' || c == '-');
    (f.is_ascii_alphabetic() && one_word && label_ok).then_some((f, value))
}

pub fn classify(text: &str) -> Class {
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
        || crate::paste::nccl::lines::message_shape(s)
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
    if s.starts_with("max locked memory") || ulimit_labelled(s).is_some() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dmesg_iso_and_raw_kmsg_lines_are_kernel_log_lines() {
        for l in [
            "kern  :err   : 2025-02-10T16:28:06,502716+00:00 NVRM: Xid (PCI:0000:9b:00): 79, pid=1",
            "2025-02-10T16:28:06,502716+00:00 NVRM: Xid (PCI:0000:9b:00): 79, pid=1",
            "6,3973,227996636,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1",
        ] {
            assert!(is_dmesg(l), "{l}");
        }
        assert!(!is_dmesg("1,2,3 and then; text"));
        assert!(!is_dmesg("2025-02-10 16:28:06 something"));
    }
}
