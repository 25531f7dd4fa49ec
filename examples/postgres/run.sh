#!/usr/bin/env bash
# examples/postgres: starts a private Redis and a private PostgreSQL (initdb in
# a temp dir), creates the table, runs `luakiq run examples/postgres` with 5
# threads and injected failures while ORDERS orders x VERSIONS snapshots are
# pushed in order, then pushes an older snapshot of 10 orders late (dropped
# as stale: the worker is monotonic) and checks that every order's row holds
# its newest snapshot. Usage: examples/postgres/run.sh [ORDERS] [VERSIONS]  (200 x 20)
# Installs what is missing and builds build/luakiq first, unless LUAKIQ_BIN
# names a binary (the spec runs it so, with the binary under test).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  tools/install-deps.sh --examples
  tools/build.sh
  export LUAKIQ_BIN=build/luakiq
fi
orders=${1:-200}
versions=${2:-20}
dir=examples/postgres
. tools/private-services.sh
private_session
tmp=$PRIVATE_TMP
private_redis_start "$tmp"
private_postgres_start "$tmp"
echo "private redis-server on $REDIS_URL, PostgreSQL on $PGHOST:$PGPORT"
psql -q -v ON_ERROR_STOP=1 -f "$dir/schema.sql"
FAIL_RATE=${FAIL_RATE:-0.2} "$LUAKIQ_BIN" run "$dir" --log-level warn >"$tmp/host.log" 2>&1 & host_pid=$!
# version v of every order, then v+1, ...: a later push always carries a newer snapshot
for v in $(seq 1 "$versions"); do
  for id in $(seq 1 "$orders"); do
    echo "{\"id\":\"order-$id\",\"score\":$v,\"payload\":{\"version\":$v,\"status\":\"v$v\"}}"
  done | "$LUAKIQ_BIN" enqueue "$dir" Snapshots >/dev/null
done
echo "pushed $orders orders x $versions snapshots; waiting for the queue to drain"
# drained: nothing queued (stats' length leaves out jobs in flight),
# nothing in flight, and still nothing queued after that look (a call may
# have failed its jobs back meanwhile)
none_queued() { "$LUAKIQ_BIN" stats "$dir" | grep -q '"total":{"expired":0,"lag":0,"length":0,"morgue_length":0[,}]'; }
for _ in $(seq 600); do
  none_queued &&
    [ -z "$("$LUAKIQ_BIN" jobs "$dir" Snapshots busy)" ] &&
    none_queued && break
  sleep 0.1
done
# a third party re-sends old snapshots late: version VERSIONS-1 of the first
# LATE orders, after version VERSIONS was applied. monotonic = true drops them
# at fetch (counted as stale), so no row goes back in time.
late=$(( orders < 10 ? orders : 10 ))
old=$(( versions - 1 ))
for id in $(seq 1 "$late"); do
  echo "{\"id\":\"order-$id\",\"score\":$old,\"payload\":{\"version\":$old,\"status\":\"late\"}}"
done | "$LUAKIQ_BIN" enqueue "$dir" Snapshots >/dev/null
stale() { "$LUAKIQ_BIN" stats "$dir" | sed -n 's/.*"stale":\([0-9]*\).*/\1/p'; }
for _ in $(seq 100); do [ "$(stale)" -ge "$late" ] 2>/dev/null && none_queued && break; sleep 0.1; done
echo "late snapshots (version $old) pushed for $late orders: $(stale) dropped as stale"
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=
echo "failures injected and retried: $(grep -c 'batch failed' "$tmp/host.log" || true)"
psql -tA -c "SELECT count(*) || ' orders, ' || count(*) FILTER (WHERE version = $versions) || ' at version $versions' FROM orders"
bad=$(psql -tA -c "SELECT count(*) FROM orders WHERE version <> $versions")
rows=$(psql -tA -c "SELECT count(*) FROM orders")
if [ "$bad" = 0 ] && [ "$rows" = "$orders" ]; then echo "OK: every order holds its newest snapshot"; else echo "FAILED"; exit 1; fi
