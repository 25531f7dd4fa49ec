#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every spec with
# ctest under AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer
# against real redis-servers (each on a free port; the `cluster` label on
# 3-master Redis Clusters), then every spec again in the plain build.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --test
tools/build.sh
SANITIZE=1 tools/build.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== specs under ASan+UBSan =="
(cd build-asan && ctest --output-on-failure -j2)
# (the `cluster` label, the queue and host specs again on a Redis Cluster,
# runs in the sanitizer pass only: once is enough to keep the whole run
# under 25 minutes on 2 cores)
echo "== all specs (but the cluster label) =="
cd build && ctest --output-on-failure -j2 -LE cluster
