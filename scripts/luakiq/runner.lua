-- luakiq.runner: the loop of one worker thread (runs in that thread's own VM).
--
-- The thread owns a group of shards (from the splitter). Its scheduler picks
-- the next shard; process() runs one batch of it:
--   fetch.lua (acks the previous batch in the same call) -> load payloads ->
--   server middlewares around perform -> on error, fail.lua (one atomic step).
-- A successful batch is acked by the next Redis call this thread makes (the
-- next fetch, or the flush before it waits), so the steady state costs one
-- round trip per batch. Leases (docs/guarantees.md) fence every shard.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.keys"
local log = require "luakiq.log"
local middleware = require "luakiq.middleware"
local queue = require "luakiq.queue"
local runtime = require "luakiq.runtime"
local luakiq = require "luakiq"

local M = {}

local POLL_EVERY = 0.002 -- seconds between mailbox checks of a busy thread (ctx.poll)

local function traceback(e)
  if type(e) == "string" then return debug.traceback(e, 2) end
  return e
end

-- Builds the per-thread state and the scheduler context.
local function setup(boot)
  local cfg = runtime.load(boot.dir, boot.overrides)
  local conn, err = runtime.connect(cfg, cfg.redis_retry or 30)
  if not conn then error(err, 0) end
  local t = {
    cfg = cfg, conn = conn, token = boot.token,
    lease_ms = math.floor(cfg.lease_ttl * 1000),
    handlers = {}, by_prefix = {},
    pending = nil,   -- handler whose last batch succeeded and awaits its ack
    refused = {},    -- prefix -> true while another holder has the lease
    -- the per-batch debug line is built only when it is printed (its fields
    -- cost more than a blank job's whole batch otherwise)
    debug = boot.log_level == "debug",
  }
  for i, h in ipairs(boot.handlers) do
    local w = cfg.by_name[h.worker]
    local handler = {
      worker = h.worker, shard = h.shard, def = w, index = i,
      prefix = keys.prefix(cfg.namespace, w.queue_name, h.shard),
      perform = middleware.chain(cfg.middlewares, function(worker, batch) return worker.perform(batch) end),
    }
    t.handlers[i] = handler
    t.by_prefix[handler.prefix] = i
  end
  return t
end

-- Sends the pending ack (if any) alone; used before sleeping and at stop.
local function flush(t)
  local h = t.pending
  if not h then return end
  local r = t.conn:pipeline { queue.fetch_cmd(h, t, 0, true) }
  t.pending = nil
  queue.parse_fetch(r[1], h, t)
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
  for i, job in ipairs(jobs) do
    local count = job.retry_count + 1
    local okr, delay = pcall(w.retry_in, count)
    if not okr or type(delay) ~= "number" or delay ~= delay or delay == math.huge or delay == -math.huge then
      log.error("retry_in failed; using the default formula", { worker = w.name, error = tostring(delay) })
      delay = count ^ 4 + 15 + math.random(0, 29) * (count + 1)
    end
    retry_at[i] = now + delay
  end
  local morgued = queue.fail(t.conn, h, t, now, w.max_retry_count, dumped or "", jobs, retry_at, done)
  if tb then log.debug(tb) end
  log.warn("batch failed: " .. msg:match("^[^\n]*"), {
    worker = w.name, shard = h.shard, ids = queue.ids(jobs), morgued = #morgued })
  if #morgued > 0 and w.retries_exhausted then
    for _, m in ipairs(morgued) do
      m.error = msg
      local okp, v = pcall(cfg.load_payload, m.payload)
      m.payloads = { { okp and v or m.payload, m.score } }
      m.payload, m.score = nil, nil
    end
    exhausted(w, morgued)
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
  local batch, kept, bad = {}, {}, {}
  for _, job in ipairs(jobs) do
    local list, good = {}, {}
    for _, p in ipairs(job.payloads) do
      local ok, v = pcall(cfg.load_payload, p[1])
      if ok then
        list[#list + 1] = v
        good[#good + 1] = p
      else
        if v == luakiq.FATAL then error(v, 0) end
        bad[#bad + 1] = { id = job.id, payload = p[1],
                          message = "load_payload failed: " .. tostring(v):match("^[^\n]*") }
      end
    end
    if #list > 0 or #job.payloads == 0 then -- (fetch.lua never sends a job without payloads)
      job.payloads = good
      batch[job.id] = list
      kept[#kept + 1] = job
    end
  end
  if #bad == 0 then return jobs, batch end
  for _, b in ipairs(bad) do
    local ok, dumped = pcall(cfg.dump_error, b.message)
    b.error = (ok and type(dumped) == "string") and dumped or b.message
  end
  local ok = queue.bury(t.conn, h, t, core.now(), bad)
  if not ok then return nil end
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

-- What the main VM needs to fail a call's jobs should the call never come
-- back (a call past its timeout that cannot be stopped: M.fail_stuck).
local function call_record(h, jobs, done)
  local list = {}
  for i, job in ipairs(jobs) do list[i] = { job.id, job.retry_count } end
  return json.encode { worker = h.worker, shard = h.shard, batch = h.batch or "", jobs = list, done = done or {} }
end

-- Runs one perform call (with the server middlewares) in a coroutine of its
-- own, bounded by the worker's timeout (core.call_begin/call_end: past it, a
-- hook raises "timeout: ..." in the call; luakiq's own waits end themselves).
-- Returns ok, err, traceback.
local function run_call(h, w, batch, record)
  local co = coroutine.create(h.perform)
  core.call_begin(w.timeout, record)
  local ok, err = coroutine.resume(co, w, batch)
  local expired = core.call_end()
  if ok and coroutine.status(co) ~= "dead" then
    ok, err = false, "perform yielded: coroutine.yield outside a coroutine of its own"
  end
  if ok then return true end
  local tb = type(err) == "string" and debug.traceback(co, err) or debug.traceback(co, tostring(err))
  if expired and err ~= luakiq.FATAL then
    if not (type(err) == "string" and err:find("^timeout")) then
      err = "timeout: " .. tostring(err) -- past the deadline, whatever the call raised on its way out
    end
    core.count_timeout(w.name)
  end
  return false, err, tb
end

-- Performs jobs (a slice of h's batch in flight) as one perform call. done:
-- the ids of the batch already performed. Returns ok, err, traceback; ok is
-- true too when nothing was left to perform. Raises luakiq.FATAL.
local function perform(t, h, jobs, done)
  local w = h.def
  local loaded, batch = load_batch(t, h, jobs)
  if not loaded then return nil end -- lease lost while burying
  if #loaded == 0 then return true, loaded end -- every payload was unloadable
  local ids = queue.ids(loaded)
  core.set_state("performing", w.name, h.shard, table.concat(ids, ","), h.prefix, #ids)
  local started = core.now()
  local ok, err, tb = run_call(h, w, batch, call_record(h, loaded, done))
  core.set_state("fetching", w.name, h.shard)
  -- A luakiq.redis wait the deadline cut short leaves the thread's connection
  -- broken: make it again now, so the failure is recorded at once.
  if t.conn:broken() then t.conn:reconnect() end
  if ok then
    if t.debug then
      log.debug("batch done", { worker = w.name, shard = h.shard, ids = ids, duration = core.now() - started })
    end
    return true, loaded
  end
  if err == luakiq.FATAL then error(err, 0) end
  return false, loaded, err, tb
end

-- One fetch of shard h: up to fetch_size due jobs, performed batch_size ids
-- per perform call, in perform_in order. Returns ok (jobs ran and all
-- succeeded), head (the shard's earliest perform_in left, or nil).
-- The fetched jobs are one batch in flight in Redis. All done: acked by this
-- thread's next Redis call. A perform call fails: one fail.lua call fails its
-- ids, acks the ones done before and puts the rest back unchanged. Stopping,
-- or poll_interval after the fetch with jobs still to perform: the same call
-- without failures (queue.settle), so a stop never waits for more than the
-- perform in progress, and at most ~poll_interval of finished work is ever
-- unacked (what a kill -9 would rerun).
local function process(t, h)
  local cmds = {}
  local ack_same = t.pending == h
  if t.pending and not ack_same then cmds[1] = queue.fetch_cmd(t.pending, t, 0, true) end
  cmds[#cmds + 1] = queue.fetch_cmd(h, t, h.def.fetch_size, ack_same)
  local replies = t.conn:pipeline(cmds)
  if #cmds == 2 then queue.parse_fetch(replies[1], t.pending, t) end
  t.pending = nil
  local res = queue.parse_fetch(replies[#replies], h, t)
  if not res then return false, nil end -- lease held elsewhere
  local jobs = res.jobs
  if #jobs == 0 then return false, res.head end
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
  local fetched, done = core.now(), ran and {} or nil
  for first = 1, #jobs, size do
    if first > 1 and (core.stopping() or core.now() - fetched >= t.cfg.poll_interval) then
      queue.settle(t.conn, h, t, done)
      h.done = nil
      local head = res.head
      if not head or jobs[first].perform_in < head then head = jobs[first].perform_in end
      return true, head
    end
    local slice = #jobs <= size and jobs or { unpack(jobs, first, math.min(first + size - 1, #jobs)) }
    if ran and next(ran) then
      local todo = {}
      for _, job in ipairs(slice) do
        if ran[job.id] then done[#done + 1] = job.id else todo[#todo + 1] = job end
      end
      slice = todo
    end
    local ok, performed, err, tb = true, slice, nil, nil
    if #slice > 0 then ok, performed, err, tb = perform(t, h, slice, done) end
    if ok == nil then return false, nil end
    if not ok then
      fail(t, h, performed, err, tb, done)
      h.done = nil
      return false, nil -- fail.lua moved jobs: the head is unknown, re-probe
    end
    if ran then
      for _, job in ipairs(performed) do
        done[#done + 1] = job.id
        ran[job.id] = true
      end
    end
  end
  t.pending = h
  return true, res.head
end

local function scheduler_ctx(t)
  local ctx = {
    handlers = t.handlers,
    poll_interval = t.cfg.poll_interval,
    now = core.now,
  }
  function ctx.process(h) return process(t, h) end
  -- Earliest perform_in per handler; a shard with orphaned in-flight jobs
  -- (a dead holder's, or our own whose ack/failure never reached Redis)
  -- counts as long overdue, so its fetch restores or redelivers them (heads.lua).
  function ctx.heads()
    local cmds = {}
    for i, h in ipairs(t.handlers) do cmds[i] = { script = "heads", h.prefix, t.token } end
    local replies = t.conn:pipeline(cmds)
    local heads = {}
    for i, r in ipairs(replies) do
      if type(r) ~= "table" or r.err then error("heads.lua failed: " .. tostring(r and r.err), 0) end
      heads[i] = r[2] == "1" and 0 or tonumber(r[1]) or false
    end
    return heads
  end
  -- Woken handler indexes from the mailbox messages (all of them on a broad wake).
  local function woken_of(msgs, all)
    local woken = {}
    if all then
      for i = 1, #t.handlers do woken[i] = i end
    else
      for _, m in ipairs(msgs) do woken[#woken + 1] = t.by_prefix[m] end
    end
    return woken
  end
  -- Sleeps up to hint (capped by poll_interval) or until a push wakes us.
  function ctx.wait(hint)
    flush(t)
    if core.stopping() then return {} end
    core.set_state("idle")
    collectgarbage("step")
    local timeout = t.cfg.poll_interval
    if hint and hint < timeout then timeout = math.max(hint, 0.001) end
    return woken_of(core.wait(timeout))
  end
  -- Wake-ups that arrived while busy (never blocks). Looking at the mailbox
  -- is a timed wait that expires at once, a syscall that cost as much as a
  -- blank batch, so a busy thread looks at most every POLL_EVERY seconds.
  local next_poll = 0
  function ctx.poll()
    local now = core.now()
    if now < next_poll then return {} end
    next_poll = now + POLL_EVERY
    return woken_of(core.wait(0))
  end
  return ctx
end

-- The main VM's side of a call that could not be stopped (its thread still
-- runs; the host replaces the process or exits next): fails the call's jobs
-- with the timeout error, acks the ids its fetch had done, puts the rest back
-- and gives the shard's lease back. record: call_record's JSON.
function M.fail_stuck(cfg, conn, token, record)
  local r = json.decode(record)
  local w = cfg.by_name[r.worker]
  if not w then error("fail_stuck: unknown worker " .. tostring(r.worker), 0) end
  local t = { cfg = cfg, conn = conn, token = token, lease_ms = math.floor(cfg.lease_ttl * 1000) }
  local h = { worker = w.name, shard = r.shard, def = w, batch = r.batch ~= "" and r.batch or nil,
              prefix = keys.prefix(cfg.namespace, w.queue_name, r.shard) }
  local jobs = {}
  for i, j in ipairs(r.jobs) do jobs[i] = { id = j[1], retry_count = j[2] } end
  local msg = string.format("timeout: the call ran past its timeout of %g s and could not be stopped " ..
    "(JIT-compiled code or a foreign call); the process was replaced", w.timeout)
  core.count_timeout(w.name)
  fail(t, h, jobs, msg, nil, r.done)
  queue.release(conn, { h }, token)
end

-- Exposed for the shard-handler specs, which drive one thread's state from a
-- `luakiq lua` VM: setup(boot) -> t, process(t, handler) -> ok, head, flush(t).
M.setup, M.process, M.flush = setup, process, flush

-- Entry point of a worker thread (called from C with the boot string).
function M.main(boot_json)
  -- os.execute in a worker thread: core.execute (host/sys.c) keeps the
  -- host's INT handler (system(3) ignores INT process-wide while it waits)
  -- and ends the command at the running call's timeout.
  os.execute = core.execute
  local boot = json.decode(boot_json)
  core.log_setup { json = boot.log_json, level = boot.log_level }
  local t = setup(boot)
  local step = t.cfg.scheduler(scheduler_ctx(t))
  local names = {}
  for i, h in ipairs(t.handlers) do names[i] = h.worker .. h.shard end
  log.info("thread started: " .. table.concat(names, ", "))
  core.set_state("idle")
  local backoff = 0.1
  while not core.stopping() do
    local ok, err = xpcall(step, traceback)
    if ok then
      backoff = 0.1
    elseif err == luakiq.FATAL then
      break
    else
      -- A Redis failure (or a bug in a user scheduler): log, back off, reconnect.
      -- A pending ack stays pending: fetch.lua re-acks by batch id, so nothing runs twice.
      log.error(tostring(err):match("^[^\n]*") .. "; retrying in " .. backoff .. " s")
      core.set_state("error")
      core.wait(backoff)
      backoff = math.min(backoff * 2, 5)
      if t.conn:broken() then
        local okc, e = t.conn:reconnect()
        if okc then log.info("reconnected to Redis") else log.warn(e) end
      end
    end
  end
  -- Stop (graceful or after a fatal error): ack what ran, give the shards back
  -- at once. A batch left in flight by luakiq.fatal is then orphaned, and the
  -- next holder restores it without waiting out lease_ttl.
  do
    local deadline = core.now() + 5
    repeat
      local ok, err = pcall(function()
        flush(t)
        queue.release(t.conn, t.handlers, t.token)
      end)
      if ok then break end
      log.warn("cannot ack/release at stop: " .. tostring(err))
      core.sleep(0.2)
      if t.conn:broken() then t.conn:reconnect() end
    until core.now() > deadline
  end
  core.set_state("stopped")
  return 0
end

return M
