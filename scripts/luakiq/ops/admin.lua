-- luakiq.ops.admin: the operator's side of a queue: stats, listings and admin
-- actions. Used by the CLI and the HTTP API (same functions, same output), in
-- whatever VM they run in. Per-queue numbers are sums over shards; every shard
-- is asked in one pipeline.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local errors = require "luakiq.lib.errors"
local client = require "luakiq.client"
local hosts = require "luakiq.ops.hosts"
local json = require "luakiq.json"
local hooks = require "luakiq.lib.hooks"

local M = {}

local PAGE = 1000
-- The deepest offset a listing walks to. The walk is linear in the offset
-- and the web thread answers one request at a time: five listings at offset
-- 900,000 of 1M jobs held /metrics for 38.5 s. Deeper pages go by cursor,
-- whose cost is the same at any depth.
M.OFFSET_MAX = 5000

local function worker_of(cfg, name)
  local w = cfg.by_name[name]
  if not w then errors.notfound("unknown worker '" .. tostring(name) .. "'") end
  return w
end
M.worker_of = worker_of

local function prefixes(cfg, w)
  local list = {}
  for s = 0, w.shards_count - 1 do list[s + 1] = keys.prefix(cfg.namespace, w.queue_name, s) end
  return list
end

local function check(r, what)
  if type(r) == "table" and r.err then error("redis: " .. what .. ": " .. r.err, 0) end
  return r
end
M.check = check -- (a pipeline reply: raises "redis: WHAT: ..." on an error reply)

