#!/usr/bin/env bash
# The host's instructions per job drained, counted by valgrind's callgrind
# (deterministic, where CPU time on a shared machine is not): N blank jobs
# are enqueued into the benchmark's app (Lowkiq's shape: 5 shards, batch 1)
# on a private redis-server, then `luakiq run` drains them with one worker
# thread under callgrind, fetching 100 at a time (a fixed fetch_size:
# adaptive fetches follow the wall time, which valgrind stretches), and is
# stopped with TERM. Start-up, the stop and the idle polls are in the
# count: run two sizes and take the difference over the jobs between them
# (the script does, for SMALL and BIG).
# Usage: examples/benchmark/host-instructions.sh [SMALL] [BIG]
# (default 2000 and 22000). LUAKIQ_SCRIPTS=TREE/scripts counts another
# tree's host modules with the same binary; BENCH_FETCH, BENCH_BATCH and
# BENCH_SHARDS change the fetch size (100), batch_size (1) and shards (5).
# Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/../.."
. examples/benchmark/callgrind-session.sh
APP=examples/benchmark/app
export BENCH_SHARDS=${BENCH_SHARDS:-5} BENCH_BATCH=${BENCH_BATCH:-1} BENCH_FETCH=${BENCH_FETCH:-100} BENCH_SCHEDULER=lag BENCH_THREADS=1 BENCH_THROTTLE=
# count N: the instructions `luakiq run` made to drain N jobs
count() {
  local n=$1 out="$PRIVATE_TMP/cg.$1.out" pid
  private_redis_start "$PRIVATE_TMP"
  seq 1 "$n" | sed 's/.*/{"id":&}/' > "$PRIVATE_TMP/jobs.jsonl"
  "$LUAKIQ_BIN" enqueue "$APP" Blank "$PRIVATE_TMP/jobs.jsonl" --redis "$REDIS_URL" >/dev/null
  valgrind --tool=callgrind --callgrind-out-file="$out" "$LUAKIQ_BIN" run "$APP" \
    >"$PRIVATE_TMP/host.$n.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    sleep 0.5
    "$LUAKIQ_BIN" stats "$APP" --redis "$REDIS_URL" | grep -q '"total":{[^}]*"length":0[,}]' && break
  done
  sleep 1 # (the last fetch's ack rides with the next poll)
  kill -TERM "$pid"
  wait "$pid" || true
  private_stop "$PRIVATE_TMP"
  grep -m1 '^summary\|^totals' "$out" | awk '{print $2}'
}
SMALL=${1:-2000}
BIG=${2:-22000}
a=$(count "$SMALL")
b=$(count "$BIG")
echo "luakiq run (1 thread, $BENCH_SHARDS shards, batch $BENCH_BATCH, fetches of $BENCH_FETCH), draining $SMALL and $BIG jobs: $(( (b - a) / (BIG - SMALL) )) host instructions a job"
