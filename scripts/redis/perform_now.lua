-- perform_now.lua: make future queued jobs due now ("perform all now").
-- perform_in becomes now, never 0 (Lowkiq's 0 made the lag read as the epoch).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] wake channel ("" = no publish), [2] now, [3] limit (jobs per call),
-- then ids: only those (the ones queued and not yet due; limit unused).
-- Returns {changed, remaining future jobs} (strings); call again until
-- remaining is 0 (with ids, remaining is "0"). Publishes the prefix on the
-- channel when changed > 0.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local now, limit = arg_finite("perform_now", "now", ARGV[2]), arg_count("perform_now", "limit", ARGV[3])
local now_s = string.format("%.17g", now)
local changed, remaining = 0, 0
if #ARGV > 3 then
  for i = 4, #ARGV do
    local id = ARGV[i]
    local pin, n = queued_at(P, K, id)
    if pin and tonumber(pin) > now then
      redis.call("ZADD", n and level_key(P, n) or K.queue, "XX", now_s, id)
      changed = changed + 1
    end
  end
else
  for _, q in ipairs(queue_keys(P, K)) do -- every priority level
    local ids = {}
    if limit > changed then
      ids = redis.call("ZRANGEBYSCORE", q[1], "(" .. now_s, "+inf", "LIMIT", 0, limit - changed)
    end
    for _, id in ipairs(ids) do redis.call("ZADD", q[1], "XX", now_s, id) end
    changed = changed + #ids
    remaining = remaining + redis.call("ZCOUNT", q[1], "(" .. now_s, "+inf")
  end
end
if changed > 0 then wake(ARGV[1], P) end
return { tostring(changed), tostring(remaining) }
