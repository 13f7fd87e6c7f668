//! `mem.*`: host memory limits that RDMA registration runs into.

use crate::model::{Fact, Node};
use crate::parse::human_bytes;
use crate::report::{Finding, Status};

pub fn memlock(node: &Node) -> Vec<Finding> {
    const ID: &str = "mem.memlock";
    match &node.memlock {
        Fact::Known { value, source } => match value.soft {
            None => vec![Finding::new(ID, Status::Pass, "node", "locked-memory limit is unlimited").evidence(source.clone(), "unlimited")],
            Some(n) => vec![Finding::new(
                ID,
                Status::Warn,
                "node",
                format!("locked-memory limit is {}: ibv_reg_mr beyond it fails with ENOMEM (host buffers, NCCL/UCX bounce buffers, and peer-memory registrations of gpu memory)", human_bytes(n)),
            )
            .expected(
                source.clone(),
                format!("soft {} / hard {}", human_bytes(n), value.hard.map(human_bytes).unwrap_or_else(|| "unlimited".into())),
                "unlimited",
            )
            .fix("raise RLIMIT_MEMLOCK for the job: `* soft memlock unlimited` and `* hard memlock unlimited` in /etc/security/limits.conf (PAM sessions), `LimitMEMLOCK=infinity` for systemd units (slurmd, containerd), `--ulimit memlock=-1` for docker; for Slurm, `LimitMEMLOCK=infinity` on slurmd and `PropagateResourceLimitsExcept=MEMLOCK` in slurm.conf (the default propagates the submitting shell's small limit into jobs)")],
        },
        Fact::Absent { source, reason } => vec![Finding::new(ID, Status::Error, "node", "cannot read the locked-memory limit")
            .evidence(source.clone(), format!("unknown ({reason})"))],
    }
}
