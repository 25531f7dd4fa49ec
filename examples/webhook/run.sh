#!/usr/bin/env bash
# examples/webhook: starts a private Redis and the receiver (receiver.py, a
# free port, a secret), runs `luakiq run examples/webhook` and enqueues:
# orders 1-5 (processed), order-6 (the receiver fails it twice: retried, then
# processed), order-7 (rejected with 400: the morgue at once) and, through
# the Forged worker with the wrong secret, forged-1 (401: the morgue). Prints
# the receiver's log and the morgue. Installs what is missing and builds
# build/luakiq first, unless LUAKIQ_BIN names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  tools/install-deps.sh --examples
  tools/build.sh
  export LUAKIQ_BIN=build/luakiq
fi
dir=examples/webhook
. tools/private-services.sh
private_session
tmp=$PRIVATE_TMP
private_redis_start "$tmp"
export WEBHOOK_SECRET=example-secret
python3 "$dir/receiver.py" "$tmp/port" >"$tmp/receiver.log" 2>&1 & recv_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
export WEBHOOK_URL="http://127.0.0.1:$(cat "$tmp/port")"
echo "private redis-server on $REDIS_URL, receiver on $WEBHOOK_URL"
"$LUAKIQ_BIN" run "$dir" --log-level warn >"$tmp/host.log" 2>&1 & host_pid=$!
{
  for i in 1 2 3 4 5; do echo "{\"id\":\"order-$i\",\"payload\":{\"total\":$((i * 10))}}"; done
  echo '{"id":"order-6","payload":{"total":60,"fail_times":2}}'
  echo '{"id":"order-7","payload":{"total":70,"reject":true}}'
} | "$LUAKIQ_BIN" enqueue "$dir" Orders
echo '{"id":"forged-1","payload":{"total":1}}' | "$LUAKIQ_BIN" enqueue "$dir" Forged
# drained: nothing queued (stats' length leaves out jobs in flight), two
# dead, nothing in flight (a retry's attempt may be), and still nothing
# queued after that look (the attempt may have failed back meanwhile)
none_queued() { "$LUAKIQ_BIN" stats "$dir" | grep -q '"total":{"expired":0,"lag":0,"length":0,"morgue_length":2}'; }
for _ in $(seq 200); do
  none_queued &&
    [ -z "$("$LUAKIQ_BIN" jobs "$dir" Orders busy)" ] &&
    none_queued && break
  sleep 0.1
done
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=
echo "--- the receiver:"
cat "$tmp/receiver.log"
echo "--- the morgue:"
"$LUAKIQ_BIN" morgue "$dir" Orders list
"$LUAKIQ_BIN" morgue "$dir" Forged list
