//! `kmod.peermem-abi` (issue 39 item 5): will the `nvidia-peermem.ko` on disk for the running
//! kernel load at the next boot or `modprobe`? The kernel's module loader does what this
//! repeats: the vermagic must name this kernel, every symbol the module takes must be exported
//! (else `Unknown symbol X (err -2)`), and with modversions the CRC it was built against must
//! be the exporter's (else `disagrees about version of symbol X`). The exporter of the
//! peer-memory API is `ib_core` (MOFED/DOCA-OFED's, or a vendor kernel's): the one
//! `modules.dep` names for this kernel.

use crate::checks::Needs;
use crate::model::{Fact, ModuleFile, Node};
use crate::report::{Finding, Status};

pub const ID: &str = "kmod.peermem-abi";

pub const NEEDS: Needs = Needs {
    kinds: &[],
    what: "the module files on disk (nvidia-peermem.ko, ib_core.ko)",
    command:
        "modinfo nvidia-peermem ib_core; modprobe --dump-modversions $(modinfo -n nvidia-peermem)",
};

/// The symbol nvidia-peermem registers with; without it its init returns -EINVAL.
const REGISTER: &str = "ib_register_peer_memory_client";

const FIX: &str = "rebuild nvidia-peermem against the ib_core that is installed: with the driver's DKMS package `sudo dkms remove nvidia/<version> --all && sudo dkms install nvidia/<version>` (or reinstall the NVIDIA driver) after MOFED/DOCA-OFED is installed, so its build finds MOFED's Module.symvers (/usr/src/ofa_kernel/default/Module.symvers); install MOFED/DOCA-OFED before the driver at every upgrade; or drop nvidia-peermem for the dma-buf path (open kernel modules, kernel >= 5.12, NCCL >= 2.13)";

fn skip_or_error(reason: &str) -> Status {
    if reason.starts_with("damaged")
        || crate::model::is_damaged(reason)
        || reason.contains("listed in modules.dep")
    {
        Status::Error
    } else {
        Status::Skip
    }
}

