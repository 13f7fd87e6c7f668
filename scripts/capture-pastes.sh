#!/usr/bin/env bash
# Capture, on a GPU machine, the command outputs `gdrdoctor diagnose` reads, as a user would
# paste them, to check the readers against the current driver and NCCL (580 / 2.28 here).
# Usage: OUT=dir scripts/capture-pastes.sh   (writes OUT/*.txt; nothing else is touched)
# Then, on the build machine: gdrdoctor diagnose OUT/*.txt --format json
set -u
OUT=${OUT:-./pastes-out}
mkdir -p "$OUT"
run() { # name, command...
  local n=$1; shift
  { echo "\$ $*"; "$@" 2>&1; } > "$OUT/$n.txt" || true
}
run topo-m nvidia-smi topo -m
run topo-mp nvidia-smi topo -mp
run smi-q nvidia-smi -q
run lsmod lsmod
run lsmod-grep sh -c 'lsmod | grep -E "peermem|peer_mem"'
run nvidia-version cat /proc/driver/nvidia/version
run cmdline cat /proc/cmdline
run uname uname -a
run ulimit sh -c 'ulimit -a'
# nvidia-smi underlines the topo header on a terminal: capture that form too.
if command -v script >/dev/null; then
  script -qc "nvidia-smi topo -m" /dev/null > "$OUT/topo-m-tty.txt" 2>&1 || true
fi
# NCCL's own decisions: a 2-GPU all_reduce through PyTorch's NCCL, with and without P2P.
cat > "$OUT/allreduce.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank(); torch.cuda.set_device(r)
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
print("rank", r, "ok", x[0].item()); dist.destroy_process_group()
PY
if python3 -c "import torch" 2>/dev/null; then
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV timeout 300 \
    torchrun --nproc_per_node=2 "$OUT/allreduce.py" > "$OUT/nccl-p2p.log" 2>&1 || true
  NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 timeout 300 \
    torchrun --nproc_per_node=2 "$OUT/allreduce.py" > "$OUT/nccl-shm.log" 2>&1 || true
fi
ls -l "$OUT"
