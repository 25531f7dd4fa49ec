-- schedule.lua: one tick of a recurring job (config.lua schedules): claims
-- the tick and enqueues its job in the same atomic step, so any number of
-- hosts trying the same tick enqueue it exactly once.
-- KEYS[1] = the shard prefix of the schedule's job id.
-- ARGV[1] schedule name, [2] tick (Unix time), [3] now, [4] wake channel
-- ("" = none), [5] id, [6] payload (bytes), [7] (optional) the shards_count
-- the caller routed the id with: when a reshard recorded another in the
-- shard (P shards), the error "RESHARDED HAVE USED" and nothing
-- changes (the caller claims the tick in the id's new shard).
-- A tick not later than the schedule's last claimed one changes nothing
-- (returns 0). A schedule seen for the first time records its tick and
-- enqueues only when the tick is at most 60 s old (a new daily schedule
-- does not fire yesterday's tick; one whose tick passed a moment ago does). The job: perform_in = score = tick,
-- merged into a queued job of the same id like a push ("new + queued": the
-- payload keeps the minimal score; perform_in, retry_count, priority and
-- place of the queued job). A new job is placed as push.lua places one
-- (docs/redis.md): at the end of P ready when the tick is due and not
-- below P tail, else in P later. For an id that waits for a reply it joins
-- the id's held job instead (P held, lib/waits.lua).
-- Returns 1 when it enqueued.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
WAITS_WANTED = redis.call("EXISTS", KEYS[1] .. WAITS_SEQ) == 1 -- (lib/waits.lua: a shard that awaited)
-- luakiq:include waits
local P = KEYS[1]
local K = shard_keys(P)
if W then W.keys(K, P) end -- (lib/waits.lua)
local name, tick, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local channel, id, payload = ARGV[4], ARGV[5], ARGV[6]
if not name or not tick or not now or not channel or not id or id == "" or not payload then
  error("BADARG luakiq schedule: ARGV must be name, tick, now, channel, id, payload", 0)
end
if ARGV[7] then
  local have = redis.call("GET", K.shards)
  if have and have ~= ARGV[7] then
    error("RESHARDED " .. have .. " " .. ARGV[7], 0)
  end
end
local last = tonumber(redis.call("HGET", K.schedules, name))
if last and last >= tick then return 0 end
local tick_s = score_str(tick)
redis.call("HSET", K.schedules, name, tick_s)
if not last and now - tick > 60 then return 0 end
tick = tonumber(tick_s)
local before = queue_head(P, K)
local m, E, place, pin, pl = find_job(K, id)
if place then
  -- queued: the payload joins it (minimal score); nothing else changes
  local map = unite({}, pl)
  local s = map[payload]
  if s and s <= tick then return 1 end
  map[payload] = tick
  redis.call("ZREM", K.jobs, m)
  redis.call("ZADD", K.jobs, "0", E .. "\0\0" .. job_record(place, pin, sort_payloads(map)))
  return 1
end
-- new (a junk member of the id is replaced)
if m then redis.call("ZREM", K.jobs, m) end
if W and W.active(K, P) and W.must_hold(K, id) then
  W.hold_job(K, id, tick, { payload, tick }, nil)
  return 1
end
place = "l"
if tick <= now and tick >= ready_tail(K) then place = "r" end
if place == "r" then
  redis.call("RPUSH", K.ready, id)
  redis.call("SET", K.tail, tick_s)
else
  redis.call("ZADD", K.later, tick_s, id)
end
redis.call("ZADD", K.jobs, "0", E .. "\0\0" .. job_record(place, tick, { payload, tick }))
if channel ~= "" and (not before or tick < tonumber(before)) then wake(channel, P) end
return 1
