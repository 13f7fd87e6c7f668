#!/usr/bin/env bash
# `cargo test --workspace`, then one summary at the end: how many tests passed, failed and were
# ignored over every test binary, and every test group that skipped here (a missing system
# prerequisite: tmux, gcc, lspci, libibverbs, chromium, the shared real captures, ...) with how
# to enable it. The groups print their `SKIP <group>: ...` line where cargo runs them, scattered
# over some 35 test binaries; this collects them.
#
#   scripts/test-report.sh                     # the whole workspace
#   scripts/test-report.sh -p gdrdoctor --test terminal    # arguments go to `cargo test`
#
# Exits with cargo's status. GDRDOCTOR_TEST_REQUIRE_ALL=1 (as `.ci/run` sets it) makes every
# skip a failure instead (docs/testing.md).
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp "${TMPDIR:-/tmp}/gdrdoctor-test-report.XXXXXX")
trap 'rm -f "$log"' EXIT

if [ "$#" -eq 0 ]; then
  set -- --workspace
fi
cargo test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

summary() {
  echo
  echo "== test report =="
  # `test result: ok. 12 passed; 0 failed; 1 ignored; ...`, one line per test binary.
  awk '/^test result: / {
         for (i = 1; i <= NF; i++) {
           if ($(i + 1) ~ /^passed;?$/) p += $i
           if ($(i + 1) ~ /^failed;?$/) f += $i
           if ($(i + 1) ~ /^ignored;?$/) g += $i
         }
         n++
       }
       END { printf "%d test binaries: %d passed, %d failed, %d ignored\n", n, p, f, g }' "$log"
  # `SKIP <group>: <missing>; to run these tests: <how> (GDRDOCTOR_TEST_REQUIRE_ALL=1 ...)`:
  # each group once, with how many test binaries skipped it.
  local skips
  skips=$(grep -E '^SKIP [^:]+: ' "$log" | sed -E 's/ \(GDRDOCTOR_TEST_REQUIRE_ALL=1 makes this a failure\)$//' |
    sort | uniq -c | sort -k2)
  if [ -z "$skips" ]; then
    echo "no test group skipped: every prerequisite is here"
  else
    echo "skipped groups (install what each names, or see docs/testing.md):"
    echo "$skips" | awk '{
        n = $1; $1 = ""; sub(/^ SKIP /, "");
        split($0, parts, "; to run these tests: ");
        group_why = parts[1]; how = parts[2];
        printf "  - %s%s\n      enable: %s\n", group_why, (n > 1 ? " (" n " test binaries)" : ""), how
      }'
    echo "GDRDOCTOR_TEST_REQUIRE_ALL=1 turns each of these into a failure."
  fi
}
summary
exit "$rc"
