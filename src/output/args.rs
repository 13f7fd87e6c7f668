//! The flags every report command shares (`check`, `probe`, `watch`, `diagnose`), declared once
//! and flattened into each command's arguments.

use clap::{Args, ValueEnum};
use gdrdoctor_checks::report::FailOn;
use std::path::{Path, PathBuf};

/// The exit-code contract of `check` and `probe`, as their `--help` ends.
pub const EXIT_CODES: &str = "\
Exit codes (check, probe):
  0  nothing failed (warnings allowed unless --fail-on warn)
  1  at least one check failed
  2  gdrdoctor could not run (usage error, unreadable sysroot)
  3  nothing failed, but some checks could not be evaluated (status error);
     a CI gate must not read this as healthy unless it passes --allow-incomplete";

/// Where the report goes, how it looks, and what makes the exit code 1 or 3.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Write the report to FILE instead of stdout: a regular file is replaced atomically (temp
    /// file + rename), a device, FIFO or symlink (/dev/null, a named pipe) is written in place,
    /// `-` is stdout
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// When to color the table: auto (on a terminal, unless NO_COLOR, CLICOLOR=0 or TERM=dumb;
    /// CLICOLOR_FORCE forces it), always or never
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// The lowest status that makes the exit code 1: fail (default) or warn
    #[arg(long, value_enum, default_value_t = FailOnArg::Fail)]
    pub fail_on: FailOnArg,
    /// Exit 0 instead of 3 when some findings could not be evaluated (status error: not running
    /// as root, no GPU or driver for a probe, an unreadable area or paste)
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Show evidence for passing (and skipped) findings too
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

impl OutputArgs {
    /// `-o FILE`, with `-o -` (stdout) as no file.
    pub fn file(&self) -> Option<&Path> {
        self.output.as_deref().filter(|p| p.as_os_str() != "-")
    }

    pub fn fail_on(&self) -> FailOn {
        self.fail_on.into()
    }
}

/// Where gdrdoctor keeps what it carries between runs, and whether a run uses the CUDA answers
/// kept there (`check`, `topo`, `snapshot`, `policy init`: every command that asks the live
/// libraries).
#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// Ask CUDA in this run instead of using the answers kept from an earlier run of this boot
    /// (cuda-facts.json in the state directory; kept per driver and GPU set), and keep none
    #[arg(long)]
    pub no_cache: bool,
    /// Where gdrdoctor keeps what it carries between runs: the CUDA answers of this boot and
    /// (`check`) the last run's counters, to judge their growth since then
    #[arg(long, value_name = "DIR", env = "GDRDOCTOR_STATE_DIR", default_value = crate::state::DEFAULT_DIR)]
    pub state_dir: PathBuf,
}

impl LiveArgs {
    /// The live query's options: the CUDA cache read and written unless `--no-cache`.
    pub fn options(&self) -> crate::collect::live::Options {
        crate::collect::live::Options {
            cache: if self.no_cache {
                crate::collect::live::CacheMode::Off
            } else {
                crate::collect::live::CacheMode::Use
            },
            state_dir: Some(self.state_dir.clone()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOnArg {
    Warn,
    Fail,
}

impl From<FailOnArg> for FailOn {
    fn from(a: FailOnArg) -> FailOn {
        match a {
            FailOnArg::Warn => FailOn::Warn,
            FailOnArg::Fail => FailOn::Fail,
        }
    }
}

/// One entry of `fleet --ignore` and `preflight --ignore-drift`: a field name or prefix as the
/// drift table prints it. An empty entry (`--ignore ""`, `--ignore env.,`) would be a prefix of
/// every field and hide all drift: refused.
pub fn parse_field_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("an empty field prefix would leave every field out of the drift (give a name or prefix such as env. or cmdline.BOOT_IMAGE, without an empty entry between commas)".into());
    }
    Ok(s.to_string())
}

/// `--nccl-version` (check, topo, diagnose): `2.28.9`, `2.28` or `v2.28.9-1`.
pub fn parse_nccl_version(s: &str) -> Result<String, String> {
    gdrdoctor_checks::nccl::Version::parse(s)
        .map(|v| v.to_string())
        .ok_or_else(|| format!("`{s}` is not an NCCL 2.x version (expected e.g. 2.28.9)"))
}

/// Which ids an [`Ids`] argument completes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSet {
    /// `check --only/--skip`: every check id of the `CHECKS` registry and every category.
    Checks,
    /// `diagnose --only/--skip`: the checks, and the findings of diagnose itself.
    Diagnose,
    /// `explain ID`: every finding id that has a page.
    Findings,
}

/// The value parser of `--only`, `--skip` and `explain ID`: any text is taken (a mistyped id is
/// answered by the command itself, with "did you mean"), and the ids it may be are the
/// argument's possible values, so that the completion scripts (`gdrdoctor completions`) offer
/// them. The arguments hide them from `--help` (`hide_possible_values`): `gdrdoctor list` is
/// where they are read.
#[derive(Debug, Clone, Copy)]
pub struct Ids(pub IdSet);

impl Ids {
    /// The ids of the set, each once, in registry order.
    pub fn ids(&self) -> Vec<&'static str> {
        use gdrdoctor_checks::checks::CHECKS;
        let mut v: Vec<&'static str> = Vec::new();
        let mut push = |id: &'static str| {
            if !v.contains(&id) {
                v.push(id);
            }
        };
        match self.0 {
            IdSet::Findings => gdrdoctor_checks::findings::all().for_each(|f| push(f.id)),
            IdSet::Checks | IdSet::Diagnose => {
                for c in CHECKS {
                    push(c.category());
                    push(c.id);
                }
                if self.0 == IdSet::Diagnose {
                    for f in gdrdoctor_checks::paste::findings::FINDINGS {
                        push(f.id.split_once('.').map_or(f.id, |(c, _)| c));
                        push(f.id);
                    }
                }
            }
        }
        v
    }
}

impl clap::builder::TypedValueParser for Ids {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            self.ids()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}
