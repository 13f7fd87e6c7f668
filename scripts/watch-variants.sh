#!/usr/bin/env bash
# Fast-path variants of kernels/include/gdrdoctor/progress.cuh, measured against each other in one
# process lease on one GPU (issue 19, docs/performance.md "`watch` and `progress.cuh`").
#
# Each variant <name>.patch of the variant directory (default scripts/watch-variants/; a unified
# diff against kernels/include/gdrdoctor/progress.cuh, applied strictly by apply.py there: merged
# only labels the header as merged, old is the one it replaced) is built into its own
# examples/watch/watch_demo (the header copied into a directory under $OUT as
# gdrdoctor/progress.cuh, first on the include path). Then, per variant:
#   1. the SASS counts of the protocol kernels' bodies (instructions, BSSY, YIELD, CALL, BRA),
#      bare (<false>) and instrumented (<true>), from cuobjdump;
#   2. a detection smoke: `watch_demo --gpus 1 --hang spin-stall`, and about 1 s after it planted
#      the stall `$GDRDOCTOR watch --pid <pid> --once --threshold 300 --abort`: was the waiter
#      found, classified spin-stall, and freed by the abort;
#   3. `watch_demo --gpus 1 --bench $BENCH` (bare and instrumented in one process, the order
#      alternating per round), RUNS times per variant, interleaved: v1 v2 .. vn, v1 v2 .. vn, so a
#      drift of the machine shows as a difference between the runs of one variant, not between
#      variants.
# Results: $OUT/variants.md (per variant: ring and ping-pong overhead, the median of the per-round
# overheads of each run, the detection smoke, the SASS counts), $OUT/variants.json, and every raw
# file under $OUT (build/, sass/, smoke/, bench/). About 2 minutes for 5 variants on one H200
# (builds in parallel, ~11 s per bench run); a run that would pass TIME_BUDGET is skipped and
# marked so.
#
# Usage: GDRDOCTOR=target/release/gdrdoctor OUT=/tmp/out scripts/watch-variants.sh [VARIANT_DIR]
#   (from the repository root on the GPU machine: GDRDOCTOR=<gdrdoctor> scripts/watch-variants.sh)
#   env: GDRDOCTOR  the gdrdoctor binary for the smoke (no binary: the smoke is skipped)
#        OUT        where everything goes (default ./watch-variants-out)
#        NVCC       (default /usr/local/cuda/bin/nvcc)   ARCH (default -arch=native)
#        BENCH      rounds per bench run (15)            RUNS (bench runs per variant, 2)
#        VARIANTS   names to run, in order, e.g. VARIANTS="merged call" (default: old merged ucount spin pace;
#                   the others in the directory, measured in earlier runs, only when named)
#        BUILD_ONLY 1: build and count the SASS only (a machine without a GPU: ARCH=-arch=sm_90)
#        TIME_BUDGET seconds for the whole script (280)
# Needs: nvcc, python3; a GPU and nvidia-smi unless BUILD_ONLY=1. No cargo.
set -u
# Paths given relative to the caller's directory stay so after the cd to the repository root.
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
VDIR=${1:+$(abs "$1")}
GD=${GDRDOCTOR:+$(abs "$GDRDOCTOR")}
OUT=$(abs "${OUT:-watch-variants-out}")
cd "$(dirname "$0")/.."
VDIR=${VDIR:-scripts/watch-variants}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
ARCH=${ARCH:--arch=native}
BENCH=${BENCH:-15}
RUNS=${RUNS:-2}
BUILD_ONLY=${BUILD_ONLY:-0}
BUDGET=${TIME_BUDGET:-280}
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }

mkdir -p "$OUT/build" "$OUT/sass" "$OUT/smoke" "$OUT/bench"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }

