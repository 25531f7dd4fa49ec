-- luakiq.runner: the loop of one worker thread (runs in that thread's own VM).
--
-- The thread owns a group of shards (from the splitter). Its scheduler picks
-- the next shard; process() runs one batch of it:
--   fetch.lua (acks the previous batch in the same call) -> load payloads ->
--   server middlewares around perform -> on error, fail.lua (one atomic step).
-- A successful batch is acked by its shard's next fetch when that comes
-- within poll_interval / 10, else by the next Redis call this thread makes
-- (another shard's fetch, or the flush before it waits), so the steady state
-- costs one round trip and one script call per batch. Leases
-- (docs/guarantees.md) fence every shard.
--
-- Calls in flight: each fetch-and-perform of a shard runs as a *task* (a
-- coroutine). A perform call that waits in luakiq's I/O (luakiq.lib.wait) parks
-- its task; the thread goes on with other shards (at most one task per shard,
-- so per-id order and exclusion hold) and resumes the task when its wait is
-- over or its deadline comes. Redis calls of the runner itself never yield.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local middleware = require "luakiq.lib.middleware"
local queue = require "luakiq.runner.queue"
local unacked = require "luakiq.runner.unacked"
local runtime = require "luakiq.lib.runtime"
local wait = require "luakiq.lib.wait"
local timing = require "luakiq.ops.timing"
local failure = require "luakiq.lib.failure"
local flow = require "luakiq.runner.flow"
local retry = require "luakiq.lib.retry"
local windows = require "luakiq.lib.windows"
local luakiq = require "luakiq"
local new_table = require "table.new" -- (LuaJIT's: a table sized at once)

-- The worker thread's states, named once (host/runner.c) and exported as numbers.
local STATE = core.states

local M = {}

local POLL_EVERY = 0.002 -- seconds between mailbox checks of a busy thread (ctx.poll)

local function traceback(e)
  if type(e) == "string" then return debug.traceback(e, 2) end
  return e
end

-- A handler: the thread's state of one shard it serves (or may serve).
function M.new_handler(t, w, shard)
  return {
    worker = w.name, shard = shard, def = w, index = 0,
    prefix = keys.prefix(t.cfg.namespace, w.queue_name, shard),
    timing = t.timing,
    perform = middleware.chain(t.cfg.middlewares, function(worker, batch, call) return worker.perform(batch, call) end),
  }
end

-- Builds the per-thread state and the scheduler context.
local function setup(boot)
  local cfg = runtime.load(boot.dir, boot.overrides)
  local conn, err = runtime.connect(cfg, cfg.redis_retry or 30)
  if not conn then error(err, 0) end
  local t = {
    cfg = cfg, conn = conn, token = boot.token,
    host = (boot.token or ""):match("^(.*):[^:]*$") or boot.token, -- HOST:PID (throttle's running list)
    lease_ms = math.floor(cfg.lease_ttl * 1000),
    handlers = {}, by_prefix = {},
    pending = {},    -- handlers whose last batch succeeded and awaits its ack -> when it is due (pending_acks)
    waiting = {},    -- handler -> {req = wait request, deadline = mono} of its parked task
    ntasks = 0,      -- tasks in flight (parked)
    in_call = {},    -- worker name -> its shards in a call now (concurrent_shards)
    refused = {},    -- prefix -> true while another holder has the lease
    paused = {}, paused_at = -math.huge, -- queue -> true while paused (NS:paused)
    releases = {},   -- queue -> shard prefixes whose calls' units go back with the next Redis call
    wake_at = nil,   -- mono: the earliest end of a handler's wait (units, a window's opening)
    win = {},        -- worker name -> {closed =, recheck = wall time} (windows)
    timing = timing.new(), -- wait and run times not written yet (luakiq.ops.timing)
    -- the per-batch debug line is built only when it is printed (its fields
    -- cost more than a blank job's whole batch otherwise)
    debug = boot.log_level == "debug",
  }
  -- Elastic hosts (luakiq.runner.elastic): boot.handlers is every shard; the thread
  -- serves its share, t.handlers, recomputed every beat (elastic_tick).
  -- t.all keeps every handler (their state survives a move out and back).
  local el = boot.elastic
  if el then
    t.el = {
      host = el.host, threads = el.threads, index = el.index, beat = el.beat, dead_after = el.dead_after,
      next = 0,          -- mono: the next look at the live hosts
      hosts_key = nil,   -- the live hosts' tokens last computed with
      held = {},         -- handler -> true while this thread holds its lease
      leaving = {},      -- handler -> true: no longer ours, its lease to give back once its call is over
      changed = false,   -- t.handlers changed: run() makes the scheduler anew
    }
  end
  t.all = {}
  for i, h in ipairs(boot.handlers) do
    local handler = M.new_handler(t, cfg.by_name[h.worker], h.shard)
    handler.index = i
    t.all[i] = handler
    if not el then
      t.handlers[i] = handler
      t.by_prefix[handler.prefix] = i
    end
  end
  return t
end

-- How long a finished batch's ack may wait for its shard's next fetch to
-- carry it (a fraction of poll_interval): a thread that serves several
-- shards goes round them, and an ack sent on its own is one more script
-- call (fetch.lua, limit 0) for Redis, ~220k instructions, where riding
-- with the fetch costs nothing. A fetch that took longer than that is acked
-- by the thread's next call, as always; a shorter one's finished work waits
-- until poll_interval / ACK_WAIT_PART after it was fetched at most
-- (docs/guarantees.md).
local ACK_WAIT_PART = 10

-- The ack calls of the pending handlers but `except` (one fetch.lua call
-- each, limit 0) whose ack is due (t.pending[h], a core.mono time: a batch
-- fetched more than poll_interval / ACK_WAIT_PART ago; force: all), and
-- the handlers they are for. The others stay pending: their shard's next
-- fetch acks them in the same call, or this thread's next call after they
-- are due, or flush before it sleeps.
-- Pending unit releases (concurrency) ride after the acks, one
-- units_release.lua call per queue: their replies come after the acks'.
-- The thread's timing observations (luakiq.ops.timing) ride last, at most once a
-- second (force: now, when there are any); the third result is the index of
-- the first of them (nil: none).
local function pending_acks(t, except, force)
  local cmds, hs = {}, {}
  local now = not force and next(t.pending) and core.mono()
  for h, due in pairs(t.pending) do
    if h ~= except and (force or due <= now) then
      hs[#hs + 1] = h
      cmds[#cmds + 1] = queue.fetch_cmd(h, t, 0, true)
    end
  end
  for q, members in pairs(t.releases) do cmds[#cmds + 1] = flow.release_cmd(t, q, members) end
  t.releases = {}
  local tcmds, tfrom = timing.cmds(t.timing, t.cfg.namespace, force), nil
  if tcmds then
    tfrom = #cmds + 1
    for _, c in ipairs(tcmds) do cmds[#cmds + 1] = c end
  end
  return cmds, hs, tfrom
end

-- Takes in h's fetch.lua reply: h.batch (the id of its batch in flight) and
-- t.refused (shards another holder leases, to log the change once). Returns
-- queue.parse_fetch's result, or nil when the lease is held elsewhere.
local function took(t, h, r)
  local res = queue.parse_fetch(r, h)
  if res.leased then
    h.batch = nil
    if t.el then t.el.held[h] = nil end
    if not t.refused[h.prefix] then
      if res.reshard then
        log.info("shard frozen by a reshard of its queue; waiting for it", { worker = h.worker, shard = h.shard })
      elseif t.el then
        -- a hand-over in progress: the previous holder finishes its call first
        log.info("shard is still held by its previous holder; waiting for it", { worker = h.worker, shard = h.shard })
      else
        log.warn("shard is leased by another host; skipping it", { worker = h.worker, shard = h.shard })
      end
      t.refused[h.prefix] = true
    end
    return nil
  end
  if t.el then t.el.held[h] = true end
  if t.refused[h.prefix] then
    log.info("shard lease acquired", { worker = h.worker, shard = h.shard })
    t.refused[h.prefix] = nil
  end
  h.batch = res.batch
  return res
end

-- Sends the pending acks (if any) alone; used before sleeping and at stop.
-- An ack Redis refused (an error reply: out of memory, say) stays pending,
-- to be sent again; the first such error is raised after the others were
-- taken in.
local function flush(t)
  if not next(t.pending) and not next(t.releases) and not t.timing.any then return end
  local cmds, hs, tfrom = pending_acks(t, nil, true)
  local r = t.conn:pipeline(cmds)
  local failed
  for i, h in ipairs(hs) do
    local ok, err = pcall(took, t, h, r[i])
    if ok then t.pending[h] = nil else failed = failed or err end
  end
  if failed then error(failed, 0) end
  timing.check(cmds, r, tfrom)
end

-- Calls the worker's retries_exhausted with dead ({id=, payloads=, error=}
-- per morgued payload). Its errors are logged, luakiq.FATAL goes through.
local function exhausted(w, dead)
  local okx, e = xpcall(w.retries_exhausted, traceback, dead)
  if not okx then
    if e == luakiq.FATAL then error(e, 0) end
    log.error("retries_exhausted failed: " .. tostring(e), { worker = w.name })
  end
end

-- Fails a batch: retry_in per job, then fail.lua (morgue at max_retry_count).
local function fail(t, h, jobs, err, tb, done)
  local cfg, w = t.cfg, h.def
  local ok, msg = pcall(cfg.format_error, err, tb)
  if not ok or type(msg) ~= "string" then msg = tostring(err) end
  local dumped = msg
  ok, dumped = pcall(cfg.dump_error, msg)
  if not ok or (dumped ~= nil and type(dumped) ~= "string") then dumped = msg end
  local now = core.now()
  local retry_at = {}
  -- luakiq.permanent: as if the retries were exhausted (max_retry_count 0
  -- in fail.lua: the morgue rule at once); luakiq.retry_after: its delay
  -- delivery = "at_most_once": every payload of the call to the morgue
  -- (fail.lua with max_retry_count -1)
  local f = failure.of(err)
  local max_rc = w.max_retry_count
  if w.delivery == "at_most_once" then max_rc = -1 elseif f and f.permanent then max_rc = 0 end
  for i, job in ipairs(jobs) do
    local count = job.retry_count + 1
    local okr, delay = true, f and f.retry_in
    if not delay then okr, delay = pcall(w.retry_in, count) end
    if not okr or type(delay) ~= "number" or delay ~= delay or delay == math.huge or delay == -math.huge then
      log.error("retry_in failed; using the default formula", { worker = w.name, error = tostring(delay) })
      delay = retry.default(count)
    end
    retry_at[i] = now + delay
  end
  local morgued = queue.fail(t.conn, h, t, now, max_rc, dumped or "", jobs, retry_at, done, h.later)
  h.batch, h.later, h.held = nil, nil, nil
  if tb then log.debug(tb) end
  log.warn("batch failed: " .. msg:match("^[^\n]*"), {
    worker = w.name, shard = h.shard, ids = queue.ids(jobs), morgued = #morgued })
  if #morgued > 0 and w.retries_exhausted then
    -- one entry per id (at most once morgues every payload of an id)
    local by_id, list = {}, {}
    for _, m in ipairs(morgued) do
      local e = by_id[m.id]
      if not e then
        e = { id = m.id, error = msg, payloads = {} }
        by_id[m.id], list[#list + 1] = e, e
      end
      local okp, v = pcall(cfg.load_payload, m.payload)
      e.payloads[#e.payloads + 1] = { okp and v or m.payload, m.score }
    end
    exhausted(w, list)
  end
end

-- Loads the payloads of fetched jobs with load_payload. A payload that
-- cannot be loaded will never load: it goes to the morgue at once, with the
-- error (bury.lua, one atomic step; retrying it would hold back the id's other
-- payloads for max_retry_count retries), and the rest of the batch runs
-- without it. Returns the jobs left and their payloads by id (jobs with no
-- payload left are dropped), or nil when the lease was lost meanwhile.
local function load_batch(t, h, jobs)
  local cfg, w = t.cfg, h.def
  -- (the usual fetch loads every payload: then no table but the batch and
  -- each job's list is made, and the jobs come back as they are)
  -- (sized at once: a table that grows allocates again as it grows)
  local batch, bad, dropped = new_table(0, #jobs), nil, false
  for i = 1, #jobs do
    local job = jobs[i]
    local pls = job.payloads
    local list, good = new_table(#pls, 0), nil
    for k = 1, #pls do
      local p = pls[k]
      local ok, v = pcall(cfg.load_payload, p[1])
      if ok then
        list[#list + 1] = v
        if good then good[#good + 1] = p end
      else
        if v == luakiq.FATAL then error(v, 0) end
        if not good then good = { unpack(pls, 1, k - 1) } end
        bad = bad or {}
        bad[#bad + 1] = { id = job.id, payload = p[1],
                          message = "load_payload failed: " .. tostring(v):match("^[^\n]*") }
      end
    end
    if #list > 0 or #pls == 0 then -- (fetch.lua never sends a job without payloads)
      if good then job.payloads = good end
      batch[job.id] = list
    else
      dropped = true
    end
  end
  if not bad then return jobs, batch end
  local kept = jobs
  if dropped then
    kept = {}
    for i = 1, #jobs do
      if batch[jobs[i].id] then kept[#kept + 1] = jobs[i] end
    end
  end
  for _, b in ipairs(bad) do
    local ok, dumped = pcall(cfg.dump_error, b.message)
    b.error = (ok and type(dumped) == "string") and dumped or b.message
  end
  local ok = queue.bury(t.conn, h, t, core.now(), bad)
  if not ok then
    h.batch = nil
    return nil
  end
  local bad_ids = {}
  for i, b in ipairs(bad) do bad_ids[i] = b.id end
  log.error("payloads that cannot be loaded went to the morgue: " .. bad[1].message,
    { worker = w.name, shard = h.shard, ids = bad_ids })
  if w.retries_exhausted then
    local dead = {}
    for i, b in ipairs(bad) do dead[i] = { id = b.id, payloads = { { b.payload, b.score } }, error = b.message } end
    exhausted(w, dead)
  end
  return kept, batch
end

-- A wait of a call that cannot park its task (no task: the call runs from
-- the specs or a scheduler without ctx.on_done): waits in place, never past
-- the call's deadline. Returns the answer for the call.
local function wait_here(req, deadline)
  if req.kind == "http" then
    while not req.transfer:done() do
      local left = deadline - core.mono()
      if left <= 0 then return wait.TIMEOUT end
      core.http_wait(math.min(left, 1), false)
    end
    return true
  elseif req.kind == "proc" then
    local stop = req["until"] and math.min(req["until"], deadline) or deadline
    while not req.proc:done() do
      local left = stop - core.mono()
      if left <= 0 then return stop < deadline and true or wait.TIMEOUT end
      req.proc:wait(math.min(left, 1))
    end
    return true
  elseif req.kind == "sleep" then
    local now = core.mono()
    if req["until"] >= deadline then
      core.sleep(deadline - now)
      return wait.TIMEOUT
    end
    core.sleep(req["until"] - now)
    return true
  end
  error("luakiq: unknown wait " .. tostring(req.kind), 0)
end

-- A call's coroutine runs perform calls one after another: it yields
-- CALL_DONE after each, and the next call resumes it with its own function
-- and arguments. The thread keeps one idle (spare_call): a coroutine made
-- per call cost the host ~0.25 us and its garbage per perform call, ~10 %
-- of a blank job's host CPU at batch 1 (LuaJIT's profiler, one thread). A
-- call that raised or yielded on its own leaves its coroutine dead or
-- stuck: never reused.
local CALL_DONE = {}
local spare_call
local function call_body(fn, w, batch, call)
  while true do
    fn(w, batch, call)
    -- (nothing of the call stays referenced while the coroutine is idle)
    fn, w, batch, call = nil, nil, nil, nil
    fn, w, batch, call = coroutine.yield(CALL_DONE)
  end
end

-- Runs one perform call (with the server middlewares) in a coroutine of its
-- own (a spare one, above), bounded by the worker's timeout
-- (core.call_begin/call_end: past it, a hook raises "timeout: ..." in the
-- call; luakiq's own waits end themselves). A wait in luakiq's I/O parks h's
-- task (the thread loop answers it) or, with no task, waits in place.
-- Returns ok, err, traceback, fenced (the call was stopped because its lease
-- may have run out: h.lease_until, core.fence).
-- C keeps the call's record (host/calls.c: what M.fail_stuck needs should
-- the call never come back): worker, shard, batch, token (an elastic
-- thread's own), the jobs' ids and retry counts (one job's as two
-- arguments: no table for C to read), and the ids done before the call in
-- its fetch (done), which it keeps per shard as done grows by each call of
-- the fetch (reset: another fetch's list).
local function run_call(h, w, batch, njobs, call, jobs, done, token)
  local co = spare_call or coroutine.create(call_body)
  spare_call = nil
  local m0 = core.mono()
  local reset = done == nil or h.rec_done ~= done
  h.rec_done = done
  local one = #jobs == 1 and jobs[1]
  local started, deadline, slot = core.call_begin(w.timeout, h.lease_until, h.worker, h.shard, h.batch, token,
    h.prefix, done, reset, h.done_slot, one and one.id or jobs, one and one.retry_count)
  h.done_slot = slot
  wait.current = co
  local ok, a, req = coroutine.resume(co, h.perform, w, batch, call)
  while ok and a ~= CALL_DONE and coroutine.status(co) == "suspended" do
    if a ~= wait.WAIT then
      ok, a = false, "perform yielded: coroutine.yield outside a coroutine of its own"
      break
    end
    core.call_pause()
    wait.current = nil
    local answer
    if h.task and coroutine.running() == h.task then
      answer = coroutine.yield(req, deadline) -- to the thread loop (task_step)
    else
      answer = wait_here(req, deadline)
    end
    -- the fence: past its lease bound, the call must not run on (the
    -- shard's next holder may already run its jobs)
    if not core.call_resume(started, deadline, w.timeout) then answer = wait.FENCED end
    wait.current = co
    ok, a, req = coroutine.resume(co, answer)
  end
  wait.current = nil
  local expired, lease_until, fenced = core.call_end(njobs)
  if ok and a == CALL_DONE and not spare_call then spare_call = co end
  h.lease_until = lease_until
  if h.timing then
    local now = core.now()
    timing.observe(h.timing, w.queue_name, "r", core.mono() - m0, now)
    if ok or not fenced then timing.count(h.timing, w.queue_name, ok and "p" or "f", njobs, now) end
  end
  if ok then return true end
  local err = a
  local tb = type(err) == "string" and debug.traceback(co, err) or debug.traceback(co, tostring(err))
  if fenced then return false, err, tb, true end
  if expired and err ~= luakiq.FATAL then
    if not (type(err) == "string" and err:find("^timeout")) then
      err = "timeout: " .. tostring(err) -- past the deadline, whatever the call raised on its way out
    end
    core.count_timeout(w.name)
  end
  return false, err, tb
end

-- perform's second argument, {worker =, shard =, delivery =}. delivery is
-- an id of the call's jobs as they are: queue, then per job (in id order)
-- its id, perform_in and payloads (hex of SHA-256, 32 digits). The same
-- jobs delivered again after a kill -9 (restored with their own perform_in)
-- give the same id, so receivers can de-duplicate on it; the same payloads
-- enqueued again later (a new perform_in) give another. Computed only when
-- read (a blank job should not pay for a hash).
local function delivery_id(queue_name, jobs)
  local list = {}
  for i, job in ipairs(jobs) do list[i] = job end
  table.sort(list, function(a, b) return a.id < b.id end)
  local parts = { queue_name }
  for _, job in ipairs(list) do
    parts[#parts + 1] = #job.id .. ":" .. job.id .. string.format("%.17g", job.perform_in) .. "#" .. #job.payloads
    for _, p in ipairs(job.payloads) do parts[#parts + 1] = #p[1] .. ":" .. p[1] end
  end
  return core.sha256(table.concat(parts, "\n")):sub(1, 32)
end
local CALL_MT = {
  __index = function(t, k)
    if k ~= "delivery" then return nil end
    local d = delivery_id(rawget(t, "queue_"), rawget(t, "jobs_"))
    rawset(t, "delivery", d)
    return d
  end,
}

-- The part of a call that runs: run (some of loaded) and their payloads.
local function only(run, loaded, batch)
  if #run == #loaded then return loaded, batch end
  local some = {}
  for _, job in ipairs(run) do some[job.id] = batch[job.id] end
  return run, some
end

-- Jobs with windows of their own (job field windows) that are closed now
-- do not run: each goes back at the next time both its windows and its
-- worker's are open (h.later; not a retry, no error). Returns the jobs that
-- run now.
local function in_windows(h, w, loaded)
  local now, run = core.now(), {}
  for _, job in ipairs(loaded) do
    local at = now
    if job.windows then
      local jw, why = windows.of_text(job.windows)
      if jw then
        at = windows.next_both(jw, w.windows_spec, now)
        if not at then
          at = now + 86400
          log.warn("the job's windows never meet the worker's: asked again in a day", { worker = w.name, id = job.id })
        end
      else
        log.warn("the job's windows are ignored: " .. why, { worker = w.name, id = job.id })
      end
    end
    if at > now then
      h.later = h.later or {}
      h.later[#h.later + 1] = { job.id, at }
    else
      run[#run + 1] = job
    end
  end
  return run
end

-- Performs jobs (a slice of h's batch in flight) as one perform call. done:
-- the ids of the batch already performed. Returns ok, err, traceback; ok is
-- true too when nothing was left to perform, nil when the lease went, "held"
-- when the throttle held all of them, "units" when flow control refused the
-- call (the rest of the fetch waits too). Raises luakiq.FATAL.
local function perform(t, h, jobs, done)
  local w = h.def
  local loaded, batch = load_batch(t, h, jobs)
  if not loaded then return nil end -- lease lost while burying
  if #loaded == 0 then return true, loaded end -- every payload was unloadable
  if h.job_windows then
    loaded, batch = only(in_windows(h, w, loaded), loaded, batch)
    if #loaded == 0 then return "held" end
  end
  if w.concurrency or w.throttle then
    -- flow control: the jobs that may run now (h.later, h.held: the others)
    local run, ferr, refused = flow.admit(t, h, loaded, batch)
    if not run then return false, loaded, ferr, nil end -- the throttle raised: the call fails
    if #run == 0 then return refused and "units" or "held" end
    loaded, batch = only(run, loaded, batch)
  end
  local njobs = #loaded
  core.set_state(STATE.performing, w.name, h.shard,
    njobs == 1 and loaded[1].id or table.concat(queue.ids(loaded), ","), h.prefix)
  local started = core.now()
  local call = setmetatable({ worker = w.name, shard = h.shard, queue_ = w.queue_name, jobs_ = loaded }, CALL_MT)
  local ok, err, tb, fenced = run_call(h, w, batch, njobs, call, loaded, done, t.el and t.token or nil)
  flow.done(t, h)
  if fenced then
    -- nothing is recorded: the fetch stays in flight for the shard's holder
    -- (another host restores it; this host, if it still holds the shard,
    -- redelivers it: heads.lua), as after a kill -9
    log.warn("call stopped: " .. tostring(err):match("^[^\n]*"),
      { worker = w.name, shard = h.shard, ids = queue.ids(loaded) })
    core.set_state(STATE.fetching, w.name, h.shard)
    return nil
  end
  core.set_state(STATE.fetching, w.name, h.shard)
  -- A luakiq.redis wait the deadline cut short leaves the thread's connection
  -- broken: make it again now, so the failure is recorded at once.
  if t.conn:broken() then t.conn:reconnect() end
  if ok then
    if t.debug then
      log.debug("batch done",
        { worker = w.name, shard = h.shard, ids = queue.ids(loaded), duration = core.now() - started })
    end
    return true, loaded
  end
  if err == luakiq.FATAL then error(err, 0) end
  return false, loaded, err, tb
end

-- How many jobs h's next fetch takes: the worker's fetch_size, or, when it
-- adapts (config.lua, fetch_auto), what h's jobs performed in about
-- fetch_time (h.fetch_n, from fetch_adapt), starting at fetch_start.
local function fetch_limit(h)
  local w = h.def
  if not w.fetch_auto then return w.fetch_size end
  -- (clamped again: a reload may have changed the worker's bounds)
  return math.max(w.batch_size, math.min(h.fetch_n or w.fetch_start, w.fetch_size))
end

-- The moving average an adapting fetch is sized by: so one slow call does
-- not shrink the fetch at once, nor one fast call grow it.
local function moving(avg, x) return avg and (0.7 * avg + 0.3 * x) or x end

-- After a fetch of an adapting worker: n jobs performed in `took` seconds
-- (wall time, parked waits included) set the size of h's next fetch, also
-- bounded by the bytes its jobs' records weigh (h.job_bytes, fetched_bytes).
local function fetch_adapt(h, n, took)
  local w = h.def
  if not w.fetch_auto or n <= 0 then return end
  h.per_job = moving(h.per_job, math.max(took, 0) / n)
  local want = h.per_job > 0 and math.floor(w.fetch_time / h.per_job) or w.fetch_size
  local jb = h.job_bytes
  if jb and jb > 0 then want = math.min(want, math.floor(w.fetch_bytes / jb)) end
  h.fetch_n = math.max(w.batch_size, math.min(w.fetch_size, want))
end

-- A fetch of an adapting worker brought n jobs whose busy records weigh
-- bytes: the moving average of a job's bytes, which bounds h's next fetch
-- to about the worker's fetch_bytes (a fetch of jobs with large payloads
-- is held whole in the thread's memory, and in Redis's reply).
local function fetched_bytes(h, n, bytes)
  if not h.def.fetch_auto or n <= 0 then return end
  h.job_bytes = moving(h.job_bytes, bytes / n)
end

-- One fetch of shard h: up to fetch_size due jobs, performed batch_size ids
-- per perform call, in perform_in order. Returns ok (jobs ran and all
-- succeeded), head (the shard's earliest perform_in left, or nil).
-- The fetched jobs are one batch in flight in Redis. All done: acked by the
-- shard's next fetch, or this thread's next Redis call (pending_acks). A
-- perform call fails: one fail.lua call fails its ids, acks the ones done
-- before and puts the rest back unchanged. Stopping,
-- or poll_interval after the fetch with jobs still to perform: the same call
-- without failures (queue.settle), so a stop never waits for more than the
-- perform in progress, and at most ~poll_interval of finished work is ever
-- unacked (what a kill -9 would rerun).
local function process(t, h)
  local ack_same = t.pending[h] ~= nil
  local cmds, acked, tfrom = pending_acks(t, h)
  cmds[#cmds + 1] = queue.fetch_cmd(h, t, fetch_limit(h), ack_same)
  local nfetch = #cmds
  -- a throttled worker's snapshot of the running calls, in the same round trip
  if h.def.throttle then cmds[#cmds + 1] = flow.read_cmd(t, h) end
  local sent = core.mono()
  local replies = t.conn:pipeline(cmds)
  timing.check(cmds, replies, tfrom)
  -- fetch.lua leased the shard for lease_ttl from no earlier than now: the
  -- calls of this fetch hold it until then, or as the renewals extend it
  h.lease_until = sent + t.cfg.lease_ttl
  -- An ack Redis refused stays pending (sent again by batch id, so nothing
  -- runs twice); the error then goes to the loop's back-off, and this
  -- fetch's batch, if any, is redelivered to this holder by the next fetch.
  local failed
  for i, p in ipairs(acked) do
    local ok, err = pcall(took, t, p, replies[i])
    if ok then t.pending[p] = nil else failed = failed or err end
  end
  h.later, h.held = nil, nil
  if failed then error(failed, 0) end
  local res = took(t, h, replies[nfetch])
  t.pending[h] = nil
  if not res then return false, nil end -- lease held elsewhere
  h.best_due = res.best
  h.snapshot = replies[nfetch + 1]
  local jobs = res.jobs
  h.job_windows = res.windows
  if #jobs == 0 then return false, res.head end
  fetched_bytes(h, #jobs, res.bytes)
  local size = h.def.batch_size
  -- h.done: ids of the batch in flight already performed with success. When
  -- the fail.lua/settle call that would have acked them never reached Redis,
  -- the next fetch delivers the same batch again: those ids are not rerun.
  -- (Only a fetch with several perform calls needs it.)
  local ran
  if #jobs > size then
    if not h.done or h.done.batch ~= h.batch then h.done = { batch = h.batch, ids = {} } end
    ran = h.done.ids
  end
  -- done: the ids performed so far, for a fetch that may end in a partial
  -- ack (several calls, or flow control holding some jobs back)
  local fetched, started = core.now(), core.mono()
  local done = (ran or h.def.throttle or h.def.concurrency) and {} or nil
  for first = 1, #jobs, size do
    if first > 1 and (core.stopping() or core.reload_wanted() or core.now() - fetched >= t.cfg.poll_interval) then
      fetch_adapt(h, first - 1, core.mono() - started)
      queue.settle(t.conn, h, t, done, h.later)
      h.batch, h.done, h.later, h.held = nil, nil, nil, nil
      local head = res.head
      if not head or jobs[first].perform_in < head then head = jobs[first].perform_in end
      return true, head
    end
    local slice = #jobs <= size and jobs or (size == 1 and { jobs[first] })
      or { unpack(jobs, first, math.min(first + size - 1, #jobs)) }
    if ran and next(ran) then
      -- (a table only when some job of the slice already ran: a fetch
      -- delivered again; the usual slice has none)
      local again = false
      for i = 1, #slice do
        if ran[slice[i].id] then again = true break end
      end
      if again then
        local todo = {}
        for _, job in ipairs(slice) do
          if ran[job.id] then done[#done + 1] = job.id else todo[#todo + 1] = job end
        end
        slice = todo
      end
    end
    local ok, performed, err, tb = true, slice, nil, nil
    if #slice > 0 then
      -- the wait: from due to the start of the job's call (a job a fetch put
      -- back unperformed is counted when it runs, once)
      local now, qn = core.now(), h.def.queue_name
      for i = 1, #slice do timing.observe(t.timing, qn, "w", now - slice[i].perform_in, now) end
      ok, performed, err, tb = perform(t, h, slice, done)
    end
    if ok == nil then return false, nil end
    -- the throttle held every job of this call: they go back at the end of
    -- the fetch, and its next calls are asked about
    if ok == "held" then ok, performed = true, {} end
    if ok == "units" then
      -- no units or the throttle held the call: the fetch goes back (what
      -- ran is acked; the throttle's "later"s are requeued) and h waits a
      -- moment; nil: not a failure, not an empty shard
      queue.settle(t.conn, h, t, done, h.later)
      h.batch, h.done, h.later, h.held = nil, nil, nil, nil
      return nil
    end
    if not ok then
      fail(t, h, performed, err, tb, done)
      h.done = nil
      return false, nil -- fail.lua moved jobs: the head is unknown, re-probe
    end
    if done then
      for _, job in ipairs(performed) do
        done[#done + 1] = job.id
        if ran then ran[job.id] = true end
      end
    end
  end
  if h.later or h.held then
    -- the throttle kept some jobs: not an ack of the whole fetch, a partial
    -- one (the held jobs go back unchanged, the later ones at their time)
    local held = h.held
    queue.settle(t.conn, h, t, done, h.later)
    h.batch, h.done, h.later, h.held = nil, nil, nil, nil
    if held then return nil end
    return false, nil
  end
  fetch_adapt(h, #jobs, core.mono() - started)
  -- (from the fetch, not from its end: so what a thread ran but has not
  -- acked is what it ran since poll_interval / ACK_WAIT_PART before its
  -- current fetch, plus that fetch's own, docs/guarantees.md)
  t.pending[h] = started + t.cfg.poll_interval / ACK_WAIT_PART
  return true, res.head
end

-- --- tasks: calls in flight ---------------------------------------------------

-- Whether h may start a fetch now: not while its own task is in flight, nor
-- while its worker has concurrent_shards of this thread's shards in a call.
-- Paused queues (NS:paused), read at most every PAUSE_CHECK seconds: a
-- pause stops new calls on every host within that (plus one call's end).
local PAUSE_CHECK = 0.5
local function paused(t)
  local now = core.mono()
  if now - t.paused_at >= PAUSE_CHECK then
    t.paused_at = now
    local ok, flat = pcall(t.conn.call, t.conn, "HGETALL", keys.paused(t.cfg.namespace))
    if ok then
      local set = {}
      for i = 1, #flat, 2 do set[flat[i]] = true end
      t.paused = set
    end -- Redis away: keep the last known state (the fetch will fail anyway)
  end
  return t.paused
end

-- Time windows (worker keys windows, timezone): whether h's worker is
-- outside them now. Cached per worker: while open, looked at again at the
-- next minute; while closed, until its next opening, when the thread's wait
-- ends (t.wake_at) so that the backlog starts on time.
local function closed(t, h)
  local wins = h.def.windows_spec
  if not wins then return false end
  local now = core.now()
  local st = t.win[h.worker]
  if st and now < st.recheck then return st.closed end
  if wins:inside(now) then
    st = { closed = false, recheck = math.floor(now / 60) * 60 + 60 }
  else
    local open = wins:next_open(now) or (now + 60)
    st = { closed = true, recheck = open }
    local at = core.mono() + (open - now)
    if not t.wake_at or at < t.wake_at then t.wake_at = at end
  end
  t.win[h.worker] = st
  return st.closed
end

local function busy(t, h)
  if h.task then return true end
  if closed(t, h) then return true end
  if h.units_until then
    if core.mono() < h.units_until then return true end
    h.units_until = nil
  end
  if paused(t)[h.def.queue_name] then return true end
  local limit = h.def.concurrent_shards
  return limit ~= nil and (t.in_call[h.worker] or 0) >= limit
end

local function task_end(t, h)
  h.task = nil
  t.waiting[h] = nil
  t.ntasks = t.ntasks - 1
  t.in_call[h.worker] = t.in_call[h.worker] - 1
end

-- Resumes h's task with ...; returns true, ok, head when it ended, false when
-- it parked again on a wait (t.waiting[h]). A task that raised (a Redis
-- error, luakiq.FATAL) is over; the error goes up to the thread loop.
local function task_step(t, h, ...)
  local ok, a, b = coroutine.resume(h.task, ...)
  if not ok then
    task_end(t, h)
    error(a, 0)
  end
  if coroutine.status(h.task) == "dead" then
    task_end(t, h)
    return true, a, b
  end
  t.waiting[h] = { req = a, deadline = b } -- from run_call: the call's wait request and deadline
  return false
end

-- When a parked task's wait is over (mono seconds): its own end (a sleep's,
-- a process's timeout) or the call's deadline, whichever comes first.
local function due_at(w)
  local at = w.deadline
  local u = w.req["until"]
  if u and u < at then at = u end
  return at
end

-- True when the I/O a parked task waits for has finished.
local function io_done(req)
  if req.kind == "http" then return req.transfer:done() end
  if req.kind == "proc" then return req.proc:done() end
  return false
end

-- Resumes every parked task whose wait is over; on_done(h, ok, head) for each
-- task that ended. Returns true when a task was resumed. (The main thread
-- renews the leases of parked calls' shards, as of the running one's.)
-- The answer is true when the I/O finished or the wait's own end came
-- before the call's deadline, wait.TIMEOUT when the deadline came first.
local function service(t, on_done)
  if not next(t.waiting) then return false end
  if core.http_active() > 0 then core.http_pump() end
  local now, ready = core.mono(), nil
  for h, w in pairs(t.waiting) do
    if due_at(w) <= now or io_done(w.req) then
      ready = ready or {}
      ready[#ready + 1] = h
    end
  end
  if not ready then return false end
  for _, h in ipairs(ready) do
    local w = t.waiting[h]
    local u, answer = w.req["until"], wait.TIMEOUT
    if io_done(w.req) or (u and u <= now and u <= w.deadline) then answer = true end
    local ended, ok, head = task_step(t, h, answer)
    -- (a shard an elastic thread gave up meanwhile is no longer the scheduler's)
    if ended and on_done and t.handlers[h.index] == h then on_done(h, ok, head) end
  end
  return true
end

-- The fds of parked calls' child processes (polled with the mailbox and
-- libcurl's sockets), or nil when no call waits on a process.
local function proc_fds(t)
  local fds
  for _, w in pairs(t.waiting) do
    if w.req.kind == "proc" then
      fds = fds or {}
      for _, fd in ipairs { w.req.proc:fds() } do fds[#fds + 1] = fd end
    end
  end
  return fds
end

-- Seconds until the first parked task's wait is over (nil: none parked).
local function next_due(t)
  local at
  for _, w in pairs(t.waiting) do
    local d = due_at(w)
    if not at or d < at then at = d end
  end
  return at and math.max(at - core.mono(), 0)
end

-- Waits up to `timeout` seconds for parked calls' I/O only (libcurl's
-- sockets, their children's fds), not the mailbox: ctx.wait while stopping,
-- and drive_parked.
local function io_wait(timeout, fds)
  if core.http_active() > 0 or fds then core.http_wait(timeout, false, fds) else core.sleep(timeout) end
end

-- The thread loop's back-off after a Redis error, `seconds` long, while
-- calls are parked: their requests and child processes move, and each is
-- resumed when its wait is over (its own end, its I/O, its deadline), as
-- ctx.wait would, so a Redis outage shorter than the lease left neither
-- stalls them nor makes their timeouts late (the fence at each resumption
-- stops a call past its lease bound). A call that then needs Redis fails
-- as it would with Redis away; such an error is logged and the others go
-- on. Without parked calls: core.wait, as before.
local function drive_parked(t, on_done, seconds)
  local until_ = core.mono() + seconds
  while not core.stopping() do
    local left = until_ - core.mono()
    if left <= 0 then return end
    if t.ntasks == 0 then
      core.wait(left)
      return
    end
    -- (at most 0.25 s at a time: the mailbox is not watched, so that is
    -- how soon a stop is seen)
    local timeout = math.min(left, 0.25)
    local due = next_due(t)
    if due and due < timeout then timeout = math.max(due, 0.001) end
    io_wait(timeout, proc_fds(t))
    local ok, err = xpcall(service, traceback, t, on_done)
    if not ok then
      if err == luakiq.FATAL then error(err, 0) end
      log.error(tostring(err):match("^[^\n]*"))
    end
  end
end

local function scheduler_ctx(t)
  local ctx = {
    handlers = t.handlers,
    poll_interval = t.cfg.poll_interval,
    now = core.now,
  }
  -- With ctx.on_done set by the scheduler, process() runs h as a task: it
  -- returns ok, head when the task ended at once, or nil when it parked (its
  -- ok, head come later through ctx.on_done(h, ok, head)). Without, calls
  -- wait in place (one call at a time: a scheduler that knows no tasks).
  function ctx.process(h)
    -- a paused queue starts no call, whatever the scheduler (a custom one
    -- may not ask busy()): a false result, as for an empty shard
    if paused(t)[h.def.queue_name] or closed(t, h) then return false, nil end
    if not ctx.on_done then return process(t, h) end
    if h.task then error("luakiq: shard " .. h.prefix .. " is already in a call", 0) end
    h.task = coroutine.create(process)
    t.ntasks = t.ntasks + 1
    t.in_call[h.worker] = (t.in_call[h.worker] or 0) + 1
    local ended, ok, head = task_step(t, h, t, h)
    if ended then return ok, head end
    return nil
  end
  -- busy(h): h must not be processed now (in a call, or its worker's
  -- concurrent_shards reached).
  function ctx.busy(h) return busy(t, h) end
  -- Earliest perform_in per handler; a shard with orphaned in-flight jobs
  -- (a dead holder's, or our own whose ack/failure never reached Redis)
  -- counts as long overdue, so its fetch restores or redelivers them (heads.lua).
  function ctx.heads()
    local cmds = {}
    local now = core.now()
    for i, h in ipairs(t.handlers) do cmds[i] = { script = "heads", h.prefix, t.token, now } end
    local replies = t.conn:pipeline(cmds)
    local heads = {}
    for i, r in ipairs(replies) do
      if type(r) ~= "table" or r.err then error("heads.lua failed: " .. tostring(r and r.err), 0) end
      heads[i] = r[2] == "1" and 0 or tonumber(r[1]) or false
      t.handlers[i].best_due = tonumber(r[3]) -- (priorities: the scheduler prefers the lowest)
    end
    return heads
  end
  -- Woken handler indexes from the mailbox messages (all of them on a broad wake).
  local function woken_of(msgs, all)
    local woken = {}
    if all then
      for i = 1, #t.handlers do woken[i] = i end
    else
      for _, m in ipairs(msgs) do woken[#woken + 1] = t.by_prefix[m] end -- (nil: not ours)
    end
    return woken
  end
  -- Sleeps up to hint (capped by poll_interval), until a push wakes us, or
  -- until a parked task's wait is over (then it is resumed). Returns the
  -- woken handler indexes and whether parked tasks were resumed.
  function ctx.wait(hint)
    flush(t)
    if core.stopping() and t.ntasks == 0 then return {} end
    core.set_state(t.ntasks > 0 and STATE.waiting or STATE.idle)
    collectgarbage("step")
    local timeout = t.cfg.poll_interval
    if t.tick_every and t.tick_every < timeout then timeout = t.tick_every end -- the schedules' thread
    if hint and hint < timeout then timeout = math.max(hint, 0.001) end
    local due = next_due(t)
    if due and due < timeout then timeout = due end
    if t.wake_at then -- a handler waiting for units or a window tries again then
      timeout = math.max(math.min(timeout, t.wake_at - core.mono()), 0.001)
      t.wake_at = nil
    end
    if t.el then -- the next look at the live hosts (elastic_tick)
      timeout = math.max(math.min(timeout, t.el.next - core.mono()), 0.001)
    end
    local woken
    local fds = proc_fds(t)
    -- a safety net: a process whose exit is not pollable (no pidfd) or past
    -- the number of fds polled at once is looked at every 0.25 s
    if fds and timeout > 0.25 then timeout = 0.25 end
    if core.stopping() then
      -- draining parked tasks: the mailbox no longer matters
      io_wait(math.min(timeout, 0.05), fds)
      woken = {}
    elseif core.http_active() > 0 or fds then
      -- responses, processes, pushes and the stop all end this wait (curl's
      -- sockets, the children's fds and the thread's mailbox eventfd, polled
      -- together)
      core.http_wait(timeout, true, fds)
      woken = woken_of(core.wait(0))
    elseif t.el then
      -- every thread of an elastic host gets every wake-up (host.c): one for
      -- a shard this thread does not serve ends nothing, it waits on
      local until_ = core.mono() + timeout
      repeat
        local msgs, all = core.wait(timeout)
        woken = woken_of(msgs, all)
        timeout = until_ - core.mono()
      until #woken > 0 or all or #msgs == 0 or timeout <= 0 or core.stopping()
    else
      woken = woken_of(core.wait(timeout))
    end
    return woken, service(t, ctx.on_done)
  end
  -- Wake-ups that arrived while busy (never blocks), and parked tasks whose
  -- wait is over. Looking at the mailbox is a timed wait that expires at
  -- once, a syscall that cost as much as a blank batch, so a busy thread
  -- looks at most every POLL_EVERY seconds.
  local next_poll = 0
  function ctx.poll()
    service(t, ctx.on_done)
    local now = core.now()
    if now < next_poll then return {} end
    next_poll = now + POLL_EVERY
    return woken_of(core.wait(0))
  end
  return ctx
end

-- --- elastic hosts (luakiq.runner.elastic) -------------------------------------------

-- Makes list the thread's handlers (h.index: the position the scheduler
-- knows it by) and the wake-up lookup.
local function set_active(t, list)
  t.handlers, t.by_prefix = list, {}
  for i, h in ipairs(list) do
    h.index = i
    t.by_prefix[h.prefix] = i
  end
end

-- Tells the main thread (core.set_held: the hosts heartbeat lists it) which
-- shards this thread holds now, when that changed.
local function publish_held(t)
  local el, list = t.el, json.array()
  for _, h in ipairs(t.all) do
    if el.held[h] then list[#list + 1] = { worker = h.worker, shard = h.shard } end
  end
  local text = json.encode(list)
  if text ~= el.held_text then
    el.held_text = text
    core.set_held(text)
  end
end

local function names_of(list)
  local names = {}
  for i, h in ipairs(list) do names[i] = h.worker .. h.shard end
  return table.concat(names, ", ")
end

-- Gives back the leases of the shards this thread no longer owns, once
-- their calls are over: their acks first (flush), then release.lua, so the
-- new owner's next fetch takes them at once. A shard whose ack Redis refused
-- keeps its lease (flush raises; tried again at the next tick).
-- (set: handler -> true. Returns the handlers given back, nil when none.)
local function release_idle(t, set)
  local done, ack = {}, false
  for h in pairs(set) do
    if not h.task then
      done[#done + 1] = h
      if t.pending[h] then ack = true end
    end
  end
  if #done == 0 then return nil end
  if ack then flush(t) end
  queue.release(t.conn, done, t.token)
  for _, h in ipairs(done) do set[h], h.batch = nil, nil end
  return done
end

local function settle_leaving(t)
  local el = t.el
  local done = release_idle(t, el.leaving)
  if not done then return end
  for _, h in ipairs(done) do
    el.leaving[h], el.held[h], h.batch = nil, nil, nil
    t.refused[h.prefix] = nil
  end
  table.sort(done, function(a, b) return a.prefix < b.prefix end)
  log.info("shards handed over: " .. names_of(done))
end

-- Every beat (el.beat seconds; run() calls it between steps): reads the live
-- elastic hosts, works out this thread's share (luakiq.runner.elastic.share) when
-- they changed, gives back what it no longer owns, and leases every owned
-- shard that has no call in flight nor an ack pending (fetch.lua, limit 0):
-- that takes a new shard as soon as its previous holder let it go (refused
-- until then, or until its lease ran out: a killed holder; its in-flight
-- jobs are restored to the queue then), and keeps idle ones'. Raises on a
-- Redis error (the loop backs off; nothing changes meanwhile).
local function elastic_tick(t)
  local el = t.el
  local now = core.mono()
  if now < el.next then return end
  el.next = now + el.beat
  local tokens = {}
  for _, v in ipairs(require("luakiq.ops.hosts").list(t.conn, t.cfg.namespace)) do
    if v.elastic and type(v.token) == "string" and (tonumber(v.seen) or math.huge) <= el.dead_after then
      tokens[#tokens + 1] = v.token
    end
  end
  table.sort(tokens)
  local hosts_key = table.concat(tokens, "\n")
  if hosts_key ~= el.hosts_key then
    el.hosts_key = hosts_key
    local mine = require("luakiq.runner.elastic").share(t.all, tokens, el.host, el.threads)[el.index + 1]
    local owned, changed = {}, #mine ~= #t.handlers
    for i, h in ipairs(mine) do
      owned[h] = true
      if t.handlers[i] ~= h then changed = true end
    end
    if changed then
      local gone, new = {}, {}
      for _, h in ipairs(t.handlers) do
        if not owned[h] then
          el.leaving[h] = true
          gone[#gone + 1] = h
        end
      end
      local had = {}
      for _, h in ipairs(t.handlers) do had[h] = true end
      for _, h in ipairs(mine) do
        el.leaving[h] = nil
        if not had[h] then new[#new + 1] = h end
      end
      set_active(t, mine)
      el.changed = true
      log.info(string.format("elastic: %d live hosts; this thread serves %d shards (%d new, %d to hand over)",
        math.max(#tokens, 1), #mine, #new, #gone), { new = #new > 0 and names_of(new) or nil,
        leaving = #gone > 0 and names_of(gone) or nil })
    end
  end
  settle_leaving(t)
  local cmds, hs = {}, {}
  for _, h in ipairs(t.handlers) do
    if not h.task and not t.pending[h] then
      hs[#hs + 1] = h
      cmds[#cmds + 1] = queue.fetch_cmd(h, t, 0, false)
    end
  end
  if #cmds > 0 then
    local r = t.conn:pipeline(cmds)
    for i, h in ipairs(hs) do
      local res = queue.parse_fetch(r[i], h)
      if res.leased then
        el.held[h] = nil
        -- try again as its lease ends (a killed holder's: taken then, not up to a beat later)
        if res.pttl and res.pttl >= 0 then el.next = math.min(el.next, core.mono() + res.pttl / 1000 + 0.005) end
      elseif not el.held[h] then
        el.held[h] = true
        -- a scheduler anew: the old one may have struck the shard off while
        -- it was refused (lag: until its next refresh), and it has work now
        el.changed = true
        if t.refused[h.prefix] then
          t.refused[h.prefix] = nil
          log.info("shard lease acquired", { worker = h.worker, shard = h.shard })
        end
      end
    end
  end
  publish_held(t)
end

-- --- online reshard (luakiq.ops.reshard) ------------------------------------------

-- Every REGISTRY_CHECK seconds (run() calls it between steps) the thread
-- reads the queue registry: a worker whose count there is no longer its own
-- was resharded (`luakiq reshard`) while this host runs. The shards are
-- frozen by then (fetch.lua gives them to the reshard only), so nothing of
-- the queue runs here until the reshard is done, whatever this thread does.
--   Elastic threads follow: the worker's handlers become shards 0..N-1 (the
--   same list, in the same order, on every host), and the next tick shares
--   them anew; a shard beyond N that this thread holds is handed over
--   (released) like any shard it no longer owns.
--   Threads of a fixed plan (the default splitter, by_node, a custom one)
--   cannot re-plan alone: the plan spans every thread of the host and all
--   of them share one lease token, so two threads taking one shard would not
--   be fenced. They stop serving the queue, with one line each, and go on
--   with their other queues; a restart with shards_count = N serves it again.
local REGISTRY_CHECK = 1
local function resharded(t, w, n)
  local old = w.shards_count
  w.shards_count = n -- (luakiq.perform_async and the schedules route with it)
  if t.el then
    local all, have, rank = {}, {}, {}
    for _, h in ipairs(t.all) do
      if h.worker ~= w.name or h.shard < n then
        all[#all + 1] = h
        if h.worker == w.name then have[h.shard] = true end
      end
    end
    for shard = 0, n - 1 do if not have[shard] then all[#all + 1] = M.new_handler(t, w, shard) end end
    for i, x in ipairs(t.cfg.workers) do rank[x.name] = i end
    table.sort(all, function(a, b)
      if a.worker ~= b.worker then return rank[a.worker] < rank[b.worker] end
      return a.shard < b.shard
    end)
    t.all = all
    t.el.hosts_key, t.el.next = nil, 0 -- the share anew at the next tick
    log.info(string.format("queue %s resharded from %d to %d shards; this elastic thread takes its share of the new ones",
      w.queue_name, old, n), { worker = w.name })
    return
  end
  local keep, gone = {}, 0
  for _, h in ipairs(t.handlers) do
    if h.worker == w.name then
      t.dropped = t.dropped or {}
      t.dropped[h] = true
      gone = gone + 1
    else
      keep[#keep + 1] = h
    end
  end
  if gone == 0 then return end
  set_active(t, keep)
  t.replan = true
  log.error(string.format("queue %s was resharded from %d to %d shards; this host's plan is fixed, so this thread " ..
    "no longer serves it (its other queues go on): restart the host with shards_count = %d, or use splitter = " ..
    "\"elastic\" (docs/operations.md, 'Resharding')", w.queue_name, old, n, n), { worker = w.name })
end

local function registry_tick(t)
  local now = core.mono()
  if now < (t.registry_at or 0) then return end
  t.registry_at = now + REGISTRY_CHECK
  local flat = t.conn:call("HGETALL", keys.registry(t.cfg.namespace))
  local counts = {}
  for i = 1, #flat, 2 do counts[flat[i]] = tonumber(flat[i + 1]) end
  for _, w in ipairs(t.cfg.workers) do
    local n = counts[w.queue_name]
    if n and n ~= w.shards_count then resharded(t, w, n) end
  end
end

-- Gives back the leases of a fixed thread's shards of resharded queues once
-- their calls are over (their acks first).
local function settle_dropped(t)
  if t.dropped then release_idle(t, t.dropped) end
end

-- The main VM's side of a call that could not be stopped (its thread still
-- runs; the host replaces the process or exits next): fails the call's jobs
-- with the timeout error, acks the ids its fetch had done, puts the rest back
-- and gives the shard's lease back. s: its record, one of core.host_run's
-- stuck calls ({worker, shard, batch, token, jobs = {{id, retry_count}...},
-- done = {id...}, parked}: run_call's core.call_begin). s.parked: the call
-- was waiting in luakiq's I/O on the stuck thread (its own deadline had not
-- come): its jobs go back unchanged instead.
function M.fail_stuck(cfg, conn, token, s)
  local w = cfg.by_name[s.worker]
  if not w then error("fail_stuck: unknown worker " .. tostring(s.worker), 0) end
  token = s.token or token -- an elastic thread's own
  local t = { cfg = cfg, conn = conn, token = token, lease_ms = math.floor(cfg.lease_ttl * 1000) }
  local h = { worker = w.name, shard = s.shard, def = w, batch = s.batch,
              prefix = keys.prefix(cfg.namespace, w.queue_name, s.shard) }
  if s.parked and w.delivery == "at_most_once" then
    -- it had started: never again
    fail(t, h, s.jobs, "interrupted", nil, s.done)
  elseif s.parked then
    queue.settle(conn, h, t, s.done)
  else
    local msg = string.format("timeout: the call ran past its timeout of %g s and could not be stopped " ..
      "(JIT-compiled code or a foreign call); the process was replaced", w.timeout)
    core.count_timeout(w.name)
    fail(t, h, s.jobs, msg, nil, s.done)
  end
  queue.release(conn, { h }, token)
end

-- Recurring jobs (config.lua schedules), on thread 0 of every host: every
-- SCHEDULE_CHECK seconds, each schedule's latest tick (<= now) is tried once
-- with schedule.lua, which claims and enqueues it atomically, so hosts
-- racing for a tick enqueue it once. A cron schedule's next tick is cached;
-- at start the latest past tick (up to 400 days back) is tried, which fires
-- a tick missed while no host ran, once.
local SCHEDULE_CHECK = 0.25
local function schedules_tick(t)
  local now = core.now()
  if now < (t.sched_at or 0) then return end
  t.sched_at = now + SCHEDULE_CHECK
  local cron = require "luakiq.lib.cron"
  local cfg = t.cfg
  for _, s in ipairs(cfg.schedules) do
    local st = t.sched[s.name]
    if not st then
      st = {}
      t.sched[s.name] = st
      if s.spec then
        st.tick = cron.prev(s.spec, s.zone, now - 400 * 86400, now)
        st.next = cron.next(s.spec, s.zone, now)
      end
    end
    local tick
    if s.every then
      tick = math.floor(now / s.every) * s.every
    else
      while st.next and st.next <= now do
        st.tick = st.next
        st.next = cron.next(s.spec, s.zone, st.next)
      end
      tick = st.tick
    end
    if tick and tick ~= st.claimed then
      local w = cfg.by_name[s.worker]
      local ok, payload = pcall(cfg.dump_payload, s.payload == nil and "" or s.payload)
      if not ok or type(payload) ~= "string" then
        log.error("schedule " .. s.name .. ": cannot dump its payload: " .. tostring(payload))
        payload = ""
      end
      local P = keys.prefix(cfg.namespace, w.queue_name, keys.shard(s.id, w.shards_count))
      local r = t.conn:pipeline({ { script = "schedule", P, s.name, string.format("%.17g", tick),
                                    string.format("%.17g", now), runtime.wake_arg(t.conn, cfg), s.id, payload,
                                    tostring(w.shards_count) } })[1]
      -- (resharded since this thread last read the registry: the tick is
      -- claimed in the id's new shard once registry_tick has the new count)
      if type(r) == "table" and r.err and r.err:find("luakiq schedule: resharded", 1, true) then return end
      if type(r) == "table" and r.err then error("schedule.lua failed: " .. r.err, 0) end
      st.claimed = tick
      if r == 1 then
        log.info("schedule " .. s.name .. " enqueued its job",
          { worker = w.name, id = s.id, tick = string.format("%.17g", tick) })
      end
    end
  end
end

-- Exposed for the shard-handler specs, which drive one thread's state from a
-- `luakiq lua` VM: setup(boot) -> t, process(t, handler) -> ok, head, flush(t).
M.setup, M.process, M.flush = setup, process, flush

-- The thread's runner between open() and the end of run(): {t =, ctx =,
-- step =, ticker =}. Kept across a run() that returned "reload", so that the
-- thread runs on in this VM when the new code's VM cannot be opened.
local current

-- Opens a worker thread's runner in this VM (called from C, host/entry.c,
-- with the boot string): loads DIR, connects, builds the shard handlers and
-- the scheduler. reloading: a fresh VM replacing an old one on SIGHUP (only
-- the log line differs). Raises a one-line error when DIR does not load.
function M.open(boot_json, reloading)
  -- perform_async in a worker thread follows a reshard made meanwhile
  require("luakiq.client").follow = true
  -- os.execute in a worker thread: core.execute (host/sys.c) keeps the
  -- host's INT handler (system(3) ignores INT process-wide while it waits)
  -- and ends the command at the running call's timeout.
  os.execute = core.execute
  local boot = json.decode(boot_json)
  core.log_setup { json = boot.log_json, level = boot.log_level }
  local ok, t = pcall(setup, boot)
  if not ok then error(select(2, require("luakiq.lib.errors").describe(t)), 0) end
  local ctx = scheduler_ctx(t)
  local step = t.cfg.scheduler(ctx)
  local what = names_of(t.handlers)
  if t.el then what = string.format("elastic, its share of %d shards (token %s)", #t.all, t.token) end
  log.info((reloading and "thread reloaded: " or "thread started: ") .. what)
  core.set_state(STATE.idle)
  local ticker = core.thread_index() == 0 and #t.cfg.schedules > 0
  if ticker then t.sched, t.tick_every = {}, SCHEDULE_CHECK end
  current = { t = t, ctx = ctx, step = step, ticker = ticker }
end

-- The thread's loop (called from C after open). Returns 0 when the thread
-- stops, or "reload" when a reload is asked for (SIGHUP: core.reload_wanted)
-- and the thread is at a point between two calls with nothing of its own in
-- flight: no parked call, every fetch acked (the acks sent, so the new VM
-- starts clean); its leases stay held under the same token. The caller
-- swaps the VM, or calls run() again to go on with the old code.
function M.run()
  local t, ctx, ticker = current.t, current.ctx, current.ticker
  local backoff = 0.1
  while not core.stopping() do
    local ok, err
    if not core.reload_wanted() then
      ok, err = xpcall(registry_tick, traceback, t)
      if ok then ok, err = xpcall(settle_dropped, traceback, t) end
      if t.replan then
        t.replan = false
        ctx.handlers = t.handlers
        current.step = t.cfg.scheduler(ctx)
      end
      if ok then ok, err = nil, nil end
    end
    if ok == false then
      -- (a Redis error: the back-off below)
    elseif t.el and not core.reload_wanted() then
      ok, err = xpcall(elastic_tick, traceback, t)
      if t.el.changed then
        -- the thread's shards changed: a scheduler anew over them (a call
        -- in flight of a kept shard reports to it; of a dropped one, to none)
        t.el.changed = false
        ctx.handlers = t.handlers
        current.step = t.cfg.scheduler(ctx)
      end
    end
    if ok == false then
      -- (an elastic tick's Redis error: the back-off below)
    elseif not core.reload_wanted() then
      ok, err = xpcall(current.step, traceback)
      if ok and ticker then ok, err = xpcall(schedules_tick, traceback, t) end
    elseif t.ntasks > 0 then
      -- no new fetch; the parked calls finish (each bounded by its timeout)
      ok, err = xpcall(ctx.wait, traceback, 0.05)
    else
      ok, err = xpcall(flush, traceback, t)
      -- an elastic thread gives back what it was handing over (the new VM
      -- starts from the live hosts again)
      if ok and t.el then ok, err = xpcall(settle_leaving, traceback, t) end
      if ok then return "reload" end
    end
    if ok then
      backoff = 0.1
    elseif err == luakiq.FATAL then
      break
    else
      -- A Redis failure (or a bug in a user scheduler): log, back off, reconnect.
      -- A pending ack stays pending: fetch.lua re-acks by batch id, so nothing runs twice.
      log.error(tostring(err):match("^[^\n]*") .. "; retrying in " .. backoff .. " s")
      core.set_state(STATE.error)
      local okd, errd = xpcall(drive_parked, traceback, t, ctx.on_done, backoff)
      if not okd then
        if errd == luakiq.FATAL then break end
        log.error(tostring(errd):match("^[^\n]*"))
      end
      backoff = math.min(backoff * 2, 5)
      if t.conn:broken() then
        local okc, e = t.conn:reconnect()
        if okc then log.info("reconnected to Redis") else log.warn(e) end
      end
    end
  end
  -- Graceful stop: the parked tasks finish their calls (each bounded by its
  -- timeout) and settle their fetches first.
  while t.ntasks > 0 and not core.fatal_message() do
    local ok, err = xpcall(ctx.wait, traceback, 0.05)
    if not ok then
      if err == luakiq.FATAL then break end
      log.error(tostring(err):match("^[^\n]*"))
      core.sleep(0.1)
    end
  end
  -- Stop (graceful or after a fatal error): ack what ran, give the shards back
  -- at once. A batch left in flight by luakiq.fatal is then orphaned, and the
  -- next holder restores it without waiting out lease_ttl.
  -- Acks that cannot be sent (Redis away or refusing writes) are tried for
  -- 5 s; then the shards whose acks are still pending keep their lease (no
  -- other host restores the batch before the lease ends, lease_ttl at most)
  -- and one line per shard says what will run again. The other shards are
  -- given back.
  do
    local deadline, said = core.now() + 5, nil
    repeat
      local ok, err = pcall(flush, t)
      if ok then break end
      if not said then log.warn("cannot ack at stop (trying for 5 s): " .. tostring(err):match("^[^\n]*")) end
      said = true
      core.sleep(0.2)
      if t.conn:broken() then t.conn:reconnect() end
    until core.now() > deadline
    local back, all = {}, t.handlers
    if t.el then -- and the shards it was handing over
      all = {}
      for _, h in ipairs(t.handlers) do all[#all + 1] = h end
      for h in pairs(t.el.leaving) do all[#all + 1] = h end
    end
    for _, h in ipairs(all) do
      if t.pending[h] then
        local path, why = unacked.save(t.cfg, { prefix = h.prefix, token = t.token, batch = h.batch,
          lease_ms = t.lease_ms, worker = h.worker, shard = h.shard })
        log.error("stopping with the ack of batch " .. tostring(h.batch) .. " unsent; the lease is kept: a start of " ..
                  "luakiq on this machine within lease_ttl (" .. t.cfg.lease_ttl .. " s) sends it (" ..
                  (path or "cannot write: " .. tostring(why)) .. "), else its performed jobs run again when the " ..
                  "lease ends", { worker = h.worker, shard = h.shard })
      else
        back[#back + 1] = h
      end
    end
    local ok, err = pcall(queue.release, t.conn, back, t.token)
    if not ok then log.warn("cannot give the leases back at stop: " .. tostring(err):match("^[^\n]*")) end
    if t.el then core.set_held("[]") end
  end
  core.set_state(STATE.stopped)
  return 0
end

return M
