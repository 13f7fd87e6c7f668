#!/usr/bin/env bash
# Issues 12 (item 6) and 15 (items 1, 2, 5) on the two-GPU machine, for the lead's batched GPU
# runs: `probe --nccl` (both GPUs, one GPU, and PyTorch's NCCL through --nccl-lib),
# `probe --p2p` with the carried NVML links, `topo` live and from a snapshot beside
# `nvidia-smi topo -m`, and an independent anchor: an all-reduce through PyTorch's NCCL
# (two processes) with the same NCCL_DEBUG settings and dump files.
#
# Usage: scripts/gpu-nccl.sh BIN OUTDIR        (as root; about 1-2 minutes)
# Writes OUTDIR/*.json (gdrdoctor reports: the probe-nccl*.json and probe-p2p.json are the
# captures for fixtures/reports/), *.txt, torch-*.log / *.xml (the anchor's NCCL files), a
# snapshot, and prints a summary. NVLink multicast stays off everywhere (NCCL_NVLS_ENABLE=0).
set -u
BIN=${1:?binary}; OUT=${2:?output directory}
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
T="timeout 150"

# The machine.
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>&1
nvidia-smi nvlink -s > "$OUT/nvidia-smi-nvlink-s.txt" 2>&1
nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1
{ ldconfig -p | grep -i nccl; ls -l /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null; } > "$OUT/nccl-libraries.txt" 2>&1
TORCH_NCCL=$("$PY" -c 'import glob, site; c = [p for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/nccl/lib/libnccl.so.2")]; print(c[0] if c else "")' 2>/dev/null)
echo "torch's libnccl: ${TORCH_NCCL:-not found}" | tee -a "$OUT/nccl-libraries.txt"

# Issue 15 item 1: topo from the live NVML facts, and from a snapshot.
$T "$BIN" topo > "$OUT/topo.txt" 2>&1; echo "topo: exit $?"
$T "$BIN" topo --format json > "$OUT/topo.json" 2>/dev/null; echo "topo json: exit $?"
$T "$BIN" snapshot "$OUT/snap" > /dev/null 2>&1; echo "snapshot: exit $?"
$T "$BIN" topo --sysroot "$OUT/snap" > "$OUT/topo-snap.txt" 2>&1; echo "topo --sysroot: exit $?"

# Issue 12 item 6: ask NCCL itself (the library the loader finds), both GPUs, then one GPU.
$T "$BIN" probe --nccl --timeout 120 --format json -o "$OUT/probe-nccl.json"; echo "probe --nccl: exit $?"
CUDA_VISIBLE_DEVICES=0 $T "$BIN" probe --nccl --timeout 120 --format json -o "$OUT/probe-nccl-1gpu.json"; echo "probe --nccl (1 gpu): exit $?"
if [ -n "${TORCH_NCCL:-}" ] && [ -e "$TORCH_NCCL" ]; then
  $T "$BIN" probe --nccl --nccl-lib "$TORCH_NCCL" --timeout 120 --format json -o "$OUT/probe-nccl-torchlib.json"
  echo "probe --nccl --nccl-lib torch's: exit $?"
fi
"$BIN" probe --nccl --timeout 120 > "$OUT/probe-nccl.txt" 2>&1

# Issue 15 items 2 and 5: p2p with NVML's links and every pair at once.
$T "$BIN" probe --p2p --format json -o "$OUT/probe-p2p.json"; echo "probe --p2p: exit $?"
# Issue 12 item 4 in gpu.p2p: the environment keeps NCCL off P2P (expect warn per pair).
NCCL_P2P_DISABLE=1 $T "$BIN" check --only gpu.p2p --format json -o "$OUT/check-p2p-disabled.json"; echo "check gpu.p2p with NCCL_P2P_DISABLE=1: exit $?"

