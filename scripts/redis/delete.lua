-- delete.lua: delete queued jobs, and jobs that wait for a reply with the
-- payloads held behind them (lib/waits.lua, W.remove: their tokens are then
-- STALE). Never touches a job in flight (its data is under the busy keys,
-- not these; nor a wait whose on_reply call runs), so a queued job of the
-- same id pushed during the flight is deleted and the running one is not.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV = ids.
-- Returns the number of jobs deleted (integer): queued, waiting and held
-- ones.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end
local count = 0
for _, id in ipairs(ARGV) do
  count = count + unqueue_job(P, K, id)
  if W then
    local pl, held = W.remove(P, K, id)
    if pl then count = count + (#pl > 0 and 1 or 0) + (#held > 0 and 1 or 0) end
  end
end
return count
