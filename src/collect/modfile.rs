//! Kernel module files on disk for the running kernel (issue 39 item 5): `nvidia-peermem.ko*`
//! and the `ib_core.ko*` that `modprobe` would give it, found as `modprobe` finds them (in
//! `/lib/modules/<release>/modules.dep`), decompressed (`.zst`, `.xz`, `.gz`) and read by the
//! pure crate's ELF reader.

use super::util::*;
use crate::source::reader::Root;
use gdrdoctor_checks::model::*;
use std::io::Read;

/// Decompressed modules larger than this are refused (a real one is a few MiB at most).
const MAX_MODULE: u64 = 64 << 20;

pub(super) fn collect(root: &Root) -> PeermemAbi {
    // As the host's kernel release: osrelease, else /proc/version. Neither on a whole node (or
    // a whole capture) is damage, not "nothing to judge": the mutation campaign found the
    // missing osrelease turning this check's fail into a skip and the exit code into 0.
    let release = match root.read_trimmed("/proc/sys/kernel/osrelease") {
        Ok(r) => Ok(r),
        Err(e) => match root.read_trimmed("/proc/version") {
            Ok(v) => super::host::release_of_proc_version(&v).ok_or(e),
            Err(_) => Err(e),
        },
    };
    let release = match release {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_not_found() && !root.is_complete() {
                format!("kernel release unknown: {NOT_CAPTURED}")
            } else {
                format!(
                    "{DAMAGED}the kernel release is unreadable (/proc/sys/kernel/osrelease: {}; /proc/version neither)",
                    e.reason()
                )
            };
            return PeermemAbi {
                peermem: Fact::absent("/proc/sys/kernel/osrelease", why.clone()),
                ib_core: Fact::absent("/proc/sys/kernel/osrelease", why),
            };
        }
    };
    let base = format!("/lib/modules/{release}");
    let dep_path = format!("{base}/modules.dep");
    let dep = match root.read_trimmed(&dep_path) {
        Ok(d) => d,
        Err(e) => {
            let why = if e.is_not_found() && !root.is_complete() {
                NOT_CAPTURED.to_string()
            } else if e.is_not_found() {
                match root.exists(&base) {
                    // The kernel's module directory without its index: modprobe finds no
                    // module by name. Not "nothing installed" (the sweep of 2026-12-07 found
                    // the ABI break turning into a skip, exit 0, with this file removed).
                    Ok(true) => format!("{DAMAGED}{base} has no modules.dep (depmod has not run for this kernel, or the file was lost): modprobe cannot find any module by name"),
                    _ => format!("no {base}: this kernel's modules are not installed here (a container without the host's /lib/modules?)"),
                }
            } else {
                // There and unreadable (a directory, an I/O error): not "nothing installed".
                format!("{DAMAGED}{dep_path}: {}", e.reason())
            };
            return PeermemAbi {
                peermem: Fact::absent(dep_path.clone(), why.clone()),
                ib_core: Fact::absent(dep_path, why),
            };
        }
    };
    // depmod writes every module of the kernel into it, one `<path>.ko[.zst|.xz|.gz]:` line
    // each: an empty index, or one where no line names a module, is damage (the review of
    // 2026-12-07: binary garbage there read as "no nvidia-peermem installed", a skip).
    let names_a_module = dep.lines().any(|l| {
        l.split_once(':')
            .is_some_and(|(file, _)| module_name(file.trim()).is_some())
    });
    if dep.trim().is_empty() || !names_a_module {
        let why = if dep.trim().is_empty() {
            format!("{DAMAGED}{dep_path} is empty (depmod lists every module of the kernel)")
        } else {
            format!("{DAMAGED}no line of {dep_path} names a module (`<path>.ko: <dependencies>`, as depmod writes it)")
        };
        return PeermemAbi {
            peermem: Fact::absent(dep_path.clone(), why.clone()),
            ib_core: Fact::absent(dep_path, why),
        };
    }
    PeermemAbi {
        peermem: module(root, &base, &dep_path, &dep, "nvidia_peermem"),
        ib_core: module(root, &base, &dep_path, &dep, "ib_core"),
    }
}

/// A module's name from its file (`.../nvidia-peermem.ko.zst` -> `nvidia_peermem`).
pub fn module_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.zst"))
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.gz"))?;
    Some(stem.replace('-', "_"))
}

