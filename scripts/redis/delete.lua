-- delete.lua: delete queued jobs. Never touches a job in flight (its data is
-- under the busy keys, not these), so a queued job of the same id pushed
-- during the flight is deleted and the running one is not.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV = ids.
-- Returns the number of queued jobs deleted (integer).
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
local P = KEYS[1]
local K = shard_keys(P)
local count = 0
for _, id in ipairs(ARGV) do count = count + unqueue_job(P, K, id) end
return count
