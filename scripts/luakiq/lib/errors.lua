-- luakiq.lib.errors: error values that say what kind of failure they are, so the
-- CLI and HTTP layers can map them to exit codes / statuses:
--   input  (bad usage or bad data: exit 2, HTTP 400)
--   notfound (unknown worker: exit 2, HTTP 404)
--   config (an error in the script directory: exit 2)
--   missing (a job id that is nowhere: exit 1, HTTP 404)
-- Anything else (Redis down, a bug) is a runtime failure: exit 1, HTTP 500.
local M = {}

local mt = { __tostring = function(e) return e.msg end }

local function raise(kind, msg)
  error(setmetatable({ kind = kind, msg = msg }, mt), 0)
end

function M.input(msg) raise("input", msg) end
function M.notfound(msg) raise("notfound", msg) end
function M.config(msg) raise("config", msg) end
-- Not raised: the value, for error(errors.missing(msg), 0).
function M.missing(msg) return setmetatable({ kind = "missing", msg = msg }, mt) end

-- kind, message of any error value.
function M.describe(err)
  if type(err) == "table" and getmetatable(err) == mt then return err.kind, err.msg end
  return "runtime", tostring(err)
end

return M
