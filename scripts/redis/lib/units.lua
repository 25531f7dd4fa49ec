-- The calls whose hold lapsed (a killed host's), dropped from a queue's
-- flow-control keys ("luakiq:include units"): running (ZSET member ->
-- expiry, Redis ms), units (HASH member -> cost) and, when given, calls
-- (HASH member -> the throttle's JSON). Returns Redis's time in ms.
local function drop_lapsed(running, units, calls)
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call("ZRANGEBYSCORE", running, "-inf", now)
  for i = 1, #dead, 1000 do
    local part = { unpack(dead, i, math.min(i + 999, #dead)) }
    redis.call("ZREM", running, unpack(part))
    redis.call("HDEL", units, unpack(part))
    if calls then redis.call("HDEL", calls, unpack(part)) end
  end
  return now
end

-- KEYS[i] when the caller gave it, nil otherwise. On a Redis Cluster the
-- host declares one more key after the others, the guard (docs/redis.md,
-- "The guard key"): it is not one of the optional keys.
local function opt_key(i)
  local k = KEYS[i]
  if k and k:sub(-6) ~= "~guard" then return k end
end
