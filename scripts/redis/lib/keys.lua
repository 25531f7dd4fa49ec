-- The Redis-side schema ("luakiq:include keys", first of a script's
-- includes): every key name the queue scripts use, and the one reader and
-- writer of the busy entry. docs/redis.md ("Key names", "Keys") documents
-- them. The host-side half is scripts/luakiq/keys.lua: the shard prefix
-- P = "NS:{QUEUE:SHARD}:" (KEYS[1] of every queue script), the registry
-- NS:queues (KEYS[1] of register.lua) and the wake channel NS:wake. A key
-- renamed here changes the wire protocol: change docs/redis.md with it.

-- Wakes the hosts serving shard P. channel: "" none; "!" SPUBLISH on the
-- shard's own channel P .. "wake" (a Redis Cluster of Redis >= 7: sharded
-- Pub/Sub keeps the message in the shard's slot instead of broadcasting it
-- to every node); any other name: PUBLISH there (NS:wake). The message is P.
local function wake(channel, P)
  if channel == "!" then
    redis.call("SPUBLISH", P .. "wake", P)
  elseif channel ~= "" then
    redis.call("PUBLISH", channel, P)
  end
end

-- The shard's keys, by name: shard_keys(P).busy_errors == P .. "busy:errors".
-- (One table constructor: measured cheaper per script call than building
-- the names on first use through a metatable.)
local function shard_keys(P)
  return {
    queue = P .. "queue",                     -- ZSET id -> perform_in (queued jobs)
    retries = P .. "retries",                 -- ZSET id -> retry_count (queued, retry_count >= 0)
    ids = P .. "ids",                         -- ZSET id -> 0 (lexicographic listings)
    errors = P .. "errors",                   -- HASH id -> last error (queued jobs)
    busy = P .. "busy",                       -- HASH id -> busy entry (jobs in flight)
    busy_errors = P .. "busy:errors",         -- HASH id -> error (jobs in flight)
    busy_fetched_at = P .. "busy:fetched_at", -- STRING: `now` of the fetch of the batch in flight
    batch = P .. "batch",                     -- STRING: batch id counter (the batch in flight)
    lease = P .. "lease",                     -- STRING: the lease holder's token, PX ttl
    holder = P .. "holder",                   -- STRING: the last holder's token
    counters = P .. "counters",               -- HASH processed, failed
    morgue = P .. "morgue",                   -- ZSET id -> updated_at (dead jobs)
    morgue_ids = P .. "morgue:ids",           -- ZSET id -> 0 (lexicographic listings)
    morgue_errors = P .. "morgue:errors",     -- HASH id -> error (dead jobs)
    expiring = P .. "expiring",               -- SET ids that have an expires hash
    schedules = P .. "schedules",             -- HASH schedule name -> its last tick (in its job id's shard)
    prio = P .. "prio",                       -- HASH id -> priority (queued jobs whose priority is not 100)
    levels = P .. "levels",                   -- ZSET N -> N: the priorities N ~= 100 queued (lib/levels.lua)
    windows = P .. "windows",                 -- HASH id -> "ZONE|HH:MM-HH:MM,..." (queued jobs with windows)
    tags = P .. "tags",                       -- HASH id -> its tags, sorted, "\n"-joined (lib/tags.lua)
    reshard = P .. "reshard",                 -- STRING: token of the reshard that froze the shard (no fetch)
    shards = P .. "shards",                   -- STRING: the queue's shards_count, written by a reshard (push checks it)
    reshard_out = P .. "reshard:out",         -- HASH id -> record, staged by reshard_out.lua for its new shard
    reshard_counters = P .. "reshard:counters", -- HASH: a removed shard's counters on their way to another
    reshard_got = P .. "reshard:got",         -- SET: removed shards whose counters this shard took in
  }
end

-- The per-id payload sets (ZSET payload -> score): queued, in flight, dead.
local function payloads_key(P, id) return P .. "payloads:" .. id end
local function busy_payloads_key(P, id) return P .. "busy:payloads:" .. id end
local function morgue_payloads_key(P, id) return P .. "morgue:payloads:" .. id end
-- HASH payload -> expires_at, for the id's payloads pushed with one
local function expires_key(P, id) return P .. "expires:" .. id end

-- SET of the ids tagged t (lib/tags.lua)
local function tag_key(P, t) return P .. "tag:" .. t end

-- The queued jobs of priority N ~= 100 (ZSET id -> perform_in; lib/levels.lua)
local function level_key(P, n) return P .. "queue:" .. n end

-- A busy entry (the value of an id in the busy hash) is
-- "perform_in\nretry_count", both Redis score strings, then for a job with
-- a priority other than 100 or its own windows "\npriority\nwindows" (either
-- may be empty).
local function busy_value(pin, rc, prio, win)
  if not prio and not win then return pin .. "\n" .. rc end
  return pin .. "\n" .. rc .. "\n" .. (prio or "") .. "\n" .. (win or "")
end

-- Reads a busy entry: perform_in, retry_count (strings), priority and
-- windows (strings or nil). Junk written by someone else reads as
-- perform_in = junk_pin, retry_count = "-1": it must neither break a ZADD
-- half-way through a script (no rollback) nor reach the host as a
-- non-number.
local function busy_entry(v, junk_pin)
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
    pin = junk_pin
  end
  if not (rc and rc:match("^%-?%d+$") and tonumber(rc) >= -1) then rc = "-1" end
  return pin, rc, prio, win
end
