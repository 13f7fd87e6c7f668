//! Loading the site policy (`--policy FILE`, or `/etc/gdrdoctor/policy.toml` on live runs) and the
//! clock it needs. The policy's types, evaluation and `policy init` live in the pure crate
//! (`gdrdoctor_checks::policy`); this module reads the file and turns TOML errors into
//! `FILE:LINE:COLUMN: message` with the offending line.

use gdrdoctor_checks::policy::{Policy, DEFAULT_PATH};
use std::path::{Path, PathBuf};

/// A loaded policy and the path it came from (cited in every `policy.*` finding).
pub struct Loaded {
    pub path: PathBuf,
    pub policy: Policy,
}

/// Which policy `check` applies: `--no-policy` none; `--policy FILE` that file (it must exist);
/// otherwise the default file when the run is live and the file exists.
pub fn resolve(
    explicit: Option<&Path>,
    disabled: bool,
    live: bool,
) -> Result<Option<Loaded>, String> {
    resolve_with(explicit, disabled, live, Path::new(DEFAULT_PATH))
}

/// [`resolve`] with the default path as a parameter (tests).
pub fn resolve_with(
    explicit: Option<&Path>,
    disabled: bool,
    live: bool,
    default: &Path,
) -> Result<Option<Loaded>, String> {
    if disabled {
        return Ok(None);
    }
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            // A dangling link or an unreadable file still counts as "present": a policy the
            // site installed must not be skipped silently.
            if !live || std::fs::symlink_metadata(default).is_err() {
                return Ok(None);
            }
            default.to_path_buf()
        }
    };
    load(&path).map(Some)
}

