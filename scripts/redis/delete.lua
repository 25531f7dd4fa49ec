-- delete.lua: delete queued jobs. Never touches a job in flight (its data is
-- under the busy keys, not these), so a queued job of the same id pushed
-- during the flight is deleted and the running one is not.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV = ids.
-- Returns the number of queued jobs deleted (integer).
-- luakiq:include keys
-- luakiq:include levels
local P = KEYS[1]
local K = shard_keys(P)
local count = 0
for _, id in ipairs(ARGV) do
  count = count + unqueue(P, K, id)
  redis.call("ZREM", K.retries, id)
  redis.call("ZREM", K.ids, id)
  redis.call("DEL", payloads_key(P, id))
  redis.call("HDEL", K.errors, id)
end
return count
