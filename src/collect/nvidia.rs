//! The NVIDIA kernel driver: `/proc/driver/nvidia` (version, registry parameters, per-GPU
//! information).

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;
use std::collections::BTreeMap;

pub(super) fn collect(root: &Root) -> NvidiaDriver {
    const VERSION: &str = "/proc/driver/nvidia/version";
    // A missing version file means "driver not loaded" only where /proc/driver itself exists
    // (always, live; in a capture, only if it was captured).
    let mut version_file = optional_file(root, VERSION, "/proc/driver");
    if let Fact::Known { value: None, .. } = version_file {
        if root.exists("/proc/driver/nvidia").unwrap_or(false) {
            version_file = Fact::absent(VERSION, "missing although /proc/driver/nvidia exists");
        }
    }
    let params = match root.read_text("/proc/driver/nvidia/params") {
        Ok(t) => match parse::colon_file(&t) {
            Ok(m) => Fact::known(m, "/proc/driver/nvidia/params"),
            Err(why) => Fact::absent(
                "/proc/driver/nvidia/params",
                format!("{DAMAGED}/proc/driver/nvidia/params: {why}"),
            ),
        },
        Err(e) => Fact::absent("/proc/driver/nvidia/params", e.reason()),
    };
    let gpus = match root.read_dir("/proc/driver/nvidia/gpus") {
        Ok(entries) => {
            let mut m = BTreeMap::new();
            for e in entries {
                let p = format!("/proc/driver/nvidia/gpus/{}/information", e.name);
                let info = root
                    .read_text(&p)
                    .map(|t| parse::colon_map(&t))
                    .unwrap_or_default();
                m.insert(e.name.to_lowercase(), info);
            }
            Fact::known(m, "/proc/driver/nvidia/gpus")
        }
        Err(e) => Fact::absent("/proc/driver/nvidia/gpus", e.reason()),
    };
    NvidiaDriver {
        version_file,
        params,
        gpus,
    }
}
