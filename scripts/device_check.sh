#!/usr/bin/env bash
# Runs the GPU tests, the decode benchmark, a `dsv4 serve --device cuda` smoke test and a short
# `dsv4 profile` on the lent GPU machine, from a build folder built here and carried (BUILD,
# default build-gpu; see src/gpu). Logs go to $OUT (or ./device_logs); a summary table is
# printed last.
# Usage: scripts/device_check.sh [--only kernels,decode,golden,bench,serve,profile,moe,attn,lin,tp,flash,ttft] [bench-layers]
#   tp:    tensor parallelism TP2 vs TP1 and the one-shot all-reduce test + latency vs NCCL (needs 2 GPUs); flash: the full DeepSeek-V4-Flash with dummy
#          weights over FLASH_TP GPUs (default 2): time to ready + decode at each of FLASH_BATCHES
#          (space-separated, default "1"), FLASH_CONTEXT (8192); FLASH_NOPDL=1 adds batch 1 with
#          DSV4_PDL=0 (per-kernel attribution).
#   ttft: one 8K prompt's prefill profile + `dsv4 bench` through the server (8K prompts; concurrency
#         list TTFT_CONCURRENCY, default 1,8; TTFT_PROMPTS requests per level, default 8). On one
#         GPU: FLASH_TP=1 FLASH_LAYERS=20 (the first 20 layers; docs/prefill.md's table).
#   select: the indexer's top-k selection kernels (issue 7): the indexer tests with each kernel
#         forced (DSV4_INDEXER_SELECT_CLUSTER=1 / 0; unset, rows of ≥ 32K keys take the cluster
#         kernel), `gpu_sparse_decode_bench indexer probe` for both (DSV4_BENCH_CTX / _B pick rows).
#   moe1: the one-token MoE (issue 6): 8 × 4 (7) against the one-token launch (18), its form
#         with the code fetched early (22) and with warpgroup roles (23, 24, 25), warm and cold (256
#         MB read + code sweep before each call, as in the model), with their phase probes
#         (docs/moe-grouped.md rounds 20–22); then moe_grouped_test, gpu_decode_test with 22–25,
#         and the TP1 20-layer B = 1 step with each.
#   dq: the attention kernels' integer dequantization (DSV4_KV_DEQUANT=int; issue 7,
#       docs/attention-decode-rounds.md round 10): the sparse decode tests and gpu_decode_test
#       with it, then the B = 1 / 8 rows and ws-case B = 64 cases cold with fp32 queries, f32 and
#       int alternating, twice.
#   wsncu: where the ws attention kernel's tile time goes (issue 7): ncu's per-SASS-line stall
#       samples of one launch (HCA-8320 and CSA, B = 64, f32 and int dequantization), split at the
#       producer's and the consumers' setmaxnreg (scripts/ncu_stalls.py).
#   tp, flash, ttft, select, moe1, dq and wsncu run only when named in --only.
#   lin: decode-size linear + small-kernel benchmark (issue 8); moe:  grouped FP4 MoE test + benchmark (issue 6); attn: split-K sparse decode + indexer
#         test + benchmark (issue 7).
# A build packed by scripts/pack_device_build.sh (data/devpack/devbuild.tar.xz) is unpacked first;
# then use BUILD=data/devbuild TOKENIZER=data/devbuild/tokenizer/tokenizer.json.
# Env: BUILD, OUT, TOKENIZER (serve; default data/tokenizer/tokenizer.json, else the byte codec),
#      PROFILE_LAYERS (4), PROFILE_BATCH (2), PROFILE_CONTEXT (256), PROFILE_STEPS (8).
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-device_logs}
ONLY=kernels,decode,golden,bench,serve,profile,moe,attn,lin
if [ -f data/devpack/devbuild.tar.xz ] && [ ! -d data/devbuild ]; then
  tar -C data -xJf data/devpack/devbuild.tar.xz
