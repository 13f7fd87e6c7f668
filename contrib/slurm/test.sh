#!/usr/bin/env bash
# The Slurm seat, tested against a real single-node Slurm (Debian's slurmctld, slurmd,
# slurm-client and munge): start a private munged (its own key and socket in the work directory,
# never the host's), slurmctld and slurmd with a minimal
# slurm.conf whose HealthCheckProgram is contrib/slurm/gdrdoctor-healthcheck, then
#   1. point the health check at a failing node (the healthy HGX fixture with a port at 200 Gb/s,
#      judged by a policy written from the healthy one): the node must go DRAIN with
#      "gdrdoctor: FAIL policy.ports: mlx5_3/1: ..." as the reason;
#   2. point it at the healthy fixture: the node must resume;
#   3. an operator's drain ("maintenance") must survive a passing health check;
#   4. `srun -N1 --ntasks-per-node=1 --output=reports/%N.json gdrdoctor check -f json` and
#      `srun --label ... | gdrdoctor fleet -` must roll up;
#   6. contrib/slurm/gdrdoctor-preflight in an allocation of 4 tasks on this node (`srun -n 4`),
#      each task playing a fixture node with the stand-in NCCL of tests/stubs: four healthy
#      nodes pass; this node without GDR is named with its cause and drained; a rank that never
#      joins and a rank stuck in a collective are named; nothing of the runs is left;
# then stop the daemons it started and check that none is left. Needs root. Exit 77 (skip) when Slurm or munge is not installed or not
# root, unless GDRDOCTOR_REQUIRE_SLURM=1 (then that is a failure).
#
#   cargo build && contrib/slurm/test.sh          # GDRDOCTOR=path/to/gdrdoctor to choose the binary
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BIN=${GDRDOCTOR:-$REPO/target/debug/gdrdoctor}
START=$(date +%s%N)

skip() {
  echo "slurm test: SKIP: $*"
  if [ "${GDRDOCTOR_REQUIRE_SLURM:-0}" = 1 ]; then exit 1; fi
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld and slurmd"
for c in slurmctld slurmd scontrol sinfo srun munge unmunge munged python3; do
  command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done
[ -x "$BIN" ] || { echo "slurm test: $BIN is not built"; exit 1; }

W=$(mktemp -d /tmp/gdrdoctor-slurm.XXXXXX)
NODE=$(hostname -s)
export SLURM_CONF=$W/slurm.conf

cleanup() {
  rc=$?
  for p in slurmd slurmctld; do
    if [ -s "$W/$p.pid" ]; then
      pid=$(cat "$W/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  if [ -s "$W/munged.pid" ]; then
    pid=$(cat "$W/munged.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # Nothing the test started may outlive it.
  for p in slurmd slurmctld munged; do
    if [ -s "$W/$p.pid" ] && kill -0 "$(cat "$W/$p.pid")" 2>/dev/null; then
      echo "slurm test: $p ($(cat "$W/$p.pid")) is still running after the test"
      rc=1
    fi
  done
  if [ $rc -ne 0 ]; then
    echo "slurm test: FAILED; logs:"
    tail -n 30 "$W/slurmctld.log" "$W/slurmd.log" "$W/hc.log" 2>/dev/null || true
    echo "(work directory kept: $W)"
  else
    rm -rf "$W"
  fi
  exit $rc
}
trap cleanup EXIT

# munge: a private munged for the test (its key, socket, pid, log and seed in $W), so that the
# test neither depends on nor leaves behind a munged of the machine's; slurm.conf points at it.
dd if=/dev/urandom of="$W/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$W/munge.key"
chmod 0711 "$W"
MUNGE_SOCKET=$W/munge.sock
munged --force --key-file="$W/munge.key" --socket="$MUNGE_SOCKET" --pid-file="$W/munged.pid" \
  --log-file="$W/munged.log" --seed-file="$W/munged.seed"
for _ in $(seq 50); do [ -S "$MUNGE_SOCKET" ] && break; sleep 0.1; done
munge -n --socket="$MUNGE_SOCKET" </dev/null | unmunge --socket="$MUNGE_SOCKET" >/dev/null \
  || { echo "slurm test: the private munged does not answer"; cat "$W/munged.log"; exit 1; }

# Nodes to check: the healthy fixture, and a copy with one port at 200 Gb/s; a policy from the
# healthy one (so that the slow port, which the static checks accept, fails).
FIX=$("$REPO/scripts/fixture" path hgx-h200x8-cx7x8-healthy)
python3 "$REPO/scripts/plant.py" "$FIX" "$W/slow" slow-port
"$BIN" policy init --sysroot "$FIX" -o "$W/policy.toml" 2>/dev/null

# The HealthCheckProgram: the contrib script, its settings in a file the test rewrites.
cat >"$W/hc" <<EOF
#!/bin/sh
# (a real site keeps slurm.conf in /etc/slurm and needs neither variable)
echo "\$(date +%T) health check" >>$W/hc.log
SLURM_CONF=$SLURM_CONF GDRDOCTOR_HEALTHCHECK_CONF=$W/hc.conf exec $REPO/contrib/slurm/gdrdoctor-healthcheck >>$W/hc.log 2>&1
EOF
chmod +x "$W/hc"
set_target() {
  cat >"$W/hc.conf" <<EOF
GDRDOCTOR=$BIN
GDRDOCTOR_ARGS="--sysroot $1 --policy $W/policy.toml"
GDRDOCTOR_NODE=$NODE
EOF
}
set_target "$W/slow"

NODELINE=$(slurmd -C | head -n 1)
cat >"$SLURM_CONF" <<EOF
ClusterName=gdrdoctor-ci
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
HealthCheckProgram=$W/hc
HealthCheckInterval=1
HealthCheckNodeState=ANY
$NODELINE State=UNKNOWN
PartitionName=ci Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$W/state" "$W/spool"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

ms() { echo "+$(( ($(date +%s%N) - START) / 1000000 )) ms"; }
state() { sinfo -h -N -n "$NODE" -o '%T|%E' 2>/dev/null | head -n 1; }
wait_for() { # wait_for DESCRIPTION SECONDS TEST...
  local what=$1 secs=$2
  shift 2
  for _ in $(seq $((secs * 5))); do
    if "$@"; then return 0; fi
    sleep 0.2
  done
  echo "slurm test: timed out waiting for $what; node: $(state)"
  scontrol show node "$NODE" || true
  return 1
}
drained_by_gdrdoctor() { case "$(state)" in drain*"|gdrdoctor: FAIL policy.ports: mlx5_3/1: rate 200 Gb/s"*) return 0 ;; esac; return 1; }
idle() { case "$(state)" in idle\|*) return 0 ;; esac; return 1; }
drained_could_not_run() { case "$(state)" in drain*"|gdrdoctor: could not run"*) return 0 ;; esac; return 1; }

