//! The add-ons (issue 39): gdrcopy's `gdrdrv` and its device node, the peer-memory module file
//! on disk against `ib_core`'s, NVIDIA Fabric Manager; and the CPU's model name.

use super::util::*;
use crate::source::reader::Root;
use crate::source::Origin;
use gdrdoctor_checks::model::*;
use std::collections::BTreeMap;

/// Where a snapshot keeps the device nodes' `lstat` (a tar of sysfs cannot hold them).
pub const DEV_NODES_PATH: &str = "/gdrdoctor/dev-nodes.json";

/// The device nodes the add-on checks read.
const DEV_NODES: &[&str] = &["/dev/gdrdrv"];

pub(super) fn collect(root: &Root, origin: Origin) -> Addons {
    let gdrcopy = Gdrcopy {
        module_version: optional_file(root, "/sys/module/gdrdrv/version", "/sys/module"),
        params: optional_file(root, "/proc/driver/gdrdrv/params", "/proc/driver")
            .map(|t| t.as_deref().map(gdrdoctor_checks::parse::colon_map)),
        dev: dev_node(root, origin, "/dev/gdrdrv"),
    };
    Addons {
        gdrcopy,
        peermem_abi: super::modfile::collect(root),
        fabric_manager: super::fabric::collect(root),
    }
}

/// `/proc/cpuinfo`'s first `model name` (x86; Arm and POWER print none).
pub(super) fn cpu_model(root: &Root) -> Fact<String> {
    parsed(root, "/proc/cpuinfo", |t| {
        t.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name" && !v.trim().is_empty()).then(|| v.trim().to_string())
        })
    })
}

/// A device node: `lstat` on a live root (or the host's, through `--host-root`), the recorded
/// one in a snapshot.
fn dev_node(root: &Root, origin: Origin, path: &str) -> Fact<Option<DevNode>> {
    match origin {
        Origin::Live | Origin::HostRoot => {
            let p = root.base().join(path.trim_start_matches('/'));
            let shown = p.display().to_string();
            // A host root is the host's `/` mounted in a container: its `dev` is the directory
            // on the root file system, not the host's devtmpfs, unless that was mounted too. No
            // `dev/null` there: the host's device nodes cannot be seen, which is not "absent".
            if origin == Origin::HostRoot {
                use std::os::unix::fs::FileTypeExt;
                let null = root.base().join("dev/null");
                let devtmpfs =
                    std::fs::symlink_metadata(&null).is_ok_and(|m| m.file_type().is_char_device());
                if !devtmpfs {
                    return Fact::absent(
                        shown,
                        format!(
                            "the host's /dev is not visible under the host root ({} is no device): mount it there too (a hostPath /dev)",
                            null.display()
                        ),
                    );
                }
            }
            match std::fs::symlink_metadata(&p) {
                Ok(m) => Fact::known(Some(dev_of(&m)), shown),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Fact::known(None, shown),
                Err(e) => Fact::absent(shown, e.to_string()),
            }
        }
        Origin::Snapshot => match root.read(DEV_NODES_PATH) {
            Ok(b) => match serde_json::from_slice::<BTreeMap<String, Option<DevNode>>>(&b) {
                Ok(m) => match m.get(path) {
                    Some(d) => Fact::known(*d, format!("{path} (via {DEV_NODES_PATH})")),
                    None => Fact::absent(path, format!("not recorded in {DEV_NODES_PATH}")),
                },
                Err(e) => Fact::absent(path, format!("{DAMAGED}{DEV_NODES_PATH}: {e}")),
            },
            Err(e) if e.is_not_found() => Fact::absent(
                path,
                format!("not in this snapshot ({DEV_NODES_PATH}: taken by an older gdrdoctor)"),
            ),
            Err(e) => Fact::absent(path, e.reason()),
        },
        Origin::Foreign => Fact::absent(path, NOT_CAPTURED),
    }
}

fn dev_of(m: &std::fs::Metadata) -> DevNode {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    DevNode {
        char_device: m.file_type().is_char_device(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
    }
}

/// The snapshot's record of the device nodes (every one, known or not there; one that could
/// not be read is left out, and reads back as "not recorded").
pub fn snapshot_file(node: &Node) -> Option<(String, Vec<u8>)> {
    let mut m: BTreeMap<&str, Option<DevNode>> = BTreeMap::new();
    for path in DEV_NODES {
        let f = match *path {
            "/dev/gdrdrv" => &node.addons.gdrcopy.dev,
            _ => continue,
        };
        if let Some(d) = f.get() {
            m.insert(path, *d);
        }
    }
    let json = serde_json::to_vec_pretty(&m).ok()?;
    Some((DEV_NODES_PATH.to_string(), json))
}
