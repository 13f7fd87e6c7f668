#!/usr/bin/env bash
# GPU-machine test of `gdrdoctor watch` with kernels/include/gdrdoctor/progress.cuh (issue 19).
#
# Builds examples/watch/watch_demo with nvcc, then on one GPU (and on two when the machine has
# them: the flags then cross over NVLink/PCIe peer access):
#   1. plants each stall class (spin-stall, forward-progress, ordering, stale-read, silent,
#      remote-wait) REPS times, attaches `gdrdoctor watch --pid <pid> --abort` live, and checks
#      that every stalled waiter got the planted class, that the abort freed the job, and the
#      detection latency (p99 of the waits' age at detection <= threshold + 2 polls);
#   2. runs the healthy ring and ping-pong with watch attached: no stall may be reported;
#   3. measures the instrumentation's cost: the ring and the ping-pong, bare and instrumented,
#      BENCH rounds of one run each (the order alternates), in one process; the verdict is the
#      median of the per-round overheads (target: within 2%), reported with its range and the
#      spread of each variant.
# Results go to $OUT (summary.md, summary.json, and every raw file under runs/). Exit 0 when
# every check passed. About 2-3 minutes.
#
# Usage: scripts/watch-gpu-test.sh [GDRDOCTOR_BINARY]
#   env: OUT (default ./watch-gpu-out), NVCC (default /usr/local/cuda/bin/nvcc),
#        REPS (4), BENCH (15), THRESHOLD_MS (300), POLL_MS (10), GPUS ("1 2": the configurations)
# Needs: nvcc, python3 (the summary), nvidia-smi (the GPU count). No cargo: pass the release
# binary (default: target/release/gdrdoctor, then gdrdoctor on PATH).
set -u
cd "$(dirname "$0")/.."

GD=${1:-}
if [ -z "$GD" ]; then
  if [ -x target/release/gdrdoctor ]; then GD=target/release/gdrdoctor; else GD=$(command -v gdrdoctor || true); fi
fi
[ -n "$GD" ] && [ -x "$GD" ] || { echo "watch-gpu-test: no gdrdoctor binary (pass its path)" >&2; exit 2; }
GD=$(cd "$(dirname "$GD")" && pwd)/$(basename "$GD")
OUT=${OUT:-$PWD/watch-gpu-out}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
REPS=${REPS:-4}
BENCH=${BENCH:-15}
THR=${THRESHOLD_MS:-300}
POLL=${POLL_MS:-10}
mkdir -p "$OUT/runs"
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
T0=$(date +%s)

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${NGPU:-0}" -ge 1 ] || NGPU=1
CONFIGS=${GPUS:-"1 2"}
say "gdrdoctor: $GD ($("$GD" --version 2>&1))"
say "gpus: $NGPU; nvcc: $NVCC; threshold ${THR} ms, poll ${POLL} ms, reps $REPS, bench $BENCH"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >> "$LOG" 2>&1 || true

# Build.
DEMO="$OUT/watch_demo"
if ! "$NVCC" -O3 -std=c++14 -lineinfo -arch=native -I kernels/include -o "$DEMO" examples/watch/watch_demo.cu \
    > "$OUT/build.txt" 2>&1; then
  say "build failed:"; cat "$OUT/build.txt" | tee -a "$LOG"; exit 1
fi
say "built $DEMO in $(( $(date +%s) - T0 )) s ($("$NVCC" --version 2>&1 | tail -1))"
# The code the overhead comes from: the SASS of the demo and, per protocol kernel (bare = <false>,
# instrumented = <true>), the instructions, convergence barriers (BSSY) and YIELDs of its body
# (the code before its first out-of-line subroutine: the slow path, the 64-bit modulo). The
# instrumented body should have the bare one's shape (docs/performance.md, watch section).
CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
if [ -x "$CUOBJDUMP" ] && "$CUOBJDUMP" -sass "$DEMO" > "$OUT/runs/watch_demo.sass" 2>&1; then
  python3 - "$OUT/runs/watch_demo.sass" <<'PY' | tee -a "$LOG"
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
            print("sass %s %s: not found" % (k, name))
            continue
        calls = [int(t, 16) for _, i in body for t in re.findall(r"CALL\.REL\S* (0x[0-9a-f]+)", i)]
        end = min(calls) if calls else 1 << 62
        ins = [i for a, i in body if a < end and not i.startswith("NOP")]
        print("sass %s %s: %d instructions, %d BSSY, %d YIELD, %d CALL" % (
            k, name, len(ins), sum("BSSY" in i for i in ins), sum("YIELD" in i for i in ins), sum("CALL" in i for i in ins)))
PY
fi
# The header under the toolkit's NVRTC too (best effort: needs python3 and libnvrtc).
NVRTC=$(ls "$(dirname "$NVCC")"/../lib64/libnvrtc.so.* 2>/dev/null | head -1)
if [ -n "$NVRTC" ] && command -v python3 >/dev/null; then
  python3 scripts/check-progress-header.py --nvrtc "$NVRTC" --arch compute_90 >> "$LOG" 2>&1 \
    && say "nvrtc: ok" || say "nvrtc: FAILED (see log)"
