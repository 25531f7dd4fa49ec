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
local now_s = score_str(now)
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", K.retries, 0, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do
  unqueue_job(P, K, id, function(pl)
    morgue_add(K, id, pl, now_s, redis.call("HGET", K.errors, id) or "")
  end)
end
return { tostring(#ids), tostring(redis.call("ZCOUNT", K.retries, 0, "+inf")) }
