//! A small ELF reader for kernel module files (`.ko`, decompressed by the caller): `.modinfo`,
//! `__versions` (the CRCs a module was built against), the extended `__version_ext_crcs` /
//! `__version_ext_names` pair, and from `.symtab` its undefined symbols and its exports
//! (`__ksymtab_<name>`) with their CRCs (`__crc_<name>`, absolute or a `u32` in `__kcrctab`).
//!
//! Every offset and size is checked against the file before it is read; a damaged file is an
//! `Err` naming what is wrong, never a panic. 64-bit ELF, either byte order (x86_64, aarch64,
//! ppc64); a 32-bit module is refused with its reason.

use crate::model::{ModuleFile, SymbolCrc};
use std::collections::BTreeMap;

/// Caps, so that a damaged header cannot make the reader walk for ever.
const MAX_SECTIONS: usize = 1 << 16;
const MAX_SYMBOLS: usize = 1 << 20;
const SHN_UNDEF: u16 = 0;
const SHN_ABS: u16 = 0xfff1;
const SHT_SYMTAB: u32 = 2;
/// `struct modversion_info` on a 64-bit kernel: an `unsigned long` CRC, then
/// `MODULE_NAME_LEN` (64 - 8) bytes of name.
const MODVERSION_ENTRY: usize = 64;

struct Elf<'a> {
    b: &'a [u8],
    big: bool,
}

