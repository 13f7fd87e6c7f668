//! A block of pasted text: before parsing ([`RawBlock`], what the splitter cut) and after
//! ([`Block`], what became of it), with the status it ends in.

use super::clean::Line;
use super::kind::Kind;
use serde::Serialize;

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

/// How far a block could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "block_status")]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "block")]
pub struct Block {
    /// `b1`, `b2`, ... in order over all inputs.
    #[schemars(regex(pattern = super::report::BLOCK_PATTERN))]
    pub id: String,
    /// The input it was cut from (its name in `inputs`).
    pub file: String,
    pub kind: Kind,
    /// First and last line in the file (from 1).
    #[schemars(inner(range(min = 1)))]
    pub lines: [usize; 2],
    /// The command the paste shows before its output (a prompt line).
    #[schemars(extend("x-required" = true))]
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

/// The status of a block that was read: `Incomplete` with problems, `Repaired` with repairs,
/// else `Parsed`.
pub fn status(repairs: &[String], problems: &[String]) -> BlockStatus {
    if !problems.is_empty() {
        BlockStatus::Incomplete
    } else if !repairs.is_empty() {
        BlockStatus::Repaired
    } else {
        BlockStatus::Parsed
    }
}

/// The input a block was cut from: what a parser may need beyond the block (an NCCL log's last
/// line is whole only when the input ends with a newline).
pub struct Whole<'a> {
    /// The input's text as pasted.
    pub text: &'a str,
    /// The input's cleaned lines.
    pub lines: &'a [Line],
}
