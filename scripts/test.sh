#!/usr/bin/env bash
# The test command of the README (and of .ci/run): installs dependencies, then
#  1. release build: every test (unit, golden conformance, end-to-end);
#  2. ASan+UBSan build: every unit test (labels "golden" and "e2e" — long model runs and
#     whole-binary tests — run in the release build only);
#  3. libFuzzer smoke run of every fuzz target (DSV4_FUZZ_SECONDS each, default 10).
# GPU tests skip themselves on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs="${DSV4_JOBS:-$(nproc)}"

echo "== release build and tests"
scripts/build.sh release >/dev/null
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== ASan + UBSan build and tests"
scripts/build.sh asan >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  DSV4_BENCH_TIMING_TOL_MS=100 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "golden|e2e"

echo "== fuzz smoke"
scripts/build.sh fuzz >/dev/null
secs="${DSV4_FUZZ_SECONDS:-10}"
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  echo "-- $(basename "$f") for ${secs}s"
  "$f" -max_total_time="$secs" -print_final_stats=0 2>&1 | tail -n 2
done
echo "== all tests passed"