[ -d "$VDIR" ] || { say "watch-variants: no variant directory $VDIR"; exit 2; }
[ -x "$NVCC" ] || { say "watch-variants: no nvcc at $NVCC (set NVCC)"; exit 2; }
if [ -n "$GD" ]; then
  if [ -x "$GD" ]; then GD=$(cd "$(dirname "$GD")" && pwd)/$(basename "$GD"); else say "watch-variants: GDRDOCTOR=$GD is not executable: no smoke"; GD=; fi
fi

# The variants: VARIANTS in that order, else the default list (run 5 added unroll2, inline4,
# inline16, run 6 inlslow and ftpeel, run 7 noabort and retabort: none better on the ring). Run 1 (old = merged then, call,
# floor, for, selfloop) chose `for` as the header; their patches stay for VARIANTS to name.
DEFAULT_VARIANTS="old merged ucount spin pace"
NAMES=${VARIANTS:-$DEFAULT_VARIANTS}
for n in $NAMES; do
  [ -f "$VDIR/$n.patch" ] || { say "watch-variants: no $VDIR/$n.patch"; exit 2; }
done
say "variants: $NAMES"
say "nvcc: $NVCC $ARCH ($("$NVCC" --version 2>&1 | tail -1)); bench $BENCH rounds x $RUNS runs; gdrdoctor: ${GD:-none}"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >> "$LOG" 2>&1 || true

# 1. Build every variant (in parallel), then count its SASS.
for n in $NAMES; do
  d="$OUT/build/$n"
  mkdir -p "$d/include/gdrdoctor"
  python3 scripts/watch-variants/apply.py kernels/include/gdrdoctor/progress.cuh "$VDIR/$n.patch" \
    "$d/include/gdrdoctor/progress.cuh" 2>> "$LOG" || { say "watch-variants: $n.patch does not apply"; exit 2; }
  ( "$NVCC" -O3 -std=c++14 -lineinfo $ARCH -I "$d/include" -o "$d/watch_demo" examples/watch/watch_demo.cu \
      > "$d/build.txt" 2>&1; echo $? > "$d/build.rc" ) &
done
wait
BUILT=
for n in $NAMES; do
  if [ "$(cat "$OUT/build/$n/build.rc" 2>/dev/null)" = 0 ] && [ -x "$OUT/build/$n/watch_demo" ]; then
    BUILT="$BUILT $n"
  else
    say "build $n: FAILED (build/$n/build.txt)"; sed 's/^/  /' "$OUT/build/$n/build.txt" | head -20 | tee -a "$LOG"
  fi
done
say "built:$BUILT in $(elapsed) s"
CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
command -v "$CUOBJDUMP" >/dev/null 2>&1 || CUOBJDUMP=$(command -v cuobjdump || true)
for n in $BUILT; do
  if [ -n "$CUOBJDUMP" ] && "$CUOBJDUMP" -sass "$OUT/build/$n/watch_demo" > "$OUT/sass/$n.sass" 2>&1; then
    # The kernel body: the code before its first out-of-line subroutine (slow path, 64-bit modulo),
    # counted as scripts/watch-gpu-test.sh does.
    python3 - "$OUT/sass/$n.sass" > "$OUT/sass/$n.counts" <<'PY'
import re, sys
funcs, cur = {}, None
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = funcs.setdefault(m.group(1), [])
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m and cur is not None:
        cur.append((int(m.group(1), 16), m.group(2)))
for k in ["ring_producer", "ring_consumer", "pp_ping", "pp_pong"]:
    for v, name in [("0", "bare"), ("1", "instrumented")]:
        body = next((c for f, c in funcs.items() if re.match(r"_Z\d+%sILb%sE" % (k, v), f)), None)
        if body is None:
            print("%s %s: not found" % (k, name))
            continue
        calls = [int(t, 16) for _, i in body for t in re.findall(r"CALL\.REL\S* (0x[0-9a-f]+)", i)]
        end = min(calls) if calls else 1 << 62
        ins = [i for a, i in body if a < end and not i.startswith("NOP")]
        print("%s %s: %d instructions, %d BSSY, %d YIELD, %d CALL, %d BRA" % (
            k, name, len(ins), sum("BSSY" in i for i in ins), sum("YIELD" in i for i in ins),
            sum("CALL" in i for i in ins),
            sum(re.search(r"(^|\s)BRA(\s|$)", i) is not None for i in ins)))
