-- units_release.lua: gives back the units a call took (units_acquire.lua).
-- KEYS[1] = NS:{QUEUE}:running, KEYS[2] = NS:{QUEUE}:units; ARGV member...
-- Returns how many members held units.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call("ZREM", KEYS[1], ARGV[i])
  redis.call("HDEL", KEYS[2], ARGV[i])
end
return n
