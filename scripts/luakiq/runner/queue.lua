-- luakiq.runner.queue: the worker side of the queue scripts (fetch.lua, fail.lua,
-- release.lua): building their calls and reading their replies.
-- A batch carries the id fetch.lua gave it; acks and failures name that id,
-- so a call re-sent after a lost reply can never ack or fail another batch.
local core = require "luakiq.core"
local log = require "luakiq.lib.log"
local keys = require "luakiq.lib.keys"
local new_table = require "table.new" -- (LuaJIT's: a table sized at once)
local M = {}

-- The fetch.lua call (docs/redis.md) on the shard whose keys' prefix is
-- prefix, as a pipeline command: every caller's (the runner's fetches and
-- acks, unacked.settle, the specs and benchmarks) is built here. token: the
-- holder's lease token, for lease_ms; limit: the most jobs to fetch (a
-- number; 0 only acks and renews the lease); ack: the id of the batch in
-- flight to ack (nil or "": none); at_most_once: the worker's delivery is
-- "at_most_once" (a new holder sends a dead holder's jobs to the morgue);
-- now: the time (default core.now()); fin: nil, or a worker's finished-jobs
-- options (M.finishing). parse_fetch reads the reply.
function M.fetch_cmd(prefix, token, lease_ms, limit, ack, at_most_once, now, fin)
  local cmd = { script = "fetch", prefix, token, lease_ms, now or core.now(), limit, ack or "", limit > 0 and "1" or "0",
                at_most_once and "1" or "0" }
  if fin then
    -- fetch.lua's optional sections: "mono", ttl; "done", keep_s, keep_max,
    -- then the ack's id/result pairs (last)
    if fin.mono_ttl then cmd[#cmd + 1], cmd[#cmd + 2] = "mono", fin.mono_ttl end
    if fin.keep then
      local n = #cmd
      cmd[n + 1], cmd[n + 2], cmd[n + 3] = "done", fin.keep, fin.keep_max
      local res = ack and ack ~= "" and fin.results
      if res then for i = 1, #res do cmd[n + 3 + i] = res[i] end end
    end
  end
  return cmd
end

-- Worker w's finished-jobs options for fetch_cmd, or nil when it keeps no
-- finished jobs and is not monotonic (its fetches send nothing more):
-- {keep =, keep_max =, mono_ttl =, results = nil} (results: the id/result
-- JSON pairs of the batch in flight, call:result, set by the runner).
function M.finishing(w)
  local keep = w.keep_done or 0
  if not (keep > 0 or w.monotonic) then return nil end
  return { keep = keep > 0 and keep or nil, keep_max = w.keep_done_max,
           mono_ttl = w.monotonic and w.monotonic_ttl or nil }
end

-- The values of a busy record, decoded by core.unpack (host/record.c) into
-- one table a thread's VM reuses (it runs one decode at a time); entries
-- past the record's count are left over from a longer record.
local vals = {}

-- A busy record (docs/redis.md, "Records": perform_in and retry_count as
-- strings, priority and windows or false, then payload, score or nil, ...)
-- as the job fetch.lua delivers; nil when it does not decode or has no
-- payload (junk someone else wrote: the caller drops it).
-- (the jobs of a fetch mostly share one perform_in string, 17 digits whose
-- conversion cost ~1.2k instructions a job: the last one's number is kept;
-- retry counts are few and small: each string's number is kept)
local last_pin_s, last_pin = nil, nil
-- A payload's score when the record names one (it differs from the job's
-- perform_in: given by the producer, or kept through a retry), by the
-- payload's table; weak, so it goes with the fetch (M.score).
local SCORES = setmetatable({}, { __mode = "k" })
local RC_NUM = {}
local function busy_job(id, err, rec, from)
  if type(rec) ~= "string" then return nil end
  local n = core.unpack(rec, vals, from)
  if not n or n < 6 then return nil end
  local pin_s, rc_s = vals[1], vals[2]
  local pin = last_pin
  if pin_s ~= last_pin_s then
    pin = tonumber(pin_s)
    last_pin_s, last_pin = pin_s, pin
  end
  local rc = rc_s ~= nil and RC_NUM[rc_s]
  if not rc then
    rc = tonumber(rc_s) or -1
    if rc >= -1 and rc <= 1000 and type(rc_s) == "string" then RC_NUM[rc_s] = rc end
  end
  local pls, np = new_table(math.floor((n - 3) / 2), 0), 0
  for k = 5, n, 2 do
    if type(vals[k]) ~= "string" then return nil end
    np = np + 1
    local p = { vals[k] } -- (perform sees no scores)
    if k < n and vals[k + 1] ~= nil then SCORES[p] = vals[k + 1] end
    pls[np] = p
  end
  local job = { id = id, perform_in = pin or core.now(), retry_count = rc,
                error = err ~= "" and err or nil, payloads = pls }
  if type(vals[4]) == "string" and vals[4] ~= "" then job.windows = vals[4] end
  return job
end

-- A job of a fetch reply: e is a fresh job's member of P jobs
-- (docs/redis.md, "Records": esc(id), "\0\0", the place "r", then perform_in
-- as a number and payload, score or nil, ...), or esc(id) .. "\0\0b" and its
-- busy record. Returns the job (nil when it does not decode, as busy_job)
-- and its id (nil without one).
local function member_job(e, err)
  if type(e) ~= "string" then return nil end
  local id, _, at = keys.member_split(e)
  if not id then return nil end
  local place = e:byte(at)
  if place == 98 then return busy_job(id, err, e, at + 1), id end -- "b"
  if place ~= 114 then return nil, id end -- (not "r": junk)
  local n = core.unpack(e, vals, at + 1)
  if not n or n < 3 or type(vals[1]) ~= "number" then return nil, id end
  local pls, np = new_table(math.floor(n / 2), 0), 0
  for k = 2, n, 2 do
    if type(vals[k]) ~= "string" then return nil, id end
    np = np + 1
    local p = { vals[k] } -- (perform sees no scores)
    if k < n and vals[k + 1] ~= nil then SCORES[p] = vals[k + 1] end
    pls[np] = p
  end
  return { id = id, perform_in = vals[1], retry_count = -1, error = err ~= "" and err or nil, payloads = pls }, id
end

-- Reads one fetch.lua reply (h: {prefix =, worker =, shard =}, whose; read
-- only): the one decoder of fetch replies (the runner's, unacked.settle's,
-- the specs' and benchmarks'). Returns {jobs = {...}, bytes = their
-- records' bytes, head = number|nil, batch = the batch id in flight or nil
-- (nil when no job came), best = the priority of the best due job left or
-- nil (100 or none), windows = true when some job has windows of its own
-- (job.windows, their text), restored = the jobs of a dead holder this
-- call put back, acked = the jobs its ack acked, waits = how many jobs the
-- "waits" section flagged or nil: each such job has job.wait = {kind =
-- "reply" | "timeout" | "heartbeat", attempt = number, value = the reply's
-- JSON or the seconds that lapsed}: a reply or deadline of a job that
-- waited, not a job to perform (docs/redis.md, "Waits")}, or
-- {leased = true, pttl = ms left of its lease, holder = its token (nil
-- after a reshard froze the shard), reshard = true when a reshard froze the
-- shard} when another holder has the shard's lease. Raises on an
-- error reply. The caller keeps the batch id (the runner: h.batch).
function M.parse_fetch(r, h)
  if type(r) ~= "table" or r.err then
    error("fetch failed on " .. h.prefix .. ": " .. tostring(r and r.err or r), 0)
  end
  if r[1] == "LEASE" then
    return { leased = true, pttl = tonumber(r[2]), reshard = r[3] == "reshard", holder = r[3] == "holder" and r[4] or nil }
  end
  local batch, head, restored = r[2], r[3], tonumber(r[4])
  if restored and restored > 0 then
    log.warn("restored " .. restored .. " in-flight jobs of a previous holder", { worker = h.worker, shard = h.shard })
  end
  -- one element per job (member_job), then optional sections: "errors"
  -- (the jobs that carry one: count, then job number, error), "best" (the
  -- priority of the best due job left, with priorities) and, last,
  -- "waits" (count, then job number, kind, attempt, value)
  local n = tonumber(r[6])
  local i, best, errs, waits = 7 + n, nil, nil, nil
  while r[i] do
    if r[i] == "errors" then
      errs = {}
      local c = tonumber(r[i + 1])
      for k = 1, c do errs[tonumber(r[i + 2 * k])] = r[i + 2 * k + 1] end
      i = i + 2 + 2 * c
    elseif r[i] == "best" then
      best = tonumber(r[i + 1])
      i = i + 2
    elseif r[i] == "waits" then
      waits = {}
      local c = tonumber(r[i + 1])
      for k = 0, c - 1 do
        local b = i + 2 + 4 * k
        waits[tonumber(r[b])] = { kind = r[b + 1], attempt = tonumber(r[b + 2]), value = r[b + 3] }
      end
      i = i + 2 + 4 * c
    else
      break
    end
  end
  local jobs, windows, bytes, nwaits = {}, nil, 0, nil
  for k = 1, n do
    -- (defaults in busy_job and member_job: a nil here would break the
    -- failure path and loop on the batch forever)
    local rec = r[6 + k]
    local job, id = member_job(rec, errs and errs[k] or "")
    if job then
      bytes = bytes + #rec
      jobs[#jobs + 1] = job
      windows = windows or job.windows ~= nil
      if waits and waits[k] then
        job.wait = waits[k]
        nwaits = (nwaits or 0) + 1
      end
    else
      log.warn("dropped job " .. tostring(id) .. ": its busy record does not decode (junk written by another client)",
        { worker = h.worker, shard = h.shard })
    end
  end
  return { jobs = jobs, head = head ~= "" and tonumber(head) or nil, batch = n > 0 and batch or nil, best = best,
           windows = windows, bytes = bytes, restored = restored, acked = tonumber(r[5]), waits = nwaits }
end

function M.ids(jobs)
  local ids = {}
  for i, job in ipairs(jobs) do ids[i] = job.id end
  return ids
end

-- The score of p, one of job.payloads of a fetch parse_fetch read (a record
-- leaves out a score equal to the job's perform_in).
function M.score(job, p)
  return SCORES[p] or job.perform_in
end

-- A shard's batch in flight as the scripts that end it (fail.lua, bury.lua)
-- take it: the connection, the shard's prefix, the holder's lease token and
-- lease_ms, the batch id (nil: none in flight), and the worker's name and
-- the shard's number for log lines. (The runner makes one for a handler
-- when a fetch fails or settles, luakiq.runner.call's in_flight; fail_stuck
-- from a stuck call's record.)
function M.in_flight(conn, prefix, token, lease_ms, batch, worker, shard)
  return { conn = conn, prefix = prefix, token = token, lease_ms = lease_ms, batch = batch,
           worker = worker, shard = shard }
end

-- The failure path as one fail.lua call, for b (M.in_flight). done: ids of
-- its batch already performed with success (acked by the same call); the
-- batch's ids neither failed nor done go back to the queue unchanged.
-- Returns the morgued payloads as {id=, payload=bytes, score=} tables.
-- Either way the batch is no longer in flight for its holder (the caller
-- forgets its id).
-- later: {{id, at}...}, ids of the batch not performed that go back with
-- perform_in = at (a throttle's or a window's "later"; not a failure).
-- own: {{id, value}...}, ids with an outcome of their own (fail.lua's
-- "done", M.snoozed, M.failed_own).
-- b.fin (M.finishing's, set by the runner): the done ids are kept as
-- finished (keep_done) and their scores remembered (monotonic).
function M.fail(b, now, max_retry_count, err, jobs, retry_at, done, later, own)
  local cmd = { script = "fail", b.prefix, b.token, b.lease_ms, now, b.batch or "", max_retry_count, err }
  for i, job in ipairs(jobs) do
    cmd[#cmd + 1] = job.id
    cmd[#cmd + 1] = retry_at[i]
  end
  for _, id in ipairs(done or {}) do
    cmd[#cmd + 1] = id
    cmd[#cmd + 1] = "done"
  end
  for _, l in ipairs(later or {}) do
    cmd[#cmd + 1] = l[1]
    cmd[#cmd + 1] = string.format("at:%.17g", l[2])
  end
  for _, o in ipairs(own or {}) do
    cmd[#cmd + 1] = o[1]
    cmd[#cmd + 1] = o[2]
  end
  local fin = b.fin
  if fin then -- (the done ids are recorded: pairs whose id is "", fail.lua)
    if fin.mono_ttl then cmd[#cmd + 1], cmd[#cmd + 2] = "", "mono:" .. fin.mono_ttl end
    if fin.keep then
      cmd[#cmd + 1], cmd[#cmd + 2] = "", "done:" .. fin.keep .. ":" .. fin.keep_max
      local res = fin.results or {}
      for i = 1, #res, 2 do
        local n = #cmd
        cmd[n + 1], cmd[n + 2], cmd[n + 3], cmd[n + 4] = "", "result", res[i], res[i + 1]
      end
    end
  end
  local r = b.conn:pipeline({ cmd })[1]
  if type(r) ~= "table" or r.err then error("fail.lua failed: " .. tostring(r and r.err), 0) end
  local morgued = {}
  if r[1] ~= "OK" then
    log.warn("lease lost before the failure or partial ack was recorded; the next holder runs the batch again",
      { worker = b.worker, shard = b.shard })
    return morgued
  end
  local n = tonumber(r[3]) or 0
  for j = 0, n - 1 do
    morgued[#morgued + 1] = { id = r[5 + 3 * j], payload = r[6 + 3 * j], score = tonumber(r[7 + 3 * j]) }
  end
  return morgued
end

-- fail.lua's value for an id snoozed until at (not a failure), and for an
-- id failed with an error of its own (err, already dumped) under
-- max_retry_count, retried at retry_at.
function M.snoozed(at) return string.format("snooze:%.17g", at) end
function M.failed_own(retry_at, max_retry_count, err)
  return string.format("fail:%.17g:%d:", retry_at, max_retry_count) .. err
end

-- Partial ack (fail.lua with only "done" ids): acks the done ids of b's
-- batch (M.in_flight) and puts the rest back in the queue unchanged. Used
-- when a thread stops, or has held fetched jobs too long, before performing
-- them all.
function M.settle(b, done, later)
  return M.fail(b, core.now(), 0, "", {}, {}, done, later)
end

-- Moves payloads that cannot be loaded ({id=, payload=bytes, error=dumped})
-- out of f's batch (M.in_flight) into the morgue (bury.lua), at once, and
-- sets b.score of each buried one. Returns false when the shard's lease is
-- gone (another holder has the batch now: the caller forgets its id).
function M.bury(f, now, bad)
  local cmd = { script = "bury", f.prefix, f.token, f.lease_ms, now, f.batch or "" }
  for _, b in ipairs(bad) do
    cmd[#cmd + 1] = b.id
    cmd[#cmd + 1] = b.payload
    cmd[#cmd + 1] = b.error
  end
  local r = f.conn:pipeline({ cmd })[1]
  if type(r) ~= "table" or r.err then error("bury.lua failed: " .. tostring(r and r.err), 0) end
  if r[1] ~= "OK" then
    log.warn("lease lost before unloadable payloads were moved to the morgue; the next holder handles the batch",
      { worker = f.worker, shard = f.shard })
    return false
  end
  for i, b in ipairs(bad) do b.score = tonumber(r[2 + i]) end
  return true
end

-- Gives shard leases back (release.lua): each of list ({prefix =, ...}:
-- handlers, or M.in_flight records) under token.
function M.release(conn, list, token)
  local cmds = {}
  for i, h in ipairs(list) do cmds[i] = { script = "release", h.prefix, token } end
  if #cmds > 0 then conn:pipeline(cmds) end
end

return M
