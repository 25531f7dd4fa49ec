-- Priorities and per-job windows of queued jobs ("luakiq:include levels",
-- after "luakiq:include keys"; docs/redis.md, "Priority").
-- Layout 2 (docs/redis.md): every queued job is one member of P jobs
-- (its record: place, perform_in, payloads). A job of the default priority
-- (100) has its place in P ready or P later; one of priority N ~= 100 is in
-- P queue:N (id -> perform_in, place "p"), with P prio[id] = N and N in
-- P levels (ZSET N -> N). A shard that never saw
-- a priority has neither key: each helper then costs it one read of an
-- absent key at most, so workers without priorities pay (almost) nothing.
-- Due jobs are fetched level by level (lowest N first, 100 in its place), so
-- a fetch costs O(levels + log n + jobs) however many jobs of other levels
-- are due: no level is ever scanned past.
-- A job's own windows (P windows[id] = "ZONE|HH:MM-HH:MM,...") are kept by
-- the host; Redis only carries them with the job.

-- Whether the shard has jobs of other priorities queued (cached in K: a
-- script that adds one sets it).
local function has_levels(K)
  if K.has_levels == nil then K.has_levels = redis.call("EXISTS", K.levels) == 1 end
  return K.has_levels
end

-- Whether the shard has queued jobs with windows (cached like has_levels).
local function has_windows(K)
  if K.has_windows == nil then K.has_windows = redis.call("EXISTS", K.windows) == 1 end
  return K.has_windows
end