wait_for "slurmd to register" 30 sh -c "sinfo -h -N -n $NODE -o %T 2>/dev/null | grep -qv -e unknown -e '^$'"
echo "slurm test: 1. failing node -> drain ($(ms))"
wait_for "the health check to drain the node" 30 drained_by_gdrdoctor
scontrol show node "$NODE" | grep -E 'State=|Reason='

echo "slurm test: 2. healthy node -> resume ($(ms))"
set_target "$FIX"
wait_for "the health check to resume the node" 30 idle
scontrol show node "$NODE" | grep -E 'State='

echo "slurm test: 3. an operator's drain survives a passing check ($(ms))"
scontrol update NodeName="$NODE" State=DRAIN Reason="maintenance: new cables"
sleep 3
case "$(state)" in
  drain*"|maintenance: new cables"*) echo "  still drained: $(state)" ;;
  *) echo "slurm test: the health check undid an operator's drain: $(state)"; exit 1 ;;
esac
scontrol update NodeName="$NODE" State=RESUME
wait_for "the node to resume" 30 idle

echo "slurm test: 4. a checker that cannot run drains, saying so once ($(ms))"
cat >"$W/hc.conf" <<EOF
GDRDOCTOR=$W/no-such-gdrdoctor
GDRDOCTOR_NODE=$NODE
EOF
wait_for "the health check to drain the node" 30 drained_could_not_run
reason=$(sinfo -h -N -n "$NODE" -o '%E' | head -n 1)
case "$reason" in
  "gdrdoctor: could not run (exit 2): $W/no-such-gdrdoctor is not an executable") echo "  $reason" ;;
  *) echo "slurm test: drain reason: $reason"; exit 1 ;;
esac
set_target "$FIX"
wait_for "the node to resume" 30 idle

echo "slurm test: 5. srun into gdrdoctor fleet ($(ms))"
mkdir -p "$W/reports"
srun -N1 --ntasks-per-node=1 --output="$W/reports/%N.json" \
  "$BIN" check --sysroot "$FIX" -f json
