//! Read every input: clean it ([`super::clean`]), cut it into blocks by shape
//! ([`super::split`]), and read each block by its kind's row ([`super::kinds::KINDS`]).

use super::block::{Block, BlockStatus, Whole};
use super::clean::{self, Line};
use super::kinds;
use super::pasted::Paste;
use super::split;

/// One pasted input: a file name (or `-`) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub name: String,
    pub text: String,
}

/// Read every input: clean, split by shape, parse each block.
/// The error line when every line of a block's output is a shell's or a tool's failure
/// message (`-bash: lsmod: command not found`, `sh: 1: ibstat: not found`, `...: Permission
/// denied`). (`No such file or directory` is not one: of a sysfs file it is the answer.)
pub fn command_failed(lines: &[Line]) -> Option<String> {
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

/// Read every input: clean, split by shape, read each block with its kind's row.
pub fn read(inputs: &[Input]) -> Paste {
    let mut p = Paste::default();
    for input in inputs {
        let cleaned = clean::clean(&input.text);
        let whole = Whole {
            text: &input.text,
            lines: &cleaned.lines,
        };
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
            // The shell's or the tool's own failure (`-bash: lsmod: command not found`, a
            // permission refusal) is no output of the command: an empty
            // module list taken from it said nvidia_peermem was not loaded.
            if let Some(e) = command_failed(&raw.lines) {
                b.status = BlockStatus::Refused;
                b.problems.push(format!("the command failed: {e}"));
                p.blocks.push(b);
                continue;
            }
            (kinds::def(raw.kind).read)(&mut b, &raw, &whole, idx, &mut p);
            p.blocks.push(b);
        }
    }
    p
}
