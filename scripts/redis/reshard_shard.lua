-- reshard_shard.lua: the per-shard steps of a reshard other than the move of
-- jobs (luakiq.ops.reshard; docs/redis.md, "Reshard"). One shard, one slot.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = operation, ARGV[2] =
-- the reshard's token, then:
--   "freeze", COUNT, CHANNEL: P reshard = token (fetch.lua then gives the
--     shard to no other holder and heads.lua shows it empty), P shards = COUNT
--     (push.lua refuses a push routed with another count); when a holder
--     has the lease, the prefix is published on CHANNEL ("" = not), so that
--     an idle holder fetches now and gives the lease back. Returns "OK".
--   "drop", ids...: the staged records of those ids are imported: HDEL them
--     from P reshard:out. Returns how many went.
--   "counters_out": the first step of moving a removed shard's counters:
--     P counters is renamed to P reshard:counters (unless already there).
--     Returns its fields and values (flat).
--   "counters_in", SOURCE, field, value, ...: adds them to P counters unless
--     SOURCE (a shard number) is in P reshard:got already; then adds it.
--     Returns 1 when added, 0 when it had been.
--   "counters_drop": deletes P reshard:counters. Returns "OK".
--   "thaw", CHANNEL, REMOVED ("1": the shard is beyond the new count):
--     when P reshard is the token: deletes it, the reshard's lease and
--     P reshard:got, and publishes the prefix on CHANNEL (idle hosts fetch at
--     once). A removed shard also loses its holder, batch counter and tag
--     entries (its jobs have gone), and when no job is left in P jobs its
--     P ready, P stale and P tail (stale entries of the moved jobs: nobody
--     fetches there to pop them); its P shards stays, to refuse pushes
--     routed with an old count. Returns 1, or 0 when not frozen by token.
-- luakiq:include keys
local P = KEYS[1]
local K = shard_keys(P)
local op, token = ARGV[1], ARGV[2]
if not token or token == "" then error("BADARG luakiq reshard_shard: token is empty", 0) end
if op == "freeze" then
  local n = ARGV[3]
  if not (n and n:match("^[1-9]%d*$")) then error("BADARG luakiq reshard_shard: count must be a positive integer", 0) end
  redis.call("SET", K.reshard, token)
  redis.call("SET", K.shards, n)
  -- a holder idle between calls fetches once more, and gives the lease back
  if ARGV[4] and ARGV[4] ~= "" and redis.call("GET", K.lease) then redis.call("PUBLISH", ARGV[4], P) end
  return "OK"
end
if redis.call("GET", K.reshard) ~= token then
  if op == "thaw" then return 0 end
  error("FENCED luakiq reshard_shard: the shard is not frozen by this reshard", 0)
end
if op == "drop" then
  if #ARGV < 3 then return 0 end
  return redis.call("HDEL", K.reshard_out, unpack(ARGV, 3))
elseif op == "counters_out" then
  if redis.call("EXISTS", K.reshard_counters) == 0 and redis.call("EXISTS", K.counters) == 1 then
    redis.call("RENAME", K.counters, K.reshard_counters)
  end
  return redis.call("HGETALL", K.reshard_counters)
elseif op == "counters_in" then
  local src = ARGV[3]
  if redis.call("SADD", K.reshard_got, src) == 0 then return 0 end
  for i = 4, #ARGV, 2 do
    local v = tonumber(ARGV[i + 1])
    if v and v == math.floor(v) then redis.call("HINCRBY", K.counters, ARGV[i], ARGV[i + 1]) end
  end
  return 1
elseif op == "counters_drop" then
  redis.call("DEL", K.reshard_counters)
  return "OK"
elseif op == "thaw" then
  redis.call("DEL", K.reshard, K.reshard_got)
  if redis.call("GET", K.lease) == token then redis.call("DEL", K.lease) end
  if ARGV[4] == "1" then
    redis.call("DEL", K.holder, K.batch)
    local flat = redis.call("HGETALL", K.tags)
    for i = 1, #flat, 2 do
      for t in string.gmatch(flat[i + 1], "[^\n]+") do redis.call("SREM", tag_key(P, t), flat[i]) end
    end
    redis.call("DEL", K.tags)
    if redis.call("EXISTS", K.jobs) == 0 then redis.call("DEL", K.ready, K.stale, K.tail) end
  end
  if ARGV[3] and ARGV[3] ~= "" then redis.call("PUBLISH", ARGV[3], P) end
  return 1
end
error("BADARG luakiq reshard_shard: unknown operation '" .. tostring(op) .. "'", 0)