-- The queues in fetch order: {key, priority string} (levels below 100,
-- the default (key false: ready + later) as "100", levels above).
local function queue_keys(P, K)
  local out, placed = {}, false
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do
      if not placed and tonumber(n) > 100 then
        out[#out + 1] = { false, "100" }
        placed = true
      end
      out[#out + 1] = { level_key(P, n), n }
    end
  end
  if not placed then out[#out + 1] = { false, "100" } end
  return out
end

-- The queued job of id, its member of P jobs read by decode (job_decode or
-- job_peek): member, escaped id, then what decode gives; nil when not queued.
-- Looked up in K.known when a script read the members of its ids in one
-- range (read_jobs), else one ZRANGE BYLEX.
local function lookup_job(K, id, decode)
  local E = esc(id)
  local m
  if K.known then m = K.known[E] else m = find_member(K.jobs, E) end
  if not m then return nil, E end
  return m, E, decode(m, E)
end

-- Before a script looks up many ids (a set, id -> true): when the members of
-- P jobs between the lowest and highest of them (ZLEXCOUNT, O(log n)) are at
-- most 64 more than the ids, reads them with one ZRANGE BYLEX into K.known
-- (escaped id -> its first member), which lookup_job then reads: ~0.3 us a
-- member read against ~2 us a ZRANGE per id (docs/benchmarks.md). Else, as
-- for a new or small queue's growing ids it rarely is, each id is looked up
-- alone. (The bound is on other ids' members read for nothing: a member
-- holds all of its id's payloads, so they may be large.) K.known is a copy:
-- the script sets K.known = nil before it writes P jobs. A caller that
-- knows them gives the ids' count and lowest and highest (count, lo, hi):
-- no pass over the set, whose comparisons are each a strcoll. With as_list
-- (ids without a byte 0, so each is its own escaped id; ids may be nil),
-- the range's members come back as a list when they are exactly as many as
-- the ids, else nil and their count (and no K.known: a caller whose lo and
-- hi are the ids' true lowest and highest skips a second ZLEXCOUNT of the
-- range when the count is over the bound): member k is the k-th id's unless
-- the ids do not ascend or something else lies between them, which the
-- caller checks (run_member), so lo and hi need only be the first and last.
local function read_jobs(K, ids, count, lo, hi, as_list)
  local k = count or 0
  if not count then
    for id in pairs(ids) do
      k = k + 1
      if not lo or id < lo then lo = id end
      if not hi or id > hi then hi = id end
    end
  end
  if k == 0 then return end
  local from, to = "[" .. esc(lo) .. "\0\0", "(" .. esc(hi) .. "\0\1"
  local c = redis.call("ZLEXCOUNT", K.jobs, from, to)
  if as_list and c ~= k then return nil, c end
  if c > k + 64 then return end
  local ms = c > 0 and redis.call("ZRANGE", K.jobs, from, to, "BYLEX") or {}
  if as_list then return ms end
  local known = {}
  for _, m in ipairs(ms) do
    local E = member_esc(m)
    if E and not known[E] then known[E] = m end
  end
  K.known = known
end

-- The member m (from read_jobs's list) when it is id's (id has no byte 0),
-- else nil.
local function run_member(m, id)
  if not m then return nil end
  local n = #id
  local b1, b2 = m:byte(n + 1, n + 2)
  if b1 == 0 and b2 == 0 and m:sub(1, n) == id then return m end
  return nil
end

-- The queued job of id: its member of P jobs, escaped id, place, perform_in
-- (number) and payload list; nil when not queued. A junk member comes back
-- with place nil (the caller drops it).
local function find_job(K, id) return lookup_job(K, id, job_decode) end

-- find_job without decoding the payloads: member, escaped id, place, pin
-- (number) and the offset of the payload encodings (keys.lua's job_peek);
-- nil when not queued, place nil for a junk member.
local function peek_job(K, id) return lookup_job(K, id, job_peek) end

-- Where id is queued: its perform_in (string) and priority (string, nil =
-- 100), or nil when it is not queued.
local function queued_at(P, K, id)
  local m, _, place, pin = find_job(K, id)
  if not place then return nil end
  if place == "p" then return score_str(pin), redis.call("HGET", K.prio, id) end
  return score_str(pin)
end

-- Takes id out of the priority level n (not 100): the prio entry and an
-- emptied level go with it.
local function leave_level(P, K, id, n)
  local lk = level_key(P, n)
  redis.call("ZREM", lk, id)
  redis.call("HDEL", K.prio, id)
  if redis.call("EXISTS", lk) == 0 then
    redis.call("ZREM", K.levels, n)
    if redis.call("EXISTS", K.levels) == 0 then K.has_levels = false end
  end
end

-- Puts id in the level n (not 100) at perform_in pin_s.
local function join_level(P, K, id, pin_s, n)
  redis.call("HSET", K.prio, id, n)
  redis.call("ZADD", level_key(P, n), pin_s, id)
  redis.call("ZADD", K.levels, n, n)
  K.has_levels = true
end

-- The lower of two priorities (strings, nil = 100): what a merge keeps
-- (docs/redis.md, "Merge rules").
local function lower_priority(a, b)
  if tonumber(a or 100) < tonumber(b or 100) then return a end
  return b
end

-- Sets id's windows for a job going back to the queue: w (string) replaces
-- the queued job's, none keeps them.
local function set_windows(K, id, w)
  if w then
    redis.call("HSET", K.windows, id, w)
    K.has_windows = true
  end
end

-- The perform_in (number) of P ready's last entry (P tail), -inf when
-- ready is empty: a new job due now joins ready only at or above it, so
-- ready stays in perform_in order (push.lua, schedule.lua).
local function ready_tail(K)
  if redis.call("EXISTS", K.ready) == 0 then return -math.huge end
  return tonumber(redis.call("GET", K.tail)) or -math.huge
end

-- The perform_in (number) of the first live entry of P ready, or nil. Stale
-- entries at its head (docs/redis.md, "Stale entries") are popped on the way, so
-- the next caller does not walk them again.
local function ready_head(K)
  local stale = redis.call("EXISTS", K.stale) == 1
  while true do
    local id = redis.call("LINDEX", K.ready, "0")
    if not id then return nil end
    local dead = false
    if stale and redis.call("HEXISTS", K.stale, id) == 1 then
      dead = true
      if redis.call("HINCRBY", K.stale, id, -1) <= 0 then redis.call("HDEL", K.stale, id) end
    end
    if not dead then
      local _, _, place, pin = find_job(K, id)
      if place == "r" then return pin end
    end
    redis.call("LPOP", K.ready) -- stale, or junk: no live record
  end
end

-- The lowest perform_in of the default priority (number), or nil.
local function default_head(K)
  local h = ready_head(K)
  local l = redis.call("ZRANGE", K.later, 0, 0, "WITHSCORES")[2]
  if l and (not h or tonumber(l) < h) then return tonumber(l) end
  return h
end

-- The lowest perform_in queued (string), over every level, or nil.
local function queue_head(P, K)
  local h = default_head(K)
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do
      local s = redis.call("ZRANGE", level_key(P, n), 0, 0, "WITHSCORES")[2]
      if s and (not h or tonumber(s) < h) then h = tonumber(s) end
    end
  end
  return h and score_str(h)
end

-- How many jobs are queued, over every level.
local function queue_size(P, K)
  return redis.call("ZCARD", K.jobs)
end

-- The priority of the best due job (perform_in <= now, a number): "100" and
-- the like, or "" when none is due.
local function best_due(P, K, now)
  for _, q in ipairs(queue_keys(P, K)) do
    local s
    if q[1] then s = tonumber(redis.call("ZRANGE", q[1], 0, 0, "WITHSCORES")[2]) else s = default_head(K) end
    if s and s <= now then return q[2] end
  end
  return ""
end
