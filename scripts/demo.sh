#!/usr/bin/env bash
# The main job: install dependencies, build, serve the embedded tiny model with the real
# DeepSeek tokenizer, and answer one OpenAI chat request. (Random weights: the reply text is
# meaningless; the point is the whole path: HTTP → chat encoding → tokenizer → engine →
# CPU model → sampler → detokenizer → JSON.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
port="${DSV4_DEMO_PORT:-8000}"
./build/dsv4 serve --host 127.0.0.1 --port "$port" > /tmp/dsv4_demo_server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
echo "[demo] waiting for dsv4 serve on port $port (log: /tmp/dsv4_demo_server.log)"
for _ in $(seq 1 240); do
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then break; fi
  if ! kill -0 $server 2>/dev/null; then cat /tmp/dsv4_demo_server.log; exit 1; fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "[demo] server not ready"; exit 1; }
echo "[demo] POST /v1/chat/completions"
curl -sS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "deepseek-v4",
  "messages": [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Hello! What is the capital of France?"}],
  "max_tokens": 16, "temperature": 0, "seed": 1}'
echo
echo "[demo] server log (last lines):"
tail -n 5 /tmp/dsv4_demo_server.log
