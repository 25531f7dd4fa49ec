-- morgue_delete.lua: delete dead jobs for good.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] limit, then ids. No ids = the first `limit` morgue ids in lex order
-- (call again until remaining is 0 to delete all).
-- Returns {deleted, remaining morgue size} (strings).
local P = KEYS[1]
local limit = tonumber(ARGV[1])
if not limit or limit ~= math.floor(limit) or limit < 0 or limit > 1e9 then
  error("luakiq morgue_delete: limit must be an integer >= 0, got '" .. tostring(ARGV[1]) .. "'", 0)
end
local ids = {}
if #ARGV > 1 then
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif limit > 0 then
  ids = redis.call("ZRANGEBYLEX", P .. "morgue:ids", "-", "+", "LIMIT", 0, limit)
end
local count = 0
for _, id in ipairs(ids) do
  count = count + redis.call("ZREM", P .. "morgue", id)
  redis.call("ZREM", P .. "morgue:ids", id)
  redis.call("DEL", P .. "morgue:payloads:" .. id)
  redis.call("HDEL", P .. "morgue:errors", id)
end
return { tostring(count), tostring(redis.call("ZCARD", P .. "morgue")) }
