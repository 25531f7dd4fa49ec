#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every spec with
# ctest against real redis-servers (each on a free port), then every spec
# again under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --test
tools/build.sh
SANITIZE=1 tools/build.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== specs under ASan+UBSan =="
(cd build-asan && ctest --output-on-failure -j2)
echo "== all specs =="
cd build && ctest --output-on-failure -j2