fi
if [ "${1:-}" = "--only" ]; then ONLY=$2; shift 2; fi
LAYERS=${1:-8}
FLASH=tests/data/models/deepseek-v4-flash/config.json
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
declare -a NAMES RCS
want() { [[ ",$ONLY," == *",$1,"* ]]; }
run() {  # run NAME CMD...
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  NAMES+=("$name ($(( $(date +%s) - t0 )) s)"); RCS+=("$rc")
  tail -n 40 "$OUT/$name.log"
}

# POST $1 (JSON body) to /v1/chat/completions on port $2; prints "HTTP_CODE CONTENT_LENGTH".
chat() {
  local body=$1 port=$2
  if command -v curl > /dev/null; then
    local code
    code=$(curl -s -m 120 -o "$OUT/serve_response.json" -w '%{http_code}' -H 'Content-Type: application/json' \
      -d "$body" "http://127.0.0.1:$port/v1/chat/completions")
    echo "$code"
  else
    python3 - "$body" "$port" "$OUT/serve_response.json" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[2]}/v1/chat/completions", data=sys.argv[1].encode(),
                             headers={"Content-Type": "application/json"})
try:
    r = urllib.request.urlopen(req, timeout=120); code, data = r.status, r.read()
except urllib.error.HTTPError as e:
    code, data = e.code, e.read()
open(sys.argv[3], "wb").write(data); print(code)
PY
  fi
}

# wait_healthy PORT PID TRIES DELAY: 0 once /health on PORT answers 200; 1 when PID exits or
# TRIES polls DELAY seconds apart pass first.
wait_healthy() {
  local port=$1 pid=$2 tries=$3 delay=$4
  for _ in $(seq 1 "$tries"); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" \
      2> /dev/null && return 0
    kill -0 "$pid" 2> /dev/null || return 1
    sleep "$delay"
  done
  return 1
}

# `dsv4 serve --device cuda` on the embedded tiny model: one chat request -> 200 + non-empty text.
serve_smoke() {
  local port=${SERVE_PORT:-18231} tok=${TOKENIZER:-data/tokenizer/tokenizer.json}
  [ -f "$tok" ] || tok=bytes
  "$BUILD/dsv4" serve --device cuda --port "$port" --tokenizer "$tok" --decode-log-interval 4 \
    > "$OUT/serve_server.log" 2>&1 &
  local pid=$!
  local rc=1
  if wait_healthy "$port" $pid 120 1; then
    local code
    code=$(chat '{"model":"deepseek-v4","messages":[{"role":"user","content":"Hello! Who are you?"}],"max_tokens":16}' "$port")
    local text
    text=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['message']['content'])" \
      "$OUT/serve_response.json" 2> /dev/null)
    echo "HTTP $code, completion: $(printf '%q' "$text")"
    [ "$code" = 200 ] && [ -n "$text" ] && rc=0
  else
    echo "server did not become healthy"
  fi
  kill -TERM $pid 2> /dev/null; wait $pid
  echo "server exit status: $?"
  grep -E "Decode batch|Prefill batch|CUDA runner|Engine:|error" "$OUT/serve_server.log" | head -n 12
  if ! grep -q "cuda graph: True" "$OUT/serve_server.log"; then echo "no 'cuda graph: True' batch line"; rc=1; fi
  return $rc
}

