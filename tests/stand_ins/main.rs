//! The NIC and GPU paths end to end, on a machine without an RDMA NIC or a GPU: gdrdoctor runs
//! as on a live node, with the stand-in libibverbs, libmlx5, libcuda and libnvidia-ml of
//! `tests/stubs/` (GDRDOCTOR_LIB_DIR) playing the libraries and a fixture sysroot playing the
//! node's files (GDRDOCTOR_LIVE_ROOT). Each scenario scripts what a real stack does; the
//! stand-ins' sources cite where the real stack returns each errno (tests/stubs/README.md).
//!
//! Needs `cc` and the rdma-core headers (`gcc libibverbs-dev`); skips visibly without them.
//!
//! One module per path: [`registration`] (`probe --registration`, the NIC and the GPU side),
//! [`doorbell`] (`probe --doorbell` with a real DEVX UAR mapping), [`check`] (`check` and `topo`:
//! the GDR verdict from the live verbs facts, and the live facts' error paths), [`bindings`]
//! (the stand-ins against the CUDA bindings, and a scenario with a typo).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bindings;
mod check;
#[path = "../common/mod.rs"]
mod common;
mod doorbell;
mod fabric;
mod registration;

use common::stand_ins::{self, Run, Scenario, StandIns};
use common::*;
use serde_json::Value;
use std::path::Path;

/// The HGX fixture: 8 H200 (0000:18:00.0, 0000:28:00.0, ...) and 8 ConnectX-7, mlx5_0 at
/// 0000:19:00.0 with a 64 MiB BAR0 at 0x2e000000000, mlx5_1 at 0000:29:00.0.
const HGX: &str = "hgx-h200x8-cx7x8-healthy";
const MLX5_0_BAR0: u64 = 0x2e0_0000_0000;
const GPU0: &str = "0000:18:00.0";

/// One H200 and two ConnectX-7, everything working.
const TWO_NICS: &str = "gpu bdf=0000:18:00.0\ndevice mlx5_0\ndevice mlx5_1\n";

fn libs() -> Option<&'static StandIns> {
    stand_ins::build()
}

fn findings(j: &Value) -> &Vec<Value> {
    j["findings"].as_array().expect("findings")
}

/// The finding `id` for `subject`, with a readable panic.
fn finding<'a>(r: &Run, j: &'a Value, id: &str, subject: &str) -> &'a Value {
    findings(j)
        .iter()
        .find(|f| f["id"] == id && f["subject"] == subject)
        .unwrap_or_else(|| {
            panic!(
                "no {id} for {subject}:\n{}\nstderr:\n{}\nlog:\n{}",
                serde_json::to_string_pretty(findings(j)).unwrap(),
                r.stderr,
                r.log
            )
        })
}

fn status(f: &Value) -> &str {
    f["status"].as_str().unwrap_or("")
}

fn text(f: &Value, key: &str) -> String {
    f[key].as_str().unwrap_or("").to_string()
}

fn evidence(f: &Value) -> String {
    f["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|x| format!("{}: {}", x["source"], x["observed"]))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn registration(libs: &Path, scenario: &str) -> (Run, Value) {
    let r = Scenario::new(libs, fixture(HGX), scenario).run(&[
        "probe",
        "--registration",
        "--format",
        "json",
    ]);
    let j = r.json();
    (r, j)
}
