#!/usr/bin/env bash
# End-to-end: `dsv4 bench` against `dsv4 serve` on the embedded tiny model.
#   usage: bench_against_serve_test.sh <path to dsv4>
# Starts the server on a free loopback port, waits until it answers, runs a two-point concurrency
# sweep (1,2) of 4 random prompts (16 input ids, 8 output tokens, ignore_eos) over
# /v1/completions, and checks the result JSON: 4 successes and 0 failures per point, 32 output
# tokens per point. Exit 77 (ctest SKIP_RETURN_CODE) when the binary has no `serve` subcommand.
# Extra server arguments may be passed in DSV4_SERVE_ARGS (e.g. a model path).
set -euo pipefail

DSV4="${1:?usage: $0 <path to dsv4>}"
# CLI11 answers a bare `--help` even for an unknown subcommand, so also require serve's --port.
if ! SERVE_HELP="$("$DSV4" serve --help 2>&1)" || [[ "$SERVE_HELP" != *--port* ]]; then
  echo "SKIP: '$DSV4 serve --help' does not describe a serve subcommand: this build has none yet"
  exit 77
fi

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Ports below the ephemeral range (32768+), so other tests' client sockets cannot take them;
# if another test still wins the race, serve exits with "already in use" and we try again.
start_server() {
  PORT=""
  for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 12000))
    if ! port_in_use "$candidate"; then PORT="$candidate"; break; fi
  done
  [[ -n "$PORT" ]] || { echo "FAIL: no free port found"; exit 1; }
  # shellcheck disable=SC2086
  "$DSV4" serve --port "$PORT" ${DSV4_SERVE_ARGS:-} >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
}
start_server
for _ in 1 2 3 4; do
  sleep 0.5
  if kill -0 "$SERVER_PID" 2>/dev/null || ! grep -q "already in use" "$WORK/serve.log"; then break; fi
  start_server
done

ready=0
for _ in $(seq 1 600); do  # up to 60 s
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "FAIL: dsv4 serve exited early"; cat "$WORK/serve.log"; exit 1
  fi
  if command -v curl >/dev/null; then
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 ||
       curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then ready=1; break; fi
  elif port_in_use "$PORT"; then ready=1; break; fi
  sleep 0.1
done
[[ "$ready" == 1 ]] || { echo "FAIL: dsv4 serve not ready after 60 s"; cat "$WORK/serve.log"; exit 1; }

OUT="$WORK/bench.json"
"$DSV4" bench --base-url "http://127.0.0.1:$PORT" --backend openai-completions \
  --dataset-name random --num-prompts 4 --random-input-len 16 --random-output-len 8 \
  --random-range-ratio 1.0 --vocab-size 512 --max-concurrency 1,2 --warmup-requests 1 \
  --request-timeout 120 --disable-progress --output-file "$OUT" | tee "$WORK/bench.txt"

fail() { echo "FAIL: $*"; echo "--- result JSON"; cat "$OUT"; echo "--- server log"; tail -50 "$WORK/serve.log"; exit 1; }
[[ -f "$OUT" ]] || fail "no result file"
[[ -f "$WORK/bench.svg" ]] || fail "no chart"
[[ "$(grep -c '"completed": 4,' "$OUT")" == 2 ]] || fail "expected 4 completed requests per point"
[[ "$(grep -c '"failed": 0,' "$OUT")" == 2 ]] || fail "expected no failed request"
[[ "$(grep -c '"total_output_tokens": 32,' "$OUT")" == 2 ]] || fail "expected 32 output tokens per point"
echo "PASS: dsv4 bench against dsv4 serve"
