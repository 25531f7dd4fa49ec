-- schedule.lua: one tick of a recurring job (config.lua schedules): claims
-- the tick and enqueues its job in the same atomic step, so any number of
-- hosts trying the same tick enqueue it exactly once.
-- KEYS[1] = the shard prefix of the schedule's job id.
-- ARGV[1] schedule name, [2] tick (Unix time), [3] now, [4] wake channel
-- ("" = none), [5] id, [6] payload (bytes), [7] (optional) the shards_count
-- the caller routed the id with: when a reshard recorded another in the
-- shard (P shards), an error "luakiq schedule: resharded: ..." and nothing
-- changes (the caller claims the tick in the id's new shard).
-- A tick not later than the schedule's last claimed one changes nothing
-- (returns 0). A schedule seen for the first time records its tick and
-- enqueues only when the tick is at most 60 s old (a new schedule does not
-- fire a tick from before it existed). The job: perform_in = score = tick,
-- merged into a queued job of the same id like a push ("new + queued").
-- Returns 1 when it enqueued.
-- luakiq:include keys
-- luakiq:include levels
local P = KEYS[1]
local K = shard_keys(P)
local name, tick, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local channel, id, payload = ARGV[4], ARGV[5], ARGV[6]
if not name or not tick or not now or not channel or not id or id == "" or not payload then
  error("luakiq schedule: ARGV must be name, tick, now, channel, id, payload", 0)
end
if ARGV[7] then
  local have = shards_of(redis.call("GET", K.shards))
  if have and have ~= ARGV[7] then
    error("luakiq schedule: resharded: queue has " .. have .. " shards, the schedule used " .. ARGV[7], 0)
  end
end
local last = tonumber(redis.call("HGET", K.schedules, name))
if last and last >= tick then return 0 end
local tick_s = string.format("%.17g", tick)
redis.call("HSET", K.schedules, name, tick_s)
if not last and now - tick > 60 then return 0 end
local before = queue_head(P, K)
if not queued_at(P, K, id) then redis.call("ZADD", K.queue, tick_s, id) end
redis.call("ZADD", K.ids, "NX", 0, id)
redis.call("ZADD", payloads_key(P, id), "LT", tick_s, payload)
local head = queue_head(P, K)
if channel ~= "" and head and (not before or tonumber(head) < tonumber(before)) then
  wake(channel, P)
end
return 1
