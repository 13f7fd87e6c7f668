//! `gdrdoctor topo`: the GPU x NIC matrix of a node (text, JSON, a picture of its PCIe tree),
//! or of a pasted `nvidia-smi topo -m` (`--nvidia-smi FILE`).

use crate::collect::{self, Libraries};
use crate::output::args::LiveArgs;
use crate::output::{deliver_bytes, fail};
use crate::render;
use crate::source::{input, Location};
use gdrdoctor_checks::checks::Selection;
use gdrdoctor_checks::paste;
use gdrdoctor_checks::RunOptions;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Like `nvidia-smi topo -m`, but for GPUs against RDMA devices, with NCCL's own \
decision per pair: `*` marks the pairs NCCL would use GPUDirect RDMA for, and every GPU without \
one gets the reason. The rules are those of the NCCL found on the node (libnccl.so.2 on the \
loader path or in a Python environment; --nccl-version to choose), with PXN (sends through an \
NVLink peer), the read gate (sends from pre-Ampere GPUs without NVLink) and Grace C2C. The NCCL_* \
variables that change the answer are honoured: NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ, \
NCCL_NET_GDR_C2C, NCCL_IB_HCA, NCCL_IB_DISABLE, NCCL_PXN_DISABLE, NCCL_P2P_LEVEL, NCCL_P2P_DISABLE \
(with --sysroot, the snapshot's environment overlaid by the current one).\n\nExamples:\n  \
gdrdoctor topo\n  gdrdoctor topo --format json\n  NCCL_NET_GDR_LEVEL=SYS gdrdoctor topo\n  \
NCCL_IB_HCA=^mlx5_4 gdrdoctor topo     # what if the job excludes a NIC\n  \
gdrdoctor topo --format svg -o topo.svg # the PCIe tree with the verdicts, for a browser\n  \
gdrdoctor topo --format png -o topo.png --sysroot node.tar.gz\n  \
gdrdoctor topo --nccl-version 2.18.6   # judge for an older NCCL\n  \
gdrdoctor topo --sysroot node.tar.gz\n  gdrdoctor topo --nvidia-smi pasted.txt --nccl-version 2.21.5"
)]
pub struct Args {
    /// Read a snapshot instead of the live node
    #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
    pub sysroot: Option<PathBuf>,
    /// Read the host through DIR, where a container mounts the host's `/` (Kubernetes: hostPath `/`
    /// at /host, read-only): the host's /proc, /sys and /etc are read as the live host's (a
    /// missing file is absent on the host; symlinks, absolute ones too, resolve inside DIR).
    /// NVML, CUDA and libibverbs are the container's (checks that need them skip when it has
    /// none or sees fewer devices than the host); RLIMIT_MEMLOCK is the container runtime's
    /// (containerd, cri-o, dockerd: the pods inherit it), read from DIR/proc
    #[arg(long, value_name = "DIR", conflicts_with_all = ["sysroot", "nvidia_smi"])]
    pub host_root: Option<PathBuf>,
    /// text (default), json, or a picture of the PCIe tree with the verdicts: svg (hover a
    /// GPU for its routes, a box for its findings; open it in a browser) or png (needs a
    /// monospace font installed, e.g. fonts-dejavu-core)
    #[arg(long, short = 'f', value_enum, default_value_t = TopoFormat::Text)]
    pub format: TopoFormat,
    /// Write to FILE instead of stdout (png is never written to a terminal); a device or
    /// FIFO is written in place, `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Read a pasted `nvidia-smi topo -m` (a file, or - for stdin) instead of a node: NCCL's
    /// verdict per pair (PXN from the NV# cells; peer memory, dma-buf and ports unknown
    /// unless the file shows them) and the rail balance, for bug reports without a
    /// snapshot. The same reader and rule as `gdrdoctor diagnose` (its JSON schema:
    /// gdrdoctor.topo-paste/v1)
    #[arg(long, value_name = "FILE", conflicts_with = "sysroot")]
    pub nvidia_smi: Option<PathBuf>,
    /// Judge with this NCCL version's rules (e.g. 2.18.6) instead of the libnccl.so.2
    /// found on the node (with --nvidia-smi: instead of the version in a pasted NCCL log;
    /// with none found, the newest rules gdrdoctor knows)
    #[arg(long, value_name = "X.Y.Z", value_parser = crate::output::args::parse_nccl_version)]
    pub nccl_version: Option<String>,
    #[command(flatten)]
    pub live: LiveArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopoFormat {
    Text,
    Json,
    Svg,
    Png,
}

/// `gdrdoctor topo`: the node's matrix, or with `--nvidia-smi FILE` a pasted one's.
pub fn run(args: &Args) -> i32 {
    match &args.nvidia_smi {
        Some(file) => paste(
            file,
            args.format,
            args.output.as_deref(),
            args.nccl_version.as_deref(),
        ),
        None => node(
            Location::from_args(args.sysroot.as_deref(), args.host_root.as_deref()),
            args.format,
            args.output.as_deref(),
            args.nccl_version.as_deref(),
            &args.live.options(),
        ),
    }
}

fn node(
    at: Location,
    format: TopoFormat,
    output: Option<&Path>,
    nccl_version: Option<&str>,
    live: &collect::live::Options,
) -> i32 {
    // The live libraries' facts (NCCL's dma-buf probe per NIC, CUDA's GDR and dma-buf
    // attributes, NVML's GPU pairs) decide GDR and the GPU x GPU block, and colour the picture:
    // topo asks them as check does (the GPU x GPU block then says NV18 over NVLink, as
    // `nvidia-smi topo -m` does, not the PCIe path).
    let (_src, mut node) = match collect::load_node_with(at, Libraries::Query, live) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    collect::apply_nccl_version(&mut node, nccl_version);
    let out = match format {
        TopoFormat::Text => render::topo::render_text_width(
            &render::topo::build(&node),
            crate::output::text_width(output),
        )
        .into_bytes(),
        TopoFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&render::topo::build(&node)).unwrap_or_default()
        )
        .into_bytes(),
        // The picture colours elements by the check registry's findings on the same node.
        TopoFormat::Svg => {
            let findings = gdrdoctor_checks::checks::run(&node, &Selection::default());
            render::svg::svg(&node, &findings).into_bytes()
        }
        TopoFormat::Png => {
            let findings = gdrdoctor_checks::checks::run(&node, &Selection::default());
            match render::svg_png::png(&render::svg::svg_static(&node, &findings), 1.0) {
                Ok(b) => b,
                Err(e) => return fail(e),
            }
        }
    };
    deliver_bytes(&out, output, format == TopoFormat::Png)
}

