//! Small kernel-side pastes: `/proc/cmdline` (or `GRUB_CMDLINE_LINUX=".."`), `dmesg` /
//! `journalctl -k` lines about the driver, the kernel and the IOMMU configuration (Xids,
//! IOMMU faults and peer-memory errors are `crate::klog`'s),
//! `/proc/driver/nvidia/version` (or the driver's `NVRM: loading ..` banner), `uname -a` /
//! `uname -r` / `/proc/version`, `ulimit -a` / `ulimit -l`, and `NCCL_*=..` environment lines.

use super::block::{status, Block, BlockStatus, RawBlock};
use super::clean::Line;
use crate::model::Rlimit;
use serde::Serialize;
use std::collections::BTreeMap;

/// The kernel command line, and whether it is the running kernel's (`/proc/cmdline`, dmesg's
/// `Command line:`) or only the boot configuration (`GRUB_CMDLINE_LINUX`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cmdline {
    pub args: Vec<String>,
    pub running: bool,
    pub line: usize,
}

pub fn parse_cmdline(lines: &[Line]) -> Option<Cmdline> {
    let l = lines.iter().find(|l| !l.text.trim().is_empty())?;
    let t = l.text.trim();
    for key in ["GRUB_CMDLINE_LINUX_DEFAULT=", "GRUB_CMDLINE_LINUX="] {
        if let Some(r) = t.strip_prefix(key) {
            return Some(Cmdline {
                args: crate::parse::cmdline(r.trim_matches('"')),
                running: false,
                line: l.no,
            });
        }
    }
    Some(Cmdline {
        args: crate::parse::cmdline(t),
        running: true,
        line: l.no,
    })
}

/// What a pasted kernel log line tells about the node's configuration (the driver, the kernel,
/// its command line, the IOMMU). Events that mean trouble (Xids, IOMMU faults, mlx5 health,
/// peer-memory load failures) are read by [`crate::klog`], the kernel log parser every source
/// shares, from the block's lines ([`super::Paste::kernel_log`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DmesgEvent {
    /// `iommu: Default domain type: Translated|Passthrough`, `DMAR: IOMMU enabled`, ...
    IommuInfo { text: String, line: usize },
    /// `NVRM: loading NVIDIA UNIX [Open] Kernel Module for x86_64  570.158.01 ..`
    NvidiaBanner { text: String, line: usize },
    /// `Linux version 5.15.0-91-generic ..`
    LinuxVersion { release: String, line: usize },
    /// `Command line: BOOT_IMAGE=..`
    CommandLine { args: Vec<String>, line: usize },
}

/// The message of a kernel log line (after `[ 12.345]`, `[date]` or `host kernel:`).
fn message(t: &str) -> &str {
    crate::klog::message(t)
}

pub fn parse_dmesg(lines: &[Line]) -> Vec<DmesgEvent> {
    let mut out = Vec::new();
    for l in lines {
        let m = message(&l.text);
        let text: String = m.chars().take(300).collect();
        if m.contains("Default domain type")
            || m.contains("DMAR: IOMMU enabled")
            || m.contains("AMD-Vi: Interrupt remapping enabled")
            || m.contains("Adding to iommu group")
            || m.contains("iommu: ")
        {
            out.push(DmesgEvent::IommuInfo { text, line: l.no });
            continue;
        }
        if m.contains("NVRM: loading NVIDIA UNIX") {
            out.push(DmesgEvent::NvidiaBanner { text, line: l.no });
            continue;
        }
        if let Some(r) = m.strip_prefix("Linux version ") {
            if let Some(rel) = r.split_whitespace().next() {
                out.push(DmesgEvent::LinuxVersion {
                    release: rel.to_string(),
                    line: l.no,
                });
            }
            continue;
        }
        if let Some(r) = m.strip_prefix("Command line: ") {
            out.push(DmesgEvent::CommandLine {
                args: crate::parse::cmdline(r),
                line: l.no,
            });
        }
    }
    out
}