# `dsv4 bench` against the full Flash (dummy weights) behind `dsv4 serve`, 8K-token prompts
# (FLASH_LAYERS: keep only the first N layers, e.g. 20 on one GPU with FLASH_TP=1).
flash_bench() {
  local port=${SERVE_PORT:-18233} tok=${TOKENIZER:-data/tokenizer/tokenizer.json}
  [ -f "$tok" ] || tok=bytes
  "$BUILD/dsv4" serve --device cuda --load-format dummy --model-config "$FLASH" --tp ${FLASH_TP:-2} \
    --num-layers ${FLASH_LAYERS:-0} --context-length 9216 --port "$port" --tokenizer "$tok" \
    --decode-log-interval 16 > "$OUT/ttft_server.log" 2>&1 &
  local pid=$! rc=1
  if wait_healthy "$port" $pid 600 0.5; then
    "$BUILD/dsv4" bench --port "$port" --backend openai-completions --random-input-len 8192 --random-output-len 64 \
      --random-range-ratio 1.0 --num-prompts ${TTFT_PROMPTS:-8} --max-concurrency ${TTFT_CONCURRENCY:-1,8} --warmup-requests 1 \
      --disable-progress --output-file "$OUT/ttft_bench.json"
    rc=$?
  else
    echo "server did not become healthy"
  fi
  kill -TERM $pid 2> /dev/null; wait $pid
  return $rc
}

# The full Flash with dummy weights over FLASH_TP GPUs behind `dsv4 serve`: time from the
# process start to a healthy /health (time to ready), then one chat request.
flash_serve() {
  local port=${SERVE_PORT:-18232} tok=${TOKENIZER:-data/tokenizer/tokenizer.json} t0
  [ -f "$tok" ] || tok=bytes
  t0=$(date +%s.%N)
  "$BUILD/dsv4" serve --device cuda --load-format dummy --model-config "$FLASH" --tp ${FLASH_TP:-2} \
    --context-length ${FLASH_SERVE_CONTEXT:-9216} --port "$port" --tokenizer "$tok" --decode-log-interval 4 \
    > "$OUT/flash_serve_server.log" 2>&1 &
  local pid=$!
  local rc=1
  if wait_healthy "$port" $pid 600 0.5; then
    echo "time to ready: $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s"
    local code
    code=$(chat '{"model":"deepseek-v4","messages":[{"role":"user","content":"Hello! Who are you?"}],"max_tokens":16}' "$port")
    echo "HTTP $code"
    [ "$code" = 200 ] && rc=0
  else
    echo "server did not become healthy"
  fi
  kill -TERM $pid 2> /dev/null; wait $pid
  grep -E "Model:|CUDA runner|KV/state pool|CUDA graphs|Decode batch|Prefill batch|error" "$OUT/flash_serve_server.log" | head -n 12
  return $rc
}

want moe && [ -x "$BUILD/src/gpu/moe_grouped_test" ] && run moe_test timeout 60 "$BUILD/src/gpu/moe_grouped_test"
want moe && [ -x "$BUILD/src/gpu/moe_grouped_bench" ] && run moe_bench timeout 120 "$BUILD/src/gpu/moe_grouped_bench" 15
want moe1 && [ -x "$BUILD/src/gpu/moe_grouped_bench" ] &&
  run moe1_bench env DSV4_MOE_PROBE=1 DSV4_BENCH_COLD_MB=256 DSV4_BENCH_COLD_CODE=1 DSV4_BENCH_T=1 \
    DSV4_BENCH_KINDS=0,2,3 timeout 150 "$BUILD/src/gpu/moe_grouped_bench" 15 hswxyzhswxyz
want moe1 && [ -x "$BUILD/src/gpu/moe_grouped_test" ] && run moe1_test timeout 150 "$BUILD/src/gpu/moe_grouped_test"
for v in 22 23 24 25; do
  want moe1 && [ -x "$BUILD/src/gpu/gpu_decode_test" ] &&
    run moe1_decode$v env DSV4_MOE_VARIANT=$v timeout 60 "$BUILD/src/gpu/gpu_decode_test"
done
# ... and the TP1 20-layer B = 1 step with each (default = 7 at T = 1), alternating, twice.
for r in 1 2; do for v in 0 18 22 23 24 25; do
  want moe1 && run moe1_step_v${v}_$r env DSV4_MOE_VARIANT=$v timeout 60 "$BUILD/dsv4" profile --load-format dummy \
    --model-config "$FLASH" --tp 1 --num-layers 20 --batch 1 --context 8192 --steps 16 --warmup 2 \
    --context-fill random --no-cupti
