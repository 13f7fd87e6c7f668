//! The add-ons around the GPU driver that GPUDirect users install and then debug by hand
//! (issue 39): gdrcopy's `gdrdrv`, the peer-memory module file on disk (its ABI against
//! `ib_core`'s), and NVIDIA Fabric Manager on NVSwitch systems.

use super::fact::Fact;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The add-ons, one part each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Addons {
    pub gdrcopy: Gdrcopy,
    pub peermem_abi: PeermemAbi,
    pub fabric_manager: FabricManager,
}

impl Addons {
    /// Every part absent, with one reason (a paste, a test).
    pub fn absent(source: &str, reason: &str) -> Addons {
        Addons {
            gdrcopy: Gdrcopy {
                module_version: Fact::absent(source, reason),
                params: Fact::absent(source, reason),
                dev: Fact::absent(source, reason),
            },
            peermem_abi: PeermemAbi {
                peermem: Fact::absent(source, reason),
                ib_core: Fact::absent(source, reason),
            },
            fabric_manager: FabricManager {
                version_file: Fact::absent(source, reason),
                binary: Fact::absent(source, reason),
                unit: Fact::absent(source, reason),
            },
        }
    }
}

/// A device node as `lstat` saw it (in a snapshot, `gdrdoctor/dev-nodes.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevNode {
    /// A character device (what a driver's node is); anything else is a stray file.
    pub char_device: bool,
    /// The permission bits (`0o666`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl DevNode {
    /// Read and write for everyone: any job can open it.
    pub fn world_rw(&self) -> bool {
        self.mode & 0o006 == 0o006
    }
    /// Read and write for the group.
    pub fn group_rw(&self) -> bool {
        self.mode & 0o060 == 0o060
    }
}

/// gdrcopy's kernel half.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gdrcopy {
    /// `/sys/module/gdrdrv/version`; `None` when the file is not there (module not loaded).
    pub module_version: Fact<Option<String>>,
    /// `/proc/driver/gdrdrv/params` (`Version`, `Built for NVIDIA driver flavor`, `Use
    /// persistent mapping`), key -> value; `None` when the file is not there.
    pub params: Fact<Option<BTreeMap<String, String>>>,
    /// `/dev/gdrdrv`; `None` when there is no such node.
    pub dev: Fact<Option<DevNode>>,
}

/// A kernel module file (`.ko`, `.ko.xz`, `.ko.zst`) as its ELF sections tell it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ModuleFile {
    /// Where it is (`/lib/modules/<release>/updates/dkms/nvidia-peermem.ko.zst`).
    pub path: String,
    /// `.modinfo`'s `vermagic=` (`6.8.0-49-generic SMP preempt mod_unload modversions`).
    pub vermagic: Option<String>,
    /// `.modinfo`'s `depends=`, split.
    pub depends: Vec<String>,
    /// `.modinfo`'s `version=`.
    pub version: Option<String>,
    /// `__versions`: the symbols it takes from others, with the CRC it was built against.
    pub needs: Vec<SymbolCrc>,
    /// Undefined symbols of `.symtab` (what it takes, with or without modversions).
    pub undefined: Vec<String>,
    /// The symbols it exports (`__ksymtab_<name>`), with the CRC (`__crc_<name>`) when the
    /// module was built with modversions.
    pub exports: Vec<SymbolCrc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SymbolCrc {
    pub name: String,
    pub crc: Option<u32>,
}

/// The peer-memory module on disk for the running kernel, and the `ib_core` that `modprobe`
/// would give it (`modules.dep`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeermemAbi {
    /// `nvidia-peermem.ko*` in `modules.dep`; `None` when not installed for this kernel.
    pub peermem: Fact<Option<ModuleFile>>,
    /// `ib_core.ko*` in `modules.dep`; `None` when not installed for this kernel.
    pub ib_core: Fact<Option<ModuleFile>>,
}

/// NVIDIA Fabric Manager: what says it is installed and which version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FabricManager {
    /// The version the package records (`/usr/share/nvidia/nvswitch/fabricmanager.version`
    /// or the like), the path it was read at; `None` when there is none.
    pub version_file: Fact<Option<(String, String)>>,
    /// `nv-fabricmanager` on one of the usual paths; `None` when not there.
    pub binary: Fact<Option<String>>,
    /// `nvidia-fabricmanager.service` in a systemd unit directory, and whether it is enabled
    /// (a link in a `*.wants` directory); `None` when there is no unit.
    pub unit: Fact<Option<FmUnit>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FmUnit {
    pub path: String,
    pub enabled: bool,
}
