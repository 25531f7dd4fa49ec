-- luakiq.runner.tasks: a worker thread's calls in flight and its scheduler
-- context (the ctx the scheduler, luakiq.schedulers, drives).
--
-- Each fetch-and-perform of a shard runs as a *task* (a coroutine). A
-- perform call that waits in luakiq's I/O (luakiq.lib.wait) parks its task;
-- the thread goes on with other shards (at most one task per shard, so
-- per-id order and exclusion hold) and resumes the task when its wait is
-- over or its deadline comes. Redis calls of the runner itself never yield.
-- Which shards may start a call now (busy: paused queues, the worker's
-- windows, flow control's back-off, concurrent_shards) is decided here too.
-- (luakiq.runner: init -> tasks -> fetch -> call.)
local core = require "luakiq.core"
local log = require "luakiq.lib.log"
local wait = require "luakiq.lib.wait"
local luakiq = require "luakiq"
local fetch = require "luakiq.runner.fetch"
local call = require "luakiq.runner.call"

-- The worker thread's states, named once (host/runner.c) and exported as numbers.
local STATE = core.states

local process, flush, take_dead, paused, traceback = fetch.process, fetch.flush, fetch.take_dead, fetch.paused,
  call.traceback

local M = {}

local POLL_EVERY = 0.002 -- seconds between mailbox checks of a busy thread (ctx.poll)

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
  local ok, a, b, c = coroutine.resume(h.task, ...)
  if not ok then
    task_end(t, h)
    error(a, 0)
  end
  if coroutine.status(h.task) == "dead" then
    task_end(t, h)
    return true, a, b
  end
  -- from run_call: the call's wait request, deadline and start (its name in the call slot)
  t.waiting[h] = { req = a, deadline = b, started = c }
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
  -- a cancel marked a call of this thread (host/calls.c): the parked ones
  -- it marked are answered now (run_call's core.call_resume says cancelled)
  local cancels = core.cancels()
  local cancel = cancels ~= t.cancels
  t.cancels = cancels
  for h, w in pairs(t.waiting) do
    if due_at(w) <= now or io_done(w.req) or (cancel and w.started and core.call_cancelled(w.started)) then
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
  -- counts as long overdue, so its fetch restores or redelivers them
  -- (heads.lua); so does one whose jobs are in flight under the lease of a
  -- process of this machine that is gone (fetch.take_dead gave it back).
  -- only: the indexes of the handlers to read (nil: all); the others' entries
  -- are nil.
  function ctx.heads(only)
    local cmds, idx = {}, {}
    local now = core.now()
    for k = 1, only and #only or #t.handlers do
      local i = only and only[k] or k
      idx[k], cmds[k] = i, { script = "heads", t.handlers[i].prefix, t.token, now }
    end
    local replies = t.conn:pipeline(cmds)
    local heads = {}
    for k, r in ipairs(replies) do
      if type(r) ~= "table" or r.err then error("heads.lua failed: " .. tostring(r and r.err), 0) end
      local i = idx[k]
      local o = r[2]
      local orphaned = o == "1" or (o ~= "0" and take_dead(t, t.handlers[i], o))
      heads[i] = orphaned and 0 or tonumber(r[1]) or false
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
    flush(t, true)
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

M.scheduler_ctx, M.drive_parked = scheduler_ctx, drive_parked
return M
