-- hosts_beat.lua: a running host says it is alive and what it does (its main
-- thread, every few seconds; scripts/luakiq/ops/hosts.lua), or that it left.
-- KEYS[1] = NS:{hosts}:beats (ZSET token -> its last beat, ms of Redis's own
-- clock, so hosts' clocks do not matter), KEYS[2] = NS:{hosts}:info (HASH
-- token -> the host's JSON). ARGV[1] token, [2] its JSON ("" = the host
-- leaves: both entries go), [3] timeout_ms: entries of hosts silent longer
-- are dropped here (at most 100 a call). Returns how many were dropped.
local token, info, timeout = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not token or token == "" or not info or not timeout or timeout < 1 then
  error("BADARG luakiq hosts_beat: ARGV must be token, info JSON or \"\", timeout_ms", 0)
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if info == "" then
  redis.call("ZREM", KEYS[1], token)
  redis.call("HDEL", KEYS[2], token)
else
  redis.call("ZADD", KEYS[1], now, token)
  redis.call("HSET", KEYS[2], token, info)
end
local dead = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. (now - timeout), "LIMIT", 0, 100)
for _, d in ipairs(dead) do
  redis.call("ZREM", KEYS[1], d)
  redis.call("HDEL", KEYS[2], d)
end
return #dead
