//! The kinds of pasted block, one row each, as lspci's `ls-caps.c` has one decoder per
//! capability: the command that prints the kind, the line shapes that open and continue a
//! block of it ([`super::line::Class`]), whether it may hold blank lines or is one line, and
//! how a block of it is read (its parser, in the kind's own file) and where what it holds goes
//! in the [`Paste`] (which [`super::node::build`] turns into the Node). A new kind is its
//! parser's file, a [`Kind`] and a row here.
//!
//! The order of the rows is the order of [`Kind`]; recognising a line's shape is
//! [`super::line::classify`]'s, in its own order, and the commands the rows claim do not
//! overlap, so no row's place decides anything.

use super::block::{Block, BlockStatus, RawBlock, Whole};
use super::kind::Kind;
use super::line::Class;
use super::pasted::Paste;
use super::{ibv, kernel, lsmod, lspci, nccl, smiq, topo};

/// One kind of block.
pub struct KindDef {
    pub kind: Kind,
    /// Whether a command (spaces collapsed, `sudo` removed) prints this kind: its output is
    /// read as this kind, whatever its shape.
    pub command: fn(&str) -> bool,
    /// Whether a line of this shape opens a block of this kind.
    pub opens: fn(&Class) -> bool,
    /// Whether a line (its shape and its text) continues a block of this kind.
    pub continues: fn(&Class, &str) -> bool,
    /// A block may hold blank lines (up to three in a row).
    pub blank_ok: bool,
    /// The output is one line: a block its command forced ends after it (unless the line is
    /// of a shape the kind continues with: `ulimit -a`'s labelled lines).
    pub one_line: bool,
    /// A block its command forced takes lines of another kind's shape too (unless the line
    /// can only open another tool's output).
    pub forced_any: bool,
    /// Read the block (`usize`: its index) with the kind's parser, which sets the block's
    /// status and summary, and put what it holds into the paste.
    pub read: fn(&mut Block, &RawBlock, &Whole, usize, &mut Paste),
}

/// `ibstat`'s or `ibv_devinfo`'s own failure lines (`ibpanic: ... stat of IB device 'mlx5_8'
/// failed`) belong to its output: a device it could not read.
fn ib_failure(text: &str) -> bool {
    text.trim_start().starts_with("ibpanic:") || text.trim_start().starts_with("ibwarn:")
}

/// `lspci -t` without `-v`: the tree, not the devices.
fn lspci_tree(c: &str) -> bool {
    c.starts_with("lspci") && (c.contains("-t") && !c.contains("-v"))
}

