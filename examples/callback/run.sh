#!/usr/bin/env bash
# examples/callback: jobs that wait for a reply, end to end (hipq's case).
# Starts a private Redis, the provider (provider.py: answers 202, calls back
# later), the "Kafka" consumer (consumer.py: replies by key through the
# Redis scripts `luakiq scripts` writes) and `luakiq run examples/callback
# --replies` (the reply URLs), then pushes:
#   Payments  (callbacks over HTTP) and Shipments (replies on a topic), whose
#             provider answers after 0.1-1 s (ok), twice (twice), after the
#             reply timeout (late) or never (never);
#   *-seq-N   whose first answer the provider holds until steps 2 and 3 of
#             the same ids and 20 "cached" payments (no provider) were
#             pushed and the cached ones done: per-id order, and the shards
#             run other ids while jobs wait.
# Waits until everything settled, stops everything and prints report.py's
# report (exit 1 when something did not happen as designed). Installs what
# is missing and builds build/luakiq first, unless LUAKIQ_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  tools/install-deps.sh --examples
  tools/build.sh
  export LUAKIQ_BIN=build/luakiq
fi
dir=examples/callback
py=/usr/bin/python3 # Debian's, with python3-redis (a pyenv's python3 may lack it)
. tools/private-services.sh
private_session
tmp=$PRIVATE_TMP
private_redis_start "$tmp"
rcli() { redis-cli -u "$REDIS_URL" "$@"; }
now() { date +%s.%N; }
t0=$(now)
"$LUAKIQ_BIN" scripts "$tmp/scripts" reply waitkey >/dev/null
"$LUAKIQ_BIN" plan "$dir" >"$tmp/plan.txt"
touch "$tmp/provider.log" "$tmp/consumer.log"
"$py" "$dir/provider.py" "$tmp/port" "$tmp/provider.log" 2>"$tmp/provider.err" & provider_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
export PROVIDER_URL="http://127.0.0.1:$(cat "$tmp/port")"
"$py" "$dir/consumer.py" "$tmp/scripts" Shipments "$tmp/consumer.log" 2>"$tmp/consumer.err" & consumer_pid=$!
rport=$(free_port)
export LUAKIQ_PUBLIC_URL="http://127.0.0.1:$rport"
echo "private redis-server on $REDIS_URL, provider on $PROVIDER_URL, replies on $LUAKIQ_PUBLIC_URL"
"$LUAKIQ_BIN" run "$dir" --replies "127.0.0.1:$rport" --log-level warn >"$tmp/host.log" 2>&1 & host_pid=$!

# lines PREFIX PLAN N [STEP...]: N ids PREFIX-1..N, one payload per step (score = step)
lines() {
  local prefix=$1 plan=$2 n=$3 i s at
  shift 3
  at=$(now)
  for i in $(seq "$n"); do
    for s in "${@:-1}"; do
      echo "{\"id\":\"$prefix-$i\",\"score\":$s,\"payload\":{\"at\":$at,\"plan\":\"$plan\",\"step\":$s}}"
    done
  done
}
{
  lines pay-ok ok 12; lines pay-twice twice 4; lines pay-late late 3; lines pay-never never 3
  lines pay-seq hold 5
} | "$LUAKIQ_BIN" enqueue "$dir" Payments >/dev/null
{
  lines ship-ok ok 10; lines ship-twice twice 4; lines ship-late late 3; lines ship-never never 2
  lines ship-seq hold 4
} | "$LUAKIQ_BIN" enqueue "$dir" Shipments >/dev/null
# events of the workers (lib/example.lua) matching PATTERN
count() { rcli --raw lrange example:callback:events 0 -1 | grep -c "$1" || true; }
# until N events match PATTERN (or S seconds)
until_count() {
  local i
  for i in $(seq $(($3 * 20))); do [ "$(count "$1")" -ge "$2" ] && return 0; sleep 0.05; done
  echo "gave up waiting for $2 events $1" >&2
}
until_count '"ev":"request","id":"[a-z]*-seq-' 9 15
# the seq ids wait (the provider holds their answers): their next steps and
# the cached payments go in now
now >"$tmp/pushed_at"
{ lines pay-seq ok 5 2 3; lines pay-cached cached 20; } | "$LUAKIQ_BIN" enqueue "$dir" Payments >/dev/null
lines ship-seq ok 4 2 3 | "$LUAKIQ_BIN" enqueue "$dir" Shipments >/dev/null
until_count '"ev":"done"' 20 15
"$LUAKIQ_BIN" stats "$dir" >"$tmp/stats_held.json"
now >"$tmp/released_at"
curl -s "$PROVIDER_URL/release" >/dev/null
# settled: nothing queued, waiting or in flight, the 5 "never" jobs dead, the
# provider's answers all sent and the topic read; the same again after a look
settled() {
  "$LUAKIQ_BIN" stats "$dir" | grep -q '"total":{"expired":0,"lag":0,"length":0,"morgue_length":5,"waiting":0}' &&
    [ "$(curl -s "$PROVIDER_URL/pending")" = 0 ] && [ "$(rcli llen example:callback:topic)" = 0 ] &&
    [ -z "$("$LUAKIQ_BIN" jobs "$dir" Payments busy)$("$LUAKIQ_BIN" jobs "$dir" Shipments busy)" ] &&
    [ "$(grep -c '"/ship"' "$tmp/provider.log")" = "$(wc -l <"$tmp/consumer.log")" ]
}
for _ in $(seq 300); do settled && sleep 0.3 && settled && break; sleep 0.1; done
now >"$tmp/settled_at"
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=
kill -TERM "$consumer_pid"; wait "$consumer_pid" || true
kill -TERM "$provider_pid"; wait "$provider_pid" || true
rcli --raw lrange example:callback:events 0 -1 >"$tmp/events.log"
for w in Payments Shipments; do
  "$LUAKIQ_BIN" morgue "$dir" $w list >"$tmp/morgue_$w.log"
  "$LUAKIQ_BIN" waiting "$dir" $w --late >"$tmp/late_$w.log"
done
echo "$t0" >"$tmp/t0"
"$py" "$dir/report.py" "$tmp" || {
  for f in host.log provider.err consumer.err; do echo "--- $f (last lines):"; tail -n 20 "$tmp/$f"; done
  exit 1
}
