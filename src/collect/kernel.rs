//! The kernel's view: loaded modules (`/proc/modules`, `/sys/module`), the command line, huge
//! pages (`/proc/meminfo`).

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;
use gdrdoctor_checks::parse;
use procfs_core::FromBufRead;

pub(super) struct Kernel {
    pub modules: Modules,
    pub cmdline: Fact<Vec<String>>,
    pub hugepages: Fact<HugePages>,
}

pub(super) fn collect(root: &Root) -> Kernel {
    let modules = Modules {
        proc_modules: match root.read("/proc/modules") {
            Ok(b) => match procfs_core::KernelModules::from_buf_read(b.as_slice()) {
                Ok(m) => Fact::known(
                    m.0.into_iter()
                        .map(|(k, v)| {
                            (
                                k,
                                LoadedModule {
                                    state: v.state,
                                    used_by: v.used_by,
                                },
                            )
                        })
                        .collect(),
                    "/proc/modules",
                ),
                Err(e) => Fact::absent("/proc/modules", format!("unparsable: {e}")),
            },
            Err(e) => Fact::absent("/proc/modules", e.reason()),
        },
        sys_module: match root.read_dir("/sys/module") {
            Ok(v) => Fact::known(v.into_iter().map(|e| e.name).collect(), "/sys/module"),
            Err(e) => Fact::absent("/sys/module", e.reason()),
        },
    };
    let cmdline = parsed(root, "/proc/cmdline", |s| Some(parse::cmdline(s)));
    let hugepages = match root.read("/proc/meminfo") {
        Ok(b) => match procfs_core::Meminfo::from_buf_read(b.as_slice()) {
            Ok(m) => Fact::known(
                HugePages {
                    total: m.hugepages_total.unwrap_or(0),
                    free: m.hugepages_free.unwrap_or(0),
                    size_kib: m.hugepagesize.unwrap_or(0) / 1024,
                },
                "/proc/meminfo",
            ),
            Err(e) => Fact::absent("/proc/meminfo", format!("unparsable: {e}")),
        },
        Err(e) => Fact::absent("/proc/meminfo", e.reason()),
    };
    Kernel {
        modules,
        cmdline,
        hugepages,
    }
}
