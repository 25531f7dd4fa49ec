#!/usr/bin/env bash
# Redis memory per finished job kept (keep_done) and per id remembered
# (monotonic): a private redis-server gets N blank jobs (one shard, ids
# job000000001...) pushed and drained by fetch.lua with acks, 100 at a
# time, as a plain worker, one with keep_done (with and without a result
# of 16 bytes) and one with monotonic = true; used_memory after each drain
# less the plain one's, over N. docs/redis.md, "Finished jobs".
# Usage: examples/benchmark/finished-memory.sh [N] (default 100000)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  for b in build-bench/luakiq build/luakiq; do [ -x "$b" ] && { export LUAKIQ_BIN=$b; break; }; done
fi
. tools/private-services.sh
private_session
private_redis_start "$PRIVATE_TMP" >/dev/null
port=${REDIS_URL##*:}; port=${port%%/*}
echo "Redis $(redis-cli -p "$port" info server | grep '^redis_version:' | cut -d: -f2 | tr -d '\r')"
"$LUAKIQ_BIN" lua examples/benchmark/finished_memory.lua "$port" "${1:-100000}"