done; done
if want dq && [ -x "$BUILD/src/gpu/gpu_sparse_decode_bench" ]; then
  run dq_test env DSV4_KV_DEQUANT=int timeout 120 "$BUILD/src/gpu/gpu_sparse_decode_test"
  run dq_decode env DSV4_KV_DEQUANT=int timeout 60 "$BUILD/src/gpu/gpu_decode_test"
  for r in 1 2; do for m in f32 int; do  # the automatic-plan rows at B = 1 and 8 (the mma.sync kernel)
    run "dq_${m}_${r}_decode" env DSV4_KV_DEQUANT=$m DSV4_BENCH_COLD_MB=256 DSV4_BENCH_COLD_CODE=1 DSV4_BENCH_Q32=1 \
      timeout 90 "$BUILD/src/gpu/gpu_sparse_decode_bench" decode
  done; done
  for r in 1 2; do for m in f32 int; do for c in "CSA 64 65536" "CSA 64 65536 h32" "HCA 64 65536" "HCA 64 1048576" "SWA 64 8192"; do
    run "dq_${m}_${r}_${c// /_}" env DSV4_KV_DEQUANT=$m DSV4_BENCH_COLD_MB=256 DSV4_BENCH_COLD_CODE=1 DSV4_BENCH_Q32=1 \
      timeout 60 "$BUILD/src/gpu/gpu_sparse_decode_bench" ws-case $c
  done; done; done
