-- luakiq.ops.feed: `luakiq enqueue` of a file of JSON lines, streamed: memory
-- stays bounded by two chunks of jobs (one Redis stores, the next being
-- read) whatever the file's size.
--
-- All or nothing, for a file read twice: the first pass reads every line
-- and checks it as the enqueue would (JSON, every field, the payload dumped
-- against max_payload_bytes) and sends nothing; one bad line stops it with
-- "line N: ..." and nothing is enqueued. Only then the second pass sends
-- the jobs, M.CHUNK lines per push (one pipeline of push.lua calls per
-- chunk; with client middlewares, luakiq.client.push, chunk after chunk;
-- without, the next chunk is read while Redis stores one). What the first pass
-- cannot see (a middleware raising or making a job invalid, Redis failing)
-- stops the second at a chunk: the error then says how many jobs, of which
-- lines, were enqueued before it. stdin is spooled to a temporary file
-- first (so it can be read twice), never held in memory.
-- A JSON array (input whose first non-space byte is "[") is read whole, as
-- one document (lua-cjson has no streaming decoder): use JSON lines for big
-- inputs.
local core = require "luakiq.core"
local json = require "luakiq.json"
local errors = require "luakiq.lib.errors"
local client = require "luakiq.client"

local M = {}

-- Lines per push. Measured on 300,000 jobs of ~200 bytes: 2,000 peaks at
-- 16 MB of RSS (13.6 MB for one job) in 6.8 s; 10,000 at 33 MB in 7.4 s.
M.CHUNK = 2000
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
  -- pass 2: send, CHUNK lines at a time. Without client middlewares a
  -- chunk is decoded and checked while Redis stores the one before (one
  -- chunk in flight: its replies are read before the next is sent, so an
  -- error still names the lines of the chunk that failed).
  f:seek("set", 0)
  local conn = connect()
  local parts = not client.has_middlewares(cfg)
  local started, sent, chunk, first = core.mono(), 0, {}, 1
  local inflight -- {v, first, last}: a chunk sent, its replies unread
  local function failed(err, from, to)
    -- the same kind of error (exit code), with where the file stopped
    local kind, why = errors.describe(err)
    why = why:match("^[^\n]*")
    local msg = ("lines %d-%d: %s; %s"):format(from, to, why, from == 1 and "nothing enqueued before them" or
      ("%d jobs enqueued before them (lines 1-%d)"):format(sent, from - 1))
    local some = tonumber(why:match("%((%d+) of the %d+ jobs were stored%)$"))
    if some and some > 0 then msg = msg .. (", %d in all"):format(sent + some) end
    if kind == "runtime" or kind == "missing" then error(msg, 0) end
    errors[kind](msg)
  end
  local function done(count)
    sent = sent + count
    local dt = core.mono() - started
    show(("enqueued %s / %s jobs, %s jobs/s"):format(thousands(sent), thousands(total),
      thousands(dt > 0 and sent / dt or 0)), sent == total)
  end
  local function land()
    if not inflight then return end
    local ok, err = pcall(client.finish_push, conn, cfg, inflight[1])
    if not ok then failed(err, inflight[2], inflight[3]) end
    done(inflight[1].n)
    inflight = nil
  end
  local function flush(last)
    if #chunk == 0 then return end
    if parts then
      local ok, v = pcall(client.validate_push, cfg, worker_name, chunk)
      if ok then ok, v = pcall(client.build_push, conn, cfg, v) end
      land()
      if ok then ok, v = pcall(client.start_push, conn, cfg, v) end
      if not ok then failed(v, first, last) end
      inflight = { v, first, last }
    else
      local ok, err = pcall(client.push, conn, cfg, worker_name, chunk)
      if not ok then failed(err, first, last) end
      done(#chunk)
    end
    chunk = {}
  end
  n = 0
  for line in f:lines() do
    n = n + 1
    if filled(line) then
      chunk[#chunk + 1] = decode(line, n)
      if #chunk == M.CHUNK then flush(n) first = n + 1 end
    end
  end
  flush(n)
  land()
  return sent
end

return M
