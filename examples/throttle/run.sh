#!/usr/bin/env bash
# examples/throttle: starts a private Redis, runs `luakiq run examples/throttle`
# and enqueues 600 east jobs, 150 north and 150 west (each call 0.5 s), then
# prints how many ran at once per region (report.lua): east never above 40,
# north and west never above 30, while all of them had work waiting.
# Installs what is missing and builds build/luakiq first, unless LUAKIQ_BIN
# names a binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${LUAKIQ_BIN:-}" ]; then
  tools/install-deps.sh
  tools/build.sh
  export LUAKIQ_BIN=build/luakiq
fi
dir=examples/throttle
. tools/private-services.sh
private_session
tmp=$PRIVATE_TMP
private_redis_start "$tmp"
echo "private redis-server on $REDIS_URL"
"$LUAKIQ_BIN" run "$dir" --log-level warn >"$tmp/host.log" 2>&1 & host_pid=$!
{
  for i in $(seq 600); do echo "{\"id\":\"e$i\",\"payload\":{\"region\":\"east\"}}"; done
  for i in $(seq 150); do echo "{\"id\":\"n$i\",\"payload\":{\"region\":\"north\"}}"; done
  for i in $(seq 150); do echo "{\"id\":\"w$i\",\"payload\":{\"region\":\"west\"}}"; done
} > "$tmp/jobs.jsonl"
"$LUAKIQ_BIN" enqueue "$dir" Regions "$tmp/jobs.jsonl"
for _ in $(seq 600); do
  [ "$(redis-cli -u "$REDIS_URL" llen example:throttle:calls)" -ge 900 ] && break
  sleep 0.1
done
kill -TERM "$host_pid"; wait "$host_pid" || true; host_pid=
"$LUAKIQ_BIN" lua "$dir/report.lua"