fn module(
    root: &Root,
    base: &str,
    dep_path: &str,
    dep: &str,
    name: &str,
) -> Fact<Option<ModuleFile>> {
    let Some(rel) = dep.lines().find_map(|l| {
        let (file, _) = l.split_once(':')?;
        (module_name(file.trim()).as_deref() == Some(name)).then(|| file.trim().to_string())
    }) else {
        return Fact::known(None, dep_path.to_string());
    };
    let path = if rel.starts_with('/') {
        rel
    } else {
        format!("{base}/{rel}")
    };
    let bytes = match root.read(&path) {
        Ok(b) => b,
        Err(e) => return Fact::absent(path, format!("listed in modules.dep: {}", e.reason())),
    };
    let elf = match decompress(&path, &bytes) {
        Ok(b) => b,
        Err(why) => return Fact::absent(path, why),
    };
    match gdrdoctor_checks::elf::module_info(&elf) {
        Ok(mut m) => {
            m.path = path.clone();
            Fact::known(Some(m), path)
        }
        Err(why) => Fact::absent(path, format!("damaged module file: {why}")),
    }
}

/// The ELF inside a module file, by its name's suffix.
pub fn decompress(path: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let capped = |r: &mut dyn Read, out: &mut Vec<u8>, kind: &str| -> Result<(), String> {
        r.take(MAX_MODULE + 1)
            .read_to_end(out)
            .map_err(|e| format!("damaged {kind} module: {e}"))?;
        if out.len() as u64 > MAX_MODULE {
            return Err(format!("decompresses to more than {MAX_MODULE} bytes"));
        }
        Ok(())
    };
    if path.ends_with(".zst") {
        let mut d = ruzstd::decoding::StreamingDecoder::new(bytes)
            .map_err(|e| format!("damaged zst module: {e}"))?;
        capped(&mut d, &mut out, "zst")?;
    } else if path.ends_with(".xz") {
        let mut input = std::io::BufReader::new(bytes);
        let mut w = Capped(Vec::new());
        lzma_rs::xz_decompress(&mut input, &mut w)
            .map_err(|e| format!("damaged xz module: {e}"))?;
        out = w.0;
    } else if path.ends_with(".gz") {
        let mut d = flate2::read::GzDecoder::new(bytes);
        capped(&mut d, &mut out, "gz")?;
    } else {
        out = bytes.to_vec();
    }
    Ok(out)
}

/// A writer that refuses more than [`MAX_MODULE`] bytes (lzma-rs writes, it is not read).
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.0.len() as u64 + b.len() as u64 > MAX_MODULE {
            return Err(std::io::Error::other("module too large"));
        }
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn module_names_as_modprobe_spells_them() {
        assert_eq!(
            module_name("updates/dkms/nvidia-peermem.ko.zst").as_deref(),
            Some("nvidia_peermem")
        );
        assert_eq!(
            module_name("kernel/drivers/infiniband/core/ib_core.ko").as_deref(),
            Some("ib_core")
        );
        assert_eq!(module_name("x.o"), None);
    }

    #[test]
    fn gzip_round_trips_and_garbage_is_an_error() {
        use std::io::Write;
        let elf = gdrdoctor_checks::elf::build_module("v", "", &[], &[]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&elf).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(decompress("a.ko.gz", &gz).unwrap(), elf);
        assert!(decompress("a.ko.zst", b"not zstd").is_err());
        assert!(decompress("a.ko.xz", b"not xz").is_err());
        assert_eq!(decompress("a.ko", b"raw").unwrap(), b"raw");
    }

    /// `.ko.zst` (Ubuntu 24.04, Fedora) and `.ko.xz` (RHEL, SUSE) as the distributions' own
    /// compressors write them: the zstd and xz programs, where installed.
    #[test]
    fn zstd_and_xz_modules_from_the_real_compressors() {
        let elf = gdrdoctor_checks::elf::build_module(
            "6.8.0-49-generic SMP mod_unload modversions ",
            "ib_core",
            &[("ib_register_peer_memory_client", 7)],
            &[],
        );
        for (tool, args, suffix) in [
            ("zstd", &["-q", "-c", "--check"][..], "zst"),
            ("xz", &["-c", "--check=crc32"][..], "xz"),
        ] {
            let child = std::process::Command::new(tool)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn();
            let Ok(mut child) = child else {
                eprintln!("skip: {tool} is not installed: its modules are not tested here");
                continue;
            };
            {
                use std::io::Write;
                let mut stdin = child.stdin.take().unwrap();
                stdin.write_all(&elf).unwrap();
            }
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{tool} failed");
            let path = format!("nvidia-peermem.ko.{suffix}");
            let back = decompress(&path, &out.stdout).unwrap();
            assert_eq!(back, elf, "{tool}");
            let m = gdrdoctor_checks::elf::module_info(&back).unwrap();
            assert_eq!(m.needs[0].name, "ib_register_peer_memory_client");
            // A truncated file is an error naming the format, not a panic.
            let cut = &out.stdout[..out.stdout.len() / 2];
            let err = decompress(&path, cut).unwrap_err();
            assert!(err.contains(suffix), "{err}");
        }
    }
}
