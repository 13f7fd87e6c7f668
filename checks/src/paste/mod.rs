//! Pasted command output: what people put into bug reports (`nvidia-smi topo -m`, NCCL logs,
//! `lspci -vvv`, `ibv_devinfo`, `lsmod`, `nvidia-smi -q`, `/proc/cmdline`, `dmesg`).
//!
//! [`read`] cleans each input ([`clean`]), cuts it into blocks by shape ([`split`]), parses
//! every block with the parser of its kind, and returns a [`Paste`]: the blocks with what was
//! repaired and what could not be trusted, and the parsed contents. [`node::build`] turns that
//! into the same [`Node`](crate::model::Node) the checks read, every fact marked with its block.

pub mod clean;
pub mod findings;
pub mod ibv;
pub mod kernel;
pub mod kind;
pub mod lsmod;
pub mod lspci;
pub mod nccl;
pub mod node;
pub mod report;
pub mod smiq;
pub mod split;
pub mod topo;
pub mod verdict;

use serde::Serialize;

pub use kind::Kind;

use crate::model::Rlimit;
use std::collections::BTreeMap;

/// How far a block could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockStatus {
    /// Read as it is.
    Parsed,
    /// Read after unambiguous repairs (listed in `repairs`).
    Repaired,
    /// Read, but some of it cannot be trusted (listed in `problems`); those parts have no verdict.
    Incomplete,
    /// Recognised but not readable at all (the reason in `problems`).
    Refused,
    /// Not recognised; not used.
    Ignored,
}

/// One block of pasted text and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Block {
    /// `b1`, `b2`, ... in order over all inputs.
    pub id: String,
    pub file: String,
    pub kind: Kind,
    /// First and last line in the file.
    pub lines: [usize; 2],
    pub command: Option<String>,
    pub status: BlockStatus,
    /// One line: what the block holds.
    pub summary: String,
    pub repairs: Vec<String>,
    pub problems: Vec<String>,
}

impl Block {
    /// How facts cite the block: `b2 (nvidia-smi topo -m, topo.txt:4-20)`.
    pub fn label(&self) -> String {
        format!(
            "{} ({}, {}:{}-{})",
            self.id,
            self.kind.as_str(),
            self.file,
            self.lines[0],
            self.lines[1]
        )
    }
}

/// One pasted input: a file name (or `-`) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub text: String,
}

/// Everything read from the inputs. Parsed contents carry the index of their block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Paste {
    pub blocks: Vec<Block>,
    pub matrices: Vec<(usize, topo::Matrix)>,
    pub nccl: Vec<(usize, nccl::NcclLog)>,
    pub lspci: Vec<(usize, lspci::LspciDevice)>,
    /// `ACSCtl:` lines of no device (`lspci -vvv | grep ACSCtl`): (block, line, flags).
    pub acs_lines: Vec<(usize, usize, lspci::AcsFlags)>,
    pub trees: Vec<(usize, lspci::Tree)>,
    pub ib: Vec<(usize, ibv::IbDevice)>,
    pub modules: Vec<(usize, lsmod::ModuleList)>,
    pub smiq: Vec<(usize, smiq::SmiQ)>,
    pub cmdline: Vec<(usize, kernel::Cmdline)>,
    pub dmesg: Vec<(usize, kernel::DmesgEvent)>,
    /// The lines of each kernel log block, continuation lines joined
    /// ([`crate::klog::join_continuations`]): what `crate::klog` and the `kernel.*` checks read.
    pub kernel_log: Vec<(usize, Vec<String>)>,
    pub nvidia_version: Vec<(usize, String)>,
    /// (block, kernel release, machine)
    pub uname: Vec<(usize, String, Option<String>)>,
    pub ulimit: Vec<(usize, Rlimit)>,
    pub env: Vec<(usize, BTreeMap<String, String>)>,
}

