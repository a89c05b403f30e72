#!/usr/bin/env bash
# Configures and builds one flavour of dsv4. Usage: scripts/build.sh [release|asan|tsan|fuzz]
# Build folders: build/ (release), build-asan/ (ASan+UBSan), build-tsan/ (ThreadSanitizer, CPU
# parts only; not in CI: see scripts/tsan_check.sh), build-fuzz/ (clang libFuzzer).
set -euo pipefail
cd "$(dirname "$0")/.."
flavour="${1:-release}"
jobs="${DSV4_JOBS:-$(nproc)}"
case "$flavour" in
  release) dir=build; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug "-DDSV4_SANITIZER=address;undefined" -DDSV4_CUDA=OFF) ;;
  tsan) dir=build-tsan; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_SANITIZER=thread -DDSV4_CUDA=OFF) ;;
  fuzz) dir=build-fuzz; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_FUZZ=ON -DDSV4_CUDA=OFF
                              -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "usage: $0 [release|asan|tsan|fuzz]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" >/dev/null
if [ "$flavour" = fuzz ]; then
  targets=$(ninja -C "$dir" -t targets all | grep -o '^fuzz_[a-z_]*' | sort -u || true)
  [ -n "$targets" ] && ninja -C "$dir" -j "$jobs" $targets
else
  ninja -C "$dir" -j "$jobs"
fi
echo "$dir"
