#!/usr/bin/env bash
# Run `cargo test --workspace` as on a machine with only the Rust toolchain: libibverbs (and
# its mlx5 provider), the rdma-core headers, cc, lspci and tmux are hidden in a private mount
# namespace (bind mounts over them that only this command sees; nothing is uninstalled, other
# users of the machine are not affected). Needs root (or unprivileged user namespaces) and
# util-linux `unshare`.
#
#   scripts/test-without-prereqs.sh            # must pass, printing one SKIP line per group
#   scripts/test-without-prereqs.sh --require  # GDRDOCTOR_TEST_REQUIRE_ALL=1: must fail
#
# The test binaries are built first, outside the namespace (linking needs cc).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUIRE=0
[ "${1:-}" = --require ] && REQUIRE=1

cargo test --workspace --no-run --quiet

# What to hide: the real files behind the names (a bind mount over a symlink covers its target).
HIDE=()
for lib in libibverbs.so.1 libmlx5.so.1; do
  p=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [ -n "$p" ] && HIDE+=("$(readlink -f "$p")")
done
for tool in cc gcc lspci tmux; do
  p=$(command -v "$tool" || true)
  [ -n "$p" ] && HIDE+=("$(readlink -f "$p")")
done
HIDE_DIRS=()
[ -d /usr/include/infiniband ] && HIDE_DIRS+=(/usr/include/infiniband)

echo "hiding: ${HIDE[*]} ${HIDE_DIRS[*]}"
export GDRDOCTOR_HIDE="${HIDE[*]}" GDRDOCTOR_HIDE_DIRS="${HIDE_DIRS[*]}"
# --require: every group must fail, so do not stop at the first failing test binary.
if [ "$REQUIRE" = 1 ]; then
  export GDRDOCTOR_TEST_REQUIRE_ALL=1 GDRDOCTOR_CARGO_FLAGS=--no-fail-fast
else
  unset GDRDOCTOR_TEST_REQUIRE_ALL
  export GDRDOCTOR_CARGO_FLAGS=""
fi
exec unshare --mount --propagation private bash -c '
  set -euo pipefail
  for f in $GDRDOCTOR_HIDE; do mount --bind /dev/null "$f"; done
  for d in $GDRDOCTOR_HIDE_DIRS; do mount -t tmpfs -o ro,size=4k none "$d"; done
  cargo test --workspace $GDRDOCTOR_CARGO_FLAGS 2>&1
'
