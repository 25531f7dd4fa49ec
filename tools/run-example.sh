#!/usr/bin/env bash
# Quick start: builds luakiq, starts a private redis-server (unless REDIS_URL is
# set), enqueues sample order snapshots and runs the host on examples/orders for
# a few seconds so you can watch jobs being processed. Usage:
#   tools/run-example.sh [DIR] [SECONDS]     (defaults: examples/orders, 6)
# LUAKIQ_BIN=PATH runs that binary instead of building build/luakiq (the
# specs run this script so, spec/host/examples_spec.lua).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LUAKIQ_BIN:-}
if [ -z "$bin" ]; then
  tools/build.sh
  bin=build/luakiq
fi
dir=${1:-examples/orders}
secs=${2:-6}
. tools/private-services.sh
private_session
tmp=$PRIVATE_TMP
if [ -z "${REDIS_URL:-}" ]; then
  private_redis_start "$tmp"
  echo "private redis-server on $REDIS_URL"
fi
# 20 orders x 5 snapshots each, plus one broken snapshot that will fail and retry.
{
  for v in 1 2 3 4 5; do
    for id in $(seq 1 20); do
      echo "{\"id\":\"order-$id\",\"score\":$v,\"payload\":{\"version\":$v,\"status\":\"v$v\"}}"
    done
  done
  echo '{"id":"order-99","score":1,"payload":{"version":1,"status":"broken"}}'
} | "$bin" enqueue "$dir" Orders
echo "before:"; "$bin" stats "$dir"
"$bin" run "$dir" & host_pid=$!
sleep "$secs"
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=
echo "after:"; "$bin" stats "$dir"
echo "retrying: the broken order and the orders that shared its perform call (batch_size = 10: an error"
echo "fails every id of its call, and they retry together; docs/configuration.md, batch_size):"
"$bin" jobs "$dir" Orders queue
