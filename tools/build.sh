#!/usr/bin/env bash
# Builds build/luakiq (or, with SANITIZE=1, build-asan/luakiq with ASan+UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
if [ "${SANITIZE:-0}" = 1 ]; then dir=build-asan; opt=-DLUAKIQ_SANITIZE=ON; else dir=build; opt=; fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo $opt >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null
