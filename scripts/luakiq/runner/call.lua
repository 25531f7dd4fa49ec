-- luakiq.runner.call: one perform call of a worker thread (its own VM) and
-- what ends a call: the payloads loaded (bury.lua for those that never
-- load), the jobs whose windows are closed held back (h.later), flow
-- control asked (luakiq.runner.flow), the call run in a coroutine of its
-- own under the worker's timeout (core.call_begin/call_end) with the
-- delivery id perform can read and its call:fail/call:snooze marks, and a
-- failed, snoozed or marked call recorded (retry_in per job, fail.lua,
-- retries_exhausted). The calls of jobs that waited for a
-- reply (wait_call: on_reply, rickover's rule, lapsed deadlines). Also the
-- call record C keeps for a call that cannot be stopped, and the main VM's
-- side of such a call (fail_stuck).
-- The bottom of the runner: it requires no other runner module but flow,
-- queue and await (luakiq.runner: init -> tasks -> fetch -> call).
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local log = require "luakiq.lib.log"
local queue = require "luakiq.runner.queue"
local wait = require "luakiq.lib.wait"
local timing = require "luakiq.ops.timing"
local failure = require "luakiq.lib.failure"
local flow = require "luakiq.runner.flow"
local awaits = require "luakiq.runner.await"
local json = require "luakiq.json"
local retry = require "luakiq.lib.retry"
local hooks = require "luakiq.lib.hooks"
local windows = require "luakiq.lib.windows"
local luakiq = require "luakiq"
local new_table = require "table.new" -- (LuaJIT's: a table sized at once)

-- The worker thread's states, named once (host/runner.c) and exported as numbers.
local STATE = core.states

local M = {}

-- The traceback handler of the runner's protected calls.
local function traceback(e)
  if type(e) == "string" then return debug.traceback(e, 2) end
  return e
end

-- Calls the worker's retries_exhausted with dead ({id=, payloads=, error=}
-- per morgued payload), bounded by hook_timeout (luakiq.lib.hooks: the
-- failure is recorded already, so its record holds no jobs). Its errors are
-- logged, luakiq.FATAL goes through.
local function exhausted(w, dead)
  local okx, e = hooks.call("retries_exhausted", { worker = w.name }, w.retries_exhausted, dead)
  if not okx then
    if e == luakiq.FATAL then error(e, 0) end
    log.error("retries_exhausted failed: " .. tostring(e), { worker = w.name })
  end
end

-- The error stored for err (traceback tb or nil): format_error's text
-- (at most 8 KiB) and dump_error's bytes of it. Each hook is bounded by
-- hook_timeout (luakiq.lib.hooks; rec: the record of the failure not
-- recorded yet); the fallbacks: tostring(err), the message as it is.
local function stored_error(cfg, rec, err, tb)
  local ok, msg = hooks.call("format_error", rec, cfg.format_error, err, tb)
  if not ok or type(msg) ~= "string" then msg = tostring(err) end
  msg = require("luakiq.lib.errors").cap(msg) -- (what is stored: at most 8 KiB)
  local dumped = msg
  ok, dumped = hooks.call("dump_error", rec, cfg.dump_error, msg)
  if not ok or (dumped ~= nil and type(dumped) ~= "string") then dumped = msg end
  return msg, dumped or ""
end

-- When job, failed with f (failure.of its error, or nil), is tried again:
-- now + f's retry_after, else + retry_in(retry_count + 1).
-- retry_in is bounded by hook_timeout (rec: as stored_error's); its
-- fallback: the default retry formula.
local function retry_at(w, rec, job, f, now)
  local count = job.retry_count + 1
  local okr, delay, timed_out = true, f and f.retry_in, false
  if not delay then okr, delay, timed_out = hooks.call("retry_in", rec, w.retry_in, count) end
  if not okr or type(delay) ~= "number" or delay ~= delay or delay == math.huge or delay == -math.huge then
    if not timed_out then
      log.error("retry_in failed; using the default formula", { worker = w.name, error = tostring(delay) })
    end
    delay = retry.default(count)
  end
  return now + delay
end

-- perform returned normally but marked some of its jobs (call:fail,
-- call:snooze): fail_batch's err then, the others are done.
local MARKED = setmetatable({}, { __tostring = function() return "marked" end })

-- Fails jobs of the batch b (queue.in_flight) of worker w: retry_in per
-- job, then fail.lua (morgue at max_retry_count), then retries_exhausted
-- for what went to the morgue. done, later: as queue.fail's. h: the
-- handler whose batch b is (nil: fail_stuck's), which forgets it once
-- fail.lua has recorded the failure. A snooze (luakiq.snooze) puts the jobs
-- back instead (not a failure). The ids the call marked (h.marks: call:fail,
-- call:snooze) take their own path whatever err is; err MARKED: the
-- call returned, its unmarked jobs are done.
local function fail_batch(cfg, b, w, jobs, err, tb, done, later, h)
  local marks = h and h.marks
  if h then h.marks = nil end
  local rec = { worker = w.name, shard = b.shard, batch = b.batch, token = b.token, key = b.prefix, done = done,
                jobs = jobs }
  local msg, dumped = "", ""
  if err ~= MARKED then msg, dumped = stored_error(cfg, rec, err, tb) end
  local now = core.now()
  local failing, at, own, msgs = {}, {}, {}, {}
  -- luakiq.permanent: as if the retries were exhausted (max_retry_count 0
  -- in fail.lua: the morgue rule at once); luakiq.retry_after: its delay
  -- delivery = "at_most_once": every payload of the call to the morgue
  -- (fail.lua with max_retry_count -1)
  local function max_rc(f)
    if w.delivery == "at_most_once" then return -1 end
    return f and f.permanent and 0 or w.max_retry_count
  end
  local f = failure.of(err)
  local nsnoozed = 0
  for _, job in ipairs(jobs) do
    local m = marks and marks[job.id]
    local snooze = m and m.snooze or not m and f and f.snooze
    if snooze then
      own[#own + 1] = { job.id, queue.snoozed(now + snooze) }
      nsnoozed = nsnoozed + 1
    elseif m then
      local mf = failure.of(m.err)
      local mmsg, mdumped = stored_error(cfg, rec, m.err, nil)
      own[#own + 1] = { job.id, queue.failed_own(retry_at(w, rec, job, mf, now), max_rc(mf), mdumped) }
      msgs[job.id] = mmsg
      log.warn("job failed: " .. mmsg:match("^[^\n]*"), { worker = w.name, shard = b.shard, id = job.id })
    elseif err == MARKED then
      own[#own + 1] = { job.id, "done" }
    else
      failing[#failing + 1] = job
      at[#failing] = retry_at(w, rec, job, f, now)
      msgs[job.id] = msg
    end
  end
  local morgued = queue.fail(b, now, max_rc(f), dumped, failing, at, done, later, own)
  if h then h.batch, h.later, h.held = nil, nil, nil end
  if tb then log.debug(tb) end
  if #failing > 0 then
    log.warn("batch failed: " .. msg:match("^[^\n]*"), {
      worker = w.name, shard = b.shard, ids = queue.ids(failing), morgued = #morgued })
  end
  if nsnoozed > 0 then log.debug("snoozed " .. nsnoozed .. " jobs", { worker = w.name, shard = b.shard }) end
  if #morgued > 0 and w.retries_exhausted then
    -- one entry per id (at most once morgues every payload of an id)
    local by_id, list = {}, {}
    for _, m in ipairs(morgued) do
      local e = by_id[m.id]
      if not e then
        e = { id = m.id, error = msgs[m.id] or msg, payloads = {} }
        by_id[m.id], list[#list + 1] = e, e
      end
      local okp, v = hooks.call("load_payload", nil, cfg.load_payload, m.payload)
      e.payloads[#e.payloads + 1] = { okp and v or m.payload, m.score }
    end
    exhausted(w, list)
  end
end

-- h's batch in flight (queue.in_flight) for the scripts that end it.
local function in_flight(t, h)
  local b = queue.in_flight(t.conn, h.prefix, t.token, t.lease_ms, h.batch, h.worker, h.shard)
  b.fin = h.fin -- (keep_done, monotonic: the ids done before a failure are recorded too)
  return b
end

-- Fails a perform call of h's fetch (fail_batch): its jobs, the ids done
-- before it, and the fetch's later ids; h forgets its batch.
local function fail(t, h, jobs, err, tb, done)
  fail_batch(t.cfg, in_flight(t, h), h.def, jobs, err, tb, done, h.later, h)
end

-- Loads the payloads of fetched jobs with load_payload. A payload that
-- cannot be loaded will never load: it goes to the morgue at once, with the
-- error (bury.lua, one atomic step; retrying it would hold back the id's other
-- payloads for max_retry_count retries), and the rest of the batch runs
-- without it. Returns the jobs left and their payloads by id (jobs with no
-- payload left are dropped), or nil when the lease was lost meanwhile.
-- load_payload is bounded by hook_timeout (luakiq.lib.hooks; rec: the job,
-- done: the ids done before it in its fetch): past it, the payload is one
-- that does not load.
local function load_batch(t, h, jobs, done)
  local cfg, w = t.cfg, h.def
  local load = cfg.load_payload
  -- (luakiq's own load_payload needs no bound: a plain pcall, and no record)
  local rec = not hooks.trusted(load) and flow.hook_rec(t, h, done) or nil
  -- (the usual fetch loads every payload: then no table but the batch and
  -- each job's list is made, and the jobs come back as they are)
  -- (sized at once: a table that grows allocates again as it grows)
  local batch, bad, dropped = new_table(0, #jobs), nil, false
  for i = 1, #jobs do
    local job = jobs[i]
    local pls = job.payloads
    local list, good = new_table(#pls, 0), nil
    if rec then rec.id, rec.retry_count = job.id, job.retry_count end
    for k = 1, #pls do
      local p = pls[k]
      local ok, v
      if rec then ok, v = hooks.call("load_payload", rec, load, p[1]) else ok, v = pcall(load, p[1]) end
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
  local ok = queue.bury(in_flight(t, h), core.now(), bad)
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

-- The history's counts (luakiq.ops.timing) of a call that ended (ok, or
-- raised err): its jobs processed, failed or snoozed (luakiq.snooze, and
-- call:fail, call:snooze's marks).
local function count_outcomes(h, w, ok, err, call, jobs, now)
  local marks, f = rawget(call, "marks_"), not ok and failure.of(err)
  if not marks and not (f and f.snooze) then
    timing.count(h.timing, w.queue_name, ok and "p" or "f", #jobs, now)
    return
  end
  for _, job in ipairs(jobs) do
    local m = marks and marks[job.id]
    local kind = (m and (m.snooze and "s" or "f")) or (ok and "p") or (f and f.snooze and "s") or "f"
    timing.count(h.timing, w.queue_name, kind, 1, now)
  end
end

-- Runs one call, fn (h.perform or h.reply: the worker's function with the
-- server middlewares), in a coroutine of its
-- own (a spare one, above), bounded by the worker's timeout
-- (core.call_begin/call_end: past it, a hook raises "timeout: ..." in the
-- call; luakiq's own waits end themselves). A wait in luakiq's I/O parks h's
-- task (the thread loop answers it) or, with no task, waits in place.
-- Returns ok, err, traceback, fenced (the call was stopped because its lease
-- may have run out: h.lease_until, core.fence), cancelled (a job of the
-- call was cancelled: core.cancel; the call's outcome is the cancel's).
-- C keeps the call's record (host/calls.c: what M.fail_stuck needs should
-- the call never come back): worker, shard, batch, token (an elastic
-- thread's own), the jobs' ids and retry counts (one job's as two
-- arguments: no table for C to read), and the ids done before the call in
-- its fetch (done), which it keeps per shard as done grows by each call of
-- the fetch (reset: another fetch's list). h is the call's context for
-- luakiq.await (luakiq.runner.await.current while the call runs).
local function run_call(h, w, fn, batch, njobs, call, jobs, done, token)
  local co = spare_call or coroutine.create(call_body)
  spare_call = nil
  local m0 = core.mono()
  local reset = done == nil or h.rec_done ~= done
  h.rec_done = done
  local one = #jobs == 1 and jobs[1]
  local started, deadline, slot, cancel = core.call_begin(w.timeout, h.lease_until, h.worker, h.shard, h.batch,
    token, h.prefix, done, reset, h.done_slot, one and one.id or jobs, one and one.retry_count)
  h.done_slot = slot
  wait.current, awaits.current = co, h
  local ok, a, req
  if cancel then -- a job of it was cancelled before it began: it does not run
    ok, a, spare_call = false, "cancelled: a job of this call was cancelled (luakiq cancel)", co
  else
    ok, a, req = coroutine.resume(co, fn, w, batch, call)
  end
  while ok and a ~= CALL_DONE and coroutine.status(co) == "suspended" do
    if a ~= wait.WAIT then
      ok, a = false, "perform yielded: coroutine.yield outside a coroutine of its own"
      break
    end
    core.call_pause()
    wait.current, awaits.current = nil, nil
    local answer
    if h.task and coroutine.running() == h.task then
      answer = coroutine.yield(req, deadline, started) -- to the thread loop (task_step)
    else
      answer = wait_here(req, deadline)
    end
    -- the fence: past its lease bound, the call must not run on (the
    -- shard's next holder may already run its jobs); a cancel stops it too
    local lease_ok, cancelled = core.call_resume(started, deadline, w.timeout)
    if not lease_ok then answer = wait.FENCED elseif cancelled then answer = wait.CANCELLED end
    wait.current, awaits.current = co, h
    ok, a, req = coroutine.resume(co, answer)
  end
  wait.current, awaits.current = nil, nil
  local expired, lease_until, fenced, cancelled = core.call_end(njobs)
  if ok and a == CALL_DONE and not spare_call then spare_call = co end
  h.lease_until = lease_until
  if h.timing then
    local now = core.now()
    timing.observe(h.timing, w.queue_name, "r", core.mono() - m0, now)
    if (ok or not fenced) and not cancelled then count_outcomes(h, w, ok, a, call, jobs, now) end
  end
  -- (cancelled: whatever perform returned or raised)
  if cancelled and not fenced and a ~= luakiq.FATAL then return false, a, nil, false, true end
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

-- perform's second argument, {worker =, shard =, delivery =, retries =}.
-- delivery is an id of the call's jobs and payloads: queue, then per job
-- (in id order) its id and its payloads' bytes and scores (hex of SHA-256,
-- 32 digits). Every attempt to deliver the same jobs with the same payloads
-- gives the same id (a retry after a failure or a timeout, a delivery again
-- after a kill -9), so receivers can de-duplicate on it; the same payload
-- enqueued again later (a new score) or a payload merged in gives another.
-- retries: how many times these jobs failed before (the highest
-- retry_count + 1 of the call's jobs; 0 on a first attempt). Both are
-- computed only when read (a blank job should not pay for a hash).
local function delivery_id(queue_name, jobs)
  local list = {}
  for i, job in ipairs(jobs) do list[i] = job end
  table.sort(list, function(a, b) return a.id < b.id end)
  local parts = { queue_name }
  for _, job in ipairs(list) do
    parts[#parts + 1] = #job.id .. ":" .. job.id .. "#" .. #job.payloads
    for _, p in ipairs(job.payloads) do
      parts[#parts + 1] = string.format("%.17g", tonumber(queue.score(job, p)) or 0) .. " " .. #p[1] .. ":" .. p[1]
    end
  end
  return core.sha256(table.concat(parts, "\n")):sub(1, 32)
end
-- call:fail(id, err) and call:snooze(id, seconds): one job's own outcome,
-- taken when the call ends (fail_batch; marks_[id] = {err =} or {snooze =}).
local METHODS = {}
local function mark(call, id, m)
  if type(id) == "number" and id == math.floor(id) then id = string.format("%.0f", id) end
  local jobs = rawget(call, "jobs_")
  for _, job in ipairs(jobs) do
    if job.id == id then
      local marks = rawget(call, "marks_") or {}
      rawset(call, "marks_", marks)
      marks[id] = m
      return
    end
  end
  error(("%s is not a job of this call (its ids: %s)"):format(
    type(id) == "string" and ("'" .. id .. "'") or tostring(id), table.concat(queue.ids(jobs), ", ")), 0)
end
function METHODS.fail(call, id, err)
  if err == nil or err == luakiq.FATAL then
    error("call:fail: the error must be a message or an error value (luakiq.permanent, ...), got " .. tostring(err), 2)
  end
  local f = failure.of(err)
  local ok, e = pcall(mark, call, id, f and f.snooze and { snooze = f.snooze } or { err = err })
  if not ok then error("call:fail: " .. e, 2) end
end
function METHODS.snooze(call, id, seconds)
  local ok, e = pcall(mark, call, id, { snooze = failure.seconds("call:snooze", seconds) })
  if not ok then error("call:snooze: " .. e, 2) end
end
-- call:result(id, value): what the job id of the call gave, kept with its
-- record when the worker has keep_done (docs/redis.md, "Finished jobs");
-- value JSON-encodable, at most RESULT_MAX bytes encoded. The last one of
-- an id counts; a call that fails keeps none.
local RESULT_MAX = 65536
local function call_result(call, id, value)
  local jobs = type(call) == "table" and rawget(call, "jobs_")
  if not jobs then error("call:result(id, value): call it with a colon", 2) end
  local known = false
  for _, job in ipairs(jobs) do if job.id == id then known = true break end end
  if not known then error("call:result: " .. tostring(id) .. " is not a job of this call", 2) end
  local ok, text = pcall(json.encode, value)
  if not ok then error("call:result: the value of " .. id .. " is not JSON-encodable: " .. tostring(text), 2) end
  if #text > RESULT_MAX then
    error(("call:result: the value of %s is %d bytes as JSON, more than %d"):format(id, #text, RESULT_MAX), 2)
  end
  local res = rawget(call, "results_") or {}
  rawset(call, "results_", res)
  res[id] = text
end
METHODS.result = call_result
local function retries(jobs)
  local n = 0
  for _, job in ipairs(jobs) do n = math.max(n, job.retry_count + 1) end
  return n
end
local CALL_MT = {
  __index = function(t, k)
    local v
    if k == "delivery" then
      v = delivery_id(rawget(t, "queue_"), rawget(t, "jobs_"))
    elseif k == "retries" then
      v = retries(rawget(t, "jobs_"))
    else
      return METHODS[k]
    end
    rawset(t, k, v)
    return v
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

local run_jobs -- (below)

-- Performs jobs (a slice of h's batch in flight) as one perform call. done:
-- the ids of the batch already performed. Returns ok, err, traceback; ok is
-- true too when nothing was left to perform, nil when the lease went, "held"
-- when the throttle held all of them, "units" when flow control refused the
-- call (the rest of the fetch waits too). Raises luakiq.FATAL.
local function perform(t, h, jobs, done)
  local w = h.def
  local loaded, batch = load_batch(t, h, jobs, done)
  if not loaded then return nil end -- lease lost while burying
  if #loaded == 0 then return true, loaded end -- every payload was unloadable
  if h.job_windows then
    loaded, batch = only(in_windows(h, w, loaded), loaded, batch)
    if #loaded == 0 then return "held" end
  end
  if w.concurrency or w.throttle then
    -- flow control: the jobs that may run now (h.later, h.held: the others)
    local run, ferr, refused = flow.admit(t, h, loaded, batch, done)
    if not run then return false, loaded, ferr, nil end -- the throttle raised: the call fails
    if #run == 0 then return refused and "units" or "held" end
    loaded, batch = only(run, loaded, batch)
  end
  local call = setmetatable({ worker = w.name, shard = h.shard, queue_ = w.queue_name, jobs_ = loaded }, CALL_MT)
  return run_jobs(t, h, h.perform, loaded, batch, call, done)
end

-- Runs the call of fn (h.perform, h.reply) for loaded (jobs, their payloads
-- by id in batch), with its perform argument call (CALL_MT): perform's
-- results. What luakiq.await reads of the call is in h (call_jobs,
-- call_batch; it writes awaited and await_error: one call per shard at a
-- time, so the handler holds its call's). A call that failed, or whose
-- luakiq.await raised (even when the call caught it: its wait must not be
-- kept), gives back the units holds of its waits.
function run_jobs(t, h, fn, loaded, batch, call, done)
  local w = h.def
  local njobs = #loaded
  core.set_state(STATE.performing, w.name, h.shard,
    njobs == 1 and loaded[1].id or table.concat(queue.ids(loaded), ","), h.prefix)
  local started = core.now()
  h.call_jobs, h.call_batch, h.awaited, h.await_error = loaded, batch, nil, nil
  local ok, err, tb, fenced, cancelled = run_call(h, w, fn, batch, njobs, call, loaded, done,
    t.el and t.token or nil)
  h.marks = rawget(call, "marks_") -- (call:fail, call:snooze: fail_batch takes them)
  flow.done(t, h)
  if cancelled then
    -- its cancelled jobs end as cancelled, the others of the call go back
    -- unchanged (cancel.lua "end"); nothing of it counts as performed
    log.info("call cancelled", { worker = w.name, shard = h.shard, ids = queue.ids(loaded) })
    core.set_state(STATE.fetching, w.name, h.shard)
    h.marks = nil -- (what the call marked with call:fail or call:snooze is void)
    if t.conn:broken() then t.conn:reconnect() end
    awaits.release_awaited(h)
    if not queue.cancel_end(in_flight(t, h), core.now(), w.keep_done, w.keep_done_max, loaded) then
      return nil
    end
    return true, {}
  end
  if ok and h.await_error then ok, err, tb = false, h.await_error, nil end
  if fenced then
    -- nothing is recorded: the fetch stays in flight for the shard's holder
    -- (another host restores it; this host, if it still holds the shard,
    -- redelivers it: heads.lua), as after a kill -9
    log.warn("call stopped: " .. tostring(err):match("^[^\n]*"),
      { worker = w.name, shard = h.shard, ids = queue.ids(loaded) })
    core.set_state(STATE.fetching, w.name, h.shard)
    h.marks = nil
    return nil
  end
  core.set_state(STATE.fetching, w.name, h.shard)
  -- A luakiq.redis wait the deadline cut short leaves the thread's connection
  -- broken: make it again now, so the failure is recorded at once.
  if t.conn:broken() then t.conn:reconnect() end
  if ok then
    local res, fin = rawget(call, "results_"), h.fin
    if res and fin and fin.keep then -- (sent with the batch's ack: luakiq.runner.fetch, or fail.lua's)
      local list = fin.results or {}
      fin.results = list
      for id, text in pairs(res) do list[#list + 1], list[#list + 2] = id, text end
    end
  end
  if ok and h.marks then
    -- the marked ids take their own path, the others are done (fail_batch)
    for id in pairs(h.marks) do
      if h.awaited and h.awaited[id] then awaits.release(t, w, id) end
    end
    return false, loaded, MARKED
  end
  if ok then
    if t.debug then
      log.debug("batch done",
        { worker = w.name, shard = h.shard, ids = queue.ids(loaded), duration = core.now() - started })
    end
    return true, loaded
  end
  if err == luakiq.FATAL then error(err, 0) end
  awaits.release_awaited(h)
  return false, loaded, err, tb
end

-- One job of h's fetch that the fetch flagged as a reply or a lapsed
-- deadline (job.wait = {kind =, attempt =, value =}: queue.parse_fetch):
-- a call of its own. A reply runs on_reply(id, reply, payloads, call)
-- with the server middlewares around it, as perform (they wrap every call
-- of the worker's code: error reporting, tracing, a transaction), batch
-- = {[id] = payloads}; call has worker, shard, delivery and attempt (the
-- one replied to). Without on_reply, rickover's rule: {"status":
-- "succeeded"} is done, {"status": "failed", "error": ..., "retryable":
-- false} fails (the morgue at once when retryable is false). A lapsed
-- deadline fails with "reply timeout after N s" ("heartbeat timeout after
-- N s"). Returns true (done: acked with the fetch); "later", err (a failure
-- with no user code: the fetch records it after its other calls,
-- luakiq.runner.fetch); false, jobs, err, traceback (on_reply failed); nil
-- (the lease was lost). The job's units hold (a worker with concurrency)
-- is given back unless on_reply awaited again.
function M.wait_call(t, h, job, done)
  local w, wt = h.def, job.wait
  if wt.kind ~= "reply" or not w.on_reply then
    awaits.release(t, w, job.id)
    if wt.kind ~= "reply" then
      return "later", ("%s timeout after %s s"):format(wt.kind == "heartbeat" and "heartbeat" or "reply", wt.value)
    end
    local reply = json.decode_safe(wt.value)
    local status = type(reply) == "table" and reply.status
    if status == "succeeded" then return true end
    if status ~= "failed" then
      return "later", "the reply is not {\"status\": \"succeeded\" | \"failed\"} and the worker has no on_reply: " ..
        wt.value:sub(1, 200)
    end
    local msg = type(reply.error) == "string" and reply.error ~= "" and reply.error or "the reply's status is failed"
    if reply.retryable == false then return "later", luakiq.permanent(msg) end
    return "later", msg
  end
  local loaded, batch = load_batch(t, h, { job }, done)
  if not loaded then return nil end -- lease lost while burying
  if #loaded == 0 then -- its payloads went to the morgue (bury.lua ended its wait)
    awaits.release(t, w, job.id)
    return true
  end
  local reply, jerr = json.decode_safe(wt.value) -- (reply.lua took only JSON)
  if jerr then
    awaits.release(t, w, job.id)
    return false, loaded, "the reply does not decode: " .. jerr
  end
  local call = setmetatable({ worker = w.name, shard = h.shard, attempt = wt.attempt, queue_ = w.queue_name,
                              jobs_ = loaded, id_ = job.id, reply_ = reply }, CALL_MT)
  local ok, performed, err, tb = run_jobs(t, h, h.reply, loaded, batch, call, done)
  if ok == nil then return nil end
  if not (ok and h.awaited and h.awaited[job.id]) then awaits.release(t, w, job.id) end
  return ok, performed, err, tb
end

-- The main VM's side of a call that could not be stopped (its thread still
-- runs; the host replaces the process or exits next): fails the call's jobs
-- with the timeout error, acks the ids its fetch had done, puts the rest back
-- and gives the shard's lease back. s: its record, one of core.host_run's
-- stuck calls ({worker, shard, batch, token, jobs = {{id, retry_count}...},
-- done = {id...}, parked}: run_call's core.call_begin). s.parked: the call
-- was waiting in luakiq's I/O on the stuck thread (its own deadline had not
-- come): its jobs go back unchanged instead.
-- s.hook: a hook (luakiq.lib.hooks) that could not be stopped: its jobs, if
-- any, fail with the default hooks (the main VM has no watch: it runs no
-- hook of the worker's) and the default retry formula.
function M.fail_stuck(cfg, conn, token, s)
  if s.hook and #s.jobs == 0 then return end -- (nothing of a fetch was left to record)
  local w = cfg.by_name[s.worker]
  if not w then error("fail_stuck: unknown worker " .. tostring(s.worker), 0) end
  token = s.token or token -- an elastic thread's own
  local b = queue.in_flight(conn, keys.prefix(cfg.namespace, w.queue_name, s.shard), token,
                            math.floor(cfg.lease_ttl * 1000), s.batch, w.name, s.shard)
  if s.parked and w.delivery == "at_most_once" then
    -- it had started: never again
    fail_batch(cfg, b, w, s.jobs, "interrupted", nil, s.done)
  elseif s.parked then
    queue.settle(b, s.done)
  elseif s.hook then
    local msg = string.format("timeout: %s ran past hook_timeout (%g s) and could not be stopped " ..
      "(JIT-compiled code or a foreign call); the process was replaced", s.hook, cfg.hook_timeout)
    local plain = setmetatable({ format_error = tostring, dump_error = function(m) return m end }, { __index = cfg })
    fail_batch(plain, b, setmetatable({ retry_in = retry.default, retries_exhausted = false }, { __index = w }),
      s.jobs, msg, nil, s.done)
  else
    local msg = string.format("timeout: the call ran past its timeout of %g s and could not be stopped " ..
      "(JIT-compiled code or a foreign call); the process was replaced", w.timeout)
    core.count_timeout(w.name)
    fail_batch(cfg, b, w, s.jobs, msg, nil, s.done)
  end
  queue.release(conn, { b }, token)
end

M.traceback, M.in_flight, M.perform, M.fail = traceback, in_flight, perform, fail
-- h.reply's inner function (luakiq.runner.init's new_handler): on_reply
-- with the reply and the job's payloads (M.wait_call's call).
function M.on_reply(worker, batch, call)
  local id = call.id_
  return worker.on_reply(id, call.reply_, batch[id], call)
end
return M
