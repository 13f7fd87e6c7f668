//! The live libraries' facts (NVML, the CUDA driver, libibverbs): asked in a worker process on
//! the live node (a wedged driver cannot hang the parent), read from `gdrdoctor/live.json` in a
//! snapshot.

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
        (Origin::Live, Libraries::Query) => query(),
        (Origin::Live, Libraries::Skip) => {
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
