#!/usr/bin/env bash
# Packs the named build binaries (paths under build/, e.g. dsv4 src/gpu/moe_grouped_test) into
# data/devpack_slim/devbuild.tar.xz for a device call (carry data/devpack_slim); a binary named
# NAME=PATH is packed under NAME (e.g. dsv4_old=/tmp/old/dsv4). scripts/ab_pack.sh packs HEAD's
# binaries beside the uncommitted change's this way.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf /tmp/slim && mkdir -p /tmp/slim/devbuild/src/gpu
for b in "$@"; do
  if [[ $b == *=* ]]; then cp "${b#*=}" "/tmp/slim/devbuild/${b%%=*}"; else cp "build/$b" "/tmp/slim/devbuild/$b"; fi
done
find /tmp/slim/devbuild -type f ! -name "*.json" -exec strip {} +
rm -rf data/devpack_slim && mkdir -p data/devpack_slim
XZ_OPT=-9 tar -C /tmp/slim -cJf data/devpack_slim/devbuild.tar.xz devbuild
ls -la data/devpack_slim/devbuild.tar.xz
