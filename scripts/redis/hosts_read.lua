-- hosts_read.lua: the hosts that beat within timeout_ms (read only).
-- KEYS[1] = NS:{hosts}:beats, KEYS[2] = NS:{hosts}:info; ARGV[1] timeout_ms.
-- Returns {token, info JSON, ms since its last beat, ...} by token.
local timeout = tonumber(ARGV[1])
if not timeout or timeout < 1 then error("BADARG luakiq hosts_read: ARGV must be timeout_ms", 0) end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call("ZRANGEBYSCORE", KEYS[1], now - timeout, "+inf", "WITHSCORES")
local out = {}
for i = 1, #live, 2 do
  local info = redis.call("HGET", KEYS[2], live[i])
  if info then
    out[#out + 1] = live[i]
    out[#out + 1] = info
    out[#out + 1] = tostring(now - tonumber(live[i + 1]))
  end
end
return out
