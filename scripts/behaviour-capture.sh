#!/usr/bin/env bash
# Runs one gdrdoctor binary over every fixture, paste and report of the repository and writes
# each command's stdout, stderr and exit code under OUTDIR, one file per run. Two captures,
# before and after a change that must not change behaviour (a move, a split, a refactor),
# compare with `diff -r BEFORE AFTER`: an empty diff is the proof.
#
#   scripts/behaviour-capture.sh target/release/gdrdoctor /tmp/before
#
# Fixtures are read as the tests read them (scripts/fixture unpacks an archive when the
# fixture is one). Nothing here needs a GPU, a network or root.
set -uo pipefail
out=$2
cd "$(dirname "$0")/.."
mkdir -p "$out"
export NO_COLOR=1 COLUMNS=100 GDRDOCTOR_LIB_DIR=/nonexistent
unset GDRDOCTOR_TRACE
state=$(mktemp -d); trap 'rm -rf "$state"' EXIT
# Under its own name, whatever the file is called (`--help` prints it).
cp "$1" "$state/gdrdoctor"; bin=$state/gdrdoctor

run() { # NAME ARGS...
  local name=$1; shift
  "$bin" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
}

fixtures=()
if [ -x scripts/fixture ]; then
  while read -r f; do fixtures+=("$f"); done < <(scripts/fixture list)
else
  for d in fixtures/sysroots/*/; do fixtures+=("$(basename "$d")"); done
fi
for f in "${fixtures[@]}"; do
  if [ -x scripts/fixture ]; then root=$(scripts/fixture path "$f"); else root=fixtures/sysroots/$f; fi
  for fmt in json table junit prometheus oneline; do
    run "check.$f.$fmt" check --sysroot "$root" --format "$fmt" --no-state --color never
  done
  run "check.$f.verbose" check --sysroot "$root" -v --no-state --color never
  run "check.$f.static" check --sysroot "$root" --static --no-state --format json
  run "check.$f.nccl212" check --sysroot "$root" --nccl-version 2.12.12 --no-state --format json
  run "check.$f.nccl221" check --sysroot "$root" --nccl-version 2.21.5 --no-state --format json
  run "check.$f.only-pcie" check --sysroot "$root" --only pcie,gdr --no-state --format json
  for fmt in text json svg; do
    run "topo.$f.$fmt" topo --sysroot "$root" --format "$fmt"
  done
  run "policy-init.$f" policy init --sysroot "$root" -o -
  # Where the fixture was read from is not behaviour: name it as the repository does.
  for o in "$out"/*."$f".*; do
    sed -i "s#$root#fixtures/sysroots/$f#g" "$o"
  done
done
for p in fixtures/pastes/*; do
  n=$(basename "$p")
  [ "$n" = SOURCES.md ] && continue
  for fmt in table json markdown; do
    run "diagnose.$n.$fmt" diagnose "$p" --format "$fmt" --color never
  done
done
run "diagnose.all.json" diagnose fixtures/pastes/*.txt --format json
for fmt in table json prometheus html; do
  run "fleet.golden.$fmt" fleet fixtures/golden --format "$fmt"
done
run list list
run list.json list --format json
run list.md list --format markdown
"$bin" list --format json | python3 -c 'import json,sys; [print(c["id"]) for c in json.load(sys.stdin)]' 2>/dev/null |
while read -r id; do run "explain.$id" explain "$id"; done
run help --help
for c in check topo diagnose probe watch list explain completions man policy fleet snapshot; do
  run "help.$c" "$c" --help
done
run "help.policy-init" policy init --help
run completions.bash completions bash
run man man
run version --version
# Probe replays of the captured reports, when the binary has them.
for r in fixtures/reports/*.json; do
  run "fleet.report.$(basename "$r")" fleet "$r" --format json
done
# The time of the run is not behaviour.
sed -i -E -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z/<TIME>/g' \
  -e 's/\(commit [0-9a-f]+, /(commit <C>, /' -e 's/(_timestamp_seconds(\{[^}]*\})?) [0-9]+$/\1 <TIME>/' "$out"/*
ls "$out" | wc -l
