//! The live libraries' facts (NVML, the CUDA driver, libibverbs): asked in a worker process on
//! the live node (a wedged driver cannot hang the parent), read from `gdrdoctor/live.json` in a
//! snapshot. Under `--host-root` the worker asks the container's libraries (the NVIDIA
//! container toolkit injects them); what the container cannot see of the host is said, not
//! judged ([`host_root_visibility`]).

use crate::meta;
use crate::source::{Origin, Source};
use gdrdoctor_checks::model::LiveFacts;
use std::time::Duration;

/// Whether to ask the live libraries (`check --static` does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libraries {
    Query,
    Skip,
}

/// How long the live-facts worker may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn collect(src: &Source, libs: Libraries) -> LiveFacts {
    match (src.origin, libs) {
        (Origin::Live | Origin::HostRoot, Libraries::Query) => query(),
        (Origin::Live | Origin::HostRoot, Libraries::Skip) => {
            let mut l = LiveFacts::absent("not queried (--static)");
            // Reading the NCCL library files is cheap and initialises nothing: no worker needed.
            l.nccl = crate::live::nccl::discover_live(false);
            l
        }
        (Origin::Snapshot | Origin::Foreign, _) => meta::read_live(&src.root),
    }
}

/// NVML, CUDA and libibverbs facts from a worker process.
pub fn query() -> LiveFacts {
    use crate::probe::runner;
    let progress = runner::Progress::new("querying NVML, CUDA and libibverbs");
    let run = runner::run("live-facts", &(), DEADLINE, &|m| progress.update(m));
    progress.finish();
    match run.and_then(|r| r.output::<LiveFacts>()) {
        Ok(l) => l,
        Err(e) => LiveFacts::absent(&e.to_string()),
    }
}

/// `--host-root`: the container's libraries see the GPUs and RDMA devices given to the pod, not
/// necessarily all of the host's. A library that sees fewer than the host's sysfs lists would
/// make the checks judge a partial view: its facts become absent with the counts (the checks
/// then skip with that reason). A library that could not be loaded keeps its own reason.
pub fn host_root_visibility(live: &mut LiveFacts, node: &gdrdoctor_checks::model::Node) {
    use gdrdoctor_checks::model::Fact;
    let gpus = gdrdoctor_checks::derive::gpus(node).len();
    let rdma = node.rdma.get().map(Vec::len);
    let fewer = |what: &str, seen: usize, host: usize, how: &str| {
        format!(
            "gdrdoctor's container sees {seen} of the host's {host} {what} ({how}); its view is not the host's"
        )
    };
    let gpu_how = "run the pod with NVIDIA_VISIBLE_DEVICES=all, or request the GPUs";
    if let Some(n) = live.nvml.get().map(|n| n.gpus.len()) {
        if n < gpus {
            live.nvml = Fact::absent("libnvidia-ml.so.1", fewer("gpus", n, gpus, gpu_how));
        }
    }
    if let Some(n) = live.cuda.get().map(|c| c.devices.len()) {
        if n < gpus {
            live.cuda = Fact::absent("libcuda.so.1", fewer("gpus", n, gpus, gpu_how));
        }
    }
    if let (Some(n), Some(host)) = (live.verbs.get().map(|v| v.devices.len()), rdma) {
        if n < host {
            live.verbs = Fact::absent(
                "libibverbs.so.1",
                fewer(
                    "rdma devices",
                    n,
                    host,
                    "mount /dev/infiniband into the pod",
                ),
            );
        }
    }
}
