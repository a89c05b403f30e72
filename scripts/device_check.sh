#!/usr/bin/env bash
# Runs every GPU test and the decode benchmark on the lent GPU machine, from a build-gpu
# folder built here and carried (see src/gpu). Logs go to $OUT (or ./device_logs); a summary
# table is printed last. Usage: scripts/device_check.sh [bench-layers]
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-device_logs}
LAYERS=${1:-8}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
declare -a NAMES RCS
run() {  # run NAME CMD...
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  NAMES+=("$name ($(( $(date +%s) - t0 )) s)"); RCS+=("$rc")
  tail -n 40 "$OUT/$name.log"
}
run kernels timeout 60 "$BUILD/src/gpu/gpu_kernels_test"
[ -x "$BUILD/src/gpu/gpu_golden_test" ] && run golden timeout ${GOLDEN_TIMEOUT:-170} "$BUILD/src/gpu/gpu_golden_test"
[ -x "$BUILD/src/gpu/gpu_decode_bench" ] && run bench timeout ${BENCH_TIMEOUT:-150} "$BUILD/src/gpu/gpu_decode_bench" --num-layers "$LAYERS" --prompt ${BENCH_PROMPT:-128} --steps 16
echo
echo "==== device_check summary ===="
cat "$OUT/gpu.txt"
printf '%-28s %s\n' step rc
for i in "${!NAMES[@]}"; do printf '%-28s %s\n' "${NAMES[$i]}" "${RCS[$i]}"; done
grep -h -E "^\[  (PASSED|FAILED) |tests? ran" "$OUT"/kernels.log "$OUT"/golden.log 2>/dev/null
grep -h -E "copy kernel|decode batch" "$OUT"/bench.log 2>/dev/null
