-- kill_failed.lua: move failed queued jobs (retry_count >= 0) to the morgue,
-- all their payloads (merged into a dead same-id job with the min score),
-- updated_at = now, their error copied. Fresh jobs (-1) stay.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] now, [2] limit (jobs per call).
-- Returns {killed, remaining failed jobs} (strings); call again until
-- remaining is 0.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local now, limit = arg_finite("kill_failed", "now", ARGV[1]), arg_count("kill_failed", "limit", ARGV[2])
local now_s = string.format("%.17g", now)
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", K.retries, 0, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do
  local src, dst = payloads_key(P, id), morgue_payloads_key(P, id)
  if redis.call("EXISTS", src) == 1 then
    redis.call("ZADD", K.morgue, now_s, id)
    redis.call("ZADD", K.morgue_ids, 0, id)
    merge_payloads(src, dst)
    local err = redis.call("HGET", K.errors, id)
    if err then redis.call("HSET", K.morgue_errors, id, err) else redis.call("HDEL", K.morgue_errors, id) end
  end
  unqueue(P, K, id)
  redis.call("ZREM", K.retries, id)
  redis.call("ZREM", K.ids, id)
  redis.call("HDEL", K.errors, id)
end
return { tostring(#ids), tostring(redis.call("ZCOUNT", K.retries, 0, "+inf")) }
