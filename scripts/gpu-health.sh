#!/usr/bin/env bash
# Issue 17 on a GPU machine: what the health checks read live, for the lead's batched GPU runs.
# Usage: scripts/gpu-health.sh BIN OUTDIR      (as root; writes OUTDIR/*.json, *.txt, a snapshot)
# Checks: NVML NVLink error counters and the PCIe replay counter are read (or say why not),
# /dev/kmsg is read without blocking, --interval re-queries NVML, the state file works per boot,
# and a snapshot replays the kernel and counter findings.
set -u
BIN=${1:?binary}; OUT=${2:?output directory}
mkdir -p "$OUT"
export GDRDOCTOR_STATE_DIR="$OUT/state"
"$BIN" check --only counters,kernel,roce --format json -o "$OUT/first.json"; echo "first: exit $?"
sleep 2
"$BIN" check --only counters,kernel,roce --format json -o "$OUT/second.json"; echo "second (state file): exit $?"
/usr/bin/time -f "%e s" "$BIN" check --only counters --interval 5s --format json -o "$OUT/interval.json"; echo "interval: exit $?"
cp "$GDRDOCTOR_STATE_DIR/counters.json" "$OUT/state.json"
"$BIN" snapshot "$OUT/snap"; echo "snapshot: exit $?"
"$BIN" check --sysroot "$OUT/snap" --only counters,kernel --format json -o "$OUT/replay.json"; echo "replay: exit $?"
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
live = json.load(open(os.path.join(out, "snap/gdrdoctor/live.json")))
for g in live.get("nvml", {}).get("value", {}).get("gpus", []):
    links = [l for l in g.get("nvlinks", []) if l.get("active")]
    have = sum(1 for l in links if l.get("replay_errors") is not None)
    print(f"{g['bdf']}: pcie_replay_counter={g.get('pcie_replay_counter')} active nvlinks={len(links)} with error counters={have}")
for f in ("first", "second", "interval", "replay"):
    r = json.load(open(os.path.join(out, f + ".json")))
    for x in r["findings"]:
        print(f, x["status"], x["id"], x["subject"], "|", x["message"][:110])
PY
