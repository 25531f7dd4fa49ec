-- Shared by several queue scripts: a script that needs these has a line
-- "luakiq:include shard" (as a comment, at the start of the line, after
-- "luakiq:include keys" and "luakiq:include levels", whose helpers these
-- use), which is replaced by this file when the script is loaded
-- (scripts/luakiq/lib/include.lua: at build time, with LUAKIQ_SCRIPTS and in
-- tools/redis-scripts-test.sh). Redis scripts cannot require each other, so
-- this is how they share code.

-- The retries index holds only jobs waiting for a retry (retry_count >= 0);
-- a fresh job (-1) is not in it, which spares every push and fetch of a
-- fresh job one sorted-set write. K: shard_keys(P); rc: a Redis score string.
local function set_retry(K, id, rc)
  if tonumber(rc) >= 0 then redis.call("ZADD", K.retries, rc, id)
  else redis.call("ZREM", K.retries, id) end
end

-- Adds the payload list pl (flat, scores numbers) of id to the morgue: the
-- id's dead payloads united with them (an equal payload keeps the minimal
-- score), updated_at = now_s, the error err ("" = none; nil = leave it).
local function morgue_add(K, id, pl, now_s, err)
  if #pl == 0 then return end
  local E = esc(id)
  local m = find_member(K.morgue_jobs, E)
  local map = unite({}, pl)
  if m then
    unite(map, morgue_decode(m, E) or {})
    redis.call("ZREM", K.morgue_jobs, m)
  end
  redis.call("ZADD", K.morgue_jobs, "0", E .. "\0\0" .. morgue_record(sort_payloads(map)))
  redis.call("ZADD", K.morgue, now_s, id)
  if err == nil then return end
  if err ~= "" then redis.call("HSET", K.morgue_errors, id, err) else redis.call("HDEL", K.morgue_errors, id) end
end

-- Takes the queued job of id (member m, decoded place, its priority n or
-- nil) out of its place in the due order: a ready entry becomes stale, a
-- later or level entry goes. (The member of `jobs` is the caller's.)
local function leave_place(P, K, id, place, n)
  if place == "r" then
    redis.call("HINCRBY", K.stale, id, 1)
  elseif place == "l" then
    redis.call("ZREM", K.later, id)
  elseif n then
    leave_level(P, K, id, n)
  end
end

-- Takes the queued job of id out of the queue with everything kept for it
-- (its place, windows, retry_count, error); on_payloads(pl), when given, is
-- called with its payload list first (not for a junk record). Returns 1 when
-- a job was queued, else 0. delete.lua, delete_failed.lua, kill_failed.lua.
local function unqueue_job(P, K, id, on_payloads)
  local m, _, place, _, pl = find_job(K, id)
  local count = 0
  if m then
    redis.call("ZREM", K.jobs, m)
    if place then
      leave_place(P, K, id, place, place == "p" and redis.call("HGET", K.prio, id) or nil)
      if on_payloads then on_payloads(pl) end
      count = 1
    end
  end
  if has_windows(K) then redis.call("HDEL", K.windows, id) end
  redis.call("ZREM", K.retries, id)
  redis.call("HDEL", K.errors, id)
  return count
end

-- Puts a job back in the queue ("failed + queued", docs/redis.md "Merge
-- rules"): perform_in pin_s, retry_count rc_s, error err (nil or "" = none),
-- priority n (nil = 100), windows win (nil = the queued job's), payloads pl
-- (flat, scores numbers). A queued job of the id is merged into it: payloads
-- united (minimal score), the lower priority; it takes its place in `later`
-- (or its level). Nothing when pl is empty.
-- An id that waits for a reply (P waits) keeps the job in P held instead,
-- merged with its held payloads (no place: the end of the wait puts it in
-- the queue, W.release_held); an id that does not has its held payloads
-- merged in (a wait ended without releasing them).
local function requeue(P, K, id, pin_s, rc_s, err, pl, n, win)
  if #pl == 0 then return end
  local E = esc(id)
  local m = find_member(K.jobs, E)
  local map = unite({}, pl)
  if m then
    local place, _, qpl = job_decode(m, E)
    if place then
      unite(map, qpl)
      local q = place == "p" and redis.call("HGET", K.prio, id) or nil
      n = lower_priority(n, q)
      leave_place(P, K, id, place, q)
    end
    redis.call("ZREM", K.jobs, m)
  end
  local hold = false
  if K.W and K.W.active(K, P) then -- (an id that waits, or held payloads: lib/waits.lua)
    local h = find_member(K.held, E)
    if h then
      local _, _, hpl = job_decode(h, E)
      if hpl then unite(map, hpl) end
      n = lower_priority(n, redis.call("HGET", K.prio, id))
      redis.call("ZREM", K.held, h)
    end
    hold = redis.call("HEXISTS", K.waits, id) == 1
  end
  if n == "100" then n = nil end
  local place = "l"
  if hold then
    if n then
      place = "p"
      redis.call("HSET", K.prio, id, n)
    else
      redis.call("HDEL", K.prio, id)
    end
  elseif n then
    place = "p"
    join_level(P, K, id, pin_s, n)
  else
    redis.call("ZADD", K.later, pin_s, id)
  end
  redis.call("ZADD", hold and K.held or K.jobs, "0", E .. "\0\0" .. job_record(place, tonumber(pin_s), sort_payloads(map)))
  set_windows(K, id, win)
  set_retry(K, id, rc_s)
  if err and err ~= "" then redis.call("HSET", K.errors, id, err) else redis.call("HDEL", K.errors, id) end
end

-- Fencing for writers of a shard's batch in flight (fail.lua, bury.lua): the
-- caller must hold the lease, or be its last holder with nobody since (then it
-- takes it again). K: shard_keys(P). Returns the refusal {"LEASE", pttl}, or
-- nil after renewing.
local function hold_lease(K, token, lease_ms)
  local cur = redis.call("GET", K.lease)
  if cur ~= token and (cur or redis.call("GET", K.holder) ~= token) then
    return { "LEASE", tostring(redis.call("PTTL", K.lease)) }
  end
  redis.call("SET", K.lease, token, "PX", lease_ms)
end