"$BIN" fleet "$W/reports" | tail -n 1
[ -s "$W/reports/$NODE.json" ] || { echo "slurm test: srun --output wrote no report"; exit 1; }
srun -N1 -n2 --label "$BIN" check --sysroot "$FIX" -f json >"$W/labelled.txt"
"$BIN" fleet -f json - <"$W/labelled.txt" >"$W/fleet.json"
python3 - "$W/fleet.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
assert s["nodes"] == 2 and s["unreadable"] == 0 and s["exit_code"] == 0, s
# Reports from stdin are rolled up as they are read (streamed), not in task order.
assert sorted(n["input"] for n in r["nodes"]) == ["stdin[task 0]", "stdin[task 1]"], r["nodes"]
print("  srun --label | gdrdoctor fleet -: %d nodes, exit %d" % (s["nodes"], s["exit_code"]))
EOF

echo "slurm test: 6. preflight: srun -n 4 gdrdoctor preflight, each task a node, NCCL the stand-in ($(ms))"
# The stand-ins of tests/stubs (the GPUs' libcuda, NCCL over TCP between the tasks), and one
# fixture node per task: rank 2 plays this Slurm node itself, so that a drain lands on it.
SI=$W/stand-ins
mkdir -p "$SI"
cc -std=gnu11 -O1 -fPIC -shared -o "$SI/libcuda.so.1" -Wl,-soname,libcuda.so \
  "$REPO/tests/stubs/libcuda.c" -lpthread -ldl
cc -std=gnu11 -O1 -fPIC -shared -o "$SI/libnccl.so.2" -Wl,-soname,libnccl.so.2 \
  "$REPO/tests/stubs/libnccl.c" -lpthread -ldl
NOGDR=$("$REPO/scripts/fixture" path hgx-h200x8-cx7x8-no-peermem)
TAG="slurm-preflight-$$"
mkdir -p "$W/pf-plant"
r=0
for name in gpu-01 gpu-02 "$NODE" gpu-04; do
  for b in 18 28 38 48 98 a8 b8 c8; do echo "gpu bdf=0000:$b:00.0"; done >"$W/pf-scenario-$r"
  for i in 0 1 2 3 4 5 6 7; do echo "device mlx5_$i"; done >>"$W/pf-scenario-$r"
  echo "nccl host=$name" >>"$W/pf-scenario-$r"
  r=$((r + 1))
