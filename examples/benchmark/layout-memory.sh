#!/usr/bin/env bash
# Redis memory per queued blank job for candidate shard layouts (issue
# "Storage that beats a plain list"): fills a private redis-server with N
# jobs per layout (server-side EVAL loops, ids "job1".."jobN") and prints
# used_memory growth per job. Usage: examples/benchmark/layout-memory.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
# the binary for free ports (tools/private-services.sh): as run.sh finds one
if [ -z "${LUAKIQ_BIN:-}" ]; then
  for b in build-bench/luakiq build/luakiq; do [ -x "$b" ] && { export LUAKIQ_BIN=$b; break; }; done
fi
. tools/private-services.sh
private_session
private_redis_start "$PRIVATE_TMP" >/dev/null
port=${REDIS_URL##*:}; port=${port%%/*}
N=${1:-200000}
rc() { redis-cli -p "$port" "$@"; }
mem() { rc info memory | grep '^used_memory:' | cut -d: -f2 | tr -d '\r'; }
run() {
  rc flushall >/dev/null
  local a b
  a=$(mem)
  rc eval "for i = 1, tonumber(ARGV[1]) do local id = 'job' .. i; $2 end" 0 "$N" >/dev/null
  b=$(mem)
  printf '%-58s %4d B/job\n' "$1" $(( (b - a) / N ))
}
P="'NS:{Q:0}:'"
PIN=1795431976.662363
echo "Redis $(rc info server | grep '^redis_version:' | cut -d: -f2 | tr -d '\r'), $N jobs per layout"
run "today: queue + ids zsets, a payloads:<id> zset per job" \
  "redis.call('ZADD', $P .. 'queue', $PIN + i / 1e6, id) redis.call('ZADD', $P .. 'ids', 0, id) redis.call('ZADD', $P .. 'payloads:' .. id, $PIN, '')"
run "queue + ids zsets, payloads as fields of one hash" \
  "redis.call('ZADD', $P .. 'queue', $PIN + i / 1e6, id) redis.call('ZADD', $P .. 'ids', 0, id) redis.call('HSET', $P .. 'pl', id, '')"
run "queue zset, one record hash (no id index)" \
  "redis.call('ZADD', $P .. 'queue', $PIN + i / 1e6, id) redis.call('HSET', $P .. 'rec', id, '$PIN|')"
run "due list of ids, id index zset whose member carries 8 bytes" \
  "redis.call('RPUSH', $P .. 'ready', id) redis.call('ZADD', $P .. 'idx', 0, id .. '\\0' .. '12345678')"
run "due list of id|seq, record hash" \
  "redis.call('RPUSH', $P .. 'ready', id .. '|' .. i) redis.call('HSET', $P .. 'rec', id, '$PIN|' .. i .. '|')"
run "one zset alone (the queue)" "redis.call('ZADD', $P .. 'queue', $PIN + i / 1e6, id)"
run "one hash alone" "redis.call('HSET', $P .. 'rec', id, '$PIN|')"
run "a list of Sidekiq-like JSON (push_bulk's floor)" "redis.call('RPUSH', $P .. 'ready', '{\"id\":\"' .. id .. '\"}')"
