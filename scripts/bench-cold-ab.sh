#!/usr/bin/env bash
# Cold and warm live `check` of two gdrdoctor builds side by side, interleaved, with the
# cuInit floor (scripts/cuinit-time.c) in the same loop (issue 37; the GPU machine).
#
#   scripts/bench-cold-ab.sh OLD_BINARY NEW_BINARY [ROUNDS=20] > ab.txt
#
# Each round, for each binary: the CUDA cache removed (cold run), then a warm run; then one
# `cuinit-time`. Prints one line per run ("old cold 288.7"), then the medians.
set -u
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 ROUNDS=${3:-20}
CT=$(mktemp /tmp/cuinit-time.XXXXXX)
gcc -O2 -o "$CT" scripts/cuinit-time.c -ldl || exit 1
LOG=$(mktemp)
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'; }
for _ in $(seq "$ROUNDS"); do
  for b in old new; do
    B=$NEW; [ $b = old ] && B=$OLD
    export GDRDOCTOR_STATE_DIR=/tmp/gdrdoctor-ab-$b
    rm -rf "$GDRDOCTOR_STATE_DIR"
    echo "$b cold $(ms "$B" check -f json)" | tee -a "$LOG"
    echo "$b warm $(ms "$B" check -f json)" | tee -a "$LOG"
  done
  echo "cuinit proc $(ms "$CT")" | tee -a "$LOG"
done
python3 - "$LOG" <<'PY'
import sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    a = l.split(); d[" ".join(a[:2])].append(float(a[2]))
for k, v in sorted(d.items()):
    v2 = sorted(v)
    print("%s: median %.1f ms, min %.1f, p90 %.1f, n %d" % (k, st.median(v), v2[0], v2[max(0, int(len(v2) * 0.9) - 1)], len(v)))
PY
rm -f "$CT" "$LOG"
