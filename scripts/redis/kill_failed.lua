-- kill_failed.lua: move failed queued jobs (retry_count >= 0) to the morgue,
-- all their payloads (merged into a dead same-id job with the min score),
-- updated_at = now, their error copied. Fresh jobs (-1) stay.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] now, [2] limit (jobs per call).
-- Returns {killed, remaining failed jobs} (strings); call again until
-- remaining is 0.
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local now, limit = arg_finite("kill_failed", "now", ARGV[1]), arg_count("kill_failed", "limit", ARGV[2])
local now_s = string.format("%.17g", now)
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", P .. "retries", 0, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do
  local src, dst = P .. "payloads:" .. id, P .. "morgue:payloads:" .. id
  if redis.call("EXISTS", src) == 1 then
    redis.call("ZADD", P .. "morgue", now_s, id)
    redis.call("ZADD", P .. "morgue:ids", 0, id)
    merge_payloads(src, dst)
    local err = redis.call("HGET", P .. "errors", id)
    if err then redis.call("HSET", P .. "morgue:errors", id, err) else redis.call("HDEL", P .. "morgue:errors", id) end
  end
  redis.call("ZREM", P .. "queue", id)
  redis.call("ZREM", P .. "retries", id)
  redis.call("ZREM", P .. "ids", id)
  redis.call("HDEL", P .. "errors", id)
end
return { tostring(#ids), tostring(redis.call("ZCOUNT", P .. "retries", 0, "+inf")) }
