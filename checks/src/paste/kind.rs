//! The kinds of pasted block: what a block holds, recognised by its shape.

use serde::Serialize;

/// What a block holds, recognised by its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(rename = "block_kind")]
pub enum Kind {
    /// `nvidia-smi topo -m` / `-mp`
    TopoMatrix,
    /// NCCL_DEBUG=INFO/WARN output (and the PyTorch watchdog lines around it)
    NcclLog,
    /// `NCCL_*=...` / `export NCCL_...` lines
    Env,
    /// `lspci -vvv` (with `-xxx`/`-xxxx` hex when present)
    Lspci,
    /// `lspci -tv`
    LspciTree,
    /// `ibv_devinfo [-v]`
    IbvDevinfo,
    /// `ibstat` / `ibstatus`
    Ibstat,
    /// `lsmod` (whole, or filtered by `grep`)
    Lsmod,
    /// `/proc/modules`
    ProcModules,
    /// `nvidia-smi -q`
    NvidiaSmiQ,
    /// `/proc/driver/nvidia/version`
    NvidiaVersion,
    /// `/proc/cmdline` (or a GRUB_CMDLINE_LINUX line)
    Cmdline,
    /// `dmesg` / `journalctl -k`
    Dmesg,
    /// `uname -a` / `uname -r` / `/proc/version`
    Uname,
    /// `ulimit -a` / `ulimit -l`
    Ulimit,
    /// text that is none of the above
    Unrecognised,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TopoMatrix => "nvidia-smi topo -m",
            Kind::NcclLog => "NCCL log",
            Kind::Env => "environment",
            Kind::Lspci => "lspci -vvv",
            Kind::LspciTree => "lspci -tv",
            Kind::IbvDevinfo => "ibv_devinfo",
            Kind::Ibstat => "ibstat",
            Kind::Lsmod => "lsmod",
            Kind::ProcModules => "/proc/modules",
            Kind::NvidiaSmiQ => "nvidia-smi -q",
            Kind::NvidiaVersion => "/proc/driver/nvidia/version",
            Kind::Cmdline => "/proc/cmdline",
            Kind::Dmesg => "dmesg",
            Kind::Uname => "uname",
            Kind::Ulimit => "ulimit",
            Kind::Unrecognised => "unrecognised text",
        }
    }
}