/// `/proc/driver/nvidia/version` text from a `NVRM version:` line or the dmesg banner (the
/// same words the driver writes in both places), with its line.
pub fn nvidia_version_text(lines: &[Line]) -> Option<(String, usize)> {
    for l in lines {
        let m = message(&l.text);
        if m.trim_start().starts_with("NVRM version:") {
            return Some((m.trim().to_string(), l.no));
        }
        if let Some(r) = m.split_once("NVRM: loading ").map(|x| x.1) {
            return Some((format!("NVRM version: {}", r.trim()), l.no));
        }
    }
    None
}

/// `uname -a`, `uname -r`, `/proc/version`: (kernel release, machine), with the line.
pub fn parse_uname(lines: &[Line]) -> Option<(String, Option<String>, usize)> {
    let l = lines.iter().find(|l| !l.text.trim().is_empty())?;
    let t = l.text.trim();
    let w: Vec<&str> = t.split_whitespace().collect();
    if t.starts_with("Linux version ") {
        return Some((w.get(2)?.to_string(), None, l.no));
    }
    if w.first() == Some(&"Linux") && w.len() >= 3 {
        let arch = ["x86_64", "aarch64", "ppc64le", "arm64"]
            .iter()
            .find(|a| w.contains(a))
            .map(|a| a.to_string());
        return Some((w[2].to_string(), arch, l.no));
    }
    // `uname -r` alone: a release such as 5.15.0-91-generic.
    if w.len() == 1 && crate::parse::kernel_version(w[0]).is_some() && w[0].contains('.') {
        return Some((w[0].to_string(), None, l.no));
    }
    None
}

/// `max locked memory (kbytes, -l) unlimited` or a bare `unlimited` / number after `ulimit -l`.
/// Whether a `ulimit` command line asks for hard limits (`-H`, `-Hl`, `-lH`, `-aH`, `-H -l`;
/// a later `-S` wins, as in bash).
pub fn ulimit_hard(command: &str) -> bool {
    let mut hard = false;
    for w in command.split_whitespace().skip(1) {
        if let Some(flags) = w.strip_prefix('-') {
            for c in flags.chars() {
                match c {
                    'H' => hard = true,
                    'S' => hard = false,
                    _ => {}
                }
            }
        }
    }
    hard
}

pub fn parse_ulimit(lines: &[Line]) -> Option<(Rlimit, usize)> {
    for l in lines {
        let t = l.text.trim();
        let v = if t.starts_with("max locked memory") {
            t.split_whitespace().last()?
        } else if super::line::ulimit_labelled(t).is_some() {
            continue;
        } else if lines.len() == 1 {
            t
        } else {
            continue;
        };
        let lim = if v == "unlimited" {
            None
        } else {
            Some(v.parse::<u64>().ok()?.checked_mul(1024)?)
        };
        // The shell shows the soft limit.
        return Some((
            Rlimit {
                soft: lim,
                hard: None,
            },
            l.no,
        ));
    }
    None
}

/// `NCCL_X=Y`, `export NCCL_X=Y` lines.
pub fn parse_env(lines: &[Line]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for l in lines {
        let t = l.text.trim();
        let t = t.strip_prefix("export ").unwrap_or(t).trim();
        if let Some((k, v)) = t.split_once('=') {
            if !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                out.insert(
                    k.to_string(),
                    v.trim().trim_matches('"').trim_matches('\'').to_string(),
                );
            }
        }
    }
    out
}

/// An environment block (`NCCL_*=...` lines): its variables.
pub fn env_block(b: &mut Block, raw: &RawBlock) -> BTreeMap<String, String> {
    let e = parse_env(&raw.lines);
    b.summary = format!("{} environment variable(s)", e.len());
    b.status = status(&b.repairs, &b.problems);
    e
}

/// Whether an NVIDIA driver version is cut (or not a version at all): NVIDIA's versions are
/// `MAJOR.MINOR[.PATCH]` with a major of two or three digits, a minor of two or three
/// (`450.66`, `535.104.05`, `390.116`) and a patch of two (`570.86.10`); `535.1` or
/// `535.104.0` is the start of one, not a version, and `53` is none.
pub fn driver_version_cut(v: &str) -> bool {
    let parts: Vec<&str> = v.trim().split('.').collect();
    let digits = |p: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit())
    };
    !match parts.as_slice() {
        [a, b] => digits(a, 2, 3) && digits(b, 2, 3),
        [a, b, c] => digits(a, 2, 3) && digits(b, 2, 3) && digits(c, 2, 2),
        _ => false,
    }
}

