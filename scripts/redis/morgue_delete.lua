-- morgue_delete.lua: delete dead jobs for good.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] limit, then ids. No ids = the first `limit` morgue ids in lex order
-- (call again until remaining is 0 to delete all).
-- Returns {deleted, remaining morgue size} (strings).
-- luakiq:include keys
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local limit = arg_count("morgue_delete", "limit", ARGV[1])
local ids = {}
if #ARGV > 1 then
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif limit > 0 then
  ids = redis.call("ZRANGEBYLEX", K.morgue_jobs, "-", "+", "LIMIT", 0, limit)
  for i, m in ipairs(ids) do ids[i] = member_id(m) end
end
local count = 0
for _, id in ipairs(ids) do
  count = count + redis.call("ZREM", K.morgue, id)
  local m = find_member(K.morgue_jobs, esc(id))
  if m then redis.call("ZREM", K.morgue_jobs, m) end
  redis.call("HDEL", K.morgue_errors, id)
end
return { tostring(count), tostring(redis.call("ZCARD", K.morgue)) }
