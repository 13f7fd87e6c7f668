#!/usr/bin/env bash
# Release build of gdrdoctor: a binary that starts on glibc 2.17 and newer (RHEL/Rocky 7 and 8,
# Ubuntu 18.04+, Debian 10+, SLES 12 SP3+), for x86_64 and, when the toolchain has it, aarch64
# (Grace nodes). Stripped; checked; smoke-tested; packaged with completions and man pages;
# checksummed.
#
#   scripts/release.sh                      # x86_64, plus aarch64 when its Rust std can be had
#   scripts/release.sh --arch x86_64        # one architecture
#   scripts/release.sh --require-aarch64    # fail (instead of skip) when aarch64 cannot be built
#   scripts/release.sh --out DIR            # default target/dist
#
# How: cargo-zigbuild links against glibc 2.17's symbol versions with zig as the linker
# (target x86_64-unknown-linux-gnu.2.17). Both come from PyPI (`ziglang`, `cargo-zigbuild`,
# pinned below) into target/release-tools/py; nothing is installed system-wide.
#
# Checks, each fatal: scripts/check-elf.py reads the binary's version needs and fails on any
# GLIBC_x.y newer than 2.17, on any NEEDED library besides glibc's and libgcc_s (CUDA, NVML,
# libibverbs and NCCL stay dlopen'ed), and on a binary that is not stripped; a control binary
# built by the host's cc must fail the same check (it needs the host's glibc). Then the smoke
# test: `--version`, `check --sysroot` on a healthy and on a failing fixture with their exit
# codes, a live `check` on this machine (no GPU or RDMA library needed to start), completions
# and the man page. aarch64 is smoke-tested only where it can run (an aarch64 host, or
# qemu-aarch64 with /usr/aarch64-linux-gnu); otherwise the script says it did not.
#
# Output (in --out): gdrdoctor-VERSION-ARCH-linux-gnu (the bare binary),
# gdrdoctor-VERSION-ARCH-linux-gnu.tar.gz (binary, README, docs/install.md, completions,
# man pages; a deterministic archive: sorted, owner 0, mtime of the last commit), SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."

ZIGLANG_VERSION="${ZIGLANG_VERSION:-0.17.1}"
CARGO_ZIGBUILD_VERSION="${CARGO_ZIGBUILD_VERSION:-0.24.1}"
GLIBC_FLOOR=2.17
ARCHES=(x86_64 aarch64)
OUT=target/dist
REQUIRE_AARCH64=0

while [ $# -gt 0 ]; do
  case "$1" in
    --arch)
      case "${2:-}" in
        x86_64 | aarch64) ARCHES=("$2") ;;
        all) ARCHES=(x86_64 aarch64) ;;
        *) echo "release: --arch takes x86_64, aarch64 or all" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --require-aarch64) REQUIRE_AARCH64=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "release: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

T0=$SECONDS
step() { printf '\n== %s (%ds)\n' "$*" $((SECONDS - T0)); }
die() { echo "release: error: $*" >&2; exit 1; }

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$VERSION" ] || die "no version in Cargo.toml"
HOST_ARCH=$(uname -m)

# ---- tools ---------------------------------------------------------------------------------
TOOLS="$PWD/target/release-tools/py"
STAMP="$TOOLS/.installed-ziglang-$ZIGLANG_VERSION-cargo-zigbuild-$CARGO_ZIGBUILD_VERSION"
if [ ! -f "$STAMP" ]; then
  step "installing ziglang $ZIGLANG_VERSION and cargo-zigbuild $CARGO_ZIGBUILD_VERSION from PyPI into $TOOLS"
  command -v python3 >/dev/null || die "python3 is needed to install ziglang and cargo-zigbuild (apt-get install python3 python3-pip)"
  python3 -m pip --version >/dev/null 2>&1 || die "pip is needed (apt-get install python3-pip)"
  rm -rf "$TOOLS"
  # --target: a private directory, so neither a virtualenv nor a system install is needed.
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$TOOLS" "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" ||
    die "pip could not install ziglang==$ZIGLANG_VERSION cargo-zigbuild==$CARGO_ZIGBUILD_VERSION"
  touch "$STAMP"
fi
export PATH="$TOOLS/bin:$PATH"
export PYTHONPATH="$TOOLS${PYTHONPATH:+:$PYTHONPATH}"
# cargo-zigbuild runs zig as `python3 -m ziglang` when no `zig` is on PATH.
command -v cargo-zigbuild >/dev/null || die "cargo-zigbuild missing from $TOOLS/bin"
python3 -m ziglang version >/dev/null || die "zig (python3 -m ziglang) does not run"
echo "zig $(python3 -m ziglang version), $(cargo-zigbuild --version 2>/dev/null | head -n1)"

