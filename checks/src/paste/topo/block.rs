//! A `nvidia-smi topo -m` block into its matrix, with the block's status and summary.

use super::matrix::Matrix;
use super::parse::parse_lines;
use crate::paste::block::{status, Block, BlockStatus, RawBlock};

/// The block's matrix, when it can be read.
pub fn block(b: &mut Block, raw: &RawBlock) -> Option<Matrix> {
    match parse_lines(&raw.lines) {
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
                if m.nic_names.is_empty() && m.nics().iter().any(|n| n.starts_with("NIC")) {
                    ", no NIC legend"
                } else {
                    ""
                }
            );
            Some(m)
        }
        Some(m) => {
            b.repairs.extend(m.repairs);
            b.problems.extend(m.problems);
            if b.problems.is_empty() {
                b.problems.push("no matrix rows could be read".into());
            }
            b.status = BlockStatus::Refused;
            b.summary = "a topology matrix that cannot be read".into();
            None
        }
        None => {
            b.status = BlockStatus::Refused;
            b.problems
                .push("no header line starting with GPU0 and no matrix rows".into());
            b.summary = "a topology matrix that cannot be read".into();
            None
        }
    }
}
