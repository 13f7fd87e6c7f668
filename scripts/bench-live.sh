#!/usr/bin/env bash
# Issue 16: time a live `gdrdoctor check` against the tools it replaces, side by side in one run,
# on a GPU machine. Whole processes, wall time, the commands interleaved round-robin (so that
# drift hits every row alike), median of N runs each.
#
# Usage: [GDRDOCTOR=BIN] scripts/bench-live.sh [BIN] [N]
#   BIN     the gdrdoctor binary: the argument, else $GDRDOCTOR, else target/release/gdrdoctor,
#           else gdrdoctor on PATH. Needs no cargo: carry a release build.
#   N       runs per command (default 30; at least 20)
# Environment:
#   GDRDOCTOR the gdrdoctor binary (as BIN)
#   OUT       where the files go (default: ./bench-live-out); the lead's device runs set it
#   LSPCI     the lspci to time (default: lspci on PATH, row left out when there is none);
#             e.g. LSPCI="/tmp/lspci -i /tmp/pci.ids"
#   BUDGET_S  seconds for the timed rounds (default 150): rounds stop at N, or once the budget
#             is spent after at least 20 rounds; the whole script stays under 4 minutes unless
#             one round of every command takes more than ~7 s
#   PROBES=1  also time the probes (probe --registration, --doorbell, --hang; 5 runs each)
#   EXCLUSIVE=1  also check that a GPU in EXCLUSIVE_PROCESS compute mode is left out of CUDA
#             (needs root; sets GPU 0 to EXCLUSIVE_PROCESS and back to DEFAULT)
#
# Prints a Markdown table on stdout; writes under $OUT: summary.md (the same table and the
# targets), samples.tsv (every run), trace-warm.txt and trace-cold.txt (GDRDOCTOR_TRACE=1),
# env.txt (machine, driver, GPUs), strace-warm.txt (when strace is there), exclusive.txt.
set -u
export LC_ALL=C
BIN=${1:-${GDRDOCTOR:-}}
if [ -z "$BIN" ]; then
  if [ -x target/release/gdrdoctor ]; then BIN=target/release/gdrdoctor; else BIN=$(command -v gdrdoctor); fi
fi
N=${2:-30}
BUDGET_S=${BUDGET_S:-150}
# Every command under a deadline: one wedged tool must not eat the machine's time.
TO=(env)
command -v timeout >/dev/null && TO=(timeout -k 5 60)
[ "$N" -ge 20 ] 2>/dev/null || { echo "N must be at least 20 (got $N)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "no gdrdoctor binary at '$BIN'" >&2; exit 2; }
OUT=${OUT:-./bench-live-out}
mkdir -p "$OUT"
# The CUDA cache lives in a tmpfs, as /run/gdrdoctor does on a node.
STATE=$(mktemp -d /dev/shm/gdrdoctor-bench.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$STATE"' EXIT
export GDRDOCTOR_STATE_DIR=$STATE
unset GDRDOCTOR_TRACE GDRDOCTOR_COLLECT_TIMING
read -r -a LSPCI_CMD <<< "${LSPCI:-lspci}"

# ---- the machine ------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  echo "gdrdoctor: $("$BIN" --version 2>&1)"
  echo "kernel: $(uname -r)  cpus: $(nproc)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,pci.bus_id,driver_version,persistence_mode,compute_mode --format=csv
  echo "lspci: ${LSPCI_CMD[*]} ($("${LSPCI_CMD[@]}" 2>/dev/null | wc -l) functions)"
} > "$OUT/env.txt" 2>&1

# ---- the commands -----------------------------------------------------------------------------
NAMES=() CMDS=()
add() { NAMES+=("$1"); CMDS+=("$2"); }
add "gdrdoctor check (live, warm: cache present)" "warm"
add "gdrdoctor check (live, cold: cache removed)" "cold"
add "gdrdoctor check --static" "$BIN check --static --format json"
add "gdrdoctor topo (live, warm: cache present)" "topo-warm"
add "gdrdoctor topo (live, cold: cache removed)" "topo-cold"
# The floor of a cold run: a process that only loads libcuda and calls cuInit (issue 37).
CUINIT=""
if command -v gcc >/dev/null && gcc -O2 -o "$STATE/cuinit-time" "$(dirname "$0")/cuinit-time.c" -ldl 2>/dev/null; then
  CUINIT="$STATE/cuinit-time"
  add "cuinit-time (dlopen libcuda + cuInit, whole process)" "$CUINIT"
fi
if command -v nvidia-smi >/dev/null; then
  add "nvidia-smi -q" "nvidia-smi -q"
  add "nvidia-smi topo -m" "nvidia-smi topo -m"
fi
if command -v "${LSPCI_CMD[0]}" >/dev/null; then
  add "lspci -vvv" "${LSPCI_CMD[*]} -vvv"
else
  echo "note: no lspci at '${LSPCI_CMD[0]}' (set LSPCI=...): its row is left out" >&2
fi

run_one() { # run_one KIND -> prints elapsed microseconds
  local kind=$1 s e
  case "$kind" in
    warm) s=$EPOCHREALTIME; "${TO[@]}" "$BIN" check --format json >/dev/null 2>&1; e=$EPOCHREALTIME ;;
    cold) rm -f "$STATE/cuda-facts.json"
          s=$EPOCHREALTIME; "${TO[@]}" "$BIN" check --format json >/dev/null 2>&1; e=$EPOCHREALTIME ;;
    topo-warm) s=$EPOCHREALTIME; "${TO[@]}" "$BIN" topo >/dev/null 2>&1; e=$EPOCHREALTIME ;;
    topo-cold) rm -f "$STATE/cuda-facts.json"
          s=$EPOCHREALTIME; "${TO[@]}" "$BIN" topo >/dev/null 2>&1; e=$EPOCHREALTIME ;;
    *)    s=$EPOCHREALTIME; eval "${TO[*]} $kind" >/dev/null 2>&1; e=$EPOCHREALTIME ;;
  esac
  echo $(( (${e/./} - ${s/./}) ))
}

