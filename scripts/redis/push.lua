-- push.lua: enqueue jobs into one shard (perform_async), merging with queued
-- jobs of the same id by "new + queued" (docs/redis.md, "Merge rules"):
--   payloads united, an equal payload keeps the minimal score (ZADD LT);
--   perform_in and retry_count of the queued job win (ZADD NX).
-- Within one call the groups apply in order, so the first occurrence of an id
-- sets its perform_in/retry_count. An id in flight is not touched: the push
-- creates a separate queued job that runs after the batch.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] = wake channel ("" = never publish), ARGV[2] = now,
-- then groups of 5: id, perform_in, retry_count, score, payload (bytes),
-- then optional sections, each "", NAME, then pairs: job number (1-based,
-- its group), value (no id is empty, so "" ends the groups and each section):
--   "expires_at": that job's payload expires then (docs/redis.md,
--     "expires_at"). An equal payload already queued keeps the later expiry
--     (none is the latest); pushed without one, it no longer expires.
--   "priority": the job's priority, an integer (default 100, lower first;
--     merged with a queued job of the id: the lowest wins; lib/levels.lua).
--   "windows": the job's own windows, "ZONE|HH:MM-HH:MM,..." (checked by the
--     host); a queued job keeps its own, one without gets these.
--   "tags": the job's tags, sorted and joined by "\n" (1 to 16, each 1 to 64
--     bytes, no control character; lib/tags.lua): united with the tags of
--     the id while it is queued, in flight or dead, else they replace them.
--   "shards": one value, not pairs ("", "shards", COUNT): the shards_count
--     the caller routed with. When a reshard recorded another count in the
--     shard (P shards), the push is refused, nothing written
--     (the error "RESHARDED HAVE USED": the counts, the shard's first).
-- Two shorter forms for the jobs of a call that share perform_in,
-- retry_count and score (as jobs pushed together do), read as the groups
-- of 5 they stand for (job n = the n-th id), sections after them alike:
--   "", "ids", perform_in, retry_count, score, payload, then ids: every job
--     has that payload;
--   "", "pairs", perform_in, retry_count, score, then id, payload pairs.
-- Ascending new ids in them take the short way below (a blank job's push
-- ~11k Redis instructions instead of ~17k as groups of 5, docs/benchmarks.md).
-- (the client sorts a shard's chunk by id when no job has a section)
-- Returns {added, head}: added = ids newly queued (integer), head = the
-- shard's lowest perform_in after the push (Redis score string) or false.
-- Publishes the prefix on the channel when the head got earlier (an empty
-- queue counts as +inf): that covers "a due job appeared in a shard with no
-- due job" and "the next wake-up time moved earlier". At most one PUBLISH.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include tags
-- luakiq:include shard
-- luakiq:include waits
local ARGV = ARGV -- (a local: a global is a table lookup each time, ~10 a job)
local P = KEYS[1]
local K = shard_keys(P)
local channel = ARGV[1]
-- Numbers are normalized to %.17g; jobs of one call mostly share their
-- strings (perform_in = score = now, retry_count = -1), so each distinct
-- string is checked and formatted once.
-- (what: a field name; n: the job number. The message is built only on error.)
-- nums[v]: the number itself, so that no job converts it again (a tonumber
-- of a 17-digit string is two strtod calls in Redis's Lua: 8 % of a push's
-- Redis CPU before it was kept).
local memo, nums = {}, {}
-- v's %.17g string (memoized with its number), or nil when v is no finite
-- number.
local function number_str(v)
  local x = tonumber(v)
  if not x or x ~= x or x == math.huge or x == -math.huge then return nil end
  local s = string.format("%.17g", x)
  memo[v], nums[v] = s, x
  return s
end
local function finite(v, what, n)
  local s = memo[v] or number_str(v)
  if s then return s end
  error("BADARG luakiq push: " .. (n and "job " .. n .. " " or "") .. what .. " must be a finite number, got '" ..
    tostring(v) .. "'", 0)
end
-- Jobs that wait for a reply (lib/waits.lua, which push.lua does not
-- include: a push pays for no function of it): whether the shard has
-- waits, pending waits or held jobs (cached in K; one EXISTS for a shard
-- that never awaited), and whether new payloads of id must be held
-- (W.must_hold).
local function waits_here()
  if K.has_waits == nil then
    K.has_waits = redis.call("EXISTS", P .. WAITS_SEQ) == 1 and
      redis.call("EXISTS", P .. WAITS, P .. WAITS_NEW, P .. HELD) > 0
    if K.has_waits then K.waits = P .. WAITS end -- (lib/tags.lua job_state)
  end
  return K.has_waits
end
local function must_hold(id)
  if not waits_here() then return false end
  if redis.call("HEXISTS", P .. WAITS, id) == 1 then return true end
  return redis.call("HEXISTS", P .. WAITS_NEW, id) == 1 and redis.call("HEXISTS", K.busy, id) == 1
end
-- Whether the shard has expiring payloads or waits, which the short and
-- usual ways below do not handle (one EXISTS for both, when it has none).
local function expiring_or_waits()
  if redis.call("EXISTS", K.expiring, P .. WAITS_SEQ) == 0 then return false end
  return redis.call("EXISTS", K.expiring) == 1 or waits_here()
end
-- A call in a short form as the groups of 5 it stands for (the way of
-- every call the short way below does not take).
local function expand()
  local form, pin, rc, score, payload = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
  local pairs_form = form == "pairs"
  local step, i, n = pairs_form and 2 or 1, pairs_form and 8 or 9, #ARGV
  if i - 1 > n then
    error("BADARG luakiq push: the \"" .. form .. "\" form is \"\", \"" .. form .. "\", perform_in, retry_count, score" ..
      (pairs_form and ", then id, payload pairs" or ", payload, then ids"), 0)
  end
  local A, k = { ARGV[1], ARGV[2] }, 2
  while i <= n and ARGV[i] ~= "" do
    if pairs_form then
      payload = ARGV[i + 1]
      if payload == nil then error("BADARG luakiq push: the \"pairs\" form needs a payload after id '" .. ARGV[i] .. "'", 0) end
    end
    A[k + 1], A[k + 2], A[k + 3], A[k + 4], A[k + 5] = ARGV[i], pin, rc, score, payload
    k, i = k + 5, i + step
  end
  for j = i, n do
    k = k + 1
    A[k] = ARGV[j]
  end
  ARGV = A
end
-- Variadic writes of list[first..last] (default: all of it), at most step
-- arguments a call.
local function chunks(cmd, key, list, step, first, last)
  last = last or #list
  for from = first or 1, last, step do redis.call(cmd, key, unpack(list, from, math.min(from + step - 1, last))) end
end
-- Writes the usual call's jobs (below: new, distinct, one perform_in pin,
-- priority 100, a shard without tags, priorities or expiring payloads):
-- add, their members of P jobs for ZADD ("0", member, ...); ready[rfirst..
-- rlast] (default: all), their ids when they go to P ready (sorted), else
-- later (pin_s, id, ...) for P later; before, the head before the call.
-- Returns push.lua's reply.
local function write_usual(add, ready, later, pin, pin_s, before, added, rfirst, rlast)
  chunks("ZADD", K.jobs, add, 2000)
  chunks("ZADD", K.later, later, 2000)
  rfirst, rlast = rfirst or 1, rlast or #ready
  if rlast >= rfirst then
    chunks("RPUSH", K.ready, ready, 1000, rfirst, rlast)
    redis.call("SET", K.tail, pin_s)
  end
  local head = before and tonumber(before)
  if not head or pin < head then
    if channel ~= "" then wake(channel, P) end
    head = pin
  end
  return { added, score_str(head) }
end
-- The short way: a call in a short form ("ids", "pairs") whose ids ascend
-- (so are distinct: a producer that sorts them, as luakiq's client does for
-- a chunk of a shard) with retry_count < 0, no section but "shards", into
-- a shard without tags, priorities or expiring payloads, none of its ids
-- queued: its jobs are written from ARGV as they are, without the groups of
-- 5 (docs/benchmarks.md, "Push's short forms"). Anything else, errors included,
-- gives nil before any write: the call goes the general way.
local function short_way()
  local pairs_form = ARGV[4] == "pairs"
  local step, i0, n = pairs_form and 2 or 1, pairs_form and 8 or 9, #ARGV
  local pin_a, rc_a, score_a = ARGV[5], ARGV[6], ARGV[7]
  local pin_s = number_str(pin_a)
  if not (pin_s and number_str(rc_a) and number_str(score_a) and number_str(ARGV[2])) then return nil end
  -- the ids, ascending; where they end
  local i, prev = i0, nil
  while i <= n do
    local id = ARGV[i]
    if id == "" then break end
    if (prev and not (prev < id)) or (pairs_form and ARGV[i + 1] == nil) then return nil end
    prev, i = id, i + step
  end
  local count = (i - i0) / step
  if count == 0 then return nil end
  local last_i = i - step
  if i <= n then
    -- (only "", "shards", COUNT after them)
    if not (n == i + 2 and ARGV[i + 1] == "shards" and ARGV[i + 2]:match("^%d+$")) then return nil end
    local have = redis.call("GET", K.shards)
    if have and have ~= ARGV[i + 2] then return nil end
  end
  if nums[rc_a] >= 0 then return nil end
  if has_levels(K) or has_tags(K) or expiring_or_waits() then return nil end
  -- none of its ids queued (the members read in one range: read_jobs)
  -- (K.known goes at once: a partial view of P jobs, through which the
  -- general way's reads, queue_head's among them, would take a queued job
  -- outside the range for none and drop its ready entry)
  read_jobs(K, nil, count, ARGV[i0], prev)
  local known = K.known
  K.known = nil
  if not known then return nil end
  for E in pairs(known) do
    -- (a binary search among the call's ascending ids)
    local id, lo, hi = unesc(E), 0, count - 1
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      local v = ARGV[i0 + mid * step]
      if v == id then return nil end
      if v < id then lo = mid + 1 else hi = mid - 1 end
    end
  end
  local before = queue_head(P, K)
  local pin, now, score_n = nums[pin_a], nums[ARGV[2]], nums[score_a]
  local place = "l"
  if pin <= now and pin >= ready_tail(K) then place = "r" end
  local head = place .. cmsgpack.pack(pin) -- (the record's place and perform_in)
  local add, later, ready, na = {}, {}, {}, 0
  local tail_s = score_n ~= pin and cmsgpack.pack(score_n) or cmsgpack.pack(nil)
  -- (ids without a byte 0, as most are, need no escaping: one search for
  -- all of an "ids" call)
  local plain = not pairs_form and not table.concat(ARGV, "", i0, last_i):find("\0", 1, true)
  local recs = {} -- payload -> "\0\0" .. record
  local rec = not pairs_form and "\0\0" .. head .. cmsgpack.pack(ARGV[8]) .. tail_s
  for k = i0, last_i, step do
    local id = ARGV[k]
    local r = rec
    if pairs_form then
      local pl = ARGV[k + 1]
      r = recs[pl]
      if not r then
        r = "\0\0" .. head .. cmsgpack.pack(pl) .. tail_s
        recs[pl] = r
      end
    end
    add[na + 1], add[na + 2] = "0", ((plain or not id:find("\0", 1, true)) and id or esc(id)) .. r
    na = na + 2
  end
  if place == "r" and step == 1 then
    -- (the "ids" form's ids are ARGV's own run: RPUSHed from it)
    return write_usual(add, ARGV, later, pin, pin_s, before, count, i0, last_i)
  elseif place == "r" then
    for k = i0, last_i, step do ready[#ready + 1] = ARGV[k] end
  else
    for k = i0, last_i, step do later[#later + 1], later[#later + 2] = pin_s, ARGV[k] end
  end
  return write_usual(add, ready, later, pin, pin_s, before, count)
end
if ARGV[3] == "" and (ARGV[4] == "ids" or ARGV[4] == "pairs") then
  local r = short_way()
  if r then return r end
  expand()
end
-- The sections: they start where a group would have id "" and a section
-- name as perform_in.
local SECTIONS = { expires_at = true, priority = true, windows = true, tags = true, shards = true }
local last = #ARGV -- the last ARGV of the groups
local expiry, prio, wins, tagsec -- group number -> expires_at (normalized) / priority / windows / tags
local shards -- the shards_count the caller routed the jobs with (section "shards")
for i = 3, #ARGV, 5 do
  if ARGV[i] == "" and SECTIONS[ARGV[i + 1]] then
    last = i - 1
    local j, vals = i, nil
    while j <= #ARGV do
      if ARGV[j] == "" and ARGV[j + 1] == "shards" and SECTIONS.shards then
        -- one value, not per job: "", "shards", COUNT
        shards = ARGV[j + 2]
        if not (shards and shards:match("^%d+$")) then
          error("BADARG luakiq push: shards must be the queue's shards_count, got '" .. tostring(shards) .. "'", 0)
        end
        SECTIONS.shards = false
        j = j + 3
      elseif ARGV[j] == "" then
        local name = ARGV[j + 1]
        if not SECTIONS[name] then
          error("BADARG luakiq push: unknown section '" .. tostring(name) .. "' (expires_at, priority, windows, tags, " ..
            "shards)", 0)
        end
        vals = {}
        if name == "expires_at" then expiry = vals elseif name == "priority" then prio = vals
        elseif name == "windows" then wins = vals else tagsec = vals end
        SECTIONS[name] = false -- each at most once
        vals.name = name
        j = j + 2
      else
        local n, v = tonumber(ARGV[j]), ARGV[j + 1]
        if not n or n % 1 ~= 0 or n < 1 or 3 + (n - 1) * 5 > last or v == nil then
          error("BADARG luakiq push: " .. vals.name .. " for job '" .. tostring(ARGV[j]) .. "': no such job", 0)
        end
        if vals == expiry then
          v = finite(v, "expires_at", n)
        elseif vals == prio then
          if not v:match("^%-?%d+$") or math.abs(tonumber(v)) > 1e9 then
            error("BADARG luakiq push: job " .. n .. " priority must be an integer from -1000000000 to 1000000000, got '" ..
              v .. "'", 0)
          end
          v = string.format("%d", tonumber(v))
          if v == "100" then v = nil end
        elseif vals == tagsec then
          local c = 0
          for t in string.gmatch(v .. "\n", "(.-)\n") do
            c = c + 1
            if t == "" or #t > 64 or t:find("%c") or c > 16 then
              error("BADARG luakiq push: job " .. n .. " tags must be 1 to 16 tags of 1 to 64 bytes without control " ..
                "characters, joined by \"\\n\"", 0)
            end
          end
        elseif v == "" or v:find("\n") then
          error("BADARG luakiq push: job " .. n .. " windows must be one non-empty line", 0)
        end
        vals[n] = v
        j = j + 2
      end
    end
    break
  end
end
if (last - 2) % 5 ~= 0 then
  error("BADARG luakiq push: ARGV must be channel, now, then groups of 5, then optionally sections \"\", NAME and " ..
    "job/value pairs", 0)
end
finite(ARGV[2], "now")
-- A queue resharded (luakiq.ops.reshard) records its count in each shard: a
-- push routed with another count would put ids in the wrong shard.
if shards then
  local have = redis.call("GET", K.shards)
  if have and have ~= shards then
    error("RESHARDED " .. have .. " " .. shards, 0)
  end
end
-- Validate everything before the first write: a script error does not roll
-- back.
local retried = false -- some group has retry_count >= 0 (rare)
-- (ids: the call's ids, each once; distinct: how many; one_pin: the
-- perform_in string every group has, false when they differ)
-- A group's numbers are checked only when they differ from the group
-- before's (strings compare in O(1): Lua interns them; in a usual call all
-- groups share them), a tenth of a push's Redis CPU otherwise.
-- (in_order: the ids came ascending, each once, as a producer that sorts
-- them sends them: then the first and the last are the lowest and highest,
-- and ready needs no sort)
local ids, distinct, one_pin, in_order = {}, 0, ARGV[4], true
local pa, pb, pc -- the group before's perform_in, retry_count, score
for i = 3, last, 5 do
  local id, a, b, c = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if id == "" then error("BADARG luakiq push: job " .. (i - 3) / 5 + 1 .. ": id is empty", 0) end
  if not ids[id] then ids[id], distinct = true, distinct + 1 end
  if in_order and i > 3 and not (ARGV[i - 5] < id) then in_order = false end
  if a ~= one_pin then one_pin = false end
  if a ~= pa then finite(a, "perform_in", (i - 3) / 5 + 1) pa = a end
  if b ~= pb then
    local rc = finite(b, "retry_count", (i - 3) / 5 + 1)
    if rc ~= "-1" and tonumber(rc) >= 0 then retried = true end
    pb = b
  end
  if c ~= pc then finite(c, "score", (i - 3) / 5 + 1) pc = c end
end
local before = queue_head(P, K)
-- Tags (lib/tags.lua), before the jobs are queued: whether an id was queued,
-- in flight or dead decides between union and replacement. Tags left by an
-- id that is gone are dropped, also by a push without tags.
if tagsec or has_tags(K) then
  waits_here() -- (job_state's "waiting")
  local new = {} -- id -> {tag = true}: this call's tags of the id
  for n, v in pairs(tagsec or {}) do
    if n ~= "name" then
      local id = ARGV[3 + (n - 1) * 5]
      new[id] = new[id] or {}
      for t in string.gmatch(v, "[^\n]+") do new[id][t] = true end
    end
  end
  local seen = {}
  for i = 3, last, 5 do
    local id = ARGV[i]
    if not seen[id] then
      seen[id] = true
      local old = has_tags(K) and redis.call("HGET", K.tags, id)
      if old and not job_state(P, K, id) then
        forget_tags(P, K, id, old)
        old = nil
      end
      local set = new[id]
      if set then
        if old then for t in string.gmatch(old, "[^\n]+") do set[t] = true end end
        local list = {}
        for t in pairs(set) do list[#list + 1] = t end
        table.sort(list)
        for _, t in ipairs(list) do redis.call("SADD", tag_key(P, t), id) end
        redis.call("HSET", K.tags, id, table.concat(list, "\n"))
        K.has_tags = true
      end
    end
  end
end
-- The jobs of this call by id (docs/redis.md, "push.lua"): each distinct id is
-- looked up once in P jobs; its groups merge in memory ("new + queued": the
-- payloads united, an equal payload keeping the minimal score; perform_in
-- and retry_count of the queued job, else of the id's first group; the
-- lowest priority), then each job is written once.
local levels = prio or has_levels(K)
-- (the call's members read in one range when they are few: read_jobs)
if in_order then read_jobs(K, ids, distinct, ARGV[3], ARGV[last - 4]) else read_jobs(K, ids) end
-- The usual call takes a shorter way, with the same result as the general
-- one below: no section but "shards", no retry_count >= 0, a shard without
-- tags, priorities or expiring payloads, every id new (read in one range,
-- none queued) and once in the call, all of one perform_in. Then each job
-- is one record of one payload, the call's jobs go to ready (by id) or all
-- to later, and nothing is merged: about half the Redis CPU per job of the
-- general way (docs/benchmarks.md, "The usual push and fetch").
if one_pin and distinct == (last - 2) / 5 and K.known and not (tagsec or expiry or prio or wins or retried)
    and not has_levels(K) and not has_tags(K) and not expiring_or_waits() then
  -- (the range's members are looked up among the call's ids, not each id
  -- escaped and looked up among them: there are usually fewer)
  local ok = true
  for E in pairs(K.known) do
    if ids[unesc(E)] then ok = false break end
  end
  if ok then
    K.known = nil
    local pin_s = memo[one_pin]
    local pin, now = nums[one_pin], nums[ARGV[2]]
    local place = "l"
    if pin <= now and pin >= ready_tail(K) then place = "r" end
    local ids, add, later, recs = {}, {}, {}, {} -- recs: payload -> record (score = perform_in)
    local na, nl, ni = 0, 0, 0 -- (counts kept: # is a binary search in Lua 5.1)
    local find = string.find
    for i = 3, last, 5 do
      local id, payload, score = ARGV[i], ARGV[i + 4], nums[ARGV[i + 3]]
      local rec
      if score == pin then
        rec = recs[payload]
        if not rec then
          rec = place .. cmsgpack.pack(pin, payload, nil)
          recs[payload] = rec
        end
      else
        rec = place .. cmsgpack.pack(pin, payload, score)
      end
      add[na + 1], add[na + 2] = "0", (find(id, "\0", 1, true) and esc(id) or id) .. "\0\0" .. rec
      na = na + 2
      if place == "r" then
        ni = ni + 1
        ids[ni] = id
      else
        later[nl + 1], later[nl + 2] = pin_s, id
        nl = nl + 2
      end
    end
    -- (a producer that sends a call's distinct ids in order spares the
    -- sort ~10 string comparisons a job, each a strcoll here)
    if not in_order then table.sort(ids) end
    return write_usual(add, ids, later, pin, pin_s, before, distinct)
  end
end
local byid, order = {}, {} -- id -> job; ids in first-occurrence order
local new_payload = {} -- group -> its payload was not queued yet (pushes with expiries only)
local added = 0
-- A queued job is first read without decoding its payloads into tables
-- (j.lazy: its payload values j.v, their count j.n, the last one and its
-- score): a payload that sorts after all of them and is not among them is
-- appended (j.tail) to the member's encodings as they are. A merge into a
-- job of k payloads then costs one decode (C) and k string comparisons
-- instead of tables of k entries built, sorted and encoded (docs/benchmarks.md,
-- "100 payloads per id on layout 2"). Anything else decodes them
-- (materialize) and merges as below. lazy_job gives nil when the payloads
-- are not in the scripts' own form (the caller decodes them).
local function lazy_job(m, E, place, pin, nxt)
  -- (from offset nxt of m: no copy of the encodings; v[1]: pcall's true,
  -- v[2]: unpack_limit's end offset (-1: it read to the end), then payload,
  -- score or nil, ...: an even count, the scripts write the last score even
  -- when it is nil)
  local n, v = counted(pcall(cmsgpack.unpack_limit, m, 2147483647, nxt))
  if not v[1] or v[2] ~= -1 or n < 4 or (n - 2) % 2 ~= 0 then return nil end
  for k = 3, n, 2 do
    local sc = v[k + 1]
    if type(v[k]) ~= "string" or (sc ~= nil and type(sc) ~= "number") then return nil end
  end
  local last_s = v[n]
  if last_s == nil then last_s = pin end
  return { E = E, old = m, place = place, place0 = place, pin = pin, lazy = true, nxt = nxt, v = v, n = n, last_p = v[n - 1],
           last_s = last_s, tail = {}, tail_set = {}, prio = nil }
end
-- Whether payload is one of lazy j's queued payloads (strings compare in
-- O(1): Lua interns them).
local function queued_payload(j, payload)
  local v = j.v
  for k = 3, j.n, 2 do
    if v[k] == payload then return true end
  end
  return false
end
local function materialize(j)
  local pl = unpack_payloads(j.n, j.v, 3, j.pin)
  for k = 1, #j.tail do pl[#pl + 1] = j.tail[k] end
  j.map, j.base, j.lazy, j.v, j.tail, j.tail_set = unite({}, pl), pl, false, nil, nil, nil
end
for i = 3, last, 5 do
  local n, id = (i - 3) / 5 + 1, ARGV[i]
  local payload, score = ARGV[i + 4], nums[ARGV[i + 3]]
  local j = byid[id]
  if not j then
    local m, E, place, pin, pl
    if expiry then
      m, E, place, pin, pl = find_job(K, id)
      if place then j = { E = E, old = m, place = place, pin = pin, map = unite({}, pl), base = pl, prio = nil } end
    else
      local nxt
      m, E, place, pin, nxt = peek_job(K, id)
      if place then
        j = lazy_job(m, E, place, pin, nxt)
        if not j then
          -- (not in the scripts' own form: decoded; junk is replaced, as
          -- find_job's nil)
          local pl
          place, pin, pl = job_decode(m, E)
          if place then j = { E = E, old = m, place = place, pin = pin, map = unite({}, pl), base = pl, prio = nil } end
        end
      end
    end
    if place then
      if place == "p" then j.prio = redis.call("HGET", K.prio, id) end
    else
      -- new (a junk member of the id is replaced)
      j = { E = E, old = m, pin = nums[ARGV[i + 1]], pin_s = memo[ARGV[i + 1]], map = {} }
      added = added + 1
      -- retries holds only retry_count >= 0 (lib/shard.lua set_retry); a
      -- job enters it only when its id was not queued and this is the id's
      -- first group (a queued job keeps its own retry_count)
      if retried then
        local rc = memo[ARGV[i + 2]]
        if rc ~= "-1" and tonumber(rc) >= 0 then redis.call("ZADD", K.retries, rc, id) end
      end
      -- an id that waits for a reply (lib/waits.lua): its job waits in P
      -- held, merged with the one held there (its perform_in and priority)
      if must_hold(id) then
        local h = find_member(P .. HELD, E)
        local hp, hpin, hpl
        if h then hp, hpin, hpl = job_decode(h, E) end
        j.held, j.junk, j.old, j.place, j.pin_s = true, m, h, "l", nil
        if hp then
          j.pin, j.map, j.base, j.place = hpin, unite({}, hpl), hpl, hp
          if hp == "p" then j.prio = redis.call("HGET", K.prio, id) end
          added = added - 1
        end
      end
    end
    byid[id] = j
    order[#order + 1] = id
    if not j.place then
      j.prio = prio and prio[n] or nil
    elseif levels then
      local m = lower_priority(j.prio, prio and prio[n] or nil)
      if m ~= j.prio then j.prio, j.moved = m, true end
    end
  elseif levels then
    local m = lower_priority(j.prio, prio and prio[n] or nil)
    if m ~= j.prio then j.prio, j.moved = m, true end
  end
  if j.lazy then
    local t = j.tail_set[payload]
    if t == nil and (score > j.last_s or (score == j.last_s and payload > j.last_p)) and not queued_payload(j, payload) then
      j.tail[#j.tail + 1], j.tail[#j.tail + 2] = payload, score
      j.tail_set[payload] = score
      j.last_p, j.last_s, j.changed = payload, score, true
    elseif t == nil or score < t then
      materialize(j)
    end
  end
  local s = not j.lazy and j.map[payload]
  if expiry then new_payload[n] = s == nil end
  -- (j.one: the job's only payload while it has one, for the fast path below)
  if not j.old and j.one == nil then j.one = payload elseif j.one ~= payload then j.one = false end
  if not j.lazy and (not s or score < s) then
    j.map[payload] = score
    j.changed = true
  end
end
K.known = nil -- (a copy of P jobs: what follows reads it afresh)
-- Places: a new job of priority 100 due now goes to the end of P ready when
-- its perform_in is not below P tail (ready stays in perform_in order; the
-- call's candidates in (perform_in, id) order), else to P later; a job of
-- another priority to its level. A queued job stays where it is unless its
-- priority got lower.
local now = nums[ARGV[2]]
local tail = -math.huge
local cands = {}
for _, id in ipairs(order) do
  local j = byid[id]
  if not j.place and not j.prio and j.pin <= now then cands[#cands + 1] = id end
end
if #cands > 0 then tail = ready_tail(K) end
if #cands > 1 then
  -- (the usual call shares one perform_in, now: then by id alone, with
  -- the built-in comparison, about 0.7 us per job less than a Lua one)
  local one = byid[cands[1]].pin
  for _, id in ipairs(cands) do
    if byid[id].pin ~= one then one = nil break end
  end
  if one then
    table.sort(cands)
  else
    table.sort(cands, function(a, b)
      local x, y = byid[a].pin, byid[b].pin
      if x ~= y then return x < y end
      return a < b
    end)
  end
end
local ready = {}
for _, id in ipairs(cands) do
  local j = byid[id]
  if j.pin >= tail then
    j.place, tail = "r", j.pin
    ready[#ready + 1] = id
  end
end
-- Writes: the old members go, the new ones come, in variadic calls.
local rem, add, later = {}, {}, {}
local head = before and tonumber(before)
-- Held jobs (ids that wait for a reply) go to P held, with no place in the
-- due order and no say in the head; the loop below then passes them.
for _, id in ipairs(order) do
  local j = byid[id]
  if j.held then
    if j.junk then rem[#rem + 1] = j.junk end
    if j.changed or j.moved then
      local n = j.prio ~= "100" and j.prio or nil
      if n then redis.call("HSET", K.prio, id, n) else redis.call("HDEL", K.prio, id) end
      if j.old then redis.call("ZREM", P .. HELD, j.old) end
      redis.call("ZADD", P .. HELD, "0", j.E .. "\0\0" .. job_record(n and "p" or "l", j.pin, sort_payloads(j.map, j.base)))
    end
    j.changed, j.moved = false, false
  end
end
for _, id in ipairs(order) do
  local j = byid[id]
  if not j.place then
    -- new, not in ready
    if j.prio then
      j.place = "p"
      join_level(P, K, id, j.pin_s, j.prio)
    else
      j.place = "l"
      later[#later + 1], later[#later + 2] = j.pin_s, id
    end
    j.changed = true
  elseif j.moved then
    -- queued, its priority lowered: to the new level (or from a level
    -- above 100 to the default, in later)
    local pin_s = score_str(j.pin)
    leave_place(P, K, id, j.place, j.place == "p" and redis.call("HGET", K.prio, id) or nil)
    if j.prio == "100" then j.prio = nil end
    if j.prio then
      j.place = "p"
      join_level(P, K, id, pin_s, j.prio)
    else
      j.place = "l"
      later[#later + 1], later[#later + 2] = pin_s, id
    end
    j.changed = true
  end
  if j.pin_s and (not head or j.pin < head) then head = j.pin end
  if j.changed then
    if j.old then rem[#rem + 1] = j.old end
    add[#add + 1] = "0"
    if j.one then
      -- one payload (the usual new job): no table to sort
      local score = j.map[j.one]
      add[#add + 1] = j.E .. "\0\0" .. j.place .. cmsgpack.pack(j.pin, j.one, score ~= j.pin and score or nil)
    elseif j.lazy then
      -- the queued member as it is (its place byte changed when it moved),
      -- then the appended payloads
      local tail, len = j.tail, #j.tail
      for k = 2, len, 2 do if tail[k] == j.pin then tail[k] = nil end end -- (a score = pin is left out)
      local more = len > 0 and cmsgpack.pack(unpack(tail, 1, len)) or ""
      if j.place == j.place0 then
        add[#add + 1] = j.old .. more
      else
        add[#add + 1] = j.E .. "\0\0" .. j.place .. j.old:sub(#j.E + 4) .. more
      end
    else
      add[#add + 1] = j.E .. "\0\0" .. job_record(j.place, j.pin, sort_payloads(j.map, j.base))
    end
  end
end
chunks("ZREM", K.jobs, rem, 1000)
chunks("ZADD", K.jobs, add, 2000)
chunks("ZADD", K.later, later, 2000)
if #ready > 0 then
  chunks("RPUSH", K.ready, ready, 1000)
  redis.call("SET", K.tail, score_str(tail))
end
-- A job's own windows: a queued job keeps its own (HSETNX)
if wins then
  for n, w in pairs(wins) do
    if n ~= "name" then redis.call("HSETNX", K.windows, ARGV[3 + (n - 1) * 5], w) end
  end
end
-- Expiry per payload (P expires:ID, P expiring): only when this push has
-- one or the shard has some.
if expiry or redis.call("EXISTS", K.expiring) == 1 then
  for i = 3, last, 5 do
    local n = (i - 3) / 5 + 1
    local id, payload, at = ARGV[i], ARGV[i + 4], expiry and expiry[n]
    local ek = expires_key(P, id)
    if at then
      -- a payload queued without an expiry keeps none (the later one wins)
      local old = tonumber(redis.call("HGET", ek, payload))
      if new_payload[n] or old then
        if not old or old < tonumber(at) then redis.call("HSET", ek, payload, at) end
        redis.call("SADD", K.expiring, id)
      end
    elseif redis.call("SISMEMBER", K.expiring, id) == 1 then
      redis.call("HDEL", ek, payload)
      if redis.call("EXISTS", ek) == 0 then redis.call("SREM", K.expiring, id) end
    end
  end
end
-- The head after the push: the old one or a new job's perform_in (a merge
-- keeps the queued job's).
if channel ~= "" and head and (not before or head < tonumber(before)) then
  wake(channel, P)
end
return { added, head and score_str(head) or false }
