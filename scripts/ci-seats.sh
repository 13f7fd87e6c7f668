#!/usr/bin/env bash
# The fleet seats in CI (issue 14), in two steps that .ci/run calls around `cargo test`:
#
#   scripts/ci-seats.sh install   # promtool, xmllint, slurm + munge, Open MPI (Debian); the xUnit
#                                 # junit-10.xsd from pytest's sdist; kubernetes-validate (PyPI)
#   export GDRDOCTOR_REQUIRE_PROMTOOL=1 GDRDOCTOR_JUNIT_XSD=$PWD/target/ci-tools/junit-10.xsd
#   cargo test --workspace        # tests/contracts/ and tests/fleet.rs then run promtool and
#                                 # xmllint --schema junit-10.xsd on every output
#   scripts/ci-seats.sh run       # real Slurm drain/resume, manifests, alert rules
#
# Each step prints its duration. Tools land in target/ci-tools (nothing is vendored into the
# repository: the XSD is read from pytest's source distribution, as PyPI serves it).
set -euo pipefail
cd "$(dirname "$0")/.."
T=$PWD/target/ci-tools
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
# The pytest release whose sdist carries testing/example_scripts/junit-10.xsd (the Jenkins xUnit
# plugin's JUnit schema).
PYTEST_VERSION=9.2.0

step() { # step NAME COMMAND...
  local name=$1 t0
  shift
  t0=$(date +%s%N)
  "$@"
  echo "ci-seats: $name: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

install_debian() {
  if command -v apt-get >/dev/null 2>&1; then
    # No service starts at install (policy-rc.d): the Slurm test runs its own munged, slurmctld
    # and slurmd and stops them; nothing of the packages' is left running on the machine.
    local policy=/usr/sbin/policy-rc.d ours=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 0755 "$policy" && ours=1
    fi
    # openmpi-bin: preflight's second engine (tests/preflight.rs runs `mpirun -n 4`).
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      prometheus libxml2-utils slurmctld slurmd slurm-client munge openmpi-bin >/dev/null
    if [ "$ours" = 1 ]; then $SUDO rm -f "$policy"; fi
  fi
}

install_xsd() {
  mkdir -p "$T"
  if [ ! -s "$T/junit-10.xsd" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: "pytest==$PYTEST_VERSION" -d "$T/pytest-sdist"
    tar -xzf "$T/pytest-sdist/pytest-$PYTEST_VERSION.tar.gz" -C "$T" \
      "pytest-$PYTEST_VERSION/testing/example_scripts/junit-10.xsd"
    cp "$T/pytest-$PYTEST_VERSION/testing/example_scripts/junit-10.xsd" "$T/junit-10.xsd"
  fi
  xmllint --noout "$T/junit-10.xsd"
}

install_kubernetes_validate() {
  if [ ! -d "$T/py/kubernetes_validate" ]; then
    python3 -m pip install -q --target "$T/py" kubernetes-validate
  fi
}

run_slurm() {
  GDRDOCTOR_REQUIRE_SLURM=1 $SUDO env "PATH=$PATH" GDRDOCTOR_REQUIRE_SLURM=1 contrib/slurm/test.sh
}

run_manifests() {
  for k in 1.28.0 1.37.0; do
    PYTHONPATH="$T/py" python3 -m kubernetes_validate --strict --quiet -k "$k" contrib/kubernetes/*.yaml
  done
  echo "ci-seats: manifests valid (kubernetes 1.28 and 1.37, strict)"
}

run_rules() {
  promtool check rules contrib/prometheus/gdrdoctor.rules.yml
}

case "${1:-}" in
  install)
    step "apt-get install prometheus libxml2-utils slurm munge openmpi-bin" install_debian
    step "junit-10.xsd from pytest $PYTEST_VERSION sdist" install_xsd
    step "pip install kubernetes-validate" install_kubernetes_validate
    ;;
  run)
    [ -x target/debug/gdrdoctor ] || cargo build -q
    step "slurm drain/resume and preflight (srun -n 4) on a real single-node slurm" run_slurm
    step "kubernetes-validate" run_manifests
    step "promtool check rules" run_rules
    ;;
  *)
    echo "usage: scripts/ci-seats.sh install|run" >&2
    exit 2
    ;;
esac
