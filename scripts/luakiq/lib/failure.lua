-- luakiq.lib.failure: error values that tell the failure path what to do with a
-- failed call's jobs (the runner reads them; anything else raised is an
-- ordinary failure: retry_in, then the morgue).
--   error(luakiq.permanent(msg))         the call's jobs fail as if their
--                                         retries were exhausted (the morgue
--                                         rule at once, no retry_in)
--   error(luakiq.retry_after(s, msg))    an ordinary failure whose next try
--                                         is s seconds from now (e.g. an HTTP
--                                         Retry-After), not retry_in's
--   error(luakiq.snooze(s, msg))         not a failure: the call's jobs go
--                                         back due s seconds from now, their
--                                         retry_count and error unchanged
--                                         (counted as snoozed)
-- All print as msg (tostring), which is what format_error stores by default.
local M = {}

local mt = { __tostring = function(e) return e.message end }

local function message(msg)
  if msg == nil then return "failed" end
  return tostring(msg)
end

function M.permanent(msg)
  return setmetatable({ message = message(msg), permanent = true }, mt)
end

-- The most seconds a retry_after or a snooze may ask for: 10 years.
M.MAX_SECONDS = 10 * 365 * 86400

-- seconds, checked for `what` (raised at the caller of the caller's caller:
-- the user's code that asked for it).
function M.seconds(what, seconds)
  if type(seconds) ~= "number" or not (seconds >= 0 and seconds <= M.MAX_SECONDS) then
    error(("%s: seconds must be a number from 0 to %d (10 years), got %s"):format(
      what, M.MAX_SECONDS, tostring(seconds)), 3)
  end
  return seconds
end

function M.retry_after(seconds, msg)
  return setmetatable({ message = message(msg), retry_in = M.seconds("luakiq.retry_after", seconds) }, mt)
end

function M.snooze(seconds, msg)
  return setmetatable({ message = message(msg or "snoozed"),
                        snooze = M.seconds("luakiq.snooze", seconds) }, mt)
end

-- The failure value err is, or nil for an ordinary error.
function M.of(err)
  if type(err) == "table" and getmetatable(err) == mt then return err end
  return nil
end

return M
