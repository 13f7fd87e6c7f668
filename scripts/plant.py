#!/usr/bin/env python3
"""Plant one defect into a copy of a gdrdoctor sysroot (a snapshot or a fixture).

Usage: python3 scripts/plant.py SRC DST DEFECT [--hostname NAME]

DEFECT is one of:
  none          a plain copy
  gpu-gone      the GPU at 0000:48:00.0 leaves the PCI bus (and NVML/CUDA's lists), as after Xid 79
  slow-port     mlx5_3 port 1 trains at 200 Gb/s (2X NDR) among ports at 400
  odd-firmware  mlx5_5 runs firmware 28.39.1002, the others 28.43.1014
  cmdline       the kernel command line loses `quiet` and gains `pci=noats`

--hostname renames the node (gdrdoctor/meta.json and /proc/sys/kernel/hostname), so that many
copies look like many nodes to `gdrdoctor fleet`.

Used by scripts/fleet-bench.sh and contrib/slurm/test.sh; the same defects are planted by
tests/policy.rs and tests/fleet.rs.
"""

import argparse
import json
import os
import shutil
import sys

GPU = "0000:48:00.0"


def gpu_gone(root):
    link = os.path.join(root, "sys/bus/pci/devices", GPU)
    dev = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
    shutil.rmtree(dev)
    os.remove(link)
    shutil.rmtree(os.path.join(root, "proc/driver/nvidia/gpus", GPU), ignore_errors=True)
    live = os.path.join(root, "gdrdoctor/live.json")
    if os.path.exists(live):
        with open(live) as f:
            v = json.load(f)

        def keep(x):
            return not (isinstance(x, dict) and GPU in (x.get("bdf"), x.get("a"), x.get("b"), x.get("a_bdf"), x.get("b_bdf")))

        for lib, key in (("nvml", "gpus"), ("nvml", "pairs"), ("cuda", "devices"), ("cuda", "peers")):
            val = v.get(lib, {}).get("value")
            if isinstance(val, dict) and isinstance(val.get(key), list):
                val[key] = [x for x in val[key] if keep(x)]
        with open(live, "w") as f:
            json.dump(v, f, indent=2, sort_keys=True)


def write(root, rel, text):
    with open(os.path.join(root, rel), "w") as f:
        f.write(text)


def main(argv):
    ap = argparse.ArgumentParser(description="Plant one defect into a copy of a gdrdoctor sysroot.")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("defect", choices=["none", "gpu-gone", "slow-port", "odd-firmware", "cmdline"])
    ap.add_argument("--hostname")
    a = ap.parse_args(argv)
    if os.path.exists(a.dst):
        shutil.rmtree(a.dst)
    shutil.copytree(a.src, a.dst, symlinks=True)
    if a.defect == "gpu-gone":
        gpu_gone(a.dst)
    elif a.defect == "slow-port":
        write(a.dst, "sys/class/infiniband/mlx5_3/ports/1/rate", "200 Gb/sec (2X NDR)\n")
    elif a.defect == "odd-firmware":
        write(a.dst, "sys/class/infiniband/mlx5_5/fw_ver", "28.39.1002\n")
    elif a.defect == "cmdline":
        with open(os.path.join(a.dst, "proc/cmdline")) as f:
            params = [x for x in f.read().split() if x != "quiet"]
        write(a.dst, "proc/cmdline", " ".join(params + ["pci=noats"]) + "\n")
    if a.hostname:
        write(a.dst, "proc/sys/kernel/hostname", a.hostname + "\n")
        meta = os.path.join(a.dst, "gdrdoctor/meta.json")
        with open(meta) as f:
            m = json.load(f)
        m["hostname"] = a.hostname
        with open(meta, "w") as f:
            json.dump(m, f, indent=2, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
