-- perform_now.lua: make future queued jobs due now ("perform all now").
-- perform_in becomes now, never 0 (Lowkiq's 0 made the lag read as the epoch).
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] wake channel ("" = no publish), [2] now, [3] limit (jobs per call).
-- Returns {changed, remaining future jobs} (strings); call again until
-- remaining is 0. Publishes the prefix on the channel when changed > 0.
-- luakiq:include keys
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
local now, limit = arg_finite("perform_now", "now", ARGV[2]), arg_count("perform_now", "limit", ARGV[3])
local now_s = string.format("%.17g", now)
local queue = K.queue
local ids = {}
if limit > 0 then ids = redis.call("ZRANGEBYSCORE", queue, "(" .. now_s, "+inf", "LIMIT", 0, limit) end
for _, id in ipairs(ids) do redis.call("ZADD", queue, "XX", now_s, id) end
if #ids > 0 and ARGV[1] ~= "" then redis.call("PUBLISH", ARGV[1], P) end
return { tostring(#ids), tostring(redis.call("ZCOUNT", queue, "(" .. now_s, "+inf")) }
