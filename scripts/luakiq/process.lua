-- luakiq.process: runs a program without a shell, its stdin given as bytes,
-- bounded by the running call's timeout (host/proc.c does the spawning).
--
-- run(opts) -> {code =, signal =, stderr =}
--   argv    array of strings (required); argv[1] is looked up in PATH
--   stdin   string for the program's stdin (default: nothing, /dev/null)
--   timeout seconds (default: none of its own; inside a perform call never
--           past the call's deadline)
--   grace   seconds between TERM and KILL when it is ended (default 2)
-- code: the exit status (nil when a signal ended it); signal: that signal's
-- number; stderr: the last 4 KiB the program wrote there. Once the program
-- exits, what it left running in its process group gets KILL. Its stdout is the
-- host's. Raises "process: <argv[1]> ran past its timeout of N s" at its own
-- timeout, the call's timeout error at the call's deadline (either way the
-- program's process group got TERM, then KILL after grace), and
-- "spawn: <argv[1]>: <reason>" when it cannot start.
--
-- Inside a perform call the call parks while the program runs (the thread
-- runs other shards' calls); elsewhere it waits in place.
local core = require "luakiq.core"
local wait = require "luakiq.lib.wait"

local M = {}

local OPTIONS = { argv = true, stdin = true, timeout = true, grace = true }
local function bad(msg) error("luakiq.process.run: " .. msg, 4) end -- the caller of run()

local function check(opts)
  if type(opts) ~= "table" then bad("expects a table of options") end
  for k in pairs(opts) do
    if not OPTIONS[k] then bad(("unknown option '%s' (options: argv, grace, stdin, timeout)"):format(tostring(k))) end
  end
  local argv = opts.argv
  if type(argv) ~= "table" or #argv == 0 then bad("argv must be a non-empty array of strings") end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then bad(("argv[%d] must be a string"):format(i)) end
  end
  if opts.stdin ~= nil and type(opts.stdin) ~= "string" then bad("stdin must be a string") end
  for _, k in ipairs { "timeout", "grace" } do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or not (v > 0) or v == math.huge) then
      bad(k .. " must be a number > 0 (seconds)")
    end
  end
end

function M.run(opts)
  check(opts)
  local grace = opts.grace or 2
  local p = core.spawn(opts.argv, opts.stdin)
  local until_ = opts.timeout and core.mono() + opts.timeout or nil
  if wait.inside() then
    -- at the deadline: TERM, up to grace seconds, KILL, reaped (p:terminate,
    -- in C: it waits in place, at most grace seconds)
    wait.yield({ kind = "proc", proc = p, ["until"] = until_ }, function() p:terminate(grace) end)
  else
    while not p:done() do
      local left = core.deadline()
      if left and left <= 0 then
        p:terminate(grace)
        core.raise_timeout()
      end
      if until_ and core.mono() >= until_ then break end
      local step = 1
      if left then step = math.min(step, left) end
      if until_ then step = math.min(step, until_ - core.mono()) end
      p:wait(math.max(step, 0.001))
    end
  end
  if not p:done() then
    p:terminate(grace)
    error(("process: %s ran past its timeout of %g s"):format(opts.argv[1], opts.timeout), 0)
  end
  local code, signal, stderr = p:result()
  p:close()
  return { code = code, signal = signal, stderr = stderr }
end

return M
