#!/usr/bin/env bash
# Where the warm run's NVML time goes (issue 37), on a GPU machine: scripts/nvml-cost/nvml-cost.c
# (every NVML call of the live-nvml worker, timed one by one, twice), 5 processes with
# nvmlInit_v2 and 3 with nvmlInitWithFlags(NO_ATTACH); 2 with scripts/nvml-cost/rmtrace.c
# preloaded (every driver call and sleep timed: $OUT/rmtrace-N.txt) and `nvidia-smi topo -m` so
# traced; then 5 traced warm `check` runs of BIN.
#
#   OUT=/tmp/out scripts/nvml-cost.sh [BIN]
#
# With SHIM=1 it runs only the libcuda/sleep study instead: nvml-cost under
# scripts/nvml-cost/nocuda.c, 4 processes each as it is, with libcuda refused (NOCUDA=1), with
# the 1-10 ms sleeps cut (NOSLEEP=1) and both ($OUT/shim-<mode>-N.txt and its log
# $OUT/shimlog-<mode>-N.txt), and `nvidia-smi topo -m` under the logging shim.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/nvml-cost-out}
mkdir -p "$OUT"
gcc -O2 -o "$OUT/nvml-cost" scripts/nvml-cost/nvml-cost.c -ldl || exit 1
if [ "${SHIM:-0}" = 1 ]; then
  gcc -O2 -shared -fPIC -o "$OUT/nocuda.so" scripts/nvml-cost/nocuda.c -ldl || exit 1
  for i in 1 2 3 4; do
    for mode in plain nocuda nosleep both; do
      case $mode in
        plain) e="" ;; nocuda) e="NOCUDA=1" ;; nosleep) e="NOSLEEP=1" ;; both) e="NOCUDA=1 NOSLEEP=1" ;;
      esac
      env $e SHIMLOG="$OUT/shimlog-$mode-$i.txt" LD_PRELOAD="$OUT/nocuda.so" "$OUT/nvml-cost" \
        > "$OUT/shim-$mode-$i.txt" 2>&1
    done
  done
  SHIMLOG="$OUT/shimlog-topo-m.txt" LD_PRELOAD="$OUT/nocuda.so" nvidia-smi topo -m > "$OUT/topo-m.txt" 2>&1
  # the handle by PCI bus id: the same attach (and sleep)?
  bus=$(ls /proc/driver/nvidia/gpus | head -1)
  for i in 1 2; do
    NVML_COST_BUS=$bus SHIMLOG="$OUT/shimlog-bus-$i.txt" LD_PRELOAD="$OUT/nocuda.so" "$OUT/nvml-cost" \
      > "$OUT/shim-bus-$i.txt" 2>&1
  done
  # where nvmlInit's time goes without libcuda: samples of the main thread, and its system calls
  for i in 1 2; do
    NOCUDA=1 PROF=1 SHIMLOG="$OUT/shimlog-prof-$i.txt" LD_PRELOAD="$OUT/nocuda.so" "$OUT/nvml-cost" \
      > "$OUT/shim-prof-$i.txt" 2>&1
  done
  if command -v strace > /dev/null; then
    NOCUDA=1 strace -f -tt -T -o "$OUT/shim-strace.txt" env SHIMLOG=/dev/null LD_PRELOAD="$OUT/nocuda.so" \
      "$OUT/nvml-cost" > /dev/null 2>&1
  fi
  for mode in plain nocuda nosleep both bus prof; do
    echo "## $mode"
    grep -hE '^(nvmlInit|nvmlDeviceGetHandleByIndex)' "$OUT"/shim-$mode-*.txt
    grep -h '^whole' "$OUT"/shim-$mode-*.txt
    sort -u "$OUT/shim-$mode-1.txt" | grep '^VAL' | head -20
  done
  exit 0
fi
for i in 1 2 3 4 5; do echo "### nvmlInit_v2 run $i"; "$OUT/nvml-cost"; done > "$OUT/nvml-cost.txt" 2>&1
for i in 1 2 3; do echo "### nvmlInitWithFlags(2: NO_ATTACH) run $i"; "$OUT/nvml-cost" 2; done >> "$OUT/nvml-cost.txt" 2>&1
if gcc -O2 -shared -fPIC -o "$OUT/rmtrace.so" scripts/nvml-cost/rmtrace.c -ldl; then
  for i in 1 2; do RMTRACE=$OUT/rmtrace-$i.txt LD_PRELOAD=$OUT/rmtrace.so "$OUT/nvml-cost" > "$OUT/nvml-rm-$i.txt" 2>&1; done
  RMTRACE=$OUT/rmtrace-topo-m.txt LD_PRELOAD=$OUT/rmtrace.so nvidia-smi topo -m > /dev/null 2>&1
fi
BIN=${1:-}
if [ -n "$BIN" ]; then
  ST=$(mktemp -d /dev/shm/gdrd.XXXXXX)
  GDRDOCTOR_STATE_DIR=$ST "$BIN" check > /dev/null 2>&1
  for i in 1 2 3 4 5; do
    echo "### warm check run $i"
    GDRDOCTOR_STATE_DIR=$ST GDRDOCTOR_TRACE=1 "$BIN" check --format json -o /dev/null 2>&1
  done > "$OUT/trace-warm.txt"
  for i in 1 2 3; do
    echo "### warm topo run $i"
    GDRDOCTOR_STATE_DIR=$ST GDRDOCTOR_TRACE=1 "$BIN" topo 2>&1 >/dev/null
  done >> "$OUT/trace-warm.txt"
  rm -rf "$ST"
fi
if command -v strace >/dev/null; then
  strace -f -c -o "$OUT/strace-topo-m.txt" nvidia-smi topo -m > /dev/null 2>&1
fi
grep -E 'total|whole|nvmlInit|HandleByIndex' "$OUT/nvml-cost.txt" | head -60
