-- Runs busted inside the host binary: `luakiq lua spec/run.lua SPEC...`
-- (ctest does this for every spec file). Specs exercise the real embedded runtime.
-- Whatever the outcome, every host process and redis-server the spec file
-- started is ended (by its pid) before the process exits.
package.path = "spec/?.lua;" .. package.path
local host = require "helpers.host"
local redis = require "helpers.redis"

local function cleanup()
  host.cleanup()
  redis.cleanup()
end

local real_exit = os.exit
os.exit = function(...)
  cleanup()
  return real_exit(...)
end
local ok, err = pcall(require "busted.runner", { standalone = false })
cleanup()
if not ok then error(err, 0) end
