-- units_renew.lua: keeps a long call's units (the host's main thread sends
-- it with each lease renewal of a shard whose call runs).
-- KEYS[1] = NS:{QUEUE}:running; ARGV[1] member, [2] ttl_ms. Only an entry
-- that exists is renewed (ZADD XX): nothing for workers without concurrency.
local ttl = tonumber(ARGV[2])
if not ARGV[1] or not ttl or ttl < 1 then error("BADARG luakiq units_renew: ARGV must be member, ttl_ms", 0) end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call("ZADD", KEYS[1], "XX", "CH", now + ttl, ARGV[1])
