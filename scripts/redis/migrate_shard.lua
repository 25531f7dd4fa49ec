-- migrate_shard.lua: converts one shard from layout 1 (docs/redis.md of
-- layout 1) to layout 2 (docs/redis.md), a step per call: luakiq migrate
-- (luakiq.ops.migrate) calls it for every shard of every registered queue.
-- Each call is atomic and deletes the layout-1 keys it converted, so a call
-- repeated after a kill finds nothing of them: no job is converted twice.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:". ARGV[1] = operation, then:
--   "freeze", COUNT, CHANNEL, MODE: fences the shard (keys.lua FENCE):
--     P reshard = FENCE (a layout-1 fetch.lua gives the shard to no holder,
--     so no layout-1 host takes it, now or after the migration; layout 2
--     reads past it), P shards = COUNT:FENCE (a layout-1 push.lua refuses
--     pushes; COUNT = the shard's own P shards count if a reshard wrote one).
--     When a holder has the lease the prefix is published on CHANNEL
--     (keys.lua wake), so an idle layout-1 holder fetches once more, which
--     gives the lease back. Returns "OK"; {"RESHARD", token} (nothing done)
--     when a reshard froze the shard (its token in P reshard).
--   "claim", NOW: once nobody holds the lease, converts the batch in
--     flight (P busy id -> "perform_in\nretry_count[\nprio\nwindows]" and
--     P busy:payloads:<id>) to busy records (keys.lua busy_record) and sets
--     P holder = FENCE: no layout-1 holder may come back to ack or fail that
--     batch (its fetch.lua finds the shard frozen and not its own), and the
--     first layout-2 host to take the shard restores the batch (fetch.lua's
--     restore: each job back with its own perform_in, retry_count and
--     error). Returns {"CLAIMED", n converted}, {"CLAIMED", "0"} when
--     claimed already, or {"LEASED", pttl} (nothing done) while a holder has
--     the lease. (MODE "sweep" never claims: the shard's busy is layout 2's.)
--   "page", LIMIT, NOW, MODE: converts up to LIMIT layout-1 jobs: queued ids
--     (P ids, then ids left in P queue without one) into P jobs records
--     (place "l" in P later with their exact perform_in; a job of priority
--     N ~= 100 stays in P queue:N, place "p"), then dead ids (P morgue:ids)
--     into P morgue:jobs records. retries, errors, prio, levels, windows,
--     tags, expires, morgue, morgue:errors are layout 2's as they are. An id
--     without payloads is dropped, as layout 1 drops it. MODE "migrate"
--     needs the shard claimed; "sweep" (a layout-2 namespace: layout-1 keys
--     written late by a layout-1 producer) merges a late job into a queued
--     layout-2 job of its id as a push would (payloads united, the minimal
--     score; the queued job's perform_in and retry_count). Returns {jobs,
--     dead, dropped, more}: converted by this call, and "1" while layout-1
--     keys remain.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include shard
local P = KEYS[1]
local K = shard_keys(P)
local L = layout1_keys(P)
local op = ARGV[1]

if op == "freeze" then
  local count, channel = ARGV[2], ARGV[3]
  if not (count and count:match("^[1-9]%d*$")) or not channel then
    error("luakiq migrate_shard: freeze needs COUNT (a positive integer) and CHANNEL", 0)
  end
  local cur = redis.call("GET", K.reshard)
  if cur and cur ~= FENCE then return { "RESHARD", cur } end
  redis.call("SET", K.reshard, FENCE)
  redis.call("SET", K.shards, fenced_shards(shards_of(redis.call("GET", K.shards)) or count))
  if redis.call("EXISTS", K.lease) == 1 then wake(channel, P) end
  return "OK"
end

if redis.call("GET", K.reshard) ~= FENCE then
  error("luakiq migrate_shard: the shard is not fenced (freeze it first)", 0)
end
local now = tonumber(ARGV[op == "claim" and 2 or 3])
if not now or now ~= now then error("luakiq migrate_shard: NOW must be a number", 0) end
local now_s = score_str(now)

-- A layout-1 busy entry: perform_in, retry_count, priority (nil = 100),
-- windows (nil = none); junk perform_in / retry_count read as now / -1
-- (layout 1's busy_entry).
local function busy_entry(v)
  local pin, rc = string.match(v, "^(.-)\n(.*)$")
  local prio, win
  if rc then
    local r, p, w = string.match(rc, "^(.-)\n(.-)\n(.*)$")
    if r then
      rc = r
      if p:match("^%-?%d+$") and p ~= "100" then prio = p end
      if w ~= "" then win = w end
    end
  end
  local p = tonumber(pin)
  if not (p and p == p and (pin:match("^[-+]?%d*%.?%d*[eE]?[-+]?%d*$") or pin:match("^[-+]?inf$"))) then
    pin = now_s
  end
  if not (rc and rc:match("^%-?%d+$") and tonumber(rc) >= -1) then rc = "-1" end
  return pin, rc, prio, win
end

-- The payloads of a layout-1 payloads key as a flat list (scores numbers),
-- ascending (score, bytes) as ZRANGE gives them; the key is deleted.
local function take_payloads(kind, id)
  local key = layout1_payloads_key(P, kind, id)
  local flat = redis.call("ZRANGE", key, "0", "-1", "WITHSCORES")
  for i = 2, #flat, 2 do flat[i] = tonumber(flat[i]) end
  if #flat > 0 then redis.call("DEL", key) end
  return flat
end

if op == "claim" then
  if redis.call("GET", K.holder) == FENCE then return { "CLAIMED", "0" } end
  if redis.call("EXISTS", K.lease) == 1 then return { "LEASED", tostring(redis.call("PTTL", K.lease)) } end
  local flat, n = redis.call("HGETALL", K.busy), 0
  for i = 1, #flat, 2 do
    local id = flat[i]
    local pl = take_payloads("busy", id)
    if #pl == 0 then
      -- (layout 1's restore skips an entry without payloads)
      redis.call("HDEL", K.busy, id)
      redis.call("HDEL", K.busy_errors, id)
    else
      local pin, rc, prio, win = busy_entry(flat[i + 1])
      redis.call("HSET", K.busy, id, busy_record(pin, rc, prio, win, pl))
      n = n + 1
    end
  end
  redis.call("SET", K.holder, FENCE)
  return { "CLAIMED", tostring(n) }
end

if op ~= "page" then error("luakiq migrate_shard: operation must be freeze, claim or page", 0) end
local limit, mode = tonumber(ARGV[2]), ARGV[4]
if not limit or limit < 1 or limit ~= math.floor(limit) then
  error("luakiq migrate_shard: LIMIT must be an integer >= 1", 0)
end
if mode ~= "migrate" and mode ~= "sweep" then error("luakiq migrate_shard: MODE must be migrate or sweep", 0) end
if mode == "migrate" and redis.call("GET", K.holder) ~= FENCE then
  error("luakiq migrate_shard: the shard is not claimed (claim it first)", 0)
end

-- Drops what layout 1 kept of a queued id beside its payloads (an id
-- without payloads: layout 1's fetch drops it too).
local function drop_queued(id)
  local n = redis.call("HGET", K.prio, id)
  if n then leave_level(P, K, id, n) end
  redis.call("ZREM", K.retries, id)
  redis.call("HDEL", K.errors, id)
  redis.call("HDEL", K.windows, id)
end

-- Converts the queued layout-1 job of id. Returns "job" or "dropped".
local function convert_queued(id)
  local qpin = redis.call("ZSCORE", L.queue, id)
  redis.call("ZREM", L.ids, id)
  if qpin then redis.call("ZREM", L.queue, id) end
  local pl = take_payloads("queued", id)
  local m, E, place, pin, qpl = find_job(K, id)
  if m then
    redis.call("ZREM", K.jobs, m)
    if place then
      -- (sweep) a layout-2 job of the id is queued: pushed onto it
      local rec = job_record(place, pin, sort_payloads(unite(unite({}, qpl), pl)))
      redis.call("ZADD", K.jobs, "0", E .. "\0\0" .. rec)
      local n = place ~= "p" and redis.call("HGET", K.prio, id)
      if n then leave_level(P, K, id, n) end -- (the late push's level)
      return "job"
    end
  end
  if #pl == 0 then
    drop_queued(id)
    return "dropped"
  end
  place = "l"
  if qpin then
    redis.call("ZADD", K.later, qpin, id)
  else
    local n = redis.call("HGET", K.prio, id)
    qpin = n and redis.call("ZSCORE", level_key(P, n), id)
    if qpin then
      place = "p"
    else
      -- (junk: queued nowhere) due now
      qpin = now_s
      redis.call("ZADD", K.later, qpin, id)
    end
  end
  redis.call("ZADD", K.jobs, "0", E .. "\0\0" .. job_record(place, tonumber(qpin), pl))
  return "job"
end

-- Converts the dead layout-1 job of id. Returns "dead" or "dropped".
local function convert_dead(id)
  redis.call("ZREM", L.morgue_ids, id)
  local pl = take_payloads("dead", id)
  local E = esc(id)
  local m = find_member(K.morgue_jobs, E)
  if m then
    redis.call("ZREM", K.morgue_jobs, m)
    pl = sort_payloads(unite(unite({}, morgue_decode(m, E) or {}), pl))
  end
  if #pl == 0 then
    redis.call("ZREM", K.morgue, id)
    redis.call("HDEL", K.morgue_errors, id)
    return "dropped"
  end
  redis.call("ZADD", K.morgue_jobs, "0", E .. "\0\0" .. morgue_record(pl))
  redis.call("ZADD", K.morgue, "NX", now_s, id)
  return "dead"
end

local got = { job = 0, dead = 0, dropped = 0 }
local left = limit
for _, src in ipairs { { L.ids, convert_queued }, { L.queue, convert_queued }, { L.morgue_ids, convert_dead } } do
  if left > 0 then
    local ids = redis.call("ZRANGE", src[1], "0", tostring(left - 1))
    for _, id in ipairs(ids) do
      local what = src[2](id)
      got[what] = got[what] + 1
    end
    left = left - #ids
  end
end
local more = redis.call("EXISTS", L.ids, L.queue, L.morgue_ids) > 0
return { tostring(got.job), tostring(got.dead), tostring(got.dropped), more and "1" or "0" }
