-- luakiq.lib.hooks: the one protected call of the hooks that run outside
-- perform (retry_in, retries_exhausted, format_error, dump_error,
-- load_payload, dump_payload, throttle, cost, label, a config's own
-- scheduler), bounded by hook_timeout on a worker thread.
--
-- The bound is perform's own (host/calls.c, host/core.c): the hook runs in a
-- coroutine between core.call_begin and core.call_end, so past hook_timeout
-- the host's watch signals the thread and the count hook raises the timeout
-- error in it; code the hook cannot reach (a JIT-compiled loop, a blocking
-- foreign call) makes the thread stuck and the host replaces the process,
-- with the record given here (its `hook` names the hook): the main VM then
-- fails its jobs with the default hooks only (luakiq.runner.call's
-- fail_stuck). Each caller applies its hook's fallback when the call fails
-- or times out (docs/configuration.md, hook_timeout).
--
-- Off a worker thread (the main VM's splitter, the listings of the web
-- thread and the CLI: load_payload, load_error), no watch serves the VM: the
-- hook runs with the JIT off and its traces flushed, under a count hook that
-- looks at the clock (core.bounded), and ends past hook_timeout or when the
-- host stops; its caller applies the fallback of OFF_THREAD. Inside a
-- perform call (a hook luakiq.await calls) a hook is a plain pcall:
-- perform's deadline bounds it.
local core = require "luakiq.core"
local log = require "luakiq.lib.log"
local json = require "luakiq.json"

local M = {}

M.timeout = 5      -- seconds: config.lua's hook_timeout (luakiq.runner's setup sets it)
M.bounded = false  -- true on a worker thread (set with timeout)

-- What each hook's caller does instead when the hook fails or times out
-- (the line logged on a timeout; docs/configuration.md, hook_timeout).
local FALLBACK = {
  retry_in = "the default retry formula is used",
  format_error = "tostring(error) is used",
  dump_error = "the message is stored as it is",
  load_payload = "the payload goes to the morgue as one that does not load",
  dump_payload = "the schedule's job is enqueued with an empty payload",
  throttle = "the job runs (no throttle)",
  cost = "the cost is 1",
  label = "the job has no label",
  retries_exhausted = "the host goes on",
  scheduler = "this step is skipped",
}
-- The same, for the hooks run off a worker thread (false: no line, the
-- caller's error says it).
local OFF_THREAD = {
  splitter = false,
  load_payload = "the payload is shown as stored",
  load_error = "the error is shown as stored",
}

local NONE = {}
local DONE = {}
local TRUSTED = { [json.encode] = true, [json.decode] = true, [tostring] = true }

-- Sets hook_timeout (seconds) for this VM's hooks; bounded by the watch on
-- a worker thread (M.bounded), by core.bounded elsewhere.
function M.setup(timeout)
  M.timeout = timeout
  M.bounded = core.thread_index() ~= nil
end

-- The line logged when a hook ran past hook_timeout, and the error it gives.
local function past(what, fallback, fields)
  local msg = ("%s ran past hook_timeout (%g s)"):format(what, M.timeout)
  if fallback[what] ~= false then log.error(msg .. ": " .. (fallback[what] or "its fallback is used"), fields) end
  return false, msg, true
end

-- M.call off a worker thread: fn(a, b) under core.bounded, with the JIT off
-- (its traces flushed: LuaJIT checks no hook in them) and back as it was.
-- A stop (TERM, INT) ends it as a timeout does, with no line.
local function off_thread(what, fn, a, b)
  local on = jit.status()
  jit.off()
  jit.flush()
  local ok, v, why = core.bounded(M.timeout, fn, a, b)
  if on then jit.on() end
  if why == "timeout" then return past(what, OFF_THREAD) end
  if why then return false, what .. " was stopped: the host is stopping", true end
  if not ok and type(v) == "string" then
    -- (the error as pcall gives it: without the traceback vm_pcall adds)
    local at = v:find("\nstack traceback:", 1, true)
    if at then v = v:sub(1, at - 1) end
  end
  return ok, v, false
end

-- The hooks' coroutine runs one hook after another (yields DONE, ok, value
-- after each): the thread keeps one (spare), so a bounded hook costs no
-- coroutine of its own. One that raised past its pcall (the timeout) or
-- yielded on its own is never reused.
local spare
local function body(fn, a, b)
  while true do
    fn, a, b = coroutine.yield(DONE, pcall(fn, a, b))
  end
end

-- A bounded hook's call of a function of the runner's (M.outside): the hook
-- yields OUT, fn, args; its driver runs fn unbounded, in the runner's own
-- state, and resumes the hook with pcall's results.
local OUT = {}
local running -- the hook coroutine M.call drives now

-- fn, but called from a bounded hook it runs outside the bound (in the
-- runner's state, where the timeout never raises: the runner's own work,
-- a perform call with its own timeout) and the hook's clock starts again
-- after it. A config's scheduler gets its ctx's functions so.
function M.outside(fn)
  return function(...)
    if not running or coroutine.running() ~= running then return fn(...) end
    local r = { coroutine.yield(OUT, fn, ...) }
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, table.maxn(r))
  end
end

-- Calls fn(a, b) as the hook named what: -> ok, value, timed_out. rec: what
-- the main VM needs should the thread get stuck in it ({worker =, shard =,
-- batch =, token =, key =, done = {id...}: the ids done before it in its
-- fetch, and its jobs: jobs = {{id =, retry_count =}...}, or one job's id =,
-- retry_count =}; nil: none). A hook that yields fails.
function M.call(what, rec, fn, a, b)
  if not M.bounded and not TRUSTED[fn] then return off_thread(what, fn, a, b) end
  if TRUSTED[fn] or core.deadline() then
    local ok, v = pcall(fn, a, b)
    return ok, v, false
  end
  rec = rec or NONE
  local co = spare or coroutine.create(body)
  spare = nil
  local function arm()
    core.call_begin(M.timeout, nil, rec.worker or "", rec.shard or -1, rec.batch, rec.token, rec.done and rec.key,
      rec.done, true, nil, rec.id or rec.jobs or NONE, rec.id and rec.retry_count, what)
    running = co
  end
  arm()
  local r = { coroutine.resume(co, fn, a, b) }
  running = nil
  local expired = core.call_end(0)
  while r[1] and r[2] == OUT and not expired do
    local out = { pcall(r[3], unpack(r, 4, table.maxn(r))) }
    arm()
    r = { coroutine.resume(co, unpack(out, 1, table.maxn(out))) }
    running = nil
    expired = core.call_end(0)
  end
  local ok, v
  if r[1] and r[2] == DONE then
    spare, ok, v = co, r[3], r[4]
  elseif r[1] then
    ok, v = false, what .. " yielded (a hook must not)"
  else
    ok, v = false, r[2]
  end
  if expired then return past(what, FALLBACK, { worker = rec.worker, shard = rec.shard, id = rec.id }) end
  return ok, v, false
end

-- fn needs no bound (luakiq's own default hooks: M.call is a plain pcall).
function M.trust(fn) TRUSTED[fn] = true end

-- Whether M.call(_, _, fn, ...) needs no record (a plain pcall, or off a
-- worker thread, where the record is not used).
function M.trusted(fn) return not M.bounded or TRUSTED[fn] == true end

return M
