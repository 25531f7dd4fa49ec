-- delete.lua: delete queued jobs. Never touches a job in flight (its data is
-- under the busy keys, not these), so a queued job of the same id pushed
-- during the flight is deleted and the running one is not.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV = ids.
-- Returns the number of queued jobs deleted (integer).
local P = KEYS[1]
local count = 0
for _, id in ipairs(ARGV) do
  count = count + redis.call("ZREM", P .. "queue", id)
  redis.call("ZREM", P .. "retries", id)
  redis.call("ZREM", P .. "ids", id)
  redis.call("DEL", P .. "payloads:" .. id)
  redis.call("HDEL", P .. "errors", id)
end
return count
