-- delete_failed.lua: delete failed queued jobs (retry_count >= 0); fresh
-- jobs (-1) stay. Jobs in flight are never touched.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV[1] limit (jobs per call).
-- Returns {deleted, remaining failed jobs} (strings); call again until
-- remaining is 0.
-- luakiq:include args
local P = KEYS[1]
local limit = arg_count("delete_failed", "limit", ARGV[1])
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", P .. "retries", 0, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do
  redis.call("ZREM", P .. "queue", id)
  redis.call("ZREM", P .. "retries", id)
  redis.call("ZREM", P .. "ids", id)
  redis.call("DEL", P .. "payloads:" .. id)
  redis.call("HDEL", P .. "errors", id)
end
return { tostring(#ids), tostring(redis.call("ZCOUNT", P .. "retries", 0, "+inf")) }