# ---- control: the checker must catch a binary that needs a newer glibc ----------------------
step "control: check-elf must reject a binary linked against this host's glibc"
CONTROL_DIR=$(mktemp -d)
trap 'rm -rf "$CONTROL_DIR"' EXIT
if command -v cc >/dev/null && printf 'int main(void){return 0;}\n' | cc -x c - -o "$CONTROL_DIR/control" 2>/dev/null; then
  HOST_GLIBC=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if python3 scripts/check-elf.py --max-glibc "$GLIBC_FLOOR" "$CONTROL_DIR/control" >/dev/null 2>&1; then
    if [ -n "$HOST_GLIBC" ] && [ "$(printf '%s\n%s\n' "$HOST_GLIBC" 2.34 | sort -V | head -n1)" = 2.34 ]; then
      die "check-elf passed a binary built against glibc $HOST_GLIBC (needs __libc_start_main@GLIBC_2.34): the checker is broken"
    fi
    echo "control not conclusive: this host's glibc ($HOST_GLIBC) is older than 2.34"
  else
    echo "ok: check-elf rejects the host-linked control (glibc $HOST_GLIBC)"
  fi
else
  echo "control skipped: no working cc on this machine"
fi

# ---- build, check, smoke ---------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILT=()
RUNNER_X86=""

smoke() { # smoke ARCH BIN TARGET RUNNER...
  local arch=$1 bin=$2 target=$3
  shift 3
  local run=("$@" "$bin") v rc out
  v=$("${run[@]}" --version) || die "$arch: --version failed"
  echo "  $v"
  [[ "$v" =~ ^gdrdoctor\ $VERSION\ \(commit\ ([0-9a-f]{12}|unknown),\ target\ $target\)$ ]] ||
    die "$arch: --version says '$v', expected 'gdrdoctor $VERSION (commit ..., target $target)'"
  set +e
  out=$("${run[@]}" check --sysroot fixtures/nodes/hgx-h200x8-cx7x8-healthy.tar.gz --color never)
  rc=$?
  set -e
  [ "$rc" = 0 ] || die "$arch: check on the healthy fixture exited $rc, expected 0:"$'\n'"$out"
  # Healthy: nothing warns, fails or errs (the RoCE checks skip on this InfiniBand-only node).
  grep -Eq '^summary: [0-9]+ pass, 0 warn, 0 fail, [0-9]+ skip, 0 error · exit code 0$' <<<"$out" ||
    die "$arch: no healthy summary line:"$'\n'"$out"
  echo "  check --sysroot hgx-h200x8-cx7x8-healthy: exit 0"
  set +e
  out=$("${run[@]}" check --sysroot fixtures/nodes/hgx-h200x8-cx7x8-port-down.tar.gz --format json)
  rc=$?
  set -e
  [ "$rc" = 1 ] || die "$arch: check on the port-down fixture exited $rc, expected 1"
  python3 -c 'import json,sys; r=json.load(sys.stdin); f=[x["id"] for x in r["findings"] if x["status"]=="fail"]; assert r["summary"]["fail"]>=1 and "rdma.ports" in f, (r["summary"], f)' <<<"$out" ||
    die "$arch: the port-down report does not fail rdma.ports"
  echo "  check --sysroot hgx-h200x8-cx7x8-port-down --format json: exit 1, rdma.ports fails"
  # Live, on this machine: no GPU, no CUDA/NVML/libibverbs needed for the binary to start
  # and report (0 healthy, 1 a failure such as "no rdma device", 3 incomplete).
  set +e
  out=$("${run[@]}" check --format json 2>/dev/null)
  rc=$?
  set -e
  case "$rc" in 0 | 1 | 3) ;; *) die "$arch: live check exited $rc" ;; esac
  python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["schema"]=="gdrdoctor.report/v1"' <<<"$out" ||
    die "$arch: the live check printed no valid report"
  echo "  live check on this machine: exit $rc, a valid report"
  # The test-only overrides (src/live/stand_in.rs, docs/testing.md) are ignored by a release
  # build, which says so: the report is this machine's, not the fixture's.
  local healthy
  healthy=$(scripts/fixture path hgx-h200x8-cx7x8-healthy) || die "scripts/fixture path hgx-h200x8-cx7x8-healthy failed"
  set +e
  err=$(GDRDOCTOR_LIVE_ROOT=$healthy GDRDOCTOR_LIB_DIR=/nonexistent \
    "${run[@]}" check --static --format json 2>&1 >/dev/null)
  out=$(GDRDOCTOR_LIVE_ROOT=$healthy GDRDOCTOR_LIB_DIR=/nonexistent \
    "${run[@]}" check --static --format json 2>/dev/null)
  set -e
  grep -q 'is ignored: test-only overrides' <<<"$err" ||
    die "$arch: a release build did not say it ignores GDRDOCTOR_LIVE_ROOT:"$'\n'"$err"
  python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["host"]["hostname"]!="hgx-fixture", r["host"]' <<<"$out" ||
    die "$arch: a release build read GDRDOCTOR_LIVE_ROOT"
  echo "  GDRDOCTOR_LIVE_ROOT / GDRDOCTOR_LIB_DIR: ignored by the release build, with a warning"
}

