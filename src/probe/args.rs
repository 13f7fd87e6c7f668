//! The probe options several probes share ([`CommonArgs`]), and reading a probe's own options
//! from the matches. Each probe folder declares its flag and options (`Args`); the registry
//! adds them all to `gdrdoctor probe` (`super::ProbeOptions`).

use clap::{ArgMatches, Args, FromArgMatches};

/// Options shared by several probes.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Only this GPU (CUDA ordinal); default: every GPU for --registration and --nccl, GPU 0
    /// for --hang and --doorbell
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// The peer GPU (CUDA ordinal). --hang --inject remote-wait: default GPU 1 (GPU 0 when
    /// --gpu is not 0), the GPU itself (loopback) on a one-GPU node; --p2p: with --gpu, measure
    /// only that pair; --nccl: run NCCL on --gpu and --peer only
    #[arg(long, value_name = "N")]
    pub peer: Option<u32>,
    /// Repeat the timed steps N times and report medians and p90 (registration); with --p2p:
    /// copies per measurement (at least 20)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub repeat: u32,
    /// With --hang or --doorbell: use the PTX carried in the binary even when NVRTC is available
    #[arg(long)]
    pub ptx: bool,
    /// Kill a probe worker that runs longer than this many seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub timeout: u64,
}

/// A probe's own options from the matches (each probe folder derives `clap::Args` for them).
pub fn own<T: FromArgMatches>(m: &ArgMatches) -> Result<T, String> {
    T::from_arg_matches(m).map_err(|e| e.to_string())
}
