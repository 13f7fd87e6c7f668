#!/bin/bash
# What the first cuInit on an idle GPU waits for (issue 16, docs/performance.md): cuInit timed
# alone (scripts/cuinit-time.c), each of its ioctls timed by an LD_PRELOAD shim, on an idle GPU
# and while another process holds CUDA; then cuInit with the UVM driver out of reach.
#   OUT=/tmp/out RUNS=3 scripts/cuinit-uvm.sh      # writes $OUT/cuinit-uvm.md and the logs
# Needs gcc, libcuda and a GPU no CUDA process uses (else "idle" is not idle). ~30 s.
set -u
OUT=${OUT:-/tmp/cuinit-uvm}; RUNS=${RUNS:-3}; D=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/logs"; B=$(mktemp -d)
gcc -O2 -o "$B/ct" "$D/cuinit-time.c" -ldl || exit 1
gcc -shared -fPIC -O2 -o "$B/it.so" "$D/cuinit-uvm/ioctl-time.c" -ldl || exit 1
gcc -shared -fPIC -O2 -o "$B/nouvm.so" "$D/cuinit-uvm/no-uvm.c" -ldl || exit 1
PY=$(command -v python3 || echo /opt/torch/.venv/bin/python)
S="$OUT/cuinit-uvm.md"
# UVM_REGISTER_GPU is ioctl 37 (0x25) on /dev/nvidia-uvm.
reg() { awk '$5=="/dev/nvidia-uvm" && $6=="req=0x25" {s+=$3; n++} END {printf "%.1f ms (%d call%s)", s, n, n==1?"":"s"}' "$1"; }
slowest() { sort -k3 -g -r "$1" | head -3 | awk '{printf "%s %s %s %.1f ms; ", $5, $6, $8, $3}'; }
round() { # $1: state name
  for i in $(seq "$RUNS"); do
    echo "| $1 | bare | $("$B/ct" | sed 's/^dlopen [0-9.]* //') | |" >> "$S"; sleep 0.5
    L="$OUT/logs/$1-$i.log"; rm -f "$L"
    r=$(IOCTL_LOG="$L" LD_PRELOAD="$B/it.so" "$B/ct" | sed 's/^dlopen [0-9.]* //')
    echo "| $1 | shim | $r | UVM_REGISTER_GPU $(reg "$L"); slowest: $(slowest "$L") |" >> "$S"; sleep 0.5
  done
}
{ echo "# cuInit and UVM ($(date -u +%FT%TZ))"; echo
  nvidia-smi --query-gpu=name,driver_version,persistence_mode,compute_mode --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
  echo; echo "| GPU state | how | cuInit | the ioctls |"; echo "|---|---|---|---|"; } > "$S"
round idle
"$PY" -c 'import ctypes,time; c=ctypes.CDLL("libcuda.so.1"); print("holder cuInit", c.cuInit(0), flush=True); time.sleep(600)' > "$OUT/logs/holder.txt" 2>&1 &
H=$!; sleep 4
round held
kill $H; wait $H 2>/dev/null; sleep 2
for i in $(seq "$RUNS"); do
  echo "| idle | /dev/nvidia-uvm cannot be opened (ENOENT) | $(LD_PRELOAD="$B/nouvm.so" "$B/ct" | sed 's/^dlopen [0-9.]* //') | |" >> "$S"
  echo "| idle | UVM_REGISTER_GPU fails (EPERM) | $(NOUVM_IOCTL=1 LD_PRELOAD="$B/nouvm.so" "$B/ct" | sed 's/^dlopen [0-9.]* //') | |" >> "$S"
done
IOCTL_LOG="$OUT/logs/nvidia-smi.log" LD_PRELOAD="$B/it.so" nvidia-smi -q > /dev/null
echo >> "$S"; echo "nvidia-smi -q: $(grep -c ' ioctl ' "$OUT/logs/nvidia-smi.log") ioctls, $(grep -c nvidia-uvm "$OUT/logs/nvidia-smi.log") on /dev/nvidia-uvm" >> "$S"
rm -rf "$B"; cat "$S"
