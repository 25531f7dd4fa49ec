-- stats.lua: one shard's numbers (Lowkiq's queue metrics, per shard; the
-- caller sums over shards and computes lag = max(0, now - head)).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  No ARGV.
-- Returns strings {fresh (queued, retry_count < 0), retries (queued,
-- retry_count >= 0), morgue_length, head (lowest perform_in) or "",
-- processed, failed, busy (jobs in flight), expired (payloads), waiting
-- (jobs that wait for a reply, lib/waits.lua), then the replies by outcome:
-- accepted, duplicate, conflict, stale, unknown, then snoozed (jobs put back
-- by luakiq.snooze / call:snooze), stale_payloads (dropped at fetch by
-- monotonic = true) and cancelled (jobs cancelled: luakiq cancel)}.
-- (Jobs held behind a waiting one, P held, count as fresh or retried.)
-- (The retries index holds only retry_count >= 0, so fresh = queue - retries.)
-- luakiq:include keys
-- luakiq:include levels
local P = KEYS[1]
local K = shard_keys(P)
local queued, retries = queue_size(P, K) + redis.call("ZCARD", P .. HELD), redis.call("ZCARD", K.retries)
local replies = redis.call("HMGET", K.counters, "replies_accepted", "replies_duplicate", "replies_conflict",
  "replies_stale", "replies_unknown", "snoozed", "stale", "cancelled")
return {
  tostring(math.max(queued - retries, 0)),
  tostring(retries),
  tostring(redis.call("ZCARD", K.morgue)),
  queue_head(P, K) or "",
  redis.call("HGET", K.counters, "processed") or "0",
  redis.call("HGET", K.counters, "failed") or "0",
  tostring(busy_count(K)),
  redis.call("HGET", K.counters, "expired") or "0",
  tostring(redis.call("HLEN", P .. WAITS)),
  replies[1] or "0", replies[2] or "0", replies[3] or "0", replies[4] or "0", replies[5] or "0",
  replies[6] or "0", replies[7] or "0", replies[8] or "0",
}