/// `gdrdoctor topo --nvidia-smi FILE`: the diagnose reader and NCCL's rule, shown as the topo
/// view.
fn paste(
    file: &Path,
    format: TopoFormat,
    output: Option<&Path>,
    nccl_version: Option<&str>,
) -> i32 {
    if matches!(format, TopoFormat::Svg | TopoFormat::Png) {
        return fail(
            "--format svg and png draw a node's PCIe tree, which a pasted `nvidia-smi topo -m` does not hold: use --sysroot or run on the node",
        );
    }
    let input = match input::read_input(file) {
        Ok(i) => i,
        Err(e) => return fail(e),
    };
    let inputs = vec![input];
    let p = paste::read(&inputs);
    if p.matrices.is_empty() {
        let why = p
            .blocks
            .iter()
            .find(|b| b.kind == paste::Kind::TopoMatrix)
            .map(|b| format!(": {}", b.problems.join("; ")))
            .unwrap_or_default();
        return fail(format!(
            "{}: no `nvidia-smi topo -m` matrix found (expected a header line starting with GPU0, or its rows){why}",
            file.display()
        ));
    }
    let r = paste::report::diagnose_paste(
        &p,
        &inputs,
        &RunOptions::default(),
        &collect::assume(nccl_version),
    );
    let Some(t) = render::topo_paste::build(&r) else {
        return fail(format!(
            "{}: the matrix has no readable rows",
            file.display()
        ));
    };
    let out = match format {
        TopoFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&t).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        ),
        TopoFormat::Text | TopoFormat::Svg | TopoFormat::Png => {
            render::topo_paste::text(&r, &t, crate::output::text_width(output))
        }
    };
    deliver_bytes(out.as_bytes(), output, false)
}
