#!/bin/sh
# examples/benchmark/run.sh [options]: the luakiq benchmark (docs/benchmarks.md).
# Uses $LUAKIQ, else build-bench/luakiq, build/luakiq or luakiq on PATH; a
# Release build is what the published numbers use.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${LUAKIQ:-}
if [ -z "$bin" ]; then
  for b in "$root/build-bench/luakiq" "$root/build/luakiq"; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
[ -n "$bin" ] || bin=$(command -v luakiq || true)
if [ -z "$bin" ]; then
  echo "run.sh: no luakiq binary; build one with" >&2
  echo "  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench -j2" >&2
  echo "or set LUAKIQ=/path/to/luakiq" >&2
  exit 2
fi
exec "$bin" lua "$here/bench.lua" "$@"
