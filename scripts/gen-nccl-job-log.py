#!/usr/bin/env python3
"""Write a constructed NCCL_DEBUG=INFO log of a whole job, for `diagnose`'s size benchmark
(docs/performance.md): HOSTS hosts of 8 GPUs each (one process per GPU, cudaDev 0-7 on every
host), NCCL 2.21 line shapes, CHANNELS channels of send, receive and P2P lines per rank,
repeated REPEAT times (the same processes logging again). Nothing in it comes from a real log.

    python3 scripts/gen-nccl-job-log.py OUT [HOSTS=64] [CHANNELS=32] [REPEAT=1]
"""
import sys


def main():
    out = sys.argv[1]
    hosts = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    channels = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    n = hosts * 8
    head, info = ["node-000:1000:1000 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"], []
    for h in range(hosts):
        host = "node-%03d" % h
        for d in range(8):
            pid, bus, rank = 1000 + d, "%x000" % (0x18 + d * 0x10), h * 8 + d
            head.append(
                f"{host}:{pid}:{pid + 80} [{d}] NCCL INFO comm 0x55d0c1a0 rank {rank} nranks {n} "
                f"cudaDev {d} nvmlDev {d} busId {bus} commId 0x7a1c0de5 - Init START"
            )
            info.append((host, pid, d, rank))
        nics = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(8))
        head.append(f"{host}:1000:1080 [0] NCCL INFO NET/IB : Using {nics} [RO]; OOB eth0:10.1.0.{h}<0>")
    body = []
    for ch in range(channels):
        for host, pid, d, r in info:
            p = f"{host}:{pid}:{pid + 80} [{d}] NCCL INFO Channel {ch:02d}/0 : "
            body.append(f"{p}{r}[{d}] -> {(r + 8) % n}[{d}] [send] via NET/IB/{d}/GDRDMA")
            body.append(f"{p}{(r - 8) % n}[{d}] -> {r}[{d}] [receive] via NET/IB/{d}/GDRDMA")
            body.append(f"{p}{r}[{d}] -> {r - d + (d + 1) % 8}[{(d + 1) % 8}] via P2P/CUMEM/read")
    with open(out, "w") as f:
        f.write("\n".join(head) + "\n")
        for _ in range(repeat):
            f.write("\n".join(body) + "\n")


if __name__ == "__main__":
    main()