PY
    sed "s/^/sass $n: /" "$OUT/sass/$n.counts" >> "$LOG"
  else
    say "sass $n: no cuobjdump output"
  fi
done

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$BUILD_ONLY" = 1 ] || [ "${NGPU:-0}" -lt 1 ]; then
  say "no GPU runs: $([ "$BUILD_ONLY" = 1 ] && echo BUILD_ONLY=1 || echo 'nvidia-smi lists no GPU')"
else
  # 2. Detection smoke, one planted spin-stall per variant.
  for n in $BUILT; do
    base="$OUT/smoke/$n"
    if [ -z "$GD" ]; then echo "skipped: no GDRDOCTOR" > "$base.skip"; continue; fi
    if [ $(( BUDGET - $(elapsed) )) -lt 60 ]; then echo "skipped: time budget" > "$base.skip"; continue; fi
    "$OUT/build/$n/watch_demo" --gpus 1 --hang spin-stall --hang-seconds 8 > "$base.demo.txt" 2>&1 &
    pid=$!
    for _ in $(seq 400); do
      grep -q '^planted' "$base.demo.txt" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.025
    done
    sleep 1
    timeout 30 "$GD" watch --pid "$pid" --once --threshold 300 --abort --grace 2000 --format json \
      -o "$base.json" 2> "$base.watch.txt"
    echo $? > "$base.watch.rc"
    for _ in $(seq 240); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo $? > "$base.demo.rc"
    rm -f /dev/shm/gdrdoctor-"$pid"-* 2>/dev/null
    say "smoke $n: watch exit $(cat "$base.watch.rc"), demo exit $(cat "$base.demo.rc"), $(grep -m1 -o 'STALL [a-z-]*' "$base.watch.txt" || echo 'no stall line')"
  done

  # 3. The benches, interleaved: run 1 of every variant, then run 2 of every variant, ...
  for r in $(seq "$RUNS"); do
    for n in $BUILT; do
      f="$OUT/bench/$n-run$r"
      left=$(( BUDGET - $(elapsed) ))
      if [ "$left" -lt 30 ]; then
        echo "skipped: time budget ($(elapsed) s of $BUDGET s used)" > "$f.skip"; say "bench $n run $r: skipped (time budget)"
        continue
      fi
      [ "$left" -gt 90 ] && left=90
      s=$(date +%s)
      timeout "$left" "$OUT/build/$n/watch_demo" --gpus 1 --bench "$BENCH" > "$f.jsonl" 2> "$f.err.txt"
      rc=$?
      say "bench $n run $r: exit $rc, $(grep -c '^{' "$f.jsonl") runs, $(( $(date +%s) - s )) s"
    done
  done
fi

