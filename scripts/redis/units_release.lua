-- units_release.lua: gives back the units a call took (units_acquire.lua),
-- and its throttle registration.
-- KEYS[1] = NS:{QUEUE}:running, KEYS[2] = NS:{QUEUE}:units, optional
-- KEYS[3] = NS:{QUEUE}:calls; ARGV member... A release leaves calls_version
-- alone: a throttle decision taken with the call still running stays safe.
-- Returns how many members held units or a registration.
-- luakiq:include units
local calls = opt_key(3)
local n = 0
for i = 1, #ARGV do
  n = n + redis.call("ZREM", KEYS[1], ARGV[i])
  redis.call("HDEL", KEYS[2], ARGV[i])
  if calls then redis.call("HDEL", calls, ARGV[i]) end
end
return n