/// Every kind, in the order of [`Kind`].
pub static KINDS: &[KindDef] = &[
    KindDef {
        kind: Kind::TopoMatrix,
        command: |c| c.starts_with("nvidia-smi topo"),
        opens: |c| matches!(c, Class::MatrixHeader | Class::MatrixRow(_)),
        continues: |c, text| {
            matches!(c, Class::MatrixRow(_) | Class::Legend)
            // wrapped parts of a row or header
            || (matches!(c, Class::Other | Class::Indented | Class::Cmdline)
                && text.split_whitespace().all(|w| w.len() <= 24))
        },
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| {
            p.matrices
                .extend(topo::block::block(b, raw).map(|m| (i, m)))
        },
    },
    KindDef {
        kind: Kind::NcclLog,
        command: |_| false,
        opens: |c| matches!(c, Class::Nccl),
        continues: |c, _| matches!(c, Class::Nccl | Class::Other | Class::Indented),
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, w, i, p| {
            p.nccl
                .extend(nccl::read::block(b, raw, w).into_iter().map(|l| (i, l)))
        },
    },
    KindDef {
        kind: Kind::Env,
        command: |_| false,
        opens: |c| matches!(c, Class::Env),
        continues: |c, _| matches!(c, Class::Env),
        blank_ok: false,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| p.env.push((i, kernel::env_block(b, raw))),
    },
    KindDef {
        kind: Kind::Lspci,
        command: |c| c.starts_with("lspci") && !lspci_tree(c),
        opens: |c| matches!(c, Class::LspciHeader | Class::AcsLine),
        continues: |c, _| {
            matches!(
                c,
                Class::LspciHeader | Class::LspciHex | Class::Indented | Class::AcsLine
            )
        },
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| {
            let (d, orphans, part) = lspci::block(b, raw);
            p.lspci.extend(d.into_iter().map(|x| (i, x)));
            p.lspci_excerpts.extend(part.map(|w| (i, w)));
            p.acs_lines
                .extend(orphans.into_iter().map(|(no, f)| (i, no, f)));
        },
    },
    KindDef {
        kind: Kind::LspciTree,
        command: lspci_tree,
        opens: |c| matches!(c, Class::LspciTree),
        continues: |c, _| matches!(c, Class::LspciTree | Class::Indented),
        blank_ok: false,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| p.trees.push((i, lspci::tree_block(b, raw))),
    },
    KindDef {
        kind: Kind::IbvDevinfo,
        command: |c| c.starts_with("ibv_devinfo"),
        opens: |c| matches!(c, Class::IbvHca),
        continues: |c, text| ib_failure(text) || matches!(c, Class::IbvHca | Class::Indented),
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| {
            p.ib.extend(ibv::devinfo_block(b, raw).into_iter().map(|x| (i, x)))
        },
    },
    KindDef {
        kind: Kind::Ibstat,
        command: |c| c.starts_with("ibstat"),
        opens: |c| matches!(c, Class::IbstatCa | Class::IbstatusDev),
        continues: |c, text| {
            ib_failure(text) || matches!(c, Class::IbstatCa | Class::IbstatusDev | Class::Indented)
        },
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| {
            p.ib.extend(ibv::ibstat_block(b, raw).into_iter().map(|x| (i, x)))
        },
    },
    KindDef {
        kind: Kind::Lsmod,
        command: |c| c.starts_with("lsmod"),
        opens: |c| matches!(c, Class::LsmodHeader | Class::LsmodRow),
        continues: |c, _| matches!(c, Class::LsmodRow),
        blank_ok: false,
        one_line: false,
        forced_any: true,
        read: |b, raw, _, i, p| p.modules.push((i, lsmod::lsmod_block(b, raw))),
    },
    KindDef {
        kind: Kind::ProcModules,
        command: |c| c.starts_with("cat /proc/modules"),
        opens: |c| matches!(c, Class::ProcModulesRow),
        continues: |c, _| matches!(c, Class::ProcModulesRow),
        blank_ok: false,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| p.modules.push((i, lsmod::proc_modules_block(b, raw))),
    },
    KindDef {
        kind: Kind::NvidiaSmiQ,
        command: |c| c.starts_with("nvidia-smi -q") || c.starts_with("nvidia-smi --query"),
        opens: |c| matches!(c, Class::SmiQ),
        continues: |c, _| matches!(c, Class::SmiQ | Class::Indented),
        blank_ok: true,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| p.smiq.push((i, smiq::block(b, raw))),
    },
    KindDef {
        kind: Kind::NvidiaVersion,
        command: |c| c.starts_with("cat /proc/driver/nvidia/version"),
        opens: |c| matches!(c, Class::NvrmVersion),
        continues: |c, text| matches!(c, Class::Other) && text.trim_start().starts_with("GCC"),
        blank_ok: false,
        one_line: true,
        forced_any: false,
        read: |b, raw, _, i, p| {
            p.nvidia_version
                .extend(kernel::nvidia_version_block(b, raw).map(|t| (i, t)))
        },
    },
    KindDef {
        kind: Kind::Cmdline,
        command: |c| c.starts_with("cat /proc/cmdline"),
        opens: |c| matches!(c, Class::Cmdline),
        continues: |_, _| false,
        blank_ok: false,
        one_line: true,
        forced_any: true,
        read: |b, raw, _, i, p| {
            p.cmdline
                .extend(kernel::cmdline_block(b, raw).map(|c| (i, c)))
        },
    },
    KindDef {
        kind: Kind::Dmesg,
        command: |c| c.starts_with("dmesg") || c.starts_with("journalctl"),
        opens: |c| matches!(c, Class::Dmesg),
        // The driver's multi-line reports continue on indented lines.
        continues: |c, _| matches!(c, Class::Dmesg | Class::Indented),
        blank_ok: false,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, i, p| {
            let d = kernel::dmesg_block(b, raw);
            p.kernel_log.push((i, d.lines));
            p.nvidia_version.extend(d.nvidia_version.map(|t| (i, t)));
            p.dmesg.extend(d.events.into_iter().map(|x| (i, x)));
        },
    },
    KindDef {
        kind: Kind::Uname,
        command: |c| c.starts_with("uname") || c.starts_with("cat /proc/version"),
        opens: |c| matches!(c, Class::Uname),
        continues: |_, _| false,
        blank_ok: false,
        one_line: true,
        forced_any: true,
        read: |b, raw, _, i, p| {
            p.uname
                .extend(kernel::uname_block(b, raw).map(|(r, m)| (i, r, m)))
        },
    },
    KindDef {
        kind: Kind::Ulimit,
        command: |c| c.starts_with("ulimit"),
        opens: |c| matches!(c, Class::Ulimit),
        // `ulimit -a` (and `ulimit` with several flags) prints one labelled line per limit.
        continues: |c, _| matches!(c, Class::Ulimit),
        blank_ok: false,
        one_line: true,
        forced_any: true,
        read: |b, raw, _, i, p| {
            p.ulimit
                .extend(kernel::ulimit_block(b, raw).map(|r| (i, r)))
        },
    },
    KindDef {
        kind: Kind::Unrecognised,
        command: |_| false,
        opens: |_| false,
        continues: |_, _| false,
        blank_ok: false,
        one_line: false,
        forced_any: false,
        read: |b, raw, _, _, _| {
            b.status = BlockStatus::Ignored;
            b.summary = format!("{} line(s) not recognised", raw.lines.len().max(1));
            b.repairs.clear();
        },
    },
];

/// The row of a kind.
pub fn def(k: Kind) -> &'static KindDef {
    &KINDS[k as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_kind_in_the_order_of_the_enum() {
        for (i, d) in KINDS.iter().enumerate() {
            assert_eq!(d.kind as usize, i, "{:?}", d.kind);
        }
        assert_eq!(KINDS.len(), Kind::Unrecognised as usize + 1);
    }

    #[test]
    fn no_two_rows_claim_one_command() {
        for c in [
            "nvidia-smi topo -m",
            "nvidia-smi -q",
            "lsmod",
            "cat /proc/modules",
            "cat /proc/cmdline",
            "cat /proc/driver/nvidia/version",
            "uname -a",
            "cat /proc/version",
            "ulimit -l",
            "ibv_devinfo -v",
            "ibstat",
            "ibstatus",
            "lspci -tv",
            "lspci -t",
            "lspci -vvv",
            "lspci -tvvv",
            "dmesg",
            "journalctl -k",
        ] {
            let claims: Vec<Kind> = KINDS
                .iter()
                .filter(|k| (k.command)(c))
                .map(|k| k.kind)
                .collect();
            assert_eq!(claims.len(), 1, "{c}: {claims:?}");
        }
    }
}