# One untimed round first (page cache, driver state), then N interleaved rounds.
"$BIN" check --format json >/dev/null 2>&1
for i in "${!CMDS[@]}"; do run_one "${CMDS[$i]}" >/dev/null; done
printf 'round\tcommand\tus\n' > "$OUT/samples.tsv"
T0=$SECONDS
ROUNDS=0
for r in $(seq "$N"); do
  for i in "${!CMDS[@]}"; do
    printf '%s\t%s\t%s\n' "$r" "${NAMES[$i]}" "$(run_one "${CMDS[$i]}")" >> "$OUT/samples.tsv"
  done
  ROUNDS=$r
  if [ "$r" -ge 20 ] && [ $((SECONDS - T0)) -ge "$BUDGET_S" ]; then
    echo "note: time budget (${BUDGET_S} s) spent after $r rounds" >&2
    break
  fi
done

stat_of() { # stat_of NAME -> "median min p90" in ms
  awk -F'\t' -v n="$1" 'NR > 1 && $2 == n {print $3}' "$OUT/samples.tsv" | sort -n |
    awk '{a[NR]=$1} END {if (NR==0) {print "- - -"; exit}
         m=a[int((NR+1)/2)]; p=a[int(NR*0.9+0.5)]; if (p=="") p=a[NR];
         printf "%.1f %.1f %.1f", m/1000, a[1]/1000, p/1000}'
}
declare -A MED
TABLE="| command ($ROUNDS runs each, interleaved) | median ms | min ms | p90 ms |
|---|---|---|---|"
for i in "${!NAMES[@]}"; do
  read -r med min p90 <<< "$(stat_of "${NAMES[$i]}")"
  MED["${NAMES[$i]}"]=$med
  TABLE+=$'\n'"| \`${NAMES[$i]}\` | $med | $min | $p90 |"
done

# ---- probes (one GPU, end to end) -------------------------------------------------------------
PTABLE=""
if [ "${PROBES:-0}" = 1 ] && command -v nvidia-smi >/dev/null; then
  PTABLE="| probe (5 runs, GPU 0) | median ms | target |
