//! The rule's inputs from a pasted `nvidia-smi topo -m` matrix (evidence mode): path types per
//! GPU x NIC cell (nvidia-smi's NODE is NCCL's PHB), NVLink from the `NV#` cells between GPUs.
//! Drivers, peer memory, dma-buf, port states, compute capability and C2C are not in a matrix:
//! support and ports are assumed (and said so), the rest stays unknown.

use super::rule::{Gpu, Nic, Support, System};
use super::version::PathKind;
use crate::smi::Matrix;

/// NCCL's path type for an nvidia-smi cell.
pub fn kind_of_cell(cell: &str) -> Option<PathKind> {
    match cell {
        "PIX" => Some(PathKind::Pix),
        "PXB" => Some(PathKind::Pxb),
        "PHB" | "NODE" => Some(PathKind::Phb),
        "SYS" => Some(PathKind::Sys),
        _ => None,
    }
}

fn is_nvlink(cell: &str) -> bool {
    cell.strip_prefix("NV")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The rule's [`System`] for a pasted matrix. GPU ids are the matrix's names (`GPU0`).
pub fn from_smi(m: &Matrix) -> System {
    let gpus: Vec<&String> = m.gpus();
    let nics: Vec<&String> = m.nics();
    let cell = |row: &str, col: &str| -> Option<String> {
        let i = m.columns.iter().position(|c| c == col)?;
        m.rows.get(row).and_then(|r| r.get(i)).cloned()
    };
    let unknown = "not in a pasted nvidia-smi matrix";
    System {
        gpus: gpus
            .iter()
            .map(|g| Gpu {
                id: (*g).clone(),
                cc: None,
                cc_source: unknown.into(),
                c2c: None,
                c2c_source: unknown.into(),
            })
            .collect(),
        nics: nics
            .iter()
            .map(|n| Nic {
                name: m.nic_name(n).to_string(),
                ports: None,
            })
            .collect(),
        paths: gpus
            .iter()
            .map(|g| {
                nics.iter()
                    .map(|n| cell(g, n).as_deref().and_then(kind_of_cell))
                    .collect()
            })
            .collect(),
        smi: gpus
            .iter()
            .map(|g| nics.iter().map(|n| cell(g, n)).collect())
            .collect(),
        nvlink: gpus
            .iter()
            .map(|a| {
                gpus.iter()
                    .map(|b| {
                        let c = cell(a, b).or_else(|| cell(b, a))?;
                        if is_nvlink(&c) {
                            Some(true)
                        } else {
                            kind_of_cell(&c).map(|_| false)
                        }
                    })
                    .collect()
            })
            .collect(),
        nvlink_source: "NV# cells of the pasted matrix".into(),
        gpu_paths: gpus
            .iter()
            .map(|a| {
                gpus.iter()
                    .map(|b| cell(a, b).as_deref().and_then(kind_of_cell))
                    .collect()
            })
            .collect(),
        support: gpus
            .iter()
            .map(|_| {
                nics.iter()
                    .map(|_| {
                        Support::assumed(
                            "peer memory or dma-buf, and the NIC's port state: not in a pasted matrix (assumed to work; `gdrdoctor check` on the node tells)",
                        )
                    })
                    .collect()
            })
            .collect(),
        amd_two_gpus: false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cells_to_paths_and_nvlink() {
        let t = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\tNODE\t0-31\t0\nGPU1\tNV18\t X \tPIX\t0-31\t0\nNIC0\tNODE\tPIX\t X\n\nNIC Legend:\n\n  NIC0: mlx5_0\n";
        let m = crate::smi::parse(t).unwrap();
        let s = from_smi(&m);
        assert_eq!(s.paths[0][0], Some(PathKind::Phb));
        assert_eq!(s.smi[0][0].as_deref(), Some("NODE"));
        assert_eq!(s.paths[1][0], Some(PathKind::Pix));
        assert_eq!(s.nvlink[0][1], Some(true));
        assert_eq!(s.nics[0].name, "mlx5_0");
    }
}
