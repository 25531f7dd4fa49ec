-- The Redis-side schema ("luakiq:include keys", first of a script's
-- includes): every key name the queue scripts use, and the one reader and
-- writer of the busy entry. docs/redis.md ("Key names", "Keys") documents
-- them. The host-side half is scripts/luakiq/lib/keys.lua: the shard prefix
-- P = "NS:{QUEUE:SHARD}:" (KEYS[1] of every queue script), the registry
-- NS:queues (KEYS[1] of register.lua) and the wake channel NS:wake. A key
-- renamed here changes the wire protocol: change docs/redis.md with it.

-- Byte order, or nothing. Redis's Lua compares strings with strcoll, which
-- is byte order only under LC_COLLATE C or POSIX (or C.UTF-8); a
-- redis-server started with a language's (LANG=en_US.UTF-8 in a shell)
-- orders "a" before "B". The scripts order ids with < and read P jobs by
-- byte ranges, so under such a Redis a push could miss an id's queued job
-- and queue it twice. Every script that includes this refuses it before any read or
-- write (docs/redis.md, "Byte order").
if not ("B" < "a" and "a-c" < "ab") then
  error("BYTEORDER luakiq: this Redis orders strings by a language (its LC_COLLATE); luakiq needs byte order: " ..
    "start redis-server with LC_ALL=C", 0)
