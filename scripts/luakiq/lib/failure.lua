-- luakiq.lib.failure: error values that tell the failure path what to do with a
-- failed call's jobs (the runner reads them; anything else raised is an
-- ordinary failure: retry_in, then the morgue).
--   error(luakiq.permanent(msg))         the call's jobs fail as if their
--                                         retries were exhausted (the morgue
--                                         rule at once, no retry_in)
--   error(luakiq.retry_after(s, msg))    an ordinary failure whose next try
--                                         is s seconds from now (e.g. an HTTP
--                                         Retry-After), not retry_in's
-- Both print as msg (tostring), which is what format_error stores by default.
local M = {}

local mt = { __tostring = function(e) return e.message end }

local function message(msg)
  if msg == nil then return "failed" end
  return tostring(msg)
end

function M.permanent(msg)
  return setmetatable({ message = message(msg), permanent = true }, mt)
end

function M.retry_after(seconds, msg)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 or seconds == math.huge then
    error("luakiq.retry_after: seconds must be a number >= 0", 2)
  end
  return setmetatable({ message = message(msg), retry_in = seconds }, mt)
end

-- The failure value err is, or nil for an ordinary error.
function M.of(err)
  if type(err) == "table" and getmetatable(err) == mt then return err end
  return nil
end

return M
