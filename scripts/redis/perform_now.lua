-- perform_now.lua: make future queued jobs due now ("perform all now").
-- perform_in becomes now, never 0 (Lowkiq's 0 made the lag read as the epoch).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] wake channel ("" = no publish), [2] now, [3] limit (jobs per call),
-- then ids: only those (the ones queued and not yet due; limit unused).
-- Returns {changed, remaining future jobs} (strings); call again until
-- remaining is 0 (with ids, remaining is "0"). Publishes the prefix on the
-- channel when changed > 0.
-- A job of the default priority moved this way goes to P later (a job in
-- P ready is due by its producer's clock: only one named by id can be
-- later than this call's now, by clock skew); its record's perform_in and
-- its zset score change together.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local now, limit = arg_finite("perform_now", "now", ARGV[2]), arg_count("perform_now", "limit", ARGV[3])
local now_s = score_str(now)
local changed, remaining = 0, 0

-- Sets the queued job id (member m, escaped id E, decoded place, payloads
-- pl) to perform_in now; n: its level (place "p").
local function make_due(id, m, E, place, pl, n)
  redis.call("ZREM", K.jobs, m)
  if place == "p" then
    redis.call("ZADD", level_key(P, n), "XX", now_s, id)
  else
    if place == "r" then redis.call("HINCRBY", K.stale, id, 1) end
    redis.call("ZADD", K.later, now_s, id)
    place = "l"
  end
  redis.call("ZADD", K.jobs, "0", E .. "\0\0" .. job_record(place, now, pl))
  changed = changed + 1
end

if #ARGV > 3 then
  for i = 4, #ARGV do
    local id = ARGV[i]
    local m, E, place, pin, pl = find_job(K, id)
    if place and pin > now then
      local n = place == "p" and redis.call("HGET", K.prio, id) or nil
      if place ~= "p" or n then make_due(id, m, E, place, pl, n) end
    end
  end
else
  for _, q in ipairs(queue_keys(P, K)) do -- every priority level
    local key = q[1] or K.later
    local ids = {}
    if limit > changed then
      ids = redis.call("ZRANGEBYSCORE", key, "(" .. now_s, "+inf", "LIMIT", 0, limit - changed)
    end
    for _, id in ipairs(ids) do
      local m, E, place, _, pl = find_job(K, id)
      if place == (q[1] and "p" or "l") then
        make_due(id, m, E, place, pl, q[2])
      else -- no record (junk): the id leaves the due order
        if m then redis.call("ZREM", K.jobs, m) end
        if q[1] then leave_level(P, K, id, q[2]) else redis.call("ZREM", K.later, id) end
      end
    end
    remaining = remaining + redis.call("ZCOUNT", key, "(" .. now_s, "+inf")
  end
end
if changed > 0 then wake(ARGV[1], P) end
return { tostring(changed), tostring(remaining) }
