#!/usr/bin/env bash
# CPU-only benchmarks that .ci/run runs and prints: each figure as a ratio against a reference
# measured in the same run on the same machine, so that a slow or shared machine moves both.
#
#   scripts/bench-cpu.sh [BIN]        # default target/release/gdrdoctor; prints a Markdown table
#
#   figure                         reference
#   check --sysroot (8x8 HGX)      gdrdoctor --version (process start), and cat of every file
#   topo --sysroot (8x8 HGX)       of the fixture's tree
#   check --sysroot X.tar.gz       gdrdoctor --version, and tar xzf of the same archive
#   diagnose of a large paste      cat of the paste (every real paste in fixtures/pastes, joined)
#   fleet of N reports (10,000)    cat of the same report files
#
# Knobs: RUNS (median of, default 20), FLEET_N (10000), FLEET_RUNS (3), WORK (a directory to
# keep). The fleet reports are generated once (1.6 GB in WORK; removed unless WORK is given).
# Budget: under 2 minutes on the shared 2-core build machine (docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/gdrdoctor}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
RUNS=${RUNS:-20}
FLEET_N=${FLEET_N:-10000}
FLEET_RUNS=${FLEET_RUNS:-3}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; else
  WORK=$(mktemp -d /tmp/gdrdoctor-bench.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
fi
start=$SECONDS

# median_ms N CMD...: median wall time of N runs, in ms (output discarded, exit code ignored).
median_ms() {
  local n=$1; shift
  local t=() s e
  for _ in $(seq "$n"); do
    s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N)
    t+=($(( (e - s) / 1000 )))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }'; }
row() { # row FIGURE COMMAND MS REFERENCE REF_MS
  printf '| %s | `%s` | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5" "$(ratio "$3" "$5")"
}

FIX=$(scripts/fixture path hgx-h200x8-cx7x8-healthy)
find "$FIX" -type f -print0 > "$WORK/files"
cat_fix() { xargs -0 cat < "$WORK/files"; }
PASTE="$WORK/all-pastes.txt"
cat fixtures/pastes/*.txt fixtures/pastes/*.log > "$PASTE" 2>/dev/null || true

version=$(median_ms "$RUNS" "$BIN" --version)
catfix=$(median_ms "$RUNS" cat_fix)
check=$(median_ms "$RUNS" "$BIN" check --sysroot "$FIX" --format json)
ARCHIVE=$PWD/fixtures/nodes/hgx-h200x8-cx7x8-healthy.tar.gz
mkdir -p "$WORK/untar"
untar() { rm -rf "$WORK/untar/x" && mkdir "$WORK/untar/x" && tar xzf "$ARCHIVE" -C "$WORK/untar/x"; }
untarms=$(median_ms "$RUNS" untar)
checktgz=$(median_ms "$RUNS" "$BIN" check --sysroot "$ARCHIVE" --format json)
topo=$(median_ms "$RUNS" "$BIN" topo --sysroot "$FIX")
catpaste=$(median_ms "$RUNS" cat "$PASTE")
diagnose=$(median_ms "$RUNS" "$BIN" diagnose "$PASTE" --format json)

# The fleet: one template report, N copies with their own hostnames (compact JSON, as srun
# --output of `check -f json` would give after a jq -c; ~160 KB each).
"$BIN" check --sysroot "$FIX" --format json -o "$WORK/tpl.json" >/dev/null 2>&1 || true
mkdir -p "$WORK/reports"
python3 - "$WORK" "$FLEET_N" <<'PY'
import json, os, sys
work, n = sys.argv[1], int(sys.argv[2])
r = json.load(open(os.path.join(work, "tpl.json")))
r["host"]["hostname"] = "@HOST@"
text = json.dumps(r, separators=(",", ":"))
for i in range(n):
    host = "node%05d" % i
    with open(os.path.join(work, "reports", host + ".json"), "w") as f:
        f.write(text.replace("@HOST@", host, 1))
PY
cat_reports() { find "$WORK/reports" -name '*.json' -print0 | xargs -0 cat; }
cat_reports > /dev/null   # into the page cache
catrep=$(median_ms "$FLEET_RUNS" cat_reports)
fleet=$(median_ms "$FLEET_RUNS" "$BIN" fleet "$WORK/reports" --format json)
rss=$( { /usr/bin/time -f '%M' "$BIN" fleet "$WORK/reports" --format json >/dev/null; } 2>&1 | tail -1 || true)

echo "CPU benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPU(s), load $(cut -d' ' -f1-3 /proc/loadavg), $("$BIN" --version)"
echo
echo "| figure | command | ms (median) | reference | ms (median) | ratio |"
echo "|---|---|---|---|---|---|"
row "8x8 check" "check --sysroot hgx-h200x8-cx7x8-healthy -f json" "$check" "gdrdoctor --version" "$version"
row "8x8 check" "check --sysroot hgx-h200x8-cx7x8-healthy -f json" "$check" "cat of its $(tr -cd '\0' < "$WORK/files" | wc -c) files" "$catfix"
row "8x8 check, the archive" "check --sysroot hgx-h200x8-cx7x8-healthy.tar.gz -f json" "$checktgz" "gdrdoctor --version" "$version"
row "8x8 check, the archive" "check --sysroot hgx-h200x8-cx7x8-healthy.tar.gz -f json" "$checktgz" "tar xzf of the archive" "$untarms"
row "8x8 topo" "topo --sysroot hgx-h200x8-cx7x8-healthy" "$topo" "gdrdoctor --version" "$version"
row "8x8 topo" "topo --sysroot hgx-h200x8-cx7x8-healthy" "$topo" "cat of its files" "$catfix"
row "diagnose, $(wc -c < "$PASTE") B paste" "diagnose all-pastes.txt -f json" "$diagnose" "gdrdoctor --version" "$version"
row "diagnose, $(wc -c < "$PASTE") B paste" "diagnose all-pastes.txt -f json" "$diagnose" "cat of the paste" "$catpaste"
row "fleet, $FLEET_N reports ($(du -sh "$WORK/reports" | cut -f1)), max RSS ${rss} KiB" "fleet reports/ -f json" "$fleet" "cat of the reports" "$catrep"
echo
echo "bench-cpu: $((SECONDS - start)) s (medians of $RUNS runs; fleet of $FLEET_RUNS)"
