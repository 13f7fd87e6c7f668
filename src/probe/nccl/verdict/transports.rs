//! `probe.nccl`: the transports of NCCL's channel lines against the prediction, pair by pair
//! inside the node and per GPU and direction over the network.

use super::{subject, Output, Run, ID};
use gdrdoctor_checks::nccl::compare::{self, Observation, Observed};
use gdrdoctor_checks::nccl::rule::{Decision, System};
use gdrdoctor_checks::report::{Finding, Status};

/// `probe.nccl`: the transports of the channel lines against the prediction.
pub(super) fn transports(
    view: &System,
    d: &Decision,
    run: &Run,
    o: &Output,
    obs: &Observation,
) -> Vec<Finding> {
    let subject = subject(run);
    let net_only = run.params.label != "default";
    let mut out = Vec::new();
    if obs.channel_lines == 0 {
        if o.error.is_some() {
            return out; // the run finding says why
        }
        if o.ranks.len() < 2 {
            out.push(Finding::new(ID, Status::Skip, &subject, format!(
                "{} gpu in the communicator: nccl connects no gpu pair and uses no network inside the node, nothing to compare",
                o.ranks.len()
            )));
        } else {
            let missing = if run.files.log.is_none() {
                "nccl wrote no log file (NCCL_DEBUG_FILE)"
            } else {
                "nccl's log holds no channel line (`Channel .. via ..`)"
            };
            out.push(Finding::new(
                ID,
                Status::Error,
                &subject,
                format!("{missing}: nothing to compare with the prediction"),
            ));
        }
        return out;
    }
    let why_run = |f: Finding| -> Finding {
        if net_only {
            f.evidence(
                "run",
                "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the probe's second run, which makes nccl connect the gpus of this node through the network",
            )
        } else {
            f
        }
    };
    if !net_only {
        let known = |g: &str| view.gpus.iter().any(|x| x.id == g);
        let pairs: Vec<_> = obs
            .pairs
            .iter()
            .filter(|p| known(&p.a) && known(&p.b))
            .cloned()
            .collect();
        out.extend(compare::compare_p2p(view, d, &pairs));
        for p in obs.pairs.iter().filter(|p| !(known(&p.a) && known(&p.b))) {
            out.push(
                Finding::new(ID, Status::Error, format!("{}|{}", p.a, p.b), format!(
                    "nccl used {} between gpus gdrdoctor does not see on this node: no prediction to compare",
                    p.transport
                ))
                .evidence("nccl (observed)", p.source.clone()),
            );
        }
    }
    let net: Vec<Observed> = obs.net.clone();
    out.extend(compare::compare(view, d, &net).into_iter().map(&why_run));
    if net_only && net.is_empty() {
        let rdma: Vec<&str> = d
            .verdicts
            .iter()
            .filter(|v| v.used)
            .filter_map(|v| view.nics.get(v.nic).map(|n| n.name.as_str()))
            .fold(Vec::new(), |mut acc, n| {
                if !acc.contains(&n) {
                    acc.push(n);
                }
                acc
            });
        let f = if !obs.sockets.is_empty() && !rdma.is_empty() {
            Finding::new(ID, Status::Fail, &subject, format!(
                "with p2p and shared memory off nccl connected the gpus over sockets, not the rdma devices gdrdoctor expects it to use ({})",
                rdma.join(", ")
            ))
            .fix("nccl found no usable rdma device: look for `NET/IB` lines in the log (`No device found`, `ibv_open_device failed`), NCCL_IB_DISABLE / NCCL_NET / NCCL_IB_HCA in the job's environment, and `gdrdoctor check --only rdma`")
            .evidence("nccl (observed)", obs.sockets.iter().take(3).cloned().collect::<Vec<_>>().join(" | "))
        } else if !obs.sockets.is_empty() {
            Finding::new(ID, Status::Pass, &subject, "nccl connected the gpus over sockets, and gdrdoctor expects it to use no rdma device here")
                .evidence("nccl (observed)", obs.sockets.iter().take(3).cloned().collect::<Vec<_>>().join(" | "))
        } else {
            Finding::new(ID, Status::Error, &subject, "nccl's log holds no network channel line although p2p and shared memory were off: nothing to compare")
        };
        out.push(why_run(f));
    }
    out
}
