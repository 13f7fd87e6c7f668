#!/usr/bin/env bash
# gdrdoctor preflight with real NCCL on a GPU machine (the lent H200 machines), writing
# everything under $OUT (default ./preflight-gpu-out):
#
#   1. one node, all its GPUs: `preflight --world 1` with the system's libnccl.so.2 and with
#      PyTorch's (/opt/torch/.venv), as NCCL chooses and network-only;
#   2. with two or more GPUs: two ranks as two nodes on this machine, one GPU each
#      (CUDA_VISIBLE_DEVICES), each its own NCCL host (NCCL_HOSTID), so that NCCL connects them
#      through its network transport; the pair's bandwidth; once with each library.
#
# NCCL_NVLS_ENABLE=0 always (gdrdoctor sets it for its NCCL workers; nothing here calls
# cuMulticastCreate). Nothing is written outside $OUT and a temporary directory.
#
#   GDRDOCTOR=target/release/gdrdoctor OUT=/tmp/out scripts/preflight-gpu.sh
#
# The binary: $GDRDOCTOR, else target/release/gdrdoctor, else target/debug/gdrdoctor, else built
# with cargo when there is one. Results to record: docs/testing.md ("preflight on GPUs").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/preflight-gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NO_COLOR=1

BIN=${GDRDOCTOR:-}
for b in "$BIN" target/release/gdrdoctor target/debug/gdrdoctor; do
  if [ -n "$b" ] && [ -x "$b" ]; then BIN=$b; break; fi
done
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  if command -v cargo >/dev/null 2>&1; then
    cargo build --release -q && BIN=target/release/gdrdoctor
  fi
fi
[ -x "$BIN" ] || { echo "preflight-gpu: no gdrdoctor binary (set GDRDOCTOR=...)" | tee "$OUT/error.txt"; exit 2; }
BIN=$(readlink -f "$BIN")
"$BIN" --version | tee "$OUT/version.txt"

{
  echo "# $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi -L 2>&1
  nvidia-smi topo -m 2>&1
  nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv 2>&1
  ls /sys/class/infiniband 2>&1
} >"$OUT/machine.txt"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "preflight-gpu: $NGPU GPU(s)"

# The NCCLs: the loader's (system) and PyTorch's (NCCL_LIBS="tag:path ..." to choose).
LIBS=()
if [ -n "${NCCL_LIBS:-}" ]; then
  read -r -a LIBS <<<"$NCCL_LIBS"
fi
[ ${#LIBS[@]} -gt 0 ] || sys=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
[ -n "${sys:-}" ] && LIBS+=("system:$sys")
[ -n "${NCCL_LIBS:-}" ] || for t in /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2; do
  [ -e "$t" ] && LIBS+=("torch:$t")
done
[ ${#LIBS[@]} -gt 0 ] || { echo "preflight-gpu: no libnccl.so.2 found" | tee "$OUT/error.txt"; exit 2; }
printf '%s\n' "${LIBS[@]}" | tee "$OUT/nccl-libraries.txt"

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
(umask 077 && head -c 32 /dev/urandom | base64 >"$W/job.key")
port=29400
status=0

run() { # run NAME: one preflight, every rank in the background; answers in $OUT/NAME.*
  local name=$1
  shift
  local t0 rc
  t0=$(date +%s%N)
  "$@"
  rc=$?
  echo "$name: exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || [ "$rc" = 1 ] || status=1
  # Nothing may be left running.
  if pgrep -f "$BIN __worker nccl-allocation" >/dev/null; then
    echo "$name: a worker outlived the command" | tee -a "$OUT/summary.txt"
    pgrep -af "$BIN __worker" >>"$OUT/summary.txt"
    status=1
  fi
}

one_node() { # one_node LIB: rank 0 of 1, every GPU
  port=$((port + 1))
  "$BIN" preflight --rank 0 --world 1 --rendezvous "127.0.0.1:$port" --secret-file "$W/job.key" \
    --node-name "$(hostname -s)" --nccl-lib "$1" --nccl-timeout 300 -f json -o "$OUT/$2.json" \
    2>"$OUT/$2.stderr"
  local rc=$?
  python3 - "$OUT/$2.json" >"$OUT/$2.summary" 2>&1 <<'PY' || true
import json, sys
a = json.load(open(sys.argv[1]))
print(json.dumps(a["summary"]), [ (s["name"], round(s["ms"])) for s in a["stages"] ])
for r in a["nccl"]:
    print(r["label"], r["version"], [(n["node"], n["status"], n["allreduce_busbw_gbs"]) for n in r["nodes"]])
for r in a["rails"]:
    print(r["gpu"], r["bdf"], r["predicted"], r["observed"])
for f in a["findings"]:
    print(f["status"], f["id"], f["message"])
PY
  return $rc
}

two_nodes() { # two_nodes LIB NAME: ranks 0 and 1 on GPUs 0 and 1, two NCCL hosts
  port=$((port + 1))
  local pids=()
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES=$r NCCL_HOSTID="gdrdoctor-node-$r" \
      "$BIN" preflight --rank "$r" --world 2 --rendezvous "127.0.0.1:$port" \
      --secret-file "$W/job.key" --node-name "$(hostname -s)-gpu$r" --gpus 1 \
      --nccl-lib "$1" --nccl-timeout 300 --pair-bytes $((256 << 20)) -f json \
      -o "$OUT/$2.rank$r.json" 2>"$OUT/$2.rank$r.stderr" &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cp "$OUT/$2.rank0.json" "$OUT/$2.json" 2>/dev/null
  python3 - "$OUT/$2.json" >"$OUT/$2.summary" 2>&1 <<'PY' || true
import json, sys
a = json.load(open(sys.argv[1]))
print(json.dumps(a["summary"]), [ (s["name"], round(s["ms"])) for s in a["stages"] ])
for r in a["nccl"]:
    print(r["label"], r["version"], [(n["node"], n["status"], n["allreduce_busbw_gbs"], n["nccl_warnings"]) for n in r["nodes"]])
for r in a["rails"]:
    print(r["node"], r["gpu"], r["bdf"], r["observed"])
for p in a["pairs"]:
    print("pair", p["a_node"], p["b_node"], p["rail"], p["busbw_gbs"], p["allowed_gbs"], p["status"])
for f in a["findings"]:
    print(f["status"], f["id"], f["message"])
PY
  return $rc
}

for l in "${LIBS[@]}"; do
  tag=${l%%:*}
  lib=${l#*:}
  run "one-node-$tag" one_node "$lib" "one-node-$tag"
  if [ "$NGPU" -ge 2 ]; then
    run "two-nodes-$tag" two_nodes "$lib" "two-nodes-$tag"
  fi
done
cat "$OUT/summary.txt"
exit $status
