//! NVIDIA Fabric Manager on the node (issue 39 item 3): its program, its systemd unit (and
//! whether it is enabled), and its version as the package database or its own log records it.

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;

const BINARIES: &[&str] = &["/usr/bin/nv-fabricmanager", "/usr/sbin/nv-fabricmanager"];
const UNIT: &str = "nvidia-fabricmanager.service";
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
];
const WANTS: &str = "/etc/systemd/system/multi-user.target.wants";
const DPKG: &str = "/var/lib/dpkg/status";
const LOG: &str = "/var/log/fabricmanager.log";

/// The first of `paths` that exists; `None` when none does (on a complete root).
fn first(root: &Root, paths: &[&str]) -> Fact<Option<String>> {
    for p in paths {
        match root.exists(p) {
            Ok(true) => return Fact::known(Some(p.to_string()), *p),
            Ok(false) => {}
            Err(e) => return Fact::absent(*p, e.reason()),
        }
    }
    let shown = paths.join(", ");
    if root.is_complete() {
        Fact::known(None, shown)
    } else {
        Fact::absent(shown, NOT_CAPTURED)
    }
}

pub(super) fn collect(root: &Root) -> FabricManager {
    let binary = first(root, BINARIES);
    let unit_paths: Vec<String> = UNIT_DIRS.iter().map(|d| format!("{d}/{UNIT}")).collect();
    let unit_refs: Vec<&str> = unit_paths.iter().map(String::as_str).collect();
    let unit = match first(root, &unit_refs) {
        Fact::Known {
            value: Some(path),
            source,
        } => {
            let enabled = root
                .read_dir(WANTS)
                .map(|v| v.iter().any(|e| e.name == UNIT))
                .unwrap_or(false);
            Fact::known(Some(FmUnit { path, enabled }), source)
        }
        Fact::Known {
            value: None,
            source,
        } => Fact::known(None, source),
        Fact::Absent { source, reason } => Fact::absent(source, reason),
    };
    // The version only where something of it is installed (the package database is large).
    let installed = matches!(binary.get(), Some(Some(_))) || matches!(unit.get(), Some(Some(_)));
    let version_file = if installed {
        version(root)
    } else {
        match (&binary, &unit) {
            (Fact::Known { .. }, Fact::Known { .. }) => Fact::known(None, DPKG),
            _ => Fact::absent(DPKG, NOT_CAPTURED),
        }
    };
    FabricManager {
        version_file,
        binary,
        unit,
    }
}

fn version(root: &Root) -> Fact<Option<(String, String)>> {
    let mut why = Vec::new();
    match root.read_trimmed(DPKG) {
        Ok(text) => {
            if let Some(v) = dpkg_version(&text) {
                return Fact::known(Some((v, DPKG.to_string())), DPKG);
            }
            why.push(format!("{DPKG}: no installed nvidia-fabricmanager package"));
        }
        Err(e) => why.push(format!("{DPKG}: {}", e.reason())),
    }
    match root.read_trimmed(LOG) {
        Ok(text) => {
            if let Some(v) = log_version(&text) {
                return Fact::known(Some((v, LOG.to_string())), LOG);
            }
            why.push(format!("{LOG}: no version line"));
        }
        Err(e) => why.push(format!("{LOG}: {}", e.reason())),
    }
    Fact::absent(format!("{DPKG}, {LOG}"), why.join("; "))
}

/// The installed `nvidia-fabricmanager[-<branch>]` package's version, its Debian revision cut
/// (`550.54.15-1` -> `550.54.15`).
pub fn dpkg_version(status: &str) -> Option<String> {
    for stanza in status.split("\n\n") {
        let field = |k: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        let Some(pkg) = field("Package:") else {
            continue;
        };
        let ours = pkg == "nvidia-fabricmanager"
            || pkg
                .strip_prefix("nvidia-fabricmanager-")
                .is_some_and(|b| b.chars().all(|c| c.is_ascii_digit()));
        if !ours
            || !field("Status:").is_some_and(|s| s.ends_with("installed") && !s.contains("not"))
        {
            continue;
        }
        let v = field("Version:")?;
        let v = v.split_once(':').map(|(_, r)| r).unwrap_or(&v);
        return Some(v.split('-').next().unwrap_or(v).to_string());
    }
    None
}

/// The last `Fabric Manager version ...` of its log (`nv-fabricmanager --version` prints
/// `Fabric Manager version is : 550.54.15`).
pub fn log_version(log: &str) -> Option<String> {
    log.lines().rev().find_map(|l| {
        let at = l.find("Fabric Manager version")?;
        l[at..]
            .split(|c: char| c.is_whitespace() || c == ':')
            .find(|t| t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .map(String::from)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_and_log_versions() {
        let s = "Package: libc6\nStatus: install ok installed\nVersion: 2.36\n\nPackage: nvidia-fabricmanager-550\nStatus: install ok installed\nVersion: 550.54.15-1\n";
        assert_eq!(dpkg_version(s).as_deref(), Some("550.54.15"));
        let removed = "Package: nvidia-fabricmanager-550\nStatus: deinstall ok config-files\nVersion: 550.54.15-1\n";
        assert_eq!(dpkg_version(removed), None);
        assert_eq!(
            log_version("x\nFabric Manager version is : 580.159.04\n").as_deref(),
            Some("580.159.04")
        );
        assert_eq!(log_version("nothing"), None);
    }
}
