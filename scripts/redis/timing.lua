-- timing.lua: adds a worker thread's wait and run time observations to a
-- queue's day (scripts/luakiq/ops/timing.lua writes them at most once a second,
-- in the pipeline of a call it makes anyway).
-- KEYS[1] = NS:{QUEUE}:timing:DAY (HASH: w:n w:sum w:sq r:n r:sum r:sq),
-- KEYS[2] = NS:{QUEUE}:timing:DAY:h (HASH: KIND:UPPER_BOUND -> count).
-- ARGV[1] unix time KEYS[1] expires at, [2] the same for KEYS[2],
--      [3] n: how many (field, increment) pairs for KEYS[1] follow (floats),
--      then pairs for KEYS[2] to the end (integers).
-- Returns "OK". Every argument is checked before the first write.
-- luakiq:include args
local e1 = math.floor(arg_finite("timing", "expire time", ARGV[1]))
local e2 = math.floor(arg_finite("timing", "expire time", ARGV[2]))
local n = arg_count("timing", "the count of stats fields", ARGV[3])
if 3 + 2 * n > #ARGV or (#ARGV - 3) % 2 ~= 0 then
  error("BADARG luakiq timing: ARGV must be expire_at, expire_at_h, n, then field/increment pairs", 0)
end
for i = 4, #ARGV, 2 do
  if i < 4 + 2 * n then arg_finite("timing", ARGV[i], ARGV[i + 1])
  else arg_count("timing", ARGV[i], ARGV[i + 1]) end
end
for i = 4, 3 + 2 * n, 2 do redis.call("HINCRBYFLOAT", KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = 4 + 2 * n, #ARGV, 2 do redis.call("HINCRBY", KEYS[2], ARGV[i], ARGV[i + 1]) end
if n > 0 then redis.call("EXPIREAT", KEYS[1], e1) end
if #ARGV > 3 + 2 * n then redis.call("EXPIREAT", KEYS[2], e2) end
return "OK"
