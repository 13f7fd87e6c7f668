#!/usr/bin/env python3
"""Generate the PTX gdrdoctor carries for nodes without libnvrtc, from kernels/*.cu.

The PTX is compiled by NVRTC from CUDA 12.0 (PTX ISA 8.0, target compute_70), so the driver of
any CUDA 12 toolkit (R525 or newer) can JIT it for its GPU, Volta and newer. The NVRTC comes
from the `nvidia-cuda-nvrtc-cu12==12.0.140` wheel on PyPI, which needs no GPU.

Usage:
  python3 scripts/gen-ptx.py [--nvrtc /path/to/libnvrtc.so.12]   # rewrite kernels/ptx/*.ptx
  python3 scripts/gen-ptx.py --check                              # exit 1 if they differ

Without --nvrtc it installs the wheel into a private directory (pip) and uses it.
"""

import argparse
import re
import ctypes
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEEL = "nvidia-cuda-nvrtc-cu12==12.0.140"
ARCH = "compute_70"
OPTIONS = ["--gpu-architecture=" + ARCH, "-lineinfo", "--std=c++14", "-default-device"]


def find_nvrtc():
    d = os.path.join(tempfile.gettempdir(), "gdrdoctor-nvrtc-12.0")
    lib = glob.glob(os.path.join(d, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12"))
    if not lib:
        # `pip download` + unzip works where `pip install` is refused (PEP 668 system Pythons).
        subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "-d", d, WHEEL])
        import zipfile
        for whl in glob.glob(os.path.join(d, "*.whl")):
            zipfile.ZipFile(whl).extractall(d)
        lib = glob.glob(os.path.join(d, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12"))
    if not lib:
        sys.exit("libnvrtc.so.12 not found after installing " + WHEEL)
    return lib[0]


def compile_ptx(nvrtc, src, name):
    prog = ctypes.c_void_p()
    r = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
    if r != 0:
        sys.exit("nvrtcCreateProgram(%s): %d" % (name, r))
    opts = (ctypes.c_char_p * len(OPTIONS))(*[o.encode() for o in OPTIONS])
    r = nvrtc.nvrtcCompileProgram(prog, len(OPTIONS), opts)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if r != 0:
        sys.exit("%s: NVRTC error %d\n%s" % (name, r, log.value.decode(errors="replace")))
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    # NVRTC makes the program name absolute from the working directory in the .file
    # directive (-lineinfo): strip it back to the repository-relative name so that the carried
    # PTX does not depend on where the checkout lives.
    return re.sub(r'(\.file\s+\d+\s+")[^"]*?(' + re.escape(name) + r'")', r"\1\2", ptx.value.decode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvrtc")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    nvrtc = ctypes.CDLL(a.nvrtc or find_nvrtc())
    differ = []
    for cu in sorted(glob.glob(os.path.join(ROOT, "kernels", "*.cu"))):
        base = os.path.splitext(os.path.basename(cu))[0]
        src = open(cu, encoding="utf-8").read()
        # The program name appears in the PTX's .file directive: keep it machine-independent.
        ptx = compile_ptx(nvrtc, src, "kernels/%s.cu" % base)
        out = os.path.join(ROOT, "kernels", "ptx", base + ".ptx")
        old = open(out, encoding="utf-8").read() if os.path.exists(out) else None
        if a.check:
            if old != ptx:
                differ.append(out)
        elif old != ptx:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "w", encoding="utf-8") as f:
                f.write(ptx)
            print("wrote", os.path.relpath(out, ROOT))
    if differ:
        sys.exit("PTX out of date (run python3 scripts/gen-ptx.py): " + ", ".join(differ))


if __name__ == "__main__":
    main()
