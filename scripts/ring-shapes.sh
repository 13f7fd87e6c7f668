#!/usr/bin/env bash
# The cost of a satisfied GDRDOCTOR_WAIT on ring shapes progress.cuh was not tuned on (issue 37
# item 5): builds examples/watch/ring_shapes.cu with nvcc and runs it on GPU 0.
#
#   OUT=/tmp/out ROUNDS=15 ITEMS=131072 scripts/ring-shapes.sh [--shape WORD:SCOPE:SLOTS:WORK:WARPS ...]
#
# Writes $OUT/ring-shapes.jsonl (one line per shape) and prints a Markdown table: ns per item
# bare and instrumented, the difference, the overhead and its spread over the pairs.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/ring-shapes-out}
mkdir -p "$OUT"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
BIN=$OUT/ring_shapes
if ! "$NVCC" -O3 -std=c++14 -arch=native -I kernels/include -o "$BIN" examples/watch/ring_shapes.cu > "$OUT/nvcc.txt" 2>&1; then
  echo "ring-shapes: nvcc failed (see $OUT/nvcc.txt)"; cat "$OUT/nvcc.txt"; exit 1
fi
CUOBJDUMP=${CUOBJDUMP:-$(dirname "$NVCC")/cuobjdump}
[ -x "$CUOBJDUMP" ] && "$CUOBJDUMP" -sass "$BIN" > "$OUT/ring_shapes.sass" 2>&1
"$BIN" --rounds "${ROUNDS:-15}" --items "${ITEMS:-131072}" "$@" > "$OUT/ring-shapes.jsonl" 2> "$OUT/ring-shapes.err"
rc=$?
python3 - "$OUT/ring-shapes.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "word" in l]
print("| word | scope | slots | work | consumer warps | ns/item bare | ns/item instrumented | added ns/item | overhead (min, max) |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %d | %s | %d | %d | %d | %.1f | %.1f | %+.2f | %+.2f%% (%+.2f, %+.2f) |" % (
        r["word"], r["scope"], r["slots"], r["work"], r["warps"], r["ns_per_item_bare"],
        r["ns_per_item_instrumented"], r["ns_per_item_added"], r["overhead_pct"],
        r["overhead_pct_min"], r["overhead_pct_max"]))
PY
exit $rc