# Which targets can be built: aarch64 needs the Rust standard library for aarch64.
TARGETS=()
for arch in "${ARCHES[@]}"; do
  triple="$arch-unknown-linux-gnu"
  if [ "$arch" != "$HOST_ARCH" ]; then
    sysroot=$(rustc --print sysroot)
    if [ ! -d "$sysroot/lib/rustlib/$triple/lib" ]; then
      step "$arch: the Rust standard library for $triple is not installed; trying rustup target add $triple"
      if ! { command -v rustup >/dev/null && rustup target add "$triple"; }; then
        msg="$arch NOT BUILT: the Rust standard library for $triple is not installed and \`rustup target add $triple\` could not get it (no rustup, or no access to static.rust-lang.org). Install it where rustup can download, then rerun."
        [ "$arch" = aarch64 ] && [ "$REQUIRE_AARCH64" = 1 ] && die "$msg"
        echo "release: warning: $msg" >&2
        continue
      fi
    fi
  fi
  BUILT+=("$arch")
  TARGETS+=(--target "$triple.$GLIBC_FLOOR")
done
[ "${#BUILT[@]}" -gt 0 ] || die "nothing to build"

# One cargo run for every target: the host tools (build scripts, proc macros) are built once.
# GDRDOCTOR_GLIBC: --version says `target <triple>.2.17` (build.rs).
step "build ${BUILT[*]} (${TARGETS[*]})"
GDRDOCTOR_GLIBC="$GLIBC_FLOOR" CARGO_PROFILE_RELEASE_STRIP=symbols \
  cargo zigbuild --release --locked --bin gdrdoctor "${TARGETS[@]}"

for arch in "${BUILT[@]}"; do
  target="$arch-unknown-linux-gnu.$GLIBC_FLOOR"
  bin="target/$arch-unknown-linux-gnu/release/gdrdoctor"
  [ -x "$bin" ] || die "$arch: no binary at $bin"

  step "$arch: check-elf (glibc <= $GLIBC_FLOOR, only glibc and libgcc_s NEEDED, stripped)"
  python3 scripts/check-elf.py --max-glibc "$GLIBC_FLOOR" --stripped --machine "$arch" "$bin"

  step "$arch: smoke test"
  if [ "$arch" = "$HOST_ARCH" ]; then
    smoke "$arch" "$bin" "$target"
    [ "$arch" = x86_64 ] && RUNNER_X86="$bin"
  elif [ "$arch" = aarch64 ] && command -v qemu-aarch64 >/dev/null && [ -d /usr/aarch64-linux-gnu ]; then
    smoke "$arch" "$bin" "$target" qemu-aarch64 -L /usr/aarch64-linux-gnu
  else
    echo "  $arch smoke test NOT RUN: this host is $HOST_ARCH and has no qemu-aarch64 with /usr/aarch64-linux-gnu (apt-get install qemu-user libc6-arm64-cross); run it on a Grace node"
  fi
done

# ---- package ---------------------------------------------------------------------------------
step "package"
GEN=""
[ -n "$RUNNER_X86" ] && GEN="$RUNNER_X86"
[ -z "$GEN" ] && [ -x target/debug/gdrdoctor ] && GEN=target/debug/gdrdoctor
EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)
for arch in "${BUILT[@]}"; do
  name="gdrdoctor-$VERSION-$arch-linux-gnu"
  stage=$(mktemp -d)
  mkdir -p "$stage/$name/completions" "$stage/$name/man/man1" "$stage/$name/docs"
  cp "target/$arch-unknown-linux-gnu/release/gdrdoctor" "$stage/$name/gdrdoctor"
  cp README.md "$stage/$name/"
  cp docs/install.md "$stage/$name/docs/"
  if [ -n "$GEN" ]; then
    "$GEN" completions bash >"$stage/$name/completions/gdrdoctor.bash"
    "$GEN" completions zsh >"$stage/$name/completions/_gdrdoctor"
    "$GEN" completions fish >"$stage/$name/completions/gdrdoctor.fish"
    "$GEN" man --out-dir "$stage/$name/man/man1"
    [ -s "$stage/$name/man/man1/gdrdoctor.1" ] || die "man page not written"
    grep -q 'complete' "$stage/$name/completions/gdrdoctor.bash" || die "bash completion looks empty"
  else
    echo "release: warning: no runnable gdrdoctor on this host: completions and man pages left out of $name" >&2
  fi
  cp "target/$arch-unknown-linux-gnu/release/gdrdoctor" "$OUT/$name"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" -C "$stage" -cf - "$name" |
    gzip -n -9 >"$OUT/$name.tar.gz"
  rm -rf "$stage"
  echo "  $OUT/$name ($(stat -c %s "$OUT/$name") bytes)"
  echo "  $OUT/$name.tar.gz ($(stat -c %s "$OUT/$name.tar.gz") bytes)"
done
(cd "$OUT" && rm -f SHA256SUMS && sha256sum gdrdoctor-"$VERSION"-* >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
echo "  $OUT/SHA256SUMS:"
sed 's/^/    /' "$OUT/SHA256SUMS"

step "done: built ${BUILT[*]}"
for arch in x86_64 aarch64; do
  case " ${BUILT[*]} " in *" $arch "*) ;; *) case " ${ARCHES[*]} " in *" $arch "*) echo "NOT built: $arch (see the warning above)" ;; esac ;; esac
done
