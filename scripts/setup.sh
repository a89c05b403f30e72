#!/usr/bin/env bash
# Installs what dsv4 needs on a fresh Debian 12 machine: the Debian packages of
# shared/docs/stack.md and, when package.json exists, the npm test oracles / tokenizer file.
# Idempotent: skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake ninja-build g++ clang libclang-rt-14-dev
  libboost1.81-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev librapidcheck-dev libexpected-dev libconcurrentqueue-dev libxxhash-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev curl)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f package.json ]; then
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules ]; then
    echo "[setup] npm ci"
    npm ci --no-audit --no-fund --loglevel=error
    touch node_modules
  fi
fi
echo "[setup] ok"