impl Paste {
    pub fn has(&self, k: Kind) -> bool {
        self.blocks
            .iter()
            .any(|b| b.kind == k && b.status != BlockStatus::Refused)
    }
    pub fn label(&self, block: usize) -> String {
        self.blocks
            .get(block)
            .map(Block::label)
            .unwrap_or_else(|| format!("b{}", block + 1))
    }
    /// All NCCL log blocks merged into one view (several pastes of one job).
    pub fn nccl_merged(&self) -> Option<nccl::NcclLog> {
        let mut it = self.nccl.iter();
        let (_, first) = it.next()?;
        let mut m = first.clone();
        for (_, l) in it {
            for v in &l.versions {
                if !m.versions.contains(v) {
                    m.versions.push(v.clone());
                }
            }
            m.env.extend(l.env.clone());
            for h in &l.hosts {
                if !m.hosts.contains(h) {
                    m.hosts.push(h.clone());
                }
            }
            m.ranks.extend(l.ranks.iter().cloned());
            m.net_devices.extend(l.net_devices.iter().cloned());
            m.networks.extend(l.networks.iter().cloned());
            m.nic_gdr.extend(l.nic_gdr.iter().cloned());
            m.gpu_gdr.extend(l.gpu_gdr.iter().cloned());
            m.dmabuf_gpus.extend(l.dmabuf_gpus.iter().cloned());
            m.connections.extend(l.connections.iter().cloned());
            m.failures.extend(l.failures.iter().cloned());
            m.warnings.extend(l.warnings.iter().cloned());
            m.nccl_lines += l.nccl_lines;
            m.unreadable.extend(l.unreadable.iter().cloned());
        }
        Some(m)
    }
}

fn status(repairs: &[String], problems: &[String]) -> BlockStatus {
    if !problems.is_empty() {
        BlockStatus::Incomplete
    } else if !repairs.is_empty() {
        BlockStatus::Repaired
    } else {
        BlockStatus::Parsed
    }
}

/// Read every input: clean, split by shape, parse each block.
/// The error line when every line of a block's output is a shell's or a tool's failure
/// message (`-bash: lsmod: command not found`, `sh: 1: ibstat: not found`, `...: Permission
/// denied`). (`No such file or directory` is not one: of a sysfs file it is the answer.)
pub fn command_failed(lines: &[clean::Line]) -> Option<String> {
    let texts: Vec<&str> = lines
        .iter()
        .map(|l| l.text.trim())
        .filter(|t| !t.is_empty())
        .collect();
    let failure = |t: &str| {
        let t = t.to_ascii_lowercase();
        t.ends_with("command not found")
            || t.ends_with(": not found")
            || t.ends_with("permission denied")
            || t.ends_with("operation not permitted")
    };
    (!texts.is_empty() && texts.iter().all(|t| failure(t))).then(|| texts[0].to_string())
}

