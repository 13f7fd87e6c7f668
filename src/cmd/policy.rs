//! `gdrdoctor policy init|validate`: write a policy that a golden node passes, or check a file.

use crate::collect::{self, Libraries};
use crate::output::args::LiveArgs;
use crate::output::{emit, fail, write_output, EXIT_USAGE};
use crate::source::Location;
use std::path::PathBuf;

/// `gdrdoctor policy`: its subcommands (the help of `policy` itself is in `crate::app`).
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a commented policy that this node (or a snapshot) passes: start from the golden node
    #[command(
        after_long_help = "The policy states what the golden node shows: gpu count and model, rdma devices, \
port state/link layer/rate/width, firmware, pcie links per class, driver, peer-memory mechanism, iommu \
mode, gdr pairs, kernel release and command line. Delete what your site does not want to enforce; \
per-node command-line keys (root, resume) are ignored.\n\nExamples:\n  \
sudo gdrdoctor policy init -o /etc/gdrdoctor/policy.toml     # on the golden node\n  \
gdrdoctor policy init --sysroot golden.tar.gz -o policy.toml\n  \
gdrdoctor check --policy policy.toml --sysroot other-node.tar.gz"
    )]
    Init {
        /// Read a snapshot instead of the live node
        #[arg(long, value_name = "DIR|TAR.GZ", env = "GDRDOCTOR_SYSROOT")]
        sysroot: Option<PathBuf>,
        /// Write the policy to FILE instead of stdout (a device or FIFO is written in place,
        /// `-` is stdout)
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        /// Overwrite FILE when it exists
        #[arg(long)]
        force: bool,
        /// Do not query NVML, the CUDA driver and libibverbs
        #[arg(long = "static")]
        static_only: bool,
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Check a policy file without a node: exit 0 when valid, 2 naming the line of the error
    #[command(
        after_long_help = "Examples:\n  gdrdoctor policy validate /etc/gdrdoctor/policy.toml"
    )]
    Validate {
        /// The policy file (TOML)
        file: PathBuf,
    },
}

pub fn run(c: &Command) -> i32 {
    match c {
        Command::Init {
            sysroot,
            output,
            force,
            static_only,
            live,
        } => {
            // Only a policy file is not overwritten by accident: a device, a FIFO and `-`
            // (stdout) take the text.
            if let Some(o) = output.as_ref().filter(|p| p.as_os_str() != "-") {
                if o.is_file() && !force {
                    return fail(format!(
                        "{} exists; pass --force to overwrite it",
                        o.display()
                    ));
                }
            }
            let libs = if *static_only {
                Libraries::Skip
            } else {
                Libraries::Query
            };
            let (_src, node) = match collect::load_node_with(
                Location::from_arg(sysroot.as_deref()),
                libs,
                &live.options(),
            ) {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let gdr = gdrdoctor_checks::gdr::verdicts(&node);
            let text =
                gdrdoctor_checks::policy::init::render(&node, &gdr, crate::sys::clock::today());
            // What we write must read back.
            if let Err(e) = crate::source::policy::parse("the generated policy", &text) {
                return fail(format!("internal error, please report it: {e}"));
            }
            // `-o -` is stdout.
            match output.as_ref().filter(|p| p.as_os_str() != "-") {
                Some(o) => {
                    if let Err(e) = write_output(o, &text) {
                        return fail(e);
                    }
                    eprintln!(
                        "gdrdoctor: wrote {}; review it, then `gdrdoctor check --policy {}`",
                        o.display(),
                        o.display()
                    );
                    0
                }
                None => {
                    if emit(&text) {
                        0
                    } else {
                        EXIT_USAGE
                    }
                }
            }
        }
        Command::Validate { file } => match crate::source::policy::load(file) {
            Ok(l) => {
                let p = &l.policy;
                let mut parts: Vec<String> = Vec::new();
                for (name, on) in [
                    ("gpu", p.gpu.is_some()),
                    ("rdma", p.rdma.is_some()),
                    ("pcie", p.pcie.is_some()),
                    ("driver", p.driver.is_some()),
                    ("peer_memory", p.peer_memory.is_some()),
                    ("iommu", p.iommu.is_some()),
                    ("gdr", p.gdr.is_some()),
                    ("kernel", p.kernel.is_some()),
                ] {
                    if on {
                        parts.push(name.to_string());
                    }
                }
                let today = crate::sys::clock::today();
                let expired = p.waivers.iter().filter(|w| today > w.expires).count();
                let text = format!(
                    "{}: valid policy: {}; {} severity override(s); {} waiver(s){}\n",
                    file.display(),
                    if parts.is_empty() {
                        "no expectations".to_string()
                    } else {
                        parts.join(", ")
                    },
                    p.severity.len(),
                    p.waivers.len(),
                    if expired > 0 {
                        format!(", {expired} expired")
                    } else {
                        String::new()
                    }
                );
                if emit(&text) {
                    0
                } else {
                    EXIT_USAGE
                }
            }
            Err(e) => fail(e),
        },
    }
}
