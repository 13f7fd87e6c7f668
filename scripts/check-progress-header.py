#!/usr/bin/env python3
"""Compile kernels/include/gdrdoctor/progress.cuh under NVRTC (no GPU needed).

The header promises to compile under NVRTC (its host side is left out when __CUDACC_RTC__ is
defined). This compiles a kernel that uses every device macro, with the NVRTC that
scripts/gen-ptx.py uses (CUDA 12.0 from PyPI, compute_70) unless --nvrtc names another
libnvrtc, and checks that the slow path stayed out of line (a `.func` wait_slow).

Usage:
  python3 scripts/check-progress-header.py [--nvrtc /path/to/libnvrtc.so.N] [--arch compute_90]
"""

import argparse
import ctypes
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "kernels", "include", "gdrdoctor", "progress.cuh")

KERNEL = r"""
#include <gdrdoctor/progress.cuh>
extern "C" __global__ void uses_every_macro(unsigned long long* f, int* g, volatile unsigned int* h,
                                            gdrdoctor_launch_t l) {
    GDRDOCTOR_ENTER(l);
    if (GDRDOCTOR_WAIT(f, GDRDOCTOR_GE, 1, 1)) return;
    if (GDRDOCTOR_WAIT_ACQUIRE_SYS(f, GDRDOCTOR_EQ, 2, 1)) return;
    if (GDRDOCTOR_WAIT_ACQUIRE_GPU(g, GDRDOCTOR_EQ, -1, 2)) return;
    if (GDRDOCTOR_WAIT_VOLATILE(h, GDRDOCTOR_NE, 0u, 3)) return;
    if (GDRDOCTOR_WAIT_RELAXED_SYS(f, GDRDOCTOR_LT, 5ull, 4)) return;
    unsigned long long cached = f[1];
    if (GDRDOCTOR_WAIT_LOAD(f, GDRDOCTOR_EQ, 7, 5, [&]() { return cached; })) return;
    GDRDOCTOR_MARK_WAITING(f, GDRDOCTOR_EQ, 9, cached, 6);
    while (*(volatile unsigned long long*)f != 9) {
        if (GDRDOCTOR_ABORTED()) break;
    }
    GDRDOCTOR_MARK_DONE();
    GDRDOCTOR_LEAVE();
}
"""


def load_gen_ptx():
    spec = importlib.util.spec_from_file_location("gen_ptx", os.path.join(ROOT, "scripts", "gen-ptx.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvrtc")
    ap.add_argument("--arch", default="compute_70")
    a = ap.parse_args()
    lib = a.nvrtc or load_gen_ptx().find_nvrtc()
    nvrtc = ctypes.CDLL(lib)
    for defines in ([], ["-DGDRDOCTOR_PROGRESS_PRINTF"]):
        compile_once(nvrtc, lib, a.arch, defines)


def compile_once(nvrtc, lib, arch, defines):
    class A:
        pass
    a = A()
    a.arch = arch
    header = open(HEADER, "rb").read()
    prog = ctypes.c_void_p()
    headers = (ctypes.c_char_p * 1)(header)
    names = (ctypes.c_char_p * 1)(b"gdrdoctor/progress.cuh")
    r = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), KERNEL.encode(), b"progress_check.cu", 1, headers, names)
    if r != 0:
        sys.exit("nvrtcCreateProgram: %d" % r)
    opts = ["--gpu-architecture=" + a.arch, "--std=c++14", "-default-device"] + defines
    copts = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), copts)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if r != 0:
        sys.exit("progress.cuh under NVRTC (%s, %s): error %d\n%s" % (lib, a.arch, r, log.value.decode(errors="replace")))
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    text = ptx.value.decode()
    if ".func" not in text or "wait_slow" not in text:
        sys.exit("progress.cuh under NVRTC: the slow path was inlined (no .func wait_slow in the PTX)")
    warnings = log.value.decode(errors="replace").strip()
    print("progress.cuh compiles under NVRTC (%s, %s%s): %d bytes of PTX%s"
          % (os.path.basename(lib), a.arch, "".join(" " + d for d in defines), len(text),
             ("; log: " + warnings) if warnings else ""))


if __name__ == "__main__":
    main()
