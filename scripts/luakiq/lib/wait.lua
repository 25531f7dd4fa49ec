-- luakiq.lib.wait: how a perform call waits in luakiq's own I/O (luakiq.sleep,
-- luakiq.http) without holding its thread.
--
-- The runner resumes every perform call in a coroutine of its own and sets
-- M.current to it while it runs. A wait inside that coroutine yields a
-- request to the runner (M.yield); the runner answers when the wait is over,
-- meanwhile running other shards' calls (luakiq.runner), or waits in place
-- when it cannot. A wait anywhere else (a coroutine of the worker's own, the
-- main VM, `luakiq lua`) returns nil from M.yield: the caller waits in place.
-- Requests: {kind = "sleep", ["until"] = core.mono() + s}
--           {kind = "http", transfer = t} (luakiq.http: done when t:done())
--           {kind = "proc", proc = p, ["until"] = mono or nil} (luakiq.process:
--             done when p:done(); the runner polls p:fds())
-- Answers: true (done, or the request's own "until" came), M.TIMEOUT (the
-- call's deadline came first), M.FENCED (the shard's lease may have run out
-- while the call waited: it must not go on beside the next holder),
-- M.CANCELLED (a job of the call was cancelled: luakiq cancel).
local core = require "luakiq.core"

local M = {}

M.WAIT = setmetatable({}, { __tostring = function() return "luakiq.lib.wait" end })
M.TIMEOUT = setmetatable({}, { __tostring = function() return "luakiq.wait.TIMEOUT" end })
M.FENCED = setmetatable({}, { __tostring = function() return "luakiq.wait.FENCED" end })
M.CANCELLED = setmetatable({}, { __tostring = function() return "luakiq.wait.CANCELLED" end })
M.current = nil
-- luakiq.await's worker-thread side (luakiq.runner.await sets it; nil in
-- a VM that runs no calls): luakiq.await(id, opts) calls it inside a call.
M.await = nil

-- True inside the perform call the runner is running (its own coroutine).
function M.inside()
  local co = coroutine.running()
  return co ~= nil and co == M.current
end

-- Yields req to the runner; returns its answer, or raises the call's
-- timeout error when the deadline came first, "lease lost: ..." when the
-- lease fence stopped the call, "cancelled: ..." when a job of the call was
-- cancelled (after on_timeout(), which ends what the wait started). The
-- last two raise again at every instruction until the call ends (a pcall
-- cannot keep it going). Only when M.inside().
function M.yield(req, on_timeout)
  local answer = coroutine.yield(M.WAIT, req)
  if answer == M.TIMEOUT or answer == M.FENCED or answer == M.CANCELLED then
    if on_timeout then on_timeout() end
    if answer == M.FENCED then core.fence() end
    if answer == M.CANCELLED then core.cancel() end
    core.raise_timeout()
  end
  return answer
end

-- luakiq.sleep(s)
function M.sleep(s)
  if type(s) ~= "number" or s ~= s then error("luakiq.sleep: seconds must be a number", 2) end
  if not M.inside() then return core.sleep(s) end
  if s <= 0 then s = 0 end
  M.yield { kind = "sleep", ["until"] = core.mono() + s }
end

return M
