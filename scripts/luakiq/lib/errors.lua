-- luakiq.lib.errors: error values that say what kind of failure they are, so the
-- CLI and HTTP layers can map them to exit codes / statuses:
--   input  (bad usage or bad data: exit 2, HTTP 400)
--   notfound (unknown worker: exit 2, HTTP 404)
--   config (an error in the script directory: exit 2)
--   missing (a job id that is nowhere: exit 1, HTTP 404)
-- Anything else (Redis down, a bug) is a runtime failure: exit 1, HTTP 500.
-- Also the one reader of Redis errors by their code word (redis_code).
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

-- The most of a failure's error text that is stored (fail.lua), listed and
-- sent (API, CLI): an error() of megabytes would be kept whole.
M.MAX_TEXT = 8192

-- text cut to at most max bytes (M.MAX_TEXT by default) of whole UTF-8
-- characters, ending in "... [cut: N bytes in all]" when it was longer.
function M.cap(text, max)
  max = max or M.MAX_TEXT
  if #text <= max then return text end
  local mark = ("... [cut: %d bytes in all]"):format(#text)
  local n = max - #mark
  while n > 0 and (text:byte(n + 1) or 0) >= 0x80 and text:byte(n + 1) < 0xC0 do n = n - 1 end
  return text:sub(1, n) .. mark
end

-- kind, message of any error value.
function M.describe(err)
  if type(err) == "table" and getmetatable(err) == mt then return err.kind, err.msg end
  return "runtime", tostring(err)
end

-- The code word of a Redis error and the rest of its first line: the one
-- way the host reads an error of Redis or of luakiq's scripts (callers
-- compare the code, never search the text). err: an error reply's text
-- ({err = ...} from conn:pipeline or conn:recv) or what conn:call and
-- conn:script raise ("redis: " and that text). Redis's own errors start
-- with their code (NOSCRIPT, OOM, MOVED 3999 host:port). A script's
-- error("CODE details", 0) (docs/redis.md, "Errors") comes back wrapped
-- by Redis, "ERR CODE details script: SHA, on @user_script:N." (Redis >= 7)
-- or "ERR Error running script (call to f_SHA): @user_script:N: CODE
-- details" (6.2): unwrapped here. Returns code, rest ("RESHARDED", "12 6";
-- "BADARG", "luakiq push: ..."); nil and the line when it has no code word
-- (an I/O error: "redis: connection lost").
function M.redis_code(err)
  local line = tostring(err):match("^[^\n]*")
  local s = line:gsub("^redis: ", "")
  local script
  s, script = s:gsub(" script: %x+, on @user_script:%d+%.?$", "")
  if script == 0 then s, script = s:gsub("^ERR Error running script %(call to f_%x+%): @user_script:%d+: ", "ERR ") end
  local code, rest = s:match("^(%u[%u%d_]*) (.*)$")
  if not code then code, rest = s:match("^(%u[%u%d_]*)$"), "" end
  if code == "ERR" and script > 0 then
    local inner, more = rest:match("^(%u[%u%d_]+) (.*)$")
    if not inner then inner, more = rest:match("^(%u[%u%d_]+)$"), "" end
    if inner then return inner, more end
  end
  if not code then return nil, line end
  return code, rest
end

-- The error as one line for a person, unwrapped as redis_code does: the
-- code word and the rest ("BADARG luakiq push: job 2 perform_in must be a
-- finite number, got 'nan'", "OOM command not allowed ...").
function M.redis_text(err)
  local code, rest = M.redis_code(err)
  if not code then return rest end
  return rest == "" and code or code .. " " .. rest
end

return M
