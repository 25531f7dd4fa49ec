-- Priorities and per-job windows of queued jobs ("luakiq:include levels",
-- after "luakiq:include keys"; docs/redis.md, "Priority").
-- A queued job of the default priority (100) is in P queue, as ever. One of
-- priority N ~= 100 is in P queue:N instead (the same score, perform_in),
-- with P prio[id] = N and N in P levels (ZSET N -> N). A shard that never saw
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

-- The queue keys in fetch order: {key, priority string} (levels below 100,
-- P queue as "100", levels above).
local function queue_keys(P, K)
  local out, placed = {}, false
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do
      if not placed and tonumber(n) > 100 then
        out[#out + 1] = { K.queue, "100" }
        placed = true
      end
      out[#out + 1] = { level_key(P, n), n }
    end
  end
  if not placed then out[#out + 1] = { K.queue, "100" } end
  return out
end

-- Where id is queued: its perform_in (string) and priority (string, nil =
-- 100), or nil when it is not queued.
local function queued_at(P, K, id)
  local s = redis.call("ZSCORE", K.queue, id)
  if s or not has_levels(K) then return s end
  local n = redis.call("HGET", K.prio, id)
  if n then return redis.call("ZSCORE", level_key(P, n), id), n end
  return nil
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

-- Removes id from whichever queue key holds it, and its windows entry.
-- Returns 1 when it was queued, else 0.
local function unqueue(P, K, id)
  if has_windows(K) then redis.call("HDEL", K.windows, id) end
  if redis.call("ZREM", K.queue, id) == 1 then return 1 end
  if not has_levels(K) then return 0 end
  local n = redis.call("HGET", K.prio, id)
  if not n then return 0 end
  leave_level(P, K, id, n)
  return 1
end

-- Queues id at perform_in pin (score string) with priority n (string; nil
-- or "100" = the default), moving it from another level if it was queued
-- there. Merging priorities is the caller's (merged_priority).
local function queue_at(P, K, id, pin, n)
  if n == "100" then n = nil end
  local cur = has_levels(K) and redis.call("HGET", K.prio, id) or nil
  if cur and cur ~= n then leave_level(P, K, id, cur) end
  if n then
    if not cur then redis.call("ZREM", K.queue, id) end
    redis.call("HSET", K.prio, id, n)
    redis.call("ZADD", level_key(P, n), pin, id)
    redis.call("ZADD", K.levels, n, n)
    K.has_levels = true
  else
    redis.call("ZADD", K.queue, pin, id)
  end
end

-- The lower of two priorities (strings, nil = 100): what a merge keeps
-- (docs/redis.md, "Merge rules").
local function lower_priority(a, b)
  if tonumber(a or 100) < tonumber(b or 100) then return a end
  return b
end

-- The priority of id once n (string or nil = 100) merges with its queued
-- job, if any.
local function merged_priority(P, K, id, n)
  if n == nil and not has_levels(K) then return nil end
  local pin, q = queued_at(P, K, id)
  if not pin then return n end
  return lower_priority(n, q)
end

-- Sets id's windows for a job going back to the queue: w (string) replaces
-- the queued job's, none keeps them.
local function set_windows(K, id, w)
  if w then
    redis.call("HSET", K.windows, id, w)
    K.has_windows = true
  end
end

-- The lowest perform_in queued (string), over every level, or nil.
local function queue_head(P, K)
  local h = redis.call("ZRANGE", K.queue, 0, 0, "WITHSCORES")[2]
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do
      local s = redis.call("ZRANGE", level_key(P, n), 0, 0, "WITHSCORES")[2]
      if s and (not h or tonumber(s) < tonumber(h)) then h = s end
    end
  end
  return h
end

-- How many jobs are queued, over every level.
local function queue_size(P, K)
  local n = redis.call("ZCARD", K.queue)
  if has_levels(K) then
    for _, l in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do n = n + redis.call("ZCARD", level_key(P, l)) end
  end
  return n
end

-- The priority of the best due job (perform_in <= now, a number): "100" and
-- the like, or "" when none is due.
local function best_due(P, K, now)
  for _, q in ipairs(queue_keys(P, K)) do
    local s = redis.call("ZRANGE", q[1], 0, 0, "WITHSCORES")[2]
    if s and tonumber(s) <= now then return q[2] end
  end
  return ""
end
