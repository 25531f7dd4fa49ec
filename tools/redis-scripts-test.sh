#!/usr/bin/env bash
# Checks every script of scripts/redis/ against a private redis-server (unix
# socket in a temp dir, no TCP port), with redis-cli and EVALSHA.
# Usage: tools/redis-scripts-test.sh [-v]     (-v prints every check)
# Prints "N passed, N failed" and exits 1 on any failure.
# A quick harness for the Redis protocol; the busted specs cover the rest.
set -u
cd "$(dirname "$0")/.."
VERBOSE=0
[ "${1:-}" = "-v" ] && VERBOSE=1

DIR=$(mktemp -d)
cleanup() {
  if [ -f "$DIR/pid" ]; then kill "$(cat "$DIR/pid")" 2>/dev/null; fi
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

redis-server --port 0 --unixsocket "$DIR/redis.sock" --daemonize yes --pidfile "$DIR/pid" \
  --dir "$DIR" --logfile "$DIR/redis.log" --save '' --appendonly no >/dev/null || { echo "cannot start redis-server"; exit 1; }
for _ in $(seq 100); do
  [ -S "$DIR/redis.sock" ] && [ -f "$DIR/pid" ] && redis-cli -s "$DIR/redis.sock" PING >/dev/null 2>&1 && break
  sleep 0.05
done

r() { redis-cli -s "$DIR/redis.sock" "$@" 2>&1; }
# One reply as a single line, elements joined by "|" (nil and "" both print empty).
j() { r "$@" | paste -sd'|' -; }

declare -A SHA
for f in scripts/redis/*.lua; do
  name=$(basename "$f" .lua)
  # "-- luakiq:include NAME" lines expanded by the build's own expander
  src=$(luajit scripts/luakiq/lib/include.lua "$f") || { echo "cannot expand $f"; exit 1; }
  SHA[$name]=$(r SCRIPT LOAD "$src")
  if ! [[ ${SHA[$name]} =~ ^[0-9a-f]{40}$ ]]; then echo "SCRIPT LOAD $f failed: ${SHA[$name]}"; exit 1; fi
done

# ev SCRIPT KEY ARG... -> the reply, one line, "|"-joined.
ev() { local s=$1 k=$2; shift 2; j EVALSHA "${SHA[$s]}" 1 "$k" "$@"; }

PASS=0 FAIL=0
check() { # check DESCRIPTION EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    PASS=$((PASS + 1)); [ $VERBOSE = 1 ] && echo "ok   $1"
  else
    FAIL=$((FAIL + 1)); echo "FAIL $1"; echo "     expected: $2"; echo "     actual:   $3"
  fi
  return 0
}
match() { # match DESCRIPTION REGEX ACTUAL
  if [[ $3 =~ $2 ]]; then
    PASS=$((PASS + 1)); [ $VERBOSE = 1 ] && echo "ok   $1"
  else
    FAIL=$((FAIL + 1)); echo "FAIL $1"; echo "     expected to match: $2"; echo "     actual: $3"
  fi
  return 0
}
# refused DESCRIPTION CODE REGEX ACTUAL: ACTUAL is a script's refusal
# (docs/redis.md, "Errors") of the code word CODE, its text matching REGEX.
# Redis wraps a script's error: "ERR CODE ... script: SHA, on
# @user_script:N." (Redis >= 7), "ERR Error running script (call to f_SHA):
# @user_script:N: CODE ..." (6.2); a client reads the code word after that.
refused() {
  local text=${4#ERR }
  [[ $text =~ ^Error\ running\ script\ \(call\ to\ f_[0-9a-f]+\):\ @user_script:[0-9]+:\ (.*)$ ]] && text=${BASH_REMATCH[1]}
  if [[ $4 == "ERR "* && ${text%% *} == "$2" && $text =~ $3 ]]; then
    PASS=$((PASS + 1)); [ $VERBOSE = 1 ] && echo "ok   $1"
  else
    FAIL=$((FAIL + 1)); echo "FAIL $1"; echo "     expected: $2, matching $3"; echo "     actual: $4"
  fi
  return 0
}
# rc PREFIX ID: the id's entry in the retries index, "fresh" when absent
# (the index holds only retry_count >= 0).
rc() { local v; v=$(r ZSCORE "${1}retries" "$2"); echo "${v:-fresh}"; }
publishes() { r INFO commandstats | sed -n 's/^cmdstat_publish:calls=\([0-9]*\).*/\1/p' | tr -d '\r' | grep . || echo 0; }
payloads() { j ZRANGE "$1" 0 -1 WITHSCORES; }
# Layout 2 (docs/redis.md) keeps a job's payloads in its record: these read
# a shard through the scripts (job.lua, jobs.lua, busy.lua).
# qstate P ID: the first state job.lua finds ("queued", "in_flight", "dead", "").
qstate() { ev job "$1" "$2" | cut -d'|' -f1; }
# qpin P ID: the queued job's perform_in ("" when not queued).
qpin() { ev jobs "$1" queue id asc "[$2" "[$2" 0 1 | awk -F'|' '$1 == 1 {print $3}'; }
# qhas P ID: 1 when the id is queued, else 0.
qhas() { [ -n "$(qpin "$1" "$2")" ] && echo 1 || echo 0; }
# qpl P ID: the queued job's payloads, "payload|score|...".
qpl() { ev jobs "$1" queue id asc "[$2" "[$2" 0 1 | cut -d'|' -f7-; }
# mpl P ID: the dead job's payloads.
mpl() { ev jobs "$1" morgue id asc "[$2" "[$2" 0 1 | cut -d'|' -f6-; }
# qids P ORDER: the queued ids ("id" or "perform_in" order), "|"-joined.
qids() { ev jobs "$1" queue "$2" asc "$([ "$2" = id ] && echo - || echo -inf)" "$([ "$2" = id ] && echo + || echo +inf)" 0 1000 keys | cut -d'|' -f2- | awk -F'|' '{o=""; for (i = 1; i <= NF; i += 2) o = o (i > 1 ? "|" : "") $i; print o}'; }
# mids P: the dead ids, in id order.
mids() { ev jobs "$1" morgue id asc - + 0 1000 keys | cut -d'|' -f2- | awk -F'|' '{o=""; for (i = 1; i <= NF; i += 2) o = o (i > 1 ? "|" : "") $i; print o}'; }
# mput P ID UPDATED_AT ERROR PAYLOAD SCORE...: a dead job as the morgue
# stores it (morgue:jobs record, morgue, morgue:errors when ERROR is not "").
mput() {
  local p=$1 id=$2 at=$3 err=$4; shift 4
  r EVAL 'local v = {}
    for i = 4, #ARGV, 2 do v[#v + 1], v[#v + 2] = ARGV[i], tonumber(ARGV[i + 1]) end
    redis.call("ZADD", KEYS[1] .. "morgue:jobs", 0, ARGV[1] .. "\0\0" .. cmsgpack.pack(unpack(v)))
    redis.call("ZADD", KEYS[1] .. "morgue", ARGV[2], ARGV[1])
    if ARGV[3] ~= "" then redis.call("HSET", KEYS[1] .. "morgue:errors", ARGV[1], ARGV[3]) end' \
    1 "$p" "$id" "$at" "$err" "$@" >/dev/null
}
# fh ARG...: fetch.lua's reply, its header only (OK, batch, head, restored,
# acked, n): each job is one element for the host to decode (its member of
# P jobs or its busy record, luakiq.runner.queue's parse_fetch); what went
# in flight is read with busy.lua (bentry, "ev busy").
fh() { ev fetch "$@" | cut -d'|' -f1-6; }
# bhas P ID: 1 when the id is in flight.
bhas() { r HEXISTS "${1}busy" "$2"; }
# bentry P ID: the in-flight job's perform_in and retry_count, one a line.
bentry() { ev busy "$1" | awk -F'|' -v id="$2" '{i = 2; for (k = 1; k <= $1; k++) { if ($i == id) { print $(i + 1); print $(i + 2) } i += 5 + 2 * $(i + 4) } }'; }

NS=t
CH=$NS:wake
P="$NS:{Q:0}:"

# ---------------------------------------------------------------- register
check "register stores the count" "5" "$(ev register $NS:queues Q 5)"
check "register keeps the first count" "5" "$(ev register $NS:queues Q 7)"
refused "register rejects a bad count" BADARG "shards_count must be an integer" "$(ev register $NS:queues Z 0)"

# ---------------------------------------------------------------- push
r FLUSHALL >/dev/null
pub0=$(publishes)
check "push into an empty shard" "1|100" "$(ev push "$P" "$CH" 50 a 100 -1 10 p1)"
check "push to empty shard publishes (head from none to 100)" "$((pub0 + 1))" "$(publishes)"
check "push merge: returns 0 added, head kept" "0|100" \
  "$(ev push "$P" "$CH" 50 a 60 3 5 p1 a 40 4 20 p2)"
check "push merge keeps the queued perform_in (NX)" "100" "$(qpin "$P" a)"
check "push merge keeps the queued retry_count (NX)" "fresh" "$(rc "${P}" a)"
check "push merge: payloads united, equal payload min score" "p1|5|p2|20" "$(qpl "$P" a)"
check "push with a higher score keeps the min" "0|100" "$(ev push "$P" "$CH" 50 a 100 -1 99 p1)"
check "push merge: min score kept" "p1|5|p2|20" "$(qpl "$P" a)"
check "push into existing later head does not publish" "$((pub0 + 1))" "$(publishes)"
check "push: first occurrence in one call wins" "1|30" "$(ev push "$P" "$CH" 50 b 30 -1 1 x b 20 -1 1 y)"
check "push: first occurrence perform_in" "30" "$(qpin "$P" b)"
check "push: ids zset" "a|b" "$(qids "$P" id)"
check "head moved earlier (100 -> 30) publishes" "$((pub0 + 2))" "$(publishes)"
ev push "$P" "" 50 c 1 -1 1 x >/dev/null
check "channel \"\" never publishes" "$((pub0 + 2))" "$(publishes)"
check "push returns the new head" "0|1" "$(ev push "$P" "$CH" 50 c 0.5 -1 1 x)"
refused "push rejects nan perform_in" BADARG "perform_in must be a finite number" "$(ev push "$P" "$CH" 50 d 1 -1 1 x e nan -1 1 x)"
refused "push rejects inf score" BADARG "score must be a finite number" "$(ev push "$P" "$CH" 50 d 1 -1 inf x)"
check "a rejected push writes nothing" "0" "$(qhas "$P" d)"
refused "push rejects a bad group count" BADARG "groups of 5" "$(ev push "$P" "$CH" 50 d 1 -1 1)"
refused "push rejects an empty id" BADARG "id is empty" "$(ev push "$P" "$CH" 50 '' 1 -1 1 x)"
r FLUSHALL >/dev/null
r SUBSCRIBE "$CH" >"$DIR/sub.out" &
SUBPID=$!
sleep 0.2
ev push "$P" "$CH" 50 a 10 -1 1 x >/dev/null
sleep 0.2
kill $SUBPID 2>/dev/null; wait $SUBPID 2>/dev/null
check "the wake message is the shard prefix" "subscribe|$CH|1|message|$CH|$P" "$(paste -sd'|' "$DIR/sub.out")"

# ---------------------------------------------------------------- fetch
r FLUSHALL >/dev/null
ev push "$P" "" 50 j20 20 -1 1 x j100 100 -1 1 x jneg -5 -1 2 q jneg -5 -1 1 p >/dev/null
# (j10 waits in later, as a job failed back does, with its error)
ev push "$P" "" 5 j10 10 2 1 x >/dev/null
r HSET "${P}errors" j10 E10 >/dev/null
check "fetch: the due jobs by perform_in (-inf included)" "OK|1|20|0|0|2" "$(fh "$P" A 10000 50 2 '' 1)"
INFLIGHT="2|jneg|-5|-1||2|p|1|q|2|j10|10|2|E10|1|x|1"
check "fetch: in flight, payloads by score, retry_count and error" "$INFLIGHT" "$(ev busy "$P")"
check "fetch: lease taken" "A" "$(r GET "${P}lease")"
check "fetch: holder set" "A" "$(r GET "${P}holder")"
match "fetch: lease has a ttl" "^[0-9]+$" "$(r PTTL "${P}lease")"
check "fetch moved jobs out of queue/retries/ids" "j20|j100" "$(qids "$P" perform_in)"
check "fetch: busy hash" "-5"$'\n'"-1" "$(bentry "$P" jneg)"
check "fetch: error moved to busy:errors" "|E10" "$(r HGET "${P}errors" j10)|$(r HGET "${P}busy:errors" j10)"
check "fetch: payloads renamed to busy" "0|1" "$(qhas "$P" jneg)|$(bhas "$P" jneg)"
match "fetch: another token is refused with the pttl and the holder" "^LEASE\|[0-9]+\|holder\|A$" "$(ev fetch "$P" B 10000 50 2 1 1)"
check "a refused fetch changes nothing" "2|j20|j100" "$(r HLEN "${P}busy")|$(qids "$P" perform_in)"
check "fetch without ack redelivers the batch in flight" "OK|1|20|0|0|2" "$(fh "$P" A 10000 50 2 '' 1)"
check "redelivered: the same jobs in flight" "$INFLIGHT" "$(ev busy "$P")"
check "ack with a wrong batch id acks nothing" "OK||20|0|0|0" "$(ev fetch "$P" A 10000 50 2 7 0)"
check "busy still there" "2" "$(r HLEN "${P}busy")"
check "ack + fetch in one call" "OK|2|100|0|2|1" "$(fh "$P" A 10000 50 2 1 1)"
check "ack + fetch: the next job in flight" "1|j20|20|-1||1|x|1" "$(ev busy "$P")"
check "ack: counters processed" "2" "$(r HGET "${P}counters" processed)"
check "ack: busy keys of the acked batch gone" "0|0|0" \
  "$(bhas "$P" jneg)|$(r EXISTS "${P}busy:errors")|$(bhas "$P" j10)"
check "ack is idempotent (re-sent call)" "OK||100|0|0|0" "$(ev fetch "$P" A 10000 50 2 1 0)"
check "ack batch 2, nothing due" "OK||100|0|1|0" "$(ev fetch "$P" A 10000 50 2 2 1)"
check "counters processed 3" "3" "$(r HGET "${P}counters" processed)"
check "limit 0 fetches nothing" "OK||100|0|0|0" "$(ev fetch "$P" A 10000 200 0 '' 1)"
refused "fetch rejects a bad limit" BADARG "limit must be an integer" "$(ev fetch "$P" A 10000 50 -1 '' 1)"
refused "fetch rejects nan now" BADARG "now must be a finite number" "$(ev fetch "$P" A 10000 nan 1 '' 1)"
refused "fetch rejects a bad lease_ms" BADARG "lease_ms must be a positive integer" "$(ev fetch "$P" A 0 50 1 '' 1)"
# A queued id whose payloads do not decode is taken out of the queue: its
# record goes to the host, which drops it (it leaves with the batch's ack).
# (layout 2: a record that does not decode, in P later)
r ZADD "${P}later" 1 ghost >/dev/null; r ZADD "${P}retries" -1 ghost >/dev/null
r EVAL "redis.call('ZADD', KEYS[1] .. 'jobs', 0, 'ghost\\0\\0lxx')" 1 "$P" >/dev/null
check "fetch hands an id without payloads to the host" "OK|3|100|0|0|1" "$(fh "$P" A 10000 50 5 '' 1)"
check "dropped id gone" "0|0" "$(r ZSCORE "${P}later" ghost | grep -c .)|$(r ZLEXCOUNT "${P}jobs" "[ghost" "(ghosu")"

# Restore on a new holder, exactly once; merge with a job pushed meanwhile.
r FLUSHALL >/dev/null
ev push "$P" "" 1 x 10 1 5 p1 x 10 1 6 p2 y 11 -1 1 y >/dev/null # (in later: x with its error)
r HSET "${P}errors" x EX >/dev/null
check "A fetches x, y" "OK|1|" "$(ev fetch "$P" A 10000 50 5 '' 1 | cut -d'|' -f1-3)"
ev push "$P" "" 50 x 1 -1 3 p1 x 1 -1 7 p3 >/dev/null
check "pushed meanwhile: a separate queued job" "1|fresh" "$(qpin "$P" x)|$(rc "${P}" x)"
r DEL "${P}lease" >/dev/null   # A's lease expires
check "B acquires: restores 2 in-flight jobs, then fetches them" "OK|2||2|0|2" "$(fh "$P" B 10000 50 5 '' 1)"
check "B's in flight: x merged with its pushed payload, its retry_count and error kept" \
  "2|x|10|1|EX|3|p1|3|p2|6|p3|7|y|11|-1||1|y|1" "$(ev busy "$P")"
check "holder is B" "B" "$(r GET "${P}holder")"
check "B renews and acks: no second restore" "OK|||0|2|0" "$(ev fetch "$P" B 10000 50 5 2 0)"
check "B acked them" "2" "$(r HGET "${P}counters" processed)"
match "A is fenced out (B holds the lease)" "^LEASE\|[0-9]+\|holder\|B$" "$(ev fetch "$P" A 10000 50 5 1 0)"
# Restore without a fetch: restored jobs keep their perform_in/retry_count/error.
ev push "$P" "" 1 z 5 3 1 zz >/dev/null # (in later, with its error)
r HSET "${P}errors" z EZ >/dev/null
ev fetch "$P" B 10000 50 5 '' 1 >/dev/null
ev push "$P" "" 50 z 1 -1 0.5 zz >/dev/null
r DEL "${P}lease" >/dev/null
check "C acquires, restore only (fetch 0)" "OK||5|1|0|0" "$(ev fetch "$P" C 10000 50 5 '' 0)"
check "restored: own perform_in, retry_count, error win" "5|3|EZ" \
  "$(qpin "$P" z)|$(r ZSCORE "${P}retries" z)|$(r HGET "${P}errors" z)"
check "restored: payloads united, min score" "zz|0.5" "$(qpl "$P" z)"
check "restored: busy keys deleted" "0|0|0" \
  "$(r EXISTS "${P}busy")|$(r EXISTS "${P}busy:errors")|$(bhas "$P" z)"

# A lost reply: the call acked batch 1 and fetched batch 2; the re-sent call
# (same ack id) must neither ack batch 2 nor fetch a third one.
r FLUSHALL >/dev/null
ev push "$P" "" 50 l1 1 -1 1 x l2 2 -1 1 x l3 3 -1 1 x >/dev/null
B1=$(ev fetch "$P" A 10000 50 1 '' 1 | cut -d'|' -f2)
ev fetch "$P" A 10000 50 1 "$B1" 1 >/dev/null
check "re-sent ack+fetch redelivers batch 2 unacked" "OK|$((B1 + 1))|3|0|0|1" "$(fh "$P" A 10000 50 1 "$B1" 1)"
check "batch 2 in flight" "1|l2|2|-1||1|x|1" "$(ev busy "$P")"
check "processed counts batch 1 once" "1" "$(r HGET "${P}counters" processed)"

# Holder re-acquire: the lease expired, nobody took it, the same holder acks.
r FLUSHALL >/dev/null
ev push "$P" "" 50 h 10 -1 1 x >/dev/null
check "A fetches h" "OK|1" "$(ev fetch "$P" A 10000 50 1 '' 1 | cut -d'|' -f1-2)"
r DEL "${P}lease" >/dev/null
check "A re-acquires without restore and acks" "OK|||0|1|0" "$(ev fetch "$P" A 10000 50 1 1 0)"
check "A holds the lease again" "A" "$(r GET "${P}lease")"
check "release by another token" "0" "$(ev release "$P" B)"
check "release" "1" "$(ev release "$P" A)"
check "lease gone, holder kept" "0|A" "$(r EXISTS "${P}lease")|$(r GET "${P}holder")"
check "release twice" "0" "$(ev release "$P" A)"
# renew.lua (the main thread extends a performing thread's lease).
check "renew by the last holder re-takes a free lease" "1|A" "$(ev renew "$P" A 5000)|$(r GET "${P}lease")"
check "renew by another token" "0|A" "$(ev renew "$P" B 5000)|$(r GET "${P}lease")"
r DEL "${P}lease" >/dev/null
check "renew of a free lease by a non-holder" "0|0" "$(ev renew "$P" B 5000)|$(r EXISTS "${P}lease")"

# ---------------------------------------------------------------- fail
r FLUSHALL >/dev/null
ev push "$P" "" 50 f 10 -1 1 p1 f 10 -1 2 p2 g 11 1 1 g1 >/dev/null
B=$(ev fetch "$P" A 10000 50 5 '' 1 | cut -d'|' -f2)
ev push "$P" "" 50 f 1 -1 0.5 p2 f 1 -1 3 p3 >/dev/null
check "fail below max_retry_count" "OK|2|0|60" "$(ev fail "$P" A 10000 50 "$B" 3 BOOM f 60 g 70)"
check "fail: retry_count +1 and given perform_in overwrite the queued job" "60|0|70|2" \
  "$(qpin "$P" f)|$(r ZSCORE "${P}retries" f)|$(qpin "$P" g)|$(r ZSCORE "${P}retries" g)"
check "fail: payloads united with the pushed job, min score" "p2|0.5|p1|1|p3|3" "$(qpl "$P" f)"
check "fail: error set" "BOOM|BOOM" "$(r HGET "${P}errors" f)|$(r HGET "${P}errors" g)"
check "fail: counters failed" "2" "$(r HGET "${P}counters" failed)"
check "fail: busy keys gone" "0|0|0" "$(r EXISTS "${P}busy")|$(bhas "$P" f)|$(bhas "$P" g)"
check "fail: ids zset" "f|g" "$(qids "$P" id)"
check "fail re-sent (stale batch) changes nothing" "OK|0|0|60" "$(ev fail "$P" A 10000 50 "$B" 3 BOOM f 60 g 70)"
check "counters failed unchanged" "2" "$(r HGET "${P}counters" failed)"
# At max_retry_count: g has retry_count 2 -> 3 >= 3.
B=$(ev fetch "$P" A 10000 100 5 '' 1 | cut -d'|' -f2)
ev push "$P" "" 100 g 500 -1 9 g9 >/dev/null
check "fail at max: f retried, g's oldest payload morgued" "OK|2|1|70|g|g1|1" \
  "$(ev fail "$P" A 10000 100 "$B" 3 BANG f 70 g 80)"
check "morgue: updated_at now, payload, error" "100|g1|1|BANG" \
  "$(r ZSCORE "${P}morgue" g)|$(mpl "$P" g)|$(r HGET "${P}morgue:errors" g)"
check "at max with one payload: the queued job pushed meanwhile is unchanged" "500|fresh|g9|9" \
  "$(qpin "$P" g)|$(rc "${P}" g)|$(qpl "$P" g)"
check "below max: f retry_count 1" "70|1" "$(qpin "$P" f)|$(r ZSCORE "${P}retries" f)"
# At max with several payloads: the rest go back with -1, now.
r ZADD "${P}retries" 2 f >/dev/null
r ZADD "${P}later" 0 f >/dev/null   # (layout 2: f, failed, is in P later)
B=$(ev fetch "$P" A 10000 100 1 '' 1 | cut -d'|' -f2)
check "fail at max, 3 payloads" "OK|1|1|100|f|p2|0.5" "$(ev fail "$P" A 10000 100 "$B" 3 LAST f 999)"
check "rest back: perform_in now, retry_count -1, error" "100|fresh|LAST" \
  "$(qpin "$P" f)|$(rc "${P}" f)|$(r HGET "${P}errors" f)"
check "rest back: payloads" "p1|1|p3|3" "$(qpl "$P" f)"
check "morgue has 2 jobs" "2|f|g" "$(r ZCARD "${P}morgue")|$(mids "$P")"
# Lease rules for fail.
B=$(ev fetch "$P" A 10000 100 5 '' 1 | cut -d'|' -f2)
match "fail refused for another token" "^LEASE\|[0-9]+$" "$(ev fail "$P" X 10000 100 "$B" 3 E f 1)"
r DEL "${P}lease" >/dev/null
check "fail by the last holder re-acquires; unlisted ids go back unchanged" "OK|1|0|200" \
  "$(ev fail "$P" A 10000 100 "$B" 3 E f 200)"
check "the unlisted id g is back with its own values" "500|fresh|g9|9" \
  "$(qpin "$P" g)|$(rc "${P}" g)|$(qpl "$P" g)"
r DEL "${P}lease" >/dev/null
r SET "${P}holder" Z >/dev/null
check "fail refused when the lease is free and another was the holder" "LEASE|-2" "$(ev fail "$P" A 10000 100 '' 3 E f 1)"
refused "fail rejects odd pairs" BADARG "ARGV must be" "$(ev fail "$P" Z 10000 100 '' 3 E f)"
refused "fail rejects a nan perform_in" BADARG "perform_in of 'f' must be a finite" "$(ev fail "$P" Z 10000 100 '' 3 E f nan)"
# "done" ids: a batch performed in several perform calls (fetch_size > batch_size).
D="$NS:{Q:9}:"
ev push "$D" '' 10 a 1 -1 10 pa b 2 -1 10 pb c 3 -1 10 pc >/dev/null
B=$(ev fetch "$D" A 10000 100 3 '' 1 | cut -d'|' -f2)
check "fail with a done id: acks it, fails b, c back" "OK|1|0|3" "$(ev fail "$D" A 10000 100 "$B" 5 E a done b 300)"
check "done id acked: gone, counted" "0|0|1|1" \
  "$(bhas "$D" a)|$(qhas "$D" a)|$(r HGET "${D}counters" processed)|$(r HGET "${D}counters" failed)"
check "failed id retried, unlisted id back unchanged" "300|0|3|fresh|pc|10" \
  "$(qpin "$D" b)|$(rc "${D}" b)|$(qpin "$D" c)|$(rc "${D}" c)|$(qpl "$D" c)"
B=$(ev fetch "$D" A 10000 100 3 '' 1 | cut -d'|' -f2)
check "only done ids: a partial ack" "OK|0|0|300" "$(ev fail "$D" A 10000 100 "$B" 5 '' c done)"
check "partial ack: processed, nothing in flight" "2|0|b" "$(r HGET "${D}counters" processed)|$(r EXISTS "${D}busy")|$(qids "$D" perform_in)"

# ---------------------------------------------------------------- morgue
r FLUSHALL >/dev/null
mput "$P" m1 10 DEAD pa 1 pb 5
mput "$P" m2 20 "" x 1
mput "$P" m3 30 "" x 1
ev push "$P" "" 50 m1 999 4 3 pa m1 999 4 4 pc >/dev/null
r HSET "${P}errors" m1 OLD >/dev/null
pub0=$(publishes)
check "morgue_requeue by id" "1|2" "$(ev morgue_requeue "$P" "$CH" 77 100 m1)"
check "requeue: perform_in now, retry_count -1, morgue error copied" "77|fresh|DEAD" \
  "$(qpin "$P" m1)|$(rc "${P}" m1)|$(r HGET "${P}errors" m1)"
check "requeue: payloads united, min score" "pa|1|pc|4|pb|5" "$(qpl "$P" m1)"
check "requeue: morgue keys gone" "0|0|2|0" \
  "$(r ZSCORE "${P}morgue" m1 | grep -c .)|$(mids "$P" | tr '|' '\n' | grep -c '^m1$')|$(r ZCARD "${P}morgue:jobs")|$(r HEXISTS "${P}morgue:errors" m1)"
check "requeue publishes" "$((pub0 + 1))" "$(publishes)"
check "requeue all, paged (limit 1)" "1|1" "$(ev morgue_requeue "$P" "$CH" 78 1)"
check "first page took m2 (lex order)" "78" "$(qpin "$P" m2)"
check "requeue all, last page" "1|0" "$(ev morgue_requeue "$P" "$CH" 78 1)"
check "requeue all, empty" "0|0" "$(ev morgue_requeue "$P" "$CH" 78 1)"
check "requeue of a missing id" "0|0" "$(ev morgue_requeue "$P" "$CH" 78 1 nope)"
check "nothing requeued: no publish" "$((pub0 + 3))" "$(publishes)"
mput "$P" d1 10 E x 1
mput "$P" d2 20 "" x 1
mput "$P" d3 30 "" x 1
check "morgue_delete by id" "1|2" "$(ev morgue_delete "$P" 100 d1 nope)"
check "morgue_delete: keys gone" "d2|d3|0" "$(mids "$P")|$(r HEXISTS "${P}morgue:errors" d1)"
check "morgue_delete all, paged" "1|1" "$(ev morgue_delete "$P" 1)"
check "morgue_delete all, last page" "1|0" "$(ev morgue_delete "$P" 1)"
check "morgue_delete limit 0 does nothing" "0|0" "$(ev morgue_delete "$P" 0)"

# ---------------------------------------------------------------- delete
r FLUSHALL >/dev/null
ev push "$P" "" 50 d1 1 -1 1 x d2 2 -1 1 x >/dev/null
ev fetch "$P" A 10000 50 1 '' 1 >/dev/null
ev push "$P" "" 50 d1 1 -1 1 y >/dev/null
r HSET "${P}errors" d2 E >/dev/null
check "delete queued ids (d1 also in flight)" "2" "$(ev delete "$P" d1 d2 nope)"
check "delete: queue empty, errors gone" "0|0|0" "$(r ZCARD "${P}jobs")|$(r ZCARD "${P}later")|$(r EXISTS "${P}errors")"
check "delete never touches the job in flight" "1|x|1" "$(r HLEN "${P}busy")|$(ev busy "$P" | cut -d'|' -f7-8)"

# ---------------------------------------------------------------- perform_now
r FLUSHALL >/dev/null
ev push "$P" "" 50 n1 10 -1 1 x n2 60 -1 1 x n3 70 -1 1 x n4 80 -1 1 x >/dev/null
pub0=$(publishes)
check "perform_now page 1" "2|1" "$(ev perform_now "$P" "$CH" 50 2)"
check "perform_now page 2" "1|0" "$(ev perform_now "$P" "$CH" 50 2)"
check "perform_now nothing left" "0|0" "$(ev perform_now "$P" "$CH" 50 2)"
check "perform_now sets now, never 0" "10|50|50|50" \
  "$(qpin "$P" n1)|$(qpin "$P" n2)|$(qpin "$P" n3)|$(qpin "$P" n4)"
check "perform_now publishes when something changed" "$((pub0 + 2))" "$(publishes)"
ev push "$P" "" 50 i1 90 -1 1 x i2 95 -1 1 x i3 40 -1 1 x >/dev/null
ev push "$P" "" 50 i4 99 -1 1 x "" priority 1 7 >/dev/null
check "perform_now by id: future ones only, any level" "2|0" "$(ev perform_now "$P" "$CH" 50 1 i1 i3 i4 nope)"
check "perform_now by id: i1, i4 now; i2, i3 as they were" "50|95|40|50|50" \
  "$(qpin "$P" i1)|$(qpin "$P" i2)|$(qpin "$P" i3)|$(qpin "$P" i4)|$(r ZSCORE "${P}queue:7" i4)"

# ---------------------------------------------------------------- failures
r FLUSHALL >/dev/null
r HSET "${P}errors" q1 "order 7 not found" q2 "order 12 not found" q3 "timeout after 3.2 s talking to 10.0.0.7:5432" >/dev/null
r HSET "${P}morgue:errors" d1 "order 99 not found" d2 "disk full" >/dev/null
check "failures groups a shard's queued errors" \
  "0|2|order <n> not found|2|1|q1|timeout after <n> s talking to <ip>|1|1|q3" \
  "$(ev failures "$P" queued 0 500 "" 1 | sed 's/|q2|/|q1|/')"
check "failures groups the dead ones" "0|2|order <n> not found|1|0|disk full|1|0" "$(ev failures "$P" dead 0 500 "" 0)"
check "failures with a group: its ids" "0|d1" "$(ev failures "$P" dead 0 500 "order <n> not found" 0)"
refused "failures refuses a bad where" BADARG "where must be queued or dead" "$(ev failures "$P" busy 0 500 "" 0)"
refused "failures refuses a bad cursor" BADARG "cursor must be an integer" "$(ev failures "$P" dead x 500 "" 0)"
refused "failures refuses count 0" BADARG "count must be 1..10000" "$(ev failures "$P" dead 0 0 "" 0)"
r HSET "${P}errors" $(for i in $(seq 1 1000); do echo "x$i" "job-$i-failed"; done) >/dev/null
first=$(ev failures "$P" queued 0 50 "job-<n>-failed" 0)
match "failures on a big hash: one bounded step, then a cursor" "^[1-9][0-9]*\|x" "$first"
check "failures: a step returns about COUNT entries, not the 1000" "yes" \
  "$([ "$(echo "$first" | tr '|' '\n' | wc -l)" -lt 200 ] && echo yes || echo "no: $first")"

# ---------------------------------------------------------------- kill / delete failed
r FLUSHALL >/dev/null
ev push "$P" "" 50 k1 10 -1 1 x k2 11 0 1 a k2 11 0 2 b k3 12 3 1 x k4 13 5 1 x >/dev/null
r HSET "${P}errors" k2 E2 >/dev/null
mput "$P" k2 1 "" b 0.5 c 9
check "kill_failed page 1" "2|1" "$(ev kill_failed "$P" 90 2)"
check "kill_failed: all payloads to the morgue, min score" "b|0.5|a|1|c|9" "$(mpl "$P" k2)"
check "kill_failed: updated_at now, error copied" "90|E2|90" \
  "$(r ZSCORE "${P}morgue" k2)|$(r HGET "${P}morgue:errors" k2)|$(r ZSCORE "${P}morgue" k3)"
check "kill_failed: removed from the queue" "k1|k4" "$(qids "$P" id)"
check "kill_failed: queue keys gone" "0|0" "$(qhas "$P" k2)|$(r HEXISTS "${P}errors" k2)"
check "kill_failed page 2" "1|0" "$(ev kill_failed "$P" 90 2)"
check "kill_failed leaves fresh jobs" "k1|fresh" "$(qids "$P" id)|$(rc "${P}" k1)"
ev push "$P" "" 50 e1 10 -1 1 x e2 11 0 1 x e3 12 2 1 x >/dev/null
check "delete_failed page" "1|1" "$(ev delete_failed "$P" 1)"
check "delete_failed last page" "1|0" "$(ev delete_failed "$P" 5)"
check "delete_failed leaves fresh jobs" "e1|k1" "$(qids "$P" id)"
check "delete_failed: payload keys gone" "0|0" "$(qhas "$P" e2)|$(qhas "$P" e3)"

# ---------------------------------------------------------------- perform_in pages by search
# jobs.lua finds a perform_in page by binary search over ready's live
# entries, later and the levels; ARGV[9] "walk" walks them instead (the
# reference). Every page must come out alike.
r FLUSHALL >/dev/null
args=()
for i in $(seq 1 12); do args+=("r$i" $((i * 5)) -1 $((i * 5)) x); done
ev push "$P" "" 100 "${args[@]}" >/dev/null
args=()
for i in $(seq 1 9); do args+=("s$i" $((55 + i * 5)) -1 1 x); done
ev push "$P" "" 100 "${args[@]}" >/dev/null
args=()
for i in $(seq 1 10); do args+=("l$i" $((i * 10)) -1 1 x); done
ev push "$P" "" 100 "${args[@]}" >/dev/null
args=()
for i in $(seq 1 6); do args+=("f$i" $((100 + i * 7)) -1 1 x); done
ev push "$P" "" 100 "${args[@]}" >/dev/null
check "binary-search fixture: ready and later both hold jobs" "yes" \
  "$([ "$(r LLEN "${P}ready")" -ge 15 ] && [ "$(r ZCARD "${P}later")" -ge 10 ] && echo yes || echo "no: $(r LLEN "${P}ready") $(r ZCARD "${P}later")")"
# pages [walk] OFFSETS...: every page of a grid of ranges, directions, offsets
# and limits, by search or (walk) by walking; one redis-cli for them all.
pages() {
  local how=$1; shift
  for dir in asc desc; do
    for b in "-inf +inf" "20 60" "(50 (105" "100 100" "200 300" "(10 150"; do
      for off in "$@"; do
        for lim in 1 4 10; do
          echo "EVALSHA ${SHA[jobs]} 1 $P queue perform_in $dir $b $off $lim keys \"$how\""
        done
      done
    done
  done | redis-cli -s "$DIR/redis.sock" 2>&1
}
OFFS=(0 1 2 5 9 14 20 27 33 36 40)
check "perform_in pages answer without an error" "0" "$(pages "" "${OFFS[@]}" | grep -c ERR)"
check "perform_in pages: binary search = walk (396 pages)" "" \
  "$(diff <(pages "" "${OFFS[@]}") <(pages walk "${OFFS[@]}") | head -5)"
check "perform_in page: ties of ready and later, ready first" "3|r10|50|l5|50|r11|55" \
  "$(ev jobs "$P" queue perform_in asc 50 55 0 3 keys)"
check "perform_in page desc is the reverse" "3|r11|55|l5|50|r10|50" \
  "$(ev jobs "$P" queue perform_in desc 50 55 0 3 keys)"

# Stale entries and priorities: ready (r1..r40), later (l1..l20, ties with
# ready at every 10), level 50 (p1..p10) and level 200 (q1..q6), ties all
# over; then stale entries, an id with a stale entry and a live one, few
# stale ids (one LPOS each) and many (one pass).
r FLUSHALL >/dev/null
args=()
for i in $(seq 1 40); do args+=("r$i" $((i * 5)) -1 1 x); done
ev push "$P" "" 1000 "${args[@]}" >/dev/null
args=()
for i in $(seq 1 20); do args+=("l$i" $((i * 10)) -1 1 x); done
ev push "$P" "" 1000 "${args[@]}" >/dev/null
args=() sec=()
for i in $(seq 1 10); do args+=("p$i" $((i * 15)) -1 1 x); sec+=("$i" 50); done
ev push "$P" "" 1000 "${args[@]}" "" priority "${sec[@]}" >/dev/null
args=() sec=()
for i in $(seq 1 6); do args+=("q$i" $((i * 20)) -1 1 x); sec+=("$i" 200); done
ev push "$P" "" 1000 "${args[@]}" "" priority "${sec[@]}" >/dev/null
check "merged pages fixture: 41 ready (l20 at the tail), 19 later, 2 levels" "41|19|2" \
  "$(r LLEN "${P}ready")|$(r ZCARD "${P}later")|$(r ZCARD "${P}levels")"
OFFS=(0 1 3 7 15 24 38 50 61 70 75 80)
check "perform_in pages with priorities: search = walk" "" \
  "$(diff <(pages "" "${OFFS[@]}") <(pages walk "${OFFS[@]}") | head -5)"
ev delete "$P" r3 r7 r8 r40 >/dev/null
ev push "$P" "" 1000 r3 210 -1 1 y r40 210 -1 1 y >/dev/null
check "r3 has a stale entry and a live one" "2|1" "$(r LPOS "${P}ready" r3 COUNT 0 | wc -l)|$(r HGET "${P}stale" r3)"
check "perform_in pages, 4 stale ids: search = walk" "" \
  "$(diff <(pages "" "${OFFS[@]}") <(pages walk "${OFFS[@]}") | head -5)"
ev delete "$P" $(seq -f 'r%g' 10 30) >/dev/null
ev push "$P" "" 1000 r12 215 -1 1 y r20 220 -1 1 y >/dev/null
check "25 stale ids" "25" "$(r HLEN "${P}stale")"
check "perform_in pages, 25 stale ids: search = walk" "" \
  "$(diff <(pages "" "${OFFS[@]}") <(pages walk "${OFFS[@]}") | head -5)"
check "perform_in page across ready, later and the levels at 30" "3|r6|30|l3|30|p2|30" \
  "$(ev jobs "$P" queue perform_in asc 20 30 4 3 keys)"

# ---------------------------------------------------------------- junk in ready
r FLUSHALL >/dev/null
ev push "$P" "" 50 g1 10 -1 10 x >/dev/null
r EVAL 'redis.call("ZADD", KEYS[1] .. "jobs", 0, "jx\0\0r\193junk") redis.call("RPUSH", KEYS[1] .. "ready", "jx")' 1 "$P" >/dev/null
check "fetch passes a junk record met in ready: g1 taken" "1|1|g1" \
  "$(fh "$P" A 10000 60 10 '' 1 | cut -d'|' -f6)|$(ev busy "$P" | cut -d'|' -f1-2)"
check "the junk member goes with its ready entry" "0|0" "$(r ZCARD "${P}jobs")|$(r LLEN "${P}ready")"

# ---------------------------------------------------------------- stats, heads, busy
r FLUSHALL >/dev/null
check "stats of an empty shard" "0|0|0||0|0|0|0|0|0|0|0|0|0|0|0|0" "$(ev stats "$P")"
check "heads of an empty shard" "|0" "$(ev heads "$P")"
ev push "$P" "" 50 s1 10 -1 1 x s2 20 0 1 x s3 30 4 1 x s4 5 -1 1 x >/dev/null
r ZADD "${P}morgue" 1 dead >/dev/null
ev fetch "$P" A 10000 6 1 '' 1 >/dev/null
r HINCRBY "${P}counters" failed 3 >/dev/null
check "stats: fresh, retries, morgue, head, processed, failed, busy, expired, waiting, replies, snoozed, stale, cancelled" "1|2|1|10|0|3|1|0|0|0|0|0|0|0|0|0|0" "$(ev stats "$P")"
check "heads: for another caller, the holder of the lease in place of the orphaned count" "10|A" "$(ev heads "$P" B)"
check "heads: the lease holder's own batch in flight counts as orphaned" "10|1" "$(ev heads "$P" A)"
check "busy listing" "1|s4|5|-1||1|x|1" "$(ev busy "$P")"
B=$(ev fetch "$P" A 10000 100 2 1 1 | cut -d'|' -f2)
check "stats after ack and fetch: processed, busy" "0|1|1|30|1|3|2|0|0|0|0|0|0|0|0|0|0" "$(ev stats "$P")"
check "busy listing in perform_in order" "2|s1|10|-1||1|x|1|s2|20|0||1|x|1" "$(ev busy "$P")"

# ---------------------------------------------------------------- jobs
r FLUSHALL >/dev/null
ev push "$P" "" 50 b 20 1 1 pb a 30 -1 2 pa2 a 30 -1 1 pa1 c 10 2 1 pc >/dev/null
r HSET "${P}errors" b EB >/dev/null
A1="a|30|-1||2|pa1|1|pa2|2"
B1="b|20|1|EB|1|pb|1"
C1="c|10|2||1|pc|1"
check "jobs by id asc" "3|$A1|$B1|$C1" "$(ev jobs "$P" queue id asc - + 0 10)"
check "jobs by id desc" "3|$C1|$B1|$A1" "$(ev jobs "$P" queue id desc - + 0 10)"
check "jobs by id, range and offset" "1|$C1" "$(ev jobs "$P" queue id asc '(a' + 1 10)"
check "jobs by id desc, range" "2|$B1|$A1" "$(ev jobs "$P" queue id desc - '[b' 0 10)"
check "jobs by perform_in asc, limit" "2|$C1|$B1" "$(ev jobs "$P" queue perform_in asc -inf +inf 0 2)"
check "jobs by perform_in desc" "3|$A1|$B1|$C1" "$(ev jobs "$P" queue perform_in desc -inf +inf 0 10)"
check "jobs by perform_in desc, range" "1|$B1" "$(ev jobs "$P" queue perform_in desc 15 '(30' 0 10)"
check "jobs by retry_count asc, failed only" "2|$B1|$C1" "$(ev jobs "$P" queue retry_count asc 0 +inf 0 10)"
check "jobs by retry_count desc" "3|$C1|$B1|$A1" "$(ev jobs "$P" queue retry_count desc -inf +inf 0 10)"
check "jobs limit 0" "0" "$(ev jobs "$P" queue id asc - + 0 0)"
check "jobs keys only, by perform_in desc from offset 1" "2|b|20|c|10" "$(ev jobs "$P" queue perform_in desc -inf +inf 1 5 keys)"
check "jobs keys only, by id, exclusive range" "2|b||c|" "$(ev jobs "$P" queue id asc '(a' + 0 5 keys)"
check "jobs by id desc, exclusive max, offset 1" "1|$A1" "$(ev jobs "$P" queue id desc - '(c' 1 5)"
# By retry_count the fresh jobs (-1, not in the retries index) come from the id
# index, retried ids skipped: pages across the fresh/retried boundary.
R="$NS:{Q:7}:"
ev push "$R" "" 50 a 1 -1 1 x b 1 1 1 x c 1 -1 1 x d 1 0 1 x e 1 -1 1 x f 1 2 1 x >/dev/null
# ids of a jobs reply whose records have one payload each (7 fields)
ids_of() { awk -F'|' '{ s = ""; for (i = 0; i < $1; i++) s = s (i ? "," : "") $(2 + 7 * i); print s }' <<<"$1"; }
check "stats: fresh = queued - retries" "3|3" "$(ev stats "$R" | cut -d'|' -f1,2)"
check "by retry_count asc: fresh by id, then retries" "a,c,e,d,b,f" "$(ids_of "$(ev jobs "$R" queue retry_count asc -inf +inf 0 10)")"
check "by retry_count desc" "f,b,d,e,c,a" "$(ids_of "$(ev jobs "$R" queue retry_count desc -inf +inf 0 10)")"
check "asc pages of 2" "a,c|e,d|b,f|" "$(for o in 0 2 4 6; do ids_of "$(ev jobs "$R" queue retry_count asc -inf +inf $o 2)"; done | paste -sd'|' -)"
check "desc pages of 4" "f,b,d,e|c,a" "$(for o in 0 4; do ids_of "$(ev jobs "$R" queue retry_count desc -inf +inf $o 4)"; done | paste -sd'|' -)"
check "asc offset 1 limit 1 (walk skips retried b)" "c" "$(ids_of "$(ev jobs "$R" queue retry_count asc -inf +inf 1 1)")"
check "range: fresh only, retried only, (-1 exclusive" "a,c,e|d,b,f|f,b,d" \
  "$(ids_of "$(ev jobs "$R" queue retry_count asc -inf -1 0 10)")|$(ids_of "$(ev jobs "$R" queue retry_count asc 0 +inf 0 10)")|$(ids_of "$(ev jobs "$R" queue retry_count desc '(-1' +inf 0 10)")"
r DEL "${R}retries" >/dev/null   # no retried job: the fresh page is a rank lookup
check "rank path, asc and desc with offset" "c,d|e,d" \
  "$(ids_of "$(ev jobs "$R" queue retry_count asc -inf +inf 2 2)")|$(ids_of "$(ev jobs "$R" queue retry_count desc -inf +inf 1 2)")"
refused "bad score bound" BADRANGE "bad score bound" "$(ev jobs "$R" queue retry_count asc x +inf 0 10)"
# push: retry_count >= 0 enters the index only for an id not queued, first occurrence wins
ev push "$R" "" 60 a 1 5 1 y g 1 -1 1 y g 1 3 1 y h 1 4 1 y h 1 -1 1 y >/dev/null
check "push rc >= 0: queued a keeps -1, g's first (-1) wins, new h gets 4" "fresh|fresh|4" "$(rc "$R" a)|$(rc "$R" g)|$(rc "$R" h)"
refused "jobs rejects a bad order" BADRANGE "bad what/order" "$(ev jobs "$P" queue updated_at asc - + 0 10)"
refused "jobs rejects a bad dir" BADRANGE "dir must be" "$(ev jobs "$P" queue id up - + 0 10)"
refused "jobs: a bad bound of a set read by rank is the script's refusal, not Redis's" BADRANGE "bad score bound 'x'" \
  "$(ev jobs "$P" morgue updated_at asc x +inf 0 10)"
refused "jobs: a score bound with a trailing space (ZRANGEBYSCORE refuses it)" BADRANGE "bad score bound" \
  "$(ev jobs "$P" queue perform_in asc '1 ' +inf 0 10)"
refused "jobs: a bad lex bound" BADRANGE "bad lex bound 'x'" "$(ev jobs "$P" queue id asc x + 0 10)"
match "jobs: exclusive infinite bounds, as ZRANGEBYSCORE takes them" "^[0-9]+" \
  "$(ev jobs "$P" morgue updated_at asc '(-inf' '(+inf' 0 10)|$(ev jobs "$P" queue perform_in desc '(-inf' '(inf' 0 10)"
mput "$P" ma 300 "" x 1 y 2
mput "$P" mb 100 EMB z 1
MA="ma|300||2|x|1|y|2"
MB="mb|100|EMB|1|z|1"
check "morgue jobs by id asc" "2|$MA|$MB" "$(ev jobs "$P" morgue id asc - + 0 10)"
check "morgue jobs by id desc" "2|$MB|$MA" "$(ev jobs "$P" morgue id desc - + 0 10)"
check "morgue jobs by updated_at asc" "2|$MB|$MA" "$(ev jobs "$P" morgue updated_at asc -inf +inf 0 10)"
check "morgue jobs by updated_at desc, offset" "1|$MB" "$(ev jobs "$P" morgue updated_at desc -inf +inf 1 10)"

# ---------------------------------------------------------------- scores survive
r FLUSHALL >/dev/null
ev push "$P" "" 1700000000.5 fl 1700000000.123456 -1 1700000000.25 x >/dev/null
check "fetch of a fractional perform_in" "OK|1||0|0|1" "$(fh "$P" A 10000 1700000000.5 1 '' 1)"
check "its perform_in and score in flight, as Redis score strings" "1|fl|1700000000.123456|-1||1|x|1700000000.25" \
  "$(ev busy "$P")"

# ---------------------------------------------------------------- tags, tagged
r FLUSHALL >/dev/null
check "push: no tags, no tags key" "0" "$(ev push "$P" "" 10 u0 10 -1 10 x >/dev/null; r EXISTS "${P}tags")"
ev push "$P" "" 10 ta 10 -1 10 x "" tags 1 $'b\na' >/dev/null
check "push with tags: the id's tags, sorted" $'a\nb' "$(r HGET "${P}tags" ta)"
check "and one set per tag" "ta|ta" "$(r SMEMBERS "${P}tag:a")|$(r SMEMBERS "${P}tag:b")"
ev push "$P" "" 10 ta 10 -1 10 y "" tags 1 $'a\nc' >/dev/null
check "push of a queued id: union, sorted" $'a\nb\nc' "$(r HGET "${P}tags" ta)"
refused "push: bad tags refused" BADARG "tags must be" "$(ev push "$P" "" 10 tb 10 -1 10 x "" tags 1 $'a\n\nb')"
refused "push: a control character refused" BADARG "tags must be" "$(ev push "$P" "" 10 tb 10 -1 10 x "" tags 1 $'a\tb')"
check "and nothing written" "0" "$(r ZSCORE "${P}queue" tb | grep -c .)"
check "tagged: id, state, tags (one a line)" '0|ta|queued|a|b|c' "$(ev tagged "$P" a 0 100)"
ev delete "$P" ta >/dev/null
check "tagged: an id that is gone is left out" "0" "$(ev tagged "$P" a 0 100)"
check "and its entries dropped" "0|0|0" "$(r EXISTS "${P}tag:a")|$(r EXISTS "${P}tag:c")|$(r HEXISTS "${P}tags" ta)"
ev push "$P" "" 10 tc 10 -1 10 x "" tags 1 old >/dev/null
ev delete "$P" tc >/dev/null
ev push "$P" "" 10 tc 10 -1 10 x "" tags 1 new >/dev/null
check "push of an id that is gone replaces its tags" "new|0" "$(r HGET "${P}tags" tc)|$(r SISMEMBER "${P}tag:old" tc)"
ev delete "$P" tc >/dev/null
ev push "$P" "" 10 tc 10 -1 10 x >/dev/null
check "and a push without tags drops them" "0" "$(r HEXISTS "${P}tags" tc)"
refused "tagged: bad count refused" BADARG "count must be" "$(ev tagged "$P" a 0 0)"
refused "tagged: bad cursor refused" BADARG "cursor must be" "$(ev tagged "$P" a x 10)"

# ---------------------------------------------------------------- schedule
r FLUSHALL >/dev/null
pub0=$(publishes)
check "schedule: a new tick enqueues" "1" "$(ev schedule "$P" s1 100 100 "$CH" j1 pay)"
check "schedule: the job, perform_in = score = tick" "100|pay|100" "$(qpin "$P" j1)|$(qpl "$P" j1)"
check "schedule: due and ready empty: appended to ready, tail = tick" "j1|100|0" \
  "$(j LRANGE "${P}ready" 0 -1)|$(r GET "${P}tail")|$(r EXISTS "${P}later")"
check "schedule: the new head publishes" "$((pub0 + 1))" "$(publishes)"
check "schedule: the same tick again: nothing" "0" "$(ev schedule "$P" s1 100 100 "$CH" j1 pay)"
check "schedule: an earlier tick: nothing" "0" "$(ev schedule "$P" s1 90 100 "$CH" j1 pay)"
check "schedule: merged into the queued job (new + queued)" "1" "$(ev schedule "$P" s1 200 150 "$CH" j1 pay2)"
check "schedule: payloads united, perform_in and place kept" "100|pay|100|pay2|200|j1" \
  "$(qpin "$P" j1)|$(qpl "$P" j1)|$(j LRANGE "${P}ready" 0 -1)"
check "schedule: the same payload keeps its minimal score" "1|pay|100|pay2|200" \
  "$(ev schedule "$P" s1 300 300 "$CH" j1 pay)|$(qpl "$P" j1)"
check "schedule: the merge does not publish" "$((pub0 + 1))" "$(publishes)"
check "schedule: a future tick goes to later" "1|500|0" \
  "$(ev schedule "$P" s2 500 400 "" j2 p)|$(r ZSCORE "${P}later" j2)|$(r LPOS "${P}ready" j2 | grep -c .)"
check "schedule: a due tick below the tail goes to later" "1|70" \
  "$(ev schedule "$P" s3 70 120 "" j3 p)|$(r ZSCORE "${P}later" j3)"
check "schedule: a new schedule skips a tick over 60 s old (records it)" "0|0|10" \
  "$(ev schedule "$P" s4 10 400 "" j4 p)|$(qhas "$P" j4)|$(r HGET "${P}schedules" s4)"
r SET "${P}shards" 7 >/dev/null
refused "schedule: routed with another shards_count: refused, the counts in the error" RESHARDED "^RESHARDED 7 5( |$)" \
  "$(ev schedule "$P" s1 900 900 "" j1 pay 5)"
refused "push: routed with another shards_count: refused" RESHARDED "^RESHARDED 7 5( |$)" \
  "$(ev push "$P" "" 900 jr 900 -1 900 x "" shards 5)"
refused "push, the short form: routed with another shards_count: refused" RESHARDED "^RESHARDED 7 5( |$)" \
  "$(ev push "$P" "" 900 "" ids 900 -1 900 x jr "" shards 5)"
check "push: nothing written when refused; the shard's own count taken" "0|1" \
  "$(qhas "$P" jr)|$(ev push "$P" "" 900 jr 900 -1 900 x "" shards 7 >/dev/null; qhas "$P" jr)"
check "schedule: fetch takes them both" "OK|2" "$(fh "$P" A 10000 450 10 '' 1 | cut -d'|' -f1,6)"
check "schedule: in flight in perform_in order" "j3|j1" "$(ev busy "$P" | tr '|' '\n' | grep -x 'j[0-9]' | paste -sd'|' -)"

# ---------------------------------------------------------------- reshard
# Shard 0 -> shard 1 of queue Q (token T): reshard_out stages, the host
# carries the records (here redis-cli -x), reshard_in merges, drop forgets.
r FLUSHALL >/dev/null
P1="$NS:{Q:1}:"
for s in "$P" "$P1"; do ev reshard_shard "$s" freeze T 2 "" >/dev/null; done
r SET "${P}lease" T >/dev/null
# shard 0: a due now (ready), b future with priority 7, tags, an expiry and
# windows, retried with an error; c queued and dead
ev push "$P" "" 100 a 50 -1 50 pa b 500 3 1 pb1 b 500 3 2 pb2 c 60 -1 60 pc \
  "" priority 2 7 "" tags 2 $'t1\nt2' "" expires_at 2 9000 3 9000 "" windows 2 "UTC|09:00-17:00" >/dev/null
r HSET "${P}errors" b Eb >/dev/null
r EVAL "redis.call('ZADD', KEYS[1] .. 'morgue:jobs', 0, 'c\0\0' .. cmsgpack.pack('dead1', 1, 'dead2', 2)) redis.call('ZADD', KEYS[1] .. 'morgue', 70, 'c') redis.call('HSET', KEYS[1] .. 'morgue:errors', 'c', 'Ec')" 1 "$P" >/dev/null
# shard 1: pushed meanwhile under the new count: b with priority 9, another
# payload and a lower score for pb2; c dead earlier
ev push "$P1" "" 100 b 20 -1 0.5 pb2 b 20 -1 7 pbx "" priority 1 9 "" tags 1 t3 >/dev/null
r EVAL "redis.call('ZADD', KEYS[1] .. 'morgue:jobs', 0, 'c\0\0' .. cmsgpack.pack('dead1', 5, 'dead3', 3)) redis.call('ZADD', KEYS[1] .. 'morgue', 65, 'c') redis.call('HSET', KEYS[1] .. 'morgue:errors', 'c', 'old')" 1 "$P1" >/dev/null
refused "reshard_out: refused without the lease" FENCED "not frozen and leased" "$(ev reshard_out "$P1" T a)"
r SET "${P1}lease" T >/dev/null
r HSET "${P1}busy" x y >/dev/null
refused "reshard_out: refused while jobs are in flight" INFLIGHT "jobs are in flight" "$(ev reshard_out "$P1" T a)"
r DEL "${P1}lease" "${P1}busy" >/dev/null
check "reshard_out: ids with something staged" "a|b|c" "$(ev reshard_out "$P" T a b c nothing | tr '|' '\n' | grep -x '[a-z]*' | paste -sd'|' -)"
check "reshard_out: the shard's keys emptied, a's ready entry stale" "0|0|0|0|0|1|0|0|0|0" \
  "$(r ZCARD "${P}jobs")|$(r ZCARD "${P}later")|$(r EXISTS "${P}queue:7")|$(r ZCARD "${P}morgue")|$(r ZCARD "${P}morgue:jobs")|$(r HGET "${P}stale" a)|$(r EXISTS "${P}retries")|$(r EXISTS "${P}errors")|$(r EXISTS "${P}tags")|$(r EXISTS "${P}expires:b")"
check "reshard_out: staged once" "3|3" "$(r HLEN "${P}reshard:out")|$(ev reshard_out "$P" T a b c | tr '|' '\n' | grep -cx '[a-z]')"
for id in a b c; do
  r HGET "${P}reshard:out" "$id" | head -c -1 >"$DIR/rec"
  # twice: importing is idempotent
  for _ in 1 2; do redis-cli -s "$DIR/redis.sock" -x EVALSHA "${SHA[reshard_in]}" 1 "$P1" T "$id" <"$DIR/rec" >/dev/null; done
done
check "reshard_in: a into later (never ready), as it was" "50|pa|50|50|0|fresh" \
  "$(qpin "$P1" a)|$(qpl "$P1" a)|$(r ZSCORE "${P1}later" a)|$(r EXISTS "${P1}ready")|$(rc "$P1" a)"
check "reshard_in: b merged (failed + queued): its perform_in, retry_count, error, the lower priority" \
  "500|3|Eb|7|500|0" \
  "$(qpin "$P1" b)|$(rc "$P1" b)|$(r HGET "${P1}errors" b)|$(r HGET "${P1}prio" b)|$(r ZSCORE "${P1}queue:7" b)|$(r EXISTS "${P1}queue:9")"
check "reshard_in: b's payloads united, min score" "pb2|0.5|pb1|1|pbx|7" "$(qpl "$P1" b)"
check "reshard_in: b's windows, expiry (a payload here without one keeps none), tags united" \
  "UTC|09:00-17:00|pb1|9000|b|t1,t2,t3|b|b|b" \
  "$(r HGET "${P1}windows" b)|$(j HGETALL "${P1}expires:b")|$(r SMEMBERS "${P1}expiring")|$(r HGET "${P1}tags" b | paste -sd, -)|$(r SMEMBERS "${P1}tag:t1")|$(r SMEMBERS "${P1}tag:t2")|$(r SMEMBERS "${P1}tag:t3")"
check "reshard_in: c dead, payloads united, updated_at and error of the later" "dead1|1|dead2|2|dead3|3|70|Ec" \
  "$(mpl "$P1" c)|$(r ZSCORE "${P1}morgue" c)|$(r HGET "${P1}morgue:errors" c)"
check "reshard_in: c queued too" "60|pc|60" "$(qpin "$P1" c)|$(qpl "$P1" c)"
check "reshard_shard drop: staged records forgotten" "3|0" "$(ev reshard_shard "$P" drop T a b c)|$(r EXISTS "${P}reshard:out")"
check "thaw of a removed shard with no job left: ready, stale, tail gone" "1|0|0|0" \
  "$(ev reshard_shard "$P" thaw T "" 1)|$(r EXISTS "${P}ready")|$(r EXISTS "${P}stale")|$(r EXISTS "${P}tail")"

# ---------------------------------------------------------------- waits (docs/redis.md, "Waits")
r FLUSHALL >/dev/null
P='luakiq:{W:0}:'
SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
ev push "$P" "" 100 a 100 -1 100 pa >/dev/null
B=$(ev fetch "$P" A 10000 100 10 '' 1 0 | cut -d'|' -f2)
check "a fetch of a shard that never awaited has no waits section" "OK|1|0|0|1|0" \
  "$(ev fetch "$P" A 10000 100 10 '' 1 0 | cut -d'|' -f1-2,4-6,8)|$(r EXISTS "${P}waits:seq")"
W=$(ev await "$P" A 10000 100 "$B" a 60 "" "" "" $SECRET)
TOKEN=${W%%|*}
match "await: token 1.b64url(queue).b64url(id).attempt.mac, attempt, deadline" '^1\.Vw\.YQ\.1\.[0-9a-f]{32}\|1\|160$' "$W"
MAC=$(printf '%s' "${TOKEN%.*}" | openssl dgst -sha1 -mac HMAC -macopt hexkey:$SECRET | awk '{print $NF}')
check "the token's mac is HMAC-SHA1(secret, the text before it), as openssl computes it" "${MAC:0:32}" "${TOKEN##*.}"
check "await again in the same batch: the same token" "$W" "$(ev await "$P" A 10000 100 "$B" a 60 "" "" "" $SECRET)"
match "await of an id not in flight" "NOTINFLIGHT" "$(ev await "$P" A 10000 100 "$B" zz 60 "" "" "" $SECRET)"
match "await by another holder" "FENCED" "$(ev await "$P" X 10000 100 "$B" a 60 "" "" "" $SECRET)"
check "a reply before the ack is kept" "accepted|duplicate" \
  "$(ev reply "$P" reply 101 "" "" token "$TOKEN" '{"x":1}')|$(ev reply "$P" reply 101 "" "" token "$TOKEN" '{"x":1}')"
match "another body: CONFLICT" "CONFLICT" "$(ev reply "$P" reply 101 "" "" token "$TOKEN" '{"x":2}')"
match "a forged token: UNKNOWN" "UNKNOWN" "$(ev reply "$P" reply 101 "" "" token "${TOKEN%?}x" '{}')"
match "not JSON: BADJSON" "BADJSON" "$(ev reply "$P" reply 101 "" "" token "$TOKEN" '{x')"
check "the ack: the job waits (not processed), its reply is handed back with the waits section" \
  "0|1|waits|1|1|reply|1|{\"x\":1}" "$(ev fetch "$P" A 10000 102 10 "$B" 1 0 | cut -d'|' -f5-6,8-)"
check "in flight as a reply call" "1|1|handling" "$(r SCARD "${P}waits:run")|$(r HLEN "${P}busy")|$(ev job "$P" a | cut -d'|' -f1 | sed 's/in_flight/handling/')"
B=$(r GET "${P}batch")
check "the reply call acked: processed, the wait over" "1|0|0|" \
  "$(ev fetch "$P" A 10000 103 10 "$B" 1 0 | cut -d'|' -f5)|$(r EXISTS "${P}waits")|$(r EXISTS "${P}waits:run")|$(ev job "$P" a)"
match "the token is stale now" "STALE" "$(ev reply "$P" reply 104 "" "" token "$TOKEN" '{"x":1}')"
check "stats: waiting, accepted, duplicate, conflict, stale, unknown" "0|1|1|1|1|1" "$(ev stats "$P" | cut -d'|' -f9-14)"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
