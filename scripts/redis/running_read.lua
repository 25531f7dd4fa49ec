-- running_read.lua: what a worker's throttle sees, the calls running on
-- every host (units_acquire.lua registers them), with the version it is
-- taken at (units_acquire.lua refuses a registration decided on an older one).
-- KEYS[1] = NS:{QUEUE}:running, KEYS[2] = NS:{QUEUE}:units, KEYS[3] =
-- NS:{QUEUE}:calls, KEYS[4] = NS:{QUEUE}:calls_version.
-- Entries past their expiry (a killed host's) are dropped first.
-- Returns {version, member, call JSON, member, call JSON, ...}.
-- luakiq:include units
drop_lapsed(KEYS[1], KEYS[2], KEYS[3])
local out = { redis.call("GET", KEYS[4]) or "0" }
local flat = redis.call("HGETALL", KEYS[3])
for i = 1, #flat do out[#out + 1] = flat[i] end
return out