/// The driver version in a version-file text, when it is there but cut ([`driver_version_cut`]).
fn cut_version_in(t: &str) -> Option<String> {
    let line = t
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))?;
    let after = line.split("Kernel Module").nth(1)?;
    let w = after
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    driver_version_cut(w).then(|| w.to_string())
}

/// A `/proc/driver/nvidia/version` block: the version file's text.
pub fn nvidia_version_block(b: &mut Block, raw: &RawBlock) -> Option<String> {
    if let Some((t, no)) = nvidia_version_text(&raw.lines) {
        if let Some(v) = cut_version_in(&t) {
            b.status = BlockStatus::Refused;
            b.problems.push(format!(
                "line {no}: the driver version `{v}` is cut (NVIDIA's versions read as 535.104.05 or 450.66): unknown, not used"
            ));
            return None;
        }
    }
    match nvidia_version_text(&raw.lines) {
        Some((t, _)) => {
            b.summary = t.chars().take(100).collect();
            b.status = status(&b.repairs, &b.problems);
            Some(t)
        }
        None => {
            b.status = BlockStatus::Refused;
            b.problems.push("no `NVRM version:` line".into());
            None
        }
    }
}

/// A `/proc/cmdline` block (or a GRUB_CMDLINE_LINUX line).
pub fn cmdline_block(b: &mut Block, raw: &RawBlock) -> Option<Cmdline> {
    match parse_cmdline(&raw.lines) {
        Some(c) => {
            b.summary = if c.running {
                format!("kernel command line ({} arguments)", c.args.len())
            } else {
                "GRUB_CMDLINE_LINUX (the boot configuration, not proof of the running kernel)"
                    .into()
            };
            b.status = status(&b.repairs, &b.problems);
            Some(c)
        }
        None => {
            b.status = BlockStatus::Refused;
            None
        }
    }
}

/// What a kernel log block holds.
pub struct Dmesg {
    /// Its lines, continuation lines joined: what `crate::klog` and the `kernel.*` checks read.
    pub lines: Vec<String>,
    /// The driver's version banner, when the log has it.
    pub nvidia_version: Option<String>,
    /// The lines about the driver, kernel or IOMMU setup.
    pub events: Vec<DmesgEvent>,
}

/// A `dmesg` / `journalctl -k` block.
pub fn dmesg_block(b: &mut Block, raw: &RawBlock) -> Dmesg {
    let e = parse_dmesg(&raw.lines);
    let lines = crate::klog::join_continuations(raw.lines.iter().map(|l| l.text.as_str()));
    let events = lines
        .iter()
        .filter(|l| {
            !matches!(
                crate::klog::parse_line(l),
                None | Some(crate::klog::Event::Boot)
            )
        })
        .count();
    b.summary = format!(
        "{} kernel log line(s): {events} about Xids, IOMMU faults, mlx5 health or peer-memory modules, {} about the driver, kernel or IOMMU setup",
        raw.lines.len(),
        e.len()
    );
    b.status = status(&b.repairs, &b.problems);
    for l in &lines {
        if let Some(crate::klog::Event::XidCut { gpu, shown }) = crate::klog::parse_line(l) {
            b.problems.push(format!(
                "an Xid line of {gpu} ends right after its number `{shown}`: cut, the Xid unknown"
            ));
        }
    }
    b.status = status(&b.repairs, &b.problems);
    let nvidia_version = match nvidia_version_text(&raw.lines) {
        Some((t, no)) => match cut_version_in(&t) {
            Some(v) => {
                b.problems.push(format!(
                    "line {no}: the driver version `{v}` in the driver's banner is cut: unknown, not used"
                ));
                b.status = status(&b.repairs, &b.problems);
                None
            }
            None => Some(t),
        },
        None => None,
    };
    Dmesg {
        lines,
        nvidia_version,
        events: e,
    }
}