pub fn peermem_abi(node: &Node) -> Vec<Finding> {
    let abi = &node.addons.peermem_abi;
    let pm = match &abi.peermem {
        Fact::Absent { source, reason } => {
            return vec![Finding::new(
                ID,
                skip_or_error(reason),
                "node",
                format!("the nvidia-peermem module on disk cannot be read: {reason}"),
            )
            .evidence(source.clone(), reason.clone())];
        }
        Fact::Known {
            value: None,
            source,
        } => {
            return vec![Finding::new(
                ID,
                Status::Skip,
                "node",
                "no nvidia-peermem module is installed for the running kernel; kmod.nvidia-peermem judges the peer-memory path",
            )
            .evidence(source.clone(), "no nvidia-peermem.ko in modules.dep")];
        }
        Fact::Known {
            value: Some(m),
            source,
        } => (m, source.clone()),
    };
    let (pm, pm_src) = pm;
    let release = node.kernel_release.get();
    let mut problems: Vec<String> = Vec::new();
    let mut f_evidence: Vec<(String, String)> = vec![(
        pm_src.clone(),
        format!(
            "vermagic {:?}; depends {}; {} symbols with CRCs in __versions",
            pm.vermagic.as_deref().unwrap_or("(none)"),
            if pm.depends.is_empty() {
                "(none)".into()
            } else {
                pm.depends.join(",")
            },
            pm.needs.len()
        ),
    )];
    // The kernel it was built for: vermagic's first word.
    match (
        pm.vermagic
            .as_deref()
            .and_then(|v| v.split_whitespace().next()),
        release,
    ) {
        (Some(v), Some(r)) if v != r => problems.push(format!(
            "it was built for kernel {v}, not the running {r}: modprobe refuses it (\"Exec format error\", dmesg \"disagrees about version of symbol module_layout\" or \"version magic\")"
        )),
        _ => {}
    }
    let takes = |name: &str| {
        pm.needs.iter().any(|s| s.name == name) || pm.undefined.iter().any(|s| s == name)
    };
    let read_symbols = !pm.needs.is_empty() || !pm.undefined.is_empty();
    if read_symbols && !takes(REGISTER) {
        problems.push(format!(
            "it does not take {REGISTER}: it was built without the peer-memory api (no MOFED/DOCA-OFED headers at build time), so its init returns -EINVAL (\"modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\")"
        ));
    }
    let ib = match &abi.ib_core {
        Fact::Known {
            value: Some(ib),
            source,
        } => {
            f_evidence.push((
                source.clone(),
                format!(
                    "vermagic {:?}; exports {} symbols, {REGISTER} {}",
                    ib.vermagic.as_deref().unwrap_or("(none)"),
                    ib.exports.len(),
                    crc_text(ib, REGISTER)
                ),
            ));
            Some(ib)
        }
        Fact::Known {
            value: None,
            source,
        } => {
            if takes(REGISTER) {
                problems.push(format!(
                    "no ib_core module is installed for this kernel: nothing exports {REGISTER} (\"Unknown symbol {REGISTER} (err -2)\")"
                ));
            }
            f_evidence.push((source.clone(), "no ib_core.ko in modules.dep".into()));
            None
        }
        Fact::Absent { source, reason } => {
            if problems.is_empty() {
                return vec![Finding::new(
                    ID,
                    skip_or_error(reason),
                    "node",
                    format!("the ib_core module on disk cannot be read: {reason}"),
                )
                .evidence(source.clone(), reason.clone())];
            }
            None
        }
    };
    let mut from_ib = 0usize;
    if let Some(ib) = ib {
        let mut wanted: Vec<(&str, Option<u32>)> =
            pm.needs.iter().map(|s| (s.name.as_str(), s.crc)).collect();
        for u in &pm.undefined {
            if !wanted.iter().any(|(n, _)| n == u) {
                wanted.push((u.as_str(), None));
            }
        }
        for (name, crc) in wanted {
            match ib.exports.iter().find(|e| e.name == name) {
                Some(e) => {
                    from_ib += 1;
                    if let (Some(want), Some(have)) = (crc, e.crc) {
                        if want != have {
                            problems.push(format!(
                                "it was built against another ib_core: {name} has CRC 0x{want:08x} in its __versions, ib_core exports 0x{have:08x} (\"disagrees about version of symbol {name}\", then \"Unknown symbol {name} (err -22)\")"
                            ));
                        }
                    }
                }
                // The peer-memory api is ib_core's alone: not exported here means no one does.
                None if name.contains("peer_memory_client") => problems.push(format!(
                    "ib_core.ko for this kernel does not export {name} (an inbox ib_core without the peer-memory api, or MOFED removed): \"Unknown symbol {name} (err -2)\""
                )),
                None => {}
            }
        }
    }
    let release_text = release.map(String::as_str).unwrap_or("(unknown)");
    let mut f = if problems.is_empty() {
        if !read_symbols {
            Finding::new(
                ID,
                Status::Skip,
                "node",
                "the nvidia-peermem module has no symbol table or __versions: what it takes cannot be compared",
            )
        } else {
            Finding::new(
                ID,
                Status::Pass,
                "node",
                format!(
                    "nvidia-peermem on disk loads on kernel {release_text}: it takes {from_ib} symbols from ib_core, each exported{}, {REGISTER} included",
                    if pm.needs.is_empty() {
                        ""
                    } else {
                        " with the CRC it was built against"
                    }
                ),
            )
        }
    } else {
        let loaded = node.modules.present("nvidia_peermem") == Some(true);
        Finding::new(
            ID,
            Status::Fail,
            "node",
            format!(
                "nvidia-peermem on disk will not load {}: {}",
                if loaded {
                    "at the next boot or reload (the copy loaded now is an older build)"
                } else {
                    "(modprobe nvidia-peermem fails)"
                },
                problems.join("; ")
            ),
        )
        .fix(FIX)
    };
    for (s, o) in f_evidence {
        f = f.evidence(s, o);
    }
    if let Some(r) = release {
        f = f.evidence(node.kernel_release.source().to_string(), r.clone());
    }
    vec![f]
}

