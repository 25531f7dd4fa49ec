-- history.lua: adds a worker thread's counts of jobs processed, failed and
-- snoozed per
-- minute to a queue's day (scripts/luakiq/ops/timing.lua sends it with timing.lua,
-- at most once a second, in the pipeline of a call the thread makes anyway).
-- KEYS[1] = NS:{QUEUE}:history:DAY (HASH: p:MINUTE, f:MINUTE, s:MINUTE -> jobs, MINUTE
-- = 0..1439 of the UTC day). ARGV[1] unix time the key expires at, then
-- pairs field, increment (integers). Returns "OK". Every argument is checked
-- before the first write.
-- luakiq:include args
local e = math.floor(arg_finite("history", "expire time", ARGV[1]))
if #ARGV < 3 or #ARGV % 2 ~= 1 then
  error("BADARG luakiq history: ARGV must be expire_at, then field/increment pairs", 0)
end
for i = 2, #ARGV, 2 do
  local kind, minute = ARGV[i]:match("^([pfs]):(%d+)$")
  if not kind or tonumber(minute) >= 1440 then
    error("BADARG luakiq history: field must be p:MINUTE, f:MINUTE or s:MINUTE (0..1439), got '" .. ARGV[i] .. "'", 0)
  end
  arg_count("history", ARGV[i], ARGV[i + 1])
end
for i = 2, #ARGV, 2 do redis.call("HINCRBY", KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call("EXPIREAT", KEYS[1], e)
return "OK"