python3 - "$OUT" "$RUNS" $NAMES <<'EOF' | tee -a "$LOG"
import json, os, statistics, sys
out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
res = {"variants": {}}
def overheads(path, proto, key, higher):
    try:
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return None
    rounds = {}
    for i, r in enumerate(rows):
        if r.get("proto") == proto:
            rounds.setdefault(r.get("round", i // 2), {})[r["mode"]] = r[key]
    ovs = sorted(((x["bare"] / x["instrumented"] - 1) if higher else (x["instrumented"] / x["bare"] - 1)) * 100
                 for x in rounds.values() if "bare" in x and "instrumented" in x)
    if not ovs:
        return None
    b = [x["bare"] for x in rounds.values() if "bare" in x]
    i = [x["instrumented"] for x in rounds.values() if "instrumented" in x]
    return {"median": statistics.median(ovs), "min": ovs[0], "max": ovs[-1], "rounds": len(ovs),
            "bare": statistics.median(b), "instrumented": statistics.median(i)}
def smoke(n):
    base = os.path.join(out, "smoke", n)
    if os.path.exists(base + ".skip"):
        return {"found": None, "text": open(base + ".skip").read().strip()}
    try:
        rep = json.load(open(base + ".json"))
    except (OSError, ValueError) as e:
        return {"found": None, "text": "no report (%s)" % e.__class__.__name__} if os.path.exists(base + ".watch.rc") else {"found": None, "text": "not run"}
    eps = [e for a in rep.get("probe", {}).get("watch", {}).get("areas", []) for e in a.get("episodes", [])]
    classes = sorted({e.get("waiter", {}).get("class", "?") for e in eps})
    aborts = [f["status"] for f in rep.get("findings", []) if f.get("id") == "watch.abort"]
    demo = open(base + ".demo.txt").read() if os.path.exists(base + ".demo.txt") else ""
    freed = "done aborted=1" in demo
    found = bool(eps) and classes == ["spin-stall"]
    return {"found": found, "episodes": len(eps), "classes": classes, "abort": aborts, "freed": freed,
            "text": "%s (%d waiter%s: %s; abort %s; demo %s)" % (
                "found" if found else "NOT found", len(eps), "" if len(eps) == 1 else "s", ", ".join(classes) or "none",
                "/".join(aborts) or "-", "freed" if freed else "not freed")}
lines = ["# progress.cuh fast-path variants", "",
         "Overhead = median over the bench rounds of (bare / instrumented - 1) for the ring (items/s) and",
         "(instrumented / bare - 1) for the ping-pong (round-trip ns), per run; [min, max] of the rounds.", "",
         "| variant | " + " | ".join("ring run %d" % (r + 1) for r in range(runs)) + " | " +
         " | ".join("ping-pong run %d" % (r + 1) for r in range(runs)) + " | spin-stall smoke |",
         "|---|" + "---|" * (2 * runs + 1)]
for n in names:
    v = {"ring": [], "pingpong": [], "smoke": smoke(n)}
    cells = {"ring": [], "pingpong": []}
    for proto, key, higher in [("ring", "items_per_s", True), ("pingpong", "rtt_ns", False)]:
        for r in range(runs):
            f = os.path.join(out, "bench", "%s-run%d" % (n, r + 1))
            o = overheads(f + ".jsonl", proto, key, higher)
            v[proto].append(o)
            if o is None:
                cells[proto].append("skipped" if os.path.exists(f + ".skip") else "-")
            else:
                cells[proto].append("**%+.2f%%** [%+.2f, %+.2f]" % (o["median"], o["min"], o["max"]))
    counts = os.path.join(out, "sass", n + ".counts")
    v["sass"] = open(counts).read().splitlines() if os.path.exists(counts) else []
    res["variants"][n] = v
    lines.append("| %s | %s | %s | %s |" % (n, " | ".join(cells["ring"]), " | ".join(cells["pingpong"]), v["smoke"]["text"]))
lines += ["", "Absolute medians (bare, instrumented) per run:", ""]
for n in names:
    for proto, unit in [("ring", "items/s"), ("pingpong", "ns")]:
        xs = ["%.5g / %.5g" % (o["bare"], o["instrumented"]) if o else "-" for o in res["variants"][n][proto]]
        lines.append("- %s %s (%s): %s" % (n, proto, unit, "; ".join(xs)))
lines += ["", "SASS of the protocol kernels' bodies (instructions, BSSY, YIELD, CALL, BRA):", ""]
for n in names:
    for s in res["variants"][n]["sass"]:
        lines.append("- %s: %s" % (n, s))
json.dump(res, open(os.path.join(out, "variants.json"), "w"), indent=2)
open(os.path.join(out, "variants.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
say "total $(elapsed) s"
