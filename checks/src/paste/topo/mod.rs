//! `nvidia-smi topo -m` / `topo -mp` / `topo --matrix`, as printed by every driver generation
//! and as it arrives after a trip through a terminal and an issue tracker.
//!
//! The matrix has one header line naming the device columns (`GPU0 .. GPUn`, then `NIC0 ..`
//! with a `NIC Legend` mapping them to RDMA devices, or, on older drivers, the RDMA device
//! names themselves: `mlx5_0`, `rocep1s0f0`, `ibp12s0`, `hfi1_0`, `bnxt_re0`, `irdma0`,
//! `qedr0`, `efa_0`, `erdma_0`, `ionic_0`), then `CPU Affinity`, `NUMA Affinity` and (from
//! R525 or so) `GPU NUMA ID`. Each row repeats a device name, one cell per column (`X` on the
//! diagonal, `NV<n>`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, `P2C`, and `SOC`, the pre-2017 name
//! of `SYS`), then the row's affinities.
//!
//! Repairs, each only when the result is unambiguous, each recorded in [`Matrix::repairs`]:
//! cells or names glued together when tabs were lost (`NODENODE`, `PIXPIX`, `NIC7NIC8`); a
//! header or a row hard-wrapped onto the next line (joined only when the joined row has exactly
//! one cell per column); a lost header line (columns rebuilt from the GPU rows' `X` diagonal
//! and the NIC rows or the legend); a GPU x NIC cell missing from a cut GPU row but present in
//! the NIC's row (the matrix is symmetric). What cannot be repaired is `None`: a cell cut off
//! or unreadable, a row whose `X` is not on its diagonal, a row with more cells than the header
//! has columns. Such cells get no verdict. The parser never panics (property-tested).
//!
//! The parts: [`atoms`] (a line's tokens), [`lines`] (the shapes of the lines), [`matrix`] (the
//! parsed matrix), [`parse`] (a block's lines into it) and [`block`] (a pasted block into it,
//! with the block's status).

pub mod atoms;
pub mod block;
pub mod lines;
pub mod matrix;
pub mod parse;

pub use lines::{is_header, is_legend_line, row_label};
pub use matrix::{Matrix, Row, SmiPair};
pub use parse::{parse, parse_lines};

#[cfg(test)]
mod tests;