pub fn load(path: &Path) -> Result<Loaded, String> {
    // A policy is a few KiB of TOML: a larger file (or /dev/zero) is not one.
    let f = std::fs::File::open(path).map_err(|e| format!("policy {}: {e}", path.display()))?;
    let bytes =
        crate::source::input::read_capped(f, 4 << 20, &format!("policy {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("policy {}: not utf-8 text: {e}", path.display()))?;
    let policy = parse(&path.display().to_string(), &text)?;
    Ok(Loaded {
        path: path.to_path_buf(),
        policy,
    })
}

/// Parse policy text; errors read `FILE:LINE:COLUMN: message`, then the line with a caret.
pub fn parse(name: &str, text: &str) -> Result<Policy, String> {
    let p = parse_toml(name, text)?;
    let lint = p.lint();
    if !lint.is_empty() {
        return Err(lint
            .iter()
            .map(|l| format!("{name}: {l}"))
            .collect::<Vec<_>>()
            .join("\n"));
    }
    Ok(p)
}

fn parse_toml(name: &str, text: &str) -> Result<Policy, String> {
    toml::from_str::<Policy>(text).map_err(|e| {
        let msg = e.message().trim().to_string();
        match e.span() {
            Some(span) => {
                let (line, col, src) = locate(text, span.start);
                let width = text
                    .get(span.clone())
                    .map(|s| s.lines().next().unwrap_or("").chars().count())
                    .unwrap_or(1)
                    .clamp(1, 80);
                format!(
                    "{name}:{line}:{col}: {msg}\n  {line:>4} | {src}\n       | {}{}",
                    " ".repeat(col.saturating_sub(1)),
                    "^".repeat(width)
                )
            }
            None => format!("{name}: {msg}"),
        }
    })
}

/// 1-based line and column (in characters) of a byte offset, and the line's text.
fn locate(text: &str, offset: usize) -> (usize, usize, &str) {
    let offset = offset.min(text.len());
    let mut start = 0;
    let mut line = 1;
    for (i, b) in text.bytes().enumerate() {
        if i >= offset {
            break;
        }
        if b == b'\n' {
            line += 1;
            start = i + 1;
        }
    }
    let end = text[start..]
        .find('\n')
        .map(|e| start + e)
        .unwrap_or(text.len());
    let col = text
        .get(start..offset)
        .map(|s| s.chars().count())
        .unwrap_or(0)
        + 1;
    (
        line,
        col,
        text.get(start..end).unwrap_or("").trim_end_matches('\r'),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn errors_name_the_file_line_and_column() {
        let e = parse(
            "p.toml",
            "schema = \"gdrdoctor.policy/v1\"\n[gpu]\ncount = 8\nmodle = \"H200\"\n",
        )
        .unwrap_err();
        assert!(e.starts_with("p.toml:4:1: unknown field `modle`"), "{e}");
        assert!(e.contains("   4 | modle = \"H200\""), "{e}");
        let e = parse("p.toml", "[driver]\nflavor = \"closed\"\n").unwrap_err();
        assert!(e.starts_with("p.toml:2:10:"), "{e}");
        assert!(e.contains("closed"), "{e}");
        let e = parse(
            "p.toml",
            "[[waiver]]\ncheck = \"pcie.nope\"\nreason = \"x\"\nexpires = 2026-01-01\n",
        )
        .unwrap_err();
        assert!(
            e.starts_with("p.toml:2:9: unknown check id or category `pcie.nope`"),
            "{e}"
        );
        let e = parse(
            "p.toml",
            "[[waiver]]\ncheck = \"pcie\"\nexpires = 2026-01-01\n",
        )
        .unwrap_err();
        assert!(e.contains("missing field `reason`"), "{e}");
        let e = parse("p.toml", "[rdma.firmware]\nversion = 28.39\n").unwrap_err();
        assert!(
            e.starts_with("p.toml:2:11:") && e.contains("as strings"),
            "{e}"
        );
        let e = parse("p.toml", "[pcie.gpu]\nspeed_gts = 30\n").unwrap_err();
        assert!(e.contains("not a pcie speed"), "{e}");
        let e = parse("p.toml", "x = [\n").unwrap_err();
        assert!(e.starts_with("p.toml:"), "{e}");
    }

    #[test]
    fn the_default_file_applies_to_live_runs_only() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("policy.toml");
        // Absent: no policy.
        assert!(resolve_with(None, false, true, &d).unwrap().is_none());
        std::fs::write(&d, "[gpu]\ncount = 8\n").unwrap();
        let l = resolve_with(None, false, true, &d).unwrap().unwrap();
        assert_eq!(l.path, d);
        assert_eq!(l.policy.gpu.unwrap().count, Some(8));
        // Not for a sysroot, not with --no-policy.
        assert!(resolve_with(None, false, false, &d).unwrap().is_none());
        assert!(resolve_with(None, true, true, &d).unwrap().is_none());
        // --no-policy wins over --policy.
        assert!(resolve_with(Some(&d), true, true, &d).unwrap().is_none());
        // A broken default file stops the run, naming itself.
        std::fs::write(&d, "[gpu]\ncount = \"eight\"\n").unwrap();
        let e = resolve_with(None, false, true, &d).err().unwrap();
        assert!(e.contains("policy.toml:2:9"), "{e}");
        // A dangling link where the default should be is not silently skipped.
        let link = t.path().join("link.toml");
        std::os::unix::fs::symlink(t.path().join("nowhere"), &link).unwrap();
        let e = resolve_with(None, false, true, &link).err().unwrap();
        assert!(e.contains("link.toml"), "{e}");
    }

    #[test]
    fn a_whole_policy_parses() {
        let p = parse(
            "p.toml",
            r#"
schema = "gdrdoctor.policy/v1"
[gpu]
count = 8
model = "H200"
device_id = "10de:2335"
[rdma]
count = 8
[rdma.ports]
state = "ACTIVE"
link_layer = "InfiniBand"
rate_gbps = 400
width = "4x"
[rdma.firmware]
min_version = "28.39"
all_equal = true
[pcie.gpu]
speed_gts = 32
width = 16
[driver]
flavor = "open"
min_version = "570.124.06"
[peer_memory]
mechanism = "either"
[iommu]
mode = ["off", "passthrough"]
[gdr]
every_gpu = true
max_path = "PXB"
[kernel.cmdline]
require = ["iommu=pt"]
[severity]
"pcie.mrrs" = "warn"
topo = "fail"
[[waiver]]
check = "pcie.acs-redirect"
reason = "case 1"
expires = 2026-06-30
[[waiver]]
check = "rdma.ports"
subject = "mlx5_3/*"
reason = "case 2"
expires = "2026-07-01"
"#,
        )
        .unwrap();
        assert_eq!(p.gpu.unwrap().count, Some(8));
        let r = p.rdma.unwrap();
        assert_eq!(r.ports.0.len(), 1);
        assert_eq!(r.ports.0[0].width.as_ref().unwrap().0, "4X");
        assert_eq!(p.iommu.unwrap().mode.0.len(), 2);
        assert_eq!(p.waivers.len(), 2);
        assert_eq!(p.waivers[0].expires.to_string(), "2026-06-30");
        assert_eq!(p.waivers[1].expires.to_string(), "2026-07-01");
        assert!(p.kernel.unwrap().cmdline.unwrap().allow_extra);
        // Several port rules: an array of tables.
        let p = parse(
            "p.toml",
            "[[rdma.ports]]\ndevices = [\"mlx5_?\"]\nrate_gbps = 400\n[[rdma.ports]]\ndevices = [\"mlx5_8\"]\nlink_layer = \"Ethernet\"\n",
        )
        .unwrap();
        assert_eq!(p.rdma.unwrap().ports.0.len(), 2);
        // A date with a time is refused: waivers last whole days.
        let e = parse(
            "p.toml",
            "[[waiver]]\ncheck = \"pcie\"\nreason = \"r\"\nexpires = 2026-01-01T00:00:00Z\n",
        )
        .unwrap_err();
        assert!(e.contains("date only"), "{e}");
    }
}
