#!/usr/bin/env bash
# Encode throughput, one thread, on tests/data/tokenizer/corpus.jsonl: ours beside HF tokenizers.
#   scripts/tokenizer/bench.sh [BUILD_DIR]   (default build-tok; needs `npm ci` in the repo root)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-tok}"
ninja -C "$build" tokenizer_bench >/dev/null
bench="$(find "$build" -name tokenizer_bench -type f -perm -u+x | head -1)"
"$bench" --corpus "$root/tests/data/tokenizer/corpus.jsonl"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node "$root/scripts/tokenizer/bench_reference.mjs"
