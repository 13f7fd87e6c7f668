#!/usr/bin/env bash
# Time `gdrdoctor check` against what users run instead for the same facts, in one run.
# Usage: scripts/bench-check.sh BIN [SYSROOT] [N]     (prints a Markdown table)
set -u
BIN=${1:?binary}; SYSROOT=${2:-}; N=${3:-20}
ms() { # ms CMD... : median wall time of N runs in milliseconds
  local t=() s e
  for _ in $(seq "$N"); do
    s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N)
    t+=($(( (e - s) / 1000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.2f", m/1000}'
}
row() { printf '| `%s` | %s |\n' "$1" "$2"; }
echo "| command (median of $N runs) | ms |"
echo "|---|---|"
if [ -n "$SYSROOT" ]; then
  row "gdrdoctor check --sysroot $(basename "$SYSROOT") --format json" "$(ms "$BIN" check --sysroot "$SYSROOT" --format json)"
else
  row "gdrdoctor check --format json" "$(ms "$BIN" check --format json)"
  row "gdrdoctor check (table)" "$(ms "$BIN" check --color never)"
  row "gdrdoctor topo" "$(ms "$BIN" topo)"
  command -v nvidia-smi >/dev/null && row "nvidia-smi -q" "$(ms nvidia-smi -q)"
  command -v nvidia-smi >/dev/null && row "nvidia-smi topo -m" "$(ms nvidia-smi topo -m)"
  LSPCI=${LSPCI:-lspci}
  command -v "$LSPCI" >/dev/null && row "lspci -vvv" "$(ms "$LSPCI" -vvv $LSPCI_ARGS)"
  command -v ibv_devinfo >/dev/null && row "ibv_devinfo -v" "$(ms ibv_devinfo -v)"
  row "cat of the same sysfs/procfs files" "$(ms sh -c 'cat /proc/modules /proc/cmdline /proc/meminfo /proc/driver/nvidia/version /proc/driver/nvidia/params /sys/bus/pci/devices/*/{vendor,device,class,numa_node,resource,current_link_speed,max_link_speed} 2>/dev/null')"
fi
