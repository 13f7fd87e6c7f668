//! Pasted command output: what people put into bug reports (`nvidia-smi topo -m`, NCCL logs,
//! `lspci -vvv`, `ibv_devinfo`, `lsmod`, `nvidia-smi -q`, `/proc/cmdline`, `dmesg`).
//!
//! [`read`] cleans each input ([`clean`]), cuts it into blocks by shape ([`split`]), parses
//! every block with the parser of its kind, and returns a [`Paste`]: the blocks with what was
//! repaired and what could not be trusted, and the parsed contents. [`node::build`] turns that
//! into the same [`Node`](crate::model::Node) the checks read, every fact marked with its block.
//!
//! The parts: [`reader`] (the whole read), [`clean`], [`split`] and [`line`] (a line's shape),
//! [`kinds`] (one row per kind of block: its command, the lines that open and continue it, how
//! it is read and where what it holds goes), one parser per kind of command output ([`topo`],
//! [`nccl`], [`lspci`], [`ibv`], [`lsmod`], [`smiq`], [`kernel`]), [`block`] and [`pasted`]
//! (what was read), [`node`] (the Node), [`verdict`], [`findings`] and [`report`].

pub mod block;
pub mod clean;
pub mod findings;
pub mod ibv;
pub mod kernel;
pub mod kind;
pub mod kinds;
pub mod line;
pub mod lsmod;
pub mod lspci;
pub mod nccl;
pub mod node;
pub mod pasted;
pub mod reader;
pub mod report;
pub mod smiq;
pub mod split;
pub mod topo;
pub mod verdict;

pub use block::{Block, BlockStatus};
pub use kind::Kind;
pub use pasted::Paste;
pub use reader::{command_failed, read, Input};
