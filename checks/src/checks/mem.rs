//! `mem.*`: host memory limits that RDMA registration runs into.

use crate::model::{is_damaged, Fact, Node};
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
        Fact::Absent { source, reason } if is_damaged(reason) => vec![Finding::new(ID, Status::Error, "node", format!("the locked-memory limit recorded in {source} is damaged: it is not known to be unlimited"))
            .evidence(source.clone(), format!("unknown ({reason})"))
            .fix("take the snapshot again (`gdrdoctor snapshot`) on the node; `ulimit -l` in a job shows the limit the jobs get")],
        Fact::Absent { source, reason } => vec![Finding::new(ID, Status::Error, "node", "cannot read the locked-memory limit")
            .evidence(source.clone(), format!("unknown ({reason})"))
            .fix("run `gdrdoctor check` on the node itself, or (--host-root) in a pod that mounts the host's / so the container runtime's /proc/PID/limits is readable; where no runtime starts the GPU jobs, check the limit the jobs get with `ulimit -l` in one and `--skip mem.memlock` here")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Rlimit;
    use crate::testing::*;

    #[test]
    fn unlimited_passes_with_its_evidence_a_limit_warns_unknown_is_an_error() {
        let mut n = empty_node();
        n.memlock = known(Rlimit {
            soft: None,
            hard: None,
        });
        let f = memlock(&n);
        assert_eq!(
            (f[0].status, f[0].evidence[0].observed.as_str()),
            (Status::Pass, "unlimited")
        );
        n.memlock = known(Rlimit {
            soft: Some(64 << 10),
            hard: Some(64 << 10),
        });
        let f = memlock(&n);
        assert_eq!(f[0].status, Status::Warn);
        assert!(f[0].message.contains("64 KiB"), "{}", f[0].message);
        assert_eq!(f[0].evidence[0].expected.as_deref(), Some("unlimited"));
        assert!(f[0]
            .remediation
            .as_deref()
            .is_some_and(|r| r.contains("LimitMEMLOCK")));
        n.memlock = Fact::absent("getrlimit(RLIMIT_MEMLOCK)", "live-only fact");
        let f = memlock(&n);
        assert_eq!(f[0].status, Status::Error);
        assert!(f[0]
            .remediation
            .as_deref()
            .is_some_and(|r| r.contains("--skip mem.memlock")));
    }

    #[test]
    fn a_damaged_recorded_limit_is_an_error_naming_the_file_not_unlimited() {
        let mut n = empty_node();
        n.memlock = Fact::absent(
            "gdrdoctor/meta.json",
            format!(
                "{}gdrdoctor/meta.json: memlock has no `soft`",
                crate::model::DAMAGED
            ),
        );
        let f = memlock(&n);
        assert_eq!(f[0].status, Status::Error, "{f:?}");
        assert!(f[0].message.contains("gdrdoctor/meta.json"), "{f:?}");
        assert_eq!(f[0].evidence[0].source, "gdrdoctor/meta.json");
    }
}
