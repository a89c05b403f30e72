#!/usr/bin/env bash
# Packs an A/B pair for one device call: builds the named targets (paths under build/, e.g.
# src/gpu/gpu_sparse_decode_bench dsv4) from HEAD and from the working tree's uncommitted change,
# and packs both into data/devpack_slim/devbuild.tar.xz (scripts/slim_pack.sh): the change's
# binary under its own path, HEAD's beside it as NAME_old. Untracked files are not stashed, so a
# change that adds files must be committed on a branch and compared another way.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 BUILD_PATH..." >&2; exit 2; }
[ -n "$(git status --porcelain --untracked-files=no)" ] || { echo "$0: no uncommitted change to compare with HEAD" >&2; exit 2; }
names=()
for t in "$@"; do names+=("$(basename "$t")"); done
rm -rf /tmp/ab_old && mkdir -p /tmp/ab_old
git stash -q
trap 'git stash pop -q' EXIT  # the change comes back whatever happens
ninja -C build "${names[@]}" > /dev/null
for t in "$@"; do cp "build/$t" "/tmp/ab_old/$(basename "$t")_old"; done
git stash pop -q
trap - EXIT
ninja -C build "${names[@]}" > /dev/null
args=()
for t in "$@"; do args+=("$t" "$(dirname "$t")/$(basename "$t")_old=/tmp/ab_old/$(basename "$t")_old"); done
scripts/slim_pack.sh "${args[@]}"
