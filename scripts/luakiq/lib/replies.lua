-- luakiq.lib.replies: every way a reply reaches a job that waits for one
-- (DESIGN section 9; docs/operations.md, "Replies"), for the HTTP routes
-- (luakiq.web.api) and `luakiq reply` (luakiq.ops.cli) alike, so that both
-- answer the same: by token, its heartbeat, by correlation key, and
-- rickover's form by id and attempt. Each ends in reply.lua (one atomic
-- script, docs/redis.md, "Waits"), which decides; this module only routes
-- the call to the id's shard and reads the answer's code word.
--
-- Every function returns an outcome and a message: "accepted",
-- "duplicate", "ok" (a heartbeat), or a code word of reply.lua or
-- waitkey.lua: CONFLICT, STALE, UNKNOWN, BADJSON, BADREPLY, TOOBIG, and
-- RESHARD when a reshard kept the shard frozen longer than the retries
-- here. M.answer maps an outcome to an HTTP status and JSON body. Redis
-- being away, or any other error, raises.
local core = require "luakiq.core"
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"

local M = {}

M.MAX_BODY = 262144      -- reply.lua's limit (TOOBIG): checked here first, before Redis
M.MAX_KEY = 1024         -- waitkey.lua's
local RESHARD_TRIES = 10 -- a frozen shard (RESHARD) is asked again every 0.1 s, 1 s in all
local RESHARD_PAUSE = 0.1

-- The outcomes that are answers (anything else raises).
local ANSWERS = { CONFLICT = true, STALE = true, UNKNOWN = true, BADJSON = true, BADREPLY = true, TOOBIG = true }

-- Each queue's shards_count as the registry (NS:queues) had it when this VM
-- last looked; read again when a shard says RESHARDED (a reshard since:
-- every shard of the old count keeps saying so, reshard_shard.lua).
local counts = {}

local function shards_count(conn, ns, queue, fresh)
  local k = ns .. "\0" .. queue
  if fresh or not counts[k] then counts[k] = tonumber(conn:call("HGET", keys.registry(ns), queue)) end
  return counts[k]
end

-- reply.lua's message without its "CODE luakiq reply: " head.
local function said(rest) return (rest:gsub("^luakiq %a+: ", "")) end

