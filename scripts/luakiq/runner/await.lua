-- luakiq.runner.await: luakiq.await's side in a worker thread (its own VM;
-- docs/lua-api.md, "Jobs that wait for a reply"; the Redis side is
-- docs/redis.md, "Waits"). await(id, opts) inside a perform or on_reply
-- call writes the wait of one of the call's jobs before it returns
-- (await.lua on the shard, fenced by the shard's lease), claims its
-- correlation key (waitkey.lua on the queue's slot) and, for a worker with
-- concurrency, takes the job's units as a hold of its own (units_acquire.lua,
-- member "wait:" .. id, until the wait's deadline). When the call ends, the
-- ack or fail.lua decides (Redis): acked, the job waits; failed, the wait is
-- dropped (and the runner gives the hold back, M.release).
-- Who calls what: runner/call.lua sets M.current to the running call's
-- shard handler (one call per shard at a time: h.call_jobs, h.call_batch
-- are its jobs and their payloads by id, h.thread the thread's state)
-- whenever it runs the call's coroutine (with wait.current); the public
-- luakiq.await reaches M.await through luakiq.lib.wait's await field, set
-- here. Nothing here yields: each Redis call is a whole round trip on the
-- thread's connection.
-- (The bottom of the runner, with flow and queue: luakiq.runner.call requires it.)
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local errors = require "luakiq.lib.errors"
local json = require "luakiq.json"
local wait = require "luakiq.lib.wait"
local flow = require "luakiq.runner.flow"

local M = {}

-- The handler of the call running now, or nil between calls. M.await
-- sets its awaited (id -> {attempt =, deadline =} of the waits the call
-- made) and await_error (the first await error of the call: the call
-- fails with it even when perform caught it, as an await that raised must
-- leave no wait behind); runner/call.lua resets both per call.
M.current = nil

-- The queue's secret (waitkey.lua "secret": the first host's random one is
-- kept), per queue and VM: asked once.
local secrets = {}
local function secret(t, Q)
  local s = secrets[Q]
  if s then return s end
  local r = t.conn:pipeline({ { script = "waitkey", Q, "secret", core.token() .. core.token() } })[1]
  if type(r) ~= "string" then error("waitkey.lua secret failed: " .. tostring(type(r) == "table" and r.err or r), 0) end
  secrets[Q] = r
  return r
end

-- Whether the job of worker w keeps its units (concurrency) and its place
-- in the throttle's running list (throttle) while it waits.
function M.holds_units(w)
  return (w.concurrency ~= nil or w.throttle ~= nil) and not w.await_releases_units
end

-- The units hold of waiting id (NS:{QUEUE}:running and :units, member
-- "wait:" .. id: ids are unique in a queue, whatever its shards_count):
-- cost units until the wait's deadline and lease_ttl more (the timeout call
-- gives it back before; a hold a host never gave back lapses then). Taken
-- whatever the units in use (the job ran with them already). With throttle
-- the hold is registered too (NS:{QUEUE}:calls, as a call of that one job,
-- since now; version "*": whatever the running set), so every throttle's
-- ctx.running has the waiting job for as long as it holds its units.
local function hold_cmd(t, w, id, cost, deadline, payloads)
  local ns, q = t.cfg.namespace, w.queue_name
  local ttl = math.max(1, math.floor((deadline - core.now() + t.cfg.lease_ttl) * 1000))
  local cmd = { script = "units_acquire", numkeys = w.throttle and 4 or 2, keys.running(ns, q), keys.units(ns, q) }
  if w.throttle then cmd[#cmd + 1], cmd[#cmd + 2] = keys.calls(ns, q), keys.calls_version(ns, q) end
  for _, v in ipairs { "wait:" .. id, string.format("%.17g", w.concurrency and math.min(cost, w.concurrency) or cost),
                       "", ttl } do cmd[#cmd + 1] = v end
  if w.throttle then
    cmd[#cmd + 1] = "*"
    cmd[#cmd + 1] = json.encode { host = t.host, since = core.now(),
                                  jobs = { { id, cost, flow.label_of(w, id, payloads) or json.null } } }
  end
  return cmd
end

-- Gives back the units hold of id (worker w) with the thread's next Redis
-- call (luakiq.runner.flow's releases): its wait ended, or the call that
-- made it failed.
function M.release(t, w, id)
  if not M.holds_units(w) then return end
  local list = t.releases[w.queue_name]
  if not list then list = {} t.releases[w.queue_name] = list end
  list[#list + 1] = "wait:" .. id
end

-- The holds of the waits h's call made that will not be (the call failed).
function M.release_awaited(h)
  if not h.awaited then return end
  for id in pairs(h.awaited) do M.release(h.thread, h.def, id) end
end

-- Whether the key entry holding `key` (attempt a, id other) names a wait
-- still going on: that id waits on that attempt (job.lua: "waiting"), or
-- is in a call with a pending wait (its await claimed the key; the ack has
-- not made it wait yet). Also returns the entry's value as it is now (for
-- the compare-and-set), nil when it is gone.
local function still_held(t, w, Q, key, a, other)
  local P2 = keys.prefix(t.cfg.namespace, w.queue_name, keys.shard(other, w.shards_count))
  local r = t.conn:pipeline({ { script = "job", P2, other }, { "HEXISTS", P2 .. "waits:new", other },
                              { "HGET", Q .. "waitkeys", key } })
  for i = 1, 3 do
    if type(r[i]) == "table" and r[i].err then error(errors.redis_text(r[i].err), 0) end
  end
  local state = r[1][1]
  local held = (state == "waiting" and r[1][2] == a) or (state == "in_flight" and r[2] == 1)
  return held, r[3] ~= nil and r[3] or nil
end

-- Claims key for the wait of id on attempt until deadline (waitkey.lua
-- claim): a key another wait holds is taken over only when that wait is
-- over (still_held), by a compare-and-set on the value seen. Returns nil,
-- or the message of the duplicate.
local function claim(t, w, Q, key, attempt, id, deadline, now)
  local expected
  for _ = 1, 5 do
    local cmd = { script = "waitkey", Q, "claim", key, attempt, id, deadline, string.format("%.17g", now) }
    if expected then cmd[#cmd + 1] = expected end
    local r = t.conn:pipeline({ cmd })[1]
    if r == "OK" then return nil end
    local text = type(r) == "table" and r.err or tostring(r)
    local code, rest = errors.redis_code(text)
    if code ~= "TAKEN" then error("waitkey.lua claim failed: " .. errors.redis_text(text), 0) end
    local a, other = rest:match("^(%d+) (.-) luakiq waitkey: ")
    local held, value = still_held(t, w, Q, key, a, other)
    if held then
      return ("duplicate key %q: job %s waits with it (attempt %s)"):format(key, other, a)
    end
    expected = value -- (nil: the entry is gone, the claim takes it)
  end
  return ("duplicate key %q: other waits kept claiming it"):format(key)
end

-- The wait of id in h's call (M.await's checked arguments): await.lua,
-- the units hold, the key's claim. Returns the token and the attempt;
-- raises the one line of what went wrong (a lost lease stops the call
-- through core.fence, whatever catches this).
local function write(h, id, timeout, hb, key)
  local t, w = h.thread, h.def
  local Q = keys.queue_prefix(t.cfg.namespace, w.queue_name)
  local now = core.now()
  local r = t.conn:pipeline({ { script = "await", h.prefix, t.token, t.lease_ms, string.format("%.17g", now), h.batch or "",
    id, string.format("%.17g", timeout), hb and string.format("%.17g", hb) or "", key or "",
    w.on_reply and "" or "status", secret(t, Q) } })[1]
  if type(r) ~= "table" or r.err then
    local text = type(r) == "table" and r.err or tostring(r)
    if errors.redis_code(text) == "FENCED" then core.fence() end -- stops the call as a lost lease does
    error(errors.redis_text(text), 0)
  end
  local token, attempt, deadline = r[1], r[2], r[3]
  h.awaited = h.awaited or {}
  h.awaited[id] = { attempt = tonumber(attempt), deadline = tonumber(deadline) }
  if M.holds_units(w) then
    local pl = h.call_batch[id]
    local hr = t.conn:pipeline({ hold_cmd(t, w, id, flow.cost_of(w, id, pl), tonumber(deadline), pl) })[1]
    if type(hr) == "table" and hr.err then error("units_acquire.lua failed: " .. errors.redis_text(hr.err), 0) end
  end
  if key then
    local dup = claim(t, w, Q, key, attempt, id, deadline, now)
    if dup then error(dup, 0) end
  end
  return token, attempt
end

local OPTS = "timeout, key, heartbeat"

-- Raises msg at the caller of luakiq.await (level: the public function's
-- caller), after marking the call broken (h.await_error).
local function refuse(h, msg, level)
  msg = "luakiq.await: " .. msg
  h.await_error = h.await_error or msg
  error(msg, level + 1)
end

-- luakiq.await(id [, opts]) in the running call (M.current; level:
-- the error level of luakiq.await's caller seen from here). Returns
-- {token =, url = (nil without public_url), attempt =}.
function M.await(id, opts, level)
  level = (level or 1) + 1
  local h = M.current
  if not h or not wait.inside() then
    error("luakiq.await: only inside perform or on_reply (in the call itself, not in a coroutine of its own)", level)
  end
  local w, batch = h.def, h.call_batch
  if type(id) == "number" and id == math.floor(id) then id = string.format("%.0f", id) end
  if type(id) ~= "string" or batch[id] == nil then
    local ids = {}
    for i, j in ipairs(h.call_jobs) do ids[i] = j.id end
    refuse(h, ("%s is not a job of this call (its ids: %s)"):format(
      type(id) == "string" and ("'" .. id .. "'") or tostring(id), table.concat(ids, ", ")), level)
  end
  local timeout, key, hb = w.reply_timeout, nil, nil
  if opts ~= nil then
    if type(opts) ~= "table" then refuse(h, "opts must be a table (" .. OPTS .. "), got " .. type(opts), level) end
    for k, v in pairs(opts) do
      if k == "timeout" then
        if type(v) ~= "number" or not (v > 0) or v == math.huge then
          refuse(h, "timeout must be a number of seconds > 0, got " .. tostring(v), level)
        end
        timeout = v
      elseif k == "heartbeat" then
        if type(v) ~= "number" or not (v >= 0) or v == math.huge then
          refuse(h, "heartbeat must be a number of seconds >= 0 (0: none), got " .. tostring(v), level)
        end
        hb = v > 0 and v or nil
      elseif k == "key" then
        if type(v) ~= "string" or v == "" or #v > 1024 then
          refuse(h, "key must be a string of 1 to 1024 bytes, got " .. (type(v) == "string" and (#v .. " bytes") or type(v)), level)
        end
        key = v
      else
        refuse(h, ("unknown option %s (%s)"):format(type(k) == "string" and ("'" .. k .. "'") or tostring(k), OPTS), level)
      end
    end
  end
  -- the fence: no write past the lease's bound (as luakiq.redis)
  core.lease_check()
  local ok, token, attempt = pcall(write, h, id, timeout, hb, key)
  if not ok then refuse(h, tostring(token), level) end
  local base = h.thread.cfg.public_url
  return { token = token, attempt = tonumber(attempt), url = base and (base .. "/api/v1/replies/" .. token) or nil }
end

wait.await = M.await
return M