/// A `uname` block: the kernel release and the machine.
/// Whether a kernel release is cut: Linux's releases carry three numbers (`5.10.0`, never
/// `5.10`; the Makefile's VERSION.PATCHLEVEL.SUBLEVEL), so `5.1` is an excerpt of `5.15.0-..`
/// or `5.10.0`, and no fact.
pub fn release_cut(r: &str) -> bool {
    let numeric = r
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .unwrap_or("");
    numeric.split('.').filter(|p| !p.is_empty()).count() < 3
}

/// `uname -m` alone: the machine, no release.
fn machine_only(lines: &[Line]) -> Option<String> {
    let mut it = lines.iter().filter(|l| !l.text.trim().is_empty());
    let t = it.next()?.text.trim();
    (it.next().is_none() && ["x86_64", "aarch64", "ppc64le", "arm64"].contains(&t))
        .then(|| t.to_string())
}

/// The kernel release (none for `uname -m`) and the machine of a `uname` block.
pub fn uname_block(b: &mut Block, raw: &RawBlock) -> Option<(Option<String>, Option<String>)> {
    if let Some(m) = machine_only(&raw.lines) {
        b.summary = format!("machine {m}");
        b.status = status(&b.repairs, &b.problems);
        return Some((None, Some(m)));
    }
    if let Some((r, _, no)) = parse_uname(&raw.lines).filter(|(r, _, _)| release_cut(r)) {
        b.status = BlockStatus::Refused;
        b.problems.push(format!(
            "line {no}: the kernel release `{r}` is cut (a release has three numbers, as 5.15.0): unknown, not used"
        ));
        return None;
    }
    match parse_uname(&raw.lines) {
        Some((r, m, _)) => {
            b.summary = format!("kernel {r}");
            b.status = status(&b.repairs, &b.problems);
            Some((Some(r), m))
        }
        None => {
            b.status = BlockStatus::Refused;
            b.problems.push("no kernel release recognised".into());
            None
        }
    }
}

/// The resource a `ulimit` command shows: the last of its resource flags (`-n` open files,
/// `-l` locked memory, `-a` all), `f` (file size, bash's default) without one.
pub fn ulimit_resource(command: &str) -> char {
    let mut r = 'f';
    let mut n = 0;
    for w in command.split_whitespace().skip(1) {
        if let Some(flags) = w.strip_prefix('-') {
            for c in flags.chars().filter(|c| !matches!(c, 'H' | 'S')) {
                if c != r {
                    n += 1;
                }
                r = c;
            }
        }
    }
    // Several resources (`ulimit -n -l`): bash labels each line as `ulimit -a` does.
    if n > 1 {
        'a'
    } else {
        r
    }
}