fi

CLASSES="spin-stall forward-progress ordering stale-read silent remote-wait"

# Start the demo with ARGS (a child of this shell), wait until it printed MARK; its pid in $pid.
start_demo() {
  local out=$1 mark=$2; shift 2
  "$DEMO" "$@" > "$out" 2>&1 &
  pid=$!
  for _ in $(seq 400); do
    grep -q "$mark" "$out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.025
  done
}

# Wait for our demo process to end (at most $2 s), else kill it; its exit code.
reap() {
  local pid=$1 limit=$2 i
  for i in $(seq $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null; fi
  wait "$pid" 2>/dev/null
  local rc=$?
  rm -f /dev/shm/gdrdoctor-"$pid"-* 2>/dev/null
  return $rc
}

for G in $CONFIGS; do
  if [ "$G" -gt "$NGPU" ]; then say "skip --gpus $G: $NGPU gpu(s)"; continue; fi
  for C in $CLASSES; do
    for R in $(seq "$REPS"); do
      base="$OUT/runs/g$G-$C-$R"
      start_demo "$base.demo.txt" '^planted' --gpus "$G" --hang "$C" --hang-seconds 20
      timeout 60 "$GD" watch --pid "$pid" --threshold "$THR" --poll-ms "$POLL" --abort --grace 3000 \
        --format json -o "$base.json" 2> "$base.watch.txt"
      wrc=$?
      reap "$pid" 15; drc=$?
      echo "$wrc $drc" > "$base.rc"
      say "g$G $C #$R: watch exit $wrc, demo exit $drc, $(grep -m1 -o 'STALL [a-z-]*' "$base.watch.txt" || echo 'no stall line')"
    done
  done
  # Healthy protocols with watch attached: no stall.
  for P in ring pingpong; do
    base="$OUT/runs/g$G-healthy-$P"
    start_demo "$base.demo.txt" '^pid ' --gpus "$G" --proto "$P" --seconds 3
    timeout 60 "$GD" watch --pid "$pid" --threshold "$THR" --poll-ms "$POLL" --format json -o "$base.json" \
      2> "$base.watch.txt"
    wrc=$?
    reap "$pid" 20; drc=$?
    echo "$wrc $drc" > "$base.rc"
    say "g$G healthy $P: watch exit $wrc, demo exit $drc"
  done
  # Overhead: bare vs instrumented, alternating, one process.
  base="$OUT/runs/g$G-bench"
  timeout 300 "$DEMO" --gpus "$G" --bench "$BENCH" > "$base.jsonl" 2> "$base.err.txt"
  say "g$G bench: exit $? ($(grep -c '^{' "$base.jsonl") runs)"
done

python3 - "$OUT" "$THR" "$POLL" "$CONFIGS" "$NGPU" <<'EOF' | tee -a "$LOG"
import json, os, sys, glob, statistics
out, thr, poll, configs, ngpu = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split(), int(sys.argv[5])
classes = ["spin-stall", "forward-progress", "ordering", "stale-read", "silent", "remote-wait"]
summary = {"threshold_ms": thr, "poll_ms": poll, "configs": {}, "checks": []}
lines = ["# watch GPU test", "", "threshold %.0f ms, poll %.0f ms" % (thr, poll), ""]
ok_all = True
def check(name, ok, detail):
    global ok_all
    ok_all &= ok
    summary["checks"].append({"check": name, "ok": ok, "detail": detail})
    lines.append("- %s **%s**: %s" % ("PASS" if ok else "FAIL", name, detail))
def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))] if xs else None
for g in configs:
    if int(g) > ngpu:
        continue
    cfg = summary["configs"].setdefault(g, {"classes": {}})
    lines += ["", "## %s gpu(s)" % g, "", "| class | runs | classified right | episodes | detect p50 ms | detect p99 ms | max ms | abort |", "|---|---|---|---|---|---|---|---|"]
    all_lat = []
    class_checks = []
    for c in classes:
        runs = sorted(glob.glob(os.path.join(out, "runs", "g%s-%s-*.json" % (g, c))))
        right, eps, lat, aborts = 0, 0, [], []
        for f in runs:
            try:
                r = json.load(open(f))
            except Exception:
                continue
            areas = r.get("probe", {}).get("watch", {}).get("areas", [])
            es = [e for a in areas for e in a.get("episodes", [])]
            eps += len(es)
            if es and all(e["waiter"].get("class") == c for e in es):
                right += 1
            lat += [e["detected_after_ms"] for e in es]
            aborts += [f2["status"] for f2 in r["findings"] if f2["id"] == "watch.abort"]
        all_lat += lat
        row = {"runs": len(runs), "right": right, "episodes": eps,
               "p50": statistics.median(lat) if lat else None, "p99": p99(lat), "max": max(lat) if lat else None,
               "abort": "%d/%d pass" % (aborts.count("pass"), len(aborts))}
        cfg["classes"][c] = row
        fmt = lambda v: "%.1f" % v if v is not None else "-"
        lines.append("| %s | %d | %d | %d | %s | %s | %s | %s |" % (c, len(runs), right, eps, fmt(row["p50"]), fmt(row["p99"]), fmt(row["max"]), row["abort"]))
        class_checks.append(("g%s %s classified" % (g, c), len(runs) > 0 and right == len(runs), "%d of %d runs, every waiter %s" % (right, len(runs), c)))
        class_checks.append(("g%s %s aborted" % (g, c), len(aborts) > 0 and aborts.count("pass") == len(aborts), row["abort"]))
    lines.append("")
    for c in class_checks:
        check(*c)
    p = p99(all_lat)
    cfg["detect_p99_ms"] = p
    check("g%s detection latency" % g, p is not None and p <= thr + 2 * poll,
          "p99 %.1f ms over %d stalled waiters (limit threshold + 2 polls = %.0f ms)" % (p or -1, len(all_lat), thr + 2 * poll))
    for proto in ["ring", "pingpong"]:
        f = os.path.join(out, "runs", "g%s-healthy-%s.json" % (g, proto))
        try:
            r = json.load(open(f))
            st = [x["status"] for x in r["findings"] if x["id"] == "watch.stall"]
            check("g%s healthy %s" % (g, proto), st and all(s == "pass" for s in st), "watch.stall %s" % st)
        except Exception as e:
            check("g%s healthy %s" % (g, proto), False, "no report: %s" % e)
    runs = []
    try:
        runs = [json.loads(l) for l in open(os.path.join(out, "runs", "g%s-bench.jsonl" % g)) if l.startswith("{")]
    except Exception:
        pass
    # Overhead per round: each round runs the bare and the instrumented variant back to back (the
    # order alternates), so a drift of the GPU between rounds cancels in the pair. The verdict is
    # the median over the rounds; the table shows the spread of each variant ((max - min) /
    # median) and the range of the per-round overheads, so a difference can be told from noise.
    lines += ["", "| protocol | bare: median (spread) | instrumented: median (spread) | overhead: median of rounds [min, max] | rounds |",
              "|---|---|---|---|---|"]
    bench_checks = []
    for proto, key, better in [("ring", "items_per_s", "higher"), ("pingpong", "rtt_ns", "lower")]:
        mine = [r for r in runs if r["proto"] == proto]
        b = [r[key] for r in mine if r["mode"] == "bare"]
        i = [r[key] for r in mine if r["mode"] == "instrumented"]
        if not b or not i:
            bench_checks.append(("g%s %s overhead" % (g, proto), False, "no bench runs"))
            continue
        rounds = {}
        for n, r in enumerate(mine):
            rounds.setdefault(r.get("round", n // 2), {})[r["mode"]] = r[key]
        pairs = [(x["bare"], x["instrumented"]) for x in rounds.values() if "bare" in x and "instrumented" in x]
        ovs = sorted(((pb / pi - 1) if better == "higher" else (pi / pb - 1)) * 100 for pb, pi in pairs)
        mb, mi = statistics.median(b), statistics.median(i)
        ov = statistics.median(ovs) if ovs else float("nan")
        spread = lambda xs, m: (max(xs) - min(xs)) / m * 100
        cfg[proto] = {"bare": mb, "instrumented": mi, "overhead_pct": ov,
                      "overhead_of_medians_pct": ((mb / mi - 1) if better == "higher" else (mi / mb - 1)) * 100,
                      "round_overheads_pct": ovs, "bare_spread_pct": spread(b, mb), "instrumented_spread_pct": spread(i, mi),
                      "bare_runs": b, "instrumented_runs": i}
        unit = "items/s" if proto == "ring" else "ns rtt"
        lines.append("| %s | %.4g %s (%.2f%%) | %.4g %s (%.2f%%) | %+.2f%% [%+.2f%%, %+.2f%%] | %d |" % (
            proto, mb, unit, spread(b, mb), mi, unit, spread(i, mi), ov, ovs[0] if ovs else float("nan"),
            ovs[-1] if ovs else float("nan"), len(pairs)))
        bench_checks.append(("g%s %s overhead" % (g, proto), bool(ovs) and ov <= 2.0,
                             "%+.2f%% median of %d rounds, range %+.2f%% to %+.2f%% (target <= 2%%)" % (
                                 ov, len(pairs), ovs[0] if ovs else float("nan"), ovs[-1] if ovs else float("nan"))))
    lines.append("")
    for c in bench_checks:
        check(*c)
summary["ok"] = ok_all
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print("\nRESULT: %s" % ("PASS" if ok_all else "FAIL"))
sys.exit(0 if ok_all else 1)
EOF
rc=${PIPESTATUS[0]}
say "total $(( $(date +%s) - T0 )) s"
exit "$rc"
