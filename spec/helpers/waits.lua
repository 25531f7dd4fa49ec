-- Jobs that wait for a reply, made and moved on through the Redis scripts
-- the host calls (as spec/queue/await_spec.lua does), for the specs of the
-- reply entry points (spec/web/replies_spec.lua, spec/host/cli_spec.lua):
-- the host itself never serves the worker used here, so its waits change
-- only by what a spec does. A lease token of its own holds the shards.
--   local W = waits.new(conn, cfg, "Parked")
--   local w = W:wait("a", { key = "k", rule = "status", timeout = 60, heartbeat = 5 })
--   -> {token =, attempt =, prefix =}; W:fetch("a") -> the next fetch of a's shard
--   (reply calls flagged in .waits), W:ack(prefix) -> acks the last fetch.
local core = require "luakiq.core"
local client = require "luakiq.client"
local keys = require "luakiq.lib.keys"
local queue = require "luakiq.runner.queue"

local M = {}
M.TOKEN = "spec-waits-token"
M.SECRET = string.rep("5a", 32)

local W = {}
W.__index = W

-- The "waits" section of a fetch.lua reply r (after the jobs and "best"):
-- {[job number] = {kind, attempt, value}}.
function M.section(r)
  local out, i = {}, 7 + tonumber(r[6])
  while r[i] do
    if r[i] == "waits" then
      for k = 1, tonumber(r[i + 1]) do
        local b = i + 2 + 4 * (k - 1)
        out[tonumber(r[b])] = { kind = r[b + 1], attempt = tonumber(r[b + 2]), value = r[b + 3] }
      end
      break
    elseif r[i] == "best" then i = i + 2
    else i = i + 2 + 2 * tonumber(r[i + 1]) end
  end
  return out
end

function M.new(conn, cfg, worker)
  return setmetatable({ conn = conn, cfg = cfg, worker = cfg.by_name[worker], unacked = {} }, W)
end

function W:prefix(id)
  return keys.prefix(self.cfg.namespace, self.worker.queue_name, keys.shard(id, self.worker.shards_count))
end

-- fetch.lua on P (limit jobs, 0: acks only), acking the shard's previous
-- fetch: {batch, ids, waits = {[job number] = {kind, attempt, value}}}.
function W:fetch_prefix(P, limit, now)
  local cmd = queue.fetch_cmd(P, M.TOKEN, 30000, limit or 10, self.unacked[P], false, now or core.now())
  local r = self.conn:pipeline({ cmd })[1]
  assert(type(r) == "table" and not r.err and r[1] ~= "LEASE", "fetch: " .. tostring(type(r) == "table" and r.err or r[1]))
  local res = queue.parse_fetch(r, { prefix = P, worker = self.worker.name, shard = 0 })
  self.unacked[P] = r[2]
  local out = { batch = r[2], ids = {}, waits = M.section(r) }
  for i, j in ipairs(res.jobs) do out.ids[i] = j.id end
  return out
end

function W:fetch(id, now) return self:fetch_prefix(self:prefix(id), 10, now) end
function W:ack(id) return self:fetch_prefix(self:prefix(id), 0) end

-- Pushes id, fetches it, awaits it (opts: timeout, heartbeat, key, rule:
-- "status" for rickover's rule, as a worker without on_reply) and acks: id
-- waits. With a key, it is claimed as the host's await does. (Other jobs
-- of the shard due now are fetched with it, and done by the ack.)
function W:wait(id, o)
  o = o or {}
  client.push(self.conn, self.cfg, self.worker.name, { { id = id, payload = o.payload or "p" } })
  local P = self:prefix(id)
  local f = self:fetch_prefix(P, 100)
  local fetched = false
  for _, x in ipairs(f.ids) do fetched = fetched or x == id end
  assert(fetched, "fetched " .. table.concat(f.ids, ",") .. ", not " .. id)
  local now = core.now()
  local r = self.conn:script("await", P, M.TOKEN, 30000, now, f.batch, id, o.timeout or 60, o.heartbeat or "",
    o.key or "", o.rule or "", M.SECRET)
  if o.key then
    self.conn:script("waitkey", self.cfg.namespace .. ":{" .. self.worker.queue_name .. "}:", "claim", o.key, r[2], id,
      r[3], now)
  end
  self:fetch_prefix(P, 0)
  return { token = r[1], attempt = tonumber(r[2]), prefix = P }
end

-- Ends the wait of id whose reply came: the fetch hands it back as a reply
-- call (returned: its "waits" entry), its ack ends the wait.
function W:handle(id)
  local f = self:fetch(id)
  self:ack(id)
  return f.waits[1]
end

return M
