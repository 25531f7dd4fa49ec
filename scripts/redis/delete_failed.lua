-- delete_failed.lua: delete failed queued jobs (retry_count >= 0); fresh
-- jobs (-1) stay. Jobs in flight are never touched.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV[1] limit (jobs per call).
-- Returns {deleted, remaining failed jobs} (strings); call again until
-- remaining is 0.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local limit = arg_count("delete_failed", "limit", ARGV[1])
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", K.retries, 0, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do unqueue_job(P, K, id) end
return { tostring(#ids), tostring(redis.call("ZCOUNT", K.retries, 0, "+inf")) }
