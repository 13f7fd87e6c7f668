//! A pasted `nvidia-smi topo -m` matrix: the reader moved into [`crate::paste::topo`], which
//! repairs damaged pastes (glued cells, hard wraps, lost headers) and never guesses a cell.
//! This module keeps the old names for callers of the first evidence mode.

pub use crate::paste::topo::{parse, Matrix, SmiPair};
