-- reshard_lock.lua: one reshard of a queue at a time, and what it is doing
-- (luakiq.ops.reshard; docs/redis.md, "Reshard").
-- KEYS[1] = NS:{QUEUE}:reshard (HASH from, to, token, started: the reshard
-- under way, kept until it is done, so that a killed one is finished by the
-- next run), KEYS[2] = NS:{QUEUE}:reshard:lock (STRING token, PX ttl: the
-- running reshard, renewed while it runs). One slot ({QUEUE}).
-- ARGV[1] = operation, ARGV[2] = token, then:
--   "begin", FROM, TO, TTL_MS, NOW: {"BUSY", token of the running one} when
--     another holds the lock; {"PENDING", from, to} when an unfinished
--     reshard goes to another count; else takes the lock, records the
--     reshard (an unfinished one keeps its from) and returns {"OK", from, to}.
--   "renew", TTL_MS: 1 when the lock is (still) the token's, else 0.
--   "end": the reshard is done: both keys go. Returns "OK".
local op, token = ARGV[1], ARGV[2]
if not token or token == "" then error("BADARG luakiq reshard_lock: token is empty", 0) end
local cur = redis.call("GET", KEYS[2])
if op == "begin" then
  if cur and cur ~= token then return { "BUSY", cur } end
  local from, to = redis.call("HGET", KEYS[1], "from"), redis.call("HGET", KEYS[1], "to")
  if to and to ~= ARGV[4] then return { "PENDING", from, to } end
  from = from or ARGV[3]
  redis.call("SET", KEYS[2], token, "PX", ARGV[5])
  redis.call("HSET", KEYS[1], "from", from, "to", ARGV[4], "token", token, "started", ARGV[6])
  return { "OK", from, ARGV[4] }
elseif op == "renew" then
  if cur ~= token then return 0 end
  redis.call("PEXPIRE", KEYS[2], ARGV[3])
  return 1
elseif op == "end" then
  redis.call("DEL", KEYS[1])
  if cur == token then redis.call("DEL", KEYS[2]) end
  return "OK"
end
error("BADARG luakiq reshard_lock: unknown operation '" .. tostring(op) .. "'", 0)
