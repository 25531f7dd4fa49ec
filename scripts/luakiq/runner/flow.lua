-- luakiq.runner.flow: which jobs of a fetched call may run now (docs/configuration.md,
-- "Flow control"): the worker's concurrency units (concurrency, cost) and its
-- throttle (throttle, label), across every host. Runs in a worker thread's
-- VM, for its runner (luakiq.runner), between loading a call's payloads and
-- the perform call.
--
-- Redis (one slot per queue, {QUEUE}, apart from the shards'):
--   running  ZSET call member (the shard prefix) -> expiry (Redis ms)
--   units    HASH member -> the call's cost
--   calls    HASH member -> JSON {host, since, jobs = {{id, cost, label}...}}
--            (throttle only), and calls_version, raised by each registration.
-- A throttled call costs one extra round trip: the snapshot of the running
-- calls rides in the fetch's pipeline (read_cmd), the registration
-- (units_acquire.lua) is the extra one, and its reply carries the snapshot
-- for the fetch's next call. A registration decided on a snapshot
-- another registration has outdated is refused; the throttle is asked again
-- on a fresh snapshot (at most TRIES times, then the call waits like one the
-- throttle held). So every decision is taken on the exact running set: the
-- throttle's limits hold across hosts, not only per host. A release never
-- outdates a snapshot (fewer running calls cannot make a decision unsafe).
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local hooks = require "luakiq.lib.hooks"

local M = {}

local BACKOFF = 0.05 -- seconds (jittered x1-2) before a held or refused shard fetches again
local TRIES = 5

-- The queue's four keys (running, units, calls, calls_version).
local function qkeys(t, q)
  local ns = t.cfg.namespace
  return keys.running(ns, q), keys.units(ns, q), keys.calls(ns, q), keys.calls_version(ns, q)
end

-- The snapshot command for h's queue (throttled workers only), sent in the
-- same pipeline as h's fetch.
function M.read_cmd(t, h)
  local r, u, c, v = qkeys(t, h.def.queue_name)
  return { script = "running_read", numkeys = 4, r, u, c, v }
end

-- running_read.lua's reply (from its index `from`: units_acquire.lua's
-- carries one after its status) -> version, {member -> call}.
local function parse_snapshot(r, from)
  if type(r) ~= "table" or r.err then error("running_read.lua failed: " .. tostring(r and r.err), 0) end
  from = from or 1
  local calls = {}
  for i = from + 1, #r, 2 do
    local ok, c = pcall(json.decode, r[i + 1])
    if ok and type(c) == "table" then calls[r[i]] = c end
  end
  return r[from], calls
end

-- h waits BACKOFF (jittered) before its next fetch; the thread's wait ends then.
local function back_off(t, h)
  local at = core.mono() + BACKOFF * (1 + math.random())
  h.units_until = at
  if not t.wake_at or at < t.wake_at then t.wake_at = at end
end

-- The record of a hook of h's fetch (luakiq.lib.hooks: what the main VM
-- needs should the thread get stuck in it); done: the ids the fetch has done.
function M.hook_rec(t, h, done)
  return { worker = h.def.name, shard = h.shard, batch = h.batch, token = t.el and t.token or nil, key = h.prefix,
           done = done }
end

-- One job's cost: cost(id, payloads) or the number (default 1), bounded by
-- hook_timeout (rec: M.hook_rec's; nil inside a call). (Also a waiting
-- job's units hold: luakiq.runner.await.)
local function cost_of(w, id, payloads, rec)
  local c = w.cost
  if type(c) == "function" then
    if rec then rec.id = id end
    local ok, v, timed_out = hooks.call("cost", rec, c, id, payloads)
    if not ok or type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
      if not timed_out then log.error("cost failed; using 1", { worker = w.name, id = id, error = tostring(v) }) end
      return 1
    end
    return v
  end
  return c or 1
end

M.cost_of = cost_of

-- A waiting job's label for the throttle (label(id, payloads), a hook
-- luakiq.await calls inside the call: luakiq.lib.hooks), or nil; an error is
-- logged and counts as none (the call is not failed by it).
function M.label_of(w, id, payloads)
  if not w.label then return nil end
  local ok, v, timed_out = hooks.call("label", nil, w.label, id, payloads)
  if not ok then
    if not timed_out then log.error("label failed", { worker = w.name, id = id, error = tostring(v) }) end
    return nil
  end
  if v ~= nil then return tostring(v) end