|---|---|---|"
  for p in "--registration" "--doorbell" "--hang"; do
    t=()
    for _ in 1 2 3 4 5; do
      s=$EPOCHREALTIME; "${TO[@]}" "$BIN" probe $p --gpu 0 --format json >/dev/null 2>&1; e=$EPOCHREALTIME
      t+=($(( (${e/./} - ${s/./}) )))
    done
    med=$(printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.0f", a[3]/1000}')
    PTABLE+=$'\n'"| \`gdrdoctor probe $p\` | $med | < 1000 |"
  done
fi

# ---- one traced run of each kind --------------------------------------------------------------
"${TO[@]}" "$BIN" check --format json >/dev/null 2>&1
GDRDOCTOR_TRACE=1 "${TO[@]}" "$BIN" check --format json 2>"$OUT/trace-warm.txt" >/dev/null
rm -f "$STATE/cuda-facts.json"
GDRDOCTOR_TRACE=1 "${TO[@]}" "$BIN" check --format json 2>"$OUT/trace-cold.txt" >/dev/null
GDRDOCTOR_TRACE=1 "${TO[@]}" "$BIN" check --static --format json 2>"$OUT/trace-static.txt" >/dev/null
if command -v strace >/dev/null; then
  "${TO[@]}" strace -f -c -o "$OUT/strace-warm.txt" "$BIN" check --format json >/dev/null 2>&1
fi
WARM_CUDA=$(grep -c '\[live-cuda\]' "$OUT/trace-warm.txt")

# ---- targets ----------------------------------------------------------------------------------
lt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "-" && b != "-" && a+0 < b+0)}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "-" && b != "-" && a+0 <= b+0)}'; }
verdict() { # verdict lt|le A B: n/a when a side was not measured (no nvidia-smi)
  if [ "$2" = - ] || [ "$3" = - ]; then echo "n/a"; elif "$@"; then echo "met"; else echo "NOT met"; fi
}
W=${MED["gdrdoctor check (live, warm: cache present)"]}
C=${MED["gdrdoctor check (live, cold: cache removed)"]}
S=${MED["gdrdoctor check --static"]}
Q=${MED["nvidia-smi -q"]:--}
TW=${MED["gdrdoctor topo (live, warm: cache present)"]}
CI=${MED["cuinit-time (dlopen libcuda + cuInit, whole process)"]:--}
half() { awk -v a="$1" 'BEGIN {if (a == "-") print "-"; else printf "%.1f", a / 2}'; }
plus10() { awk -v a="$1" 'BEGIN {if (a == "-") print "-"; else printf "%.1f", a + 10}'; }
T=${MED["nvidia-smi topo -m"]:--}
TARGETS="| target | measured | |
|---|---|---|
| warm < 100 ms | $W ms | $(verdict lt "$W" 100) |
| warm <= \`nvidia-smi topo -m\` | $W vs $T ms | $(verdict le "$W" "$T") |
| cold < \`nvidia-smi -q\` | $C vs $Q ms | $(verdict lt "$C" "$Q") |
| warm check <= half of \`nvidia-smi topo -m\` | $W vs $(half "$T") ms | $(verdict le "$W" "$(half "$T")") |
| warm topo <= half of \`nvidia-smi topo -m\` | $TW vs $(half "$T") ms | $(verdict le "$TW" "$(half "$T")") |
| cold check <= cuInit process + 10 ms | $C vs $(plus10 "$CI") ms | $(verdict le "$C" "$(plus10 "$CI")") |
| \`check --static\` < 20 ms | $S ms | $(verdict lt "$S" 20) |
| warm run starts no CUDA worker | $WARM_CUDA [live-cuda] trace lines | $( [ "$WARM_CUDA" = 0 ] && echo met || echo "NOT met") |"

# ---- exclusive-process compute mode (optional, root) ------------------------------------------
if [ "${EXCLUSIVE:-0}" = 1 ] && command -v nvidia-smi >/dev/null; then
  {
    echo "# GPU 0 in EXCLUSIVE_PROCESS: check must leave it out of CUDA"
    nvidia-smi -i 0 -c EXCLUSIVE_PROCESS
    rm -f "$STATE/cuda-facts.json"
    GDRDOCTOR_TRACE=1 "$BIN" check --format json -o "$OUT/exclusive-report.json" 2>&1 | grep -E 'live-cuda|cache\.'
    echo "## not_asked in the cache:"
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["facts"].get("not_asked"))' "$STATE/cuda-facts.json" 2>&1 ||
      grep -A3 not_asked "$STATE/cuda-facts.json"
    echo "## gpu.gdr-support findings:"
    grep -o '"id": "gpu.gdr-support"[^}]*' "$OUT/exclusive-report.json" | head
    nvidia-smi -i 0 -c DEFAULT
  } > "$OUT/exclusive.txt" 2>&1
fi

{
  echo "$TABLE"
  echo
  [ -n "$PTABLE" ] && { echo "$PTABLE"; echo; }
  echo "$TARGETS"
} | tee "$OUT/summary.md"
