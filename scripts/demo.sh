#!/usr/bin/env bash
# The main job: install dependencies, build, and run the embedded tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
./build/dsv4 generate --max-tokens 16
