-- luakiq.ops.feed: `luakiq enqueue` of a file of JSON lines, streamed: memory
-- stays bounded by two chunks of jobs (one Redis stores, the next being
-- read) whatever the file's size.
--
-- All or nothing, for a file read twice: the first pass reads every line
-- and checks it as the enqueue would (JSON, every field, the payload dumped
-- against max_payload_bytes) and sends nothing; one bad line stops it with
-- "line N: ..." and nothing is enqueued. Only then the second pass sends
-- the jobs through a luakiq.client.pusher (chunks of its PUSHER_CHUNK jobs,
-- one pipeline of push.lua calls per chunk; without client middlewares the
-- next chunk is read while Redis stores one). What the first pass cannot
-- see (a middleware raising or making a job invalid, Redis failing) stops
-- the second at a chunk: the error then says how many jobs, of which lines,
-- were enqueued before it (the pusher's counts). stdin is spooled to a temporary file
-- first (so it can be read twice), never held in memory.
-- A JSON array (input whose first non-space byte is "[") is read whole, as
-- one document (lua-cjson has no streaming decoder): use JSON lines for big
-- inputs.
local core = require "luakiq.core"
local json = require "luakiq.json"
local errors = require "luakiq.lib.errors"
local client = require "luakiq.client"

local M = {}

local BLOCK = 1048576

-- One progress line on stderr, at most every 0.25 s, only on a terminal.
function M.progress(tty)
  if not tty then return function() end end
  local last = 0
  return function(text, final)
    local now = core.mono()
    if final or now - last >= 0.25 then
      last = now
      io.stderr:write("\r", text, "\27[K", final and "\n" or "")
      io.stderr:flush()
    end
  end
end

-- 1234567 -> "1,234,567"
local function thousands(n)
  local s = tostring(math.floor(n))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- Opens the input: path (nil or "-" = stdin). Returns a seekable file and
-- the temporary path to remove afterwards (stdin spooled), or raises.
function M.open(path)
  if path and path ~= "-" then
    local f, err = io.open(path, "rb")
    if not f then errors.input("cannot read " .. err) end
    return f
  end
  if io.stdin:seek("set", 0) then return io.stdin end -- a redirected file
  local tmp = os.tmpname()
  local out = assert(io.open(tmp, "wb"))
  while true do
    local block = io.stdin:read(BLOCK)
    if not block then break end
    out:write(block)
  end
  out:close()
  return assert(io.open(tmp, "rb")), tmp
end

-- Refuses (exit 2, naming its line) an input with a NUL byte: a line read
-- ends at one, so the rest would be lost or the line taken as blank.
-- Leaves the file at its start.
function M.refuse_nul(f)
  local before, at = 0, nil
  while true do
    local b = f:read(65536) -- (small: the blocks read are garbage at once)
    if not b then break end
    at = b:find("\0", 1, true)
    if at then at = before + at break end
    before = before + #b
  end
  f:seek("set", 0)
  if not at then return end
  local line, seen = 1, 0 -- (its line: the newlines before it)
  while seen < at do
    local b = f:read(math.min(BLOCK, at - seen))
    line = line + select(2, b:gsub("\n", ""))
    seen = seen + #b
  end
  f:seek("set", 0)
  errors.input("line " .. line .. ": a NUL byte (JSON text has none: write \\u0000 inside a string)")
end

-- Whether the input is one JSON array (first non-space byte "["); leaves
-- the file at its start.
function M.is_array(f)
  local head = ""
  repeat
    local b = f:read(4096)
    if not b then break end
    head = b:match("^%s*(.?)")
  until head ~= ""
  f:seek("set", 0)
  return head == "["
end

-- Decodes line n, or raises "line n: invalid JSON: ...".
local try_decode = json.try_decode
local function decode(line, n)
  local ok, v = try_decode(line)
  if not ok then errors.input("line " .. n .. ": invalid JSON: " .. tostring(v):match("^[^\n]*")) end
  return v
end

-- Whether a line holds anything (a blank one is skipped). (A line that
-- starts with "{" needs no pattern: a trace cannot compile one.)
local byte = string.byte
local function filled(line)
  return byte(line, 1) == 123 or line:match("%S") ~= nil
end

-- Enqueues the JSON lines of f into worker_name; returns the jobs enqueued.
-- connect() gives the Redis connection, asked for once the check passed;
-- tty: write progress lines to stderr.
function M.lines(connect, cfg, worker_name, f, tty)
  local show = M.progress(tty)
  local check = client.checker(cfg, worker_name, "line")
  -- pass 1: check every line, send nothing
  local total, n = 0, 0
  for line in f:lines() do
    n = n + 1
    if filled(line) then
      check(decode(line, n), n)
      total = total + 1
      if total % 1000 == 0 then show("checked " .. thousands(total) .. " jobs") end
    end
  end
  -- pass 2: send, through a pusher (its chunks: one in flight at most, its
  -- replies read before the next is sent, so an error names the lines of
  -- the chunk that failed)
  f:seek("set", 0)
  local p = client.pusher(connect(), cfg, worker_name)
  local started, shown = core.mono(), 0
  local function done()
    shown = p.stored
    local dt = core.mono() - started
    show(("enqueued %s / %s jobs, %s jobs/s"):format(thousands(shown), thousands(total),
      thousands(dt > 0 and shown / dt or 0)), shown == total)
  end
  local ok, err = pcall(function()
    n = 0
    for line in f:lines() do
      n = n + 1
      if filled(line) then
        p:add(decode(line, n), n)
        if p.stored ~= shown then done() end
      end
    end
    p:close()
    if p.stored ~= shown then done() end
  end)
  if ok then return p.stored end
  local at = p.failed
  if not at then error(err, 0) end -- (not the push's: a line that no longer decodes)
  -- the same kind of error (exit code), with where the file stopped
  local kind, why = errors.describe(err)
  local before = p.stored - at.stored
  local msg = ("lines %d-%d: %s; %s"):format(at.from, at.to, why:match("^[^\n]*"), before == 0 and
    "nothing enqueued before them" or ("%d jobs enqueued before them (lines 1-%d)"):format(before, at.from - 1))
  if at.stored > 0 then msg = msg .. (", %d in all"):format(p.stored) end
  if kind == "runtime" or kind == "missing" then error(msg, 0) end
  errors[kind](msg)
end

return M
