#!/usr/bin/env bash
# Warm `check` with one GPU's NVML queries on several threads (the default) against one after
# another (GDRDOCTOR_NVML_SPLIT=0), interleaved, with `nvidia-smi topo -m` in the same loop;
# medians of N (issue 37). Writes $OUT/warm-ab.tsv and $OUT/trace-*.txt; prints a table.
#
#   OUT=/tmp/out scripts/bench-warm-ab.sh BIN [N]
set -u
BIN=$(readlink -f "$1"); N=${2:-20}
OUT=${OUT:-$PWD/warm-ab-out}; mkdir -p "$OUT"
ST=$(mktemp -d /dev/shm/gdrd-ab.XXXXXX); trap 'rm -rf "$ST"' EXIT
export GDRDOCTOR_STATE_DIR=$ST
"$BIN" check --format json -o /dev/null >/dev/null 2>&1   # the CUDA cache: every run below is warm
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
: > "$OUT/warm-ab.tsv"
for i in $(seq "$N"); do
  echo -e "split\t$(ms "$BIN" check --format json -o /dev/null)" >> "$OUT/warm-ab.tsv"
  echo -e "serial\t$(GDRDOCTOR_NVML_SPLIT=0 ms "$BIN" check --format json -o /dev/null)" >> "$OUT/warm-ab.tsv"
  echo -e "topo-m\t$(ms nvidia-smi topo -m)" >> "$OUT/warm-ab.tsv"
done
for v in 1 0; do
  for i in 1 2 3; do GDRDOCTOR_NVML_SPLIT=$v GDRDOCTOR_TRACE=1 "$BIN" check --format json -o /dev/null 2>&1 | grep -E 'nvml|checks|render'; echo; done > "$OUT/trace-split$v.txt"
done
python3 - "$OUT/warm-ab.tsv" <<'PY'
import sys, statistics as st
rows = {}
for l in open(sys.argv[1]):
    k, v = l.split()
    rows.setdefault(k, []).append(int(v) / 1000)
print("| command | median ms | min | p90 | n |")
print("|---|---|---|---|---|")
for k, v in rows.items():
    v.sort()
    print("| %s | %.1f | %.1f | %.1f | %d |" % (k, st.median(v), v[0], v[int(0.9 * (len(v) - 1))], len(v)))
PY