end

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
-- the names on first use through a metatable.) Layout 2 (docs/redis.md):
-- a queued job is one member of `jobs` carrying its record, plus its place
-- in the due order: `ready` (a list), `later` (a zset) or a level.
-- (Three names also used alone, by reply.lua, which needs no other key of
-- shard_keys: its 28 names cost a call ~35k Redis instructions.)
local RESHARD, SHARDS, COUNTERS = "reshard", "shards", "counters"
local function shard_keys(P)
  return {
    jobs = P .. "jobs",                       -- ZSET (scores 0) esc(id) .. "\0\0" .. queued record
    ready = P .. "ready",                     -- LIST ids of queued jobs due when pushed, in perform_in order
    tail = P .. "tail",                       -- STRING perform_in of the last id appended to ready
    later = P .. "later",                     -- ZSET id -> perform_in (other queued jobs of priority 100)
    stale = P .. "stale",                     -- HASH id -> how many of its ready entries are stale
    retries = P .. "retries",                 -- ZSET id -> retry_count (queued, retry_count >= 0)
    errors = P .. "errors",                   -- HASH id -> last error (queued jobs)
    busy = P .. "busy",                       -- HASH id -> busy record (jobs in flight, with their payloads)
    busy_errors = P .. "busy:errors",         -- HASH id -> error (jobs in flight)
    busy_fetched_at = P .. "busy:fetched_at", -- STRING: `now` of the fetch of the batch in flight
    batch = P .. "batch",                     -- STRING: batch id counter (the batch in flight)
    lease = P .. "lease",                     -- STRING: the lease holder's token, PX ttl
    holder = P .. "holder",                   -- STRING: the last holder's token
    counters = P .. COUNTERS,                 -- HASH processed, failed
    morgue = P .. "morgue",                   -- ZSET id -> updated_at (dead jobs)
    morgue_jobs = P .. "morgue:jobs",         -- ZSET (scores 0) esc(id) .. "\0\0" .. payloads record (dead jobs)
    morgue_errors = P .. "morgue:errors",     -- HASH id -> error (dead jobs)
    expiring = P .. "expiring",               -- SET ids that have an expires hash
    schedules = P .. "schedules",             -- HASH schedule name -> its last tick (in its job id's shard)
    prio = P .. "prio",                       -- HASH id -> priority (queued jobs whose priority is not 100)
    levels = P .. "levels",                   -- ZSET N -> N: the priorities N ~= 100 queued (lib/levels.lua)
    windows = P .. "windows",                 -- HASH id -> "ZONE|HH:MM-HH:MM,..." (queued jobs with windows)
    tags = P .. "tags",                       -- HASH id -> its tags, sorted, "\n"-joined (lib/tags.lua)
    reshard = P .. RESHARD,                   -- STRING: token of the reshard that froze the shard (no fetch)
    shards = P .. SHARDS,                     -- STRING: the queue's shards_count, written by a reshard (push checks it)
    reshard_out = P .. "reshard:out",         -- HASH id -> record, staged by reshard_out.lua for its new shard
    reshard_counters = P .. "reshard:counters", -- HASH: a removed shard's counters on their way to another
    reshard_got = P .. "reshard:got",         -- SET: removed shards whose counters this shard took in
  }
end

-- Jobs that wait for a reply (lib/waits.lua; docs/redis.md, "Waits"): the
-- suffixes of their keys after P, as constants. W.keys(K, P) adds the
-- names to K where they are used, so a shard that never awaited builds
-- none: every name is a string made per script call, and every key of
-- shard_keys is one a script pays for whether it uses it or not (the fetch
-- reads P waits:seq alone, whose existence says the shard awaited).
local WAITS_SEQ = "waits:seq"   -- STRING the attempt counter (INCR per new wait)
local WAITS = "waits"           -- HASH id -> wait record (waiting, replied, handling)
local WAITS_DUE = "waits:due"   -- ZSET id -> deadline while waiting, the reply's time once replied
local WAITS_NEW = "waits:new"   -- HASH id -> pending wait (await called, its batch not settled)
local WAITS_RUN = "waits:run"   -- SET ids of the batch in flight that are reply or timeout calls
local WAITS_KEY = "waits:key"   -- STRING the queue's secret as HMAC pads (64 + 64 bytes)
local WAITS_LATE = "waits:late" -- LIST the last stale replies, for operators
local HELD = "held"             -- ZSET (scores 0) esc(id) .. "\0\0" .. queued record: jobs of waiting ids
-- The keys of a queue's wait index, after the queue prefix Q = "NS:{QUEUE}:"
-- (KEYS[1] of waitkey.lua, the queue's slot): the correlation keys of its
-- waiting jobs and the secret its reply tokens are signed with.
local QUEUE_WAITKEYS = "waitkeys" -- HASH correlation key -> "attempt deadline id"
local QUEUE_SECRET = "secret"     -- STRING 64 hex digits, set once
-- lib/waits.lua makes W, the wait operations, when the script says so:
-- WAITS_WANTED = true before its include line (a script that makes waits,
-- or whose shard awaited: P waits:seq exists). Else W stays nil and costs
-- nothing: a script defines its functions at every call, ~1.2k Redis
-- instructions each (callgrind), and a fetch of a shard that never awaited
-- must not pay for them.
local WAITS_WANTED = false
local W
-- lib/done.lua's functions (finished jobs, stale payloads) are made where
-- its include line is only while DONE_WANTED is true: fetch.lua sets it
-- false for a worker that uses neither (~1.2k instructions a function).
local DONE_WANTED = true

-- The layout version of a namespace: "NS:{NS:queues}:layout", in the slot
-- of the registry NS:queues (a namespace has no braces, so the tag is the
-- registry's whole name) and under NS: (an ACL user limited to ~NS:* keys
-- reaches it), read and written with the registry by layout.lua and
-- register.lua.
local function layout_key(registry)
  return (registry:match("^(.*):queues$") or registry) .. ":{" .. registry .. "}:layout"
end

-- The layout version of the namespace of the registry reg, as stored; none
-- stored: "1" when queues are registered (a registry without a version), else
-- "2", which is stored (a new namespace). layout.lua, register.lua.
local function layout_version(reg)
  local lk = layout_key(reg)
  local v = redis.call("GET", lk)
  if v then return v end
  if redis.call("EXISTS", reg) == 1 then return "1" end
  redis.call("SET", lk, "2")
  return "2"
end

-- HASH payload -> expires_at, for the id's payloads pushed with one
local function expires_key(P, id) return P .. "expires:" .. id end

-- SET of the ids tagged t (lib/tags.lua)
local function tag_key(P, t) return P .. "tag:" .. t end

-- The queued jobs of priority N ~= 100 (ZSET id -> perform_in; lib/levels.lua)
local function level_key(P, n) return P .. "queue:" .. n end

-- A Redis score string of the number x (what ZSCORE replies in Redis 7.0:
-- the host reads back exactly the stored double).
local function score_str(x) return string.format("%.17g", x) end

-- Records (docs/redis.md, "Records"). An id in `jobs` / `morgue:jobs` is
-- esc(id) .. "\0\0" .. record: every byte 0 of the id becomes 0, 1, so "\0\0"
-- ends it and escaped ids sort as the ids do.
local function esc(id)
  if not id:find("\0", 1, true) then return id end
  return (id:gsub("%z", "\0\1"))
end

-- The escaped id of a member of `jobs` or `morgue:jobs` (it ends at the
-- first "\0\0"); nil for junk without one.
local function member_esc(m)
  local at = m:find("\0\0", 1, true)
  return at and m:sub(1, at - 1)
end

-- The id of the escaped id E (esc's inverse).
local function unesc(E)
  if not E:find("\0", 1, true) then return E end
  return (E:gsub("%z\1", "\0"))
end

-- The id of a member of `jobs` or `morgue:jobs`.
local function member_id(m) return unesc(member_esc(m)) end

-- The member of the lex index ix (K.jobs or K.morgue_jobs) of the escaped id
-- E, or nil: O(log n).
local function find_member(ix, E)
  return redis.call("ZRANGE", ix, "[" .. E .. "\0\0", "(" .. E .. "\0\1", "BYLEX", "LIMIT", "0", "1")[1]
end

-- (cmsgpack.unpack's values with their count: a record holds nils)
local function counted(...) return select("#", ...), { ... } end

-- Payloads in flat lists {payload, score, ...} (scores numbers), ascending
-- (score, bytes): the order the scripts hand them out (ZRANGE's).
-- base (optional): a list in that order whose payloads map holds, a merge's
-- queued side: then only map's other payloads and lowered scores are sorted
-- and merged into it, O(k + c log c) for c of them, instead of a sort of
-- all k (docs/benchmarks.md, "100 payloads per id on layout 2").
local function sort_payloads(map, base)
  local keys = {}
  if base then
    -- (a record another program wrote may be out of order or repeat a
    -- payload: then all are sorted)
    local had = {}
    for i = 1, #base, 2 do
      if had[base[i]] or (i > 1 and (base[i + 1] < base[i - 1] or
          (base[i + 1] == base[i - 1] and base[i] < base[i - 2]))) then
        base = nil
        break
      end
      had[base[i]] = base[i + 1]
    end
    if base then
      for p, s in pairs(map) do
        if had[p] ~= s then keys[#keys + 1] = p end
      end
    end
  end
  if not base then
    for p in pairs(map) do keys[#keys + 1] = p end
  end
  local function before(a, b)
    local x, y = map[a], map[b]
    if x ~= y then return x < y end
    return a < b
  end
  if #keys > 1 then table.sort(keys, before) end
  local out = {}
  if not base then
    for i, p in ipairs(keys) do out[2 * i - 1], out[2 * i] = p, map[p] end
    return out
  end
  -- base's entries that map keeps as they are, in order, merged with keys
  local i, j, n, k = 1, 1, #base, 0
  while true do
    while i <= n and map[base[i]] ~= base[i + 1] do i = i + 2 end
    local p = keys[j]
    if i > n and not p then break end
    if p and (i > n or before(p, base[i])) then
      out[k + 1], out[k + 2] = p, map[p]
      j = j + 1
    else
      out[k + 1], out[k + 2] = base[i], base[i + 1]
      i = i + 2
    end
    k = k + 2
  end
  return out
end

-- Adds the flat list pl to map (payload -> score), the minimal score winning
-- (docs/redis.md, "Merge rules").
local function unite(map, pl)
  for i = 1, #pl, 2 do
    local s = map[pl[i]]
    if not s or pl[i + 1] < s then map[pl[i]] = pl[i + 1] end
  end
  return map
end

-- Encodes the payload list pl from index `from`: payload, then its score,
-- nil when it equals pin (one byte).
local function pack_payloads(vals, pl, pin)
  local k = #vals
  for i = 1, #pl, 2 do
    vals[k + 1] = pl[i]
    if pl[i + 1] ~= pin then vals[k + 2] = pl[i + 1] end
    k = k + 2
  end
  return cmsgpack.pack(unpack(vals, 1, k))
end

-- Decodes payload pairs from vals[i..n] (a score nil = pin). nil when junk.
local function unpack_payloads(n, vals, i, pin)
  local pl = {}
  for j = i, n, 2 do
    local p, s = vals[j], vals[j + 1]
    if s == nil then s = pin end
    if type(p) ~= "string" or type(s) ~= "number" then return nil end
    pl[#pl + 1], pl[#pl + 2] = p, s
  end
  if #pl == 0 then return nil end
  return pl
end

-- A queued record: place ("r" in ready, "l" in later, "p" in a level), pin
-- (number), then the payloads.
local function job_record(place, pin, pl)
  return place .. pack_payloads({ pin }, pl, pin)
end

-- Decodes the member m (of escaped id E) of `jobs`: place, pin (number),
-- payload list; nil when the record is junk (then the caller drops it).
local function job_decode(m, E)
  local rec = m:sub(#E + 3)
  local place = rec:sub(1, 1)
  if place ~= "r" and place ~= "l" and place ~= "p" then return nil end
  local n, v = counted(pcall(cmsgpack.unpack, rec:sub(2)))
  local pin = v[2]
  if not v[1] or type(pin) ~= "number" or pin ~= pin then return nil end
  local pl = unpack_payloads(n, v, 3, pin)
  if not pl then return nil end
  return place, pin, pl
end

-- The head of the member m (of escaped id E) of `jobs`, for fetch.lua's
-- copy of its payload bytes into a busy record without decoding them:
-- place, pin (number), and the offset (0-based) where the payload
-- encodings start; nil when the head is junk or no payload follows.
-- (A head of place and a float64 pin is 10 bytes, and the jobs of a push
-- share one: what such a head decodes to is kept for the script's call,
-- one sub and two lookups a job instead of a sub and a pcall'd decode.)
local PEEK_PLACE, PEEK_PIN = {}, {}
local function job_peek(m, E)
  local at = #E + 3
  local head = m:sub(at, at + 9)
  local place = PEEK_PLACE[head]
  if place and #m > at + 9 then return place, PEEK_PIN[head], at + 9 end
  place = m:sub(at, at)
  if place ~= "r" and place ~= "l" and place ~= "p" then return nil end
  local ok, nxt, pin = pcall(cmsgpack.unpack_one, m, at)
  if not ok or type(pin) ~= "number" or pin ~= pin or nxt < 0 then return nil end
  if nxt == at + 9 and #head == 10 then PEEK_PLACE[head], PEEK_PIN[head] = place, pin end
  return place, pin, nxt
end

-- A busy record (P busy[id]): perform_in and retry_count (Redis score
-- strings, handed back to the host verbatim), priority (nil = 100), windows
-- (nil = none), then the payloads.
local function busy_record(pin, rc, prio, win, pl)
  return pack_payloads({ pin, rc, prio or false, win or false }, pl, tonumber(pin))
end

-- The same busy record from a queued member m whose payload encodings start
-- at offset nxt (job_peek): they are copied as they are (a score left out
-- means "= perform_in" in both records, and pin is the queued number's
-- exact score string), which saves fetch.lua a decode and an encode.
-- heads (optional): pin -> the record's head for a fresh job (retry_count
-- -1, no priority or windows), kept by the caller: jobs pushed together
-- share a pin, and an encoding is ~3.5k instructions (callgrind).
local function busy_record_of(pin, rc, prio, win, m, nxt, heads)
  if heads and rc == "-1" and not prio and not win then
    local h = heads[pin]
    if not h then
      h = cmsgpack.pack(pin, rc, false, false)
      heads[pin] = h
    end
    return h .. m:sub(nxt + 1)
  end
  return cmsgpack.pack(pin, rc, prio or false, win or false) .. m:sub(nxt + 1)
end

-- Reads a busy record: pin, rc (strings), prio, win (strings or nil),
-- payload list; nil when it does not decode or has no payloads (junk: the
-- caller drops it). A record whose payloads decode but whose perform_in or
-- retry_count is junk (written by someone else) reads as perform_in =
-- junk_pin (default "0"), retry_count = "-1": it must neither break a
-- write half-way through a script (no rollback) nor reach the host as a
-- non-number.
local function busy_decode(v, junk_pin)
  local n, t = counted(pcall(cmsgpack.unpack, v))
  if not t[1] then return nil end
  local pin, rc, prio, win = t[2], t[3], t[4], t[5]
  local p = type(pin) == "string" and tonumber(pin)
  if not p or p ~= p or p == math.huge or p == -math.huge
    or not (pin:match("^[-+]?%d*%.?%d*[eE]?[-+]?%d*$")) then
    pin = junk_pin or "0"
    p = tonumber(pin)
  end
  if type(rc) ~= "string" or not rc:match("^%-?%d+$") or tonumber(rc) < -1 then rc = "-1" end
  if type(prio) ~= "string" or not prio:match("^%-?%d+$") or prio == "100" then prio = nil end
  if type(win) ~= "string" or win == "" then win = nil end
  local pl = unpack_payloads(n, t, 6, p)
  if not pl then return nil end
  return pin, rc, prio, win, pl
end

-- P busy's filler: the field "" (no id is empty) with a value longer than
-- Redis's hash-max-listpack-value (64 by default) that no reader decodes
-- (it starts with 0xc1, never valid MessagePack: busy_decode drops it as
-- junk; a literal, as string.rep would cost every call). fetch.lua
-- writes a batch of BUSY_FILL_MIN jobs or more with it first, so Redis keeps
-- the hash as a hash table from its first field: as a listpack every field
-- an HSET adds is a search of the fields before it, O(n^2) a batch
-- (callgrind: 7.5k of a fetch of 100's ~42k instructions a job; below ~20
-- jobs the listpack is the cheaper). docs/redis.md, "busy".
local BUSY_FILL, BUSY_FILL_MIN = "\193luakiq: a filler that keeps busy a hash table, docs/redis.md ...", 24

-- The number of jobs in P busy, its filler not counted. The filler is there
-- exactly when BUSY_FILL_MIN jobs or more are (fetch.lua writes it with
-- such a batch; whoever takes jobs out of busy one by one calls
-- busy_settle), so this is one HLEN.
local function busy_count(K)
  local n = redis.call("HLEN", K.busy)
  if n > BUSY_FILL_MIN then n = n - 1 end
  return n
end

-- After jobs left P busy one by one (bury.lua, fetch.lua's redelivery
-- dropping junk): the filler goes when fewer than BUSY_FILL_MIN jobs are
-- left, and busy with busy:fetched_at when none is.
local function busy_settle(K)
  local n = redis.call("HLEN", K.busy)
  if n > 0 and n <= BUSY_FILL_MIN and redis.call("HDEL", K.busy, "") == 1 then n = n - 1 end
  if n == 0 then redis.call("DEL", K.busy, K.busy_fetched_at) end
end

-- A morgue record: the dead payloads (scores always written).
local function morgue_record(pl) return cmsgpack.pack(unpack(pl)) end
local function morgue_decode(m, E)
  local n, t = counted(pcall(cmsgpack.unpack, m:sub(#E + 3)))
  if not t[1] then return nil end
  return unpack_payloads(n, t, 2, 0)
end