done
# The task: its rank's fixture and scenario, and the faults planted as files in pf-plant/.
{
  echo '#!/bin/sh'
  echo 'r=${SLURM_PROCID:?}'
  echo "W=$W BIN=$BIN SI=$SI FIX=$FIX NOGDR=$NOGDR NAMES=gpu-01,gpu-02,$NODE,gpu-04"
  cat <<'TASK'
[ -e "$W/pf-plant/absent-$r" ] && exit 0
root=$FIX
cp "$W/pf-scenario-$r" "$W/pf-scenario-$r.run"
if [ -e "$W/pf-plant/nogdr-$r" ]; then
  root=$NOGDR
  sed -i 's/^gpu .*/& dmabuf=0/' "$W/pf-scenario-$r.run"
  echo "peer_memory no" >>"$W/pf-scenario-$r.run"
fi
[ -e "$W/pf-plant/hang-$r" ] && echo "nccl_hang allreduce" >>"$W/pf-scenario-$r.run"
export GDRDOCTOR_STUB_SCENARIO=$W/pf-scenario-$r.run GDRDOCTOR_LIB_DIR=$SI GDRDOCTOR_STATE_DIR=$W/pf-state
exec "$BIN" "$@" --sysroot "$root" --nodes "$NAMES" --nccl-lib "$SI/libnccl.so.2" \
  --timeout 8 --nccl-timeout 8 --allreduce-bytes 65536 --pair-bytes 262144 --iterations 3 \
  --min-pair-fraction 0 --min-pair-relative 0.1
TASK
} >"$W/pf-task"
chmod +x "$W/pf-task"
preflight() { # preflight CASE: the contrib script in an allocation of 4 tasks on this node
  set +e
  GDRDOCTOR_TEST_TAG=$TAG salloc -N1 -n4 --overcommit env GDRDOCTOR="$W/pf-task" \
    GDRDOCTOR_SRUN_ARGS="-n4 --overcommit" GDRDOCTOR_PREFLIGHT_DIR="$W/pf-run-$1" \
    "$REPO/contrib/slurm/gdrdoctor-preflight" >"$W/pf-$1.out" 2>&1
  pf_rc=$?
  set -e
  { grep -v '^salloc:' "$W/pf-$1.out" || true; } | sed 's/^/    /'
  # Nothing of the run is left (the tasks, their NCCL workers): every process carrying the tag.
  for e in /proc/[0-9]*/environ; do
    if tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "GDRDOCTOR_TEST_TAG=$TAG"; then
      p=${e#/proc/}
      p=${p%/environ}
      if [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && [ "$p" != $$ ]; then
        echo "slurm test: preflight left process $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
        exit 1
      fi
    fi
  done
}
answer() { python3 -c 'import json, sys; a = json.load(open(sys.argv[1])); exec(sys.argv[2])' "$W/pf-run-$1/answer.json" "$2"; }

echo "  6a. four healthy nodes ($(ms))"
preflight healthy
[ "$pf_rc" = 0 ] || { echo "slurm test: healthy preflight exited $pf_rc"; exit 1; }
answer healthy 'assert a["allocation"]["engine"] == "slurm" and a["summary"]["joined"] == 4 and not a["take_out"], a["summary"]; print("    slurm engine, %d ranks, %d pair rails, %.1f s" % (a["summary"]["joined"], len(a["pairs"]), a["stages"][-1]["ms"] / 1000))'

echo "  6b. this node without GDR: named with its cause and drained ($(ms))"
touch "$W/pf-plant/nogdr-2"
preflight nogdr
rm -f "$W/pf-plant/nogdr-2"
[ "$pf_rc" = 1 ] || { echo "slurm test: preflight with a node without GDR exited $pf_rc"; exit 1; }
answer nogdr "assert [t['node'] for t in a['take_out']] == ['$NODE'], a['take_out']; r = a['take_out'][0]['reasons'][0]; assert 'without GDRDMA' in r and 'nvidia_peermem is not loaded' in r, r"
drained_by_preflight() { case "$(state)" in drain*"|gdrdoctor preflight: $NODE: NCCL used NET/IB/0 .. NET/IB/7 without GDRDMA on 8 GPUs"*) return 0 ;; esac; return 1; }
wait_for "preflight's drain" 10 drained_by_preflight
echo "    drained: $(state)"
scontrol update NodeName="$NODE" State=RESUME
wait_for "the node to resume" 30 idle
if [ -n "${GDRDOCTOR_PREFLIGHT_CAPTURE:-}" ]; then
  # For docs/guides/preflight.md: the same run as a user types it, table and JSON (after the
  # resume: salloc waits for ever on a drained node).
  mkdir -p "$GDRDOCTOR_PREFLIGHT_CAPTURE"
  touch "$W/pf-plant/nogdr-2"
  for f in table json; do
    GDRDOCTOR_TEST_TAG=$TAG salloc -N1 -n4 --overcommit srun -n4 --overcommit "$W/pf-task" \
      preflight --secret-file "$W/pf-run-nogdr/job.key" --format "$f" \
      >"$GDRDOCTOR_PREFLIGHT_CAPTURE/answer.$f" 2>"$GDRDOCTOR_PREFLIGHT_CAPTURE/stderr.$f" || true
  done
  rm -f "$W/pf-plant/nogdr-2"
fi

echo "  6c. a rank that never joins, a rank stuck in a collective ($(ms))"
touch "$W/pf-plant/absent-3" "$W/pf-plant/hang-1"
preflight faults
rm -f "$W/pf-plant/absent-3" "$W/pf-plant/hang-1"
[ "$pf_rc" = 1 ] || { echo "slurm test: preflight with faults exited $pf_rc"; exit 1; }
answer faults 'm = {t["node"]: " ".join(t["reasons"]) for t in a["take_out"]}; assert sorted(m) == ["gpu-02", "gpu-04"], m; assert "never joined" in m["gpu-04"], m; assert "hung in `allreduce`" in m["gpu-02"], m'
# gpu-02 and gpu-04 are not Slurm nodes: nothing was drained.
case "$(state)" in idle\|*) ;; *) echo "slurm test: the node changed: $(state)"; exit 1 ;; esac

END=$(date +%s%N)
echo "slurm test: PASS in $(( (END - START) / 1000000 )) ms"