-- The outcomes reply.lua counts (stats.lua's values 10..14, in order).
M.REPLY_OUTCOMES = { "accepted", "duplicate", "conflict", "stale", "unknown" }

-- Per-worker numbers: fresh, retries, length, morgue_length, lag, processed,
-- failed, busy, expired, waiting (jobs that wait for a reply), replies (per
-- outcome, since the queue began, all hosts), snoozed, stale (payloads
-- dropped by monotonic), cancelled, paused. One pipeline over
-- every shard of every worker, and NS:paused.
function M.worker_stats(conn, cfg)
  local cmds, owners = {}, {}
  for _, w in ipairs(cfg.workers) do
    for _, p in ipairs(prefixes(cfg, w)) do
      cmds[#cmds + 1] = { script = "stats", p }
      owners[#owners + 1] = w.name
    end
  end
  cmds[#cmds + 1] = { "HGETALL", keys.paused(cfg.namespace) }
  local replies = conn:pipeline(cmds)
  local flat = check(table.remove(replies), "paused")
  local paused = {}
  for i = 1, #flat, 2 do paused[flat[i]] = true end
  local now, by = core.now(), {}
  for _, w in ipairs(cfg.workers) do
    by[w.name] = { fresh = 0, retries = 0, length = 0, morgue_length = 0, lag = 0,
                   processed = 0, failed = 0, busy = 0, expired = 0, waiting = 0, replies = {},
                   snoozed = 0, stale = 0, cancelled = 0,
                   paused = paused[w.queue_name] or false }
    for _, o in ipairs(M.REPLY_OUTCOMES) do by[w.name].replies[o] = 0 end
  end
  for i, r in ipairs(replies) do
    check(r, "stats")
    local s = by[owners[i]]
    s.fresh = s.fresh + tonumber(r[1])
    s.retries = s.retries + tonumber(r[2])
    s.morgue_length = s.morgue_length + tonumber(r[3])
    -- (a perform_in before the epoch, -1e308 say, counts as the epoch: lag
    -- stays the seconds since 1970 at most, never 1e+308)
    local head = tonumber(r[4])
    if head then head = math.max(head, 0) end
    if head and now - head > s.lag then s.lag = now - head end
    s.processed = s.processed + (tonumber(r[5]) or 0)
    s.failed = s.failed + (tonumber(r[6]) or 0)
    s.busy = s.busy + tonumber(r[7])
    s.expired = s.expired + (tonumber(r[8]) or 0)
    s.waiting = s.waiting + (tonumber(r[9]) or 0)
    for k, o in ipairs(M.REPLY_OUTCOMES) do s.replies[o] = s.replies[o] + (tonumber(r[9 + k]) or 0) end
    s.snoozed = s.snoozed + (tonumber(r[15]) or 0)
    s.stale = s.stale + (tonumber(r[16]) or 0)
    s.cancelled = s.cancelled + (tonumber(r[17]) or 0)
  end
  for _, s in pairs(by) do s.length = s.fresh + s.retries end
  return by
end

-- Lowkiq's /api/v1/stats shape, plus expired (payloads that expired before
-- they ran, since the queue began), waiting (jobs that wait for a reply:
-- luakiq.await; not in length); snoozed (jobs put back by a snooze, since
-- the queue began) only when some were, and stale (payloads dropped at
-- fetch) only for a monotonic worker, so the shape of a worker that uses
-- neither stays Lowkiq's.
function M.stats(conn, cfg)
  local by = M.worker_stats(conn, cfg)
  local out = { total = { length = 0, morgue_length = 0, lag = 0, expired = 0, waiting = 0 }, by_worker = {} }
  for name, s in pairs(by) do
    out.by_worker[name] = { length = s.length, morgue_length = s.morgue_length, lag = s.lag, expired = s.expired,
                            waiting = s.waiting, paused = s.paused or nil, -- only when paused: "paused": true
                            snoozed = s.snoozed > 0 and s.snoozed or nil }
    if s.snoozed > 0 then out.total.snoozed = (out.total.snoozed or 0) + s.snoozed end
    if cfg.by_name[name] and cfg.by_name[name].monotonic then out.by_worker[name].stale = s.stale end
    out.total.length = out.total.length + s.length
    out.total.morgue_length = out.total.morgue_length + s.morgue_length
    out.total.expired = out.total.expired + s.expired
    out.total.waiting = out.total.waiting + s.waiting
    if s.lag > out.total.lag then out.total.lag = s.lag end
  end
  return out
end

-- Whether v nests deeper than `left` levels: such a payload is shown as its
-- stored text, as no JSON answer could hold it.
local function too_deep(v, left)
  if type(v) ~= "table" then return false end
  if left == 0 then return true end
  for _, x in pairs(v) do
    if too_deep(x, left - 1) then return true end
  end
  return false
end

-- A reader of one listing's stored values through cfg's hooks: read(what,
-- raw) -> ok, value, with what "load_payload" or "load_error". Each call is
-- bounded by hook_timeout (luakiq.lib.hooks: past it, one line); after one
-- ran past it, the listing's other values are shown as stored without a
-- call, so a hook that loops costs a listing one hook_timeout.
local function reader(cfg)
  local cut = false
  return function(what, raw)
    if cut then return false, raw end
    local ok, v, timed_out = hooks.call(what, nil, cfg[what], raw)
    cut = timed_out
    return ok, v
  end
end

-- Decodes one flat jobs.lua/busy.lua record list into tables (read: the
-- listing's reader; nil: one of its own).
-- kind "queue": id, perform_in, retry_count, error, n, payload, score...
-- kind "morgue": id, updated_at, error, n, payload, score...
local function load_records(cfg, r, kind, start, read)
  read = read or reader(cfg)
  local out, i = {}, start
  local n = tonumber(r[i - 1])
  for _ = 1, n do
    local rec = { id = r[i] }
    if kind == "morgue" then
      rec.updated_at = tonumber(r[i + 1])
      i = i + 2
    else
      rec.perform_in, rec.retry_count = tonumber(r[i + 1]), tonumber(r[i + 2])
      i = i + 3
    end
    local err = r[i]
    if err ~= "" then
      local ok, e = read("load_error", err)
      rec.error = ok and e or err
    end
    local np = tonumber(r[i + 1])
    i = i + 2
    rec.payloads = {}
    for k = 1, np do
      local ok, v = read("load_payload", r[i])
      if ok and too_deep(v, client.MAX_PAYLOAD_DEPTH) then ok = false end -- (written by another client)
      rec.payloads[k] = { ok and v or r[i], tonumber(r[i + 1]) }
      i = i + 2
    end
    out[#out + 1] = rec
  end
  return out
end

local sort_field = { id = "id", perform_in = "perform_in", retry_count = "retry_count", updated_at = "updated_at" }

-- A listing's cursor: where each shard's part of it stands (how many of the
-- shard's jobs in the range came before), plus the position in the whole
-- listing and the listing itself (what, order, dir and the range's bounds),
-- so the next page needs only the cursor and a cursor of another listing is
-- refused. Text: "what:order:dir:pos:o1,o2,...:MIN:MAX" (one count per
-- shard; the bounds in hex: they may hold any byte).
local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
local function cursor_text(what, order, dir, pos, offs, min, max)
  return ("%s:%s:%s:%d:%s:%s:%s"):format(what, order, dir, pos, table.concat(offs, ","), hex(min), hex(max))
end

-- The listing a cursor continues: {what, order, dir, min, max, pos, offs};
-- callers take what the user did not give from it. Raises on junk.
function M.cursor_listing(text)
  local w, o, d, pos, list, mn, mx = tostring(text):match("^(%a+):([%a_]+):(%a+):(%d+):([%d,]*):(%x+):(%x+)$")
  if not w or #mn % 2 == 1 or #mx % 2 == 1 then errors.input("bad cursor '" .. tostring(text) .. "'") end
  local offs = {}
  for n in list:gmatch("%d+") do offs[#offs + 1] = tonumber(n) end
  local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
  return { what = w, order = o, dir = d, min = unhex(mn), max = unhex(mx), pos = tonumber(pos), offs = offs }
end

local function cursor_parse(text, what, order, dir, min, max, shards)
  local c = M.cursor_listing(text)
  if c.what ~= what or c.order ~= order or c.dir ~= dir then
    errors.input("the cursor is for " .. c.what .. " by " .. c.order .. " " .. c.dir .. ", not " .. what .. " by " ..
      order .. " " .. dir)
  end
  if c.min ~= min or c.max ~= max then
    errors.input(("the cursor is for the range %s to %s, not %s to %s"):format(c.min, c.max, min, max))
  end
  if #c.offs ~= shards then errors.input("the cursor is for " .. #c.offs .. " shards, the worker has " .. shards) end
  return c.pos, c.offs
end

-- The listing's order on records: (sort field, id), ascending or descending.
local function order_less(order, dir)
  local field = sort_field[order]
  return function(a, b)
    local x, y = a[field], b[field]
    if x == y then x, y = a.id, b.id end
    if dir == "desc" then return x > y end
    return x < y
  end
end

-- Every shard's next part of the listing from its offset offs[s]: per[s] =
-- its records in the listing's order. keys: sort keys only ({id, field}, no
-- payloads), for walking to an offset.
local function shard_parts(conn, cfg, prefs, what, order, dir, min, max, offs, limit, keys_only)
  local field = sort_field[order]
  local cmds = {}
  for s, p in ipairs(prefs) do
    cmds[s] = { script = "jobs", p, what, order, dir, min, max, offs[s], limit, keys_only and "keys" or nil }
  end
  local per, read = {}, reader(cfg)
  for s, r in ipairs(conn:pipeline(cmds)) do
    -- a bad range or order is the caller's mistake (exit 2 / HTTP 400), not a failure
    if type(r) == "table" and r.err then
      local code, why = errors.redis_code(r.err)
      if code == "BADRANGE" then errors.input("bad listing request: " .. why:gsub("^luakiq jobs: ", "")) end
    end
    check(r, "jobs")
    local list = {}
    if keys_only then
      for i = 2, #r, 2 do
        local rec = { id = r[i] }
        if field ~= "id" then rec[field] = tonumber(r[i + 1]) end
        list[#list + 1] = rec
      end
    else
      list = load_records(cfg, r, what, 2, read)
    end
    per[s] = list
  end
  return per
end

-- The first records of every shard's part, merged: { {rec, shard}, ... }.
local function merged(per, less, counts)
  local all = {}
  for s, list in ipairs(per) do
    for i = 1, counts and counts[s] or #list do all[#all + 1] = { list[i], s } end
  end
  table.sort(all, function(a, b) return less(a[1], b[1]) end)
  return all
end

-- Moves offs (each shard's offset) `left` records further along the
-- listing, in steps of PAGE sort keys per shard (no script call does more).
-- A step needs no sort: every record up to the lowest last key of the shards
-- that filled their part (T) is certainly before anything not yet read, so
-- each shard moves past its records <= T, until the records <= T outnumber
-- what is left; only those are then merged. Returns how far it got.
local function walk(conn, cfg, prefs, what, order, dir, min, max, offs, left)
  local less, moved = order_less(order, dir), 0
  while left > 0 do
    local per = shard_parts(conn, cfg, prefs, what, order, dir, min, max, offs, PAGE, true)
    local T
    for _, list in ipairs(per) do
      local last = list[PAGE]
      if last and (not T or less(last, T)) then T = last end
    end
    local counts, total = {}, 0
    for s, list in ipairs(per) do
      local c = #list
      if T then
        c = 0
        while c < #list and not less(T, list[c + 1]) do c = c + 1 end
      end
      counts[s], total = c, total + c
    end
    if total <= left then
      for s = 1, #prefs do offs[s] = offs[s] + counts[s] end
      moved, left = moved + total, left - total
      if not T then break end -- every shard's part was read whole: the listing ends here
    else
      local all = merged(per, less, counts)
      for i = 1, left do offs[all[i][2]] = offs[all[i][2]] + 1 end
      moved, left = moved + left, 0
    end
  end
  return moved
end

-- Listing across shards: what "queue"|"morgue", order, dir "asc"|"desc",
-- min/max in Redis range syntax, limit (<= 1000), and where to start: a
-- cursor (from an earlier page) or an offset. Each shard is asked for limit
-- records from its own offset (O(log n + limit) per shard, jobs.lua), so a
-- page costs O(shards x limit) whatever its depth. An offset without a cursor
-- is walked to in steps of PAGE sort keys: every script call stays bounded
-- (Redis never busy for long), the walk itself is linear in the offset.
-- Returns the page and next(n): the cursor that continues after its first n
-- records (the HTTP API asks for one more than it shows).
function M.list(conn, cfg, worker_name, what, order, dir, min, max, limit, offset, cursor)
  min, max = tostring(min), tostring(max) -- (as Redis gets them; a cursor names them so)
  local w = worker_of(cfg, worker_name)
  limit = math.min(limit or 100, PAGE + 1) -- + 1: callers ask one more to see if there are more
  if not sort_field[order] then errors.input("unknown order '" .. tostring(order) .. "'") end
  local prefs = prefixes(cfg, w)
  local pos, offs = 0, {}
  if not cursor and (offset or 0) > M.OFFSET_MAX then
    errors.input(("offset must be at most %d (a listing walks to it record by record): page deeper with the " ..
      "cursor of the page before (next, --cursor)"):format(M.OFFSET_MAX))
  end
  if cursor then
    pos, offs = cursor_parse(cursor, what, order, dir, min, max, #prefs)
  else
    for s = 1, #prefs do offs[s] = 0 end
    pos = walk(conn, cfg, prefs, what, order, dir, min, max, offs, offset or 0)
  end
  local all = merged(shard_parts(conn, cfg, prefs, what, order, dir, min, max, offs, limit, false), order_less(order, dir))
  local page = {}
  for i = 1, math.min(#all, limit) do page[i] = all[i][1] end
  local function next_cursor(n)
    local o = { unpack(offs) }
    for i = 1, math.min(n or #page, #page) do o[all[i][2]] = o[all[i][2]] + 1 end
    return cursor_text(what, order, dir, pos + math.min(n or #page, #page), o, min, max)
  end
  return page, next_cursor, pos
end
-- Jobs in flight, over every shard. With now (the listings of `luakiq jobs
-- DIR WORKER busy` and the HTTP API), each record also has fetched_at (when
-- fetch.lua took its batch) and running (whole seconds since then, >= 0);
-- both are absent for a batch fetched by a host that did not record it.
function M.busy(conn, cfg, worker_name, now)
  local w = worker_of(cfg, worker_name)
  local cmds = {}
  for i, p in ipairs(prefixes(cfg, w)) do cmds[i] = { script = "busy", p, now and "fetched_at" or nil } end
  local all, read = {}, reader(cfg)
  for _, r in ipairs(conn:pipeline(cmds)) do
    check(r, "busy")
    local fetched_at = now and tonumber(r[#r])
    for _, rec in ipairs(load_records(cfg, r, "queue", 2, read)) do
      if fetched_at then
        rec.fetched_at, rec.running = fetched_at, math.max(0, math.floor(now - fetched_at))
      end
      all[#all + 1] = rec
    end
  end
  return all
end

-- A P tags entry ("\n"-joined) as a list; nil for none.
local function tags_list(text)
  if type(text) ~= "string" or text == "" then return nil end
  local list = {}
  for t in text:gmatch("[^\n]+") do list[#list + 1] = t end
  return list
end

-- One job by id (job.lua on its shard): {id, state = "queued" | "in_flight"
-- | "waiting" | "dead", perform_in, retry_count, error, payloads = {{payload, score}},
-- tags (the list, for a job that has some)};
-- queued and in flight also priority (100 by default) and, for a job with
-- its own windows, windows (the list) and timezone;
-- in flight also host (the holder's HOST:PID), fetched_at, running (whole
-- seconds since the fetch) and queued_payloads when more of the id wait
-- behind the running batch; waiting (luakiq.await): attempt, since,
-- deadline, heartbeat_deadline and key when set, replied = true once its
-- reply came (its call has not run yet), queued_payloads for payloads
-- pushed meanwhile (they run after the reply was handled); dead:
-- updated_at instead of perform_in and retry_count; done and cancelled (a
-- worker with keep_done: its record, docs/redis.md "Finished jobs"):
-- finished_at, attempts and, for done, result when call:result gave one.
-- An id that is nowhere raises "job ID of WORKER not found"
-- (errors.missing: exit 1, HTTP 404).
-- The commands that read id's record (job.lua and its tags), for job_record.
local function job_cmds(cfg, w, id, cmds)
  local P = keys.prefix(cfg.namespace, w.queue_name, keys.shard(id, w.shards_count))
  -- (a worker with keep_done: no record older than keep_done is answered)
  cmds[#cmds + 1] = { script = "job", P, id, (w.keep_done or 0) > 0 and core.now() - w.keep_done or nil }
  cmds[#cmds + 1] = { "HGET", P .. "tags", id }
end

-- The record of id from the replies of job_cmds (r: job.lua's, tags: the
-- HGET's), or nil when it is nowhere (read: as load_records's).
local function job_record(cfg, id, r, tags, now, read)
  read = read or reader(cfg)
  check(r, "job")
  check(tags, "tags")
  local state = r[1]
  if state == "" then return nil end
  local function err_of(e)
    if e == "" then return nil end
    local ok, v = read("load_error", e)
    return ok and v or e
  end
  local function payloads(i)
    local list, n = {}, tonumber(r[i])
    for k = 1, n do
      local raw = r[i + 2 * k - 1]
      local ok, v = read("load_payload", raw)
      list[k] = { ok and v or raw, tonumber(r[i + 2 * k]) }
    end
    return list, i + 2 * n + 1
  end
  local rec = { id = id, state = state, tags = tags_list(tags) }
  local i
  if state == "finished" then
    local ok, f = pcall(json.decode, r[2])
    if not ok or type(f) ~= "table" then return nil end -- (junk: as if gone)
    rec.state, rec.finished_at, rec.attempts, rec.result = f.state, f.finished_at, f.attempts, f.result
    return rec
  end
  if state == "dead" then
    rec.updated_at, rec.error = tonumber(r[2]), err_of(r[3])
    rec.payloads = payloads(4)
    return rec
  end
  rec.perform_in, rec.retry_count, rec.error = tonumber(r[2]), tonumber(r[3]), err_of(r[4])
  -- priority and the job's own windows ("ZONE|HH:MM-HH:MM,..." in Redis)
  local function fields(k)
    rec.priority = tonumber(r[k]) or 100
    local zone, list = tostring(r[k + 1]):match("^(.-)|(.*)$")
    if zone then
      rec.timezone, rec.windows = zone, {}
      for w in list:gmatch("[^,]+") do rec.windows[#rec.windows + 1] = w end
    end
  end
  if state == "waiting" then
    -- attempt, "waiting" | "replied", since, deadline, heartbeat deadline,
    -- key, then the job: perform_in, retry_count, priority, windows,
    -- payloads, then the held payloads
    rec.attempt, rec.replied = tonumber(r[2]), r[3] == "replied" or nil
    rec.since, rec.deadline, rec.heartbeat_deadline = tonumber(r[4]), tonumber(r[5]), tonumber(r[6])
    rec.key = r[7] ~= "" and r[7] or nil
    rec.perform_in, rec.retry_count, rec.error = tonumber(r[8]), tonumber(r[9]), nil
    fields(10)
    rec.payloads, i = payloads(12)
    local held = payloads(i)
    if #held > 0 then rec.queued_payloads = held end
    return rec
  end
  if state == "queued" then
    fields(5)
    rec.payloads = payloads(7)
    return rec
  end
  rec.host = r[5]:match("^(.*):[^:]*$") or (r[5] ~= "" and r[5] or nil) -- HOST:PID:RANDOM -> HOST:PID
  rec.fetched_at = tonumber(r[6])
  if rec.fetched_at and now then rec.running = math.max(0, math.floor(now - rec.fetched_at)) end
  fields(7)
  rec.payloads, i = payloads(9)
  if r[i] then rec.queued_payloads = payloads(i) end
  return rec
end

function M.job(conn, cfg, worker_name, id, now)
  local w = worker_of(cfg, worker_name)
  if type(id) ~= "string" or id == "" then errors.input("the job id must be a non-empty string") end
  local cmds = {}
  job_cmds(cfg, w, id, cmds)
  local replies = conn:pipeline(cmds)
  local rec = job_record(cfg, id, replies[1], replies[2], now)
  if not rec then error(errors.missing(("job %s of %s not found (not queued, in flight, waiting or dead)"):format(id, w.name)), 0) end
  return rec
end

-- Where id is in every worker: the records of M.job with worker added, by
-- worker (none where it is nowhere); one pipeline. A queue shared by
-- several workers is read once (under the first of them).
function M.find(conn, cfg, id, now)
  id = client.id_string(id, "id")
  local cmds, names, seen = {}, {}, {}
  for _, w in ipairs(cfg.workers) do
    local P = keys.prefix(cfg.namespace, w.queue_name, keys.shard(id, w.shards_count))
    if not seen[P] then
      seen[P] = true
      job_cmds(cfg, w, id, cmds)
      names[#names + 1] = w.name
    end
  end
  local replies, out, read = #cmds > 0 and conn:pipeline(cmds) or {}, {}, reader(cfg)
  for i, name in ipairs(names) do
    local rec = job_record(cfg, id, replies[2 * i - 1], replies[2 * i], now, read)
    if rec then
      rec.worker = name
      out[#out + 1] = rec
    end
  end
  table.sort(out, function(a, b) return a.worker < b.worker end)
  return out
end

-- The jobs tagged `tag` in every worker, queued, in flight or dead:
-- {worker, id, state, tags, ...the job's record (M.job)}, by worker and id,
-- at most `limit` (default and most 1000), and whether there were more.
-- Every shard is read with tagged.lua in steps of SCAN_COUNT ids, all
-- shards of all workers in one pipeline per round (which also drops the
-- entries of ids that are gone); then each id's record by job.lua. A queue
-- shared by several workers is read once (under the first of them).
local SCAN_COUNT = 200
function M.tagged(conn, cfg, tag, limit, now)
  local ok, why = client.tag_check(tag)
  if not ok then errors.input(why) end
  limit = math.min(limit or PAGE, PAGE)
  local shards, done = {}, {}
  for _, w in ipairs(cfg.workers) do
    for _, p in ipairs(prefixes(cfg, w)) do
      if not done[p] then
        done[p] = true
        shards[#shards + 1] = { prefix = p, worker = w.name, cursor = "0" }
      end
    end
  end
  local found, more = {}, false
  local open = shards
  while #open > 0 and not more do
    local cmds = {}
    for i, sh in ipairs(open) do cmds[i] = { script = "tagged", sh.prefix, tag, sh.cursor, SCAN_COUNT } end
    local left = {}
    for i, r in ipairs(conn:pipeline(cmds)) do
      check(r, "tagged")
      local sh = open[i]
      for k = 2, #r, 3 do
        local key = sh.prefix .. "\0" .. r[k] -- (SSCAN may give an id twice)
        if not done[key] then
          done[key] = true
          found[#found + 1] = { worker = sh.worker, id = r[k] }
        end
      end
      sh.cursor = r[1]
      if sh.cursor ~= "0" then left[#left + 1] = sh end
    end
    open = left
    -- (a page's worth found: stop, but only after a whole round, so the
    -- jobs listed do not depend on the order of the replies)
    if #found > limit then more = true end
  end
  table.sort(found, function(a, b)
    if a.worker ~= b.worker then return a.worker < b.worker end
    return a.id < b.id
  end)
  local out, n, read = {}, math.min(#found, limit), reader(cfg)
  for from = 1, n, PAGE / 2 do
    local cmds, to = {}, math.min(from + PAGE / 2 - 1, n)
    for i = from, to do job_cmds(cfg, cfg.by_name[found[i].worker], found[i].id, cmds) end
    local replies = conn:pipeline(cmds)
    for i = from, to do
      local k = 2 * (i - from) + 1
      local rec = job_record(cfg, found[i].id, replies[k], replies[k + 1], now, read)
      if rec then -- (else gone between the two reads: left out)
        rec.worker = found[i].worker
        out[#out + 1] = rec
      end
    end
  end
  return out, more or #found > limit
end

-- The recurring jobs of config.lua: {name, worker, id, cron | every,
-- timezone, last (the last claimed tick, from Redis; nil before the first),
-- next (the next tick after now)}, in config order.
function M.schedules(conn, cfg, now)
  local cron = require "luakiq.lib.cron"
  local cmds, out = {}, {}
  for i, s in ipairs(cfg.schedules) do
    local w = cfg.by_name[s.worker]
    cmds[i] = { "HGET", keys.prefix(cfg.namespace, w.queue_name, keys.shard(s.id, w.shards_count)) .. "schedules", s.name }
  end
  local replies = #cmds > 0 and conn:pipeline(cmds) or {}
  for i, s in ipairs(cfg.schedules) do
    local nxt
    if s.every then nxt = (math.floor(now / s.every) + 1) * s.every else nxt = cron.next(s.spec, s.zone, now) end
    out[i] = { name = s.name, worker = s.worker, id = s.id, cron = s.cron, every = s.every,
               timezone = s.cron and (s.timezone or "UTC") or nil,
               last = tonumber(check(replies[i], "schedules") or nil), next = nxt }
  end
  return out
end

-- How long a pause waits for the live hosts' acknowledgements (seconds).
M.PAUSE_WAIT = 2

-- Pauses (pause = true) or resumes one worker's queue on every host
-- (pause.lua; docs/operations.md, "Pause"). A pause returns once every live
-- host (luakiq.ops.hosts's list) acknowledged it (luakiq.ops.hosts.sync_pause:
-- from then on no call of the queue starts there), or after PAUSE_WAIT
-- seconds with those that did not in `missing` (their tokens). A resume
-- does not wait. Returns {worker =, paused =, changed =, hosts = how many
-- acknowledged (pause only), missing = {token...} or nil}.
function M.pause(conn, cfg, worker_name, pause)
  local w = worker_of(cfg, worker_name)
  local cmd = { script = "pause", keys.paused(cfg.namespace), w.queue_name, pause and "1" or "0",
                keys.wake_channel(cfg.namespace) }
  if not pause then for _, p in ipairs(prefixes(cfg, w)) do cmd[#cmd + 1] = p end end
  local r = check(conn:pipeline({ cmd })[1], "pause")
  local out = { worker = w.name, paused = pause, changed = r[1] == 1 }
  if not pause then return out end
  local live = {}
  for _, v in ipairs(hosts.list(conn, cfg.namespace)) do live[#live + 1] = v.token end
  local missing = hosts.await_pause(conn, cfg.namespace, r[2], live, M.PAUSE_WAIT)
  out.hosts = #live - #missing
  if #missing > 0 then out.missing = missing end
  return out
end

-- Runs a paged per-shard action until it reports nothing left, or once per
-- shard for explicit ids. make(prefix, ids_or_nil) builds the call. Returns the
-- total of the first reply field.
local function per_shard(conn, cfg, w, ids, make)
  local total = 0
  if ids then
    local groups, order = {}, {}
    for i, id in ipairs(ids) do
      id = client.id_string(id, "id " .. i)
      local s = keys.shard(id, w.shards_count)
      if not groups[s] then groups[s] = {} order[#order + 1] = s end
      table.insert(groups[s], id)
    end
    local cmds = {}
    for i, s in ipairs(order) do cmds[i] = make(keys.prefix(cfg.namespace, w.queue_name, s), groups[s]) end
    for _, r in ipairs(#cmds > 0 and conn:pipeline(cmds) or {}) do
      total = total + tonumber(type(check(r, "action")) == "table" and r[1] or r)
    end
    return total
  end
  for _, p in ipairs(prefixes(cfg, w)) do
    while true do
      local r = check(conn:pipeline({ make(p, nil) })[1], "action")
      local n = tonumber(type(r) == "table" and r[1] or r)
      total = total + n
      if n == 0 or type(r) ~= "table" or tonumber(r[2]) == 0 then break end
    end
  end
  return total
end

local function with_ids(cmd, ids)
  if ids then for _, id in ipairs(ids) do cmd[#cmd + 1] = id end end
  return cmd
end

-- Each action returns {done = count}. ids nil means all.
function M.morgue_requeue(conn, cfg, worker_name, ids)
  local w, now = worker_of(cfg, worker_name), core.now()
  local ch = runtime.wake_arg(conn, cfg)
  return { requeued = per_shard(conn, cfg, w, ids, function(p, list)
    return with_ids({ script = "morgue_requeue", p, ch, now, PAGE }, list)
  end) }
end

function M.morgue_delete(conn, cfg, worker_name, ids)
  local w = worker_of(cfg, worker_name)
  return { deleted = per_shard(conn, cfg, w, ids, function(p, list)
    return with_ids({ script = "morgue_delete", p, PAGE }, list)
  end) }
end

-- The units holds and throttle registrations (member "wait:ID",
-- luakiq.runner.await) of the ids whose waits delete.lua or kill.lua
-- removed, given back now rather than at the wait's deadline: every id of
-- ids that has no wait left (one whose on_reply call runs, or whose
-- awaiting call has not ended, keeps its hold).
local function release_holds(conn, cfg, w, ids)
  if not require("luakiq.runner.await").holds_units(w) then return end
  local cmds, list = {}, {}
  for i, id in ipairs(ids) do
    list[i] = client.id_string(id, "id " .. i)
    local P = keys.prefix(cfg.namespace, w.queue_name, keys.shard(list[i], w.shards_count))
    cmds[#cmds + 1] = { "HEXISTS", P .. "waits", list[i] }
    cmds[#cmds + 1] = { "HEXISTS", P .. "waits:new", list[i] }
  end
  local r = conn:pipeline(cmds)
  local ns, q = cfg.namespace, w.queue_name
  local release = { script = "units_release", numkeys = 3, keys.running(ns, q), keys.units(ns, q), keys.calls(ns, q) }
  for i, id in ipairs(list) do
    if check(r[2 * i - 1], "HEXISTS") == 0 and check(r[2 * i], "HEXISTS") == 0 then release[#release + 1] = "wait:" .. id end
  end
  if #release > 3 then check(conn:pipeline({ release })[1], "units_release") end
end

function M.delete_queued(conn, cfg, worker_name, ids)
  local w = worker_of(cfg, worker_name)
  local n = per_shard(conn, cfg, w, ids, function(p, list)
    return with_ids({ script = "delete", p }, list)
  end)
  release_holds(conn, cfg, w, ids)
  return { deleted = n }
end

-- The given ids' jobs to the morgue: queued ones and those that wait for a
-- reply (kill.lua), not those in flight.
function M.kill(conn, cfg, worker_name, ids)
  local w, now = worker_of(cfg, worker_name), core.now()
  local n = per_shard(conn, cfg, w, ids, function(p, list)
    return with_ids({ script = "kill", p, now }, list)
  end)
  release_holds(conn, cfg, w, ids)
  return { killed = n }
end

-- Cancels jobs by id (cancel.lua, one call per shard of the ids): a
-- queued or waiting job is removed, a running one is marked and its host
-- stops it at its call's next wait. Returns {[id] = "queued" | "waiting" |
-- "running" | "not_found"} and the ids in order.
function M.cancel(conn, cfg, worker_name, ids)
  local w, now = worker_of(cfg, worker_name), core.now()
  local ch = runtime.wake_arg(conn, cfg)
  local groups, order = {}, {}
  for i, id in ipairs(ids) do
    id = client.id_string(id, "id " .. i)
    ids[i] = id
    local s = keys.shard(id, w.shards_count)
    if not groups[s] then groups[s] = {} order[#order + 1] = s end
    table.insert(groups[s], id)
  end
  local cmds = {}
  for i, s in ipairs(order) do
    -- (keep_done, keep_done_max: the finished jobs a shard keeps, lib/done.lua)
    cmds[i] = with_ids({ script = "cancel", keys.prefix(cfg.namespace, w.queue_name, s), "cancel", now, ch,
                         w.keep_done, w.keep_done_max }, groups[s])
  end
  local states = {}
  for i, r in ipairs(#cmds > 0 and conn:pipeline(cmds) or {}) do
    check(r, "cancel")
    for k, id in ipairs(groups[order[i]]) do states[id] = r[k] end
  end
  return states, ids
end

-- ids nil: every queued job not yet due; else only those ids.
function M.perform_all_now(conn, cfg, worker_name, ids)
  local w, now = worker_of(cfg, worker_name), core.now()
  local ch = runtime.wake_arg(conn, cfg)
  return { changed = per_shard(conn, cfg, w, ids, function(p, list)
    return with_ids({ script = "perform_now", p, ch, now, PAGE }, list)
  end) }
end

function M.kill_failed(conn, cfg, worker_name)
  local w, now = worker_of(cfg, worker_name), core.now()
  return { killed = per_shard(conn, cfg, w, nil, function(p)
    return { script = "kill_failed", p, now, PAGE }
  end) }
end

function M.delete_failed(conn, cfg, worker_name)
  local w = worker_of(cfg, worker_name)
  return { deleted = per_shard(conn, cfg, w, nil, function(p)
    return { script = "delete_failed", p, PAGE }
  end) }
end

return M
