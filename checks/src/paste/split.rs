//! Cut a pasted text into blocks, one per command output, recognised by shape, never by file
//! name: a `topo -m` matrix by its `GPU0 ..` header or rows, an NCCL log by its `NCCL INFO`
//! lines, `ibv_devinfo` by `hca_id:`, `lsmod` by its `Module Size Used by` header or its rows,
//! and so on. A shell prompt or a bare command line (`$ lsmod | grep peermem`,
//! `[root@n1 ~]# nvidia-smi topo -m`, `lsmod | grep peermem` after a `# ` quote was removed)
//! is kept as the command of the block that follows it; a command whose output is empty
//! (`lsmod | grep nvidia_peermem` printing nothing) becomes an empty block, which is evidence.
//!
//! What each kind of block is like (the command that prints it, the lines that open and
//! continue it, blank lines, one-line outputs) is its row of [`super::kinds::KINDS`]; the
//! shape of a line is [`super::line::classify`]'s.

use super::block::RawBlock;
use super::clean::Line;
use super::kind::Kind;
use super::kinds::{self, KINDS};
use super::line::{classify, Class};

/// The kind a command's output has, when the command says it.
pub fn command_kind(cmd: &str) -> Option<Kind> {
    let c: String = cmd.split_whitespace().collect::<Vec<_>>().join(" ");
    let c = c.strip_prefix("sudo ").unwrap_or(&c);
    KINDS.iter().find(|k| (k.command)(c)).map(|k| k.kind)
}

/// The kind a line of shape `c` opens a block of.
fn starts(c: &Class) -> Option<Kind> {
    KINDS.iter().find(|k| (k.opens)(c)).map(|k| k.kind)
}

/// Whether a line of class `c` continues a block of kind `k`.
fn continues(k: Kind, c: &Class, text: &str) -> bool {
    (kinds::def(k).continues)(c, text)
}

/// Blank lines a block of this kind may contain.
fn blank_ok(k: Kind) -> bool {
    kinds::def(k).blank_ok
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
                // ... but the rest of the last NCCL line that a hard wrap cut off is.
                let last = match (b.lines.get(last), b.lines.get(last + 1)) {
                    (Some(a), Some(c)) if crate::paste::nccl::continues(&a.text, &c.text) => {
                        last + 1
                    }
                    _ => last,
                };
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
            let shape_agrees =
                starts(&c).is_none_or(|k| k == fk) || (kinds::def(fk).forced_any && !opens_other);
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
                // single-line outputs end at once (labelled lines of a kind that continues
                // with them go on: `ulimit -a`)
                if kinds::def(fk).one_line && !continues(fk, &c, &l.text) {
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
    use crate::paste::line::bdf_token;
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
