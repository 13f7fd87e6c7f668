#!/usr/bin/env python3
"""Check a release binary's dynamic linking, from the ELF itself (no binutils needed).

What it reads:
  - the version needs (.gnu.version_r): every GLIBC_x.y the binary asks the loader for, and
    (from .dynsym + .gnu.version) which imported symbol asks for which version;
  - DT_NEEDED: the shared libraries the loader must find before main();
  - the section table: whether .symtab / .debug_* are still there (not stripped);
  - e_machine: x86_64 or aarch64.

It fails (exit 1) when a symbol needs a glibc newer than --max-glibc, when a library outside
--allow-needed is NEEDED (CUDA, NVML, libibverbs and NCCL must stay dlopen'ed, so a node without
them still starts the binary), when --stripped is given and symbols remain, or when the machine
is not --machine. Exit 2: not a readable 64-bit little-endian ELF.

  python3 scripts/check-elf.py --max-glibc 2.17 --stripped --machine x86_64 BINARY
"""

import argparse
import struct
import sys

SHT_SYMTAB = 2
SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
DT_NEEDED = 1
MACHINES = {62: "x86_64", 183: "aarch64"}

# glibc and the compiler runtime: present on every Linux distribution the binary targets.
DEFAULT_ALLOWED = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
]


class ElfError(Exception):
    pass


def version_key(v):
    return tuple(int(p) for p in v.split("."))


def cstr(data, off):
    if off >= len(data):
        raise ElfError(f"string offset {off:#x} beyond the string table")
    end = data.find(b"\0", off)
    if end < 0:
        raise ElfError(f"unterminated string at {off:#x}")
    return data[off:end].decode("utf-8", "replace")


def read_elf(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ElfError(f"{path}: {e.strerror}")
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not a 64-bit little-endian ELF")
    (machine,) = struct.unpack_from("<H", data, 0x12)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0 or shentsize != 64 or shoff + shnum * 64 > len(data):
        raise ElfError(f"{path}: no readable section table")
    sections = []
    for i in range(shnum):
        (name, typ, _flags, _addr, off, size, link, info, _align, entsize) = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * 64
        )
        if typ != 8 and off + size > len(data):  # 8: SHT_NOBITS
            raise ElfError(f"{path}: section {i} runs past the end of the file")
        sections.append(dict(name=name, type=typ, off=off, size=size, link=link, info=info, entsize=entsize))
    if shstrndx >= len(sections):
        raise ElfError(f"{path}: bad section name table index")
    shstr = sections[shstrndx]
    shstr_data = data[shstr["off"] : shstr["off"] + shstr["size"]]
    for s in sections:
        s["nm"] = cstr(shstr_data, s["name"])

    def body(s):
        return data[s["off"] : s["off"] + s["size"]]

    def strtab(s):
        if s["link"] >= len(sections):
            raise ElfError(f"{path}: section {s['nm']} links to a missing string table")
        return body(sections[s["link"]])

    # Version needs: version index -> (file, version name).
    needs = {}
    for s in sections:
        if s["type"] != SHT_GNU_VERNEED:
            continue
        b, st = body(s), strtab(s)
        off = 0
        for _ in range(s["info"]):
            _ver, cnt, file_off, aux, nxt = struct.unpack_from("<HHIII", b, off)
            lib = cstr(st, file_off)
            a = off + aux
            for _ in range(cnt):
                _hash, _flags, other, name_off, anext = struct.unpack_from("<IHHII", b, a)
                needs[other] = (lib, cstr(st, name_off))
                if anext == 0:
                    break
                a += anext
            if nxt == 0:
                break
            off += nxt

    # Imported symbols and the version each one needs.
    imports = []
    dynsym = next((s for s in sections if s["type"] == SHT_DYNSYM), None)
    versym = next((s for s in sections if s["type"] == SHT_GNU_VERSYM), None)
    if dynsym is not None:
        b, st = body(dynsym), strtab(dynsym)
        vs = body(versym) if versym is not None else b""
        n = len(b) // 24
        for i in range(1, n):
            name_off, _info, _other, shndx, _value, _size = struct.unpack_from("<IBBHQQ", b, i * 24)
            if shndx != 0:
                continue
            ver = None
            if 2 * i + 2 <= len(vs):
                (idx,) = struct.unpack_from("<H", vs, 2 * i)
                ver = needs.get(idx & 0x7FFF, (None, None))[1]
            imports.append((cstr(st, name_off), ver))

    needed = []
    for s in sections:
        if s["type"] != SHT_DYNAMIC:
            continue
        b, st = body(s), strtab(s)
        for off in range(0, len(b) - 15, 16):
            tag, val = struct.unpack_from("<qQ", b, off)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                needed.append(cstr(st, val))

    return dict(
        machine=MACHINES.get(machine, f"e_machine {machine}"),
        versions=sorted({v for _, v in needs.values()}),
        imports=imports,
        needed=needed,
        symtab=any(s["type"] == SHT_SYMTAB for s in sections),
        debug=[s["nm"] for s in sections if s["nm"].startswith(".debug")],
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--max-glibc", default="2.17", help="newest GLIBC_x.y a symbol may need (default 2.17)")
    ap.add_argument(
        "--allow-needed",
        default=",".join(DEFAULT_ALLOWED),
        help="comma-separated libraries allowed in DT_NEEDED (default: glibc's and libgcc_s)",
    )
    ap.add_argument("--stripped", action="store_true", help="fail if .symtab or .debug_* sections remain")
    ap.add_argument("--machine", choices=sorted(MACHINES.values()), help="fail unless the ELF is for this machine")
    args = ap.parse_args()

    try:
        elf = read_elf(args.binary)
    except (ElfError, struct.error) as e:
        print(f"check-elf: error: {e}", file=sys.stderr)
        return 2

    problems = []
    limit = version_key(args.max_glibc)
    glibc = [v for v in elf["versions"] if v.startswith("GLIBC_") and v[6:].replace(".", "").isdigit()]
    newest = max(glibc, key=lambda v: version_key(v[6:]), default=None)
    too_new = sorted({v for v in glibc if version_key(v[6:]) > limit}, key=lambda v: version_key(v[6:]))
    for v in too_new:
        syms = sorted(n for n, sv in elf["imports"] if sv == v)
        problems.append(f"needs {v} (newer than GLIBC_{args.max_glibc}) for: {', '.join(syms) or '?'}")
    allowed = {a.strip() for a in args.allow_needed.split(",") if a.strip()}
    for lib in elf["needed"]:
        if lib not in allowed:
            problems.append(
                f"NEEDED {lib}: the loader must find it before main(); only "
                f"{', '.join(sorted(allowed))} may be linked (load the others with dlopen)"
            )
    if args.stripped and (elf["symtab"] or elf["debug"]):
        problems.append(f"not stripped: {', '.join((['.symtab'] if elf['symtab'] else []) + elf['debug'])}")
    if args.machine and elf["machine"] != args.machine:
        problems.append(f"built for {elf['machine']}, expected {args.machine}")

    print(f"{args.binary}: {elf['machine']}")
    print(f"  needed: {', '.join(elf['needed']) or '(none: static)'}")
    print(f"  newest glibc symbol version: {newest or '(none)'} (limit GLIBC_{args.max_glibc})")
    print(f"  imported symbols: {len(elf['imports'])}; stripped: {'no' if elf['symtab'] or elf['debug'] else 'yes'}")
    for p in problems:
        print(f"check-elf: fail: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
