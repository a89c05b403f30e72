#!/usr/bin/env bash
# ThreadSanitizer run of the CPU parts (not in CI: it adds ~10 minutes on two cores). Builds
# build-tsan/ (scripts/build.sh tsan) and runs every test but the long model runs (cpu_test,
# golden_test) — the engine, the HTTP server, the end-to-end tests against a TSan-built
# `dsv4 serve`, the bench client. Fails on any test failure or any TSan report, the served
# binaries' logs (/tmp/dsv4_e2e_*.log of this run) included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh tsan >/dev/null
stamp=$(mktemp)
log=$(mktemp)
status=0
TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 ${TSAN_OPTIONS:-}" \
  ctest --test-dir build-tsan --output-on-failure -j "${DSV4_JOBS:-$(nproc)}" -E "^(cpu_test|golden_test)$" \
  >"$log" 2>&1 || status=$?
tail -n 3 "$log"
reports=$(grep -c "WARNING: ThreadSanitizer" "$log" || true)
served=$(find /tmp -maxdepth 1 -name 'dsv4_e2e_*.log' -newer "$stamp" -exec grep -l "WARNING: ThreadSanitizer" {} + || true)
rm -f "$stamp"
if [ "$reports" != 0 ] || [ -n "$served" ]; then
  echo "ThreadSanitizer reports: $reports in the tests' output (log: $log); served binaries: ${served:-none}"
  exit 1
fi
[ "$status" = 0 ] || { echo "tests failed (log: $log)"; exit "$status"; }
rm -f "$log"
echo "== tsan: no reports"