fn crc_text(m: &ModuleFile, name: &str) -> String {
    match m.exports.iter().find(|e| e.name == name) {
        Some(e) => match e.crc {
            Some(c) => format!("exported, CRC 0x{c:08x}"),
            None => "exported".into(),
        },
        None => "not exported".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::testing::*;

    fn module(vermagic: &str, needs: &[(&str, u32)], exports: &[(&str, u32)]) -> ModuleFile {
        let b = crate::elf::build_module(vermagic, "ib_core,nvidia", needs, exports);
        crate::elf::module_info(&b).unwrap()
    }

    fn node(pm: ModuleFile, ib: Option<ModuleFile>) -> Node {
        let mut n = switch_pair();
        n.addons.peermem_abi.peermem = known(Some(pm));
        n.addons.peermem_abi.ib_core = known(ib);
        n
    }

    const VM: &str = "6.8.0-45-generic SMP preempt mod_unload modversions ";

    fn one(n: &Node) -> Finding {
        let f = peermem_abi(n);
        assert_eq!(f.len(), 1);
        f.into_iter().next().unwrap()
    }

    #[test]
    fn matching_crcs_pass() {
        let pm = module(
            VM,
            &[(REGISTER, 0x1111), ("ib_umem_get", 0x2222), ("printk", 9)],
            &[],
        );
        let ib = module(VM, &[], &[(REGISTER, 0x1111), ("ib_umem_get", 0x2222)]);
        let f = one(&node(pm, Some(ib)));
        assert_eq!(f.status, Status::Pass, "{f:?}");
        assert!(f.message.contains("takes 2 symbols"), "{}", f.message);
    }

    #[test]
    fn a_changed_crc_fails_naming_the_symbol() {
        let pm = module(VM, &[(REGISTER, 0x1111)], &[]);
        let ib = module(VM, &[], &[(REGISTER, 0x9999)]);
        let f = one(&node(pm, Some(ib)));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message
                .contains("disagrees about version of symbol ib_register_peer_memory_client"),
            "{}",
            f.message
        );
    }

    #[test]
    fn an_inbox_ib_core_without_the_api_is_unknown_symbol() {
        let pm = module(VM, &[(REGISTER, 0x1111)], &[]);
        let ib = module(VM, &[], &[("ib_umem_get", 0x2222)]);
        let f = one(&node(pm, Some(ib)));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message
                .contains("Unknown symbol ib_register_peer_memory_client"),
            "{}",
            f.message
        );
        assert!(f.remediation.unwrap().contains("dkms"));
    }

    #[test]
    fn built_without_the_api_or_for_another_kernel_fails() {
        let pm = module(VM, &[("printk", 1)], &[]);
        let ib = module(VM, &[], &[(REGISTER, 1)]);
        let f = one(&node(pm, Some(ib.clone())));
        assert!(f.message.contains("Invalid argument"), "{}", f.message);
        let pm = module("6.5.0-1-generic SMP ", &[(REGISTER, 1)], &[]);
        let f = one(&node(pm, Some(ib)));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("built for kernel 6.5.0-1-generic"),
            "{}",
            f.message
        );
    }

    #[test]
    fn unreadable_or_absent_files_are_never_a_pass() {
        let mut n = switch_pair();
        n.addons.peermem_abi.peermem =
            Fact::absent("/lib/modules/x/modules.dep", "not in this capture");
        assert_eq!(one(&n).status, Status::Skip);
        n.addons.peermem_abi.peermem = Fact::absent(
            "/lib/modules/x/a.ko",
            "damaged module file: not an ELF file",
        );
        assert_eq!(one(&n).status, Status::Error);
        n.addons.peermem_abi.peermem = known(None);
        assert_eq!(one(&n).status, Status::Skip);
        let pm = module(VM, &[(REGISTER, 1)], &[]);
        let mut n = node(pm, None);
        n.addons.peermem_abi.ib_core =
            Fact::absent("/lib/modules/x/ib_core.ko", "damaged module file: x");
        assert_eq!(one(&n).status, Status::Error);
    }
}
