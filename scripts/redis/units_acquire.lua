-- units_acquire.lua: takes cost units of a worker's concurrency for one call
-- (concurrency / cost, docs/configuration.md), across every host, and with
-- throttle registers the call's jobs where every host's throttle sees them.
-- KEYS[1] = NS:{QUEUE}:running (ZSET member -> expires at, ms of Redis's
--           clock), KEYS[2] = NS:{QUEUE}:units (HASH member -> cost): one
--           slot per queue, not a shard's. With throttle also KEYS[3] =
--           NS:{QUEUE}:calls (HASH member -> the call's jobs, JSON from the
--           host) and KEYS[4] = NS:{QUEUE}:calls_version (STRING counter,
--           raised by every registration).
-- ARGV[1] member (the shard prefix of the call: one call per shard at a
-- time), [2] cost (>= 0), [3] concurrency ("" = no cap), [4] ttl_ms
-- (renewed by the host while the call runs: units_renew.lua; a killed
-- host's units lapse); with KEYS[3]: [5] the version the host's throttle
-- decided on (running_read.lua; "*": none, the hold of a job that waits
-- for a reply, taken whatever the running set: the job ran already), [6]
-- the call's JSON.
-- Entries past their expiry are dropped first. A cost of 0 always runs and
-- holds nothing (but is registered with throttle). Returns {1, used} when
-- taken, {0, used} when the units in use (used, this member's own old entry
-- not counted) leave too few, {2, version} when another call registered
-- since the throttle's snapshot (the host asks its throttle again). With
-- throttle, {1, used} and {2, version} go on with the running set as
-- running_read.lua gives it (version, member, JSON, ...): the snapshot for
-- the fetch's next call, or for the retry, without a read of its own.
-- luakiq:include units
local member, cost, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local limit = ARGV[3] ~= "" and tonumber(ARGV[3]) or math.huge
local calls, version = opt_key(3), opt_key(4)
if not member or not cost or cost < 0 or not limit or limit < 1 or not ttl or ttl < 1
  or (calls and (not version or not ARGV[5] or not ARGV[6])) then
  error("BADARG luakiq units_acquire: ARGV must be member, cost >= 0, concurrency >= 1 or \"\", ttl_ms >= 1" ..
    " (with KEYS calls and calls_version: then version, call JSON)", 0)
end
local now = drop_lapsed(KEYS[1], KEYS[2], calls)
-- this member's previous call is over (one call per shard): its units go
redis.call("ZREM", KEYS[1], member)
redis.call("HDEL", KEYS[2], member)
-- {status, n} followed by the running set (throttle)
local function with_set(out)
  out[#out + 1] = redis.call("GET", version) or "0"
  local flat = redis.call("HGETALL", calls)
  for i = 1, #flat do out[#out + 1] = flat[i] end
  return out
end
if calls then
  redis.call("HDEL", calls, member)
  local v = redis.call("GET", version) or "0"
  if v ~= ARGV[5] and ARGV[5] ~= "*" then return with_set({ 2, v }) end
end
local used = 0
for _, v in ipairs(redis.call("HVALS", KEYS[2])) do used = used + (tonumber(v) or 0) end
if cost > 0 and used + cost > limit then return { 0, tostring(used) } end
if cost > 0 or calls then
  redis.call("ZADD", KEYS[1], now + ttl, member)
  if cost > 0 then redis.call("HSET", KEYS[2], member, ARGV[2]) end
end
if calls then
  redis.call("HSET", calls, member, ARGV[6])
  redis.call("INCR", version)
  return with_set({ 1, tostring(used + cost) })
end
return { 1, tostring(used + cost) }
