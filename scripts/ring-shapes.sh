#!/usr/bin/env bash
# The cost of a satisfied GDRDOCTOR_WAIT on ring shapes progress.cuh was not tuned on (issue 37
# item 5): builds examples/watch/ring_shapes.cu with nvcc and runs it on GPU 0.
#
#   OUT=/tmp/out ROUNDS=15 ITEMS=131072 scripts/ring-shapes.sh [--shape WORD:SCOPE:SLOTS:WORK:WARPS ...]
#
# env: PADS     placements to build and run, "0" by default: each N in 0-7 builds ring_shapes with
#               -DRS_PAD=N (N one-instruction stores before every kernel's loop, bare and
#               instrumented alike), which moves the loops by N instructions; the summary then
#               gives every shape's overhead per placement and over all of them
#      VARIANTS header variants (scripts/watch-variants/<name>.patch applied to
#               kernels/include/gdrdoctor/progress.cuh by apply.py there), "" by default: the
#               header as it is, named "header"
#
# Writes $OUT/ring-shapes.jsonl (one line per shape, placement and header, with "pad" and
# "header" added) and prints a Markdown table: ns per item bare and instrumented, the
# difference, the overhead and its spread over the pairs; with more than one placement, a
# second table per shape and header over the placements.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/ring-shapes-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUOBJDUMP=${CUOBJDUMP:-$(dirname "$NVCC")/cuobjdump}
PADS=${PADS:-0}
VARIANTS=${VARIANTS:-}
: > "$OUT/ring-shapes.jsonl"
rc=0
for h in ${VARIANTS:-header}; do
  inc=kernels/include
  if [ "$h" != header ]; then
    inc=$OUT/include-$h
    mkdir -p "$inc/gdrdoctor"
    if ! python3 scripts/watch-variants/apply.py kernels/include/gdrdoctor/progress.cuh \
      "scripts/watch-variants/$h.patch" "$inc/gdrdoctor/progress.cuh"; then
      echo "ring-shapes: variant $h does not apply"; rc=1; continue
    fi
  fi
  for pad in $PADS; do
    BIN=$OUT/ring_shapes-$h-pad$pad
    if ! "$NVCC" -O3 -std=c++14 -arch=native -DRS_PAD="$pad" -I "$inc" -o "$BIN" \
      examples/watch/ring_shapes.cu > "$OUT/nvcc-$h-pad$pad.txt" 2>&1; then
      echo "ring-shapes: nvcc failed (see $OUT/nvcc-$h-pad$pad.txt)"; cat "$OUT/nvcc-$h-pad$pad.txt"; exit 1
    fi
    [ -x "$CUOBJDUMP" ] && "$CUOBJDUMP" -sass "$BIN" > "$OUT/ring_shapes-$h-pad$pad.sass" 2>&1
    "$BIN" --rounds "${ROUNDS:-15}" --items "${ITEMS:-131072}" "$@" 2> "$OUT/ring-shapes-$h-pad$pad.err" |
      sed -n "s/^{\"word\"/{\"header\":\"$h\",\"pad\":$pad,\"word\"/p" >> "$OUT/ring-shapes.jsonl"
    r=${PIPESTATUS[0]}
    [ "$r" = 0 ] || { echo "ring-shapes: $h pad $pad exit $r (see $OUT/ring-shapes-$h-pad$pad.err)"; rc=$r; }
  done
done
python3 - "$OUT/ring-shapes.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| header | pad | word | scope | slots | work | consumer warps | ns/item bare | ns/item instrumented | added ns/item | overhead (min, max) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %d | %d | %s | %d | %d | %d | %.1f | %.1f | %+.2f | %+.2f%% (%+.2f, %+.2f) |" % (
        r["header"], r["pad"], r["word"], r["scope"], r["slots"], r["work"], r["warps"], r["ns_per_item_bare"],
        r["ns_per_item_instrumented"], r["ns_per_item_added"], r["overhead_pct"],
        r["overhead_pct_min"], r["overhead_pct_max"]))
groups = {}
for r in rows:
    k = (r["header"], r["word"], r["scope"], r["slots"], r["work"], r["warps"])
    groups.setdefault(k, []).append(r)
if any(len(v) > 1 for v in groups.values()):
    print()
    print("Over the placements (mean of the per-placement medians; bare and instrumented each averaged first):")
    print()
    print("| header | word | scope | slots | work | consumer warps | placements | bare ns/item (min-max) | instrumented ns/item (min-max) | added ns/item | overhead | ns per satisfied wait | per-placement overhead min, max |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k, v in groups.items():
        b = [r["ns_per_item_bare"] for r in v]
        i = [r["ns_per_item_instrumented"] for r in v]
        o = [r["overhead_pct"] for r in v]
        mb, mi = statistics.mean(b), statistics.mean(i)
        waits = v[0].get("waits_per_item", 2)
        print("| %s | %d | %s | %d | %d | %d | %d | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %+.2f | %+.2f%% | %+.2f | %+.2f%%, %+.2f%% |" % (
            k[0], k[1], k[2], k[3], k[4], k[5], len(v), mb, min(b), max(b), mi, min(i), max(i), mi - mb,
            (mi - mb) / mb * 100, (mi - mb) / waits, min(o), max(o)))
PY
exit $rc
