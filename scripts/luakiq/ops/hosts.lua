-- luakiq.ops.hosts: the running hosts, like Sidekiq's Busy page
-- (docs/operations.md, "Hosts").
--
-- Each `luakiq run` beats every BEAT seconds from its main thread (a timer
-- of the host's event loop: core.host_run's tick): hosts_beat.lua records
-- its JSON (hostname, pid, version, started, web, and per thread the shards
-- it serves and the calls it runs) and the time by Redis's clock. A host
-- silent for TIMEOUT seconds (killed, frozen, cut off) is no longer listed and
-- is dropped at the next beat of any host; a host that stops says so at once.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"

local M = {}

M.BEAT, M.TIMEOUT = 2, 10 -- seconds

-- This host's JSON. groups: the splitter's groups ({{worker=, shard=}...}
-- per thread); started: when it started (core.now()); web: its address or nil.
-- elastic: the threads' shards are the ones each holds now (its own account,
-- core.thread_stats' held), and the JSON says elastic = true (the elastic
-- threads of every host count only such hosts as their peers).
function M.info(groups, started, web, elastic)
  local stats = core.thread_stats()
  local threads = json.array()
  for i, g in ipairs(groups) do
    local shards = json.array()
    if elastic then
      local ok, held = pcall(json.decode, stats[i] and stats[i].held or "[]")
      for _, h in ipairs(ok and type(held) == "table" and held or {}) do
        shards[#shards + 1] = { worker = h.worker, shard = h.shard }
      end
    else
      for j, h in ipairs(g) do shards[j] = { worker = h.worker, shard = h.shard } end
    end
    local calls = json.array()
    for _, c in ipairs(stats[i] and stats[i].calls or {}) do
      calls[#calls + 1] = { worker = c.worker, shard = c.shard, running = math.floor(c.age * 10 + 0.5) / 10,
                            timeout = c.timeout, waiting = c.parked }
    end
    threads[i] = { thread = "t" .. (i - 1), shards = shards, calls = calls, jobs = stats[i] and stats[i].jobs or 0 }
  end
  return { hostname = core.hostname(), pid = core.getpid(), version = require("luakiq").version,
           started = started, web = web, threads = threads, elastic = elastic or nil }
end

-- Runs a two-key script (conn:script takes one key); raises its error.
local function script2(conn, name, ...)
  local r = conn:pipeline { { script = name, numkeys = 2, ... } }[1]
  if type(r) == "table" and r.err then error(name .. ": " .. r.err, 0) end
  return r
end

function M.beat(conn, ns, token, info)
  local k1, k2 = keys.hosts(ns)
  return script2(conn, "hosts_beat", k1, k2, token, json.encode(info), M.TIMEOUT * 1000)
end

function M.leave(conn, ns, token)
  local k1, k2 = keys.hosts(ns)
  conn:call("HDEL", keys.paused_acks(ns), token)
  return script2(conn, "hosts_beat", k1, k2, token, "", M.TIMEOUT * 1000)
end

-- Pause (docs/operations.md, "Pause"), on the main thread of `luakiq run`:
-- reads the paused queues (NS:paused), hands them to this host's worker
-- threads (core.set_paused: each checks them before every call), and only
-- then acknowledges the generation it read (NS:paused:acks, token ->
-- generation), so that `luakiq pause` knows the pause holds here. Called
-- before the threads start, on each pause message (core.host_run's pause)
-- and at every beat. Returns the generation.
function M.sync_pause(conn, ns, token)
  local flat = conn:call("HGETALL", keys.paused(ns))
  local names, gen = {}, 0
  for i = 1, #flat, 2 do
    if flat[i] == "" then gen = tonumber(flat[i + 1]) or 0 else names[#names + 1] = flat[i] end
  end
  table.sort(names)
  core.set_paused(table.concat(names, "\n"))
  conn:call("HSET", keys.paused_acks(ns), token, tostring(gen))
  return gen
end

-- Waits up to `timeout` seconds until every host in `live` (tokens) has
-- acknowledged pause generation gen (sync_pause). Returns the tokens that
-- did not, sorted (empty: all did). Drops the acknowledgements of hosts no
-- longer listed.
function M.await_pause(conn, ns, gen, live, timeout)
  local deadline, key = core.mono() + timeout, keys.paused_acks(ns)
  local missing
  repeat
    local flat, acks = conn:call("HGETALL", key), {}
    for i = 1, #flat, 2 do acks[flat[i]] = tonumber(flat[i + 1]) end
    missing = {}
    for _, token in ipairs(live) do
      if (acks[token] or -1) < gen then missing[#missing + 1] = token end
      acks[token] = nil
    end
    if next(acks) then -- (hosts gone: killed, or dropped from the list)
      local gone = { "HDEL", key }
      for token in pairs(acks) do gone[#gone + 1] = token end
      conn:call(unpack(gone))
    end
    if #missing == 0 then return missing end
    core.sleep(0.01)
  until core.mono() >= deadline
  table.sort(missing)
  return missing
end

-- The hosts that beat within TIMEOUT: their JSON plus token and seen (seconds
-- since the last beat), by hostname, then pid.
function M.list(conn, ns)
  local k1, k2 = keys.hosts(ns)
  local flat = script2(conn, "hosts_read", k1, k2, M.TIMEOUT * 1000)
  local out = json.array()
  for i = 1, #flat, 3 do
    local ok, v = pcall(json.decode, flat[i + 1])
    if ok and type(v) == "table" then
      v.token, v.seen = flat[i], tonumber(flat[i + 2]) / 1000
      -- (decoding loses which empty tables were arrays)
      v.threads = json.array(type(v.threads) == "table" and v.threads or {})
      for _, t in ipairs(v.threads) do
        t.shards, t.calls = json.array(t.shards or {}), json.array(t.calls or {})
      end
      out[#out + 1] = v
    end
  end
  table.sort(out, function(a, b)
    if a.hostname ~= b.hostname then return tostring(a.hostname) < tostring(b.hostname) end
    return (tonumber(a.pid) or 0) < (tonumber(b.pid) or 0)
  end)
  return out
end

return M