pub fn read(inputs: &[Input]) -> Paste {
    let mut p = Paste::default();
    for input in inputs {
        let cleaned = clean::clean(&input.text);
        for raw in split::split(&cleaned.lines) {
            let idx = p.blocks.len();
            let first = raw
                .command_line
                .or_else(|| raw.lines.first().map(|l| l.no))
                .unwrap_or(0);
            let last = raw.lines.last().map(|l| l.no).unwrap_or(first);
            let mut b = Block {
                id: format!("b{}", idx + 1),
                file: input.name.clone(),
                kind: raw.kind,
                lines: [first, last],
                command: raw.command.clone(),
                status: BlockStatus::Parsed,
                summary: String::new(),
                repairs: cleaned.repairs_in(first, last),
                problems: Vec::new(),
            };
            let cmd = raw.command.as_deref();
            // The shell's or the tool's own failure (`-bash: lsmod: command not found`, a
            // permission refusal) is no output of the command: an empty
            // module list taken from it said nvidia_peermem was not loaded.
            if let Some(e) = command_failed(&raw.lines) {
                b.status = BlockStatus::Refused;
                b.problems.push(format!("the command failed: {e}"));
                p.blocks.push(b);
                continue;
            }
            match raw.kind {
                Kind::TopoMatrix => match topo::parse_lines(&raw.lines) {
                    Some(m) if !m.columns.is_empty() && !m.rows.is_empty() => {
                        b.repairs.extend(m.repairs.iter().cloned());
                        b.problems.extend(m.problems.iter().cloned());
                        let unknown = m.unknown_cells();
                        if !unknown.is_empty() && m.problems.is_empty() {
                            b.problems.push(format!(
                                "{} GPU x NIC cell(s) not in the paste: {}",
                                unknown.len(),
                                unknown.join(", ")
                            ));
                        }
                        b.status = status(&b.repairs, &b.problems);
                        b.summary = format!(
                            "{} GPU(s) x {} NIC(s){}",
                            m.gpus().len(),
                            m.nics().len(),
                            if m.nic_names.is_empty()
                                && m.nics().iter().any(|n| n.starts_with("NIC"))
                            {
                                ", no NIC legend"
                            } else {
                                ""
                            }
                        );
                        p.matrices.push((idx, m));
                    }
                    Some(m) => {
                        b.repairs.extend(m.repairs);
                        b.problems.extend(m.problems);
                        if b.problems.is_empty() {
                            b.problems.push("no matrix rows could be read".into());
                        }
                        b.status = BlockStatus::Refused;
                        b.summary = "a topology matrix that cannot be read".into();
                    }
                    None => {
                        b.status = BlockStatus::Refused;
                        b.problems
                            .push("no header line starting with GPU0 and no matrix rows".into());
                        b.summary = "a topology matrix that cannot be read".into();
                    }
                },
                Kind::NcclLog => {
                    let file_last = cleaned
                        .lines
                        .iter()
                        .rev()
                        .find(|l| !l.text.trim().is_empty())
                        .map(|l| l.no)
                        .unwrap_or(0);
                    let complete = last < file_last || input.text.ends_with('\n');
                    let l = nccl::parse_lines_with(&raw.lines, complete);
                    b.summary = format!(
                        "NCCL {}: {} NCCL line(s), {} host(s), {} connection line(s), {} failure line(s)",
                        l.versions.first().map(String::as_str).unwrap_or("(version not logged)"),
                        l.nccl_lines,
                        l.hosts.len(),
                        l.connections.len(),
                        l.failures.len()
                    );
                    for (no, why) in &l.unreadable {
                        b.problems.push(format!("line {no}: {why}"));
                    }
                    b.status = status(&b.repairs, &b.problems);
                    p.nccl.push((idx, l));
                }
                Kind::Env => {
                    let e = kernel::parse_env(&raw.lines);
                    b.summary = format!("{} environment variable(s)", e.len());
                    b.status = status(&b.repairs, &b.problems);
                    p.env.push((idx, e));
                }
                Kind::Lspci => {
                    let d = lspci::parse(&raw.lines);
                    let orphans = lspci::orphan_acs(&raw.lines);
                    let hex = d.iter().filter(|x| x.config_bytes > 0).count();
                    b.summary = format!(
                        "{} PCI function(s){}{}",
                        d.len(),
                        if orphans.is_empty() {
                            String::new()
                        } else {
                            format!(", {} ACSCtl line(s) of unnamed functions", orphans.len())
                        },
                        if hex > 0 {
                            format!(", {hex} with a config-space hex dump")
                        } else {
                            String::new()
                        }
                    );
                    if d.iter().any(|x| x.access_denied) {
                        b.problems.push(
                            "lspci ran without root (`Capabilities: <access denied>`): capabilities are missing".into(),
                        );
                    }
                    for x in d.iter().filter(|x| x.vendor_id.is_none()) {
                        b.problems.push(format!(
                            "{}: vendor and device not found by name in pci.ids (paste `lspci -nn`)",
                            x.bdf
                        ));
                    }
                    if d.is_empty() && orphans.is_empty() {
                        b.status = BlockStatus::Refused;
                    } else {
                        b.status = status(&b.repairs, &b.problems);
                    }
                    p.lspci.extend(d.into_iter().map(|x| (idx, x)));
                    p.acs_lines
                        .extend(orphans.into_iter().map(|(no, f)| (idx, no, f)));
                }
                Kind::LspciTree => {
                    let t = lspci::parse_tree(&raw.lines);
                    b.summary = format!("PCI tree of {} function(s)", t.parent.len());
                    b.problems.extend(t.problems.iter().cloned());
                    b.status = if t.parent.is_empty() {
                        BlockStatus::Refused
                    } else {
                        status(&b.repairs, &b.problems)
                    };
                    p.trees.push((idx, t));
                }
                Kind::IbvDevinfo | Kind::Ibstat => {
                    let d = if raw.kind == Kind::IbvDevinfo {
                        ibv::parse_devinfo(&raw.lines)
                    } else {
                        ibv::parse_ibstat(&raw.lines)
                    };
                    b.summary = format!(
                        "{} RDMA device(s): {}",
                        d.len(),
                        d.iter()
                            .map(|x| x.name.as_str())
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    b.status = if d.is_empty() {
                        BlockStatus::Refused
                    } else {
                        status(&b.repairs, &b.problems)
                    };
                    p.ib.extend(d.into_iter().map(|x| (idx, x)));
                }
                Kind::Lsmod | Kind::ProcModules => {
                    let m = if raw.kind == Kind::Lsmod {
                        lsmod::parse_lsmod(&raw.lines, cmd)
                    } else {
                        lsmod::parse_proc_modules(&raw.lines, cmd)
                    };
                    b.summary = m.note.clone();
                    b.status = status(&b.repairs, &b.problems);
                    p.modules.push((idx, m));
                }
                Kind::NvidiaSmiQ => {
                    let q = smiq::parse(&raw.lines);
                    b.summary = format!(
                        "driver {}, {} GPU section(s)",
                        q.driver_version.as_deref().unwrap_or("?"),
                        q.gpus.len()
                    );
                    b.status = status(&b.repairs, &b.problems);
                    p.smiq.push((idx, q));
                }
                Kind::NvidiaVersion => match kernel::nvidia_version_text(&raw.lines) {
                    Some((t, _)) => {
                        b.summary = t.chars().take(100).collect();
                        b.status = status(&b.repairs, &b.problems);
                        p.nvidia_version.push((idx, t));
                    }
                    None => {
                        b.status = BlockStatus::Refused;
                        b.problems.push("no `NVRM version:` line".into());
                    }
                },
                Kind::Cmdline => match kernel::parse_cmdline(&raw.lines) {
                    Some(c) => {
                        b.summary = if c.running {
                            format!("kernel command line ({} arguments)", c.args.len())
                        } else {
                            "GRUB_CMDLINE_LINUX (the boot configuration, not proof of the running kernel)".into()
                        };
                        b.status = status(&b.repairs, &b.problems);
                        p.cmdline.push((idx, c));
                    }
                    None => b.status = BlockStatus::Refused,
                },
                Kind::Dmesg => {
                    let e = kernel::parse_dmesg(&raw.lines);
                    let lines =
                        crate::klog::join_continuations(raw.lines.iter().map(|l| l.text.as_str()));
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
                    p.kernel_log.push((idx, lines));
                    b.status = status(&b.repairs, &b.problems);
                    if let Some((t, _)) = kernel::nvidia_version_text(&raw.lines) {
                        p.nvidia_version.push((idx, t));
                    }
                    p.dmesg.extend(e.into_iter().map(|x| (idx, x)));
                }
                Kind::Uname => match kernel::parse_uname(&raw.lines) {
                    Some((r, m, _)) => {
                        b.summary = format!("kernel {r}");
                        b.status = status(&b.repairs, &b.problems);
                        p.uname.push((idx, r, m));
                    }
                    None => {
                        b.status = BlockStatus::Refused;
                        b.problems.push("no kernel release recognised".into());
                    }
                },
                // `ulimit -H...` shows the hard limit; the kernel enforces the soft one (what
                // `ulimit -l` and `ulimit -a` show), which is what the check judges.
                Kind::Ulimit if raw.command.as_deref().is_some_and(kernel::ulimit_hard) => {
                    b.status = BlockStatus::Ignored;
                    b.problems.push("the hard limit (`ulimit -H`): the soft limit, which the kernel enforces, is what counts; paste `ulimit -l`".into());
                }
                Kind::Ulimit => match kernel::parse_ulimit(&raw.lines) {
                    Some((r, _)) => {
                        b.summary = format!(
                            "max locked memory {}",
                            r.soft
                                .map(|v| format!("{} KiB", v / 1024))
                                .unwrap_or_else(|| "unlimited".into())
                        );
                        b.status = status(&b.repairs, &b.problems);
                        p.ulimit.push((idx, r));
                    }
                    None => {
                        b.status = BlockStatus::Refused;
                        b.problems.push("no locked-memory limit recognised".into());
                    }
                },
                Kind::Unrecognised => {
                    b.status = BlockStatus::Ignored;
                    b.summary = format!("{} line(s) not recognised", raw.lines.len().max(1));
                    b.repairs.clear();
                }
            }
            p.blocks.push(b);
        }
    }
    p
}
