#!/usr/bin/env bash
# Writes the sm_90a PTX of one CUDA source as the release build compiles it (the build's own nvcc
# command from ninja, its --generate-code flags replaced by -arch=sm_90a), for comparing kernels
# function by function before and after a change (scripts/ptx_compare.py):
#   scripts/ptx_of.sh TARGET SOURCE.cu OUT.ptx     e.g. scripts/ptx_of.sh src/gpu/moe_grouped_test sm90_moe_fp4.cu /tmp/a.ptx
# TARGET is any ninja target that compiles SOURCE (its path under build/); no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: $0 TARGET SOURCE.cu OUT.ptx" >&2; exit 2; }
target=$1 src=$2 out=$(realpath -m "$3")
cmd=$(ninja -C build -t commands "$target" | grep nvcc | grep -F "/$src.o" | tail -1 || true)
[ -n "$cmd" ] || { echo "$0: no nvcc command for $src in $target's build" >&2; exit 1; }
ptx=$(echo "$cmd" | sed -E 's/--generate-code=[^ ]+/-arch=sm_90a/g; s/ -c / -ptx /; s/ -o [^ ]+/ /')
(cd build && eval "$ptx -o $out")
echo "$out"
