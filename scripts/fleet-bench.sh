#!/usr/bin/env bash
# Benchmark `gdrdoctor fleet` on N generated reports of the 8-GPU HGX fixture (default 10000).
#
#   cargo build --release && scripts/fleet-bench.sh [N]
#
# Five template reports come from `gdrdoctor check --sysroot` on the healthy fixture and on four
# planted copies (scripts/plant.py: a GPU gone, a slow port, one odd firmware, a changed command
# line); the script clones them into N files with distinct hostnames (node00000 ...), the four
# defects on nodes 17, 4242, 7001 and 9999 (when N is large enough), times `gdrdoctor fleet`
# over the directory, and prints the odd nodes the roll-up named. Results: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
BIN=${GDRDOCTOR:-target/release/gdrdoctor}
WORK=${WORK:-$(mktemp -d /tmp/gdrdoctor-fleet-bench.XXXXXX)}
FIX=$(scripts/fixture path hgx-h200x8-cx7x8-healthy)
mkdir -p "$WORK/reports"
for d in none gpu-gone slow-port odd-firmware cmdline; do
  python3 scripts/plant.py "$FIX" "$WORK/root-$d" "$d"
  "$BIN" check --sysroot "$WORK/root-$d" -f json -o "$WORK/tpl-$d.json" || true
done
python3 - "$WORK" "$N" <<'EOF'
import os, sys
work, n = sys.argv[1], int(sys.argv[2])
tpl = {d: open(os.path.join(work, "tpl-%s.json" % d)).read()
       for d in ("none", "gpu-gone", "slow-port", "odd-firmware", "cmdline")}
planted = {17: "gpu-gone", 4242: "slow-port", 7001: "odd-firmware", 9999: "cmdline"}
for i in range(n):
    host = "node%05d" % i
    text = tpl[planted.get(i, "none")].replace('"hostname": "hgx-fixture"', '"hostname": "%s"' % host, 1)
    with open(os.path.join(work, "reports", host + ".json"), "w") as f:
        f.write(text)
EOF
du -sh "$WORK/reports"
echo "nproc: $(nproc)"
sync
cat "$WORK"/reports/*.json > /dev/null   # into the page cache
for fmt in json table; do
  /usr/bin/time -f "fleet reports/ -f $fmt: %e s wall, %U s user + %S s sys, %M KiB max rss" \
    "$BIN" fleet "$WORK/reports" -f "$fmt" -o "$WORK/fleet.$fmt" || true
done
# The same reports on stdin (concatenated, streamed): memory must not follow the input size.
/usr/bin/time -f "cat reports/*.json | fleet - -f json: %e s wall, %U s user + %S s sys, %M KiB max rss" \
  sh -c "cat \"$WORK\"/reports/*.json | \"$BIN\" fleet - -f json -o \"$WORK/fleet-stdin.json\"" || true
# A tenth of the reports, for the memory that grows with the count.
mkdir -p "$WORK/tenth"
ls "$WORK/reports" | awk 'NR % 10 == 1' | while read -r f; do ln -sf "$WORK/reports/$f" "$WORK/tenth/$f"; done
/usr/bin/time -f "fleet tenth/ -f json ($(ls "$WORK/tenth" | wc -l) reports): %e s wall, %U s user + %S s sys, %M KiB max rss" \
  "$BIN" fleet "$WORK/tenth" -f json -o "$WORK/fleet-tenth.json" || true
python3 - "$WORK/fleet.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
print("nodes %d, failed %d, drift fields %d, odd nodes %d, exit %d" % (s["nodes"], s["failed"], s["drift_fields"], s["odd_nodes"], s["exit_code"]))
for o in r["odd_nodes"]:
    print("  %s: %s" % (o["node"], ", ".join("%s=%s" % (f["field"], f["value"]) for f in o["fields"])[:150]))
EOF
echo "work directory: $WORK (remove it when done)"