fi
if want wsncu && [ -x "$BUILD/src/gpu/gpu_sparse_decode_bench" ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  for c in "HCA 64 1048576" "CSA 64 65536"; do for m in f32 int; do
    f="$OUT/wsncu_${m}_${c// /_}.csv"
    run "wsncu_${m}_${c// /_}" env DSV4_KV_DEQUANT=$m timeout 240 "$NCU" -k regex:sparse_decode_ws_kernel \
      --launch-skip 5 --launch-count 1 --cache-control none --section SourceCounters --section WarpStateStats \
      --page source --csv --print-source sass "$BUILD/src/gpu/gpu_sparse_decode_bench" ws-case $c
    cp "$OUT/wsncu_${m}_${c// /_}.log" "$f"
    read -r -a rows <<< "$(python3 scripts/ncu_stalls.py "$f" --find USETMAXREG | grep -E "^[0-9]+ " | awk '{print $1}' | tr '\n' ' ')"
    n=$(python3 scripts/ncu_stalls.py "$f" | head -1 | awk '{print $2}' | cut -d: -f2)
    if [ ${#rows[@]} -ge 2 ]; then python3 scripts/ncu_stalls.py "$f" "0:${rows[0]}" "${rows[0]}:${rows[1]}" "${rows[1]}:$n" | cut -c1-400
    else python3 scripts/ncu_stalls.py "$f" | cut -c1-400; fi
  done; done
fi
want lin && [ -x "$BUILD/src/gpu/gpu_linear_bench" ] && run linear_bench timeout 120 "$BUILD/src/gpu/gpu_linear_bench" 9
want attn && [ -x "$BUILD/src/gpu/gpu_sparse_decode_test" ] && run attn_test timeout 90 "$BUILD/src/gpu/gpu_sparse_decode_test"
want attn && [ -x "$BUILD/src/gpu/gpu_sparse_decode_bench" ] && run attn_bench timeout 150 "$BUILD/src/gpu/gpu_sparse_decode_bench"
if want select && [ -x "$BUILD/src/gpu/gpu_sparse_decode_bench" ]; then
  for c in 1 0; do
    run select_test$c env DSV4_INDEXER_SELECT_CLUSTER=$c timeout 90 "$BUILD/src/gpu/gpu_sparse_decode_test" --gtest_filter='*Indexer*'
  done
  for c in 1 0; do
    run select_bench_cluster$c env DSV4_INDEXER_SELECT_CLUSTER=$c timeout 120 "$BUILD/src/gpu/gpu_sparse_decode_bench" indexer probe
  done
fi
want tp && [ -x "$BUILD/src/gpu/gpu_tp_test" ] && run tp_test timeout 180 "$BUILD/src/gpu/gpu_tp_test"
want tp && [ -x "$BUILD/src/gpu/gpu_p2p_all_reduce_test" ] && run allreduce_test timeout 60 "$BUILD/src/gpu/gpu_p2p_all_reduce_test"
want tp && [ -x "$BUILD/src/gpu/gpu_p2p_all_reduce_bench" ] && run allreduce_bench timeout 60 "$BUILD/src/gpu/gpu_p2p_all_reduce_bench"
for fb in ${FLASH_BATCHES:-${FLASH_BATCH:-1}}; do
  want flash && run flash_profile_b$fb timeout ${FLASH_TIMEOUT:-480} "$BUILD/dsv4" profile --load-format dummy \
    --model-config "$FLASH" --tp ${FLASH_TP:-2} --batch $fb --context ${FLASH_CONTEXT:-8192} \
    --steps ${FLASH_STEPS:-4} --warmup 1 --context-fill ${FLASH_FILL:-random} ${FLASH_PROFILE_ARGS:-}
done
# Per-kernel attribution at batch 1 needs PDL off (its spans overlap otherwise): FLASH_NOPDL=1.
# FLASH_NOPDL_RANKS="0 1" profiles each rank (a rank that waits for a slower peer shows it in all_reduce);
# FLASH_PROFILE_ARGS adds options (e.g. --by-shape) to every flash profile run.
for rk in ${FLASH_NOPDL_RANKS:-0}; do
  [ "${FLASH_NOPDL:-0}" = 1 ] && want flash && run flash_profile_b1_nopdl_r$rk timeout ${FLASH_TIMEOUT:-480} \
    env DSV4_PDL=0 "$BUILD/dsv4" profile --load-format dummy --model-config "$FLASH" --tp ${FLASH_TP:-2} --batch 1 \
    --rank $rk --context ${FLASH_CONTEXT:-8192} --steps ${FLASH_STEPS:-4} --warmup 1 --context-fill ${FLASH_FILL:-random} \
    ${FLASH_PROFILE_ARGS:-}
done
want flash && run flash_serve timeout ${FLASH_SERVE_TIMEOUT:-240} bash -c "$(declare -f chat wait_healthy flash_serve); OUT='$OUT' BUILD='$BUILD' FLASH='$FLASH' flash_serve"
# ttft: one 8K prompt's prefill (profiled), then `dsv4 bench` through `dsv4 serve` with 8K-token
# prompts and 64 output tokens at concurrency 1 and 8 (TTFT, TPOT, tok/s).
want ttft && run ttft_prefill timeout 300 "$BUILD/dsv4" profile --load-format dummy --model-config "$FLASH" \
  --tp ${FLASH_TP:-2} --num-layers ${FLASH_LAYERS:-0} --batch 1 --context 8192 --context-fill prefill --steps 2 \
  --warmup 1 --top 30 --no-cupti
want ttft && run ttft_bench timeout 420 bash -c "$(declare -f wait_healthy flash_bench); OUT='$OUT' BUILD='$BUILD' FLASH='$FLASH' flash_bench"
want kernels && run kernels timeout 60 "$BUILD/src/gpu/gpu_kernels_test"
want kernels && [ -x "$BUILD/src/engine/gpu_sampling_test" ] && run sampling timeout 180 "$BUILD/src/engine/gpu_sampling_test"
want kernels && [ -x "$BUILD/src/gpu/gpu_sampling_bench" ] && run sampling_bench timeout 60 "$BUILD/src/gpu/gpu_sampling_bench"
want kernels && [ -x "$BUILD/src/gpu/gpu_kv_fp8_test" ] && run kv_fp8 timeout 60 "$BUILD/src/gpu/gpu_kv_fp8_test"
want kernels && [ -x "$BUILD/src/gpu/gpu_kv_fp8_bench" ] && run kv_fp8_bench timeout 60 "$BUILD/src/gpu/gpu_kv_fp8_bench"
want decode && [ -x "$BUILD/src/gpu/gpu_decode_test" ] && run decode timeout 120 "$BUILD/src/gpu/gpu_decode_test"
want decode && [ -x "$BUILD/src/gpu/gpu_state_pool_test" ] && run state_pool timeout 120 "$BUILD/src/gpu/gpu_state_pool_test"
want golden && [ -x "$BUILD/src/gpu/gpu_golden_test" ] && run golden timeout ${GOLDEN_TIMEOUT:-170} "$BUILD/src/gpu/gpu_golden_test"
want bench && [ -x "$BUILD/src/gpu/gpu_decode_bench" ] && run bench timeout ${BENCH_TIMEOUT:-150} "$BUILD/src/gpu/gpu_decode_bench" --num-layers "$LAYERS" --prompt ${BENCH_PROMPT:-128} --steps 16
want serve && run serve timeout ${SERVE_TIMEOUT:-120} bash -c "$(declare -f chat wait_healthy serve_smoke); OUT='$OUT' BUILD='$BUILD' serve_smoke"
want profile && [ -x "$BUILD/src/gpu/gpu_cupti_trace_test" ] && run cupti_test timeout 60 "$BUILD/src/gpu/gpu_cupti_trace_test"
want profile && run profile timeout ${PROFILE_TIMEOUT:-150} "$BUILD/dsv4" profile --load-format dummy --model-config "$FLASH" \
  --num-layers ${PROFILE_LAYERS:-4} --batch ${PROFILE_BATCH:-2} --context ${PROFILE_CONTEXT:-256} --steps ${PROFILE_STEPS:-8} --by-shape
echo
echo "==== device_check summary ===="
cat "$OUT/gpu.txt"
printf '%-28s %s\n' step rc
for i in "${!NAMES[@]}"; do printf '%-28s %s\n' "${NAMES[$i]}" "${RCS[$i]}"; done
grep -h -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|^\[tp2" "$OUT"/kernels.log "$OUT"/sampling.log "$OUT"/kv_fp8.log "$OUT"/decode.log "$OUT"/state_pool.log "$OUT"/golden.log "$OUT"/tp_test.log "$OUT"/allreduce_test.log "$OUT"/cupti_test.log "$OUT"/select_test1.log "$OUT"/select_test0.log 2>/dev/null
grep -h -E "^dsv4 profile|^decode step|^prefill [0-9]|^roofline|^context" "$OUT"/flash_profile_b*.log 2>/dev/null
grep -h -E "^time to ready|^HTTP" "$OUT"/flash_serve.log 2>/dev/null
grep -h -E "^prefill [0-9]" "$OUT"/ttft_prefill.log 2>/dev/null
grep -h -A3 -E "^concurrency +ok" "$OUT"/ttft_bench.log 2>/dev/null
grep -h -E "copy kernel|decode batch" "$OUT"/bench.log 2>/dev/null
grep -h -E "^[0-9]+ +[0-9]+ \|" "$OUT"/allreduce_bench.log 2>/dev/null
grep -h -E "^HTTP " "$OUT"/serve.log 2>/dev/null
grep -h -E "^HBM|^decode step|^roofline|^all kernels|^prefill [0-9]|CUPTI" "$OUT"/profile.log 2>/dev/null
# The device tool returns at most 8 files from $OUT: keep the logs as one archive.
if [ "$(ls "$OUT" | wc -l)" -gt 7 ]; then
  tar -C "$OUT" -czf /tmp/device_logs.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/device_logs.tgz "$OUT/"
fi
