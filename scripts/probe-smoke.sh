#!/usr/bin/env bash
# Run every probe on a GPU machine with a prebuilt gdrdoctor and keep the reports, then check
# that a signal to the parent leaves no worker behind. For the probe reshape (issue 11): the
# reports are compared with fixtures/reports/ by `cargo test` (copy them there to refresh the
# captures), the exit codes and leftover workers are checked here.
# Usage: scripts/probe-smoke.sh BIN OUTDIR        (exit 1 on any unexpected result)
set -u
BIN=${1:?gdrdoctor binary}; OUT=${2:?output directory}
mkdir -p "$OUT"
fail=0
ngpu=$(ls -d /proc/driver/nvidia/gpus/* 2>/dev/null | wc -l)
probe() { # probe NAME ARGS...: run, keep the report and stderr, print the exit code
  local name=$1; shift
  "$BIN" probe "$@" --format json -o "$OUT/$name.json" 2>"$OUT/$name.stderr"
  local rc=$?
  printf '%-28s exit %s\n' "$name" "$rc" | tee -a "$OUT/summary.txt"
  # 0: all passed; 1: a finding failed (a real defect or a slow pair: read it); 2/3: not expected
  # on a healthy GPU node.
  if [ "$rc" -ge 2 ]; then fail=1; fi
}
probe registration --registration --repeat 50
probe hang --hang --inject all --bench 25 --hang-timeout 200
probe hang-inject-all --hang --inject all --hang-timeout 200
probe doorbell --doorbell
probe doorbell-ptx --doorbell --ptx
probe p2p --p2p
if [ "$ngpu" -ge 2 ]; then
  probe hang-remote-wait --hang --inject remote-wait --gpu 0 --peer 1 --hang-timeout 200
fi

# A signal to the parent must take the worker with it (exit 128+15), including a worker whose
# kernel ignores the abort.
workers() { pgrep -f -- "__worker hang" || true; }
"$BIN" probe --hang --inject ignore-abort --hang-timeout 5000 --timeout 120 --format json \
  >/dev/null 2>&1 &
parent=$!
for _ in $(seq 100); do [ -n "$(workers)" ] && break; sleep 0.1; done
before=$(workers)
kill -TERM "$parent"; wait "$parent"; rc=$?
sleep 1
left=$(workers)
printf '%-28s exit %s, workers before [%s] after [%s]\n' sigterm "$rc" "$before" "$left" \
  | tee -a "$OUT/summary.txt"
if [ "$rc" -ne 143 ] || [ -z "$before" ] || [ -n "$left" ]; then fail=1; fi
# The GPU is still usable afterwards.
probe after-sigterm --registration
exit $fail
