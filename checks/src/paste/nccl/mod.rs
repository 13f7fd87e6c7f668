//! NCCL_DEBUG=INFO/WARN logs of NCCL 2.4 to 2.30: what NCCL itself decided.
//!
//! Every line NCCL prints starts `host:pid:tid [cudaDev] NCCL INFO|WARN` (a WARN may carry
//! `file.cc:123` before `NCCL`); launchers add their own prefixes (timestamps, `[1,0]<stdout>:`,
//! `(pid=...)`), so the marker is searched anywhere in the line. The formats read here, with the
//! NCCL source lines that print them (NVIDIA/nccl tags v2.4.8-1 .. v2.30.7-1):
//!
//! * `NCCL version 2.18.5+cuda12.2` (`init.cc` VERSION_STRING), and the `NCCL version 2.18.3`
//!   PyTorch appends to its errors;
//! * `<NAME> set by environment to <value>` (`NCCL_PARAM`, `ncclGetEnv` users);
//! * `comm 0x.. rank R nranks N cudaDev C [nvmlDev M] [busId B] .. - Init START|COMPLETE`;
//! * `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ..` (`net_ib.cc`, only ports
//!   that are ACTIVE are listed), `NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000
//!   .. pciPath=..` (2.20+), `Using network IB`;
//! * `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)` (2.7-2.18),
//!   `NET/IB : GPU Direct RDMA Enabled|Disabled for HCA 0 'mlx5_0'` (2.19+), and in 2.4
//!   `.. Disabled for GPU 0[0] / HCA 0 'mlx5_0' (no module or not supported by GPU)`: the
//!   NIC-level answer (a peer-memory client or dma-buf);
//! * `GPU Direct RDMA Enabled for GPU 1c000 / HCA 0 (distance 4 <= 4), read 0` and
//!   `.. Disabled .. (distance 5 > 4)` (`paths.cc` `ncclTopoCheckGdr`, 2.6-2.29; `GPU %d`
//!   is a rank in 2.24-2.28, read as the bus id of the rank's `Init` line; 2.29 prints
//!   `for GPU/0-<bus id, decimal> (rank r) - NET/0-<n> (..)`; `mode %s` from 2.27; 2.4 prints
//!   `NET/IB : .. for GPU 0[0] / HCA 0 (distance 3 >= 2)`; 2.30 moved it to TRACE);
//! * `Channel 00/0 : 0[1c000] -> 8[1c000] [send] via NET/IB/0/GDRDMA` (`net.cc`; `[busId]`
//!   until 2.18.1, `[nvmlDev]` from 2.18.3; `NET/IB/0(1)` names the PXN proxy rank; `/Shared`,
//!   `(PCI)`), `via P2P/CUMEM/read`, `via P2P/IPC`, `via P2P/direct pointer`, `via
//!   SHM/direct/direct`, `via direct shared memory` and the 2.4 `Ring 00 : 3 -> 4 [send] via
//!   NET/IB/0/GDRDMA`;
//! * failures: `Call to ibv_reg_mr failed with error ..`, `ibv_reg_dmabuf_mr failed`,
//!   `unhandled system error`, `Cuda failure 'out of memory'`, `NET/IB : Got completion from
//!   peer .. with error 12` / `status=12`, `remote process exited or there was a network
//!   error`, PyTorch's `Watchdog caught collective operation timeout`.
//!
//! [`NcclLog`] is a public API: `probe --nccl` compares NCCL's own decisions
//! ([`NcclLog::logged_gdr`], [`NcclLog::connections`]) with gdrdoctor's prediction.
//!
//! The parts: [`log`] (what a log holds), [`lines`] (one parser per line format) and [`read`]
//! (a whole log).

pub mod lines;
pub mod log;
pub mod read;

pub use log::*;
pub use read::{parse, parse_file, parse_lines, parse_lines_with, parse_runs};

#[cfg(test)]
mod tests;

/// Whether `next` is the rest of NCCL line `cur` that a hard wrap cut off (a transport after
/// `via`, or a `GPU Direct RDMA` line's NIC name or distance).
pub fn continues(cur: &str, next: &str) -> bool {
    lines::completes_transport(cur, next).is_some() || lines::completes_gdr(cur, next).is_some()
}
