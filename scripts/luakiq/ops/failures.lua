-- luakiq.ops.failures: the stored errors grouped (qless's failure groups;
-- docs/operations.md, "Failures"). Used by `luakiq failures` and the HTTP API
-- (same functions, same output), in whatever VM they run in.
--
-- Nothing is kept for it: every call walks the error hashes of every shard
-- (P errors: queued jobs waiting for a retry; P morgue:errors: dead jobs)
-- with failures.lua, which scans STEP entries per call and groups them by
-- error_group (scripts/redis/lib/groups.lua, the one masking rule). So it
-- cannot drift from the jobs, and no call keeps Redis busy: a walk costs
-- (jobs with an error) / STEP script calls, pipelined over the shards. Jobs
-- in flight are not counted (their previous error waits in P busy:errors
-- until the call ends).
--
-- Group actions walk the same way with the group as a filter and hand each
-- step's ids to the admin actions of one job list (luakiq.ops.admin): dead jobs
-- to morgue_requeue / morgue_delete, queued ones to perform_now / delete.
-- They act on the jobs that are in the group when the walk meets them.
local errors = require "luakiq.lib.errors"
local keys = require "luakiq.lib.keys"
local admin = require "luakiq.ops.admin"
local json = require "luakiq.json"

local M = {}

M.STEP = 500      -- HSCAN COUNT of one failures.lua call
M.SAMPLES = 5     -- ids shown per group and worker
local WHERE = { "queued", "dead" }

local function check(r) return admin.check(r, "failures") end

-- The workers to walk: the one named (unknown: errors.notfound), else all.
local function workers_of(cfg, name)
  if name ~= nil and name ~= "" then return { admin.worker_of(cfg, name) } end
  return cfg.workers
end

-- The walk's stops, in a fixed order: {worker, prefix, where} per shard and
-- error hash of every worker given.
local function stops(cfg, ws)
  local out = {}
  for _, w in ipairs(ws) do
    for s = 0, w.shards_count - 1 do
      for _, where in ipairs(WHERE) do
        out[#out + 1] = { w = w, p = keys.prefix(cfg.namespace, w.queue_name, s), where = where }
      end
    end
  end
  return out
end

-- Walks every stop to its end, one pipeline per round (one failures.lua
-- call per stop not finished yet); calls visit(stop, reply) per reply.
local function walk(conn, list, group, samples, visit)
  local cursors = {}
  for i = 1, #list do cursors[i] = "0" end
  local started = false
  while true do
    local cmds, which = {}, {}
    for i, st in ipairs(list) do
      if not started or cursors[i] ~= "0" then
        cmds[#cmds + 1] = { script = "failures", st.p, st.where, cursors[i], M.STEP, group, samples }
        which[#which + 1] = i
      end
    end
    started = true
    if #cmds == 0 then return end
    for k, r in ipairs(conn:pipeline(cmds)) do
      local i = which[k]
      cursors[i] = check(r)[1]
      visit(list[i], r)
    end
  end
end

-- Every group, most jobs first (ties by text):
-- {error = GROUP, count, queued, dead, workers = {NAME = {count, queued,
-- dead, ids = {a few ids, sorted}}}}. worker_name: only that worker.
function M.list(conn, cfg, worker_name)
  local by, out = {}, {}
  walk(conn, stops(cfg, workers_of(cfg, worker_name)), "", M.SAMPLES, function(st, r)
    local i = 3
    for _ = 1, tonumber(r[2]) do
      local g, n, k = r[i], tonumber(r[i + 1]), tonumber(r[i + 2])
      local e = by[g]
      if not e then
        e = { error = g, count = 0, queued = 0, dead = 0, workers = {} }
        by[g], out[#out + 1] = e, e
      end
      local pw = e.workers[st.w.name]
      if not pw then
        pw = { count = 0, queued = 0, dead = 0, ids = json.array() }
        e.workers[st.w.name] = pw
      end
      e.count, pw.count = e.count + n, pw.count + n
      e[st.where], pw[st.where] = e[st.where] + n, pw[st.where] + n
      for j = 1, k do pw.ids[#pw.ids + 1] = r[i + 2 + j] end
      i = i + 3 + k
    end
  end)
  for _, e in ipairs(out) do
    for _, pw in pairs(e.workers) do
      table.sort(pw.ids)
      for j = #pw.ids, M.SAMPLES + 1, -1 do pw.ids[j] = nil end
    end
  end
  table.sort(out, function(a, b)
    if a.count ~= b.count then return a.count > b.count end
    return a.error < b.error
  end)
  return out
end

local function need_group(group)
  if type(group) ~= "string" or group == "" then errors.input("give the group: the error text as listed") end
  return group
end

-- A page of the jobs of one group: {jobs = {{worker, id, state = "queued" |
-- "dead"}...}, next = cursor for the next page (nil at the end)}. The walk
-- goes stop by stop; cursor "I:C" resumes at stop I, HSCAN cursor C. A page
-- ends after the step that reached limit, so it may hold up to STEP more.
function M.jobs(conn, cfg, worker_name, group, cursor, limit)
  need_group(group)
  local list = stops(cfg, workers_of(cfg, worker_name))
  local i, c = 1, "0"
  if cursor and cursor ~= "" then
    local a, b = tostring(cursor):match("^(%d+):(%d+)$")
    if not a or tonumber(a) < 1 or tonumber(a) > #list then errors.input("bad cursor '" .. tostring(cursor) .. "'") end
    i, c = tonumber(a), b
  end
  local jobs = {}
  while i <= #list and #jobs < limit do
    local st = list[i]
    local r = check(conn:pipeline({ { script = "failures", st.p, st.where, c, M.STEP, group, 0 } })[1])
    for k = 2, #r do jobs[#jobs + 1] = { worker = st.w.name, id = r[k], state = st.where } end
    c = r[1]
    if c == "0" then i = i + 1 end
  end
  return { jobs = jobs, next = i <= #list and (i .. ":" .. c) or nil }
end

-- Requeues every job of the group: dead ones go back to the queue (due now,
-- retry_count -1, their error kept: morgue_requeue), queued ones waiting for
-- a retry become due now (perform_now). Returns {requeued = dead jobs moved,
-- due_now = queued jobs made due}.
-- Deletes every job of the group (action "delete"): {deleted = n}.
function M.act(conn, cfg, worker_name, group, action)
  need_group(group)
  if action ~= "requeue" and action ~= "delete" then errors.input("say requeue or delete") end
  local fns = action == "requeue" and { dead = admin.morgue_requeue, queued = admin.perform_all_now }
              or { dead = admin.morgue_delete, queued = admin.delete_queued }
  local done = {}
  walk(conn, stops(cfg, workers_of(cfg, worker_name)), group, 0, function(st, r)
    if #r < 2 then return end
    local ids = {}
    for k = 2, #r do ids[k - 1] = r[k] end
    for field, n in pairs(fns[st.where](conn, cfg, st.w.name, ids)) do
      local key = (action == "requeue" and st.where == "queued") and "due_now" or field
      done[key] = (done[key] or 0) + n
    end
  end)
  if action == "requeue" then return { requeued = done.requeued or 0, due_now = done.due_now or 0 } end
  return { deleted = done.deleted or 0 }
end

return M