impl<'a> Elf<'a> {
    fn bytes(&self, off: u64, len: u64) -> Result<&'a [u8], String> {
        let start = usize::try_from(off).map_err(|_| format!("offset {off:#x} too large"))?;
        let len = usize::try_from(len).map_err(|_| format!("length {len:#x} too large"))?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| format!("range {start:#x}+{len:#x} overflows"))?;
        self.b.get(start..end).ok_or_else(|| {
            format!(
                "range {start:#x}..{end:#x} beyond the file's {} bytes",
                self.b.len()
            )
        })
    }
    fn u16(&self, off: u64) -> Result<u16, String> {
        let s = self.bytes(off, 2)?;
        let a = [s[0], s[1]];
        Ok(if self.big {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        })
    }
    fn u32(&self, off: u64) -> Result<u32, String> {
        let s = self.bytes(off, 4)?;
        let a = [s[0], s[1], s[2], s[3]];
        Ok(if self.big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    }
    fn u64(&self, off: u64) -> Result<u64, String> {
        let s = self.bytes(off, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(if self.big {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        })
    }
}

#[derive(Debug, Clone)]
struct Section {
    name: String,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
}

/// A NUL-terminated string at `off` of `table` (lossy UTF-8; a missing NUL is an error).
fn cstr(table: &[u8], off: usize) -> Result<String, String> {
    let rest = table
        .get(off..)
        .ok_or_else(|| format!("string offset {off:#x} beyond its table"))?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| format!("string at {off:#x} without its NUL"))?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

fn sections(e: &Elf<'_>) -> Result<Vec<Section>, String> {
    let shoff = e.u64(0x28)?;
    let shentsize = u64::from(e.u16(0x3a)?);
    let shnum = usize::from(e.u16(0x3c)?);
    let shstrndx = usize::from(e.u16(0x3e)?);
    if shnum == 0 {
        return Err("no section headers".into());
    }
    if shentsize < 64 {
        return Err(format!("section header size {shentsize} below 64"));
    }
    if shnum > MAX_SECTIONS {
        return Err(format!("{shnum} sections"));
    }
    let mut raw = Vec::with_capacity(shnum);
    for i in 0..shnum as u64 {
        let h = shoff
            .checked_add(i.checked_mul(shentsize).ok_or("section table overflows")?)
            .ok_or("section table overflows")?;
        raw.push((
            e.u32(h)?,
            e.u32(h + 4)?,
            e.u64(h + 24)?,
            e.u64(h + 32)?,
            e.u32(h + 40)?,
        ));
    }
    let names = raw
        .get(shstrndx)
        .ok_or_else(|| format!("section name table index {shstrndx} of {shnum}"))?;
    let names = e.bytes(names.2, names.3)?;
    raw.into_iter()
        .map(|(name, kind, offset, size, link)| {
            Ok(Section {
                name: cstr(names, name as usize)?,
                kind,
                offset,
                size,
                link,
            })
        })
        .collect()
}

/// Read a module file's bytes (already decompressed).
pub fn module_info(b: &[u8]) -> Result<ModuleFile, String> {
    if b.len() < 0x40 || b.get(0..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    match b.get(4) {
        Some(2) => {}
        Some(1) => return Err("a 32-bit ELF module: not read".into()),
        _ => return Err("unknown ELF class".into()),
    }
    let big = match b.get(5) {
        Some(1) => false,
        Some(2) => true,
        _ => return Err("unknown ELF byte order".into()),
    };
    let e = Elf { b, big };
    let secs = sections(&e)?;
    let find = |n: &str| secs.iter().find(|s| s.name == n);
    let mut m = ModuleFile::default();
    if let Some(s) = find(".modinfo") {
        for kv in e.bytes(s.offset, s.size)?.split(|&c| c == 0) {
            let kv = String::from_utf8_lossy(kv);
            if let Some((k, v)) = kv.split_once('=') {
                match k {
                    "vermagic" => m.vermagic = Some(v.to_string()),
                    "version" => m.version = Some(v.to_string()),
                    "depends" => {
                        m.depends = v
                            .split(',')
                            .filter(|d| !d.is_empty())
                            .map(String::from)
                            .collect()
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(s) = find("__versions") {
        let data = e.bytes(s.offset, s.size)?;
        if !data.len().is_multiple_of(MODVERSION_ENTRY) {
            return Err(format!(
                "__versions is {} bytes, not a whole number of {MODVERSION_ENTRY}-byte entries",
                data.len()
            ));
        }
        for (i, entry) in data.chunks_exact(MODVERSION_ENTRY).enumerate() {
            let crc = e.u64(s.offset + (i * MODVERSION_ENTRY) as u64)?;
            let name = cstr(&entry[8..], 0).map_err(|w| format!("__versions entry {i}: {w}"))?;
            m.needs.push(SymbolCrc {
                name,
                crc: Some(crc as u32),
            });
        }
    }
    if let (Some(c), Some(n)) = (find("__version_ext_crcs"), find("__version_ext_names")) {
        let names = e.bytes(n.offset, n.size)?;
        let names: Vec<String> = names
            .split(|&c| c == 0)
            .filter(|x| !x.is_empty())
            .map(|x| String::from_utf8_lossy(x).into_owned())
            .collect();
        if c.size != 4 * names.len() as u64 {
            return Err(format!(
                "__version_ext_crcs holds {} bytes for {} names",
                c.size,
                names.len()
            ));
        }
        for (i, name) in names.into_iter().enumerate() {
            let crc = e.u32(c.offset + 4 * i as u64)?;
            m.needs.push(SymbolCrc {
                name,
                crc: Some(crc),
            });
        }
    }
    if let Some(st) = secs.iter().find(|s| s.kind == SHT_SYMTAB) {
        let strtab = secs
            .get(st.link as usize)
            .ok_or_else(|| format!(".symtab links to section {} of {}", st.link, secs.len()))?;
        let strtab = e.bytes(strtab.offset, strtab.size)?;
        let n = (st.size / 24) as usize;
        if n > MAX_SYMBOLS {
            return Err(format!("{n} symbols"));
        }
        let mut exports: Vec<String> = Vec::new();
        let mut crcs: BTreeMap<String, u32> = BTreeMap::new();
        for i in 1..n as u64 {
            let at = st.offset + i * 24;
            let name = cstr(strtab, e.u32(at)? as usize)?;
            let info = e.bytes(at + 4, 1)?[0];
            let shndx = e.u16(at + 6)?;
            let value = e.u64(at + 8)?;
            let bind = info >> 4;
            if name.is_empty() {
                continue;
            }
            if shndx == SHN_UNDEF && (bind == 1 || bind == 2) {
                m.undefined.push(name);
                continue;
            }
            if let Some(x) = name.strip_prefix("__ksymtab_") {
                if !matches!(x, "strings" | "gpl") && !x.is_empty() {
                    exports.push(x.to_string());
                }
            } else if let Some(x) = name.strip_prefix("__crc_") {
                let crc = if shndx == SHN_ABS {
                    value as u32
                } else {
                    let sec = secs
                        .get(usize::from(shndx))
                        .ok_or_else(|| format!("__crc_{x} in section {shndx} of {}", secs.len()))?;
                    if value.checked_add(4).is_none_or(|end| end > sec.size) {
                        return Err(format!("__crc_{x} beyond its section {}", sec.name));
                    }
                    e.u32(sec.offset + value)?
                };
                crcs.insert(x.to_string(), crc);
            }
        }
        exports.sort();
        exports.dedup();
        m.exports = exports
            .into_iter()
            .map(|name| SymbolCrc {
                crc: crcs.get(&name).copied(),
                name,
            })
            .collect();
        m.undefined.sort();
        m.undefined.dedup();
    }
    Ok(m)
}

/// Build a small relocatable ELF64 (little-endian) with the given sections, for tests and
/// fixtures: `(name, type, bytes, link)`; a `.shstrtab` is added last.
#[doc(hidden)]
pub fn build(sections: &[(&str, u32, Vec<u8>, u32)]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut name_at = Vec::new();
    for (n, ..) in sections.iter().map(|s| (s.0, 0)).chain([(".shstrtab", 0)]) {
        name_at.push(names.len() as u32);
        names.extend_from_slice(n.as_bytes());
        names.push(0);
    }
    let mut out = vec![0u8; 64];
    out[0..4].copy_from_slice(b"\x7fELF");
    out[4] = 2;
    out[5] = 1;
    out[6] = 1;
    out[16..18].copy_from_slice(&1u16.to_le_bytes());
    out[18..20].copy_from_slice(&62u16.to_le_bytes());
    let mut placed = Vec::new();
    for (_, _, data, _) in sections {
        placed.push((out.len() as u64, data.len() as u64));
        out.extend_from_slice(data);
    }
    placed.push((out.len() as u64, names.len() as u64));
    out.extend_from_slice(&names);
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
    let shoff = out.len() as u64;
    out.extend_from_slice(&[0u8; 64]);
    let kinds: Vec<(u32, u32)> = sections
        .iter()
        .map(|s| (s.1, s.3))
        .chain([(3, 0)])
        .collect();
    for (i, (kind, link)) in kinds.iter().enumerate() {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&name_at[i].to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[24..32].copy_from_slice(&placed[i].0.to_le_bytes());
        h[32..40].copy_from_slice(&placed[i].1.to_le_bytes());
        h[40..44].copy_from_slice(&link.to_le_bytes());
        out.extend_from_slice(&h);
    }
    let n = kinds.len() as u16 + 1;
    out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    out[0x3c..0x3e].copy_from_slice(&n.to_le_bytes());
    out[0x3e..0x40].copy_from_slice(&(n - 1).to_le_bytes());
    out
}

/// A module for tests and fixtures: `.modinfo` (vermagic, depends), `__versions` (needs),
/// and a `.symtab` with the undefined `needs`, `__ksymtab_<e>` and absolute `__crc_<e>` of
/// each export.
#[doc(hidden)]
pub fn build_module(
    vermagic: &str,
    depends: &str,
    needs: &[(&str, u32)],
    exports: &[(&str, u32)],
) -> Vec<u8> {
    let modinfo = format!("license=GPL\0depends={depends}\0vermagic={vermagic}\0").into_bytes();
    let mut versions = Vec::new();
    for (name, crc) in needs {
        let mut e = vec![0u8; MODVERSION_ENTRY];
        e[0..8].copy_from_slice(&u64::from(*crc).to_le_bytes());
        let nb = name.as_bytes();
        let l = nb.len().min(MODVERSION_ENTRY - 9);
        e[8..8 + l].copy_from_slice(&nb[..l]);
        versions.extend_from_slice(&e);
    }
    let mut strtab = vec![0u8];
    let mut syms = vec![0u8; 24];
    let mut sym = |name: &str, info: u8, shndx: u16, value: u64| {
        let at = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&at.to_le_bytes());
        s[4] = info;
        s[6..8].copy_from_slice(&shndx.to_le_bytes());
        s[8..16].copy_from_slice(&value.to_le_bytes());
        syms.extend_from_slice(&s);
    };
    for (name, _) in needs {
        sym(name, 0x10, SHN_UNDEF, 0);
    }
    for (name, crc) in exports {
        sym(&format!("__ksymtab_{name}"), 0x00, 1, 0);
        sym(&format!("__crc_{name}"), 0x10, SHN_ABS, u64::from(*crc));
        sym(name, 0x12, 1, 0);
    }
    build(&[
        (".modinfo", 1, modinfo, 0),
        ("__versions", 1, versions, 0),
        (".symtab", SHT_SYMTAB, syms, 4),
        (".strtab", 3, strtab, 0),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_module_reads_back_as_built() {
        let b = build_module(
            "6.8.0-49-generic SMP preempt mod_unload modversions ",
            "ib_core,nvidia",
            &[
                ("module_layout", 0x1234_5678),
                ("ib_register_peer_memory_client", 0xdead_beef),
            ],
            &[("nv_peer_thing", 0x0bad_cafe)],
        );
        let m = module_info(&b).unwrap();
        assert_eq!(
            m.vermagic.as_deref(),
            Some("6.8.0-49-generic SMP preempt mod_unload modversions ")
        );
        assert_eq!(m.depends, vec!["ib_core", "nvidia"]);
        assert_eq!(m.needs.len(), 2);
        assert_eq!(m.needs[1].name, "ib_register_peer_memory_client");
        assert_eq!(m.needs[1].crc, Some(0xdead_beef));
        assert_eq!(
            m.undefined,
            vec!["ib_register_peer_memory_client", "module_layout"]
        );
        assert_eq!(
            m.exports,
            vec![SymbolCrc {
                name: "nv_peer_thing".into(),
                crc: Some(0x0bad_cafe)
            }]
        );
    }

    #[test]
    fn a_crc_in_kcrctab_is_read_from_its_section() {
        // __crc_x at offset 4 of section 1 (__kcrctab) as 6.x kernels link it.
        let mut strtab = vec![0u8];
        strtab.extend_from_slice(b"__ksymtab_x\0__crc_x\0");
        let mut syms = vec![0u8; 24];
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&1u32.to_le_bytes());
        s[6..8].copy_from_slice(&2u16.to_le_bytes());
        syms.extend_from_slice(&s);
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&13u32.to_le_bytes());
        s[4] = 0x10;
        s[6..8].copy_from_slice(&1u16.to_le_bytes());
        s[8..16].copy_from_slice(&4u64.to_le_bytes());
        syms.extend_from_slice(&s);
        let mut kcrc = vec![0u8; 4];
        kcrc.extend_from_slice(&0x1122_3344u32.to_le_bytes());
        let b = build(&[
            ("__kcrctab", 1, kcrc, 0),
            ("__ksymtab", 1, vec![0u8; 8], 0),
            (".symtab", 2, syms, 4),
            (".strtab", 3, strtab, 0),
        ]);
        let m = module_info(&b).unwrap();
        assert_eq!(
            m.exports,
            vec![SymbolCrc {
                name: "x".into(),
                crc: Some(0x1122_3344)
            }]
        );
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        assert!(module_info(b"").is_err());
        assert!(module_info(b"\x7fELF").is_err());
        let good = build_module("v", "", &[("a", 1)], &[("b", 2)]);
        // Every truncation and every single-byte change: an answer or an error, no panic.
        for n in 0..good.len() {
            let _ = module_info(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 0x7f, 0xff, 0x80, 1] {
                let mut b = good.clone();
                b[i] = v;
                let _ = module_info(&b);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            let _ = module_info(&b);
            if b.len() >= 6 {
                b[0..6].copy_from_slice(b"\x7fELF\x02\x01");
                let _ = module_info(&b);
            }
        }
    }
}
