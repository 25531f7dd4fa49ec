-- units_acquire.lua: takes cost units of a worker's concurrency for one call
-- (concurrency / cost, docs/configuration.md), across every host.
-- KEYS[1] = NS:{QUEUE}:running (ZSET member -> expires at, ms of Redis's
--           clock), KEYS[2] = NS:{QUEUE}:units (HASH member -> cost): one
--           slot per queue, not a shard's.
-- ARGV[1] member (the shard prefix of the call: one call per shard at a
-- time), [2] cost (>= 0), [3] concurrency, [4] ttl_ms (renewed by the host
-- while the call runs: units_renew.lua; a killed host's units lapse).
-- Entries past their expiry are dropped first. A cost of 0 always runs and
-- holds nothing. Returns {1, used} when taken, {0, used} when the units in
-- use (used, this member's own old entry not counted) leave too few.
local member, cost, limit, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not member or not cost or cost < 0 or not limit or limit < 1 or not ttl or ttl < 1 then
  error("luakiq units_acquire: ARGV must be member, cost >= 0, concurrency >= 1, ttl_ms >= 1", 0)
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now)
for i = 1, #dead, 1000 do
  local part = { unpack(dead, i, math.min(i + 999, #dead)) }
  redis.call("ZREM", KEYS[1], unpack(part))
  redis.call("HDEL", KEYS[2], unpack(part))
end
-- this member's previous call is over (one call per shard): its units go
redis.call("ZREM", KEYS[1], member)
redis.call("HDEL", KEYS[2], member)
local used = 0
for _, v in ipairs(redis.call("HVALS", KEYS[2])) do used = used + (tonumber(v) or 0) end
if cost == 0 then return { 1, tostring(used) } end
if used + cost > limit then return { 0, tostring(used) } end
redis.call("ZADD", KEYS[1], now + ttl, member)
redis.call("HSET", KEYS[2], member, ARGV[2])
return { 1, tostring(used + cost) }