-- reply.lua for id of queue: op "reply" or "heartbeat", refs the "how"
-- words (token T | id ID ATTEMPT | key KEY ID ATTEMPT), body (nil for a
-- heartbeat). Routed as a push is (crc32(id) % the registry's count); a
-- shard resharded since is asked again with the registry's new count, a
-- frozen one again after a pause.
local function call(conn, cfg, queue, id, op, refs, body)
  local fresh, frozen = false, 0
  while true do
    local n = shards_count(conn, cfg.namespace, queue, fresh)
    if not n then return "UNKNOWN", "no queue '" .. queue .. "'" end
    local args = { op, core.now(), runtime.wake_arg(conn, cfg), tostring(n) }
    for _, v in ipairs(refs) do args[#args + 1] = v end
    args[#args + 1] = body
    local ok, r = pcall(conn.script, conn, "reply", keys.prefix(cfg.namespace, queue, keys.shard(id, n)), unpack(args))
    if ok then return r, r end
    local code, rest = errors.redis_code(r)
    if code == "RESHARDED" and not fresh then
      fresh = true
    elseif code == "RESHARD" and frozen < RESHARD_TRIES then
      frozen = frozen + 1
      core.sleep(RESHARD_PAUSE)
    elseif code == "RESHARD" then
      return "RESHARD", "the queue is being resharded: try again in a few seconds"
    elseif ANSWERS[code] then
      return code, said(rest)
    else
      error(r, 0)
    end
  end
end

-- b64url text (no padding) -> bytes, or nil.
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local B64_VAL = {}
for i = 1, 64 do B64_VAL[B64:byte(i)] = i - 1 end
local function b64url_decode(t)
  if #t % 4 == 1 then return nil end
  local out = {}
  for i = 1, #t, 4 do
    local v, digits = 0, 0
    for j = i, math.min(i + 3, #t) do
      local d = B64_VAL[t:byte(j)]
      if not d then return nil end
      v, digits = v * 64 + d, digits + 1
    end
    v = v * 64 ^ (4 - digits)
    for j = 1, digits - 1 do out[#out + 1] = string.char(math.floor(v / 2 ^ (24 - 8 * j)) % 256) end
  end
  return table.concat(out)
end

-- A reply token's queue and id (scripts/redis/lib/tokens.lua: "1." ..
-- b64url(queue) .. "." .. b64url(id) .. "." .. attempt .. "." .. mac), or
-- nil when it is not of that form. (Whether it is genuine only reply.lua
-- can tell: the mac is made with the queue's secret, kept in Redis.)
function M.split_token(token)
  if type(token) ~= "string" then return nil end
  local q, i = token:match("^1%.([%w_-]*)%.([%w_-]+)%.%d+%.%x+$")
  local queue, id = q and b64url_decode(q), i and b64url_decode(i)
  if not queue or not id or queue == "" or id == "" then return nil end
  return queue, id
end

-- The worker named name (an unknown one is a notfound error: HTTP 404, exit 2).
function M.worker_of(cfg, name)
  local w = cfg.by_name[name]
  if not w then errors.notfound("unknown worker '" .. tostring(name) .. "'") end
  return w
end

-- The queue, id and a refusal of token (nil, nil, outcome, message when
-- the token cannot be one, or is not of worker's queue when a worker is named).
local function read_token(cfg, token, worker)
  local w = worker and M.worker_of(cfg, worker)
  local queue, id = M.split_token(token)
  if not queue then return nil, nil, "UNKNOWN", "no such token" end
  if w and w.queue_name ~= queue then return nil, nil, "UNKNOWN", "the token is not one of worker " .. worker .. "'s" end
  return queue, id
end

local function too_big(body)
  if #body > M.MAX_BODY then
    return "TOOBIG", "the reply is " .. #body .. " bytes, at most " .. M.MAX_BODY
  end
end

-- A reply by token: body is the reply's JSON, stored as these bytes (an
-- identical repeat is the same bytes). worker: nil (HTTP: the token says
-- which queue), or the worker the caller named (`luakiq reply`), which
-- must be the token's.
function M.by_token(conn, cfg, token, body, worker)
  local big, why = too_big(body)
  if big then return big, why end
  local queue, id, code, msg = read_token(cfg, token, worker)
  if not queue then return code, msg end
  return call(conn, cfg, queue, id, "reply", { "token", token }, body)
end

-- A heartbeat by token: the wait's heartbeat deadline moves to now + its
-- interval (a wait without one: nothing). "ok", STALE or UNKNOWN.
function M.heartbeat(conn, cfg, token, worker)
  local queue, id, code, msg = read_token(cfg, token, worker)
  if not queue then return code, msg end
  return call(conn, cfg, queue, id, "heartbeat", { "token", token })
end

-- A reply by correlation key (the key the job's await named): the key's
-- wait is looked up in the queue's slot (waitkey.lua lookup), then
-- reply.lua re-checks on the id's shard that its wait still carries the key
-- on that attempt (STALE when it moved on meanwhile, never another job's
-- wait). A STALE answer also drops the key's entry when it still names
-- that wait (waitkey.lua drop: cleanup, not needed for correctness).
function M.by_key(conn, cfg, worker, key, body)
  local w = M.worker_of(cfg, worker)
  if type(key) ~= "string" or key == "" or #key > M.MAX_KEY then
    return "BADREPLY", "key must be a string of 1 to " .. M.MAX_KEY .. " bytes"
  end
  local big, why = too_big(body)
  if big then return big, why end
  local Q = keys.queue_prefix(cfg.namespace, w.queue_name)
  local ok, r = pcall(conn.script, conn, "waitkey", Q, "lookup", key)
  if not ok then
    local code, rest = errors.redis_code(r)
    if code == "UNKNOWN" then return code, said(rest) end
    error(r, 0)
  end
  local id, attempt = r[1], r[2]
  local outcome, msg = call(conn, cfg, w.queue_name, id, "reply", { "key", key, id, attempt }, body)
  if outcome == "STALE" then pcall(conn.script, conn, "waitkey", Q, "drop", key, attempt, id) end
  return outcome, msg
end

-- rickover's form: the downstream names the job by id and quotes its
-- attempt in the body, {"status": "succeeded"|"failed", "attempt": N,
-- "retryable": bool, "error": "..."}; the body is stored as given.
function M.by_id(conn, cfg, worker, id, body)
  local w = M.worker_of(cfg, worker)
  local big, why = too_big(body)
  if big then return big, why end
  local ok, v = pcall(json.decode, body)
  if not ok then return "BADJSON", "the body is not JSON" end
  local attempt = type(v) == "table" and tonumber(v.attempt)
  if not attempt or attempt < 1 or attempt ~= math.floor(attempt) or attempt >= 2 ^ 53 then
    return "BADREPLY", 'the body must carry the job\'s "attempt" (a positive integer)'
  end
  return call(conn, cfg, w.queue_name, id, "reply", { "id", id, string.format("%.0f", attempt) }, body)
end

-- HTTP status and JSON answer of each outcome (DESIGN section 9).
local STATUS = { CONFLICT = 409, STALE = 410, UNKNOWN = 404, BADJSON = 400, BADREPLY = 400, TOOBIG = 413,
                 RESHARD = 503 }

function M.answer(outcome, msg)
  if outcome == "accepted" then return 200, { accepted = true } end
  if outcome == "duplicate" then return 200, { accepted = true, duplicate = true } end
  if outcome == "ok" then return 200, { ok = true } end
  if outcome == "STALE" then return 410, { error = "stale" } end
  return STATUS[outcome] or 500, { error = outcome:lower() .. ": " .. tostring(msg) }
end

return M