end

-- The running list the throttle sees: every registered call's jobs but
-- this shard's own (its previous call is over: one call per shard), and
-- the jobs that wait for a reply and hold their units (member "wait:ID",
-- luakiq.runner.await), each once: a job whose call awaited it is in both
-- until the call's registration goes.
local function running_list(calls, own)
  local list, seen, waits = {}, {}, {}
  local function add(c, j)
    list[#list + 1] = { id = j[1], cost = j[2], label = j[3] ~= json.null and j[3] or nil,
                        host = c.host, since = c.since }
  end
  for member, c in pairs(calls) do
    if member:sub(1, 5) == "wait:" then
      waits[#waits + 1] = c
    elseif member ~= own then
      for _, j in ipairs(c.jobs or {}) do
        seen[j[1]] = true
        add(c, j)
      end
    end
  end
  for _, c in ipairs(waits) do
    local j = (c.jobs or {})[1]
    if j and not seen[j[1]] then add(c, j) end
  end
  table.sort(list, function(a, b) return a.since < b.since end)
  return list
end

-- Asks the throttle about each job, in order, on the snapshot: the jobs it
-- lets run are added to ctx.running before the next job is asked. Returns
-- run (jobs), held (count), later ({id, at}...), the registration's jobs,
-- or nil, err when the throttle or label raised. Both are bounded by
-- hook_timeout (rec: M.hook_rec's): past it, no label; the job runs.
local function decide(t, h, jobs, batch, calls, costs, rec)
  local w = h.def
  local running = running_list(calls, h.prefix)
  local now = core.now()
  local run, later, reg, held = {}, {}, {}, 0
  for _, job in ipairs(jobs) do
    local label
    rec.id, rec.retry_count = job.id, job.retry_count
    if w.label then
      local ok, v, timed_out = hooks.call("label", rec, w.label, job.id, batch[job.id])
      if not ok and not timed_out then return nil, "label failed: " .. tostring(v) end
      if ok and v ~= nil then label = tostring(v) end
    end
    local ctx = { worker = w.name, id = job.id, payloads = batch[job.id], now = now, running = running,
                  label = label, cost = costs[job.id] }
    local ok, v, timed_out = hooks.call("throttle", rec, w.throttle, ctx)
    if not ok and not timed_out then return nil, "throttle failed: " .. tostring(v) end
    if timed_out or v == true or v == nil then
      run[#run + 1] = job
      reg[#reg + 1] = { job.id, costs[job.id], label or json.null }
      running[#running + 1] = { id = job.id, cost = costs[job.id], label = label, host = t.host, since = now }
    elseif type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge then
      later[#later + 1] = { job.id, v }
    else
      held = held + 1 -- false (or anything else): keeps its place
    end
  end
  return run, held, later, reg
end

-- Which of a call's jobs (loaded, payloads by id in batch) run now, taking
-- their units and registering them. Returns run (the jobs: all of them
-- without throttle) and sets h.later ({id, at}...: requeue) and h.held
-- (true: some jobs keep their place, and h backs off); run is empty when
-- nothing runs now, and then the third result, refused, is true when the
-- units (or a running set that kept changing) refused the call: the rest
-- of the fetch cannot run either. Returns nil, err when the throttle raised
-- (the call fails). Raises on a Redis error. done: the ids the fetch has
-- done (the hooks' record).
function M.admit(t, h, loaded, batch, done)
  local w = h.def
  local rec = M.hook_rec(t, h, done)
  local costs, total = {}, 0
  for _, job in ipairs(loaded) do
    rec.retry_count = job.retry_count
    local c = cost_of(w, job.id, batch[job.id], rec)
    costs[job.id] = c
    total = total + c
  end
  local r, u, c, v = qkeys(t, w.queue_name)
  local version, calls
  if w.throttle then
    -- the snapshot from the fetch's pipeline, or from the last registration
    -- of this fetch; a read of its own otherwise
    local snap = h.snapshot or t.conn:pipeline({ M.read_cmd(t, h) })[1]
    version, calls = parse_snapshot(snap)
  end
  for try = 1, TRIES do
    local run, held, later, reg = loaded, 0, {}, nil
    if w.throttle then
      run, held, later, reg = decide(t, h, loaded, batch, calls, costs, rec)
      if not run then return nil, held end -- (held is decide's error then)
      total = 0
      for _, j in ipairs(reg) do total = total + j[2] end
    end
    local function settle_lists()
      if #later > 0 then
        h.later = h.later or {}
        for _, l in ipairs(later) do h.later[#h.later + 1] = l end
      end
      if held > 0 then h.held = true end
    end
    if #run == 0 then
      settle_lists()
      if held > 0 then back_off(t, h) end
      return run
    end
    local cost = w.concurrency and math.min(total, w.concurrency) or total
    local cmd = { script = "units_acquire", numkeys = w.throttle and 4 or 2, r, u }
    if w.throttle then cmd[#cmd + 1], cmd[#cmd + 2] = c, v end
    cmd[#cmd + 1] = h.prefix
    cmd[#cmd + 1] = string.format("%.17g", cost)
    cmd[#cmd + 1] = w.concurrency and tostring(w.concurrency) or ""
    cmd[#cmd + 1] = t.lease_ms
    local res
    if w.throttle then
      cmd[#cmd + 1] = version
      cmd[#cmd + 1] = json.encode { host = t.host, since = core.now(), jobs = reg }
      -- the reply carries a fresh snapshot: for a retry when this
      -- registration is refused as outdated, or for the fetch's next call
      res = t.conn:pipeline({ cmd })[1]
      if type(res) ~= "table" or res.err then error("units_acquire.lua failed: " .. tostring(res and res.err), 0) end
      if res[1] ~= 0 then h.snapshot = { unpack(res, 3) } end
      if res[1] == 2 then version, calls = parse_snapshot(h.snapshot) end -- outdated: ask again
    else
      res = t.conn:pipeline({ cmd })[1]
      if type(res) ~= "table" or res.err then error("units_acquire.lua failed: " .. tostring(res and res.err), 0) end
    end
    if res[1] == 1 then
      if cost > 0 or w.throttle then h.units = w.queue_name end
      settle_lists()
      return run
    end
    if res[1] == 0 then break end
    if try == TRIES then log.debug("throttle: the running set kept changing; waiting", { worker = w.name }) end
  end
  -- refused (no units, or outdated TRIES times): nothing runs, the jobs keep
  -- their place, and so does the rest of the fetch
  h.held = true
  back_off(t, h)
  return {}, nil, true
end

-- The call of h is over: its units and registration go back with the
-- thread's next Redis call (t.releases, sent by luakiq.runner.fetch's pending_acks).
function M.done(t, h)
  local q = h.units
  if not q then return end
  h.units = nil
  local list = t.releases[q]
  if not list then list = {} t.releases[q] = list end
  list[#list + 1] = h.prefix
end

-- The release command of queue q's members (pending_acks).
function M.release_cmd(t, q, members)
  local r, u, c = qkeys(t, q)
  local cmd = { script = "units_release", numkeys = 3, r, u, c }
  for _, m in ipairs(members) do cmd[#cmd + 1] = m end
  return cmd
end

return M
