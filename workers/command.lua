-- luakiq.workers.command: a ready-made worker that runs a program once per
-- perform call (docs/workers.md).
--
--   -- DIR/workers/Resize.lua
--   return require("luakiq.workers.command") {
--     argv = { "/usr/local/bin/resize", "--quality", "80" },
--     batch_size = 10, timeout = 120, -- and any other worker key
--   }
--
-- The program gets the call's jobs as canonical JSON on stdin,
-- {"jobs":[{"id":"1","payloads":[...]}],"worker":"Resize"}, is started
-- without a shell (argv[1] looked up in PATH) in a process group of its own,
-- and its stdout is the host's. Exit 0: the jobs are done. Exit 65
-- (EX_DATAERR): a permanent failure (the morgue at once). Anything else
-- (another code, a signal): a failure that takes retry_in, with the last
-- line the program wrote to stderr as the error. At the call's timeout the
-- group gets TERM, KILL 2 s later, and the call fails with the timeout error.
-- While the program runs the call is parked: the thread runs other shards'
-- calls meanwhile.
local config = require "luakiq.lib.config"
local deliver = require "luakiq.lib.deliver"
local failure = require "luakiq.lib.failure"
local process = require "luakiq.process"

local WHAT = "luakiq.workers.command"
local EX_DATAERR = 65

return function(opts)
  local own, w = config.ready_made_options(WHAT, opts, { argv = "strs" })
  if not own.argv then error(WHAT .. ": argv is required (an array of strings: the program and its arguments)", 0) end
  local argv = { unpack(own.argv) }
  function w.perform(batch, call)
    local r = process.run { argv = argv, stdin = deliver.body(call.worker, batch) }
    if r.code == 0 then return end
    local msg = deliver.last_line(r.stderr)
      or (r.code and ("%s exited with code %d"):format(argv[1], r.code))
      or ("%s was killed by signal %d"):format(argv[1], r.signal)
    if r.code == EX_DATAERR then error(failure.permanent(msg), 0) end
    error(msg, 0)
  end
  return w
end
