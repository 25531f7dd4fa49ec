#!/usr/bin/env bash
# Redis instructions per job of fetch.lua with acks, counted by valgrind's
# callgrind (deterministic, where CPU time on a shared machine is not):
# a private redis-server under callgrind gets N blank jobs pushed into one
# shard (push.lua, calls of 1,000, ids in order), and in a second server the
# same push followed by fetching them all LIMIT at a time with acks, in the
# host's reply form; the difference over N is fetch's cost a job.
# Usage: examples/benchmark/fetch-instructions.sh [N] [LIMIT...]
# (default 10000, limits 10 and 100). LUAKIQ_SCRIPTS=TREE/scripts counts
# another tree's scripts with the same binary; FETCH_LATER=1 pushes each
# call below the last one's perform_in, so the jobs wait in P later;
# FETCH_IDS=random pushes ids that start with random hex digits (as random
# UUIDs: each is looked up alone); FETCH_IDS=spread the numbers 24, 48, ...
# (one shard's of run.sh's 24-shard shape); FETCH_AWAITED=1 a shard that has
# awaited (a worker that uses luakiq.await, none waiting), FETCH_AWAITED=N
# with N - 1 other ids waiting; FETCH_FIN=keep|mono|keep,mono a worker with
# keep_done and/or monotonic; PUSH_COST=1 prints push.lua's
# cost a job instead (against a server that is sent nothing), in the form
# PUSH_FORM names: ids (default), pairs or groups. (The client calls fetch
# through luakiq.runner.queue, read from LUAKIQ_SCRIPTS too: a tree from
# before fetch's one reply form is counted with its own copy of this
# script.) Redis runs with hz 1: its timers' work
# grows with the wall time, which valgrind stretches, not with the work
# counted. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/../.."
. examples/benchmark/callgrind-session.sh
N=${1:-10000}
shift || true
[ $# -gt 0 ] || set -- 10 100
# count MODE LIMIT: the instructions redis-server ran (start-up and shutdown
# included; they cancel out in the difference)
count() {
  local port out pid
  port=$(free_port)
  out="$PRIVATE_TMP/cg.$1.$2.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" redis-server --port "$port" --bind 127.0.0.1 \
    --dir "$PRIVATE_TMP" --save '' --appendonly no --hz 1 >"$PRIVATE_TMP/redis.$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  "$LUAKIQ_BIN" lua examples/benchmark/fetch_instructions.lua "$port" "$N" "$1" "$2"
  wait "$pid" || true
  grep -m1 '^summary\|^totals' "$out" | awk '{print $2}'
}
base=$(count push 0)
if [ "${PUSH_COST:-0}" = 1 ]; then
  none=$(count none 0)
  echo "push.lua (${PUSH_FORM:-ids} form), $N jobs 1000 a call: $(( (base - none) / N )) Redis instructions a job"
  exit 0
fi
for limit in "$@"; do
  total=$(count fetch "$limit")
  echo "fetch.lua with acks, $N jobs $limit at a time: $(( (total - base) / N )) Redis instructions a job"
done
