-- morgue_requeue.lua: put dead jobs back in the queue ("morgue + queued",
-- docs/redis.md "Merge rules"): payloads united with a queued same-id job (min score),
-- perform_in = now, retry_count = -1, the morgue error copied into "errors";
-- a queued job keeps its priority (the morgue keeps none: 100 otherwise).
-- The jobs leave the morgue.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] wake channel ("" = no publish), [2] now, [3] limit, then ids.
-- No ids = the first `limit` morgue ids in lex order (call again until
-- remaining is 0 to requeue all).
-- Returns {requeued, remaining morgue size} (strings). Publishes the prefix
-- on the channel when something was requeued.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
-- luakiq:include waits
-- luakiq:include args
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
local now, limit = arg_finite("morgue_requeue", "now", ARGV[2]), arg_count("morgue_requeue", "limit", ARGV[3])
local now_s = score_str(now)
local ids = {}
if #ARGV > 3 then
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif limit > 0 then
  ids = redis.call("ZRANGEBYLEX", K.morgue_jobs, "-", "+", "LIMIT", 0, limit)
  for i, m in ipairs(ids) do ids[i] = member_id(m) end
end
local count = 0
for _, id in ipairs(ids) do
  local m = find_member(K.morgue_jobs, esc(id))
  local pl = m and morgue_decode(m, esc(id))
  if pl and redis.call("ZSCORE", K.morgue, id) then
    -- requeue keeps the lower of two priorities: given the queued job's own,
    -- the job keeps it (the morgue keeps none)
    local _, prio = queued_at(P, K, id)
    requeue(P, K, id, now_s, "-1", redis.call("HGET", K.morgue_errors, id), pl, prio)
    count = count + 1
  end
  if m then redis.call("ZREM", K.morgue_jobs, m) end
  redis.call("ZREM", K.morgue, id)
  redis.call("HDEL", K.morgue_errors, id)
end
if count > 0 then wake(ARGV[1], P) end
return { tostring(count), tostring(redis.call("ZCARD", K.morgue)) }
