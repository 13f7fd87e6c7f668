#!/usr/bin/env bash
# One lease of the GPU machine, every GPU-side measurement of a session in one go (the device
# time is short: batch it). Writes everything under $OUT/gpu and packs it as $OUT/gpu.tgz.
#
#   BIN=target/gpu/gdrdoctor OUT=/tmp/out scripts/gpu-session.sh [parts...]
#
# parts (default: all): smoke (scripts/probe-smoke.sh), preflight (scripts/preflight-gpu.sh),
# bench (scripts/bench-live.sh), fabric (Fabric Manager, NVML fabric state, gdrcopy, peer-memory
# module facts as the tools show them), snapshot (gdrdoctor snapshot of this node), ring
# (scripts/ring-shapes.sh: a satisfied GDRDOCTOR_WAIT's cost on several ring shapes).
# NCCL_NVLS_ENABLE=0 throughout; nothing here calls cuMulticastCreate.
set -u
cd "$(dirname "$0")/.."
BIN=$(readlink -f "${BIN:-target/gpu/gdrdoctor}")
OUT=${OUT:-$PWD/gpu-session-out}
R=$OUT/gpu
mkdir -p "$R"
export NCCL_NVLS_ENABLE=0
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(fabric snapshot smoke bench preflight)
"$BIN" --version > "$R/version.txt" 2>&1
for p in "${parts[@]}"; do
  t0=$SECONDS
  case $p in
    smoke) timeout -k 5 240 scripts/probe-smoke.sh "$BIN" "$R/smoke" > "$R/smoke.log" 2>&1 ;;
    preflight) GDRDOCTOR=$BIN OUT=$R/preflight timeout -k 5 240 scripts/preflight-gpu.sh > "$R/preflight.log" 2>&1 ;;
    bench) OUT=$R/bench BUDGET_S=${BUDGET_S:-100} timeout -k 5 280 scripts/bench-live.sh "$BIN" 25 > "$R/bench.md" 2> "$R/bench.err" ;;
    fabric)
      {
        echo "## nvidia-smi -q (Fabric, GPU Operation Mode, BAR1, Persistence)"
        nvidia-smi -q 2>&1 | grep -E -A6 -i 'fabric|persistence|bar1' | head -80
        echo "## fabric manager"
        systemctl status nvidia-fabricmanager 2>&1 | head -5
        ls -l /usr/bin/nv-fabricmanager /usr/bin/nvidia-fabricmanager 2>&1
        cat /proc/driver/nvidia/version 2>&1
        echo "## gdrcopy"
        grep -E 'gdrdrv|nvidia_peermem|nv_peer_mem|ib_core' /proc/modules 2>&1
        ls -l /dev/gdrdrv 2>&1
        echo "## peermem module on disk"
        find /lib/modules/"$(uname -r)" -name 'nvidia*peermem*' 2>/dev/null
        modinfo nvidia_peermem 2>&1 | head -20
        echo "## cpu"
        grep -m1 'model name' /proc/cpuinfo; grep -m1 vendor_id /proc/cpuinfo
      } > "$R/fabric.txt" 2>&1
      nvidia-smi -q > "$R/nvidia-smi-q.txt" 2>&1
      "$BIN" check --format json -o "$R/check.json" 2> "$R/check.stderr"; echo "check exit $?" >> "$R/fabric.txt"
      ;;
    ring) OUT=$R/ring timeout -k 5 300 scripts/ring-shapes.sh > "$R/ring.md" 2>&1 ;;
    snapshot) timeout -k 5 120 "$BIN" snapshot "$R/h200-node.tar.gz" > "$R/snapshot.log" 2>&1 ;;
  esac
  echo "$p: $((SECONDS - t0)) s" | tee -a "$R/parts.txt"
done
tar czf "$OUT/gpu.tgz" -C "$OUT" gpu