# The anchor: PyTorch's NCCL, one process per GPU, the same debug settings; then P2P off.
cat > "$OUT/torch_allreduce.py" <<'PYEOF'
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool((x == world * (world + 1) / 2).all())
    print(f"rank {rank}: all_reduce ok={ok} nccl={torch.cuda.nccl.version()}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    world = torch.cuda.device_count()
    mp.spawn(run, args=(world, int(sys.argv[1])), nprocs=world)
PYEOF
anchor() {  # anchor NAME PORT [VAR=value...]
  local name=$1 port=$2; shift 2
  env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,NET,ENV \
    NCCL_DEBUG_FILE="$OUT/torch-$name.%p.log" NCCL_TOPO_DUMP_FILE="$OUT/torch-$name-topo.xml" \
    NCCL_GRAPH_DUMP_FILE="$OUT/torch-$name-graph.xml" \
    $T "$PY" "$OUT/torch_allreduce.py" "$port" > "$OUT/torch-$name.out" 2>&1
  echo "torch anchor $name: exit $?"
}
anchor default 29511
anchor p2p-off 29512 NCCL_P2P_DISABLE=1

SUMMARY_PY=python3; [ -x "$PY" ] && SUMMARY_PY=$PY
"$SUMMARY_PY" - "$OUT" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def load(n):
    try:
        return json.load(open(os.path.join(out, n)))
    except Exception as e:
        print(f"{n}: {e}")
        return None
def block(path):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    return [l for l in lines if re.match(r"\s*GPU\d", l)]
print("== GPU x GPU: nvidia-smi topo -m | gdrdoctor topo (live) | gdrdoctor topo --sysroot snapshot")
for f in ("nvidia-smi-topo.txt", "topo.txt", "topo-snap.txt"):
    for l in block(os.path.join(out, f)):
        print(f"{f:22} {l}")
print("== nvlink speed:", " ".join(open(os.path.join(out, "nvidia-smi-nvlink-s.txt")).read().split()[:12]))
for n in ("probe-nccl.json", "probe-nccl-1gpu.json", "probe-nccl-torchlib.json", "probe-p2p.json", "check-p2p-disabled.json"):
    r = load(n)
    if not r:
        continue
    print(f"== {n}: exit {r['summary']['exit_code']}")
    for x in r["findings"]:
        print(f"  {x['status']:5} {x['id']:22} {x['subject']:28} {x['message'][:150]}")
    rec = (r.get("probe") or {}).get("nccl")
    for run in (rec or {}).get("runs", []):
        o = run.get("output") or {}
        log = (run.get("files") or {}).get("log") or ""
        ch = [l.split("NCCL INFO ")[-1] for l in log.splitlines() if " Channel " in l and " via " in l]
        print(f"  run {run['params']['label']}: nccl {o.get('version')} ranks {len(o.get('ranks', []))} "
              f"error {o.get('error')} channel lines {len(ch)}: {sorted(set(c.split(' via ')[-1] for c in ch))}")
    p2p = (r.get("probe") or {}).get("p2p")
    if p2p:
        print("  links:", [(l["bdf"], l["nvlinks_switch"], l["nvlink_version"], l["nvlink_speed_mbps"]) for l in p2p.get("links", [])],
              "error:", p2p.get("links_error"))
        print("  all at once:", p2p.get("all_at_once"))
print("== torch anchor")
for name in ("default", "p2p-off"):
    print(f"-- {name}:", open(os.path.join(out, f"torch-{name}.out")).read().strip()[-300:])
    ch, ver = [], set()
    for f in sorted(glob.glob(os.path.join(out, f"torch-{name}.*.log"))):
        for l in open(f, errors="replace"):
            if " Channel " in l and " via " in l:
                ch.append(l.split("NCCL INFO ")[-1].strip())
            m = re.search(r"NCCL version (\S+)", l)
            if m:
                ver.add(m.group(1))
    print(f"   nccl {sorted(ver)}; {len(ch)} channel lines: {sorted(set(c.split(' via ')[-1] for c in ch))}")
    for c in ch[:4]:
        print("   ", c)
PY
