#!/usr/bin/env bash
# Where the warm run's NVML time goes (issue 37), on a GPU machine: scripts/nvml-cost/nvml-cost.c
# (every NVML call of the live-nvml worker, timed one by one, twice), 5 processes with
# nvmlInit_v2 and 3 with nvmlInitWithFlags(NO_ATTACH); 2 with scripts/nvml-cost/rmtrace.c
# preloaded (every driver call and sleep timed: $OUT/rmtrace-N.txt) and `nvidia-smi topo -m` so
# traced; then 5 traced warm `check` runs of BIN.
#
#   OUT=/tmp/out scripts/nvml-cost.sh [BIN]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/nvml-cost-out}
mkdir -p "$OUT"
gcc -O2 -o "$OUT/nvml-cost" scripts/nvml-cost/nvml-cost.c -ldl || exit 1
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