/// A `ulimit` block: the locked-memory limit.
pub fn ulimit_block(b: &mut Block, raw: &RawBlock) -> Option<Rlimit> {
    // `ulimit -n` (open files) or a bare `ulimit` (file size) printed a number that is no
    // locked-memory limit (`ulimit -n` = 1024 read as a 1 MiB memlock limit).
    if let Some(c) = raw.command.as_deref() {
        let r = ulimit_resource(c);
        if r != 'l' && r != 'a' {
            b.status = BlockStatus::Ignored;
            b.problems.push(format!(
                "`{c}` shows another limit than locked memory (-{r}); paste `ulimit -l`"
            ));
            return None;
        }
    }
    // `ulimit -H...` shows the hard limit; the kernel enforces the soft one (what `ulimit -l`
    // and `ulimit -a` show), which is what the check judges.
    if raw.command.as_deref().is_some_and(ulimit_hard) {
        b.status = BlockStatus::Ignored;
        b.problems.push("the hard limit (`ulimit -H`): the soft limit, which the kernel enforces, is what counts; paste `ulimit -l`".into());
        return None;
    }
    // Labelled lines of other limits only (`open files (-n) 1024`, or `ulimit -a` cut before
    // its `max locked memory` line): no locked-memory limit, and nothing wrong with the text.
    let labelled: Vec<(char, &str)> = raw
        .lines
        .iter()
        .filter_map(|l| super::line::ulimit_labelled(&l.text))
        .collect();
    if !labelled.is_empty() && !labelled.iter().any(|(f, _)| *f == 'l') {
        b.status = BlockStatus::Ignored;
        let flags: Vec<String> = labelled.iter().map(|(f, _)| format!("-{f}")).collect();
        b.problems.push(format!(
            "ulimit lines of other limits ({}), none of locked memory (-l); paste `ulimit -l`",
            flags.join(" ")
        ));
        return None;
    }
    match parse_ulimit(&raw.lines) {
        Some((r, _)) => {
            b.summary = format!(
                "max locked memory {}",
                r.soft
                    .map(|v| format!("{} KiB", v / 1024))
                    .unwrap_or_else(|| "unlimited".into())
            );
            b.status = status(&b.repairs, &b.problems);
            Some(r)
        }
        None => {
            b.status = BlockStatus::Refused;
            b.problems.push("no locked-memory limit recognised".into());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn a_cut_kernel_release_is_unknown() {
        assert!(release_cut("5.1"));
        assert!(release_cut("6"));
        assert!(!release_cut("5.15.0-91-generic"));
        assert!(!release_cut("5.10.0"));
        assert!(!release_cut("6.8.0-1015-nvidia-64k"));
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ uname -r\n5.1".into(),
        }]);
        assert!(p.uname.is_empty(), "{:?}", p.uname);
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ uname -r\n5.15.0-91-generic\n".into(),
        }]);
        assert_eq!(p.uname.len(), 1);
        // `uname -m` alone: the machine (a GH200 paste's aarch64 was "not readable").
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ uname -m\naarch64\n".into(),
        }]);
        assert_eq!(p.uname, [(0, None, Some("aarch64".to_string()))]);
    }

    #[test]
    fn a_cut_driver_version_is_unknown() {
        for v in ["450.66", "535.104.05", "570.86.10", "390.116", "96.43.23"] {
            assert!(!driver_version_cut(v), "{v}");
        }
        for v in ["535.1", "535.104.0", "53", "535.", "5", "535.104.05.1"] {
            assert!(driver_version_cut(v), "{v}");
        }
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ cat /proc/driver/nvidia/version\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  535.1".into(),
        }]);
        assert!(p.nvidia_version.is_empty(), "{:?}", p.nvidia_version);
        assert_eq!(p.blocks[0].status, crate::paste::BlockStatus::Refused);
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ cat /proc/driver/nvidia/version\nNVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n".into(),
        }]);
        assert_eq!(p.nvidia_version.len(), 1);
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text:
                "$ dmesg\n[    1.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.1"
                    .into(),
        }]);
        assert!(p.nvidia_version.is_empty(), "{:?}", p.nvidia_version);
    }

    #[test]
    fn ulimit_other_resources_are_not_memlock() {
        for (c, r) in [
            ("ulimit -l", 'l'),
            ("ulimit -a", 'a'),
            ("ulimit -n", 'n'),
            ("ulimit -Sn", 'n'),
            ("ulimit", 'f'),
            ("ulimit -H -l", 'l'),
            ("ulimit -l -n", 'a'),
            ("ulimit -n -l", 'a'),
        ] {
            assert_eq!(super::ulimit_resource(c), r, "{c}");
        }
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ ulimit -n\n1024\n".into(),
        }]);
        assert!(p.ulimit.is_empty(), "{:?}", p.ulimit);
        let p = crate::paste::read(&[crate::paste::Input {
            name: "x".into(),
            text: "$ ulimit -l\n1024\n".into(),
        }]);
        assert_eq!(p.ulimit.len(), 1);
    }

    #[test]
    fn ulimit_hard_flags() {
        for (c, hard) in [
            ("ulimit -l", false),
            ("ulimit -a", false),
            ("ulimit -Hl", true),
            ("ulimit -lH", true),
            ("ulimit -H -l", true),
            ("ulimit -aH", true),
            ("ulimit -Sl", false),
            ("ulimit -H -S -l", false),
        ] {
            assert_eq!(super::ulimit_hard(c), hard, "{c}");
        }
    }
    use super::*;
    use crate::paste::clean::clean;
    use proptest::prelude::*;

    #[test]
    fn dmesg_events() {
        let t = "\
[ 1843.308145] NVRM: Xid (PCI:0000:44:00): 79, pid=1234, GPU has fallen off the bus.
[Fri Feb 12 11:47:20 2021] nv_peer_mem: Unknown symbol ib_register_peer_memory_client (err 0)
[  123.1] AMD-Vi: Event logged [IO_PAGE_FAULT device=07:00.0 domain=0x000f address=0x1000 flags=0x0020]
[    0.5] iommu: Default domain type: Translated
[    1.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U22)  Mon Jun  2 13:13:04 UTC 2025
[    0.0] Linux version 5.15.0-91-generic (buildd@lcy02) (gcc 11.4.0)
[    0.0] Command line: BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt
";
        let l = clean(t).lines;
        let e = parse_dmesg(&l);
        // The Xid, peer-memory and fault lines are klog's (the shared kernel log parser).
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(matches!(&e[0], DmesgEvent::IommuInfo { .. }));
        assert!(matches!(&e[1], DmesgEvent::NvidiaBanner { .. }));
        assert!(
            matches!(&e[2], DmesgEvent::LinuxVersion { release, .. } if release == "5.15.0-91-generic")
        );
        assert!(matches!(&e[3], DmesgEvent::CommandLine { args, .. } if args.len() == 4));
        let klog: Vec<_> = l
            .iter()
            .filter_map(|x| crate::klog::parse_line(&x.text))
            .collect();
        assert!(
            matches!(&klog[0], crate::klog::Event::Xid { xid: 79, gpu, .. } if gpu == "0000:44:00.0")
        );
        assert!(
            matches!(&klog[1], crate::klog::Event::PeerMemFailed { module, .. } if module == "nv_peer_mem")
        );
        assert!(matches!(&klog[2], crate::klog::Event::IommuFault { .. }));
        let (v, _) = nvidia_version_text(&l).unwrap();
        assert_eq!(
            crate::parse::nvidia_version(&v),
            Some(("570.158.01".to_string(), crate::model::Flavor::Open))
        );
    }

    #[test]
    fn uname_ulimit_cmdline_env() {
        let u = parse_uname(&clean("Linux gpu1 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 x86_64 x86_64 x86_64 GNU/Linux").lines).unwrap();
        assert_eq!(
            (u.0.as_str(), u.1.as_deref()),
            ("5.15.0-91-generic", Some("x86_64"))
        );
        assert_eq!(
            parse_uname(&clean("6.8.0-45-generic").lines).unwrap().0,
            "6.8.0-45-generic"
        );
        let (r, _) =
            parse_ulimit(&clean("max locked memory           (kbytes, -l) 8192").lines).unwrap();
        assert_eq!(r.soft, Some(8192 * 1024));
        assert_eq!(
            parse_ulimit(&clean("unlimited").lines).unwrap().0.soft,
            None
        );
        let c =
            parse_cmdline(&clean("GRUB_CMDLINE_LINUX=\"amd_iommu=off iommu=pt\"").lines).unwrap();
        assert!(!c.running);
        assert_eq!(c.args, vec!["amd_iommu=off", "iommu=pt"]);
        let e = parse_env(&clean("export NCCL_IB_HCA=mlx5\nNCCL_NET_GDR_LEVEL=SYS \n").lines);
        assert_eq!(e.get("NCCL_NET_GDR_LEVEL").map(String::as_str), Some("SYS"));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let l = clean(&s).lines;
            // Spaces of every kind read as spaces: the values are in the normalised text.
            let s = crate::paste::clean::normalise_spaces(&s).0.into_owned();
            let _ = (parse_dmesg(&l), parse_uname(&l), parse_ulimit(&l), nvidia_version_text(&l));
            if let Some(c) = parse_cmdline(&l) {
                for a in c.args {
                    prop_assert!(s.contains(a.trim_matches('"')), "{a} not in the text");
                }
            }
            for (k, v) in parse_env(&l) {
                prop_assert!(s.contains(&k) && s.contains(v.as_str()));
            }
        }
    }
}
