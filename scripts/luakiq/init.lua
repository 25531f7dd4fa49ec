-- luakiq: the module every worker, config and middleware file can require.
-- It is bound to the VM it is required in: `redis` is this thread's own
-- connection, `perform_async` enqueues through it (docs/lua-api.md).
local core = require "luakiq.core"
local runtime = require "luakiq.lib.runtime"
local wait = require "luakiq.lib.wait"

local M = {
  json = require "luakiq.json",
  log = require "luakiq.lib.log",
  splitters = require "luakiq.splitters",
  schedulers = require "luakiq.schedulers",
  now = core.now,
  version = "0.1.0",
}

local function conn()
  local c = runtime.ctx.conn
  if not c then error("luakiq: no Redis connection in this VM yet (not available while config loads)", 2) end
  return c
end

-- perform_async(worker_name, jobs): enqueue into any worker of the script
-- directory (client middlewares apply). Returns how many jobs were enqueued.
function M.perform_async(worker, jobs)
  return require("luakiq.client").push(conn(), runtime.ctx.cfg, worker, jobs)
end

-- luakiq.redis.call(...) raises on an error reply; pcall returns nil, err.
-- Inside a perform call whose shard lease may have run out, both raise
-- "lease lost: ..." instead of sending (core.lease_check: the fence).
M.redis = {
  call = function(...)
    core.lease_check()
    return conn():call(...)
  end,
  pcall = function(...)
    core.lease_check()
    return conn():pcall(...)
  end,
}

-- sleep(s): waits s seconds; inside a perform call, never past its timeout
-- (then it raises the timeout error), and the thread runs other shards'
-- calls meanwhile (luakiq.lib.wait). deadline(): seconds left for the running
-- perform call, nil outside one.
M.sleep = wait.sleep
M.http = { request = require("luakiq.http").request }
M.process = { run = require("luakiq.process").run }
M.deadline = core.deadline

-- await(id [, opts]) inside perform or on_reply: the job of id (one of the
-- call's) waits for a reply once the call ends (docs/lua-api.md, "Jobs that
-- wait for a reply"). Returns {token =, url =, attempt =}. The worker
-- thread's runner does the work (luakiq.runner.await, through
-- luakiq.lib.wait's await field); anywhere else this raises.
function M.await(id, opts)
  local f = wait.await
  if not f then error("luakiq.await: only inside perform or on_reply, on a worker thread of luakiq run", 2) end
  local r = f(id, opts, 2)
  return r
end

-- Error values for the failure path (luakiq.lib.failure): error(luakiq.permanent(msg))
-- sends the call's jobs to the morgue at once; error(luakiq.retry_after(s, msg))
-- retries them in s seconds; error(luakiq.snooze(s, msg)) puts them back due in
-- s seconds, not a failure (no retry counted, no error stored).
M.permanent = require("luakiq.lib.failure").permanent
M.retry_after = require("luakiq.lib.failure").retry_after
M.snooze = require("luakiq.lib.failure").snooze

-- Stops the whole process: the current batch stays in flight (it comes back
-- on the next start), last_words(msg) runs on the main thread, exit code 1.
M.FATAL = setmetatable({}, { __tostring = function() return "luakiq.fatal" end })
function M.fatal(msg)
  core.fatal(tostring(msg))
  error(M.FATAL, 0)
end

return M
